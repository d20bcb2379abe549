//! Streamed HTTP answers (a turn's events as they happen) through routers that build
//! `Response<Full<Bytes>>`: the route answers [`streamed`], whose receiver rides in the
//! response's extensions, and the connection's service swaps it in as the body with
//! [`finish`]. Everything else stays a `Full` body.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http_body_util::{Either, Full};
use hyper::body::{Body, Bytes, Frame};
use hyper::Response;
use tokio::sync::mpsc;

/// A body fed from a channel; it ends when every sender is gone.
pub struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// The receiver, carried in a response's extensions (which need `Clone`).
#[derive(Clone)]
struct Streamed(Arc<Mutex<Option<mpsc::Receiver<Bytes>>>>);

pub type AnyBody = Either<Full<Bytes>, ChannelBody>;

/// A `status` answer whose body is whatever `rx` yields.
pub fn streamed(
    status: u16,
    content_type: &str,
    rx: mpsc::Receiver<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("cache-control", "no-store")
        .body(Full::new(Bytes::new()))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())));
    r.extensions_mut()
        .insert(Streamed(Arc::new(Mutex::new(Some(rx)))));
    r
}

/// The response as it goes out: a streamed one gets its channel as the body.
pub fn finish(mut r: Response<Full<Bytes>>) -> Response<AnyBody> {
    let rx = r
        .extensions_mut()
        .remove::<Streamed>()
        .and_then(|s| s.0.lock().unwrap_or_else(|p| p.into_inner()).take());
    match rx {
        Some(rx) => r.map(|_| Either::Right(ChannelBody { rx })),
        None => r.map(Either::Left),
    }
}

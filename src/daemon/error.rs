//! Every refusal the daemon answers: [`ApiError`], the answer `{"error": message,
//! "code": code}` with its status, from one of the API's codes (`wire::Code`, whose
//! table gives each its status and audit outcome). The host's codes
//! (`protocol::HostCode`) become daemon codes in one place, [`ApiError::from_host`].

use std::path::Path;

use serde::Serialize;

use crate::protocol::{HostCode, HostErrorBody};
use crate::wire::{Code, Outcome};

/// A write of `path` that failed for want of room (a full disk or quota), in a sentence
/// naming the folder to free and what to do then (`then`: `start relay again`); `None`
/// for any other failure. `relay serve`'s start and a launch word a full disk alike.
pub fn disk_full(path: &Path, e: &std::io::Error, then: &str) -> Option<String> {
    let full = matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || matches!(
            e.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        );
    full.then(|| {
        let dir = path.parent().unwrap_or(path).display();
        format!(
            "cannot write {}: {}: the disk holding {dir} is full; free some space there \
             (`df -h {dir}` shows what is left) and {then}",
            path.display(),
            crate::token::plain_io(e)
        )
    })
}

/// A refused request: its status, and its body `{"code": code, "error": message}`,
/// which serializes as `wire::ErrorBody` (the field names are defined there once).
#[derive(Clone, Debug)]
pub struct ApiError {
    status: u16,
    pub code: Code,
    pub message: String,
}

impl Serialize for ApiError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        crate::wire::ErrorBody {
            code: self.code,
            message: self.message.clone(),
        }
        .serialize(s)
    }
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            status: code.status(),
            code,
            message: message.into(),
        }
    }

    /// `400 sandbox_unavailable`: a sandboxed launch cannot be set up safely.
    pub fn sandbox(message: impl Into<String>) -> Self {
        Self::new(Code::SandboxUnavailable, message)
    }

    /// The host's refusal (`status`, its body) as the daemon's: the one mapping from
    /// host codes to daemon codes, for launches and passed-through calls alike. The
    /// host's `invalid_spec` is the caller's request the host could not run as asked:
    /// `400 invalid_request`. A code with no daemon counterpart, or a body that is not
    /// a host error, is `host_error` with the host's status (at least 400).
    pub fn from_host(status: u16, body: &[u8]) -> Self {
        let parsed: Option<HostErrorBody> = serde_json::from_slice(body).ok();
        let Some(h) = parsed else {
            return ApiError {
                status: host_status(status),
                code: Code::HostError,
                message: format!("the session host answered {status}"),
            };
        };
        let code = match h.error {
            HostCode::InvalidSpec => Code::InvalidRequest,
            HostCode::NotFound => Code::NotFound,
            HostCode::SessionExists => Code::SessionExists,
            HostCode::SessionExited => Code::SessionExited,
            HostCode::IdentityRefused => Code::IdentityRefused,
            HostCode::SpawnFailed => Code::SpawnFailed,
            HostCode::Internal => Code::Internal,
            HostCode::MethodNotAllowed
            | HostCode::PayloadTooLarge
            | HostCode::RequestTimeout
            | HostCode::Unknown => {
                return ApiError {
                    status: host_status(status),
                    code: Code::HostError,
                    message: h.message,
                }
            }
        };
        Self::new(code, h.message)
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    pub fn outcome(&self) -> Outcome {
        self.code.outcome()
    }
}

/// A host refusal's status as the daemon answers it: a status that is not an error
/// (the host answered something unexpected) is `502 Bad Gateway`.
fn host_status(status: u16) -> u16 {
    if status >= 400 {
        status
    } else {
        502
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_said_naming_the_file_the_folder_and_the_next_step() {
        let p = Path::new("/cfg/ledger/t-1.launching");
        let e = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert_eq!(
            disk_full(p, &e, "start the session again").unwrap(),
            "cannot write /cfg/ledger/t-1.launching: No space left on device (os error 28): \
             the disk holding /cfg/ledger is full; free some space there (`df -h \
             /cfg/ledger` shows what is left) and start the session again"
        );
        // Wrapped with a path, the kind still tells.
        let wrapped = std::io::Error::new(e.kind(), format!("/cfg/audit.log: {e}"));
        assert!(disk_full(p, &wrapped, "x").is_some());
        let denied = std::io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(disk_full(p, &denied, "x"), None);
    }

    /// An `ApiError` writes the error body's bytes (`wire::ErrorBody`, whose own test
    /// pins them).
    #[test]
    fn an_api_error_writes_the_error_bodys_bytes() {
        let e = crate::wire::ErrorBody {
            code: Code::UnknownProject,
            message: "no project \"x\"".into(),
        };
        let api = ApiError::new(Code::UnknownProject, "no project \"x\"");
        assert_eq!(
            serde_json::to_string(&api).unwrap(),
            serde_json::to_string(&e).unwrap()
        );
        assert_eq!(
            serde_json::to_value(&api).unwrap(),
            serde_json::json!({"error": "no project \"x\"", "code": Code::UnknownProject.as_str()})
        );
        assert_eq!(api.status(), 404);
    }

    #[test]
    fn every_host_code_maps_to_one_daemon_code() {
        let body = |c: HostCode| {
            serde_json::to_vec(&HostErrorBody {
                error: c,
                message: "m".into(),
            })
            .unwrap()
        };
        let cases = [
            (HostCode::InvalidSpec, Code::InvalidRequest, 400),
            (HostCode::NotFound, Code::NotFound, 404),
            (HostCode::MethodNotAllowed, Code::HostError, 405),
            (HostCode::PayloadTooLarge, Code::HostError, 413),
            (HostCode::RequestTimeout, Code::HostError, 408),
            (HostCode::SessionExists, Code::SessionExists, 409),
            (HostCode::SessionExited, Code::SessionExited, 409),
            (HostCode::IdentityRefused, Code::IdentityRefused, 502),
            (HostCode::SpawnFailed, Code::SpawnFailed, 500),
            (HostCode::Internal, Code::Internal, 500),
        ];
        assert_eq!(cases.len(), HostCode::ALL.len());
        for (host, daemon, status) in cases {
            let e = ApiError::from_host(host.status(), &body(host));
            assert_eq!((e.code, e.status()), (daemon, status), "{host}");
            assert_eq!(e.message, "m");
        }
        let e = ApiError::from_host(418, br#"{"error":"teapot","message":"short"}"#);
        assert_eq!(
            (e.code, e.status(), e.message.as_str()),
            (Code::HostError, 418, "short")
        );
        let e = ApiError::from_host(200, b"not json");
        assert_eq!((e.code, e.status()), (Code::HostError, 502));
    }
}

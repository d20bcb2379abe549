//! One HTTP request over a unix socket from a process of its own, through relay's
//! client (`relay::http::client`): for the tests that call as another uid, or as a
//! process that is not the daemon. `relay-e2e-http SOCKET METHOD PATH [NAME:VALUE…]`,
//! the body on stdin; prints the answer as a server wrote it (head, then body).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use relay::http::client::{Addr, Blocking};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [sock, method, path, headers @ ..] = args.as_slice() else {
        eprintln!("usage: relay-e2e-http SOCKET METHOD PATH [NAME:VALUE…] < body");
        return ExitCode::from(2);
    };
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|h| h.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let mut body = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut body) {
        eprintln!("relay-e2e-http: stdin: {e}");
        return ExitCode::FAILURE;
    }
    let answer = Blocking::new(Addr::Unix(PathBuf::from(sock)))
        .map_err(|e| e.to_string())
        .and_then(|c| {
            c.call(method, path, &headers, body)
                .map_err(|e| e.to_string())
        });
    match answer {
        Ok(a) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&relay_e2e::written(&a));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("relay-e2e-http: {method} {path}: {e}");
            ExitCode::FAILURE
        }
    }
}

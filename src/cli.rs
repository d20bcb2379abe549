//! The `relay` command line. For now only `relay version`; the daemon and its verbs
//! arrive with the daemon issue.

use std::process::ExitCode;

pub fn run() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("version") | Some("--version") => {
            println!("relay {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("error: unknown command {other:?} (this build knows only `relay version`)");
            ExitCode::from(1)
        }
        None => {
            eprintln!("usage: relay version");
            ExitCode::from(1)
        }
    }
}

//! `relay serve`: the daemon in the foreground ([`crate::daemon::serve`]), on a runtime
//! of two workers, told which login service started it, if one did.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::cli::{fail, unit};

pub fn run(config: PathBuf, log_level: Option<String>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("runtime: {e}")),
    };
    // Who started it, for its lock file and its status (docs/cli.md#one-relay-per-config-dir).
    let service = unit::started_by().map(|name| crate::daemon::serve::Service {
        name: name.into(),
        stop: unit::stop_command(),
    });
    match rt.block_on(crate::daemon::serve(config, log_level, service)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

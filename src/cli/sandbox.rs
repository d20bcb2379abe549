//! `relay sandbox <template>`: start a sandboxed terminal of that template for the
//! project holding the current directory, and attach this terminal to it.

use std::path::Path;
use std::process::ExitCode;

pub fn run(_config: &Path, _template: &str, _args: &[String], _json: bool) -> ExitCode {
    eprintln!("error: relay sandbox is not available yet");
    ExitCode::from(1)
}

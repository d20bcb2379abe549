//! The command line: its help and completions, its usage errors, the config dir it
//! picks, `relay sandbox explain`, and `relay service` with `relay doctor`'s helpers check.

mod audit_follow;
mod config_dir;
mod conventions;
mod doctor_advice;
mod explain;
mod first_run;
mod help;
mod hung;
mod messages;
mod prompt_input;
pub(crate) mod service;
mod settings_errors;
mod usage;

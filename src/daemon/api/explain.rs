//! `GET /api/sandbox/explain`: the sandbox a terminal of a template would get in a
//! folder, for this platform's backend or the other one. It is the launch's own
//! [`plan`]: what it shows is what a launch there gets, and what a launch there is
//! refused, it refuses (docs/routes.md, docs/cli.md `relay sandbox explain`). Nothing
//! is made, launched or audited, and the token file is not read.

use crate::daemon::error::ApiError;
use crate::daemon::plan::authorize::LaunchInput;
use crate::daemon::plan::facts::Facts;
use crate::daemon::plan::{plan, sandbox::env_names};
use crate::daemon::Daemon;
use crate::protocol::{Backend, SessionKind};
use crate::sandbox::explain::{self, Explanation};
use crate::sandbox::resolve::expand_home;
use crate::sandbox::HostPaths;
use crate::wire::Code;

/// The sandbox a terminal of `template` started in `directory` (default: the home
/// folder) would get, under `backend` (`bwrap`, `seatbelt`; default: the settings').
pub fn template(
    d: &Daemon,
    template: &str,
    directory: Option<&str>,
    backend: Option<&str>,
) -> Result<Explanation, ApiError> {
    let backend_asked = backend.filter(|b| !b.is_empty()).map(|name| {
        Backend::from_name(name).ok_or_else(|| {
            let why = format!("backend {name:?}: expected bwrap or seatbelt");
            ApiError::new(Code::InvalidRequest, why)
        })
    });
    let backend_asked = backend_asked.transpose()?;
    let s = d
        .load_settings()
        .map_err(|e| ApiError::new(Code::SettingsInvalid, e.to_string()))?;
    let asked = expand_home(directory.filter(|s| !s.is_empty()).unwrap_or("~"), &d.home);
    if !std::fs::canonicalize(&asked).is_ok_and(|p| p.is_dir()) {
        let why = format!("directory {} is not an existing folder", asked.display());
        return Err(ApiError::new(Code::InvalidDirectory, why));
    }
    let input = LaunchInput {
        kind: Some(SessionKind::Pty),
        template: Some(template.to_string()),
        directory: Some(asked.to_string_lossy().into_owned()),
        project_from_directory: true,
        explain_backend: backend_asked,
        ..Default::default()
    };
    // No id is minted: the launch's own folders are named by their pattern.
    let mut facts = Facts::snapshot(d, "", "home-<hex>", None, false);
    let (native, backend) = (s.backend(), backend_asked.unwrap_or(s.backend()));
    if backend != Backend::Seatbelt {
        // Seatbelt's host paths are this Mac's; elsewhere there are none to know.
        facts.host_paths = HostPaths::default();
    }
    let planned = plan(&s, &input, &facts).map_err(|r| r.error)?;
    let Some(sandboxed) = planned.sandbox.transpose()? else {
        let mut e = explain::unsandboxed(&planned.decision.directory);
        e.environment = Some(env_names(&facts, &planned.env, None, false, true));
        return Ok(e);
    };
    let temp = &facts.names.temp_dir;
    Ok(explain::before_launch(
        sandboxed.explained,
        temp,
        backend,
        native,
    ))
}

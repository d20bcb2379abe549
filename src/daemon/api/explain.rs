//! `GET /api/sandbox/explain`: the sandbox a terminal of a template would get in a
//! folder, in words, for this platform's backend or the other one — built by the launch
//! path's own [`plan_sandbox`](crate::daemon::plan::sandbox::plan_sandbox) and explained by
//! [`crate::sandbox::explain`], as the Settings page explains a running session's
//! (docs/routes.md, docs/cli.md `relay sandbox explain`). Nothing is launched, written
//! or audited, and the token file is not read.

use std::path::Path;

use crate::daemon::error::ApiError;

use crate::daemon::launch::{claude_home, relay_env, relay_routing};
use crate::daemon::plan::authorize::{self, project_holding, which};
use crate::daemon::plan::guard;
use crate::daemon::plan::sandbox::{env_names, plan_sandbox, SandboxPlan};
use crate::daemon::plan::shield;
use crate::daemon::settings::{self, Project, Settings, Template};
use crate::daemon::Daemon;
use crate::protocol::{Backend, SessionKind, CLAUDE_CODE_TEMPLATE};
use crate::sandbox::explain::{self, Explanation};
use crate::sandbox::resolve::expand_home as expand;
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
    let backend_asked = match backend.filter(|b| !b.is_empty()) {
        None => None,
        Some("bwrap") => Some(Backend::Bwrap),
        Some("seatbelt") => Some(Backend::Seatbelt),
        Some(other) => {
            return Err(ApiError::new(
                Code::InvalidRequest,
                format!("backend {other:?}: expected bwrap or seatbelt"),
            ))
        }
    };
    let s = d
        .load_settings()
        .map_err(|e| ApiError::new(Code::SettingsInvalid, e.to_string()))?;
    let asked = expand(directory.filter(|s| !s.is_empty()).unwrap_or("~"), &d.home);
    let Ok(dir) = std::fs::canonicalize(&asked).map(|p| (p.is_dir(), p)) else {
        return Err(not_a_folder(&asked));
    };
    let (true, directory) = dir else {
        return Err(not_a_folder(&asked));
    };
    let (project, template) = project_and_template(&s, &directory, template, &d.home)?;
    // The temp folder a launch would make, by its pattern: no id is minted.
    let temp_dir = d.tmp.join("relay-<id>");
    if !template.sandbox {
        let mut e = explain::unsandboxed(&directory);
        let env = relay_env(&template.env, &temp_dir, None);
        e.environment = Some(env_names(d, &env, None, false, true));
        return Ok(e);
    }
    let backend = backend_asked.unwrap_or_else(|| s.backend());
    let (token_path, token_deny) = token_paths(&s, &project.id, &d.home)?;
    let claude_path_env = guard::claude_path_env(&s);
    let path_env = template
        .env
        .get("PATH")
        .map(std::ffi::OsString::from)
        .unwrap_or_else(|| claude_path_env.clone());
    let program =
        which(&template.command, &d.home, &path_env).map(|p| p.to_string_lossy().into_owned());
    let planned = plan_sandbox(
        d,
        &s,
        &SandboxPlan {
            id: "",
            kind: SessionKind::Pty,
            backend,
            template: &template,
            program: program.as_deref(),
            project_path: &expand(&project.path, &d.home),
            directory: &directory,
            directory_asked: &asked,
            temp_dir: &temp_dir,
            token_deny: &token_deny,
            token_launch: false,
            token_home: None,
            claude_path_env: &claude_path_env,
            make_missing: crate::daemon::plan::exec_files::Make::Say,
        },
    )
    .map_err(ApiError::sandbox)?;
    // Seatbelt's host paths are this Mac's; elsewhere there are none to know.
    let host = if backend == Backend::Seatbelt {
        HostPaths::current()
    } else {
        HostPaths::default()
    };
    let mut e = explain::explain(&planned.spec, backend, &host, &planned.labels);
    e.notes.extend(planned.notes.iter().cloned());
    // The environment's names as the launch would have them: a `claude-code` terminal
    // gets its config folder, and the token while the setting is set.
    let claude = template.id == CLAUDE_CODE_TEMPLATE;
    let token_launch = claude && token_path.is_some();
    let claude_dir = temp_dir.join("claude-config");
    let mut env = relay_env(&template.env, &temp_dir, claude.then_some(&*claude_dir));
    if let Some(rules) = &planned.egress {
        env.extend(crate::daemon::egress::launch_env(rules));
        if claude {
            env.insert(
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            );
        }
    }
    // A launch of it with the token would be refused for its routing: said here first.
    let routing_note = token_launch
        .then(|| authorize::cleartext_routing(&s, &template, &relay_routing()))
        .flatten()
        .map(|why| format!("a launch of this template that gets the token is refused: {why}"));
    let mut shield_note = None;
    if token_launch {
        let path = guard::token_launch_path(&path_env, &planned.writable, &planned.reach.pins);
        env.insert("PATH".into(), path.to_string_lossy().into_owned());
        env.extend(claude_home::env(&temp_dir.join("home-<hex>")));
        let shim = d.host.shim_helper.real_path();
        let reserved = shield::reserved_ports(planned.egress.as_ref(), &template.env);
        let shielded = shield::apply(
            backend,
            shim.as_deref().map_err(String::as_str),
            (&template.listen_ports, &reserved),
            &mut env,
        );
        shield_note = Some(shielded.note);
    }
    let passthrough = s.env_passthrough_for(&template);
    e.environment = Some(env_names(d, &env, Some(&passthrough), token_launch, true));
    // Each launch makes its temp folder before the spec is built; here there is none.
    let temp = temp_dir.to_string_lossy();
    for p in e.write.iter_mut().filter(|p| p.path == temp) {
        p.kind = "dir".into();
        p.how = "made (0700) by each launch, named after its id".into();
    }
    let native = s.backend();
    if backend != native {
        e.notes.push(format!(
            "explained for {} while launches here use {}: the paths are resolved on this machine",
            backend.as_str(),
            native.as_str()
        ));
    }
    e.notes.extend(shield_note);
    e.notes.extend(routing_note);
    Ok(e)
}

/// The project holding `directory`, as `relay sandbox` finds it (the deepest one), and
/// the template `name` if that project allows it.
fn project_and_template(
    s: &Settings,
    directory: &Path,
    name: &str,
    home: &Path,
) -> Result<(Project, Template), ApiError> {
    // The project, as `relay sandbox` finds it: the deepest one holding the folder.
    let Some(project) =
        project_holding(s, directory, home).and_then(|id| s.projects.iter().find(|p| p.id == id))
    else {
        return Err(ApiError::new(
            Code::UnknownProject,
            format!("no project in settings holds {}", directory.display()),
        ));
    };
    let template = match s.template(name) {
        // A Claude launch runs the one Claude program (docs/settings.md).
        _ if name == CLAUDE_CODE_TEMPLATE => s.claude_template(),
        Some(t) => t.clone(),
        None => {
            return Err(ApiError::new(
                Code::UnknownTemplate,
                format!("no terminal template {name:?} in settings"),
            ))
        }
    };
    if !project.allows(&template.id) {
        return Err(ApiError::new(
            Code::TemplateNotAllowed,
            format!(
                "project {} does not allow template {}",
                project.id, template.id
            ),
        ));
    }
    Ok((project.clone(), template))
}

fn not_a_folder(p: &Path) -> ApiError {
    ApiError::new(
        Code::InvalidDirectory,
        format!("directory {} is not an existing folder", p.display()),
    )
}

/// The project's token file, and every configured one (each denied), as a launch
/// would have them.
fn token_paths(
    s: &settings::Settings,
    project: &str,
    home: &Path,
) -> Result<(Option<std::path::PathBuf>, Vec<std::path::PathBuf>), ApiError> {
    let own = settings::project_token_path(s, project, home).map_err(ApiError::sandbox)?;
    let all = settings::configured_tokens(s, home).map_err(ApiError::sandbox)?;
    Ok((own, all.into_iter().map(|t| t.path).collect()))
}

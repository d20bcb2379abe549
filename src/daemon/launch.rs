//! Launch authorization: one ordered path shared by sessions, terminals, resume and
//! `relay sandbox`. Every refusal has a code, a message, an event and a
//! `session_launch` audit row.
//!
//! Order: caller not inside a session → settings readable → project given and known →
//! directory inside the project → template known and allowed → sandbox decision →
//! `claude_token_file` checked and, for a sandboxed Claude launch, read (before any
//! side effect) → the session temp dir and its Claude config folder → for a token
//! launch, the Claude settings it will see checked for another sign-in
//! (`claude_settings`) → sandbox spec (the token path denied on every sandboxed launch) →
//! profile written last → identity secret → host launch → the audit row (a row that
//! cannot be written stops the session and refuses the launch) → 201.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{ApiError, Code, Outcome};
use super::guard;
use super::journal::{AuditRow, Event};
use super::settings::{self, BackendChoice, Settings, Template};
use super::{Daemon, Entry, EntryState};
use crate::protocol::{
    Backend, IdentityLaunch, LaunchRequest, LaunchResponse, ProjectRef, PtySize, SandboxLaunch,
    Secret, SessionKind, CLAUDE_CODE_TEMPLATE, HOST_PROTOCOL_VERSION,
};
use crate::sandbox::resolve::expand_home;
use crate::sandbox::{self, Network, SpecInput};

#[derive(Clone, Debug, Default)]
pub struct LaunchInput {
    pub kind: Option<SessionKind>,
    pub project: Option<String>,
    pub template: Option<String>,
    pub directory: Option<String>,
    pub name: Option<String>,
    pub pty: Option<PtySize>,
    pub extra_args: Vec<String>,
    /// Relaunch this dormant session under its own id.
    pub resume_id: Option<String>,
    /// Sessions: Claude Code's `--model`, over the template's `model`.
    pub model: Option<String>,
    /// Sessions: Claude Code's `--permission-mode`, over the template's.
    pub permission_mode: Option<String>,
    /// The connecting process, when known (unix socket peers).
    pub caller_pid: Option<u32>,
    /// No project named: take the project whose folder holds `directory` (the deepest
    /// one), as `relay sandbox` does.
    pub project_from_directory: bool,
    /// Terminals: the host reads no output until the first attach (at most 10 s), so
    /// that attach gets all of it, not only the scrollback (`relay sandbox`).
    pub hold_output: bool,
    /// `relay doctor`'s canary: run this program instead of the template's, with
    /// everything else — spec, profile, token, environment — as the real launch.
    /// Never set from a request.
    pub probe_argv: Option<Vec<String>>,
}

/// Put before every other argument of a Claude launch that gets the token: options of
/// Claude Code's top-level command, which it also takes before a subcommand.
pub const CLAUDE_TOKEN_LAUNCH_ARGS: &[&str] = &["--setting-sources", "user", "--strict-mcp-config"];

pub const PROVIDER_ARGS: &[&str] = &[
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--include-partial-messages",
];

/// The permission mode of a sandboxed headless session when neither the request nor
/// the template names one: nobody is there to answer a permission prompt, and the
/// sandbox, not the prompt, is the boundary.
pub const HEADLESS_SANDBOXED_PERMISSION_MODE: &str = "bypassPermissions";

/// A Claude Code session id relay may pass to `--resume`: it comes from the session's
/// own output, so it must look like one (Claude Code's are UUIDs) and never like a flag.
pub fn valid_claude_session_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id.as_bytes()[0].is_ascii_alphanumeric()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Finds a program the way the shim will: a path is taken as is, a name is searched in
/// the absolute entries of `path_env`.
pub fn which(program: &str, home: &Path, path_env: &std::ffi::OsStr) -> Option<PathBuf> {
    if program.contains('/') {
        let p = expand_home(program, home);
        return p.is_file().then_some(p);
    }
    std::env::split_paths(path_env)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(program))
        .find(|p| {
            p.is_file()
                && std::fs::metadata(p)
                    .map(|m| m.permissions().mode() & 0o111 != 0)
                    .unwrap_or(false)
        })
}

pub(super) fn find_template<'a>(s: &'a Settings, id: &str) -> Option<&'a Template> {
    s.terminal_templates.iter().find(|t| t.id == id)
}

/// The template a provider session uses: the settings' `claude-code` template, or its
/// default when the settings have none.
pub(super) fn claude_template(s: &Settings) -> Template {
    find_template(s, CLAUDE_CODE_TEMPLATE)
        .cloned()
        .unwrap_or_else(|| Template {
            id: CLAUDE_CODE_TEMPLATE.into(),
            name: "Claude Code".into(),
            command: s.claude_path.clone(),
            args: vec![],
            env: Default::default(),
            sandbox: true,
            read: vec![],
            read_write: vec![],
            deny: vec![],
            model: String::new(),
            permission_mode: String::new(),
        })
}

pub fn new_id(kind: SessionKind) -> std::io::Result<String> {
    let prefix = match kind {
        SessionKind::Claude => "s",
        SessionKind::Pty => "t",
    };
    Ok(format!("{prefix}-{}", super::random_hex(6)?))
}

/// Random bytes are missing (the kernel refused them): an internal error, not a reason
/// to stop the daemon.
fn no_random(what: &str, e: std::io::Error) -> ApiError {
    ApiError::new(Code::Internal, format!("{what}: random bytes: {e}"))
}

struct Attempt<'a> {
    d: &'a Arc<Daemon>,
    row: AuditRow,
    kind: SessionKind,
    profile: Option<PathBuf>,
    /// The session temp dir when this attempt made it (a refusal removes it).
    temp_dir: Option<PathBuf>,
}

impl Attempt<'_> {
    fn refuse(&mut self, e: ApiError) -> ApiError {
        if let Some(p) = self.profile.take() {
            let _ = std::fs::remove_file(p);
        }
        if let Some(t) = self.temp_dir.take() {
            let _ = std::fs::remove_dir_all(t);
        }
        let mut row = self.row.clone();
        row.outcome = e.outcome();
        row.code = Some(e.code);
        row.error = Some(e.message.clone());
        if let Err(err) = self.d.audit.record(&row) {
            // The launch is refused either way; the event below still records it.
            crate::listen::log(format_args!("relay: audit: refused launch: {err}"));
        }
        self.d.events.emit(&Event {
            name: "session.launch",
            status: Some(e.outcome().as_str()),
            code: Some(e.code),
            reason: Some(e.message.clone()),
            session_id: row.session_id.clone(),
            kind: Some(kind_name(self.kind).into()),
            ..Default::default()
        });
        e
    }
}

/// A launch request refused before the authorization path could start (a malformed
/// body, a bad size, a resume of nothing): the same audit row and event.
pub fn refused_request(
    d: &Arc<Daemon>,
    kind: SessionKind,
    action: &'static str,
    session_id: Option<String>,
    e: ApiError,
) -> ApiError {
    let mut at = Attempt {
        d,
        row: AuditRow {
            action,
            session_id,
            kind: Some(kind_name(kind).into()),
            outcome: Outcome::Allowed,
            ..Default::default()
        },
        kind,
        profile: None,
        temp_dir: None,
    };
    at.refuse(e)
}

pub fn kind_name(k: SessionKind) -> &'static str {
    match k {
        SessionKind::Claude => "claude",
        SessionKind::Pty => "pty",
    }
}

pub async fn launch(d: &Arc<Daemon>, input: LaunchInput) -> Result<Entry, ApiError> {
    let kind = input.kind.unwrap_or(SessionKind::Pty);
    let resume = input.resume_id.is_some();
    let id = match input.resume_id.clone() {
        Some(id) => id,
        None => match new_id(kind) {
            Ok(id) => id,
            Err(e) => {
                let e = no_random("session id", e);
                return Err(refused_request(d, kind, "session_launch", None, e));
            }
        },
    };
    let mut at = Attempt {
        d,
        row: AuditRow {
            action: if resume {
                "session_resume"
            } else {
                "session_launch"
            },
            session_id: Some(id.clone()),
            kind: Some(kind_name(kind).into()),
            project: input.project.clone(),
            template: input.template.clone(),
            directory: input.directory.clone(),
            outcome: Outcome::Allowed,
            ..Default::default()
        },
        kind,
        profile: None,
        temp_dir: None,
    };

    // 1. What a session itself runs can never drive relay.
    if let Some(pid) = input.caller_pid {
        if d.descends_from_session(pid) {
            return Err(at.refuse(ApiError::new(Code::InsideSession, super::INSIDE_SESSION)));
        }
    }
    // 2. Settings, read fresh.
    let settings = match d.load_settings() {
        Ok(s) => s,
        Err(e) => return Err(at.refuse(ApiError::new(Code::SettingsInvalid, e.to_string()))),
    };
    // 3. Project.
    let found;
    let mut project_key = input.project.as_deref().filter(|p| !p.is_empty());
    if project_key.is_none() && input.project_from_directory {
        found = input
            .directory
            .as_deref()
            .and_then(|dir| project_holding(&settings, &expand_home(dir, &d.home), &d.home));
        match &found {
            Some(id) => project_key = Some(id.as_str()),
            None => {
                let dir = input.directory.clone().unwrap_or_default();
                return Err(at.refuse(ApiError::new(
                    Code::UnknownProject,
                    format!("no project in settings holds {dir}"),
                )));
            }
        }
    }
    let Some(project_key) = project_key else {
        return Err(at.refuse(ApiError::new(
            Code::ProjectRequired,
            "a project is required (--project ID-OR-NAME)",
        )));
    };
    let Some(project) = settings
        .projects
        .iter()
        .find(|p| p.id == project_key)
        .or_else(|| settings.projects.iter().find(|p| p.name == project_key))
    else {
        return Err(at.refuse(ApiError::new(
            Code::UnknownProject,
            format!("no project {project_key:?} in settings"),
        )));
    };
    at.row.project = Some(project.id.clone());
    let project_path = expand_home(&project.path, &d.home);
    let Ok(project_real) = std::fs::canonicalize(&project_path) else {
        return Err(at.refuse(ApiError::new(
            Code::InvalidDirectory,
            format!(
                "project {} folder {} does not exist",
                project.id,
                project_path.display()
            ),
        )));
    };
    // 4. Directory confined to the project.
    let mut directory_asked = project_path.clone();
    let directory = match input.directory.as_deref().filter(|s| !s.is_empty()) {
        None => project_real.clone(),
        Some(dir) => {
            let p = expand_home(dir, &d.home);
            let p = if p.is_absolute() {
                p
            } else {
                project_real.join(p)
            };
            directory_asked = p.clone();
            match std::fs::canonicalize(&p) {
                Ok(real) if real.is_dir() => real,
                _ => {
                    return Err(at.refuse(ApiError::new(
                        Code::InvalidDirectory,
                        format!("directory {} is not an existing folder", p.display()),
                    )))
                }
            }
        }
    };
    at.row.directory = Some(directory.to_string_lossy().into_owned());
    if !directory.starts_with(&project_real) {
        return Err(at.refuse(ApiError::new(
            Code::DirectoryOutsideProject,
            format!(
                "directory {} is outside project {} ({})",
                directory.display(),
                project.id,
                project_real.display()
            ),
        )));
    }
    // 5. Template, allowed by the project.
    let template = match kind {
        SessionKind::Claude => {
            if input
                .template
                .as_deref()
                .is_some_and(|t| t != CLAUDE_CODE_TEMPLATE)
            {
                return Err(at.refuse(ApiError::new(
                    Code::InvalidRequest,
                    "claude sessions use the claude-code template",
                )));
            }
            claude_template(&settings)
        }
        SessionKind::Pty => {
            let Some(tid) = input.template.as_deref().filter(|t| !t.is_empty()) else {
                return Err(at.refuse(ApiError::new(
                    Code::TemplateRequired,
                    "a template is required (--template T)",
                )));
            };
            match find_template(&settings, tid) {
                Some(t) => t.clone(),
                None => {
                    return Err(at.refuse(ApiError::new(
                        Code::UnknownTemplate,
                        format!("no terminal template {tid:?} in settings"),
                    )))
                }
            }
        }
    };
    at.row.template = Some(template.id.clone());
    if !project.allows(&template.id) {
        return Err(at.refuse(ApiError::new(
            Code::TemplateNotAllowed,
            format!(
                "project {} does not allow template {}",
                project.id, template.id
            ),
        )));
    }
    // 6. Sandbox decision: Claude sessions always; a terminal unless `sandbox: false`.
    let sandboxed = kind == SessionKind::Claude || template.sandbox;
    let claude_launch = kind == SessionKind::Claude || template.id == CLAUDE_CODE_TEMPLATE;
    at.row.sandboxed = Some(sandboxed);
    // Model and permission mode: the request's, else (on a resume) the session's own,
    // else the template's, else for a sandboxed headless session `bypassPermissions`.
    if let Some(m) = input.model.as_deref().filter(|m| !settings::valid_model(m)) {
        return Err(at.refuse(ApiError::new(
            Code::InvalidRequest,
            format!("model {m:?} is not a model name"),
        )));
    }
    if let Some(p) = input
        .permission_mode
        .as_deref()
        .filter(|p| !settings::valid_permission_mode(p))
    {
        return Err(at.refuse(ApiError::new(
            Code::InvalidRequest,
            format!("permission mode {p:?} is not one word of letters"),
        )));
    }
    let prior = if resume { d.entry(&id) } else { None };
    let (model, permission_mode) = if claude_launch {
        let model = input
            .model
            .clone()
            .or_else(|| prior.as_ref().and_then(|p| p.model.clone()))
            .or_else(|| non_empty(&template.model).map(str::to_string));
        let mode = input
            .permission_mode
            .clone()
            .or_else(|| prior.as_ref().and_then(|p| p.permission_mode.clone()))
            .or_else(|| non_empty(&template.permission_mode).map(str::to_string))
            .or_else(|| {
                (kind == SessionKind::Claude && sandboxed)
                    .then(|| HEADLESS_SANDBOXED_PERMISSION_MODE.to_string())
            });
        (model, mode)
    } else {
        (None, None)
    };
    let claude_flags: Vec<String> = model
        .iter()
        .flat_map(|m| ["--model".to_string(), m.clone()])
        .chain(
            permission_mode
                .iter()
                .flat_map(|p| ["--permission-mode".to_string(), p.clone()]),
        )
        .collect();
    let prior_claude = prior.as_ref().and_then(|p| p.claude.clone());
    let resume_session = prior_claude
        .as_ref()
        .and_then(|c| c.session_id.clone())
        .filter(|s| valid_claude_session_id(s));
    // 7. The token setting: its path is denied on every sandboxed launch; a sandboxed
    //    Claude launch reads it, before any side effect.
    let token_path = match settings::token_file_path(&settings.claude_token_file, &d.home) {
        Ok(p) => p,
        Err(e) if sandboxed => return Err(at.refuse(ApiError::sandbox(e))),
        Err(_) => None,
    };
    // `relay doctor`'s canary runs its own probe, which needs no token.
    let token = match (
        &token_path,
        sandboxed && claude_launch && input.probe_argv.is_none(),
    ) {
        (Some(path), true) => match crate::token::read_token_file(path) {
            Ok(t) => Some(t.token),
            Err(e) => return Err(at.refuse(ApiError::sandbox(e.to_string()))),
        },
        _ => None,
    };
    at.row.token_passed = Some(token.is_some());
    // Which token this launch runs on, for the ledger, the lists, the audit rows and the
    // token watcher; never the token.
    let token_fingerprint = token
        .as_ref()
        .map(|t| crate::token::fingerprint(t.expose()));
    at.row.token_fingerprint = token_fingerprint.clone();
    tracing::debug!(token = ?token, fingerprint = ?token_fingerprint, "launch: token read");
    // Every other launch still has its output masked for the current token, when the
    // file reads; one that does not is launched as before (docs/THREAT-MODEL.md,
    // "Redaction").
    let redact_token = match (&token, &token_path) {
        (None, Some(path)) => crate::token::read_token_file(path).ok().map(|t| t.token),
        _ => None,
    };

    // The program, found on the PATH the launch will run with.
    let claude_path_env = guard::claude_path_env(&settings);
    let launch_path_env = template
        .env
        .get("PATH")
        .map(std::ffi::OsString::from)
        .unwrap_or_else(|| claude_path_env.clone());
    let mut argv: Vec<String> = match kind {
        SessionKind::Claude => {
            let program = which(&settings.claude_path, &d.home, &launch_path_env)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|| settings.claude_path.clone());
            let mut a = vec![program];
            a.extend(PROVIDER_ARGS.iter().map(|s| s.to_string()));
            a.extend(claude_flags.iter().cloned());
            // Continue Claude Code's own conversation, by the id it gave (a session
            // that never took a turn has none, and starts a new one).
            if let Some(sid) = &resume_session {
                a.push("--resume".into());
                a.push(sid.clone());
            }
            a
        }
        SessionKind::Pty => {
            let program = which(&template.command, &d.home, &launch_path_env)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|| template.command.clone());
            let mut a = vec![program];
            a.extend(claude_flags.iter().cloned());
            a.extend(template.args.iter().cloned());
            a
        }
    };
    argv.extend(input.extra_args.iter().cloned());
    if token.is_some() && !Path::new(&argv[0]).is_absolute() {
        // The shim would look a bare name up again, on the session's PATH, and run a
        // program relay never pinned.
        return Err(at.refuse(ApiError::sandbox(format!(
            "the Claude program {} was not found on the PATH relay uses ({}); install Claude \
             Code or set claude_path to its absolute path",
            argv[0],
            launch_path_env.to_string_lossy()
        ))));
    }
    if token.is_some() {
        // Claude Code runs what its project folder names (hooks, helpers, status lines,
        // MCP servers in `.claude/settings*.json` and `.mcp.json`), and any token-less
        // session can write those files. A token launch loads user settings only (its
        // own config folder, seeded by relay) and no project MCP servers
        // (docs/THREAT-MODEL.md, "Code a project names").
        argv.splice(1..1, CLAUDE_TOKEN_LAUNCH_ARGS.iter().map(|s| s.to_string()));
    }
    // A bare name found nowhere on that PATH: if the start fails, the refusal says where
    // relay looked and which setting to change, instead of the bare `os error 2`.
    let unfound = (input.probe_argv.is_none() && !Path::new(&argv[0]).is_absolute())
        .then(|| not_found_hint(&argv[0], &launch_path_env, &template.id, kind));
    if let Some(probe) = &input.probe_argv {
        argv = probe.clone();
    }

    // The session's own temp dir.
    let temp_dir = d.tmp.join(format!("relay-{id}"));
    let made = {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(&temp_dir) {
            Ok(()) => Ok(true),
            // A resume finds its own folder again.
            Err(e)
                if e.kind() == std::io::ErrorKind::AlreadyExists && resume && temp_dir.is_dir() =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    };
    if let Ok(true) = made {
        at.temp_dir = Some(temp_dir.clone());
    }
    if let Err(e) = made {
        return Err(at.refuse(ApiError::new(
            Code::SpawnFailed,
            format!("session temp dir {}: {e}", temp_dir.display()),
        )));
    }
    let mut env = template.env.clone();
    env.insert("TMPDIR".into(), temp_dir.to_string_lossy().into_owned());
    // A sandboxed Claude gets a relay-owned config folder of its own, seeded so it starts
    // straight into work (no theme, login or trust screens), kept across resume.
    if sandboxed && claude_launch {
        let claude_dir = temp_dir.join("claude-config");
        if let Err(e) = super::claude_config::seed(&claude_dir, &directory) {
            return Err(at.refuse(ApiError::new(
                Code::SpawnFailed,
                format!("claude config {}: {e}", claude_dir.display()),
            )));
        }
        // What that folder, the managed settings and the project's settings say must not
        // sign Claude Code in another way beside the token (an `apiKeyHelper`, an API
        // key in `env`, another provider): a resume reads what the session wrote there.
        if token.is_some() {
            if let Err(e) =
                super::claude_settings::check_launch(&claude_dir, &directory, &project_real)
            {
                return Err(at.refuse(ApiError::sandbox(e)));
            }
        }
        env.insert(
            "CLAUDE_CONFIG_DIR".into(),
            claude_dir.to_string_lossy().into_owned(),
        );
        // Claude Code refuses `bypassPermissions` as root unless told it is sandboxed;
        // it is (docs/session-host.md, "claude (provider) sessions").
        env.insert("IS_SANDBOX".into(), "1".into());
    }

    // 8. The sandbox spec and its profile, written last.
    let mut reach = super::Reach::default();
    let mut explained = None;
    let sandbox = if sandboxed {
        let (backend, launcher) = sandbox_launcher(&settings.session_sandbox, &d.home);
        if !launcher.is_file() {
            return Err(at.refuse(ApiError::sandbox(format!(
                "the {} launcher {} is not installed",
                backend.as_str(),
                launcher.display()
            ))));
        }
        let planned = match plan_sandbox(
            d,
            &settings,
            &SandboxPlan {
                id: &id,
                kind,
                backend,
                template: &template,
                program: argv.first().map(String::as_str),
                project_path: &project_path,
                directory: &directory,
                directory_asked: &directory_asked,
                temp_dir: &temp_dir,
                token_path: token_path.as_deref(),
                token_launch: token.is_some(),
                claude_path_env: &claude_path_env,
            },
        ) {
            Ok(p) => p,
            Err(e) => return Err(at.refuse(ApiError::sandbox(e))),
        };
        let Planned {
            spec,
            reach: planned_reach,
            writable,
            ports,
            labels,
        } = planned;
        reach = planned_reach;
        if token.is_some() {
            // What Claude Code runs by name (`git` at once) comes from folders no session
            // can write, or pinned ones.
            let path = guard::token_launch_path(&launch_path_env, &writable, &reach.pins);
            env.insert("PATH".into(), path.to_string_lossy().into_owned());
        }
        // The Settings page explains this very spec (docs/routes.md).
        explained = Some(Arc::new(sandbox::explain::explain(
            &spec,
            backend,
            &sandbox::HostPaths::current(),
            &labels,
        )));
        let (bytes, ext) = match backend {
            Backend::Seatbelt => (
                sandbox::render_sbpl_on(&spec, &sandbox::HostPaths::current()).into_bytes(),
                "sb",
            ),
            Backend::Bwrap => match sandbox::bwrap_profile::encode(&sandbox::render_bwrap(&spec)) {
                Ok(b) => (b, "bwrap"),
                Err(e) => return Err(at.refuse(ApiError::sandbox(format!("bwrap profile: {e}")))),
            },
        };
        // Its own name per attempt: two resumes of one id never share a profile.
        let suffix = match super::random_hex(4) {
            Ok(s) => s,
            Err(e) => return Err(at.refuse(no_random("profile name", e))),
        };
        let profile = d.paths.profiles().join(format!("{id}-{suffix}.{ext}"));
        let _ = std::fs::remove_file(&profile);
        if let Err(e) = write_new_0600(&profile, &bytes) {
            // A file created but not filled (a full disk) goes too.
            let _ = std::fs::remove_file(&profile);
            return Err(at.refuse(ApiError::sandbox(format!(
                "write profile {}: {e}",
                profile.display()
            ))));
        }
        at.profile = Some(profile.clone());
        let ports_for_host = if backend == Backend::Bwrap && !settings.session_sandbox.network_off {
            ports
        } else {
            vec![]
        };
        Some(SandboxLaunch {
            backend,
            profile_path: profile,
            launcher: Some(launcher),
            denied_loopback_ports: ports_for_host,
        })
    } else {
        None
    };

    // 9. Identity, then the host.
    let secret = match super::random_hex(32) {
        Ok(s) => s,
        Err(e) => return Err(at.refuse(no_random("identity secret", e))),
    };
    d.bridge.expect(&id, &secret);
    let entry = Entry {
        id: id.clone(),
        kind,
        name: input.name.clone(),
        template_id: template.id.clone(),
        project_id: project.id.clone(),
        directory: directory.clone(),
        state: EntryState::Launching,
        root_pid: None,
        target_pid: None,
        created_ms: super::journal::now_ms(),
        exit_status: None,
        exit_signal: None,
        exit_reason: None,
        sandboxed,
        profile: at.profile.clone(),
        pty: (kind == SessionKind::Pty).then(|| input.pty.unwrap_or_default()),
        token_passed: token.is_some(),
        model,
        permission_mode,
        claude: prior_claude,
        token_fingerprint,
        stale: false,
        ended_ms: None,
        reach,
        stop_reason: None,
        early_exit: None,
        explained,
    };
    if !d.begin(entry.clone(), resume) {
        d.bridge.forget(&id);
        return Err(at.refuse(ApiError::new(
            Code::SessionExists,
            format!("session {id} exists"),
        )));
    }
    let req = LaunchRequest {
        v: HOST_PROTOCOL_VERSION,
        session_id: id.clone(),
        kind,
        resume,
        project: ProjectRef {
            id: project.id.clone(),
            name: project.name.clone(),
            path: project_real.clone(),
        },
        directory: directory.clone(),
        name: input.name.clone(),
        template_id: Some(template.id.clone()),
        argv,
        env,
        pty: entry.pty,
        sandbox,
        identity: Some(IdentityLaunch {
            secret: Secret::new(secret),
        }),
        claude_token: token,
        redact_token,
        hold_output: input.hold_output,
    };
    let body = match serde_json::to_vec(&req) {
        Ok(b) => b,
        Err(e) => {
            d.abort(&id);
            return Err(at.refuse(ApiError::new(
                Code::SpawnFailed,
                format!("encode launch: {e}"),
            )));
        }
    };
    drop(req);
    if resume {
        // The dormant session's record in the host goes before the id is used again.
        let _ = d
            .host
            .call("DELETE", &format!("/sessions/{id}"), None)
            .await;
    }
    let answer = d.host.call("POST", "/launch", Some(body)).await;
    d.bridge.forget(&id);
    let (status, bytes) = match answer {
        Ok(a) => a,
        Err(e) => {
            d.abort(&id);
            return Err(at.refuse(ApiError::new(Code::HostUnavailable, e.to_string())));
        }
    };
    if status != 201 {
        d.abort(&id);
        let mut e = ApiError::from_host(status, &bytes);
        if let (Code::SpawnFailed, Some(hint)) = (e.code, &unfound) {
            e.message = format!("{hint} ({})", e.message);
        }
        return Err(at.refuse(e));
    }
    let launched: LaunchResponse = match serde_json::from_slice(&bytes) {
        Ok(l) => l,
        Err(e) => {
            d.abort(&id);
            return Err(at.refuse(ApiError::new(
                Code::SpawnFailed,
                format!("host answer: {e}"),
            )));
        }
    };
    d.started(&id, launched.root_pid, launched.target_pid);
    at.row.routing = launched.routing.clone();
    if let Err(e) = d.audit.record(&at.row) {
        // No launch runs unaudited: the session goes before anyone hears of it (its
        // groups killed, the host's record dropped), and the launch is refused.
        d.abort(&id);
        for pid in [launched.root_pid, launched.target_pid] {
            if pid > 1 {
                // Safety: kill(2) on a process group of this session; no memory.
                unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
            }
        }
        let _ = d
            .host
            .call("DELETE", &format!("/sessions/{id}"), None)
            .await;
        return Err(at.refuse(ApiError::new(
            Code::AuditUnavailable,
            format!("the audit row could not be written, so the session was stopped: {e}"),
        )));
    }
    d.events.emit(&Event {
        name: "session.launch",
        status: Some("ok"),
        session_id: Some(id.clone()),
        kind: Some(kind_name(kind).into()),
        routing: launched.routing,
        ..Default::default()
    });
    Ok(d.finish_launch(&id))
}

/// What [`plan_sandbox`] needs to know about one launch.
pub(super) struct SandboxPlan<'a> {
    pub id: &'a str,
    pub kind: SessionKind,
    pub backend: Backend,
    pub template: &'a Template,
    /// The program the launch runs (`argv[0]`).
    pub program: Option<&'a str>,
    pub project_path: &'a Path,
    /// The canonical working folder, and the one asked for (links checked).
    pub directory: &'a Path,
    pub directory_asked: &'a Path,
    pub temp_dir: &'a Path,
    pub token_path: Option<&'a Path>,
    /// The launch carries the token: the program pins must hold.
    pub token_launch: bool,
    pub claude_path_env: &'a std::ffi::OsStr,
}

/// A launch's sandbox spec (token path denied), what it reaches, the folders some
/// session can write, the denied ports and why each path is in the spec.
pub(super) struct Planned {
    pub spec: sandbox::Spec,
    pub reach: super::Reach,
    pub writable: Vec<PathBuf>,
    pub ports: Vec<u16>,
    pub labels: Vec<(PathBuf, String)>,
}

/// Builds the spec of one sandboxed launch from the settings: the one place a launch's
/// grants, denies, pins and network are decided, used by [`launch`] and by
/// `relay sandbox explain` (`src/daemon/explain.rs`). Errors are `sandbox_unavailable`
/// messages.
pub(super) fn plan_sandbox(
    d: &Daemon,
    settings: &Settings,
    p: &SandboxPlan,
) -> Result<Planned, String> {
    let (backend, template, directory) = (p.backend, p.template, p.directory);
    let live = d.live_sandboxed(p.id);
    let live_rw: Vec<PathBuf> = live
        .iter()
        .flat_map(|e| e.reach.read_write.iter().cloned())
        .collect();
    let writable = guard::session_writable_roots(settings, &d.home, &live_rw);
    // Links never redirect the project folder or the session directory.
    for place in [p.project_path, p.directory_asked] {
        if let Some(text) = place.to_str() {
            sandbox::resolve::resolve_in(text, &d.home, sandbox::Role::Read, &writable)
                .map_err(|e| e.to_string())?;
        }
    }
    // What a token launch runs is pinned read-only in every sandbox, so no session
    // can swap it for a program that keeps the token — from the first launch on,
    // not only once the setting is set: a program a session planted before the
    // token existed would get the token later.
    let pins: Vec<guard::ProgramPins> = guard::token_programs(settings)
        .iter()
        .map(|prog| guard::program_pins(prog, &d.home, p.claude_path_env))
        .collect();
    let mut pin_folders: Vec<PathBuf> = Vec::new();
    // Only where some session could write: elsewhere a pin changes nothing.
    for f in pins.iter().flat_map(|p| p.folders.iter()) {
        if writable.iter().any(|r| f.starts_with(r)) && !pin_folders.contains(f) {
            pin_folders.push(f.clone());
        }
    }
    if p.token_launch {
        pins_hold(&pins, &writable, &d.sandboxed_since_start(p.id))?;
    }
    let mut labels: Vec<(PathBuf, String)> = Vec::new();
    let mut label = |path: &Path, why: &str| labels.push((path.to_path_buf(), why.to_string()));
    let mut read = template.read.clone();
    for r in &template.read {
        label(&expand_home(r, &d.home), "the template's read");
    }
    if let Some(program) = p.program.map(PathBuf::from).filter(|p| p.is_absolute()) {
        for dir in program_dirs(&program) {
            label(&dir, "the program's folder");
            read.push(dir.to_string_lossy().into_owned());
        }
    }
    if p.kind == SessionKind::Pty && backend == Backend::Bwrap {
        // The shim starts a pty target through `relay-shim pty-init` inside bwrap.
        if let Ok(shim) = std::fs::canonicalize(&d.host.shim_bin) {
            label(&shim, "relay-shim, which starts the tool inside (pty-init)");
            read.push(shim.to_string_lossy().into_owned());
        }
    }
    label(directory, "the session's directory");
    label(p.temp_dir, "its own temp folder (TMPDIR)");
    let mut read_write = template.read_write.clone();
    for rw in &template.read_write {
        label(&expand_home(rw, &d.home), "the template's read_write");
    }
    read_write.push(directory.to_string_lossy().into_owned());
    read_write.push(p.temp_dir.to_string_lossy().into_owned());
    let mut deny = template.deny.clone();
    for dn in &template.deny {
        label(&expand_home(dn, &d.home), "the template's deny");
    }
    label(
        &d.paths.config,
        "relay's config dir: settings, api-token, sockets, profiles, logs",
    );
    deny.push(d.paths.config.to_string_lossy().into_owned());
    let read_only: Vec<String> = pin_folders
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    for f in &pin_folders {
        label(f, "what a token launch runs (pinned)");
    }
    let mut ports = settings.session_sandbox.denied_loopback_ports.clone();
    if let Some(port) = d.api_port() {
        ports.push(port);
    }
    ports.sort_unstable();
    ports.dedup();
    let network = if settings.session_sandbox.network_off {
        Network::Off
    } else {
        Network::Shared {
            denied_loopback_ports: ports.clone(),
        }
    };
    let mut spec = sandbox::build_spec(
        &SpecInput {
            read: &read,
            read_write: &read_write,
            deny: &deny,
            read_only: &read_only,
            session_writable: &writable,
            network,
            workdir: directory,
            interactive: p.kind == SessionKind::Pty,
            file_mask: d.paths.mask(),
            deny_unix_sockets: vec![d.paths.socket(), d.paths.bridge(), d.paths.host_socket()],
        },
        &d.home,
    )
    .map_err(|e| e.to_string())?;
    let mut reach = super::Reach {
        grants: spec
            .grants
            .iter()
            .map(|g| g.path.canonical.clone())
            .collect(),
        read_write: spec
            .grants
            .iter()
            .filter(|g| g.access == sandbox::Access::ReadWrite)
            .map(|g| g.path.canonical.clone())
            .collect(),
        ..Default::default()
    };
    // A pin that holds one of this launch's own read-write grants (the home folder,
    // when a link to the program sits there) would make the session read-only: it is
    // left out, so this session counts as unpinned for it and a later token launch
    // says so (`pins_hold`).
    spec.read_only.retain(|pin| {
        !reach
            .read_write
            .iter()
            .any(|rw| rw.starts_with(&pin.canonical))
    });
    pin_folders.retain(|f| spec.read_only.iter().any(|p| &p.canonical == f));
    reach.pins = pin_folders;
    // The token path, denied on every sandboxed launch: its own folder masked whole
    // where it can be (a token saved there later by rename stays hidden).
    if let Some(tp) = p.token_path {
        let td = guard::token_deny(tp, &d.home, &reach.grants, backend == Backend::Seatbelt)?;
        for dp in &td.deny {
            let why = if dp == tp {
                "claude_token_file: the token is only ever on fd 5"
            } else {
                "claude_token_file's own folder, masked whole: the token is only ever on fd 5"
            };
            labels.push((dp.clone(), why.to_string()));
            let r = sandbox::resolve(&dp.to_string_lossy(), &d.home, sandbox::Role::Deny)
                .map_err(|e| e.to_string())?;
            spec.deny.push(r);
        }
        reach.token_path = Some(tp.to_path_buf());
        if backend == Backend::Bwrap {
            reach.token_folder = td.exposed_folder.map(|f| (f.clone(), guard::identity(&f)));
        }
    }
    Ok(Planned {
        spec,
        reach,
        writable,
        ports,
        labels,
    })
}

/// The id of the project whose folder holds `dir`, the deepest when several do.
pub(super) fn project_holding(s: &Settings, dir: &Path, home: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).ok()?;
    s.projects
        .iter()
        .filter_map(|p| {
            std::fs::canonicalize(expand_home(&p.path, home))
                .ok()
                .map(|real| (p, real))
        })
        .filter(|(_, real)| dir.starts_with(real))
        .max_by_key(|(_, real)| real.components().count())
        .map(|(p, _)| p.id.clone())
}

/// Whether the programs a token launch runs are beyond every session's reach: no
/// missing `PATH` folder before them that a session could create, and no session relay
/// remembers — running, ended (across restarts: the ledger keeps what each could
/// write) or purged since this start — that could write one of their folders because
/// it started without the pins (what it wrote there stays).
fn pins_hold(
    pins: &[guard::ProgramPins],
    writable: &[PathBuf],
    sessions: &[Entry],
) -> Result<(), String> {
    for p in pins {
        let program = p
            .program
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "claude".into());
        if let Some((file, n)) = p.stray_links.first() {
            return Err(format!(
                "the Claude program {program}: {} has {n} names (hard links), some outside \
                 the folders relay keeps read-only, so a session could write it through \
                 another name; remove the extra links (or reinstall) and launch again",
                file.display()
            ));
        }
        if let Some(missing) = p
            .missing_path_dirs
            .iter()
            .find(|m| writable.iter().any(|r| m.starts_with(r)))
        {
            return Err(format!(
                "the PATH folder {} comes before {program} and does not exist: a sandboxed \
                 session could create it and put its own program there for the token; \
                 create it, drop it from relay's PATH, or set claude_path to the absolute path",
                missing.display()
            ));
        }
        for folder in &p.folders {
            if let Some(e) = sessions.iter().find(|e| {
                e.reach
                    .read_write
                    .iter()
                    .any(|r| folder.starts_with(r) || r.starts_with(folder))
                    && !e.reach.pins.iter().any(|pin| folder.starts_with(pin))
            }) {
                let running = matches!(e.state, EntryState::Running | EntryState::Launching);
                return Err(format!(
                    "the Claude program {program}: session {} {} write {} without the pin \
                     that protects it, so what runs there may be its own; {}check the \
                     program, purge that session, then restart relay serve (it forgets \
                     purged sessions)",
                    e.id,
                    if running { "can" } else { "could" },
                    folder.display(),
                    if running { "stop that session, " } else { "" }
                ));
            }
        }
    }
    Ok(())
}

/// What to do about a program name relay did not find on the launch's `PATH`
/// ([cli.md](../../docs/cli.md#relay-sandbox-template)).
fn not_found_hint(
    program: &str,
    path_env: &std::ffi::OsStr,
    template_id: &str,
    kind: SessionKind,
) -> String {
    let fix = match kind {
        SessionKind::Claude => {
            "install Claude Code there, or set claude_path in settings.json to its absolute path"
                .to_string()
        }
        SessionKind::Pty if template_id == CLAUDE_CODE_TEMPLATE => format!(
            "install Claude Code there, or set the {CLAUDE_CODE_TEMPLATE} template's command \
             (and claude_path, for headless sessions) in settings.json to its absolute path"
        ),
        SessionKind::Pty => format!(
            "install it there, or set the {template_id} template's command in settings.json \
             to its absolute path"
        ),
    };
    format!(
        "{program} is not on the PATH relay searched ({}); {fix}",
        path_env.to_string_lossy()
    )
}

/// The backend and the launcher a sandboxed launch uses under these settings: `auto` is
/// Seatbelt on macOS and bubblewrap elsewhere. `relay doctor` checks the same pair.
pub fn sandbox_launcher(sb: &settings::SessionSandbox, home: &Path) -> (Backend, PathBuf) {
    let backend = match sb.backend {
        BackendChoice::Seatbelt => Backend::Seatbelt,
        BackendChoice::Bwrap => Backend::Bwrap,
        BackendChoice::Auto if cfg!(target_os = "macos") => Backend::Seatbelt,
        BackendChoice::Auto => Backend::Bwrap,
    };
    let launcher = match backend {
        Backend::Seatbelt => non_empty(&sb.seatbelt_launcher).unwrap_or("/usr/bin/sandbox-exec"),
        Backend::Bwrap => non_empty(&sb.bwrap_launcher).unwrap_or("/usr/bin/bwrap"),
    };
    (backend, expand_home(launcher, home))
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// The folder of the program and, when it is a link, of its real file: a sandboxed
/// launch can only run what it can read.
fn program_dirs(program: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = program.parent() {
        out.push(dir.to_path_buf());
    }
    if let Ok(real) = std::fs::canonicalize(program) {
        if let Some(dir) = real.parent() {
            if !out.iter().any(|d| d == dir) {
                out.push(dir.to_path_buf());
            }
        }
    }
    // System folders are in the baseline already; granting `/usr/bin` again is harmless.
    out
}

fn write_new_0600(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::valid_claude_session_id;

    #[test]
    fn a_claude_session_id_never_reads_as_a_flag() {
        assert!(valid_claude_session_id(
            "8de61dd1-5a4e-4dfd-8348-32de2d9458ac"
        ));
        assert!(valid_claude_session_id("fake-4242"));
        for bad in [
            "",
            "-x",
            "--dangerously-skip-permissions",
            "a b",
            "a/b",
            &"a".repeat(129),
        ] {
            assert!(!valid_claude_session_id(bad), "{bad:?}");
        }
    }
}

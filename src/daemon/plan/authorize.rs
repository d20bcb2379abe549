//! Launch authorization as a pure step: from the settings, the request and the facts of
//! the machine to a [`Decision`] or a [`Refusal`] — project, directory confinement,
//! template, sandbox decision, the program and its arguments, the token decision. It
//! reads the file system (folders are canonicalized, programs looked up) and changes
//! nothing: the launch steps in `launch.rs` carry the decision out
//! (docs/architecture.md, "A launch").
//!
//! Order of the checks: caller not inside a session → project given and known →
//! directory inside the project → template known and allowed → model and permission
//! mode well-formed → `claude_token_file` well-formed → a launch that gets the token
//! routed over TLS or to loopback only → the program found (a launch that gets the
//! token must run an absolute path).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use super::guard;
use crate::daemon::egress::ROUTING_URL_VARS;
use crate::daemon::error::ApiError;
use crate::daemon::settings::{self, Project, Settings, Template};
use crate::protocol::{Backend, SessionKind, CLAUDE_CODE_TEMPLATE};
use crate::protocol::{ClaudeInit, PtySize};
use crate::sandbox::resolve::expand_home;
use crate::wire::Code;

/// What a launch asks for, before authorization: the request's fields and what relay
/// knows of the caller.
#[derive(Clone, Debug, Default)]
pub struct LaunchInput {
    pub kind: Option<SessionKind>,
    pub project: Option<String>,
    pub template: Option<String>,
    pub directory: Option<String>,
    /// The caller's current folder: the start folder when no `directory` is asked and
    /// it lies inside the project (else the project folder).
    pub cwd: Option<String>,
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
    /// One of `relay doctor`'s probes: relay's own canary script or `claude auth
    /// status`, run in the project's folder whatever it is (the canary checks the mask
    /// where a grant covers the token's folder). Never set from a request.
    pub relay_probe: bool,
    /// `relay sandbox explain --backend`: plan for this backend. When it is not the
    /// settings' one, its launcher is not looked for, as nothing is launched. Never set
    /// from a launch request.
    pub explain_backend: Option<Backend>,
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

/// What authorization knows beyond the settings and the request.
pub struct Environment<'a> {
    pub home: &'a Path,
    /// relay's own `PATH`, where a Claude program named without a folder is looked up
    /// when the `claude-code` template sets none.
    pub relay_path: &'a OsStr,
    /// The caller descends from a live session's root.
    pub caller_inside_session: bool,
    /// A resume: what the dormant session ran with.
    pub prior: Option<Prior>,
    /// relay's own values of the routing URL variables ([`ROUTING_URL_VARS`]): a
    /// sandboxed launch inherits them where its template sets none.
    pub relay_routing: &'a BTreeMap<String, String>,
}

/// What a resumed session keeps from its last run.
#[derive(Clone, Debug, Default)]
pub struct Prior {
    pub model: Option<String>,
    pub permission_mode: Option<String>,
    pub claude: Option<ClaudeInit>,
}

/// The token part of a decision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenDecision {
    /// The project's token file (its own `claude_token_file`, or the top-level one),
    /// when it has one: the one this launch passes, or masks its output for.
    pub path: Option<PathBuf>,
    /// Every token file the settings name, this project's among them: each denied on
    /// every sandboxed launch (docs/THREAT-MODEL.md#assets).
    pub deny: Vec<PathBuf>,
    /// The launch reads the file and passes the token on fd 5 (a sandboxed Claude
    /// launch; never `relay doctor`'s probe).
    pub pass: bool,
}

/// An authorized launch, for the launch steps to carry out.
#[derive(Clone, Debug)]
pub struct Decision {
    pub kind: SessionKind,
    pub resume: bool,
    pub project: Project,
    /// The project folder as set (`~/` expanded) and canonical.
    pub project_path: PathBuf,
    pub project_real: PathBuf,
    /// The canonical working folder, and the one asked for (links in it are checked
    /// when the sandbox is planned).
    pub directory: PathBuf,
    pub directory_asked: PathBuf,
    pub template: Template,
    pub sandboxed: bool,
    /// A Claude launch: a headless session or a `claude-code` terminal.
    pub claude_launch: bool,
    /// With [`Self::sandboxed`]: the backend and its launcher (an existing file).
    pub sandbox: Option<(Backend, PathBuf)>,
    pub model: Option<String>,
    pub permission_mode: Option<String>,
    /// What Claude Code said last (kept across a resume), and the session id of its own
    /// a resume continues (`--resume`).
    pub claude: Option<ClaudeInit>,
    pub resume_session: Option<String>,
    pub argv: Vec<String>,
    /// The `PATH` the launch runs with, and the one Claude programs are found with.
    pub launch_path_env: OsString,
    pub claude_path_env: OsString,
    /// When `argv[0]` is a bare name found nowhere: what to say if the start fails.
    pub unfound: Option<String>,
    pub token: TokenDecision,
    /// One of `relay doctor`'s own probes.
    pub relay_probe: bool,
}

impl Decision {
    /// What a refusal after this decision notes in its audit row.
    pub fn noted(&self) -> Noted {
        Noted {
            project: Some(self.project.id.clone()),
            directory: Some(self.directory.to_string_lossy().into_owned()),
            template: Some(self.template.id.clone()),
            sandboxed: Some(self.sandboxed),
        }
    }
}

/// The facts the audit row of a refused launch carries, as far as authorization got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Noted {
    pub project: Option<String>,
    pub directory: Option<String>,
    pub template: Option<String>,
    pub sandboxed: Option<bool>,
}

#[derive(Debug)]
pub struct Refusal {
    pub error: ApiError,
    pub noted: Noted,
}

/// A refusal builder that carries what has been noted so far.
struct Check {
    noted: Noted,
}

impl Check {
    fn refuse(&self, code: Code, message: impl Into<String>) -> Refusal {
        Refusal {
            error: ApiError::new(code, message),
            noted: self.noted.clone(),
        }
    }

    fn refuse_sandbox(&self, message: impl Into<String>) -> Refusal {
        Refusal {
            error: ApiError::sandbox(message),
            noted: self.noted.clone(),
        }
    }
}

impl Check {
    /// A check that notes, until authorization knows better, what the request asked.
    fn asked(input: &LaunchInput) -> Check {
        Check {
            noted: Noted {
                project: input.project.clone(),
                directory: input.directory.clone(),
                template: input.template.clone(),
                sandboxed: None,
            },
        }
    }
}

/// Decides one launch: see the module's order. Pure but for file-system reads.
pub fn authorize(
    s: &Settings,
    input: &LaunchInput,
    env: &Environment,
) -> Result<Decision, Refusal> {
    let kind = input.kind.unwrap_or(SessionKind::Pty);
    let mut c = Check::asked(input);
    // What a session itself runs can never drive relay.
    if env.caller_inside_session {
        return Err(c.refuse(Code::InsideSession, crate::daemon::INSIDE_SESSION));
    }
    let Place {
        project,
        project_path,
        project_real,
        directory,
        directory_asked,
    } = place(s, input, env, &mut c)?;
    let template = allowed_template(s, kind, input, &project, &mut c)?;
    // Claude sessions are always sandboxed; a terminal unless `sandbox: false`.
    let sandboxed = kind == SessionKind::Claude || template.sandbox;
    let claude_launch = kind == SessionKind::Claude || template.id == CLAUDE_CODE_TEMPLATE;
    c.noted.sandboxed = Some(sandboxed);
    if sandboxed
        && !input.relay_probe
        && !project.allow_home_directory
        && !template.allow_home_directory
    {
        home_rule(input, &directory, env.home, (&project.id, &template.id), &c)?;
    }
    let (model, permission_mode) = model_and_mode(
        input,
        env.prior.as_ref(),
        &template,
        kind,
        claude_launch,
        &c,
    )?;
    let token = token_decision(
        s,
        input,
        env,
        (&project, &template, &directory),
        (sandboxed, claude_launch),
        &c,
    )?;
    let sandbox = match sandboxed {
        true => Some(launcher(s, env.home, &c)?),
        false => None,
    };
    let resume_session = resume_session(env.prior.as_ref());
    let (claude_path_env, launch_path_env) = path_envs(s, &template, env.relay_path);
    let (argv, unfound) = program_argv(
        input,
        kind,
        &template,
        (&model, &permission_mode),
        resume_session.as_deref(),
        (env.home, &launch_path_env),
        token.pass,
        &c,
    )?;
    Ok(Decision {
        kind,
        resume: input.resume_id.is_some(),
        project,
        project_path,
        project_real,
        directory,
        directory_asked,
        template,
        sandboxed,
        claude_launch,
        sandbox,
        model,
        permission_mode,
        claude: env.prior.as_ref().and_then(|p| p.claude.clone()),
        resume_session,
        argv,
        launch_path_env,
        claude_path_env,
        unfound,
        token,
        relay_probe: input.relay_probe,
    })
}

/// Where a launch runs: its project, the project's folder as set and canonical, and
/// the working folder canonical and as asked.
struct Place {
    project: Project,
    project_path: PathBuf,
    project_real: PathBuf,
    directory: PathBuf,
    directory_asked: PathBuf,
}

/// The project and the working folder, which must lie inside the project's folder;
/// each noted once known.
fn place(
    s: &Settings,
    input: &LaunchInput,
    env: &Environment,
    c: &mut Check,
) -> Result<Place, Refusal> {
    let project = find_project(s, input, env.home, c)?.clone();
    c.noted.project = Some(project.id.clone());
    let (project_path, project_real) = project_folder(&project, env.home, c)?;
    let (directory, directory_asked) = directory(input, &project_path, &project_real, env, c)?;
    c.noted.directory = Some(directory.to_string_lossy().into_owned());
    if !directory.starts_with(&project_real) {
        return Err(c.refuse(
            Code::DirectoryOutsideProject,
            format!(
                "directory {} is outside project {} ({})",
                directory.display(),
                project.id,
                project_real.display()
            ),
        ));
    }
    Ok(Place {
        project,
        project_path,
        project_real,
        directory,
        directory_asked,
    })
}

/// The launch's template ([`template`]), which the project must allow; noted once
/// known.
fn allowed_template(
    s: &Settings,
    kind: SessionKind,
    input: &LaunchInput,
    project: &Project,
    c: &mut Check,
) -> Result<Template, Refusal> {
    let template = template(s, kind, input, c)?;
    c.noted.template = Some(template.id.clone());
    if !project.allows(&template.id) {
        return Err(c.refuse(
            Code::TemplateNotAllowed,
            format!(
                "project {} does not allow template {}",
                project.id, template.id
            ),
        ));
    }
    Ok(template)
}

/// The id of Claude Code's own session a resume continues (`--resume`): what the
/// dormant session said last, when it looks like one ([`valid_claude_session_id`]).
fn resume_session(prior: Option<&Prior>) -> Option<String> {
    prior
        .and_then(|p| p.claude.as_ref())
        .and_then(|c| c.session_id.clone())
        .filter(|id| valid_claude_session_id(id))
}

/// The `PATH` Claude programs are found with ([`guard::claude_path_env_from`]), and the
/// one the launch runs with: the template's own `PATH`, else that one.
fn path_envs(s: &Settings, template: &Template, relay_path: &OsStr) -> (OsString, OsString) {
    let claude_path_env = guard::claude_path_env_from(s, relay_path);
    let launch_path_env = template
        .env
        .get("PATH")
        .map(OsString::from)
        .unwrap_or_else(|| claude_path_env.clone());
    (claude_path_env, launch_path_env)
}

/// Which token a launch gets and which token files it is denied, and the refusals that
/// hold only for a launch that gets one: in the home folder, or routed in cleartext.
fn token_decision(
    s: &Settings,
    input: &LaunchInput,
    env: &Environment,
    (project, template, directory): (&Project, &Template, &Path),
    (sandboxed, claude_launch): (bool, bool),
    c: &Check,
) -> Result<TokenDecision, Refusal> {
    // The token settings: every configured file is denied on every sandboxed launch, and
    // a sandboxed Claude launch passes its project's token (`relay doctor`'s canary runs
    // its own probe, which needs none).
    let (token_path, deny) = match (
        settings::project_token_path(s, &project.id, env.home),
        settings::configured_tokens(s, env.home),
    ) {
        (Ok(p), Ok(all)) => (p, all.into_iter().map(|t| t.path).collect()),
        (Err(e), _) | (_, Err(e)) if sandboxed => return Err(c.refuse_sandbox(e)),
        (p, _) => (p.unwrap_or(None), vec![]),
    };
    let token = TokenDecision {
        pass: token_path.is_some() && sandboxed && claude_launch && input.probe_argv.is_none(),
        path: token_path,
        deny,
    };
    // Not even opted in: a launch that gets the token would read what any session
    // could have written in the home folder (docs/THREAT-MODEL.md#what-a-token-launch-reads).
    if let Some(what) = holds_home(directory, env.home).filter(|_| token.pass && !input.relay_probe)
    {
        return Err(c.refuse(
            Code::HomeDirectory,
            format!(
                "{} is {what}, and a Claude launch that gets the token never runs there (it \
                     would read what any session could have written in it): start it in a \
                     folder below it ({})",
                directory.display(),
                match input.project_from_directory {
                    // `relay sandbox` has no --directory: it runs where it is started.
                    true => "cd there",
                    false => "cd there, or pass --directory",
                },
            ),
        ));
    }
    // The bearer never crosses the network in cleartext
    // (docs/THREAT-MODEL.md#cleartext-routing).
    if let Some(why) = cleartext_routing(s, template, env.relay_routing).filter(|_| token.pass) {
        return Err(c.refuse_sandbox(why));
    }
    Ok(token)
}

/// Where a routing URL sends the bearer, read as Claude Code's URL parser (WHATWG's)
/// reads it.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// Empty or blank: Claude Code takes its default, `https://api.anthropic.com`.
    Default,
    /// `https://`: whatever the host, over TLS.
    Tls,
    /// `http://` to this machine: `127.0.0.0/8`, `[::1]` or `localhost`.
    Loopback,
    /// `http://` to any other host, or one written in a way relay does not read as
    /// loopback (`127.1`, `0x7f.0.0.1`, a percent-encoded or full-width name): the
    /// host, for the refusal.
    Cleartext(String),
    /// No `http` or `https` scheme, or `http` without a host.
    Other,
}

/// How `value` routes the bearer. The value is cleaned as the WHATWG parser cleans it
/// (C0 controls and spaces trimmed at both ends, tabs and newlines dropped anywhere),
/// the scheme read without regard to case, and for `http` the host taken after any
/// slashes or backslashes, up to the first `/`, `\`, `?` or `#`, after the last `@`
/// (user info), before the port. Only a strict `127.x.y.z`, an IPv6 literal of `::1` or
/// `localhost` is loopback, with nothing but digits for a port: anything else that
/// could name another host is [`Route::Cleartext`].
pub fn route(value: &str) -> Route {
    let url: String = value
        .trim_matches(|c: char| c <= ' ')
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    if url.is_empty() {
        return Route::Default;
    }
    let Some((scheme, rest)) = url.split_once(':') else {
        return Route::Other;
    };
    match scheme.to_ascii_lowercase().as_str() {
        "https" => Route::Tls,
        "http" => {
            let authority = rest
                .trim_start_matches(['/', '\\'])
                .split(['/', '\\', '?', '#'])
                .next()
                .unwrap_or_default();
            let host_port = authority.rsplit('@').next().unwrap_or_default();
            if host_port.is_empty() {
                // `http://`, `http://user@`: no host, no URL.
                return Route::Other;
            }
            match loopback(host_port) {
                true => Route::Loopback,
                false => Route::Cleartext(host_port.to_string()),
            }
        }
        _ => Route::Other,
    }
}

/// Whether `host[:port]` names this machine: see [`route`].
fn loopback(host_port: &str) -> bool {
    let (host, port) = match host_port.strip_prefix('[') {
        Some(inner) => match inner.split_once(']') {
            Some((v6, port)) => (v6.parse::<Ipv6Addr>().is_ok_and(|a| a.is_loopback()), port),
            None => return false,
        },
        None => {
            let at = host_port.find(':').unwrap_or(host_port.len());
            let host = &host_port[..at];
            let named = host.eq_ignore_ascii_case("localhost");
            let v4 = host.parse::<Ipv4Addr>().is_ok_and(|a| a.is_loopback());
            (named || v4, &host_port[at..])
        }
    };
    host && (port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit())))
}

/// Why a launch of `template` that gets the token would send it in cleartext, naming
/// the setting: a routing URL ([`ROUTING_URL_VARS`], the template's `env` first, else
/// relay's own environment as the launch inherits it) that is neither `https://` nor
/// `http://` to loopback. `None` when every one is safe or unset. Never the value
/// (user info or a query can hold a secret of its own): the host at most.
pub fn cleartext_routing(
    s: &Settings,
    template: &Template,
    relay_routing: &BTreeMap<String, String>,
) -> Option<String> {
    ROUTING_URL_VARS.iter().find_map(|name| {
        let (value, from) = match template.env.get(*name) {
            Some(v) => {
                let at = s
                    .terminal_templates
                    .iter()
                    .position(|t| t.id == template.id);
                let key = match at {
                    Some(i) => format!(
                        "terminal_templates[{i}].env.{name} in {}",
                        settings::FILE_NAME
                    ),
                    None => format!("the {} template's env.{name}", template.id),
                };
                (v, key)
            }
            None => (
                relay_routing.get(*name)?,
                format!("{name} in relay's own environment (the shell that started relay serve)"),
            ),
        };
        let what = match route(value) {
            Route::Default | Route::Tls | Route::Loopback => return None,
            Route::Cleartext(host) => format!(
                "is plain http:// to {host:?}, a host that is not this machine, so the token \
                 would cross the network in cleartext"
            ),
            Route::Other => "is not an https:// URL".to_string(),
        };
        Some(format!(
            "{from} {what}: a launch that gets the token sends it only over https://, or over \
             http:// to a gateway on this machine (127.0.0.1, [::1] or localhost); change \
             {name} there"
        ))
    })
}

/// The launch's argv: the program found on the launch's `PATH`, Claude's flags, the
/// template's and the request's arguments; for a launch that passes the token, an
/// absolute program and the options that keep project settings out. With it, what to
/// say if a bare name is not found at start.
#[allow(clippy::too_many_arguments)]
fn program_argv(
    input: &LaunchInput,
    kind: SessionKind,
    template: &Template,
    (model, permission_mode): (&Option<String>, &Option<String>),
    resume_session: Option<&str>,
    (home, launch_path_env): (&Path, &OsStr),
    pass_token: bool,
    c: &Check,
) -> Result<(Vec<String>, Option<String>), Refusal> {
    let claude_flags: Vec<String> = model
        .iter()
        .flat_map(|m| ["--model".to_string(), m.clone()])
        .chain(
            permission_mode
                .iter()
                .flat_map(|p| ["--permission-mode".to_string(), p.clone()]),
        )
        .collect();
    let mut argv = vec![which(&template.command, home, launch_path_env)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| template.command.clone())];
    match kind {
        SessionKind::Claude => {
            argv.extend(PROVIDER_ARGS.iter().map(|s| s.to_string()));
            argv.extend(claude_flags);
            // Continue Claude Code's own conversation, by the id it gave (a session
            // that never took a turn has none, and starts a new one).
            if let Some(sid) = resume_session {
                argv.extend(["--resume".to_string(), sid.to_string()]);
            }
        }
        SessionKind::Pty => {
            argv.extend(claude_flags);
            argv.extend(template.args.iter().cloned());
        }
    }
    argv.extend(input.extra_args.iter().cloned());
    if pass_token {
        if !Path::new(&argv[0]).is_absolute() {
            // The shim would look a bare name up again, on the session's PATH, and run
            // a program relay never pinned.
            return Err(c.refuse_sandbox(format!(
                "the Claude program {} was not found on the PATH relay uses ({}); install \
                 Claude Code or set claude_path to its absolute path",
                argv[0],
                launch_path_env.to_string_lossy()
            )));
        }
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
        .then(|| not_found_hint(&argv[0], launch_path_env, &template.id, kind));
    if let Some(probe) = &input.probe_argv {
        argv = probe.clone();
    }
    Ok((argv, unfound))
}

/// The project named (by id, else by name), or the deepest one holding the directory
/// when the request asks for that.
fn find_project<'s>(
    s: &'s Settings,
    input: &LaunchInput,
    home: &Path,
    c: &Check,
) -> Result<&'s Project, Refusal> {
    let found;
    let mut key = input.project.as_deref().filter(|p| !p.is_empty());
    if key.is_none() && input.project_from_directory {
        found = input
            .directory
            .as_deref()
            .and_then(|dir| project_holding(s, &expand_home(dir, home), home));
        match &found {
            Some(id) => key = Some(id.as_str()),
            None => {
                let dir = input.directory.clone().unwrap_or_default();
                return Err(c.refuse(
                    Code::UnknownProject,
                    why_no_project(s, &expand_home(&dir, home), home),
                ));
            }
        }
    }
    let Some(key) = key else {
        return Err(c.refuse(
            Code::ProjectRequired,
            "a project is required (--project ID-OR-NAME)",
        ));
    };
    s.projects
        .iter()
        .find(|p| p.id == key)
        .or_else(|| s.projects.iter().find(|p| p.name == key))
        .ok_or_else(|| {
            c.refuse(
                Code::UnknownProject,
                format!("no project {key:?} in settings"),
            )
        })
}

/// The project folder as set and canonical; it must exist.
fn project_folder(p: &Project, home: &Path, c: &Check) -> Result<(PathBuf, PathBuf), Refusal> {
    let path = expand_home(&p.path, home);
    match std::fs::canonicalize(&path) {
        Ok(real) => Ok((path, real)),
        Err(_) => Err(c.refuse(
            Code::InvalidDirectory,
            format!("project {} folder {} does not exist", p.id, path.display()),
        )),
    }
}

/// The working folder, canonical, and as asked: the request's `directory` (relative to
/// the project folder), else the caller's current folder when it lies inside the
/// project, else the project folder.
fn directory(
    input: &LaunchInput,
    project_path: &Path,
    project_real: &Path,
    env: &Environment,
    c: &Check,
) -> Result<(PathBuf, PathBuf), Refusal> {
    if let Some(dir) = input.directory.as_deref().filter(|s| !s.is_empty()) {
        let p = expand_home(dir, env.home);
        let p = if p.is_absolute() {
            p
        } else {
            project_real.join(p)
        };
        return match std::fs::canonicalize(&p) {
            Ok(real) if real.is_dir() => Ok((real, p)),
            _ => Err(c.refuse(
                Code::InvalidDirectory,
                format!("directory {} is not an existing folder", p.display()),
            )),
        };
    }
    let here = input
        .cwd
        .as_deref()
        .map(Path::new)
        .filter(|p| p.is_absolute())
        .and_then(|p| std::fs::canonicalize(p).ok().map(|real| (real, p)))
        .filter(|(real, _)| real.is_dir() && real.starts_with(project_real));
    Ok(match here {
        Some((real, asked)) => (real, asked.to_path_buf()),
        None => (project_real.to_path_buf(), project_path.to_path_buf()),
    })
}

/// A sandboxed launch's directory is granted read-write: the home folder itself, `/`
/// or a folder above the home folder would hand it every file of the home folder
/// (docs/settings.md, `allow_home_directory`). The refusal says what to do, in the
/// words of how the folder was chosen.
fn home_rule(
    input: &LaunchInput,
    directory: &Path,
    home: &Path,
    (project, template): (&str, &str),
    c: &Check,
) -> Result<(), Refusal> {
    let Some(what) = holds_home(directory, home) else {
        return Ok(());
    };
    let opt_in = format!(
        "or set \"allow_home_directory\": true on project {project} or template {template} to grant it all"
    );
    let here = input
        .cwd
        .as_deref()
        .and_then(|p| std::fs::canonicalize(p).ok())
        .is_some_and(|p| p == directory);
    let asked = input.directory.as_deref().is_some_and(|d| !d.is_empty());
    let (which, todo) = if input.project_from_directory {
        // `relay sandbox` runs where it is started: it has no --directory.
        ("the current folder", "cd into a folder below it")
    } else if here {
        (
            "the current folder",
            "cd into a folder below it or pass --directory",
        )
    } else if asked {
        (
            "directory",
            "start it in a folder below it (cd there, or pass --directory)",
        )
    } else {
        ("the project's folder", "the current folder is not inside the project: cd into a folder below it or pass --directory")
    };
    let message = format!(
        "{which} {} is {what}: a sandboxed launch there could read and write all of it; {todo}, {opt_in}",
        directory.display()
    );
    Err(c.refuse(Code::HomeDirectory, message))
}

/// What `directory` (canonical) is to the home folder when it is the home folder itself
/// or a folder above it; `None` for any other folder.
fn holds_home(directory: &Path, home: &Path) -> Option<&'static str> {
    let home_real = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    if directory == home_real {
        Some("your home folder")
    } else if home_real.starts_with(directory) {
        Some("a folder above your home folder")
    } else {
        None
    }
}

/// The template: `claude-code` for sessions, the named one for terminals; a Claude
/// launch runs [`Settings::claude_program`] whatever the template's `command` says.
fn template(
    s: &Settings,
    kind: SessionKind,
    input: &LaunchInput,
    c: &Check,
) -> Result<Template, Refusal> {
    match kind {
        SessionKind::Claude => {
            if input
                .template
                .as_deref()
                .is_some_and(|t| t != CLAUDE_CODE_TEMPLATE)
            {
                return Err(c.refuse(
                    Code::InvalidRequest,
                    "claude sessions use the claude-code template",
                ));
            }
            Ok(s.claude_template())
        }
        SessionKind::Pty => {
            let Some(tid) = input.template.as_deref().filter(|t| !t.is_empty()) else {
                return Err(c.refuse(
                    Code::TemplateRequired,
                    "a template is required (--template T)",
                ));
            };
            match s.template(tid) {
                Some(t) if t.id == CLAUDE_CODE_TEMPLATE => Ok(Template {
                    command: s.claude_program(),
                    ..t.clone()
                }),
                Some(t) => Ok(t.clone()),
                None => Err(c.refuse(
                    Code::UnknownTemplate,
                    format!("no terminal template {tid:?} in settings"),
                )),
            }
        }
    }
}

/// Model and permission mode of a Claude launch: the request's, else (on a resume) the
/// session's own, else the template's, else for a sandboxed headless session
/// `bypassPermissions`. Other launches pass neither.
fn model_and_mode(
    input: &LaunchInput,
    prior: Option<&Prior>,
    template: &Template,
    kind: SessionKind,
    claude_launch: bool,
    c: &Check,
) -> Result<(Option<String>, Option<String>), Refusal> {
    if let Some(m) = input.model.as_deref().filter(|m| !settings::valid_model(m)) {
        return Err(c.refuse(
            Code::InvalidRequest,
            format!("model {m:?} is not a model name"),
        ));
    }
    if let Some(p) = input
        .permission_mode
        .as_deref()
        .filter(|p| !settings::valid_permission_mode(p))
    {
        return Err(c.refuse(
            Code::InvalidRequest,
            format!("permission mode {p:?} is not one word of letters"),
        ));
    }
    if !claude_launch {
        return Ok((None, None));
    }
    let model = input
        .model
        .clone()
        .or_else(|| prior.and_then(|p| p.model.clone()))
        .or_else(|| non_empty(&template.model).map(str::to_string));
    let mode = input
        .permission_mode
        .clone()
        .or_else(|| prior.and_then(|p| p.permission_mode.clone()))
        .or_else(|| non_empty(&template.permission_mode).map(str::to_string))
        .or_else(|| {
            (kind == SessionKind::Claude).then(|| HEADLESS_SANDBOXED_PERMISSION_MODE.to_string())
        });
    Ok((model, mode))
}

/// The backend and its launcher, which must be an installed file.
fn launcher(s: &Settings, home: &Path, c: &Check) -> Result<(Backend, PathBuf), Refusal> {
    let (backend, launcher) = (s.backend(), s.launcher(home));
    if !launcher.is_file() {
        return Err(c.refuse_sandbox(format!(
            "the {} launcher {} is not installed",
            backend.as_str(),
            launcher.display()
        )));
    }
    Ok((backend, launcher))
}

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
pub fn which(program: &str, home: &Path, path_env: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
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

/// The id of the project whose folder holds `dir`, the deepest when several do.
/// Two projects on one folder hold it both: neither is chosen (each may run on its own
/// token, and a guess would pick an account).
pub(in crate::daemon) fn project_holding(s: &Settings, dir: &Path, home: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let holding: Vec<(&Project, PathBuf)> = s
        .projects
        .iter()
        .filter_map(|p| {
            std::fs::canonicalize(expand_home(&p.path, home))
                .ok()
                .map(|real| (p, real))
        })
        .filter(|(_, real)| dir.starts_with(real))
        .collect();
    let deepest = holding.iter().map(|(_, r)| r.components().count()).max()?;
    let mut at_deepest = holding
        .iter()
        .filter(|(_, r)| r.components().count() == deepest);
    match (at_deepest.next(), at_deepest.next()) {
        (Some((p, _)), None) => Some(p.id.clone()),
        _ => None,
    }
}

/// Why no one project holds `dir` (`relay sandbox`, which runs where it is started and
/// has no `--project`), and what to do: the folder is gone, a project that would hold it
/// has no folder, two hold it from one folder, or none does.
fn why_no_project(s: &Settings, dir: &Path, home: &Path) -> String {
    let shown = dir.display();
    match std::fs::metadata(dir) {
        Err(_) => {
            return format!(
                "the current folder {shown} does not exist (removed, or renamed, since this \
                 shell went there): cd into an existing folder of a project"
            )
        }
        Ok(m) if !m.is_dir() => return format!("{shown} is not a folder"),
        Ok(_) => {}
    }
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let holding: Vec<&str> = s
        .projects
        .iter()
        .filter(|p| {
            std::fs::canonicalize(expand_home(&p.path, home)).is_ok_and(|r| real.starts_with(r))
        })
        .map(|p| p.id.as_str())
        .collect();
    if holding.len() > 1 {
        return format!(
            "projects {} hold {shown} from one folder (each may run on its own token): give \
             them different folders in settings.json",
            holding.join(" and ")
        );
    }
    // Projects that hold nothing at all, for the folder they name is not one.
    let broken: Vec<String> = s
        .projects
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let path = expand_home(&p.path, home);
            let what = match std::fs::metadata(&path) {
                Err(_) => "does not exist",
                Ok(m) if !m.is_dir() => "is not a folder",
                Ok(_) => return None,
            };
            Some(format!(
                "project {}'s folder {} {what} (projects[{i}].path)",
                p.id,
                path.display()
            ))
        })
        .collect();
    let note = match broken.is_empty() {
        true => String::new(),
        false => format!("; {}", broken.join("; ")),
    };
    format!(
        "no project in settings holds {shown}: cd into a project's folder, or add a project \
         whose path holds it to settings.json (`relay status` shows where it is){note}"
    )
}

/// What to do about a program name relay did not find on the launch's `PATH`
/// ([cli.md](../../docs/cli.md#relay-sandbox-template)).
fn not_found_hint(program: &str, path_env: &OsStr, template_id: &str, kind: SessionKind) -> String {
    let fix = if kind == SessionKind::Claude || template_id == CLAUDE_CODE_TEMPLATE {
        "install Claude Code there, or set claude_path in settings.json to its absolute path"
            .to_string()
    } else {
        format!(
            "install it there, or set the {template_id} template's command in settings.json \
             to its absolute path"
        )
    };
    format!(
        "{program} is not on the PATH relay searched ({}); {fix}",
        path_env.to_string_lossy()
    )
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::settings::{BackendChoice, SessionSandbox};
    use std::os::unix::fs::PermissionsExt;

    /// `relay sandbox` where no one project holds the folder: each reason says what to do,
    /// and none names a flag `relay sandbox` does not have.
    #[test]
    fn without_a_project_the_refusal_says_why_and_what_to_do() {
        let w = World::new();
        let mut s = w.settings();
        let home = w.home();
        let why = |s: &Settings, dir: &str| why_no_project(s, &home.join(dir), &home);
        let none = why(&s, "other");
        assert_eq!(
            none,
            format!(
                "no project in settings holds {}: cd into a project's folder, or add a project \
                 whose path holds it to settings.json (`relay status` shows where it is)",
                home.join("other").display()
            )
        );
        let gone = why(&s, "proj/gone");
        assert!(
            gone.contains("does not exist (removed, or renamed"),
            "{gone}"
        );
        std::fs::write(home.join("other/f"), "x").unwrap();
        let file = why(&s, "other/f");
        assert!(file.ends_with("other/f is not a folder"), "{file}");
        // A project whose folder is missing, and one whose folder is a file: named.
        let mut q = s.projects[0].clone();
        (q.id, q.path) = ("q".into(), "~/missing".into());
        let mut r = q.clone();
        (r.id, r.path) = ("r".into(), "~/other/f".into());
        s.projects.extend([q, r]);
        let broken = why(&s, "other");
        assert!(
            broken.starts_with("no project in settings holds")
                && broken.ends_with(&format!(
                    "; project q's folder {} does not exist (projects[1].path); project r's \
                     folder {} is not a folder (projects[2].path)",
                    home.join("missing").display(),
                    home.join("other/f").display()
                )),
            "{broken}"
        );
        // Two projects from one folder.
        s.projects[1].path = "~/proj".into();
        let two = why(&s, "proj/sub");
        assert!(
            two.starts_with("projects p and q hold") && two.contains("different folders"),
            "{two}"
        );
        for text in [none, gone, file, broken, two] {
            assert!(!text.contains("--project"), "{text}");
        }
    }

    /// A home with a project folder `proj` (with `proj/sub`), a folder outside it, a
    /// launcher, and two executable Claude programs.
    struct World {
        dir: tempfile::TempDir,
        /// relay's own routing variables, as `relay serve`'s environment has them.
        relay_routing: BTreeMap<String, String>,
    }

    impl World {
        fn new() -> World {
            let dir = tempfile::tempdir().unwrap();
            for d in ["home/proj/sub", "home/other", "bin", "opt"] {
                std::fs::create_dir_all(dir.path().join(d)).unwrap();
            }
            for f in ["bin/bwrap", "bin/claude", "opt/claude", "bin/sh"] {
                let p = dir.path().join(f);
                std::fs::write(&p, "#!/bin/sh\n").unwrap();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            World {
                dir,
                relay_routing: BTreeMap::new(),
            }
        }

        fn home(&self) -> PathBuf {
            self.dir.path().join("home")
        }

        fn path(&self, rel: &str) -> PathBuf {
            std::fs::canonicalize(self.dir.path()).unwrap().join(rel)
        }

        fn settings(&self) -> Settings {
            let bin = self.path("bin");
            Settings {
                projects: vec![Project {
                    id: "p".into(),
                    name: "Proj".into(),
                    path: "~/proj".into(),
                    allowed_templates: vec!["shell".into(), "claude-code".into(), "open".into()],
                    allow_home_directory: false,
                    claude_token_file: None,
                    account: None,
                }],
                terminal_templates: vec![
                    template("shell", "sh", true),
                    template("open", "sh", false),
                    template("claude-code", "claude", true),
                    template("other", "sh", true),
                ],
                session_sandbox: SessionSandbox {
                    backend: BackendChoice::Bwrap,
                    bwrap_launcher: bin.join("bwrap").to_string_lossy().into_owned(),
                    ..Default::default()
                },
                claude_path: "claude".into(),
                ..Default::default()
            }
        }

        fn decide(&self, s: &Settings, input: &LaunchInput) -> Result<Decision, Refusal> {
            self.decide_with(s, input, false, None)
        }

        fn decide_with(
            &self,
            s: &Settings,
            input: &LaunchInput,
            inside: bool,
            prior: Option<Prior>,
        ) -> Result<Decision, Refusal> {
            let home = self.home();
            let relay_path = self.path("bin").into_os_string();
            authorize(
                s,
                input,
                &Environment {
                    home: &home,
                    relay_path: &relay_path,
                    caller_inside_session: inside,
                    prior,
                    relay_routing: &self.relay_routing,
                },
            )
        }
    }

    fn template(id: &str, command: &str, sandbox: bool) -> Template {
        Template {
            sandbox,
            ..Template::new(id, id, command)
        }
    }

    fn terminal(template: &str) -> LaunchInput {
        LaunchInput {
            kind: Some(SessionKind::Pty),
            project: Some("p".into()),
            template: Some(template.into()),
            ..Default::default()
        }
    }

    fn session() -> LaunchInput {
        LaunchInput {
            kind: Some(SessionKind::Claude),
            project: Some("p".into()),
            ..Default::default()
        }
    }

    fn code(r: Result<Decision, Refusal>) -> (Code, Noted) {
        let r = r.expect_err("refused");
        (r.error.code, r.noted)
    }

    #[test]
    fn a_caller_inside_a_session_is_refused_first() {
        let w = World::new();
        let (c, noted) = code(w.decide_with(&w.settings(), &terminal("shell"), true, None));
        assert_eq!(c, Code::InsideSession);
        assert_eq!(noted.sandboxed, None);
    }

    #[test]
    fn the_project_is_required_known_and_found_by_id_or_name() {
        let w = World::new();
        let s = w.settings();
        let none = LaunchInput {
            project: None,
            ..terminal("shell")
        };
        assert_eq!(code(w.decide(&s, &none)).0, Code::ProjectRequired);
        let unknown = LaunchInput {
            project: Some("nope".into()),
            ..terminal("shell")
        };
        assert_eq!(code(w.decide(&s, &unknown)).0, Code::UnknownProject);
        let by_name = LaunchInput {
            project: Some("Proj".into()),
            ..terminal("shell")
        };
        assert_eq!(w.decide(&s, &by_name).unwrap().project.id, "p");
        let mut gone = s.clone();
        gone.projects[0].path = "~/missing".into();
        let (c, noted) = code(w.decide(&gone, &terminal("shell")));
        assert_eq!(c, Code::InvalidDirectory);
        assert_eq!(noted.project.as_deref(), Some("p"));
    }

    #[test]
    fn the_project_can_be_the_one_holding_the_directory() {
        let w = World::new();
        let s = w.settings();
        let input = LaunchInput {
            project: None,
            project_from_directory: true,
            directory: Some(w.path("home/proj/sub").to_string_lossy().into_owned()),
            ..terminal("shell")
        };
        let d = w.decide(&s, &input).unwrap();
        assert_eq!(d.project.id, "p");
        assert_eq!(d.directory, w.path("home/proj/sub"));
        let outside = LaunchInput {
            directory: Some(w.path("home/other").to_string_lossy().into_owned()),
            ..input
        };
        assert_eq!(code(w.decide(&s, &outside)).0, Code::UnknownProject);
    }

    /// A project whose folder is the home folder (the first-run `home`) or `/`: its
    /// sandboxed launches run below that folder, never in it or above the home folder,
    /// unless the project or the template opts in; an unsandboxed one and relay's own
    /// probes are not held to it.
    #[test]
    fn a_sandboxed_launch_never_runs_in_the_home_folder_or_above_it_unasked() {
        let w = World::new();
        let mut s = w.settings();
        s.projects[0].path = "~".into();
        let home = w.path("home");
        let refused = |s: &Settings, input: &LaunchInput| {
            let r = w.decide(s, input).expect_err("refused");
            assert_eq!(r.error.code, Code::HomeDirectory, "{}", r.error.message);
            r.error.message
        };
        // No directory, the caller outside the project: the project's folder is home.
        let msg = refused(&s, &terminal("shell"));
        assert!(
            msg.contains("the project's folder") && msg.contains("your home folder"),
            "{msg}"
        );
        assert!(msg.contains("allow_home_directory"), "{msg}");
        // Asked for by --directory, or the caller standing in it.
        let asked = LaunchInput {
            directory: Some("~".into()),
            ..terminal("shell")
        };
        assert!(refused(&s, &asked).starts_with("directory "));
        let here = LaunchInput {
            cwd: Some(home.to_string_lossy().into_owned()),
            ..terminal("shell")
        };
        let msg = refused(&s, &here);
        assert!(msg.starts_with("the current folder "), "{msg}");
        assert!(msg.contains("or pass --directory"), "{msg}");
        // `relay sandbox` has no --directory: its advice does not name one.
        let sandbox = LaunchInput {
            project: None,
            project_from_directory: true,
            directory: Some(home.to_string_lossy().into_owned()),
            ..terminal("shell")
        };
        let msg = refused(&s, &sandbox);
        assert!(msg.starts_with("the current folder "), "{msg}");
        assert!(
            msg.contains("cd into a folder below it") && !msg.contains("--directory"),
            "{msg}"
        );
        let msg = refused(&s, &session());
        assert!(msg.contains("pass --directory"), "{msg}");
        let claude_here = LaunchInput {
            template: Some("claude-code".into()),
            ..sandbox
        };
        let msg = refused(&s, &claude_here);
        assert!(msg.contains("cd ") && !msg.contains("--directory"), "{msg}");
        // A folder above home, `/` among them, in a project that holds it.
        let mut root = s.clone();
        root.projects[0].path = "/".into();
        let slash = LaunchInput {
            directory: Some("/".into()),
            ..terminal("shell")
        };
        assert!(refused(&root, &slash).contains("a folder above your home folder"));
        let above = LaunchInput {
            directory: Some(w.path("").to_string_lossy().into_owned()),
            ..terminal("shell")
        };
        refused(&root, &above);
        // Below home: fine, from --directory or from the caller's folder.
        let below = LaunchInput {
            directory: Some("~/proj".into()),
            ..terminal("shell")
        };
        assert_eq!(w.decide(&s, &below).unwrap().directory, w.path("home/proj"));
        let from_cwd = LaunchInput {
            cwd: Some(w.path("home/proj/sub").to_string_lossy().into_owned()),
            ..terminal("shell")
        };
        assert_eq!(
            w.decide(&s, &from_cwd).unwrap().directory,
            w.path("home/proj/sub")
        );
        // Unsandboxed, relay's own probe, or opted in by the project or the template.
        assert!(w.decide(&s, &terminal("open")).is_ok());
        let probe = LaunchInput {
            relay_probe: true,
            ..terminal("shell")
        };
        assert!(w.decide(&s, &probe).is_ok());
        let mut by_project = s.clone();
        by_project.projects[0].allow_home_directory = true;
        assert_eq!(w.decide(&by_project, &asked).unwrap().directory, home);
        let mut by_template = s.clone();
        by_template.terminal_templates[0].allow_home_directory = true;
        assert_eq!(w.decide(&by_template, &asked).unwrap().directory, home);
        refused(&by_template, &session());
    }

    #[test]
    fn the_directory_stays_inside_the_project() {
        let w = World::new();
        let s = w.settings();
        let d = w.decide(&s, &terminal("shell")).unwrap();
        assert_eq!(d.directory, w.path("home/proj"));
        let relative = LaunchInput {
            directory: Some("sub".into()),
            ..terminal("shell")
        };
        assert_eq!(
            w.decide(&s, &relative).unwrap().directory,
            w.path("home/proj/sub")
        );
        let outside = LaunchInput {
            directory: Some("~/other".into()),
            ..terminal("shell")
        };
        let (c, noted) = code(w.decide(&s, &outside));
        assert_eq!(c, Code::DirectoryOutsideProject);
        assert_eq!(
            noted.directory,
            Some(w.path("home/other").to_string_lossy().into_owned())
        );
        let dotdot = LaunchInput {
            directory: Some("sub/../..".into()),
            ..terminal("shell")
        };
        assert_eq!(code(w.decide(&s, &dotdot)).0, Code::DirectoryOutsideProject);
        let missing = LaunchInput {
            directory: Some("nope".into()),
            ..terminal("shell")
        };
        assert_eq!(code(w.decide(&s, &missing)).0, Code::InvalidDirectory);
    }

    #[test]
    fn without_a_directory_it_starts_in_the_current_folder_inside_the_project_else_the_project() {
        let w = World::new();
        let s = w.settings();
        let here = |p: &str| LaunchInput {
            cwd: Some(w.path(p).to_string_lossy().into_owned()),
            ..terminal("shell")
        };
        assert_eq!(
            w.decide(&s, &here("home/proj/sub")).unwrap().directory,
            w.path("home/proj/sub")
        );
        assert_eq!(
            w.decide(&s, &here("home/other")).unwrap().directory,
            w.path("home/proj")
        );
        let relative = LaunchInput {
            cwd: Some("sub".into()),
            ..terminal("shell")
        };
        assert_eq!(
            w.decide(&s, &relative).unwrap().directory,
            w.path("home/proj")
        );
        // An explicit directory wins over the current folder.
        let both = LaunchInput {
            directory: Some("sub".into()),
            ..here("home/proj")
        };
        assert_eq!(
            w.decide(&s, &both).unwrap().directory,
            w.path("home/proj/sub")
        );
    }

    #[test]
    fn the_template_is_required_known_and_allowed() {
        let w = World::new();
        let s = w.settings();
        let none = LaunchInput {
            template: None,
            ..terminal("shell")
        };
        assert_eq!(code(w.decide(&s, &none)).0, Code::TemplateRequired);
        assert_eq!(
            code(w.decide(&s, &terminal("nope"))).0,
            Code::UnknownTemplate
        );
        let (c, noted) = code(w.decide(&s, &terminal("other")));
        assert_eq!(c, Code::TemplateNotAllowed);
        assert_eq!(noted.template.as_deref(), Some("other"));
        let wrong = LaunchInput {
            template: Some("shell".into()),
            ..session()
        };
        assert_eq!(code(w.decide(&s, &wrong)).0, Code::InvalidRequest);
    }

    #[test]
    fn sessions_are_always_sandboxed_terminals_unless_the_template_says_no() {
        let w = World::new();
        let mut s = w.settings();
        s.terminal_templates[2].sandbox = false;
        let d = w.decide(&s, &session()).unwrap();
        assert!(d.sandboxed && d.claude_launch);
        assert_eq!(d.sandbox, Some((Backend::Bwrap, w.path("bin/bwrap"))));
        let open = w.decide(&s, &terminal("open")).unwrap();
        assert!(!open.sandboxed && open.sandbox.is_none() && !open.claude_launch);
        // No launcher: sandboxed launches are refused, unsandboxed ones are not.
        s.session_sandbox.bwrap_launcher = w.path("bin/none").to_string_lossy().into_owned();
        let (c, noted) = code(w.decide(&s, &terminal("shell")));
        assert_eq!(c, Code::SandboxUnavailable);
        assert_eq!(noted.sandboxed, Some(true));
        assert!(w.decide(&s, &terminal("open")).is_ok());
    }

    #[test]
    fn every_claude_launch_runs_the_one_claude_program() {
        let w = World::new();
        let mut s = w.settings();
        // Default claude_path: the template's command, found on the PATH.
        s.terminal_templates[2].command = w.path("opt/claude").to_string_lossy().into_owned();
        let a = w.decide(&s, &session()).unwrap();
        let b = w.decide(&s, &terminal("claude-code")).unwrap();
        assert_eq!(a.argv[0], w.path("opt/claude").to_string_lossy());
        assert_eq!(b.argv[0], a.argv[0]);
        // claude_path set: it wins for both kinds.
        s.claude_path = w.path("bin/claude").to_string_lossy().into_owned();
        let a = w.decide(&s, &session()).unwrap();
        let b = w.decide(&s, &terminal("claude-code")).unwrap();
        assert_eq!(a.argv[0], w.path("bin/claude").to_string_lossy());
        assert_eq!(b.argv[0], a.argv[0]);
        // Neither: `claude` on relay's PATH.
        let mut plain = w.settings();
        plain.terminal_templates.retain(|t| t.id != "claude-code");
        assert_eq!(
            w.decide(&plain, &session()).unwrap().argv[0],
            w.path("bin/claude").to_string_lossy()
        );
        assert_eq!(&a.argv[1..1 + PROVIDER_ARGS.len()], PROVIDER_ARGS);
    }

    /// Opted in or not, a launch that gets the token never runs in the home folder or
    /// above it; one below it, or one without the token, does.
    #[test]
    fn a_token_launch_never_runs_in_the_home_folder_even_opted_in() {
        let w = World::new();
        let mut s = w.settings();
        s.projects[0].path = "~".into();
        s.projects[0].allow_home_directory = true;
        s.claude_token_file = "~/.token".into();
        let r = w.decide(&s, &session()).expect_err("refused");
        assert_eq!(r.error.code, Code::HomeDirectory);
        assert!(
            r.error.message.contains("gets the token"),
            "{}",
            r.error.message
        );
        let below = LaunchInput {
            directory: Some("~/proj".into()),
            ..session()
        };
        assert!(w.decide(&s, &below).unwrap().token.pass);
        // The shell the opt-in is for still runs in the home folder.
        assert_eq!(
            w.decide(&s, &terminal("shell")).unwrap().directory,
            w.path("home")
        );
        s.claude_token_file.clear();
        assert!(w.decide(&s, &session()).is_ok());
    }

    #[test]
    fn the_token_goes_to_sandboxed_claude_launches_only() {
        let w = World::new();
        let mut s = w.settings();
        s.claude_token_file = "~/.token".into();
        let token = Some(w.home().join(".token"));
        let a = w.decide(&s, &session()).unwrap();
        assert_eq!(
            a.token,
            TokenDecision {
                path: token.clone(),
                pass: true,
                deny: token.iter().cloned().collect(),
            }
        );
        assert_eq!(&a.argv[1..4], CLAUDE_TOKEN_LAUNCH_ARGS);
        let shell = w.decide(&s, &terminal("shell")).unwrap();
        assert_eq!(
            shell.token,
            TokenDecision {
                path: token.clone(),
                pass: false,
                deny: token.iter().cloned().collect(),
            }
        );
        assert!(!shell.argv.iter().any(|a| a == "--strict-mcp-config"));
        // A terminal of the claude-code template is a Claude launch: it gets the token.
        let pty = w.decide(&s, &terminal("claude-code")).unwrap();
        assert!(pty.claude_launch && pty.token.pass);
        assert_eq!(&pty.argv[1..4], CLAUDE_TOKEN_LAUNCH_ARGS);
        let probe = LaunchInput {
            probe_argv: Some(vec!["/bin/true".into()]),
            ..terminal("claude-code")
        };
        let p = w.decide(&s, &probe).unwrap();
        assert!(!p.token.pass);
        assert_eq!(p.argv, vec!["/bin/true".to_string()]);
        let mut open = s.clone();
        open.terminal_templates[2].sandbox = false;
        assert!(
            !w.decide(&open, &terminal("claude-code"))
                .unwrap()
                .token
                .pass
        );
        // Unset: nothing to pass or deny.
        let none = w.decide(&w.settings(), &session()).unwrap();
        assert_eq!(none.token, TokenDecision::default());
    }

    #[test]
    fn a_project_runs_on_its_own_token_and_every_configured_one_is_denied() {
        let w = World::new();
        let mut s = w.settings();
        s.claude_token_file = "~/.token".into();
        s.projects[0].claude_token_file = Some("~/.work/token".into());
        let (top, own) = (w.home().join(".token"), w.home().join(".work/token"));
        let a = w.decide(&s, &session()).unwrap();
        assert_eq!(
            a.token,
            TokenDecision {
                path: Some(own.clone()),
                pass: true,
                deny: vec![top.clone(), own.clone()],
            }
        );
        // A token-less shell of the project is denied both, and passes neither.
        let shell = w.decide(&s, &terminal("shell")).unwrap();
        assert!(!shell.token.pass);
        assert_eq!(shell.token.deny, vec![top.clone(), own.clone()]);
        // "" is no token for this project: nothing passed, the others still denied.
        s.projects[0].claude_token_file = Some(String::new());
        let none = w.decide(&s, &session()).unwrap();
        assert_eq!(
            none.token,
            TokenDecision {
                path: None,
                pass: false,
                deny: vec![top.clone()],
            }
        );
        assert!(!none.argv.iter().any(|a| a == "--strict-mcp-config"));
        // Another project's bad value refuses every sandboxed launch, naming its key:
        // no sandbox could be sure to hide that file.
        s.projects[0].claude_token_file = None;
        let mut other = s.projects[0].clone();
        other.id = "p2".into();
        other.claude_token_file = Some("work/token".into());
        s.projects.push(other);
        let r = w.decide(&s, &session()).expect_err("refused");
        assert_eq!(r.error.code, Code::SandboxUnavailable);
        let msg = &r.error.message;
        assert!(msg.contains("projects[1].claude_token_file"), "{msg}");
        assert!(w.decide(&s, &terminal("open")).is_ok());
    }

    #[test]
    fn a_malformed_token_setting_refuses_sandboxed_launches_only() {
        let w = World::new();
        let mut s = w.settings();
        s.claude_token_file = "relative/token".into();
        assert_eq!(
            code(w.decide(&s, &terminal("shell"))).0,
            Code::SandboxUnavailable
        );
        assert_eq!(code(w.decide(&s, &session())).0, Code::SandboxUnavailable);
        assert!(w.decide(&s, &terminal("open")).is_ok());
    }

    #[test]
    fn a_token_launch_runs_an_absolute_program_or_none() {
        let w = World::new();
        let mut s = w.settings();
        s.claude_token_file = "~/.token".into();
        s.claude_path = "no-such-claude".into();
        let r = w.decide(&s, &session()).expect_err("refused");
        assert_eq!(r.error.code, Code::SandboxUnavailable);
        assert!(
            r.error.message.contains("no-such-claude"),
            "{}",
            r.error.message
        );
        // Without the token the name stays, with a hint for a failed start.
        s.claude_token_file.clear();
        let d = w.decide(&s, &session()).unwrap();
        assert_eq!(d.argv[0], "no-such-claude");
        assert!(d.unfound.unwrap().contains("claude_path"));
        // An absolute program, or a probe whatever its template names, needs no hint.
        s.claude_path = w.path("bin/claude").to_string_lossy().into_owned();
        assert_eq!(w.decide(&s, &session()).unwrap().unfound, None);
        s.terminal_templates[0].command = "no-such-shell".into();
        let probe = LaunchInput {
            probe_argv: Some(vec!["/bin/true".into()]),
            ..terminal("shell")
        };
        assert_eq!(w.decide(&s, &probe).unwrap().unfound, None);
        assert!(w.decide(&s, &terminal("shell")).unwrap().unfound.is_some());
    }

    #[test]
    fn only_the_claude_code_template_runs_the_claude_program_and_a_file_is_no_directory() {
        let w = World::new();
        let mut s = w.settings();
        s.claude_path = w.path("bin/claude").to_string_lossy().into_owned();
        s.terminal_templates[0].command = "/bin/sh".into();
        assert_eq!(w.decide(&s, &terminal("shell")).unwrap().argv[0], "/bin/sh");
        assert_eq!(
            w.decide(&s, &terminal("claude-code")).unwrap().argv[0],
            w.path("bin/claude").to_string_lossy()
        );
        std::fs::write(w.path("home/proj/file"), "x").unwrap();
        let file = LaunchInput {
            directory: Some("file".into()),
            ..terminal("shell")
        };
        assert_eq!(code(w.decide(&s, &file)).0, Code::InvalidDirectory);
    }

    #[test]
    fn model_and_mode_come_from_the_request_then_the_session_then_the_template() {
        let w = World::new();
        let mut s = w.settings();
        let flags = |d: &Decision| (d.model.clone(), d.permission_mode.clone());
        let d = w.decide(&s, &session()).unwrap();
        assert_eq!(
            flags(&d),
            (None, Some(HEADLESS_SANDBOXED_PERMISSION_MODE.into()))
        );
        s.terminal_templates[2].model = "opus".into();
        s.terminal_templates[2].permission_mode = "plan".into();
        let d = w.decide(&s, &session()).unwrap();
        assert_eq!(flags(&d), (Some("opus".into()), Some("plan".into())));
        let prior = Prior {
            model: Some("haiku".into()),
            permission_mode: Some("acceptEdits".into()),
            claude: Some(ClaudeInit {
                session_id: Some("--dangerously-skip-permissions".into()),
                ..Default::default()
            }),
        };
        let resume = LaunchInput {
            resume_id: Some("s-1".into()),
            ..session()
        };
        let d = w
            .decide_with(&s, &resume, false, Some(prior.clone()))
            .unwrap();
        assert_eq!(
            flags(&d),
            (Some("haiku".into()), Some("acceptEdits".into()))
        );
        // A session id that reads as a flag is never passed to --resume.
        assert!(d.resume_session.is_none() && !d.argv.iter().any(|a| a == "--resume"));
        let asked = LaunchInput {
            model: Some("sonnet".into()),
            permission_mode: Some("manual".into()),
            ..resume
        };
        let d = w.decide_with(&s, &asked, false, Some(prior)).unwrap();
        assert_eq!(flags(&d), (Some("sonnet".into()), Some("manual".into())));
        let bad = LaunchInput {
            model: Some("-x".into()),
            ..session()
        };
        assert_eq!(code(w.decide(&s, &bad)).0, Code::InvalidRequest);
        // A plain terminal gets neither.
        let shell = w.decide(&s, &terminal("shell")).unwrap();
        assert_eq!(flags(&shell), (None, None));
    }

    #[test]
    fn which_takes_a_path_as_is_and_a_name_only_as_an_executable_file_on_path() {
        let w = World::new();
        let dir = w.path("which");
        std::fs::create_dir_all(dir.join("a/tool")).unwrap();
        std::fs::create_dir_all(dir.join("b")).unwrap();
        std::fs::create_dir_all(dir.join("c")).unwrap();
        std::fs::write(dir.join("b/tool"), "x").unwrap();
        std::fs::set_permissions(dir.join("b/tool"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        std::fs::write(dir.join("c/tool"), "x").unwrap();
        std::fs::set_permissions(dir.join("c/tool"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        // A folder of the name and a file without an execute bit are passed over.
        let path = std::env::join_paths([dir.join("a"), dir.join("b"), dir.join("c")]).unwrap();
        assert_eq!(which("tool", &w.home(), &path), Some(dir.join("c/tool")));
        let path = std::env::join_paths([dir.join("a"), dir.join("b")]).unwrap();
        assert_eq!(which("tool", &w.home(), &path), None);
        assert_eq!(
            which(dir.join("b/tool").to_str().unwrap(), &w.home(), &path),
            Some(dir.join("b/tool"))
        );
    }

    #[test]
    fn a_claude_session_id_is_a_letter_or_digit_then_the_safe_characters() {
        for ok in ["a", "0f3c-9a_b.c", &"a".repeat(128)] {
            assert!(valid_claude_session_id(ok), "{ok}");
        }
        for bad in ["", "-a", ".a", "_a", "a/b", "a b", "../x", &"a".repeat(129)] {
            assert!(!valid_claude_session_id(bad), "{bad}");
        }
    }

    /// Routing URLs Claude Code reads as blank, and so as its default.
    const BLANK: &[&str] = &["", "   ", "\t\n", "\u{0} \u{1f}"];

    /// Routing URLs that go over TLS, whatever they name.
    const TLS: &[&str] = &[
        "https://api.example.com",
        "HTTPS://gw.example",
        "HttpS://gw.example/v1",
        " https://gw.example ",
        "\u{1}https://gw.example\u{0}",
        "ht\ntps://gw.example",
        "ht\rtps://gw.example",
        "ht\ttps://gw.example",
        "https:gw.example",
        "https://127.0.0.1.evil.example",
    ];

    /// Plain `http://` routing URLs to this machine, however written.
    const LOOPBACK: &[&str] = &[
        "http://127.0.0.1:4000",
        "http://127.0.0.1",
        "http://127.255.1.2:80/v1",
        "http://localhost:4000/v1",
        "http://LocalHost",
        "http://[::1]:4000",
        "http://[::1]",
        "http://[0:0:0:0:0:0:0:1]/",
        "HTTP://127.0.0.1:4000",
        "HtTp://localhost",
        " http://127.0.0.1:4000 ",
        "\u{1}http://127.0.0.1:4000\u{0}",
        "http://127.0.0.1:40\r\n00",
        "http://127.0.0.\t1:4000",
        "http://user:pw@127.0.0.1:4000",
        "http://evil.example@127.0.0.1:4000",
        "http:127.0.0.1:4000",
        "http:/127.0.0.1:4000",
        "http:\\\\127.0.0.1:4000\\v1",
        "http://127.0.0.1:",
        "http://127.0.0.1?x=1",
        "http://127.0.0.1#f",
        "http://localhost/path@evil.example",
    ];

    /// Plain `http://` routing URLs that could reach another host, each with the host
    /// the refusal names.
    const CLEARTEXT: &[(&str, &str)] = &[
        ("http://gw.example.com:4000/v1", "gw.example.com:4000"),
        ("HTTP://EVIL.EXAMPLE", "EVIL.EXAMPLE"),
        ("ht\ttp://gw.example", "gw.example"),
        (" http://gw.example ", "gw.example"),
        ("http://10.0.0.1:4000", "10.0.0.1:4000"),
        ("http://128.0.0.1", "128.0.0.1"),
        ("http://126.255.255.255", "126.255.255.255"),
        ("http://0.0.0.0:4000", "0.0.0.0:4000"),
        ("http://127.0.0.1.evil.example", "127.0.0.1.evil.example"),
        ("http://127.0.0.1\t.evil.example", "127.0.0.1.evil.example"),
        (
            "http://127.0.0.1%2eevil.example",
            "127.0.0.1%2eevil.example",
        ),
        ("http://127.0.0.1@evil.example", "evil.example"),
        ("http://127.0.0.1:4000@evil.example/", "evil.example"),
        ("http://localhost@evil.example", "evil.example"),
        ("http://[::1]@evil.example", "evil.example"),
        ("http://localhost.evil.example", "localhost.evil.example"),
        ("http://localhostx", "localhostx"),
        ("http://evil.example\\@127.0.0.1", "evil.example"),
        ("http://evil.example#@127.0.0.1", "evil.example"),
        ("http://evil.example?@127.0.0.1", "evil.example"),
        ("http://evil.example/@127.0.0.1", "evil.example"),
        (
            "http://127.0.0.1:80.evil.example",
            "127.0.0.1:80.evil.example",
        ),
        ("http://127.0.0.1:4000x", "127.0.0.1:4000x"),
        ("http://[::1].evil.example", "[::1].evil.example"),
        ("http://[::1]x:4000", "[::1]x:4000"),
        ("http://[::1", "[::1"),
        ("http://[::2]:4000", "[::2]:4000"),
        ("http://[::ffff:127.0.0.1]", "[::ffff:127.0.0.1]"),
        // Loopback to WHATWG, but not in a form relay reads: refused, not guessed.
        ("http://127.1", "127.1"),
        ("http://2130706433", "2130706433"),
        ("http://%6cocalhost", "%6cocalhost"),
        // Any number of slashes before the host, as WHATWG skips them.
        ("http:///v1", "v1"),
    ];

    /// Routing URLs that are neither `http` nor `https` with a host.
    const OTHER: &[&str] = &[
        "ftp://gw.example",
        "ws://127.0.0.1:4000",
        "xhttp://127.0.0.1",
        "httpx://127.0.0.1",
        "127.0.0.1:4000",
        "localhost",
        "gw.example",
        "http://",
        "http:",
        "http://user@",
    ];

    /// The routing URL as Claude Code's parser (WHATWG's) reads it: blank is the
    /// default, `https://` is TLS, `http://` is loopback only for `127.x.y.z`, `[::1]` and
    /// `localhost` after the cleaning, the slashes, the user info and the port; every
    /// other spelling that could reach another host is cleartext, and one relay does
    /// not read as loopback is refused rather than guessed.
    #[test]
    fn a_routing_url_is_read_as_claude_codes_parser_reads_it() {
        for blank in BLANK {
            assert_eq!(route(blank), Route::Default, "{blank:?}");
        }
        for tls in TLS {
            assert_eq!(route(tls), Route::Tls, "{tls:?}");
        }
        for local in LOOPBACK {
            assert_eq!(route(local), Route::Loopback, "{local:?}");
        }
        for (remote, host) in CLEARTEXT {
            assert_eq!(
                route(remote),
                Route::Cleartext(host.to_string()),
                "{remote:?}"
            );
        }
        for other in OTHER {
            assert_eq!(route(other), Route::Other, "{other:?}");
        }
    }

    /// The attack: a token launch whose routing URL is plain `http://` to another host
    /// would hand the bearer to every hop on the way. Refused, naming the setting and
    /// never the value; a loopback gateway, `https://`, or a launch without the token
    /// goes on.
    #[test]
    fn a_token_launch_routed_over_cleartext_http_to_a_remote_host_is_refused() {
        let mut w = World::new();
        let mut s = w.settings();
        s.claude_token_file = "~/.token".into();
        let env = |s: &mut Settings, name: &str, v: &str| {
            s.terminal_templates[2].env.insert(name.into(), v.into());
        };
        env(
            &mut s,
            "ANTHROPIC_BASE_URL",
            "http://user:secret-pw@gw.example.com:4000/v1?key=secret-q",
        );
        for input in [session(), terminal("claude-code")] {
            let r = w.decide(&s, &input).expect_err("refused");
            assert_eq!(r.error.code, Code::SandboxUnavailable);
            let msg = &r.error.message;
            assert!(
                msg.starts_with("terminal_templates[2].env.ANTHROPIC_BASE_URL in settings.json is plain http:// to \"gw.example.com:4000\""),
                "{msg}"
            );
            assert!(
                msg.contains("cleartext") && msg.contains("https://"),
                "{msg}"
            );
            assert!(!msg.contains("secret"), "the value leaked: {msg}");
            assert_eq!(
                r.noted,
                Noted {
                    project: Some("p".into()),
                    directory: Some(w.path("home/proj").to_string_lossy().into_owned()),
                    template: Some("claude-code".into()),
                    sandboxed: Some(true),
                }
            );
        }
        // The same template without the token, a shell with the same env, the
        // doctor's canary: nothing to send.
        let mut shell = s.clone();
        shell.terminal_templates[0].env = s.terminal_templates[2].env.clone();
        assert!(w.decide(&shell, &terminal("shell")).is_ok());
        let probe = LaunchInput {
            probe_argv: Some(vec!["/bin/true".into()]),
            ..terminal("claude-code")
        };
        assert!(w.decide(&s, &probe).is_ok());
        let mut no_token = s.clone();
        no_token.claude_token_file.clear();
        assert!(w.decide(&no_token, &session()).is_ok());
        // A loopback gateway, TLS, or blank (Claude Code's default) goes on.
        for ok in [
            "http://127.0.0.1:4000",
            "http://[::1]:4000",
            "http://localhost:4000",
            "https://gw.example.com",
            "",
        ] {
            env(&mut s, "ANTHROPIC_BASE_URL", ok);
            assert!(w.decide(&s, &session()).unwrap().token.pass, "{ok}");
        }
        // Not a URL Claude Code could send anything safe to.
        env(&mut s, "ANTHROPIC_BASE_URL", "gw.example.com:4000");
        let msg = w.decide(&s, &session()).expect_err("refused").error.message;
        assert!(
            msg.contains("ANTHROPIC_BASE_URL in settings.json is not an https:// URL"),
            "{msg}"
        );
        // The other routing variable, checked the same.
        env(&mut s, "ANTHROPIC_BASE_URL", "https://gw.example.com");
        env(&mut s, "CLAUDE_CODE_API_BASE_URL", "http://10.0.0.1:4000");
        let msg = w.decide(&s, &session()).expect_err("refused").error.message;
        assert!(
            msg.starts_with("terminal_templates[2].env.CLAUDE_CODE_API_BASE_URL in settings.json is plain http:// to \"10.0.0.1:4000\""),
            "{msg}"
        );
        assert!(
            msg.ends_with("change CLAUDE_CODE_API_BASE_URL there"),
            "{msg}"
        );
        s.terminal_templates[2].env.clear();
        assert!(w.decide(&s, &session()).is_ok());
        // relay's own environment, which the launch inherits where the template sets
        // nothing; the template's value, even blank, wins over it.
        w.relay_routing
            .insert("ANTHROPIC_BASE_URL".into(), "http://gw.example.com".into());
        let msg = w.decide(&s, &session()).expect_err("refused").error.message;
        assert!(
            msg.starts_with("ANTHROPIC_BASE_URL in relay's own environment (the shell that started relay serve) is plain http:// to \"gw.example.com\""),
            "{msg}"
        );
        assert!(w.decide(&s, &terminal("shell")).is_ok());
        for over in ["", "https://gw.example.com", "http://127.0.0.1:4000"] {
            env(&mut s, "ANTHROPIC_BASE_URL", over);
            assert!(w.decide(&s, &session()).is_ok(), "{over:?}");
        }
        w.relay_routing
            .insert("ANTHROPIC_BASE_URL".into(), "http://127.0.0.1:9".into());
        s.terminal_templates[2].env.clear();
        assert!(w.decide(&s, &session()).is_ok());
    }

    /// The message names the key where the template is in the settings; the built-in
    /// `claude-code` template (none in the settings) names itself.
    #[test]
    fn the_cleartext_refusal_names_the_templates_own_key() {
        let w = World::new();
        let s = w.settings();
        let mut t = template("claude-code", "claude", true);
        t.env
            .insert("ANTHROPIC_BASE_URL".into(), "http://gw.example".into());
        let msg = cleartext_routing(&s, &t, &w.relay_routing).unwrap();
        assert!(
            msg.starts_with("terminal_templates[2].env.ANTHROPIC_BASE_URL in settings.json "),
            "{msg}"
        );
        t.id = "built-in".into();
        let msg = cleartext_routing(&s, &t, &w.relay_routing).unwrap();
        assert!(
            msg.starts_with("the built-in template's env.ANTHROPIC_BASE_URL is plain"),
            "{msg}"
        );
        t.env.clear();
        assert_eq!(cleartext_routing(&s, &t, &w.relay_routing), None);
    }

    #[test]
    fn the_not_found_hint_names_the_setting_to_change() {
        let claude = "install Claude Code there, or set claude_path in settings.json";
        let path = OsStr::new("/usr/bin:/bin");
        for (template, kind, says_claude) in [
            ("claude-code", SessionKind::Claude, true),
            ("claude-code", SessionKind::Pty, true),
            ("shell", SessionKind::Claude, true),
            ("shell", SessionKind::Pty, false),
        ] {
            let hint = not_found_hint("prog", path, template, kind);
            assert!(
                hint.starts_with("prog is not on the PATH relay searched (/usr/bin:/bin); "),
                "{hint}"
            );
            assert_eq!(
                hint.contains(claude),
                says_claude,
                "{template} {kind:?}: {hint}"
            );
            if !says_claude {
                assert!(hint.contains("set the shell template's command"), "{hint}");
            }
        }
    }
}

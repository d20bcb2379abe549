//! A launch carries out its plan: effects only. The plan (`crate::daemon::plan`) decided
//! everything first; `relay sandbox explain` shows that same plan. One path serves
//! sessions, terminals, resume and `relay sandbox`. Every refusal has a code, a
//! message, an event and a `session_launch` audit row.
//!
//! The steps, in order:
//! 1. Read the settings, take the daemon's facts once, and [`plan`] the launch.
//! 2. Read the token, for a launch that passes it (before any side effect).
//! 3. Note the launch in the ledger folder, then make its temp folder.
//! 4. Seed Claude's config folder and, for a token launch, check the Claude settings it
//!    will see and make its home (`claude_config`, `claude_settings`, `claude_home`).
//! 5. Check the launch's own folders are what the plan said, and make what the plan
//!    lists, following no link (`made`).
//! 6. Start the egress proxy.
//! 7. Render and write the profile.
//! 8. Hand over the identity secret and call the host.
//! 9. Write the audit row (a row that cannot be written stops the session and refuses
//!    the launch), then the record on file, the marker gone, and 201
//!    (docs/architecture.md#the-ledger-file).

pub mod claude_config;
pub mod claude_home;
pub mod claude_settings;
pub mod made;

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::daemon::error::{disk_full, ApiError};

use crate::daemon::egress::Rules;
pub use crate::daemon::plan::authorize::{
    valid_claude_session_id, which, LaunchInput, CLAUDE_TOKEN_LAUNCH_ARGS,
    HEADLESS_SANDBOXED_PERMISSION_MODE, PROVIDER_ARGS,
};
use crate::daemon::plan::authorize::{Decision, Noted};
use crate::daemon::plan::facts::{Facts, Names};
use crate::daemon::plan::{plan, Plan, Sandboxed};
use crate::daemon::records::journal::{AuditRow, Event};
use crate::daemon::session::VERSION;
use crate::daemon::settings::{self, Settings};
use crate::daemon::{Daemon, Entry, EntryState, Reach, Record};
use crate::protocol::{
    Backend, EnvAllowlist, IdentityLaunch, LaunchRequest, LaunchResponse, ProjectRef,
    SandboxLaunch, Secret, SessionKind, HOST_PROTOCOL_VERSION,
};
use crate::sandbox;
use crate::wire::{Code, Outcome};

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
    /// The id whose temp dir (`<tmp>/relay-<id>`) this attempt made (a refusal removes
    /// it).
    temp_dir: Option<String>,
    /// The id whose launch marker this attempt wrote (`Store::mark_launching`): a
    /// refusal removes it once the folder is gone.
    marked: Option<String>,
    /// The id whose egress proxy this attempt started (a refusal stops it).
    egress: Option<String>,
    /// Its claim on the folders relay made (`records::made_folders`): a refusal lets go.
    made: Option<String>,
}

impl Attempt<'_> {
    fn refuse(&mut self, e: ApiError) -> ApiError {
        if let Some(p) = self.profile.take() {
            let _ = std::fs::remove_file(p);
        }
        if let Some(id) = self.egress.take() {
            self.d.egress.stop(&id);
        }
        if let Some(key) = self.made.take() {
            self.d.made_folders.release(&key);
        }
        if let Some(id) = self.temp_dir.take() {
            // A launch refused after its session started (the host's answer, the audit
            // row) may leave whatever the session wrote: removed as a purge removes it,
            // bounded and following no link. Here, not on another thread: a resume of
            // this id may make the folder again as soon as this answer is out.
            if let Err(msg) =
                crate::daemon::records::purge::remove_session_dir(&self.d.tmp_real, &id)
            {
                tracing::warn!(session = %id, "refused launch: {msg}");
                // The marker stays with the folder: the next start removes both.
                self.marked = None;
            }
        }
        if let Some(id) = self.marked.take() {
            self.d.store.unmark(&id);
        }
        let mut row = self.row.clone();
        row.outcome = e.outcome();
        row.code = Some(e.code);
        row.error = Some(e.message.clone());
        if let Err(err) = self.d.audit.record(&row) {
            // The launch is refused either way; the event below still records it.
            tracing::warn!(error = %err, "audit: a refused launch's row was not written");
        }
        self.d.events.emit(&Event {
            name: "session.launch",
            status: Some(e.outcome().as_str()),
            code: Some(e.code),
            reason: Some(e.message.clone()),
            session_id: row.session_id.clone(),
            kind: Some(self.kind.as_str().into()),
            ..Default::default()
        });
        e
    }

    /// What authorization learned before it refused goes into the row.
    fn note(&mut self, n: Noted) {
        self.row.project = n.project;
        self.row.directory = n.directory;
        self.row.template = n.template;
        self.row.sandboxed = n.sandboxed;
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
            kind: Some(kind.as_str().into()),
            outcome: Outcome::Allowed,
            ..Default::default()
        },
        kind,
        profile: None,
        temp_dir: None,
        marked: None,
        egress: None,
        made: None,
    };
    at.refuse(e)
}

/// Launches one session or terminal: authorize, then carry the decision out step by
/// step (the module's order).
pub async fn launch(d: &Arc<Daemon>, input: LaunchInput) -> Result<Entry, ApiError> {
    // From before its plan looks at the disk: no folder relay made goes meanwhile.
    let _flight = d.made_folders.flight();
    let kind = input.kind.unwrap_or(SessionKind::Pty);
    let id = match input.resume_id.clone() {
        Some(id) => id,
        None => crate::daemon::ids::new_id(kind).map_err(|e| {
            refused_request(d, kind, "session_launch", None, no_random("session id", e))
        })?,
    };
    let mut at = Attempt {
        d,
        row: AuditRow {
            action: match input.resume_id {
                Some(_) => "session_resume",
                None => "session_launch",
            },
            session_id: Some(id.clone()),
            kind: Some(kind.as_str().into()),
            project: input.project.clone(),
            template: input.template.clone(),
            directory: input.directory.clone(),
            outcome: Outcome::Allowed,
            ..Default::default()
        },
        kind,
        profile: None,
        temp_dir: None,
        marked: None,
        egress: None,
        made: None,
    };
    let (settings, mut plan, names) = decide(&mut at, &id, &input)?;
    let decision = &plan.decision;
    let tokens = read_token(&mut at, decision)?;
    temp_dir(&mut at, &id, decision.resume)?;
    pause_at("temp_dir", &id).await;
    own_folders(&mut at, decision, &names, tokens.pass.is_some())?;
    pause_at("claude_config", &id).await;
    let mut env = std::mem::take(&mut plan.env);
    let boxed = match plan.sandbox.take() {
        Some(Ok(sb)) => Some(sandbox_step(&mut at, &plan.decision, sb, &names, &mut env)?),
        Some(Err(e)) => return Err(at.refuse(e)),
        None => None,
    };
    let decision = plan.decision;
    pause_at("profile", &id).await;
    let secret = crate::daemon::ids::random_hex(32)
        .map_err(|e| at.refuse(no_random("identity secret", e)))?;
    d.bridge.expect(&id, &secret);
    let entry = entry_for(&at, &id, &input, &decision, &tokens, boxed.as_ref());
    if !d.begin(entry.clone(), decision.resume) {
        d.bridge.forget(&id);
        let e = ApiError::new(Code::SessionExists, format!("session {id} exists"));
        return Err(at.refuse(e));
    }
    let req = LaunchRequest {
        v: HOST_PROTOCOL_VERSION,
        session_id: id.clone(),
        kind,
        resume: decision.resume,
        project: ProjectRef {
            id: decision.project.id.clone(),
            name: decision.project.name.clone(),
            path: decision.project_real.clone(),
        },
        directory: decision.directory.clone(),
        name: input.name.clone(),
        template_id: Some(decision.template.id.clone()),
        argv: decision.argv.clone(),
        env,
        base_env: base_env(),
        pty: entry.record.pty,
        sandbox: boxed.map(|b| b.launch),
        identity: Some(IdentityLaunch {
            secret: Secret::new(secret),
        }),
        claude_token: tokens.pass,
        redact_token: tokens.redact,
        hold_output: input.hold_output,
        // A sandboxed tool gets an allowlist of relay's environment, not all of it: the
        // shell that started relay may have exported credentials of its own
        // (docs/session-host.md, "What a child inherits").
        env_allowlist: decision.sandboxed.then(|| EnvAllowlist {
            passthrough: settings.env_passthrough_for(&decision.template),
        }),
    };
    let bwrap = matches!(&req.sandbox, Some(s) if s.backend == Backend::Bwrap);
    let launched = call_host(&mut at, &id, req, decision.unfound.as_deref()).await?;
    if bwrap {
        // Before anything else: what the next start ends of it if relay dies now.
        crate::daemon::records::strays::note(d, &id, launched.target_pid).await;
    }
    pause_at("host", &id).await;
    record(&mut at, &id, launched).await
}

/// The launch steps a test can stop at (docs/testing.md#stopping-a-launch-at-a-step).
pub const PAUSE_STEPS: [&str; 5] = ["temp_dir", "claude_config", "profile", "host", "audited"];

/// For the e2e suite only: with `RELAY_E2E_LAUNCH_PAUSE=<step>:<fifo>` in `relay
/// serve`'s environment, a launch that reaches `<step>` (one of [`PAUSE_STEPS`])
/// writes `<step> <id>` into the FIFO and waits there for good, so a test can SIGKILL
/// relay at exactly that step without a clock (docs/testing.md#stopping-a-launch-at-a-step).
/// Without the variable, nothing (read once). The session's own environment never has
/// it: the host drops every `RELAY_*` name (docs/session-host.md#what-a-child-inherits).
async fn pause_at(step: &'static str, id: &str) {
    static PAUSE: std::sync::OnceLock<Option<(String, PathBuf)>> = std::sync::OnceLock::new();
    let pause = PAUSE.get_or_init(|| {
        let v = std::env::var("RELAY_E2E_LAUNCH_PAUSE").ok()?;
        let (at, fifo) = v.split_once(':')?;
        Some((at.to_string(), PathBuf::from(fifo)))
    });
    let Some((at, fifo)) = pause else {
        return;
    };
    if at != step {
        return;
    }
    let (fifo, line) = (fifo.clone(), format!("{step} {id}\n"));
    let told = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&fifo)
            .and_then(|mut f| f.write_all(line.as_bytes()))
    })
    .await;
    tracing::warn!(
        session = id,
        ?told,
        "launch paused at {step} (RELAY_E2E_LAUNCH_PAUSE)"
    );
    std::future::pending::<()>().await;
}

/// `relay serve`'s environment, the base of a target's (the host has none of it): the
/// names and values that are UTF-8.
fn base_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// Settings read fresh, the daemon's facts taken once, then [`plan`]: the launch's
/// decision, sandbox and environment.
fn decide(
    at: &mut Attempt,
    id: &str,
    input: &LaunchInput,
) -> Result<(Settings, Plan, Names), ApiError> {
    let d = at.d;
    // What a session itself runs can never drive relay, whatever the settings say.
    let inside = input
        .caller_pid
        .is_some_and(|pid| d.descends_from_session(pid));
    let (settings, unknown) = match d.load_settings_noting() {
        Ok(s) => s,
        Err(_) if inside => {
            return Err(at.refuse(ApiError::new(
                Code::InsideSession,
                crate::daemon::INSIDE_SESSION,
            )))
        }
        Err(e) => return Err(at.refuse(ApiError::new(Code::SettingsInvalid, e.to_string()))),
    };
    let home = crate::daemon::ids::random_hex(6).map_err(|e| at.refuse(no_random("home", e)))?;
    let facts = Facts::snapshot(
        d,
        id,
        &format!("home-{home}"),
        input.caller_pid,
        input.resume_id.is_some(),
    );
    match plan(&settings, input, &facts) {
        Ok(p) if p.decision.sandboxed && token_typo(&unknown).is_some() => {
            let k = token_typo(&unknown)
                .map(ToString::to_string)
                .unwrap_or_default();
            Err(at.refuse(ApiError::sandbox(format!(
                "{} has {k}, which relay does not know: a token setting spelled wrong would \
                 run this launch on another account's token or none; correct it to \
                 claude_token_file",
                settings::FILE_NAME
            ))))
        }
        Ok(p) => {
            at.note(p.decision.noted());
            Ok((settings, p, facts.names))
        }
        Err(mut r) => {
            at.note(r.noted);
            // A typo'd key is often why (`allowed_template`): said where it is refused.
            if !unknown.is_empty() && r.error.code != Code::InsideSession {
                r.error.message = format!(
                    "{}; {} has {}",
                    r.error.message,
                    settings::FILE_NAME,
                    settings::describe_unknown(&unknown)
                );
            }
            Err(at.refuse(r.error))
        }
    }
}

/// An unknown key that looks like a token setting (`claude_token_fle`): which token
/// file a project runs on must never be a guess.
fn token_typo(unknown: &[settings::UnknownKey]) -> Option<&settings::UnknownKey> {
    unknown.iter().find(|k| {
        let last = k.key.rsplit('.').next().unwrap_or(&k.key);
        k.closest == Some("claude_token_file") || last.to_ascii_lowercase().contains("token")
    })
}

/// The token a launch passes on fd 5, the one its output is masked for, and the
/// fingerprint of the first.
struct Tokens {
    pass: Option<Secret>,
    redact: Option<Secret>,
    fingerprint: Option<String>,
}

/// Reads `claude_token_file` fresh: a launch that passes the token fails closed when it
/// cannot, naming the path; every other launch still has its output masked for the
/// current token when the file reads (docs/THREAT-MODEL.md, "Redaction").
fn read_token(at: &mut Attempt, decision: &Decision) -> Result<Tokens, ApiError> {
    let path = decision.token.path.as_deref();
    let read = path.map(crate::token::read_token_file);
    let (pass, redact) = match read {
        Some(Ok(t)) if decision.token.pass => (Some(t.token), None),
        Some(Err(e)) if decision.token.pass => {
            let said = match e.next_step() {
                Some(next) => format!("{e}; {next}"),
                None => e.to_string(),
            };
            return Err(at.refuse(ApiError::sandbox(said)));
        }
        Some(Ok(t)) => (None, Some(t.token)),
        _ => (None, None),
    };
    at.row.token_passed = Some(pass.is_some());
    // Which token this launch runs on, for the ledger, the lists, the audit rows and the
    // token watcher; never the token.
    let fingerprint = pass.as_ref().map(|t| crate::token::fingerprint(t.expose()));
    at.row.token_fingerprint = fingerprint.clone();
    at.row.account = decision.project.account.clone();
    tracing::debug!(token = ?pass, fingerprint = ?fingerprint, "launch: token read");
    Ok(Tokens {
        pass,
        redact,
        fingerprint,
    })
}

/// The session's own temp dir (0700); a resume finds its own folder again. One this
/// launch makes is noted in the ledger folder first (`Store::mark_launching`), so a
/// stop of relay at any later step leaves nothing the next start does not find.
fn temp_dir(at: &mut Attempt, id: &str, resume: bool) -> Result<PathBuf, ApiError> {
    use std::os::unix::fs::DirBuilderExt;
    let temp_dir = at.d.tmp.join(format!("relay-{id}"));
    if !(resume && temp_dir.is_dir()) {
        if let Err(e) = at.d.store.mark_launching(id, &at.d.tmp_real) {
            let marker = at.d.store.marker_of(id).unwrap_or_default();
            let said = disk_full(&marker, &e, AGAIN).unwrap_or_else(|| {
                format!(
                    "session temp dir {}: the ledger cannot note it first ({}): {e}",
                    temp_dir.display(),
                    at.d.store.dir().display()
                )
            });
            return Err(at.refuse(ApiError::new(Code::SpawnFailed, said)));
        }
        at.marked = Some(id.to_string());
    }
    match std::fs::DirBuilder::new().mode(0o700).create(&temp_dir) {
        Ok(()) => at.temp_dir = Some(id.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && resume && temp_dir.is_dir() => {}
        Err(e) => {
            let said = disk_full(&temp_dir, &e, AGAIN)
                .unwrap_or_else(|| format!("session temp dir {}: {e}", temp_dir.display()));
            return Err(at.refuse(ApiError::new(Code::SpawnFailed, said)));
        }
    }
    Ok(temp_dir)
}

/// The launch's own folders in its temp folder: for a sandboxed Claude, its seeded
/// config folder (checked for another sign-in when it gets the token), and for a launch
/// that gets the token, a home of relay's (`claude_home`).
fn own_folders(
    at: &mut Attempt,
    decision: &Decision,
    names: &Names,
    token_launch: bool,
) -> Result<(), ApiError> {
    if !(decision.sandboxed && decision.claude_launch) {
        return Ok(());
    }
    // A relay-owned config folder of its own, seeded so Claude starts straight into work
    // (no theme, login or trust screens), kept across resume.
    let claude_dir = names.claude_dir();
    match claude_config::seed(&claude_dir, &decision.directory) {
        Ok(aside) if !aside.is_empty() => tracing::warn!(
            session = at.row.session_id.as_deref().unwrap_or(""),
            names = ?aside,
            "names in Claude's config folder that are neither relay's nor Claude Code's state, \
             set aside in {}",
            claude_dir.with_file_name(claude_config::SET_ASIDE).display()
        ),
        Ok(_) => {}
        Err(e) => {
            return Err(at.refuse(ApiError::new(
                Code::SpawnFailed,
                format!("claude config {}: {e}", claude_dir.display()),
            )))
        }
    }
    if !token_launch {
        return Ok(());
    }
    // What that folder, the managed settings and the project's settings say must not
    // sign Claude Code in another way beside the token (an `apiKeyHelper`, an API key in
    // `env`, another provider): a resume reads what the session wrote there.
    if let Err(e) =
        claude_settings::check_launch(&claude_dir, &decision.directory, &decision.project_real)
    {
        return Err(at.refuse(ApiError::sandbox(e)));
    }
    // What Claude Code's own programs read from `HOME` (git's global configuration, a
    // login shell's start-up files) is relay's, not what a session could have written
    // in the person's home (docs/THREAT-MODEL.md#what-a-token-launch-reads).
    let xdg = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from);
    claude_home::seed(&names.token_home, &at.d.home, xdg.as_deref()).map_err(|e| {
        at.refuse(ApiError::new(
            Code::SpawnFailed,
            format!("the launch's home {}: {e}", names.token_home.display()),
        ))
    })
}

/// A sandboxed launch's profile and what it reaches.
struct Boxed {
    launch: SandboxLaunch,
    reach: Reach,
    explained: Arc<sandbox::explain::Explanation>,
}

/// Carries a planned sandbox out: its own folders checked as made, what it lists
/// made, its egress proxy started, and its profile written last.
fn sandbox_step(
    at: &mut Attempt,
    decision: &Decision,
    sb: Sandboxed,
    names: &Names,
    env: &mut std::collections::BTreeMap<String, String>,
) -> Result<Boxed, ApiError> {
    let d = at.d;
    let Sandboxed {
        backend,
        launcher,
        mut spec,
        mut reach,
        writable,
        denied_ports,
        egress,
        makes,
        mut explained,
        shield,
        limits,
    } = sb;
    made::check_own(&spec, names, &d.home).map_err(|e| at.refuse(ApiError::sandbox(e)))?;
    // What it makes and every pin it holds are claimed under one lock: no other
    // session's end removes a folder this sandbox is about to hold.
    let bwrap = backend == Backend::Bwrap;
    let claimed = d.made_folders.claim(&names.id, || {
        let made = made::make_listed(&mut spec, &makes, &d.home, &writable)?;
        let held = if bwrap { made::held(&spec) } else { vec![] };
        let used = held.iter().map(|(p, _)| p.clone()).collect();
        Ok::<_, String>((held, made, used))
    });
    let (held, key) = claimed.map_err(|e| at.refuse(ApiError::sandbox(e)))?;
    at.made = Some(key);
    reach.held = held;
    if let Some(rules) = egress {
        start_egress(at, names, rules, &mut spec, env)?;
        explained.network =
            sandbox::explain::network_view(&spec.network, backend == Backend::Bwrap);
    }
    at.row.shield = shield;
    at.row.limits = explained.limits.as_ref().map(|l| crate::wire::Limits {
        pids_max: l.pids_max,
        memory_max_mib: l.memory_max_mib,
        cpu_weight: l.cpu_weight,
        by: l.by.clone(),
        not_in_force: l.not_in_force.clone(),
        reached: None,
    });
    let explained = Arc::new(explained);
    let (bytes, ext) = match backend {
        Backend::Seatbelt => (
            sandbox::render_sbpl_with(
                &spec,
                &sandbox::HostPaths::current(),
                &decision.template.macos,
            )
            .into_bytes(),
            "sb",
        ),
        Backend::Bwrap => match sandbox::bwrap_profile::encode(&sandbox::render_bwrap(&spec)) {
            Ok(b) => (b, "bwrap"),
            Err(e) => return Err(at.refuse(ApiError::sandbox(format!("bwrap profile: {e}")))),
        },
    };
    let profile = write_profile(at, &names.id, ext, &bytes)?;
    // Denied ports matter only on the host's network (a proxied or cut-off sandbox has
    // loopback of its own).
    let shared_net =
        backend == Backend::Bwrap && matches!(spec.network, sandbox::Network::Shared { .. });
    Ok(Boxed {
        launch: SandboxLaunch {
            backend,
            profile_path: profile,
            launcher: Some(launcher),
            denied_loopback_ports: if shared_net { denied_ports } else { vec![] },
            limits: Some(limits),
        },
        reach,
        explained,
    })
}

/// The launch's own egress proxy, listening before the sandbox starts; the forwarder
/// inside (bwrap) or the profile's one allowed port (Seatbelt), and the proxy
/// variables, point the tools at it (docs/session-host.md#the-egress-proxy).
fn start_egress(
    at: &mut Attempt,
    names: &Names,
    rules: Rules,
    spec: &mut sandbox::Spec,
    env: &mut std::collections::BTreeMap<String, String>,
) -> Result<(), ApiError> {
    let (d, id) = (at.d, names.id.as_str());
    let sink = crate::daemon::egress::sink(d);
    if let sandbox::Network::ProxiedPort { port, .. } = &mut spec.network {
        match d.egress.start_port(id, rules, sink) {
            Ok(p) => *port = p,
            Err(e) => {
                return Err(at.refuse(ApiError::sandbox(format!("egress proxy on 127.0.0.1: {e}"))))
            }
        }
        at.egress = Some(id.to_string());
        env.extend(crate::daemon::egress::launch_env_port(*port));
        return Ok(());
    }
    let lost = crate::daemon::egress::lost(d);
    if let Err(e) = d.egress.start(&d.paths.egress(), id, rules, sink, lost) {
        return Err(at.refuse(ApiError::sandbox(format!(
            "egress proxy {}: {e}",
            d.paths.egress().display()
        ))));
    }
    at.egress = Some(id.to_string());
    Ok(())
}

/// The profile, written last, under a name of its own per attempt: two resumes of one
/// id never share a profile.
fn write_profile(at: &mut Attempt, id: &str, ext: &str, bytes: &[u8]) -> Result<PathBuf, ApiError> {
    let suffix =
        crate::daemon::ids::random_hex(4).map_err(|e| at.refuse(no_random("profile name", e)))?;
    let profile = at.d.paths.profiles().join(format!("{id}-{suffix}.{ext}"));
    let _ = std::fs::remove_file(&profile);
    if let Err(e) = write_new_0600(&profile, bytes) {
        // A file created but not filled (a full disk) goes too.
        let _ = std::fs::remove_file(&profile);
        let said = disk_full(&profile, &e, AGAIN)
            .unwrap_or_else(|| format!("write profile {}: {e}", profile.display()));
        return Err(at.refuse(ApiError::sandbox(said)));
    }
    at.profile = Some(profile.clone());
    Ok(profile)
}

/// The ledger entry of a launch about to start.
fn entry_for(
    at: &Attempt,
    id: &str,
    input: &LaunchInput,
    decision: &Decision,
    tokens: &Tokens,
    boxed: Option<&Boxed>,
) -> Entry {
    let kind = decision.kind;
    let record = Record {
        v: VERSION,
        id: id.to_string(),
        kind,
        name: input.name.clone(),
        template_id: decision.template.id.clone(),
        project_id: decision.project.id.clone(),
        directory: decision.directory.clone(),
        state: EntryState::Launching,
        created_ms: crate::daemon::records::journal::now_ms(),
        exit_status: None,
        exit_signal: None,
        exit_reason: None,
        sandboxed: decision.sandboxed,
        pty: (kind == SessionKind::Pty).then(|| input.pty.unwrap_or_default()),
        token_passed: tokens.pass.is_some(),
        model: decision.model.clone(),
        permission_mode: decision.permission_mode.clone(),
        claude: decision.claude.clone(),
        token_fingerprint: tokens.fingerprint.clone(),
        account: decision.project.account.clone(),
        ended_ms: None,
        reach: boxed.map(|b| b.reach.clone()).unwrap_or_default(),
        sandbox: None,
    };
    Entry {
        profile: at.profile.clone(),
        token_file: tokens
            .pass
            .as_ref()
            .and_then(|_| decision.token.path.clone()),
        explained: boxed.map(|b| b.explained.clone()),
        probe: decision.relay_probe,
        made_claim: at.made.clone(),
        ..Entry::from(record)
    }
}

/// Sends the launch to the host; any failure unwinds the entry and refuses.
async fn call_host(
    at: &mut Attempt<'_>,
    id: &str,
    req: LaunchRequest,
    unfound: Option<&str>,
) -> Result<LaunchResponse, ApiError> {
    let d = at.d;
    let body = serde_json::to_vec(&req);
    let resume = req.resume;
    drop(req);
    let body = match body {
        Ok(b) => b,
        Err(e) => {
            d.abort(id);
            let e = ApiError::new(Code::SpawnFailed, format!("encode launch: {e}"));
            return Err(at.refuse(e));
        }
    };
    if resume {
        // The dormant session's record in the host goes before the id is used again.
        if let Err(e) = d
            .host
            .call("DELETE", &format!("/sessions/{id}"), None)
            .await
        {
            tracing::debug!(session = id, error = %e, "resume: dropping the host's old record");
        }
    }
    let answer = d.host.call("POST", "/launch", Some(body)).await;
    d.bridge.forget(id);
    let (status, bytes) = match answer {
        Ok(a) => a,
        Err(e) => {
            d.abort(id);
            return Err(at.refuse(ApiError::new(Code::HostUnavailable, e.to_string())));
        }
    };
    if status != 201 {
        d.abort(id);
        let mut e = ApiError::from_host(status, &bytes);
        if let (Code::SpawnFailed, Some(hint)) = (e.code, unfound) {
            e.message = format!("{hint} ({})", e.message);
        }
        return Err(at.refuse(e));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        d.abort(id);
        at.refuse(ApiError::new(
            Code::SpawnFailed,
            format!("host answer: {e}"),
        ))
    })
}

/// The launch's audit row — no launch runs unaudited — then its event and the entry.
async fn record(
    at: &mut Attempt<'_>,
    id: &str,
    launched: LaunchResponse,
) -> Result<Entry, ApiError> {
    let d = at.d;
    d.started(id, launched.root_pid, launched.target_pid);
    at.row.routing = launched.routing.clone();
    at.row.env_names = launched.env_names.clone();
    let audited = d.audit.record(&at.row);
    if audited.is_ok() {
        pause_at("audited", id).await;
    }
    if let Err(e) = audited {
        // The session goes before anyone hears of it (its groups killed, the host's
        // record dropped), and the launch is refused.
        d.abort(id);
        for pid in [launched.root_pid, launched.target_pid] {
            if pid > 1 {
                // Safety: kill(2) on a process group of this session; no memory.
                unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
            }
        }
        if let Err(err) = d
            .host
            .call("DELETE", &format!("/sessions/{id}"), None)
            .await
        {
            tracing::warn!(session = id, error = %err, "unaudited launch: dropping the host's record");
        }
        let said = disk_full(d.audit.path(), &e, AGAIN).unwrap_or_else(|| e.to_string());
        return Err(at.refuse(ApiError::new(
            Code::AuditUnavailable,
            format!("the audit row could not be written, so the session was stopped: {said}"),
        )));
    }
    d.events.emit(&Event {
        name: "session.launch",
        status: Some("ok"),
        session_id: Some(id.to_string()),
        kind: Some(at.kind.as_str().into()),
        routing: launched.routing,
        env_names: launched.env_names,
        ..Default::default()
    });
    let entry = d.finish_launch(id);
    if entry.record.state == EntryState::Running {
        crate::daemon::records::repos::watching(d, &entry);
    }
    // Its forwarder died while the launch was being recorded: it stops now.
    d.stop_marked(id).await;
    Ok(entry)
}

/// What a launch refused for a full disk tells the person to do once there is room.
const AGAIN: &str = "start the session again";

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

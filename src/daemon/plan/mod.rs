//! A launch's plan: from the settings, the request and a snapshot of the machine to
//! what the launch will be, or a refusal. Nothing here writes anything.

pub mod authorize;
pub mod claude_state;
pub mod env;
pub mod exec_files;
pub mod facts;
pub mod guard;
pub mod sandbox;
pub mod shield;
pub mod toolchains;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::daemon::egress::{self, Rules};
use crate::daemon::error::ApiError;
use crate::daemon::settings::Settings;
use crate::daemon::Reach;
use crate::protocol::{Backend, SessionKind, SessionLimits};
use crate::sandbox::explain::{Explanation, LimitsView};
use crate::sandbox::{Network, Spec};
use authorize::{authorize, Decision, Environment, LaunchInput, Refusal};
use facts::Facts;
use sandbox::Planned;

/// What one launch will be: its decision, the target's environment (built here, once)
/// and, when sandboxed, its sandbox.
pub struct Plan {
    pub decision: Decision,
    /// The request's `env`: the template's and relay's names over relay's own
    /// environment. A Seatbelt proxy's port is filled in when the proxy listens.
    pub env: BTreeMap<String, String>,
    /// A sandboxed launch's sandbox, or why it cannot have one. The launch says a
    /// token it cannot read first (its own step), then this.
    pub sandbox: Option<Result<Sandboxed, ApiError>>,
}

/// A sandboxed launch's part of its plan.
pub struct Sandboxed {
    pub backend: Backend,
    /// The launcher (an existing file; empty when only explained for another backend).
    pub launcher: PathBuf,
    /// The spec the profile is rendered from. The names the launch makes are in it as
    /// made.
    pub spec: Spec,
    pub reach: Reach,
    /// Every folder some session can write.
    pub writable: Vec<PathBuf>,
    /// The loopback ports denied on the host's network.
    pub denied_ports: Vec<u16>,
    /// A proxied launch's allowlist, for its egress proxy.
    pub egress: Option<Rules>,
    /// What the launch makes before the sandbox starts.
    pub makes: Vec<exec_files::ToMake>,
    /// What `relay sandbox explain` and the Settings page show.
    pub explained: Explanation,
    /// A token launch: whether its shield is in force.
    pub shield: Option<bool>,
    /// Its limits on processes and memory, and the cgroup folder they are made under.
    pub limits: SessionLimits,
}

/// A sandboxed launch's limits (the template's, `session_sandbox.limits`, the
/// defaults) and what holds them here; the explanation says which do not hold.
fn limits(s: &Settings, decision: &Decision, f: &Facts) -> (SessionLimits, LimitsView) {
    let mut limits = s.limits_for(&decision.template);
    // No limit of any kind: no cgroup either.
    let any = limits.pids_max > 0 || limits.memory_max_mib > 0 || limits.cpu_weight > 0;
    limits.cgroup = f.limits.cgroups().filter(|_| any).cloned();
    let (by, not_in_force) = crate::limits::describe(&limits, f.limits.why_none());
    let view = LimitsView {
        pids_max: limits.pids_max,
        memory_max_mib: limits.memory_max_mib,
        cpu_weight: limits.cpu_weight,
        by: by.into(),
        not_in_force,
    };
    (limits, view)
}

/// Plans one launch: [`authorize`], then its sandbox and its environment. Reads the
/// file system and writes nothing. A refusal here is authorization's; the sandbox's
/// is in [`Plan::sandbox`].
pub fn plan(s: &Settings, input: &LaunchInput, f: &Facts) -> Result<Plan, Refusal> {
    let relay_path = f.relay_path();
    let relay_routing = f.relay_routing();
    let mut decision = authorize(
        s,
        input,
        &Environment {
            home: &f.home,
            relay_path: &relay_path,
            caller_inside_session: f.caller_inside_session,
            prior: f.prior.clone(),
            relay_routing: &relay_routing,
        },
    )?;
    let token_launch = decision.token.pass;
    let mut env = env::relay_env(
        &decision.template.env,
        &f.names.temp_dir,
        (decision.sandboxed && decision.claude_launch).then(|| f.names.claude_dir()),
    );
    if token_launch {
        env.extend(env::home_env(&f.names.token_home));
    }
    let Some((backend, launcher)) = decision.sandbox.clone() else {
        return Ok(Plan {
            decision,
            env,
            sandbox: None,
        });
    };
    let (backend, launcher) = match input.explain_backend.filter(|b| *b != backend) {
        Some(other) => (other, PathBuf::new()),
        None => (backend, launcher),
    };
    decision.sandbox = Some((backend, launcher.clone()));
    let boxed = sandboxed(s, &decision, f, backend, &mut env)
        .map(|b| Sandboxed { launcher, ..b })
        .map_err(ApiError::sandbox);
    Ok(Plan {
        decision,
        env,
        sandbox: Some(boxed),
    })
}

/// The sandbox of a decision, and what it adds to the environment.
fn sandboxed(
    s: &Settings,
    decision: &Decision,
    f: &Facts,
    backend: Backend,
    env: &mut BTreeMap<String, String>,
) -> Result<Sandboxed, String> {
    let token_launch = decision.token.pass;
    let Planned {
        spec,
        reach,
        writable,
        ports,
        labels,
        notes,
        egress,
        makes,
        toolchains,
    } = sandbox::plan_sandbox(
        f,
        s,
        &sandbox::SandboxPlan {
            id: &f.names.id,
            kind: decision.kind,
            backend,
            template: &decision.template,
            program: decision.argv.first().map(String::as_str),
            project_path: &decision.project_path,
            directory: &decision.directory,
            directory_asked: &decision.directory_asked,
            temp_dir: &f.names.temp_dir,
            token_deny: &decision.token.deny,
            token_launch,
            token_home: token_launch.then_some(&*f.names.token_home),
            claude_path_env: &decision.claude_path_env,
            // `relay doctor`'s probes run in the project's folder, the home itself for
            // the first-run project: they make nothing there (what they run comes from
            // folders every other launch pins).
            make_missing: if decision.relay_probe {
                exec_files::Make::Leave
            } else {
                exec_files::Make::List
            },
        },
    )?;
    let shield = env::sandbox_env(
        env,
        decision,
        f,
        backend,
        (&spec.network, egress.as_ref()),
        (&writable, &reach.pins),
        &toolchains,
    );
    let mut explained = crate::sandbox::explain::explain(&spec, backend, &f.host_paths, &labels);
    explained.environment = Some(sandbox::env_names(
        f,
        env,
        decision
            .sandboxed
            .then(|| s.env_passthrough_for(&decision.template))
            .as_deref(),
        token_launch,
        decision.kind == SessionKind::Pty,
    ));
    explained.notes.extend(notes);
    let (limits, view) = limits(s, decision, f);
    explained.limits = Some(view);
    explained
        .notes
        .extend(shield.as_ref().map(|sh| sh.note.clone()));
    Ok(Sandboxed {
        backend,
        launcher: PathBuf::new(),
        spec,
        reach,
        writable,
        denied_ports: ports,
        egress,
        makes,
        explained,
        shield: shield.map(|sh| sh.in_force),
        limits,
    })
}

/// The egress proxy's variables as a launch gets them once its proxy listens: through
/// the forwarder inside (bwrap), or on `port` of loopback (Seatbelt).
pub fn proxy_env(network: &Network, rules: &Rules) -> Vec<(String, String)> {
    match network {
        Network::ProxiedPort { port, .. } => egress::launch_env_port(*port),
        _ => egress::launch_env(rules),
    }
}

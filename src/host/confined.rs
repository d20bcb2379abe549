//! Confined threads: for each set of denied loopback ports, one host thread inside the
//! Landlock domain of that set, from which every shim for the set is forked
//! ([session-host.md](../../docs/session-host.md#the-confined-thread)).
//!
//! Why: Landlock's network rules are an allow-list, so a ruleset that denies a few ports
//! holds a rule for each of the other 65,535, and `landlock_restrict_self` merges every
//! one of them into the new domain: 25–30 ms per call, measured, which was most of a
//! launch ([performance.md](../../docs/performance.md)). A domain is inherited across
//! fork for nothing, and `landlock_restrict_self` (without the TSYNC flag) and
//! `PR_SET_NO_NEW_PRIVS` apply to the calling thread only. So the host restricts one
//! thread of its own once per port set and forks that set's shims there; the shim runs
//! with `--landlock-inherited PORT`, checks the domain with a connect to that denied
//! port (`EACCES` from Landlock), and installs the network filter.
//!
//! Threat: the domain reaching another host thread (an unsandboxed terminal, or the
//! host's own connects, would lose ports): it cannot, the restriction is per thread and
//! this thread runs nothing but [`spawn::spawn`], which starts no thread. A shim for the
//! port set forked from an unconfined thread (its target would reach the denied ports):
//! [`Confined::spawn`] is the only way to a shim with `landlock_inherited`, and a thread
//! whose restriction failed serves nothing, so the launch fails closed
//! (`500 spawn_failed`). The thread never exits: a shim's parent-death signal follows
//! the thread that forked it (`die_with_host` in `spawn.rs`).

use std::os::fd::AsRawFd;
use std::sync::mpsc;

use super::spawn::{self, Plan, Spawned};
use super::LaunchError;

type Job = Box<dyn FnOnce() + Send>;

/// The handle on one confined thread: a queue of spawn jobs.
pub struct Confined {
    jobs: mpsc::Sender<Job>,
    /// One of the denied ports: the shim proves its confinement with a connect to it.
    probe: u16,
}

fn refused(why: impl std::fmt::Display) -> LaunchError {
    LaunchError::SpawnFailed(format!(
        "denied loopback ports need Landlock TCP rules (kernel ABI 4 or later): {why}"
    ))
}

impl Confined {
    /// Builds the ruleset for `ports`, starts the thread and waits until it has confined
    /// itself. Called from within the host's runtime (the thread enters it to spawn).
    pub fn start(ports: &[u16]) -> Result<Confined, LaunchError> {
        // Port 0 is never connected to: the probe takes a real one.
        let probe = ports
            .iter()
            .copied()
            .find(|p| *p != 0)
            .ok_or_else(|| refused("no denied port but 0"))?;
        let ruleset = relay_shim::landlock::build_tcp_connect_ruleset(ports).map_err(refused)?;
        let runtime = tokio::runtime::Handle::current();
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready_tx, ready) = mpsc::sync_channel::<std::io::Result<()>>(1);
        std::thread::Builder::new()
            .name("relay-confined".into())
            .spawn(move || {
                let restricted = relay_shim::landlock::restrict_self(ruleset.as_raw_fd());
                drop(ruleset);
                let ok = restricted.is_ok();
                let _ = ready_tx.send(restricted);
                if !ok {
                    // Never confined, so it forked nothing: it may end.
                    return;
                }
                let _entered = runtime.enter();
                while let Ok(job) = queue.recv() {
                    // A panicking job loses its launch (its answer channel is dropped),
                    // never the thread the other shims were forked from.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
                // The host dropped its handle (it is shutting down): stay, so the
                // shims forked here keep their parent-death signal until the host ends.
                loop {
                    std::thread::park();
                }
            })
            .map_err(|e| LaunchError::SpawnFailed(format!("start the confined thread: {e}")))?;
        match ready.recv() {
            Ok(Ok(())) => Ok(Confined { jobs, probe }),
            Ok(Err(e)) => Err(refused(format!("landlock_restrict_self: {e}"))),
            Err(_) => Err(refused("the confined thread ended")),
        }
    }

    /// Spawns the shim of `plan` from the confined thread: the shim starts inside the
    /// domain and is told so (`--landlock-inherited`).
    pub async fn spawn(&self, mut plan: Plan) -> Result<Spawned, LaunchError> {
        plan.landlock_inherited = Some(self.probe);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let spawned = spawn::spawn(plan);
            // The launch was dropped while the job waited: nobody will track this
            // shim, so it must not run.
            if let Err(Ok(mut orphan)) = tx.send(spawned) {
                let _ = orphan.child.start_kill();
                spawn::signal_groups(orphan.shim_pid, None, libc::SIGKILL);
            }
        });
        self.jobs
            .send(job)
            .map_err(|_| LaunchError::SpawnFailed("the confined thread is gone".into()))?;
        rx.await
            .map_err(|_| LaunchError::SpawnFailed("the confined thread dropped a launch".into()))?
    }
}

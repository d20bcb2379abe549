//! The session model, one type for a session: [`Entry`], the [`Record`] its ledger file
//! keeps (embedded in it), the API's view of it ([`wire::Session`], made here), what its
//! sandbox reached, and the inside-session walk (docs/architecture.md#one-session-type).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::daemon::records::strays::Sandbox;
use crate::protocol::{ClaudeInit, ExitReason, PtySize, SessionKind};
use crate::wire;

pub use crate::wire::EntryState;

/// One session, the one type relay has for it. What its ledger file keeps is its
/// [`Record`], embedded: a ledger write is `entry.record`, a restart reads an entry back
/// from one (`From<Record>`). What the API shows is [`wire::Session`], made from it below
/// (`From<&Entry>`), which is also how it serializes. The rest is what only this run of
/// the daemon knows.
#[derive(Clone, Debug)]
pub struct Entry {
    /// What its ledger file keeps: written whole at each change (`Daemon::persist`).
    pub record: Record,
    /// The shim's pid (the session root).
    pub root_pid: Option<u32>,
    /// The target's pid (the sandbox launcher when wrapped); it leads its own group.
    pub target_pid: Option<u32>,
    pub profile: Option<PathBuf>,
    /// The token file it was launched on (its project's at launch), when it carried
    /// the token: what the token watcher and `relay token list` group it by.
    pub token_file: Option<PathBuf>,
    /// It runs on another token than the file holds now (`claude_token_on_change:
    /// keep`).
    pub stale: bool,
    /// Why relay stopped it, when relay did (`claude_token_changed`,
    /// `claude_token_replaced`, `claude_token_removed`): the exit event and the audit
    /// row carry this instead of the host's reason.
    pub stop_reason: Option<&'static str>,
    /// With a `claude_token_*` stop: the projects whose token file it was (the exit
    /// event's and audit row's `token_projects`).
    pub stop_token_projects: Option<Vec<String>>,
    /// An exit the host reported while the launch path had not yet recorded the launch
    /// (a tool that ends at once): applied right after the launch's audit row, so the
    /// `session_end` row never precedes the `session_launch` row and the entry never
    /// goes back to `running`.
    #[allow(clippy::type_complexity)]
    pub early_exit: Option<(
        Option<i32>,
        Option<i32>,
        ExitReason,
        u64,
        Option<crate::protocol::Reached>,
    )>,
    /// Its sandbox in words, from the spec its profile was rendered from
    /// (`GET /api/{sessions,terminals}/{id}/sandbox`); none for an unsandboxed launch.
    pub explained: Option<std::sync::Arc<crate::sandbox::explain::Explanation>>,
    /// A `relay doctor` probe: never listed (terminals, sessions, the Settings page),
    /// purged as soon as doctor has read its log.
    pub probe: bool,
    /// Its claim on the folders relay made for bwrap (`records::made_folders`), let go
    /// at its end.
    pub made_claim: Option<String>,
}

/// The ledger file's format; a record of another version is set aside.
pub const VERSION: u32 = 1;

/// One session as its ledger file keeps it (`src/daemon/records/ledger.rs`,
/// docs/architecture.md#the-ledger-file). Everything the lists show but `root_pid` and
/// `stale`, what a resume needs (project, directory, model, permission mode, Claude
/// Code's session id), what the pins' check needs after a restart (what its sandbox
/// could write), and its bwrap sandbox as the kernel knows it; never the token. The
/// field order is the file's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// [`VERSION`].
    pub v: u32,
    pub id: String,
    pub kind: SessionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub project_id: String,
    pub template_id: String,
    pub directory: PathBuf,
    /// Claude launches: the `--model` relay passed (absent: Claude Code's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Claude launches: the `--permission-mode` relay passed (absent: Claude Code's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// The fingerprint of the token it carried (`crate::token::fingerprint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_fingerprint: Option<String>,
    /// Whether this launch carried the token on fd 5 (never the token itself).
    pub token_passed: bool,
    /// Its project's `account` label at launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Sessions: what Claude Code said in its last `system`/`init` event (its version,
    /// model, `apiKeySource`, permission mode and session id). Kept across stop and
    /// resume: the session id is what a resume passes to `--resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude: Option<ClaudeInit>,
    /// `running`, `dormant` or `exited` (a launch in progress is never written).
    pub state: EntryState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    /// Why it ended (`exited`, `terminated`, `host_died`, `relay_restarted`, …): the
    /// reason its `session.exited` event and `session_end` row carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_reason: Option<String>,
    pub created_ms: u64,
    /// When it ended, for `retain_ended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    pub sandboxed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySize>,
    /// What this launch's sandbox let it reach, for the guards of later launches and the
    /// token watcher (docs/THREAT-MODEL.md). Empty for unsandboxed launches. A session
    /// remembered across a restart still counts for the pins' check.
    #[serde(default)]
    pub reach: Reach,
    /// Its bwrap sandbox as the kernel knows it, found once the host answered the
    /// launch: what the next start ends of it after a kill of relay
    /// (`crate::daemon::records::strays`). None until then, for other launches, and in
    /// records of earlier relays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
}

impl From<Record> for Entry {
    /// The entry of a record, with nothing of a run: no pids, no profile, no token file
    /// (no token watcher groups it), no explanation (not kept on disk: the page says
    /// so), not a probe (one a stop of relay cut short is listed as the terminal it was).
    fn from(record: Record) -> Entry {
        Entry {
            record,
            root_pid: None,
            target_pid: None,
            profile: None,
            token_file: None,
            stale: false,
            stop_reason: None,
            stop_token_projects: None,
            early_exit: None,
            explained: None,
            probe: false,
            made_claim: None,
        }
    }
}

impl From<&Entry> for wire::Session {
    /// What the API shows of an entry (docs/routes.md#entry).
    fn from(e: &Entry) -> wire::Session {
        let r = &e.record;
        wire::Session {
            id: r.id.clone(),
            kind: r.kind,
            name: r.name.clone(),
            template_id: r.template_id.clone(),
            project_id: r.project_id.clone(),
            directory: r.directory.clone(),
            state: r.state,
            root_pid: e.root_pid,
            created_ms: r.created_ms,
            exit_status: r.exit_status,
            exit_signal: r.exit_signal,
            exit_reason: r.exit_reason.clone(),
            sandboxed: r.sandboxed,
            pty: r.pty,
            token_passed: r.token_passed,
            model: r.model.clone(),
            permission_mode: r.permission_mode.clone(),
            claude: r.claude.clone(),
            token_fingerprint: r.token_fingerprint.clone(),
            account: r.account.clone(),
            stale: e.stale,
            ended_ms: r.ended_ms,
        }
    }
}

impl Serialize for Entry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        wire::Session::from(self).serialize(s)
    }
}

/// The canonical folders one sandboxed launch could read and write, what it had pinned
/// read-only, and how the token was hidden from it. The ledger keeps the folders and the
/// token paths; what the token watcher checks while it runs is not written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reach {
    #[serde(default)]
    pub grants: Vec<PathBuf>,
    #[serde(default)]
    pub read_write: Vec<PathBuf>,
    #[serde(default)]
    pub pins: Vec<PathBuf>,
    /// The token paths its profile denied (every one the settings named at launch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_paths: Vec<PathBuf>,
    /// Records written before a project could name its own token: the one path. Read,
    /// never written; a restart moves it into `token_paths` (`Record::into_entry`).
    #[serde(default, skip_serializing)]
    pub token_path: Option<PathBuf>,
    /// Each token's folder a grant reached where only a mount hid it (bwrap), with that
    /// folder's `(dev, ino)` at launch: a folder replaced since is no longer under the
    /// mask.
    #[serde(skip)]
    pub token_folders: Vec<(PathBuf, Option<(u64, u64)>)>,
    /// bwrap: each path bound read-only over a write grant, with its `(dev, ino)` at
    /// launch. A bind holds the file or folder that was there: one the person's tools
    /// replace by rename (`git config`, an editor's save) is no longer under it, so the
    /// session is stopped (`Daemon::check_held`).
    #[serde(skip)]
    pub held: Vec<(PathBuf, Option<(u64, u64)>)>,
}

/// What the pins' check reads of a purged session (`pins_hold`, `src/daemon/plan/sandbox.rs`):
/// the folders it could write and the pins it had, sorted.
#[derive(PartialEq, Eq, Hash)]
pub(super) struct PurgedReach {
    pub(super) read_write: Vec<PathBuf>,
    pub(super) pins: Vec<PathBuf>,
}

pub(super) fn reason_name(r: ExitReason) -> &'static str {
    match r {
        ExitReason::Exited => "exited",
        ExitReason::Signaled => "signaled",
        ExitReason::Terminated => "terminated",
        ExitReason::ShimFailed => "shim_failed",
    }
}

/// Whether `pid` is one of `roots` or descends from one, walking up through
/// `parent_of` (the seam: `crate::peer::parent_of` asks the kernel, tests pass a table).
/// The walk stops at init (1), at a process that is gone, at a loop, and after 4096
/// steps; none of those is a descendant.
pub(super) fn descends(pid: u32, roots: &[u32], parent_of: impl Fn(u32) -> Option<u32>) -> bool {
    if roots.is_empty() {
        return false;
    }
    let mut cur = pid;
    for _ in 0..4096 {
        if roots.contains(&cur) {
            return true;
        }
        match parent_of(cur) {
            Some(p) if p > 1 && p != cur => cur = p,
            _ => return false,
        }
    }
    false
}

/// A session with every field set, for unit tests: the one
/// `src/wire/testdata/session-view.json` shows and
/// `src/daemon/records/testdata/ledger-record.json` keeps, with what only the daemon
/// knows set too.
#[cfg(test)]
pub(crate) fn every_field() -> Entry {
    let record = Record {
        v: VERSION,
        id: "t-0123456789ab".into(),
        kind: SessionKind::Pty,
        name: Some("n".into()),
        project_id: "p".into(),
        template_id: "shell".into(),
        directory: "/home/ada/p".into(),
        model: Some("m".into()),
        permission_mode: Some("plan".into()),
        token_fingerprint: Some("abcdef012345".into()),
        token_passed: true,
        account: Some("work".into()),
        claude: Some(ClaudeInit {
            session_id: Some("c".into()),
            version: Some("2".into()),
            model: Some("m".into()),
            api_key_source: Some("none".into()),
            permission_mode: Some("plan".into()),
        }),
        state: EntryState::Exited,
        exit_status: Some(3),
        exit_signal: Some(9),
        exit_reason: Some("exited".into()),
        created_ms: 1,
        ended_ms: Some(2),
        sandboxed: true,
        pty: Some(PtySize { cols: 80, rows: 24 }),
        reach: Reach {
            grants: vec!["/home/ada/p".into(), "/usr".into()],
            read_write: vec!["/home/ada/p".into()],
            pins: vec!["/home/ada/p/.git/hooks".into()],
            token_paths: vec!["/home/ada/.config/relay/token".into()],
            token_path: None,
            token_folders: vec![("/home/ada/.config/relay".into(), Some((1, 2)))],
            held: vec![("/home/ada/p/.gitconfig".into(), Some((1, 3)))],
        },
        sandbox: Some(Sandbox {
            boot: "6a1f".into(),
            pid: 4242,
            start: 98_765,
            mnt: 4_026_532_801,
            pid_ns: 4_026_532_803,
        }),
    };
    Entry {
        root_pid: Some(42),
        target_pid: Some(43),
        profile: Some("/tmp/relay-t-0123456789ab/profile".into()),
        token_file: Some("/home/ada/.config/relay/token".into()),
        stale: true,
        stop_reason: Some("claude_token_changed"),
        stop_token_projects: Some(vec!["p".into()]),
        ..Entry::from(record)
    }
}

#[cfg(test)]
mod tests {
    use super::{descends, every_field};
    use crate::wire;
    use std::collections::HashMap;

    /// A process tree as a child → parent table.
    fn tree(pairs: &[(u32, u32)]) -> impl Fn(u32) -> Option<u32> {
        let parents: HashMap<u32, u32> = pairs.iter().copied().collect();
        move |pid| parents.get(&pid).copied()
    }

    /// What the API shows of an entry is the session view, byte for byte: nothing only
    /// the daemon keeps reaches a client.
    #[test]
    fn an_entry_serializes_as_the_session_view() {
        let golden = include_str!("../wire/testdata/session-view.json").trim_end();
        assert_eq!(
            serde_json::to_string_pretty(&every_field()).unwrap(),
            golden
        );
        let view = wire::Session::from(&every_field());
        assert_eq!(serde_json::to_string_pretty(&view).unwrap(), golden);
    }

    #[test]
    fn a_descendant_of_a_live_root_is_inside_and_others_are_not() {
        // init(1) ─ login(10) ─ shim(100) ─ sandbox-exec(101) ─ claude(102) ─ sh(103)
        //                    └─ terminal(20) ─ relay CLI(21)
        let parent_of = tree(&[
            (10, 1),
            (100, 10),
            (101, 100),
            (102, 101),
            (103, 102),
            (20, 10),
            (21, 20),
        ]);
        assert!(
            descends(103, &[100], &parent_of),
            "a grandchild of the root"
        );
        assert!(descends(100, &[100], &parent_of), "the root itself");
        assert!(!descends(21, &[100], &parent_of), "a sibling branch");
        assert!(!descends(10, &[100], &parent_of), "an ancestor of the root");
        assert!(descends(21, &[7, 20], &parent_of), "any of several roots");
        assert!(!descends(103, &[], &parent_of), "no live session");
    }

    #[test]
    fn the_walk_ends_at_init_a_gone_process_or_a_loop() {
        // A root of 1 is never reached: the walk stops below init.
        assert!(!descends(5, &[1], tree(&[(5, 1)])));
        // A parent that is gone (no answer) ends the walk.
        assert!(!descends(5, &[9], tree(&[(5, 6)])));
        // A process that is its own parent, or a longer loop, ends it too.
        assert!(!descends(5, &[9], tree(&[(5, 5)])));
        assert!(!descends(5, &[9], tree(&[(5, 6), (6, 7), (7, 5)])));
        // A chain longer than the bound is not followed to its end.
        let long: Vec<(u32, u32)> = (2..6000).map(|p| (p + 1, p)).collect();
        assert!(descends(4000, &[2], tree(&long)));
        assert!(!descends(5999, &[2], tree(&long)));
    }

    #[test]
    fn the_kernel_seam_sees_this_test_inside_its_own_parent() {
        // The real lookup: this process descends from its parent, not from a stranger.
        let me = std::process::id();
        let parent = nix::unistd::getppid().as_raw() as u32;
        if parent > 1 {
            assert!(descends(me, &[parent], crate::peer::parent_of));
        }
        assert!(!descends(me, &[u32::MAX], crate::peer::parent_of));
    }
}

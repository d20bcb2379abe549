//! What a session makes relay write, with a budget (docs/routes.md#logs-and-their-bounds):
//! every connection a proxied session asks for is an `egress` audit row and event, and
//! a session that floods its proxy with refused (or allowed) connections would fill the
//! disk at relay's cost. Per session, at most [`ROWS_PER_WINDOW`] connections are
//! written one by one in each [`WINDOW`]; the rest are folded: one row per target and
//! verdict, its `folded` count saying how many connections it stands for, written when
//! the window is over (at the session's next connection, at the daemon's next tick, or
//! at its end). The first time a session goes over, it is told once (an audit row and an
//! event, `egress_budget`). At most [`FOLDED_TARGETS`] targets are told apart in a
//! window; the rest fold into one row whose host is `*`. So a session costs at most
//! about `ROWS_PER_WINDOW + FOLDED_TARGETS + 1` rows a minute, whatever it does.
//!
//! Pure: the clock is an argument, and the caller writes what it is given.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::wire::Egress;

/// Connections written one by one per session in each window.
pub const ROWS_PER_WINDOW: u32 = 120;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Targets told apart among a window's folded connections.
pub const FOLDED_TARGETS: usize = 32;

/// One session's window.
struct Window {
    start: Instant,
    written: u32,
    /// Per `(host, port, allowed)`: the first connection folded there, its `folded`
    /// count growing.
    folded: BTreeMap<(String, u16, bool), Egress>,
    /// Told once that it went over (for the session's whole life).
    told: bool,
}

impl Window {
    fn new(now: Instant, told: bool) -> Window {
        Window {
            start: now,
            written: 0,
            folded: BTreeMap::new(),
            told,
        }
    }

    /// The folded rows of the window, in target order.
    fn take(&mut self) -> Vec<Egress> {
        std::mem::take(&mut self.folded).into_values().collect()
    }
}

/// What the sink writes for one connection.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The rows to write now, in order: a window's folded rows that are due, then the
    /// connection itself when it is within the budget.
    pub rows: Vec<Egress>,
    /// This connection is the session's first over its budget: say so, once.
    pub tell: bool,
}

/// Every proxied session's window.
#[derive(Default)]
pub struct Budget {
    sessions: Mutex<HashMap<String, Window>>,
}

impl Budget {
    /// One connection of `session` at `now`.
    pub fn admit(&self, session: &str, egress: Egress, now: Instant) -> Decision {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let w = sessions
            .entry(session.to_string())
            .or_insert_with(|| Window::new(now, false));
        let mut out = Decision::default();
        if now.duration_since(w.start) >= WINDOW {
            out.rows = w.take();
            *w = Window::new(now, w.told);
        }
        if w.written < ROWS_PER_WINDOW {
            w.written += 1;
            out.rows.push(egress);
            return out;
        }
        out.tell = !w.told;
        w.told = true;
        let full = w.folded.len() >= FOLDED_TARGETS;
        let key = (egress.host.clone(), egress.port, egress.allowed);
        let key = if full && !w.folded.contains_key(&key) {
            ("*".to_string(), 0, egress.allowed)
        } else {
            key
        };
        let row = w.folded.entry(key.clone()).or_insert_with(|| Egress {
            host: key.0.clone(),
            port: key.1,
            folded: 0,
            sent: 0,
            received: 0,
            ms: 0,
            ..egress.clone()
        });
        row.folded += 1;
        row.sent = row.sent.saturating_add(egress.sent);
        row.received = row.received.saturating_add(egress.received);
        row.ms = row.ms.max(egress.ms);
        out
    }

    /// The folded rows of every session whose window is over at `now` (the daemon's
    /// tick), each with its session.
    pub fn due(&self, now: Instant) -> Vec<(String, Egress)> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for (id, w) in sessions.iter_mut() {
            if now.duration_since(w.start) >= WINDOW && !w.folded.is_empty() {
                out.extend(w.take().into_iter().map(|e| (id.clone(), e)));
            }
        }
        // A session with nothing folded and a window long over holds nothing worth
        // keeping: its next connection starts a new one.
        sessions
            .retain(|_, w| !w.folded.is_empty() || now.duration_since(w.start) < WINDOW || w.told);
        out
    }

    /// The session ended: its folded rows, and it is forgotten.
    pub fn end(&self, session: &str) -> Vec<Egress> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .remove(session)
            .map(|mut w| w.take())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(host: &str, allowed: bool) -> Egress {
        Egress {
            host: host.into(),
            port: 443,
            allowed,
            rule: "r".into(),
            sent: 10,
            received: 20,
            ms: 5,
            folded: 0,
        }
    }

    #[test]
    fn a_flood_is_written_up_to_the_budget_then_folded_per_target_and_told_once() {
        let b = Budget::default();
        let t0 = Instant::now();
        for i in 0..ROWS_PER_WINDOW {
            let d = b.admit("s", conn(&format!("h{i}"), false), t0);
            assert_eq!((d.rows.len(), d.tell), (1, false), "{i}");
        }
        let d = b.admit("s", conn("a", false), t0);
        assert_eq!(
            d,
            Decision {
                rows: vec![],
                tell: true
            }
        );
        for _ in 0..999 {
            assert_eq!(b.admit("s", conn("a", false), t0), Decision::default());
        }
        b.admit("s", conn("a", true), t0);
        b.admit("s", conn("b", false), t0);
        // Another session has a budget of its own.
        assert_eq!(b.admit("t", conn("a", false), t0).rows.len(), 1);
        // Nothing is due inside the window.
        assert!(b.due(t0 + WINDOW - Duration::from_millis(1)).is_empty());
        // The next connection after the window writes the folded rows first, then itself.
        let d = b.admit("s", conn("c", false), t0 + WINDOW);
        assert!(!d.tell, "told once only");
        let got: Vec<(String, bool, u64, u64, u64)> = d
            .rows
            .iter()
            .map(|e| (e.host.clone(), e.allowed, e.folded, e.sent, e.ms))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a".into(), false, 1000, 10_000, 5),
                ("a".into(), true, 1, 10, 5),
                ("b".into(), false, 1, 10, 5),
                ("c".into(), false, 0, 10, 5),
            ]
        );
        assert_eq!(d.rows[0].rule, "r");
        assert_eq!(d.rows[0].received, 20_000);
    }

    #[test]
    fn many_targets_fold_into_one_row_and_the_tick_and_the_end_write_what_is_due() {
        let b = Budget::default();
        let t0 = Instant::now();
        for i in 0..ROWS_PER_WINDOW {
            b.admit("s", conn(&format!("w{i}"), false), t0);
        }
        for i in 0..(FOLDED_TARGETS + 10) {
            b.admit("s", conn(&format!("f{i:03}"), false), t0);
        }
        // A target already told apart keeps its own row when the list is full.
        b.admit("s", conn("f000", false), t0);
        let due = b.due(t0 + WINDOW);
        assert_eq!(due.len(), FOLDED_TARGETS + 1, "{due:?}");
        let star = due.iter().find(|(_, e)| e.host == "*").unwrap();
        assert_eq!((star.1.folded, star.1.port), (10, 0));
        let first = due.iter().find(|(_, e)| e.host == "f000").unwrap();
        assert_eq!(first.1.folded, 2);
        assert!(due.iter().all(|(s, _)| s == "s"));
        // Taken: nothing is due twice.
        assert!(b.due(t0 + WINDOW * 2).is_empty());
        // The end writes what is folded and forgets the session.
        for i in 0..=ROWS_PER_WINDOW {
            b.admit("e", conn(&format!("x{i}"), true), t0);
        }
        let end = b.end("e");
        assert_eq!(end.len(), 1);
        assert_eq!(end[0].folded, 1);
        assert!(b.end("e").is_empty());
        // A new window for it after its end: a fresh budget, told again if it floods.
        let d = b.admit("e", conn("y", true), t0);
        assert_eq!(d.rows.len(), 1);
    }
}

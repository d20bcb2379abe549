//! The one place the suite waits with a bounded backoff, for things that give no
//! signal of their own (a child's exit when we hold no pipe to it).

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Waits for `child` to exit, at most `limit`.
pub fn child_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(5);
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Waits until `cond` holds, at most `limit`, with a bounded backoff: for states that
/// announce themselves only in output the test can read (a log line).
pub fn until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(5);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

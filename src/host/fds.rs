//! Descriptor placement for the shim's fd table.
//!
//! Threat: a descriptor the host holds (a socket, another session's pty master, the
//! token pipe of a concurrent launch) reaching a shim and from there a sandboxed target,
//! or the token pipe landing on the wrong number.
//!
//! Trap (measured;
//! [session-host.md](../../docs/session-host.md#the-rust-exec-error-pipe-trap)): std's
//! `Command` keeps an internal close-on-exec
//! pipe to report exec failures. If that pipe lands on 3, 4, 5 or 6 and `pre_exec`
//! `dup2`s onto that number, `spawn()` returns Ok for a missing binary. So the host
//! keeps 3..=5 occupied by `/dev/null` placeholders for its whole life: the error pipe
//! can never take one of those numbers. A launch stages its pipes onto the numbers in
//! the parent (still close-on-exec, under the fork lock, [`crate::cloexec`]), the child's
//! `pre_exec` only clears close-on-exec on the numbers of the table, and the parent puts
//! the placeholders back right after `spawn()`, still under the lock.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::cloexec::{self, ForkGuard};

/// Where the shim finds its identity secret and the target the token pipe: the shim's
/// own numbers (`relay_shim::fds`), defined once.
pub use relay_shim::fds::{IDENTITY_FD, TOKEN_FD};

/// The table's numbers above 2: identity, status (4 with an identity), token. (No
/// Landlock ruleset: the shim inherits the domain from its confined thread,
/// `confined.rs`.)
pub const TABLE_FDS: [RawFd; 3] = [IDENTITY_FD, IDENTITY_FD + 1, TOKEN_FD];

fn dev_null() -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new().read(true).open("/dev/null")
}

/// Occupies 3..=5 with close-on-exec `/dev/null`. Call once at start, before any
/// thread or socket exists (after reading the start secret, which may sit on one of
/// those numbers).
pub fn reserve_placeholders() -> io::Result<()> {
    let g = cloexec::lock();
    let null = dev_null()?;
    for fd in TABLE_FDS {
        if fd != null.as_raw_fd() {
            g.dup_onto(null.as_raw_fd(), fd)?;
        }
    }
    // `null` itself may have landed on one of the numbers; make sure that number
    // still holds a placeholder once `null` is dropped.
    let own = null.as_raw_fd();
    drop(null);
    if TABLE_FDS.contains(&own) {
        let again = dev_null()?;
        if again.as_raw_fd() != own {
            g.dup_onto(again.as_raw_fd(), own)?;
        } else {
            std::mem::forget(again);
        }
    }
    Ok(())
}

/// One launch's descriptors, keyed by the number each must have in the shim.
#[derive(Default)]
pub struct Staging {
    pub entries: Vec<(RawFd, OwnedFd)>,
}

impl Staging {
    pub fn put(&mut self, number: RawFd, fd: OwnedFd) {
        self.entries.push((number, fd));
    }

    pub fn numbers(&self) -> Vec<RawFd> {
        self.entries.iter().map(|(n, _)| *n).collect()
    }

    /// Places every entry on its number (close-on-exec still set). The caller spawns
    /// and calls [`restore_placeholders`] under the same guard.
    pub fn stage(&self, g: &ForkGuard) -> io::Result<()> {
        for (number, fd) in &self.entries {
            debug_assert!(TABLE_FDS.contains(number));
            g.dup_onto(fd.as_raw_fd(), *number)?;
        }
        Ok(())
    }
}

/// Puts `/dev/null` back on 3..=5, dropping the host's staged copies.
pub fn restore_placeholders(g: &ForkGuard) -> io::Result<()> {
    let null = dev_null()?;
    for fd in TABLE_FDS {
        if fd != null.as_raw_fd() {
            g.dup_onto(null.as_raw_fd(), fd)?;
        }
    }
    let own = null.as_raw_fd();
    if TABLE_FDS.contains(&own) {
        std::mem::forget(null);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// These tests move descriptors 3..=5 of the whole process, which would pull files
    /// from under the tests running beside them: each runs alone.
    fn alone(name: &str, body: fn()) {
        crate::alone::alone(&format!("{}::{name}", module_path!()), body);
    }

    /// The (device, inode) of what `fd` holds, or None when it is closed.
    fn file_of(fd: RawFd) -> Option<(u64, u64)> {
        let m = std::fs::metadata(format!("/dev/fd/{fd}")).ok()?;
        Some((m.dev(), m.ino()))
    }

    fn null_id() -> (u64, u64) {
        let m = std::fs::metadata("/dev/null").unwrap();
        (m.dev(), m.ino())
    }

    /// A table number, the (device, inode) it holds, and whether it is close-on-exec.
    type Slot = (RawFd, Option<(u64, u64)>, bool);

    /// What each table number holds.
    fn table() -> Vec<Slot> {
        TABLE_FDS
            .iter()
            .map(|&fd| (fd, file_of(fd), cloexec::is_cloexec(&fd)))
            .collect()
    }

    fn all_placeholders() -> Vec<Slot> {
        TABLE_FDS
            .iter()
            .map(|&fd| (fd, Some(null_id()), true))
            .collect()
    }

    fn close_table() {
        for fd in TABLE_FDS {
            // Safety: only this test's own process holds these numbers (`alone`).
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn the_table_is_identity_status_token_on_three_four_five() {
        assert_eq!(TABLE_FDS, [3, 4, 5]);
        assert_eq!(TOKEN_FD, 5);
    }

    #[test]
    fn staging_keeps_each_number_it_was_given_in_order() {
        let mut s = Staging::default();
        let (r, w) = cloexec::lock().pipe().unwrap();
        s.put(TOKEN_FD, r);
        s.put(IDENTITY_FD, w);
        assert_eq!(s.numbers(), vec![TOKEN_FD, IDENTITY_FD]);
    }

    #[test]
    fn placeholders_fill_three_to_five_when_dev_null_opens_on_three() {
        alone(
            "placeholders_fill_three_to_five_when_dev_null_opens_on_three",
            || {
                // With 3..=5 free, the first /dev/null opened takes 3 itself.
                close_table();
                reserve_placeholders().unwrap();
                assert_eq!(table(), all_placeholders());
            },
        );
    }

    #[test]
    fn placeholders_replace_whatever_held_three_to_five() {
        alone("placeholders_replace_whatever_held_three_to_five", || {
            // 3..=5 taken first, so the pipe lands above them.
            reserve_placeholders().unwrap();
            let g = cloexec::lock();
            let (r, w) = g.pipe().unwrap();
            assert!(r.as_raw_fd() > 5 && w.as_raw_fd() > 5);
            for fd in TABLE_FDS {
                g.dup_onto(r.as_raw_fd(), fd).unwrap();
            }
            drop(g);
            reserve_placeholders().unwrap();
            assert_eq!(table(), all_placeholders());
            drop((r, w));
            assert_eq!(table(), all_placeholders());
        });
    }

    #[test]
    fn staged_descriptors_sit_on_their_numbers_until_the_placeholders_return() {
        alone(
            "staged_descriptors_sit_on_their_numbers_until_the_placeholders_return",
            || {
                close_table();
                reserve_placeholders().unwrap();
                let g = cloexec::lock();
                let (r, w) = g.pipe().unwrap();
                let pipe = file_of(r.as_raw_fd());
                let mut s = Staging::default();
                s.put(TOKEN_FD, r);
                s.stage(&g).unwrap();
                let null = Some(null_id());
                assert_eq!(
                    table(),
                    vec![(3, null, true), (4, null, true), (5, pipe, true)]
                );
                restore_placeholders(&g).unwrap();
                assert_eq!(table(), all_placeholders());
                drop((s, w));
                assert_eq!(table(), all_placeholders());
            },
        );
    }
}

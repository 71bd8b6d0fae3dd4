//! Cluster-wide byte-range locks (`fcntl` F_SETLK/F_SETLKW/F_GETLK, and `flock`, which
//! mounts send as whole-file locks of the open file, as NFS does): the manager keeps
//! them, so that processes on different mounts exclude each other as processes on one
//! machine do.
//!
//! A lock belongs to an owner: a mount session (`weft mount`'s random id) and the lock
//! owner the kernel gave the mount (a process's descriptor table for POSIX locks, an
//! open file for `flock`). POSIX rules: an owner's own locks never conflict with each
//! other; a new lock replaces what the owner held in its range (splitting what it
//! overlaps); an unlock drops the owner's locks in its range; two locks conflict when
//! they overlap, belong to different owners and one of them is exclusive.
//!
//! Invariants:
//! - Locks live in the manager's memory only: a manager restart drops them all (the
//!   mounts are not told; documented in the README).
//! - Bounded: `LOCKS_PER_FILE_MAX` per file and `LOCKS_MAX` in all; past them a lock is
//!   refused with `TooLarge` (the mount answers ENOLCK), never stored.
//! - A session that stops renewing (its mount died) loses its locks with its lease
//!   (`drop_sessions`), so a crashed client cannot hold a file forever.

use std::collections::HashMap;
use std::sync::Mutex;

use weft_layout::InodeId;
use weft_proto::{ErrorCode, HeldLock, LockKind, WireError};

/// Locks held on one file at most (of all owners).
pub const LOCKS_PER_FILE_MAX: usize = 4096;
/// Locks held in all at most.
pub const LOCKS_MAX: usize = 1 << 20;

/// Who holds a lock: a mount session and the kernel's lock owner there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner {
    pub session: u64,
    pub owner: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    owner: Owner,
    lock: HeldLock,
}

/// Every file's locks.
#[derive(Default)]
pub struct FileLocks {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    files: HashMap<InodeId, Vec<Entry>>,
    total: usize,
}

fn overlaps(a: &HeldLock, start: u64, end: u64) -> bool {
    a.start <= end && start <= a.end
}

impl FileLocks {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes (`Read`, `Write`) or drops (`Unlock`) `owner`'s lock on `[start, end]` of
    /// `inode`. A conflicting lock of another owner refuses it with `Busy`.
    pub fn set(
        &self,
        inode: InodeId,
        owner: Owner,
        pid: u32,
        kind: LockKind,
        start: u64,
        end: u64,
    ) -> Result<(), WireError> {
        if start > end {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("lock range {start}..={end} ends before it starts"),
            ));
        }
        let mut state = self.lock();
        let state = &mut *state;
        let write = match kind {
            LockKind::Unlock => {
                if let Some(entries) = state.files.get_mut(&inode) {
                    let before = entries.len();
                    cut(entries, owner, start, end);
                    state.total = state.total + entries.len() - before;
                    if entries.is_empty() {
                        state.files.remove(&inode);
                    }
                }
                return Ok(());
            }
            LockKind::Read => false,
            LockKind::Write => true,
        };
        let entries = state.files.entry(inode).or_default();
        if let Some(held) = conflict(entries, owner, write, start, end) {
            return Err(WireError::new(
                ErrorCode::Busy,
                format!(
                    "bytes {}..={} are locked ({}) by process {} of another client or process",
                    held.start,
                    held.end,
                    if held.write { "exclusive" } else { "shared" },
                    held.pid
                ),
            ));
        }
        let before = entries.len();
        let mut next = entries.clone();
        cut(&mut next, owner, start, end);
        next.push(Entry {
            owner,
            lock: HeldLock {
                write,
                start,
                end,
                pid,
            },
        });
        let total = state.total - before + next.len();
        if next.len() > LOCKS_PER_FILE_MAX || total > LOCKS_MAX {
            if entries.is_empty() {
                state.files.remove(&inode);
            }
            return Err(WireError::new(
                ErrorCode::TooLarge,
                format!("too many locks (at most {LOCKS_PER_FILE_MAX} on one file, {LOCKS_MAX} in all)"),
            ));
        }
        *entries = next;
        state.total = total;
        Ok(())
    }

    /// The first lock of another owner that would refuse `owner`'s `kind` lock on
    /// `[start, end]` (F_GETLK); `None` for `Unlock`.
    pub fn test(
        &self,
        inode: InodeId,
        owner: Owner,
        kind: LockKind,
        start: u64,
        end: u64,
    ) -> Option<HeldLock> {
        let write = match kind {
            LockKind::Unlock => return None,
            LockKind::Read => false,
            LockKind::Write => true,
        };
        let state = self.lock();
        conflict(state.files.get(&inode)?, owner, write, start, end)
    }

    /// Drops every lock of the sessions `lapsed` returns true for; returns how many.
    pub fn drop_sessions(&self, lapsed: impl Fn(u64) -> bool) -> usize {
        let mut state = self.lock();
        let mut dropped = 0;
        state.files.retain(|_, entries| {
            let before = entries.len();
            entries.retain(|e| !lapsed(e.owner.session));
            dropped += before - entries.len();
            !entries.is_empty()
        });
        state.total -= dropped;
        dropped
    }

    /// The sessions holding locks (to renew or lapse).
    pub fn sessions(&self) -> Vec<u64> {
        let state = self.lock();
        let mut sessions: Vec<u64> = state
            .files
            .values()
            .flat_map(|entries| entries.iter().map(|e| e.owner.session))
            .collect();
        sessions.sort_unstable();
        sessions.dedup();
        sessions
    }

    /// Locks held in all.
    pub fn held(&self) -> usize {
        self.lock().total
    }
}

fn conflict(entries: &[Entry], owner: Owner, write: bool, start: u64, end: u64) -> Option<HeldLock> {
    entries
        .iter()
        .find(|e| e.owner != owner && (write || e.lock.write) && overlaps(&e.lock, start, end))
        .map(|e| e.lock)
}

/// Removes `owner`'s locks from `[start, end]`, keeping the parts outside it.
fn cut(entries: &mut Vec<Entry>, owner: Owner, start: u64, end: u64) {
    let mut kept = Vec::with_capacity(entries.len() + 1);
    for e in entries.drain(..) {
        if e.owner != owner || !overlaps(&e.lock, start, end) {
            kept.push(e);
            continue;
        }
        if e.lock.start < start {
            kept.push(Entry {
                lock: HeldLock {
                    end: start - 1,
                    ..e.lock
                },
                ..e
            });
        }
        if e.lock.end > end {
            kept.push(Entry {
                lock: HeldLock {
                    start: end + 1,
                    ..e.lock
                },
                ..e
            });
        }
    }
    *entries = kept;
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: InodeId = InodeId(9);
    const A: Owner = Owner {
        session: 1,
        owner: 10,
    };
    const B: Owner = Owner {
        session: 2,
        owner: 10,
    };
    const MAX: u64 = u64::MAX;

    #[test]
    fn exclusive_excludes_other_owners_only() {
        let locks = FileLocks::default();
        locks.set(F, A, 1, LockKind::Write, 0, 99).unwrap();
        // The owner itself may lock again (it replaces its lock).
        locks.set(F, A, 1, LockKind::Read, 50, 60).unwrap();
        let refused = locks.set(F, B, 2, LockKind::Read, 99, 200).unwrap_err();
        assert_eq!(refused.code, ErrorCode::Busy);
        // Past the lock: free.
        locks.set(F, B, 2, LockKind::Write, 100, 200).unwrap();
        // Another file: free.
        locks.set(InodeId(10), B, 2, LockKind::Write, 0, MAX).unwrap();
    }

    #[test]
    fn shared_locks_coexist_until_one_wants_exclusive() {
        let locks = FileLocks::default();
        locks.set(F, A, 1, LockKind::Read, 0, MAX).unwrap();
        locks.set(F, B, 2, LockKind::Read, 0, MAX).unwrap();
        assert_eq!(
            locks.set(F, B, 2, LockKind::Write, 5, 5).unwrap_err().code,
            ErrorCode::Busy
        );
        let holder = locks.test(F, B, LockKind::Write, 5, 5).unwrap();
        assert_eq!((holder.write, holder.pid, holder.start), (false, 1, 0));
        assert_eq!(locks.test(F, B, LockKind::Read, 5, 5), None);
    }

    #[test]
    fn unlocking_the_middle_keeps_both_ends() {
        let locks = FileLocks::default();
        locks.set(F, A, 1, LockKind::Write, 0, 99).unwrap();
        locks.set(F, A, 1, LockKind::Unlock, 40, 59).unwrap();
        assert_eq!(locks.held(), 2);
        locks.set(F, B, 2, LockKind::Write, 40, 59).unwrap();
        assert!(locks.test(F, B, LockKind::Read, 39, 39).is_some());
        assert!(locks.test(F, B, LockKind::Read, 60, 60).is_some());
        // Unlock everything of A: B's stays.
        locks.set(F, A, 1, LockKind::Unlock, 0, MAX).unwrap();
        assert_eq!(locks.held(), 1);
        assert_eq!(locks.test(F, A, LockKind::Write, 0, MAX).unwrap().start, 40);
    }

    #[test]
    fn downgrading_lets_readers_in_and_a_lapsed_session_frees_all() {
        let locks = FileLocks::default();
        locks.set(F, A, 1, LockKind::Write, 0, MAX).unwrap();
        locks.set(F, A, 1, LockKind::Read, 0, MAX).unwrap();
        assert_eq!(locks.held(), 1);
        locks.set(F, B, 2, LockKind::Read, 0, MAX).unwrap();
        assert_eq!(locks.sessions(), vec![1, 2]);
        assert_eq!(locks.drop_sessions(|s| s == 1), 1);
        locks.set(F, B, 2, LockKind::Write, 0, MAX).unwrap();
        assert_eq!(locks.held(), 1);
    }

    #[test]
    fn bad_ranges_and_too_many_locks_are_refused() {
        let locks = FileLocks::default();
        assert_eq!(
            locks.set(F, A, 1, LockKind::Write, 10, 9).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        for k in 0..LOCKS_PER_FILE_MAX as u64 {
            locks.set(F, A, 1, LockKind::Read, 2 * k, 2 * k).unwrap();
        }
        let refused = locks.set(F, A, 1, LockKind::Read, MAX - 1, MAX - 1).unwrap_err();
        assert_eq!(refused.code, ErrorCode::TooLarge);
        assert_eq!(locks.held(), LOCKS_PER_FILE_MAX);
        // Unlocking all still works, and frees the count.
        locks.set(F, A, 1, LockKind::Unlock, 0, MAX).unwrap();
        assert_eq!(locks.held(), 0);
    }
}

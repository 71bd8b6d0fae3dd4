//! POSIX byte-range lock rules over a table of every owner's locks, pure (no I/O, no
//! clocks): the metadata manager's cluster-wide table and each mount's copy of its own
//! locks (what it reclaims after a manager restart) are this one type.
//!
//! An owner is a mount session and the lock owner the kernel gave the mount. An owner's
//! own locks never conflict with each other; a new lock replaces what the owner held in
//! its range (splitting what it overlaps); an unlock drops the owner's locks in its
//! range; two locks conflict when they overlap, belong to different owners and one of
//! them is exclusive.
//!
//! Invariant: bounded, `LOCKS_PER_FILE_MAX` per file and `LOCKS_MAX` in all; past them
//! a lock is refused with `TooLarge`, never stored.

use std::collections::HashMap;

use crate::{ErrorCode, HeldLock, LockKind, LockRequest, WireError};
use weft_layout::InodeId;

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

impl Owner {
    pub fn of(request: &LockRequest) -> Owner {
        Owner {
            session: request.session,
            owner: request.owner,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    owner: Owner,
    lock: HeldLock,
}

/// Every file's locks.
#[derive(Default)]
pub struct LockTable {
    files: HashMap<InodeId, Vec<Entry>>,
    total: usize,
}

fn overlaps(a: &HeldLock, start: u64, end: u64) -> bool {
    a.start <= end && start <= a.end
}

impl LockTable {
    /// Applies `request`: takes (`Read`, `Write`) or drops (`Unlock`) the owner's lock.
    /// A conflicting lock of another owner refuses it with `Busy`.
    pub fn set(&mut self, request: &LockRequest) -> Result<(), WireError> {
        let LockRequest {
            inode,
            pid,
            kind,
            start,
            end,
            ..
        } = *request;
        let owner = Owner::of(request);
        if start > end {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("lock range {start}..={end} ends before it starts"),
            ));
        }
        let write = match kind {
            LockKind::Unlock => {
                if let Some(entries) = self.files.get_mut(&inode) {
                    let before = entries.len();
                    cut(entries, owner, start, end);
                    self.total = self.total + entries.len() - before;
                    if entries.is_empty() {
                        self.files.remove(&inode);
                    }
                }
                return Ok(());
            }
            LockKind::Read => false,
            LockKind::Write => true,
        };
        let entries = self.files.entry(inode).or_default();
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
        let total = self.total - before + next.len();
        if next.len() > LOCKS_PER_FILE_MAX || total > LOCKS_MAX {
            if entries.is_empty() {
                self.files.remove(&inode);
            }
            return Err(WireError::new(
                ErrorCode::TooLarge,
                format!("too many locks (at most {LOCKS_PER_FILE_MAX} on one file, {LOCKS_MAX} in all)"),
            ));
        }
        *entries = next;
        self.total = total;
        Ok(())
    }

    /// The first lock of another owner that would refuse `request` (F_GETLK); `None`
    /// for `Unlock`.
    pub fn test(&self, request: &LockRequest) -> Option<HeldLock> {
        let write = match request.kind {
            LockKind::Unlock => return None,
            LockKind::Read => false,
            LockKind::Write => true,
        };
        conflict(
            self.files.get(&request.inode)?,
            Owner::of(request),
            write,
            request.start,
            request.end,
        )
    }

    /// Whether the owner of `request` already holds all of it, of its kind (so that
    /// taking it again changes nothing).
    pub fn holds(&self, request: &LockRequest) -> bool {
        let write = match request.kind {
            LockKind::Unlock => return false,
            LockKind::Read => false,
            LockKind::Write => true,
        };
        let owner = Owner::of(request);
        self.files.get(&request.inode).is_some_and(|entries| {
            entries.iter().any(|e| {
                e.owner == owner
                    && e.lock.write == write
                    && e.lock.start <= request.start
                    && request.end <= e.lock.end
            })
        })
    }

    /// Drops every lock of the sessions `lapsed` returns true for; returns how many.
    pub fn drop_sessions(&mut self, lapsed: impl Fn(u64) -> bool) -> usize {
        let mut dropped = 0;
        self.files.retain(|_, entries| {
            let before = entries.len();
            entries.retain(|e| !lapsed(e.owner.session));
            dropped += before - entries.len();
            !entries.is_empty()
        });
        self.total -= dropped;
        dropped
    }

    /// Drops every lock of `owner` on `inode`; true if it held any.
    pub fn drop_owner(&mut self, inode: InodeId, owner: Owner) -> bool {
        let Some(entries) = self.files.get_mut(&inode) else {
            return false;
        };
        let before = entries.len();
        entries.retain(|e| e.owner != owner);
        let dropped = before - entries.len();
        self.total -= dropped;
        if entries.is_empty() {
            self.files.remove(&inode);
        }
        dropped > 0
    }

    /// The sessions holding locks (to renew or lapse).
    pub fn sessions(&self) -> Vec<u64> {
        let mut sessions: Vec<u64> = self
            .files
            .values()
            .flat_map(|entries| entries.iter().map(|e| e.owner.session))
            .collect();
        sessions.sort_unstable();
        sessions.dedup();
        sessions
    }

    /// Every lock held, as the request that takes it again (a reclaim).
    pub fn requests(&self) -> Vec<LockRequest> {
        self.files
            .iter()
            .flat_map(|(&inode, entries)| {
                entries.iter().map(move |e| LockRequest {
                    session: e.owner.session,
                    owner: e.owner.owner,
                    inode,
                    pid: e.lock.pid,
                    kind: if e.lock.write {
                        LockKind::Write
                    } else {
                        LockKind::Read
                    },
                    start: e.lock.start,
                    end: e.lock.end,
                })
            })
            .collect()
    }

    /// Whether any lock is held on `inode`.
    pub fn on(&self, inode: InodeId) -> bool {
        self.files.contains_key(&inode)
    }

    /// Locks held in all.
    pub fn held(&self) -> usize {
        self.total
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
    const MAX: u64 = u64::MAX;

    /// Owner A (session 1) or B (session 2), process `session`, `kind` on `[start, end]`.
    fn req(session: u64, inode: InodeId, kind: LockKind, start: u64, end: u64) -> LockRequest {
        LockRequest {
            session,
            owner: 10,
            inode,
            pid: session as u32,
            kind,
            start,
            end,
        }
    }
    fn a(kind: LockKind, start: u64, end: u64) -> LockRequest {
        req(1, F, kind, start, end)
    }
    fn b(kind: LockKind, start: u64, end: u64) -> LockRequest {
        req(2, F, kind, start, end)
    }

    #[test]
    fn exclusive_excludes_other_owners_only() {
        let mut locks = LockTable::default();
        locks.set(&a(LockKind::Write, 0, 99)).unwrap();
        // The owner itself may lock again (it replaces its lock).
        locks.set(&a(LockKind::Read, 50, 60)).unwrap();
        let refused = locks.set(&b(LockKind::Read, 99, 200)).unwrap_err();
        assert_eq!(refused.code, ErrorCode::Busy);
        // Past the lock: free.
        locks.set(&b(LockKind::Write, 100, 200)).unwrap();
        // Another file: free.
        locks.set(&req(2, InodeId(10), LockKind::Write, 0, MAX)).unwrap();
    }

    #[test]
    fn shared_locks_coexist_until_one_wants_exclusive() {
        let mut locks = LockTable::default();
        locks.set(&a(LockKind::Read, 0, MAX)).unwrap();
        locks.set(&b(LockKind::Read, 0, MAX)).unwrap();
        assert_eq!(
            locks.set(&b(LockKind::Write, 5, 5)).unwrap_err().code,
            ErrorCode::Busy
        );
        let holder = locks.test(&b(LockKind::Write, 5, 5)).unwrap();
        assert_eq!((holder.write, holder.pid, holder.start), (false, 1, 0));
        assert_eq!(locks.test(&b(LockKind::Read, 5, 5)), None);
    }

    #[test]
    fn unlocking_the_middle_keeps_both_ends() {
        let mut locks = LockTable::default();
        locks.set(&a(LockKind::Write, 0, 99)).unwrap();
        locks.set(&a(LockKind::Unlock, 40, 59)).unwrap();
        assert_eq!(locks.held(), 2);
        assert!(locks.holds(&a(LockKind::Write, 60, 99)));
        assert!(!locks.holds(&a(LockKind::Write, 30, 60)));
        locks.set(&b(LockKind::Write, 40, 59)).unwrap();
        assert!(locks.test(&b(LockKind::Read, 39, 39)).is_some());
        assert!(locks.test(&b(LockKind::Read, 60, 60)).is_some());
        // Unlock everything of A: B's stays.
        locks.set(&a(LockKind::Unlock, 0, MAX)).unwrap();
        assert_eq!(locks.held(), 1);
        assert_eq!(locks.test(&a(LockKind::Write, 0, MAX)).unwrap().start, 40);
    }

    #[test]
    fn downgrading_lets_readers_in_and_a_lapsed_session_frees_all() {
        let mut locks = LockTable::default();
        locks.set(&a(LockKind::Write, 0, MAX)).unwrap();
        locks.set(&a(LockKind::Read, 0, MAX)).unwrap();
        assert_eq!(locks.held(), 1);
        locks.set(&b(LockKind::Read, 0, MAX)).unwrap();
        assert_eq!(locks.sessions(), vec![1, 2]);
        assert_eq!(locks.drop_sessions(|s| s == 1), 1);
        locks.set(&b(LockKind::Write, 0, MAX)).unwrap();
        assert_eq!(locks.held(), 1);
    }

    #[test]
    fn the_requests_listed_take_the_same_locks_again() {
        let mut locks = LockTable::default();
        locks.set(&a(LockKind::Write, 0, 99)).unwrap();
        locks.set(&a(LockKind::Unlock, 40, 59)).unwrap();
        locks.set(&b(LockKind::Read, 200, 300)).unwrap();
        let mut again = LockTable::default();
        for request in locks.requests() {
            again.set(&request).unwrap();
        }
        assert_eq!(again.held(), 3);
        for probe in [
            a(LockKind::Write, 40, 59),
            b(LockKind::Write, 0, 39),
            b(LockKind::Read, 60, 60),
        ] {
            assert_eq!(again.test(&probe), locks.test(&probe));
        }
        assert!(again.drop_owner(F, Owner::of(&a(LockKind::Unlock, 0, 0))));
        assert!(!again.drop_owner(F, Owner::of(&a(LockKind::Unlock, 0, 0))));
        assert_eq!(again.held(), 1);
        assert!(again.on(F));
    }

    #[test]
    fn bad_ranges_and_too_many_locks_are_refused() {
        let mut locks = LockTable::default();
        assert_eq!(
            locks.set(&a(LockKind::Write, 10, 9)).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        for k in 0..LOCKS_PER_FILE_MAX as u64 {
            locks.set(&a(LockKind::Read, 2 * k, 2 * k)).unwrap();
        }
        let refused = locks.set(&a(LockKind::Read, MAX - 1, MAX - 1)).unwrap_err();
        assert_eq!(refused.code, ErrorCode::TooLarge);
        assert_eq!(locks.held(), LOCKS_PER_FILE_MAX);
        // Unlocking all still works, and frees the count.
        locks.set(&a(LockKind::Unlock, 0, MAX)).unwrap();
        assert_eq!(locks.held(), 0);
    }
}

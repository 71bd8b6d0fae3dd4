//! Cluster-wide byte-range locks (`fcntl` F_SETLK/F_SETLKW/F_GETLK, and `flock`, which
//! mounts send as whole-file locks of the open file, as NFS does): the manager keeps
//! them, so that processes on different mounts exclude each other as processes on one
//! machine do. The rules are weft-proto's `lock_table`; this adds the grace after a
//! restart, in the manner of NFS's:
//!
//! 1. Locks live in the manager's memory only; a restart loses them, but every mount
//!    keeps a copy of its own (its `LockTable`) and notices the restart within about
//!    `LOCK_RENEW_PERIOD` (the incarnation its `LockSession` renewals return changed).
//! 2. For the grace after a start (`LOCK_GRACE_DEFAULT`, `weftd --lock-grace-ms`) the
//!    manager grants only reclaims (`FileLockReclaim`) of those locks. A reclaim that
//!    conflicts with another is refused (`Busy`): that lock is lost.
//! 3. Meanwhile an ordinary lock that a reclaimed lock refuses is refused at once (that
//!    lock is real); any other is answered "grace left" and asked again by the mount,
//!    so F_SETLKW keeps waiting and F_SETLK and F_GETLK are answered when the grace
//!    ends. Unlocks are done at once.
//! 4. After the grace a reclaim is refused (`Stale`) unless the owner holds that lock
//!    already: the lock is lost, and the mount fails its holder's I/O on that file with
//!    EIO rather than let it write believing itself alone.
//! 5. The grace is measured from the start and ends for good once passed; a manager
//!    whose database was created by this start has none (no mount can hold a lock of
//!    an earlier one).
//!
//! Invariants:
//! - Bounded: reclaims count against the same `LOCKS_PER_FILE_MAX`/`LOCKS_MAX` as locks.
//! - A session that stops renewing (its mount died) loses its locks with its lease
//!   (`drop_sessions`), so a crashed client cannot hold a file forever.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use weft_proto::lock_table::LockTable;
use weft_proto::{ErrorCode, HeldLock, LockKind, LockRequest, WireError};

/// A lock request the grace holds back: ask again once it is over, in about `left`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InGrace {
    pub left: Duration,
}

/// Every file's locks, and the grace after a start.
#[derive(Default)]
pub struct FileLocks {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    table: LockTable,
    /// When the grace ends (`None`: over, or none).
    grace_until: Option<Instant>,
}

impl State {
    /// The grace left at `now`; ends it for good once passed.
    fn grace_left(&mut self, now: Instant) -> Option<Duration> {
        let until = self.grace_until?;
        if now >= until {
            self.grace_until = None;
            return None;
        }
        Some(until - now)
    }
}

impl FileLocks {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the grace for reclaims: it ends at `until`.
    pub fn start_grace(&self, until: Instant) {
        self.lock().grace_until = Some(until);
    }

    /// The grace left at `now` (`None`: over).
    pub fn grace_left(&self, now: Instant) -> Option<Duration> {
        self.lock().grace_left(now)
    }

    /// Applies `request` (take, change or drop a lock). A conflicting lock of another
    /// owner refuses it with `Busy`; during the grace a lock no reclaimed lock refuses
    /// is held back (`Ok(Some)`: not granted).
    pub fn set(&self, request: &LockRequest, now: Instant) -> Result<Option<InGrace>, WireError> {
        let mut state = self.lock();
        if request.kind != LockKind::Unlock {
            if let Some(left) = state.grace_left(now) {
                // A conflict with a reclaimed lock refuses now (as after the grace);
                // anything else may yet meet a lock not reclaimed so far.
                if state.table.test(request).is_none() {
                    return Ok(Some(InGrace { left }));
                }
            }
        }
        state.table.set(request).map(|()| None)
    }

    /// Takes again a lock the owner held before the manager restarted. During the grace
    /// as `set` does (a conflict with another reclaim is `Busy`); after it, `Stale` unless
    /// the owner already holds it.
    pub fn reclaim(&self, request: &LockRequest, now: Instant) -> Result<(), WireError> {
        let mut state = self.lock();
        if request.kind == LockKind::Unlock {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                "a reclaim takes a lock; it cannot drop one",
            ));
        }
        if state.grace_left(now).is_none() {
            if state.table.holds(request) {
                return Ok(());
            }
            return Err(WireError::new(
                ErrorCode::Stale,
                format!(
                    "lock of bytes {}..={} not reclaimed: the manager's grace after its restart is over, and the lock is lost",
                    request.start, request.end
                ),
            ));
        }
        state.table.set(request)
    }

    /// The first lock of another owner that would refuse `request` (F_GETLK). During
    /// the grace, when no reclaimed lock does, `Err` (ask again).
    pub fn test(&self, request: &LockRequest, now: Instant) -> Result<Option<HeldLock>, InGrace> {
        let mut state = self.lock();
        let holder = state.table.test(request);
        match state.grace_left(now) {
            Some(left) if holder.is_none() && request.kind != LockKind::Unlock => Err(InGrace { left }),
            _ => Ok(holder),
        }
    }

    /// Drops every lock of the sessions `lapsed` returns true for; returns how many.
    pub fn drop_sessions(&self, lapsed: impl Fn(u64) -> bool) -> usize {
        self.lock().table.drop_sessions(lapsed)
    }

    /// The sessions holding locks (to renew or lapse).
    pub fn sessions(&self) -> Vec<u64> {
        self.lock().table.sessions()
    }

    /// Locks held in all.
    pub fn held(&self) -> usize {
        self.lock().table.held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_layout::InodeId;

    fn req(session: u64, kind: LockKind, start: u64, end: u64) -> LockRequest {
        LockRequest {
            session,
            owner: 7,
            inode: InodeId(9),
            pid: session as u32,
            kind,
            start,
            end,
        }
    }

    #[test]
    fn without_a_grace_locks_are_granted_at_once() {
        let locks = FileLocks::default();
        let now = Instant::now();
        assert_eq!(locks.set(&req(1, LockKind::Write, 0, 9), now), Ok(None));
        assert_eq!(
            locks.set(&req(2, LockKind::Write, 5, 5), now).unwrap_err().code,
            ErrorCode::Busy
        );
        assert_eq!(locks.grace_left(now), None);
        // A reclaim without a grace is lost unless already held.
        assert_eq!(
            locks
                .reclaim(&req(2, LockKind::Read, 20, 29), now)
                .unwrap_err()
                .code,
            ErrorCode::Stale
        );
        locks.reclaim(&req(1, LockKind::Write, 2, 3), now).unwrap();
        assert_eq!(locks.held(), 1);
    }

    #[test]
    fn the_grace_grants_reclaims_only_and_ends_for_good() {
        let locks = FileLocks::default();
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(10);
        locks.start_grace(end);
        let during = t0 + Duration::from_secs(1);
        // An ordinary lock waits for the grace (nothing reclaimed refuses it yet).
        assert_eq!(
            locks.set(&req(2, LockKind::Write, 0, 9), during),
            Ok(Some(InGrace {
                left: Duration::from_secs(9)
            }))
        );
        assert_eq!(locks.held(), 0);
        assert!(locks.test(&req(2, LockKind::Read, 0, 0), during).is_err());
        // A reclaims; B's second reclaim of the same bytes conflicts: B's is lost.
        locks.reclaim(&req(1, LockKind::Write, 0, 9), during).unwrap();
        assert_eq!(
            locks
                .reclaim(&req(2, LockKind::Read, 5, 5), during)
                .unwrap_err()
                .code,
            ErrorCode::Busy
        );
        // A lock that a reclaimed one refuses is refused at once, and F_GETLK names it.
        assert_eq!(
            locks
                .set(&req(2, LockKind::Write, 9, 20), during)
                .unwrap_err()
                .code,
            ErrorCode::Busy
        );
        assert_eq!(
            locks
                .test(&req(2, LockKind::Read, 0, 0), during)
                .unwrap()
                .unwrap()
                .pid,
            1
        );
        // Unlocks are not held back.
        assert_eq!(locks.set(&req(1, LockKind::Unlock, 0, 4), during), Ok(None));
        assert_eq!(
            locks.test(&req(2, LockKind::Read, 0, 0), during),
            Err(InGrace {
                left: Duration::from_secs(9)
            })
        );
        // After: a late reclaim is lost, and ordinary locks are granted.
        assert_eq!(
            locks
                .reclaim(&req(3, LockKind::Write, 100, 100), end)
                .unwrap_err()
                .code,
            ErrorCode::Stale
        );
        assert_eq!(locks.set(&req(2, LockKind::Write, 0, 4), end), Ok(None));
        assert_eq!(locks.grace_left(end), None);
        // Once over, a clock that reads earlier (an Instant from before) brings no grace back.
        assert_eq!(locks.set(&req(3, LockKind::Write, 50, 50), during), Ok(None));
        // A reclaim of a lock the owner already holds is no loss.
        locks.reclaim(&req(1, LockKind::Write, 5, 9), end).unwrap();
    }

    #[test]
    fn reclaims_count_against_the_limits() {
        use weft_proto::lock_table::LOCKS_PER_FILE_MAX;
        let locks = FileLocks::default();
        let t0 = Instant::now();
        locks.start_grace(t0 + Duration::from_secs(60));
        for k in 0..LOCKS_PER_FILE_MAX as u64 {
            locks.reclaim(&req(1, LockKind::Read, 2 * k, 2 * k), t0).unwrap();
        }
        assert_eq!(
            locks
                .reclaim(&req(1, LockKind::Read, u64::MAX, u64::MAX), t0)
                .unwrap_err()
                .code,
            ErrorCode::TooLarge
        );
        assert_eq!(locks.held(), LOCKS_PER_FILE_MAX);
        assert_eq!(
            locks
                .reclaim(&req(1, LockKind::Unlock, 0, 0), t0)
                .unwrap_err()
                .code,
            ErrorCode::InvalidArgument
        );
    }
}

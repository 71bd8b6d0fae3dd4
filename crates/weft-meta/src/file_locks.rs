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
//! 6. Ending it early (NFS's client-tracking database and RECLAIM_COMPLETE): the
//!    manager records durably (the store's `lock_sessions`) each session that takes a
//!    lock, before granting that session's first one (`Outcome::Unrecorded`: record,
//!    then ask again), and drops a session from the record at its end
//!    (`LockSessionEnd`, holding none) or once it has held no lock for
//!    `LOCK_RECORD_IDLE`. At a start the grace waits for the recorded sessions
//!    only: none recorded, no grace; else it ends as soon as each has said it
//!    reclaimed all it holds (`LockReclaimComplete`), or when its time is up. A full
//!    record (`RECORDED_MAX`) is marked durably instead, and the next start then
//!    waits the full grace.
//!
//! Why it is safe: every session holding a lock at a crash is in the durable record
//! (recorded before its first grant, and dropped only while it holds none, atomically
//! with respect to grants: a grant checks the in-memory copy under the same mutex, and
//! the service serialises the durable writes, `MetaService::record_lock_session`). So
//! the grace lasts until every holder said it reclaimed, or for its full time. A stale
//! record (a session that held none, or whose mount went, recorded at the crash) only
//! makes the grace run full.
//!
//! Invariants:
//! - Bounded: reclaims count against the same `LOCKS_PER_FILE_MAX`/`LOCKS_MAX` as locks.
//! - A session that stops renewing (its mount died) loses its locks with its lease
//!   (`drop_sessions`), so a crashed client cannot hold a file forever.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use weft_proto::lock_table::LockTable;
use weft_proto::{ErrorCode, HeldLock, LockKind, LockRequest, WireError};

/// A lock request the grace holds back: ask again once it is over, in about `left`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InGrace {
    pub left: Duration,
}

/// Most sessions in the durable record of lock holders; past it the record is marked
/// full and the next start gives the full grace.
pub const RECORDED_MAX: usize = 4096;

/// What a lock request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Granted (or, for an unlock, done).
    Done,
    /// Held back by the grace: ask again.
    InGrace(InGrace),
    /// Not granted: the session must be recorded durably first
    /// (`recording`, then `recorded` or `overflowed`), then asked again.
    Unrecorded,
}

/// Whether a session needs a durable record before its lock (`FileLocks::recording`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recording {
    /// Already recorded (or the record is marked full).
    Recorded,
    /// Record it (`store.record_lock_session`), then call `recorded`.
    Record,
    /// The record is full: mark it so (`store.record_lock_overflow`), then call
    /// `overflowed`.
    Full,
}

/// What `idle_records` found to drop from the durable record.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Idle {
    pub sessions: Vec<u64>,
    /// The full mark of an earlier incarnation's record can go.
    pub overflow: bool,
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
    /// Recorded sessions that have not said they reclaimed all (`None` during a grace:
    /// wait for its time, the record was full or unreadable).
    waiting: Option<HashSet<u64>>,
    /// Lock sessions are recorded durably (`start_records`): a session not in
    /// `recorded` is not granted a lock until it is.
    tracking: bool,
    /// Sessions in the durable record -> when last seen holding a lock (or recorded).
    recorded: HashMap<u64, Instant>,
    /// The durable record is marked full: any session may be granted.
    overflowed: bool,
    /// The record was marked full when this incarnation started: the mark goes once
    /// the grace is over (unless this incarnation filled it again).
    stale_overflow: bool,
    /// When `idle_records` last looked (it walks every lock: at most every `idle / 4`).
    swept: Option<Instant>,
}

impl State {
    /// The grace left at `now`; ends it for good once passed.
    fn grace_left(&mut self, now: Instant) -> Option<Duration> {
        let until = self.grace_until?;
        if now >= until {
            self.end_grace();
            return None;
        }
        Some(until - now)
    }

    fn end_grace(&mut self) {
        self.grace_until = None;
        self.waiting = None;
    }

    /// Whether `session` may be granted a lock without a record first.
    fn may_grant(&self, session: u64) -> bool {
        !self.tracking || self.overflowed || self.recorded.contains_key(&session)
    }

    fn held_by(&mut self, session: u64, now: Instant) {
        if let Some(at) = self.recorded.get_mut(&session) {
            *at = now;
        }
    }
}

impl FileLocks {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the grace for reclaims: it ends at `until`.
    pub fn start_grace(&self, until: Instant) {
        let mut state = self.lock();
        state.grace_until = Some(until);
        // This grace waits for its time: no `reclaim_complete` ends it.
        state.waiting = None;
    }

    /// The grace left at `now` (`None`: over).
    pub fn grace_left(&self, now: Instant) -> Option<Duration> {
        self.lock().grace_left(now)
    }

    /// Records of lock sessions from here (see the module comment): `recorded` are the
    /// sessions the durable record names (`overflow`: it was marked full). Starts a
    /// grace ending at `until` if any session may hold a lock from before (`until`
    /// `None`: no grace wanted), ended early once every recorded session has called
    /// `reclaim_complete` (not when the record was full). Returns whether a grace
    /// started.
    pub fn start_records(
        &self,
        recorded: &[u64],
        overflow: bool,
        until: Option<Instant>,
        now: Instant,
    ) -> bool {
        let mut state = self.lock();
        state.tracking = true;
        state.recorded = recorded.iter().map(|&s| (s, now)).collect();
        state.stale_overflow = overflow;
        let Some(until) = until else { return false };
        if recorded.is_empty() && !overflow {
            return false;
        }
        state.grace_until = Some(until);
        state.waiting = (!overflow).then(|| recorded.iter().copied().collect());
        true
    }

    /// Whether `session` needs a durable record before its lock; the caller writes it,
    /// then calls `recorded` or `overflowed`, one session at a time.
    pub fn recording(&self, session: u64) -> Recording {
        let state = self.lock();
        if state.may_grant(session) {
            Recording::Recorded
        } else if state.recorded.len() >= RECORDED_MAX {
            Recording::Full
        } else {
            Recording::Record
        }
    }

    /// `session` is in the durable record now.
    pub fn recorded(&self, session: u64, now: Instant) {
        self.lock().recorded.insert(session, now);
    }

    /// The durable record is marked full now.
    pub fn overflowed(&self) {
        self.lock().overflowed = true;
    }

    /// Sessions to drop from the durable record: once the grace is over, those that
    /// have held no lock for `idle` (they are dropped here at once, so that their next
    /// lock is recorded again); and the full mark of an earlier incarnation, unless
    /// this one filled the record again. Looks at most every `idle / 4` (it walks every
    /// lock), so a session goes between `idle` and `idle * 5 / 4` after its last lock.
    pub fn idle_records(&self, idle: Duration, now: Instant) -> Idle {
        let mut state = self.lock();
        if !state.tracking || state.grace_left(now).is_some() {
            return Idle::default();
        }
        if state
            .swept
            .is_some_and(|at| now.saturating_duration_since(at) < idle / 4)
        {
            return Idle::default();
        }
        state.swept = Some(now);
        let holding: HashSet<u64> = state.table.sessions().into_iter().collect();
        let mut sessions = Vec::new();
        state.recorded.retain(|&session, at| {
            if holding.contains(&session) {
                *at = now;
                true
            } else if now.saturating_duration_since(*at) >= idle {
                sessions.push(session);
                false
            } else {
                true
            }
        });
        sessions.sort_unstable();
        let overflow = state.stale_overflow && !state.overflowed;
        state.stale_overflow = false;
        Idle { sessions, overflow }
    }

    /// Sessions in the record (in memory).
    pub fn recorded_sessions(&self) -> usize {
        self.lock().recorded.len()
    }

    /// `session` reclaimed all its locks (or holds none): the grace no longer waits for
    /// it, and ends if it waited for no other. Returns the grace left.
    pub fn reclaim_complete(&self, session: u64, now: Instant) -> Option<Duration> {
        let mut state = self.lock();
        let left = state.grace_left(now)?;
        let Some(waiting) = state.waiting.as_mut() else {
            return Some(left);
        };
        waiting.remove(&session);
        if waiting.is_empty() {
            state.end_grace();
            return None;
        }
        Some(left)
    }

    /// Mount session `session` ends (its mount unmounts). If it holds no lock here it
    /// leaves the in-memory record (returns true: the caller drops its durable row, under
    /// the same ordering as `idle_records`), and a grace no longer waits for it: an
    /// ended session never reclaims.
    pub fn end_session(&self, session: u64, now: Instant) -> bool {
        let mut state = self.lock();
        if state.table.sessions().binary_search(&session).is_ok() {
            return false;
        }
        if state.grace_left(now).is_some() {
            if let Some(waiting) = state.waiting.as_mut() {
                waiting.remove(&session);
                if waiting.is_empty() {
                    state.end_grace();
                }
            }
        }
        state.recorded.remove(&session).is_some()
    }

    /// Recorded sessions the grace still waits for (`None`: no grace, or it waits for
    /// its time).
    pub fn waiting_for(&self, now: Instant) -> Option<usize> {
        let mut state = self.lock();
        state.grace_left(now)?;
        state.waiting.as_ref().map(HashSet::len)
    }

    /// Applies `request` (take, change or drop a lock). A conflicting lock of another
    /// owner refuses it with `Busy`; during the grace a lock no reclaimed lock refuses
    /// is held back; a lock of a session not recorded yet is `Unrecorded`.
    pub fn set(&self, request: &LockRequest, now: Instant) -> Result<Outcome, WireError> {
        let mut state = self.lock();
        if request.kind != LockKind::Unlock {
            let grace = state.grace_left(now);
            // A conflict refuses now, in the grace too (the reclaimed lock is real);
            // anything else may yet meet a lock not reclaimed so far, or must wait
            // for its session's record.
            if (grace.is_some() || !state.may_grant(request.session)) && state.table.test(request).is_none() {
                return Ok(match grace {
                    Some(left) => Outcome::InGrace(InGrace { left }),
                    None => Outcome::Unrecorded,
                });
            }
        }
        state.table.set(request)?;
        if request.kind != LockKind::Unlock {
            state.held_by(request.session, now);
        }
        Ok(Outcome::Done)
    }

    /// Takes again a lock the owner held before the manager restarted. During the grace
    /// as `set` does (a conflict with another reclaim is `Busy`; `Unrecorded` as there);
    /// after it, `Stale` unless the owner already holds it.
    pub fn reclaim(&self, request: &LockRequest, now: Instant) -> Result<Outcome, WireError> {
        let mut state = self.lock();
        if request.kind == LockKind::Unlock {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                "a reclaim takes a lock; it cannot drop one",
            ));
        }
        if state.grace_left(now).is_none() {
            if state.table.holds(request) {
                return Ok(Outcome::Done);
            }
            return Err(WireError::new(
                ErrorCode::Stale,
                format!(
                    "lock of bytes {}..={} not reclaimed: the manager's grace after its restart is over, and the lock is lost",
                    request.start, request.end
                ),
            ));
        }
        if !state.may_grant(request.session) && state.table.test(request).is_none() {
            return Ok(Outcome::Unrecorded);
        }
        state.table.set(request)?;
        state.held_by(request.session, now);
        Ok(Outcome::Done)
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
        assert_eq!(locks.set(&req(1, LockKind::Write, 0, 9), now), Ok(Outcome::Done));
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
            Ok(Outcome::InGrace(InGrace {
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
        assert_eq!(
            locks.set(&req(1, LockKind::Unlock, 0, 4), during),
            Ok(Outcome::Done)
        );
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
        assert_eq!(locks.set(&req(2, LockKind::Write, 0, 4), end), Ok(Outcome::Done));
        assert_eq!(locks.grace_left(end), None);
        // Once over, a clock that reads earlier (an Instant from before) brings no grace back.
        assert_eq!(
            locks.set(&req(3, LockKind::Write, 50, 50), during),
            Ok(Outcome::Done)
        );
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

    /// Records `session` as the service does when `set` answers `Unrecorded`.
    fn record(locks: &FileLocks, session: u64, now: Instant) {
        match locks.recording(session) {
            Recording::Record => locks.recorded(session, now),
            Recording::Full => locks.overflowed(),
            Recording::Recorded => {}
        }
    }

    #[test]
    fn with_no_session_recorded_a_start_has_no_grace_and_first_locks_are_recorded() {
        let locks = FileLocks::default();
        let t0 = Instant::now();
        assert!(!locks.start_records(&[], false, Some(t0 + Duration::from_secs(10)), t0));
        assert_eq!(locks.grace_left(t0), None);
        // A session's first lock waits for its record; its next ones do not.
        assert_eq!(
            locks.set(&req(1, LockKind::Write, 0, 9), t0),
            Ok(Outcome::Unrecorded)
        );
        assert_eq!(locks.held(), 0);
        assert_eq!(locks.recording(1), Recording::Record);
        record(&locks, 1, t0);
        assert_eq!(locks.recording(1), Recording::Recorded);
        assert_eq!(locks.set(&req(1, LockKind::Write, 0, 9), t0), Ok(Outcome::Done));
        assert_eq!(locks.set(&req(1, LockKind::Read, 20, 29), t0), Ok(Outcome::Done));
        // A conflict refuses without a record; an unlock needs none.
        assert_eq!(
            locks.set(&req(2, LockKind::Write, 5, 5), t0).unwrap_err().code,
            ErrorCode::Busy
        );
        assert_eq!(locks.set(&req(2, LockKind::Unlock, 0, 99), t0), Ok(Outcome::Done));
        assert_eq!(locks.recorded_sessions(), 1);
    }

    #[test]
    fn the_grace_ends_once_every_recorded_session_completed_its_reclaims() {
        let locks = FileLocks::default();
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(30);
        assert!(locks.start_records(&[1, 2], false, Some(end), t0));
        assert_eq!(locks.waiting_for(t0), Some(2));
        let during = t0 + Duration::from_secs(1);
        // Session 1 reclaims (recorded already: no new record) and says it is done.
        assert_eq!(
            locks.reclaim(&req(1, LockKind::Write, 0, 9), during),
            Ok(Outcome::Done)
        );
        assert_eq!(locks.reclaim_complete(1, during), Some(Duration::from_secs(29)));
        // A session not recorded, or one naming itself twice, ends nothing.
        assert!(locks.reclaim_complete(3, during).is_some());
        assert!(locks.reclaim_complete(1, during).is_some());
        assert_eq!(locks.waiting_for(during), Some(1));
        assert_eq!(
            locks.set(&req(3, LockKind::Write, 50, 50), during),
            Ok(Outcome::InGrace(InGrace {
                left: Duration::from_secs(29)
            }))
        );
        // Session 2, holding nothing now, completes: the grace is over, long before its time.
        assert_eq!(locks.reclaim_complete(2, during), None);
        assert_eq!(locks.grace_left(during), None);
        assert_eq!(locks.waiting_for(during), None);
        // Other bytes are granted (once session 3 is recorded); session 1's are not.
        assert_eq!(
            locks.set(&req(3, LockKind::Write, 50, 50), during),
            Ok(Outcome::Unrecorded)
        );
        record(&locks, 3, during);
        assert_eq!(
            locks.set(&req(3, LockKind::Write, 50, 50), during),
            Ok(Outcome::Done)
        );
        assert_eq!(
            locks
                .set(&req(3, LockKind::Write, 5, 5), during)
                .unwrap_err()
                .code,
            ErrorCode::Busy
        );
        // A late reclaim is lost as after a grace that ran out.
        assert_eq!(
            locks
                .reclaim(&req(2, LockKind::Write, 70, 70), during)
                .unwrap_err()
                .code,
            ErrorCode::Stale
        );
    }

    #[test]
    fn a_session_that_does_not_complete_keeps_the_whole_grace() {
        let locks = FileLocks::default();
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(10);
        assert!(locks.start_records(&[1, 2], false, Some(end), t0));
        locks.reclaim(&req(1, LockKind::Write, 0, 9), t0).unwrap();
        assert!(locks.reclaim_complete(1, t0).is_some());
        let late = end - Duration::from_millis(1);
        assert_eq!(
            locks.set(&req(3, LockKind::Write, 50, 50), late),
            Ok(Outcome::InGrace(InGrace {
                left: Duration::from_millis(1)
            }))
        );
        assert_eq!(locks.grace_left(end), None);
        // Nor does a full record, nor a stop's grace, end early.
        let full = FileLocks::default();
        assert!(full.start_records(&[1], true, Some(end), t0));
        assert_eq!(full.waiting_for(t0), None);
        assert!(full.reclaim_complete(1, t0).is_some());
        assert!(full.grace_left(t0).is_some());
        let stopping = FileLocks::default();
        stopping.start_records(&[], false, None, t0);
        stopping.start_grace(end);
        assert!(stopping.reclaim_complete(1, t0).is_some());
        // No grace is wanted (a new database, a clean stop): none, whatever is recorded.
        let none = FileLocks::default();
        assert!(!none.start_records(&[1], true, None, t0));
        assert_eq!(none.grace_left(t0), None);
    }

    #[test]
    fn sessions_idle_for_long_leave_the_record_and_are_recorded_again() {
        let idle = Duration::from_secs(30);
        let at = |s| Instant::now() + Duration::from_secs(s);
        let t0 = at(0);
        let locks = FileLocks::default();
        // Session 9 was recorded by the last run and does not come back.
        assert!(locks.start_records(&[9], true, Some(t0 + Duration::from_secs(10)), t0));
        assert_eq!(
            locks.idle_records(idle, t0),
            Idle::default(),
            "not during the grace"
        );
        let after = t0 + Duration::from_secs(10);
        record(&locks, 1, after);
        assert_eq!(
            locks.set(&req(1, LockKind::Write, 0, 9), after),
            Ok(Outcome::Done)
        );
        // The full mark of the last run goes once its grace is over; session 9 after
        // it held nothing for `idle` since the start.
        assert_eq!(
            locks.idle_records(idle, after),
            Idle {
                sessions: vec![],
                overflow: true
            }
        );
        assert_eq!(
            locks.idle_records(idle, t0 + Duration::from_secs(25)),
            Idle::default()
        );
        assert_eq!(
            locks.idle_records(idle, t0 + Duration::from_secs(31)),
            Idle::default(),
            "looked less than idle / 4 ago"
        );
        assert_eq!(
            locks.idle_records(idle, t0 + Duration::from_secs(40)),
            Idle {
                sessions: vec![9],
                overflow: false
            }
        );
        // Session 1 holds its lock: it stays, however long.
        assert_eq!(
            locks.idle_records(idle, t0 + Duration::from_secs(100)),
            Idle::default()
        );
        assert_eq!(
            locks.set(&req(1, LockKind::Unlock, 0, 9), t0 + Duration::from_secs(101)),
            Ok(Outcome::Done)
        );
        assert_eq!(
            locks.idle_records(idle, t0 + Duration::from_secs(120)),
            Idle::default()
        );
        assert_eq!(
            locks.idle_records(idle, t0 + Duration::from_secs(131)),
            Idle {
                sessions: vec![1],
                overflow: false
            }
        );
        // Its next lock is recorded again first.
        assert_eq!(
            locks.set(&req(1, LockKind::Write, 0, 9), t0 + Duration::from_secs(132)),
            Ok(Outcome::Unrecorded)
        );
    }

    #[test]
    fn a_full_record_is_marked_and_then_grants_unrecorded_sessions() {
        let locks = FileLocks::default();
        let t0 = Instant::now();
        locks.start_records(&[], false, None, t0);
        for session in 0..RECORDED_MAX as u64 {
            assert_eq!(locks.recording(session), Recording::Record);
            locks.recorded(session, t0);
        }
        let late = RECORDED_MAX as u64;
        assert_eq!(locks.recording(late), Recording::Full);
        assert_eq!(
            locks.set(&req(late, LockKind::Read, 0, 0), t0),
            Ok(Outcome::Unrecorded)
        );
        locks.overflowed();
        assert_eq!(locks.set(&req(late, LockKind::Read, 0, 0), t0), Ok(Outcome::Done));
        assert_eq!(locks.recorded_sessions(), RECORDED_MAX);
        // This run filled it: its full mark stays for the next start.
        assert!(!locks.idle_records(Duration::from_secs(30), t0).overflow);
    }

    #[test]
    fn an_ended_session_leaves_the_record_unless_it_holds_locks() {
        let locks = FileLocks::default();
        let t0 = Instant::now();
        assert!(locks.start_records(&[1, 2], false, Some(t0 + Duration::from_secs(30)), t0));
        // Session 1 reclaims: it holds a lock, so its end (a stray one) changes nothing.
        locks.reclaim(&req(1, LockKind::Write, 0, 9), t0).unwrap();
        assert!(!locks.end_session(1, t0));
        assert_eq!(locks.waiting_for(t0), Some(2));
        // Session 2 ended (unmounted): it leaves the record, and the grace waits for 1 only.
        assert!(locks.end_session(2, t0));
        assert!(!locks.end_session(2, t0), "once");
        assert_eq!(locks.waiting_for(t0), Some(1));
        assert_eq!(locks.recorded_sessions(), 1);
        assert_eq!(locks.reclaim_complete(1, t0), None);
        // After the grace: an ended session's next lock is recorded again first.
        assert_eq!(
            locks.set(&req(2, LockKind::Write, 50, 50), t0),
            Ok(Outcome::Unrecorded)
        );
    }
}

//! Lock sessions and the grace after a restart: sessions recorded and ended, lapsed
//! ones released, the grace during which only reclaims are answered.

use super::*;

impl MetaService {
    /// Grants only reclaims of locks (see `file_locks`) for `grace` from this service's
    /// start, or until every mount session its record names as holding locks has
    /// reclaimed them; none if no session is recorded, or if `grace` is zero or its
    /// database was created by this start (the record is then stale: it goes).
    pub fn set_lock_grace(&self, grace: Duration) {
        let (recorded, overflow) = match self.store.lock_sessions() {
            Ok(found) => found,
            Err(e) => {
                eprintln!(
                    "weftd meta: reading the record of mounts that held file locks: {e}; waiting the whole grace for reclaims"
                );
                (Vec::new(), true)
            }
        };
        let wanted = !self.store.created() && !grace.is_zero();
        if wanted {
            self.file_locks
                .start_records(&recorded, overflow, Some(self.started + grace), self.started);
            return;
        }
        if !recorded.is_empty() || overflow {
            let _one = self.lock_records.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = self.store.forget_lock_sessions(&recorded, overflow) {
                eprintln!("weftd meta: clearing the record of mounts that held file locks: {e}");
            }
        }
        self.file_locks.start_records(&[], false, None, self.started);
    }

    /// Mount sessions the grace still waits for (`None`: no grace, or one that runs
    /// for its whole time).
    pub fn lock_grace_waiting_for(&self) -> Option<usize> {
        self.file_locks.waiting_for(Instant::now())
    }

    /// Records `session` durably as one that takes locks, if it is not yet (see
    /// `file_locks`); the lock is granted only once this returned.
    pub(super) fn record_lock_session(&self, session: u64) -> Result<(), WireError> {
        use crate::file_locks::Recording;
        let _one = self.lock_records.lock().unwrap_or_else(|p| p.into_inner());
        match self.file_locks.recording(session) {
            Recording::Recorded => {}
            Recording::Record => {
                self.store.record_lock_session(session)?;
                self.file_locks.recorded(session, Instant::now());
            }
            Recording::Full => {
                self.store.record_lock_overflow()?;
                self.file_locks.overflowed();
                eprintln!(
                    "weftd meta: the record of mounts holding file locks is full ({} sessions): after a crash the next start waits its whole grace for reclaims",
                    crate::file_locks::RECORDED_MAX
                );
            }
        }
        Ok(())
    }

    /// `LockSessionEnd`: `session`'s mount unmounts; unless it still holds locks here it
    /// leaves the record, and the grace, if any, stops waiting for it.
    pub(super) fn end_lock_session(&self, session: u64) -> Result<(), WireError> {
        let _one = self.lock_records.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let during = self.file_locks.grace_left(now).is_some();
        if self.file_locks.end_session(session, now) {
            self.store.forget_lock_sessions(&[session], false)?;
        }
        if during && self.file_locks.grace_left(now).is_none() {
            self.log_grace_over();
        }
        Ok(())
    }

    pub(super) fn log_grace_over(&self) {
        eprintln!(
            "weftd meta: every mount that held file locks has reclaimed them: the grace ends {} ms after the start",
            self.started.elapsed().as_millis()
        );
    }

    /// Drops from the record the sessions that held no lock for `LOCK_RECORD_IDLE`
    /// (the purger's, every round).
    pub fn forget_idle_lock_sessions(&self) {
        let _one = self.lock_records.lock().unwrap_or_else(|p| p.into_inner());
        let idle = self
            .file_locks
            .idle_records(weft_proto::LOCK_RECORD_IDLE, Instant::now());
        if let Err(e) = self.store.forget_lock_sessions(&idle.sessions, idle.overflow) {
            eprintln!(
                "weftd meta: dropping {} idle mounts from the record of mounts holding file locks: {e} (a crash costs the next start its whole grace)",
                idle.sessions.len()
            );
        }
    }

    /// Stops granting file locks for good (the server is stopping): from here every
    /// lock request is held back as during a grace (mounts ask again, then ask the next
    /// manager), so the locks held can only go down. Returns how many are held.
    pub fn stop_locks(&self) -> usize {
        self.file_locks
            .start_grace(Instant::now() + Duration::from_secs(24 * 3600));
        self.file_locks.held()
    }

    /// The grace for lock reclaims left (`None`: over, or none).
    pub fn lock_grace_left(&self) -> Option<Duration> {
        self.file_locks.grace_left(Instant::now())
    }

    pub(super) fn lock_state(&self, grace: Option<Duration>) -> Response {
        Response::LockState(weft_proto::LockState {
            incarnation: self.incarnation.load(Ordering::Relaxed),
            // Rounded up: a grace left of under a millisecond is still one.
            grace_left_ms: grace.map_or(0, |left| left.as_nanos().div_ceil(1_000_000) as u64),
        })
    }

    /// Notes that mount session `session` is alive.
    pub(super) fn renewed(&self, session: Option<u64>) {
        let Some(session) = session else { return };
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.len() >= SESSIONS_MAX && !sessions.contains_key(&session) {
            sessions.retain(|_, at| at.elapsed() < self.session_lease);
        }
        if sessions.len() < SESSIONS_MAX || sessions.contains_key(&session) {
            sessions.insert(session, Instant::now());
        }
    }

    /// How long a mount session lives without renewing (`SESSION_LEASE` by default;
    /// shorter in tests).
    pub fn set_session_lease(&mut self, lease: Duration) {
        self.session_lease = lease;
    }

    /// `Stale` if `session`'s locks were dropped for lapsing and its mount was not told
    /// yet; `tell`: this answer tells it (its `LockSession`), so it is forgotten.
    pub(super) fn check_lapsed(&self, session: u64, tell: bool) -> Result<(), WireError> {
        let mut lapsed = self.lapsed.lock().unwrap_or_else(|p| p.into_inner());
        let was = if tell {
            lapsed.take(session)
        } else {
            lapsed.contains(session)
        };
        if was {
            return Err(WireError::new(
                ErrorCode::Stale,
                format!(
                    "this mount's file locks were dropped: its session {session:#x} was not renewed for {} ms (the mount was stopped or cut off from the metadata manager), and other processes may have taken them",
                    self.session_lease.as_millis()
                ),
            ));
        }
        Ok(())
    }

    /// Releases files kept by sessions that have not renewed within the lease (their
    /// mounts are gone). Returns how many were released.
    pub fn release_lapsed_sessions(&self) -> usize {
        if self.started.elapsed() < self.session_lease {
            return 0;
        }
        let lapsed_session = |session: u64| {
            let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            sessions
                .get(&session)
                .is_none_or(|at| at.elapsed() >= self.session_lease)
        };
        // Those holding locks are remembered, so that their mounts learn it if they
        // come back (see `lapsed`).
        let lapsing: Vec<u64> = self
            .file_locks
            .sessions()
            .into_iter()
            .filter(|&s| lapsed_session(s))
            .collect();
        if !lapsing.is_empty() {
            let dropped = self.file_locks.drop_sessions(|s| lapsing.contains(&s));
            let mut lapsed = self.lapsed.lock().unwrap_or_else(|p| p.into_inner());
            for &session in &lapsing {
                lapsed.add(session);
            }
            eprintln!(
                "weftd meta: dropped {dropped} file locks of {} mounts that stopped renewing their sessions (for {} ms); they are told when they come back",
                lapsing.len(),
                self.session_lease.as_millis()
            );
        }
        let kept = match self.store.kept(KEPT_SCAN_MAX) {
            Ok(kept) => kept,
            Err(error) => {
                eprintln!("weftd meta: reading kept files: {error}");
                return 0;
            }
        };
        let lapsed: Vec<(InodeId, u64)> = {
            let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            kept.into_iter()
                .filter(|(_, s)| {
                    sessions
                        .get(s)
                        .is_none_or(|at| at.elapsed() >= self.session_lease)
                })
                .collect()
        };
        let mut released = 0;
        for (inode, session) in lapsed {
            match self.store.release(inode, session) {
                Ok(()) => released += 1,
                Err(error) => {
                    eprintln!("weftd meta: releasing inode {inode} of lapsed session {session:#x}: {error}")
                }
            }
        }
        released
    }
}

//! POSIX record locks and the lock sessions that own them, through the manager.

use super::Client;
use crate::error::{unexpected, ClientError};
use weft_layout::InodeId;
use weft_proto::msg::{Request, Response};
use weft_proto::{HeldLock, LockRequest, LockState};

/// F_GETLK's answer (`Client::file_lock_test`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockTest {
    /// The first conflicting lock, if any.
    Holder(Option<HeldLock>),
    /// The manager's grace after a restart holds the question back: ask again.
    Grace(LockState),
}

impl Client {
    /// Mount session `session` closed its last descriptor of `inode`, which an unlink or
    /// rename kept for it: the file goes if it still has no name.
    pub fn release(&self, session: u64, inode: InodeId) -> Result<(), ClientError> {
        self.done(Request::Release { session, inode }, &format!("inode {inode}"))
    }

    /// Tells the manager that mount session `session` is alive (the files it keeps stay).
    pub fn renew_session(&self, session: u64) -> Result<(), ClientError> {
        self.done(Request::RenewSession { session }, "session")
    }

    /// Takes, changes or drops the cluster-wide lock `request` asks for (see the
    /// manager's `file_locks`). A conflicting lock of another owner refuses it with
    /// `Busy`; to wait, ask again. `Some`: the manager's grace after its restart held
    /// it back (not granted; its incarnation and grace left): ask again.
    pub fn file_lock(&self, request: &LockRequest) -> Result<Option<LockState>, ClientError> {
        match self
            .inner
            .meta(&Request::FileLock(*request))
            .map_err(|e| e.context(&format!("lock of inode {}", request.inode)))?
        {
            Response::Done => Ok(None),
            Response::LockState(state) => Ok(Some(state)),
            other => Err(unexpected(&other)),
        }
    }

    /// Takes again, during the manager's grace after its restart, a lock this mount
    /// held before it; refused (`Busy`, `Stale`) when the lock is lost.
    pub fn file_lock_reclaim(&self, request: &LockRequest) -> Result<LockState, ClientError> {
        self.lock_state(Request::FileLockReclaim(*request), request.inode)
    }

    /// Tells the manager that mount session `session`, which holds locks, is alive;
    /// answers its incarnation (changed: it restarted, reclaim) and grace.
    pub fn lock_session(&self, session: u64) -> Result<LockState, ClientError> {
        match self
            .inner
            .meta(&Request::LockSession { session })
            .map_err(|e| e.context("lock session"))?
        {
            Response::LockState(state) => Ok(state),
            other => Err(unexpected(&other)),
        }
    }

    /// Tells manager `incarnation` that mount session `session` reclaimed every lock it
    /// holds (or holds none), so its grace need not wait for it; answers its lock state.
    pub fn lock_reclaim_complete(&self, session: u64, incarnation: u64) -> Result<LockState, ClientError> {
        match self
            .inner
            .meta(&Request::LockReclaimComplete { session, incarnation })
            .map_err(|e| e.context("lock reclaim complete"))?
        {
            Response::LockState(state) => Ok(state),
            other => Err(unexpected(&other)),
        }
    }

    /// Tells the manager that mount session `session` ends, holding no lock: it need not
    /// be waited for after a restart.
    pub fn lock_session_end(&self, session: u64) -> Result<(), ClientError> {
        match self
            .inner
            .meta(&Request::LockSessionEnd { session })
            .map_err(|e| e.context("lock session end"))?
        {
            Response::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    pub(super) fn lock_state(&self, request: Request, inode: InodeId) -> Result<LockState, ClientError> {
        match self
            .inner
            .meta(&request)
            .map_err(|e| e.context(&format!("lock of inode {inode}")))?
        {
            Response::LockState(state) => Ok(state),
            other => Err(unexpected(&other)),
        }
    }

    /// The first lock of another owner that would refuse `file_lock(request)` (F_GETLK),
    /// if any; during the manager's grace, when no reclaimed lock does,
    /// `LockTest::Grace` (ask again).
    pub fn file_lock_test(&self, request: &LockRequest) -> Result<LockTest, ClientError> {
        match self
            .inner
            .meta(&Request::FileLockTest(*request))
            .map_err(|e| e.context(&format!("lock of inode {}", request.inode)))?
        {
            Response::LockHolder(holder) => Ok(LockTest::Holder(holder)),
            Response::LockState(state) => Ok(LockTest::Grace(state)),
            other => Err(unexpected(&other)),
        }
    }
}

//! fcntl and flock locks: a conflicting lock waited for on a thread of its own, asked
//! again until granted (the FUSE worker answers other requests meanwhile).

use super::errno;
use crate::locks::{self, Asked, Holders};
use crate::names::Names;
use fuser::{Errno, INodeNo, Notifier, ReplyEmpty};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, OnceLock};
use weft_client::{Client, ClientError, ErrorCode};
use weft_proto::{LockKind, LockRequest};

/// F_RDLCK, F_WRLCK or F_UNLCK.
pub(super) fn lock_kind(typ: i32) -> Option<LockKind> {
    match typ {
        libc::F_RDLCK => Some(LockKind::Read),
        libc::F_WRLCK => Some(LockKind::Write),
        libc::F_UNLCK => Some(LockKind::Unlock),
        _ => None,
    }
}

/// A lock refused by another's: EAGAIN, as fcntl's F_SETLK says it; too many locks:
/// ENOLCK.
pub(super) fn lock_errno(e: &ClientError) -> Errno {
    match e.code() {
        ErrorCode::Busy => Errno::EAGAIN,
        ErrorCode::TooLarge => Errno::ENOLCK,
        _ => errno(e, "lock"),
    }
}

/// Drops every lock of `owner` on `inode` at the manager (its close, or the mount's
/// end; `Holders::forget` dropped them here); a failure is logged (the manager drops
/// them when the session lapses).
/// Runs `task` on a waiting thread of its own if there is room (so that waiting locks
/// do not hold the workers every other request needs), else here.
pub(super) fn on_waiting_thread(holders: &Arc<Holders>, task: impl FnOnce() + Send + 'static) {
    if !holders.start_waiter() {
        return task();
    }
    let ended = Arc::clone(holders);
    let spawned = std::thread::Builder::new()
        .name("weft-fuse-lock".into())
        .spawn(move || {
            task();
            ended.end_waiter();
        });
    if let Err(e) = spawned {
        // The reply went with the closure: fuser answers it with an error.
        holders.end_waiter();
        eprintln!("weft-fuse: no thread for a waiting lock ({e})");
    }
}

/// One F_SETLK/F_SETLKW: what it asks of the manager, and what a granted lock does here.
pub(super) struct LockTaker {
    pub(super) client: Client,
    pub(super) request: LockRequest,
    /// F_SETLKW: wait while another's lock refuses it.
    pub(super) sleep: bool,
    /// The thread that asked (a signal to it ends the wait).
    pub(super) tid: u32,
    pub(super) holders: Arc<Holders>,
    pub(super) notifier: Arc<OnceLock<Notifier>>,
    pub(super) names: Arc<Names>,
}

impl LockTaker {
    pub(super) fn try_once(&self) -> Result<Asked<()>, ClientError> {
        let asked = self.holders.apply(&self.client, &self.request)?;
        if matches!(asked, Asked::Answered(())) && self.request.kind != LockKind::Unlock {
            // What another client wrote before it let go of the lock is read from the
            // io servers, not from pages this kernel cached earlier; and names it
            // removed or made beside the file are looked up afresh.
            let file = self.request.inode;
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(INodeNo(file.0), 0, 0);
                if let Some((dir, names)) = self.names.siblings_of(file, locks::SIBLINGS_DROPPED_MAX) {
                    for name in names {
                        let _ = n.inval_entry(INodeNo(dir.0), OsStr::from_bytes(name.as_bytes()));
                    }
                }
            }
        }
        Ok(asked)
    }

    /// Asks until the lock is granted, refused (F_SETLK, or an error), or the process
    /// is gone or interrupted. The manager's grace after a restart is waited out either way.
    pub(super) fn wait(self, reply: ReplyEmpty) {
        let mut tries = 0u32;
        loop {
            std::thread::sleep(locks::pause(tries));
            tries = tries.saturating_add(1);
            if locks::waiter_interrupted(self.request.pid, self.tid) {
                return reply.error(Errno::EINTR);
            }
            match self.try_once() {
                Ok(Asked::Answered(())) => return reply.ok(),
                Ok(Asked::Grace) => continue,
                Err(e) if e.code() == ErrorCode::Busy && self.sleep => continue,
                Err(e) => return reply.error(lock_errno(&e)),
            }
        }
    }
}

//! `fcntl` record locks and `flock` locks, cluster-wide: the mount asks the manager
//! (`Client::file_lock`, the manager's `file_locks`), so a lock taken through one mount
//! excludes processes on every other mount, as on one machine. Without this the kernel
//! kept locks per mount, and writers coordinating through them on two mounts (SQLite)
//! corrupted their file.
//!
//! - The kernel sends F_SETLK/F_SETLKW/F_GETLK here (`FUSE_POSIX_LOCKS`) and `flock` as
//!   a whole-file lock whose owner is the open file (`FUSE_FLOCK_LOCKS`), so, as on NFS,
//!   `flock` and `fcntl` locks of one file exclude each other.
//! - Taking a lock drops the kernel's cached pages and attributes of the file and its
//!   cached names of the files beside it (up to `SIBLINGS_DROPPED_MAX`), and writes
//!   this mount kept are sent before a lock is dropped, so what one lock holder wrote,
//!   made or removed is what the next one sees (as NFS revalidates at lock). SQLite
//!   needs the names: right after locking its database it looks for a journal beside
//!   it, and a name another client removed a moment ago, still cached here, made it
//!   take the next writer's live journal for a crashed one and delete it.
//! - A waiting F_SETLKW (or `flock` without LOCK_NB) asks again with a growing pause
//!   (`WAIT_PAUSE_MIN` to `WAIT_PAUSE_MAX`) on a thread of its own (at most `WAITERS_MAX`
//!   at once; past that the worker itself waits), and gives up with EINTR once the
//!   waiting process is gone or has SIGKILL pending (the kernel keeps a killed waiter
//!   until the daemon answers).
//! - POSIX locks go at the owner's close of the file (the kernel's flush names the
//!   owner), `flock` locks at the open file's release, and all of them when the mount
//!   ends. Only owners that took a lock here send an unlock at close, so a close costs
//!   no request otherwise. While any lock is held the mount renews its session, so the
//!   manager drops the locks of a mount that died (after its lease).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use weft_client::InodeId;

/// The shortest and longest pause between two tries of a waiting lock.
pub const WAIT_PAUSE_MIN: Duration = Duration::from_millis(2);
pub const WAIT_PAUSE_MAX: Duration = Duration::from_millis(100);
/// Waiting locks served by threads of their own at once.
pub const WAITERS_MAX: usize = 256;
/// Names beside a newly locked file whose cached entries the kernel is told to drop.
pub const SIBLINGS_DROPPED_MAX: usize = 4096;
/// (file, owner) pairs remembered as holding locks; past this a new pair is not
/// remembered, and its locks go only when the mount ends or its session lapses.
pub const HOLDERS_MAX: usize = 1 << 20;

/// The owners that took a lock through this mount.
#[derive(Default)]
pub struct Holders {
    held: Mutex<HashSet<(InodeId, u64)>>,
    waiters: AtomicUsize,
}

impl Holders {
    /// `owner` took a lock on `inode`.
    pub fn took(&self, inode: InodeId, owner: u64) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.len() < HOLDERS_MAX {
            held.insert((inode, owner));
        }
    }

    /// Forgets `owner`'s locks on `inode`; true if it had taken any here.
    pub fn forget(&self, inode: InodeId, owner: u64) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(inode, owner))
    }

    /// Every (file, owner) holding locks, forgotten.
    pub fn drain(&self) -> Vec<(InodeId, u64)> {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect()
    }

    pub fn any(&self) -> bool {
        !self.held.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// A place for one more waiting thread, if there is room.
    pub fn start_waiter(&self) -> bool {
        self.waiters
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < WAITERS_MAX).then_some(n + 1)
            })
            .is_ok()
    }

    pub fn end_waiter(&self) {
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The pause after `tries` refused tries of a waiting lock.
pub fn pause(tries: u32) -> Duration {
    WAIT_PAUSE_MIN
        .saturating_mul(1u32 << tries.min(16))
        .min(WAIT_PAUSE_MAX)
}

/// Whether process `pid` (in this mount's pid namespace) may still want its lock: it
/// exists and has no SIGKILL pending. A process killed while it waits for a lock stays
/// (in uninterruptible sleep) until the daemon answers, so its existence alone says
/// nothing.
pub fn process_alive(pid: u32) -> bool {
    if pid == 0 {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => !kill_pending(&status),
        Err(_) => false,
    }
}

/// Whether a /proc/PID/status text shows SIGKILL pending (for the thread or the
/// process).
fn kill_pending(status: &str) -> bool {
    const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);
    status
        .lines()
        .filter_map(|line| {
            line.strip_prefix("SigPnd:")
                .or_else(|| line.strip_prefix("ShdPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & SIGKILL_BIT != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_sigkill_is_seen() {
        let quiet =
            "Name:\tflock\nState:\tS (sleeping)\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n";
        let killed =
            "Name:\tflock\nState:\tD (disk sleep)\nSigPnd:\t0000000000000100\nShdPnd:\t0000000000000100\n";
        let interrupted = "SigPnd:\t0000000000000002\nShdPnd:\t0000000000000000\n";
        assert!(!kill_pending(quiet));
        assert!(kill_pending(killed));
        assert!(!kill_pending(interrupted));
        assert!(process_alive(std::process::id()));
    }

    #[test]
    fn pauses_grow_to_the_bound() {
        assert_eq!(pause(0), WAIT_PAUSE_MIN);
        assert!(pause(3) > pause(2));
        assert_eq!(pause(40), WAIT_PAUSE_MAX);
    }

    #[test]
    fn waiters_are_bounded() {
        let holders = Holders::default();
        for _ in 0..WAITERS_MAX {
            assert!(holders.start_waiter());
        }
        assert!(!holders.start_waiter());
        holders.end_waiter();
        assert!(holders.start_waiter());
    }

    #[test]
    fn holders_are_forgotten_once() {
        let holders = Holders::default();
        holders.took(InodeId(3), 7);
        assert!(holders.any());
        assert!(holders.forget(InodeId(3), 7));
        assert!(!holders.forget(InodeId(3), 7));
        assert!(!holders.any());
    }
}

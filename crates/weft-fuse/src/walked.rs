//! Lookups an open may go by: the walk of one `open(2)` ends in a lookup of the file's
//! name (when the kernel's entry for it has timed out) and then the open, both from
//! the same thread. Checked with the manager the way an open checks its names (every
//! name from the root, `Revalidate`), with the size and data stamp asked of the io
//! servers at the same time, such a lookup's answer is as fresh as a second check by
//! the open would be: it was made after the open began, so it sees every change another
//! client acknowledged (or closed) before that. Close-to-open then holds with one
//! manager request and one request per io server per open, not two of each (NFS trusts
//! the lookup of an open's walk the same way).
//!
//! What tells the lookup of an open's own walk from one made for an earlier, separate
//! call (a `stat` a moment before, whose entry the kernel still holds, so the open's
//! walk made no lookup): the same thread (the FUSE request's pid is the caller's
//! thread id), the same inode, the open arriving within `WINDOW` of the lookup's
//! answer, and one open per lookup. An open that finds no such lookup checks its
//! names itself, as before.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_client::{Attr, DataStamp, InodeId};

/// Longest time from a checked lookup's answer to the open it vouches for. The kernel
/// sends the open right after the lookup's answer reaches it; what comes later belongs
/// to another call (and an earlier call's lookup is trusted at most this long after it
/// was answered, when the same thread opens the same file).
pub const WINDOW: Duration = Duration::from_millis(5);

/// Threads remembered at once; past this, answers older than `WINDOW` go, then the
/// oldest.
const THREADS_MAX: usize = 4096;

struct Walked {
    at: Instant,
    attr: Attr,
    stamp: Option<DataStamp>,
}

/// Thread -> its last checked lookup.
pub struct Walks {
    window: Duration,
    table: Mutex<HashMap<u32, Walked>>,
}

impl Walks {
    pub fn new(window: Duration) -> Walks {
        Walks {
            window,
            table: Mutex::new(HashMap::new()),
        }
    }

    /// Thread `pid` looked a name up, and the manager confirmed every name of its path,
    /// finding `attr` (with its size and `stamp` from the io servers, asked during the
    /// check).
    pub fn checked(&self, pid: u32, attr: Attr, stamp: Option<DataStamp>) {
        if pid == 0 {
            return;
        }
        let mut table = self.lock();
        if table.len() >= THREADS_MAX && !table.contains_key(&pid) {
            let window = self.window;
            table.retain(|_, w| w.at.elapsed() < window);
            if table.len() >= THREADS_MAX {
                if let Some(oldest) = table.iter().min_by_key(|(_, w)| w.at).map(|(p, _)| *p) {
                    table.remove(&oldest);
                }
            }
        }
        table.insert(
            pid,
            Walked {
                at: Instant::now(),
                attr,
                stamp,
            },
        );
    }

    /// Thread `pid` looked a name up without the check (answered from a listing, or
    /// the check did not hold): an earlier checked lookup no longer ends its walk.
    pub fn unchecked(&self, pid: u32) {
        let mut table = self.lock();
        if !table.is_empty() {
            table.remove(&pid);
        }
    }

    /// What thread `pid`'s open of `inode` may go by: the checked lookup that ended its
    /// walk, if that found `inode` within the window. Taken either way (one open per
    /// lookup).
    pub fn take(&self, pid: u32, inode: InodeId) -> Option<(Attr, Option<DataStamp>)> {
        let mut table = self.lock();
        if table.is_empty() {
            return None;
        }
        let walked = table.remove(&pid)?;
        (walked.attr.inode == inode && walked.at.elapsed() < self.window)
            .then_some((walked.attr, walked.stamp))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Walked>> {
        self.table.lock().expect("walk table poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(inode: u64) -> Attr {
        crate::attr::test_file(inode, 0o644)
    }

    #[test]
    fn only_the_same_threads_next_open_of_the_same_inode_within_the_window_is_vouched_for() {
        let walks = Walks::new(Duration::from_millis(200));
        assert!(walks.take(7, InodeId(5)).is_none());
        walks.checked(7, attr(5), None);
        assert!(walks.take(8, InodeId(5)).is_none(), "another thread");
        assert!(walks.take(7, InodeId(5)).is_some());
        assert!(walks.take(7, InodeId(5)).is_none(), "one open per lookup");
        walks.checked(7, attr(5), None);
        assert!(walks.take(7, InodeId(6)).is_none(), "another inode");
        assert!(
            walks.take(7, InodeId(5)).is_none(),
            "taken by the open of the other inode"
        );
        walks.checked(7, attr(5), None);
        walks.unchecked(7);
        assert!(
            walks.take(7, InodeId(5)).is_none(),
            "a later unchecked lookup ends the walk"
        );
        walks.checked(7, attr(5), None);
        std::thread::sleep(Duration::from_millis(250));
        assert!(walks.take(7, InodeId(5)).is_none(), "outside the window");
        walks.checked(0, attr(5), None);
        assert!(
            walks.take(0, InodeId(5)).is_none(),
            "no thread (the kernel's own requests)"
        );
    }

    #[test]
    fn the_table_is_bounded() {
        let walks = Walks::new(Duration::from_secs(60));
        for pid in 1..=(THREADS_MAX as u32 + 10) {
            walks.checked(pid, attr(u64::from(pid)), None);
        }
        assert!(walks.lock().len() <= THREADS_MAX);
        let last = THREADS_MAX as u32 + 10;
        assert!(walks.take(last, InodeId(u64::from(last))).is_some());
    }
}

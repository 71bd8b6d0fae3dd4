//! Sizes of quiet files, as their io servers told the manager: what lets a stat skip
//! the io servers (`AttrSized`, the answer to `Vouched`).
//!
//! A file's size, blocks and modification time live in its objects on the io servers,
//! so a client's stat asks the manager and then every io server of the file. But the
//! manager knows when nobody can be changing them (`writers.rs`: no write capability
//! live, none issued since stamp S). Once a file's last writer gave its capabilities
//! back (`ReleaseWrites`, sent after its last handle closed and everything it wrote was
//! acknowledged), the manager asks the file's io servers once (`ObjStamp`, many files
//! in one request per server) and keeps the answer under S: as long as it vouches S
//! for the file, that answer is the file's size, and a stat is one round trip to the
//! manager. The rules are the client's own for what it read under a vouch (see
//! weft-client's `vouched.rs`): the vouch is taken before the io servers are asked, and
//! the answer is kept only if the vouch is still S after it came back; any grant, or a
//! size or time the manager sets (a truncate, `utimens`, a migration), moves the stamp.
//!
//! Bounded: at most `KNOWN_MAX` files known (past it the table starts over) and
//! `QUEUE_MAX` waiting to be measured (past it releases are not measured: their stats
//! ask the io servers, as before). In memory only: a restarted manager vouches for
//! nothing until every capability of its previous run expired anyway.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;
use weft_layout::{InodeId, Layout};
use weft_proto::{ObjStamped, Timespec};

/// Most files whose sizes are kept.
pub const KNOWN_MAX: usize = 65_536;
/// Most files waiting to be measured.
pub const QUEUE_MAX: usize = 65_536;
/// Most files measured in one round.
pub const ROUND_MAX: usize = 4096;

/// What the io servers said of one quiet file, under a vouch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measured {
    /// The vouch it was measured under.
    pub vouch: u64,
    /// The layout it was measured with.
    pub layout: Layout,
    pub size: u64,
    pub blocks: u64,
    /// The objects' latest modification time.
    pub mtime: Timespec,
}

impl Measured {
    /// From what each object of `layout` said (`ObjStamp`, asked with the object's
    /// striping), as a client sums it: the largest end, the blocks, the latest time.
    /// `None` when every object is missing (the file was removed meanwhile).
    pub fn of(vouch: u64, layout: Layout, objects: &[ObjStamped]) -> Option<Measured> {
        let (mut size, mut blocks, mut mtime) = (0, 0, Timespec::default());
        let mut present = 0;
        for object in objects {
            present += usize::from(object.add_to(&mut size, &mut blocks, &mut mtime));
        }
        (present > 0).then_some(Measured {
            vouch,
            layout,
            size,
            blocks,
            mtime,
        })
    }
}

#[derive(Default)]
struct Queue {
    order: Vec<InodeId>,
    queued: HashSet<InodeId>,
}

/// See the module's text.
#[derive(Default)]
pub struct Sizes {
    known: Mutex<HashMap<InodeId, Measured>>,
    queue: Mutex<Queue>,
    waiting: Condvar,
    /// Stats answered with a known size.
    answered: AtomicU64,
    /// Files measured.
    measured: AtomicU64,
}

impl Sizes {
    fn known(&self) -> MutexGuard<'_, HashMap<InodeId, Measured>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `inode` became quiet: measure it (unless the queue is full).
    pub fn want(&self, inode: InodeId) {
        let mut queue = self.queue();
        if queue.order.len() >= QUEUE_MAX || !queue.queued.insert(inode) {
            return;
        }
        queue.order.push(inode);
        drop(queue);
        self.waiting.notify_one();
    }

    /// Up to `ROUND_MAX` files to measure, waiting at most `wait` for one.
    pub fn take(&self, wait: Duration) -> Vec<InodeId> {
        let mut queue = self.queue();
        if queue.order.is_empty() {
            queue = self
                .waiting
                .wait_timeout(queue, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let n = queue.order.len().min(ROUND_MAX);
        let taken: Vec<InodeId> = queue.order.drain(..n).collect();
        for inode in &taken {
            queue.queued.remove(inode);
        }
        taken
    }

    /// Keeps what was measured.
    pub fn learnt(&self, inode: InodeId, measured: Measured) {
        let mut known = self.known();
        if known.len() >= KNOWN_MAX && !known.contains_key(&inode) {
            known.clear();
        }
        known.insert(inode, measured);
        self.measured.fetch_add(1, Ordering::Relaxed);
    }

    /// What is known of `inode` under `vouch` with `layout`, if anything (counted).
    pub fn under(&self, inode: InodeId, vouch: u64, layout: &Option<Layout>) -> Option<Measured> {
        let known = self.known();
        let found = known
            .get(&inode)
            .filter(|m| m.vouch == vouch && Some(&m.layout) == layout.as_ref())
            .cloned();
        if found.is_some() {
            self.answered.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Forgets `inode` (removed).
    pub fn forget(&self, inode: InodeId) {
        self.known().remove(&inode);
    }

    /// Files known now, stats answered with a known size, files measured.
    pub fn counts(&self) -> (usize, u64, u64) {
        (
            self.known().len(),
            self.answered.load(Ordering::Relaxed),
            self.measured.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_layout::ServerId;

    fn layout() -> Layout {
        Layout {
            stripe_size_bytes: 65_536,
            servers: vec![ServerId(1), ServerId(2)],
            replication: Default::default(),
        }
    }

    fn object(end: u64, allocated: u64, secs: i64) -> ObjStamped {
        ObjStamped {
            end,
            allocated,
            stamp: 1,
            mtime: Timespec { secs, nanos: 0 },
        }
    }

    #[test]
    fn a_file_is_its_largest_end_its_blocks_and_its_latest_time() {
        let m = Measured::of(7, layout(), &[object(70_000, 4096, 5), object(65_536, 1000, 9)]).unwrap();
        assert_eq!((m.size, m.blocks, m.mtime.secs), (70_000, 8 + 2, 9));
        // A missing object counts for nothing; all missing: the file is gone.
        let m = Measured::of(7, layout(), &[object(u64::MAX, 0, 0), object(10, 512, 3)]).unwrap();
        assert_eq!((m.size, m.blocks, m.mtime.secs), (10, 1, 3));
        assert_eq!(Measured::of(7, layout(), &[object(u64::MAX, 0, 0)]), None);
    }

    #[test]
    fn a_size_serves_only_under_its_vouch_and_layout() {
        let sizes = Sizes::default();
        let m = Measured::of(7, layout(), &[object(100, 512, 1)]).unwrap();
        sizes.learnt(InodeId(5), m);
        assert!(sizes.under(InodeId(5), 7, &Some(layout())).is_some());
        assert!(
            sizes.under(InodeId(5), 8, &Some(layout())).is_none(),
            "another vouch"
        );
        let other = Layout {
            servers: vec![ServerId(3)],
            ..layout()
        };
        assert!(
            sizes.under(InodeId(5), 7, &Some(other)).is_none(),
            "another layout"
        );
        assert!(sizes.under(InodeId(6), 7, &Some(layout())).is_none());
        sizes.forget(InodeId(5));
        assert!(sizes.under(InodeId(5), 7, &Some(layout())).is_none());
    }

    #[test]
    fn the_queue_is_bounded_and_takes_each_file_once() {
        let sizes = Sizes::default();
        for i in 0..(QUEUE_MAX as u64 + 10) {
            sizes.want(InodeId(i % (QUEUE_MAX as u64 + 10)));
        }
        sizes.want(InodeId(0));
        let mut taken = 0;
        loop {
            let round = sizes.take(Duration::from_millis(1));
            if round.is_empty() {
                break;
            }
            assert!(round.len() <= ROUND_MAX);
            taken += round.len();
        }
        assert_eq!(taken, QUEUE_MAX);
    }
}

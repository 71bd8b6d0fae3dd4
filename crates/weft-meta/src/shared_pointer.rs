//! MPI-IO shared file pointers (`SharedPointer` requests): one per collective open of
//! a file, held in memory and served as an atomic fetch-and-add, so that the ranks of
//! a job taking offsets concurrently never get the same bytes.
//!
//! In memory only: a pointer lives as long as one open of the file by one job, and
//! writing each fetch-and-add durably would cost a commit per shared access. After a
//! restart the pointers are gone and their requests fail with `NotFound` (the client
//! says the shared pointer was lost), so no job reads or writes at an offset the
//! manager forgot. Bounded: past [`POINTERS_MAX`] the one used longest ago (a job that
//! died without closing) makes room.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use weft_layout::InodeId;
use weft_proto::{ErrorCode, SharedOp, WireError};

/// Most shared pointers held at once.
pub const POINTERS_MAX: usize = 65_536;

struct Pointer {
    value: u64,
    epoch: u64,
    used: Instant,
}

/// Pointers let go to make room that a lazy request ([`SharedPointers::apply_since`])
/// must not make again at 0: the most remembered (oldest forgotten first).
pub const EVICTED_MAX: usize = 65_536;

/// The manager's shared file pointers, by (inode, open id).
#[derive(Default)]
pub struct SharedPointers {
    pointers: Mutex<HashMap<(InodeId, u64), Pointer>>,
    /// The keys of pointers let go to make room, oldest first (bounded by `EVICTED_MAX`).
    evicted: Mutex<std::collections::VecDeque<(InodeId, u64)>>,
    /// The incarnation clients see in this server's handshake (`set_incarnation`).
    incarnation: std::sync::atomic::AtomicU64,
}

impl SharedPointers {
    /// The incarnation of this server's handshake: a lazy request naming another one
    /// comes from an open the manager's earlier life saw.
    pub fn set_incarnation(&self, incarnation: u64) {
        self.incarnation
            .store(incarnation, std::sync::atomic::Ordering::Relaxed);
    }

    /// `apply` for an open that made no pointer (`SharedPointerSince`): a missing
    /// pointer is made at 0 first, if `incarnation` is this manager's and the pointer
    /// was never let go to make room; otherwise `NotFound`, as `apply` answers.
    pub fn apply_since(
        &self,
        inode: InodeId,
        open: u64,
        epoch: u64,
        incarnation: u64,
        op: SharedOp,
    ) -> Result<u64, WireError> {
        if !matches!(op, SharedOp::Create | SharedOp::Drop) {
            let key = (inode, open);
            let missing = !self
                .pointers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&key);
            let ours = incarnation == self.incarnation.load(std::sync::atomic::Ordering::Relaxed);
            let evicted = || {
                self.evicted
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&key)
            };
            if missing && ours && !evicted() {
                self.create_if_missing(key, epoch);
            }
        }
        self.apply(inode, open, epoch, op)
    }

    fn create_if_missing(&self, key: (InodeId, u64), epoch: u64) {
        let mut all = self.pointers.lock().unwrap_or_else(|e| e.into_inner());
        if all.contains_key(&key) {
            return;
        }
        self.make_room(&mut all, key);
        all.insert(
            key,
            Pointer {
                value: 0,
                epoch,
                used: Instant::now(),
            },
        );
    }

    /// Lets the pointer used longest ago go when `key` is new and the table is full.
    fn make_room(&self, all: &mut HashMap<(InodeId, u64), Pointer>, key: (InodeId, u64)) {
        if all.contains_key(&key) || all.len() < POINTERS_MAX {
            return;
        }
        let oldest = all.iter().min_by_key(|(_, p)| p.used).map(|(k, _)| *k);
        if let Some(k) = oldest {
            all.remove(&k);
            let mut evicted = self.evicted.lock().unwrap_or_else(|e| e.into_inner());
            if evicted.len() >= EVICTED_MAX {
                evicted.pop_front();
            }
            evicted.push_back(k);
        }
    }

    /// Applies `op` to the pointer of (`inode`, `open`) in view `epoch`; returns its
    /// value before.
    pub fn apply(&self, inode: InodeId, open: u64, epoch: u64, op: SharedOp) -> Result<u64, WireError> {
        let mut all = self.pointers.lock().unwrap_or_else(|e| e.into_inner());
        let key = (inode, open);
        let now = Instant::now();
        match op {
            SharedOp::Create => {
                self.make_room(&mut all, key);
                all.insert(
                    key,
                    Pointer {
                        value: 0,
                        epoch,
                        used: now,
                    },
                );
                return Ok(0);
            }
            SharedOp::Drop => return Ok(all.remove(&key).map_or(0, |p| p.value)),
            _ => {}
        }
        let p = all.get_mut(&key).ok_or_else(|| {
            WireError::new(
                ErrorCode::NotFound,
                format!(
                    "no shared file pointer for inode {} (open {open:#x}): the file was not opened \
                     through MPI-IO, or the metadata manager restarted since and lost it",
                    inode.0
                ),
            )
        })?;
        if epoch > p.epoch {
            p.epoch = epoch;
            p.value = 0;
        } else if epoch < p.epoch {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "shared file pointer of inode {}: view epoch {epoch} is older than {}",
                    inode.0, p.epoch
                ),
            ));
        }
        p.used = now;
        let before = p.value;
        match op {
            SharedOp::FetchAdd(n) => {
                p.value = before.checked_add(n).ok_or_else(|| {
                    WireError::new(ErrorCode::InvalidArgument, "shared file pointer overflows")
                })?;
            }
            SharedOp::Set(v) => p.value = v,
            _ => {}
        }
        Ok(before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_add_set_epochs_and_loss() {
        let s = SharedPointers::default();
        let i = InodeId(7);
        assert!(s.apply(i, 1, 0, SharedOp::Get).is_err());
        assert_eq!(s.apply(i, 1, 0, SharedOp::Create).unwrap(), 0);
        assert_eq!(s.apply(i, 1, 0, SharedOp::FetchAdd(5)).unwrap(), 0);
        assert_eq!(s.apply(i, 1, 0, SharedOp::FetchAdd(3)).unwrap(), 5);
        // Another open of the same file has its own pointer.
        s.apply(i, 2, 0, SharedOp::Create).unwrap();
        assert_eq!(s.apply(i, 2, 0, SharedOp::Get).unwrap(), 0);
        assert_eq!(s.apply(i, 1, 0, SharedOp::Set(100)).unwrap(), 8);
        assert_eq!(s.apply(i, 1, 0, SharedOp::Get).unwrap(), 100);
        // A new view starts at 0; an older epoch is refused.
        assert_eq!(s.apply(i, 1, 1, SharedOp::FetchAdd(4)).unwrap(), 0);
        assert!(s.apply(i, 1, 0, SharedOp::Get).is_err());
        assert!(s.apply(i, 1, 1, SharedOp::FetchAdd(u64::MAX)).is_err());
        s.apply(i, 1, 1, SharedOp::Drop).unwrap();
        assert_eq!(
            s.apply(i, 1, 1, SharedOp::Get).unwrap_err().code,
            ErrorCode::NotFound
        );
    }

    #[test]
    fn a_lazy_pointer_is_made_once_by_its_manager_and_never_after_a_restart() {
        let s = SharedPointers::default();
        s.set_incarnation(42);
        let i = InodeId(3);
        // The first request of an open that made no pointer makes it at 0.
        assert_eq!(s.apply_since(i, 1, 0, 42, SharedOp::FetchAdd(4)).unwrap(), 0);
        assert_eq!(s.apply_since(i, 1, 0, 42, SharedOp::FetchAdd(4)).unwrap(), 4);
        assert_eq!(s.apply_since(i, 1, 0, 42, SharedOp::Get).unwrap(), 8);
        // An open another life of the manager saw: lost, never made again at 0.
        let lost = s.apply_since(i, 2, 0, 41, SharedOp::FetchAdd(1)).unwrap_err();
        assert_eq!(lost.code, ErrorCode::NotFound);
        // Dropped at close: a later lazy Drop is harmless.
        s.apply_since(i, 1, 0, 42, SharedOp::Drop).unwrap();
        assert_eq!(
            s.apply(i, 1, 0, SharedOp::Get).unwrap_err().code,
            ErrorCode::NotFound
        );
    }

    #[test]
    fn a_pointer_let_go_to_make_room_is_not_made_again_at_zero() {
        let s = SharedPointers::default();
        s.set_incarnation(7);
        let first = InodeId(1);
        s.apply_since(first, 1, 0, 7, SharedOp::FetchAdd(10)).unwrap();
        for k in 0..POINTERS_MAX as u64 {
            s.apply(InodeId(100 + k), 1, 0, SharedOp::Create).unwrap();
        }
        let e = s.apply_since(first, 1, 0, 7, SharedOp::FetchAdd(1)).unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound, "an evicted pointer came back at 0");
    }

    #[test]
    fn concurrent_fetch_adds_never_overlap() {
        let s = std::sync::Arc::new(SharedPointers::default());
        s.apply(InodeId(1), 9, 0, SharedOp::Create).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    (0..1000)
                        .map(|_| s.apply(InodeId(1), 9, 0, SharedOp::FetchAdd(3)).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..4000).map(|k| k * 3).collect::<Vec<_>>());
    }
}

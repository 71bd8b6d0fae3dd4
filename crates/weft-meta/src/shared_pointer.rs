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

/// The manager's shared file pointers, by (inode, open id).
#[derive(Default)]
pub struct SharedPointers {
    pointers: Mutex<HashMap<(InodeId, u64), Pointer>>,
}

impl SharedPointers {
    /// Applies `op` to the pointer of (`inode`, `open`) in view `epoch`; returns its
    /// value before.
    pub fn apply(&self, inode: InodeId, open: u64, epoch: u64, op: SharedOp) -> Result<u64, WireError> {
        let mut all = self.pointers.lock().unwrap_or_else(|e| e.into_inner());
        let key = (inode, open);
        let now = Instant::now();
        match op {
            SharedOp::Create => {
                if !all.contains_key(&key) && all.len() >= POINTERS_MAX {
                    let oldest = all.iter().min_by_key(|(_, p)| p.used).map(|(k, _)| *k);
                    if let Some(k) = oldest {
                        all.remove(&k);
                    }
                }
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

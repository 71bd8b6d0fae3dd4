//! Stamps for the rebuild of replicated files' stale pieces (issue 33): a rebuild
//! copies a piece here from a fresh copy, chunk by chunk, and must never put the
//! copy's older bytes over a client's write that reached this server meanwhile.
//!
//! Every data-changing request bumps, on arrival (`Handler::changes`, on the event
//! loop, in arrival order), the counters of the 4 MiB chunks of the object it
//! changes; truncates, allocations, view writes and writes spanning many chunks bump
//! the object's whole-object counter instead. A chunk's stamp is the sum of its
//! counters and the whole-object one: it changes whenever such a request arrives
//! (and, counters being shared by hash, sometimes more often: a needless retry, never
//! a missed write). A rebuild reads the stamp (`RebuildStamp`), then the fresh copy's
//! bytes, then writes them with `RebuildWrite`, which is ordered after every
//! overlapping request that arrived before it and applied only if the stamp is
//! unchanged. A client writes a piece it knows to be stale only after every fresh copy
//! of the slot has the write (`weft-client` `replica.rs`), so a write that arrived
//! here before the stamp was read is already in the bytes the rebuild read.
//!
//! Bounded: a fixed table of `BUCKETS` counters, whatever the number of objects.

use std::sync::atomic::{AtomicU64, Ordering};
use weft_layout::InodeId;

/// Counters in the table (shared by hash among all objects' chunks).
const BUCKETS: usize = 4096;
/// Object bytes per chunk: `1 << CHUNK_SHIFT` (4 MiB).
const CHUNK_SHIFT: u32 = 22;
/// A request whose runs span more chunks than this bumps the whole-object counter.
const RUN_CHUNKS_MAX: u64 = 1024;
/// The chunk number that stands for the whole object.
const WHOLE: u64 = u64::MAX;

pub(crate) struct Stamps {
    counters: Box<[AtomicU64]>,
}

impl Default for Stamps {
    fn default() -> Stamps {
        Stamps {
            counters: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Stamps {
    fn bucket(&self, inode: InodeId, chunk: u64) -> &AtomicU64 {
        // A multiplicative hash of both numbers (Fibonacci hashing).
        let h = (inode.0 ^ chunk.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.counters[(h >> 52) as usize % BUCKETS]
    }

    /// The chunks `runs` (object offsets, `[start, end)`) touch, or `None` for "the
    /// whole object" (open-ended or too many).
    fn chunks(runs: &[(u64, u64)]) -> Option<Vec<u64>> {
        let mut out = Vec::new();
        for &(start, end) in runs {
            if end == u64::MAX || end <= start {
                if end == u64::MAX {
                    return None;
                }
                continue;
            }
            let (first, last) = (start >> CHUNK_SHIFT, (end - 1) >> CHUNK_SHIFT);
            if last - first >= RUN_CHUNKS_MAX || out.len() as u64 + (last - first) >= RUN_CHUNKS_MAX {
                return None;
            }
            out.extend(first..=last);
        }
        Some(out)
    }

    /// A change of `runs` of `inode`'s object arrived; `None`: of the whole object.
    pub(crate) fn bump(&self, inode: InodeId, runs: Option<&[(u64, u64)]>) {
        match runs.and_then(Self::chunks) {
            Some(chunks) => {
                for c in chunks {
                    self.bucket(inode, c).fetch_add(1, Ordering::SeqCst);
                }
            }
            None => {
                self.bucket(inode, WHOLE).fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// The stamp of `runs` of `inode`'s object (see the module comment).
    pub(crate) fn stamp(&self, inode: InodeId, runs: &[(u64, u64)]) -> u64 {
        let whole = self.bucket(inode, WHOLE).load(Ordering::SeqCst);
        match Self::chunks(runs) {
            Some(chunks) => chunks.into_iter().fold(whole, |sum, c| {
                sum.wrapping_add(self.bucket(inode, c).load(Ordering::SeqCst))
            }),
            // Asked about more than a rebuild chunk: every counter of the object is
            // unknown, so the sum of all counters stands for it (any change moves it).
            None => self
                .counters
                .iter()
                .fold(0u64, |sum, c| sum.wrapping_add(c.load(Ordering::SeqCst))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_of_any_chunk_or_of_the_whole_object_moves_the_stamp() {
        let stamps = Stamps::default();
        let inode = InodeId(7);
        let runs = [(0u64, 8u64 << 20)];
        let s0 = stamps.stamp(inode, &runs);
        stamps.bump(inode, Some(&[(5 << 20, (5 << 20) + 1)]));
        let s1 = stamps.stamp(inode, &runs);
        assert_ne!(s0, s1, "a write in the second chunk");
        stamps.bump(inode, None);
        let s2 = stamps.stamp(inode, &runs);
        assert_ne!(s1, s2, "a truncate");
        stamps.bump(inode, Some(&[(100 << 20, u64::MAX)]));
        assert_ne!(s2, stamps.stamp(inode, &runs), "an open-ended change");
        // More chunks than a rebuild asks about: all counters stand for them.
        let huge = [(0u64, 1u64 << 40)];
        let h0 = stamps.stamp(inode, &huge);
        stamps.bump(InodeId(99), Some(&[(0, 1)]));
        assert_ne!(h0, stamps.stamp(inode, &huge));
    }
}

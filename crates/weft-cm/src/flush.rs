//! Dirty blocks written back on demand: when the store needs room (`unblock`), at a
//! flush or sync, and at a truncate (the dirty end).

use crate::tier::Blocked;
use crate::Inner;
use std::sync::atomic::Ordering;
use weft_cache::store::WriteBack;
use weft_cache::BlockKey;
use weft_layout::InodeId;
use weft_proto::{ErrorCode, Range, WireError};

/// Rounds of [`CacheService::write_back_all`].
pub(crate) const WRITE_BACK_ALL_ROUNDS_MAX: usize = 8;

/// Write-back requests (of up to `WRITE_BACK_BATCH_BYTES`) one write-back keeps in
/// flight, as a sliding window: the io servers write one batch while the next travels.
pub(crate) const WRITE_BACK_BATCHES_IN_FLIGHT: usize = 4;

/// Rounds a flush makes over blocks that other write-backs had in flight and that
/// failed (or were written to again).
pub(crate) const FLUSH_ROUNDS_MAX: usize = 3;

impl Inner {
    /// Does what the store asked before an operation can go on: writes dirty victims
    /// back, or waits for write-backs in flight.
    pub(crate) fn unblock(&self, blocked: Blocked) -> Result<(), WireError> {
        match blocked {
            Blocked::Wait => {
                self.tier.pause();
                Ok(())
            }
            Blocked::Again => Ok(()),
            Blocked::WriteBack(keys) => {
                let mut by_file: std::collections::BTreeMap<InodeId, Vec<BlockKey>> = Default::default();
                for k in keys {
                    by_file.entry(k.inode).or_default().push(k);
                }
                for (inode, keys) in by_file {
                    self.write_back(inode, &keys).map_err(|e| {
                        WireError::new(
                            e.code,
                            format!(
                                "this cache manager is full of dirty blocks it cannot write back: {}",
                                e.message
                            ),
                        )
                    })?;
                }
                Ok(())
            }
        }
    }

    /// Writes the dirty bytes of `keys` (blocks of `inode`, in block order) back to the
    /// io servers, in requests of at most `WRITE_BACK_BATCH_BYTES`, up to
    /// `WRITE_BACK_BATCHES_IN_FLIGHT` of them at once (each to every io server it
    /// touches at once). Blocks being written back by someone else are skipped. A file
    /// removed meanwhile loses its blocks; any other failure keeps them dirty.
    pub(crate) fn write_back(&self, inode: InodeId, keys: &[BlockKey]) -> Result<(), WireError> {
        let Some((layout, block_size, taken)) = self.tier.take_write_backs(inode, keys) else {
            return Ok(());
        };
        let mut batches: Vec<Vec<WriteBack>> = Vec::new();
        let mut rest = taken.into_iter().peekable();
        while rest.peek().is_some() {
            let mut batch = Vec::new();
            let mut bytes = 0u64;
            let mut ranges_count = 0usize;
            while let Some(wb) = rest.peek() {
                let full = bytes >= crate::writeback::WRITE_BACK_BATCH_BYTES
                    || ranges_count >= crate::writeback::WRITE_BACK_BATCH_RANGES;
                if full && !batch.is_empty() {
                    break;
                }
                bytes += wb.len_bytes();
                ranges_count += wb.pieces().count();
                batch.push(rest.next().expect("peeked"));
            }
            batches.push(batch);
        }
        let send = |batch: &[WriteBack]| {
            // The bytes go out straight from the blocks' snapshots.
            let mut ranges: Vec<Range> = Vec::new();
            let mut data: Vec<&[u8]> = Vec::new();
            for wb in batch {
                let start = wb.key.block * block_size;
                for (offset, piece) in wb.pieces() {
                    ranges.push(Range {
                        offset: start + offset as u64,
                        len: piece.len() as u64,
                    });
                    data.push(piece);
                }
            }
            self.backing.write(inode, &layout, &ranges, &data)
        };
        // A sliding window: each of up to `WRITE_BACK_BATCHES_IN_FLIGHT` senders takes
        // the next batch as soon as its last one is answered (no waiting for the
        // slowest of a group), until none is left or one fails.
        let workers = WRITE_BACK_BATCHES_IN_FLIGHT.min(batches.len());
        let queue = std::sync::Mutex::new(batches.into_iter());
        let failed: std::sync::Mutex<Option<WireError>> = std::sync::Mutex::new(None);
        let work = || loop {
            if failed.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
                break;
            }
            let Some(batch) = queue.lock().unwrap_or_else(|p| p.into_inner()).next() else {
                break;
            };
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| send(&batch)))
                .unwrap_or_else(|_| Err(WireError::new(ErrorCode::Io, "a write-back sender panicked")));
            self.tier.end_write_backs(batch, result.is_ok());
            if let Err(e) = result {
                failed.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
            }
        };
        if workers <= 1 {
            work();
        } else {
            std::thread::scope(|scope| {
                for _ in 1..workers {
                    scope.spawn(work);
                }
                work();
            });
        }
        let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) else {
            return Ok(());
        };
        // Not sent: kept dirty.
        for batch in queue.into_inner().unwrap_or_else(|p| p.into_inner()) {
            self.tier.end_write_backs(batch, false);
        }
        if e.code == ErrorCode::Stale {
            // The file was removed: nothing to write its bytes to.
            self.tier.drop_file(inode);
            return Ok(());
        }
        self.counters.write_back_errors.fetch_add(1, Ordering::Relaxed);
        Err(WireError::new(
            e.code,
            format!("writing back inode {inode}: {}", e.message),
        ))
    }

    /// Writes every block of the file dirty now back to the io servers, including those
    /// another write-back has in flight (waited for, and retried if it failed).
    pub(crate) fn flush(&self, inode: InodeId) -> Result<(), WireError> {
        let keys = self.tier.dirty_of(inode);
        for _ in 0..FLUSH_ROUNDS_MAX {
            self.write_back(inode, &keys)?;
            self.tier.wait_write_backs(inode, &keys);
            let still: Vec<BlockKey> = self
                .tier
                .dirty_of(inode)
                .into_iter()
                .filter(|k| keys.binary_search(k).is_ok())
                .collect();
            if still.is_empty() {
                return Ok(());
            }
        }
        // Written to again and again meanwhile: what was dirty at the start went back
        // at least once in the rounds above, unless a write-back failed (reported).
        Ok(())
    }

    /// The end of the file's data held dirty here (0 if none).
    pub(crate) fn dirty_end(&self, inode: InodeId) -> u64 {
        self.tier.dirty_end(inode)
    }
}

//! Small files' bytes that `user.weft.handoff` carries to libweft_posix, kept by data
//! stamp: a later handoff whose open-time check finds the same stamp (no write,
//! truncate or allocation by any client since) is answered without the io servers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use weft_client::{DataStamp, InodeId};

/// Largest file whose bytes a handoff carries: with its attributes and capability the
/// value stays within the kernel's limit for an extended attribute (64 KiB).
pub const CONTENT_MAX: u64 = 56 << 10;

/// Bytes kept for later handoffs; past this the table starts over.
const KEPT_BYTES_MAX: usize = 16 << 20;

/// The small files read for handoffs, each with the stamp its check found.
#[derive(Default)]
pub struct HandedContent {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    files: HashMap<InodeId, (DataStamp, Arc<[u8]>)>,
    bytes: usize,
}

impl HandedContent {
    /// The bytes of `ino` kept under `stamp` (none without a stamp: the data may have
    /// changed a moment ago, or a cache manager holds it).
    pub fn get(&self, ino: InodeId, stamp: Option<&DataStamp>) -> Option<Arc<[u8]>> {
        let stamp = stamp?;
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.files
            .get(&ino)
            .filter(|(s, _)| s == stamp)
            .map(|(_, bytes)| bytes.clone())
    }

    /// Keeps `bytes`, read from the io servers after a check of `ino` found `stamp`
    /// (without one, what was kept of `ino` goes).
    pub fn keep(&self, ino: InodeId, stamp: Option<DataStamp>, bytes: Arc<[u8]>) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, old)) = kept.files.remove(&ino) {
            kept.bytes -= old.len();
        }
        let Some(stamp) = stamp else { return };
        if kept.bytes + bytes.len() > KEPT_BYTES_MAX {
            kept.files.clear();
            kept.bytes = 0;
        }
        kept.bytes += bytes.len();
        kept.files.insert(ino, (stamp, bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_stays_within_its_bound() {
        let handed = HandedContent::default();
        let piece: Arc<[u8]> = vec![7u8; CONTENT_MAX as usize].into();
        // Without a stamp nothing is kept.
        handed.keep(InodeId(1), None, piece.clone());
        assert_eq!(handed.kept.lock().unwrap().bytes, 0);
        let count = 3 * KEPT_BYTES_MAX / piece.len();
        for k in 0..count as u64 {
            let stamp = DataStamp::for_tests(InodeId(k), vec![k]);
            handed.keep(InodeId(k), Some(stamp.clone()), piece.clone());
            assert!(handed.get(InodeId(k), Some(&stamp)).is_some());
            let kept = handed.kept.lock().unwrap();
            assert!(kept.bytes <= KEPT_BYTES_MAX, "{} bytes kept", kept.bytes);
            assert_eq!(
                kept.bytes,
                kept.files.values().map(|(_, b)| b.len()).sum::<usize>()
            );
        }
        // Another stamp of a kept file does not find it.
        let last = count as u64 - 1;
        assert!(handed
            .get(InodeId(last), Some(&DataStamp::for_tests(InodeId(last), vec![0])))
            .is_none());
    }
}

//! Write-behind: small writes on a served descriptor are kept in a bounded buffer of
//! its open file description and sent to the io servers together (one list request
//! per server), instead of one round trip each.
//!
//! The buffer is sent before anything that can observe the file ([`crate::served`]
//! and [`crate::calls`] call `flush` / `flush_inode` / `flush_all`): close of any
//! descriptor of the description, fsync/fdatasync, any read of the same file in this
//! process (through any description), fstat/stat (sizes), ftruncate, lseek SEEK_END,
//! dup/dup2/dup3/F_DUPFD, an open of the same file (a small read-only file stays with
//! the mount), fork (before it), exec/posix_spawn/system/popen, fopen/freopen (stdio
//! reads through the kernel), handing the descriptor to the kernel (mmap, splice...)
//! and the process's exit. O_APPEND and O_SYNC writes and large writes are never
//! buffered (appends land at the true end at once).
//!
//! Errors of a deferred send are kept and returned by the next fsync, fdatasync or
//! close of the description (as NFS reports write-back errors), and every later write
//! on it fails with the same errno at once. What a process loses when killed (kill -9,
//! `_exit` after writes, a crash) is what is in its buffers: at most [`DESCRIPTION_MAX`]
//! bytes per description and [`PROCESS_MAX`] in all, as a local file system loses its
//! unsynced page cache when the machine stops; what fsync or close returned is safe.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

use weft_client::File;

/// Bytes buffered per open file description at most: a write that reaches it sends.
pub const DESCRIPTION_MAX: u64 = 4 << 20;
/// Writes larger than this are sent at once (after the buffer).
pub const PIECE_MAX: usize = 256 << 10;
/// Separate pieces per description at most.
pub const PIECES_MAX: usize = 4096;
/// Bytes buffered by the whole process at most.
pub const PROCESS_MAX: u64 = 64 << 20;

/// Bytes buffered in the process now (checked before any flush walks the table).
static BUFFERED: AtomicU64 = AtomicU64::new(0);

/// Whether the process holds any buffered byte.
pub fn any() -> bool {
    BUFFERED.load(Ordering::SeqCst) > 0
}

/// One description's buffer: disjoint extents by first byte.
#[derive(Default)]
pub struct Behind {
    extents: BTreeMap<u64, Vec<u8>>,
    bytes: u64,
    /// The errno of a failed deferred send, for the next fsync or close.
    pub failed: Option<c_int>,
}

impl Drop for Behind {
    fn drop(&mut self) {
        BUFFERED.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

impl Behind {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether the buffer should be sent before adding `len` more bytes.
    pub fn full_for(&self, len: usize) -> bool {
        self.bytes + len as u64 > DESCRIPTION_MAX
            || self.extents.len() >= PIECES_MAX
            || BUFFERED.load(Ordering::SeqCst) + len as u64 > PROCESS_MAX
    }

    /// Keeps `data` for offset `at`: joined with the extents it overlaps or touches,
    /// its bytes winning over theirs.
    pub fn put(&mut self, at: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = at + data.len() as u64;
        let mut joined: Vec<u64> = Vec::new();
        if let Some((&s, b)) = self.extents.range(..at).next_back() {
            if s + b.len() as u64 >= at {
                joined.push(s);
            }
        }
        joined.extend(self.extents.range(at..=end).map(|(s, _)| *s));
        let start = joined.first().map_or(at, |&s| s.min(at));
        let last = joined
            .last()
            .map_or(end, |s| end.max(s + self.extents[s].len() as u64));
        // A run of sequential writes grows the first extent's vector in place.
        let mut whole = match joined.first() {
            Some(&s) if s == start => self.extents.remove(&s).expect("listed"),
            _ => Vec::new(),
        };
        let before = whole.len() as u64;
        whole.resize((last - start) as usize, 0);
        let mut freed = before;
        for s in &joined {
            if let Some(b) = self.extents.remove(s) {
                let from = (s - start) as usize;
                whole[from..from + b.len()].copy_from_slice(&b);
                freed += b.len() as u64;
            }
        }
        let from = (at - start) as usize;
        whole[from..from + data.len()].copy_from_slice(data);
        let added = whole.len() as u64;
        self.extents.insert(start, whole);
        self.bytes = self.bytes + added - freed;
        BUFFERED.fetch_add(added, Ordering::SeqCst);
        BUFFERED.fetch_sub(freed, Ordering::SeqCst);
    }

    /// Sends every buffered byte to the io servers (one list request per server for
    /// many extents). A failure is kept for the next fsync or close.
    pub fn send(&mut self, file: &File) -> Result<(), c_int> {
        if self.extents.is_empty() {
            return match self.failed {
                Some(errno) => Err(errno),
                None => Ok(()),
            };
        }
        let extents = std::mem::take(&mut self.extents);
        BUFFERED.fetch_sub(self.bytes, Ordering::SeqCst);
        self.bytes = 0;
        let sent = if extents.len() == 1 {
            let (at, data) = extents.iter().next().expect("one");
            file.write_at(*at, data).map(|_| ())
        } else {
            let ranges: Vec<(u64, u64)> = extents.iter().map(|(s, b)| (*s, b.len() as u64)).collect();
            let mut data = Vec::with_capacity(ranges.iter().map(|r| r.1 as usize).sum());
            for b in extents.values() {
                data.extend_from_slice(b);
            }
            file.write_list(&ranges, &data).map(|_| ())
        };
        match sent {
            Ok(()) => Ok(()),
            Err(e) => {
                crate::stats::add(&crate::stats::ERRORS, 1);
                let errno = e.errno();
                self.failed.get_or_insert(errno);
                Err(errno)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(b: &Behind) -> Vec<(u64, Vec<u8>)> {
        b.extents.iter().map(|(s, v)| (*s, v.clone())).collect()
    }

    #[test]
    fn pieces_join_when_they_touch_or_overlap_and_later_bytes_win() {
        let mut b = Behind::default();
        b.put(10, b"abc");
        b.put(20, b"xyz");
        assert_eq!(contents(&b), vec![(10, b"abc".to_vec()), (20, b"xyz".to_vec())]);
        b.put(13, b"defghij");
        assert_eq!(contents(&b), vec![(10, b"abcdefghijxyz".to_vec())]);
        b.put(8, b"__A");
        assert_eq!(contents(&b), vec![(8, b"__Abcdefghijxyz".to_vec())]);
        b.put(30, b"q");
        b.put(12, b"ZZZZZZZZZZZZZZZZZZZZ");
        assert_eq!(contents(&b), vec![(8, b"__AbZZZZZZZZZZZZZZZZZZZZ".to_vec())]);
        assert_eq!(
            b.bytes(),
            contents(&b).iter().map(|(_, v)| v.len() as u64).sum::<u64>()
        );
    }
}

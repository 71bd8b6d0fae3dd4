//! Write-behind of small writes. The kernel sends every write of a page-cached file to
//! the daemon as it happens (the mount does not use FUSE's writeback cache, under which
//! the kernel trusts its own file size over the io servers' and another client's
//! appends would go unseen). A small write sent on to its io server at once pays a
//! second round trip per call; instead, writes below [`SMALL_WRITE_BYTES`] are kept
//! here, per inode, merged, and sent as one list write (one request per io server)
//! when the file is closed, synced, read, truncated, appended to or reopened in this
//! mount, or when the inode holds [`INODE_BYTES_MAX`] or [`INODE_EXTENTS_MAX`]. The
//! attributes the mount answers with count the kept bytes, and those sent while the file
//! is open here (the size is at least their end), so the kernel never shrinks a file it
//! just wrote; the blocks count the kept bytes too, and the most one send carried (a file
//! with data and no blocks looks all hole: GNU tar's --sparse archives it as zeros
//! without reading it).
//!
//! What this gives up, as NFS's close-to-open caching does: another client sees the
//! bytes once the writer closes or syncs the file (not at each write), and a write's
//! I/O error is reported by the close, fsync or later call that sends it. A daemon
//! killed with kept bytes loses them, as a crash loses a local file system's page
//! cache.

use crate::open_file::OpenFile;
use fuser::Errno;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use weft_client::{ClientError, InodeId};

/// Writes shorter than this are kept; longer ones go to the io servers at once (after
/// what is kept for the inode).
pub const SMALL_WRITE_BYTES: usize = 128 << 10;

/// Bytes kept for one inode before they are sent.
pub const INODE_BYTES_MAX: usize = 8 << 20;

/// Separate extents kept for one inode before they are sent (each is a range of the
/// list write).
pub const INODE_EXTENTS_MAX: usize = 4096;

/// Bytes kept for the whole mount: past this, a write sends its inode's bytes.
pub const MOUNT_BYTES_MAX: usize = 256 << 20;

/// Bytes kept for one inode: disjoint extents by offset. A write over kept bytes
/// overwrites them in place and adds extents only for the bytes it newly covers (a
/// write that starts where an extent ends extends it), so no write copies more than
/// its own bytes, however large the extents around it have grown.
#[derive(Default)]
pub(crate) struct Extents {
    map: BTreeMap<u64, Vec<u8>>,
    bytes: usize,
}

impl Extents {
    /// Puts `data` at `offset`, over whatever is kept there. Returns the change in
    /// bytes kept.
    pub(crate) fn insert(&mut self, offset: u64, data: &[u8]) -> isize {
        let before = self.bytes as isize;
        let end = offset + data.len() as u64;
        let part = |from: u64, to: u64| &data[(from - offset) as usize..(to - offset) as usize];
        // Bytes of the write before `at` are placed.
        let mut at = offset;
        if let Some((&start, bytes)) = self.map.range_mut(..offset).next_back() {
            let stop = start + bytes.len() as u64;
            if stop > offset {
                let upto = stop.min(end);
                bytes[(offset - start) as usize..(upto - start) as usize].copy_from_slice(part(offset, upto));
                at = upto;
            }
        }
        let inside: Vec<u64> = self.map.range(at..end).map(|(start, _)| *start).collect();
        for start in inside {
            if start > at {
                self.place_new(at, part(at, start));
            }
            let bytes = self.map.get_mut(&start).expect("listed above");
            let upto = (start + bytes.len() as u64).min(end);
            bytes[..(upto - start) as usize].copy_from_slice(part(start, upto));
            at = upto;
        }
        if at < end {
            self.place_new(at, part(at, end));
        }
        self.bytes as isize - before
    }

    /// Keeps `bytes` at `at`, where nothing is kept: appended to the extent that ends
    /// there, if one does.
    fn place_new(&mut self, at: u64, bytes: &[u8]) {
        self.bytes += bytes.len();
        if let Some((&start, before)) = self.map.range_mut(..at).next_back() {
            if start + before.len() as u64 == at {
                before.extend_from_slice(bytes);
                return;
            }
        }
        self.map.insert(at, bytes.to_vec());
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The end of the last extent (0 when empty).
    pub(crate) fn end(&self) -> u64 {
        self.map
            .last_key_value()
            .map_or(0, |(start, bytes)| start + bytes.len() as u64)
    }

    /// The extents as list-write ranges (adjacent ones joined) and their bytes in the
    /// same order; empties this.
    pub(crate) fn take(&mut self) -> (Vec<(u64, u64)>, Vec<u8>) {
        let mut ranges = Vec::with_capacity(self.map.len());
        let mut data = Vec::with_capacity(self.bytes);
        for (start, bytes) in std::mem::take(&mut self.map) {
            match ranges.last_mut() {
                // Adjacent extents are one range.
                Some((last, len)) if *last + *len == start => *len += bytes.len() as u64,
                _ => ranges.push((start, bytes.len() as u64)),
            }
            data.extend_from_slice(&bytes);
        }
        self.bytes = 0;
        (ranges, data)
    }
}

/// What is kept for one inode, and the open file it was written through (sent through
/// it: it is open for writing).
struct Kept {
    writer: Arc<OpenFile>,
    extents: Extents,
    /// Taken out of the table (everything sent): a writer that found it there just
    /// before must start a new one.
    retired: bool,
}

/// What one inode's sends from this mount put on the io servers, at least.
#[derive(Clone, Copy, Default)]
struct Sent {
    /// The largest end sent.
    end: u64,
    /// The most bytes one send carried: disjoint extents, so the io servers' objects
    /// hold at least that many bytes of data once it landed.
    bytes: u64,
}

/// The write-behind of one mount.
#[derive(Default)]
pub(crate) struct WriteBehind {
    inodes: Mutex<HashMap<InodeId, Arc<Mutex<Kept>>>>,
    /// Bytes kept over all inodes.
    total: AtomicUsize,
    /// Inodes with bytes kept (lets the common case skip the table's lock).
    dirty_inodes: AtomicUsize,
    /// What this mount sent of each inode open here: the size and blocks it reports
    /// stay at least that, so that attributes the io servers gave before a send
    /// finished (a getattr racing a flush in another process: a child of any thread
    /// of the writer closes the inherited descriptor at its exec) cannot shrink the
    /// file in the kernel or show its data as a hole. Forgotten at the inode's last
    /// close here and lowered by a truncate here; so bounded by the open inodes.
    sent: Mutex<HashMap<InodeId, Sent>>,
    /// Sends that failed, of any inode: kept bytes the kernel took as written (its
    /// pages hold them) but the io servers may lack.
    failures: AtomicU64,
}

fn errno_of(e: &ClientError) -> Errno {
    eprintln!("weft-fuse: sending kept writes: {e}");
    Errno::from_i32(e.errno())
}

impl WriteBehind {
    /// Keeps a small write (`data.len() < SMALL_WRITE_BYTES`) to `inode` made through
    /// `open`; sends the inode's kept bytes if that passes a limit.
    pub(crate) fn write(
        &self,
        inode: InodeId,
        open: &Arc<OpenFile>,
        offset: u64,
        data: &[u8],
    ) -> Result<(), Errno> {
        debug_assert!(data.len() < SMALL_WRITE_BYTES);
        if data.is_empty() {
            return Ok(());
        }
        loop {
            let entry = {
                let mut table = self.inodes.lock().expect("write-behind table poisoned");
                table
                    .entry(inode)
                    .or_insert_with(|| {
                        Arc::new(Mutex::new(Kept {
                            writer: open.clone(),
                            extents: Extents::default(),
                            retired: false,
                        }))
                    })
                    .clone()
            };
            let mut kept = entry.lock().expect("kept writes poisoned");
            if kept.retired {
                continue;
            }
            if kept.extents.bytes() == 0 {
                // New, or sent meanwhile: this handle is the writer now.
                kept.writer = open.clone();
                self.dirty_inodes.fetch_add(1, Ordering::Relaxed);
            }
            let grown = kept.extents.insert(offset, data);
            let total = if grown >= 0 {
                self.total.fetch_add(grown as usize, Ordering::Relaxed) + grown as usize
            } else {
                self.total.fetch_sub(grown.unsigned_abs(), Ordering::Relaxed) - grown.unsigned_abs()
            };
            if kept.extents.bytes() >= INODE_BYTES_MAX
                || kept.extents.len() >= INODE_EXTENTS_MAX
                || total >= MOUNT_BYTES_MAX
            {
                let sent = self.send_locked(&mut kept);
                self.retire(inode, &entry, &mut kept);
                return sent;
            }
            return Ok(());
        }
    }

    /// The entry of what is kept for `inode`, if any (none without a lock when nothing
    /// is kept anywhere, the common case of every read and getattr).
    fn kept(&self, inode: InodeId) -> Option<Arc<Mutex<Kept>>> {
        if self.dirty_inodes.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.inodes
            .lock()
            .expect("write-behind table poisoned")
            .get(&inode)
            .cloned()
    }

    /// Sends what is kept for `inode`, if anything. On failure the kept bytes are
    /// dropped (they may be partly written) and the error is returned.
    pub(crate) fn send(&self, inode: InodeId) -> Result<(), Errno> {
        let Some(entry) = self.kept(inode) else {
            return Ok(());
        };
        let mut kept = entry.lock().expect("kept writes poisoned");
        let sent = self.send_locked(&mut kept);
        self.retire(inode, &entry, &mut kept);
        sent
    }

    /// Everything in `entry` is sent: it (and the writer's open file it holds) leaves
    /// the table, and a writer that found it there just before starts another. Called
    /// with the entry locked (the table's lock is taken inside it, never the reverse).
    fn retire(&self, inode: InodeId, entry: &Arc<Mutex<Kept>>, kept: &mut Kept) {
        let mut table = self.inodes.lock().expect("write-behind table poisoned");
        if table
            .get(&inode)
            .is_some_and(|current| Arc::ptr_eq(current, entry))
        {
            table.remove(&inode);
        }
        kept.retired = true;
    }

    fn send_locked(&self, kept: &mut Kept) -> Result<(), Errno> {
        if kept.extents.bytes() == 0 {
            return Ok(());
        }
        // Recorded before the bytes go, with the entry locked: a reader of what is kept
        // waits on that lock, then finds this (see `counted`).
        let (end, bytes) = (kept.extents.end(), kept.extents.bytes() as u64);
        let mut sent = self.sent.lock().expect("sent ends poisoned");
        let record = sent.entry(kept.writer.file.inode()).or_default();
        record.end = record.end.max(end);
        record.bytes = record.bytes.max(bytes);
        drop(sent);
        let (ranges, data) = kept.extents.take();
        self.total.fetch_sub(data.len(), Ordering::Relaxed);
        let sent = kept.writer.file.write_list(&ranges, &data);
        // Only now: until the bytes are on the io servers, a `send` for this inode from
        // another thread (a read beside this one) must find the entry and wait on its
        // lock, not take the count's "nothing kept anywhere" and go ahead of the bytes.
        self.dirty_inodes.fetch_sub(1, Ordering::Relaxed);
        if sent.is_err() {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        sent.map(|_| ()).map_err(|e| errno_of(&e))
    }

    /// How many sends of kept bytes have failed in this mount.
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The end of the bytes kept for `inode` or sent while it is open here, and how
    /// many bytes of data that makes at least (kept ones, as a local file system counts
    /// its delayed allocations, or the most one send carried): the size and blocks the
    /// mount reports are at least these. (0, 0): none.
    ///
    /// What is kept is read first: a send under way holds the entry's lock, so this
    /// waits for it and then finds it in `sent`. Read the other way round, a send
    /// starting between the two reads was in neither.
    pub(crate) fn counted(&self, inode: InodeId) -> (u64, u64) {
        let (kept_end, kept_bytes) = self.kept(inode).map_or((0, 0), |e| {
            let kept = e.lock().expect("kept writes poisoned");
            (kept.extents.end(), kept.extents.bytes() as u64)
        });
        let sent = self
            .sent
            .lock()
            .expect("sent ends poisoned")
            .get(&inode)
            .copied()
            .unwrap_or_default();
        (kept_end.max(sent.end), kept_bytes.max(sent.bytes))
    }

    /// The file was truncated (or extended) to `size` through this mount, after its kept
    /// bytes were sent.
    pub(crate) fn truncated(&self, inode: InodeId, size: u64) {
        if let Some(sent) = self.sent.lock().expect("sent ends poisoned").get_mut(&inode) {
            sent.end = sent.end.min(size);
            sent.bytes = sent.bytes.min(size);
        }
    }

    /// The inode's last descriptor in this mount closed (after its bytes were sent).
    pub(crate) fn forget(&self, inode: InodeId) {
        self.sent.lock().expect("sent ends poisoned").remove(&inode);
    }

    /// Sends everything kept (the mount is ending). Failures are logged.
    pub(crate) fn send_all(&self) {
        let inodes: Vec<InodeId> = self
            .inodes
            .lock()
            .expect("write-behind table poisoned")
            .keys()
            .copied()
            .collect();
        for inode in inodes {
            let _ = self.send(inode);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(e: &mut Extents) -> Vec<(u64, Vec<u8>)> {
        let (ranges, data) = e.take();
        let mut at = 0usize;
        ranges
            .into_iter()
            .map(|(off, len)| {
                let bytes = data[at..at + len as usize].to_vec();
                at += len as usize;
                (off, bytes)
            })
            .collect()
    }

    #[test]
    fn writes_merge_and_later_bytes_win() {
        let mut e = Extents::default();
        assert_eq!(e.insert(100, b"aaaa"), 4);
        assert_eq!(e.insert(10, b"bb"), 2);
        // Touches the end of [100, 104): merged into one extent.
        assert_eq!(e.insert(104, b"cc"), 2);
        // Overlaps both ends of [100, 106) partly and replaces the middle.
        assert_eq!(e.insert(99, b"dddd"), 1);
        assert_eq!((e.len(), e.bytes(), e.end()), (3, 9, 106));
        assert_eq!(
            contents(&mut e),
            vec![(10, b"bb".to_vec()), (99, b"ddddacc".to_vec())]
        );
        assert_eq!((e.len(), e.bytes(), e.end()), (0, 0, 0));
    }

    #[test]
    fn a_write_spanning_several_extents_joins_them() {
        let mut e = Extents::default();
        e.insert(0, b"xx");
        e.insert(4, b"yy");
        e.insert(8, b"zz");
        e.insert(12, b"ww");
        assert_eq!(e.len(), 4);
        assert_eq!(e.insert(1, b"123456789"), 10 - 6);
        assert_eq!(
            contents(&mut e),
            vec![(0, b"x123456789".to_vec()), (12, b"ww".to_vec())]
        );
    }

    #[test]
    fn random_writes_read_back_as_a_plain_buffer_would() {
        let mut e = Extents::default();
        let mut model = vec![0u8; 4096];
        let mut written = vec![false; 4096];
        let mut seed = 12345u64;
        for round in 0..2000u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let offset = (seed >> 33) % 4000;
            let len = 1 + (seed >> 20) % 90;
            let len = len.min(4096 - offset);
            let data: Vec<u8> = (0..len).map(|k| (round as u8).wrapping_add(k as u8)).collect();
            e.insert(offset, &data);
            model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
            written[offset as usize..(offset + len) as usize].fill(true);
        }
        assert_eq!(e.bytes(), written.iter().filter(|w| **w).count());
        for (offset, bytes) in contents(&mut e) {
            assert_eq!(&model[offset as usize..offset as usize + bytes.len()], &bytes[..]);
        }
    }
}

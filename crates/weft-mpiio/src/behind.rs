//! Write-behind and read-ahead of one file handle, for independent accesses outside
//! atomic mode (hints `weft_write_behind`, `weft_read_ahead`).
//!
//! Write-behind: MPI's default (nonatomic) mode asks a process's writes to be visible
//! to other processes only after MPI_File_sync, close, or sync-barrier-sync. Small
//! independent writes therefore wait here, merged into disjoint extents (adjacent and
//! overlapping ones joined, later bytes winning), and go as one list request when the
//! buffer holds `weft_write_behind_size` bytes or [`EXTENTS_MAX`] extents, and before
//! anything that observes them: sync, close, set_view, set_size, preallocate, atomic
//! mode, the size, collective calls, and a read of this process that overlaps them
//! (read-your-writes). A write larger than half the buffer goes straight to the
//! servers, after the buffered bytes it overlaps. A deferred write that fails is
//! reported at the next sync or close (its bytes are dropped, the buffer stays bounded).
//!
//! Read-ahead: an independent read that follows the pattern of the previous ones (the
//! same stride between first bytes, or starting where the last ended) is served from a
//! window read from its first byte; random reads never fill one. A stream's first
//! window is [`WINDOW_FIRST`] bytes (or `weft_read_ahead_size` if smaller); when the
//! reads are sequential (each starting where the last ended), each window they run on
//! into is twice the last, up to `weft_read_ahead_size`, so a long stream of small
//! reads (IOR's 100,000-byte transfers through a rank's block) costs one request per
//! io server per window; a strided stream keeps the first size. The window's memory is reused from fill to
//! fill (no fresh pages per window). The window is dropped by every write of this
//! handle, sync, set_view, set_size and collective calls, so a read after
//! MPI_File_sync reads the servers.

use std::collections::BTreeMap;

use weft_client::File;

use crate::collective::{independent, Request};
use crate::error::{MpiioError, Result};
use crate::hints::Hints;

/// Most separate extents the write-behind buffer holds (each costs a map entry): a
/// storm of tiny scattered writes is sent at this count whatever its bytes.
pub const EXTENTS_MAX: usize = 16_384;

/// The first window of a stream (bytes), when `weft_read_ahead_size` is larger: a
/// pattern that stops after a few reads costs little, one that goes on doubles it.
pub const WINDOW_FIRST: u64 = 1 << 20;

/// One handle's write-behind buffer and read-ahead window.
#[derive(Default)]
pub struct Behind {
    /// First byte → bytes; disjoint, none adjacent to another.
    extents: BTreeMap<u64, Vec<u8>>,
    bytes: u64,
    /// The first error of a deferred write since the last sync or close.
    failed: Option<MpiioError>,
    ahead: Ahead,
}

#[derive(Default)]
struct Ahead {
    /// The window: `valid` file bytes from `start` in `window` (whose length is what
    /// was allocated, reused from fill to fill); `eof` when reading it met the end of
    /// file.
    start: u64,
    window: Vec<u8>,
    valid: usize,
    eof: bool,
    /// The last read's (first byte, end), the stride before it, and how many reads in
    /// a row kept the pattern.
    last: Option<(u64, u64)>,
    stride: Option<u64>,
    streak: u32,
    /// The size of the next window of this stream (0: the first).
    next_size: u64,
}

impl Ahead {
    fn drop_window(&mut self) {
        self.valid = 0;
        self.eof = false;
        self.next_size = 0;
    }

    /// Notes a read of [lo, hi); whether the pattern predicts more like it within a
    /// window of `size` bytes (at least two requests per window, none of them sparse).
    fn predicts(&mut self, lo: u64, hi: u64, size: u64) -> bool {
        let kept = match self.last {
            Some((last_lo, last_hi)) if lo > last_lo => {
                let stride = lo - last_lo;
                let kept = lo == last_hi || self.stride == Some(stride);
                self.stride = Some(stride);
                kept
            }
            _ => {
                self.stride = None;
                false
            }
        };
        self.streak = if kept { self.streak.saturating_add(1) } else { 0 };
        self.last = Some((lo, hi));
        let stride = self.stride.unwrap_or(u64::MAX);
        self.streak >= 1 && hi - lo <= size / 2 && stride <= size / 2 && (hi - lo) * 16 >= stride
    }

    /// The size of the next window of this stream.
    fn upcoming(&self, size: u64) -> u64 {
        match self.next_size {
            0 => WINDOW_FIRST.min(size),
            n => n.min(size),
        }
    }

    /// The size of the next window of this stream, doubling the one after it.
    fn grow(&mut self, size: u64) -> u64 {
        let now = self.upcoming(size);
        self.next_size = now.saturating_mul(2).min(size);
        now
    }

    /// Serves `request` from the window if it lies there; the bytes read.
    fn serve(&self, request: &Request, data: &mut [u8]) -> Option<u64> {
        let (lo, hi) = request.extent()?;
        let valid_end = self.start + self.valid as u64;
        if (self.valid == 0 && !self.eof) || lo < self.start || (hi > valid_end && !self.eof) {
            return None;
        }
        let mut at = 0usize;
        let mut copy = |offset: u64, len: u64, data: &mut [u8]| {
            let len = len as usize;
            let have = valid_end.saturating_sub(offset).min(len as u64) as usize;
            if have > 0 {
                let from = (offset - self.start) as usize;
                data[at..at + have].copy_from_slice(&self.window[from..from + have]);
            }
            data[at + have..at + len].fill(0);
            at += len;
        };
        if request.is_contiguous() {
            copy(lo, request.bytes(), data);
        } else {
            for &(offset, len) in request.pieces() {
                copy(offset, len, data);
            }
        }
        Some(if hi > valid_end {
            request.bytes_before(valid_end)
        } else {
            request.bytes()
        })
    }

    /// The window's memory, at least `len` bytes, for a new fill (the last window's
    /// when it is large enough: no fresh pages; its old bytes are never read past
    /// what the fill reads).
    fn buffer(&mut self, len: usize) -> Vec<u8> {
        self.valid = 0;
        self.eof = false;
        let mut buf = std::mem::take(&mut self.window);
        if buf.len() < len {
            buf = vec![0u8; len];
        }
        buf
    }

    /// Makes `buf`, holding `n` bytes from `start` read for a window of `len`, the
    /// window.
    fn install(&mut self, start: u64, buf: Vec<u8>, n: usize, len: u64) {
        self.window = buf;
        self.start = start;
        self.valid = n;
        self.eof = (n as u64) < len;
    }
}

impl Behind {
    /// Bytes buffered (for tests of the bound).
    pub fn buffered(&self) -> u64 {
        self.bytes
    }

    /// An independent write: buffered (`buffer`, the hint `weft_write_behind` on, and
    /// at most half the buffer), else sent now.
    pub fn write(
        &mut self,
        file: &File,
        hints: &Hints,
        request: &Request,
        data: &[u8],
        buffer: bool,
    ) -> Result<()> {
        self.ahead.drop_window();
        let Some((lo, hi)) = request.extent() else {
            return Ok(());
        };
        if !buffer || !hints.write_behind || request.bytes() > hints.write_behind_size / 2 {
            // The buffered bytes it overlaps are older: sent first, then overwritten.
            self.flush_range(file, lo, hi);
            return independent::write(file, request, data);
        }
        if request.is_contiguous() {
            self.insert(lo, data);
        } else {
            let mut at = 0usize;
            for &(offset, len) in request.pieces() {
                self.insert(offset, &data[at..at + len as usize]);
                at += len as usize;
            }
        }
        if self.bytes >= hints.write_behind_size || self.extents.len() >= EXTENTS_MAX {
            self.flush(file);
        }
        Ok(())
    }

    /// An independent read: the buffered bytes it overlaps are sent first; then served
    /// from the read-ahead window or the next one, or read (filling a window when the
    /// pattern predicts more reads). Returns the bytes read before the end of file.
    pub fn read(&mut self, file: &File, hints: &Hints, request: &Request, data: &mut [u8]) -> Result<u64> {
        let Some((lo, hi)) = request.extent() else {
            return Ok(0);
        };
        if let Some(e) = self.flush_range(file, lo, hi) {
            return Err(e);
        }
        if !hints.read_ahead {
            return independent::read(file, hints, request, data);
        }
        let size = hints.read_ahead_size;
        // Each read starting where the last ended: every byte read ahead is for this
        // stream, so its windows may grow (a strided stream keeps the first size).
        let sequential = self.ahead.last.is_some_and(|(_, last_hi)| last_hi == lo);
        let predicts = self.ahead.predicts(lo, hi, size);
        if let Some(n) = self.ahead.serve(request, data) {
            return Ok(n);
        }
        // A sequential read past the window, within what the next one would hold: the
        // stream goes on, and its next window is larger.
        let valid_end = self.ahead.start + self.ahead.valid as u64;
        let goes_on = sequential
            && self.ahead.valid > 0
            && lo >= self.ahead.start
            && lo < valid_end.saturating_add(self.ahead.upcoming(size));
        let grown = self.ahead.next_size;
        self.ahead.drop_window();
        if !predicts {
            return independent::read(file, hints, request, data);
        }
        if goes_on {
            self.ahead.next_size = grown;
        }
        // At least two requests' worth (the pattern predicts them within `size`).
        let need = (hi - lo).max(self.ahead.stride.unwrap_or(0)).saturating_mul(2);
        let len = self.ahead.grow(size).max(need).min(size);
        let end = lo.saturating_add(len);
        if let Some(e) = self.flush_range(file, lo, end) {
            return Err(e);
        }
        let mut window = self.ahead.buffer(len as usize);
        let n = match file.read_at(lo, &mut window[..len as usize]) {
            Ok(n) => n,
            Err(e) => {
                self.ahead.window = window;
                return Err(e.into());
            }
        };
        self.ahead.install(lo, window, n, len);
        match self.ahead.serve(request, data) {
            Some(n) => Ok(n),
            None => independent::read(file, hints, request, data),
        }
    }

    /// The first deferred error not reported yet, now reported by the caller (a
    /// buffered collective write reports it at the next collective write).
    pub fn take_failed(&mut self) -> Option<MpiioError> {
        self.failed.take()
    }

    /// Keeps `e`, the error of a write this handle's caller is not told of now (a
    /// buffered collective write), for the next sync or close.
    pub fn defer(&mut self, e: MpiioError) {
        self.failed.get_or_insert(e);
    }

    /// Forgets the read-ahead window (a sync, a new view, a collective call).
    pub fn drop_window(&mut self) {
        self.ahead.drop_window();
    }

    /// Sends every buffered byte and drops the window; the error of this flush (kept
    /// for the next sync or close as well).
    pub fn flush(&mut self, file: &File) -> Option<MpiioError> {
        self.ahead.drop_window();
        let extents = std::mem::take(&mut self.extents);
        self.bytes = 0;
        self.send(file, extents)
    }

    /// Sends everything and returns the first deferred error since the last settle:
    /// what MPI_File_sync and close report.
    pub fn settle(&mut self, file: &File) -> Result<()> {
        self.flush(file);
        match self.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Sends the buffered extents that overlap [lo, hi).
    fn flush_range(&mut self, file: &File, lo: u64, hi: u64) -> Option<MpiioError> {
        let starts: Vec<u64> = self.overlapping(lo, hi).collect();
        if starts.is_empty() {
            return None;
        }
        let mut taken = BTreeMap::new();
        for s in starts {
            let bytes = self.extents.remove(&s).expect("listed");
            self.bytes -= bytes.len() as u64;
            taken.insert(s, bytes);
        }
        self.send(file, taken)
    }

    /// First bytes of the extents that overlap [lo, hi).
    fn overlapping(&self, lo: u64, hi: u64) -> impl Iterator<Item = u64> + '_ {
        let before = self
            .extents
            .range(..lo)
            .next_back()
            .filter(|(s, b)| *s + b.len() as u64 > lo)
            .map(|(s, _)| *s);
        before
            .into_iter()
            .chain(self.extents.range(lo..hi).map(|(s, _)| *s))
    }

    fn send(&mut self, file: &File, extents: BTreeMap<u64, Vec<u8>>) -> Option<MpiioError> {
        let result = match extents.len() {
            0 => return None,
            1 => {
                let (offset, bytes) = extents.iter().next().expect("one");
                file.write_at(*offset, bytes).map(|_| ())
            }
            _ => {
                let ranges: Vec<(u64, u64)> = extents.iter().map(|(s, b)| (*s, b.len() as u64)).collect();
                let mut data = Vec::with_capacity(ranges.iter().map(|r| r.1 as usize).sum());
                for bytes in extents.values() {
                    data.extend_from_slice(bytes);
                }
                file.write_list(&ranges, &data).map(|_| ())
            }
        };
        let e = MpiioError::from(result.err()?);
        let e = MpiioError::new(e.class, format!("a deferred write (write-behind): {}", e.message));
        self.failed.get_or_insert_with(|| e.clone());
        Some(e)
    }

    /// Puts `data` at `offset`, joining the extents it overlaps or touches.
    fn insert(&mut self, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = offset + data.len() as u64;
        // Extents touching [offset, end]: the one before that reaches `offset`, and
        // those starting up to `end`.
        let mut touching: Vec<u64> = self
            .extents
            .range(..offset)
            .next_back()
            .filter(|(s, b)| *s + b.len() as u64 >= offset)
            .map(|(s, _)| *s)
            .into_iter()
            .collect();
        touching.extend(self.extents.range(offset..=end).map(|(s, _)| *s));
        let start = touching.first().map_or(offset, |&s| s.min(offset));
        // The first extent's bytes are reused when it starts the merged one (a run of
        // appends then grows one vector).
        let mut merged = match touching.first() {
            Some(&s) if s == start => {
                let b = self.extents.remove(&s).expect("listed");
                self.bytes -= b.len() as u64;
                b
            }
            _ => Vec::new(),
        };
        for &s in &touching {
            // (The first one is gone already when it is `merged`.)
            let Some(b) = self.extents.remove(&s) else {
                continue;
            };
            self.bytes -= b.len() as u64;
            let at = (s - start) as usize;
            if merged.len() < at + b.len() {
                merged.resize(at + b.len(), 0);
            }
            merged[at..at + b.len()].copy_from_slice(&b);
        }
        let at = (offset - start) as usize;
        if merged.len() < at + data.len() {
            merged.resize(at + data.len(), 0);
        }
        merged[at..at + data.len()].copy_from_slice(data);
        self.bytes += merged.len() as u64;
        self.extents.insert(start, merged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(b: &Behind) -> Vec<(u64, Vec<u8>)> {
        b.extents.iter().map(|(s, v)| (*s, v.clone())).collect()
    }

    #[test]
    fn inserts_merge_adjacent_and_overlapping_extents_later_bytes_winning() {
        let mut b = Behind::default();
        b.insert(10, b"aaaa");
        b.insert(14, b"bb");
        assert_eq!(contents(&b), vec![(10, b"aaaabb".to_vec())]);
        b.insert(20, b"cc");
        b.insert(8, b"xxx");
        assert_eq!(
            contents(&b),
            vec![(8, b"xxxaaabb".to_vec()), (20, b"cc".to_vec())]
        );
        // Spans the gap and both extents: one extent, the new bytes on top.
        b.insert(15, b"yyyyyy");
        assert_eq!(contents(&b), vec![(8, b"xxxaaabyyyyyyc".to_vec())]);
        assert_eq!(b.bytes, 14);
        // Inside one extent.
        b.insert(9, b"Z");
        assert_eq!(contents(&b)[0].1[..3], *b"xZx");
        assert_eq!(b.bytes, 14);
    }

    #[test]
    fn overlapping_lists_only_extents_that_share_bytes() {
        let mut b = Behind::default();
        b.insert(0, b"0123");
        b.insert(10, b"abcd");
        assert_eq!(b.overlapping(4, 10).count(), 0);
        assert_eq!(b.overlapping(3, 11).collect::<Vec<_>>(), vec![0, 10]);
        assert_eq!(b.overlapping(12, 13).collect::<Vec<_>>(), vec![10]);
    }

    // Regression: a read wholly past the end of file met in a window panicked
    // (slicing the window from past its end); api.c's 3- and 4-process runs did it.
    #[test]
    fn a_read_past_the_end_of_file_in_a_window_reads_nothing() {
        let view = weft_layout::view::View::contiguous();
        let ahead = Ahead {
            window: vec![7; 10],
            valid: 10,
            eof: true,
            ..Ahead::default()
        };
        let mut data = [9u8; 5];
        let past = Request::new(&view, 20, 5, true).unwrap();
        assert_eq!(ahead.serve(&past, &mut data), Some(0));
        assert_eq!(data, [0; 5]);
        let across = Request::new(&view, 8, 5, true).unwrap();
        assert_eq!(ahead.serve(&across, &mut data), Some(2));
        assert_eq!(data, [7, 7, 0, 0, 0]);
    }

    #[test]
    fn a_streams_windows_double_up_to_the_hint() {
        let mut a = Ahead::default();
        let size = 4 << 20;
        let sizes: Vec<u64> = (0..4).map(|_| a.grow(size)).collect();
        assert_eq!(sizes, [1 << 20, 2 << 20, 4 << 20, 4 << 20]);
        // A dropped window starts the next stream small again.
        a.drop_window();
        assert_eq!(a.grow(size), 1 << 20);
        // A hint below the first window is the window.
        let mut small = Ahead::default();
        assert_eq!(small.grow(4096), 4096);
        assert_eq!(small.grow(4096), 4096);
    }

    #[test]
    fn a_strided_pattern_predicts_and_random_reads_do_not() {
        let mut a = Ahead::default();
        let size = 1 << 20;
        assert!(!a.predicts(0, 100, size));
        assert!(!a.predicts(400, 500, size));
        assert!(a.predicts(800, 900, size));
        // Random: never.
        let mut r = Ahead::default();
        let mut x = 12345u64;
        let mut any = false;
        for _ in 0..100 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let lo = (x >> 20) % (1 << 30);
            any |= r.predicts(lo, lo + 100, size);
        }
        assert!(!any);
        // Sequential reads of any size predict from the second.
        let mut s = Ahead::default();
        assert!(!s.predicts(0, 10, size));
        assert!(s.predicts(10, 30, size));
    }
}

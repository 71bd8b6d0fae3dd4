//! Scrub of replicated files (issue 33; `weft scrub`): the fresh copies of each stripe
//! slot are read chunk by chunk and compared, so that a copy that went wrong without
//! anyone noticing (a disk returning other bytes, a bug, a write that reached one copy
//! and not another) is found while another copy still has the right bytes.
//!
//! Writes may go on meanwhile. A write reaches the copies of a slot one after another,
//! so for a moment they differ; a chunk is compared only between two readings of every
//! copy's stamp (`RebuildStamp`: bumped by every write, truncate or allocation arriving
//! there, see `weft_iod::rebuild`) that agree, and a difference counts only when it is
//! still there, with no stamp moved, after `CONFIRM_WAIT` (time for a write in flight to
//! reach the last copy). Stale copies are not compared (they are known to have missed
//! writes: `weft rebuild` copies them back). Without checksums a scrub cannot tell which
//! copy is right: it reports where copies differ, and `scrub_repair` (on request) makes
//! the slot's first fresh copy, the primary unless it is stale, the one kept.

use super::rebuild::{striping_of, GiveBack, Pace};
use super::Client;
use crate::error::{unexpected, ClientError};
use std::time::{Duration, Instant};
use weft_layout::{InodeId, Layout, ServerId};
use weft_proto::msg::{Request, Response, READDIR_ENTRIES_MAX};
use weft_proto::{Attr, FileKind, Range};

/// Object bytes of each copy compared per request.
pub const SCRUB_CHUNK_BYTES: u64 = 4 << 20;
/// Times a chunk is read again when writes keep arriving at it.
const CHUNK_TRIES_MAX: usize = 50;
/// How long a difference must last, with no write arriving at any copy, to count.
const CONFIRM_WAIT: Duration = Duration::from_secs(2);
/// Times a difference is looked at again, `CONFIRM_WAIT` apart, before the chunk is
/// given up as too busy to compare.
const CONFIRMS_MAX: usize = 3;
/// Deepest directory a scrub walks into.
const DEPTH_MAX: usize = 256;

/// Where two fresh copies of a slot differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubMismatch {
    pub path: String,
    /// The stripe slot (0-based).
    pub slot: usize,
    /// The two io servers whose copies differ (the first is the slot's first fresh copy).
    pub servers: (ServerId, ServerId),
    /// File offset of the first byte that differs (or where one copy ends early).
    pub offset: u64,
}

/// What a scrub did (so far, when passed to a progress callback).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrubProgress {
    /// Replicated files compared.
    pub files: u64,
    /// Bytes read (every copy counted).
    pub bytes: u64,
    /// Chunks read again because writes raced them.
    pub retries: u64,
    pub mismatches: Vec<ScrubMismatch>,
    /// Files or slots that could not be compared, with why.
    pub failed: Vec<String>,
}

impl Client {
    /// Scrubs the replicated file at `path`, or every replicated file under the
    /// directory `path`. Files that are not replicated are passed over; a file that
    /// cannot be read (a copy's server unreachable) is put in `failed` and the walk goes
    /// on. `progress` is called after every chunk.
    pub fn scrub_path(
        &self,
        path: &str,
        rate_bytes_per_sec: Option<u64>,
        progress: &mut dyn FnMut(&ScrubProgress),
    ) -> Result<ScrubProgress, ClientError> {
        let top = self.resolve(path)?;
        let mut done = ScrubProgress::default();
        let mut pace = Pace {
            rate: rate_bytes_per_sec,
            start: Instant::now(),
            bytes: 0,
        };
        let mut stack = vec![(path.trim_end_matches('/').to_string(), top, 0usize)];
        while let Some((path, attr, depth)) = stack.pop() {
            match attr.kind {
                FileKind::File => self.scrub_one(&path, &attr, &mut done, &mut pace, progress),
                FileKind::Directory if depth < DEPTH_MAX => {
                    // Page by page, with the manager's attributes (layouts; no sizes).
                    let mut after = weft_proto::Name::default();
                    loop {
                        let (page, more) =
                            match self.readdir_attrs_page(attr.inode, &after, READDIR_ENTRIES_MAX) {
                                Ok(page) => page,
                                Err(e) => {
                                    done.failed.push(format!("{path}/: {e}"));
                                    break;
                                }
                            };
                        if let Some((last, _)) = page.last() {
                            after = last.clone();
                        }
                        // Files at once, directories later: what waits is directories only.
                        for (name, attr) in page {
                            let child = format!("{path}/{}", String::from_utf8_lossy(name.as_ref()));
                            match attr.kind {
                                FileKind::Directory => stack.push((child, attr, depth + 1)),
                                _ => self.scrub_one(&child, &attr, &mut done, &mut pace, progress),
                            }
                        }
                        if !more {
                            break;
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(done)
    }

    /// Repairs `mismatch` the one way a scrub can without checksums: the copy that
    /// differs from the slot's first fresh copy (the primary unless it is stale) is
    /// marked stale at the manager and rebuilt from a fresh copy (see `rebuild`).
    pub fn scrub_repair(
        &self,
        mismatch: &ScrubMismatch,
        rate_bytes_per_sec: Option<u64>,
        progress: &mut dyn FnMut(&super::RebuildProgress),
    ) -> Result<super::RebuildProgress, ClientError> {
        let attr = self.resolve(&mismatch.path)?;
        let request = Request::MarkStale {
            cred: self.cred_clone(),
            inode: attr.inode,
            server: mismatch.servers.1,
        };
        match self.inner.meta(&request).map_err(|e| e.context(&mismatch.path))? {
            Response::Attr(_) => {}
            other => return Err(unexpected(&other)),
        }
        let options = super::RebuildOptions {
            rate_bytes_per_sec,
            server: Some(mismatch.servers.1),
            missing: false,
        };
        self.rebuild_path(&mismatch.path, &options, progress)
    }

    /// Compares the copies of the file at `path` if it is a replicated file: each slot
    /// that differs goes to `done.mismatches`, each that cannot be compared now to
    /// `done.failed`.
    fn scrub_one(
        &self,
        path: &str,
        attr: &Attr,
        done: &mut ScrubProgress,
        pace: &mut Pace,
        progress: &mut dyn FnMut(&ScrubProgress),
    ) {
        let Some(layout) = attr.layout.as_ref().filter(|l| l.replica_count() > 1) else {
            return;
        };
        if attr.kind != FileKind::File {
            return;
        }
        done.files += 1;
        // The stamps ask for a write capability: given back once the file is done, as a
        // closing writer does, so that the manager vouches for the file again at once
        // rather than when the capability expires.
        let source = self.inner.pool.capability_source();
        if let Some(source) = &source {
            source.writer_opened(attr.inode);
        }
        let _give_back = GiveBack(source, attr.inode);
        for slot in 0..layout.width() {
            let copies = layout.fresh_slot_servers(slot);
            if copies.len() < 2 {
                continue;
            }
            match self.compare_slot(attr.inode, layout, slot, &copies, done, pace, progress) {
                Ok(Some((other, offset))) => done.mismatches.push(ScrubMismatch {
                    path: path.to_string(),
                    slot,
                    servers: (copies[0], other),
                    offset,
                }),
                Ok(None) => {}
                Err(e) => done.failed.push(format!("{path}: stripe slot {slot}: {e}")),
            }
        }
    }

    /// Compares `copies` of `slot` chunk by chunk: the first copy that differs from
    /// `copies[0]` and the file offset of the first difference, if any.
    #[allow(clippy::too_many_arguments)]
    fn compare_slot(
        &self,
        inode: InodeId,
        layout: &Layout,
        slot: usize,
        copies: &[ServerId],
        done: &mut ScrubProgress,
        pace: &mut Pace,
        progress: &mut dyn FnMut(&ScrubProgress),
    ) -> Result<Option<(ServerId, u64)>, ClientError> {
        let striping = striping_of(layout, slot);
        let pool = &self.inner.pool;
        let addrs: Vec<String> = copies
            .iter()
            .map(|s| Ok(self.inner.io_addr(*s)?.to_owned()))
            .collect::<Result<_, ClientError>>()?;
        let stamps = |ranges: &[Range]| -> Result<Vec<u64>, ClientError> {
            let request = Request::RebuildStamp {
                inode,
                striping,
                ranges: ranges.to_vec(),
                create: false,
            };
            addrs
                .iter()
                .map(|addr| match pool.call(addr, &request, &[])?.0 {
                    Response::Stamp(s) => Ok(s),
                    other => Err(unexpected(&other)),
                })
                .collect()
        };
        let row = layout.stripe_size_bytes * layout.width() as u64;
        let rows = (SCRUB_CHUNK_BYTES / layout.stripe_size_bytes).max(1);
        let mut offset = 0u64;
        loop {
            let whole = vec![Range {
                offset,
                len: rows * row,
            }];
            // (stamps, the first difference) of a reading that showed one, to confirm.
            let mut suspect: Option<(Vec<u64>, (ServerId, u64))> = None;
            let (mut tries, mut confirms) = (0, 0);
            let (end, bytes) = loop {
                tries += 1;
                if tries > CHUNK_TRIES_MAX {
                    return Err(ClientError::refused(
                        weft_proto::ErrorCode::Busy,
                        format!("writes kept racing the comparison at offset {offset}"),
                    ));
                }
                let before = stamps(&whole)?;
                let ends: Vec<u64> = copies
                    .iter()
                    .map(|s| self.object_end(inode, layout, *s, slot))
                    .collect::<Result<_, _>>()?;
                let end = ends.iter().copied().filter(|e| *e != u64::MAX).max().unwrap_or(0);
                let read = Request::Read {
                    inode,
                    striping,
                    ranges: vec![Range {
                        offset,
                        len: (rows * row).min(end.saturating_sub(offset)),
                    }],
                };
                let mut data = Vec::with_capacity(addrs.len());
                for addr in &addrs {
                    data.push(match end > offset {
                        true => pool.call(addr, &read, &[])?.1,
                        false => Vec::new(),
                    });
                }
                if stamps(&whole)? != before {
                    // Raced by a write: again after a growing pause, for a quiet moment.
                    done.retries += 1;
                    std::thread::sleep(Duration::from_millis(tries.min(50) as u64));
                    continue;
                }
                let bytes: u64 = data.iter().map(|d| d.len() as u64).sum();
                let differs = (1..copies.len()).find_map(|i| {
                    first_difference(&data[0], &data[i])
                        .map(|at| local_to_file(layout, slot, offset, at))
                        .or_else(|| (ends[i] != ends[0]).then(|| ends[i].min(ends[0])))
                        .map(|at| (copies[i], at))
                });
                match (differs, &suspect) {
                    (None, _) => break (end, bytes),
                    // The same difference, with no write arriving anywhere since: real.
                    (Some(found), Some((seen, _))) if *seen == before => return Ok(Some(found)),
                    (Some(found), _) => {
                        confirms += 1;
                        if confirms > CONFIRMS_MAX {
                            return Err(ClientError::refused(
                                weft_proto::ErrorCode::Busy,
                                format!("the copies kept changing at offset {offset}"),
                            ));
                        }
                        suspect = Some((before, found));
                        std::thread::sleep(CONFIRM_WAIT);
                    }
                }
            };
            done.bytes += bytes;
            pace.add(bytes);
            progress(done);
            offset += rows * row;
            if offset >= end {
                return Ok(None);
            }
        }
    }
}

/// The index of the first byte where `a` and `b` differ, or where the shorter ends.
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

/// The file offset of byte `at` of slot `slot`'s reply to a read of whole stripe rows
/// from file offset `offset` (the slot's bytes of each row, back to back).
fn local_to_file(layout: &Layout, slot: usize, offset: u64, at: usize) -> u64 {
    let stripe = layout.stripe_size_bytes;
    let row = stripe * layout.width() as u64;
    let at = at as u64;
    offset + (at / stripe) * row + slot as u64 * stripe + at % stripe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slots_byte_maps_back_to_its_file_offset() {
        let layout = Layout {
            stripe_size_bytes: 100,
            servers: vec![ServerId(1), ServerId(2), ServerId(3)],
            replication: Default::default(),
        };
        // Rows of 300 bytes; slot 1 holds bytes 100..200 of each row.
        assert_eq!(local_to_file(&layout, 1, 0, 0), 100);
        assert_eq!(local_to_file(&layout, 1, 0, 99), 199);
        assert_eq!(local_to_file(&layout, 1, 0, 100), 400);
        assert_eq!(local_to_file(&layout, 2, 600, 150), 600 + 300 + 250);
        assert_eq!(first_difference(b"abc", b"abd"), Some(2));
        assert_eq!(first_difference(b"ab", b"abc"), Some(2));
        assert_eq!(first_difference(b"abc", b"abc"), None);
    }
}

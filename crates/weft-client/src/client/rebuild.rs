//! Rebuild of replicated files' stale pieces (issue 33; `weft rebuild`): a stale
//! piece is copied from a fresh copy of its slot, chunk by chunk, and its stale mark
//! cleared at the manager. Writes may go on meanwhile:
//!
//! - Each chunk is read from the fresh copy after its stamp was read at the target
//!   and written with `RebuildWrite`, which the target applies only if no write,
//!   truncate or allocation of those bytes arrived there since (`weft_iod::rebuild`).
//!   A client writes a copy it knows stale only after every fresh copy of the slot
//!   has the write (`file/replica.rs`), so a write that reached the target before the
//!   stamp was read is in the bytes the rebuild read; one that arrived later makes the
//!   chunk go again (up to `CHUNK_TRIES_MAX` times).
//! - The mark is cleared with the piece's generation read before the copy began
//!   (`ClearStale`): a writer that could not reach the target meanwhile marked it
//!   again, which moved the generation, so the mark stays and the piece is copied
//!   again (up to `PIECE_TRIES_MAX` times).
//! - A piece whose object is missing on its server (a disk replaced by an empty one:
//!   `rebuild_server` with `missing`) is marked stale first, then copied the same way;
//!   the target's object is made by the first stamp (`create`).
//!
//! The target's object is synced before the mark is cleared. Each chunk clips to the
//! fresh copy's end read just before it, so a truncate
//! meanwhile does not leave zeros past the file's end on the target. Holes in the
//! fresh copy are written as zeros (the rebuilt piece is not sparse).

use super::Client;
use crate::error::{unexpected, ClientError};
use std::time::{Duration, Instant};
use weft_layout::{InodeId, Layout, ServerId};
use weft_proto::msg::{Request, Response, STALE_LIST_MAX};
use weft_proto::{Attr, ErrorCode, Range, Striping};

/// Object bytes copied per request (and per stamp).
pub const REBUILD_CHUNK_BYTES: u64 = 4 << 20;
/// Times a chunk is copied again when writes keep arriving at it.
const CHUNK_TRIES_MAX: usize = 100;
/// Times a piece is copied again when writers keep marking it.
const PIECE_TRIES_MAX: usize = 5;

/// Replicated files, each with the io servers of its stale pieces (`stale_files`).
pub type StaleFiles = Vec<(InodeId, Vec<ServerId>)>;

/// What a rebuild did (so far, when passed to a progress callback).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuildProgress {
    /// Files looked at.
    pub files: u64,
    /// Pieces made fresh again.
    pub pieces: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Chunks or pieces copied again because writes raced them.
    pub retries: u64,
    /// Pieces left stale, with why (their server unreachable, say).
    pub failed: Vec<String>,
}

/// How a rebuild goes.
#[derive(Debug, Clone, Default)]
pub struct RebuildOptions {
    /// Most bytes per second copied (`None`: as fast as it goes).
    pub rate_bytes_per_sec: Option<u64>,
    /// Only pieces on this io server.
    pub server: Option<ServerId>,
    /// Also pieces not marked stale whose object is missing on their server (a disk
    /// replaced by an empty one): every replicated file with a piece on `server` is
    /// checked. Needs `server`.
    pub missing: bool,
}

/// Test hook `WEFT_FAULT_REBUILD_PAUSE_MS` (at most 1000): each chunk waits that long
/// between reading the fresh copy and writing the target, so that a test's writes
/// surely race it.
fn pause_for_tests() -> Option<Duration> {
    static PAUSE: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    *PAUSE.get_or_init(|| {
        std::env::var("WEFT_FAULT_REBUILD_PAUSE_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(|ms| Duration::from_millis(ms.min(1000)))
    })
}

pub(super) fn striping_of(layout: &Layout, slot: usize) -> Striping {
    Striping {
        stripe_size_bytes: layout.stripe_size_bytes,
        stripe_count: layout.servers.len() as u32,
        server_index: slot as u32,
    }
}

/// Gives a file's write grants back when dropped (a rebuild's or a scrub's: see `Client::scrub_one`).
pub(super) struct GiveBack(
    pub(super) Option<std::sync::Arc<dyn weft_rpc::CapabilitySource>>,
    pub(super) InodeId,
);

impl Drop for GiveBack {
    fn drop(&mut self) {
        if let Some(source) = &self.0 {
            source.writer_closed(self.1);
        }
    }
}

/// Paces copying to a rate.
pub(super) struct Pace {
    pub(super) rate: Option<u64>,
    pub(super) start: Instant,
    pub(super) bytes: u64,
}

impl Pace {
    pub(super) fn add(&mut self, bytes: u64) {
        self.bytes += bytes;
        if let Some(rate) = self.rate.filter(|r| *r > 0) {
            let due = Duration::from_secs_f64(self.bytes as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(self.start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
}

impl Client {
    /// Rebuilds the stale pieces of the replicated file at `path` (with
    /// `options.server`, only its piece there; with `missing` too, that piece also if
    /// its object is missing). `progress` is called after every chunk.
    pub fn rebuild_path(
        &self,
        path: &str,
        options: &RebuildOptions,
        progress: &mut dyn FnMut(&RebuildProgress),
    ) -> Result<RebuildProgress, ClientError> {
        let attr = self.resolve(path)?;
        self.rebuild_file(attr.inode, options, progress)
            .map_err(|e| e.context(path))
    }

    /// Rebuilds the stale pieces of the replicated file `inode` (as `rebuild_path`): the
    /// manager's rebuilder, which learns of files by inode. A file removed meanwhile is
    /// `ErrorCode::Stale`.
    pub fn rebuild_file(
        &self,
        inode: InodeId,
        options: &RebuildOptions,
        progress: &mut dyn FnMut(&RebuildProgress),
    ) -> Result<RebuildProgress, ClientError> {
        let mut done = RebuildProgress::default();
        let mut pace = Pace {
            rate: options.rate_bytes_per_sec,
            start: Instant::now(),
            bytes: 0,
        };
        self.rebuild_inode(inode, options, &mut done, &mut pace, progress)?;
        Ok(done)
    }

    /// One page of the replicated files with a stale piece, by inode after `after`
    /// (root only): each with its stale servers, and whether more follow.
    pub fn stale_files(&self, after: InodeId) -> Result<(StaleFiles, bool), ClientError> {
        let request = Request::StaleList {
            cred: self.cred_clone(),
            server: None,
            all: false,
            after,
            max: STALE_LIST_MAX as u32,
        };
        match self.inner.meta(&request)? {
            Response::StaleFiles { files, more } => Ok((files, more)),
            other => Err(unexpected(&other)),
        }
    }

    /// Rebuilds the stale pieces of every replicated file (with `options.server`, of
    /// those with a piece there), walking the manager's list (root only). A piece that
    /// cannot be rebuilt now (its server or every fresh copy unreachable) is counted in
    /// `failed` and the walk goes on.
    pub fn rebuild_all(
        &self,
        options: &RebuildOptions,
        progress: &mut dyn FnMut(&RebuildProgress),
    ) -> Result<RebuildProgress, ClientError> {
        if options.missing && options.server.is_none() {
            return Err(ClientError::InvalidArgument(
                "looking for missing pieces needs the server they are on".into(),
            ));
        }
        let mut done = RebuildProgress::default();
        let mut pace = Pace {
            rate: options.rate_bytes_per_sec,
            start: Instant::now(),
            bytes: 0,
        };
        let mut after = InodeId(0);
        loop {
            let request = Request::StaleList {
                cred: self.cred_clone(),
                server: options.server,
                all: options.missing,
                after,
                max: STALE_LIST_MAX as u32,
            };
            let (files, more) = match self.inner.meta(&request)? {
                Response::StaleFiles { files, more } => (files, more),
                other => return Err(unexpected(&other)),
            };
            for (inode, _) in &files {
                if let Err(e) = self.rebuild_inode(*inode, options, &mut done, &mut pace, progress) {
                    // Removed meanwhile: nothing to rebuild.
                    if e.code() != ErrorCode::Stale {
                        done.failed.push(format!("inode {inode}: {e}"));
                        progress(&done);
                    }
                }
            }
            match files.last() {
                Some((last, _)) if more => after = *last,
                _ => return Ok(done),
            }
        }
    }

    fn layout_of(&self, inode: InodeId) -> Result<(Attr, Layout), ClientError> {
        let request = Request::GetAttr {
            cred: self.cred_clone(),
            inode,
        };
        let attr = match self.inner.meta(&request)? {
            Response::Attr(attr) => attr,
            other => return Err(unexpected(&other)),
        };
        match attr.layout.clone() {
            Some(layout) if layout.replica_count() > 1 => Ok((attr, layout)),
            _ => Err(ClientError::refused(
                ErrorCode::InvalidArgument,
                format!("inode {inode} is not a replicated file"),
            )),
        }
    }

    fn rebuild_inode(
        &self,
        inode: InodeId,
        options: &RebuildOptions,
        done: &mut RebuildProgress,
        pace: &mut Pace,
        progress: &mut dyn FnMut(&RebuildProgress),
    ) -> Result<(), ClientError> {
        let (_, layout) = self.layout_of(inode)?;
        done.files += 1;
        let mut targets: Vec<ServerId> = layout
            .replication
            .stale
            .iter()
            .copied()
            .filter(|s| options.server.is_none_or(|o| o == *s))
            .collect();
        if let Some(server) = options.server.filter(|s| options.missing && !layout.is_stale(*s)) {
            if self.object_missing(inode, &layout, server)? {
                let request = Request::MarkStale {
                    cred: self.cred_clone(),
                    inode,
                    server,
                };
                match self.inner.meta(&request)? {
                    Response::Attr(_) => targets.push(server),
                    other => return Err(unexpected(&other)),
                }
            }
        }
        if targets.is_empty() {
            progress(done);
            return Ok(());
        }
        // Its write grants go back once the file is done, as a closing writer's do (the
        // manager vouches for the file again at once, not when they expire).
        let source = self.inner.pool.capability_source();
        if let Some(source) = &source {
            source.writer_opened(inode);
        }
        let _give_back = GiveBack(source, inode);
        self.hold_write_grant(inode);
        for target in targets {
            let mut tries = 0;
            loop {
                tries += 1;
                let generation = match self.inner.meta(&Request::StaleGeneration {
                    cred: self.cred_clone(),
                    inode,
                    server: target,
                })? {
                    Response::Generation(g) => g,
                    other => return Err(unexpected(&other)),
                };
                // The layout again: another rebuild may have cleared it, a writer
                // marked another copy of the slot.
                let (_, layout) = self.layout_of(inode)?;
                if !layout.is_stale(target) {
                    break;
                }
                self.copy_piece(inode, &layout, target, done, pace, progress)?;
                let cleared = self.inner.meta(&Request::ClearStale {
                    cred: self.cred_clone(),
                    inode,
                    server: target,
                    generation,
                });
                match cleared {
                    Ok(Response::Attr(_)) => {
                        done.pieces += 1;
                        progress(done);
                        break;
                    }
                    Err(e) if e.code() == ErrorCode::Busy && tries < PIECE_TRIES_MAX => {
                        done.retries += 1;
                    }
                    Err(e) => return Err(e),
                    Ok(other) => return Err(unexpected(&other)),
                }
            }
        }
        Ok(())
    }

    /// Whether `server`'s object of `inode` is missing (`Extents` says `u64::MAX`).
    fn object_missing(&self, inode: InodeId, layout: &Layout, server: ServerId) -> Result<bool, ClientError> {
        let (slot, _) = layout.piece_of(server).expect("the caller checked");
        Ok(self.object_end(inode, layout, server, slot)? == u64::MAX)
    }

    /// The end (a file offset) of `server`'s object of slot `slot` (`u64::MAX`: missing).
    pub(super) fn object_end(
        &self,
        inode: InodeId,
        layout: &Layout,
        server: ServerId,
        slot: usize,
    ) -> Result<u64, ClientError> {
        let addr = self.inner.io_addr(server)?.to_owned();
        let request = Request::Extents {
            items: vec![(inode, striping_of(layout, slot))],
        };
        match self.inner.pool.call(&addr, &request, &[])?.0 {
            Response::Extents(ends) if ends.len() == 1 => Ok(ends[0]),
            other => Err(unexpected(&other)),
        }
    }

    /// Copies `target`'s slot from a fresh copy (see the module comment).
    fn copy_piece(
        &self,
        inode: InodeId,
        layout: &Layout,
        target: ServerId,
        done: &mut RebuildProgress,
        pace: &mut Pace,
        progress: &mut dyn FnMut(&RebuildProgress),
    ) -> Result<(), ClientError> {
        let (slot, _) = layout.piece_of(target).expect("the caller checked");
        let source = layout
            .slot_servers(slot)
            .into_iter()
            .find(|s| *s != target && !layout.is_stale(*s))
            .ok_or_else(|| {
                ClientError::refused(
                    ErrorCode::Io,
                    format!("inode {inode}: no fresh copy of stripe slot {slot} to rebuild from"),
                )
            })?;
        let striping = striping_of(layout, slot);
        let source_addr = self.inner.io_addr(source)?.to_owned();
        let target_addr = self.inner.io_addr(target)?.to_owned();
        let pool = &self.inner.pool;
        let stamp = |ranges: Vec<Range>, create: bool| -> Result<u64, ClientError> {
            let request = Request::RebuildStamp {
                inode,
                striping,
                ranges,
                create,
            };
            match pool.call(&target_addr, &request, &[])?.0 {
                Response::Stamp(s) => Ok(s),
                other => Err(unexpected(&other)),
            }
        };
        // The copy is durable on the target before its mark is cleared.
        let sync = || -> Result<(), ClientError> {
            pool.call(&target_addr, &Request::Sync { inode }, &[])?;
            Ok(())
        };
        // Makes the target's object if it is missing, then cuts it to the fresh
        // copy's end: bytes past it are stale (a truncate it missed).
        stamp(Vec::new(), true)?;
        let end = self.object_end(inode, layout, source, slot)?;
        if end == u64::MAX {
            return Err(ClientError::refused(
                ErrorCode::Stale,
                format!("inode {inode}: the fresh copy on io server {source} is gone (removed?)"),
            ));
        }
        let truncate = Request::Truncate {
            inode,
            striping,
            size: end,
        };
        pool.call(&target_addr, &truncate, &[])?;
        // Whole stripe rows per chunk: this slot's bytes of them lie back to back.
        let row = layout.stripe_size_bytes * layout.servers.len() as u64;
        let rows = (REBUILD_CHUNK_BYTES / layout.stripe_size_bytes).max(1);
        let mut offset = 0u64;
        loop {
            let mut tries = 0;
            let copied = loop {
                tries += 1;
                let ranges_at = |len: u64| vec![Range { offset, len }];
                let whole = ranges_at(rows * row);
                let before = stamp(whole.clone(), false)?;
                let end = self.object_end(inode, layout, source, slot)?;
                if end == u64::MAX || end <= offset {
                    break None;
                }
                let ranges = ranges_at((rows * row).min(end - offset));
                // A clipped chunk may touch fewer stamp counters than the whole one:
                // its own stamp, taken while the whole chunk's stayed `before`.
                let before = match ranges == whole {
                    true => before,
                    false => {
                        let clipped = stamp(ranges.clone(), false)?;
                        if stamp(whole.clone(), false)? != before {
                            if tries >= CHUNK_TRIES_MAX {
                                return Err(ClientError::refused(
                                    ErrorCode::Busy,
                                    format!("inode {inode}: writes kept racing the rebuild of io server {target}'s piece"),
                                ));
                            }
                            done.retries += 1;
                            continue;
                        }
                        clipped
                    }
                };
                let read = Request::Read {
                    inode,
                    striping,
                    ranges: ranges.clone(),
                };
                let (_, data) = pool.call(&source_addr, &read, &[])?;
                if let Some(pause) = pause_for_tests() {
                    std::thread::sleep(pause);
                }
                let write = Request::RebuildWrite {
                    inode,
                    striping,
                    ranges,
                    stamp: before,
                };
                match pool.call(&target_addr, &write, &data) {
                    Ok(_) => break Some((data.len() as u64, end)),
                    Err(e) => {
                        let e = ClientError::from(e);
                        if e.code() != ErrorCode::Busy || tries >= CHUNK_TRIES_MAX {
                            return Err(e);
                        }
                        done.retries += 1;
                        std::thread::sleep(Duration::from_millis(tries.min(20) as u64));
                    }
                }
            };
            let Some((bytes, end)) = copied else {
                return sync();
            };
            done.bytes += bytes;
            pace.add(bytes);
            progress(done);
            offset += rows * row;
            if offset >= end {
                return sync();
            }
        }
    }
}

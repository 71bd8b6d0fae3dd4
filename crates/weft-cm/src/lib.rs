//! The cache role: a cache manager holds its share of the global cache (Clusterfile's
//! cooperative cache): the blocks of cached files that map to it, one replica of each
//! block in the whole tier, so every client going through the tier sees every other
//! client's writes with no coherence protocol.
//!
//! A request reaches a manager as an io server's request would (a range list, or an
//! interval of a view registered on the connection: Clusterfile's view I/O), with the
//! cache's striping (blocks over managers) instead of the file's, so the manager finds
//! its own pieces the way an io server does. Then:
//!
//! 1. Its pieces are walked block by block, in stream order; each block is found, or
//!    made resident (evicting by the replacement policy, writing a dirty victim back
//!    first when only dirty ones can go).
//! 2. A write copies its pieces into the block and marks them valid and dirty (write
//!    allocate: nothing is fetched for a write, whatever part of the block it covers).
//! 3. A read of bytes not valid fetches what the block lacks from the io servers
//!    first (list I/O of the block's gaps), then copies its pieces out.
//! 4. Dirty extents go back to the io servers (list I/O, exactly the dirty bytes) on
//!    flush (the client's sync), soon after a close, on eviction, and from the
//!    background write-back when blocks are dirty for too long or dirty data passes
//!    its limit (`writeback`).
//! 5. A write-back that fails keeps the blocks dirty; the next flush retries and
//!    reports the failure if it persists. A file removed meanwhile loses its blocks.
//!
//! Colocated with an io server (disk-directed I/O), the manager fetches and writes back
//! that server's stripes in the same process (`Backing`).

mod backing;
mod tier;
mod writeback;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use weft_cache::policy::PolicyKind;
use weft_cache::BlockKey;
use weft_iod::ViewRegistry;
use weft_layout::{InodeId, Layout};
use weft_proto::frame::DATA_BYTES_MAX;
use weft_proto::msg::{CacheFile, CacheStats, Request, Response};
use weft_proto::{ErrorCode, Range, Striping, WireError};
use weft_rpc::ConnectionId;

pub use backing::{fixed_directory, Backing, Directory};
use tier::{Pinned, Room, Tier};

/// Largest memory a cache manager may be given (bytes): far above any machine here, a
/// guard against a typo, not a tuning knob.
pub const CACHE_MEMORY_BYTES_MAX: u64 = 1 << 40;

/// How a cache manager runs.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Most bytes of blocks held (the hard memory bound).
    pub capacity_bytes: u64,
    pub policy: PolicyKind,
    /// Dirty bytes above which the background write-back starts (default: half the
    /// capacity), writing the oldest back until a quarter of the capacity remains.
    pub dirty_limit_bytes: u64,
    /// A block dirty for this long is written back in the background.
    pub dirty_age: Duration,
    /// How often the background write-back looks.
    pub writeback_period: Duration,
}

impl CacheConfig {
    pub fn new(capacity_bytes: u64, policy: PolicyKind) -> CacheConfig {
        CacheConfig {
            capacity_bytes,
            policy,
            dirty_limit_bytes: capacity_bytes / 2,
            dirty_age: Duration::from_secs(5),
            writeback_period: Duration::from_millis(100),
        }
    }
}

/// The cache role of one server process.
pub struct CacheService {
    inner: Arc<Inner>,
    /// Whether this service owns the view registry (no io role in the process) and so
    /// answers registrations and releases itself.
    owns_views: bool,
}

pub(crate) struct Inner {
    tier: Tier,
    backing: Backing,
    views: Arc<ViewRegistry>,
    incarnation: u64,
    config: CacheConfig,
    writeback: writeback::Queue,
}

/// One piece of a request in one block: `len` bytes at `offset` in the block, and where
/// they are in the request's stream.
#[derive(Debug, Clone, Copy)]
struct BlockPiece {
    offset: u32,
    len: u32,
    stream_at: usize,
}

impl CacheService {
    /// A cache manager with its own view registry (`views: None`), or sharing the io
    /// role's; `incarnation` must be the one the server gives clients in its handshake.
    pub fn new(
        config: CacheConfig,
        backing: Backing,
        views: Option<Arc<ViewRegistry>>,
        incarnation: u64,
    ) -> CacheService {
        let owns_views = views.is_none();
        let inner = Arc::new(Inner {
            tier: Tier::new(config.capacity_bytes, config.policy),
            backing,
            views: views.unwrap_or_default(),
            incarnation,
            writeback: writeback::Queue::default(),
            config,
        });
        writeback::spawn(&inner);
        CacheService { inner, owns_views }
    }

    /// Whether `request` is for this role.
    pub fn serves(&self, request: &Request) -> bool {
        match request {
            Request::RegisterView { .. } | Request::ReleaseView { .. } => self.owns_views,
            r => (r.opcode() as u16) >= 80,
        }
    }

    pub fn handle(
        &self,
        connection: ConnectionId,
        request: Request,
        data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        let inner = &self.inner;
        let reply = match request {
            Request::ViaCache { file, request } => return inner.via_cache(connection, &file, *request, data),
            Request::CacheFlush { file } => {
                inner.check_incarnation(&file)?;
                inner.flush(file.inode)?;
                Response::Done
            }
            Request::CacheTruncate { file, size } => {
                inner.check_incarnation(&file)?;
                inner.truncate(&file, size)?;
                Response::Done
            }
            Request::CacheExtents { inodes } => {
                Response::Extents(inodes.iter().map(|i| inner.dirty_end(*i)).collect())
            }
            Request::CacheClose { inode } => {
                inner.writeback.soon(inode);
                Response::Done
            }
            Request::CacheStats => Response::CacheStats(inner.stats()),
            Request::CacheDrop { inodes } => {
                for inode in inodes {
                    inner.tier.remove_from(inode, 0);
                }
                Response::Done
            }
            Request::RegisterView { view } if self.owns_views => {
                Response::View(inner.views.register(connection, view)?)
            }
            Request::ReleaseView { view } if self.owns_views => {
                inner.views.release(connection, view)?;
                Response::Done
            }
            other => {
                return Err(WireError::new(
                    ErrorCode::Unsupported,
                    format!("{:?} is not a cache manager operation", other.opcode()),
                ))
            }
        };
        Ok((reply, Vec::new()))
    }

    /// Bytes the reply to `request` will carry, for the server's memory budget.
    pub fn reply_bytes_hint(&self, request: &Request) -> u64 {
        match request {
            Request::ViaCache { request, .. } => match &**request {
                Request::Read { striping, ranges, .. } => {
                    let layout = striping.layout();
                    ranges
                        .iter()
                        .map(|r| layout.bytes_on(striping.server_index as usize, r.offset, r.len))
                        .fold(0u64, u64::saturating_add)
                }
                Request::ReadView { len, .. } => (*len).min(DATA_BYTES_MAX),
                _ => 0,
            },
            _ => 0,
        }
    }

    pub fn connection_closed(&self, connection: ConnectionId) {
        if self.owns_views {
            self.inner.views.close(connection);
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.inner.stats()
    }
}

impl Inner {
    fn check_incarnation(&self, file: &CacheFile) -> Result<(), WireError> {
        if file.incarnation == 0 || file.incarnation == self.incarnation {
            return Ok(());
        }
        Err(WireError::new(
            ErrorCode::Io,
            format!(
                "inode {}: this cache manager restarted since the file handle first used it, so data \
                 written through it and not synced may be lost; reopen the file",
                file.inode
            ),
        ))
    }

    fn stats(&self) -> CacheStats {
        let c = &self.tier.counters;
        CacheStats {
            incarnation: self.incarnation,
            policy: self.tier.policy_name().to_owned(),
            capacity_bytes: self.tier.capacity_bytes(),
            cached_bytes: self.tier.used_bytes(),
            dirty_bytes: c.dirty_bytes.load(Ordering::SeqCst),
            blocks: self.tier.block_count() as u64,
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
            write_backs: c.write_backs.load(Ordering::Relaxed),
            write_back_bytes: c.write_back_bytes.load(Ordering::Relaxed),
            write_back_errors: c.write_back_errors.load(Ordering::Relaxed),
            fetched_bytes: c.fetched_bytes.load(Ordering::Relaxed),
        }
    }

    fn via_cache(
        &self,
        connection: ConnectionId,
        file: &CacheFile,
        request: Request,
        data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        self.check_incarnation(file)?;
        let check_inode = |inode: InodeId| {
            if inode == file.inode {
                Ok(())
            } else {
                Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "request for inode {inode} carries the cached file of inode {}",
                        file.inode
                    ),
                ))
            }
        };
        let write = matches!(request, Request::Write { .. } | Request::WriteView { .. });
        match request {
            Request::Write {
                inode,
                striping,
                ranges,
            }
            | Request::Read {
                inode,
                striping,
                ranges,
            } => {
                check_inode(inode)?;
                let layout = striping.layout();
                let pieces = range_pieces(&layout, striping, &ranges)?;
                match write {
                    true => self.write(file, striping, pieces, &data),
                    false => self.read(file, striping, pieces),
                }
            }
            Request::WriteView {
                inode,
                striping,
                view,
                view_offset,
                len,
            }
            | Request::ReadView {
                inode,
                striping,
                view,
                view_offset,
                len,
            } => {
                check_inode(inode)?;
                let view = self.views.get(connection, view)?;
                let layout = striping.layout();
                let pieces = view_pieces(&view, &layout, striping, view_offset, len)?;
                match write {
                    true => self.write(file, striping, pieces, &data),
                    false => self.read(file, striping, pieces),
                }
            }
            other => Err(WireError::new(
                ErrorCode::Unsupported,
                format!("{:?} does not go through a cache manager", other.opcode()),
            )),
        }
    }

    fn write(
        &self,
        file: &CacheFile,
        striping: Striping,
        pieces: Pieces<impl Iterator<Item = (u64, u64)>>,
        data: &[u8],
    ) -> Result<(Response, Vec<u8>), WireError> {
        let stream_len = pieces.stream_len;
        // Checked before anything is written, so a mismatched write changes nothing.
        if data.len() as u64 != stream_len {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "write carries {} bytes but its request covers {stream_len} bytes on this cache manager",
                    data.len()
                ),
            ));
        }
        let block_size = striping.stripe_size_bytes;
        pieces.for_each_block(block_size, |block, batch| {
            let key = BlockKey::new(file.inode, block);
            self.with_block(key, &file.layout, block_size, |cell, b| {
                let before = b.dirty.bytes();
                for p in batch {
                    let (at, n) = (p.offset as usize, p.len as usize);
                    b.data[at..at + n].copy_from_slice(&data[p.stream_at..p.stream_at + n]);
                    b.valid.insert(p.offset..p.offset + p.len);
                    b.dirty.insert(p.offset..p.offset + p.len);
                }
                self.tier.dirty_changed(cell, b, before);
                Ok(())
            })
        })?;
        Ok((Response::Bytes(stream_len), Vec::new()))
    }

    fn read(
        &self,
        file: &CacheFile,
        striping: Striping,
        pieces: Pieces<impl Iterator<Item = (u64, u64)>>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        let block_size = striping.stripe_size_bytes;
        let stream_len = pieces.stream_len;
        let mut out = vec![0u8; stream_len as usize];
        pieces.for_each_block(block_size, |block, batch| {
            let key = BlockKey::new(file.inode, block);
            self.with_block(key, &file.layout, block_size, |_, b| {
                let covered =
                    b.valid.is_full() || batch.iter().all(|p| b.valid.covers(p.offset..p.offset + p.len));
                if covered {
                    self.tier.counters.hits.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.tier.counters.misses.fetch_add(1, Ordering::Relaxed);
                    self.fetch(file.inode, &file.layout, block, block_size, b)?;
                }
                for p in batch {
                    let (at, n) = (p.offset as usize, p.len as usize);
                    out[p.stream_at..p.stream_at + n].copy_from_slice(&b.data[at..at + n]);
                }
                Ok(())
            })
        })?;
        Ok((Response::Bytes(stream_len), out))
    }

    /// Fills every byte of the block that is not valid from the io servers (never
    /// touching dirty bytes, which are valid).
    fn fetch(
        &self,
        inode: InodeId,
        layout: &Layout,
        block: u64,
        block_size: u64,
        b: &mut tier::Block,
    ) -> Result<(), WireError> {
        let gaps = b.valid.missing(0..block_size as u32);
        let start = block * block_size;
        let ranges: Vec<Range> = gaps
            .iter()
            .map(|g| Range {
                offset: start + g.start as u64,
                len: (g.end - g.start) as u64,
            })
            .collect();
        let total: u64 = ranges.iter().map(|r| r.len).sum();
        let mut fetched = vec![0u8; total as usize];
        self.backing.read(inode, layout, &ranges, &mut fetched)?;
        let mut at = 0usize;
        for g in gaps {
            let n = (g.end - g.start) as usize;
            b.data[g.start as usize..g.end as usize].copy_from_slice(&fetched[at..at + n]);
            b.valid.insert(g);
            at += n;
        }
        self.tier
            .counters
            .fetched_bytes
            .fetch_add(total, Ordering::Relaxed);
        Ok(())
    }

    /// Runs `work` on the block, resident, pinned and locked. A block removed
    /// (truncated or dropped) between the lookup and the lock is looked up again, so no
    /// write lands in a block that already left the cache.
    fn with_block<R>(
        &self,
        key: BlockKey,
        layout: &Layout,
        block_size: u64,
        work: impl FnOnce(&tier::Cell, &mut tier::Block) -> Result<R, WireError>,
    ) -> Result<R, WireError> {
        loop {
            let pinned = self.pin(key, layout, block_size)?;
            let mut block = pinned.cell.lock();
            if !pinned.cell.is_removed() {
                return work(&pinned.cell, &mut block);
            }
        }
    }

    /// The block, resident and pinned, made room for if need be.
    fn pin(&self, key: BlockKey, layout: &Layout, block_size: u64) -> Result<Pinned, WireError> {
        loop {
            if let Some(pinned) = self.tier.lookup(key, layout, block_size)? {
                if !pinned.cell.is_removed() {
                    return Ok(pinned);
                }
                continue;
            }
            match self.tier.insert(key, layout, block_size)? {
                Room::Ready(pinned) => return Ok(pinned),
                Room::WriteBack(victim) => {
                    let inode = victim.cell.key.inode;
                    let written = self.write_back(inode, std::slice::from_ref(&victim));
                    let ok = written.is_ok();
                    self.tier.finish_eviction(victim, ok);
                    if let Err(e) = written {
                        return Err(WireError::new(
                            e.code,
                            format!(
                                "this cache manager is full of dirty blocks it cannot write back: {}",
                                e.message
                            ),
                        ));
                    }
                }
            }
        }
    }

    /// Writes the dirty bytes of `cells` (blocks of `inode`, in block order) back to
    /// the io servers, in batches of at most `WRITE_BACK_BATCH_BYTES`. A file removed
    /// meanwhile loses its blocks; any other failure keeps them dirty.
    fn write_back(&self, inode: InodeId, cells: &[Pinned]) -> Result<(), WireError> {
        let Some(layout) = self.tier.layout_of(inode) else {
            return Ok(());
        };
        let mut rest = cells;
        while !rest.is_empty() {
            let mut guards = Vec::new();
            let mut ranges: Vec<Range> = Vec::new();
            let mut data: Vec<u8> = Vec::new();
            let mut taken = 0usize;
            for pinned in rest {
                if !guards.is_empty()
                    && (data.len() as u64 >= writeback::WRITE_BACK_BATCH_BYTES
                        || ranges.len() >= writeback::WRITE_BACK_BATCH_RANGES)
                {
                    break;
                }
                taken += 1;
                let cell = &pinned.cell;
                let b = cell.lock();
                if cell.is_removed() || b.dirty.is_empty() {
                    continue;
                }
                let start = cell.key.block * b.data.len() as u64;
                for extent in b.dirty.iter() {
                    ranges.push(Range {
                        offset: start + extent.start as u64,
                        len: (extent.end - extent.start) as u64,
                    });
                    data.extend_from_slice(&b.data[extent.start as usize..extent.end as usize]);
                }
                guards.push((cell, b));
            }
            rest = &rest[taken..];
            if ranges.is_empty() {
                continue;
            }
            match self.backing.write(inode, &layout, &ranges, &data) {
                Ok(()) => {
                    let c = &self.tier.counters;
                    c.write_backs.fetch_add(guards.len() as u64, Ordering::Relaxed);
                    c.write_back_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                    for (cell, b) in &mut guards {
                        let before = b.dirty.bytes();
                        b.dirty.clear();
                        self.tier.dirty_changed(cell, b, before);
                    }
                }
                Err(e) if e.code == ErrorCode::Stale => {
                    // The file was removed: nothing to write its bytes to.
                    drop(guards);
                    self.tier.remove_from(inode, 0);
                    return Ok(());
                }
                Err(e) => {
                    self.tier
                        .counters
                        .write_back_errors
                        .fetch_add(1, Ordering::Relaxed);
                    return Err(WireError::new(
                        e.code,
                        format!("writing back inode {inode}: {}", e.message),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Writes every dirty block of the file held here back to the io servers; blocks
    /// being written back by someone else are waited for (their locks).
    fn flush(&self, inode: InodeId) -> Result<(), WireError> {
        let dirty = self.tier.blocks_of(inode, true);
        self.write_back(inode, &dirty)
    }

    /// Forgets the file's bytes at and after `size`.
    fn truncate(&self, file: &CacheFile, size: u64) -> Result<(), WireError> {
        let Some(first) = self
            .tier
            .blocks_of(file.inode, false)
            .first()
            .map(|p| p.cell.clone())
        else {
            return Ok(());
        };
        let block_size = first.lock().data.len() as u64;
        self.tier.remove_from(file.inode, size.div_ceil(block_size));
        if !size.is_multiple_of(block_size) {
            let key = BlockKey::new(file.inode, size / block_size);
            if let Some(pinned) = self.tier.lookup(key, &file.layout, block_size)? {
                let cell = &pinned.cell;
                let mut b = cell.lock();
                if !cell.is_removed() {
                    let from = (size % block_size) as u32;
                    let before = b.dirty.bytes();
                    b.data[from as usize..].fill(0);
                    b.dirty.remove(from..block_size as u32);
                    b.valid.insert(from..block_size as u32);
                    self.tier.dirty_changed(cell, &b, before);
                }
            }
        }
        Ok(())
    }

    /// The end of the file's data held dirty here (0 if none).
    fn dirty_end(&self, inode: InodeId) -> u64 {
        let mut end = 0;
        for pinned in self.tier.blocks_of(inode, true) {
            let b = pinned.cell.lock();
            if let Some(last) = b.dirty.iter().last() {
                end = end.max(pinned.cell.key.block * b.data.len() as u64 + last.end as u64);
            }
        }
        end
    }
}

/// Most pieces of one block handled under one hold of its lock: bounds the memory a
/// request of very many small pieces takes, whatever its size.
const PIECES_PER_BATCH_MAX: usize = 1 << 16;

/// This manager's pieces of a request, as file (offset, length) in stream order, each
/// inside one block, with the stream's length.
struct Pieces<I> {
    stream_len: u64,
    iter: I,
}

impl<I: Iterator<Item = (u64, u64)>> Pieces<I> {
    /// Calls `each` with runs of pieces of one block (at most `PIECES_PER_BATCH_MAX` at a
    /// time), in stream order; adjacent pieces are merged.
    fn for_each_block(
        self,
        block_size: u64,
        mut each: impl FnMut(u64, &[BlockPiece]) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        let mut batch: Vec<BlockPiece> = Vec::new();
        let mut current = None;
        let mut stream_at = 0usize;
        for (file_offset, len) in self.iter {
            if len == 0 {
                continue;
            }
            let block = file_offset / block_size;
            if current != Some(block) || batch.len() >= PIECES_PER_BATCH_MAX {
                if let Some(b) = current {
                    each(b, &batch)?;
                }
                batch.clear();
                current = Some(block);
            }
            let piece = BlockPiece {
                offset: (file_offset % block_size) as u32,
                len: len as u32,
                stream_at,
            };
            stream_at += len as usize;
            match batch.last_mut() {
                Some(last) if last.offset + last.len == piece.offset => last.len += piece.len,
                _ => batch.push(piece),
            }
        }
        if let Some(b) = current {
            each(b, &batch)?;
        }
        debug_assert_eq!(stream_at as u64, self.stream_len);
        Ok(())
    }
}

/// `layout` is the striping's layout (blocks over managers).
fn range_pieces<'a>(
    layout: &'a Layout,
    striping: Striping,
    ranges: &'a [Range],
) -> Result<Pieces<impl Iterator<Item = (u64, u64)> + 'a>, WireError> {
    let index = striping.server_index as usize;
    let stream_len = weft_iod::ranges_stream_len(layout, index, ranges)?;
    let iter = ranges.iter().flat_map(move |range| {
        layout
            .pieces_on(index, range.offset, range.len)
            .expect("range checked at decode")
            .map(|p| (p.file_offset, p.len))
    });
    Ok(Pieces { stream_len, iter })
}

/// `layout` is the striping's layout (blocks over managers).
fn view_pieces<'a>(
    view: &'a weft_layout::view::View,
    layout: &'a Layout,
    striping: Striping,
    view_offset: u64,
    len: u64,
) -> Result<Pieces<impl Iterator<Item = (u64, u64)> + 'a>, WireError> {
    let (stream_len, slices) =
        weft_iod::view_slices(view, view_offset, len, layout, striping.server_index as usize)?;
    let iter = slices.flat_map(move |slice| {
        view.pieces(slice.view_offset, slice.len)
            .expect("slices lie inside the checked interval")
            .map(|p| (p.file_offset, p.len))
    });
    Ok(Pieces { stream_len, iter })
}

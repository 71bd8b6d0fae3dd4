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
//!
//! # Code map
//!
//! The cache role (a cache manager). `lib.rs`: `CacheService` answers `ViaCache` (a
//! range-list or view read or write with the cache's striping, walked block by block in
//! stream order, at most 65,536 pieces of a block per hold of the lock; a read looks its
//! blocks up in batches of up to 1 MiB and fetches all of a batch's misses with one list
//! read per io server, copying each block out as soon as it is there, so a batch pins no
//! cache memory), `CacheFlush`
//! (write back the file's dirty blocks, waiting for write-backs in flight and retrying
//! those that failed), `CacheTruncate` (once its write-backs in flight are done, forget
//! the bytes from the new end on, revoke their fetches, and truncate the file's io
//! objects itself while holding the cut: no fetch or write-back of those blocks until the
//! objects are cut, so a concurrent read cannot fetch the removed bytes back, issue 28;
//! the client truncates the objects again once every manager answered), `CachePunch` (opcode 187: forget a range, dirty or not,
//! after the client's `CacheFlush` and its fallocate punching that hole in the objects, so
//! a punch at the file's end keeps its size and no cached byte outlives the hole), `CacheExtents` (end of dirty data; a client asks it before the io
//! servers' ends, since a block turns clean only once written back, so a write-back between
//! the two answers is counted by the second), `CacheClose`,
//! `CacheStats`, `CacheDrop`, and view registration when there is no io role to share
//! the registry with; its opening comment gives the algorithm in five lines. Every
//! request carries the manager's incarnation as the client first saw it; another one
//! (the manager restarted, its unsynced dirty blocks gone) is refused with EIO naming the
//! restart. `tier.rs`: weft-cache's `Cache` behind one lock plus what a server adds: each
//! file's layout and block size (checked against every request: all clients must route a
//! file alike), one fetch per block at a time (others wait), each with a ticket that a
//! truncate, punch or drop of its block revokes (a revoked fill installs nothing and the
//! read looks again), truncates in progress (`begin_truncate`/`end_truncate`: the cut),
//! waiting for write-backs in flight; bytes are copied out of snapshots and written back from snapshots outside the
//! lock. The policy is sized for the blocks the memory holds: each new file raises its
//! capacity (`AnyPolicy::grow`, never lowered) to the memory bound over the charge of the
//! file's blocks (bytes plus the store's per-block overhead; at most the bound over
//! 4 KiB), so ARC's and S3-FIFO's targets are those of a cache of that many blocks, the
//! cache `weft sim` simulates (sized for 4 KiB blocks while 64 KiB ones filled the memory,
//! ARC's T1 target could pass what T1 can ever hold, and the manager's hits drifted from
//! the simulator's by up to 170 of 3,840 references, order by order). `cio.rs`: what a
//! manager keeps of collective reads' original patterns (each call's references applied
//! once, in the pattern's time order, ties by rank; the blocks each recent call asked
//! for), and the test hook `WEFT_CIO_RECORD=<directory>`: every reference applied, in
//! order, as `inode call rank block` lines in `cio-<server id>.txt` there (at most 2^20),
//! which the MPI test compares with the trace's original stream. `backing.rs`: fetch, write-back and a truncate's cut of the objects as list I/O to the file's io servers, a
//! direct call into this process's io role for its own server (colocated), else the
//! network; addresses from the cluster description, read lazily when the manager started
//! before the description existed (`weft up`, MPI launch). `writeback.rs`: the background
//! thread (files closed since the last round; blocks dirty longer than the dirty age,
//! 5 s; the oldest when dirty data pass the dirty limit, half the memory, until half of
//! that remains; past 8 MiB dirty, woken by the writes, the blocks written whole, so that
//! write-back runs while the writers go on). ViaCache writes that come in a client's
//! shared segment are copied from there into the blocks (`CacheService::handle_borrowed`).
//! Write-backs to this process's own io server go range by range from the blocks' bytes
//! (never gathered into one stream), after the remote servers' requests are sent; one
//! write-back keeps up to 4 batches of 4 MiB in flight, a sliding window (a sender takes
//! the next batch as soon as its last is answered). A read's fetch reads each block
//! missing whole into a buffer of its own (`Cache::fetch_buffer`: pooled block memory,
//! else fresh) that becomes the block's bytes (`Cache::install`, no copy); only a resident
//! block's gaps go through a separate buffer and `fill`. A colocated manager whose own io
//! server holds a fetch whole reads it straight into those buffers (`IoService::read_into`,
//! no zero-fill first). A read through the cache from a colocated client's shared segment
//! (`ShmCall`) is answered by `CacheService::reply_into` (`Handler::reply_into` in
//! weft-rpc): the pieces are copied from the blocks straight into the client's region,
//! with no reply buffer, when the reply fits there. A read batch that missed advises the manager's next
//! 4 MiB of blocks `POSIX_FADV_WILLNEED` on its own io server (read-ahead into the page
//! cache, not into the tier).
//! `CacheService::write_back_all` writes every dirty block back (a delegate leaving).
//! A manager started with `--delegate` (implied by the aligned mapping, passed by `weft
//! up --cache-mapping aligned`) is a delegate: its store marks fully dirty blocks and the
//! policy, wrapped in weft-cache's `Prefer`, evicts them first; its `CacheStats` policy
//! name says so ("arc, fully dirty first") and `write_backs_full` counts blocks written
//! back whole (the rest went as their dirty extents, list I/O, nothing fetched).

mod backing;
mod cio;
mod tier;
#[cfg(test)]
mod tier_model;
mod writeback;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weft_cache::policy::PolicyKind;
use weft_cache::BlockKey;
use weft_iod::ViewRegistry;
use weft_layout::{InodeId, Layout};
use weft_proto::frame::DATA_BYTES_MAX;
use weft_proto::msg::{CacheFile, CacheStats, Request, Response};
use weft_proto::{ErrorCode, Range, Striping, WireError};
use weft_rpc::{ConnectionId, ReplyInto as Reply};

pub use backing::{fixed_directory, Backing, Directory};
use cio::{Asked, ReadMode};
use tier::{Blocked, Fetched, Fetching, Found, Ticket, Tier};
use weft_cache::store::{Snapshot, WriteBack};
use weft_cache::Admission;
use weft_proto::pattern::AccessPattern;

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
    /// Collective-I/O-aware reads: how a block that an aggregated request fetched but
    /// no process asked for is kept: at the cold end of the policy
    /// (`Some(Admission::Cold)`, the default) or not at all (`None`).
    pub cio_unrequested: Option<Admission>,
    /// A delegate (I/O delegation's write-back cache): evict fully dirty blocks first,
    /// then by `policy`.
    pub prefer_full_dirty: bool,
    /// Test hook: a file to record every collective-I/O-aware reference applied in,
    /// in order (`cio::Record`).
    pub cio_record: Option<std::path::PathBuf>,
}

impl CacheConfig {
    pub fn new(capacity_bytes: u64, policy: PolicyKind) -> CacheConfig {
        CacheConfig {
            capacity_bytes,
            policy,
            dirty_limit_bytes: capacity_bytes / 2,
            dirty_age: Duration::from_secs(5),
            writeback_period: Duration::from_millis(100),
            cio_unrequested: Some(Admission::Cold),
            prefer_full_dirty: false,
            cio_record: None,
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

/// What the manager counts itself (the store counts the rest).
#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    write_back_errors: AtomicU64,
    fetched_bytes: AtomicU64,
}

pub(crate) struct Inner {
    tier: Tier,
    counters: Counters,
    cio: cio::Patterns,
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
        let cio = cio::Patterns::default();
        if let Some(path) = &config.cio_record {
            match cio::Record::create(path) {
                Ok(r) => *cio.record.lock().unwrap_or_else(|p| p.into_inner()) = Some(r),
                Err(e) => eprintln!(
                    "weftd: cache reference record {}: {e}; not recording",
                    path.display()
                ),
            }
        }
        let inner = Arc::new(Inner {
            tier: Tier::new(config.capacity_bytes, config.policy, config.prefer_full_dirty),
            counters: Counters::default(),
            cio,
            backing,
            views: views.unwrap_or_default(),
            incarnation,
            writeback: writeback::Queue::default(),
            config,
        });
        writeback::spawn(&inner);
        CacheService { inner, owns_views }
    }

    /// Opcodes of the cache role's own requests (`ViaCache` 80 to `CacheCioStats` 88,
    /// room to 99).
    const CACHE_OPCODES: std::ops::Range<u16> = 80..100;

    /// Whether `request` is for this role.
    pub fn serves(&self, request: &Request) -> bool {
        match request {
            Request::RegisterView { .. } | Request::ReleaseView { .. } => self.owns_views,
            // Numbered after the cache range was full.
            Request::CachePunch { .. } => true,
            // The cache range only: a server that is also an io server gets its io
            // requests numbered past it (locks, stamps, times) to the io role.
            r => Self::CACHE_OPCODES.contains(&(r.opcode() as u16)),
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
            Request::ViaCache { file, request } => {
                return inner
                    .via_cache(connection, &file, &request, &data, Dest::Reply)
                    .map(into_frame)
            }
            Request::ViaCacheAware {
                file,
                pattern,
                request,
            } => {
                inner.check_incarnation(&file)?;
                return inner
                    .read_aware(connection, &file, &pattern, &request, Dest::Reply)
                    .map(into_frame);
            }
            Request::CacheCioStats => Response::CacheCioStats(inner.cio.stats()),
            Request::CacheFlush { file } => {
                inner.check_incarnation(&file)?;
                inner.flush(file.inode)?;
                // Everything dirty went back: earlier background failures lost nothing.
                inner.writeback.forget_failure(file.inode);
                Response::Done
            }
            Request::CacheTruncate { file, size } => {
                inner.check_incarnation(&file)?;
                inner.truncate(&file, size)?;
                Response::Done
            }
            Request::CachePunch { file, offset, len } => {
                inner.check_incarnation(&file)?;
                inner.tier.punch(file.inode, offset, len);
                Response::Done
            }
            Request::CacheExtents { inodes } => {
                Response::Extents(inodes.iter().map(|i| inner.dirty_end(*i)).collect())
            }
            Request::CacheClose { inode } => {
                inner.writeback.soon(inode);
                // A write-back of the file that failed in the background is reported
                // to the close (as close(2) reports an earlier write error on NFS).
                if let Some(e) = inner.writeback.failure_of(inode) {
                    return Err(e);
                }
                Response::Done
            }
            Request::CacheStats => Response::CacheStats(inner.stats()),
            Request::CacheDrop { inodes } => {
                for inode in inodes {
                    inner.tier.drop_file(inode);
                    inner.writeback.forget_failure(inode);
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

    /// `handle` for a request whose bulk data is borrowed from a client's shared
    /// segment: a write through the cache goes from there straight into the blocks
    /// (no copy of the payload first); anything else is handled as usual.
    pub fn handle_borrowed(
        &self,
        connection: ConnectionId,
        request: Request,
        data: &[u8],
    ) -> Result<(Response, Vec<u8>), WireError> {
        match request {
            Request::ViaCache { file, request } => self
                .inner
                .via_cache(connection, &file, &request, data, Dest::Reply)
                .map(into_frame),
            other => self.handle(connection, other, data.to_vec()),
        }
    }

    /// Serves a read through the cache (`ViaCache` or `ViaCacheAware` carrying a read)
    /// with its reply written straight from the blocks into `region`, a colocated
    /// client's shared memory, when it fits there (`Reply::Placed`); else the reply's
    /// bytes to send (`Reply::Data`). `None`: not such a read.
    pub fn reply_into(
        &self,
        connection: ConnectionId,
        request: &Request,
        region: &weft_rpc::shm::Region,
    ) -> Option<Result<(Response, Reply), WireError>> {
        let inner = &self.inner;
        let read = |r: &Request| matches!(r, Request::Read { .. } | Request::ReadView { .. });
        match request {
            Request::ViaCache { file, request } if read(request) => {
                Some(inner.via_cache(connection, file, request, &[], Dest::Region(region)))
            }
            Request::ViaCacheAware {
                file,
                pattern,
                request,
            } if read(request) => {
                Some(inner.check_incarnation(file).and_then(|()| {
                    inner.read_aware(connection, file, pattern, request, Dest::Region(region))
                }))
            }
            _ => None,
        }
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

    /// Writes every dirty block back, file by file, until none is left or a write-back
    /// fails (a delegate leaving with its job). Blocks written to meanwhile may stay
    /// dirty after `WRITE_BACK_ALL_ROUNDS_MAX` rounds.
    pub fn write_back_all(&self) -> Result<(), WireError> {
        let inner = &self.inner;
        for _ in 0..WRITE_BACK_ALL_ROUNDS_MAX {
            // Older than the end of time, beyond a limit of 0: every dirty block.
            let chosen = inner.tier.background(u64::MAX, 0, usize::MAX);
            if chosen.is_empty() {
                return Ok(());
            }
            for inode in chosen.into_keys() {
                inner.flush(inode)?;
            }
        }
        Ok(())
    }
}

/// Rounds of [`CacheService::write_back_all`].
const WRITE_BACK_ALL_ROUNDS_MAX: usize = 8;

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
        let st = self.tier.stats();
        let c = &self.counters;
        CacheStats {
            incarnation: self.incarnation,
            // A delegate says so: `weft status` shows which managers are delegates.
            policy: if self.tier.prefers_full_dirty() {
                format!("{}, fully dirty first", self.tier.policy_name())
            } else {
                self.tier.policy_name().to_owned()
            },
            capacity_bytes: st.memory_bytes_max,
            cached_bytes: st.memory_bytes,
            dirty_bytes: st.bytes_dirty,
            blocks: st.blocks,
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            evictions: st.evictions,
            write_backs: st.write_backs,
            write_backs_full: st.write_backs_full,
            write_back_bytes: st.write_back_bytes,
            write_back_errors: c.write_back_errors.load(Ordering::Relaxed),
            fetched_bytes: c.fetched_bytes.load(Ordering::Relaxed),
        }
    }

    /// A read or write through the cache; a read's reply goes to `dest`.
    fn via_cache(
        &self,
        connection: ConnectionId,
        file: &CacheFile,
        request: &Request,
        data: &[u8],
        dest: Dest<'_>,
    ) -> Result<(Response, Reply), WireError> {
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
                check_inode(*inode)?;
                let layout = striping.layout();
                let pieces = range_pieces(&layout, *striping, ranges)?;
                match write {
                    true => self.write(file, *striping, pieces, data),
                    false => self.read(file, *striping, pieces, &ReadMode::Plain, dest),
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
                check_inode(*inode)?;
                let view = self.views.get(connection, *view)?;
                let layout = striping.layout();
                let pieces = view_pieces(&view, &layout, *striping, *view_offset, *len)?;
                match write {
                    true => self.write(file, *striping, pieces, data),
                    false => self.read(file, *striping, pieces, &ReadMode::Plain, dest),
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
    ) -> Result<(Response, Reply), WireError> {
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
            let parts: Vec<(u32, &[u8])> = batch
                .iter()
                .map(|p| (p.offset, &data[p.stream_at..p.stream_at + p.len as usize]))
                .collect();
            loop {
                match self.tier.write(key, &file.layout, block_size, &parts)? {
                    Ok(()) => return Ok(()),
                    Err(blocked) => self.unblock(blocked)?,
                }
            }
        })?;
        if self.tier.dirty_bytes() >= writeback::eager_bytes(&self.config) {
            self.writeback.kick();
        }
        Ok((Response::Bytes(stream_len), Reply::Data(Vec::new())))
    }

    /// Serves a read of `pieces`: its reply's bytes go to `dest` (a shared-memory
    /// region the reply fits in, else a reply buffer).
    fn read(
        &self,
        file: &CacheFile,
        striping: Striping,
        pieces: Pieces<impl Iterator<Item = (u64, u64)>>,
        mode: &ReadMode,
        dest: Dest<'_>,
    ) -> Result<(Response, Reply), WireError> {
        let block_size = striping.stripe_size_bytes;
        let stream_len = pieces.stream_len;
        let mut reply = Vec::new();
        let mut region_out;
        let out: &mut dyn Out = match dest {
            Dest::Region(region) if stream_len <= region.len() => {
                // One madvise for the region's pages rather than a fault per page.
                region.populate(stream_len, true);
                region_out = RegionOut(region);
                &mut region_out
            }
            _ => {
                reply = vec![0u8; stream_len as usize];
                &mut reply
            }
        };
        let managers = striping.stripe_count as u64;
        let links = self.backing.links(&file.layout);
        // Up to `READ_BATCHES_IN_FLIGHT` batches' fetches in flight at once (to all the
        // io servers each), oldest served first; the blocks a batch could not serve
        // (fetched by another request meanwhile, or no room) are served one by one at
        // the end, when this request holds no fetch another might wait for.
        let mut window: Window<'_> = Default::default();
        let mut later: Later = Vec::new();
        let mut batch = ReadBatch::new(block_size, managers);
        let walked = pieces.for_each_block(block_size, |block, run| {
            if !batch.fits(block, run.len()) {
                let full = std::mem::replace(&mut batch, ReadBatch::new(block_size, managers));
                let started = self.start_batch(file, block_size, full, mode, &links, out)?;
                self.slide(file, block_size, started, mode, &mut window, out, &mut later)?;
            }
            batch.push(block, run);
            Ok(())
        });
        let mut served = walked
            .and_then(|()| self.start_batch(file, block_size, batch, mode, &links, out))
            .and_then(|started| self.slide(file, block_size, started, mode, &mut window, out, &mut later));
        while let Some(oldest) = window.pop_front() {
            if served.is_err() {
                self.abandon_batch(file, oldest);
                continue;
            }
            served = self.finish_batch(file, block_size, oldest, mode, out, &mut later);
        }
        served?;
        for (block, pieces) in later {
            let key = BlockKey::new(file.inode, block);
            let ranges: Vec<std::ops::Range<u32>> =
                pieces.iter().map(|p| p.offset..p.offset + p.len).collect();
            let snapshot = self.block_for_read(key, &file.layout, block_size, &ranges, mode)?;
            copy_pieces(&pieces, snapshot.block(), out);
        }
        let placed = match dest {
            Dest::Region(region) if stream_len <= region.len() => Reply::Placed(stream_len),
            _ => Reply::Data(reply),
        };
        Ok((Response::Bytes(stream_len), placed))
    }

    /// Starts a batch of a read's blocks: looks them all up, copies out the hits, and
    /// sends the fetch of every missing one (one list read per io server for the
    /// batch: a cold read pays one round trip per batch, not per block). A block
    /// another request is fetching is left for later (`finish_batch`).
    fn start_batch<'c>(
        &self,
        file: &CacheFile,
        block_size: u64,
        batch: ReadBatch,
        mode: &ReadMode,
        links: &'c backing::Links,
        out: &mut dyn Out,
    ) -> Result<BatchInFlight<'c>, WireError> {
        let layout = &file.layout;
        let key_of = |block: u64| BlockKey::new(file.inode, block);
        let mut done = vec![false; batch.runs.len()];
        let mut fetches: Vec<BatchFetch> = Vec::new();
        let abandon = |fetches: &[BatchFetch]| {
            for f in fetches {
                self.tier.abandon_fetch(key_of(batch.runs[f.run].0), f.ticket);
            }
        };
        for (i, (block, _)) in batch.runs.iter().enumerate() {
            let ranges = batch.ranges(i);
            let found = self.tier.lookup(
                key_of(*block),
                layout,
                block_size,
                &ranges,
                mode.touch(),
                Fetching::Return,
            );
            match found {
                Ok(Found::Hit(snapshot)) => {
                    self.counters.hits.fetch_add(1, Ordering::Relaxed);
                    copy_pieces(batch.run_pieces(i), snapshot.block(), out);
                    done[i] = true;
                }
                Ok(Found::Fetch {
                    gaps,
                    resident,
                    ticket,
                }) => fetches.push(BatchFetch {
                    run: i,
                    ranges,
                    gaps,
                    resident,
                    ticket,
                }),
                Ok(Found::Wait) => {}
                Err(e) => {
                    abandon(&fetches);
                    return Err(e);
                }
            }
        }
        let mut sent = None;
        let mut buffers = Vec::new();
        if !fetches.is_empty() {
            // Read-ahead along the pattern: the batch missed, so the blocks of this
            // manager that follow its last are likely asked for next; the io server's
            // page cache starts on them while this batch is fetched.
            let last = batch.runs.iter().map(|(b, _)| *b).max().unwrap_or(0);
            self.backing
                .will_need(file.inode, layout, &read_ahead(last, block_size, batch.managers));
            let wanted: Vec<Wanted<'_>> = fetches
                .iter()
                .map(|f| Wanted {
                    block: batch.runs[f.run].0,
                    gaps: &f.gaps,
                    resident: f.resident,
                })
                .collect();
            let (file_ranges, made) = self.fetch_buffers(block_size, &wanted);
            buffers = made;
            match self.backing.send_read(links, file.inode, layout, file_ranges) {
                Ok(s) => sent = Some(s),
                Err(e) => {
                    abandon(&fetches);
                    return Err(e);
                }
            }
        }
        Ok(BatchInFlight {
            batch,
            done,
            fetches,
            buffers,
            sent,
        })
    }

    /// Adds a batch just started to the window, and serves the oldest if that makes
    /// more than `READ_BATCHES_IN_FLIGHT`.
    #[allow(clippy::too_many_arguments)]
    fn slide<'c>(
        &self,
        file: &CacheFile,
        block_size: u64,
        started: BatchInFlight<'c>,
        mode: &ReadMode,
        window: &mut Window<'c>,
        out: &mut dyn Out,
        later: &mut Later,
    ) -> Result<(), WireError> {
        window.push_back(started);
        if window.len() > READ_BATCHES_IN_FLIGHT {
            let oldest = window.pop_front().expect("not empty");
            self.finish_batch(file, block_size, oldest, mode, out, later)?;
        }
        Ok(())
    }

    /// A batch `start_batch` began and that is given up (the request failed): its
    /// fetches end, so that other requests may make them.
    fn abandon_batch(&self, file: &CacheFile, started: BatchInFlight<'_>) {
        for f in &started.fetches {
            self.tier
                .abandon_fetch(BlockKey::new(file.inode, started.batch.runs[f.run].0), f.ticket);
        }
    }

    /// Ends a batch `start_batch` began: waits for its fetch, hands each block's bytes
    /// to the tier and copies its pieces out (one snapshot held at a time: the store
    /// charges the bytes of snapshots still held, so a batch never pins memory). The
    /// blocks not served (fetched by another request, no room, a fetch revoked) go to
    /// `later`.
    fn finish_batch(
        &self,
        file: &CacheFile,
        block_size: u64,
        started: BatchInFlight<'_>,
        mode: &ReadMode,
        out: &mut dyn Out,
        later: &mut Later,
    ) -> Result<(), WireError> {
        let BatchInFlight {
            batch,
            mut done,
            fetches,
            mut buffers,
            sent,
        } = started;
        let layout = &file.layout;
        let key_of = |block: u64| BlockKey::new(file.inode, block);
        let abandon = |fetches: &[BatchFetch]| {
            for f in fetches {
                self.tier.abandon_fetch(key_of(batch.runs[f.run].0), f.ticket);
            }
        };
        if let Some(sent) = sent {
            let mut outs = fetch_outs(block_size, &mut buffers, fetches.iter().map(|f| &f.gaps[..]));
            if let Err(e) = self.backing.finish_read(sent, file.inode, layout, &mut outs) {
                abandon(&fetches);
                return Err(e);
            }
            let total: u64 = outs.iter().map(|o| o.len() as u64).sum();
            self.counters.fetched_bytes.fetch_add(total, Ordering::Relaxed);
        }
        for (n, (f, buffer)) in fetches.iter().zip(buffers).enumerate() {
            let key = key_of(batch.runs[f.run].0);
            let admission = self.admission(mode, key, f.resident);
            match self.fill(
                key, f.ticket, layout, block_size, &f.ranges, &f.gaps, buffer, admission,
            ) {
                Ok(Ok(snapshot)) => {
                    self.counters.misses.fetch_add(1, Ordering::Relaxed);
                    copy_pieces(batch.run_pieces(f.run), snapshot.block(), out);
                    done[f.run] = true;
                }
                // No room now, or the fetch was revoked (a truncate, punch or drop
                // meanwhile): served on its own later, which makes room first or
                // fetches again.
                Ok(Err(_)) => {}
                Err(e) => {
                    abandon(&fetches[n + 1..]);
                    return Err(e);
                }
            }
        }
        for (i, (block, _)) in batch.runs.iter().enumerate() {
            if !done[i] {
                later.push((*block, batch.run_pieces(i).to_vec()));
            }
        }
        Ok(())
    }

    /// The file ranges of the `wanted` blocks' gaps, and a buffer for each block: a
    /// block missing whole gets one that becomes its bytes (`FetchBuffer::Block`), the
    /// gaps of a resident one a buffer of their own to copy in.
    fn fetch_buffers(&self, block_size: u64, wanted: &[Wanted<'_>]) -> (Vec<Range>, Vec<FetchBuffer>) {
        let whole = 0..block_size as u32;
        let mut file_ranges: Vec<Range> = Vec::new();
        let mut buffers: Vec<FetchBuffer> = Vec::with_capacity(wanted.len());
        for w in wanted {
            let start = w.block * block_size;
            file_ranges.extend(w.gaps.iter().map(|g| Range {
                offset: start + g.start as u64,
                len: (g.end - g.start) as u64,
            }));
            buffers.push(if !w.resident && w.gaps.len() == 1 && w.gaps[0] == whole {
                FetchBuffer::Block(self.tier.fetch_buffer(block_size))
            } else {
                let len: u32 = w.gaps.iter().map(|g| g.end - g.start).sum();
                FetchBuffer::Gaps(vec![0u8; len as usize])
            });
        }
        (file_ranges, buffers)
    }

    /// Reads the `wanted` blocks' gaps from the io servers into buffers of
    /// `fetch_buffers`, one list read per server.
    fn fetch(
        &self,
        inode: InodeId,
        layout: &Layout,
        block_size: u64,
        wanted: &[Wanted<'_>],
    ) -> Result<Vec<FetchBuffer>, WireError> {
        let (file_ranges, mut buffers) = self.fetch_buffers(block_size, wanted);
        let mut outs = fetch_outs(block_size, &mut buffers, wanted.iter().map(|w| w.gaps));
        self.backing.read_parts(inode, layout, &file_ranges, &mut outs)?;
        let total: u64 = file_ranges.iter().map(|r| r.len).sum();
        self.counters.fetched_bytes.fetch_add(total, Ordering::Relaxed);
        Ok(buffers)
    }

    /// Hands a block's fetched bytes to the tier (see `Tier::fill`); the block's bytes
    /// with every piece of `ranges` valid, or what to do first.
    #[allow(clippy::too_many_arguments)]
    fn fill(
        &self,
        key: BlockKey,
        ticket: Ticket,
        layout: &Layout,
        block_size: u64,
        ranges: &[std::ops::Range<u32>],
        gaps: &[std::ops::Range<u32>],
        buffer: FetchBuffer,
        admission: Option<Admission>,
    ) -> Result<Result<Snapshot, Blocked>, WireError> {
        let filled = match &buffer {
            FetchBuffer::Block(_) => None,
            FetchBuffer::Gaps(bytes) => {
                let parts = fetched_parts(gaps, bytes, &mut 0);
                Some(self.tier.fill(
                    key,
                    ticket,
                    layout,
                    block_size,
                    ranges,
                    Fetched::Parts(&parts),
                    admission,
                )?)
            }
        };
        let filled = match (filled, buffer) {
            (Some(filled), _) => filled,
            (None, FetchBuffer::Block(bytes)) => self.tier.fill(
                key,
                ticket,
                layout,
                block_size,
                ranges,
                Fetched::Block(bytes),
                admission,
            )?,
            (None, FetchBuffer::Gaps(_)) => unreachable!("gaps are filled above"),
        };
        Ok(match filled {
            Ok(Some(snapshot)) => Ok(snapshot),
            // Not admitted, and the block left the cache while only its gaps were
            // fetched: fetch it again, whole.
            Ok(None) => Err(Blocked::Again),
            Err(blocked) => Err(blocked),
        })
    }

    /// How a block fetched for a read enters the cache: normally; for a pattern-aware
    /// read, as the pattern decided (`None`: left out).
    fn admission(&self, mode: &ReadMode, key: BlockKey, resident: bool) -> Option<Admission> {
        match mode {
            ReadMode::Plain => Some(Admission::Normal),
            // Resident: reserved by the pattern's references (or partly valid).
            ReadMode::Aware { .. } if resident => Some(Admission::Normal),
            // Asked for by a process but evicted since: the policy decided already.
            ReadMode::Aware { asked, .. } if asked.contains(key.block) => None,
            ReadMode::Aware { unrequested, .. } => {
                self.cio.unasked_fetched.fetch_add(1, Ordering::Relaxed);
                *unrequested
            }
        }
    }

    /// The block's bytes with every range valid: from the cache, or fetched (only the
    /// bytes the block lacks) from the io servers first. A pattern-aware read (`mode`)
    /// makes no reference and admits a missing block only if no process asked for it
    /// (cold), its references having been applied already.
    fn block_for_read(
        &self,
        key: BlockKey,
        layout: &Layout,
        block_size: u64,
        ranges: &[std::ops::Range<u32>],
        mode: &ReadMode,
    ) -> Result<Snapshot, WireError> {
        let mut first = true;
        loop {
            let (gaps, resident, ticket) =
                match self
                    .tier
                    .lookup(key, layout, block_size, ranges, mode.touch(), Fetching::Wait)?
                {
                    Found::Hit(snapshot) => {
                        let counter = if first {
                            &self.counters.hits
                        } else {
                            &self.counters.misses
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                        return Ok(snapshot);
                    }
                    Found::Wait => {
                        first = false;
                        continue;
                    }
                    Found::Fetch {
                        gaps,
                        resident,
                        ticket,
                    } => (gaps, resident, ticket),
                };
            let wanted = [Wanted {
                block: key.block,
                gaps: &gaps,
                resident,
            }];
            let buffer = match self.fetch(key.inode, layout, block_size, &wanted) {
                Ok(mut buffers) => buffers.pop().expect("one block wanted"),
                Err(e) => {
                    self.tier.abandon_fetch(key, ticket);
                    return Err(e);
                }
            };
            let admission = self.admission(mode, key, resident);
            match self.fill(key, ticket, layout, block_size, ranges, &gaps, buffer, admission)? {
                Ok(snapshot) => {
                    self.counters.misses.fetch_add(1, Ordering::Relaxed);
                    return Ok(snapshot);
                }
                Err(blocked) => self.unblock(blocked)?,
            }
            first = false;
        }
    }

    /// A collective read with the processes' original pattern: the pattern's
    /// references to this manager's blocks are applied once per call (in time order:
    /// hits touch the policy, misses are admitted), then the aggregated request is
    /// served without counting as references.
    fn read_aware(
        &self,
        connection: ConnectionId,
        file: &CacheFile,
        pattern: &AccessPattern,
        request: &Request,
        dest: Dest<'_>,
    ) -> Result<(Response, Reply), WireError> {
        let (inode, striping) = match request {
            Request::Read { inode, striping, .. } | Request::ReadView { inode, striping, .. } => {
                (*inode, *striping)
            }
            other => {
                return Err(WireError::new(
                    ErrorCode::Unsupported,
                    format!("{:?} carries no access pattern", other.opcode()),
                ))
            }
        };
        if inode != file.inode {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "request for inode {inode} carries the cached file of inode {}",
                    file.inode
                ),
            ));
        }
        let asked = self.apply_pattern(file, striping, pattern)?;
        let mode = ReadMode::Aware {
            asked,
            unrequested: self.config.cio_unrequested,
        };
        let layout = striping.layout();
        match request {
            Request::Read { ranges, .. } => {
                let pieces = range_pieces(&layout, striping, ranges)?;
                self.read(file, striping, pieces, &mode, dest)
            }
            Request::ReadView {
                view,
                view_offset,
                len,
                ..
            } => {
                let view = self.views.get(connection, *view)?;
                let pieces = view_pieces(&view, &layout, striping, *view_offset, *len)?;
                self.read(file, striping, pieces, &mode, dest)
            }
            _ => unreachable!("checked above"),
        }
    }

    /// Applies a call's references to this manager's blocks, once per call; returns the
    /// blocks the call's processes asked for.
    fn apply_pattern(
        &self,
        file: &CacheFile,
        striping: Striping,
        pattern: &AccessPattern,
    ) -> Result<Arc<Asked>, WireError> {
        let _applying = self.cio.applying.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(asked) = self.cio.applied(file.inode, pattern.call) {
            return Ok(asked);
        }
        let block_size = striping.stripe_size_bytes;
        let managers = striping.stripe_count as u64;
        let me = striping.server_index as u64;
        // (block, bytes of the reference in it), one entry per (reference, block); and
        // the rank each came from.
        let mut references: Vec<(BlockKey, u64)> = Vec::new();
        let mut ranks: Vec<u32> = Vec::new();
        let mut asked = Asked::new();
        for r in &pattern.refs {
            if references.len() >= cio::REFERENCES_PER_CALL_MAX {
                asked = Asked::everything();
                break;
            }
            let view = &pattern.views[r.view as usize];
            let mut current: Option<(u64, u64)> = None;
            let pieces = view
                .pieces(r.view_offset, r.len)
                .map_err(|e| WireError::new(ErrorCode::InvalidArgument, format!("access pattern: {e}")))?;
            for piece in pieces {
                let mut at = piece.file_offset;
                let end = piece.file_offset + piece.len;
                while at < end {
                    let block = at / block_size;
                    let next = ((block + 1) * block_size).min(end);
                    if block % managers == me {
                        match &mut current {
                            Some((b, bytes)) if *b == block => *bytes += next - at,
                            _ => {
                                if let Some((b, bytes)) = current.take() {
                                    references.push((BlockKey::new(file.inode, b), bytes));
                                    ranks.push(r.rank);
                                }
                                current = Some((block, next - at));
                            }
                        }
                    }
                    at = next;
                }
            }
            if let Some((b, bytes)) = current {
                references.push((BlockKey::new(file.inode, b), bytes));
                ranks.push(r.rank);
            }
        }
        references.truncate(cio::REFERENCES_PER_CALL_MAX);
        for (key, _) in &references {
            asked.insert(key.block);
        }
        cio::Record::append(
            &mut self.cio.record.lock().unwrap_or_else(|p| p.into_inner()),
            file.inode,
            pattern.call,
            ranks
                .iter()
                .zip(&references)
                .map(|(rank, (key, _))| (*rank, key.block)),
        );
        let mut next = 0;
        let mut counts = (0u64, 0u64);
        while let Some(blocked) =
            self.tier
                .reference_all(&file.layout, block_size, &references, &mut next, &mut counts)?
        {
            self.unblock(blocked)?;
        }
        let (hits, hit_bytes) = counts;
        let c = &self.cio;
        c.references.fetch_add(references.len() as u64, Ordering::Relaxed);
        c.bytes
            .fetch_add(references.iter().map(|r| r.1).sum(), Ordering::Relaxed);
        c.hits.fetch_add(hits, Ordering::Relaxed);
        c.hit_bytes.fetch_add(hit_bytes, Ordering::Relaxed);
        Ok(self.cio.remember(file.inode, pattern.call, asked))
    }

    /// Does what the store asked before an operation can go on: writes dirty victims
    /// back, or waits for write-backs in flight.
    fn unblock(&self, blocked: Blocked) -> Result<(), WireError> {
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
    fn write_back(&self, inode: InodeId, keys: &[BlockKey]) -> Result<(), WireError> {
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
                let full = bytes >= writeback::WRITE_BACK_BATCH_BYTES
                    || ranges_count >= writeback::WRITE_BACK_BATCH_RANGES;
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
    fn flush(&self, inode: InodeId) -> Result<(), WireError> {
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

    /// Forgets the file's bytes at and after `size`, and truncates the file's io
    /// objects itself before any fetch or write-back of those bytes goes on: a read
    /// must not fetch, between this manager forgetting them and the client truncating
    /// the objects, the bytes the truncate removes (they came back, issue 28). Every
    /// manager of the file does so; the client truncates the objects again once all
    /// have answered, so another manager's write-back that landed meanwhile is cut too
    /// (it held only that manager's blocks, which this one never fetches).
    fn truncate(&self, file: &CacheFile, size: u64) -> Result<(), WireError> {
        let cut = self.tier.begin_truncate(file.inode, size);
        let truncated = self.backing.truncate(file.inode, &file.layout, size);
        self.tier.end_truncate(cut);
        truncated
    }

    /// The end of the file's data held dirty here (0 if none).
    fn dirty_end(&self, inode: InodeId) -> u64 {
        self.tier.dirty_end(inode)
    }
}

/// Write-back requests (of up to `WRITE_BACK_BATCH_BYTES`) one write-back keeps in
/// flight, as a sliding window: the io servers write one batch while the next travels.
const WRITE_BACK_BATCHES_IN_FLIGHT: usize = 4;

/// Rounds a flush makes over blocks that other write-backs had in flight and that
/// failed (or were written to again).
const FLUSH_ROUNDS_MAX: usize = 3;

/// Where a fetch reads a block's bytes into (`Inner::fetch`).
enum FetchBuffer {
    /// A block missing whole: the buffer becomes its bytes.
    Block(Arc<[u8]>),
    /// The gaps of a resident block, one after another.
    Gaps(Vec<u8>),
}

/// The buffers a fetch reads into, one per gap in order (a block's own buffer is its
/// one gap, the whole block).
fn fetch_outs<'b, 'g>(
    block_size: u64,
    buffers: &'b mut [FetchBuffer],
    gaps: impl Iterator<Item = &'g [std::ops::Range<u32>]>,
) -> Vec<&'b mut [u8]> {
    let mut outs: Vec<&mut [u8]> = Vec::new();
    for (buffer, gaps) in buffers.iter_mut().zip(gaps) {
        match buffer {
            FetchBuffer::Block(bytes) => {
                if Arc::get_mut(bytes).is_none() {
                    *bytes = std::iter::repeat_n(0u8, block_size as usize).collect();
                }
                outs.push(Arc::get_mut(bytes).expect("a fresh buffer is held once"));
            }
            FetchBuffer::Gaps(bytes) => {
                let mut rest = &mut bytes[..];
                for g in gaps {
                    let (this, next) = std::mem::take(&mut rest).split_at_mut((g.end - g.start) as usize);
                    outs.push(this);
                    rest = next;
                }
            }
        }
    }
    outs
}

/// Copies a run's pieces out of its block's bytes into the reply stream.
fn copy_pieces(pieces: &[BlockPiece], block: &[u8], out: &mut dyn Out) {
    for p in pieces {
        let (at, n) = (p.offset as usize, p.len as usize);
        out.put(p.stream_at, &block[at..at + n]);
    }
}

/// A read's batches in flight, oldest first.
type Window<'c> = std::collections::VecDeque<BatchInFlight<'c>>;

/// A read's blocks left to serve one by one at its end, with their pieces.
type Later = Vec<(u64, Vec<BlockPiece>)>;

/// A read batch whose fetch `Inner::start_batch` sent.
struct BatchInFlight<'c> {
    batch: ReadBatch,
    /// Runs served already (hits).
    done: Vec<bool>,
    fetches: Vec<BatchFetch>,
    /// One per fetch.
    buffers: Vec<FetchBuffer>,
    sent: Option<backing::SentRead<'c>>,
}

/// Read batches one request keeps in flight besides the one being served (their
/// fetches sent to the io servers while it is copied out).
const READ_BATCHES_IN_FLIGHT: usize = 3;

/// A block a fetch reads: its gaps (all it lacks) and whether it is resident.
struct Wanted<'a> {
    block: u64,
    gaps: &'a [std::ops::Range<u32>],
    resident: bool,
}

/// Where a read's reply goes.
#[derive(Clone, Copy)]
enum Dest<'a> {
    /// A reply buffer (sent in the frame, or copied by the server into shared memory).
    Reply,
    /// A client's shared-memory region, written straight from the blocks when the
    /// reply fits (else a reply buffer).
    Region(&'a weft_rpc::shm::Region),
}

/// A reply made for the frame (`Dest::Reply`), which places nothing.
fn into_frame((response, reply): (Response, Reply)) -> (Response, Vec<u8>) {
    match reply {
        Reply::Data(data) => (response, data),
        Reply::Placed(_) => unreachable!("a reply for the frame is never placed"),
    }
}

/// A read's reply stream, written piece by piece at stream offsets.
trait Out {
    fn put(&mut self, at: usize, bytes: &[u8]);
}

impl Out for Vec<u8> {
    fn put(&mut self, at: usize, bytes: &[u8]) {
        self[at..at + bytes.len()].copy_from_slice(bytes);
    }
}

/// A reply stream in a client's region (which the reply fits, checked first).
struct RegionOut<'a>(&'a weft_rpc::shm::Region);

impl Out for RegionOut<'_> {
    fn put(&mut self, at: usize, bytes: &[u8]) {
        let placed = self.0.write_at(at as u64, bytes);
        debug_assert!(placed, "the reply fits the region");
    }
}

/// A block of a read batch to fetch: its run, the run's ranges in the block, the
/// block's gaps (all it lacks) and whether it is resident.
struct BatchFetch {
    run: usize,
    ranges: Vec<std::ops::Range<u32>>,
    gaps: Vec<std::ops::Range<u32>>,
    resident: bool,
    ticket: Ticket,
}

/// Most pieces of one block handled under one hold of its lock: bounds the memory a
/// request of very many small pieces takes, whatever its size.
const PIECES_PER_BATCH_MAX: usize = 1 << 16;

/// The fetched bytes of a block's `gaps`, `(offset in block, bytes)`, taken from
/// `fetched` at `*at` on (the gaps' bytes in order), moving `*at` past them.
fn fetched_parts<'a>(
    gaps: &[std::ops::Range<u32>],
    fetched: &'a [u8],
    at: &mut usize,
) -> Vec<(u32, &'a [u8])> {
    gaps.iter()
        .map(|g| {
            let len = (g.end - g.start) as usize;
            let part = (g.start, &fetched[*at..*at + len]);
            *at += len;
            part
        })
        .collect()
}

/// Most bytes of blocks one read looks up and fetches together (read-ahead across the
/// blocks of a request: one list read per io server for all the batch's misses).
/// Measured on cold 3D block and CYCLIC(32) reads (`weft bench clusterfile`, 64 KiB
/// blocks): 1 MiB reads 1.3-1.8x faster than one block at a time through separate
/// managers and the same when colocated; 4 MiB is slower for both (concurrent
/// requests for shared blocks wait for a whole batch's fetch).
const READ_BATCH_BYTES: u64 = 1 << 20;
/// Most blocks in one read batch, whatever the block size.
const READ_BATCH_BLOCKS_MAX: usize = 256;

/// Consecutive runs of a read's pieces, each run inside one block and no block twice,
/// served together by `read_batch`.
struct ReadBatch {
    /// (block, the run's span in `pieces`)
    runs: Vec<(u64, std::ops::Range<usize>)>,
    pieces: Vec<BlockPiece>,
    blocks_max: usize,
    /// Cache managers of the file: this one's blocks are every this many.
    managers: u64,
}

/// Bytes of a manager's blocks read ahead past a batch that missed (the io server's
/// page cache, not the tier's memory, holds them).
const READ_AHEAD_BYTES: u64 = 4 << 20;

/// The file ranges of the blocks of this manager (one of `managers`) that follow block
/// `last`, `READ_AHEAD_BYTES` of them.
fn read_ahead(last: u64, block_size: u64, managers: u64) -> Vec<Range> {
    let count = (READ_AHEAD_BYTES / block_size.max(1)).clamp(1, READ_BATCH_BLOCKS_MAX as u64);
    (1..=count)
        .filter_map(|i| {
            let block = last.checked_add(i.checked_mul(managers.max(1))?)?;
            let offset = block.checked_mul(block_size)?;
            offset.checked_add(block_size)?;
            Some(Range {
                offset,
                len: block_size,
            })
        })
        .collect()
}

impl ReadBatch {
    fn new(block_size: u64, managers: u64) -> ReadBatch {
        ReadBatch {
            managers,
            runs: Vec::new(),
            pieces: Vec::new(),
            blocks_max: (READ_BATCH_BYTES / block_size.max(1)).clamp(1, READ_BATCH_BLOCKS_MAX as u64)
                as usize,
        }
    }

    /// Whether a run of `n` pieces of `block` may join (an empty batch takes any run).
    fn fits(&self, block: u64, n: usize) -> bool {
        self.runs.is_empty()
            || (self.runs.len() < self.blocks_max
                && self.pieces.len() + n <= PIECES_PER_BATCH_MAX
                && !self.runs.iter().any(|(b, _)| *b == block))
    }

    fn push(&mut self, block: u64, run: &[BlockPiece]) {
        let start = self.pieces.len();
        self.pieces.extend_from_slice(run);
        self.runs.push((block, start..self.pieces.len()));
    }

    /// Run `i`'s pieces.
    fn run_pieces(&self, i: usize) -> &[BlockPiece] {
        &self.pieces[self.runs[i].1.clone()]
    }

    /// Run `i`'s ranges in its block.
    fn ranges(&self, i: usize) -> Vec<std::ops::Range<u32>> {
        self.pieces[self.runs[i].1.clone()]
            .iter()
            .map(|p| p.offset..p.offset + p.len)
            .collect()
    }
}

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

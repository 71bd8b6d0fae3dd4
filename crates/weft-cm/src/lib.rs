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
//! `CacheStats`, `CacheDrop`, `CacheMigrate` (a migration's hold of a file, `hold.rs`:
//! its changes refused `Busy` while its dirty blocks go back; at the switch its blocks
//! dropped and its old layout refused `Stale`, `Tier::migrated`), and view registration when there is no io role to share
//! the registry with; its opening comment gives the algorithm in five lines. The read
//! path (batches, fetches, copying out, `ViaCacheAware`) is in `read.rs`, write-backs on
//! demand (room, flush, truncate) in `flush.rs`, a request's pieces cut at block
//! boundaries in `pieces.rs`. Every
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
mod flush;
mod hold;
mod pieces;
mod read;
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
use weft_layout::InodeId;
use weft_proto::frame::DATA_BYTES_MAX;
use weft_proto::msg::{CacheFile, CacheStats, Request, Response};
use weft_proto::{ErrorCode, Striping, WireError};
use weft_rpc::{ConnectionId, ReplyInto as Reply};

pub use backing::{Backing, Directory};
use cio::ReadMode;
use flush::WRITE_BACK_ALL_ROUNDS_MAX;
use pieces::{range_pieces, view_pieces, Pieces};
use read::{into_frame, Dest};
use tier::Tier;
use weft_cache::Admission;

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
    /// Migrations' holds of files (`CacheMigrate`).
    holds: hold::Holds,
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
            holds: hold::Holds::default(),
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
                let _changing = inner.holds.begin_change(file.inode)?;
                inner.truncate(&file, size)?;
                Response::Done
            }
            Request::CachePunch { file, offset, len } => {
                inner.check_incarnation(&file)?;
                let _changing = inner.holds.begin_change(file.inode)?;
                inner.tier.punch(file.inode, offset, len);
                Response::Done
            }
            Request::CacheMigrate { inode, step, layout } => inner.migrate(inode, step, layout)?,
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
        let _changing = match write {
            true => Some(self.holds.begin_change(file.inode)?),
            false => None,
        };
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

    /// Writes every dirty block of `inode`, which a migration holds (nothing makes more),
    /// back to the io servers under the layout its blocks have now: an error naming
    /// `why` if any stays dirty.
    fn write_back_held(&self, inode: InodeId, why: &str) -> Result<(), WireError> {
        self.flush(inode)?;
        match self.tier.dirty_of(inode).len() {
            0 => Ok(()),
            left => Err(WireError::new(
                ErrorCode::Io,
                format!("inode {inode}: {left} dirty blocks could not be written back {why}"),
            )),
        }
    }

    /// A migration's step for cached file `inode` (`Request::CacheMigrate`).
    fn migrate(
        &self,
        inode: InodeId,
        step: u8,
        layout: Option<weft_layout::Layout>,
    ) -> Result<Response, WireError> {
        use weft_proto::msg::migrate_step;
        match step {
            migrate_step::FREEZE => {
                let epoch = self.holds.hold(inode)?;
                self.write_back_held(inode, "for its migration")?;
                self.writeback.forget_failure(inode);
                Ok(Response::Stamp(epoch))
            }
            migrate_step::THAW => {
                if let Some(layout) = layout {
                    // Held while the file's blocks go: a hold may have lapsed while the
                    // manager was down between the switch and this.
                    self.holds.hold(inode)?;
                    self.tier.migrated(inode, &layout);
                    // Dirty blocks of a held file were written back; any here now were
                    // written after a hold lapsed, under the old layout the io servers
                    // refuse. Their bytes are at file offsets: written back under the
                    // new layout before the blocks go, so no acknowledged byte is lost.
                    self.write_back_held(inode, "under its new layout")?;
                    self.tier.drop_file(inode);
                    self.writeback.forget_failure(inode);
                }
                self.holds.release(inode);
                Ok(Response::Done)
            }
            other => Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("step {other} of a migration is not one a cache manager takes"),
            )),
        }
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
}

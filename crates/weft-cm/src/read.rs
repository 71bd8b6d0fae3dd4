//! Reads through the cache: each request's pieces batched by block, blocks found
//! resident or fetched from the io servers (a window of batches in flight, read-ahead
//! advised), and copied out into the reply or the client's shared segment; reads that
//! come with the processes' access patterns (`ViaCacheAware`).

use crate::cio::{Asked, ReadMode};
use crate::pieces::PIECES_PER_BATCH_MAX;
use crate::pieces::{range_pieces, view_pieces, Pieces};
use crate::tier::{Blocked, Fetched, Fetching, Found, Ticket};
use crate::{BlockPiece, Inner};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use weft_cache::store::Snapshot;
use weft_cache::Admission;
use weft_cache::BlockKey;
use weft_layout::{InodeId, Layout};
use weft_proto::msg::{CacheFile, Request, Response};
use weft_proto::pattern::AccessPattern;
use weft_proto::{ErrorCode, Range, Striping, WireError};
use weft_rpc::{ConnectionId, ReplyInto as Reply};

/// Where a fetch reads a block's bytes into (`Inner::fetch`).
pub(crate) enum FetchBuffer {
    /// A block missing whole: the buffer becomes its bytes.
    Block(Arc<[u8]>),
    /// The gaps of a resident block, one after another.
    Gaps(Vec<u8>),
}

/// The buffers a fetch reads into, one per gap in order (a block's own buffer is its
/// one gap, the whole block).
pub(crate) fn fetch_outs<'b, 'g>(
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
pub(crate) fn copy_pieces(pieces: &[BlockPiece], block: &[u8], out: &mut dyn Out) {
    for p in pieces {
        let (at, n) = (p.offset as usize, p.len as usize);
        out.put(p.stream_at, &block[at..at + n]);
    }
}

/// A read's batches in flight, oldest first.
pub(crate) type Window<'c> = std::collections::VecDeque<BatchInFlight<'c>>;

/// A read's blocks left to serve one by one at its end, with their pieces.
pub(crate) type Later = Vec<(u64, Vec<BlockPiece>)>;

/// A read batch whose fetch `Inner::start_batch` sent.
pub(crate) struct BatchInFlight<'c> {
    pub(crate) batch: ReadBatch,
    /// Runs served already (hits).
    pub(crate) done: Vec<bool>,
    pub(crate) fetches: Vec<BatchFetch>,
    /// One per fetch.
    pub(crate) buffers: Vec<FetchBuffer>,
    pub(crate) sent: Option<crate::backing::SentRead<'c>>,
}

/// Read batches one request keeps in flight besides the one being served (their
/// fetches sent to the io servers while it is copied out).
pub(crate) const READ_BATCHES_IN_FLIGHT: usize = 3;

/// A block a fetch reads: its gaps (all it lacks) and whether it is resident.
pub(crate) struct Wanted<'a> {
    pub(crate) block: u64,
    pub(crate) gaps: &'a [std::ops::Range<u32>],
    pub(crate) resident: bool,
}

/// Where a read's reply goes.
#[derive(Clone, Copy)]
pub(crate) enum Dest<'a> {
    /// A reply buffer (sent in the frame, or copied by the server into shared memory).
    Reply,
    /// A client's shared-memory region, written straight from the blocks when the
    /// reply fits (else a reply buffer).
    Region(&'a weft_rpc::shm::Region),
}

/// A reply made for the frame (`Dest::Reply`), which places nothing.
pub(crate) fn into_frame((response, reply): (Response, Reply)) -> (Response, Vec<u8>) {
    match reply {
        Reply::Data(data) => (response, data),
        Reply::Placed(_) => unreachable!("a reply for the frame is never placed"),
    }
}

/// A read's reply stream, written piece by piece at stream offsets.
pub(crate) trait Out {
    fn put(&mut self, at: usize, bytes: &[u8]);
}

impl Out for Vec<u8> {
    fn put(&mut self, at: usize, bytes: &[u8]) {
        self[at..at + bytes.len()].copy_from_slice(bytes);
    }
}

/// A reply stream in a client's region (which the reply fits, checked first).
pub(crate) struct RegionOut<'a>(&'a weft_rpc::shm::Region);

impl Out for RegionOut<'_> {
    fn put(&mut self, at: usize, bytes: &[u8]) {
        let placed = self.0.write_at(at as u64, bytes);
        debug_assert!(placed, "the reply fits the region");
    }
}

/// A block of a read batch to fetch: its run, the run's ranges in the block, the
/// block's gaps (all it lacks) and whether it is resident.
pub(crate) struct BatchFetch {
    pub(crate) run: usize,
    pub(crate) ranges: Vec<std::ops::Range<u32>>,
    pub(crate) gaps: Vec<std::ops::Range<u32>>,
    pub(crate) resident: bool,
    pub(crate) ticket: Ticket,
}

/// The fetched bytes of a block's `gaps`, `(offset in block, bytes)`, taken from
/// `fetched` at `*at` on (the gaps' bytes in order), moving `*at` past them.
pub(crate) fn fetched_parts<'a>(
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
pub(crate) const READ_BATCH_BYTES: u64 = 1 << 20;

/// Most blocks in one read batch, whatever the block size.
pub(crate) const READ_BATCH_BLOCKS_MAX: usize = 256;

/// Consecutive runs of a read's pieces, each run inside one block and no block twice,
/// served together by `read_batch`.
pub(crate) struct ReadBatch {
    /// (block, the run's span in `pieces`)
    pub(crate) runs: Vec<(u64, std::ops::Range<usize>)>,
    pub(crate) pieces: Vec<BlockPiece>,
    pub(crate) blocks_max: usize,
    /// Cache managers of the file: this one's blocks are every this many.
    pub(crate) managers: u64,
}

/// Bytes of a manager's blocks read ahead past a batch that missed (the io server's
/// page cache, not the tier's memory, holds them).
pub(crate) const READ_AHEAD_BYTES: u64 = 4 << 20;

/// The file ranges of the blocks of this manager (one of `managers`) that follow block
/// `last`, `READ_AHEAD_BYTES` of them.
pub(crate) fn read_ahead(last: u64, block_size: u64, managers: u64) -> Vec<Range> {
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
    pub(crate) fn new(block_size: u64, managers: u64) -> ReadBatch {
        ReadBatch {
            managers,
            runs: Vec::new(),
            pieces: Vec::new(),
            blocks_max: (READ_BATCH_BYTES / block_size.max(1)).clamp(1, READ_BATCH_BLOCKS_MAX as u64)
                as usize,
        }
    }

    /// Whether a run of `n` pieces of `block` may join (an empty batch takes any run).
    pub(crate) fn fits(&self, block: u64, n: usize) -> bool {
        self.runs.is_empty()
            || (self.runs.len() < self.blocks_max
                && self.pieces.len() + n <= PIECES_PER_BATCH_MAX
                && !self.runs.iter().any(|(b, _)| *b == block))
    }

    pub(crate) fn push(&mut self, block: u64, run: &[BlockPiece]) {
        let start = self.pieces.len();
        self.pieces.extend_from_slice(run);
        self.runs.push((block, start..self.pieces.len()));
    }

    /// Run `i`'s pieces.
    pub(crate) fn run_pieces(&self, i: usize) -> &[BlockPiece] {
        &self.pieces[self.runs[i].1.clone()]
    }

    /// Run `i`'s ranges in its block.
    pub(crate) fn ranges(&self, i: usize) -> Vec<std::ops::Range<u32>> {
        self.pieces[self.runs[i].1.clone()]
            .iter()
            .map(|p| p.offset..p.offset + p.len)
            .collect()
    }
}

impl Inner {
    /// Serves a read of `pieces`: its reply's bytes go to `dest` (a shared-memory
    /// region the reply fits in, else a reply buffer).
    pub(crate) fn read(
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
    pub(crate) fn start_batch<'c>(
        &self,
        file: &CacheFile,
        block_size: u64,
        batch: ReadBatch,
        mode: &ReadMode,
        links: &'c crate::backing::Links,
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
    pub(crate) fn slide<'c>(
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
    pub(crate) fn abandon_batch(&self, file: &CacheFile, started: BatchInFlight<'_>) {
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
    pub(crate) fn finish_batch(
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
    pub(crate) fn fetch_buffers(
        &self,
        block_size: u64,
        wanted: &[Wanted<'_>],
    ) -> (Vec<Range>, Vec<FetchBuffer>) {
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
    pub(crate) fn fetch(
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
    pub(crate) fn fill(
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
    pub(crate) fn admission(&self, mode: &ReadMode, key: BlockKey, resident: bool) -> Option<Admission> {
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
    pub(crate) fn block_for_read(
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
    pub(crate) fn read_aware(
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
    pub(crate) fn apply_pattern(
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
            if references.len() >= crate::cio::REFERENCES_PER_CALL_MAX {
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
        references.truncate(crate::cio::REFERENCES_PER_CALL_MAX);
        for (key, _) in &references {
            asked.insert(key.block);
        }
        crate::cio::Record::append(
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
}

//! The cache store: a sans-I/O index of cached blocks with a hard memory bound. Each
//! block holds its bytes, its valid and dirty extents, when it became dirty and a pin
//! count; a replacement policy chooses victims.
//!
//! 1. Reads: `lookup` says hit (the whole range is valid) or which ranges to fetch; the
//!    caller fetches them and hands them over with `fill`, which never overwrites dirty
//!    bytes. Only what a read needs is fetched.
//! 2. Writes: `write` copies bytes in and marks them valid and dirty (write-allocate:
//!    never a fetch, a block may be partly valid).
//! 3. Room: a new block (or a block's growing bookkeeping) needs memory; the policy
//!    picks victims among unpinned blocks; a clean victim is dropped, a dirty one
//!    becomes "evicting" (still cached and readable, out of the policy) and is handed
//!    to the caller to write back; the call fails with [`NoSpace`] saying what to do.
//! 4. Write-back: `take_write_back` hands out a block's dirty extents and a snapshot of
//!    its bytes; `finish_write_back` marks clean exactly what was handed out, so bytes
//!    written meanwhile stay dirty; `abort_write_back` keeps everything dirty. An
//!    evicting block is dropped once it is clean and unpinned.
//! 5. A dirty byte leaves the store only through steps 4 or an explicit
//!    `invalidate_inode`/`truncate`.
//!
//! Concurrency is the caller's (a mutex around the store, perhaps one per shard of
//! keys). Block bytes are `Arc<[u8]>`, copy-on-write: a hit and a write-back hand out a
//! snapshot (a reference count, no copy) that the caller reads after releasing its
//! lock, while later writes copy the block only if such a snapshot is still alive.
//! Writes and fills copy their bytes in under the lock.
//!
//! Memory accounting counts what is allocated: each block's full length (even if
//! partly valid), its extents' heap memory, a fixed per-block overhead for the maps,
//! indexes and policy node ([`ENTRY_OVERHEAD_BYTES`]), and snapshots that outlive
//! their block's current bytes (a copy-on-write or a block dropped while a reader
//! still holds it), tracked by weak references until their last holder lets go.
//! Nothing is allocated unless the total stays within `memory_bytes_max`.
//!
//! Block memory is reused: the bytes of a dropped block nobody else holds go to a pool
//! (at most [`POOL_FRACTION`] of the bound, counted in the memory like a block) that the
//! next new block of that length takes from, so a stream of writes through a full cache
//! touches no fresh pages and zero-fills nothing; room for a block takes pooled bytes
//! back before evicting anything. A pooled buffer holds a former block's bytes, which
//! nobody sees: only valid bytes are ever read out of a block.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, Range};
use std::sync::{Arc, Weak};

use weft_layout::InodeId;

use crate::block::{BlockKey, BlockMap, BLOCK_SIZE_BYTES_MAX};
use crate::error::{CacheError, NoSpace};
use crate::extents::Extents;
use crate::policy::{Admission, Incoming, Policy};

/// Bytes charged per cached block besides its data and extents: the ordered map's
/// node and key, the dirty indexes, the policy's node and index slot (an estimate on
/// the high side).
pub const ENTRY_OVERHEAD_BYTES: u64 = 256;

/// The pool of free block buffers holds at most the memory bound over this.
pub const POOL_FRACTION: u64 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// The hard bound on memory (see the module comment for what counts).
    pub memory_bytes_max: u64,
    /// Tell the policy which blocks are fully dirty ([`Policy::set_preferred`]), so a
    /// [`crate::policy::Prefer`] policy evicts them first (delegates).
    pub prefer_full_dirty: bool,
}

/// Whether a lookup is a reference for the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touch {
    /// Yes: a normal read.
    Yes,
    /// No: the caller feeds references separately ([`Cache::reference`]), as
    /// collective-I/O-aware caching does with the processes' original pattern.
    No,
}

/// Bytes of a block at the time of a lookup or a write-back hand-off, readable without
/// the store's lock.
#[derive(Clone, Debug)]
pub struct Snapshot {
    bytes: Arc<[u8]>,
    range: Range<u32>,
}

impl Snapshot {
    /// The range of the block this snapshot shows.
    pub fn range(&self) -> Range<u32> {
        self.range.clone()
    }

    /// A snapshot of bytes that are no block's (a block fetched and left out of the
    /// cache), all of them shown.
    pub fn detached(bytes: Arc<[u8]>) -> Snapshot {
        let range = 0..bytes.len() as u32;
        Snapshot { bytes, range }
    }

    /// The whole block as it was (only the valid bytes mean anything).
    pub fn block(&self) -> &Arc<[u8]> {
        &self.bytes
    }
}

impl Deref for Snapshot {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[self.range.start as usize..self.range.end as usize]
    }
}

/// What a lookup found.
#[derive(Clone, Debug)]
pub enum Lookup {
    /// Every byte of the range is valid.
    Hit(Snapshot),
    /// Some bytes must be fetched: `missing` (in order, inside the range). `resident`
    /// says whether the block is cached at all.
    Miss {
        resident: bool,
        missing: Vec<Range<u32>>,
    },
}

/// Proof of a pin; give it back to [`Cache::unpin`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PinToken {
    key: BlockKey,
    serial: u64,
}

/// Names one write-back hand-off; give it back to finish or abort it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WriteBackToken {
    key: BlockKey,
    serial: u64,
    id: u64,
}

impl WriteBackToken {
    pub fn key(&self) -> BlockKey {
        self.key
    }
}

/// A block's dirty bytes handed out for writing back to its io server.
#[derive(Clone, Debug)]
pub struct WriteBack {
    pub key: BlockKey,
    pub token: WriteBackToken,
    /// The dirty ranges of the block, in order (offsets inside the block).
    pub extents: Vec<Range<u32>>,
    /// The block's bytes at hand-off time.
    pub bytes: Arc<[u8]>,
    /// The whole block is dirty (one aligned write, no read needed).
    pub full: bool,
}

impl WriteBack {
    /// Each dirty range with its bytes, for list I/O.
    pub fn pieces(&self) -> impl Iterator<Item = (u32, &[u8])> + '_ {
        self.extents
            .iter()
            .map(|r| (r.start, &self.bytes[r.start as usize..r.end as usize]))
    }

    /// Bytes to write.
    pub fn len_bytes(&self) -> u64 {
        self.extents.iter().map(|r| (r.end - r.start) as u64).sum()
    }
}

/// Counters and gauges for `weft status` and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    /// Blocks dropped to make room (clean victims, and dirty ones once written back).
    pub evictions: u64,
    pub write_backs: u64,
    /// Write-backs of fully dirty blocks.
    pub write_backs_full: u64,
    pub write_back_bytes: u64,
    pub blocks: u64,
    pub blocks_pinned: u64,
    pub blocks_evicting: u64,
    pub write_backs_in_flight: u64,
    pub bytes_valid: u64,
    pub bytes_dirty: u64,
    pub memory_bytes: u64,
    pub memory_bytes_max: u64,
}

/// What an invalidation dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Invalidated {
    pub blocks: u64,
    /// Dirty bytes discarded (never written back).
    pub dirty_bytes: u64,
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    id: u64,
    bytes: u64,
    full: bool,
}

#[derive(Debug)]
struct Entry {
    serial: u64,
    data: Arc<[u8]>,
    valid: Extents,
    dirty: Extents,
    /// While a write-back is in flight: bytes written since the hand-off.
    redirtied: Option<Extents>,
    write_back: Option<InFlight>,
    /// When the block last went from clean to dirty (caller's clock).
    dirtied_ms: u64,
    pins: u32,
    /// Chosen as a victim: out of the policy, dropped once clean and unpinned.
    evicting: bool,
    /// Bytes this entry is charged (kept equal to `charge()` after every change).
    charged: u64,
}

impl Entry {
    fn block_len(&self) -> u32 {
        self.valid.block_len()
    }

    fn charge(&self) -> u64 {
        let extents = self.valid.heap_bytes()
            + self.dirty.heap_bytes()
            + self.redirtied.as_ref().map_or(0, Extents::heap_bytes);
        self.block_len() as u64 + ENTRY_OVERHEAD_BYTES + extents as u64
    }

    /// The most one write can add to this entry's charge: extents growth, plus a copy
    /// of the block if a snapshot still shares its bytes.
    fn write_growth_max(&self) -> u64 {
        let extents = self.valid.growth_bytes_max()
            + self.dirty.growth_bytes_max()
            + self.redirtied.as_ref().map_or(0, Extents::growth_bytes_max);
        extents as u64 + self.copy_on_write_bytes()
    }

    fn copy_on_write_bytes(&self) -> u64 {
        if Arc::strong_count(&self.data) > 1 {
            self.block_len() as u64
        } else {
            0
        }
    }
}

/// The most memory an entry for a block of `block_len` bytes can be charged.
fn entry_bytes_max(block_len: u32) -> u64 {
    block_len as u64 + ENTRY_OVERHEAD_BYTES + 3 * Extents::heap_bytes_max(block_len) as u64
}

/// The block store; see the module comment.
pub struct Cache<P> {
    policy: P,
    config: CacheConfig,
    entries: BTreeMap<BlockKey, Entry>,
    dirty_keys: BTreeSet<BlockKey>,
    dirty_by_age: BTreeSet<(u64, BlockKey)>,
    evicting: BTreeSet<BlockKey>,
    /// Old bytes still held by snapshots: (weak reference, length).
    detached: Vec<(Weak<[u8]>, u64)>,
    detached_bytes: u64,
    /// Free block buffers of one length, uniquely held, for new blocks to reuse.
    pool: Vec<Arc<[u8]>>,
    pool_bytes: u64,
    /// Charges of entries plus detached and pooled bytes.
    memory_bytes: u64,
    evicting_bytes: u64,
    next_serial: u64,
    stats: CacheStats,
}

impl<P: Policy<BlockKey>> Cache<P> {
    /// A store bounded by `config.memory_bytes_max`. The policy's capacity in blocks
    /// should be about the bound divided by the usual block size (it drives ARC's and
    /// S3-FIFO's list sizes); the byte bound is enforced either way.
    pub fn new(policy: P, config: CacheConfig) -> Self {
        Cache {
            policy,
            config,
            entries: BTreeMap::new(),
            dirty_keys: BTreeSet::new(),
            dirty_by_age: BTreeSet::new(),
            evicting: BTreeSet::new(),
            detached: Vec::new(),
            detached_bytes: 0,
            pool: Vec::new(),
            pool_bytes: 0,
            memory_bytes: 0,
            evicting_bytes: 0,
            next_serial: 1,
            stats: CacheStats::default(),
        }
    }

    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// The policy, for changes that keep its resident keys (raising its capacity once
    /// the usual block size is known); evicting or admitting through it would leave the
    /// store's index behind.
    pub fn policy_mut(&mut self) -> &mut P {
        &mut self.policy
    }

    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    pub fn contains(&self, key: &BlockKey) -> bool {
        self.entries.contains_key(key)
    }

    /// Cached blocks (evicting ones included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn stats(&self) -> CacheStats {
        let mut s = self.stats;
        s.blocks = self.entries.len() as u64;
        s.blocks_pinned = self.entries.values().filter(|e| e.pins > 0).count() as u64;
        s.blocks_evicting = self.evicting.len() as u64;
        s.write_backs_in_flight = self.entries.values().filter(|e| e.write_back.is_some()).count() as u64;
        s.memory_bytes = self.memory_bytes;
        s.memory_bytes_max = self.config.memory_bytes_max;
        s
    }

    /// The valid extents of a cached block.
    pub fn valid_extents(&self, key: &BlockKey) -> Option<&Extents> {
        self.entries.get(key).map(|e| &e.valid)
    }

    /// The dirty extents of a cached block.
    pub fn dirty_extents(&self, key: &BlockKey) -> Option<&Extents> {
        self.entries.get(key).map(|e| &e.dirty)
    }

    /// Looks up `range` of a block. Counts a hit or a miss; with [`Touch::Yes`] a
    /// cached block is referenced in the policy (hit or partial).
    pub fn lookup(
        &mut self,
        key: BlockKey,
        block_len: u32,
        range: Range<u32>,
        touch: Touch,
    ) -> Result<Lookup, CacheError> {
        let range = check_span(key, block_len, &range)?;
        let Some(e) = self.entries.get(&key) else {
            self.stats.misses += 1;
            return Ok(Lookup::Miss {
                resident: false,
                missing: if range.is_empty() { vec![] } else { vec![range] },
            });
        };
        if e.block_len() != block_len {
            return Err(CacheError::BlockLength {
                key,
                cached: e.block_len(),
                requested: block_len,
            });
        }
        let found = if e.valid.covers(range.clone()) {
            self.stats.hits += 1;
            Lookup::Hit(Snapshot {
                bytes: e.data.clone(),
                range,
            })
        } else {
            self.stats.misses += 1;
            Lookup::Miss {
                resident: true,
                missing: e.valid.missing(range),
            }
        };
        if touch == Touch::Yes && !e.evicting {
            self.policy.touch(&key);
        }
        Ok(found)
    }

    /// Looks up several ranges of one block at once (the pieces of one request in it):
    /// a hit, with a snapshot of the whole block, only if every range is valid; else
    /// the missing parts of the ranges, in order. Counts one hit or miss; with
    /// [`Touch::Yes`] a cached block is referenced once.
    pub fn lookup_ranges(
        &mut self,
        key: BlockKey,
        block_len: u32,
        ranges: &[Range<u32>],
        touch: Touch,
    ) -> Result<Lookup, CacheError> {
        for r in ranges {
            check_span(key, block_len, r)?;
        }
        let Some(e) = self.entries.get(&key) else {
            self.stats.misses += 1;
            return Ok(Lookup::Miss {
                resident: false,
                missing: ranges.iter().filter(|r| !r.is_empty()).cloned().collect(),
            });
        };
        if e.block_len() != block_len {
            return Err(CacheError::BlockLength {
                key,
                cached: e.block_len(),
                requested: block_len,
            });
        }
        let covered = e.valid.is_full() || ranges.iter().all(|r| e.valid.covers(r.clone()));
        let found = if covered {
            self.stats.hits += 1;
            Lookup::Hit(Snapshot {
                bytes: e.data.clone(),
                range: 0..block_len,
            })
        } else {
            self.stats.misses += 1;
            Lookup::Miss {
                resident: true,
                missing: ranges.iter().flat_map(|r| e.valid.missing(r.clone())).collect(),
            }
        };
        if touch == Touch::Yes && !e.evicting {
            self.policy.touch(&key);
        }
        Ok(found)
    }

    /// A reference to a block from the original access pattern (collective-I/O-aware
    /// caching): touches it in the policy if cached. Returns whether it is cached.
    pub fn reference(&mut self, key: &BlockKey) -> bool {
        match self.entries.get(key) {
            Some(e) => {
                if !e.evicting {
                    self.policy.touch(key);
                }
                true
            }
            None => false,
        }
    }

    /// Makes sure a block is cached (empty if new), admitting it with `admission`:
    /// room for a block before fetching into it.
    pub fn reserve(&mut self, key: BlockKey, block_len: u32, admission: Admission) -> Result<(), CacheError> {
        check_range(key, block_len, 0, 0)?;
        self.prune_detached();
        self.entry_for(key, block_len, admission).map(|_| ())
    }

    /// Copies `data` into the block at `offset`, marking it valid and dirty
    /// (write-allocate: the block is created empty if missing, nothing is fetched).
    /// `now_ms` dates the block's dirtiness if it was clean.
    pub fn write(
        &mut self,
        key: BlockKey,
        block_len: u32,
        offset: u32,
        data: &[u8],
        now_ms: u64,
    ) -> Result<(), CacheError> {
        let range = check_range(key, block_len, offset, data.len() as u64)?;
        self.prune_detached();
        let existed = self.entry_for(key, block_len, Admission::Normal)?;
        if existed && !self.entries[&key].evicting {
            self.policy.touch(&key);
        }
        if range.is_empty() {
            return Ok(());
        }
        self.make_room_for_growth(key)?;
        self.change(key, |e| {
            if e.dirty.is_empty() {
                e.dirtied_ms = now_ms;
            }
            Arc::make_mut(&mut e.data)[range.start as usize..range.end as usize].copy_from_slice(data);
            e.valid.insert(range.clone());
            e.dirty.insert(range.clone());
            if let Some(r) = &mut e.redirtied {
                r.insert(range);
            }
        });
        Ok(())
    }

    /// `write` of several pieces of one block, `(offset, bytes)` each: the same as
    /// writing them one by one in order, with the block's bookkeeping done once (a
    /// view's pieces in one block can be thousands).
    pub fn write_pieces(
        &mut self,
        key: BlockKey,
        block_len: u32,
        pieces: &[(u32, &[u8])],
        now_ms: u64,
    ) -> Result<(), CacheError> {
        let mut ranges = Vec::with_capacity(pieces.len());
        for (offset, data) in pieces {
            ranges.push(check_range(key, block_len, *offset, data.len() as u64)?);
        }
        self.prune_detached();
        let existed = self.entry_for(key, block_len, Admission::Normal)?;
        if existed && !self.entries[&key].evicting {
            self.policy.touch(&key);
        }
        if ranges.iter().all(|r| r.is_empty()) {
            return Ok(());
        }
        // Extents never grow past their bitmap form, however many pieces come: the
        // room made for one write covers them all.
        self.make_room_for_growth(key)?;
        self.change(key, |e| {
            if e.dirty.is_empty() {
                e.dirtied_ms = now_ms;
            }
            let bytes = Arc::make_mut(&mut e.data);
            for ((_, data), range) in pieces.iter().zip(&ranges) {
                bytes[range.start as usize..range.end as usize].copy_from_slice(data);
            }
            if ranges.windows(2).all(|w| w[0].start <= w[1].start) {
                e.valid.insert_sorted(&ranges);
                e.dirty.insert_sorted(&ranges);
                if let Some(r) = &mut e.redirtied {
                    r.insert_sorted(&ranges);
                }
            } else {
                for range in &ranges {
                    e.valid.insert(range.clone());
                    e.dirty.insert(range.clone());
                    if let Some(r) = &mut e.redirtied {
                        r.insert(range.clone());
                    }
                }
            }
        });
        Ok(())
    }

    /// Copies fetched bytes into the block at `offset` and marks them valid, except
    /// where the block is valid already: dirty, or written and written back (or
    /// filled) while this fetch read the server: every write goes through the cache, so
    /// its valid bytes are never older than the server's, and a fetch that read the
    /// server before a write-back must not put its older bytes over them. A
    /// missing block is created and admitted with `admission`; a cached one is not
    /// referenced again (its lookup did that).
    pub fn fill(
        &mut self,
        key: BlockKey,
        block_len: u32,
        offset: u32,
        data: &[u8],
        admission: Admission,
    ) -> Result<(), CacheError> {
        let range = check_range(key, block_len, offset, data.len() as u64)?;
        self.prune_detached();
        self.entry_for(key, block_len, admission)?;
        if range.is_empty() {
            return Ok(());
        }
        self.make_room_for_growth(key)?;
        self.change(key, |e| {
            let missing = e.valid.missing(range.clone());
            if !missing.is_empty() {
                let bytes = Arc::make_mut(&mut e.data);
                for r in missing {
                    let from = (r.start - offset) as usize..(r.end - offset) as usize;
                    bytes[r.start as usize..r.end as usize].copy_from_slice(&data[from]);
                }
            }
            e.valid.insert(range);
        });
        Ok(())
    }

    /// A buffer of `block_len` bytes to fetch a whole block into before handing it to
    /// [`Cache::install`]: a pooled one (its old bytes are garbage: fetch over all of
    /// them), else fresh. It is not counted in the memory while the caller holds it,
    /// as any fetch buffer of the caller's.
    pub fn fetch_buffer(&mut self, block_len: u32) -> Arc<[u8]> {
        self.take_pooled(block_len)
            .unwrap_or_else(|| std::iter::repeat_n(0u8, block_len as usize).collect())
    }

    /// A whole block fetched into `buffer` (from [`Cache::fetch_buffer`], uniquely
    /// held, every byte the server's): a missing block takes the buffer itself as its
    /// bytes (no copy), all valid, admitted with `admission`; a cached one is filled
    /// from it as `fill` does (its valid bytes are kept) and the buffer is pooled.
    pub fn install(
        &mut self,
        key: BlockKey,
        block_len: u32,
        buffer: Arc<[u8]>,
        admission: Admission,
    ) -> Result<(), CacheError> {
        check_range(key, block_len, 0, buffer.len() as u64)?;
        if buffer.len() != block_len as usize || Arc::strong_count(&buffer) != 1 {
            // Not a whole block's buffer of the caller's alone: filled like any fetch.
            return self.fill(key, block_len, 0, &buffer, admission);
        }
        self.prune_detached();
        if self.entries.contains_key(&key) {
            let filled = self.fill(key, block_len, 0, &buffer, admission);
            if Arc::weak_count(&buffer) == 0 {
                self.put_pooled(buffer);
            }
            return filled;
        }
        self.entry_with(key, block_len, admission, Some(buffer))?;
        self.change(key, |e| e.valid.insert(0..block_len));
        Ok(())
    }

    /// Pins a cached block: it is not chosen as a victim until unpinned (an
    /// invalidation still drops it).
    pub fn pin(&mut self, key: &BlockKey) -> Option<PinToken> {
        let e = self.entries.get_mut(key)?;
        e.pins += 1;
        Some(PinToken {
            key: *key,
            serial: e.serial,
        })
    }

    /// Releases a pin. False if the block was dropped (invalidated) meanwhile.
    pub fn unpin(&mut self, token: PinToken) -> bool {
        match self.entries.get_mut(&token.key) {
            Some(e) if e.serial == token.serial => {
                e.pins = e.pins.checked_sub(1).expect("unpin without pin");
                self.settle(token.key);
                true
            }
            _ => false,
        }
    }

    /// Hands out a block's dirty extents and bytes for writing back, unless it is clean
    /// or already being written back.
    pub fn take_write_back(&mut self, key: &BlockKey) -> Option<WriteBack> {
        let id = self.next_serial;
        let e = self.entries.get_mut(key)?;
        if e.dirty.is_empty() || e.write_back.is_some() {
            return None;
        }
        self.next_serial += 1;
        e.write_back = Some(InFlight {
            id,
            bytes: e.dirty.bytes() as u64,
            full: e.dirty.is_full(),
        });
        e.redirtied = Some(Extents::new(e.block_len()));
        Some(WriteBack {
            key: *key,
            token: WriteBackToken {
                key: *key,
                serial: e.serial,
                id,
            },
            extents: e.dirty.to_vec(),
            bytes: e.data.clone(),
            full: e.dirty.is_full(),
        })
    }

    /// The write-back succeeded: what it carried is clean; bytes written since the
    /// hand-off stay dirty. False (and nothing changes) for an unknown or stale token.
    pub fn finish_write_back(&mut self, token: WriteBackToken) -> bool {
        let Some(flight) = self.in_flight(&token) else {
            return false;
        };
        self.stats.write_backs += 1;
        self.stats.write_back_bytes += flight.bytes;
        self.stats.write_backs_full += flight.full as u64;
        self.change(token.key, |e| {
            e.write_back = None;
            e.dirty = e.redirtied.take().expect("redirtied is kept while in flight");
        });
        self.settle(token.key);
        true
    }

    /// The write-back failed: the block stays dirty (and is handed out again later).
    pub fn abort_write_back(&mut self, token: WriteBackToken) -> bool {
        if self.in_flight(&token).is_none() {
            return false;
        }
        self.change(token.key, |e| {
            e.write_back = None;
            e.redirtied = None;
        });
        true
    }

    fn in_flight(&self, token: &WriteBackToken) -> Option<InFlight> {
        let e = self.entries.get(&token.key)?;
        let flight = e.write_back?;
        (e.serial == token.serial && flight.id == token.id).then_some(flight)
    }

    /// Cached blocks of a file in file order.
    pub fn blocks_of(&self, inode: InodeId) -> impl Iterator<Item = BlockKey> + '_ {
        self.entries
            .range(BlockKey::new(inode, 0)..=BlockKey::new(inode, u64::MAX))
            .map(|(k, _)| *k)
    }

    /// Dirty blocks of a file in file order (for sync and close).
    pub fn dirty_blocks_of(&self, inode: InodeId) -> impl Iterator<Item = BlockKey> + '_ {
        self.dirty_keys
            .range(BlockKey::new(inode, 0)..=BlockKey::new(inode, u64::MAX))
            .copied()
    }

    /// All dirty blocks, in key order.
    pub fn dirty_blocks(&self) -> impl Iterator<Item = BlockKey> + '_ {
        self.dirty_keys.iter().copied()
    }

    /// Dirty blocks that became dirty before `dirtied_before_ms`, oldest first (for
    /// age-based write-back: the time a block went from clean to dirty, so that a block
    /// written again and again is still written back in time).
    pub fn dirty_older_than(&self, dirtied_before_ms: u64) -> impl Iterator<Item = BlockKey> + '_ {
        self.dirty_by_age
            .range(..(dirtied_before_ms, BlockKey::default()))
            .map(|&(_, k)| k)
    }

    /// The oldest dirty blocks whose writing back brings the dirty bytes down to
    /// `limit_bytes`, oldest first.
    pub fn dirty_beyond(&self, limit_bytes: u64) -> impl Iterator<Item = BlockKey> + '_ {
        let mut remaining = self.stats.bytes_dirty;
        self.dirty_by_age.iter().map_while(move |&(_, k)| {
            if remaining <= limit_bytes {
                return None;
            }
            remaining -= self.entries[&k].dirty.bytes() as u64;
            Some(k)
        })
    }

    /// Bytes dirty now (a gauge the caller may poll cheaply).
    pub fn dirty_bytes(&self) -> u64 {
        self.stats.bytes_dirty
    }

    /// Fully dirty blocks (written whole since they were last clean) with no write-back
    /// in flight, in key order: written back early, they need no read and are unlikely
    /// to be written again soon (a stream of writes has moved past them).
    pub fn fully_dirty_idle(&self) -> impl Iterator<Item = BlockKey> + '_ {
        self.dirty_keys.iter().copied().filter(|k| {
            let e = &self.entries[k];
            e.dirty.is_full() && e.write_back.is_none()
        })
    }

    /// Blocks of a file with a write-back in flight (a truncate of the file on its
    /// servers must wait for them, or they would write old bytes past the new end).
    pub fn write_backs_in_flight_of(&self, inode: InodeId) -> impl Iterator<Item = BlockKey> + '_ {
        self.entries
            .range(BlockKey::new(inode, 0)..=BlockKey::new(inode, u64::MAX))
            .filter(|(_, e)| e.write_back.is_some())
            .map(|(k, _)| *k)
    }

    /// Drops every cached block of a file, dirty or not (the file was removed, or its
    /// cached contents must not be trusted). Write-backs in flight become stale.
    pub fn invalidate_inode(&mut self, inode: InodeId) -> Invalidated {
        let keys: Vec<BlockKey> = self
            .entries
            .range(BlockKey::new(inode, 0)..=BlockKey::new(inode, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        let mut dropped = Invalidated::default();
        for k in keys {
            dropped.blocks += 1;
            dropped.dirty_bytes += self.drop_entry(k).dirty.bytes() as u64;
        }
        dropped
    }

    /// Forgets every cached byte of a file at or past `size_bytes` (a truncate): whole
    /// blocks past it are dropped, the block holding it is cut. `blocks` is the file's
    /// block map.
    pub fn truncate(&mut self, inode: InodeId, size_bytes: u64, blocks: &BlockMap) -> Invalidated {
        let block_size_bytes = blocks.block_size_bytes();
        let first_gone = size_bytes.div_ceil(block_size_bytes);
        let keys: Vec<BlockKey> = self
            .entries
            .range(BlockKey::new(inode, first_gone)..=BlockKey::new(inode, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        let mut dropped = Invalidated::default();
        for k in keys {
            dropped.blocks += 1;
            dropped.dirty_bytes += self.drop_entry(k).dirty.bytes() as u64;
        }
        let cut_block = size_bytes / block_size_bytes;
        let cut = BlockKey::new(inode, cut_block);
        if !size_bytes.is_multiple_of(block_size_bytes) && self.entries.contains_key(&cut) {
            let from = (size_bytes % block_size_bytes) as u32;
            let before = self.entries[&cut].dirty.bytes();
            self.change(cut, |e| {
                let tail = from.min(e.block_len())..e.block_len();
                e.valid.remove(tail.clone());
                e.dirty.remove(tail.clone());
                if let Some(r) = &mut e.redirtied {
                    r.remove(tail);
                }
            });
            dropped.dirty_bytes += (before - self.entries[&cut].dirty.bytes()) as u64;
            self.settle(cut);
        }
        dropped
    }

    /// Forgets every cached byte of a file in `[offset, offset + len)` (a hole punched
    /// in it on its servers): blocks inside the range are dropped, the blocks at its ends
    /// lose their part of it (read again from the servers when next asked for). Dirty
    /// bytes there are discarded, never written back over the hole. `blocks` is the
    /// file's block map.
    pub fn punch(&mut self, inode: InodeId, offset: u64, len: u64, blocks: &BlockMap) -> Invalidated {
        let mut dropped = Invalidated::default();
        if len == 0 {
            return dropped;
        }
        let block_size_bytes = blocks.block_size_bytes();
        let end = offset.saturating_add(len);
        let keys: Vec<BlockKey> = self
            .entries
            .range(
                BlockKey::new(inode, offset / block_size_bytes)
                    ..=BlockKey::new(inode, (end - 1) / block_size_bytes),
            )
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            let start = k.block * block_size_bytes;
            let block_len = self.entries[&k].block_len();
            let from = offset.saturating_sub(start).min(block_len as u64) as u32;
            let to = (end - start).min(block_len as u64) as u32;
            if from == 0 && to == block_len {
                dropped.blocks += 1;
                dropped.dirty_bytes += self.drop_entry(k).dirty.bytes() as u64;
                continue;
            }
            let before = self.entries[&k].dirty.bytes();
            self.change(k, |e| {
                e.valid.remove(from..to);
                e.dirty.remove(from..to);
                if let Some(r) = &mut e.redirtied {
                    r.remove(from..to);
                }
            });
            dropped.dirty_bytes += (before - self.entries[&k].dirty.bytes()) as u64;
            self.settle(k);
        }
        dropped
    }

    /// The entry for `key`, created (and admitted) if missing. Returns whether it
    /// existed.
    fn entry_for(&mut self, key: BlockKey, block_len: u32, admission: Admission) -> Result<bool, CacheError> {
        self.entry_with(key, block_len, admission, None)
    }

    /// `entry_for`, a new entry taking `buffer` (uniquely held, `block_len` bytes) as
    /// its bytes if given; a buffer not taken (the entry existed, or no room) is
    /// pooled or dropped.
    fn entry_with(
        &mut self,
        key: BlockKey,
        block_len: u32,
        admission: Admission,
        buffer: Option<Arc<[u8]>>,
    ) -> Result<bool, CacheError> {
        if let Some(e) = self.entries.get(&key) {
            if e.block_len() != block_len {
                return Err(CacheError::BlockLength {
                    key,
                    cached: e.block_len(),
                    requested: block_len,
                });
            }
            return Ok(true);
        }
        let needed = entry_bytes_max(block_len);
        if needed > self.config.memory_bytes_max {
            return Err(CacheError::BlockTooLarge {
                block_len,
                needed,
                max: self.config.memory_bytes_max,
            });
        }
        let fresh = block_len as u64 + ENTRY_OVERHEAD_BYTES;
        // A pooled buffer's bytes are counted already: taken out of the pool, they are
        // the new entry's.
        // A buffer handed in is not counted yet: the new entry's charge counts it.
        let pooled = match buffer {
            Some(buffer) => Some(buffer),
            None => self.take_pooled(block_len),
        };
        if let Err(e) = self.make_room(key, admission, fresh, true, None) {
            if let Some(buffer) = pooled {
                self.put_pooled(buffer);
            }
            return Err(e);
        }
        let data = pooled.unwrap_or_else(|| std::iter::repeat_n(0u8, block_len as usize).collect());
        let entry = Entry {
            serial: self.next_serial,
            data,
            valid: Extents::new(block_len),
            dirty: Extents::new(block_len),
            redirtied: None,
            write_back: None,
            dirtied_ms: 0,
            pins: 0,
            evicting: false,
            charged: fresh,
        };
        debug_assert_eq!(entry.charge(), fresh);
        self.next_serial += 1;
        self.memory_bytes += fresh;
        self.entries.insert(key, entry);
        self.policy.admit(key, admission);
        Ok(false)
    }

    /// Room for the most one write or fill can add to `key`'s charge, evicting other
    /// blocks if needed.
    fn make_room_for_growth(&mut self, key: BlockKey) -> Result<(), CacheError> {
        let growth = self.entries[&key].write_growth_max();
        if self.memory_bytes + growth <= self.config.memory_bytes_max {
            return Ok(());
        }
        self.make_room(key, Admission::Normal, growth, false, Some(key))
    }

    /// Evicts until `need` more bytes (and, with `new_slot`, one more policy key) fit;
    /// see step 3 of the module comment.
    fn make_room(
        &mut self,
        incoming: BlockKey,
        admission: Admission,
        need: u64,
        new_slot: bool,
        exclude: Option<BlockKey>,
    ) -> Result<(), CacheError> {
        let max = self.config.memory_bytes_max;
        loop {
            // Pooled buffers go first: they hold no one's bytes. Also after each
            // eviction, whose freed buffer the pool may just have kept: counted there,
            // it would make room look short and evict a block the policy alone would
            // keep (the CIO-aware cache's hits then parted from its simulator's).
            while self.memory_bytes + need > max {
                let Some(buffer) = self.pool.pop() else { break };
                self.pool_bytes -= buffer.len() as u64;
                self.memory_bytes -= buffer.len() as u64;
            }
            let slot = !new_slot || self.policy.len() < self.policy.capacity();
            if slot && self.memory_bytes + need <= max {
                return Ok(());
            }
            if slot && self.memory_bytes - self.evicting_bytes + need <= max {
                break; // enough is on its way out
            }
            let entries = &self.entries;
            let evictable = |k: &BlockKey| Some(*k) != exclude && entries.get(k).is_some_and(|e| e.pins == 0);
            let Some(victim) = self.policy.evict(
                Some(Incoming {
                    key: incoming,
                    admission,
                }),
                &evictable,
            ) else {
                break;
            };
            let e = self
                .entries
                .get_mut(&victim)
                .expect("the policy's keys are cached");
            e.evicting = true;
            self.evicting_bytes += e.charged;
            self.evicting.insert(victim);
            self.settle(victim);
        }
        let write_back: Vec<BlockKey> = self
            .evicting
            .iter()
            .filter(|k| {
                let e = &self.entries[k];
                !e.dirty.is_empty() && e.write_back.is_none()
            })
            .copied()
            .collect();
        let reason = if !write_back.is_empty() {
            NoSpace::WriteBack(write_back)
        } else if self.evicting.iter().any(|k| self.entries[k].write_back.is_some()) {
            NoSpace::WriteBacksInFlight
        } else {
            NoSpace::AllPinned {
                pinned_blocks: self.entries.values().filter(|e| e.pins > 0).count(),
            }
        };
        Err(CacheError::NoSpace(reason))
    }

    /// Drops an evicting block once it is clean and unpinned.
    fn settle(&mut self, key: BlockKey) {
        let e = &self.entries[&key];
        if e.evicting && e.dirty.is_empty() && e.pins == 0 && e.write_back.is_none() {
            self.drop_entry(key);
            self.stats.evictions += 1;
        }
    }

    /// Applies `f` to an entry and brings every count and index up to date.
    fn change(&mut self, key: BlockKey, f: impl FnOnce(&mut Entry)) {
        let e = self.entries.get_mut(&key).expect("entry exists");
        let (valid0, dirty0, charged0) = (e.valid.bytes() as u64, e.dirty.bytes() as u64, e.charged);
        // A weak reference only while a snapshot shares the bytes: `Arc::make_mut` moves
        // bytes that any weak reference points to into a new allocation, so one taken
        // always made every write copy its whole block into fresh memory.
        let old = (Arc::strong_count(&e.data) > 1).then(|| Arc::downgrade(&e.data));
        f(e);
        if let Some(old) = old.filter(|old| !Weak::ptr_eq(old, &Arc::downgrade(&e.data))) {
            // Copied on write: the old bytes live on in snapshots.
            let len = e.block_len() as u64;
            self.detached.push((old, len));
            self.detached_bytes += len;
            self.memory_bytes += len;
        }
        e.charged = e.charge();
        self.memory_bytes = self.memory_bytes + e.charged - charged0;
        if e.evicting {
            self.evicting_bytes = self.evicting_bytes + e.charged - charged0;
        }
        let (valid1, dirty1) = (e.valid.bytes() as u64, e.dirty.bytes() as u64);
        self.stats.bytes_valid = self.stats.bytes_valid + valid1 - valid0;
        self.stats.bytes_dirty = self.stats.bytes_dirty + dirty1 - dirty0;
        let dirtied = (e.dirtied_ms, key);
        let (evicting, full) = (e.evicting, e.dirty.is_full());
        if dirty0 == 0 && dirty1 > 0 {
            self.dirty_keys.insert(key);
            self.dirty_by_age.insert(dirtied);
        } else if dirty0 > 0 && dirty1 == 0 {
            self.dirty_keys.remove(&key);
            self.dirty_by_age.remove(&dirtied);
        }
        if self.config.prefer_full_dirty && !evicting {
            self.policy.set_preferred(&key, full);
        }
        debug_assert!(self.memory_bytes <= self.config.memory_bytes_max);
    }

    fn drop_entry(&mut self, key: BlockKey) -> Entry {
        let e = self.entries.remove(&key).expect("entry exists");
        if e.evicting {
            self.evicting.remove(&key);
            self.evicting_bytes -= e.charged;
        } else {
            self.policy.remove(&key);
        }
        if !e.dirty.is_empty() {
            self.dirty_keys.remove(&key);
            self.dirty_by_age.remove(&(e.dirtied_ms, key));
        }
        self.memory_bytes -= e.charged;
        self.stats.bytes_valid -= e.valid.bytes() as u64;
        self.stats.bytes_dirty -= e.dirty.bytes() as u64;
        if Arc::strong_count(&e.data) > 1 {
            // A reader still holds the bytes: they stay allocated until it lets go.
            let len = e.block_len() as u64;
            self.detached.push((Arc::downgrade(&e.data), len));
            self.detached_bytes += len;
            self.memory_bytes += len;
        } else if Arc::weak_count(&e.data) == 0 {
            self.put_pooled(e.data.clone());
        }
        e
    }

    /// Keeps a uniquely held buffer (its bytes not counted now) for a later block, if
    /// the pool has room; buffers of another length leave the pool.
    fn put_pooled(&mut self, buffer: Arc<[u8]>) {
        let len = buffer.len() as u64;
        if self.pool.first().is_some_and(|b| b.len() != buffer.len()) {
            self.memory_bytes -= self.pool_bytes;
            self.pool_bytes = 0;
            self.pool.clear();
        }
        let room = self.config.memory_bytes_max / POOL_FRACTION;
        if self.pool_bytes + len <= room && self.memory_bytes + len <= self.config.memory_bytes_max {
            self.pool_bytes += len;
            self.memory_bytes += len;
            self.pool.push(buffer);
        }
    }

    /// A pooled buffer of `block_len` bytes, if any (no longer counted in the memory:
    /// the caller charges it as the new entry's).
    fn take_pooled(&mut self, block_len: u32) -> Option<Arc<[u8]>> {
        if self.pool.last()?.len() != block_len as usize {
            return None;
        }
        let buffer = self.pool.pop()?;
        self.pool_bytes -= buffer.len() as u64;
        self.memory_bytes -= buffer.len() as u64;
        Some(buffer)
    }

    /// Forgets detached bytes whose last snapshot is gone (dropping the weak reference
    /// lets the allocation go).
    fn prune_detached(&mut self) {
        let mut freed = 0;
        self.detached.retain(|(w, len)| {
            let alive = w.strong_count() > 0;
            if !alive {
                freed += len;
            }
            alive
        });
        self.detached_bytes -= freed;
        self.memory_bytes -= freed;
    }
}

/// Checks a range given as a `Range` against a block of `block_len` bytes.
fn check_span(key: BlockKey, block_len: u32, range: &Range<u32>) -> Result<Range<u32>, CacheError> {
    let len = (range.end as u64)
        .checked_sub(range.start as u64)
        .ok_or(CacheError::OutsideBlock {
            key,
            offset: range.start as u64,
            len: 0,
            block_len,
        })?;
    check_range(key, block_len, range.start, len)
}

/// Checks `[offset, offset + len)` against a block of `block_len` bytes.
fn check_range(key: BlockKey, block_len: u32, offset: u32, len: u64) -> Result<Range<u32>, CacheError> {
    if block_len == 0 || block_len as u64 > BLOCK_SIZE_BYTES_MAX {
        return Err(CacheError::BlockSize(block_len as u64));
    }
    let end = offset as u64 + len;
    if end > block_len as u64 {
        return Err(CacheError::OutsideBlock {
            key,
            offset: offset as u64,
            len,
            block_len,
        });
    }
    Ok(offset..end as u32)
}

#[cfg(test)]
mod tests;

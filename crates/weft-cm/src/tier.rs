//! This manager's share of the global cache: the resident blocks, their bytes, valid
//! and dirty extents, the replacement policy and the memory bound.
//!
//! Concurrency: one index lock (`Tier::index`) guards the block table, the policy and
//! the memory account, and is held only for lookups and bookkeeping, never for I/O or
//! copying. Each block has its own lock, held while bytes are copied in or out and
//! while the block is fetched or written back, so requests for different blocks run in
//! parallel and two requests for one block see each other's writes whole. A block in
//! use is pinned (its `pins` count), and only unpinned blocks are evicted.
//!
//! Lock order: a thread holding block locks may take the index lock, and takes block
//! locks in increasing key order; the index lock is never held while waiting for a
//! block lock (the index reads what it needs of a block from its atomics).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use weft_cache::policy::{AnyPolicy, Incoming, Policy, PolicyKind};
use weft_cache::{Admission, BlockKey, Extents};
use weft_layout::{InodeId, Layout};
use weft_proto::{ErrorCode, WireError};

/// The policy's capacity in blocks is the memory bound over this block size: blocks
/// are usually larger (a stripe, 64 KiB by default), so memory is what binds, and the
/// policy's ghost lists stay a few megabytes.
const POLICY_BLOCK_BYTES: u64 = 4096;

/// Counters for `weft status` (monotonic except the gauges).
#[derive(Default)]
pub struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
    pub write_backs: AtomicU64,
    pub write_back_bytes: AtomicU64,
    pub write_back_errors: AtomicU64,
    pub fetched_bytes: AtomicU64,
    /// Gauge: dirty bytes over all blocks.
    pub dirty_bytes: AtomicU64,
}

/// One cached block: its bytes and which of them are valid (equal to or newer than
/// the io servers' copy) and dirty (newer: to be written back).
pub struct Block {
    pub data: Vec<u8>,
    pub valid: Extents,
    pub dirty: Extents,
}

/// A resident block with its lock and the facts the index reads without taking it.
pub struct Cell {
    pub key: BlockKey,
    /// Set when the block left the cache (evicted, dropped, truncated away): a request
    /// or write-back that pinned it before must look it up again, or skip it.
    removed: AtomicBool,
    charge_bytes: u64,
    /// Requests and write-backs using the block: a pinned block is not evicted.
    pins: AtomicU32,
    /// Whether `Block::dirty` is non-empty, readable under the index lock alone.
    dirty: AtomicBool,
    /// When the block became dirty (ms since the tier started), 0 when clean.
    dirty_since_ms: AtomicU64,
    state: Mutex<Block>,
}

impl Cell {
    pub fn lock(&self) -> MutexGuard<'_, Block> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::SeqCst)
    }

    pub fn dirty_since_ms(&self) -> u64 {
        self.dirty_since_ms.load(Ordering::SeqCst)
    }

    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
    }
}

/// A pinned block: unpinned when dropped.
pub struct Pinned {
    pub cell: Arc<Cell>,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.cell.pins.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the tier knows of one file: its layout (to fetch and write back), block size,
/// resident blocks, and the error of a write-back that failed since the last flush.
pub struct FileEntry {
    pub layout: Layout,
    pub block_size_bytes: u64,
    pub blocks: BTreeSet<u64>,
}

struct Index {
    blocks: HashMap<BlockKey, Arc<Cell>>,
    files: BTreeMap<InodeId, FileEntry>,
    policy: AnyPolicy<BlockKey>,
    used_bytes: u64,
}

/// Why room for a block could not be made.
pub enum Room {
    /// Room made and the block inserted: here it is, pinned.
    Ready(Pinned),
    /// Only dirty blocks can go: write this one back, then `finish_eviction` it and try
    /// again. It is out of the policy and pinned.
    WriteBack(Pinned),
}

pub struct Tier {
    index: Mutex<Index>,
    capacity_bytes: u64,
    policy_kind: PolicyKind,
    started: Instant,
    pub counters: Counters,
}

impl Tier {
    pub fn new(capacity_bytes: u64, policy: PolicyKind) -> Tier {
        let entries = (capacity_bytes / POLICY_BLOCK_BYTES).max(16) as usize;
        Tier {
            index: Mutex::new(Index {
                blocks: HashMap::new(),
                files: BTreeMap::new(),
                policy: AnyPolicy::new(policy, entries),
                used_bytes: 0,
            }),
            capacity_bytes,
            policy_kind: policy,
            started: Instant::now(),
            counters: Counters::default(),
        }
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy_kind.as_str()
    }

    pub fn used_bytes(&self) -> u64 {
        self.index().used_bytes
    }

    pub fn block_count(&self) -> usize {
        self.index().blocks.len()
    }

    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// Memory one block of `block_size_bytes` is charged: its bytes and the most its
    /// two extent sets can take.
    fn charge(block_size_bytes: u64) -> u64 {
        block_size_bytes + 2 * Extents::heap_bytes_max(block_size_bytes as u32) as u64
    }

    /// Records the file's layout and block size, or checks them against what earlier
    /// requests said: every client of a file must route it the same way.
    fn check_file(
        index: &mut Index,
        inode: InodeId,
        layout: &Layout,
        block_size_bytes: u64,
    ) -> Result<(), WireError> {
        let entry = index.files.entry(inode).or_insert_with(|| FileEntry {
            layout: layout.clone(),
            block_size_bytes,
            blocks: BTreeSet::new(),
        });
        if entry.block_size_bytes != block_size_bytes || entry.layout != *layout {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "inode {inode}: this request's layout or block size ({block_size_bytes} bytes) differs \
                     from the one its cached blocks have ({} bytes)",
                    entry.block_size_bytes
                ),
            ));
        }
        Ok(())
    }

    /// The resident block `key`, pinned, counting a reference; `None` if not resident.
    pub fn lookup(
        &self,
        key: BlockKey,
        layout: &Layout,
        block_size_bytes: u64,
    ) -> Result<Option<Pinned>, WireError> {
        let mut index = self.index();
        Self::check_file(&mut index, key.inode, layout, block_size_bytes)?;
        let Some(cell) = index.blocks.get(&key).cloned() else {
            return Ok(None);
        };
        index.policy.touch(&key);
        cell.pins.fetch_add(1, Ordering::SeqCst);
        Ok(Some(Pinned { cell }))
    }

    /// Makes `key` resident (empty: nothing valid) if there is room, evicting clean
    /// blocks; asks the caller to write a dirty victim back when only those can go.
    pub fn insert(&self, key: BlockKey, layout: &Layout, block_size_bytes: u64) -> Result<Room, WireError> {
        let charge = Self::charge(block_size_bytes);
        if charge > self.capacity_bytes {
            return Err(WireError::new(
                ErrorCode::TooLarge,
                format!(
                    "a block of {block_size_bytes} bytes does not fit in this cache manager's {} bytes of memory",
                    self.capacity_bytes
                ),
            ));
        }
        let mut index = self.index();
        Self::check_file(&mut index, key.inode, layout, block_size_bytes)?;
        if let Some(cell) = index.blocks.get(&key).cloned() {
            // Another request made it resident meanwhile.
            index.policy.touch(&key);
            cell.pins.fetch_add(1, Ordering::SeqCst);
            return Ok(Room::Ready(Pinned { cell }));
        }
        let incoming = Some(Incoming {
            key,
            admission: Admission::Normal,
        });
        while index.used_bytes + charge > self.capacity_bytes || index.policy.len() >= index.policy.capacity()
        {
            let Index { blocks, policy, .. } = &mut *index;
            let clean = |k: &BlockKey| {
                blocks
                    .get(k)
                    .is_some_and(|c| c.pins.load(Ordering::SeqCst) == 0 && !c.is_dirty())
            };
            if let Some(victim) = policy.evict(incoming, &clean) {
                Self::forget(&mut index, &victim);
                self.counters.evictions.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let unpinned = |k: &BlockKey| blocks.get(k).is_some_and(|c| c.pins.load(Ordering::SeqCst) == 0);
            return match policy.evict(incoming, &unpinned) {
                Some(victim) => {
                    let cell = index
                        .blocks
                        .get(&victim)
                        .expect("policy keys are resident")
                        .clone();
                    cell.pins.fetch_add(1, Ordering::SeqCst);
                    Ok(Room::WriteBack(Pinned { cell }))
                }
                None => Err(WireError::new(
                    ErrorCode::Busy,
                    "every block of this cache manager's memory is in use by a request; try again",
                )),
            };
        }
        let cell = Arc::new(Cell {
            key,
            removed: AtomicBool::new(false),
            charge_bytes: charge,
            pins: AtomicU32::new(1),
            dirty: AtomicBool::new(false),
            dirty_since_ms: AtomicU64::new(0),
            state: Mutex::new(Block {
                data: vec![0u8; block_size_bytes as usize],
                valid: Extents::new(block_size_bytes as u32),
                dirty: Extents::new(block_size_bytes as u32),
            }),
        });
        index.used_bytes += charge;
        index.policy.admit(key, Admission::Normal);
        index.blocks.insert(key, cell.clone());
        index
            .files
            .get_mut(&key.inode)
            .expect("checked above")
            .blocks
            .insert(key.block);
        Ok(Room::Ready(Pinned { cell }))
    }

    /// Removes a block from the table (not from the policy) and releases its memory.
    /// Takes no block lock: whoever holds the block sees `removed` when done.
    fn forget(index: &mut Index, key: &BlockKey) -> Option<Arc<Cell>> {
        let cell = index.blocks.remove(key)?;
        cell.removed.store(true, Ordering::SeqCst);
        index.used_bytes -= cell.charge_bytes;
        if let Some(file) = index.files.get_mut(&key.inode) {
            file.blocks.remove(&key.block);
            if file.blocks.is_empty() {
                index.files.remove(&key.inode);
            }
        }
        Some(cell)
    }

    /// Ends an eviction asked for by `Room::WriteBack`: the block was written back
    /// (`written`) and goes, unless a request uses it or wrote to it meanwhile (it then
    /// stays, a candidate again, as does a block that could not be written back).
    pub fn finish_eviction(&self, victim: Pinned, written: bool) {
        let mut index = self.index();
        let key = victim.cell.key;
        if !index.blocks.contains_key(&key) {
            return;
        }
        // Pins are taken under the index lock: only ours means nobody is using it.
        let alone = victim.cell.pins.load(Ordering::SeqCst) == 1;
        if written && alone && !victim.cell.is_dirty() {
            Self::forget(&mut index, &key);
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
        } else if !index.policy.contains(&key) && index.policy.len() < index.policy.capacity() {
            // (A policy filled by other blocks meanwhile leaves this one untracked: it
            // stays resident until dropped, a rare loss of evictability, never of data.)
            index.policy.admit(key, Admission::Normal);
        }
    }

    /// Updates the dirty facts after a change to `block`'s dirty extents; `before` is
    /// its dirty byte count before the change.
    pub fn dirty_changed(&self, cell: &Cell, block: &Block, before: u32) {
        let after = block.dirty.bytes();
        if after > before {
            self.counters
                .dirty_bytes
                .fetch_add((after - before) as u64, Ordering::SeqCst);
        } else {
            self.counters
                .dirty_bytes
                .fetch_sub((before - after) as u64, Ordering::SeqCst);
        }
        let dirty = after > 0;
        if dirty && !cell.dirty.swap(true, Ordering::SeqCst) {
            cell.dirty_since_ms.store(self.now_ms(), Ordering::SeqCst);
        } else if !dirty {
            cell.dirty.store(false, Ordering::SeqCst);
            cell.dirty_since_ms.store(0, Ordering::SeqCst);
        }
    }

    /// The file's layout as the tier knows it (for write-back).
    pub fn layout_of(&self, inode: InodeId) -> Option<Layout> {
        self.index().files.get(&inode).map(|f| f.layout.clone())
    }

    /// The file's resident blocks, pinned, in block order; `only_dirty` keeps dirty
    /// ones.
    pub fn blocks_of(&self, inode: InodeId, only_dirty: bool) -> Vec<Pinned> {
        let index = self.index();
        let Some(file) = index.files.get(&inode) else {
            return Vec::new();
        };
        file.blocks
            .iter()
            .filter_map(|b| index.blocks.get(&BlockKey::new(inode, *b)))
            .filter(|c| !only_dirty || c.is_dirty())
            .map(|c| {
                c.pins.fetch_add(1, Ordering::SeqCst);
                Pinned { cell: c.clone() }
            })
            .collect()
    }

    /// Dirty blocks, pinned, oldest first: those dirty since before `older_than_ms`,
    /// and beyond those, the oldest until `extra_bytes` of dirty data are covered.
    pub fn dirty_blocks(&self, older_than_ms: u64, extra_bytes: u64) -> Vec<Pinned> {
        let index = self.index();
        let mut dirty: Vec<(u64, &Arc<Cell>)> = index
            .blocks
            .values()
            .filter(|c| c.is_dirty())
            .map(|c| (c.dirty_since_ms(), c))
            .collect();
        dirty.sort_by_key(|(since, c)| (*since, c.key));
        let mut out = Vec::new();
        let mut covered = 0u64;
        for (since, cell) in dirty {
            let old = since != 0 && since < older_than_ms;
            if !old && covered >= extra_bytes {
                break;
            }
            if !old {
                // The block's size bounds its dirty bytes (no block lock under the index).
                covered += cell.charge_bytes;
            }
            cell.pins.fetch_add(1, Ordering::SeqCst);
            out.push(Pinned { cell: cell.clone() });
        }
        out
    }

    /// Removes blocks of `inode` from `first_block` on (all with 0), dirty or not,
    /// waiting for anyone using them.
    pub fn remove_from(&self, inode: InodeId, first_block: u64) {
        let cells: Vec<Arc<Cell>> = {
            let mut index = self.index();
            let blocks: Vec<u64> = index
                .files
                .get(&inode)
                .map(|f| f.blocks.range(first_block..).copied().collect())
                .unwrap_or_default();
            blocks
                .into_iter()
                .filter_map(|b| {
                    let key = BlockKey::new(inode, b);
                    index.policy.remove(&key);
                    Self::forget(&mut index, &key)
                })
                .collect()
        };
        // Outside the index lock: waits for a request or write-back using a block.
        for cell in cells {
            let mut block = cell.lock();
            let before = block.dirty.bytes();
            block.dirty.clear();
            self.dirty_changed(&cell, &block, before);
        }
    }
}

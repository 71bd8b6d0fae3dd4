//! The cache tier's bookkeeping, shared by the `cache` server role and by simulators:
//! block maps, cache-manager ownership, byte extents, replacement policies and a
//! memory-bounded, sans-I/O block store.
//!
//! Invariant: this crate does no I/O (no files, sockets, clocks or threads); callers
//! pass the time in. A dirty byte leaves the store only through an explicit write-back
//! hand-off or an explicit invalidation.
//!
//! # Code map
//!
//! The cache tier's bookkeeping, pure (no I/O, no clocks: callers pass the time), shared
//! by the `cache` server role and by the trace-driven simulator. `key.rs`: a block's key and the largest block. `block.rs`: the block map
//! of a file (block size, by default the stripe size; a range cut into per-block pieces
//! in file order) and `BlockKey` (inode, block). `owner.rs`: which cache manager owns a
//! block: Hash Distributed Caching (block x to manager x mod n), the same function for
//! server-aligned delegates with a count made a factor or multiple of the stripe count
//! (`aligned_count`, or kept as asked to measure the unaligned case), and colocated
//! managers (the io server's own); which io servers a manager talks to. `extents.rs`:
//! byte ranges inside a block (valid bytes, dirty bytes), a sorted list that turns into a
//! bitmap past min(4096, len/64) ranges, so its memory never exceeds len/8 bytes.
//! `policy/`: the `Policy` trait over any `Copy + Eq + Hash` key (touch, admit normally or
//! cold, evict with a pinned filter and the incoming key, remove, mark preferred) and
//! LRU, FIFO, LFU, ARC, S3-FIFO, all O(1) on one arena of linked lists with a keyed fast
//! hash, plus `Prefer`, which evicts keys marked preferred (fully dirty blocks) first;
//! `AnyPolicy` picks one by name; the naive reference models the policies are checked
//! against (`policy::model`) are public with the `naive-models` feature, for the
//! simulator's tests. `store/`: the `Cache`, a block index with a hard memory
//! bound: lookups that return a snapshot or the missing ranges, write-allocate writes,
//! fills that never overwrite valid bytes (dirty ones, or bytes written and written back
//! while the fetch read the server), victims through the policy (a dirty victim
//! stays readable and is handed out for write-back), write-back hand-offs cleaned by
//! token, pins, dirty blocks by file, age and limit, truncate, invalidate, counters.
//! Block bytes are `Arc<[u8]>`, copy-on-write, so callers copy out of snapshots without
//! holding their lock; a write to a block no snapshot shares writes in place (no weak
//! reference to a block's bytes is held across a change: `Arc::make_mut` would move them).
//! The bytes of a dropped block nobody holds go to a pool (at most 1/8 of the memory
//! bound, counted in it, given back before any eviction) that new blocks of that length
//! take from; a pooled buffer's old bytes are never read, only valid bytes are.
//! `fetch_buffer` lends a pooled (or fresh) buffer to a caller fetching a whole block, not
//! counted while the caller holds it (as any fetch buffer); `install` makes it the block's
//! bytes, all valid (no copy), or, if the block was cached meanwhile, fills from it
//! without touching valid bytes and pools it.
//!
//! Replacement is our own code, not a cache crate's. foyer (foyer-memory) and quick_cache
//! are well kept, but both are whole caches owning the values, their hashing, weights and
//! eviction together (foyer's `Eviction` trait works on its own reference-counted records
//! through intrusive lists, and foyer-memory brings tokio, serde, parking_lot and more
//! with it): their policies cannot be driven by references other than the
//! cache's own gets (the collective-I/O-aware mode feeds the processes' original pattern
//! separately, and the simulator feeds keys with no values at all), have no cold-end
//! admission, no per-victim filter beside quick_cache's pinning hook, no "evict fully dirty
//! first" order, and no ARC (foyer offers FIFO, LRU, LFU/TinyLFU, S3-FIFO, Sieve;
//! quick_cache one Clock-PRO/S3-FIFO-like policy). Dirty extents and write-back hand-offs
//! are outside what either models. A policy here is ~100-200 lines over a shared
//! linked-list arena, checked against a naive model, and the same code runs in the
//! server and in the simulator.

#![forbid(unsafe_code)]

pub mod block;
pub mod error;
pub mod extents;
mod key;
pub mod owner;
pub mod policy;
pub mod store;

pub use block::{BlockKey, BlockMap, BlockPiece, BlockPieces, BLOCK_SIZE_BYTES_MAX};
pub use error::{CacheError, NoSpace};
pub use extents::{Extents, EXTENTS_LIST_MAX};
pub use owner::{aligned_count, Alignment, BlockStride, Mapping};
pub use policy::{Admission, AnyPolicy, Incoming, Policy, PolicyKind};
pub use store::{
    Cache, CacheConfig, CacheStats, Invalidated, Lookup, PinToken, Snapshot, Touch, WriteBack,
    WriteBackToken, ENTRY_OVERHEAD_BYTES,
};

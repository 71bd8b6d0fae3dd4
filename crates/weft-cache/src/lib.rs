//! The cache tier's bookkeeping, shared by the `cache` server role and by simulators:
//! block maps, cache-manager ownership, byte extents, replacement policies and a
//! memory-bounded, sans-I/O block store.
//!
//! Invariant: this crate does no I/O (no files, sockets, clocks or threads); callers
//! pass the time in. A dirty byte leaves the store only through an explicit write-back
//! hand-off or an explicit invalidation.

#![forbid(unsafe_code)]

pub mod block;
pub mod error;
pub mod extents;
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

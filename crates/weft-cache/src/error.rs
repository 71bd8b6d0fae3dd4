//! The crate's error type: bad input (values from requests, hints or configuration)
//! and the store's "no space right now" outcomes, which the caller resolves by writing
//! blocks back or waiting for pins to be released.

use crate::key::BlockKey;
use weft_layout::LayoutError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    #[error("block size {0} bytes is outside 1..={max}", max = crate::key::BLOCK_SIZE_BYTES_MAX)]
    BlockSize(u64),
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("range {offset}..+{len} runs past the end of block {key} ({block_len} bytes)")]
    OutsideBlock {
        key: BlockKey,
        offset: u64,
        len: u64,
        block_len: u32,
    },
    #[error("block {key} is cached with {cached} bytes, not {requested}")]
    BlockLength {
        key: BlockKey,
        cached: u32,
        requested: u32,
    },
    #[error("a block of {block_len} bytes needs up to {needed} bytes of cache memory, more than the {max} configured")]
    BlockTooLarge { block_len: u32, needed: u64, max: u64 },
    #[error("cache manager count must be at least 1")]
    ManagerCount,
    #[error("stripe count must be at least 1")]
    StripeCount,
    #[error(
        "the {mapping} mapping needs the block size ({block_size}) to equal the stripe size ({stripe_size})"
    )]
    MappingBlockSize {
        mapping: &'static str,
        block_size: u64,
        stripe_size: u64,
    },
    #[error("no cache memory free: {0}")]
    NoSpace(NoSpace),
}

/// Why the store could not make room for a block (or for a block's bookkeeping) now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoSpace {
    /// The policy chose these dirty blocks as victims. They stay cached (and readable)
    /// until the caller writes them back ([`crate::store::Cache::take_write_back`], then
    /// [`crate::store::Cache::finish_write_back`]), which frees them; then retry.
    WriteBack(Vec<BlockKey>),
    /// Enough victims are already being written back; retry once those write-backs
    /// finish.
    WriteBacksInFlight,
    /// Every block that could make room is pinned.
    AllPinned { pinned_blocks: usize },
}

impl std::fmt::Display for NoSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoSpace::WriteBack(keys) => {
                write!(f, "{} dirty victim(s) must be written back first", keys.len())
            }
            NoSpace::WriteBacksInFlight => write!(f, "waiting for write-backs in flight"),
            NoSpace::AllPinned { pinned_blocks } => {
                write!(f, "every evictable block is pinned ({pinned_blocks} pinned)")
            }
        }
    }
}

//! A cached block's identity (file and block number), and the largest block: what
//! the rest of the cache, its errors included, names blocks by.

use std::fmt;

use weft_layout::InodeId;

/// Largest block accepted (1 GiB, the largest stripe): every offset inside a block fits
/// in a `u32`.
pub const BLOCK_SIZE_BYTES_MAX: u64 = 1 << 30;

/// A cached block: block `block` of file `inode`. Orders by inode, then block, so all
/// of a file's blocks are one range of an ordered map, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BlockKey {
    pub inode: InodeId,
    pub block: u64,
}

impl BlockKey {
    pub fn new(inode: InodeId, block: u64) -> Self {
        BlockKey { inode, block }
    }
}

impl fmt::Display for BlockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.inode, self.block)
    }
}

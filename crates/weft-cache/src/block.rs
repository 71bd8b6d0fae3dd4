//! The block map of a file: which block holds a byte, and a file range cut into
//! per-block pieces in file order. A block is the cache's unit of placement and
//! replacement (by default one stripe).

use std::ops::Range;

use weft_layout::stripe::check_range;
use weft_layout::Layout;

use crate::error::CacheError;
pub use crate::key::{BlockKey, BLOCK_SIZE_BYTES_MAX};

/// How a file is cut into blocks: block `x` is bytes `[x*b, (x+1)*b)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockMap {
    block_size_bytes: u64,
}

/// One contiguous piece of a file range that lies in one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPiece {
    pub block: u64,
    pub offset_in_block: u32,
    pub len: u32,
    pub file_offset: u64,
}

impl BlockPiece {
    /// The piece as a range of offsets inside its block.
    pub fn range_in_block(&self) -> Range<u32> {
        self.offset_in_block..self.offset_in_block + self.len
    }
}

impl BlockMap {
    pub fn new(block_size_bytes: u64) -> Result<Self, CacheError> {
        if (1..=BLOCK_SIZE_BYTES_MAX).contains(&block_size_bytes) {
            Ok(BlockMap { block_size_bytes })
        } else {
            Err(CacheError::BlockSize(block_size_bytes))
        }
    }

    /// The default block map of a file: one block per stripe. The layout is assumed
    /// validated (its stripe size is within the block size limits).
    pub fn for_layout(layout: &Layout) -> Self {
        debug_assert!((1..=BLOCK_SIZE_BYTES_MAX).contains(&layout.stripe_size_bytes));
        BlockMap {
            block_size_bytes: layout.stripe_size_bytes,
        }
    }

    pub fn block_size_bytes(&self) -> u64 {
        self.block_size_bytes
    }

    /// The block length as the store takes it.
    pub fn block_len(&self) -> u32 {
        self.block_size_bytes as u32
    }

    /// The block holding file byte `offset`.
    pub fn block_of(&self, offset: u64) -> u64 {
        offset / self.block_size_bytes
    }

    /// File offset of the first byte of `block`.
    pub fn block_start(&self, block: u64) -> u64 {
        block * self.block_size_bytes
    }

    /// The blocks touched by `[offset, offset + len)` (empty for `len == 0`).
    pub fn blocks(&self, offset: u64, len: u64) -> Result<Range<u64>, CacheError> {
        check_range(offset, len)?;
        if len == 0 {
            return Ok(0..0);
        }
        Ok(self.block_of(offset)..self.block_of(offset + len - 1) + 1)
    }

    /// `[offset, offset + len)` cut into per-block pieces, lazily, in file order.
    pub fn pieces(&self, offset: u64, len: u64) -> Result<BlockPieces, CacheError> {
        check_range(offset, len)?;
        Ok(BlockPieces {
            block_size_bytes: self.block_size_bytes,
            offset,
            end: offset + len,
        })
    }
}

/// Iterator over the block pieces of a range; see [`BlockMap::pieces`].
#[derive(Clone, Debug)]
pub struct BlockPieces {
    block_size_bytes: u64,
    offset: u64,
    end: u64,
}

impl Iterator for BlockPieces {
    type Item = BlockPiece;

    fn next(&mut self) -> Option<BlockPiece> {
        if self.offset >= self.end {
            return None;
        }
        let b = self.block_size_bytes;
        let block = self.offset / b;
        let in_block = self.offset % b;
        let len = (b - in_block).min(self.end - self.offset);
        let piece = BlockPiece {
            block,
            offset_in_block: in_block as u32,
            len: len as u32,
            file_offset: self.offset,
        };
        self.offset += len;
        Some(piece)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.offset >= self.end {
            return (0, Some(0));
        }
        let b = self.block_size_bytes;
        let n = (self.end - 1) / b - self.offset / b + 1;
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use weft_layout::stripe::FILE_OFFSET_MAX;

    #[test]
    fn bad_sizes_and_ranges_are_errors() {
        assert!(matches!(BlockMap::new(0), Err(CacheError::BlockSize(0))));
        assert!(BlockMap::new(BLOCK_SIZE_BYTES_MAX + 1).is_err());
        let m = BlockMap::new(4096).unwrap();
        assert!(m.pieces(FILE_OFFSET_MAX, 1).is_err());
        assert!(m.pieces(u64::MAX, 2).is_err());
        assert!(m.blocks(FILE_OFFSET_MAX - 1, 1).is_ok());
    }

    #[test]
    fn a_range_across_three_blocks() {
        let m = BlockMap::new(100).unwrap();
        let pieces: Vec<_> = m.pieces(150, 200).unwrap().collect();
        let expect = [(1, 50, 50, 150), (2, 0, 100, 200), (3, 0, 50, 300)];
        assert_eq!(pieces.len(), 3);
        for (p, (block, off, len, file)) in pieces.iter().zip(expect) {
            assert_eq!(
                (p.block, p.offset_in_block, p.len, p.file_offset),
                (block, off, len, file)
            );
        }
        assert_eq!(m.blocks(150, 200).unwrap(), 1..4);
        assert_eq!(m.blocks(150, 0).unwrap(), 0..0);
    }

    proptest! {
        /// Pieces cover the range exactly, in order, each inside one block, and agree
        /// with a byte-by-byte model of which block holds each byte.
        #[test]
        fn pieces_partition_the_range(size in 1u64..300, offset in 0u64..5000, len in 0u64..3000) {
            let m = BlockMap::new(size).unwrap();
            let pieces: Vec<_> = m.pieces(offset, len).unwrap().collect();
            prop_assert_eq!(m.pieces(offset, len).unwrap().size_hint().0, pieces.len());
            let mut at = offset;
            for p in &pieces {
                prop_assert_eq!(p.file_offset, at);
                prop_assert!(p.len > 0);
                for byte in at..at + p.len as u64 {
                    prop_assert_eq!(byte / size, p.block);
                }
                prop_assert_eq!(m.block_start(p.block) + p.offset_in_block as u64, at);
                at += p.len as u64;
            }
            prop_assert_eq!(at, offset + len);
            let blocks = m.blocks(offset, len).unwrap();
            let expected: Vec<u64> = pieces.iter().map(|p| p.block).collect();
            prop_assert_eq!(blocks.collect::<Vec<_>>(), expected);
        }
    }
}

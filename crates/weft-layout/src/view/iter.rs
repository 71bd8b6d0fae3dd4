//! Lazy iteration of the pieces of a view interval in file order: a fixed stack of
//! cursors, one per nesting level, no allocation and no list of ranges. Runs that
//! touch in the file are merged into one piece.

use super::datatype::{Datatype, Kind};
use super::map::View;
use super::{ViewError, DEPTH_MAX};
use crate::stripe::FILE_OFFSET_MAX;

/// A contiguous range of the file that holds consecutive view bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Piece {
    pub file_offset: u64,
    pub len: u64,
    /// View offset of the piece's first byte.
    pub view_offset: u64,
}

/// Where a walk stands inside one inner node: the block and the copy within it that
/// come next, and the absolute file position of the node's origin.
#[derive(Debug, Clone, Copy)]
struct Cursor<'a> {
    node: &'a Datatype,
    origin: i64,
    block: u64,
    within: u64,
}

impl Cursor<'_> {
    /// Moves to the next copy, given the length of the current block.
    #[inline]
    fn advance(&mut self, block_len: u64) {
        self.within += 1;
        if self.within == block_len {
            self.block += 1;
            self.within = 0;
        }
    }
}

/// Length reported for the run of a filetype whose tiles abut: longer than any
/// interval, so the whole request is one piece.
const RUN_UNBOUNDED: u64 = FILE_OFFSET_MAX;

/// The pieces of a view interval in file order; see [`View::pieces`].
#[derive(Debug, Clone)]
pub struct Pieces<'a> {
    root: &'a Datatype,
    displacement: i64,
    extent: i64,
    /// The filetype is one run and its tiles touch: the view is contiguous.
    root_dense: bool,
    stack: [Cursor<'a>; DEPTH_MAX],
    depth: usize,
    next_tile: u64,
    /// A run fetched while looking for one to merge, not yet returned.
    pending: Option<(i64, u64)>,
    /// Bytes to drop from the front of the next run (after a seek into its middle).
    skip: u64,
    view_offset: u64,
    view_end: u64,
}

impl View {
    /// The pieces of view bytes `[view_offset, view_offset + len)`, in file order,
    /// adjacent runs merged. Fails if the interval maps past the largest file offset.
    pub fn pieces(&self, view_offset: u64, len: u64) -> Result<Pieces<'_>, ViewError> {
        self.check_interval(view_offset, len)?;
        Ok(Pieces::new(self, view_offset, view_offset + len))
    }
}

impl<'a> Pieces<'a> {
    fn new(view: &'a View, view_offset: u64, view_end: u64) -> Pieces<'a> {
        let root: &'a Datatype = view.filetype();
        let root_dense = root.is_contiguous() && root.extent() == root.size_bytes() as i64;
        let mut pieces = Pieces {
            root,
            displacement: view.displacement() as i64,
            extent: root.extent(),
            root_dense,
            stack: [Cursor {
                node: root,
                origin: 0,
                block: 0,
                within: 0,
            }; DEPTH_MAX],
            depth: 0,
            next_tile: 0,
            pending: None,
            skip: 0,
            view_offset,
            view_end,
        };
        pieces.seek(view_offset);
        pieces
    }

    /// View offset of the next byte to be returned.
    pub fn view_offset(&self) -> u64 {
        self.view_offset
    }

    /// View offset one past the interval.
    pub fn view_end(&self) -> u64 {
        self.view_end
    }

    /// Moves forward to `view_offset` (not before the current offset, not past the end)
    /// in O(depth * log blocks), without visiting the pieces in between.
    pub(crate) fn seek(&mut self, view_offset: u64) {
        debug_assert!(view_offset <= self.view_end);
        self.view_offset = view_offset;
        self.pending = None;
        self.skip = 0;
        self.depth = 0;
        if view_offset >= self.view_end {
            return;
        }
        let size = self.root.size_bytes();
        let tile = view_offset / size;
        let mut index = view_offset % size;
        let origin = self.displacement + tile as i64 * self.extent;
        if self.root.is_contiguous() {
            self.next_tile = tile;
            self.skip = index;
            return;
        }
        self.next_tile = tile + 1;
        self.push(self.root, origin);
        loop {
            let level = self.depth - 1;
            let cursor = self.stack[level];
            let (child, child_origin) = match &cursor.node.kind {
                Kind::Vector(vector) => {
                    let child_size = vector.child.size_bytes();
                    let copy = index / child_size;
                    index %= child_size;
                    self.stack[level].block = copy / vector.block_len;
                    self.stack[level].within = copy % vector.block_len;
                    if vector.child.is_contiguous() {
                        self.skip = index;
                        return;
                    }
                    self.stack[level].advance(vector.block_len);
                    (&*vector.child, cursor.origin + vector.origin_of(copy))
                }
                Kind::Blocks(blocks) => {
                    let number = blocks.partition_point(|b| b.data_before <= index) - 1;
                    let block = &blocks[number];
                    index -= block.data_before;
                    let child_size = block.child.size_bytes();
                    let copy = index / child_size;
                    index %= child_size;
                    self.stack[level].block = number as u64;
                    self.stack[level].within = copy;
                    if block.child.is_contiguous() {
                        self.skip = index;
                        return;
                    }
                    self.stack[level].advance(block.count);
                    let origin = cursor.origin + block.displacement + copy as i64 * block.child.extent();
                    (&*block.child, origin)
                }
                Kind::Bytes { .. } => unreachable!("runs are never pushed"),
            };
            self.push(child, child_origin);
        }
    }

    #[inline]
    fn push(&mut self, node: &'a Datatype, origin: i64) {
        self.stack[self.depth] = Cursor {
            node,
            origin,
            block: 0,
            within: 0,
        };
        self.depth += 1;
    }

    /// The next run of the typemap, unclipped: absolute file position and length.
    /// Never ends (the filetype tiles forever); callers stop at `view_end`.
    #[inline]
    fn next_run(&mut self) -> (i64, u64) {
        loop {
            if self.depth == 0 {
                let origin = self.displacement + self.next_tile as i64 * self.extent;
                self.next_tile += 1;
                if let Kind::Bytes { displacement } = self.root.kind {
                    let len = if self.root_dense {
                        RUN_UNBOUNDED
                    } else {
                        self.root.size_bytes()
                    };
                    return (origin + displacement, len);
                }
                self.push(self.root, origin);
            }
            let level = self.depth - 1;
            let cursor = &mut self.stack[level];
            let node: &'a Datatype = cursor.node;
            let (child, child_origin) = match &node.kind {
                Kind::Vector(vector) => {
                    let copy = cursor.block * vector.block_len + cursor.within;
                    if copy >= vector.count {
                        self.depth -= 1;
                        continue;
                    }
                    let origin = cursor.origin
                        + vector.displacement
                        + cursor.block as i64 * vector.block_stride
                        + cursor.within as i64 * vector.element_stride;
                    let child: &'a Datatype = &vector.child;
                    if let Kind::Bytes { displacement } = child.kind {
                        let size = child.size_bytes();
                        if vector.element_stride == size as i64 {
                            // Copies of the run abut: the rest of the block is one run.
                            let left = (vector.count - copy).min(vector.block_len - cursor.within);
                            cursor.block += 1;
                            cursor.within = 0;
                            return (origin + displacement, left * size);
                        }
                        cursor.advance(vector.block_len);
                        return (origin + displacement, size);
                    }
                    cursor.advance(vector.block_len);
                    (child, origin)
                }
                Kind::Blocks(blocks) => {
                    let Some(block) = blocks.get(cursor.block as usize) else {
                        self.depth -= 1;
                        continue;
                    };
                    let child: &'a Datatype = &block.child;
                    let extent = child.extent();
                    let origin = cursor.origin + block.displacement + cursor.within as i64 * extent;
                    if let Kind::Bytes { displacement } = child.kind {
                        let size = child.size_bytes();
                        if extent == size as i64 {
                            let left = block.count - cursor.within;
                            cursor.block += 1;
                            cursor.within = 0;
                            return (origin + displacement, left * size);
                        }
                        cursor.advance(block.count);
                        return (origin + displacement, size);
                    }
                    cursor.advance(block.count);
                    (child, origin)
                }
                Kind::Bytes { .. } => unreachable!("runs are never pushed"),
            };
            self.push(child, child_origin);
        }
    }
}

impl Iterator for Pieces<'_> {
    type Item = Piece;

    #[inline]
    fn next(&mut self) -> Option<Piece> {
        let remaining = self.view_end - self.view_offset;
        if remaining == 0 {
            return None;
        }
        let (start, mut len) = match self.pending.take() {
            Some(run) => run,
            None => self.next_run(),
        };
        let start = start + self.skip as i64;
        len -= self.skip;
        self.skip = 0;
        while len < remaining {
            let (next_start, next_len) = self.next_run();
            if next_start == start + len as i64 {
                len += next_len;
            } else {
                self.pending = Some((next_start, next_len));
                break;
            }
        }
        let len = len.min(remaining);
        let piece = Piece {
            file_offset: start as u64,
            len,
            view_offset: self.view_offset,
        };
        self.view_offset += len;
        Some(piece)
    }
}

impl std::iter::FusedIterator for Pieces<'_> {}

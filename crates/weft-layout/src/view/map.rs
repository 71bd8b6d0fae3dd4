//! [`View`]: a filetype tiled from a displacement (MPI file view semantics), its
//! validation, and the mappings between view offsets and file offsets.
//!
//! Tile `i` of the filetype starts at `displacement + i * extent`; the view's data is
//! the concatenation of the tiles' data bytes in typemap order. View offsets count
//! those data bytes.

use std::sync::Arc;

use super::datatype::{Datatype, Kind};
use super::ViewError;
use crate::stripe::FILE_OFFSET_MAX;

/// Most runs of one tile [`View::for_reading`] checks for an overlapping filetype.
pub const OVERLAP_RUNS_MAX: usize = 1 << 20;

/// A window onto possibly noncontiguous bytes of a file. Construction checks the MPI
/// rules for a filetype, so every mapping and iteration after that is infallible apart
/// from range checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    displacement: u64,
    filetype: Arc<Datatype>,
}

impl View {
    /// A view of `filetype` tiled from file offset `displacement`. The filetype's data
    /// bytes must sit at strictly increasing offsets, consecutive tiles must not
    /// overlap, and no data byte may fall before file offset 0.
    pub fn new(displacement: u64, filetype: Arc<Datatype>) -> Result<View, ViewError> {
        if displacement > FILE_OFFSET_MAX {
            return Err(ViewError::Displacement(displacement));
        }
        if filetype.size_bytes() > 0 {
            if !filetype.is_monotonic() {
                return Err(ViewError::NotMonotonic);
            }
            if filetype.true_extent() > filetype.extent() {
                return Err(ViewError::TilesOverlap {
                    true_extent: filetype.true_extent(),
                    extent: filetype.extent(),
                });
            }
            if i128::from(displacement) + i128::from(filetype.true_lb()) < 0 {
                return Err(ViewError::NegativeFileOffset {
                    displacement,
                    true_lb: filetype.true_lb(),
                });
            }
        }
        Ok(View {
            displacement,
            filetype,
        })
    }

    /// A view for reading only, whose filetype may overlap itself: MPI (13.3) forbids
    /// overlapping data only in a file opened for writing. The runs of the typemap must
    /// still start at nondecreasing offsets (checked over at most
    /// `OVERLAP_RUNS_MAX` runs of one tile, else refused), and no data byte may fall
    /// before file offset 0. Only [`View::pieces`] and [`View::view_to_file`] are meant
    /// for such a view (its pieces come in typemap order, which is not file order);
    /// requests, server views and `file_to_view` assume a monotonic filetype.
    pub fn for_reading(displacement: u64, filetype: Arc<Datatype>) -> Result<View, ViewError> {
        if filetype.is_monotonic() || filetype.size_bytes() == 0 {
            return View::new(displacement, filetype);
        }
        if displacement > FILE_OFFSET_MAX {
            return Err(ViewError::Displacement(displacement));
        }
        if i128::from(displacement) + i128::from(filetype.true_lb()) < 0 {
            return Err(ViewError::NegativeFileOffset {
                displacement,
                true_lb: filetype.true_lb(),
            });
        }
        let view = View {
            displacement,
            filetype,
        };
        let mut last = 0u64;
        for (n, piece) in view.pieces(0, view.filetype.size_bytes())?.enumerate() {
            if n >= OVERLAP_RUNS_MAX || piece.file_offset < last {
                return Err(ViewError::NotMonotonic);
            }
            last = piece.file_offset;
        }
        Ok(view)
    }

    /// The whole file: view offset equals file offset (the view of a file nobody set a
    /// view on).
    pub fn contiguous() -> View {
        let byte = Datatype::bytes(1).expect("one byte is a valid datatype");
        View {
            displacement: 0,
            filetype: byte,
        }
    }

    /// The PVFS partition: `block_len_bytes` bytes every `stride_bytes` bytes, from file
    /// offset `offset`.
    pub fn partition(offset: u64, block_len_bytes: u64, stride_bytes: u64) -> Result<View, ViewError> {
        if block_len_bytes == 0 {
            return Err(ViewError::InvalidArgument("partition block length 0"));
        }
        if stride_bytes < block_len_bytes {
            return Err(ViewError::InvalidArgument(
                "partition stride below its block length",
            ));
        }
        let stride = i64::try_from(stride_bytes).map_err(|_| ViewError::Overflow {
            what: "partition stride",
        })?;
        let block = Datatype::bytes(block_len_bytes)?;
        View::new(offset, Datatype::resized(&block, 0, stride)?)
    }

    pub fn displacement(&self) -> u64 {
        self.displacement
    }

    pub fn filetype(&self) -> &Arc<Datatype> {
        &self.filetype
    }

    /// File offset of view byte `view_offset`.
    pub fn view_to_file(&self, view_offset: u64) -> Result<u64, ViewError> {
        let size = self.filetype.size_bytes();
        if size == 0 {
            return Err(ViewError::EmptyView);
        }
        let tile = view_offset / size;
        let inside = offset_of_data(&self.filetype, view_offset % size);
        let file_offset = i128::from(self.displacement)
            + i128::from(tile) * i128::from(self.filetype.extent())
            + i128::from(inside);
        if file_offset >= i128::from(FILE_OFFSET_MAX) {
            return Err(ViewError::RangeOverflow { view_offset, len: 1 });
        }
        Ok(file_offset as u64)
    }

    /// View offset of the first view byte at or after file offset `file_offset` (0 for
    /// an empty view).
    pub fn file_to_view(&self, file_offset: u64) -> u64 {
        let size = self.filetype.size_bytes();
        if size == 0 {
            return 0;
        }
        let extent = i128::from(self.filetype.extent());
        let true_ub = i128::from(self.filetype.true_ub());
        let relative = i128::from(file_offset) - i128::from(self.displacement);
        if relative <= i128::from(self.filetype.true_lb()) {
            return 0;
        }
        // The first tile whose data ends after the offset (tiles are in file order, and a
        // nonempty valid view has extent >= true extent >= 1).
        let tile = ((relative - true_ub).div_euclid(extent) + 1).max(0);
        let inside = relative - tile * extent;
        let index = data_at_or_after(&self.filetype, inside as i64);
        let view_offset = tile * i128::from(size) + i128::from(index);
        // View byte j lies at file offset >= j (offsets increase from >= 0), so the first
        // view byte at or after `file_offset` has a view offset <= `file_offset`.
        debug_assert!(view_offset <= i128::from(file_offset));
        view_offset as u64
    }

    /// Checks that `[view_offset, view_offset + len)` exists and maps below the largest
    /// file offset. Tiles are in file order, so checking the last byte suffices.
    pub(crate) fn check_interval(&self, view_offset: u64, len: u64) -> Result<(), ViewError> {
        if len == 0 {
            return Ok(());
        }
        let overflow = ViewError::RangeOverflow { view_offset, len };
        let end = view_offset.checked_add(len).ok_or(overflow.clone())?;
        let last = self.view_to_file(end - 1).map_err(|error| match error {
            ViewError::RangeOverflow { .. } => overflow,
            other => other,
        })?;
        debug_assert!(last < FILE_OFFSET_MAX);
        Ok(())
    }
}

/// Offset, relative to the type's origin, of data byte `index` (< size) of `datatype`.
pub(crate) fn offset_of_data(datatype: &Datatype, mut index: u64) -> i64 {
    let mut node = datatype;
    let mut base = 0i64;
    loop {
        match &node.kind {
            Kind::Bytes { displacement } => return base + displacement + index as i64,
            Kind::Vector(vector) => {
                let child_size = vector.child.size_bytes();
                base += vector.origin_of(index / child_size);
                index %= child_size;
                node = &vector.child;
            }
            Kind::Blocks(blocks) => {
                let block = &blocks[blocks.partition_point(|b| b.data_before <= index) - 1];
                index -= block.data_before;
                let child_size = block.child.size_bytes();
                base += block.displacement + (index / child_size) as i64 * block.child.extent();
                index %= child_size;
                node = &block.child;
            }
        }
    }
}

/// Index of the first data byte of a monotonic `datatype` at or after `position`
/// (relative to the type's origin); `size_bytes` if there is none.
pub(crate) fn data_at_or_after(datatype: &Datatype, mut position: i64) -> u64 {
    let mut node = datatype;
    let mut before = 0u64;
    loop {
        if position <= node.true_lb() {
            return before;
        }
        if position >= node.true_ub() {
            return before + node.size_bytes();
        }
        match &node.kind {
            Kind::Bytes { displacement } => return before + (position - displacement) as u64,
            Kind::Vector(vector) => {
                let copy = first_copy_ending_after(vector, position);
                before += copy * vector.child.size_bytes();
                position -= vector.origin_of(copy);
                node = &vector.child;
            }
            Kind::Blocks(blocks) => {
                let index = blocks.partition_point(|b| {
                    let last_copy = b.displacement + (b.count - 1) as i64 * b.child.extent();
                    last_copy + b.child.true_ub() <= position
                });
                let block = &blocks[index];
                let copy = if block.count == 1 {
                    0
                } else {
                    let past = position - block.displacement - block.child.true_ub();
                    (past.div_euclid(block.child.extent()) + 1).max(0) as u64
                };
                before += block.data_before + copy * block.child.size_bytes();
                position -= block.displacement + copy as i64 * block.child.extent();
                node = &block.child;
            }
        }
    }
}

/// The first copy of a monotonic vector whose data ends after `position`; the caller
/// guarantees one exists. Monotonic vectors have positive strides wherever they matter.
fn first_copy_ending_after(vector: &super::datatype::Vector, position: i64) -> u64 {
    let past = position - vector.displacement - vector.child.true_ub();
    let block_len = vector.block_len;
    if vector.count == 1 {
        return 0;
    }
    if block_len == vector.count {
        return (past.div_euclid(vector.element_stride) + 1).max(0) as u64;
    }
    let last_in_block = (block_len - 1) as i64 * vector.element_stride;
    let block = ((past - last_in_block).div_euclid(vector.block_stride) + 1).max(0);
    let within = ((past - block * vector.block_stride).div_euclid(vector.element_stride) + 1).max(0);
    block as u64 * block_len + within as u64
}

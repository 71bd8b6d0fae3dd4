//! The datatype tree: its three node kinds, the bounds every node carries (size, lb,
//! extent, true bounds, monotonicity) and the normalising core constructors that all
//! MPI constructors lower onto.
//!
//! Normal form, relied on by iteration, packing and the wire form:
//! - every type whose data bytes form one ascending run is a `Bytes` leaf;
//! - an empty child never appears inside a `Vector` or `Blocks` node;
//! - a `Vector` has `count >= 2`, except one copy of a `Blocks` node moved by a
//!   displacement; it is "single block" (`block_len == count`,
//!   `block_stride == 0`) whenever its copies are evenly spaced, and it is never the
//!   parent of a single-block `Vector` that continues its own spacing;
//! - a `Blocks` node has at least two blocks, none empty, and no two neighbours that
//!   tile the same child seamlessly.
//!
//! Every bound is kept within [`TYPE_BOUND_BYTES_MAX`], checked here with i128
//! arithmetic, so walking a tree never overflows i64.

use std::collections::HashSet;
use std::sync::Arc;

use super::{ViewError, BLOCKS_TOTAL_MAX, DEPTH_MAX, TREE_BLOCKS_MAX, TYPE_BOUND_BYTES_MAX};

/// A derived datatype: a typemap of data bytes at signed offsets, plus lower bound and
/// extent used when copies of it are laid side by side. Built by the constructors in
/// this module's parent (`Datatype::bytes`, `vector`, `subarray`, `darray`, ...) and
/// shared through `Arc`.
#[derive(Debug)]
pub struct Datatype {
    pub(crate) kind: Kind,
    pub(crate) bounds: Bounds,
    /// A leaf has depth 1.
    pub(crate) depth: u8,
    pub(crate) blocks_total: u64,
}

/// The numbers MPI attaches to a type. They describe the typemap, not its tree shape, so
/// normalisation never changes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub size_bytes: u64,
    pub lb: i64,
    pub extent: i64,
    /// Lowest data byte; 0 when there is no data.
    pub true_lb: i64,
    /// One past the highest data byte; 0 when there is no data.
    pub true_ub: i64,
    /// The bounds come from `resized` (MPI's sticky lb/ub markers). Otherwise they are
    /// the data bounds (0, 0 when empty).
    pub explicit: bool,
    /// Data bytes in type order sit at strictly increasing offsets.
    pub monotonic: bool,
}

#[derive(Debug, Clone, Eq)]
pub(crate) enum Kind {
    /// `size_bytes` contiguous bytes starting at `displacement`.
    Bytes {
        displacement: i64,
    },
    Vector(Vector),
    Blocks(Arc<[Block]>),
}

/// `count` copies of `child`, grouped in blocks of `block_len`; copy `c` has its origin at
/// `displacement + (c / block_len) * block_stride + (c % block_len) * element_stride`.
/// The last block may be short (the tail of a CYCLIC distribution).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Vector {
    pub count: u64,
    pub block_len: u64,
    pub element_stride: i64,
    pub block_stride: i64,
    pub displacement: i64,
    pub child: Arc<Datatype>,
}

impl Vector {
    /// Origin of copy `copy` relative to the vector's origin. Within bounds for every
    /// `copy < count` (checked at construction), so plain arithmetic cannot overflow.
    #[inline]
    pub(crate) fn origin_of(&self, copy: u64) -> i64 {
        let block = copy / self.block_len;
        let within = copy % self.block_len;
        self.displacement + block as i64 * self.block_stride + within as i64 * self.element_stride
    }
}

/// `count` copies of `child` at `displacement + j * child.extent`: one block of an
/// indexed or struct type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    pub displacement: i64,
    pub count: u64,
    /// Data bytes of all earlier blocks of the node: lets a seek binary-search.
    pub data_before: u64,
    pub child: Arc<Datatype>,
}

impl PartialEq for Datatype {
    fn eq(&self, other: &Self) -> bool {
        // Shared subtrees are common (darray dimensions, struct fields): skip them fast.
        std::ptr::eq(self, other)
            || (self.bounds == other.bounds
                && self.depth == other.depth
                && self.blocks_total == other.blocks_total
                && self.kind == other.kind)
    }
}

impl Eq for Datatype {}

impl PartialEq for Kind {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Kind::Bytes { displacement: a }, Kind::Bytes { displacement: b }) => a == b,
            (Kind::Vector(a), Kind::Vector(b)) => a == b,
            (Kind::Blocks(a), Kind::Blocks(b)) => {
                if a.len() != b.len() {
                    return false;
                }
                // Indexed types name one child from every block: compare each pair of
                // children once, not once per block.
                let mut equal_children: Option<(*const Datatype, *const Datatype)> = None;
                for (x, y) in a.iter().zip(b.iter()) {
                    if (x.displacement, x.count, x.data_before) != (y.displacement, y.count, y.data_before) {
                        return false;
                    }
                    let pair = (Arc::as_ptr(&x.child), Arc::as_ptr(&y.child));
                    if equal_children != Some(pair) {
                        if x.child != y.child {
                            return false;
                        }
                        equal_children = Some(pair);
                    }
                }
                true
            }
            _ => false,
        }
    }
}

impl Datatype {
    /// Number of data bytes (MPI_Type_size).
    pub fn size_bytes(&self) -> u64 {
        self.bounds.size_bytes
    }

    /// Lower bound (MPI_Type_get_extent).
    pub fn lb(&self) -> i64 {
        self.bounds.lb
    }

    /// Distance between consecutive copies of this type.
    pub fn extent(&self) -> i64 {
        self.bounds.extent
    }

    /// Upper bound: `lb + extent`.
    pub fn ub(&self) -> i64 {
        self.bounds.lb + self.bounds.extent
    }

    /// Offset of the lowest data byte (MPI_Type_get_true_extent); 0 for an empty type.
    pub fn true_lb(&self) -> i64 {
        self.bounds.true_lb
    }

    /// One past the offset of the highest data byte; 0 for an empty type.
    pub fn true_ub(&self) -> i64 {
        self.bounds.true_ub
    }

    /// Span of the data bytes: `true_ub - true_lb`.
    pub fn true_extent(&self) -> i64 {
        self.bounds.true_ub - self.bounds.true_lb
    }

    /// Whether the tree has a wire form a server accepts: at most [`BLOCKS_TOTAL_MAX`]
    /// blocks (the constructors allow up to [`TREE_BLOCKS_MAX`]).
    pub fn fits_wire(&self) -> bool {
        self.blocks_total <= BLOCKS_TOTAL_MAX
    }

    /// Whether the data bytes, in type order, sit at strictly increasing offsets (the
    /// MPI requirement on a filetype).
    pub fn is_monotonic(&self) -> bool {
        self.bounds.monotonic
    }

    /// Whether the data bytes form one ascending run of `size_bytes` bytes from
    /// `true_lb`.
    pub fn is_contiguous(&self) -> bool {
        matches!(self.kind, Kind::Bytes { .. })
    }

    /// Whether the bounds were set explicitly by `resized` (MPI's sticky markers).
    pub fn has_explicit_bounds(&self) -> bool {
        self.bounds.explicit
    }

    /// Nesting depth of the normalised tree (a run of bytes is 1).
    pub fn depth(&self) -> usize {
        self.depth as usize
    }

    /// Nonempty types and types with explicit bounds contribute to their parent's bounds;
    /// an empty type without explicit bounds has an empty typemap and contributes nothing.
    pub(crate) fn has_entries(&self) -> bool {
        self.bounds.size_bytes > 0 || self.bounds.explicit
    }

    /// Offset of the run of a `Bytes` leaf, `None` for other kinds.
    pub(crate) fn run_displacement(&self) -> Option<i64> {
        match self.kind {
            Kind::Bytes { displacement } => Some(displacement),
            _ => None,
        }
    }

    /// The type with no data and no bounds (count 0).
    pub(crate) fn empty() -> Arc<Datatype> {
        Arc::new(Datatype {
            kind: Kind::Bytes { displacement: 0 },
            bounds: Bounds {
                size_bytes: 0,
                lb: 0,
                extent: 0,
                true_lb: 0,
                true_ub: 0,
                explicit: false,
                monotonic: true,
            },
            depth: 1,
            blocks_total: 0,
        })
    }

    /// `size_bytes` contiguous bytes at `displacement` (a size of 0 gives the empty type).
    pub(crate) fn run(size_bytes: u64, displacement: i64) -> Result<Arc<Datatype>, ViewError> {
        if size_bytes == 0 {
            return Ok(Datatype::empty());
        }
        let start = i128::from(displacement);
        let end = start + i128::from(size_bytes);
        check_bound(i128::from(size_bytes), "size")?;
        check_bound(start, "displacement")?;
        check_bound(end, "upper bound")?;
        Ok(Arc::new(Datatype {
            kind: Kind::Bytes { displacement },
            bounds: Bounds {
                size_bytes,
                lb: displacement,
                extent: size_bytes as i64,
                true_lb: displacement,
                true_ub: end as i64,
                explicit: false,
                monotonic: true,
            },
            depth: 1,
            blocks_total: 0,
        }))
    }

    /// The general vector node; see [`Vector`]. Normalises, so the result may be a leaf,
    /// a folded vector or (for one copy) the shifted child.
    pub(crate) fn vector_node(
        count: u64,
        block_len: u64,
        element_stride: i64,
        block_stride: i64,
        displacement: i64,
        child: &Arc<Datatype>,
    ) -> Result<Arc<Datatype>, ViewError> {
        if count == 0 || !child.has_entries() {
            return Ok(Datatype::empty());
        }
        if block_len == 0 {
            return Err(ViewError::InvalidArgument("vector block length 0 with copies"));
        }
        check_count(count)?;
        let block_len = block_len.min(count);
        let (position_min, position_max) =
            vector_position_range(count, block_len, element_stride, block_stride, displacement);
        let mut builder = BoundsBuilder::default();
        builder.add(child, position_min, position_max, count);
        let monotonic = child.bounds.monotonic
            && (child.bounds.size_bytes == 0
                || vector_is_ordered(
                    count,
                    block_len,
                    element_stride,
                    block_stride,
                    child.true_extent(),
                ));
        let bounds = builder.finish(monotonic)?;
        let shape = Datatype::vector_shape(
            count,
            block_len,
            element_stride,
            block_stride,
            displacement,
            child,
            bounds,
        )?;
        Ok(with_bounds(shape, bounds))
    }

    /// The normalised tree for a vector whose bounds are already known and valid.
    fn vector_shape(
        count: u64,
        mut block_len: u64,
        mut element_stride: i64,
        mut block_stride: i64,
        displacement: i64,
        child: &Arc<Datatype>,
        bounds: Bounds,
    ) -> Result<Arc<Datatype>, ViewError> {
        if child.bounds.size_bytes == 0 {
            // Only markers: the bounds say everything.
            return Ok(Datatype::empty());
        }
        if block_len == 1 {
            // One copy per block: the block stride is the copy spacing.
            element_stride = block_stride;
            block_len = count;
            block_stride = 0;
        } else if block_len >= count
            || i128::from(block_stride) == i128::from(block_len) * i128::from(element_stride)
        {
            block_len = count;
            block_stride = 0;
        }
        let unfolded = |element_stride, block_len, block_stride| {
            make(
                Kind::Vector(Vector {
                    count,
                    block_len,
                    element_stride,
                    block_stride,
                    displacement,
                    child: child.clone(),
                }),
                bounds,
            )
        };
        if count == 1 {
            // A shift fails for a `Blocks` child or where the child's own bounds are
            // extreme; then keep the one-copy vector rather than refuse a valid type.
            return shifted(child, displacement).or_else(|_| unfolded(0, 1, 0));
        }
        let size = child.bounds.size_bytes;
        match &child.kind {
            Kind::Bytes { displacement: inner }
                if block_len == count && i128::from(element_stride) == i128::from(size) =>
            {
                // Copies of a run placed end to end: one longer run.
                Datatype::run(bounds.size_bytes, displacement + inner)
            }
            Kind::Vector(inner)
                if inner.block_len == inner.count
                    && i128::from(element_stride)
                        == i128::from(inner.count) * i128::from(inner.element_stride) =>
            {
                // The child's copies continue our spacing: fold the two levels into one.
                // Folding recomputes bounds from the grandchild, which can only fail on
                // extreme explicit bounds; then keep the two levels.
                match (
                    count.checked_mul(inner.count),
                    block_len.checked_mul(inner.count),
                    displacement.checked_add(inner.displacement),
                ) {
                    (Some(total), Some(folded_block_len), Some(folded_displacement)) => {
                        Datatype::vector_node(
                            total,
                            folded_block_len,
                            inner.element_stride,
                            block_stride,
                            folded_displacement,
                            &inner.child,
                        )
                        .or_else(|_| unfolded(element_stride, block_len, block_stride))
                    }
                    _ => unfolded(element_stride, block_len, block_stride),
                }
            }
            _ => unfolded(element_stride, block_len, block_stride),
        }
    }

    /// The general indexed/struct node: block `k` is `count` copies of `child` at
    /// `displacement + j * child.extent`, in the order given.
    pub(crate) fn blocks_node(blocks: &[(i64, u64, Arc<Datatype>)]) -> Result<Arc<Datatype>, ViewError> {
        if blocks.len() as u64 > TREE_BLOCKS_MAX {
            return Err(ViewError::TooManyBlocks {
                count: blocks.len() as u64,
                limit: TREE_BLOCKS_MAX,
            });
        }
        let mut builder = BoundsBuilder::default();
        let mut monotonic = true;
        let mut previous_end: Option<i128> = None;
        // Blocks with data, neighbours that continue each other's tiling merged.
        let mut kept: Vec<(i64, u64, Arc<Datatype>)> = Vec::with_capacity(blocks.len());
        for (displacement, count, child) in blocks {
            if *count == 0 || !child.has_entries() {
                continue;
            }
            check_count(*count)?;
            let extent = i128::from(child.bounds.extent);
            let first = i128::from(*displacement);
            let last = first + (i128::from(*count) - 1) * extent;
            builder.add(child, first, last, *count);
            if child.bounds.size_bytes == 0 {
                continue;
            }
            let ordered_inside = *count == 1 || extent >= i128::from(child.true_extent());
            let start = first + i128::from(child.bounds.true_lb);
            let end = last + i128::from(child.bounds.true_ub);
            if !child.bounds.monotonic || !ordered_inside || previous_end.is_some_and(|p| start < p) {
                monotonic = false;
            }
            previous_end = Some(end);
            if let Some((last_displacement, last_count, last_child)) = kept.last_mut() {
                if Arc::ptr_eq(last_child, child)
                    && i128::from(*last_displacement) + i128::from(*last_count) * extent == first
                {
                    if let Some(merged) = last_count.checked_add(*count) {
                        *last_count = merged;
                        continue;
                    }
                }
            }
            kept.push((*displacement, *count, child.clone()));
        }
        let bounds = builder.finish(monotonic)?;
        match kept.len() {
            0 => return Ok(with_bounds(Datatype::empty(), bounds)),
            1 => {
                let (displacement, count, child) = &kept[0];
                let shape =
                    Datatype::vector_node(*count, *count, child.bounds.extent, 0, *displacement, child)?;
                return Ok(with_bounds(shape, bounds));
            }
            _ => {}
        }
        if blocks_are_one_run(&kept) {
            let (displacement, _, child) = &kept[0];
            let start = displacement + child.bounds.true_lb;
            return Ok(with_bounds(Datatype::run(bounds.size_bytes, start)?, bounds));
        }
        let mut data_before = 0u64;
        let stored: Vec<Block> = kept
            .into_iter()
            .map(|(displacement, count, child)| {
                let block = Block {
                    displacement,
                    count,
                    data_before,
                    child,
                };
                data_before += count * block.child.bounds.size_bytes;
                block
            })
            .collect();
        make(Kind::Blocks(stored.into()), bounds)
    }

    /// The same typemap with lower bound `lb` and extent `extent`
    /// (MPI_Type_create_resized). Negative extents are refused.
    pub fn resized(child: &Arc<Datatype>, lb: i64, extent: i64) -> Result<Arc<Datatype>, ViewError> {
        if extent < 0 {
            return Err(ViewError::NegativeExtent(extent));
        }
        check_bound(i128::from(lb), "lower bound")?;
        check_bound(i128::from(lb) + i128::from(extent), "upper bound")?;
        let bounds = Bounds {
            lb,
            extent,
            explicit: true,
            ..child.bounds
        };
        Ok(with_bounds(child.clone(), bounds))
    }
}

/// `child` moved by `displacement`, keeping its tree shape. A `Blocks` child is not
/// moved (that would copy its block list, and a decoder fed many one-copy vectors over
/// one large node would do quadratic work): the caller keeps a one-copy vector.
fn shifted(child: &Arc<Datatype>, displacement: i64) -> Result<Arc<Datatype>, ViewError> {
    if displacement == 0 {
        return Ok(child.clone());
    }
    match &child.kind {
        Kind::Bytes { displacement: inner } => {
            Datatype::run(child.bounds.size_bytes, add_displacement(*inner, displacement)?)
        }
        Kind::Vector(v) => Datatype::vector_node(
            v.count,
            v.block_len,
            v.element_stride,
            v.block_stride,
            add_displacement(v.displacement, displacement)?,
            &v.child,
        ),
        Kind::Blocks(_) => Err(ViewError::InvalidArgument("blocks are not shifted")),
    }
}

fn add_displacement(a: i64, b: i64) -> Result<i64, ViewError> {
    let sum = i128::from(a) + i128::from(b);
    check_bound(sum, "displacement")?;
    Ok(sum as i64)
}

/// Whether the kept blocks of a `Blocks` node form one ascending run of bytes.
fn blocks_are_one_run(kept: &[(i64, u64, Arc<Datatype>)]) -> bool {
    let mut next_start: Option<i128> = None;
    for (displacement, count, child) in kept {
        let Some(inner) = child.run_displacement() else {
            return false;
        };
        let size = i128::from(child.bounds.size_bytes);
        if *count > 1 && i128::from(child.bounds.extent) != size {
            return false;
        }
        let start = i128::from(*displacement) + i128::from(inner);
        if next_start.is_some_and(|n| n != start) {
            return false;
        }
        next_start = Some(start + i128::from(*count) * size);
    }
    true
}

/// Smallest and largest copy origin of a vector (relative to the vector's origin). The
/// origins form a rectangle of full blocks plus a short last row, so the extremes are
/// among its corners.
pub(crate) fn vector_position_range(
    count: u64,
    block_len: u64,
    element_stride: i64,
    block_stride: i64,
    displacement: i64,
) -> (i128, i128) {
    let position = |block: u64, within: u64| {
        i128::from(displacement)
            + i128::from(block) * i128::from(block_stride)
            + i128::from(within) * i128::from(element_stride)
    };
    let full_blocks = count / block_len;
    let tail = count % block_len;
    let mut corners = Vec::with_capacity(6);
    if full_blocks > 0 {
        corners.extend([
            position(0, 0),
            position(0, block_len - 1),
            position(full_blocks - 1, 0),
            position(full_blocks - 1, block_len - 1),
        ]);
    }
    if tail > 0 {
        corners.extend([position(full_blocks, 0), position(full_blocks, tail - 1)]);
    }
    let min = corners.iter().copied().min().unwrap_or(0);
    let max = corners.iter().copied().max().unwrap_or(0);
    (min, max)
}

/// Whether copies of a monotonic child with nonzero data span `true_extent` follow each
/// other without going back or overlapping.
fn vector_is_ordered(
    count: u64,
    block_len: u64,
    element_stride: i64,
    block_stride: i64,
    true_extent: i64,
) -> bool {
    let true_extent = i128::from(true_extent);
    let inside = block_len < 2 || i128::from(element_stride) >= true_extent;
    // The last copy of a full block against the first of the next.
    let between = count <= block_len
        || i128::from(block_stride) >= (i128::from(block_len) - 1) * i128::from(element_stride) + true_extent;
    inside && between
}

/// Collects the bounds of a node from its copies of children, following MPI: if any
/// child carries explicit (sticky) bounds, only those count for lb and ub.
#[derive(Default)]
struct BoundsBuilder {
    size_bytes: u128,
    natural: Option<(i128, i128)>,
    explicit: Option<(i128, i128)>,
    data: Option<(i128, i128)>,
}

impl BoundsBuilder {
    /// Adds `copies` copies of `child` whose origins range over
    /// `[position_min, position_max]`.
    fn add(&mut self, child: &Datatype, position_min: i128, position_max: i128, copies: u64) {
        let b = &child.bounds;
        if !child.has_entries() {
            return;
        }
        self.size_bytes = self
            .size_bytes
            .saturating_add(u128::from(copies) * u128::from(b.size_bytes));
        let lb = position_min + i128::from(b.lb);
        let ub = position_max + i128::from(b.lb) + i128::from(b.extent);
        let slot = if b.explicit {
            &mut self.explicit
        } else {
            &mut self.natural
        };
        widen(slot, lb, ub);
        if b.size_bytes > 0 {
            widen(
                &mut self.data,
                position_min + i128::from(b.true_lb),
                position_max + i128::from(b.true_ub),
            );
        }
    }

    fn finish(self, monotonic: bool) -> Result<Bounds, ViewError> {
        check_bound(i128::try_from(self.size_bytes).unwrap_or(i128::MAX), "size")?;
        let ((lb, ub), explicit) = match (self.explicit, self.natural) {
            (Some(bounds), _) => (bounds, true),
            (None, Some(bounds)) => (bounds, false),
            (None, None) => ((0, 0), false),
        };
        let (true_lb, true_ub) = self.data.unwrap_or((0, 0));
        for (value, what) in [
            (lb, "lower bound"),
            (ub, "upper bound"),
            (true_lb, "true lower bound"),
            (true_ub, "true upper bound"),
        ] {
            check_bound(value, what)?;
        }
        Ok(Bounds {
            size_bytes: self.size_bytes as u64,
            lb: lb as i64,
            extent: (ub - lb) as i64,
            true_lb: true_lb as i64,
            true_ub: true_ub as i64,
            explicit,
            monotonic,
        })
    }
}

fn widen(slot: &mut Option<(i128, i128)>, low: i128, high: i128) {
    *slot = Some(match *slot {
        Some((l, h)) => (l.min(low), h.max(high)),
        None => (low, high),
    });
}

/// Counts are kept below 2^60 so that count times stride fits i128 with room to add.
fn check_count(count: u64) -> Result<(), ViewError> {
    check_bound(i128::from(count), "count")
}

pub(crate) fn check_bound(value: i128, what: &'static str) -> Result<(), ViewError> {
    if value.abs() <= i128::from(TYPE_BOUND_BYTES_MAX) {
        Ok(())
    } else {
        Err(ViewError::Overflow { what })
    }
}

/// `node` with its bounds replaced (the tree shape is shared).
fn with_bounds(node: Arc<Datatype>, bounds: Bounds) -> Arc<Datatype> {
    if node.bounds == bounds {
        return node;
    }
    Arc::new(Datatype {
        kind: node.kind.clone(),
        bounds,
        depth: node.depth,
        blocks_total: node.blocks_total,
    })
}

/// A new inner node, checking the depth and block-count limits.
fn make(kind: Kind, bounds: Bounds) -> Result<Arc<Datatype>, ViewError> {
    let (child_depth, blocks_total) = match &kind {
        Kind::Bytes { .. } => (0, 0),
        Kind::Vector(v) => (v.child.depth, 1 + v.child.blocks_total),
        Kind::Blocks(blocks) => {
            // A child shared by many blocks (indexed types) is walked as one subtree.
            let mut seen = HashSet::with_capacity(blocks.len());
            let mut total = blocks.len() as u64;
            for block in blocks.iter() {
                if seen.insert(Arc::as_ptr(&block.child)) {
                    total = total.saturating_add(block.child.blocks_total);
                }
            }
            let depth = blocks.iter().map(|b| b.child.depth).max().unwrap_or(0);
            (depth, total)
        }
    };
    let depth = usize::from(child_depth) + 1;
    if depth > DEPTH_MAX {
        return Err(ViewError::TooDeep { depth });
    }
    if blocks_total > TREE_BLOCKS_MAX {
        return Err(ViewError::TooManyBlocksTotal {
            count: blocks_total,
            limit: TREE_BLOCKS_MAX,
        });
    }
    Ok(Arc::new(Datatype {
        kind,
        bounds,
        depth: depth as u8,
        blocks_total,
    }))
}

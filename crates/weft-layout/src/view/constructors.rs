//! The MPI datatype constructors (contiguous, vector, hvector, indexed, hindexed,
//! indexed_block, hindexed_block, struct, subarray, darray), lowered onto the three
//! node kinds of `datatype`. Strides and displacements "in extents" are multiplied out
//! here, with overflow checks, so the tree only knows bytes.

use std::sync::Arc;

use super::datatype::{check_bound, Datatype};
use super::ViewError;

/// Storage order of a multidimensional array (MPI_ORDER_C, MPI_ORDER_FORTRAN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// Row-major: the last dimension varies fastest.
    C,
    /// Column-major: the first dimension varies fastest.
    Fortran,
}

/// How one dimension of a darray is dealt to the processes of its grid dimension.
/// `None` in a block size means MPI_DISTRIBUTE_DFLT_DARG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Not distributed: the grid dimension must have one process.
    None,
    /// Contiguous blocks, one per process; default block size `ceil(gsize / psize)`.
    Block(Option<u64>),
    /// Blocks dealt round robin; default block size 1.
    Cyclic(Option<u64>),
}

/// One field of a struct type: `block_len` copies of `datatype` from `displacement_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub block_len: u64,
    pub displacement_bytes: i64,
    pub datatype: Arc<Datatype>,
}

impl Datatype {
    /// `len_bytes` contiguous bytes: the base element of every type (0 gives the empty
    /// type).
    pub fn bytes(len_bytes: u64) -> Result<Arc<Datatype>, ViewError> {
        Datatype::run(len_bytes, 0)
    }

    /// `count` copies of `child` laid at its extent (MPI_Type_contiguous).
    pub fn contiguous(count: u64, child: &Arc<Datatype>) -> Result<Arc<Datatype>, ViewError> {
        Datatype::vector_node(count, count, child.extent(), 0, 0, child)
    }

    /// `count` blocks of `block_len` copies, block starts `stride` child extents apart
    /// (MPI_Type_vector).
    pub fn vector(
        count: u64,
        block_len: u64,
        stride: i64,
        child: &Arc<Datatype>,
    ) -> Result<Arc<Datatype>, ViewError> {
        let stride_bytes = in_extents(stride, child, "vector stride")?;
        Datatype::hvector(count, block_len, stride_bytes, child)
    }

    /// As [`Datatype::vector`] with the stride in bytes (MPI_Type_create_hvector).
    pub fn hvector(
        count: u64,
        block_len: u64,
        stride_bytes: i64,
        child: &Arc<Datatype>,
    ) -> Result<Arc<Datatype>, ViewError> {
        let copies = count
            .checked_mul(block_len)
            .ok_or(ViewError::Overflow { what: "vector count" })?;
        Datatype::vector_node(copies, block_len, child.extent(), stride_bytes, 0, child)
    }

    /// Blocks of `block_lens[k]` copies at `displacements[k]` child extents
    /// (MPI_Type_indexed).
    pub fn indexed(
        block_lens: &[u64],
        displacements: &[i64],
        child: &Arc<Datatype>,
    ) -> Result<Arc<Datatype>, ViewError> {
        let bytes = displacements_in_extents(displacements, child)?;
        Datatype::hindexed(block_lens, &bytes, child)
    }

    /// As [`Datatype::indexed`] with displacements in bytes (MPI_Type_create_hindexed).
    pub fn hindexed(
        block_lens: &[u64],
        displacements_bytes: &[i64],
        child: &Arc<Datatype>,
    ) -> Result<Arc<Datatype>, ViewError> {
        same_len("displacements", block_lens.len(), displacements_bytes.len())?;
        check_block_count(block_lens.len())?;
        let blocks: Vec<_> = block_lens
            .iter()
            .zip(displacements_bytes)
            .map(|(&count, &displacement)| (displacement, count, child.clone()))
            .collect();
        Datatype::blocks_node(&blocks)
    }

    /// Blocks of `block_len` copies at `displacements[k]` child extents
    /// (MPI_Type_create_indexed_block).
    pub fn indexed_block(
        block_len: u64,
        displacements: &[i64],
        child: &Arc<Datatype>,
    ) -> Result<Arc<Datatype>, ViewError> {
        let bytes = displacements_in_extents(displacements, child)?;
        Datatype::hindexed_block(block_len, &bytes, child)
    }

    /// As [`Datatype::indexed_block`] with displacements in bytes
    /// (MPI_Type_create_hindexed_block).
    pub fn hindexed_block(
        block_len: u64,
        displacements_bytes: &[i64],
        child: &Arc<Datatype>,
    ) -> Result<Arc<Datatype>, ViewError> {
        check_block_count(displacements_bytes.len())?;
        let blocks: Vec<_> = displacements_bytes
            .iter()
            .map(|&displacement| (displacement, block_len, child.clone()))
            .collect();
        Datatype::blocks_node(&blocks)
    }

    /// Fields of different types at byte displacements (MPI_Type_create_struct). The
    /// typemap keeps field order, so the result may be non-monotonic.
    pub fn structure(fields: &[Field]) -> Result<Arc<Datatype>, ViewError> {
        check_block_count(fields.len())?;
        let blocks: Vec<_> = fields
            .iter()
            .map(|f| (f.displacement_bytes, f.block_len, f.datatype.clone()))
            .collect();
        Datatype::blocks_node(&blocks)
    }

    /// A subarray of an array of `child` elements (MPI_Type_create_subarray): lower
    /// bound 0 and extent of the whole array.
    pub fn subarray(
        sizes: &[u64],
        subsizes: &[u64],
        starts: &[u64],
        order: Order,
        child: &Arc<Datatype>,
    ) -> Result<Arc<Datatype>, ViewError> {
        same_len("subsizes", sizes.len(), subsizes.len())?;
        same_len("starts", sizes.len(), starts.len())?;
        for (dimension, ((&size, &subsize), &start)) in sizes.iter().zip(subsizes).zip(starts).enumerate() {
            if size == 0 {
                return Err(ViewError::Dimension {
                    dimension,
                    reason: "size must be at least 1",
                });
            }
            if subsize > size || start > size - subsize {
                return Err(ViewError::Dimension {
                    dimension,
                    reason: "start + subsize exceeds size",
                });
            }
        }
        let grid = ArrayGrid::new(sizes, order, child)?;
        let mut datatype = child.clone();
        for dimension in grid.inner_to_outer() {
            let stride = grid.strides[dimension];
            let start = i128::from(starts[dimension]) * i128::from(stride);
            datatype = Datatype::vector_node(
                subsizes[dimension],
                subsizes[dimension],
                stride,
                0,
                to_i64(start, "subarray start")?,
                &datatype,
            )?;
        }
        Datatype::resized(&datatype, 0, grid.extent)
    }

    /// The part of a distributed array owned by process `rank` of `process_count`
    /// (MPI_Type_create_darray): processes form a row-major grid of `psizes`, each
    /// dimension is distributed as given, and the result has lower bound 0 and the
    /// extent of the whole array. A dimension distributed `None` needs a grid size of 1.
    pub fn darray(
        process_count: u64,
        rank: u64,
        gsizes: &[u64],
        distributions: &[Distribution],
        psizes: &[u64],
        order: Order,
        child: &Arc<Datatype>,
    ) -> Result<Arc<Datatype>, ViewError> {
        same_len("distributions", gsizes.len(), distributions.len())?;
        same_len("psizes", gsizes.len(), psizes.len())?;
        let mut grid_count = 1u64;
        for (dimension, &psize) in psizes.iter().enumerate() {
            if psize == 0 {
                return Err(ViewError::Dimension {
                    dimension,
                    reason: "process grid size must be at least 1",
                });
            }
            grid_count = grid_count.saturating_mul(psize);
        }
        if grid_count != process_count {
            return Err(ViewError::ProcessGrid {
                grid: grid_count,
                process_count,
            });
        }
        if rank >= process_count {
            return Err(ViewError::Rank { rank, process_count });
        }
        // Row-major process coordinates, whatever the array order (MPI rule).
        let mut coordinates = vec![0u64; gsizes.len()];
        let mut rest = rank;
        for dimension in (0..gsizes.len()).rev() {
            coordinates[dimension] = rest % psizes[dimension];
            rest /= psizes[dimension];
        }
        let mut shares = Vec::with_capacity(gsizes.len());
        for dimension in 0..gsizes.len() {
            shares.push(cyclic_share(
                dimension,
                gsizes[dimension],
                distributions[dimension],
                psizes[dimension],
                coordinates[dimension],
            )?);
        }
        let grid = ArrayGrid::new(gsizes, order, child)?;
        let mut datatype = child.clone();
        for dimension in grid.inner_to_outer() {
            let share = &shares[dimension];
            if share.count == 0 {
                datatype = Datatype::empty();
                continue;
            }
            let stride = i128::from(grid.strides[dimension]);
            let block = i128::from(share.block_len);
            let block_stride = if share.count > share.block_len {
                to_i64(
                    i128::from(psizes[dimension]) * block * stride,
                    "darray block stride",
                )?
            } else {
                0
            };
            let displacement = i128::from(coordinates[dimension]) * block * stride;
            datatype = Datatype::vector_node(
                share.count,
                share.block_len,
                stride as i64,
                block_stride,
                to_i64(displacement, "darray displacement")?,
                &datatype,
            )?;
        }
        Datatype::resized(&datatype, 0, grid.extent)
    }
}

/// The elements of one darray dimension held by one process, as MPI's cyclic(): blocks
/// of `block_len` elements from `coordinate * block_len`, every `psize` blocks, `count`
/// elements in all (the last block may be short).
struct Share {
    count: u64,
    block_len: u64,
}

fn cyclic_share(
    dimension: usize,
    gsize: u64,
    distribution: Distribution,
    psize: u64,
    coordinate: u64,
) -> Result<Share, ViewError> {
    let invalid = |reason| ViewError::Dimension { dimension, reason };
    if gsize == 0 {
        return Err(invalid("global size must be at least 1"));
    }
    let block_len = match distribution {
        Distribution::None => {
            if psize != 1 {
                return Err(invalid("a dimension distributed None needs a grid size of 1"));
            }
            gsize
        }
        Distribution::Block(None) => gsize.div_ceil(psize),
        Distribution::Block(Some(block)) => {
            if block == 0 {
                return Err(invalid("block size must be at least 1"));
            }
            if u128::from(block) * u128::from(psize) < u128::from(gsize) {
                return Err(invalid("block size times grid size is below the global size"));
            }
            block
        }
        Distribution::Cyclic(None) => 1,
        Distribution::Cyclic(Some(block)) => {
            if block == 0 {
                return Err(invalid("block size must be at least 1"));
            }
            block
        }
    };
    // A block longer than the dimension is the whole dimension, held by coordinate 0.
    let block_len = block_len.min(gsize);
    let blocks_total = gsize.div_ceil(block_len);
    let blocks_mine = if coordinate < blocks_total {
        (blocks_total - 1 - coordinate) / psize + 1
    } else {
        0
    };
    let mut count = blocks_mine * block_len;
    let short_tail = gsize % block_len;
    if blocks_mine > 0 && short_tail != 0 && (blocks_total - 1) % psize == coordinate {
        // The globally last block is short and it is ours (always our last).
        count -= block_len - short_tail;
    }
    Ok(Share { count, block_len })
}

/// Byte strides of each dimension of an array of `child` elements, and its extent.
struct ArrayGrid {
    strides: Vec<i64>,
    extent: i64,
    order: Order,
}

impl ArrayGrid {
    fn new(sizes: &[u64], order: Order, child: &Arc<Datatype>) -> Result<ArrayGrid, ViewError> {
        if sizes.is_empty() {
            return Err(ViewError::InvalidArgument(
                "an array needs at least one dimension",
            ));
        }
        let mut strides = vec![0i64; sizes.len()];
        let mut stride = i128::from(child.extent());
        let dimensions: Vec<usize> = match order {
            Order::C => (0..sizes.len()).rev().collect(),
            Order::Fortran => (0..sizes.len()).collect(),
        };
        for &dimension in &dimensions {
            strides[dimension] = to_i64(stride, "array stride")?;
            stride *= i128::from(sizes[dimension]);
            check_bound(stride, "array extent")?;
        }
        Ok(ArrayGrid {
            strides,
            extent: stride as i64,
            order,
        })
    }

    /// Dimensions from the fastest varying to the slowest.
    fn inner_to_outer(&self) -> Vec<usize> {
        match self.order {
            Order::C => (0..self.strides.len()).rev().collect(),
            Order::Fortran => (0..self.strides.len()).collect(),
        }
    }
}

fn in_extents(value: i64, child: &Arc<Datatype>, what: &'static str) -> Result<i64, ViewError> {
    to_i64(i128::from(value) * i128::from(child.extent()), what)
}

fn displacements_in_extents(displacements: &[i64], child: &Arc<Datatype>) -> Result<Vec<i64>, ViewError> {
    check_block_count(displacements.len())?;
    displacements
        .iter()
        .map(|&d| in_extents(d, child, "displacement"))
        .collect()
}

fn to_i64(value: i128, what: &'static str) -> Result<i64, ViewError> {
    i64::try_from(value).map_err(|_| ViewError::Overflow { what })
}

fn same_len(what: &'static str, expected: usize, found: usize) -> Result<(), ViewError> {
    if expected == found {
        Ok(())
    } else {
        Err(ViewError::LengthMismatch {
            what,
            expected,
            found,
        })
    }
}

fn check_block_count(count: usize) -> Result<(), ViewError> {
    if count as u64 > super::TREE_BLOCKS_MAX {
        Err(ViewError::TooManyBlocks {
            count: count as u64,
            limit: super::TREE_BLOCKS_MAX,
        })
    } else {
        Ok(())
    }
}

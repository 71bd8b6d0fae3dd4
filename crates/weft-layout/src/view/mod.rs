//! Views: compact datatype trees (MPI derived datatype semantics) that describe
//! noncontiguous accesses, their mapping onto file offsets, piece iteration (whole file
//! or one server's stripes), pack/unpack of memory-side types and the wire form.
//!
//! A [`Datatype`] is never expanded into a list of byte ranges: every operation walks
//! the tree with O(1) state per nesting level. Constructors normalise the tree (runs of
//! contiguous bytes become one leaf, regular nestings of vectors are folded) and check
//! every bound with checked arithmetic, so that iteration can use plain arithmetic.
//!
//! Files: `datatype` (the tree, its bounds and normalisation), `constructors` (the MPI
//! constructors lowered onto the tree), `map` ([`View`] and offset mapping), `iter`
//! (pieces of a view interval), `server` (pieces on one server's stripes), `slices`
//! (one server's share as one run of view bytes per stripe), `pack` (memory-side
//! pack/unpack), `window` (the same walk over a buffer holding a stretch of the
//! file), `wire` (binary form).

mod constructors;
mod datatype;
mod iter;
mod map;
mod pack;
mod server;
mod slices;
mod window;
mod wire;

pub use constructors::{Distribution, Field, Order};
pub use datatype::Datatype;
pub use iter::{Piece, Pieces};
pub use map::View;
pub use pack::{pack, unpack};
pub use server::{ServerPiece, ServerPieces};
pub use slices::{StripeSlice, StripeSlices};
pub use wire::WIRE_VERSION;

/// Deepest nesting of a datatype tree (a leaf has depth 1).
pub const DEPTH_MAX: usize = 16;
/// Most blocks (indexed blocks or struct fields) in one node of a datatype's wire form
/// (what a server decodes).
pub const BLOCKS_PER_NODE_MAX: usize = 65_536;
/// Most blocks summed over a whole tree in its wire form (a child shared by several
/// blocks of one node counts once; a vector node counts as one block).
pub const BLOCKS_TOTAL_MAX: u64 = 65_536;
/// Most blocks, in one node or summed over the tree as for [`BLOCKS_TOTAL_MAX`], of a
/// datatype built by the constructors (on a client, from an MPI datatype): HDF5's point
/// selections make one block per point. A tree over the wire limits is valid for every
/// local walk but has no wire form ([`Datatype::fits_wire`]): a view of it is not
/// registered with the servers, its accesses go as offset lists.
pub const TREE_BLOCKS_MAX: u64 = 1 << 22;
/// Largest magnitude of any bound, extent, stride position or size of a datatype
/// (2^60 bytes): keeps every sum of positions met while walking a tree inside i64.
pub const TYPE_BOUND_BYTES_MAX: i64 = 1 << 60;
/// Most nodes in one encoded datatype: every node but the root fills a block or vector
/// slot of another, and those slots are bounded by [`BLOCKS_TOTAL_MAX`].
pub const WIRE_NODES_MAX: usize = BLOCKS_TOTAL_MAX as usize + 1;

/// What went wrong building, validating, mapping, packing or decoding a view.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ViewError {
    #[error("{what} runs past the datatype bound of 2^60 bytes")]
    Overflow { what: &'static str },
    #[error("datatype nesting depth {depth} exceeds {DEPTH_MAX}")]
    TooDeep { depth: usize },
    #[error("{count} blocks in one node exceed {limit}")]
    TooManyBlocks { count: u64, limit: u64 },
    #[error("{count} blocks in the whole datatype exceed {limit}")]
    TooManyBlocksTotal { count: u64, limit: u64 },
    #[error("argument lists differ in length: {what} has {found}, expected {expected}")]
    LengthMismatch {
        what: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    #[error("extent {0} is negative")]
    NegativeExtent(i64),
    #[error("dimension {dimension}: {reason}")]
    Dimension { dimension: usize, reason: &'static str },
    #[error("rank {rank} is not below the process count {process_count}")]
    Rank { rank: u64, process_count: u64 },
    #[error("the process grid holds {grid} processes, not {process_count}")]
    ProcessGrid { grid: u64, process_count: u64 },
    #[error("filetype offsets are not monotonically increasing (MPI requires nondecreasing, non-overlapping file offsets)")]
    NotMonotonic,
    #[error("filetype data spans {true_extent} bytes, more than its extent {extent}: tiles would overlap")]
    TilesOverlap { true_extent: i64, extent: i64 },
    #[error("view displacement {displacement} with filetype true lower bound {true_lb} reaches a negative file offset")]
    NegativeFileOffset { displacement: u64, true_lb: i64 },
    #[error("view displacement {0} is past the largest file offset 2^62")]
    Displacement(u64),
    #[error("the view holds no data bytes, so no nonempty interval exists")]
    EmptyView,
    #[error("view interval at {view_offset} with length {len} runs past the largest file offset 2^62")]
    RangeOverflow { view_offset: u64, len: u64 },
    #[error("server index {server_index} is not below the stripe count {stripe_count}")]
    ServerIndex {
        server_index: usize,
        stripe_count: usize,
    },
    #[error("memory type spans bytes [{lowest}, {highest}) but the buffer holds {buffer_len}")]
    OutOfBounds {
        lowest: i128,
        highest: i128,
        buffer_len: usize,
    },
    #[error("stream range at {offset} with length {len} is past the {stream_len} data bytes")]
    StreamRange { offset: u64, len: u64, stream_len: u128 },
    #[error("wire form: {0}")]
    Decode(&'static str),
}

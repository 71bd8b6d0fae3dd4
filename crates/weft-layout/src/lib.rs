//! Weft's pure core: identifiers, striping layouts, views and piece iteration.
//!
//! Invariant: this crate does no I/O and knows nothing of sockets, MPI or servers
//! beyond their identifiers.
//!
//! # Code map
//!
//! Pure striping math (`stripe.rs`: which server holds a byte, local offsets, local sizes
//! after truncate, size derived from local extents, stripe pieces of a range in file
//! order, per server) and views (`view/`): MPI-style datatype trees (contiguous, vector,
//! indexed, subarray, darray, struct, resized), the `View` (displacement + tiled
//! filetype) with view↔file offset mapping, lazy piece iteration in file order (whole
//! file or intersected with one server's stripes), one server's share of an interval as
//! one slice of consecutive view bytes per stripe (`view/slices.rs`), pack/unpack for
//! memory-side types, and a bounded wire form. Trees built by the constructors may hold
//! up to 2^22 blocks (`TREE_BLOCKS_MAX`: HDF5's point selections make one block per
//! point), the wire form, which servers decode, at most 65,536 (`BLOCKS_TOTAL_MAX`): a
//! tree past that (`Datatype::fits_wire`) is walked locally but never registered (the
//! client's `set_view_to` refuses it, and weft-mpiio's accesses through it go as offset
//! lists). `View::for_reading` admits a filetype whose data overlap (MPI allows it on a
//! file opened read-only), walked in typemap order only. `redundancy.rs`: replicated layouts' copies
//! and stale pieces, their placement and the piece map (see the guide's internals,
//! "Redundancy").

pub mod ids;
pub mod redundancy;
pub mod stripe;
pub mod view;

pub use ids::{InodeId, ServerId};
pub use redundancy::{Redundancy, Replication};
pub use stripe::{CacheMapping, CacheMode, Layout, LayoutError, LayoutRequest, StripePiece};

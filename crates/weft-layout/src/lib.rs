//! Weft's pure core: identifiers, striping layouts, views and piece iteration.
//!
//! Invariant: this crate does no I/O and knows nothing of sockets, MPI or servers
//! beyond their identifiers.

pub mod ids;
pub mod redundancy;
pub mod stripe;
pub mod view;

pub use ids::{InodeId, ServerId};
pub use redundancy::{Redundancy, Replication};
pub use stripe::{CacheMapping, CacheMode, Layout, LayoutError, LayoutRequest, StripePiece};

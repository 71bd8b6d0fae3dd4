//! The io role: each file's stripes on this server live in one local object file per
//! inode (PVFS), and requests name file ranges, or an interval of a view registered on
//! the connection (Clusterfile view I/O), whose pieces on this server travel as one
//! stream in file order. The server finds its pieces itself and moves them with few
//! large object I/Os (`sieve`).
//!
//! Invariant: an io server needs no metadata: every request carries the striping it
//! needs, and an object exists exactly when the manager created it and has not yet
//! removed it, so I/O to a removed file is refused rather than recreating it.

mod append;
mod counters;
mod extent_lock;
mod objects;
mod service;
mod sieve;
mod views;

pub use append::{APPEND_LOCKS_MAX, APPEND_LOCK_HOLD_MAX};
pub use counters::{io_counts, IoCounts};
pub use extent_lock::{
    EXTENT_LOCKS_MAX, EXTENT_LOCKS_PER_CONNECTION_MAX, EXTENT_LOCK_HOLD_MAX, EXTENT_LOCK_RANGES_MAX,
};
pub use objects::{ObjectStore, REAP_MIN_BYTES, SLOW_FREE_MAX};
pub use service::{ranges_stream_len, view_slices, IoService, WRITE_STALL_MAX};
pub use views::ViewRegistry;

//! I/O traces of Weft clients and the trace-driven cache simulator, pure (no I/O: the
//! recorder in weft-client and the `weft` command do the files).
//!
//! - [`format`]: the binary trace format (versioned header, length-framed records) and
//!   its bounded reader. A trace records, per process, the original requests of every
//!   MPI-IO call (a view interval, or file ranges as strided runs) and the requests
//!   actually sent to Weft after collective aggregation.
//! - [`runs`]: file ranges folded into strided runs.
//! - [`text`]: a trace as text (`weft trace show`).
//! - [`refs`]: the block reference streams a cache would see: aggregated, and the
//!   original one of collective-I/O-aware caching.
//! - [`sim`]: replaying a stream through weft-cache's replacement policies.
//! - [`synth`]: traces of the benchmark workloads (MPI-Tile-IO, IOR, mpi-io-test)
//!   generated without running them, for any number of processes.

#![forbid(unsafe_code)]

pub mod format;
pub mod refs;
pub mod runs;
pub mod sim;
pub mod synth;
pub mod text;

pub use format::{
    encode_header, CallId, Encoder, FileRecord, Flags, Header, Reader, Record, RequestRecord, Shape, Side,
    TargetKind, TraceError, FORMAT_VERSION,
};
pub use refs::{build, Ops, Ref, RefKind, RefOptions, Refs, RefsError};
pub use runs::{Run, RunsBuilder};
pub use sim::{simulate, simulate_all, MappingKind, SimConfig, SimError, SimResult, Stream, Unrequested};

//! I/O traces of Weft clients and the trace-driven cache simulator, pure (no I/O: the
//! recorder in weft-client and the `weft` command do the files).
//!
//! - [`mod@format`]: the binary trace format (versioned header, length-framed records) and
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
//!
//! # Code map
//!
//! I/O traces and the trace-driven cache simulator, pure (the recorder in weft-client and
//! the `weft` command do the files). `format.rs`: the trace format, a versioned header then
//! length-framed records (file layouts, views in weft-layout's wire form, requests as a
//! view interval or strided runs, notes), LEB128 varints, time as deltas; a bounded
//! reader that stops at the first damaged record and keeps what came before. `runs.rs`:
//! ranges folded into runs `(offset, len, stride, count)`. `text.rs`: `weft trace show`.
//! `refs.rs`: the block reference streams a cache would see, built from all processes'
//! traces merged by time: aggregated (every sent request's blocks, unasked ones marked)
//! and original (every process's own requests; blocks aggregation fetched that its call
//! never asked for marked extra). `sim.rs`: replays a stream through weft-cache's policies
//! (`policy::access`), per cache manager (HDC mapping), counting hits, bytes and unasked
//! blocks fetched; runs many configurations on threads. `synth.rs`: the tile, IOR and
//! mpi-io-test workloads' traces for any number of processes, with weft-mpiio's
//! two_phase aggregation modelled. A crate of its own rather than a module of weft-cache:
//! the format is shared by writers (weft-client, weft-mpiio) and readers (`weft`), none of
//! which needs the cache store, and the simulator sits on top of weft-cache as a user of
//! its policies, like the cache role.

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

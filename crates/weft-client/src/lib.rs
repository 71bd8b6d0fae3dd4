//! Weft's native client: namespace operations through the metadata manager, and file
//! reads and writes split by stripe and sent to all io servers at once, with several
//! requests in flight per server. The manager is never on the read/write path.
//!
//! Noncontiguous access: a file handle takes a view (`File::set_view`,
//! `File::set_partition`), registered once with each server, and `read_view` /
//! `write_view` then move view intervals, each server gathering or scattering its own
//! pieces; irregular accesses use offset-length lists (`write_list`, `read_list`).
//! `write_view_scheduled` / `read_view_scheduled` choose the order in which the servers
//! are visited ([`Schedule`]: all at once, in order, or Clusterfile's decentralised
//! schedule for collective I/O).
//!
//! ```no_run
//! let client = weft_client::Client::from_env()?;
//! let file = client.create("/results.dat", &weft_client::CreateOptions::default())?;
//! file.write_at(0, b"hello")?;
//! file.sync()?;
//! # Ok::<(), weft_client::ClientError>(())
//! ```
//!
//! # Code map
//!
//! The native client library. `connection.rs`: what every handle made from one client
//! shares (the pool, the servers' chosen addresses, the route to the manager);
//! `connection/replay.rs`: every namespace change goes `Tracked` (64
//! slots); requests answered and not yet durable are kept (4,096 / 8 MiB, past which the
//! client waits for a `CommitMetadata`) and replayed in their order when the manager's
//! epoch (the connection's incarnation) changes, before any other request, pipelined
//! ones included (`Inner::meta_connection`); a request whose answer was lost is sent again
//! with the same slot and number while the manager restarts (`WEFT_RESTART_WAIT_MS`, 15 s);
//! `commit_metadata` (so `File::sync`) skips the manager when every answer of this client
//! is durable. `client/`: discovery, credentials (`mod.rs`; its calls by subject:
//! `attrs.rs` attributes with sizes, `namespace.rs` namespace changes and listings,
//! `open.rs` create and open, `locks.rs` record locks and lock sessions) (and the job id,
//! `WEFT_JOB` or the batch system's, in the handshake's client name, for per-job metrics), namespace
//! operations, batched size derivation for listings, `stat_many` (many names of one
//! directory: one `LookupMany` per 4,096 names, then one size request per io server),
//! `readdir_plus_page` (`ls -l`: one
//! round trip to the manager per page, one to each io server for the page's sizes; files
//! whose objects went meanwhile are left out rather than failing the listing); `open_handoff`
//! opens, with no request to the manager, a file another process of the job opened
//! (`File::handoff`: the open's answer, versioned; the kind and this process's permission are
//! checked locally, as `open` checks them; `File::handoff_with_capability` adds the
//! handle's capability and its uid, adopted by a receiver of the same uid, so that it
//! needs no grant of its own; refused or expired, it is asked for as usual; the handoff's bytes are `handoff.rs`'s). `file/mod.rs`: the data path (segments
//! of whole stripe rows, a window of requests in flight per server, every server's window
//! stepped in turn from the calling thread by `drive.rs` (a call of 16 MiB or more spreads the
//! servers over at most 4 threads, the caller included, however wide the striping), writev from
//! the caller's buffer; reads received by the threads reading the connections straight into
//! the caller's buffer through reply sinks, with no staging copy; `append`: under the
//! file's append lock, the end from every server's extent, then the write). `file/view_io.rs`: file
//! views (`set_view`, `set_partition`), registered lazily per server connection and
//! again after a reconnect; `read_view`/`write_view` cut each server's share into
//! requests slice by slice (one slice of the caller's buffer per stripe, sent by writev
//! and received by reply sinks), each server's share a steppable `Share` that a
//! `Schedule` drives: every server at once (stepped in turn by `drive.rs`, as the
//! contiguous calls are), one after another, or the
//! decentralised schedule (one thread, step `j` to server `(rank + j) mod n`;
//! `read_view_scheduled`/`write_view_scheduled`); `read_view_into`/`write_view_from` for memory laid out
//! by a datatype (staged through pack/unpack unless contiguous). `list_io.rs`:
//! `read_list`/`write_list`, each server sent only the ranges touching it. `file/replica.rs`: replicated
//! files below all of these (each slot's connection from `File::connection_of`; writes to
//! every fresh copy, reads falling back to another, stale pieces recorded at the manager).
//! `extent_lock.rs`: `File::lock_extents`, an access's ranges cut by the striping and
//! locked at each io server holding some (in server id order, retried while busy up to the
//! request timeout), released by the returned `ExtentLock` (or its drop).
//! `gather.rs`: a request's bulk data from small pieces (staged) and large ones
//! (borrowed). `cache_route.rs`: a cached file's managers and block size from the
//! cluster's `CacheTier` (aligned: the io servers' own managers if all have one, else the
//! largest factor or multiple of the stripe count among the separate managers; hashed:
//! all managers; delegated files always aligned; `File::use_delegates`: one handle's
//! blocks over job-scoped delegates known by address, block `x` to delegate `x mod n`);
//! `File::data_request` wraps a file's
//! reads and writes in `ViaCache` with the incarnation the handle first saw per manager,
//! and size, sync (flush, then the io servers' fsync), truncate (managers first) and
//! close (write back soon) reach the managers too. `trace.rs`: trace capture (`WEFT_TRACE`, or per file from the MPI-IO
//! layer): a per-process, per-directory `Tracer` (buffered, bounded by
//! `WEFT_TRACE_MAX_BYTES`) and a per-handle `FileTrace` that records each request the
//! handle sends (contiguous, list, view I/O) and carries the MPI-IO call in progress. A
//! handle given an access pattern (`set_access_pattern`) sends its reads to cache
//! managers as `ViaCacheAware`, and falls back to plain reads for managers that refuse it.

mod cache_route;
mod client;
mod connection;
mod drive;
mod error;
mod extent_lock;
mod file;
mod gather;
mod handoff;
mod list_io;
pub mod path;
mod shared_pointer;
pub mod trace;
mod vouched;

pub use cache_route::{aligned_count, managers_of, JOB_DELEGATE_ID_BASE};
pub use client::{
    leasable, migrate_request, Changes, Client, CreateOptions, FsStats, LockTest, Made, Migrated,
    OpenOptions, PartialSizes, RebuildOptions, RebuildProgress, ScrubMismatch, ScrubProgress, SizeOf,
    SizedListing, StatfsBlocks, MIGRATE_CHUNK_BYTES, REBUILD_CHUNK_BYTES, SCRUB_CHUNK_BYTES,
    STATFS_BLOCK_BYTES,
};
pub use drive::{transfer_threads_started, TransferOptions, THREADED_CALL_BYTES_MIN, TRANSFER_THREADS_MAX};
pub use error::ClientError;
pub use extent_lock::{ranges_per_server, ExtentLock};
pub use file::replica;
pub use file::view_io::{Schedule, MEMORY_STAGE_BYTES_MAX};
pub use file::File;
pub use vouched::DataStamp;
pub use weft_layout::view::{Datatype, Distribution, Field, Order, View, ViewError};
pub use weft_layout::{CacheMapping, CacheMode, InodeId, Layout, LayoutRequest, Redundancy, ServerId};
pub use weft_proto::msg::LockStats;
pub use weft_proto::msg::REVALIDATE_STEPS_MAX;
pub use weft_proto::{
    Attr, Cred, DirEntry, ErrorCode, FileKind, Name, ObjStamped, PathStep, SetAttr, TimeSet, Timespec,
    XattrSet,
};
pub use weft_rpc::{ClientAuth, ClusterKey};

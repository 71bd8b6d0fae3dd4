//! The io role: each file's stripes on this server live in one local object file per
//! inode (PVFS), and requests name file ranges, or an interval of a view registered on
//! the connection (Clusterfile view I/O), whose pieces on this server travel as one
//! stream in file order. The server finds its pieces itself and moves them with few
//! large object I/Os (`sieve`).
//!
//! Invariant: an io server needs no metadata: every request carries the striping it
//! needs, and an object exists exactly when the manager created it and has not yet
//! removed it, so I/O to a removed file is refused rather than recreating it.
//!
//! # Code map
//!
//! The io daemon role. `objects.rs`: object files under `objects/<xx>/<inode>` with a
//! bounded cache of open handles; precreation (each object `O_EXCL`, one `syncfs` for the
//! batch, the batch's own objects removed again if any fails); after a failed fsync the server refuses writes.
//! An object holding at least `REAP_MIN_BYTES` (64 MiB) that is truncated to nothing is
//! replaced, not truncated in place: a fresh empty file made beside it is swapped with it
//! (`renameat2(RENAME_EXCHANGE)`, so an object removed meanwhile is never made again), the
//! handle cache then holds the fresh one (a `get` that opened the old file during the swap
//! does not cache it: a counter of replacements), and the old file, unlinked, goes to the
//! reaper thread, which frees its blocks (ftruncate, close); a removed big object's blocks
//! go there too. Freeing costs in proportion to the blocks (on ext4 mounted with `discard`,
//! a synchronous discard of every extent inside the truncate: 7 s for a written 4 GiB
//! file on the 2-core VM), and a client's `O_TRUNC` waited for it, past its 60 s timeout
//! under load. Writes wait for the truncate as for any other (arrival order); reads
//! already running finish on the old file, as if before it. At most `REAP_QUEUE_MAX` (64)
//! old files wait; past that a request frees its own as before. A crash between the swap
//! and the old file's unlink leaves it as `<inode>.fresh` (before the swap, an empty new
//! file): the store removes every `*.fresh` when it opens, before serving (big ones through
//! the reaper), and `remove` of the object removes it too. Test
//! hook `WEFT_FAULT_SLOW_FREE_MS`: freeing a big object's blocks takes that much longer,
//! wherever it happens (`big_truncate.rs`).
//! `service/`: reads and writes of range lists and of view intervals as one stream;
//! extents, object stats (end and allocated bytes, for sizes and `st_blocks`), truncate,
//! fallocate (one local run per server: a server's stripes of a range lie back to back in
//! its object), sync, statfs (`service/mod.rs`; this server's share of a request in
//! `pieces.rs`, the dispatch and sendfile replies in `handler.rs`, the inline path's
//! `RWF_NOWAIT` checks in `inline.rs`, unit tests in `tests.rs`). `views.rs`: views registered per connection (at
//! most 64, dropped when the connection closes). `sieve.rs`: a request is served window
//! by window (a view's per-stripe slices cut to 1 MiB of the object; a range list, at
//! most 2^18 pieces); each window's pieces are merged into runs, and runs separated by
//! gaps of at most 4 KiB are read with one `pread` (and, for writes, patched and written
//! back with one `pwrite`: data sieving at the server), under a per-object write lock
//! that keeps read-modify-write from undoing concurrent writes or truncates. Plain reads
//! of range lists skip all of that: `Handler::reply_from_file` hands the rpc server the
//! object and its local runs, and the reply's bulk data goes out by `sendfile(2)`, page
//! cache to socket, with zeros for bytes past the object's end. `rebuild.rs`: stamps of objects'
//! 4 MiB chunks, bumped as changes arrive, so that a rebuild's `RebuildWrite` of a replicated
//! file's stale piece (`service/rebuild.rs`) never covers a newer write. `counters.rs`: process-wide counts of sieve spans, read-modify-writes and fsyncs, for
//! the metrics. `append.rs`: append locks,
//! one per file at the server of its first stripe, never waited for on the server (busy
//! is an answer, the client tries again), released with the connection that took them. `extent_lock.rs`: extent locks (MPI-IO's atomic mode): byte ranges of a
//! file, shared or exclusive, held per server for the bytes it stores (as Lustre's lock
//! manager), never waited for on the server either (a conflict is `Busy`), released with
//! the connection, bounded per connection (256), in all (65,536 locks, 2^20 ranges) and in
//! time (taken over after 10 minutes); a writer refused for a conflict reserves its
//! ranges for 50 ms (renewed by its retries) against new readers, so readers cannot starve
//! it; requests, grants, conflicts and waits counted (`LockStats`, the metrics).

mod append;
mod counters;
mod extent_lock;
mod listing;
mod migrate;
mod objects;
mod rebuild;
mod service;
mod sieve;
mod token;
mod views;

pub use append::{APPEND_LOCKS_MAX, APPEND_LOCK_HOLD_MAX};
pub use counters::{io_counts, IoCounts};
pub use extent_lock::{
    EXTENT_LOCKS_MAX, EXTENT_LOCKS_PER_CONNECTION_MAX, EXTENT_LOCK_HOLD_MAX, EXTENT_LOCK_RANGES_MAX,
};
pub use objects::{ObjectStore, REAP_MIN_BYTES, SLOW_FREE_MAX};
pub use service::{ranges_stream_len, view_slices, IoService, WRITE_STALL_MAX};
pub use views::ViewRegistry;

//! MPI-IO on Weft: `libweft_mpiio.so`, an interposition library for unmodified MPI
//! programs (LD_PRELOAD, or linked). It defines every `MPI_File_*` function of MPI
//! 3.1; files named `weft:/path` are Weft files, every other file passes through to
//! the MPI library (`PMPI_File_*`). This is the only crate that links MPI.
//!
//! Layers, outside in:
//! - `csrc/weft_mpiio.c`: the entry points (reached through [`entry`]), dispatch
//!   between Weft and PMPI, MPI error classes and error handlers;
//! - `csrc/shim.c` / [`mpi`]: the few MPI calls the Rust half makes, with opaque
//!   handles;
//! - [`abi`]: the Rust functions the C half calls, and the registry of open files;
//! - [`mod@file`]: open files (communicator, hints, view, file pointer) and their
//!   operations; [`datatype`]: MPI datatypes decoded into weft-layout views;
//!   [`hints`]: ROMIO's and Weft's hints; [`datarep`]: the data representations served;
//! - [`atomic`]: atomic mode, every access under extent locks;
//! - [`collective`]: the collective methods (two-phase family) and independent I/O;
//!   [`delegation`]: collective calls on delegated files without an exchange;
//! - [`spawn`]: job-scoped delegates (hint `weft_delegates`), started with
//!   MPI_Comm_spawn of `weft-delegate` (`src/bin/`) at open and stopped at close or
//!   MPI_Finalize, talking over `delegate_link`;
//! - [`trace`]: trace capture of every call's original request (hint `weft_trace`);
//! - [`nonblocking`]: nonblocking calls as generalized requests, each file's I/O
//!   thread, and the interposed request completion calls (`csrc/requests.c`);
//!   [`requests`]: their C functions and the split collectives; [`shared`]: shared
//!   file pointers, held by the metadata manager;
//! - [`mount`]: paths inside a Weft mount (`fuse.weft`) served natively, as `weft:`;
//! - [`stripped`]: POSIX calls that libraries above MPI-IO (PnetCDF) make on the
//!   name of a `weft:` file with its prefix stripped, served from Weft or refused, so
//!   they never reach the local file of that name;
//! - [`profile`]: the per-file MPI-IO profile written at MPI_Finalize (`WEFT_PROFILE`).
//!
//! # Code map
//!
//! `libweft_mpiio.so`, the only crate that links MPI: every `MPI_File_*` function of MPI
//! 3.1, defined in C (`csrc/`, compiled with mpicc) for `weft:` files and passing other
//! files through to `PMPI_File_*`; a thin C shim gives the Rust side the MPI calls it
//! needs. Rust decodes derived datatypes into weft-layout views, parses hints (ROMIO's
//! and `weft_cb_method`, `weft_pipeline_depth`, `weft_cm_schedule`, and `weft_cache`,
//! which sets the caching mode of a file the open creates), agrees errors across ranks,
//! and runs the collective methods behind one interface in `collective/` (two_phase,
//! interleaved, pipelined, interleaved_pipelined, stripe_aligned: the exchange family on
//! one engine; independent; server_directed; auto). An MPI view is set on the file's
//! weft-client handle once per `MPI_File_set_view`, so independent accesses and
//! `server_directed` send view intervals (view I/O) and never list their pieces;
//! `server_directed` is Clusterfile's collective I/O: each rank sends its interval
//! straight to the cache managers (or io servers) of the file's data layout in the
//! decentralised schedule's order, with no exchange among the processes: disk-directed
//! with a colocated tier, two-phase with separate managers. `auto.rs` opens with the
//! rule and the figures it follows. `atomic.rs`: atomic mode, every access of a file in
//! atomic mode (collective ones as each rank's independent access) under the extent locks
//! of its pieces. `behind.rs`: outside atomic mode, independent writes wait merged in a
//! bounded per-handle write-behind buffer until sync, close or anything that observes them,
//! and reads that repeat a pattern are served from a read-ahead window, doubling while
//! the stream goes on (hints
//! `weft_write_behind`, `weft_read_ahead`). `collective/pattern.rs` gathers a collective read's
//! original pattern for the cache tier under `weft_cio_aware`; `trace.rs` records each
//! call's original request and id (`weft_trace`); `profile.rs` is `WEFT_PROFILE` (its switch and the per-thread clock the `mpi` wrappers
//! record into in `timing.rs`): per
//! file and MPI-IO function calls, bytes and seconds, the methods run, and each call's time
//! split into exchange and waiting (timed in `mpi.rs`'s wrappers) and I/O (the rest),
//! gathered to rank 0 and printed and written as JSON at `MPI_Finalize`.
//! `delegation.rs`: on a delegated file
//! `auto` runs `server_directed` without the extents allgather (static file domains need
//! no agreement among the ranks). `collective/no_exchange.rs`: a collective call whose
//! method exchanges nothing (atomic mode's locked independent I/O, a delegated file,
//! `romio_cb_*=disable`, `weft_cb_method=independent|server_directed`, and `auto` after 4
//! calls in a row of the handle, per direction, whose requests did not interleave, hint
//! `weft_cb_predict`) takes no MPI collective before its I/O: one allgather after it
//! agrees on the outcome and collects the extents that keep the history (the same on
//! every rank: it changes only with agreed outcomes); any other call takes one allgather
//! (errors and extents together) before and one allreduce after. On a node with more ranks
//! than CPUs, or with a server of the cluster on it, those agreeing allgathers and
//! allreduces poll for 50 µs and then sleep between polls (`csrc/shim.c`, `WEFT_MPIIO_WAIT`), leaving the CPUs to the ranks and
//! servers still working. Requests interleave when
//! their extents overlap in file order (ROMIO compares them in rank order only, so ranks
//! that each access a neighbour's block count there as interleaved). `statvfs.rs`:
//! `statvfs`, `statfs` and their `64` names, defined by the library so that a `weft:` name
//! reports the cluster (`FsStats::blocks`, the numbers a mount's statfs gives) and any
//! other path goes to the C library's function (`dlsym(RTLD_NEXT)`). `stripped.rs`:
//! libraries above MPI-IO that strip a ROMIO-style prefix and make their own POSIX calls on
//! the rest (PnetCDF: `access` and, under NC_CLOBBER, `truncate` at `ncmpi_create`;
//! `open`/`read`/`lseek`/`close` of the signature at `ncmpi_open` and
//! `ncmpi_inq_file_format`; all before `MPI_File_open`). The rest of a `weft:` name is tied
//! to its Weft file while the process holds a reason to know it: its command line's `weft:`
//! arguments (an `.init_array` constructor, for the process's life), an open MPI-IO handle,
//! and calls of those three PnetCDF functions (interposed, the real ones by
//! `dlsym(RTLD_NEXT)`). The library interposes `access`, `(l)stat(64)`, `truncate(64)`,
//! `unlink`, `remove`, `open(64)`, `fopen(64)`, `read`, `pread(64)`, `lseek(64)`,
//! `fstat(64)` and `close`: on a tied name `access`/`stat`/`truncate`/`unlink`/`remove`
//! act on the Weft file, a read-only `open` returns an `O_PATH` descriptor of `/` whose
//! `read`/`pread`/`lseek`/`fstat`/`close` are served from the Weft file (reading or
//! writing it otherwise fails with EBADF; a number closed behind the library's back is
//! dropped at its next use), and `open` for
//! writing or creating and `fopen` are refused with ENOTSUP and a line on stderr naming the
//! mount path; an untied name or descriptor costs one atomic load. One module with no
//! MPI in it, for a later full POSIX interposer to take over. `spawn.rs`: job-scoped delegates (`weft_delegates` /
//! `$WEFT_DELEGATES`): at open the file's ranks `MPI_Comm_spawn` N copies of
//! `weft-delegate` (`src/bin/`, an MPI launcher running one `weftd --role cache
//! --delegate --meta ... --exit-on-stdin-eof` each), rank 0 collects their addresses over
//! the intercommunicator (a fresh job key per set, made by rank 0 and sent in the
//! `WATCH` message, broadcast to the other ranks with the addresses; the launcher writes
//! it to `job.key`, 0600, in its 0700 scratch directory and passes `--job-key`;
//! `delegate_link.rs`: the tags and messages both sides share,
//! and `csrc/spawn.c`'s MPI calls) and every rank routes the file through them
//! (`File::use_delegates`); close syncs and releases the set for the next open by the
//! same processes; `MPI_Finalize` (interposed in `csrc/weft_mpiio.c`) stops every set.
//! A launcher watches the job's processes on its host and its own parent, and stops its
//! weftd when they die. Each weftd runs in a new scratch directory of its own
//! (`$TMPDIR/weft-delegate-PID-K`, never one that exists: a killed job's directory once
//! handed its stale address to a later launcher with the same pid) and removes it after
//! its write-back (`--remove-on-exit`), also when the job killed its launcher. Every entry point is exported under its `PMPI_` name too (Fortran
//! bindings and profiling tools call those); the pass-through reaches the MPI library's
//! own `PMPI_*` through `REAL()` (`csrc/real.h`: dlsym(RTLD_NEXT), once per call site).
//! `nonblocking.rs`: `iread`/`iwrite` calls are MPI generalized requests; an independent
//! one is prepared on the calling thread and its Weft I/O runs on the file's worker
//! thread (I/O only, no MPI), and the interposed `MPI_Wait`/`Test`/`Waitall`/`Testany`/...
//! (`csrc/requests.c`) complete the bound requests whose I/O is done on the thread that
//! called MPI, so no `MPI_THREAD_MULTIPLE` is needed; collective nonblocking calls and
//! split collectives (`requests.rs`, one outstanding per handle) do their work at the
//! call, as ROMIO does. `abi.rs`'s entry points share `handles.rs` (the open files'
//! handles, the error guard). `file/`: an open file (`mod.rs`), its view and file pointer
//! (`views.rs`), reads and writes (`io.rs`); `cluster.rs` the process's client and the
//! Weft path of a name. `file/open.rs`'s open: rank 0 alone creates or opens the file (and makes
//! the shared file pointer) and broadcasts the outcome with its hints and the handle's
//! handoff with its capability; the other ranks open from the handoff and need no
//! capability grant of their own; one broadcast and one agreement per open.
//! The communicator is duplicated once per application communicator and kept on it as an
//! attribute (`mpi.rs`, `Comm::dup_for_file`; freed with it), reused by later opens while no
//! open file uses it (a fresh duplicate otherwise, and always under `MPI_THREAD_MULTIPLE`).
//! The shared file pointer is made by the manager at its first use (`SharedPointerSince`);
//! close agrees on its outcome and on whether any rank used the pointer in one allreduce,
//! and rank 0 drops only a pointer that was used. `shared.rs`: shared file pointers held by the metadata manager (an open's pointer id in
//! `shared_id.rs`)
//! (one fetch-and-add per independent shared access; the ordered calls take one
//! `MPI_Exscan` of the counts, the last rank adds the total, then a `write/read_at_all`
//! at each rank's offset); the pointer counts etypes of the view and restarts at 0 with
//! each `set_view` (a view epoch the manager sees).
//!
//! `datarep.rs`: the data representations of a view: `native`, `internal` as native, and
//! `external32`, converted in the C half (`csrc/weft_mpiio.c`, `wm_x32_*`: MPI's
//! `MPI_Pack_external`/`MPI_Unpack_external` into a contiguous buffer accessed through the
//! view, which keeps the native layout as ROMIO does; memory types whose external32 size
//! differs from the native one are refused with `MPI_ERR_UNSUPPORTED_DATAREP`; nonblocking
//! calls under it complete at the call); others (registered ones) fail with
//! `MPI_ERR_UNSUPPORTED_DATAREP` on every rank, as MPI permits, before the view changes. Errors: a failed call returns an error
//! code of the MPI class whose `MPI_Error_string` carries the library's message
//! (`csrc/weft_mpiio.c`'s `mpi_code`: `MPI_Add_error_code` codes, a ring of 32 per class,
//! so bounded; the bare class under MPICH). `mount.rs`: one path for POSIX and MPI-IO, as on Lustre: an MPI-IO name (open,
//! delete) that is a path inside a `fuse.weft` mount (/proc/self/mountinfo, symbolic links
//! resolved) is served natively as `weft:` + the path below the mountpoint (a mount's root
//! is the cluster's root), by the process's client when it reaches the cluster the mount's
//! `user.weft.cluster` attribute names (or one made from that attribute when the
//! environment names no cluster); otherwise the MPI library's own MPI-IO serves it through
//! the mount, with a line on stderr. Finding mounts and their clusters is weft-interpose's.
//!
//! # Built against MPICH: crate weft-mpiio-mpich
//!
//! The same library for MPICH: `libweft_mpiio_mpich.so` (and `weft-delegate-mpich`), a
//! second package whose library target is weft-mpiio's `src/lib.rs` and whose build script
//! is weft-mpiio's `build.rs`, which sees the package name and compiles `csrc/` with
//! `mpicc.mpich` (`$MPICC_MPICH`) instead of `mpicc.openmpi` (`$MPICC`). Nothing else
//! differs: only the C half includes `mpi.h`; Rust holds every MPI handle as an opaque
//! `uintptr_t` (`csrc/shim.h`: a pointer in Open MPI, an `int` in MPICH) and every
//! constant through the shim, so compiling the C half against the other `mpi.h` is the
//! whole port. `weft mpi-env --mpi openmpi|mpich` (default: `$WEFT_MPI`, else what the
//! `mpiexec` on PATH resolves to) prints the matching library. Its test
//! (`tests/mpich.rs`) runs weft-mpiio's C programs built with `mpicc.mpich` under
//! `mpirun.mpich`, against MPICH's ROMIO; the `mpicc`/`mpirun` alternatives stay Open
//! MPI's.

pub mod abi;
pub mod atomic;
pub mod behind;
mod cluster;
pub mod collective;
pub mod datarep;
pub mod datatype;
pub mod delegate_link;
pub mod delegation;
pub mod entry;
pub mod error;
pub mod file;
mod handles;
pub mod hints;
pub mod mount;
pub mod mpi;
pub mod nonblocking;
pub mod profile;
pub mod requests;
pub mod shared;
mod shared_id;
pub mod spawn;
pub mod statvfs;
pub mod stripped;
mod timing;
pub mod trace;

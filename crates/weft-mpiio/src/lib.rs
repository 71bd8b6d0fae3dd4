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
//! - [`file`]: open files (communicator, hints, view, file pointer) and their
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

pub mod abi;
pub mod atomic;
pub mod behind;
pub mod collective;
pub mod datarep;
pub mod datatype;
pub mod delegate_link;
pub mod delegation;
pub mod entry;
pub mod error;
pub mod file;
pub mod hints;
pub mod mount;
pub mod mpi;
pub mod nonblocking;
pub mod profile;
pub mod requests;
pub mod shared;
pub mod spawn;
pub mod statvfs;
pub mod stripped;
pub mod trace;

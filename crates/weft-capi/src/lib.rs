//! Weft's C ABI: `libweft.so` (and `libweft.a`) over the native client, described by the
//! generated header `include/weft.h`.
//!
//! Every function is `extern "C"`, checks what C hands it (NULL and closed handles,
//! paths and buffers, non-UTF-8 paths, sizes past `SSIZE_MAX`) and never unwinds into C: a panic is
//! caught at the boundary and becomes `-EIO`. Failures are `-errno` returns (or NULL and
//! `errno` for functions returning a handle), with a detailed message kept per thread
//! for `weft_last_error_message`.
//!
//! Modules, one per area of the ABI:
//! - [`error`]: the errno convention, `weft_strerror`, the thread's last error, the
//!   panic guard every function runs in;
//! - [`args`]: checks of what C passes in;
//! - [`live`]: the handles given out and not yet closed (closed ones are `EBADF`);
//! - [`types`]: the `#[repr(C)]` structs and constants shared by the areas;
//! - [`handles`]: the opaque handles and connecting;
//! - [`file`]: opening files and reading, writing, syncing, truncating them;
//! - [`view`]: datatypes, file views and the PVFS partition, view reads and writes;
//! - [`namespace`]: operations on paths;
//! - [`dir`]: directory iteration.
//!
//! The header is not generated at build time: `include/weft.h` is committed and
//! `tests/header.rs` regenerates it with cbindgen and fails when it differs (see there).

// Kept in this order (not rustfmt's): cbindgen writes the header's functions in the
// order it reads the modules, and this is the order a reader of weft.h wants.
pub mod handles;

pub mod error;

pub mod file;

pub mod view;

pub mod namespace;

pub mod dir;

pub mod args;
mod live;
pub mod types;

pub use dir::*;
pub use error::*;
pub use file::*;
pub use handles::*;
pub use namespace::*;
pub use types::*;
pub use view::*;

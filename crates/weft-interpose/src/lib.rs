//! What Weft's preloaded libraries share: libweft_mpiio.so (weft-mpiio) and
//! libweft_posix.so (weft-posix) both serve files of a Weft mount natively from inside
//! an unmodified program, and both interpose libc functions.
//!
//! - [`mount`]: the process's Weft mounts, the Weft path of a name inside one, and the
//!   cluster behind a mount;
//! - [`find_library`]: where a preloaded library is installed;
//! - [`real!`]: the next definition of an interposed function (`dlsym(RTLD_NEXT)`),
//!   found once; [`set_errno`] and [`fail`]: libc's way of answering an error.
//!
//! # Code map
//!
//! What the two preloaded libraries (weft-mpiio, weft-posix) share: `mount.rs` finds the
//! process's `fuse.weft` mounts (mountpoint and device number, from /proc/self/mountinfo),
//! the Weft path of a name inside one, the cluster a mount names in its
//! `user.weft.cluster` attribute and the client that serves it (`client_for`: the
//! process's, else the environment's, else one made from the attribute; refused when it
//! talks to another manager); `real!` finds the next definition of an interposed libc
//! function (`dlsym(RTLD_NEXT)`, once); `find_library` finds an installed preload library
//! (`$VAR`, beside the executable, `../lib`) for `weft run`, `weft mpi-env` and the bench.

pub mod mount;

use std::path::PathBuf;

/// Where a preloaded library named `name` is: $`var` when set, else beside the running
/// executable (a build's target/release), else in ../lib of its directory (an
/// installation's PREFIX/lib beside PREFIX/bin).
pub fn find_library(var: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    for candidate in [dir.join(name), dir.join("../lib").join(name)] {
        if candidate.exists() {
            return candidate.canonicalize().unwrap_or(candidate);
        }
    }
    dir.join(name)
}

use std::ffi::c_int;

/// The real (next) definition of the libc function `$name` (a string literal) as a
/// function pointer of type `$ty`, found once with `dlsym(RTLD_NEXT)`; `None` when no
/// library after this one defines it.
#[macro_export]
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static REAL: ::std::sync::atomic::AtomicPtr<::std::ffi::c_void> =
            ::std::sync::atomic::AtomicPtr::new(::std::ptr::null_mut());
        let mut f = REAL.load(::std::sync::atomic::Ordering::Relaxed);
        if f.is_null() {
            // SAFETY: a NUL-terminated symbol name.
            f = unsafe { ::libc::dlsym(::libc::RTLD_NEXT, concat!($name, "\0").as_ptr().cast()) };
            REAL.store(f, ::std::sync::atomic::Ordering::Relaxed);
        }
        if f.is_null() {
            None
        } else {
            // SAFETY: the symbol is the libc (or next library's) function of that type.
            Some(unsafe { ::std::mem::transmute::<*mut ::std::ffi::c_void, $ty>(f) })
        }
    }};
}

/// Sets the calling thread's errno.
pub fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's errno.
pub fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// -1 with errno `e`, as a libc call answers an error.
pub fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

//! What Weft's preloaded libraries share: libweft_mpiio.so (weft-mpiio) and
//! libweft_posix.so (weft-posix) both serve files of a Weft mount natively from inside
//! an unmodified program, and both interpose libc functions.
//!
//! - [`mount`]: the process's Weft mounts, the Weft path of a name inside one, and the
//!   cluster behind a mount;
//! - [`real!`]: the next definition of an interposed function (`dlsym(RTLD_NEXT)`),
//!   found once; [`set_errno`] and [`fail`]: libc's way of answering an error.

pub mod mount;

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

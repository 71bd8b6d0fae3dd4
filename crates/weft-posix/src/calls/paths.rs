//! The calls that take a name: `weft:` names rewritten to their mount path, everything
//! else as given; stat answers patched with the io servers' size of a file the library
//! wrote.

use std::ffi::{c_char, c_int, c_uint};

use weft_interpose::{fail, real};

use crate::served;

// Each sends the process's buffered writes first (stdio and truncate reach the file
// through the kernel; one atomic load when nothing is buffered).
macro_rules! path_call {
    ($name:ident, $sym:literal, ($($arg:ident: $ty:ty),*), $ret:ty, $err:expr) => {
        /// # Safety
        /// The libc function's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char $(, $arg: $ty)*) -> $ret {
            crate::flush::flush_all();
            named!(path);
            match real!($sym, unsafe extern "C" fn(*const c_char $(, $ty)*) -> $ret) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(path $(, $arg)*) },
                None => {
                    fail(libc::ENOSYS);
                    $err
                }
            }
        }
    };
}
path_call!(access, "access", (mode: c_int), c_int, -1);
path_call!(unlink, "unlink", (), c_int, -1);
path_call!(rmdir, "rmdir", (), c_int, -1);
path_call!(mkdir, "mkdir", (mode: libc::mode_t), c_int, -1);
path_call!(truncate, "truncate", (len: i64), c_int, -1);
path_call!(truncate64, "truncate64", (len: i64), c_int, -1);
path_call!(opendir, "opendir", (), *mut libc::DIR, std::ptr::null_mut());
path_call!(fopen, "fopen", (mode: *const c_char), *mut libc::FILE, std::ptr::null_mut());
path_call!(fopen64, "fopen64", (mode: *const c_char), *mut libc::FILE, std::ptr::null_mut());
path_call!(freopen, "freopen", (mode: *const c_char, stream: *mut libc::FILE), *mut libc::FILE, std::ptr::null_mut());
path_call!(freopen64, "freopen64", (mode: *const c_char, stream: *mut libc::FILE), *mut libc::FILE, std::ptr::null_mut());

macro_rules! stat_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// stat(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, out: *mut libc::stat) -> c_int {
            named!(path);
            let r = match real!(
                $sym,
                unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(path, out) },
                None => fail(libc::ENOSYS),
            };
            if r == 0 && !out.is_null() {
                // SAFETY: filled in by the call.
                served::patch_stat(unsafe { &mut *out });
            }
            r
        }
    };
}
stat_like!(stat, "stat");
stat_like!(stat64, "stat64");
stat_like!(lstat, "lstat");
stat_like!(lstat64, "lstat64");

macro_rules! fstatat_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// fstatat(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dir: c_int,
            path: *const c_char,
            out: *mut libc::stat,
            flags: c_int,
        ) -> c_int {
            named!(path);
            let r = match real!(
                $sym,
                unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(dir, path, out, flags) },
                None => fail(libc::ENOSYS),
            };
            if r == 0 && !out.is_null() {
                // SAFETY: filled in by the call.
                served::patch_stat(unsafe { &mut *out });
            }
            r
        }
    };
}
fstatat_like!(fstatat, "fstatat");
fstatat_like!(fstatat64, "fstatat64");

/// # Safety
/// statx(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn statx(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    out: *mut libc::statx,
) -> c_int {
    named!(path);
    let r = match real!(
        "statx",
        unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(dir, path, flags, mask, out) },
        None => fail(libc::ENOSYS),
    };
    if r == 0 && !out.is_null() {
        // SAFETY: filled in by the call.
        served::patch_statx(unsafe { &mut *out });
    }
    r
}

/// # Safety
/// rename(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    named!(from);
    named!(to);
    match real!(
        "rename",
        unsafe extern "C" fn(*const c_char, *const c_char) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(from, to) },
        None => fail(libc::ENOSYS),
    }
}

//! The interposed libc functions. Each checks whether its descriptor is served (one
//! atomic load when it is not) and otherwise calls the next definition (libc's) with
//! the same arguments. glibc's fortified names (`__open_2`, `__read_chk`, ...) are
//! interposed too: programs built with _FORTIFY_SOURCE call them instead.
//!
//! open(2) and fcntl(2) are variadic, which Rust cannot define: the optional argument is
//! taken as a fixed one (on x86-64 and AArch64 Linux a variadic integer or pointer
//! argument is passed exactly as a fixed one, and read only when the call uses it, as
//! libc does).

use std::ffi::{c_char, c_int, c_uint, c_void};

use weft_interpose::{fail, real};

use crate::{handover, served, table};

/// A `weft:` name rewritten to its mount path, or the name as given.
macro_rules! named {
    ($path:ident) => {
        // SAFETY: the caller passes a C string (or null), as libc requires.
        let rewritten = unsafe { crate::names::rewrite($path) };
        let $path = rewritten.as_ref().map_or($path, |c| c.as_ptr());
    };
}

// The descriptor calls (close, dup, fcntl), the name calls and the calls that start
// programs, each in its file; `named!` above is theirs too.
pub mod descriptors;
pub mod paths;
pub mod programs;

// ---- open ----

macro_rules! open_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// open(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
            named!(path);
            // SAFETY: the caller's name, as open requires.
            if let Some(fd) = unsafe { served::open_path(libc::AT_FDCWD, path, flags) } {
                return fd;
            }
            let fd = match real!(
                $sym,
                unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(path, flags, mode) },
                None => fail(libc::ENOSYS),
            };
            served::adopt(fd, flags);
            fd
        }
    };
}
open_like!(open, "open");
open_like!(open64, "open64");

macro_rules! open_2_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// open(2)'s contract (glibc's fortified two-argument open).
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int) -> c_int {
            named!(path);
            // SAFETY: the caller's name, as open requires.
            if let Some(fd) = unsafe { served::open_path(libc::AT_FDCWD, path, flags) } {
                return fd;
            }
            let fd = match real!($sym, unsafe extern "C" fn(*const c_char, c_int) -> c_int) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(path, flags) },
                None => fail(libc::ENOSYS),
            };
            served::adopt(fd, flags);
            fd
        }
    };
}
open_2_like!(__open_2, "__open_2");
open_2_like!(__open64_2, "__open64_2");

macro_rules! openat_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// openat(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
            named!(path);
            // SAFETY: the caller's name, as open requires.
            if let Some(fd) = unsafe { served::open_path(dir, path, flags) } {
                return fd;
            }
            let fd = match real!(
                $sym,
                unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(dir, path, flags, mode) },
                None => fail(libc::ENOSYS),
            };
            served::adopt(fd, flags);
            fd
        }
    };
}
openat_like!(openat, "openat");
openat_like!(openat64, "openat64");

macro_rules! openat_2_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// openat(2)'s contract (glibc's fortified three-argument openat).
        #[no_mangle]
        pub unsafe extern "C" fn $name(dir: c_int, path: *const c_char, flags: c_int) -> c_int {
            named!(path);
            // SAFETY: the caller's name, as open requires.
            if let Some(fd) = unsafe { served::open_path(dir, path, flags) } {
                return fd;
            }
            let fd = match real!(
                $sym,
                unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(dir, path, flags) },
                None => fail(libc::ENOSYS),
            };
            served::adopt(fd, flags);
            fd
        }
    };
}
openat_2_like!(__openat_2, "__openat_2");
openat_2_like!(__openat64_2, "__openat64_2");

macro_rules! creat_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// creat(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: libc::mode_t) -> c_int {
            named!(path);
            let fd = match real!(
                $sym,
                unsafe extern "C" fn(*const c_char, libc::mode_t) -> c_int
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(path, mode) },
                None => fail(libc::ENOSYS),
            };
            served::adopt(fd, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC);
            fd
        }
    };
}
creat_like!(creat, "creat");
creat_like!(creat64, "creat64");

// ---- reading and writing ----

/// read(2) at the offset (`None`) or at `at`, served or passed to the kernel.
///
/// # Safety
/// `buf` has `count` writable bytes.
unsafe fn do_read(fd: c_int, buf: *mut c_void, count: usize, at: Option<i64>) -> isize {
    if let Some(e) = table::get(fd) {
        // SAFETY: the caller's contract.
        let bytes = unsafe { slice_mut(buf, count) };
        return served::read(fd, &e, bytes, at);
    }
    match at {
        None => match real!("read", unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize) {
            // SAFETY: the same arguments.
            Some(f) => unsafe { f(fd, buf, count) },
            None => fail(libc::ENOSYS) as isize,
        },
        Some(o) => match real!(
            "pread64",
            unsafe extern "C" fn(c_int, *mut c_void, usize, i64) -> isize
        ) {
            // SAFETY: the same arguments.
            Some(f) => unsafe { f(fd, buf, count, o) },
            None => fail(libc::ENOSYS) as isize,
        },
    }
}

/// write(2) at the offset (`None`) or at `at`, served or passed to the kernel.
///
/// # Safety
/// `buf` has `count` readable bytes.
unsafe fn do_write(fd: c_int, buf: *const c_void, count: usize, at: Option<i64>) -> isize {
    if let Some(e) = table::get(fd) {
        // SAFETY: the caller's contract.
        let bytes = unsafe { slice(buf, count) };
        return served::write(fd, &e, bytes, at);
    }
    match at {
        None => match real!(
            "write",
            unsafe extern "C" fn(c_int, *const c_void, usize) -> isize
        ) {
            // SAFETY: the same arguments.
            Some(f) => unsafe { f(fd, buf, count) },
            None => fail(libc::ENOSYS) as isize,
        },
        Some(o) => match real!(
            "pwrite64",
            unsafe extern "C" fn(c_int, *const c_void, usize, i64) -> isize
        ) {
            // SAFETY: the same arguments.
            Some(f) => unsafe { f(fd, buf, count, o) },
            None => fail(libc::ENOSYS) as isize,
        },
    }
}

/// # Safety
/// `p` has `n` writable bytes (or `n` is 0).
unsafe fn slice_mut<'a>(p: *mut c_void, n: usize) -> &'a mut [u8] {
    if n == 0 || p.is_null() {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(p.cast(), n) }
}

/// # Safety
/// `p` has `n` readable bytes (or `n` is 0).
unsafe fn slice<'a>(p: *const c_void, n: usize) -> &'a [u8] {
    if n == 0 || p.is_null() {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p.cast(), n) }
}

/// # Safety
/// read(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: the caller's contract.
    unsafe { do_read(fd, buf, count, None) }
}

/// # Safety
/// read(2)'s contract (glibc's fortified read; `buflen` is the buffer's size).
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, count: usize, buflen: usize) -> isize {
    if count > buflen {
        // glibc's answer to a read past its buffer.
        std::process::abort();
    }
    // SAFETY: the caller's contract.
    unsafe { do_read(fd, buf, count, None) }
}

/// # Safety
/// write(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: usize) -> isize {
    // SAFETY: the caller's contract.
    unsafe { do_write(fd, buf, count, None) }
}

macro_rules! pread_like {
    ($name:ident) => {
        /// # Safety
        /// pread(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
            // SAFETY: the caller's contract.
            unsafe { do_read(fd, buf, count, Some(offset)) }
        }
    };
}
pread_like!(pread);
pread_like!(pread64);

macro_rules! pread_chk_like {
    ($name:ident) => {
        /// # Safety
        /// pread(2)'s contract (glibc's fortified pread).
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *mut c_void,
            count: usize,
            offset: i64,
            buflen: usize,
        ) -> isize {
            if count > buflen {
                std::process::abort();
            }
            // SAFETY: the caller's contract.
            unsafe { do_read(fd, buf, count, Some(offset)) }
        }
    };
}
pread_chk_like!(__pread_chk);
pread_chk_like!(__pread64_chk);

macro_rules! pwrite_like {
    ($name:ident) => {
        /// # Safety
        /// pwrite(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *const c_void, count: usize, offset: i64) -> isize {
            // SAFETY: the caller's contract.
            unsafe { do_write(fd, buf, count, Some(offset)) }
        }
    };
}
pwrite_like!(pwrite);
pwrite_like!(pwrite64);

/// The total length of `iov`, or EINVAL past isize::MAX.
///
/// # Safety
/// `iov` has `n` entries.
unsafe fn iov_slice<'a>(iov: *const libc::iovec, n: c_int) -> Option<&'a [libc::iovec]> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return None;
    }
    if n == 0 {
        return Some(&[]);
    }
    // SAFETY: the caller's contract.
    Some(unsafe { std::slice::from_raw_parts(iov, n as usize) })
}

/// readv/preadv on a served descriptor: one read into a staging buffer, scattered.
///
/// # Safety
/// readv(2)'s contract.
unsafe fn served_readv(fd: c_int, e: &table::Entry, iov: &[libc::iovec], at: Option<i64>) -> isize {
    let total: usize = iov.iter().map(|v| v.iov_len).sum();
    let mut staged = vec![0u8; total];
    let n = served::read(fd, e, &mut staged, at);
    if n > 0 {
        let mut done = 0usize;
        for v in iov {
            if done >= n as usize {
                break;
            }
            let take = v.iov_len.min(n as usize - done);
            // SAFETY: iov_base has iov_len writable bytes.
            unsafe { std::ptr::copy_nonoverlapping(staged.as_ptr().add(done), v.iov_base.cast(), take) };
            done += take;
        }
    }
    n
}

/// writev/pwritev on a served descriptor: the pieces gathered into one write.
///
/// # Safety
/// writev(2)'s contract.
unsafe fn served_writev(fd: c_int, e: &table::Entry, iov: &[libc::iovec], at: Option<i64>) -> isize {
    let mut gathered = Vec::with_capacity(iov.iter().map(|v| v.iov_len).sum());
    for v in iov {
        // SAFETY: iov_base has iov_len readable bytes.
        gathered.extend_from_slice(unsafe { slice(v.iov_base, v.iov_len) });
    }
    served::write(fd, e, &gathered, at)
}

/// # Safety
/// readv(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    if let Some(e) = table::get(fd) {
        // SAFETY: the caller's contract.
        return match unsafe { iov_slice(iov, n) } {
            // SAFETY: as above.
            Some(v) => unsafe { served_readv(fd, &e, v, None) },
            None => fail(libc::EINVAL) as isize,
        };
    }
    match real!(
        "readv",
        unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> isize
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(fd, iov, n) },
        None => fail(libc::ENOSYS) as isize,
    }
}

/// # Safety
/// writev(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    if let Some(e) = table::get(fd) {
        // SAFETY: the caller's contract.
        return match unsafe { iov_slice(iov, n) } {
            // SAFETY: as above.
            Some(v) => unsafe { served_writev(fd, &e, v, None) },
            None => fail(libc::EINVAL) as isize,
        };
    }
    match real!(
        "writev",
        unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> isize
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(fd, iov, n) },
        None => fail(libc::ENOSYS) as isize,
    }
}

macro_rules! preadv_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// preadv(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, iov: *const libc::iovec, n: c_int, offset: i64) -> isize {
            if let Some(e) = table::get(fd) {
                // SAFETY: the caller's contract.
                return match unsafe { iov_slice(iov, n) } {
                    // SAFETY: as above.
                    Some(v) => unsafe { served_readv(fd, &e, v, Some(offset)) },
                    None => fail(libc::EINVAL) as isize,
                };
            }
            match real!(
                $sym,
                unsafe extern "C" fn(c_int, *const libc::iovec, c_int, i64) -> isize
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd, iov, n, offset) },
                None => fail(libc::ENOSYS) as isize,
            }
        }
    };
}
preadv_like!(preadv, "preadv");
preadv_like!(preadv64, "preadv64");

macro_rules! pwritev_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// pwritev(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, iov: *const libc::iovec, n: c_int, offset: i64) -> isize {
            if let Some(e) = table::get(fd) {
                // SAFETY: the caller's contract.
                return match unsafe { iov_slice(iov, n) } {
                    // SAFETY: as above.
                    Some(v) => unsafe { served_writev(fd, &e, v, Some(offset)) },
                    None => fail(libc::EINVAL) as isize,
                };
            }
            match real!(
                $sym,
                unsafe extern "C" fn(c_int, *const libc::iovec, c_int, i64) -> isize
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd, iov, n, offset) },
                None => fail(libc::ENOSYS) as isize,
            }
        }
    };
}
pwritev_like!(pwritev, "pwritev");
pwritev_like!(pwritev64, "pwritev64");

// preadv2/pwritev2 carry flags (RWF_NOWAIT, RWF_APPEND...): the kernel serves them.
macro_rules! rwv2_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// preadv2(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const libc::iovec,
            n: c_int,
            offset: i64,
            flags: c_int,
        ) -> isize {
            handover::handover(fd);
            match real!(
                $sym,
                unsafe extern "C" fn(c_int, *const libc::iovec, c_int, i64, c_int) -> isize
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd, iov, n, offset, flags) },
                None => fail(libc::ENOSYS) as isize,
            }
        }
    };
}
rwv2_like!(preadv2, "preadv2");
rwv2_like!(preadv64v2, "preadv64v2");
rwv2_like!(pwritev2, "pwritev2");
rwv2_like!(pwritev64v2, "pwritev64v2");

macro_rules! lseek_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// lseek(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, offset: i64, whence: c_int) -> i64 {
            if let Some(e) = table::get(fd) {
                return served::lseek(fd, &e, offset, whence);
            }
            match real!($sym, unsafe extern "C" fn(c_int, i64, c_int) -> i64) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd, offset, whence) },
                None => fail(libc::ENOSYS) as i64,
            }
        }
    };
}
lseek_like!(lseek, "lseek");
lseek_like!(lseek64, "lseek64");

// glibc 2.33 and later export fstat (fstat64: the same struct on 64-bit Linux); programs
// built against an older glibc call __fxstat64.
macro_rules! fstat_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// fstat(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, out: *mut libc::stat) -> c_int {
            if let Some(e) = table::get(fd) {
                if out.is_null() {
                    return fail(libc::EFAULT);
                }
                // SAFETY: the caller's stat buffer.
                return served::fstat(fd, &e, unsafe { &mut *out });
            }
            match real!($sym, unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd, out) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
fstat_like!(fstat, "fstat");
fstat_like!(fstat64, "fstat64");

macro_rules! fxstat_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// __fxstat's contract (glibc before 2.33).
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, fd: c_int, out: *mut libc::stat) -> c_int {
            if let Some(e) = table::get(fd) {
                if out.is_null() {
                    return fail(libc::EFAULT);
                }
                // SAFETY: the caller's stat buffer.
                return served::fstat(fd, &e, unsafe { &mut *out });
            }
            match real!(
                $sym,
                unsafe extern "C" fn(c_int, c_int, *mut libc::stat) -> c_int
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(ver, fd, out) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
fxstat_like!(__fxstat, "__fxstat");
fxstat_like!(__fxstat64, "__fxstat64");

macro_rules! fsync_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// fsync(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int) -> c_int {
            if let Some(e) = table::get(fd) {
                return served::fsync(fd, &e);
            }
            match real!($sym, unsafe extern "C" fn(c_int) -> c_int) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
fsync_like!(fsync, "fsync");
fsync_like!(fdatasync, "fdatasync");

macro_rules! ftruncate_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// ftruncate(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, len: i64) -> c_int {
            if let Some(e) = table::get(fd) {
                return served::ftruncate(fd, &e, len);
            }
            match real!($sym, unsafe extern "C" fn(c_int, i64) -> c_int) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd, len) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
ftruncate_like!(ftruncate, "ftruncate");
ftruncate_like!(ftruncate64, "ftruncate64");

// fallocate goes through the mount (the daemon allocates); the mount's size may change.
macro_rules! fallocate_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// fallocate(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, mode: c_int, offset: i64, len: i64) -> c_int {
            if let Err(errno) = crate::upgrade::upgrade_fd(fd) {
                return fail(errno);
            }
            if let Some(e) = table::get(fd) {
                e.wrote.store(true, std::sync::atomic::Ordering::SeqCst);
                crate::ahead::wrote();
            }
            match real!($sym, unsafe extern "C" fn(c_int, c_int, i64, i64) -> c_int) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd, mode, offset, len) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
fallocate_like!(fallocate, "fallocate");
fallocate_like!(fallocate64, "fallocate64");

// ---- what the kernel serves: the descriptor is handed back first ----

macro_rules! mmap_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// mmap(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            addr: *mut c_void,
            len: usize,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            offset: i64,
        ) -> *mut c_void {
            if fd >= 0 && flags & libc::MAP_ANONYMOUS == 0 {
                handover::handover(fd);
            }
            match real!(
                $sym,
                unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, c_int, i64) -> *mut c_void
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(addr, len, prot, flags, fd, offset) },
                None => {
                    fail(libc::ENOSYS);
                    libc::MAP_FAILED
                }
            }
        }
    };
}
mmap_like!(mmap, "mmap");
mmap_like!(mmap64, "mmap64");

/// # Safety
/// fdopen(3)'s contract.
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    // stdio reads and writes with glibc's internal calls, which the library never sees.
    handover::handover(fd);
    match real!(
        "fdopen",
        unsafe extern "C" fn(c_int, *const c_char) -> *mut libc::FILE
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(fd, mode) },
        None => {
            fail(libc::ENOSYS);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// splice(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: usize,
    flags: c_uint,
) -> isize {
    handover::handover(fd_in);
    handover::handover(fd_out);
    match real!(
        "splice",
        unsafe extern "C" fn(c_int, *mut i64, c_int, *mut i64, usize, c_uint) -> isize
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(fd_in, off_in, fd_out, off_out, len, flags) },
        None => fail(libc::ENOSYS) as isize,
    }
}

/// A copy between two descriptors, at least one served, through the library's reads
/// and writes (sendfile and copy_file_range): `off_*` null means the descriptor's
/// offset, else that offset, updated.
///
/// # Safety
/// `off_in` / `off_out` are null or valid.
unsafe fn copy(fd_in: c_int, off_in: *mut i64, fd_out: c_int, off_out: *mut i64, len: usize) -> isize {
    const STAGE: usize = 1 << 20;
    let mut buf = vec![0u8; len.min(STAGE)];
    let mut total = 0usize;
    while total < len {
        let want = (len - total).min(buf.len());
        // SAFETY: the caller's contract; buf has `want` bytes.
        let at_in = (!off_in.is_null()).then(|| unsafe { *off_in });
        // SAFETY: as above.
        let n = unsafe { do_read(fd_in, buf.as_mut_ptr().cast(), want, at_in) };
        if n < 0 {
            return if total > 0 { total as isize } else { -1 };
        }
        if n == 0 {
            break;
        }
        let mut put = 0usize;
        while put < n as usize {
            // SAFETY: the caller's contract.
            let at_out = (!off_out.is_null()).then(|| unsafe { *off_out });
            // SAFETY: buf holds n bytes.
            let w = unsafe { do_write(fd_out, buf.as_ptr().add(put).cast(), n as usize - put, at_out) };
            if w <= 0 {
                return if total + put > 0 {
                    (total + put) as isize
                } else {
                    -1
                };
            }
            put += w as usize;
            if !off_out.is_null() {
                // SAFETY: the caller's contract.
                unsafe { *off_out += w as i64 };
            }
        }
        if !off_in.is_null() {
            // SAFETY: the caller's contract.
            unsafe { *off_in += n as i64 };
        }
        total += n as usize;
    }
    total as isize
}

macro_rules! sendfile_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// sendfile(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(out: c_int, input: c_int, offset: *mut i64, count: usize) -> isize {
            if table::get(input).is_some() || table::get(out).is_some() {
                // SAFETY: the caller's contract.
                return unsafe { copy(input, offset, out, std::ptr::null_mut(), count) };
            }
            match real!(
                $sym,
                unsafe extern "C" fn(c_int, c_int, *mut i64, usize) -> isize
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(out, input, offset, count) },
                None => fail(libc::ENOSYS) as isize,
            }
        }
    };
}
sendfile_like!(sendfile, "sendfile");
sendfile_like!(sendfile64, "sendfile64");

/// # Safety
/// copy_file_range(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: usize,
    flags: c_uint,
) -> isize {
    if table::get(fd_in).is_some() || table::get(fd_out).is_some() {
        if flags != 0 {
            return fail(libc::EINVAL) as isize;
        }
        // SAFETY: the caller's contract.
        return unsafe { copy(fd_in, off_in, fd_out, off_out, len) };
    }
    match real!(
        "copy_file_range",
        unsafe extern "C" fn(c_int, *mut i64, c_int, *mut i64, usize, c_uint) -> isize
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(fd_in, off_in, fd_out, off_out, len, flags) },
        None => fail(libc::ENOSYS) as isize,
    }
}

//! syscall(2): programs that make system calls through libc's `syscall` function skip
//! the library's read, write, close... symbols, but not `syscall` itself. The calls on
//! descriptors (and the opens) are routed to the library's own functions, which serve
//! them when the descriptor is served and pass them to libc otherwise; a raw close then
//! leaves no stale entry behind, and a raw read sees what the library wrote. Any other
//! number goes to libc's `syscall` unchanged. (System calls made without libc at all,
//! by static binaries or inline assembly, reach the mount: correct through it, but a
//! descriptor the library serves must not be closed that way.)
//!
//! `syscall` is variadic, which Rust cannot define: its six possible arguments are taken
//! as fixed ones (on x86-64 and AArch64 Linux, variadic integer and pointer arguments
//! travel exactly as fixed ones, and libc's `syscall` reads all six the same way).

use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void};

use weft_interpose::{fail, real};

use crate::calls::{self, descriptors};

/// # Safety
/// syscall(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    if crate::guard::active() && !crate::guard::busy() {
        // SAFETY: the caller's contract for system call `n`.
        if let Some(r) = unsafe { route(n, [a, b, c, d, e, f]) } {
            return r;
        }
    }
    match real!("syscall", unsafe extern "C" fn(c_long, ...) -> c_long) {
        // SAFETY: the same arguments.
        Some(g) => unsafe { g(n, a, b, c, d, e, f) },
        None => fail(libc::ENOSYS) as c_long,
    }
}

/// System call `n` done by the library's own function, or `None` for libc.
///
/// # Safety
/// The arguments are those of system call `n`.
unsafe fn route(n: c_long, args: [c_long; 6]) -> Option<c_long> {
    let [a, b, c, d, e, f] = args;
    let fd = a as c_int;
    // SAFETY (all arms): the caller's contract, the arguments passed on as they came.
    let r = unsafe {
        match n {
            libc::SYS_read => calls::read(fd, b as *mut c_void, c as usize) as c_long,
            libc::SYS_write => calls::write(fd, b as *const c_void, c as usize) as c_long,
            libc::SYS_pread64 => calls::pread64(fd, b as *mut c_void, c as usize, d) as c_long,
            libc::SYS_pwrite64 => calls::pwrite64(fd, b as *const c_void, c as usize, d) as c_long,
            libc::SYS_readv => calls::readv(fd, b as *const libc::iovec, c as c_int) as c_long,
            libc::SYS_writev => calls::writev(fd, b as *const libc::iovec, c as c_int) as c_long,
            // The kernel's preadv takes the offset in two halves; on 64-bit the low
            // half is the whole offset.
            libc::SYS_preadv => calls::preadv64(fd, b as *const libc::iovec, c as c_int, d) as c_long,
            libc::SYS_pwritev => calls::pwritev64(fd, b as *const libc::iovec, c as c_int, d) as c_long,
            libc::SYS_preadv2 => {
                calls::preadv64v2(fd, b as *const libc::iovec, c as c_int, d, f as c_int) as c_long
            }
            libc::SYS_pwritev2 => {
                calls::pwritev64v2(fd, b as *const libc::iovec, c as c_int, d, f as c_int) as c_long
            }
            libc::SYS_lseek => calls::lseek64(fd, b, c as c_int),
            libc::SYS_close => descriptors::close(fd) as c_long,
            libc::SYS_close_range => descriptors::close_range(a as c_uint, b as c_uint, c as c_int) as c_long,
            libc::SYS_fsync => calls::fsync(fd) as c_long,
            libc::SYS_fdatasync => calls::fdatasync(fd) as c_long,
            libc::SYS_ftruncate => calls::ftruncate64(fd, b) as c_long,
            libc::SYS_fallocate => calls::fallocate64(fd, b as c_int, c, d) as c_long,
            libc::SYS_fstat => calls::fstat64(fd, b as *mut libc::stat) as c_long,
            libc::SYS_dup => descriptors::dup(fd) as c_long,
            libc::SYS_dup3 => descriptors::dup3(fd, b as c_int, c as c_int) as c_long,
            libc::SYS_fcntl => descriptors::fcntl64(fd, b as c_int, c as c_ulong) as c_long,
            libc::SYS_openat => calls::openat64(fd, b as *const c_char, c as c_int, d as c_uint) as c_long,
            libc::SYS_mmap => calls::mmap64(
                a as *mut c_void,
                b as usize,
                c as c_int,
                d as c_int,
                e as c_int,
                f,
            ) as c_long,
            libc::SYS_sendfile => calls::sendfile64(fd, b as c_int, c as *mut i64, d as usize) as c_long,
            libc::SYS_splice => calls::splice(
                fd,
                b as *mut i64,
                c as c_int,
                d as *mut i64,
                e as usize,
                f as c_uint,
            ) as c_long,
            libc::SYS_copy_file_range => calls::copy_file_range(
                fd,
                b as *mut i64,
                c as c_int,
                d as *mut i64,
                e as usize,
                f as c_uint,
            ) as c_long,
            libc::SYS_flock => crate::unserved::flock(fd, b as c_int) as c_long,
            libc::SYS_ioctl => crate::unserved::ioctl(fd, b as c_ulong, c as *mut c_void) as c_long,
            libc::SYS_fchmod => crate::unserved::fchmod(fd, b as libc::mode_t) as c_long,
            libc::SYS_fchown => crate::unserved::fchown(fd, b as libc::uid_t, c as libc::gid_t) as c_long,
            libc::SYS_syncfs => crate::unserved::syncfs(fd) as c_long,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_dup2 => descriptors::dup2(fd, b as c_int) as c_long,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_open => calls::open64(a as *const c_char, b as c_int, c as c_uint) as c_long,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_creat => calls::creat64(a as *const c_char, b as libc::mode_t) as c_long,
            _ => return None,
        }
    };
    Some(r)
}

//! What the library asks the kernel itself, past its own interposed functions: a
//! descriptor's offset and attributes, and the mount made to read a file's attributes
//! again after the library's writes.

use std::ffi::c_int;

use weft_interpose::{fail, real, set_errno};

pub fn real_fstat(fd: c_int, st: &mut libc::stat) -> c_int {
    match real!("fstat", unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int) {
        // SAFETY: st is a valid stat buffer.
        Some(f) => unsafe { f(fd, st) },
        None => fail(libc::ENOSYS),
    }
}

/// `fd`'s attributes as the kernel caches them (statx with AT_STATX_DONT_SYNC: a FUSE
/// file system is not asked), in a stat.
pub fn cached_stat(fd: c_int) -> Option<libc::stat> {
    // SAFETY: zeroed stat/statx are valid buffers; the empty path names fd itself.
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let r = unsafe {
        libc::syscall(
            libc::SYS_statx,
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
            libc::STATX_TYPE | libc::STATX_INO | libc::STATX_SIZE,
            &mut sx as *mut libc::statx,
        )
    };
    if r != 0 {
        return None;
    }
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_dev = libc::makedev(sx.stx_dev_major, sx.stx_dev_minor);
    st.st_ino = sx.stx_ino;
    st.st_mode = u32::from(sx.stx_mode);
    st.st_size = sx.stx_size as i64;
    Some(st)
}

pub fn real_lseek(fd: c_int, offset: i64, whence: c_int) -> i64 {
    match real!("lseek", unsafe extern "C" fn(c_int, i64, c_int) -> i64) {
        // SAFETY: plain values.
        Some(f) => unsafe { f(fd, offset, whence) },
        None => fail(libc::ENOSYS) as i64,
    }
}

/// The mount's kernel forgets its attributes of `fd`'s file and asks the daemon again
/// (the size after the library's writes), and drops the file's clean cached pages.
pub fn refresh_mount(fd: c_int) {
    let saved = weft_interpose::errno();
    crate::guard::enter(|| {
        // SAFETY: a zeroed statx is a valid buffer; the empty path names fd itself.
        let mut sx: libc::statx = unsafe { std::mem::zeroed() };
        let flags = libc::AT_EMPTY_PATH | libc::AT_STATX_FORCE_SYNC;
        // SAFETY: as above.
        unsafe {
            libc::syscall(
                libc::SYS_statx,
                fd,
                c"".as_ptr(),
                flags,
                libc::STATX_SIZE,
                &mut sx as *mut libc::statx,
            );
            libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED);
        }
    });
    set_errno(saved);
}

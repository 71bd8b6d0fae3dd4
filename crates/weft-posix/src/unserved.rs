//! The calls the library leaves to the kernel on descriptors it serves: each upgrades an
//! O_PATH descriptor to a real one of the mount first ([`crate::upgrade`]), since the
//! kernel refuses them on O_PATH descriptors (EBADF, or POLLNVAL in poll). On any other
//! descriptor they cost one atomic load per descriptor named before libc's call.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};

use weft_interpose::{fail, real};

use crate::upgrade::upgrade_fd;

macro_rules! upgrading {
    ($name:ident, $sym:literal, ($fd:ident: c_int $(, $arg:ident: $ty:ty)*) -> $ret:ty, $err:expr) => {
        /// The descriptor is made a real one of the mount first (when it is a served
        /// O_PATH one).
        ///
        /// # Safety
        /// The libc function's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name($fd: c_int $(, $arg: $ty)*) -> $ret {
            if let Err(errno) = upgrade_fd($fd) {
                return ($err)(errno);
            }
            match real!($sym, unsafe extern "C" fn(c_int $(, $ty)*) -> $ret) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f($fd $(, $arg)*) },
                None => ($err)(libc::ENOSYS),
            }
        }
    };
}

/// -1 with errno (most calls).
fn minus(errno: c_int) -> c_int {
    fail(errno)
}
fn minus_isize(errno: c_int) -> isize {
    fail(errno) as isize
}
/// The errno as the answer (posix_fadvise, posix_fallocate).
fn returned(errno: c_int) -> c_int {
    errno
}

upgrading!(flock, "flock", (fd: c_int, op: c_int) -> c_int, minus);
upgrading!(lockf, "lockf", (fd: c_int, cmd: c_int, len: i64) -> c_int, minus);
upgrading!(lockf64, "lockf64", (fd: c_int, cmd: c_int, len: i64) -> c_int, minus);
// ioctl is variadic: its one optional argument is taken as a fixed one (as `open`).
upgrading!(ioctl, "ioctl", (fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int, minus);
upgrading!(fchmod, "fchmod", (fd: c_int, mode: libc::mode_t) -> c_int, minus);
upgrading!(fchown, "fchown", (fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int, minus);
upgrading!(futimens, "futimens", (fd: c_int, times: *const libc::timespec) -> c_int, minus);
upgrading!(futimes, "futimes", (fd: c_int, times: *const libc::timeval) -> c_int, minus);
upgrading!(fgetxattr, "fgetxattr", (fd: c_int, name: *const c_char, value: *mut c_void, size: usize) -> isize, minus_isize);
upgrading!(fsetxattr, "fsetxattr", (fd: c_int, name: *const c_char, value: *const c_void, size: usize, flags: c_int) -> c_int, minus);
upgrading!(flistxattr, "flistxattr", (fd: c_int, list: *mut c_char, size: usize) -> isize, minus_isize);
upgrading!(fremovexattr, "fremovexattr", (fd: c_int, name: *const c_char) -> c_int, minus);
upgrading!(posix_fadvise, "posix_fadvise", (fd: c_int, offset: i64, len: i64, advice: c_int) -> c_int, returned);
upgrading!(posix_fadvise64, "posix_fadvise64", (fd: c_int, offset: i64, len: i64, advice: c_int) -> c_int, returned);
upgrading!(posix_fallocate, "posix_fallocate", (fd: c_int, offset: i64, len: i64) -> c_int, returned);
upgrading!(posix_fallocate64, "posix_fallocate64", (fd: c_int, offset: i64, len: i64) -> c_int, returned);
upgrading!(readahead, "readahead", (fd: c_int, offset: i64, count: usize) -> isize, minus_isize);
upgrading!(sync_file_range, "sync_file_range", (fd: c_int, offset: i64, n: i64, flags: c_uint) -> c_int, minus);
upgrading!(syncfs, "syncfs", (fd: c_int) -> c_int, minus);

/// Upgrades the descriptor of each aio control block (glibc's aio threads read and
/// write with its internal calls, which the library never sees).
///
/// # Safety
/// `list` has `n` entries, each null or a valid control block.
unsafe fn upgrade_aio(list: *const *mut libc::aiocb, n: c_int) -> Result<(), c_int> {
    for i in 0..n.max(0) as usize {
        // SAFETY: the caller's contract.
        let cb = unsafe { *list.add(i) };
        if !cb.is_null() {
            // SAFETY: as above.
            upgrade_fd(unsafe { (*cb).aio_fildes })?;
        }
    }
    Ok(())
}

macro_rules! aio_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// aio_read(3)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(cb: *mut libc::aiocb) -> c_int {
            let one = [cb];
            // SAFETY: one control block from the caller.
            if let Err(errno) = unsafe { upgrade_aio(one.as_ptr(), 1) } {
                return fail(errno);
            }
            match real!($sym, unsafe extern "C" fn(*mut libc::aiocb) -> c_int) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(cb) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
aio_like!(aio_read, "aio_read");
aio_like!(aio_read64, "aio_read64");
aio_like!(aio_write, "aio_write");
aio_like!(aio_write64, "aio_write64");

macro_rules! aio_fsync_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// aio_fsync(3)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(op: c_int, cb: *mut libc::aiocb) -> c_int {
            let one = [cb];
            // SAFETY: one control block from the caller.
            if let Err(errno) = unsafe { upgrade_aio(one.as_ptr(), 1) } {
                return fail(errno);
            }
            match real!($sym, unsafe extern "C" fn(c_int, *mut libc::aiocb) -> c_int) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(op, cb) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
aio_fsync_like!(aio_fsync, "aio_fsync");
aio_fsync_like!(aio_fsync64, "aio_fsync64");

macro_rules! lio_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// lio_listio(3)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            mode: c_int,
            list: *const *mut libc::aiocb,
            n: c_int,
            sev: *mut libc::sigevent,
        ) -> c_int {
            // SAFETY: the caller's list.
            if let Err(errno) = unsafe { upgrade_aio(list, n) } {
                return fail(errno);
            }
            match real!(
                $sym,
                unsafe extern "C" fn(c_int, *const *mut libc::aiocb, c_int, *mut libc::sigevent) -> c_int
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(mode, list, n, sev) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
lio_like!(lio_listio, "lio_listio");
lio_like!(lio_listio64, "lio_listio64");

/// Upgrades the descriptors of a poll array.
///
/// # Safety
/// `fds` has `n` entries.
unsafe fn upgrade_pollfds(fds: *const libc::pollfd, n: libc::nfds_t) -> Result<(), c_int> {
    if fds.is_null() {
        return Ok(());
    }
    for i in 0..n as usize {
        // SAFETY: the caller's contract.
        upgrade_fd(unsafe { (*fds.add(i)).fd })?;
    }
    Ok(())
}

/// # Safety
/// poll(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's array.
    if let Err(errno) = unsafe { upgrade_pollfds(fds, n) } {
        return fail(errno);
    }
    match real!(
        "poll",
        unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(fds, n, timeout) },
        None => fail(libc::ENOSYS),
    }
}

/// # Safety
/// ppoll(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's array.
    if let Err(errno) = unsafe { upgrade_pollfds(fds, n) } {
        return fail(errno);
    }
    match real!(
        "ppoll",
        unsafe extern "C" fn(
            *mut libc::pollfd,
            libc::nfds_t,
            *const libc::timespec,
            *const libc::sigset_t,
        ) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(fds, n, timeout, mask) },
        None => fail(libc::ENOSYS),
    }
}

/// Upgrades the descriptors named in select's sets.
///
/// # Safety
/// Each set is null or a valid fd_set.
unsafe fn upgrade_sets(n: c_int, sets: [*mut libc::fd_set; 3]) -> Result<(), c_int> {
    let last = n.clamp(0, libc::FD_SETSIZE as c_int);
    for fd in 0..last {
        for set in sets {
            // SAFETY: the caller's contract.
            if !set.is_null() && unsafe { libc::FD_ISSET(fd, set) } {
                upgrade_fd(fd)?;
                break;
            }
        }
    }
    Ok(())
}

/// # Safety
/// select(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    x: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's sets.
    if let Err(errno) = unsafe { upgrade_sets(n, [r, w, x]) } {
        return fail(errno);
    }
    match real!(
        "select",
        unsafe extern "C" fn(
            c_int,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::timeval,
        ) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(n, r, w, x, timeout) },
        None => fail(libc::ENOSYS),
    }
}

/// # Safety
/// pselect(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    x: *mut libc::fd_set,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's sets.
    if let Err(errno) = unsafe { upgrade_sets(n, [r, w, x]) } {
        return fail(errno);
    }
    match real!(
        "pselect",
        unsafe extern "C" fn(
            c_int,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *const libc::timespec,
            *const libc::sigset_t,
        ) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(n, r, w, x, timeout, mask) },
        None => fail(libc::ENOSYS),
    }
}

/// # Safety
/// epoll_ctl(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut libc::epoll_event,
) -> c_int {
    if op != libc::EPOLL_CTL_DEL {
        if let Err(errno) = upgrade_fd(fd) {
            return fail(errno);
        }
    }
    match real!(
        "epoll_ctl",
        unsafe extern "C" fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(epfd, op, fd, event) },
        None => fail(libc::ENOSYS),
    }
}

/// Upgrades the descriptors a message passes (SCM_RIGHTS): the receiver gets the real
/// descriptor, not an O_PATH one it could not read.
///
/// # Safety
/// `msg` is null or a valid message header.
unsafe fn upgrade_passed(msg: *const libc::msghdr) -> Result<(), c_int> {
    if msg.is_null() {
        return Ok(());
    }
    // SAFETY: the caller's header; the CMSG macros walk its control buffer.
    unsafe {
        if (*msg).msg_control.is_null() {
            return Ok(());
        }
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<c_int>();
                let bytes = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..bytes / std::mem::size_of::<c_int>() {
                    upgrade_fd(data.add(i).read_unaligned())?;
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    Ok(())
}

/// # Safety
/// sendmsg(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(sock: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
    // SAFETY: the caller's header.
    if let Err(errno) = unsafe { upgrade_passed(msg) } {
        return fail(errno) as isize;
    }
    match real!(
        "sendmsg",
        unsafe extern "C" fn(c_int, *const libc::msghdr, c_int) -> isize
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(sock, msg, flags) },
        None => fail(libc::ENOSYS) as isize,
    }
}

/// # Safety
/// sendmmsg(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(sock: c_int, msgs: *mut libc::mmsghdr, n: c_uint, flags: c_int) -> c_int {
    if !msgs.is_null() {
        for i in 0..n as usize {
            // SAFETY: the caller's array of n headers.
            if let Err(errno) = unsafe { upgrade_passed(&(*msgs.add(i)).msg_hdr) } {
                return fail(errno);
            }
        }
    }
    match real!(
        "sendmmsg",
        unsafe extern "C" fn(c_int, *mut libc::mmsghdr, c_uint, c_int) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(sock, msgs, n, flags) },
        None => fail(libc::ENOSYS),
    }
}

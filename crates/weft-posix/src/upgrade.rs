//! O_PATH opens and their upgrade. A FUSE open costs the mount's daemon an OPEN, and the
//! close a FLUSH and a RELEASE (about a millisecond each file here); an O_PATH open of
//! the same file costs a LOOKUP the kernel has usually cached. So a regular file of a
//! served mount opened without O_CREAT, O_TRUNC or O_EXCL (for reading only: from
//! [`crate::served::READ_ADOPT_MIN`] bytes) is opened by the kernel with O_PATH ([`crate::served::open_path`]): the program still gets a real kernel
//! descriptor (its number, `/proc/self/fd`, close-on-exec, dup and passing work), and
//! the library serves reads, writes, lseek, fstat, fsync and F_GETFL/F_SETFL on it,
//! with the offset and the status flags in the entry.
//!
//! The moment the program does something the library does not serve on such a
//! descriptor (locks and other fcntl commands, ioctl, flock, fchmod, fchown, xattrs,
//! futimens, fadvise, fallocate, ftruncate, poll/select/epoll, aio, passing it in a
//! message, mmap and the other handovers, fork, exec or spawn), [`upgrade`] first sends
//! what the description buffered, then opens the file for real through the mount (via
//! `/proc/self/fd/N`, the program's flags less O_CREAT/O_TRUNC/O_EXCL), sets the
//! offset, and dup3()s it over every descriptor of the description (each keeping its
//! close-on-exec flag), so they share one kernel description as before. From then on
//! the kernel keeps offset and flags, as for a descriptor the library opened for real.

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use weft_interpose::{errno, fail, real};

use crate::guard::lock;
use crate::kernel::{real_lseek, refresh_mount};
use crate::table::{self, Entry};
use crate::{flush, stats};

/// `O_LARGEFILE` as the kernel reports it in F_GETFL (the libc crate's constant is 0 on
/// 64-bit targets, where the kernel forces the flag on every open).
#[cfg(target_arch = "aarch64")]
pub const KERNEL_LARGEFILE: c_int = 0o400000;
#[cfg(not(target_arch = "aarch64"))]
pub const KERNEL_LARGEFILE: c_int = 0o100000;

/// The flags an upgrade never repeats (they acted at the first open) or cannot use on
/// `/proc/self/fd/N`.
const NOT_REPEATED: c_int =
    libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_NOCTTY | libc::O_NOFOLLOW | libc::O_DIRECTORY;

/// What F_GETFL reports for a description opened with `flags`.
pub fn status_flags(flags: c_int) -> c_int {
    (flags & !(NOT_REPEATED | libc::O_CLOEXEC)) | KERNEL_LARGEFILE
}

/// F_SETFL on an O_PATH description: the flags it may change (as Linux's F_SETFL).
pub const SETTABLE: c_int =
    libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME;

/// Makes `entry`'s descriptors real descriptors of the mount (nothing when they are).
/// Err: the errno of the open through the mount; the descriptors stay O_PATH ones.
pub fn upgrade(entry: &Entry) -> Result<(), c_int> {
    let _quiet = crate::guard::Quiet::new();
    let mut offset = lock(&entry.offset);
    if !entry.path.load(Ordering::SeqCst) {
        return Ok(());
    }
    // The kernel serves the file from now on: what the library holds goes first (a
    // failure stays for the description's fsync or close to report).
    let _ = flush::flush(entry);
    let fds = table::fds_of(entry);
    let Some(&first) = fds.first() else {
        return Ok(());
    };
    let saved = errno();
    let flags = (entry.flags.load(Ordering::SeqCst) & !NOT_REPEATED) | libc::O_CLOEXEC;
    let name = format!("/proc/self/fd/{first}\0");
    let opened = crate::guard::within(|| {
        let open = real!(
            "open",
            unsafe extern "C" fn(*const libc::c_char, c_int, ...) -> c_int
        )
        .ok_or(libc::ENOSYS)?;
        // SAFETY: a NUL-terminated name.
        let new = unsafe { open(name.as_ptr().cast(), flags, 0) };
        if new < 0 {
            return Err(errno());
        }
        real_lseek(new, *offset, libc::SEEK_SET);
        let fcntl = real!("fcntl", unsafe extern "C" fn(c_int, c_int, ...) -> c_int);
        let dup3 = real!("dup3", unsafe extern "C" fn(c_int, c_int, c_int) -> c_int);
        let close = real!("close", unsafe extern "C" fn(c_int) -> c_int);
        let (Some(fcntl), Some(dup3), Some(close)) = (fcntl, dup3, close) else {
            return Err(libc::ENOSYS);
        };
        let mut failed = None;
        for fd in &fds {
            // SAFETY: descriptor calls on the program's descriptors and our own.
            unsafe {
                let fd_flags = fcntl(*fd, libc::F_GETFD);
                let cloexec = if fd_flags >= 0 && fd_flags & libc::FD_CLOEXEC != 0 {
                    libc::O_CLOEXEC
                } else {
                    0
                };
                if dup3(new, *fd, cloexec) < 0 {
                    failed = Some(errno());
                }
            }
        }
        // SAFETY: our own descriptor.
        unsafe { close(new) };
        failed.map_or(Ok(()), Err)
    });
    weft_interpose::set_errno(saved);
    opened?;
    entry.path.store(false, Ordering::SeqCst);
    *offset = 0;
    stats::add(&stats::UPGRADES, 1);
    if entry.wrote.load(Ordering::SeqCst) {
        refresh_mount(first);
    }
    Ok(())
}

/// Upgrades `fd`'s description when it is a served O_PATH one.
pub fn upgrade_fd(fd: c_int) -> Result<(), c_int> {
    let Some(served) = table::get(fd) else {
        return Ok(());
    };
    if !served.path.load(Ordering::SeqCst) {
        return Ok(());
    }
    let (entry, quiet) = served.take();
    let r = upgrade(&entry);
    drop(quiet);
    r
}

/// Upgrades `fd` first: the answer of a call the kernel serves on it, or -1 with the
/// upgrade's errno.
pub fn before(fd: c_int) -> Result<(), c_int> {
    upgrade_fd(fd).map_err(fail)
}

/// Upgrades every O_PATH description of the process (`inherited`: only those with a
/// descriptor an exec keeps, without close-on-exec): before fork (the child serves
/// nothing itself), exec (a program without the library gets the descriptors) and spawn.
pub fn upgrade_all(inherited: bool) {
    if !crate::guard::active() || crate::guard::busy() {
        return;
    }
    for (_, entry) in table::entries_of(None) {
        if !entry.path.load(Ordering::SeqCst) {
            continue;
        }
        if inherited && !table::fds_of(&entry).into_iter().any(kept_by_exec) {
            continue;
        }
        if let Err(e) = upgrade(&entry) {
            eprintln!("weft-posix: a descriptor could not be reopened through the mount (errno {e})");
        }
    }
}

/// Whether an exec keeps `fd` open (no close-on-exec).
fn kept_by_exec(fd: c_int) -> bool {
    match real!("fcntl", unsafe extern "C" fn(c_int, c_int, ...) -> c_int) {
        Some(fcntl) => {
            let saved = errno();
            // SAFETY: F_GETFD on a descriptor number.
            let flags = unsafe { fcntl(fd, libc::F_GETFD) };
            weft_interpose::set_errno(saved);
            flags >= 0 && flags & libc::FD_CLOEXEC == 0
        }
        None => true,
    }
}

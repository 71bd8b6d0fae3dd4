//! The descriptor calls: close and close_range (a served description's buffer sent,
//! its deferred error reported), the dup family and fcntl (the new descriptor served
//! too; F_GETFL/F_SETFL answered on an O_PATH description, any other command upgrading
//! it first), and socket (the native client's own descriptors moved high).

use std::ffi::{c_int, c_uint, c_ulong};

use weft_interpose::{fail, real};

use crate::flush::{flush, release, settle};
use crate::guard::lock;
use crate::kernel::refresh_mount;
use crate::table;

/// The native client's own descriptors live high, out of the way of programs that
/// dup2 onto small numbers of their choosing (shells, Python's subprocess): a socket
/// made inside the library moves to the top of the descriptor limit.
///
/// # Safety
/// socket(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    let fd = match real!("socket", unsafe extern "C" fn(c_int, c_int, c_int) -> c_int) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(domain, kind, protocol) },
        None => fail(libc::ENOSYS),
    };
    if fd >= 0 && crate::guard::busy() {
        return crate::guard::move_high(fd);
    }
    fd
}

/// # Safety
/// close(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let mut deferred = None;
    if table::owned(fd) {
        let _quiet = crate::guard::Quiet::new();
        let entry = table::remove(fd);
        if let Some(e) = &entry {
            // Close of any descriptor sends the buffer (close-to-open) and reports a
            // deferred write's failure, as NFS does.
            deferred = settle(e).err();
            // The last descriptor of a file the library wrote: the mount reads its size
            // again, so `stat` through it is right at once.
            if std::sync::Arc::strong_count(e) == 1 && e.wrote.load(std::sync::atomic::Ordering::SeqCst) {
                refresh_mount(fd);
            }
        }
        release(entry);
    }
    let r = match real!("close", unsafe extern "C" fn(c_int) -> c_int) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(fd) },
        None => fail(libc::ENOSYS),
    };
    match deferred {
        // The descriptor is closed all the same (as Linux's close after an error).
        Some(errno) if r == 0 => fail(errno),
        _ => r,
    }
}

/// Descriptors `first..=last` are being closed by a call other than close.
fn forget_range(first: c_uint, last: c_uint) {
    let last = last.min(table::FDS_MAX as c_uint - 1);
    for fd in first..=last {
        if table::owned(fd as c_int) {
            let entry = table::remove(fd as c_int);
            if let Some(e) = &entry {
                let _ = flush(e);
            }
            release(entry);
        }
    }
}

/// # Safety
/// close_range(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let r = match real!(
        "close_range",
        unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(first, last, flags) },
        None => fail(libc::ENOSYS),
    };
    if r == 0 && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        forget_range(first, last);
    }
    r
}

/// # Safety
/// closefrom(3)'s contract.
#[no_mangle]
pub unsafe extern "C" fn closefrom(first: c_int) {
    if let Some(f) = real!("closefrom", unsafe extern "C" fn(c_int)) {
        // SAFETY: the same arguments.
        unsafe { f(first) };
    }
    forget_range(first.max(0) as c_uint, c_uint::MAX);
}

/// `new` now refers to `old`'s open file description (dup family, F_DUPFD).
fn duplicated(old: c_int, new: c_int) {
    if new < 0 {
        return;
    }
    let _quiet = crate::guard::Quiet::new();
    if table::owned(new) {
        release(table::remove(new));
    }
    if let Some(e) = table::get(old) {
        let _ = flush(&e);
        table::insert(new, e.entry.clone());
        // Standard input, output and error are read and written by stdio with glibc's
        // internal calls, which the library never sees: a real descriptor there.
        if new <= 2 {
            let (entry, quiet) = e.take();
            if let Err(errno) = crate::upgrade::upgrade(&entry) {
                eprintln!(
                    "weft-posix: descriptor {new} could not be reopened through the mount (errno {errno})"
                );
            }
            drop(quiet);
        }
    }
}

/// # Safety
/// dup(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    let new = match real!("dup", unsafe extern "C" fn(c_int) -> c_int) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(old) },
        None => fail(libc::ENOSYS),
    };
    duplicated(old, new);
    new
}

/// # Safety
/// dup2(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let r = match real!("dup2", unsafe extern "C" fn(c_int, c_int) -> c_int) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(old, new) },
        None => fail(libc::ENOSYS),
    };
    if r >= 0 && old != new {
        duplicated(old, r);
    }
    r
}

/// # Safety
/// dup3(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let r = match real!("dup3", unsafe extern "C" fn(c_int, c_int, c_int) -> c_int) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(old, new, flags) },
        None => fail(libc::ENOSYS),
    };
    if r >= 0 {
        duplicated(old, r);
    }
    r
}

macro_rules! fcntl_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// fcntl(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
            if let Some(r) = path_fcntl(fd, cmd, arg) {
                return r;
            }
            let r = match real!($sym, unsafe extern "C" fn(c_int, c_int, ...) -> c_int) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd, cmd, arg) },
                None => fail(libc::ENOSYS),
            };
            if r >= 0 {
                match cmd {
                    libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => duplicated(fd, r),
                    libc::F_SETFL => {
                        if let Some(e) = table::get(fd) {
                            e.append.store(
                                arg as c_int & libc::O_APPEND != 0,
                                std::sync::atomic::Ordering::SeqCst,
                            );
                        }
                    }
                    _ => {}
                }
            }
            r
        }
    };
}
fcntl_like!(fcntl, "fcntl");
fcntl_like!(fcntl64, "fcntl64");

/// fcntl on an O_PATH description: F_GETFL and F_SETFL served from the entry (the
/// kernel would report O_PATH), the descriptor-flag and dup commands left to the kernel
/// (`None`), and any other command (locks, leases, owners...) on a real descriptor:
/// upgraded first (`None`, or `Some(-1)` when that failed).
fn path_fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> Option<c_int> {
    use std::sync::atomic::Ordering::SeqCst;
    let e = table::get(fd)?;
    if !e.path.load(SeqCst) {
        return None;
    }
    match cmd {
        libc::F_GETFD | libc::F_SETFD | libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => None,
        libc::F_GETFL => {
            let held = lock(&e.offset);
            let flags = e.path.load(SeqCst).then(|| e.flags.load(SeqCst));
            drop(held);
            // Upgraded meanwhile: the kernel answers.
            flags
        }
        libc::F_SETFL => {
            let held = lock(&e.offset);
            if !e.path.load(SeqCst) {
                return None;
            }
            let set = arg as c_int & crate::upgrade::SETTABLE;
            let old = e.flags.load(SeqCst);
            e.flags.store((old & !crate::upgrade::SETTABLE) | set, SeqCst);
            e.append.store(set & libc::O_APPEND != 0, SeqCst);
            drop(held);
            Some(0)
        }
        _ => {
            let (entry, quiet) = e.take();
            let r = crate::upgrade::upgrade(&entry);
            drop(quiet);
            r.err().map(fail)
        }
    }
}

//! Handing a descriptor back to the kernel when the program does something the library
//! does not serve on it (mmap, sendfile, splice, copy_file_range, fdopen, preadv2 and
//! pwritev2 with flags): every descriptor of that open file description leaves the
//! table, so from then on all its I/O goes through the mount. The library holds no data
//! (its writes are on the io servers when they return), so nothing is lost or seen
//! twice; when it wrote, the mount is made to read the file's size again and drop its
//! cached pages first.

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use crate::flush::{flush, release};
use crate::kernel::refresh_mount;
use crate::{stats, table};

/// Hands `fd` (when served) and its dup'd descriptors back to the kernel.
pub fn handover(fd: c_int) {
    let Some(served) = table::get(fd) else { return };
    let (entry, _quiet) = served.take();
    // An O_PATH descriptor becomes a real one of the mount first (it sends the buffer).
    if let Err(errno) = crate::upgrade::upgrade(&entry) {
        eprintln!("weft-posix: descriptor {fd} could not be reopened through the mount (errno {errno})");
    }
    // What the library holds goes to the io servers before the kernel serves the file
    // (a failure stays for the kernel path's close to miss: it is counted and said).
    if let Err(errno) = flush(&entry) {
        eprintln!("weft-posix: descriptor {fd} handed to the kernel; buffered writes failed (errno {errno})");
    }
    let gone = table::remove_all_of(&entry);
    // The kernel path may write now: no window of this process may outlive that.
    entry.ahead.clear();
    crate::ahead::wrote();
    if entry.wrote.load(Ordering::SeqCst) {
        refresh_mount(fd);
    }
    stats::add(&stats::HANDOVERS, 1);
    drop(gone);
    release(Some(entry));
}

//! Sending what the table's entries buffered ([`crate::behind`]): one open file
//! description's, a file's (every description of its inode), the whole process's; the
//! errors of deferred sends for fsync and close; and an entry whose last descriptor is
//! gone, sent and closed natively.

use std::ffi::c_int;
use std::sync::Arc;

use crate::guard::lock;
use crate::kernel::refresh_mount;
use crate::table::{self, Entry};

/// Sends `e`'s buffered writes now. Err: this send failed (kept for fsync/close too).
pub fn flush(e: &Entry) -> Result<bool, c_int> {
    let mut b = lock(&e.behind);
    if b.bytes() == 0 {
        return Ok(false);
    }
    crate::guard::within(|| b.send(&e.file)).map(|()| true)
}

/// Sends the buffered writes of every description of inode `ino` in this process
/// (Ok(true): something was sent).
pub fn flush_inode(ino: u64) -> Result<bool, c_int> {
    if !crate::behind::any() {
        return Ok(false);
    }
    let mut sent = false;
    for (_, e) in table::entries_of(Some(ino)) {
        sent |= flush(&e)?;
    }
    Ok(sent)
}

/// Sends every buffered write of the process (fork, exec, spawn, stdio opens, exit);
/// failures stay for the descriptions' fsync or close.
pub fn flush_all() {
    if !crate::guard::active() || !crate::behind::any() {
        return;
    }
    for (fd, e) in table::entries_of(None) {
        // What runs next reads through the kernel: the mount drops the pages it cached
        // of the file and reads its size again.
        if flush(&e).is_ok_and(|sent| sent) {
            refresh_mount(fd);
        }
    }
}

/// Sends `e`'s buffer and takes the error of any deferred send since the last settle:
/// what fsync, fdatasync and close report.
pub fn settle(e: &Entry) -> Result<(), c_int> {
    let _ = flush(e);
    match lock(&e.behind).failed.take() {
        Some(errno) => Err(errno),
        None => Ok(()),
    }
}

/// The last descriptor of an entry is gone: close it natively.
pub fn release(entry: Option<Arc<Entry>>) {
    let Some(entry) = entry else { return };
    if let Ok(entry) = Arc::try_unwrap(entry) {
        // A description dropped without a close of ours (dup2 over it, close_range)
        // still sends what it buffered.
        let _ = flush(&entry);
        crate::guard::enter(|| {
            if entry.writable {
                let _ = entry.file.close();
            }
        });
    }
}

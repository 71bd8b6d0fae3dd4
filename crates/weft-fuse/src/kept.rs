//! Files removed while open in this mount. POSIX keeps an unlinked file alive for the
//! descriptors that still have it open. When this mount removes (or renames over) the
//! last name of a file it has open, it asks the manager to keep the file, nameless (link
//! count 0, as `fstat` then shows), for this mount's session; when the file's last
//! descriptor here closes, the mount releases it and its data goes. A session that stops
//! renewing itself (the mount crashed) loses its files after the manager's lease.
//!
//! Descriptors in other mounts or other clients are not covered: for them the file is
//! gone, and their reads fail with ESTALE.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use weft_client::{Client, InodeId};

/// How often a mount that keeps files tells the manager it is alive (well within the
/// manager's lease, `weft_meta::SESSION_LEASE`, 60 s).
pub const SESSION_RENEW_PERIOD: Duration = Duration::from_secs(10);

/// A random session id for one mount.
pub fn new_session() -> u64 {
    let mut id = 0u64;
    // SAFETY: getrandom writes at most the 8 bytes it is given.
    let n = unsafe { libc::getrandom((&mut id as *mut u64).cast(), 8, 0) };
    if n != 8 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        id = now.as_nanos() as u64 ^ ((std::process::id() as u64) << 32);
    }
    id
}

#[derive(Default)]
struct Entry {
    handles: usize,
    kept: bool,
}

/// Open descriptors per inode in this mount, and which of those files the manager keeps
/// for it.
#[derive(Default)]
pub struct OpenInodes {
    table: Mutex<HashMap<InodeId, Entry>>,
}

impl OpenInodes {
    pub fn opened(&self, inode: InodeId) {
        self.lock().entry(inode).or_default().handles += 1;
    }

    /// A descriptor closed; returns the inode to release if it was the last one of a
    /// kept file.
    pub fn closed(&self, inode: InodeId) -> Option<InodeId> {
        let mut table = self.lock();
        let entry = table.get_mut(&inode)?;
        entry.handles = entry.handles.saturating_sub(1);
        if entry.handles > 0 {
            return None;
        }
        table.remove(&inode).filter(|e| e.kept).map(|_| inode)
    }

    /// Whether a descriptor of this mount has `inode` open.
    pub fn is_open(&self, inode: InodeId) -> bool {
        self.lock().contains_key(&inode)
    }

    pub fn any_open(&self) -> bool {
        !self.lock().is_empty()
    }

    pub fn any_kept(&self) -> bool {
        self.lock().values().any(|e| e.kept)
    }

    /// The manager keeps `inode` for this mount. Returns false when no descriptor has it
    /// open any more (it closed meanwhile): release it now.
    pub fn keep(&self, inode: InodeId) -> bool {
        match self.lock().get_mut(&inode) {
            Some(entry) if entry.handles > 0 => {
                entry.kept = true;
                true
            }
            _ => false,
        }
    }

    /// Every kept file (the mount is ending).
    pub fn drain_kept(&self) -> Vec<InodeId> {
        self.lock()
            .drain()
            .filter(|(_, e)| e.kept)
            .map(|(i, _)| i)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<InodeId, Entry>> {
        self.table.lock().expect("open inode table poisoned")
    }
}

/// Releases `inode`, kept for `session`; a failure leaves it to the manager's lease.
pub fn release(client: &Client, session: u64, inode: InodeId) {
    if let Err(e) = client.release(session, inode) {
        eprintln!("weft-fuse: releasing inode {inode} (removed while open): {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_file_is_released_by_its_last_close() {
        let open = OpenInodes::default();
        let f = InodeId(9);
        open.opened(f);
        open.opened(f);
        assert!(open.keep(f));
        assert!(open.any_kept());
        assert_eq!(open.closed(f), None);
        assert_eq!(open.closed(f), Some(f));
        assert!(!open.any_open());
        // Kept after its last close: the caller releases at once.
        assert!(!open.keep(f));
        // Not kept: closing releases nothing.
        open.opened(InodeId(3));
        assert_eq!(open.closed(InodeId(3)), None);
        assert_ne!(new_session(), new_session());
    }
}

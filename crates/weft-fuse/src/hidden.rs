//! Files removed while open in this mount. POSIX keeps an unlinked file alive for the
//! descriptors that still have it open; Weft removes its data at once. So, as NFS
//! clients do ("silly rename"), the mount renames an open file that is unlinked or
//! replaced to a hidden name in the same directory, and removes that name when the
//! file's last descriptor in this mount closes (or the mount ends).
//!
//! Descriptors in other mounts or other clients are not covered: for them the file is
//! gone, and their reads fail with ESTALE.

use std::collections::HashMap;
use std::sync::Mutex;
use weft_client::{Client, InodeId};

/// The name an open file is kept under after it was removed.
pub fn hidden_name(inode: InodeId) -> String {
    format!(".weft-unlinked-{inode}")
}

/// A removed file's hidden name, and who removed it (who may remove the hidden name).
pub struct Hidden {
    pub parent: InodeId,
    pub name: String,
    pub client: Client,
}

impl Hidden {
    pub fn remove(&self) {
        if let Err(e) = self.client.unlink_in(self.parent, &self.name) {
            eprintln!(
                "weft-fuse: removing {} (a file unlinked while open): {e}",
                self.name
            );
        }
    }
}

#[derive(Default)]
struct Entry {
    handles: usize,
    hidden: Option<Hidden>,
}

/// Open descriptors per inode in this mount.
#[derive(Default)]
pub struct OpenInodes {
    table: Mutex<HashMap<InodeId, Entry>>,
}

impl OpenInodes {
    pub fn opened(&self, inode: InodeId) {
        self.lock().entry(inode).or_default().handles += 1;
    }

    /// A descriptor closed; returns the hidden name to remove if it was the last one.
    pub fn closed(&self, inode: InodeId) -> Option<Hidden> {
        let mut table = self.lock();
        let entry = table.get_mut(&inode)?;
        entry.handles = entry.handles.saturating_sub(1);
        if entry.handles > 0 {
            return None;
        }
        table.remove(&inode).and_then(|e| e.hidden)
    }

    pub fn any_open(&self) -> bool {
        !self.lock().is_empty()
    }

    pub fn is_open(&self, inode: InodeId) -> bool {
        self.lock().get(&inode).is_some_and(|e| e.handles > 0)
    }

    /// Records that an open file now lives under a hidden name. If its last descriptor
    /// closed meanwhile, the hidden name is handed back for removal now.
    pub fn hide(&self, inode: InodeId, hidden: Hidden) -> Option<Hidden> {
        match self.lock().get_mut(&inode) {
            Some(entry) if entry.handles > 0 => {
                entry.hidden = Some(hidden);
                None
            }
            _ => Some(hidden),
        }
    }

    /// Every hidden name still kept (the mount is ending).
    pub fn drain_hidden(&self) -> Vec<Hidden> {
        self.lock().drain().filter_map(|(_, e)| e.hidden).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<InodeId, Entry>> {
        self.table.lock().expect("open inode table poisoned")
    }
}

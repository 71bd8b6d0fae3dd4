//! The descriptors the library serves: descriptor number -> [`Entry`] (one per open
//! file description, shared by dup'd descriptors). Checking a descriptor that is not
//! served costs one atomic load (`OWNED`), so the native client's own socket calls and
//! every other descriptor pass through at once.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use crate::guard::lock;

use weft_client::File;

/// Descriptors at or above this number are never served (left to the kernel).
pub const FDS_MAX: usize = 65536;

static OWNED: [AtomicBool; FDS_MAX] = [const { AtomicBool::new(false) }; FDS_MAX];
static TABLE: Mutex<Option<HashMap<c_int, Arc<Entry>>>> = Mutex::new(None);

/// A file served natively: one open file description of the mount.
pub struct Entry {
    pub file: File,
    pub readable: bool,
    pub writable: bool,
    /// O_APPEND (F_SETFL may change it).
    pub append: AtomicBool,
    /// O_SYNC / O_DSYNC: every write is synced before it returns.
    pub sync: bool,
    /// The library wrote or truncated the file through this description: the mount's
    /// size of it may be old.
    pub wrote: AtomicBool,
    /// The descriptor is an O_PATH one (see `crate::upgrade`): the offset is the one in
    /// `offset`, the status flags those in `flags`. False once it is a real descriptor of
    /// the mount (the kernel keeps offset and flags); changed only under `offset`'s lock.
    pub path: AtomicBool,
    /// The status flags the program opened with (F_GETFL while `path`; the upgrade's
    /// open flags).
    pub flags: AtomicI32,
    /// Serialises the calls that use the offset (take it, move data, move it); holds the
    /// offset itself while `path`.
    pub offset: Mutex<i64>,
    /// Sequential reads: the window read ahead (see `crate::ahead`).
    pub ahead: crate::ahead::Ahead,
    /// Small writes not sent yet (see `crate::behind`).
    pub behind: Mutex<crate::behind::Behind>,
}

fn index(fd: c_int) -> Option<usize> {
    usize::try_from(fd).ok().filter(|i| *i < FDS_MAX)
}

/// A served descriptor's entry, with signals blocked on this thread while it is held
/// (see [`crate::guard::Quiet`]).
pub struct Served {
    // Dropped first: the signals come back after everything else.
    pub entry: Arc<Entry>,
    _quiet: crate::guard::Quiet,
}

impl std::ops::Deref for Served {
    type Target = Arc<Entry>;
    fn deref(&self) -> &Arc<Entry> {
        &self.entry
    }
}

impl Served {
    /// The entry and the blocked signals, apart.
    pub fn take(self) -> (Arc<Entry>, crate::guard::Quiet) {
        (self.entry, self._quiet)
    }
}

/// The entry of `fd` when the library serves it.
pub fn get(fd: c_int) -> Option<Served> {
    let i = index(fd)?;
    if !OWNED[i].load(Ordering::Acquire) || !crate::guard::active() || crate::guard::busy() {
        return None;
    }
    let quiet = crate::guard::Quiet::new();
    let entry = lock(&TABLE).as_ref()?.get(&fd).cloned()?;
    Some(Served { entry, _quiet: quiet })
}

/// Serves `fd` from `entry` from now on. False when `fd` is out of range.
pub fn insert(fd: c_int, entry: Arc<Entry>) -> bool {
    let Some(i) = index(fd) else { return false };
    let old = lock(&TABLE).get_or_insert_with(HashMap::new).insert(fd, entry);
    OWNED[i].store(true, Ordering::Release);
    drop(old);
    true
}

/// Stops serving `fd`; the entry (closed natively when it was the last descriptor of
/// its file description) is returned to be dropped outside the table's lock.
pub fn remove(fd: c_int) -> Option<Arc<Entry>> {
    let i = index(fd)?;
    if !OWNED[i].load(Ordering::Acquire) {
        return None;
    }
    OWNED[i].store(false, Ordering::Release);
    lock(&TABLE).as_mut()?.remove(&fd)
}

/// Stops serving every descriptor of `entry`'s file description.
pub fn remove_all_of(entry: &Arc<Entry>) -> Vec<Arc<Entry>> {
    let mut t = lock(&TABLE);
    let Some(map) = t.as_mut() else { return Vec::new() };
    let fds: Vec<c_int> = map
        .iter()
        .filter(|(_, e)| Arc::ptr_eq(e, entry))
        .map(|(fd, _)| *fd)
        .collect();
    let mut out = Vec::new();
    for fd in fds {
        if let Some(i) = index(fd) {
            OWNED[i].store(false, Ordering::Release);
        }
        out.extend(map.remove(&fd));
    }
    out
}

/// An entry of inode `ino` that wrote: its size is the one to report for the file
/// (the mount's may be old until the library's close).
pub fn written(ino: u64) -> Option<Arc<Entry>> {
    if !crate::guard::active() || crate::guard::busy() {
        return None;
    }
    let _quiet = crate::guard::Quiet::new();
    let t = lock(&TABLE);
    t.as_ref()?
        .values()
        .find(|e| e.file.inode().0 == ino && e.wrote.load(Ordering::SeqCst))
        .cloned()
}

/// Every descriptor serving `entry`'s file description.
pub fn fds_of(entry: &Entry) -> Vec<c_int> {
    let t = lock(&TABLE);
    let Some(map) = t.as_ref() else { return Vec::new() };
    map.iter()
        .filter(|(_, e)| std::ptr::eq(Arc::as_ptr(e), entry))
        .map(|(fd, _)| *fd)
        .collect()
}

/// Every entry of inode `ino` (`None`: of every file), each with one of its descriptors.
pub fn entries_of(ino: Option<u64>) -> Vec<(c_int, Arc<Entry>)> {
    let _quiet = crate::guard::Quiet::new();
    let t = lock(&TABLE);
    let Some(map) = t.as_ref() else { return Vec::new() };
    let mut out: Vec<(c_int, Arc<Entry>)> = Vec::new();
    for (fd, e) in map {
        if ino.is_none_or(|i| e.file.inode().0 == i) && !out.iter().any(|(_, o)| Arc::ptr_eq(o, e)) {
            out.push((*fd, e.clone()));
        }
    }
    out
}

/// Whether `fd` is in the table and this process may change it (not a vfork child).
pub fn owned(fd: c_int) -> bool {
    index(fd).is_some_and(|i| OWNED[i].load(Ordering::Acquire))
        && crate::guard::active()
        && crate::guard::own_process()
}

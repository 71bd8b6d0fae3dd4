//! Attribute changes of a file this mount created and holds open, sent at its close.
//!
//! `tar x` as root makes every file with `open(O_CREAT|O_EXCL)`, writes it, then sets
//! its times, owner and mode (`futimens`, `fchown`, `fchmod`) before closing it: three
//! durable manager commits (and a size query each) per file on top of the create. The
//! file is new and open here, and no other client has a reason to look at it before
//! it is closed (close-to-open: its data is not on the io servers yet either, see
//! `behind`). So such changes are kept, merged into one, and sent with one request
//! when the file is closed (flush), fsynced or released, before anything else in this
//! mount opens it, or when a change that cannot be kept arrives. Meanwhile this mount
//! answers with the attributes as they will be (every attribute the mount reports is
//! overlaid with what is kept), so the caller and everything else in the mount see
//! the change at once; other clients see it once the file is closed, as its data.
//!
//! Only changes whose outcome the mount knows without the manager are kept, by a caller
//! who may make them whatever the file's state: root's (any mode, owner or time), and
//! the owner's mode (without setgid, which depends on the caller's groups) and times.
//! Changes are merged only in the order the manager applies them (owner, then mode,
//! then times): a chown after a kept chmod sends what is kept first. Explicit times
//! stand for "now" (the mount's clock), so that the answer and the outcome agree.
//! An error of the merged change is the close's (or fsync's) error, as kept writes'.

use crate::attr::timespec;
use fuser::Errno;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use weft_client::{Attr, Client, FileKind, InodeId, SetAttr, TimeSet, Timespec};

/// Files with kept changes, and files created here and still open; past this, changes
/// are sent at once (and the record of created files starts over).
const KEPT_FILES_MAX: usize = 4096;
const CREATED_MAX: usize = 1 << 16;

const MODE_SETUID: u32 = 0o4000;
const MODE_SETGID: u32 = 0o2000;
const MODE_GROUP_EXECUTE: u32 = 0o010;

struct Kept {
    /// Who made the changes, as whom they are sent.
    caller: (u32, u32),
    client: Client,
    changes: SetAttr,
    /// When the last change was made (the ctime shown meanwhile).
    at: Timespec,
}

/// One file's kept changes; the lock is held while they are sent, so that a change
/// kept meanwhile follows them.
type Slot = Arc<Mutex<Option<Kept>>>;

#[derive(Default)]
pub struct Deferred {
    kept: Mutex<HashMap<InodeId, Slot>>,
    created: Mutex<HashSet<InodeId>>,
    /// Created here and known to have no extended attributes (`has_no_xattrs`).
    no_xattrs: Mutex<HashSet<InodeId>>,
    /// Created here, open, and not yet written (`first_write`).
    unwritten: Mutex<HashSet<InodeId>>,
}

/// What a kept change needs to know of its caller and file.
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub client: Client,
}

impl Deferred {
    /// `inode` was created by this mount and is open here.
    pub fn created(&self, inode: InodeId) {
        let mut created = self.created.lock().expect("created table poisoned");
        if created.len() >= CREATED_MAX {
            created.clear();
        }
        created.insert(inode);
        drop(created);
        let mut no_xattrs = self.no_xattrs.lock().expect("no-xattrs table poisoned");
        if no_xattrs.len() >= CREATED_MAX {
            no_xattrs.clear();
        }
        no_xattrs.insert(inode);
        drop(no_xattrs);
        let mut unwritten = self.unwritten.lock().expect("unwritten table poisoned");
        if unwritten.len() >= CREATED_MAX {
            unwritten.clear();
        }
        unwritten.insert(inode);
    }

    /// True once: at the first write of a file this mount created and holds open.
    pub fn first_write(&self, inode: InodeId) -> bool {
        let mut unwritten = self.unwritten.lock().expect("unwritten table poisoned");
        !unwritten.is_empty() && unwritten.remove(&inode)
    }

    /// Whether `inode` is known here to have no extended attributes: this mount created
    /// it (its create made it: the manager gives a new file none), has neither closed nor opened it
    /// again since, and has set or removed none of its extended attributes. The kernel
    /// asks for `security.capability` at a file's first write and at each chown (to drop
    /// it); for such a file "none" is known here, as its kept attributes are.
    pub fn has_no_xattrs(&self, inode: InodeId) -> bool {
        self.no_xattrs
            .lock()
            .expect("no-xattrs table poisoned")
            .contains(&inode)
    }

    /// `inode` was closed or opened here, or this mount sets or removes one of its
    /// extended attributes: from now on the manager says what they are.
    pub fn xattrs_unknown(&self, inode: InodeId) {
        let mut table = self.no_xattrs.lock().expect("no-xattrs table poisoned");
        if !table.is_empty() {
            table.remove(&inode);
        }
    }

    /// `inode` has no descriptor open here any more (call after `send`).
    pub fn closed(&self, inode: InodeId) {
        self.created
            .lock()
            .expect("created table poisoned")
            .remove(&inode);
        self.xattrs_unknown(inode);
        self.unwritten
            .lock()
            .expect("unwritten table poisoned")
            .remove(&inode);
        self.kept.lock().expect("kept table poisoned").remove(&inode);
    }

    fn slot(&self, inode: InodeId) -> Option<Slot> {
        let table = self.kept.lock().expect("kept table poisoned");
        if table.is_empty() {
            return None;
        }
        table.get(&inode).cloned()
    }

    /// Keeps `changes` of `inode` (whose attributes as this mount shows them are
    /// `current`) to send later, if they may be: true if kept.
    pub fn keep(&self, inode: InodeId, current: &Attr, caller: &Caller, changes: &SetAttr) -> bool {
        if !keepable(current, caller, changes)
            || !self
                .created
                .lock()
                .expect("created table poisoned")
                .contains(&inode)
        {
            return false;
        }
        let slot = {
            let mut table = self.kept.lock().expect("kept table poisoned");
            if table.len() >= KEPT_FILES_MAX && !table.contains_key(&inode) {
                return false;
            }
            table.entry(inode).or_default().clone()
        };
        let mut slot = slot.lock().expect("kept slot poisoned");
        let now = timespec(SystemTime::now());
        let mut changes = changes.clone();
        for time in [&mut changes.atime, &mut changes.mtime] {
            if *time == Some(TimeSet::Now) {
                *time = Some(TimeSet::At(now));
            }
        }
        match slot.as_mut() {
            None => {
                *slot = Some(Kept {
                    caller: (caller.uid, caller.gid),
                    client: caller.client.clone(),
                    changes,
                    at: now,
                });
                true
            }
            Some(kept) if kept.caller == (caller.uid, caller.gid) && merges(&kept.changes, &changes) => {
                let k = &mut kept.changes;
                k.uid = changes.uid.or(k.uid);
                k.gid = changes.gid.or(k.gid);
                k.mode = changes.mode.or(k.mode);
                k.atime = changes.atime.or(k.atime);
                k.mtime = changes.mtime.or(k.mtime);
                kept.at = now;
                true
            }
            Some(_) => false,
        }
    }

    /// Sends `inode`'s kept changes, if any.
    pub fn send(&self, inode: InodeId) -> Result<(), Errno> {
        let Some(slot) = self.slot(inode) else {
            return Ok(());
        };
        let mut slot = slot.lock().expect("kept slot poisoned");
        let Some(kept) = slot.take() else { return Ok(()) };
        match kept.client.setattr_unsized(inode, &kept.changes) {
            Ok(_) => Ok(()),
            Err(e) => {
                eprintln!("weft-fuse: setting the attributes of inode {inode} at close: {e}");
                Err(Errno::from_i32(e.errno()))
            }
        }
    }

    /// Sends every file's kept changes (unmount).
    pub fn send_all(&self) {
        let inodes: Vec<InodeId> = self
            .kept
            .lock()
            .expect("kept table poisoned")
            .keys()
            .copied()
            .collect();
        for inode in inodes {
            let _ = self.send(inode);
        }
    }

    /// `attr` as it is once `attr.inode`'s kept changes are made.
    pub fn overlay(&self, attr: &mut Attr) {
        let Some(slot) = self.slot(attr.inode) else { return };
        let slot = slot.lock().expect("kept slot poisoned");
        if let Some(kept) = slot.as_ref() {
            apply(attr, &kept.changes, kept.at);
        }
    }
}

/// Whether the manager's outcome of `changes` by `caller` on a file now like `current`
/// is known here (and allowed whatever happens to the file meanwhile).
fn keepable(current: &Attr, caller: &Caller, changes: &SetAttr) -> bool {
    if current.kind != FileKind::File
        || changes.size.is_some()
        || changes.kill_privileges
        || *changes == SetAttr::default()
    {
        return false;
    }
    if caller.uid == 0 {
        return true;
    }
    caller.uid == current.uid
        && changes.uid.is_none()
        && changes.gid.is_none()
        && changes.mode.is_none_or(|m| m & MODE_SETGID == 0)
}

/// Whether `later` may be merged into `kept`: the manager applies owner, then mode,
/// then times, so a change of owner after a kept mode may not.
fn merges(kept: &SetAttr, later: &SetAttr) -> bool {
    kept.mode.is_none() || (later.uid.is_none() && later.gid.is_none())
}

/// The manager's setattr of `changes` by root or the owner, as it is in
/// weft-meta's `setattr`.
fn apply(attr: &mut Attr, changes: &SetAttr, at: Timespec) {
    if changes.uid.is_some() || changes.gid.is_some() {
        attr.mode &= !MODE_SETUID;
        if attr.mode & MODE_GROUP_EXECUTE != 0 {
            attr.mode &= !MODE_SETGID;
        }
        attr.uid = changes.uid.unwrap_or(attr.uid);
        attr.gid = changes.gid.unwrap_or(attr.gid);
    }
    if let Some(mode) = changes.mode {
        attr.mode = mode & 0o7777;
    }
    for (set, time) in [(changes.atime, &mut attr.atime), (changes.mtime, &mut attr.mtime)] {
        if let Some(TimeSet::At(t)) = set {
            *time = t;
        }
    }
    attr.ctime = at;
}

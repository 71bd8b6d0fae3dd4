//! File creation in two steps: `create_check` resolves the layout and reserves an
//! inode number, the service creates the objects on the io servers (or swaps in a
//! precreated number whose objects exist), then `create_commit` inserts the name,
//! re-checking everything in its transaction.

use super::super::access::{MAY_EXECUTE, MAY_WRITE};
use super::super::names::{check_name, quoted};
use super::super::record::InodeRecord;
use super::super::{require, MetaStore, Namespace};
use super::{child_record, exists, new_mode_and_group, Made};
use weft_layout::{CacheMode, InodeId, Layout, LayoutRequest};
use weft_proto::{Attr, Cred, ErrorCode, FileKind, WireError};

/// The outcome of [`MetaStore::create_check`].
#[derive(Debug, PartialEq, Eq)]
pub enum CreateCheck {
    /// A non-exclusive create found the name taken by a file or symlink: open it.
    Existing(Attr),
    /// Create the objects of `PendingCreate::layout()` for `PendingCreate::inode()`
    /// on the io servers, then call [`MetaStore::create_commit`].
    New(PendingCreate),
}

/// A file checked for creation but not yet in the namespace. Only the store makes
/// one, it cannot be altered or cloned, and committing consumes it: an inode
/// number goes into the namespace at most once, so it is never reused even after
/// its file is removed.
#[derive(Debug, PartialEq, Eq)]
pub struct PendingCreate {
    parent: InodeId,
    name: Vec<u8>,
    mode: u32,
    exclusive: bool,
    inode: InodeId,
    layout: Layout,
    cache: CacheMode,
    /// `inode` is a precreated number (its objects exist): the commit takes it from the
    /// precreated table.
    precreated: bool,
    /// `inode` is a replayed create's number, used again (`use_again`).
    reused: bool,
}

impl PendingCreate {
    /// A replayed create (issue 30's replay) makes its file under the inode number and
    /// layout it had when first acknowledged (`create_check` allocated `inode` then: a
    /// replay's allocation hands it out again), whose objects may hold data written
    /// since. The commit takes the number out of the precreated table or the orphans,
    /// where a restart may have put it, so that its objects are not purged.
    pub fn use_again(mut self, layout: Layout) -> PendingCreate {
        self.layout = layout;
        self.reused = true;
        self
    }

    /// Uses precreated `inode` (objects on every server of the layout, durable) instead
    /// of the number `create_check` allocated, which is dropped unused. The commit fails
    /// unless `inode` is in the precreated table, and takes it out of it.
    pub fn use_precreated(mut self, inode: InodeId) -> PendingCreate {
        self.inode = inode;
        self.precreated = true;
        self
    }

    /// A replayed create's number, used again (`use_again`).
    pub fn reused(&self) -> bool {
        self.reused
    }
    pub fn parent(&self) -> InodeId {
        self.parent
    }
    pub fn name(&self) -> &[u8] {
        &self.name
    }
    pub fn exclusive(&self) -> bool {
        self.exclusive
    }
    /// Freshly allocated, never used before and never to be reused.
    pub fn inode(&self) -> InodeId {
        self.inode
    }
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    pub fn cache(&self) -> CacheMode {
        self.cache
    }
}

/// What `create_check` found under the name.
enum Lookup {
    Existing(Attr),
    Absent { dir_layout: Option<LayoutRequest> },
}

impl MetaStore {
    /// First step of creating file `name` in `parent` with permission bits `mode`.
    /// A taken name is `Exists` for an exclusive create, `IsDirectory` if it is a
    /// directory, otherwise [`CreateCheck::Existing`]. A new file needs write and
    /// search on `parent`; its layout takes each field from `layout`, else the
    /// parent's default, else the cluster default.
    pub fn create_check(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        mode: u32,
        layout: &LayoutRequest,
        exclusive: bool,
    ) -> Result<CreateCheck, WireError> {
        let name = name.as_ref();
        check_name(name)?;
        let found = self.read(|ns| {
            let parent_record = ns.directory(cred, parent, MAY_EXECUTE)?;
            if let Some((child, _)) = ns.entry(parent, name)? {
                if exclusive {
                    return Err(exists(parent, name));
                }
                let record = child_record(ns, parent, name, child)?;
                if record.is_directory() {
                    return Err(WireError::new(
                        ErrorCode::IsDirectory,
                        format!("{} in directory {parent} is a directory", quoted(name)),
                    ));
                }
                return Ok(Lookup::Existing(record.attr(child)));
            }
            require(cred, &parent_record, MAY_WRITE | MAY_EXECUTE, || {
                format!("directory inode {parent}")
            })?;
            Ok(Lookup::Absent {
                dir_layout: parent_record.dir_layout,
            })
        })?;
        let dir_layout = match found {
            Lookup::Existing(attr) => return Ok(CreateCheck::Existing(attr)),
            Lookup::Absent { dir_layout } => dir_layout,
        };
        let (layout, cache) = self.resolve_layout(layout, dir_layout.as_ref())?;
        let inode = self.allocate_inode()?;
        Ok(CreateCheck::New(PendingCreate {
            parent,
            name: name.to_owned(),
            mode,
            exclusive,
            inode,
            layout,
            cache,
            precreated: false,
            reused: false,
        }))
    }

    /// Second step: inserts the file checked by `create_check`, re-checking the
    /// parent, the permissions and the name in this transaction. A name taken in
    /// between is `Exists` even for a non-exclusive create: the caller removes
    /// its objects and checks again, which then finds the existing file.
    pub fn create_commit(&self, cred: &Cred, pending: PendingCreate) -> Result<Attr, WireError> {
        self.create_commit_made(cred, pending).map(|made| made.attr)
    }

    /// `create_commit`, with the parent's attributes after it.
    pub fn create_commit_made(&self, cred: &Cred, pending: PendingCreate) -> Result<Made, WireError> {
        let PendingCreate {
            parent,
            name,
            mode,
            inode,
            layout,
            cache,
            precreated,
            reused,
            ..
        } = pending;
        let name = name.as_slice();
        self.write(|tx| {
            let mut parent_record = tx.directory(cred, parent, MAY_WRITE | MAY_EXECUTE)?;
            if tx.entry(parent, name)?.is_some() {
                return Err(exists(parent, name));
            }
            if tx.find_inode(inode)?.is_some() {
                return Err(WireError::new(
                    ErrorCode::Internal,
                    format!("inode {inode} allocated for {} is already in use", quoted(name)),
                ));
            }
            let (mode, gid) = new_mode_and_group(cred, &parent_record, mode, false);
            tx.quota_admit((cred.uid, gid), parent)?;
            if precreated {
                tx.take_precreated(inode)?;
            }
            if reused {
                tx.take_back(inode)?;
            }
            let mut record = InodeRecord::new(FileKind::File, mode, (cred.uid, gid), parent, tx.now);
            record.layout = Some(layout);
            record.cache = cache;
            tx.add_name((parent, &mut parent_record), name, (inode, &record), true)?;
            Ok(Made {
                attr: record.attr(inode),
                parent: parent_record.attr(parent),
            })
        })
    }
}

/// What [`MetaStore::create_commit_many`] did: `CreateMany`'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadeMany {
    /// The directory's attributes after it.
    pub parent: Attr,
    /// The files made, in the order asked.
    pub made: Vec<(weft_proto::Name, Attr)>,
    /// The names refused and why, in the order asked.
    pub refused: Vec<(weft_proto::Name, WireError)>,
}

impl MetaStore {
    /// Whether `cred` may create files in directory `parent` (write and search on it):
    /// what refuses a whole `CreateMany`.
    pub fn create_check_dir(&self, cred: &Cred, parent: InodeId) -> Result<(), WireError> {
        self.read(|ns| {
            let record = ns.directory(cred, parent, MAY_EXECUTE)?;
            require(cred, &record, MAY_WRITE | MAY_EXECUTE, || {
                format!("directory inode {parent}")
            })
        })
    }

    /// Inserts every file of `pending` (checked by `create_check`, exclusive, all in
    /// `parent`) in one transaction, made durable before it returns. A name refused on
    /// its own (taken in between, the quota) joins `refused`, which holds the names
    /// refused before; the others are made. Only what fails the whole directory
    /// (gone, no permission) or the store fails the whole call, with nothing made.
    pub fn create_commit_many(
        &self,
        cred: &Cred,
        parent: InodeId,
        pending: Vec<PendingCreate>,
        refused: Vec<(weft_proto::Name, WireError)>,
    ) -> Result<MadeMany, WireError> {
        self.write_durable(move |tx| {
            let mut parent_record = tx.directory(cred, parent, MAY_WRITE | MAY_EXECUTE)?;
            let mut made = Vec::with_capacity(pending.len());
            let mut refused = refused;
            for p in pending {
                debug_assert_eq!(p.parent, parent);
                let name = p.name.as_slice();
                let wire_name = weft_proto::Name::from(name.to_vec());
                // Checks first, writes after: a refused name leaves nothing behind.
                if tx.entry(parent, name)?.is_some() {
                    refused.push((wire_name, exists(parent, name)));
                    continue;
                }
                if tx.find_inode(p.inode)?.is_some() {
                    return Err(WireError::new(
                        ErrorCode::Internal,
                        format!(
                            "inode {} allocated for {} is already in use",
                            p.inode,
                            quoted(name)
                        ),
                    ));
                }
                let (mode, gid) = new_mode_and_group(cred, &parent_record, p.mode, false);
                if let Err(e) = tx.quota_admit((cred.uid, gid), parent) {
                    refused.push((wire_name, e));
                    continue;
                }
                if p.precreated {
                    tx.take_precreated(p.inode)?;
                }
                let mut record = InodeRecord::new(FileKind::File, mode, (cred.uid, gid), parent, tx.now);
                record.layout = Some(p.layout);
                record.cache = p.cache;
                tx.add_name((parent, &mut parent_record), name, (p.inode, &record), true)?;
                made.push((wire_name, record.attr(p.inode)));
            }
            Ok(MadeMany {
                parent: parent_record.attr(parent),
                made,
                refused,
            })
        })
    }
}

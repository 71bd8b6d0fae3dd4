//! Namespace changes through the manager: directories, removal, renames, attributes,
//! links, special files, extended attributes, listings, and statfs.

use super::{lossy, not_a_directory, Client, Made};
use crate::error::{unexpected, ClientError};
use crate::file::File;
use crate::path;
use std::sync::atomic::Ordering;
use weft_layout::{InodeId, LayoutRequest};
use weft_proto::msg::{Request, Response, XattrSet, READDIR_ENTRIES_MAX};
use weft_proto::{Attr, DirEntry, ErrorCode, FileKind, IoServer, IoStatfs, MetaStatfs, Name, SetAttr};

/// Namespace counts and each io server's space.
#[derive(Debug, Clone)]
pub struct FsStats {
    pub meta: MetaStatfs,
    pub servers: Vec<(IoServer, Result<IoStatfs, ClientError>)>,
}

/// `FsStats` as statfs(2)/statvfs(3) report a file system: what a mount's `df` and an
/// MPI program's statvfs of a `weft:` name show alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatfsBlocks {
    /// Block and fragment size: `STATFS_BLOCK_BYTES`.
    pub block_bytes: u64,
    /// Blocks of the file systems of the io servers that answered (each counted once
    /// however many servers share it): in all, free (f_bfree) and free for unprivileged
    /// writers (f_bavail).
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_avail: u64,
    /// Inodes: those in use plus `files_free`, and `files_free` (u32::MAX: no fixed
    /// table limits them).
    pub files: u64,
    pub files_free: u64,
    pub name_bytes_max: u64,
}

/// The block size statfs reports. Not the stripe size: callers (mdtest, IOR, df, Go's
/// Statfs users) take blocks x block size as the space, so the block size must be the
/// unit the counts are in; the I/O size hint is each file's st_blksize.
pub const STATFS_BLOCK_BYTES: u64 = 4096;

impl FsStats {
    pub fn blocks(&self) -> StatfsBlocks {
        let (mut total, mut free, mut avail) = (0u64, 0u64, 0u64);
        // Io servers on one machine's one file system (`weft up`, or several servers per
        // node) report the same space: count it once, or df shows N times the disk.
        let mut seen = std::collections::HashSet::new();
        for s in self.servers.iter().filter_map(|(_, s)| s.as_ref().ok()) {
            if s.file_system != 0 && !seen.insert(s.file_system) {
                continue;
            }
            total = total.saturating_add(s.bytes_total);
            free = free.saturating_add(s.bytes_unused.max(s.bytes_free));
            avail = avail.saturating_add(s.bytes_free);
        }
        let files_free = u32::MAX as u64;
        StatfsBlocks {
            block_bytes: STATFS_BLOCK_BYTES,
            blocks: total / STATFS_BLOCK_BYTES,
            blocks_free: free / STATFS_BLOCK_BYTES,
            blocks_avail: avail / STATFS_BLOCK_BYTES,
            files: (self.meta.files + self.meta.directories).saturating_add(files_free),
            files_free,
            name_bytes_max: crate::path::NAME_BYTES_MAX as u64,
        }
    }
}

impl Client {
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<Attr, ClientError> {
        let (parent, name) = path::split(path, ErrorCode::Exists)?;
        let parent = self.resolve(&parent).map_err(|e| e.context(path))?;
        self.mkdir_named(parent.inode, name.as_bytes(), mode, path, false)
            .map(|made| made.made)
    }

    /// Creates directory `name` in directory `parent`. This and the other `*_in`
    /// operations serve adapters that track inodes rather than paths (FUSE).
    pub fn mkdir_in(&self, parent: InodeId, name: impl AsRef<[u8]>, mode: u32) -> Result<Attr, ClientError> {
        let name = name.as_ref();
        self.mkdir_named(parent, name, mode, &lossy(name), false)
            .map(|made| made.made)
    }

    /// `mkdir_in`, with `parent`'s attributes after it (see [`Made`]).
    pub fn mkdir_in_made(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        mode: u32,
    ) -> Result<Made<Attr>, ClientError> {
        let name = name.as_ref();
        self.mkdir_named(parent, name, mode, &lossy(name), true)
    }

    pub(super) fn mkdir_named(
        &self,
        parent: InodeId,
        name: &[u8],
        mode: u32,
        what: &str,
        with_parent: bool,
    ) -> Result<Made<Attr>, ClientError> {
        let request = Request::Mkdir {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
            mode,
        };
        self.attr_made(request, what, with_parent)
    }

    /// Creates a directory and any missing parents; existing directories are fine.
    pub fn mkdir_all(&self, path: &str, mode: u32) -> Result<Attr, ClientError> {
        let parts = path::components(path)?;
        let mut current = self.resolve("/")?;
        let mut so_far = String::new();
        for name in parts {
            so_far = path::join(if so_far.is_empty() { "/" } else { &so_far }, name);
            current = match self.lookup(current.inode, name) {
                Ok(a) if a.kind == FileKind::Directory => a,
                Ok(_) => {
                    return Err(ClientError::refused(
                        ErrorCode::NotDirectory,
                        format!("{so_far}: not a directory"),
                    ))
                }
                Err(e) if e.code() == ErrorCode::NotFound => {
                    let request = Request::Mkdir {
                        cred: self.cred_clone(),
                        parent: current.inode,
                        name: Name::from(name),
                        mode,
                    };
                    match self.attr_of(request, &so_far) {
                        Ok(a) => a,
                        // Someone else made it meanwhile.
                        Err(e) if e.code() == ErrorCode::Exists => self.lookup(current.inode, name)?,
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e.context(&so_far)),
            };
        }
        Ok(current)
    }

    /// One page of a directory: up to `max_entries` names strictly after `after`.
    pub fn readdir_page(
        &self,
        dir: InodeId,
        after: impl AsRef<[u8]>,
        max_entries: u32,
    ) -> Result<(Vec<DirEntry>, bool), ClientError> {
        let request = Request::Readdir {
            cred: self.cred_clone(),
            dir,
            after: Name::from(after.as_ref()),
            max_entries: max_entries.min(READDIR_ENTRIES_MAX),
        };
        match self.inner.meta(&request)? {
            Response::Entries { entries, more } => Ok((entries, more)),
            other => Err(unexpected(&other)),
        }
    }

    /// One page of a directory with every entry's attributes, file sizes included: one
    /// round trip to the manager, then one to each io server involved (`ls -l`). Files
    /// removed since the manager listed them are left out. Against a manager without
    /// `ReaddirPlus`, a plain page and the attributes one by one (pipelined).
    pub fn readdir_plus_page(
        &self,
        dir: InodeId,
        after: impl AsRef<[u8]>,
        max_entries: u32,
    ) -> Result<(Vec<(Name, Attr)>, bool), ClientError> {
        let SizedListing {
            names,
            mut attrs,
            sized,
            more,
        } = self.readdir_sized_page(dir, after, max_entries)?;
        let gone = self.sizes_of_unsized(&mut attrs, &sized)?;
        let entries = names
            .into_iter()
            .zip(attrs)
            .zip(gone)
            .filter(|(_, gone)| !gone)
            .map(|(entry, _)| entry)
            .collect();
        Ok((entries, more))
    }

    /// `fill_sizes_or_gone` for the files of `attrs` not `sized` already (by the
    /// manager, `readdir_sized_page`): those are neither asked nor gone.
    pub fn sizes_of_unsized(&self, attrs: &mut [Attr], sized: &[bool]) -> Result<Vec<bool>, ClientError> {
        let ask: Vec<usize> = (0..attrs.len())
            .filter(|&k| !sized.get(k).copied().unwrap_or(false))
            .collect();
        // None sized (an older manager, files being written): asked in place, no copies.
        if ask.len() == attrs.len() {
            return self.sizes(attrs);
        }
        let mut asked: Vec<Attr> = ask.iter().map(|&k| attrs[k].clone()).collect();
        let gone_asked = self.sizes(&mut asked)?;
        let mut gone = vec![false; attrs.len()];
        for ((k, attr), went) in ask.into_iter().zip(asked).zip(gone_asked) {
            attrs[k] = attr;
            gone[k] = went;
        }
        Ok(gone)
    }

    /// `readdir_attrs_page` in which each regular file the manager knows the size of
    /// (no writer since its io servers told it) has it filled in. Against a manager
    /// without `ReaddirSized`, nothing is sized.
    pub fn readdir_sized_page(
        &self,
        dir: InodeId,
        after: impl AsRef<[u8]>,
        max_entries: u32,
    ) -> Result<SizedListing, ClientError> {
        if !self.inner.no_sized_listing.load(Ordering::Relaxed) {
            let request = Request::ReaddirSized {
                cred: self.cred_clone(),
                dir,
                after: Name::from(after.as_ref()),
                max_entries: max_entries.min(READDIR_ENTRIES_MAX),
            };
            match self.inner.meta(&request) {
                Ok(Response::EntriesSized { entries, sized, more }) if sized.len() == entries.len() => {
                    let (names, attrs) = entries.into_iter().unzip();
                    return Ok(SizedListing {
                        names,
                        attrs,
                        sized,
                        more,
                    });
                }
                Ok(other) => return Err(unexpected(&other)),
                Err(e) if e.code() == ErrorCode::UnknownOpcode => {
                    self.inner.no_sized_listing.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        let (entries, more) = self.readdir_attrs_page(dir, after, max_entries)?;
        let sized = vec![false; entries.len()];
        let (names, attrs) = entries.into_iter().unzip();
        Ok(SizedListing {
            names,
            attrs,
            sized,
            more,
        })
    }

    /// `readdir_plus_page` without the sizes (the manager's attributes only; files' sizes
    /// are 0 until `fill_sizes_or_gone`).
    pub fn readdir_attrs_page(
        &self,
        dir: InodeId,
        after: impl AsRef<[u8]>,
        max_entries: u32,
    ) -> Result<(Vec<(Name, Attr)>, bool), ClientError> {
        let request = Request::ReaddirPlus {
            cred: self.cred_clone(),
            dir,
            after: Name::from(after.as_ref()),
            max_entries: max_entries.min(READDIR_ENTRIES_MAX),
        };
        let (names, attrs, more): (Vec<Name>, Vec<Attr>, bool) = match self.inner.meta(&request) {
            Ok(Response::EntriesPlus { entries, more }) => {
                let (names, attrs) = entries.into_iter().unzip();
                (names, attrs, more)
            }
            Ok(other) => return Err(unexpected(&other)),
            Err(e) if matches!(e.code(), ErrorCode::UnknownOpcode | ErrorCode::Unsupported) => {
                let (entries, more) = self.readdir_page(dir, after, max_entries)?;
                let names = entries.iter().map(|e| e.name.clone()).collect();
                let mut attrs = Vec::with_capacity(entries.len());
                let meta = self.inner.meta_connection()?;
                let pending: Vec<_> = entries
                    .iter()
                    .map(|e| {
                        meta.send(
                            &Request::GetAttr {
                                cred: self.cred_clone(),
                                inode: e.inode,
                            },
                            &[],
                        )
                    })
                    .collect::<Result<_, _>>()?;
                for call in pending {
                    match call.wait()?.0 {
                        Response::Attr(a) => attrs.push(a),
                        other => return Err(unexpected(&other)),
                    }
                }
                (names, attrs, more)
            }
            Err(e) => return Err(e),
        };
        Ok((names.into_iter().zip(attrs).collect(), more))
    }

    /// Every entry of a directory, in name order, fetched page by page.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>, ClientError> {
        let dir = self.resolve(path)?;
        if dir.kind != FileKind::Directory {
            return Err(ClientError::refused(
                ErrorCode::NotDirectory,
                format!("{path}: not a directory"),
            ));
        }
        let mut all = Vec::new();
        let mut after = Name::default();
        loop {
            let (page, more) = self
                .readdir_page(dir.inode, &after, READDIR_ENTRIES_MAX)
                .map_err(|e| e.context(path))?;
            if let Some(last) = page.last() {
                after = last.name.clone();
            }
            all.extend(page);
            if !more {
                return Ok(all);
            }
        }
    }

    pub fn unlink(&self, path: &str) -> Result<(), ClientError> {
        let (parent, name) = path::split(path, ErrorCode::IsDirectory)?;
        if path::names_a_directory(path) {
            // Never a file to unlink: ENOTDIR for a file, EISDIR for a directory.
            self.resolve(path)?;
            return Err(ClientError::refused(
                ErrorCode::IsDirectory,
                format!("{path}: is a directory (unlink removes files)"),
            ));
        }
        let parent = self.resolve(&parent).map_err(|e| e.context(path))?;
        self.remove_named(parent.inode, name.as_bytes(), false, path)
    }

    pub fn unlink_in(&self, parent: InodeId, name: impl AsRef<[u8]>) -> Result<(), ClientError> {
        let name = name.as_ref();
        self.remove_named(parent, name, false, &lossy(name))
    }

    /// Removes `name` from `parent`. If that was the last name of a file that mount
    /// session `keep` has open, the file lives on, nameless (link count 0), until the
    /// session releases it (`release`); returns it then.
    pub fn unlink_keeping(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        keep: Option<u64>,
    ) -> Result<Option<InodeId>, ClientError> {
        let name = name.as_ref();
        let request = Request::Unlink {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
            keep,
        };
        match self.inner.meta(&request).map_err(|e| e.context(&lossy(name)))? {
            Response::Unlinked { kept } => Ok(kept),
            other => Err(unexpected(&other)),
        }
    }

    pub fn rmdir(&self, path: &str) -> Result<(), ClientError> {
        let (parent, name) = path::split(path, ErrorCode::Busy)?;
        let parent = self.resolve(&parent).map_err(|e| e.context(path))?;
        self.remove_named(parent.inode, name.as_bytes(), true, path)
    }

    pub fn rmdir_in(&self, parent: InodeId, name: impl AsRef<[u8]>) -> Result<(), ClientError> {
        let name = name.as_ref();
        self.remove_named(parent, name, true, &lossy(name))
    }

    pub(super) fn remove_named(
        &self,
        parent: InodeId,
        name: &[u8],
        directory: bool,
        what: &str,
    ) -> Result<(), ClientError> {
        if !directory {
            return self
                .unlink_keeping(parent, name, None)
                .map(drop)
                .map_err(|e| e.context(what));
        }
        let (cred, name) = (self.cred_clone(), Name::from(name));
        self.done(Request::Rmdir { cred, parent, name }, what)
    }

    /// Renames atomically, replacing an existing target as POSIX rename(2) does.
    /// Returns the moved inode's attributes (without the derived size).
    pub fn rename(&self, from: &str, to: &str) -> Result<Attr, ClientError> {
        let (src_dir, src_name) = path::split(from, ErrorCode::Busy)?;
        let (dst_dir, dst_name) = path::split(to, ErrorCode::Busy)?;
        if path::names_a_directory(from) || path::names_a_directory(to) {
            // Only a directory moves by a name ending with /.
            let moved = self
                .resolve(from.trim_end_matches('/'))
                .map_err(|e| e.context(from))?;
            if moved.kind != FileKind::Directory {
                return Err(not_a_directory(if path::names_a_directory(from) {
                    from
                } else {
                    to
                }));
            }
        }
        let src_parent = self.resolve(&src_dir).map_err(|e| e.context(from))?.inode;
        let dst_parent = self.resolve(&dst_dir).map_err(|e| e.context(to))?.inode;
        let what = format!("rename {from} -> {to}");
        self.rename_named(
            (src_parent, src_name.as_bytes()),
            (dst_parent, dst_name.as_bytes()),
            &what,
        )
    }

    /// Renames `src_name` in `src_parent` to `dst_name` in `dst_parent`, as `rename`.
    pub fn rename_in(
        &self,
        src_parent: InodeId,
        src_name: impl AsRef<[u8]>,
        dst_parent: InodeId,
        dst_name: impl AsRef<[u8]>,
    ) -> Result<Attr, ClientError> {
        let (src_name, dst_name) = (src_name.as_ref(), dst_name.as_ref());
        let what = format!("rename {} -> {}", lossy(src_name), lossy(dst_name));
        self.rename_named((src_parent, src_name), (dst_parent, dst_name), &what)
    }

    /// Renames without replacing (rename(2) with RENAME_NOREPLACE): `Exists` when the
    /// target name exists, checked by the manager in the move's own transaction.
    /// Returns the moved inode's attributes.
    pub fn rename_no_replace(
        &self,
        (src_parent, src_name): (InodeId, &[u8]),
        (dst_parent, dst_name): (InodeId, &[u8]),
    ) -> Result<Attr, ClientError> {
        let request = Request::RenameNoReplace {
            cred: self.cred_clone(),
            src_parent,
            src_name: Name::from(src_name),
            dst_parent,
            dst_name: Name::from(dst_name),
        };
        self.moved(&request)
    }

    /// Swaps two names atomically (rename(2) with RENAME_EXCHANGE): each then leads to
    /// what the other led to. Both must exist. Returns what `a` led to.
    pub fn rename_exchange(
        &self,
        (a_parent, a_name): (InodeId, &[u8]),
        (b_parent, b_name): (InodeId, &[u8]),
    ) -> Result<Attr, ClientError> {
        let request = Request::RenameExchange {
            cred: self.cred_clone(),
            a_parent,
            a_name: Name::from(a_name),
            b_parent,
            b_name: Name::from(b_name),
        };
        self.moved(&request)
    }

    /// Sends a rename-like `request` to the manager: the moved inode's attributes.
    pub(super) fn moved(&self, request: &Request) -> Result<Attr, ClientError> {
        match self.inner.meta(request)? {
            Response::Renamed { moved, .. } => Ok(moved),
            other => Err(unexpected(&other)),
        }
    }

    /// `rename_in`, keeping a replaced file that mount session `keep` has open as
    /// `unlink_keeping` does. Returns the moved inode's attributes and the kept inode.
    pub fn rename_keeping(
        &self,
        (src_parent, src_name): (InodeId, &[u8]),
        (dst_parent, dst_name): (InodeId, &[u8]),
        keep: Option<u64>,
    ) -> Result<(Attr, Option<InodeId>), ClientError> {
        let request = Request::Rename {
            cred: self.cred_clone(),
            src_parent,
            src_name: Name::from(src_name),
            dst_parent,
            dst_name: Name::from(dst_name),
            keep,
        };
        match self.inner.meta(&request)? {
            Response::Renamed { moved, kept } => Ok((moved, kept)),
            other => Err(unexpected(&other)),
        }
    }

    pub(super) fn rename_named(
        &self,
        src: (InodeId, &[u8]),
        dst: (InodeId, &[u8]),
        what: &str,
    ) -> Result<Attr, ClientError> {
        self.rename_keeping(src, dst, None)
            .map(|(moved, _)| moved)
            .map_err(|e| e.context(what))
    }

    /// Changes attributes. A size change also truncates (or extends) the file's data on
    /// its io servers.
    pub fn setattr(&self, path: &str, changes: &SetAttr) -> Result<Attr, ClientError> {
        let attr = self.resolve(path)?;
        self.setattr_inode(attr.inode, changes)
            .map_err(|e| e.context(path))
    }

    pub fn setattr_inode(&self, inode: InodeId, changes: &SetAttr) -> Result<Attr, ClientError> {
        if let Some(size) = changes.size {
            // Past the largest file: EFBIG, before anything changes.
            weft_layout::stripe::check_range(size, 0)
                .map_err(|e| ClientError::refused(ErrorCode::TooLarge, format!("inode {inode}: {e}")))?;
        }
        let mut attr = self.attr_of(
            Request::SetAttr {
                cred: self.cred_clone(),
                inode,
                changes: changes.clone(),
            },
            &format!("inode {inode}"),
        )?;
        if let Some(size) = changes.size {
            File::new(self.inner.clone(), attr.clone(), format!("inode {inode}"), true)?
                .truncate_objects(size)?;
        }
        self.fill_sizes(std::slice::from_mut(&mut attr))?;
        Ok(attr)
    }

    /// `setattr_inode` of changes that leave the size alone (mode, owner, times), answered
    /// with the manager's attributes only: the size is not asked of the io servers.
    pub fn setattr_unsized(&self, inode: InodeId, changes: &SetAttr) -> Result<Attr, ClientError> {
        if changes.size.is_some() {
            return Err(ClientError::InvalidArgument(format!(
                "inode {inode}: a size change needs setattr_inode"
            )));
        }
        self.attr_of(
            Request::SetAttr {
                cred: self.cred_clone(),
                inode,
                changes: changes.clone(),
            },
            &format!("inode {inode}"),
        )
    }

    /// Sets (or with `None` clears) the default layout of new files in a directory.
    pub fn set_dir_layout(&self, path: &str, layout: Option<LayoutRequest>) -> Result<Attr, ClientError> {
        let dir = self.resolve(path)?;
        self.set_dir_layout_named(dir.inode, layout, path)
    }

    pub fn set_dir_layout_in(
        &self,
        dir: InodeId,
        layout: Option<LayoutRequest>,
    ) -> Result<Attr, ClientError> {
        self.set_dir_layout_named(dir, layout, &format!("inode {dir}"))
    }

    pub(super) fn set_dir_layout_named(
        &self,
        dir: InodeId,
        layout: Option<LayoutRequest>,
        what: &str,
    ) -> Result<Attr, ClientError> {
        let request = Request::SetDirLayout {
            cred: self.cred_clone(),
            dir,
            layout,
        };
        self.attr_of(request, what)
    }

    pub fn symlink(&self, target: &str, link_path: &str) -> Result<Attr, ClientError> {
        let (parent, name) = path::split(link_path, ErrorCode::Exists)?;
        let parent = self.resolve(&parent).map_err(|e| e.context(link_path))?;
        self.symlink_named(target.as_bytes(), parent.inode, name.as_bytes(), link_path, false)
            .map(|made| made.made)
    }

    /// Creates symbolic link `name` in directory `parent`, pointing at `target` (bytes,
    /// stored verbatim).
    pub fn symlink_in(
        &self,
        target: impl AsRef<[u8]>,
        parent: InodeId,
        name: impl AsRef<[u8]>,
    ) -> Result<Attr, ClientError> {
        let name = name.as_ref();
        self.symlink_named(target.as_ref(), parent, name, &lossy(name), false)
            .map(|made| made.made)
    }

    /// `symlink_in`, with `parent`'s attributes after it (see [`Made`]).
    pub fn symlink_in_made(
        &self,
        target: impl AsRef<[u8]>,
        parent: InodeId,
        name: impl AsRef<[u8]>,
    ) -> Result<Made<Attr>, ClientError> {
        let name = name.as_ref();
        self.symlink_named(target.as_ref(), parent, name, &lossy(name), true)
    }

    pub(super) fn symlink_named(
        &self,
        target: &[u8],
        parent: InodeId,
        name: &[u8],
        what: &str,
        with_parent: bool,
    ) -> Result<Made<Attr>, ClientError> {
        let request = Request::Symlink {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
            target: Name::from(target),
        };
        self.attr_made(request, what, with_parent)
    }

    /// A symlink's target, as the bytes stored.
    pub fn readlink(&self, path: &str) -> Result<Name, ClientError> {
        let attr = self.resolve(path)?;
        self.readlink_inode(attr.inode).map_err(|e| e.context(path))
    }

    pub fn readlink_inode(&self, inode: InodeId) -> Result<Name, ClientError> {
        match self.inner.meta(&Request::Readlink {
            cred: self.cred_clone(),
            inode,
        })? {
            Response::Link(target) => Ok(target),
            other => Err(unexpected(&other)),
        }
    }

    /// Gives non-directory `inode` another name, `name` in `parent` (link(2)).
    pub fn link_in(
        &self,
        inode: InodeId,
        parent: InodeId,
        name: impl AsRef<[u8]>,
    ) -> Result<Attr, ClientError> {
        self.link_made(inode, parent, name.as_ref(), false)
            .map(|made| made.made)
    }

    /// `link_in`, with `parent`'s attributes after it (see [`Made`]).
    pub fn link_in_made(
        &self,
        inode: InodeId,
        parent: InodeId,
        name: impl AsRef<[u8]>,
    ) -> Result<Made<Attr>, ClientError> {
        self.link_made(inode, parent, name.as_ref(), true)
    }

    pub(super) fn link_made(
        &self,
        inode: InodeId,
        parent: InodeId,
        name: &[u8],
        with_parent: bool,
    ) -> Result<Made<Attr>, ClientError> {
        let request = Request::Link {
            cred: self.cred_clone(),
            inode,
            parent,
            name: Name::from(name),
        };
        self.attr_made(request, &lossy(name), with_parent)
    }

    /// Makes `new_path` another name of the file at `existing` (link(2)).
    pub fn link(&self, existing: &str, new_path: &str) -> Result<Attr, ClientError> {
        let inode = self.resolve(existing)?.inode;
        let (parent, name) = path::split(new_path, ErrorCode::Exists)?;
        let parent = self.resolve(&parent).map_err(|e| e.context(new_path))?;
        self.link_in(inode, parent.inode, name)
            .map_err(|e| e.context(new_path))
    }

    /// Makes a FIFO, character or block device (`rdev`), or socket `name` in `parent`
    /// (mknod(2)): a namespace object only; its I/O never reaches Weft.
    pub fn mknod_in(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<Attr, ClientError> {
        self.mknod_made(parent, name.as_ref(), (kind, mode, rdev), false)
            .map(|made| made.made)
    }

    /// `mknod_in`, with `parent`'s attributes after it (see [`Made`]).
    pub fn mknod_in_made(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<Made<Attr>, ClientError> {
        self.mknod_made(parent, name.as_ref(), (kind, mode, rdev), true)
    }

    pub(super) fn mknod_made(
        &self,
        parent: InodeId,
        name: &[u8],
        (kind, mode, rdev): (FileKind, u32, u64),
        with_parent: bool,
    ) -> Result<Made<Attr>, ClientError> {
        let request = Request::Mknod {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
            kind,
            mode,
            rdev,
        };
        self.attr_made(request, &lossy(name), with_parent)
    }

    /// Sets extended attribute `name` (`user.*`, or `trusted.*` as root) of `inode`.
    pub fn setxattr(
        &self,
        inode: InodeId,
        name: impl AsRef<[u8]>,
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), ClientError> {
        let name = name.as_ref();
        let request = Request::SetXattr {
            cred: self.cred_clone(),
            inode,
            name: Name::from(name),
            value: value.to_vec(),
            how,
        };
        self.done(request, &lossy(name))
    }

    /// The value of extended attribute `name` of `inode`; `NoData` if it is not set.
    pub fn getxattr(&self, inode: InodeId, name: impl AsRef<[u8]>) -> Result<Vec<u8>, ClientError> {
        let name = name.as_ref();
        let request = Request::GetXattr {
            cred: self.cred_clone(),
            inode,
            name: Name::from(name),
        };
        match self.inner.meta(&request).map_err(|e| e.context(&lossy(name)))? {
            Response::Value(value) => Ok(value),
            other => Err(unexpected(&other)),
        }
    }

    /// The names of `inode`'s extended attributes that this caller may see.
    pub fn listxattr(&self, inode: InodeId) -> Result<Vec<Name>, ClientError> {
        let request = Request::ListXattr {
            cred: self.cred_clone(),
            inode,
        };
        match self.inner.meta(&request)? {
            Response::Names(names) => Ok(names),
            other => Err(unexpected(&other)),
        }
    }

    pub fn removexattr(&self, inode: InodeId, name: impl AsRef<[u8]>) -> Result<(), ClientError> {
        let name = name.as_ref();
        let request = Request::RemoveXattr {
            cred: self.cred_clone(),
            inode,
            name: Name::from(name),
        };
        self.done(request, &lossy(name))
    }

    /// Namespace counts and every io server's space (an unreachable server is reported,
    /// not fatal).
    pub fn statfs(&self) -> Result<FsStats, ClientError> {
        let meta = match self.inner.meta(&Request::Statfs {
            cred: self.cred_clone(),
        })? {
            Response::Statfs(s) => s,
            other => return Err(unexpected(&other)),
        };
        // Asked afresh: io servers added since this client started count too.
        let cluster = self
            .inner
            .refresh_cluster()
            .unwrap_or_else(|_| self.inner.cluster());
        let servers = cluster
            .io_servers
            .iter()
            .map(|s| {
                let r = self
                    .inner
                    .pool
                    .call(&s.addr, &Request::IoStatfs, &[])
                    .map_err(ClientError::from)
                    .and_then(|(r, _)| match r {
                        Response::IoStatfs(st) => Ok(st),
                        other => Err(unexpected(&other)),
                    });
                (s.clone(), r)
            })
            .collect();
        Ok(FsStats { meta, servers })
    }
}

/// One page of `Client::readdir_sized_page`: the names in order, their attributes, and
/// whether each file's attributes carry its size already (the manager's, under its
/// vouch); the others' sizes are 0 until asked (`Client::sizes_of_unsized`).
#[derive(Debug, Clone)]
pub struct SizedListing {
    pub names: Vec<Name>,
    pub attrs: Vec<Attr>,
    pub sized: Vec<bool>,
    /// Whether the directory has entries after the page.
    pub more: bool,
}

//! The work behind the kernel's requests that need more than one call of the native
//! client: lookups checked for an open, attributes, open and create, renames, reads,
//! listings, the layout attribute and special files.

use super::{errno, inode, name_bytes, WeftFs, READ_BUFFER};
use crate::attr::{file_attr, kind_of_mode};
use crate::buffer::ReadBuffer;
use crate::deferred::Caller;
use crate::dir::Listed;
use crate::kernel::REQUEST_BYTES_MAX;
use crate::recent::Ticket;
use crate::xattr::{self, LAYOUT_XATTR};
use crate::{kept, locks};
use fuser::{
    Errno, FileAttr, FileHandle, FopenFlags, INodeNo, LockOwner, OpenAccMode, OpenFlags, RenameFlags,
    ReplyData, Request,
};
use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use weft_client::{
    Attr, Client, ClientError, CreateOptions, DataStamp, ErrorCode, File, FileKind, InodeId, Made, Name,
    PathStep, SetAttr, XattrSet,
};

impl WeftFs {
    /// The entry for `name` in `parent`, how long the kernel may keep it, and a listing
    /// of `parent` to fetch once the kernel is answered (see `recent`).
    pub(super) fn do_lookup(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
    ) -> Result<(FileAttr, Duration, Option<Ticket>), Errno> {
        let name = name_bytes(name);
        if !self.retries.retrying(req.pid()) {
            if let Some((attr, left)) = self.recent.get_or_wait(inode(parent), name) {
                // What is open here may have changed here since the listing.
                if !self.open_inodes.is_open(attr.inode) {
                    self.retries.looked_up(req.pid(), attr.inode);
                    // Up to the attribute timeout old: no open may go by it.
                    self.walks.unchecked(req.pid());
                    return Ok((self.entered(inode(parent), name, &attr), left, None));
                }
            }
        }
        let client = self.caller(req);
        let mark = self.leases.mark();
        let guess = self
            .last_found
            .lock()
            .expect("lookup table poisoned")
            .get(&(inode(parent), Name::from(name)))
            .and_then(|ino| self.remembered(*ino));
        let checked = match &guess {
            Some(g) => self
                .checked_lookup(&client, inode(parent), name, g)
                .map_err(|e| errno(&e, "lookup"))?,
            None => None,
        };
        let (attr, leasable) = match checked {
            Some((attr, stamp)) => {
                let leasable = weft_client::leasable(&attr, stamp.as_ref());
                self.walks.checked(req.pid(), attr.clone(), stamp);
                (attr, leasable)
            }
            None => {
                self.walks.unchecked(req.pid());
                client
                    .lookup_leasable(inode(parent), name, guess.as_ref())
                    .map_err(|e| {
                        if e.code() == ErrorCode::Stale {
                            // The directory went (another client removed it): the
                            // kernel walks the path again, asking every name afresh
                            // (not from a listing, see `recent`).
                            self.retries.refused(req.pid());
                        }
                        errno(&e, "lookup")
                    })?
            }
        };
        self.retries.looked_up(req.pid(), attr.inode);
        let ticket = self.recent.looked_up(inode(parent));
        let ttl = self.lease_ttl(mark, &attr, leasable);
        Ok((self.entered(inode(parent), name, &attr), ttl, ticket))
    }

    /// The lookup of `name` in `parent` made as an open checks its names (see `walked`):
    /// the path the kernel knows `parent` by and `name` in it must still lead to
    /// `guess`'s inode, the file the name led to here before, whose size and data stamp
    /// are asked of the io servers meanwhile. Same round trips as a plain lookup. `None`
    /// when the name leads elsewhere now, a name on the way changed, or a server refused
    /// the check: the plain lookup answers then (with its own errors). A server that
    /// could not be reached is the lookup's error: the plain lookup would only wait for
    /// it again (two timeouts per lookup while the manager is down).
    pub(super) fn checked_lookup(
        &self,
        client: &Client,
        parent: InodeId,
        name: &[u8],
        guess: &Attr,
    ) -> Result<Option<(Attr, Option<DataStamp>)>, ClientError> {
        if guess.kind != FileKind::File {
            return Ok(None);
        }
        let mut steps = if parent == InodeId::ROOT {
            Vec::new()
        } else {
            self.names.path_of(parent)
        };
        steps.push(PathStep {
            parent,
            name: Name::from(name),
            child: guess.inode,
        });
        // As deep as an open checks: the names nearest the file.
        let extra = steps.len().saturating_sub(weft_client::REVALIDATE_STEPS_MAX);
        steps.drain(..extra);
        match client.revalidate_stamped(steps, Some(guess)) {
            Ok((attr, stamp)) if attr.kind == FileKind::File && attr.nlink > 0 => Ok(Some((attr, stamp))),
            Err(e @ ClientError::Transport(_)) => Err(e),
            _ => Ok(None),
        }
    }

    pub(super) fn do_setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        changes: SetAttr,
    ) -> Result<FileAttr, Errno> {
        if self.open_inodes.is_open(inode(ino)) {
            if let Some(current) = self.remembered(inode(ino)) {
                let caller = Caller {
                    uid: req.uid(),
                    gid: req.gid(),
                    client: self.caller(req),
                };
                if self.deferred.keep(inode(ino), &current, &caller, &changes) {
                    // Sent at close; this mount shows it from now on.
                    self.recent.inode_changed(inode(ino));
                    return Ok(self.remember(&current));
                }
            }
        }
        // Kept writes land before this change (a truncate or a time set that came after
        // them; the objects' times are the file's), kept attribute changes after the
        // writes and before this one.
        self.send_kept(inode(ino))?;
        if let Some(size) = changes.size {
            self.behind.truncated(inode(ino), size);
        }
        let client = self.caller(req);
        let attr = if changes == SetAttr::default() {
            client.getattr(inode(ino))
        } else {
            let change = self.parents.begin(inode(ino));
            let set = client.setattr_inode(inode(ino), &changes);
            self.parents.end(change, None);
            self.recent.inode_changed(inode(ino));
            set
        }
        .map_err(|e| errno(&e, "setattr"))?;
        Ok(self.remember(&attr))
    }

    /// Attributes of `ino`. An inode another client removed (or replaced) is still
    /// there for what holds it: an open descriptor (`fh`) sees it with link count 0, as
    /// POSIX has it, and so does the retried walk of a thread just answered ESTALE (the
    /// kernel checks permission before it opens what the walk found). Anything else gets
    /// ESTALE, on which the kernel looks the path up again.
    pub(super) fn do_getattr(
        &self,
        req: &Request,
        ino: InodeId,
        fh: Option<FileHandle>,
    ) -> Result<(FileAttr, Duration), Errno> {
        let client = self.caller(req);
        let mark = self.leases.mark();
        match client.getattr_leasable(ino, self.remembered(ino).as_ref()) {
            Ok((attr, leasable)) => Ok((self.remember(&attr), self.lease_ttl(mark, &attr, leasable))),
            Err(e) if e.code() == ErrorCode::Stale => {
                let held = fh.is_some() || self.retries.expects(req.pid(), ino);
                match self.remembered(ino).filter(|_| held) {
                    Some(mut attr) => {
                        attr.nlink = 0;
                        // Its data may still be there for a while; the size is as last known
                        // otherwise.
                        let _ = client.fill_sizes(std::slice::from_mut(&mut attr));
                        Ok((file_attr(&attr), self.ttl()))
                    }
                    None => {
                        self.retries.refused(req.pid());
                        Err(Errno::ESTALE)
                    }
                }
            }
            Err(e) => Err(errno(&e, "getattr")),
        }
    }

    /// Opens with close-to-open consistency: the name the kernel found the inode by is
    /// checked against the manager (see `names`), and the attributes and size are read
    /// afresh. A name that no longer leads to the inode is answered ESTALE, on which the
    /// kernel looks the whole path up again and retries once; that retry is trusted.
    pub(super) fn do_open(
        &self,
        req: &Request,
        ino: INodeNo,
        flags: OpenFlags,
    ) -> Result<(u64, FopenFlags), Errno> {
        // Taken before the check: a change here during it makes reads ask again.
        let changes_before = self.data_changes.load(Ordering::SeqCst);
        let (client, changed, attr, stamp) = self.checked_for_open(req, ino, true)?;
        if attr.kind != FileKind::File {
            return Err(Errno::EISDIR);
        }
        self.remember(&attr);
        // Opened for writing, the file is dropped from listings once it is written
        // through this descriptor (see `OpenFile::changed`); open here, it is not
        // answered from them meanwhile.
        let writable = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let file = client.open_attr(attr, writable).map_err(|e| errno(&e, "open"))?;
        if !writable {
            // The size just checked is the end the kernel reads to, for as long as it
            // keeps it: a read reaching it (every read of a small file) need not ask
            // every io server again, unless this mount changes data meanwhile.
            file.trust_size_for(self.cache.attr_ttl);
        }
        if changed {
            // The kernel's cached attributes (the size above all, which bounds reads) are
            // dropped; the page cache starts empty anyway (no FOPEN_KEEP_CACHE). That
            // takes no inode lock, so it is safe during the open.
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(ino, -1, 0);
            }
        }
        // A read-only open's close has nothing to send: without a flush it costs one
        // round trip less. Locks need the flush (a close drops the closing process's
        // record locks on the file): not while this mount holds any; one taken later
        // through this open goes at its release (see `OpenFile::lockers`).
        let no_flush = !writable && !self.lock_holders.any();
        let fh = self.add_file(file, false, changes_before, no_flush)?;
        // A lease the kernel may hold ends once the file counts as open here: while it
        // is, its attributes live in the kernel for the attribute timeout only (see
        // `leases`).
        if self.leases.end(inode(ino)) && !changed {
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(ino, -1, 0);
            }
        }
        // Close-to-open: the pages the kernel holds of the file stay only if no byte of
        // it changed since they were read (another client's same-size rewrite changes no
        // attribute, but does change the stamp); see `keeps_pages`.
        let keep = self.keeps_pages(inode(ino), stamp, fh, !changed);
        Ok((fh, self.open_flags(flags.0, keep, no_flush)))
    }

    /// What an open of `ino` by `req`'s caller finds, checked as close-to-open wants
    /// (see the crate docs): kept writes and changes of this mount sent first, then the
    /// file's names, attributes, size and data stamp checked with the manager and the
    /// io servers, or taken from the lookup that ended the caller's walk a moment ago
    /// (see `walked`). `retried`: a lookup of the kernel's retry within this very open
    /// may answer (an open; not a handoff, which is not retried by the kernel). Also the
    /// caller's client and whether the attributes differ from what the kernel was told.
    /// ESTALE when a name on the way changed or the file is kept nameless.
    pub(super) fn checked_for_open(
        &self,
        req: &Request,
        ino: INodeNo,
        retried: bool,
    ) -> Result<(Client, bool, Attr, Option<DataStamp>), Errno> {
        // What another descriptor here wrote is on the io servers before this open reads
        // the size (close-to-open holds between descriptors of one mount too), and the
        // attributes kept here are the manager's.
        self.behind.send(inode(ino))?;
        self.deferred.send(inode(ino))?;
        self.deferred.xattrs_unknown(inode(ino));
        let client = self.caller(req);
        let told = self.remembered(inode(ino));
        // The lookup that ended this open's walk checked every name, size and data stamp
        // a moment ago (see `walked`); not for a file open here, whose kept writes
        // were sent just now.
        let walked = self
            .walks
            .take(req.pid(), inode(ino))
            .filter(|_| told.is_some() && !self.open_inodes.is_open(inode(ino)));
        let (attr, stamp) = match told
            .clone()
            .filter(|_| retried && self.retries.trusts(req.pid(), inode(ino)))
        {
            // Found by the retried walk a moment ago, within this very open (its data
            // is not vouched for: the cached pages go).
            Some(attr) => (attr, None),
            None => match walked
                .map(Ok)
                .unwrap_or_else(|| self.current_attr(&client, inode(ino), told.as_ref()))
            {
                // A file kept nameless for some mount's open descriptors is not opened anew.
                Ok((attr, _)) if attr.kind == FileKind::File && attr.nlink == 0 => {
                    if retried {
                        self.retries.refused(req.pid());
                    }
                    return Err(Errno::ESTALE);
                }
                Ok(found) => found,
                Err(e) if e.code() == ErrorCode::Stale || e.code() == ErrorCode::NotFound => {
                    if retried {
                        self.retries.refused(req.pid());
                    }
                    return Err(Errno::ESTALE);
                }
                Err(e) => return Err(errno(&e, "open")),
            },
        };
        let changed = told.as_ref().is_none_or(|t| {
            (t.size, t.mtime, t.ctime, t.mode, t.uid, t.gid)
                != (attr.size, attr.mtime, attr.ctime, attr.mode, attr.uid, attr.gid)
        });
        Ok((client, changed, attr, stamp))
    }

    /// The value of `user.weft.handoff` (`xattr::HANDOFF_XATTR`) of `ino` for `req`'s
    /// caller: what libweft_posix needs to read the file natively with no request of
    /// its own to the manager or the io servers (`weft_client::File::handoff_opened`).
    /// The kernel asked the caller's read permission of the file (the `user.*`
    /// namespace; `default_permissions`) as an open for reading would, and the daemon
    /// asks it again of the caller's uid, gid and groups, so the handoff gives no one
    /// more than an open for reading through this mount would: the attributes, checked
    /// now as an open checks them (close-to-open), and a read capability of this inode
    /// only. Never write access: writers open through the kernel. Regular files only.
    pub(super) fn handoff_value(&self, req: &Request, ino: INodeNo) -> Result<Vec<u8>, Errno> {
        // The read capability comes with the check (`VouchedReadable`; handed over only
        // if the checks pass).
        let (client, changed, attr, stamp) = self.checked_for_open(req, ino, false)?;
        if attr.kind != FileKind::File {
            return Err(Errno::NO_XATTR);
        }
        if !client
            .cred()
            .permits(attr.kind, attr.mode, attr.uid, attr.gid, 0o4)
        {
            return Err(Errno::EACCES);
        }
        self.remember(&attr);
        if changed {
            // As at an open: the kernel's attributes of the file go.
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(ino, -1, 0);
            }
        }
        let small = attr.size <= crate::handed::CONTENT_MAX;
        let file = client.open_attr(attr, false).map_err(|e| errno(&e, "handoff"))?;
        let content = if small {
            self.handed_content(&file, stamp)
        } else {
            None
        };
        Ok(file.handoff_opened(content.as_deref()))
    }

    /// The whole of a small file just checked (finding `stamp`) for its handoff: kept
    /// from an earlier handoff under the same stamp, else read now through `file`, the
    /// caller's handle (`None` when that read fails or finds another size: the
    /// handoff then goes without, and the receiver reads for itself).
    fn handed_content(&self, file: &File, stamp: Option<DataStamp>) -> Option<Arc<[u8]>> {
        let ino = file.inode();
        if let Some(bytes) = self.handed.get(ino, stamp.as_ref()) {
            return Some(bytes);
        }
        let size = file.attr().size as usize;
        let mut bytes = vec![0u8; size];
        if file.read_at(0, &mut bytes).ok()? != size {
            return None;
        }
        let bytes: Arc<[u8]> = bytes.into();
        self.handed.keep(ino, stamp, bytes.clone());
        Some(bytes)
    }

    /// How the kernel is to treat an open file: `keep`, whether the pages it has cached
    /// of the file are still right (else they are dropped at this open). O_APPEND files
    /// bypass the page cache: the daemon writes each append at the file's true end,
    /// which need not be the offset the kernel chose from its cached size, so cached
    /// pages would sit at wrong offsets. `no_flush`: the kernel sends no flush at its
    /// closes (see `OpenFile::no_flush`).
    pub(super) fn open_flags(&self, flags: i32, keep: bool, no_flush: bool) -> FopenFlags {
        let mut out = FopenFlags::empty();
        if no_flush {
            out |= FopenFlags::FOPEN_NOFLUSH;
        }
        if self.cache.keep_cache || keep {
            out |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        if flags & libc::O_APPEND != 0 {
            out |= FopenFlags::FOPEN_DIRECT_IO;
        }
        out
    }

    pub(super) fn do_create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Result<(FileAttr, u64), Errno> {
        let name = name_bytes(name);
        let client = self.caller(req);
        let exclusive = flags & libc::O_EXCL != 0;
        let truncate = flags & libc::O_TRUNC != 0 && !exclusive;
        if truncate {
            self.data_changed();
        }
        let options = CreateOptions {
            mode,
            exclusive,
            truncate,
            ..CreateOptions::default()
        };
        let change = self.parents.begin(inode(parent));
        // The kernel asks to create only a name it just found missing: made exclusively
        // first, the file is known new (empty: no size to ask every io server for, nothing
        // to truncate, which costs a durable manager commit and a request per io server).
        // Only if another client made the name meanwhile is it opened as it is.
        let mut made = client.create_in_made(
            inode(parent),
            name,
            &CreateOptions {
                exclusive: true,
                truncate: false,
                ..options
            },
        );
        let new = made.is_ok();
        if !exclusive && made.as_ref().is_err_and(|e| e.code() == ErrorCode::Exists) {
            made = client.create_in_made(inode(parent), name, &options);
        }
        self.parents
            .end(change, made.as_ref().ok().and_then(|m| m.parent.as_ref()));
        self.recent.dir_changed(inode(parent));
        let Made {
            made: file,
            written_under,
            ..
        } = made.map_err(|e| errno(&e, "create"))?;
        let mut attr = file.attr().clone();
        if new || exclusive || truncate {
            attr.size = 0;
        } else {
            // The file may have existed (another client made it since the kernel looked).
            client
                .fill_sizes(std::slice::from_mut(&mut attr))
                .map_err(|e| errno(&e, "create"))?;
        }
        let fattr = self.entered(inode(parent), name, &attr);
        let fh = self.add_file(file, true, self.data_changes.load(Ordering::SeqCst), false)?;
        if new {
            // Made by this very create (exclusively, whatever the caller's flags), and
            // open here (see `deferred`).
            self.deferred.created(attr.inode);
            // Its writes go through the kernel's pages unless appends (direct I/O here)
            // or O_DIRECT: then a later open may keep those pages (see `Seen::Written`).
            if let Some(stamp) = written_under.filter(|_| flags & (libc::O_APPEND | libc::O_DIRECT) == 0) {
                self.written_here(attr.inode, stamp);
            }
        }
        Ok((fattr, fh))
    }

    pub(super) fn do_rename(
        &self,
        req: &Request,
        (parent, name): (INodeNo, &OsStr),
        (new_parent, new_name): (INodeNo, &OsStr),
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let (name, new_name) = (name_bytes(name), name_bytes(new_name));
        let client = self.caller(req);
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return self.do_exchange(&client, (parent, name), (new_parent, new_name));
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        if (parent, name) == (new_parent, new_name) && !no_replace {
            return Ok(());
        }
        // A replaced target that is open here stays readable by its descriptors.
        self.parents.rename_begins();
        let renamed = if no_replace {
            // The manager refuses an existing target in the move's own transaction, so
            // a create by another client meanwhile is never replaced.
            self.rename_no_replace(&client, (inode(parent), name), (inode(new_parent), new_name))
        } else {
            client.rename_keeping((inode(parent), name), (inode(new_parent), new_name), self.keep())
        };
        self.parents.rename_ends();
        self.recent.dir_changed(inode(parent));
        self.recent.dir_changed(inode(new_parent));
        let (moved, kept) = renamed.map_err(|e| errno(&e, "rename"))?;
        self.names.renamed(inode(new_parent), new_name, moved.inode);
        self.recent.inode_changed(moved.inode);
        self.kept_by_manager(kept);
        Ok(())
    }

    /// rename(2) with RENAME_NOREPLACE. A manager from before `RenameNoReplace` is
    /// asked whether the target exists first, then to rename: not atomic against
    /// another client's create in between.
    pub(super) fn rename_no_replace(
        &self,
        client: &Client,
        src: (InodeId, &[u8]),
        dst: (InodeId, &[u8]),
    ) -> Result<(Attr, Option<InodeId>), ClientError> {
        match client.rename_no_replace(src, dst) {
            Err(e) if e.code() == ErrorCode::UnknownOpcode => {}
            other => return other.map(|moved| (moved, None)),
        }
        match client.lookup(dst.0, dst.1) {
            Ok(_) => Err(ClientError::Refused {
                code: ErrorCode::Exists,
                message: format!(
                    "{} exists (rename without replacing)",
                    String::from_utf8_lossy(dst.1)
                ),
            }),
            Err(e) if e.code() == ErrorCode::NotFound => client.rename_keeping(src, dst, None),
            Err(e) => Err(e),
        }
    }

    /// rename(2) with RENAME_EXCHANGE: the manager swaps the two names in one
    /// transaction; this mount's memory of both names and both inodes is renewed.
    pub(super) fn do_exchange(
        &self,
        client: &Client,
        (parent, name): (INodeNo, &[u8]),
        (new_parent, new_name): (INodeNo, &[u8]),
    ) -> Result<(), Errno> {
        self.parents.rename_begins();
        let swapped = client.rename_exchange((inode(parent), name), (inode(new_parent), new_name));
        self.parents.rename_ends();
        self.recent.dir_changed(inode(parent));
        self.recent.dir_changed(inode(new_parent));
        let moved = swapped.map_err(|e| errno(&e, "rename"))?;
        self.names.renamed(inode(new_parent), new_name, moved.inode);
        self.recent.inode_changed(moved.inode);
        if let Ok(other) = client.lookup(inode(parent), name) {
            self.names.renamed(inode(parent), name, other.inode);
            self.recent.inode_changed(other.inode);
        }
        Ok(())
    }

    /// What `release` does for open file `fh` (also for one whose open or create was
    /// answered EINTR before its handle reached the kernel, which never releases it).
    pub(super) fn close_handle(&self, ino: INodeNo, fh: FileHandle, lock_owner: Option<LockOwner>) {
        // Normally sent by flush already; a descriptor dropped without one (mmap) sends
        // here, before a kept file may be released. Nobody is left to tell of a failure
        // but the log.
        let _ = self.behind.send(inode(ino));
        let _ = self.deferred.send(inode(ino));
        // The open file's flock lock goes with its last descriptor.
        if let Some(owner) = lock_owner {
            if self.lock_holders.forget(inode(ino), owner.0) {
                locks::unlock_all(&self.clients.base(), self.session, inode(ino), owner.0);
            }
        }
        let closed = self.files.write().expect("file table poisoned").remove(&fh.0);
        // As at flush: only a descriptor that changed the file.
        if closed.as_ref().is_none_or(|o| o.changed.load(Ordering::Relaxed)) {
            self.recent.inode_changed(inode(ino));
        }
        if let Some(open) = closed {
            if let Some(inode) = self.open_inodes.closed(open.file.inode()) {
                kept::release(&self.clients.base(), self.session, inode);
            }
            if !self.open_inodes.is_open(open.file.inode()) {
                self.lock_holders.closed(open.file.inode());
                self.behind.forget(open.file.inode());
                self.deferred.closed(open.file.inode());
            }
        }
    }

    pub(super) fn do_read(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        reply: crate::watchdog::Watched<ReplyData>,
    ) {
        let open = match self
            .file(fh)
            .and_then(|open| self.locks_kept(&open, "read").map(|()| open))
        {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        self.open_completed(inode(ino), fh);
        if self.data_changed_since(open.sized_at) {
            open.file.distrust_size();
        }
        // Reads see this mount's kept writes (the kernel asks only for what its page
        // cache lacks, so this is rare).
        if let Err(e) = self.behind.send(inode(ino)) {
            return reply.error(e);
        }
        let size = size.min(REQUEST_BYTES_MAX) as usize;
        // A buffer of the read pool: the io servers place the reply's bytes there
        // themselves, and it goes from there to the kernel. Every buffer busy (or
        // held by a call given up on), or no pool: this worker's own buffer, into
        // which the connections copy.
        if let Some(mut slot) = weft_rpc::shm::Pool::get().and_then(|pool| pool.lease()) {
            let bytes = slot.bytes();
            match open.file.read_at(offset, &mut bytes[..size]) {
                Ok(n) => reply.data(&bytes[..n]),
                Err(e) => reply.error(errno(&e, "read")),
            }
            return;
        }
        READ_BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            if buffer.is_none() {
                match ReadBuffer::new() {
                    Ok(made) => *buffer = Some(made),
                    Err(e) => {
                        eprintln!("weft-fuse: read: cannot map this worker's read buffer: {e}");
                        return reply.error(Errno::ENOMEM);
                    }
                }
            }
            let bytes = buffer.as_mut().expect("made above").bytes();
            match open.file.read_at(offset, &mut bytes[..size]) {
                Ok(n) => reply.data(&bytes[..n]),
                Err(e) => reply.error(errno(&e, "read")),
            }
        })
    }

    /// Entries after `offset` of open directory `fh`.
    pub(super) fn listing(&self, req: &Request, fh: FileHandle, offset: u64) -> Result<Vec<Listed>, Errno> {
        let stream = self
            .dirs
            .lock()
            .expect("directory table poisoned")
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)?;
        let client = self.caller(req);
        let mut stream = stream.lock().expect("directory stream poisoned");
        stream.after(&client, offset).map_err(|e| errno(&e, "readdir"))
    }

    /// Entries after `offset` of open directory `fh`, with the sized attributes of its
    /// page (`DirStream::size_page`: one request per io server per page), or `None` if
    /// the sizes could not be had that way (then `listed_attrs` asks per batch).
    pub(super) fn listing_sized(
        &self,
        client: &Client,
        fh: FileHandle,
        offset: u64,
    ) -> Result<(Vec<Listed>, Option<crate::dir::SizedPage>), Errno> {
        let stream = self
            .dirs
            .lock()
            .expect("directory table poisoned")
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)?;
        let mut stream = stream.lock().expect("directory stream poisoned");
        let entries = stream.after(client, offset).map_err(|e| errno(&e, "readdir"))?;
        let sized = stream.size_page(client).ok().map(|page| {
            entries
                .iter()
                .filter_map(|e| page.get(&e.offset).map(|a| (e.offset, a.clone())))
                .collect()
        });
        Ok((entries, sized))
    }

    /// Attributes of listed entries, from the listing's page with sizes asked of the io
    /// servers (one request per server for the batch); files removed since the listing
    /// are left out.
    pub(super) fn listed_attrs(&self, client: &Client, entries: &[Listed]) -> Vec<Option<Attr>> {
        let mut attrs: Vec<Attr> = entries.iter().filter_map(|e| e.attr.clone()).collect();
        if attrs.len() != entries.len() {
            return entries.iter().map(|e| client.getattr(e.inode).ok()).collect();
        }
        let sized: Vec<bool> = entries.iter().map(|e| e.sized).collect();
        match client.sizes_of_unsized(&mut attrs, &sized) {
            Ok(gone) => attrs
                .into_iter()
                .zip(gone)
                .map(|(a, gone)| (!gone).then_some(a))
                .collect(),
            Err(_) => entries.iter().map(|e| client.getattr(e.inode).ok()).collect(),
        }
    }

    pub(super) fn xattr_value(&self, req: &Request, ino: INodeNo, name: &OsStr) -> Result<Vec<u8>, Errno> {
        if name != OsStr::new(LAYOUT_XATTR) {
            return Err(Errno::NO_XATTR);
        }
        let attr = self
            .caller(req)
            .getattr(inode(ino))
            .map_err(|e| errno(&e, "getxattr"))?;
        xattr::format(&attr)
            .map(String::into_bytes)
            .ok_or(Errno::NO_XATTR)
    }

    /// setxattr of the layout attribute, with setxattr(2)'s create/replace flags.
    pub(super) fn set_layout_xattr_as(
        &self,
        req: &Request,
        ino: INodeNo,
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), Errno> {
        if how != XattrSet::Either {
            let exists = self.xattr_value(req, ino, OsStr::new(LAYOUT_XATTR)).is_ok();
            if how == XattrSet::Replace && !exists {
                return Err(Errno::NO_XATTR);
            }
            if how == XattrSet::Create && exists {
                return Err(Errno::EEXIST);
            }
        }
        self.set_layout_xattr(req, ino, Some(value))
    }

    /// mknod(2): FIFOs, devices and sockets are namespace objects; a regular file is
    /// created as `create` would, and not opened.
    pub(super) fn do_mknod(
        &self,
        req: &Request,
        parent: InodeId,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<FileAttr, Errno> {
        let client = self.caller(req);
        let permissions = mode & !umask & 0o7777;
        let change = self.parents.begin(parent);
        let made = match kind_of_mode(mode) {
            Some(FileKind::File) => {
                let options = CreateOptions {
                    mode: permissions,
                    exclusive: true,
                    truncate: false,
                    ..CreateOptions::default()
                };
                client.create_in_made(parent, name, &options).map(|made| {
                    let mut attr = made.made.attr().clone();
                    attr.size = 0;
                    Made {
                        made: attr,
                        parent: made.parent,
                        written_under: None,
                    }
                })
            }
            Some(kind) if kind.is_special() => {
                client.mknod_in_made(parent, name, kind, permissions, rdev as u64)
            }
            _ => {
                self.parents.end(change, None);
                return Err(Errno::EINVAL);
            }
        };
        self.parents
            .end(change, made.as_ref().ok().and_then(|m| m.parent.as_ref()));
        let attr = made.map_err(|e| errno(&e, "mknod"))?.made;
        Ok(self.entered(parent, name, &attr))
    }

    /// `attr` with a file's size filled in (kept as it is if the servers cannot say).
    pub(super) fn with_size(&self, req: &Request, mut attr: Attr) -> Attr {
        if attr.kind == FileKind::File {
            let _ = self.caller(req).fill_sizes(std::slice::from_mut(&mut attr));
        }
        attr
    }

    pub(super) fn set_layout_xattr(
        &self,
        req: &Request,
        ino: INodeNo,
        value: Option<&[u8]>,
    ) -> Result<(), Errno> {
        let client = self.caller(req);
        let attr = client.getattr(inode(ino)).map_err(|e| errno(&e, "setxattr"))?;
        if attr.kind != FileKind::Directory {
            // A file's layout is fixed when it is created: set the directory's default.
            return Err(Errno::EOPNOTSUPP);
        }
        let layout = match value {
            Some(v) => {
                let text = std::str::from_utf8(v).map_err(|_| Errno::EINVAL)?;
                Some(xattr::parse(text).map_err(|why| {
                    eprintln!("weft-fuse: setxattr {LAYOUT_XATTR}={text:?}: {why}");
                    Errno::EINVAL
                })?)
            }
            None if attr.dir_layout.is_none() => return Err(Errno::NO_XATTR),
            None => None,
        };
        client
            .set_dir_layout_in(inode(ino), layout)
            .map_err(|e| errno(&e, "setxattr"))?;
        Ok(())
    }
}

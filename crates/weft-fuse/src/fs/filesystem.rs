//! `fuser::Filesystem` for `WeftFs`: each kernel request answered, most through the
//! helpers in `calls.rs`.

use super::locking::{lock_errno, lock_kind, on_waiting_thread, LockTaker};
use super::{errno, inode, name_bytes, WeftFs, OPEN_HANDLES_MAX, READDIRPLUS_BATCH};
use crate::attr::{dot_attr, time_set};
use crate::behind::SMALL_WRITE_BYTES;
use crate::dir::{DirStream, Listed};
use crate::kept::{self};
use crate::kernel::request_limits;
use crate::locks::{self, Asked};
use crate::open_file::LOCKERS_MAX;
use crate::xattr::{CLUSTER_XATTR, HANDOFF_XATTR, LAYOUT_XATTR};
use fuser::{
    Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use weft_client::{ClientError, ErrorCode, SetAttr, XattrSet};
use weft_proto::{LockKind, LockRequest};

fn reply_xattr(value: &[u8], size: u32, reply: crate::watchdog::Watched<ReplyXattr>) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

impl Filesystem for WeftFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        request_limits(config);
        let wanted = [
            // ls -l, find and tar get names and attributes in one pass.
            InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO,
            // Lookups and creates in one directory run in parallel: the manager orders them.
            InitFlags::FUSE_PARALLEL_DIROPS,
            // Writes, truncates and chowns by unprivileged processes drop setuid/setgid
            // here (the manager) rather than by a chmod from the kernel, which a
            // writer who does not own the file may not do.
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
            // fcntl and flock locks come here and are held cluster-wide (see `locks`).
            InitFlags::FUSE_POSIX_LOCKS,
            InitFlags::FUSE_FLOCK_LOCKS,
        ];
        for flags in wanted {
            let _ = config.add_capabilities(flags);
        }
        self.renew_session_in_background();
        self.keep_leases_in_background();
        Ok(())
    }

    fn destroy(&mut self) {
        self.behind.send_all();
        self.deferred.send_all();
        let base = self.clients.base();
        for (inode, owner) in self.lock_holders.drain() {
            locks::unlock_all(&base, self.session, inode, owner);
        }
        self.lock_holders.end(&base);
        for inode in self.open_inodes.drain_kept() {
            kept::release(&base, self.session, inode);
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.names.forget(inode(ino), nlookup);
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let reply = self.watch(req, reply);
        match self.do_lookup(req, parent, name) {
            Ok((attr, ttl, ticket)) => {
                reply.entry(&ttl, &attr, Generation(0));
                if let Some(ticket) = ticket {
                    self.recent.fetch(&self.caller(req), ticket);
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let reply = self.watch(req, reply);
        // A directory this mount just made a name in: as the manager answered that.
        if let Some((attr, left)) = self.parents.take(inode(ino)) {
            return reply.attr(&left, &self.remember(&attr));
        }
        match self.do_getattr(req, inode(ino), fh) {
            Ok((attr, ttl)) => reply.attr(&ttl, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let reply = self.watch(req, reply);
        if size.is_some() {
            self.data_changed();
        }
        let changes = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
            kill_privileges: false,
            // ftruncate(2): the kernel passes the descriptor, which it checked is open
            // for writing; the mode may deny writing by now.
            by_handle: fh.is_some() && size.is_some(),
        };
        if let Some(open) = fh.and_then(|fh| self.file(fh).ok()) {
            self.changed_through(inode(ino), &open);
        }
        if changes.by_handle {
            // The manager honours the handle of a mount run by a verified user only
            // against the write capability it granted that user.
            self.caller(req).hold_write_grant(inode(ino));
        }
        match self.do_setattr(req, ino, changes) {
            Ok(attr) => reply.attr(&self.ttl(), &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let reply = self.watch(req, reply);
        match self.caller(req).readlink_inode(inode(ino)) {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(errno(&e, "readlink")),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let reply = self.watch(req, reply);
        let name = name_bytes(name);
        let change = self.parents.begin(inode(parent));
        let made = self
            .caller(req)
            .mkdir_in_made(inode(parent), name, mode & !umask & 0o7777);
        self.parents
            .end(change, made.as_ref().ok().and_then(|m| m.parent.as_ref()));
        let result = made
            .map(|made| self.entered(inode(parent), name, &made.made))
            .map_err(|e| errno(&e, "mkdir"));
        self.recent.dir_changed(inode(parent));
        match result {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let reply = self.watch(req, reply);
        let change = self.parents.begin(inode(parent));
        let result = Ok(name_bytes(name)).and_then(|name| {
            let kept = self
                .caller(req)
                .unlink_keeping(inode(parent), name, self.keep())
                .map_err(|e| errno(&e, "unlink"))?;
            self.kept_by_manager(kept);
            Ok(())
        });
        self.parents.end(change, None);
        self.recent.dir_changed(inode(parent));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let reply = self.watch(req, reply);
        let change = self.parents.begin(inode(parent));
        let result = Ok(name_bytes(name)).and_then(|name| {
            self.caller(req)
                .rmdir_in(inode(parent), name)
                .map_err(|e| errno(&e, "rmdir"))
        });
        self.parents.end(change, None);
        self.recent.dir_changed(inode(parent));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let reply = self.watch(req, reply);
        let name = name_bytes(link_name);
        let change = self.parents.begin(inode(parent));
        let made = self
            .caller(req)
            .symlink_in_made(target.as_os_str().as_bytes(), inode(parent), name);
        self.parents
            .end(change, made.as_ref().ok().and_then(|m| m.parent.as_ref()));
        let result = made
            .map(|made| self.entered(inode(parent), name, &made.made))
            .map_err(|e| errno(&e, "symlink"));
        self.recent.dir_changed(inode(parent));
        match result {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let reply = self.watch(req, reply);
        match self.do_rename(req, (parent, name), (newparent, newname), flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let reply = self.watch(req, reply);
        match self.do_open(req, ino, flags) {
            Ok((fh, open_flags)) => {
                if !reply.handed(FileHandle(fh), open_flags) {
                    // Answered EINTR meanwhile: the kernel will never release it.
                    self.close_handle(ino, FileHandle(fh), None);
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let reply = self.watch(req, reply);
        self.do_read(ino, fh, offset, size, reply)
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let reply = self.watch(req, reply);
        let result = self.file(fh).and_then(|open| {
            self.locks_kept(&open, "write")?;
            self.changed_through(inode(ino), &open);
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                // The writer lacks CAP_FSETID: its write drops setuid/setgid (the kernel
                // leaves that to the file system, FUSE_HANDLE_KILLPRIV_V2).
                open.file.drop_privileges().map_err(|e| errno(&e, "write"))?;
                if let Some(n) = self.notifier.get() {
                    let _ = n.inval_inode(ino, -1, 0);
                }
            }
            if flags.0 & libc::O_APPEND != 0 {
                // At the true end of the file, whoever wrote last, not at the offset the
                // kernel chose from its cached size; after what this mount wrote before.
                self.behind.send(inode(ino))?;
                open.file.append(data).map(|_| data.len())
            } else if data.len() < SMALL_WRITE_BYTES {
                // Kept, and sent with the file's other small writes (see `behind`).
                open.file
                    .check_write(offset, data.len())
                    .map_err(|e| errno(&e, "write"))?;
                if self.deferred.first_write(inode(ino)) {
                    // Held by the close, which then sends at once (see `prefetch`).
                    self.prefetch.ask(open.clone());
                }
                return self
                    .behind
                    .write(inode(ino), &open, offset, data)
                    .map(|()| data.len());
            } else {
                self.behind.send(inode(ino))?;
                open.file.write_at(offset, data)
            }
            .map_err(|e| errno(&e, "write"))
        });
        match result {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty) {
        let reply = self.watch(req, reply);
        // Kept writes go to the io servers now: by close, every byte is on its server
        // and the next getattr anywhere sees the new size. A failure to send them is
        // close's error, as on NFS.
        self.open_completed(inode(ino), fh);
        self.deferred.xattrs_unknown(inode(ino));
        let open = self.file(fh);
        let sent = open
            .as_ref()
            .map_err(|e| *e)
            .and_then(|_| self.send_kept(inode(ino)))
            .and_then(|()| match &open {
                // A descriptor whose locks were lost reports it at close too.
                Ok(o) => self.locks_kept(o, "close"),
                Err(_) => Ok(()),
            });
        // A descriptor that changed nothing (open only for reading, or for writing and
        // never written) changed nothing whatever its close sent (bytes kept through
        // another descriptor, open here, whose own close follows); its close must not
        // throw away a listing being fetched (see `recent`): readers closing file after
        // file (mdtest's read phase, which opens O_RDWR) did, listing after listing.
        if !matches!(&open, Ok(o) if !o.changed.load(Ordering::Relaxed)) {
            self.recent.inode_changed(inode(ino));
        }
        // A process's close of any descriptor of a file drops its record locks on it
        // (POSIX), after what it wrote under them was sent.
        if self.lock_holders.forget(inode(ino), lock_owner.0) {
            locks::unlock_all(&self.clients.base(), self.session, inode(ino), lock_owner.0);
        }
        match sent {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Some(open) = self.file(fh).ok().filter(|o| o.no_flush) {
            // What its flush would have done: the open completed (it was answered
            // before this release), and the record locks taken through it go.
            self.open_completed(inode(ino), fh);
            let lockers: Vec<u64> = open.lockers.lock().expect("lockers poisoned").drain().collect();
            for owner in lockers {
                if self.lock_holders.forget(inode(ino), owner) {
                    locks::unlock_all(&self.clients.base(), self.session, inode(ino), owner);
                }
            }
        }
        self.close_handle(ino, fh, lock_owner);
        reply.ok();
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let Some(kind) = lock_kind(typ) else {
            return reply.error(Errno::EINVAL);
        };
        let request = LockRequest {
            session: self.session,
            owner: lock_owner.0,
            inode: inode(ino),
            pid,
            kind,
            start,
            end,
        };
        let (client, holders) = (self.clients.base(), Arc::clone(&self.lock_holders));
        let tid = req.pid();
        let answer = move |asked: Result<Asked<Option<weft_proto::HeldLock>>, ClientError>,
                           reply: ReplyLock| {
            match asked {
                Ok(Asked::Answered(Some(held))) => {
                    let typ = if held.write { libc::F_WRLCK } else { libc::F_RDLCK };
                    reply.locked(held.start, held.end, typ, held.pid)
                }
                Ok(Asked::Answered(None)) => reply.locked(start, end, libc::F_UNLCK, 0),
                Ok(Asked::Grace) => unreachable!("answered only once out of the grace"),
                Err(e) => reply.error(lock_errno(&e)),
            }
        };
        match holders.test(&client, &request) {
            Ok(Asked::Grace) => {
                // The manager's grace after a restart: asked again until answered.
                let waiting = Arc::clone(&holders);
                on_waiting_thread(&waiting, move || {
                    let mut tries = 0u32;
                    loop {
                        std::thread::sleep(locks::pause(tries));
                        tries = tries.saturating_add(1);
                        if locks::waiter_interrupted(pid, tid) {
                            return reply.error(Errno::EINTR);
                        }
                        match holders.test(&client, &request) {
                            Ok(Asked::Grace) => continue,
                            asked => return answer(asked, reply),
                        }
                    }
                });
            }
            asked => answer(asked, reply),
        }
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let Some(kind) = lock_kind(typ) else {
            return reply.error(Errno::EINVAL);
        };
        let file = inode(ino);
        if kind != LockKind::Unlock {
            if let Some(open) = self.file(fh).ok().filter(|o| o.no_flush) {
                // No flush names this owner at a close: the release of this open does.
                let mut lockers = open.lockers.lock().expect("lockers poisoned");
                if lockers.len() >= LOCKERS_MAX && !lockers.contains(&lock_owner.0) {
                    return reply.error(Errno::ENOLCK);
                }
                lockers.insert(lock_owner.0);
            }
        }
        if kind == LockKind::Unlock {
            // What the owner wrote under the lock reaches the io servers before another
            // client may take it.
            if let Err(e) = self.send_kept(file) {
                return reply.error(e);
            }
        }
        let taker = LockTaker {
            client: self.clients.base(),
            request: LockRequest {
                session: self.session,
                owner: lock_owner.0,
                inode: file,
                pid,
                kind,
                start,
                end,
            },
            sleep,
            tid: req.pid(),
            holders: Arc::clone(&self.lock_holders),
            notifier: Arc::clone(&self.notifier),
            names: Arc::clone(&self.names),
        };
        match taker.try_once() {
            Ok(Asked::Answered(())) => reply.ok(),
            // F_SETLKW waits while another's lock refuses it; either waits out the
            // manager's grace after a restart (F_SETLK is answered after it, not early).
            Ok(Asked::Grace) => on_waiting_thread(&self.lock_holders, move || taker.wait(reply)),
            Err(e) if e.code() == ErrorCode::Busy && sleep => {
                on_waiting_thread(&self.lock_holders, move || taker.wait(reply))
            }
            Err(e) => reply.error(lock_errno(&e)),
        }
    }

    fn fsync(&self, req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let reply = self.watch(req, reply);
        let result = self.file(fh).and_then(|open| {
            self.locks_kept(&open, "fsync")?;
            self.behind.send(inode(ino))?;
            self.deferred.send(inode(ino))?;
            open.file.sync().map_err(|e| errno(&e, "fsync"))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let reply = self.watch(req, reply);
        let mut dirs = self.dirs.lock().expect("directory table poisoned");
        if dirs.len() >= OPEN_HANDLES_MAX {
            return reply.error(Errno::ENFILE);
        }
        let fh = self.new_handle();
        dirs.insert(fh, Arc::new(Mutex::new(DirStream::new(inode(ino)))));
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn readdir(&self, req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        let mut reply = self.watch(req, reply);
        match self.listing(req, fh, offset) {
            Ok(entries) => {
                for e in entries {
                    let kind = crate::attr::file_type(e.kind);
                    if reply.add(
                        INodeNo(e.inode.0),
                        e.offset,
                        kind,
                        OsStr::from_bytes(e.name.as_bytes()),
                    ) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let mut reply = self.watch(req, reply);
        let client = self.caller(req);
        let (entries, sized) = match self.listing_sized(&client, fh, offset) {
            Ok(listed) => listed,
            Err(e) => return reply.error(e),
        };
        let ttl = self.ttl();
        'batches: for batch in entries.chunks(READDIRPLUS_BATCH) {
            let (dots, named): (Vec<&Listed>, Vec<&Listed>) =
                batch.iter().partition(|e| e.name == "." || e.name == "..");
            for e in dots {
                // The kernel takes nothing from "." and ".." here (see `dot_attr`).
                let name = OsStr::from_bytes(e.name.as_bytes());
                let attr = dot_attr(e.inode.0);
                if reply.add(INodeNo(e.inode.0), e.offset, name, &ttl, &attr, Generation(0)) {
                    break 'batches;
                }
            }
            let named: Vec<Listed> = named.into_iter().cloned().collect();
            let attrs = match &sized {
                Some(sized) => named
                    .iter()
                    .map(|e| sized.get(&e.offset).cloned().flatten())
                    .collect(),
                None => self.listed_attrs(&client, &named),
            };
            for (e, attr) in named.iter().zip(attrs) {
                let Some(attr) = attr else { continue };
                // Leased while this mount's last answer about it was, with the same
                // attributes (see `leases`).
                let ttl = self.listed_ttl(&attr);
                let fattr = self.entered(inode(ino), e.name.as_bytes(), &attr);
                let name = OsStr::from_bytes(e.name.as_bytes());
                if reply.add(INodeNo(e.inode.0), e.offset, name, &ttl, &fattr, Generation(0)) {
                    break 'batches;
                }
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().expect("directory table poisoned").remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let reply = self.watch(req, reply);
        // A manager with a commit interval answers namespace changes before they are
        // durable: fsync of a directory commits them (all of them, as a journal would).
        match self.caller(req).sync_metadata() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e, "fsyncdir")),
        }
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let reply = self.watch(req, reply);
        let b = match self.caller(req).statfs() {
            Ok(s) => s.blocks(),
            Err(e) => return reply.error(errno(&e, "statfs")),
        };
        reply.statfs(
            b.blocks,
            b.blocks_free,
            b.blocks_avail,
            b.files,
            b.files_free,
            b.block_bytes as u32,
            b.name_bytes_max as u32,
            b.block_bytes as u32,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let reply = self.watch(req, reply);
        let how = if flags & libc::XATTR_CREATE != 0 {
            XattrSet::Create
        } else if flags & libc::XATTR_REPLACE != 0 {
            XattrSet::Replace
        } else {
            XattrSet::Either
        };
        // Before the change: from now on a getxattr of this file asks the manager.
        self.deferred.xattrs_unknown(inode(ino));
        let change = self.parents.begin(inode(ino));
        let result = if name == OsStr::new(CLUSTER_XATTR) || name == OsStr::new(HANDOFF_XATTR) {
            Err(Errno::EPERM)
        } else if name == OsStr::new(LAYOUT_XATTR) {
            self.set_layout_xattr_as(req, ino, value, how)
        } else {
            self.caller(req)
                .setxattr(inode(ino), name.as_bytes(), value, how)
                .map_err(|e| errno(&e, "setxattr"))
        };
        self.parents.end(change, None);
        self.recent.inode_changed(inode(ino));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let reply = self.watch(req, reply);
        let value = if name == OsStr::new(CLUSTER_XATTR) {
            Ok(self.cluster_xattr.clone())
        } else if name == OsStr::new(HANDOFF_XATTR) {
            self.handoff_value(req, ino)
        } else if name == OsStr::new(LAYOUT_XATTR) {
            self.xattr_value(req, ino, name)
        } else if self.deferred.has_no_xattrs(inode(ino)) {
            // New here and open here: none (see `Deferred::has_no_xattrs`).
            Err(Errno::NO_XATTR)
        } else {
            self.caller(req)
                .getxattr(inode(ino), name.as_bytes())
                .map_err(|e| errno(&e, "getxattr"))
        };
        match value {
            Ok(value) => reply_xattr(&value, size, reply),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let reply = self.watch(req, reply);
        let mut names = match self.xattr_value(req, ino, OsStr::new(LAYOUT_XATTR)) {
            Ok(_) => format!("{LAYOUT_XATTR}\0").into_bytes(),
            Err(e) if e == Errno::NO_XATTR => Vec::new(),
            Err(e) => return reply.error(e),
        };
        match self.caller(req).listxattr(inode(ino)) {
            Ok(stored) => {
                for name in stored {
                    names.extend_from_slice(name.as_bytes());
                    names.push(0);
                }
            }
            Err(e) => return reply.error(errno(&e, "listxattr")),
        }
        reply_xattr(&names, size, reply)
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let reply = self.watch(req, reply);
        // Before the change: from now on a getxattr of this file asks the manager.
        self.deferred.xattrs_unknown(inode(ino));
        let change = self.parents.begin(inode(ino));
        let result = if name == OsStr::new(CLUSTER_XATTR) || name == OsStr::new(HANDOFF_XATTR) {
            Err(Errno::EPERM)
        } else if name == OsStr::new(LAYOUT_XATTR) {
            self.set_layout_xattr(req, ino, None)
        } else {
            self.caller(req)
                .removexattr(inode(ino), name.as_bytes())
                .map_err(|e| errno(&e, "removexattr"))
        };
        self.parents.end(change, None);
        self.recent.inode_changed(inode(ino));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let reply = self.watch(req, reply);
        let name = name_bytes(newname);
        let change = self.parents.begin(inode(newparent));
        let linked = self.caller(req).link_in_made(inode(ino), inode(newparent), name);
        self.parents
            .end(change, linked.as_ref().ok().and_then(|m| m.parent.as_ref()));
        self.recent.dir_changed(inode(newparent));
        self.recent.inode_changed(inode(ino));
        match linked.map(|made| made.made) {
            Ok(attr) => {
                let attr = self.with_size(req, attr);
                reply.entry(
                    &self.ttl(),
                    &self.entered(inode(newparent), name, &attr),
                    Generation(0),
                )
            }
            Err(e) => reply.error(errno(&e, "link")),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let reply = self.watch(req, reply);
        let made = self.do_mknod(req, inode(parent), name_bytes(name), mode, umask, rdev);
        self.recent.dir_changed(inode(parent));
        match made {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let reply = self.watch(req, reply);
        let result = self.file(fh).and_then(|open| {
            self.changed_through(inode(ino), &open);
            // A hole punched after kept writes must not be filled by them later.
            self.behind.send(inode(ino))?;
            open.file
                .allocate(offset, length, mode as u32)
                .map_err(|e| errno(&e, "fallocate"))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let reply = self.watch(req, reply);
        match self.do_create(req, parent, name, mode & !umask & 0o7777, flags) {
            Ok((attr, fh)) => {
                let sent = reply.handed(
                    &self.ttl(),
                    &attr,
                    Generation(0),
                    FileHandle(fh),
                    self.open_flags(flags, false, false),
                );
                if !sent {
                    // Answered EINTR meanwhile: the kernel will never release it.
                    self.close_handle(INodeNo(attr.ino.0), FileHandle(fh), None);
                }
            }
            Err(e) => reply.error(e),
        }
    }
}

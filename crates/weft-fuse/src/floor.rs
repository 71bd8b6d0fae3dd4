//! The FUSE floor: a file system that keeps its namespace in memory and stores no data,
//! built on the same FUSE library (fuser) and mounted with the same settings as a Weft
//! mount (request size, readahead, worker threads, clone fds), so that a benchmark can
//! show which part of the mount's costs is the FUSE path it is built on. A request loop
//! of one's own on /dev/fuse (read, one writev) measured the same here; FUSE over
//! io_uring (Linux 6.14+) took 4 KiB writes about 1.4 times as fast and sequential
//! reads no faster, so the floor is that of classic /dev/fuse. Directories, regular files and symbolic links with their
//! modes, owners, times and sizes behave as on a local file system (enough for fio,
//! dd, tar and cp); a read is answered with the bytes a caller-given function produces
//! (one copy from memory, as a daemon holding the data would make), a write is
//! acknowledged, dropped and only extends the size. Used by `weft bench mount --floor`
//! and `weft bench floor` (crates/weft-bench).

use crate::kernel::{request_limits, REQUEST_BYTES_MAX};
use crate::mount::{raise_request_pages_limit, set_readahead};
use fuser::{
    BackgroundSession, BsdFileFlags, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    Request, TimeOrNow, WriteFlags,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

/// Most inodes a floor holds; more are refused with ENOSPC.
pub const FLOOR_INODES_MAX: u64 = 1 << 20;

/// Fills a read's reply: (the file's inode number, file offset, buffer).
pub type FillFn = dyn Fn(u64, u64, &mut [u8]) + Send + Sync;

const TTL: Duration = Duration::from_secs(1);
const ROOT: u64 = 1;

struct Inode {
    kind: FileType,
    perm: u16,
    uid: u32,
    gid: u32,
    size: AtomicU64,
    nlink: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
    /// A directory's entries.
    entries: BTreeMap<OsString, u64>,
    /// A symbolic link's target.
    target: Vec<u8>,
}

struct Tree {
    inodes: HashMap<u64, Inode>,
    next: u64,
    inodes_max: u64,
}

impl Tree {
    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let i = self.inodes.get(&ino).ok_or(Errno::ENOENT)?;
        Ok(FileAttr {
            ino: INodeNo(ino),
            size: i.size.load(Ordering::Relaxed),
            blocks: 0,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
            crtime: i.ctime,
            kind: i.kind,
            perm: i.perm,
            nlink: i.nlink,
            uid: i.uid,
            gid: i.gid,
            rdev: 0,
            flags: 0,
            blksize: 4096,
        })
    }

    fn dir(&mut self, ino: u64) -> Result<&mut Inode, Errno> {
        let i = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        if i.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(i)
    }

    fn lookup(&mut self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        let ino = *self.dir(parent)?.entries.get(name).ok_or(Errno::ENOENT)?;
        self.attr(ino)
    }

    /// Makes `name` in `parent` a new inode of `kind`.
    fn make(
        &mut self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        kind: FileType,
        perm: u32,
    ) -> Result<FileAttr, Errno> {
        if self.inodes.len() as u64 >= self.inodes_max {
            return Err(Errno::ENOSPC);
        }
        let now = SystemTime::now();
        let ino = self.next;
        let dir = self.dir(parent)?;
        if dir.entries.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        dir.entries.insert(name.to_owned(), ino);
        dir.mtime = now;
        dir.ctime = now;
        if kind == FileType::Directory {
            dir.nlink += 1;
        }
        self.next += 1;
        self.inodes
            .insert(ino, new_inode(kind, perm, req.uid(), req.gid(), now));
        self.attr(ino)
    }

    /// Removes `name` from `parent` (a directory only if `dir`, and then only empty).
    fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = *self.dir(parent)?.entries.get(name).ok_or(Errno::ENOENT)?;
        let target = self.inodes.get(&ino).ok_or(Errno::ENOENT)?;
        match (dir, target.kind == FileType::Directory) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            (true, true) if !target.entries.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        let now = SystemTime::now();
        let parent_dir = self.dir(parent)?;
        parent_dir.entries.remove(name);
        parent_dir.mtime = now;
        parent_dir.ctime = now;
        if dir {
            parent_dir.nlink -= 1;
        }
        let target = self.inodes.get_mut(&ino).expect("looked up above");
        target.nlink = target.nlink.saturating_sub(if dir { 2 } else { 1 });
        target.ctime = now;
        if target.nlink == 0 {
            // No open-file tracking: a removed file's inode goes at once (a floor
            // stores nothing an open descriptor could still need).
            self.inodes.remove(&ino);
        }
        Ok(())
    }
}

fn new_inode(kind: FileType, perm: u32, uid: u32, gid: u32, now: SystemTime) -> Inode {
    Inode {
        kind,
        perm: (perm & 0o7777) as u16,
        uid,
        gid,
        size: AtomicU64::new(0),
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        atime: now,
        mtime: now,
        ctime: now,
        entries: BTreeMap::new(),
        target: Vec::new(),
    }
}

fn time_of(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

struct FloorFs {
    /// Reads and writes take it shared (a write only raises an atomic size), changes
    /// of the namespace exclusively.
    tree: RwLock<Tree>,
    fill: Arc<FillFn>,
}

impl FloorFs {
    fn tree(&self) -> std::sync::RwLockWriteGuard<'_, Tree> {
        self.tree.write().unwrap_or_else(|e| e.into_inner())
    }

    fn shared(&self) -> std::sync::RwLockReadGuard<'_, Tree> {
        self.tree.read().unwrap_or_else(|e| e.into_inner())
    }
}

fn entry(reply: ReplyEntry, attr: Result<FileAttr, Errno>) {
    match attr {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn empty(reply: ReplyEmpty, done: Result<(), Errno>) {
    match done {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for FloorFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        request_limits(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        entry(reply, self.tree().lookup(parent.into(), name))
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.shared().attr(ino.into()) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut tree = self.tree();
        let attr = match tree.inodes.get_mut(&u64::from(ino)) {
            Some(i) => {
                if let Some(mode) = mode {
                    i.perm = (mode & 0o7777) as u16;
                }
                if let Some(uid) = uid {
                    i.uid = uid;
                }
                if let Some(gid) = gid {
                    i.gid = gid;
                }
                if let Some(size) = size {
                    i.size.store(size, Ordering::Relaxed);
                }
                if let Some(t) = atime {
                    i.atime = time_of(t);
                }
                if let Some(t) = mtime {
                    i.mtime = time_of(t);
                }
                i.ctime = SystemTime::now();
                tree.attr(ino.into())
            }
            None => Err(Errno::ENOENT),
        };
        match attr {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        entry(
            reply,
            self.tree()
                .make(req, parent.into(), name, FileType::RegularFile, mode & !umask),
        )
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        entry(
            reply,
            self.tree()
                .make(req, parent.into(), name, FileType::Directory, mode & !umask),
        )
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        use std::os::unix::ffi::OsStrExt;
        let mut tree = self.tree();
        let made = tree.make(req, parent.into(), link_name, FileType::Symlink, 0o777);
        let made = made.and_then(|attr| {
            let i = tree.inodes.get_mut(&u64::from(attr.ino)).expect("just made");
            i.target = target.as_os_str().as_bytes().to_vec();
            i.size.store(i.target.len() as u64, Ordering::Relaxed);
            tree.attr(attr.ino.into())
        });
        entry(reply, made)
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.shared().inodes.get(&u64::from(ino)) {
            Some(i) if i.kind == FileType::Symlink => reply.data(&i.target),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.tree().remove(parent.into(), name, false))
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.tree().remove(parent.into(), name, true))
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut tree = self.tree();
        let moved = (|| {
            let ino = *tree.dir(parent.into())?.entries.get(name).ok_or(Errno::ENOENT)?;
            if tree.inodes[&ino].kind == FileType::Directory {
                // Keeps the floor simple: programs it serves (fio, tar, cp) do not.
                return Err(Errno::EXDEV);
            }
            tree.dir(newparent.into())?;
            if let Some(&old) = tree.dir(newparent.into())?.entries.get(newname) {
                if old == ino {
                    return Ok(());
                }
                tree.remove(newparent.into(), newname, false)?;
            }
            let now = SystemTime::now();
            let from = tree.dir(parent.into())?;
            from.entries.remove(name);
            from.mtime = now;
            let to = tree.dir(newparent.into())?;
            to.entries.insert(newname.to_owned(), ino);
            to.mtime = now;
            Ok(())
        })();
        empty(reply, moved)
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // No FOPEN_KEEP_CACHE: every open reads through FUSE, as a Weft mount's first
        // read of a changed file does.
        reply.opened(FileHandle(0), FopenFlags::empty())
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self
            .tree()
            .make(req, parent.into(), name, FileType::RegularFile, mode & !umask)
        {
            Ok(attr) => reply.created(&TTL, &attr, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let ino = u64::from(ino);
        let file_size = match self.shared().inodes.get(&ino) {
            Some(i) => i.size.load(Ordering::Relaxed),
            None => return reply.error(Errno::ENOENT),
        };
        let len = u64::from(size.min(REQUEST_BYTES_MAX)).min(file_size.saturating_sub(offset));
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            buf.resize(len as usize, 0);
            (self.fill)(ino, offset, &mut buf);
            reply.data(&buf);
        })
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.shared().inodes.get(&u64::from(ino)) {
            Some(i) => {
                i.size.fetch_max(offset + data.len() as u64, Ordering::Relaxed);
                reply.written(data.len() as u32)
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok()
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let listed: Result<Vec<(u64, FileType, OsString)>, Errno> = (|| {
            let mut tree = self.tree();
            let names: Vec<(OsString, u64)> = tree
                .dir(ino.into())?
                .entries
                .iter()
                .map(|(n, i)| (n.clone(), *i))
                .collect();
            Ok(names
                .into_iter()
                .filter_map(|(name, i)| tree.inodes.get(&i).map(|node| (i, node.kind, name)))
                .collect())
        })();
        match listed {
            Ok(entries) => {
                // The offset of entry k is k + 1 (entries kept sorted by name).
                for (k, (i, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(i), k as u64 + 1, kind, name) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let tree = self.shared();
        let used = tree.inodes.len() as u64;
        // Room shown as plenty: the floor stores no data.
        reply.statfs(
            1 << 40,
            1 << 40,
            1 << 40,
            tree.inodes_max,
            tree.inodes_max - used,
            4096,
            255,
            4096,
        );
    }
}

/// A mounted floor; unmounted when dropped (or by `unmount`, which reports errors).
pub struct FloorMount {
    session: Option<BackgroundSession>,
}

impl FloorMount {
    /// Unmounts and waits for the workers to end.
    pub fn unmount(mut self) -> std::io::Result<()> {
        match self.session.take() {
            Some(session) => session.umount_and_join(),
            None => Ok(()),
        }
    }
}

impl Drop for FloorMount {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let _ = session.umount_and_join();
        }
    }
}

/// Mounts a floor of at most `inodes_max` inodes on `mountpoint` (an existing empty
/// directory), with the files `initial` (name, size) in its root from the start,
/// served by `threads` workers in this process, with a Weft mount's request size and
/// `readahead_kib` (both raised only as root, as for `weft mount`).
pub fn mount_floor(
    mountpoint: &Path,
    initial: &[(&str, u64)],
    inodes_max: u64,
    threads: usize,
    readahead_kib: u32,
    fill: Arc<FillFn>,
) -> std::io::Result<FloorMount> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
    if inodes_max < 1 + initial.len() as u64 || inodes_max > FLOOR_INODES_MAX {
        return Err(invalid(format!(
            "a floor holds 2 to {FLOOR_INODES_MAX} inodes, the root and its files included"
        )));
    }
    // SAFETY: no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let now = SystemTime::now();
    let mut root = new_inode(FileType::Directory, 0o755, uid, gid, now);
    let mut inodes = HashMap::new();
    for (k, (name, size)) in initial.iter().enumerate() {
        let ino = ROOT + 1 + k as u64;
        let mut file = new_inode(FileType::RegularFile, 0o644, uid, gid, now);
        file.size = AtomicU64::new(*size);
        root.entries.insert(OsString::from(name), ino);
        inodes.insert(ino, file);
    }
    inodes.insert(ROOT, root);
    let next = ROOT + 1 + initial.len() as u64;
    let fs = FloorFs {
        tree: RwLock::new(Tree {
            inodes,
            next,
            inodes_max,
        }),
        fill,
    };
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName("weft-floor".into()), MountOption::NoAtime];
    config.n_threads = Some(threads.clamp(1, crate::THREADS_MAX));
    config.clone_fd = true;
    raise_request_pages_limit();
    let session = fuser::Session::new(fs, mountpoint, &config)?;
    let session = session.spawn()?;
    set_readahead(mountpoint, readahead_kib);
    Ok(FloorMount {
        session: Some(session),
    })
}

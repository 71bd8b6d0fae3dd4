//! The FUSE floor: a file system that stores nothing, mounted with the same settings
//! as a Weft mount (request size, readahead, worker threads, clone fds), so that a
//! benchmark can show what any FUSE file system reaches on the machine it runs on.
//! Its root holds files of one fixed size, those it was mounted with and those programs
//! create (at most `names_max` at a time; more are refused with ENOSPC), which may be
//! removed again; a read is answered with the bytes a caller-given function produces
//! (one copy from memory, as a daemon holding the data would make), a write is
//! acknowledged and dropped. Used by
//! `weft bench mount --floor` and `weft bench floor` (crates/weft-bench).

use crate::fs::{request_limits, REQUEST_BYTES_MAX};
use crate::mount::{raise_request_pages_limit, set_readahead};
use fuser::{
    BackgroundSession, BsdFileFlags, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most names a floor holds.
pub const FLOOR_FILES_MAX: u32 = 1024;

/// Fills a read's reply: (the file's inode number, file offset, buffer).
pub type FillFn = dyn Fn(u64, u64, &mut [u8]) + Send + Sync;

const TTL: Duration = Duration::from_secs(1);
const ROOT: u64 = 1;

struct FloorFs {
    names_max: u32,
    size: u64,
    fill: Arc<FillFn>,
    names: Mutex<Names>,
}

/// The root's files: inode numbers by name and names by inode number.
#[derive(Default)]
struct Names {
    by_name: std::collections::HashMap<OsString, u64>,
    by_inode: std::collections::BTreeMap<u64, OsString>,
    /// The next inode number to give (2 and up: 1 is the root).
    next: u64,
}

impl FloorFs {
    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, perm, size) = if ino == ROOT {
            (FileType::Directory, 0o755, 0)
        } else if self.names().by_inode.contains_key(&ino) {
            (FileType::RegularFile, 0o644, self.size)
        } else {
            return None;
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink: 1,
            // SAFETY: no preconditions.
            uid: unsafe { libc::geteuid() },
            // SAFETY: no preconditions.
            gid: unsafe { libc::getegid() },
            rdev: 0,
            flags: 0,
            blksize: 4096,
        })
    }

    fn names(&self) -> std::sync::MutexGuard<'_, Names> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The inode of `name` in the root; with `create`, made if missing while there is
    /// room.
    fn entry(&self, parent: INodeNo, name: &OsStr, create: bool) -> Result<FileAttr, Errno> {
        if u64::from(parent) != ROOT {
            return Err(Errno::ENOENT);
        }
        let ino = {
            let mut names = self.names();
            match names.by_name.get(name) {
                Some(&ino) => ino,
                None if !create => return Err(Errno::ENOENT),
                None if names.by_name.len() >= self.names_max as usize => return Err(Errno::ENOSPC),
                None => {
                    let ino = names.next.max(2);
                    names.next = ino + 1;
                    names.by_name.insert(name.to_owned(), ino);
                    names.by_inode.insert(ino, name.to_owned());
                    ino
                }
            }
        };
        self.attr(ino).ok_or(Errno::ENOENT)
    }
}

impl Filesystem for FloorFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        request_limits(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.entry(parent, name, false) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.entry(parent, name, true) {
            Ok(attr) => reply.created(&TTL, &attr, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(u64::from(ino)) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Nothing changes: a truncate at open leaves the fixed size.
        self.getattr(_req, ino, None, reply)
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // No FOPEN_KEEP_CACHE: every open reads through FUSE, as a Weft mount's first
        // read of a changed file does.
        reply.opened(FileHandle(0), FopenFlags::empty())
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
        if !self.names().by_inode.contains_key(&ino) {
            return reply.error(Errno::ENOENT);
        }
        let len = u64::from(size.min(REQUEST_BYTES_MAX)).min(self.size.saturating_sub(offset));
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
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.written(data.len() as u32)
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

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if u64::from(parent) != ROOT {
            return reply.error(Errno::ENOENT);
        }
        let mut names = self.names();
        match names.by_name.remove(name) {
            Some(ino) => {
                names.by_inode.remove(&ino);
                reply.ok()
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if u64::from(ino) != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        // The offset of an entry is its inode number: stable while others come and go.
        let names: Vec<(u64, OsString)> = self
            .names()
            .by_inode
            .range(offset + 1..)
            .map(|(ino, name)| (*ino, name.clone()))
            .collect();
        for (ino, name) in names {
            if reply.add(INodeNo(ino), ino, FileType::RegularFile, name) {
                break;
            }
        }
        reply.ok()
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

/// Mounts a floor holding at most `names_max` files of `size` bytes, `initial` among
/// them from the start, on `mountpoint` (an existing empty directory), served by
/// `threads` workers in this process, with a Weft mount's request size and
/// `readahead_kib` (both raised only as root, as for `weft mount`).
pub fn mount_floor(
    mountpoint: &Path,
    initial: &[&str],
    names_max: u32,
    size: u64,
    threads: usize,
    readahead_kib: u32,
    fill: Arc<FillFn>,
) -> std::io::Result<FloorMount> {
    if names_max == 0 || names_max > FLOOR_FILES_MAX || initial.len() > names_max as usize {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a floor holds 1 to {FLOOR_FILES_MAX} files"),
        ));
    }
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName("weft-floor".into()), MountOption::NoAtime];
    config.n_threads = Some(threads.clamp(1, crate::THREADS_MAX));
    config.clone_fd = true;
    raise_request_pages_limit();
    let fs = FloorFs {
        names_max,
        size,
        fill,
        names: Mutex::new(Names::default()),
    };
    for name in initial {
        fs.entry(INodeNo(ROOT), OsStr::new(name), true)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "too many initial files"))?;
    }
    let session = fuser::Session::new(fs, mountpoint, &config)?;
    let session = session.spawn()?;
    set_readahead(mountpoint, readahead_kib);
    Ok(FloorMount {
        session: Some(session),
    })
}

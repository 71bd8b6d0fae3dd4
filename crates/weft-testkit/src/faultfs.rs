//! A fault-injecting pass-through file system for power-loss tests (in the manner of
//! LazyFS, written for Weft's tests): it serves a backing directory through FUSE and
//! keeps, in memory, what it would take to undo every change not yet made durable; a
//! "power cut" undoes those changes in the backing directory, which then holds what a
//! disk would after a power loss. Servers then restart on the backing directory itself.
//!
//! The model (what survives a cut), that of a journaling local file system (ext4):
//! - File data (write, truncate, fallocate) survives only once that file was fsynced
//!   or fdatasynced after it; a cut restores each unsynced range and the old size.
//! - Namespace changes (create, mkdir, rename, unlink, rmdir) are journaled in order:
//!   any fsync or fdatasync (of any file) or fsync of any directory makes every earlier
//!   one durable, as ext4's journal commit does; a cut undoes the later ones, newest
//!   first, so the namespace is that of the moment of the last sync. A removed name's
//!   file is kept in a hidden graveyard until its removal is durable.
//! - Attribute changes (chmod, chown, times) are kept: not modelled.
//!
//! Reads see every change at once (the page cache). Changes are applied to the backing
//! directory as they come, with their undo kept here; an fsync therefore only forgets
//! undo records (the backing directory stands for the disk: it is not synced itself).
//!
//! [`Store`] holds the model on paths and handles, and is unit-tested; [`FaultFs`] is the
//! FUSE glue (`fuser`), run by the `weft-faultfs` binary.

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// The hidden directory (in the backing root) that keeps removed files until their
/// removal is durable.
pub const GRAVEYARD: &str = ".faultfs-graveyard";

/// Most bytes of old data kept for undo; a write past it fails with EIO (and says so on
/// stderr): a test that writes that much without a sync is not what this layer is for.
pub const UNDO_BYTES_MAX: usize = 1 << 30;

/// Most handles open at once.
pub const HANDLES_MAX: usize = 1 << 16;

enum Undo {
    /// Bytes `old` were at `offset` of the file (`key`) and its size was `old_size`.
    Data {
        key: (u64, u64),
        file: Arc<File>,
        offset: u64,
        old: Vec<u8>,
        old_size: u64,
    },
    Created(PathBuf),
    MadeDir(PathBuf),
    /// Renamed `from` to `to`; what `to` named before is in the graveyard at `replaced`.
    Moved {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<PathBuf>,
    },
    /// `path` (a file or an empty directory) was removed; it waits at `grave`.
    Removed {
        path: PathBuf,
        grave: PathBuf,
    },
}

struct State {
    handles: HashMap<u64, Arc<File>>,
    next_handle: u64,
    undo: Vec<Undo>,
    undo_bytes: usize,
    graves: u64,
    /// After a cut every operation fails: the "machine" is off.
    cut: bool,
}

/// What a cut undid.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CutSummary {
    pub data_ranges: usize,
    pub data_bytes: usize,
    pub namespace_changes: usize,
}

/// The backing directory and the undo records of what is not durable.
pub struct Store {
    root: PathBuf,
    state: Mutex<State>,
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn key_of(file: &File) -> io::Result<(u64, u64)> {
    let m = file.metadata()?;
    Ok((m.dev(), m.ino()))
}

impl Store {
    /// Serves `root`; makes its graveyard (emptied: what a previous run left is gone).
    pub fn new(root: &Path) -> io::Result<Store> {
        let graveyard = root.join(GRAVEYARD);
        if graveyard.exists() {
            std::fs::remove_dir_all(&graveyard)?;
        }
        std::fs::create_dir(&graveyard)?;
        Ok(Store {
            root: root.to_owned(),
            state: Mutex::new(State {
                handles: HashMap::new(),
                next_handle: 1,
                undo: Vec::new(),
                undo_bytes: 0,
                graves: 0,
                cut: false,
            }),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The backing path of `rel` (relative to the root).
    pub fn path(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }

    fn state(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.cut {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(state)
    }

    fn add_handle(state: &mut State, file: File) -> io::Result<u64> {
        if state.handles.len() >= HANDLES_MAX {
            return Err(io::Error::from_raw_os_error(libc::EMFILE));
        }
        let fh = state.next_handle;
        state.next_handle += 1;
        state.handles.insert(fh, Arc::new(file));
        Ok(fh)
    }

    fn handle(state: &State, fh: u64) -> io::Result<Arc<File>> {
        state
            .handles
            .get(&fh)
            .cloned()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
    }

    /// Opens `rel` with open(2) `flags` (creation flags aside).
    pub fn open(&self, rel: &Path, flags: i32) -> io::Result<u64> {
        let mut state = self.state()?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(flags & libc::O_ACCMODE != libc::O_RDONLY)
            .custom_flags(
                flags & !(libc::O_ACCMODE | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_APPEND),
            )
            .open(self.path(rel))?;
        if flags & libc::O_TRUNC != 0 {
            Self::resize(&mut state, &Arc::new(file.try_clone()?), 0)?;
        }
        Self::add_handle(&mut state, file)
    }

    /// Creates file `rel` (or opens it, unless `flags` has O_EXCL).
    pub fn create(&self, rel: &Path, mode: u32, flags: i32) -> io::Result<u64> {
        let mut state = self.state()?;
        let path = self.path(rel);
        let existed = path.symlink_metadata().is_ok();
        if existed && flags & libc::O_EXCL != 0 {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(mode)
            .open(&path)?;
        if !existed {
            state.undo.push(Undo::Created(rel.to_owned()));
        } else if flags & libc::O_TRUNC != 0 {
            Self::resize(&mut state, &Arc::new(file.try_clone()?), 0)?;
        }
        Self::add_handle(&mut state, file)
    }

    pub fn release(&self, fh: u64) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .handles
            .remove(&fh);
    }

    pub fn read(&self, fh: u64, offset: u64, size: usize) -> io::Result<Vec<u8>> {
        let file = Self::handle(&*self.state()?, fh)?;
        let mut buf = vec![0u8; size];
        let mut done = 0;
        while done < size {
            let n = file.read_at(&mut buf[done..], offset + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        buf.truncate(done);
        Ok(buf)
    }

    /// Keeps what `[offset, offset + len)` of `file` holds now, and its size.
    fn keep(state: &mut State, file: &Arc<File>, offset: u64, len: u64) -> io::Result<()> {
        let old_size = file.metadata()?.len();
        let end = (offset.saturating_add(len)).min(old_size);
        let mut old = vec![0u8; end.saturating_sub(offset) as usize];
        if state.undo_bytes + old.len() > UNDO_BYTES_MAX {
            eprintln!("weft-faultfs: more than {UNDO_BYTES_MAX} bytes written without a sync: refused");
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        if !old.is_empty() {
            file.read_exact_at(&mut old, offset)?;
        }
        state.undo_bytes += old.len();
        state.undo.push(Undo::Data {
            key: key_of(file)?,
            file: file.clone(),
            offset,
            old,
            old_size,
        });
        Ok(())
    }

    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> io::Result<usize> {
        let mut state = self.state()?;
        let file = Self::handle(&state, fh)?;
        Self::keep(&mut state, &file, offset, data.len() as u64)?;
        file.write_all_at(data, offset)?;
        Ok(data.len())
    }

    fn resize(state: &mut State, file: &Arc<File>, size: u64) -> io::Result<()> {
        Self::keep(state, file, size, u64::MAX - size)?;
        file.set_len(size)
    }

    /// Truncates (or extends) through handle `fh`, or `rel` when there is none.
    pub fn truncate(&self, fh: Option<u64>, rel: &Path, size: u64) -> io::Result<()> {
        let mut state = self.state()?;
        let file = match fh.map(|fh| Self::handle(&state, fh)) {
            Some(Ok(file)) => file,
            _ => Arc::new(std::fs::OpenOptions::new().write(true).open(self.path(rel))?),
        };
        Self::resize(&mut state, &file, size)
    }

    pub fn fallocate(&self, fh: u64, offset: u64, len: u64, mode: i32) -> io::Result<()> {
        let mut state = self.state()?;
        let file = Self::handle(&state, fh)?;
        Self::keep(&mut state, &file, offset, len)?;
        // SAFETY: fallocate on a descriptor this store owns.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset as libc::off_t, len as libc::off_t) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// fsync or fdatasync of handle `fh`: its file's data and every namespace change so
    /// far are durable.
    pub fn fsync(&self, fh: u64) -> io::Result<()> {
        let mut state = self.state()?;
        let key = key_of(&*Self::handle(&state, fh)?)?;
        let mut freed = 0;
        state.undo.retain(|u| match u {
            Undo::Data { key: k, old, .. } if *k == key => {
                freed += old.len();
                false
            }
            _ => true,
        });
        state.undo_bytes -= freed;
        self.commit_namespace(&mut state)
    }

    /// fsync of a directory: every namespace change so far is durable.
    pub fn fsync_dir(&self) -> io::Result<()> {
        let mut state = self.state()?;
        self.commit_namespace(&mut state)
    }

    fn commit_namespace(&self, state: &mut State) -> io::Result<()> {
        let mut graves = Vec::new();
        state.undo.retain(|u| match u {
            Undo::Data { .. } => true,
            Undo::Removed { grave, .. } => {
                graves.push(grave.clone());
                false
            }
            Undo::Moved { replaced, .. } => {
                graves.extend(replaced.clone());
                false
            }
            Undo::Created(_) | Undo::MadeDir(_) => false,
        });
        for grave in graves {
            let path = self.path(&grave);
            if path.is_dir() {
                std::fs::remove_dir(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
        }
        Ok(())
    }

    pub fn mkdir(&self, rel: &Path, mode: u32) -> io::Result<()> {
        let mut state = self.state()?;
        std::fs::create_dir(self.path(rel))?;
        std::fs::set_permissions(self.path(rel), std::fs::Permissions::from_mode(mode))?;
        state.undo.push(Undo::MadeDir(rel.to_owned()));
        Ok(())
    }

    fn bury(&self, state: &mut State, rel: &Path) -> io::Result<PathBuf> {
        state.graves += 1;
        let grave = Path::new(GRAVEYARD).join(state.graves.to_string());
        std::fs::rename(self.path(rel), self.path(&grave))?;
        Ok(grave)
    }

    pub fn unlink(&self, rel: &Path) -> io::Result<()> {
        let mut state = self.state()?;
        if self.path(rel).symlink_metadata()?.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        let grave = self.bury(&mut state, rel)?;
        state.undo.push(Undo::Removed {
            path: rel.to_owned(),
            grave,
        });
        Ok(())
    }

    pub fn rmdir(&self, rel: &Path) -> io::Result<()> {
        let mut state = self.state()?;
        if std::fs::read_dir(self.path(rel))?.next().is_some() {
            return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY));
        }
        let grave = self.bury(&mut state, rel)?;
        state.undo.push(Undo::Removed {
            path: rel.to_owned(),
            grave,
        });
        Ok(())
    }

    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state()?;
        let source = self.path(from).symlink_metadata()?;
        let replaced = match self.path(to).symlink_metadata() {
            Ok(target) => {
                if target.is_dir() != source.is_dir() {
                    return Err(io::Error::from_raw_os_error(if target.is_dir() {
                        libc::EISDIR
                    } else {
                        libc::ENOTDIR
                    }));
                }
                if target.is_dir() && std::fs::read_dir(self.path(to))?.next().is_some() {
                    return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY));
                }
                Some(self.bury(&mut state, to)?)
            }
            Err(_) => None,
        };
        if let Err(e) = std::fs::rename(self.path(from), self.path(to)) {
            if let Some(grave) = &replaced {
                std::fs::rename(self.path(grave), self.path(to))?;
            }
            return Err(e);
        }
        state.undo.push(Undo::Moved {
            from: from.to_owned(),
            to: to.to_owned(),
            replaced,
        });
        Ok(())
    }

    /// The power cut: undoes every change not durable, newest first; afterwards every
    /// operation fails with EIO.
    pub fn cut(&self) -> io::Result<CutSummary> {
        let mut state = self.state()?;
        state.cut = true;
        state.handles.clear();
        let mut summary = CutSummary::default();
        while let Some(undo) = state.undo.pop() {
            match undo {
                Undo::Data {
                    file,
                    offset,
                    old,
                    old_size,
                    ..
                } => {
                    file.set_len(old_size)?;
                    file.write_all_at(&old, offset)?;
                    summary.data_ranges += 1;
                    summary.data_bytes += old.len();
                }
                Undo::Created(path) => {
                    std::fs::remove_file(self.path(&path))?;
                    summary.namespace_changes += 1;
                }
                Undo::MadeDir(path) => {
                    std::fs::remove_dir(self.path(&path))?;
                    summary.namespace_changes += 1;
                }
                Undo::Moved { from, to, replaced } => {
                    std::fs::rename(self.path(&to), self.path(&from))?;
                    if let Some(grave) = replaced {
                        std::fs::rename(self.path(&grave), self.path(&to))?;
                    }
                    summary.namespace_changes += 1;
                }
                Undo::Removed { path, grave } => {
                    std::fs::rename(self.path(&grave), self.path(&path))?;
                    summary.namespace_changes += 1;
                }
            }
        }
        std::fs::remove_dir_all(self.root.join(GRAVEYARD))?;
        Ok(summary)
    }
}

const TTL: Duration = Duration::ZERO;
const ROOT: u64 = 1;

/// The FUSE side: inode numbers are the backing files' (the root's is 1), mapped to
/// their paths relative to the root.
pub struct FaultFs {
    store: Arc<Store>,
    root_ino: u64,
    paths: Mutex<HashMap<u64, PathBuf>>,
}

fn kind_of(t: std::fs::FileType) -> FileType {
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    }
}

fn time(secs: i64, nanos: i64) -> SystemTime {
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::new(secs as u64, nanos as u32)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

impl FaultFs {
    pub fn new(store: Arc<Store>) -> io::Result<FaultFs> {
        let root_ino = store.root().metadata()?.ino();
        let mut paths = HashMap::new();
        paths.insert(ROOT, PathBuf::new());
        Ok(FaultFs {
            store,
            root_ino,
            paths: Mutex::new(paths),
        })
    }

    fn paths(&self) -> MutexGuard<'_, HashMap<u64, PathBuf>> {
        self.paths.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn rel(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.paths().get(&u64::from(ino)).cloned().ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        let parent = self.rel(parent)?;
        if parent.as_os_str().is_empty() && name == GRAVEYARD {
            return Err(Errno::EACCES);
        }
        Ok(parent.join(name))
    }

    fn ino(&self, backing: u64) -> u64 {
        if backing == self.root_ino {
            ROOT
        } else {
            backing
        }
    }

    fn attr_of(&self, m: &std::fs::Metadata) -> FileAttr {
        FileAttr {
            ino: INodeNo(self.ino(m.ino())),
            size: m.len(),
            blocks: m.blocks(),
            atime: time(m.atime(), m.atime_nsec()),
            mtime: time(m.mtime(), m.mtime_nsec()),
            ctime: time(m.ctime(), m.ctime_nsec()),
            crtime: time(m.ctime(), m.ctime_nsec()),
            kind: kind_of(m.file_type()),
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            flags: 0,
            blksize: 4096,
        }
    }

    /// Looks `rel` up in the backing directory and remembers its inode's path.
    fn enter(&self, rel: PathBuf) -> Result<FileAttr, Errno> {
        let m = self
            .store
            .path(&rel)
            .symlink_metadata()
            .map_err(|e| Errno::from_i32(errno(&e)))?;
        let attr = self.attr_of(&m);
        self.paths().insert(attr.ino.into(), rel);
        Ok(attr)
    }

    fn getattr_of(&self, ino: INodeNo) -> Result<FileAttr, Errno> {
        let rel = self.rel(ino)?;
        let m = self
            .store
            .path(&rel)
            .symlink_metadata()
            .map_err(|e| Errno::from_i32(errno(&e)))?;
        Ok(self.attr_of(&m))
    }
}

fn io_err(e: io::Error) -> Errno {
    Errno::from_i32(errno(&e))
}

fn empty(reply: ReplyEmpty, done: Result<(), Errno>) {
    match done {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn entry(reply: ReplyEntry, attr: Result<FileAttr, Errno>) {
    match attr {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        entry(reply, self.child(parent, name).and_then(|rel| self.enter(rel)))
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.getattr_of(ino) {
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
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let done = (|| -> Result<FileAttr, Errno> {
            let rel = self.rel(ino)?;
            let path = self.store.path(&rel);
            if let Some(mode) = mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(io_err)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&path, uid, gid).map_err(io_err)?;
            }
            if let Some(size) = size {
                self.store.truncate(fh.map(|h| h.0), &rel, size).map_err(io_err)?;
            }
            if atime.is_some() || mtime.is_some() {
                let to_timespec = |t: Option<TimeOrNow>| match t {
                    None => libc::timespec {
                        tv_sec: 0,
                        tv_nsec: libc::UTIME_OMIT,
                    },
                    Some(TimeOrNow::Now) => libc::timespec {
                        tv_sec: 0,
                        tv_nsec: libc::UTIME_NOW,
                    },
                    Some(TimeOrNow::SpecificTime(t)) => {
                        let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
                        libc::timespec {
                            tv_sec: d.as_secs() as libc::time_t,
                            tv_nsec: d.subsec_nanos() as libc::c_long,
                        }
                    }
                };
                let times = [to_timespec(atime), to_timespec(mtime)];
                let c =
                    std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)?;
                // SAFETY: a valid C path and two timespecs.
                if unsafe {
                    libc::utimensat(
                        libc::AT_FDCWD,
                        c.as_ptr(),
                        times.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                } != 0
                {
                    return Err(io_err(io::Error::last_os_error()));
                }
            }
            self.getattr_of(ino)
        })();
        match done {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        entry(
            reply,
            self.child(parent, name).and_then(|rel| {
                self.store.mkdir(&rel, mode & !umask & 0o7777).map_err(io_err)?;
                self.enter(rel)
            }),
        )
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            reply,
            self.child(parent, name)
                .and_then(|rel| self.store.unlink(&rel).map_err(io_err)),
        )
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            reply,
            self.child(parent, name)
                .and_then(|rel| self.store.rmdir(&rel).map_err(io_err)),
        )
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let done = (|| {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            let (from, to) = (self.child(parent, name)?, self.child(newparent, newname)?);
            self.store.rename(&from, &to).map_err(io_err)?;
            // Every remembered path under `from` moves.
            for rel in self.paths().values_mut() {
                if let Ok(rest) = rel.strip_prefix(&from) {
                    *rel = to.join(rest);
                }
            }
            Ok(())
        })();
        empty(reply, done)
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self
            .rel(ino)
            .and_then(|rel| self.store.open(&rel, flags.0).map_err(io_err))
        {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let made = self.child(parent, name).and_then(|rel| {
            let fh = self
                .store
                .create(&rel, mode & !umask & 0o7777, flags)
                .map_err(io_err)?;
            Ok((self.enter(rel)?, fh))
        });
        match made {
            Ok((attr, fh)) => reply.created(&TTL, &attr, Generation(0), FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.store.read(fh.0, offset, size as usize) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(io_err(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.store.write(fh.0, offset, data) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(io_err(e)),
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

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.store.release(fh.0);
        reply.ok()
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        empty(reply, self.store.fsync(fh.0).map_err(io_err))
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty())
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let listed = (|| -> Result<Vec<(u64, FileType, std::ffi::OsString)>, Errno> {
            let rel = self.rel(ino)?;
            let mut entries = Vec::new();
            for e in std::fs::read_dir(self.store.path(&rel)).map_err(io_err)? {
                let e = e.map_err(io_err)?;
                if rel.as_os_str().is_empty() && e.file_name() == GRAVEYARD {
                    continue;
                }
                let m = e.metadata().map_err(io_err)?;
                entries.push((self.ino(m.ino()), kind_of(m.file_type()), e.file_name()));
            }
            entries.sort_by(|a, b| a.2.cmp(&b.2));
            Ok(entries)
        })();
        match listed {
            Ok(entries) => {
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

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        empty(reply, self.store.fsync_dir().map_err(io_err))
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // SAFETY: statvfs fills the struct given.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let c = std::ffi::CString::new(self.store.root().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C path and the struct above.
        if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
            return reply.error(io_err(io::Error::last_os_error()));
        }
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32,
        )
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        empty(
            reply,
            self.store.fallocate(fh.0, offset, length, mode).map_err(io_err),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path()).unwrap();
        (dir, store)
    }

    fn read(store: &Store, rel: &str) -> Option<Vec<u8>> {
        std::fs::read(store.path(Path::new(rel))).ok()
    }

    fn names(store: &Store) -> Vec<String> {
        let mut v: Vec<String> = walkdir(store.root(), Path::new(""));
        v.sort();
        v
    }

    fn walkdir(root: &Path, rel: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(root.join(rel)).unwrap() {
            let e = e.unwrap();
            if rel.as_os_str().is_empty() && e.file_name() == GRAVEYARD {
                continue;
            }
            let p = rel.join(e.file_name());
            out.push(p.display().to_string());
            if e.file_type().unwrap().is_dir() {
                out.extend(walkdir(root, &p));
            }
        }
        out
    }

    #[test]
    fn unsynced_data_is_lost_and_synced_data_kept() {
        let (_d, s) = store();
        let a = s.create(Path::new("a"), 0o644, libc::O_EXCL).unwrap();
        s.write(a, 0, b"hello world").unwrap();
        s.fsync(a).unwrap();
        s.write(a, 6, b"there, and more").unwrap();
        let b = s.create(Path::new("b"), 0o644, libc::O_EXCL).unwrap();
        s.write(b, 0, b"unsynced").unwrap();
        // Reads see everything before the cut.
        assert_eq!(s.read(a, 0, 100).unwrap(), b"hello there, and more");
        let summary = s.cut().unwrap();
        assert_eq!(read(&s, "a").unwrap(), b"hello world");
        // b's creation was made durable by a's fsync? No: it came after it.
        assert_eq!(read(&s, "b"), None);
        assert_eq!(summary.namespace_changes, 1);
        assert!(s.read(a, 0, 1).is_err(), "the machine is off after a cut");
    }

    #[test]
    fn a_sync_of_one_file_commits_every_earlier_namespace_change_but_not_others_data() {
        let (_d, s) = store();
        s.mkdir(Path::new("d"), 0o755).unwrap();
        let a = s.create(Path::new("d/a"), 0o644, 0).unwrap();
        s.write(a, 0, b"data of a").unwrap();
        let b = s.create(Path::new("b"), 0o644, 0).unwrap();
        s.fsync(b).unwrap();
        s.cut().unwrap();
        assert_eq!(names(&s), ["b", "d", "d/a"]);
        assert_eq!(read(&s, "d/a").unwrap(), b"", "a's data was never synced");
    }

    #[test]
    fn renames_and_removals_after_the_last_sync_are_undone_newest_first() {
        let (_d, s) = store();
        let a = s.create(Path::new("a"), 0o644, 0).unwrap();
        s.write(a, 0, b"A").unwrap();
        let b = s.create(Path::new("b"), 0o644, 0).unwrap();
        s.write(b, 0, b"B").unwrap();
        s.fsync(a).unwrap();
        s.fsync(b).unwrap();
        s.fsync_dir().unwrap();
        // After the last sync: a replaces b, then a new a, then b goes.
        s.rename(Path::new("a"), Path::new("b")).unwrap();
        let a2 = s.create(Path::new("a"), 0o644, 0).unwrap();
        s.write(a2, 0, b"A2").unwrap();
        s.unlink(Path::new("b")).unwrap();
        s.mkdir(Path::new("x"), 0o755).unwrap();
        s.rename(Path::new("x"), Path::new("y")).unwrap();
        assert_eq!(names(&s), ["a", "y"]);
        s.cut().unwrap();
        assert_eq!(names(&s), ["a", "b"]);
        assert_eq!(read(&s, "a").unwrap(), b"A");
        assert_eq!(read(&s, "b").unwrap(), b"B");
    }

    #[test]
    fn a_durable_removal_frees_its_grave() {
        let (_d, s) = store();
        let a = s.create(Path::new("a"), 0o644, 0).unwrap();
        s.unlink(Path::new("a")).unwrap();
        s.fsync_dir().unwrap();
        assert_eq!(std::fs::read_dir(s.root().join(GRAVEYARD)).unwrap().count(), 0);
        s.release(a);
        s.cut().unwrap();
        assert!(names(&s).is_empty());
    }

    #[test]
    fn truncation_and_fallocate_are_data() {
        let (_d, s) = store();
        let a = s.create(Path::new("a"), 0o644, 0).unwrap();
        s.write(a, 0, &[7u8; 10_000]).unwrap();
        s.fsync(a).unwrap();
        s.truncate(Some(a), Path::new("a"), 100).unwrap();
        s.fallocate(a, 0, 1 << 20, 0).unwrap();
        s.write(a, 50, b"xyz").unwrap();
        s.cut().unwrap();
        assert_eq!(read(&s, "a").unwrap(), vec![7u8; 10_000]);
    }

    #[test]
    fn refusals_change_nothing() {
        let (_d, s) = store();
        s.mkdir(Path::new("d"), 0o755).unwrap();
        let f = s.create(Path::new("d/f"), 0o644, 0).unwrap();
        s.fsync(f).unwrap();
        assert_eq!(errno(&s.rmdir(Path::new("d")).unwrap_err()), libc::ENOTEMPTY);
        assert_eq!(
            errno(&s.create(Path::new("d/f"), 0o644, libc::O_EXCL).unwrap_err()),
            libc::EEXIST
        );
        assert_eq!(errno(&s.unlink(Path::new("d")).unwrap_err()), libc::EISDIR);
        assert_eq!(
            errno(&s.rename(Path::new("d/f"), Path::new("d")).unwrap_err()),
            libc::EISDIR
        );
        let summary = s.cut().unwrap();
        assert_eq!(summary, CutSummary::default());
        assert_eq!(names(&s), ["d", "d/f"]);
    }
}

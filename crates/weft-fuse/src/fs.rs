//! The FUSE operations: each kernel request becomes calls of the native client, made
//! with the caller's credentials. Inodes are Weft inode numbers as they are, so the
//! adapter keeps no inode table; it keeps open files (one `weft_client::File` per
//! open, so the data path makes no metadata round trips) and open directory streams.

use crate::attr::{file_attr, time_set};
use crate::creds::Clients;
use crate::dir::{DirStream, Listed};
use crate::hidden::{hidden_name, Hidden, OpenInodes};
use crate::xattr::{self, LAYOUT_XATTR};
use fuser::{
    Errno, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, Notifier, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, SystemTime};
use weft_client::{Attr, Client, ClientError, CreateOptions, ErrorCode, File, FileKind, InodeId, SetAttr};

/// Largest read or write request the kernel sends (`max_write`, and readahead).
pub const REQUEST_BYTES_MAX: u32 = 1 << 20;

/// Requests the kernel keeps in flight in the background (readahead, async reads).
const BACKGROUND_REQUESTS_MAX: u16 = 64;

/// Open files and open directories of one mount, each. Past this, open fails (ENFILE).
const OPEN_HANDLES_MAX: usize = 1 << 16;

/// Inodes whose attributes (layout included) are remembered so that `open` needs no
/// round trip. A layout never changes and inode numbers are never reused, so entries
/// never go stale; the table starts over when full.
const ATTRS_CACHED_MAX: usize = 1 << 17;

/// Entries whose attributes one readdirplus round asks for at once.
const READDIRPLUS_BATCH: usize = 32;

/// How the mount caches.
#[derive(Debug, Clone, Copy)]
pub struct CacheOptions {
    /// How long the kernel may use attributes and names without asking again.
    pub attr_ttl: Duration,
    /// Keep file data cached across opens (off: every open starts with an empty page
    /// cache for the file, which with write-through gives close-to-open consistency).
    pub keep_cache: bool,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            attr_ttl: Duration::from_secs(1),
            keep_cache: false,
        }
    }
}

struct OpenFile {
    file: File,
}

pub struct WeftFs {
    clients: Clients,
    cache: CacheOptions,
    files: RwLock<HashMap<u64, Arc<OpenFile>>>,
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirStream>>>>,
    next_handle: AtomicU64,
    attrs: Mutex<HashMap<InodeId, Attr>>,
    open_inodes: OpenInodes,
    /// Set once the session exists: tells the kernel to drop cached attributes.
    notifier: Arc<OnceLock<Notifier>>,
}

thread_local! {
    /// Each FUSE worker thread's read buffer, reused across requests.
    static READ_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn errno(e: &ClientError, what: &str) -> Errno {
    let n = e.errno();
    // Refusals (ENOENT, EEXIST, EACCES...) are answers; anything else is worth a line
    // in the daemon's log.
    if matches!(
        e.code(),
        ErrorCode::Io | ErrorCode::Internal | ErrorCode::Unavailable | ErrorCode::TimedOut
    ) || !matches!(e, ClientError::Refused { .. })
    {
        eprintln!("weft-fuse: {what}: {e}");
    }
    Errno::from_i32(n)
}

fn name_str(name: &OsStr) -> Result<&str, Errno> {
    // Weft names are UTF-8 strings; a name that is not cannot exist there.
    name.to_str().ok_or(Errno::EINVAL)
}

fn inode(ino: INodeNo) -> InodeId {
    InodeId(ino.0)
}

impl WeftFs {
    pub fn new(client: Client, cache: CacheOptions, notifier: Arc<OnceLock<Notifier>>) -> WeftFs {
        WeftFs {
            clients: Clients::new(client),
            cache,
            files: RwLock::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            attrs: Mutex::new(HashMap::new()),
            open_inodes: OpenInodes::default(),
            notifier,
        }
    }

    fn caller(&self, req: &Request) -> Client {
        self.clients.for_caller(req.uid(), req.gid(), req.pid())
    }

    fn ttl(&self) -> Duration {
        self.cache.attr_ttl
    }

    /// Remembers an inode's attributes for `open` and answers with the kernel's form.
    fn remember(&self, attr: &Attr) -> FileAttr {
        if attr.kind == FileKind::File {
            let mut table = self.attrs.lock().expect("attribute table poisoned");
            if table.len() >= ATTRS_CACHED_MAX {
                table.clear();
            }
            table.insert(attr.inode, attr.clone());
        }
        file_attr(attr)
    }

    fn remembered(&self, ino: InodeId) -> Option<Attr> {
        self.attrs
            .lock()
            .expect("attribute table poisoned")
            .get(&ino)
            .cloned()
    }

    fn new_handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<OpenFile>, Errno> {
        self.files
            .read()
            .expect("file table poisoned")
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    fn add_file(&self, file: File) -> Result<u64, Errno> {
        let mut files = self.files.write().expect("file table poisoned");
        if files.len() >= OPEN_HANDLES_MAX {
            return Err(Errno::ENFILE);
        }
        let fh = self.new_handle();
        self.open_inodes.opened(file.inode());
        files.insert(fh, Arc::new(OpenFile { file }));
        Ok(fh)
    }

    /// Keeps an open file alive for this mount's descriptors when `name` is about to be
    /// removed or replaced: renames it to a hidden name instead (see `hidden`). Returns
    /// the inode and hidden name if it did.
    fn hide_if_open(&self, client: &Client, parent: InodeId, name: &str) -> Result<Option<InodeId>, Errno> {
        if !self.open_inodes.any_open() {
            return Ok(None);
        }
        let attr = match client.lookup(parent, name) {
            Ok(a) => a,
            Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(errno(&e, "unlink")),
        };
        if attr.kind != FileKind::File || !self.open_inodes.is_open(attr.inode) {
            return Ok(None);
        }
        let hidden = hidden_name(attr.inode);
        client
            .rename_in(parent, name, parent, &hidden)
            .map_err(|e| errno(&e, "unlink (keeping an open file)"))?;
        let record = Hidden {
            parent,
            name: hidden,
            client: client.clone(),
        };
        if let Some(closed_meanwhile) = self.open_inodes.hide(attr.inode, record) {
            closed_meanwhile.remove();
        }
        Ok(Some(attr.inode))
    }

    /// Attributes of a looked-up entry, with a file's size derived from its servers.
    fn entry_attr(&self, client: &Client, mut attr: Attr) -> Result<Attr, ClientError> {
        if attr.kind == FileKind::File {
            client.fill_sizes(std::slice::from_mut(&mut attr))?;
        }
        Ok(attr)
    }

    fn do_lookup(&self, req: &Request, parent: INodeNo, name: &OsStr) -> Result<FileAttr, Errno> {
        let name = name_str(name).map_err(|_| Errno::ENOENT)?;
        let client = self.caller(req);
        let attr = client
            .lookup(inode(parent), name)
            .and_then(|a| self.entry_attr(&client, a))
            .map_err(|e| errno(&e, "lookup"))?;
        Ok(self.remember(&attr))
    }

    fn do_setattr(&self, req: &Request, ino: INodeNo, changes: SetAttr) -> Result<FileAttr, Errno> {
        let client = self.caller(req);
        let attr = if changes == SetAttr::default() {
            client.getattr(inode(ino))
        } else {
            client.setattr_inode(inode(ino), &changes)
        }
        .map_err(|e| errno(&e, "setattr"))?;
        Ok(self.remember(&attr))
    }

    fn do_open(&self, req: &Request, ino: INodeNo, flags: OpenFlags) -> Result<u64, Errno> {
        let client = self.caller(req);
        let (attr, fresh) = match self.remembered(inode(ino)) {
            Some(a) => (a, false),
            None => {
                let a = client.getattr(inode(ino)).map_err(|e| errno(&e, "open"))?;
                self.remember(&a);
                (a, true)
            }
        };
        if attr.kind != FileKind::File {
            return Err(Errno::EISDIR);
        }
        let writable = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let told_size = attr.size;
        let file = client.open_attr(attr, writable).map_err(|e| errno(&e, "open"))?;
        if !self.cache.keep_cache && !fresh {
            // Close-to-open: this open must see what another client wrote and closed
            // before. The page cache starts empty (no FOPEN_KEEP_CACHE); the size is
            // asked of the io servers now (the first read would ask anyway), and if it
            // is not what the kernel was last told, its cached attributes are dropped.
            // That takes no inode lock, so it is safe during the open.
            let size = file.size().map_err(|e| errno(&e, "open"))?;
            if size != told_size {
                if let Some(n) = self.notifier.get() {
                    let _ = n.inval_inode(ino, -1, 0);
                }
            }
        }
        self.add_file(file)
    }

    fn open_flags(&self) -> FopenFlags {
        if self.cache.keep_cache {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    fn do_create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Result<(FileAttr, u64), Errno> {
        let name = name_str(name)?;
        let client = self.caller(req);
        let exclusive = flags & libc::O_EXCL != 0;
        let truncate = flags & libc::O_TRUNC != 0 && !exclusive;
        let options = CreateOptions {
            mode,
            exclusive,
            truncate,
            ..CreateOptions::default()
        };
        let file = client
            .create_in(inode(parent), name, &options)
            .map_err(|e| errno(&e, "create"))?;
        let mut attr = file.attr().clone();
        if exclusive || truncate {
            attr.size = 0;
        } else {
            // The file may have existed (another client made it since the kernel looked).
            client
                .fill_sizes(std::slice::from_mut(&mut attr))
                .map_err(|e| errno(&e, "create"))?;
        }
        let fattr = self.remember(&attr);
        let fh = self.add_file(file)?;
        Ok((fattr, fh))
    }

    fn do_rename(
        &self,
        req: &Request,
        (parent, name): (INodeNo, &OsStr),
        (new_parent, new_name): (INodeNo, &OsStr),
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let (name, new_name) = (name_str(name)?, name_str(new_name)?);
        let client = self.caller(req);
        if flags.contains(RenameFlags::RENAME_EXCHANGE) || flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            // Not atomic against another client creating the target meanwhile; the
            // manager has no such rename.
            match client.lookup(inode(new_parent), new_name) {
                Ok(_) => return Err(Errno::EEXIST),
                Err(e) if e.code() == ErrorCode::NotFound => {}
                Err(e) => return Err(errno(&e, "rename")),
            }
        }
        if (parent, name) == (new_parent, new_name) {
            return Ok(());
        }
        // A replaced target that is open here stays readable by its descriptors.
        let hidden = self.hide_if_open(&client, inode(new_parent), new_name)?;
        let result = client
            .rename_in(inode(parent), name, inode(new_parent), new_name)
            .map_err(|e| errno(&e, "rename"));
        if let (Err(_), Some(target)) = (&result, hidden) {
            // Put the target back where it was.
            let _ = client.rename_in(
                inode(new_parent),
                &hidden_name(target),
                inode(new_parent),
                new_name,
            );
        }
        result
    }

    fn do_read(&self, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
        let open = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let size = size.min(REQUEST_BYTES_MAX) as usize;
        READ_BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            if buffer.len() < size {
                buffer.resize(size, 0);
            }
            match open.file.read_at(offset, &mut buffer[..size]) {
                Ok(n) => reply.data(&buffer[..n]),
                Err(e) => reply.error(errno(&e, "read")),
            }
        })
    }

    /// Entries after `offset` of open directory `fh`.
    fn listing(&self, req: &Request, fh: FileHandle, offset: u64) -> Result<Vec<Listed>, Errno> {
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

    /// Attributes of listed entries; entries removed since the listing are left out.
    fn listed_attrs(&self, client: &Client, entries: &[Listed]) -> Vec<Option<Attr>> {
        let dir_entries: Vec<weft_client::DirEntry> = entries
            .iter()
            .map(|e| weft_client::DirEntry {
                name: e.name.clone(),
                inode: e.inode,
                kind: e.kind,
            })
            .collect();
        match client.getattr_many(&dir_entries) {
            Ok(attrs) => attrs.into_iter().map(Some).collect(),
            // One of them went away meanwhile: ask one by one.
            Err(_) => entries.iter().map(|e| client.getattr(e.inode).ok()).collect(),
        }
    }

    fn xattr_value(&self, req: &Request, ino: INodeNo, name: &OsStr) -> Result<Vec<u8>, Errno> {
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

    fn set_layout_xattr(&self, req: &Request, ino: INodeNo, value: Option<&[u8]>) -> Result<(), Errno> {
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

fn reply_xattr(value: &[u8], size: u32, reply: ReplyXattr) {
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
        // Each is best effort: an older kernel keeps its own limit.
        let _ = config.set_max_write(REQUEST_BYTES_MAX);
        let _ = config.set_max_readahead(REQUEST_BYTES_MAX);
        let _ = config.set_max_background(BACKGROUND_REQUESTS_MAX);
        let _ = config.set_congestion_threshold(BACKGROUND_REQUESTS_MAX * 3 / 4);
        let wanted = [
            // ls -l, find and tar get names and attributes in one pass.
            InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO,
            // Lookups and creates in one directory run in parallel: the manager orders them.
            InitFlags::FUSE_PARALLEL_DIROPS,
        ];
        for flags in wanted {
            let _ = config.add_capabilities(flags);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        for hidden in self.open_inodes.drain_hidden() {
            hidden.remove();
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.do_lookup(req, parent, name) {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.caller(req).getattr(inode(ino)) {
            Ok(attr) => reply.attr(&self.ttl(), &self.remember(&attr)),
            Err(e) => reply.error(errno(&e, "getattr")),
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
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let changes = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
        };
        match self.do_setattr(req, ino, changes) {
            Ok(attr) => reply.attr(&self.ttl(), &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.caller(req).readlink_inode(inode(ino)) {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(errno(&e, "readlink")),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let result = name_str(name).and_then(|name| {
            self.caller(req)
                .mkdir_in(inode(parent), name, mode & !umask & 0o7777)
                .map_err(|e| errno(&e, "mkdir"))
        });
        match result {
            Ok(attr) => reply.entry(&self.ttl(), &self.remember(&attr), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = name_str(name).and_then(|name| {
            let client = self.caller(req);
            if self.hide_if_open(&client, inode(parent), name)?.is_some() {
                return Ok(());
            }
            client
                .unlink_in(inode(parent), name)
                .map_err(|e| errno(&e, "unlink"))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = name_str(name).and_then(|name| {
            self.caller(req)
                .rmdir_in(inode(parent), name)
                .map_err(|e| errno(&e, "rmdir"))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let result = name_str(link_name).and_then(|name| {
            let target = target.to_str().ok_or(Errno::EINVAL)?;
            self.caller(req)
                .symlink_in(target, inode(parent), name)
                .map_err(|e| errno(&e, "symlink"))
        });
        match result {
            Ok(attr) => reply.entry(&self.ttl(), &self.remember(&attr), Generation(0)),
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
        match self.do_rename(req, (parent, name), (newparent, newname), flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.do_open(req, ino, flags) {
            Ok(fh) => reply.opened(FileHandle(fh), self.open_flags()),
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
        self.do_read(fh, offset, size, reply)
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
        let result = self
            .file(fh)
            .and_then(|open| open.file.write_at(offset, data).map_err(|e| errno(&e, "write")));
        match result {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Writes go to the io servers before they are acknowledged: by close, every byte
        // is on its server, and the next getattr anywhere sees the new size.
        match self.file(fh) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
        let closed = self.files.write().expect("file table poisoned").remove(&fh.0);
        if let Some(open) = closed {
            if let Some(hidden) = self.open_inodes.closed(open.file.inode()) {
                hidden.remove();
            }
        }
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let result = self
            .file(fh)
            .and_then(|open| open.file.sync().map_err(|e| errno(&e, "fsync")));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut dirs = self.dirs.lock().expect("directory table poisoned");
        if dirs.len() >= OPEN_HANDLES_MAX {
            return reply.error(Errno::ENFILE);
        }
        let fh = self.new_handle();
        dirs.insert(fh, Arc::new(Mutex::new(DirStream::new(inode(ino)))));
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn readdir(&self, req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        match self.listing(req, fh, offset) {
            Ok(entries) => {
                for e in entries {
                    let kind = crate::attr::file_type(e.kind);
                    if reply.add(INodeNo(e.inode.0), e.offset, kind, &e.name) {
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
        mut reply: ReplyDirectoryPlus,
    ) {
        let entries = match self.listing(req, fh, offset) {
            Ok(entries) => entries,
            Err(e) => return reply.error(e),
        };
        let client = self.caller(req);
        let ttl = self.ttl();
        let mut dir_attr = None;
        'batches: for batch in entries.chunks(READDIRPLUS_BATCH) {
            let (dots, named): (Vec<&Listed>, Vec<&Listed>) =
                batch.iter().partition(|e| e.name == "." || e.name == "..");
            for e in dots {
                // The kernel does not look "." and ".." up from here; any directory's
                // attributes will do, and the listed one is at hand.
                if dir_attr.is_none() {
                    match client.getattr(inode(ino)) {
                        Ok(a) => dir_attr = Some(file_attr(&a)),
                        Err(err) => return reply.error(errno(&err, "readdirplus")),
                    }
                }
                let attr = dir_attr.as_ref().expect("set above");
                if reply.add(INodeNo(e.inode.0), e.offset, &e.name, &ttl, attr, Generation(0)) {
                    break 'batches;
                }
            }
            let named: Vec<Listed> = named.into_iter().cloned().collect();
            for (e, attr) in named.iter().zip(self.listed_attrs(&client, &named)) {
                let Some(attr) = attr else { continue };
                let fattr = self.remember(&attr);
                if reply.add(INodeNo(e.inode.0), e.offset, &e.name, &ttl, &fattr, Generation(0)) {
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

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // The manager commits every namespace change before it answers.
        reply.ok();
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        const FRAGMENT_BYTES: u64 = 4096;
        let stats = match self.caller(req).statfs() {
            Ok(s) => s,
            Err(e) => return reply.error(errno(&e, "statfs")),
        };
        let (mut total, mut free) = (0u64, 0u64);
        for (_, server) in &stats.servers {
            if let Ok(s) = server {
                total += s.bytes_total;
                free += s.bytes_free;
            }
        }
        let files = stats.meta.files + stats.meta.directories;
        reply.statfs(
            total / FRAGMENT_BYTES,
            free / FRAGMENT_BYTES,
            free / FRAGMENT_BYTES,
            files + u32::MAX as u64,
            u32::MAX as u64,
            REQUEST_BYTES_MAX,
            weft_client::path::NAME_BYTES_MAX as u32,
            FRAGMENT_BYTES as u32,
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
        if name != OsStr::new(LAYOUT_XATTR) {
            return reply.error(Errno::EOPNOTSUPP);
        }
        if flags & libc::XATTR_REPLACE != 0 || flags & libc::XATTR_CREATE != 0 {
            let exists = self.xattr_value(req, ino, name).is_ok();
            if flags & libc::XATTR_REPLACE != 0 && !exists {
                return reply.error(Errno::NO_XATTR);
            }
            if flags & libc::XATTR_CREATE != 0 && exists {
                return reply.error(Errno::EEXIST);
            }
        }
        match self.set_layout_xattr(req, ino, Some(value)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.xattr_value(req, ino, name) {
            Ok(value) => reply_xattr(&value, size, reply),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let names = match self.xattr_value(req, ino, OsStr::new(LAYOUT_XATTR)) {
            Ok(_) => format!("{LAYOUT_XATTR}\0").into_bytes(),
            Err(e) if e == Errno::NO_XATTR => Vec::new(),
            Err(e) => return reply.error(e),
        };
        reply_xattr(&names, size, reply)
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if name != OsStr::new(LAYOUT_XATTR) {
            return reply.error(Errno::NO_XATTR);
        }
        match self.set_layout_xattr(req, ino, None) {
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
        match self.do_create(req, parent, name, mode & !umask & 0o7777, flags) {
            Ok((attr, fh)) => reply.created(
                &self.ttl(),
                &attr,
                Generation(0),
                FileHandle(fh),
                self.open_flags(),
            ),
            Err(e) => reply.error(e),
        }
    }
}

//! Local object files: naming, a bounded cache of open handles, and I/O errors mapped
//! to wire error codes.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use weft_layout::InodeId;
use weft_proto::{ErrorCode, WireError};

/// Most object files kept open at once.
pub const OPEN_OBJECTS_MAX: usize = 512;

/// Objects holding at least this many allocated bytes are emptied (truncated to nothing,
/// removed) without freeing their blocks on the request's path: freeing a file's blocks
/// costs in proportion to them (on ext4 mounted with `discard`, a synchronous discard
/// of every extent inside the truncate: 7 s for a written 4 GiB file measured on the
/// 2-core VM), and a client's O_TRUNC of a big file waited for it, past its timeout
/// under load. The reaper thread frees them instead (`ObjectStore::reap`).
pub const REAP_MIN_BYTES: u64 = 64 << 20;

/// Most emptied objects waiting for the reaper; past that an object's blocks are freed
/// on the request's path as before (each waiting one holds a descriptor and its blocks).
pub const REAP_QUEUE_MAX: usize = 64;

/// The objects under `<data_dir>/objects/<2 hex digits>/<16 hex digits>`: a fan-out of
/// 256 directories keeps each directory small.
pub struct ObjectStore {
    root: PathBuf,
    open: Mutex<HashMap<InodeId, Arc<File>>>,
    /// Set when an fsync failed: the page cache may have dropped data we acknowledged
    /// as written, so this server refuses writes until restarted (redb's `PreviousIo`).
    fsync_failed: AtomicBool,
    /// Objects whose fsync failed for lack of space: the kernel may have dropped their
    /// unwritten pages, so every later sync of them fails too, until they are removed
    /// or truncated to nothing. Other objects keep being written once space is freed.
    unsynced: Mutex<HashSet<InodeId>>,
    /// Counts replacements of object files (`empty_by_replacing`), bumped under `open`:
    /// a `get` that opened a file before a replacement does not cache it.
    replaced: AtomicU64,
    /// The reaper thread's queue of unlinked old object files whose blocks it frees
    /// (ftruncate to nothing, then close). The thread ends when the store is dropped.
    reaper: SyncSender<File>,
    /// Old object files the reaper has not freed yet.
    reaping: Arc<AtomicU64>,
    /// Test hook (`set_slow_free`): milliseconds added to every freeing of a big
    /// object's blocks, as a synchronous discard of gigabytes takes. 0: none.
    slow_free_ms: Arc<AtomicU64>,
    /// The free space of the objects' file system, for the reserve (`check_writable`).
    room: Room,
}

/// How often the free space is read from the kernel; in between, each write's bytes
/// are taken off the last reading, so a fast writer cannot overshoot the reserve by
/// what it writes in that time. Within twice the reserve it is read at every write.
const ROOM_REFRESH: std::time::Duration = std::time::Duration::from_millis(100);

/// An estimate of the free bytes of a file system: read by statvfs at most every
/// `ROOM_REFRESH`, less what writes took since.
struct Room {
    /// (when read, free bytes then less writes since, total bytes).
    state: Mutex<(Option<std::time::Instant>, u64, u64)>,
}

/// (free bytes for unprivileged use, total bytes) of the file system holding `path`.
pub fn file_system_space(path: &Path) -> io::Result<(u64, u64)> {
    file_system_stats(path).map(|s| (s.avail, s.total))
}

/// The space of the file system holding an io server's objects, and which one it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSystemStats {
    /// Free bytes for unprivileged use (f_bavail), free in all (f_bfree), total.
    pub avail: u64,
    pub free: u64,
    pub total: u64,
    /// This machine and the file system's id (f_fsid), hashed: equal for io servers on
    /// one file system of one machine, which a cluster's total counts once. The
    /// machine part keeps two machines' file systems with equal ids apart.
    pub identity: u64,
}

pub fn file_system_stats(path: &Path) -> io::Result<FileSystemStats> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs fills the zeroed struct; the path is a valid C string.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut v) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let unit = v.f_frsize as u64;
    let mut identity = machine_identity();
    identity.extend_from_slice(&(v.f_fsid as u64).to_le_bytes());
    Ok(FileSystemStats {
        avail: v.f_bavail as u64 * unit,
        free: v.f_bfree as u64 * unit,
        total: v.f_blocks as u64 * unit,
        // 0 means unknown to clients: a hash that happens to be 0 becomes 1.
        identity: fnv1a(&identity).max(1),
    })
}

/// What tells this machine from others: /etc/machine-id, else the host name.
fn machine_identity() -> Vec<u8> {
    if let Ok(id) = std::fs::read_to_string("/etc/machine-id") {
        if !id.trim().is_empty() {
            return id.trim().as_bytes().to_vec();
        }
    }
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most the buffer's length.
    if unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0 {
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        return name[..end].to_vec();
    }
    Vec::new()
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Room {
    /// Takes `bytes` off the free space, or refuses with `NoSpace` if that would leave
    /// less than the io servers' reserve (`weft_proto::space`).
    fn take(&self, root: &Path, bytes: u64) -> Result<(), WireError> {
        let mut state = self.state.lock().unwrap();
        let now = std::time::Instant::now();
        // Near the reserve, read afresh at every write: other servers on the same file
        // system write too, and their writes are not taken off this estimate.
        let near = state.1
            < weft_proto::space::io_reserve_bytes(state.2)
                .saturating_mul(2)
                .saturating_add(bytes);
        if near || state.0.is_none_or(|at| now.duration_since(at) >= ROOM_REFRESH) {
            match file_system_space(root) {
                Ok((free, total)) => *state = (Some(now), free, total),
                // Not knowing, the write itself finds out.
                Err(_) => return Ok(()),
            }
        }
        let (free, total) = (state.1, state.2);
        let reserve = weft_proto::space::io_reserve_bytes(total);
        if free < reserve.saturating_add(bytes) {
            // Read afresh next time: removals may have freed space meanwhile.
            state.0 = None;
            return Err(WireError::new(
                ErrorCode::NoSpace,
                format!(
                    "No space left on device: {} free on the io server's file system, and the last {} \
                     are kept so that removing files always works; remove files to free space",
                    weft_proto::space::human(free),
                    weft_proto::space::human(reserve)
                ),
            ));
        }
        state.1 = free - bytes;
        Ok(())
    }
}

/// Longest `ObjectStore::set_slow_free` takes.
pub const SLOW_FREE_MAX: std::time::Duration = std::time::Duration::from_secs(600);

/// Frees an emptied big object's blocks (ftruncate to nothing), after the test hook's
/// delay if set.
fn free_blocks(file: &File, slow_free_ms: &AtomicU64) -> io::Result<()> {
    let ms = slow_free_ms.load(Ordering::Relaxed);
    if ms > 0 {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    file.set_len(0)
}

impl ObjectStore {
    pub fn open(data_dir: &Path) -> io::Result<ObjectStore> {
        let root = data_dir.join("objects");
        for k in 0..256 {
            std::fs::create_dir_all(root.join(format!("{k:02x}")))?;
        }
        let (reaper, old_files) = mpsc::sync_channel::<File>(REAP_QUEUE_MAX);
        let reaping = Arc::new(AtomicU64::new(0));
        let slow_free_ms = Arc::new(AtomicU64::new(0));
        let left = Arc::clone(&reaping);
        let slow = Arc::clone(&slow_free_ms);
        std::thread::Builder::new()
            .name("weft-iod-reaper".into())
            .spawn(move || {
                for old in old_files {
                    // A failure leaves the blocks to the close (the file is unlinked).
                    let _ = free_blocks(&old, &slow);
                    drop(old);
                    left.fetch_sub(1, Ordering::SeqCst);
                }
            })?;
        let store = ObjectStore {
            root,
            open: Mutex::new(HashMap::new()),
            fsync_failed: AtomicBool::new(false),
            unsynced: Mutex::new(HashSet::new()),
            replaced: AtomicU64::new(0),
            reaper,
            reaping,
            slow_free_ms,
            room: Room {
                state: Mutex::new((None, 0, 0)),
            },
        };
        store.sweep_leftovers()?;
        Ok(store)
    }

    /// Removes the `<object>.fresh` files an emptying cut short by a crash left
    /// (`empty_by_replacing`): before the exchange one is an empty new file, after it
    /// the object's old contents; in neither case anything a client can reach. Big ones
    /// go to the reaper, so that a restart does not wait for their blocks. Runs before
    /// the store serves anything, so no emptying is under way.
    fn sweep_leftovers(&self) -> io::Result<()> {
        for k in 0..256 {
            for entry in std::fs::read_dir(self.root.join(format!("{k:02x}")))? {
                let path = entry?.path();
                if path.extension().is_none_or(|e| e != "fresh") {
                    continue;
                }
                let old = OpenOptions::new().write(true).open(&path).ok();
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                if let Some(old) = old.filter(|f| {
                    f.metadata()
                        .is_ok_and(|m| m.blocks().saturating_mul(512) >= REAP_MIN_BYTES)
                }) {
                    self.reap(old);
                }
            }
        }
        Ok(())
    }

    /// The test hook `WEFT_FAULT_SLOW_FREE_MS`: freeing the blocks of an object
    /// holding at least `REAP_MIN_BYTES` takes `pause` longer (at most
    /// `SLOW_FREE_MAX`), wherever it happens.
    pub fn set_slow_free(&self, pause: std::time::Duration) {
        let ms = pause.min(SLOW_FREE_MAX).as_millis() as u64;
        self.slow_free_ms.store(ms, Ordering::Relaxed);
    }

    /// Truncates the object of `inode`, open as `file`, to nothing: by replacement
    /// when it is big (`empty_by_replacing`), else in place.
    pub fn empty(&self, inode: InodeId, file: &File) -> Result<(), WireError> {
        let allocated = file
            .metadata()
            .map_err(|e| io_error(e, inode, "truncate"))?
            .blocks()
            .saturating_mul(512);
        let big = allocated >= REAP_MIN_BYTES;
        if !(big && self.empty_by_replacing(inode, file)?) {
            let freed = if big {
                free_blocks(file, &self.slow_free_ms)
            } else {
                file.set_len(0)
            };
            freed.map_err(|e| io_error(e, inode, "truncate"))?;
        }
        self.emptied(inode);
        Ok(())
    }

    /// Old object files whose blocks the reaper has not freed yet.
    pub fn reaping(&self) -> u64 {
        self.reaping.load(Ordering::SeqCst)
    }

    /// Hands an unlinked object file to the reaper, which frees its blocks; when its
    /// queue is full, frees them here.
    fn reap(&self, old: File) {
        self.reaping.fetch_add(1, Ordering::SeqCst);
        match self.reaper.try_send(old) {
            Ok(()) => {}
            Err(TrySendError::Full(old) | TrySendError::Disconnected(old)) => {
                self.reaping.fetch_sub(1, Ordering::SeqCst);
                let _ = free_blocks(&old, &self.slow_free_ms);
            }
        }
    }

    /// Empties the object of `inode`, open as `file` and holding at least
    /// `REAP_MIN_BYTES` (`empty` checks): a fresh empty file takes its name (an
    /// exchange of two names, then the old file's unlink) and the reaper frees the old
    /// one's blocks. Returns false on a file system without RENAME_EXCHANGE, leaving
    /// the caller to truncate in place. The caller keeps every write to the
    /// object out meanwhile (they are ordered against the truncate); reads already
    /// running finish on the old file, as if they had run before the truncate.
    fn empty_by_replacing(&self, inode: InodeId, file: &File) -> Result<bool, WireError> {
        let path = self.path_of(inode);
        let fresh_path = path.with_extension("fresh");
        let fresh = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&fresh_path)
            .map_err(|e| io_error(e, inode, "truncate (a fresh object)"))?;
        let old = file.try_clone().map_err(|e| io_error(e, inode, "truncate"))?;
        {
            let mut open = self.open.lock().unwrap();
            // An exchange, not a rename: an object removed meanwhile (ENOENT) is never
            // made again under its name.
            if let Err(e) = exchange(&fresh_path, &path) {
                let _ = std::fs::remove_file(&fresh_path);
                if e.raw_os_error() == Some(libc::EINVAL) {
                    // A file system without RENAME_EXCHANGE: truncated in place.
                    return Ok(false);
                }
                return Err(io_error(e, inode, "truncate (replacing the object)"));
            }
            self.replaced.fetch_add(1, Ordering::SeqCst);
            Self::cache(&mut open, inode, Arc::new(fresh));
        }
        // The old file now has the fresh one's name (gone already if the object was
        // removed meanwhile).
        if let Err(e) = std::fs::remove_file(&fresh_path).or_else(|e| match e.kind() {
            io::ErrorKind::NotFound => Ok(()),
            _ => Err(e),
        }) {
            eprintln!(
                "weftd io: removing {} (the old object of inode {inode}, emptied) failed: {e}",
                fresh_path.display()
            );
        }
        self.reap(old);
        Ok(true)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn path_of(&self, inode: InodeId) -> PathBuf {
        self.root
            .join(format!("{:02x}", inode.0 & 0xff))
            .join(format!("{:016x}", inode.0))
    }

    /// Creates an empty object, exclusively: an object already there under a new
    /// inode's number is `Exists`, never adopted, so that bytes planted under a
    /// future inode number cannot become a new file's content. The manager removes
    /// such an object and creates it again.
    pub fn create(&self, inode: InodeId) -> Result<(), WireError> {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.path_of(inode))
        {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(WireError::new(
                ErrorCode::Exists,
                format!("object exists: inode {inode} already has an object on this io server"),
            )),
            Err(e) => Err(io_error(e, inode, "create")),
        }
    }

    /// Sets the modification time of the object of `inode` when it exists (a missing
    /// object has no time to show; its file's time is the manager's).
    pub fn set_mtime(&self, inode: InodeId, mtime: weft_proto::Timespec) -> Result<(), WireError> {
        let when = if mtime.secs >= 0 {
            std::time::UNIX_EPOCH + std::time::Duration::new(mtime.secs as u64, mtime.nanos)
        } else {
            std::time::UNIX_EPOCH - std::time::Duration::from_secs(mtime.secs.unsigned_abs())
                + std::time::Duration::from_nanos(u64::from(mtime.nanos))
        };
        match OpenOptions::new().write(true).open(self.path_of(inode)) {
            Ok(file) => file
                .set_times(std::fs::FileTimes::new().set_modified(when))
                .map_err(|e| io_error(e, inode, "set the time of")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(e, inode, "set the time of")),
        }
    }

    /// Creates empty objects for fresh inode numbers, each exclusively: an object that
    /// exists already is never taken over (whose data would it hold?). On any failure the
    /// objects this call made are removed again and the error names the inode. Made
    /// durable with one `syncfs` of the data directory's file system before returning:
    /// the manager names these objects in its namespace only afterwards, so a power cut
    /// never leaves a file whose objects are gone.
    pub fn precreate(&self, inodes: &[InodeId]) -> Result<(), WireError> {
        let mut made = Vec::with_capacity(inodes.len());
        let mut failure = None;
        for &inode in inodes {
            let created = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(self.path_of(inode));
            match created {
                Ok(_) => made.push(inode),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    failure = Some(WireError::new(
                        ErrorCode::Exists,
                        format!(
                            "inode {inode} already has an object on this io server; it is not taken over"
                        ),
                    ));
                    break;
                }
                Err(e) => {
                    failure = Some(io_error(e, inode, "precreate"));
                    break;
                }
            }
        }
        if failure.is_none() {
            failure = self.sync_file_system().err();
        }
        match failure {
            None => Ok(()),
            Some(error) => {
                for inode in made {
                    let _ = std::fs::remove_file(self.path_of(inode));
                }
                Err(error)
            }
        }
    }

    /// Makes everything written to the data directory's file system durable (one
    /// `syncfs`: new objects and their directory entries).
    fn sync_file_system(&self) -> Result<(), WireError> {
        let fail = |e: io::Error| {
            self.fsync_failed.store(true, Ordering::SeqCst);
            WireError::new(
                ErrorCode::Io,
                format!("syncfs of {} failed: {e}", self.root.display()),
            )
        };
        let dir = File::open(&self.root)
            .map_err(|e| WireError::new(ErrorCode::Io, format!("opening {}: {e}", self.root.display())))?;
        crate::counters::COUNTERS.fsync();
        // SAFETY: syncfs takes a valid descriptor, which `dir` holds open.
        if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&dir)) } != 0 {
            return Err(fail(io::Error::last_os_error()));
        }
        Ok(())
    }

    pub fn remove(&self, inode: InodeId) -> Result<(), WireError> {
        let cached = self.open.lock().unwrap().remove(&inode);
        self.unsynced.lock().unwrap().remove(&inode);
        let path = self.path_of(inode);
        // A big object's blocks go to the reaper (see `REAP_MIN_BYTES`).
        let big = |m: &std::fs::Metadata| m.blocks().saturating_mul(512) >= REAP_MIN_BYTES;
        let old = match &cached {
            Some(file) => file.try_clone().ok(),
            None => std::fs::metadata(&path)
                .is_ok_and(|m| big(&m))
                .then(|| OpenOptions::new().write(true).open(&path).ok())
                .flatten(),
        }
        .filter(|f| f.metadata().is_ok_and(|m| big(&m)));
        drop(cached);
        // The old file of an emptying cut short by a crash (see `empty_by_replacing`).
        let _ = std::fs::remove_file(path.with_extension("fresh"));
        match std::fs::remove_file(&path) {
            Ok(()) => {
                if let Some(old) = old {
                    self.reap(old);
                }
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(e, inode, "remove")),
        }
    }

    /// Renames object file `from` to `to` (a migration's adopt and undo,
    /// `crate::migrate`), forgetting the cached handles of `inodes` as a replacement
    /// does (a `get` that opened the old file meanwhile does not cache it), then makes
    /// the rename durable. A missing `from` is `Ok(false)`.
    pub(crate) fn rename_file(&self, from: &Path, to: &Path, inodes: &[InodeId]) -> io::Result<bool> {
        {
            let mut open = self.open.lock().unwrap();
            match std::fs::rename(from, to) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(e),
            }
            self.replaced.fetch_add(1, Ordering::SeqCst);
            for inode in inodes {
                open.remove(inode);
            }
        }
        for dir in [from.parent(), to.parent()].into_iter().flatten() {
            File::open(dir)?.sync_all()?;
        }
        Ok(true)
    }

    /// An open handle; a missing object means the file was removed (or never created).
    pub fn get(&self, inode: InodeId) -> Result<Arc<File>, WireError> {
        loop {
            if let Some(f) = self.open.lock().unwrap().get(&inode) {
                return Ok(f.clone());
            }
            let seen = self.replaced.load(Ordering::SeqCst);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.path_of(inode))
                .map_err(|e| io_error(e, inode, "open"))?;
            let file = Arc::new(file);
            let mut open = self.open.lock().unwrap();
            // An object replaced since the open may be this one: its old file must not
            // stay cached (a later write would go to it).
            if self.replaced.load(Ordering::SeqCst) != seen {
                continue;
            }
            return Ok(Self::cache(&mut open, inode, file));
        }
    }

    fn cache(open: &mut HashMap<InodeId, Arc<File>>, inode: InodeId, file: Arc<File>) -> Arc<File> {
        if open.len() >= OPEN_OBJECTS_MAX {
            // Any victim will do: reopening costs one open(2).
            if let Some(victim) = open.keys().next().copied() {
                open.remove(&victim);
            }
        }
        open.insert(inode, file.clone());
        file
    }

    /// Whether a write of `bytes` may go on: refused after a failed fsync, and when it
    /// would leave less free than the io servers' reserve (`weft_proto::space`).
    pub fn check_writable(&self, bytes: u64) -> Result<(), WireError> {
        self.check_not_failed()?;
        self.room.take(&self.root, bytes)
    }

    /// Whether a change that needs no room (a truncate, a punched hole: how space comes
    /// back) may go on: refused only after a failed fsync.
    pub fn check_not_failed(&self) -> Result<(), WireError> {
        if self.fsync_failed.load(Ordering::SeqCst) {
            return Err(WireError::new(
                ErrorCode::Io,
                "an earlier fsync failed on this io server; it refuses writes until restarted",
            ));
        }
        Ok(())
    }

    /// The object was truncated to nothing: no byte of it can have been lost since.
    pub fn emptied(&self, inode: InodeId) {
        self.unsynced.lock().unwrap().remove(&inode);
    }

    /// Makes the object's data and its directory entry durable.
    pub fn sync(&self, inode: InodeId) -> Result<(), WireError> {
        if self.unsynced.lock().unwrap().contains(&inode) {
            return Err(WireError::new(
                ErrorCode::NoSpace,
                format!(
                    "an earlier sync of the object for inode {inode} failed for lack of space: \
                     bytes written before it may be lost (rewrite the file)"
                ),
            ));
        }
        let file = self.get(inode)?;
        let dir = self.path_of(inode).parent().map(File::open);
        crate::counters::COUNTERS.fsync();
        let result = file.sync_all().and_then(|()| match dir {
            Some(Ok(d)) => d.sync_all(),
            Some(Err(e)) => Err(e),
            None => Ok(()),
        });
        result.map_err(|e| {
            let error = io_error(e, inode, "fsync");
            if error.code == ErrorCode::NoSpace {
                // Only this object's unwritten pages are in doubt.
                self.unsynced.lock().unwrap().insert(inode);
            } else {
                self.fsync_failed.store(true, Ordering::SeqCst);
            }
            error
        })
    }
}

/// Swaps the files at `a` and `b` atomically (`renameat2(RENAME_EXCHANGE)`): both must
/// exist.
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two valid C strings, relative to no directory descriptor.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Maps a local I/O error to a wire error naming the object.
pub fn io_error(e: io::Error, inode: InodeId, what: &str) -> WireError {
    let code = match e.kind() {
        io::ErrorKind::NotFound => {
            return WireError::new(
                ErrorCode::Stale,
                format!("inode {inode} has no object on this io server (file removed?)"),
            )
        }
        io::ErrorKind::StorageFull => ErrorCode::NoSpace,
        _ if e.raw_os_error() == Some(libc::ENOSPC) => ErrorCode::NoSpace,
        _ if e.raw_os_error() == Some(libc::EDQUOT) => ErrorCode::NoSpace,
        _ if e.raw_os_error() == Some(libc::EFBIG) => ErrorCode::TooLarge,
        _ if e.raw_os_error() == Some(libc::EOPNOTSUPP) => ErrorCode::Unsupported,
        _ => ErrorCode::Io,
    };
    WireError::new(code, format!("{what} of object for inode {inode} failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;

    /// An object of `inode` holding `bytes` allocated bytes (fallocated), open.
    fn allocated(store: &ObjectStore, inode: InodeId, bytes: u64) -> Arc<File> {
        store.create(inode).unwrap();
        let file = store.get(inode).unwrap();
        // SAFETY: a valid descriptor; allocates without writing.
        assert_eq!(
            unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, bytes as i64) },
            0
        );
        file
    }

    /// Waits until the reaper has nothing left.
    fn reaped(store: &ObjectStore) {
        let started = std::time::Instant::now();
        while store.reaping() > 0 {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(60),
                "never reaped"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_big_object_is_emptied_by_replacement_and_its_old_file_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        let inode = InodeId(7);
        let before = allocated(&store, inode, REAP_MIN_BYTES + 4096);
        let path = store.path_of(inode);
        let old_ino = std::fs::metadata(&path).unwrap().ino();
        store.empty(inode, &before).unwrap();
        let now = std::fs::metadata(&path).unwrap();
        assert_eq!(now.len(), 0);
        assert_ne!(now.ino(), old_ino, "emptied in place, not replaced");
        assert!(!path.with_extension("fresh").exists(), "the old file kept a name");
        // What the store hands out now is the object under its name.
        let mut after = store.get(inode).unwrap().as_ref().try_clone().unwrap();
        after.write_all(b"new").unwrap();
        let mut back = String::new();
        File::open(&path).unwrap().read_to_string(&mut back).unwrap();
        assert_eq!(back, "new");
        // The reaper freed the old file's blocks.
        reaped(&store);
        assert_eq!(
            before.metadata().unwrap().blocks(),
            0,
            "the old file's blocks were not freed"
        );
    }

    #[test]
    fn leftovers_of_an_emptying_cut_short_are_removed_when_the_store_opens() {
        let dir = tempfile::tempdir().unwrap();
        let (inode, big_old) = (InodeId(0x1234), InodeId(0x1235));
        {
            let store = ObjectStore::open(dir.path()).unwrap();
            allocated(&store, inode, 4096)
                .as_ref()
                .write_all_at(b"kept", 0)
                .unwrap();
            // A crash before the exchange leaves an empty new file; after it, the
            // object's old contents (here big, so the reaper frees them).
            File::create(store.path_of(inode).with_extension("fresh")).unwrap();
            let old = allocated(&store, big_old, REAP_MIN_BYTES);
            drop(old);
            std::fs::rename(
                store.path_of(big_old),
                store.path_of(big_old).with_extension("fresh"),
            )
            .unwrap();
        }
        let store = ObjectStore::open(dir.path()).unwrap();
        for leftover in [inode, big_old] {
            let fresh = store.path_of(leftover).with_extension("fresh");
            assert!(!fresh.exists(), "{} survived the restart", fresh.display());
        }
        reaped(&store);
        let mut back = Vec::new();
        File::open(store.path_of(inode))
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(&back[..4], b"kept", "the object itself was touched");
    }

    #[test]
    fn a_small_object_is_emptied_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        let inode = InodeId(8);
        let file = allocated(&store, inode, 1 << 20);
        let path = store.path_of(inode);
        let ino = std::fs::metadata(&path).unwrap().ino();
        store.empty(inode, &file).unwrap();
        let now = std::fs::metadata(&path).unwrap();
        assert_eq!((now.len(), now.ino()), (0, ino));
    }

    #[test]
    fn an_object_removed_meanwhile_is_not_made_again_by_an_emptying() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        let inode = InodeId(9);
        let file = allocated(&store, inode, REAP_MIN_BYTES);
        std::fs::remove_file(store.path_of(inode)).unwrap();
        let error = store.empty(inode, &file).unwrap_err();
        assert_eq!(error.code, ErrorCode::Stale, "{error:?}");
        assert!(!store.path_of(inode).exists(), "the removed object came back");
        assert!(!store.path_of(inode).with_extension("fresh").exists());
    }

    #[test]
    fn removing_a_big_object_leaves_its_blocks_to_the_reaper() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        let inode = InodeId(10);
        let file = allocated(&store, inode, REAP_MIN_BYTES);
        let watcher = file.as_ref().try_clone().unwrap();
        drop(file);
        store.set_slow_free(std::time::Duration::from_millis(300));
        store.remove(inode).unwrap();
        assert!(!store.path_of(inode).exists());
        reaped(&store);
        assert_eq!(watcher.metadata().unwrap().blocks(), 0);
    }
}

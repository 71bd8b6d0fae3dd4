//! Local object files: naming, a bounded cache of open handles, and I/O errors mapped
//! to wire error codes.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use weft_layout::InodeId;
use weft_proto::{ErrorCode, WireError};

/// Most object files kept open at once.
pub const OPEN_OBJECTS_MAX: usize = 512;

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
}

impl ObjectStore {
    pub fn open(data_dir: &Path) -> io::Result<ObjectStore> {
        let root = data_dir.join("objects");
        for k in 0..256 {
            std::fs::create_dir_all(root.join(format!("{k:02x}")))?;
        }
        Ok(ObjectStore {
            root,
            open: Mutex::new(HashMap::new()),
            fsync_failed: AtomicBool::new(false),
            unsynced: Mutex::new(HashSet::new()),
        })
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
        self.open.lock().unwrap().remove(&inode);
        self.unsynced.lock().unwrap().remove(&inode);
        match std::fs::remove_file(self.path_of(inode)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(e, inode, "remove")),
        }
    }

    /// An open handle; a missing object means the file was removed (or never created).
    pub fn get(&self, inode: InodeId) -> Result<Arc<File>, WireError> {
        if let Some(f) = self.open.lock().unwrap().get(&inode) {
            return Ok(f.clone());
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path_of(inode))
            .map_err(|e| io_error(e, inode, "open"))?;
        let file = Arc::new(file);
        let mut open = self.open.lock().unwrap();
        if open.len() >= OPEN_OBJECTS_MAX {
            // Any victim will do: reopening costs one open(2).
            if let Some(victim) = open.keys().next().copied() {
                open.remove(&victim);
            }
        }
        open.insert(inode, file.clone());
        Ok(file)
    }

    pub fn check_writable(&self) -> Result<(), WireError> {
        if self.fsync_failed.load(Ordering::SeqCst) {
            Err(WireError::new(
                ErrorCode::Io,
                "an earlier fsync failed on this io server; it refuses writes until restarted",
            ))
        } else {
            Ok(())
        }
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

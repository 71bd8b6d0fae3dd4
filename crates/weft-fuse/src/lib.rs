//! Weft through FUSE: `weft mount` makes a cluster a directory that unmodified programs
//! (ls, cp, tar, dd, MPI-IO through ROMIO or OMPIO) use like any other. No kernel
//! module: the kernel's FUSE driver passes requests to this adapter, which serves them
//! with the native client.
//!
//! Design choices, each with its reason:
//! - Inode numbers are Weft's own (the root is 1 in both, numbers are never reused), so
//!   the adapter keeps no inode table and `forget` has nothing to do.
//! - Every request acts as its caller: the adapter sends the caller's uid, gid and
//!   supplementary groups (from /proc), and the metadata manager checks permissions.
//!   The mount also uses `default_permissions`: FUSE tells the adapter only uid and
//!   gid, while the kernel knows the caller's full credentials (groups, capabilities)
//!   and checks them at every open, which is the only gate in front of the data since
//!   io servers check nothing. A root mount allows other users (`allow_other`).
//! - Data is written through the kernel's page cache (no FUSE writeback cache: under it
//!   the kernel trusts its own file size over the io servers', so another client's
//!   appends would go unseen). Writes of 128 KiB or more are on their io servers when
//!   acknowledged; smaller ones are kept by the daemon and sent together, one list
//!   write per io server, by close, fsync, a read, truncate, append or open of the file
//!   in this mount, or past a per-file or per-mount bound (see `behind`), so a random
//!   4 KiB writer pays one kernel round trip per call rather than two. A size asked
//!   right after close is right everywhere; before it, this mount's answers count the
//!   kept bytes. The kernel caches pages while a file is open; an open keeps them only
//!   if the file's data provably did not change since the previous open here (its
//!   objects' change stamps on the io servers, `weft_client::DataStamp`, are the same
//!   and settled), else it starts with an empty page cache for the file. Attributes and
//!   names are cached for `attr_ttl` (1 s by default). A run of lookups in one directory
//!   is answered from a listing of it that is younger than `attr_ttl`, never older
//!   answers than the kernel's own cache would give (see `recent`). Mode, owner and time
//!   changes of a file this mount created and holds open are sent together at its close,
//!   and its extended attributes (none) are answered here until then (see `deferred`).
//!   A directory's attributes after a create (mkdir, symlink, mknod, link) in it come
//!   with the manager's answer to it, and answer the kernel's next GETATTR of the
//!   directory within what remains of `attr_ttl` from the operation's send (see
//!   `parents`).
//! - Close-to-open consistency across clients: an open checks with the manager, in one
//!   round trip, that the names the kernel found the file by still lead to it, and reads
//!   its attributes and size afresh (dropping the kernel's cached ones if they changed).
//!   A name another client removed, renamed or replaced is answered ESTALE, on which the
//!   kernel looks the path up again and retries: the open finds ENOENT or the new file,
//!   never the old one (see `names`). When the open's own walk ended in a lookup of
//!   the file's name, checked the same way from the root by the same thread a moment
//!   before, the open goes by that lookup instead of checking again (see `walked`).
//! - O_APPEND writes go to the file's true end, whoever wrote last: the daemon appends
//!   under the file's append lock (see `weft_client::File::append`) whatever offset the
//!   kernel chose from its cached size, and such files bypass the page cache.
//! - One `weft_client::File` per open file: reads and writes go to the io servers
//!   (small writes a little later, see above) with no metadata round trip; requests
//!   are up to 4 MiB and several FUSE worker threads serve them, so different files
//!   (and readahead) move in parallel.
//! - Layouts are the extended attribute `user.weft.layout`; other `user.*`,
//!   `trusted.*` and `security.*` attributes are stored by the manager (not
//!   `security.capability`). Hard links, FIFOs, device nodes
//!   and sockets are namespace objects; names are bytes (need not be UTF-8). The
//!   read-only `user.weft.cluster` (every inode; not listed) says how the mount
//!   reaches its cluster, for MPI-IO (weft-mpiio) to serve paths in the mount natively.
//! - Setuid/setgid: the kernel leaves dropping them to the file system
//!   (`FUSE_HANDLE_KILLPRIV_V2`); a write by an unprivileged process asks the manager to
//!   drop them, as truncate and chown do themselves.
//!
//! - A file unlinked or replaced while open in the mount is kept by the manager,
//!   nameless (link count 0), for this mount's session until its last descriptor closes,
//!   so its descriptors keep working as POSIX wants (see `kept`).
//! - A background mount logs by default (see `log`): errno cannot say which server
//!   failed or why, so the daemon's messages go to a bounded file (8 MiB, one rotation)
//!   in the XDG state directory, or /var/log/weft for root, whose path `weft mount`
//!   prints.
//!
//! Known differences from a local file system: a file removed by another client (or
//! mount) is gone for descriptors open elsewhere once its data is purged (reads fail
//! with ESTALE), as on PVFS; `stat` may show attributes up to `attr_ttl` old after
//! another client changed them (opens never do); `fcntl` and `flock` locks are
//! cluster-wide, kept by the manager, and reclaimed after its restart during its grace,
//! which holds other lock requests back until it ends (or until every mount that held
//! locks has reclaimed them and said so); a lock that could not be
//! reclaimed fails its holder's I/O on the file with EIO (see `locks`); rename with
//! RENAME_NOREPLACE checks and renames in two steps.

mod attr;
mod behind;
mod buffer;
mod creds;
mod deferred;
mod dir;
mod floor;
mod fs;
mod kept;
mod locks;
pub mod log;
mod mount;
mod names;
mod parents;
mod prefetch;
mod recent;
mod walked;
mod xattr;

pub use floor::{mount_floor, FillFn, FloorMount, FLOOR_INODES_MAX};
pub use fs::{CacheOptions, REQUEST_BYTES_MAX};
pub use log::MountLog;
pub use mount::{
    is_weft_mount, mount_background, mount_entry, mount_foreground, unmount, MountEntry, FS_NAME,
    THREADS_DEFAULT, THREADS_MAX,
};
pub use xattr::{CLUSTER_XATTR, LAYOUT_XATTR};

use std::path::PathBuf;
use std::time::Duration;
use weft_client::ClientError;

/// Readahead of a mount: four 4 MiB requests in flight for a sequential reader.
pub const READAHEAD_KIB_DEFAULT: u32 = 16384;

/// What `weft mount` was asked for.
#[derive(Debug, Clone)]
pub struct MountOptions {
    pub mountpoint: PathBuf,
    /// The metadata manager (`host:port`); `None` finds the cluster as every client
    /// does ($WEFT_META, else $WEFT_HOME or ~/.weft).
    pub meta_addr: Option<String>,
    /// FUSE worker threads.
    pub threads: usize,
    /// How long the kernel caches attributes and names.
    pub attr_ttl: Duration,
    /// Keep file data cached across opens (gives up close-to-open consistency for data
    /// another client changes).
    pub keep_cache: bool,
    /// Where a background daemon writes its messages (a foreground mount writes them
    /// to its standard error).
    pub log: MountLog,
    /// How far the kernel reads ahead of a sequential reader, KiB (root only).
    pub readahead_kib: u32,
    /// How long after a lookup checked for an open the same thread's open of the file
    /// may go by it (see `walked`; at most `attr_ttl`, zero: never).
    pub walk_window: Duration,
}

impl MountOptions {
    pub fn new(mountpoint: impl Into<PathBuf>) -> MountOptions {
        MountOptions {
            mountpoint: mountpoint.into(),
            meta_addr: None,
            threads: 8,
            attr_ttl: Duration::from_secs(1),
            keep_cache: false,
            log: MountLog::Default,
            readahead_kib: READAHEAD_KIB_DEFAULT,
            walk_window: walked::WINDOW,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MountError {
    #[error("cannot reach the cluster: {0}")]
    Cluster(ClientError),
    #[error("{}: {message}", path.display())]
    Mountpoint { path: PathBuf, message: String },
    #[error("cannot mount {}: {source}", path.display())]
    Mount { path: PathBuf, source: std::io::Error },
    #[error("cannot unmount {}: {message}", path.display())]
    Unmount { path: PathBuf, message: String },
    /// The background daemon's own report of why it did not mount.
    #[error("{0}")]
    Daemon(String),
    #[error("{0}")]
    Io(std::io::Error),
}

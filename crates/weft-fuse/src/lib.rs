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
//!   if the file's data provably did not change since the previous open here (the
//!   same `weft_client::DataStamp`: the manager's vouch that no write capability was
//!   live or issued in between, or else its objects' change stamps on the io servers,
//!   the same and settled), or if this mount made the file and the manager still
//!   vouches for it at the stamp of the create's own write grant (no other client wrote
//!   it: the pages of this mount's writes are the file), else it starts with an empty
//!   page cache for the file. Attributes and
//!   names are cached for `attr_ttl` (1 s by default), or, for what only the manager
//!   changes, for a lease (30 s) while the manager's change feed tells the mount what
//!   other clients change (see `leases`). A run of lookups in one directory
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
//!   The read-only `user.weft.handoff` (regular files; not listed) is what libweft_posix
//!   opens a file from natively: answered only to a caller the kernel let read the file
//!   (the `user.*` read check, `default_permissions`) and whose uid, gid and groups may
//!   read it, after the checks an open makes (close-to-open): the attributes with the
//!   size and a read capability of that inode only, never write access; for a file of
//!   at most 56 KiB also its bytes, read after those checks (kept by data stamp for the
//!   next handoff that finds the same one, `handed.rs`).
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
//!
//! # Code map
//!
//! The FUSE adapter behind `weft mount` (fuser, pure-Rust mount path). Serves kernel
//! requests with the native client (`fs/`: the mount's state in `mod.rs`, the kernel's
//! requests in `filesystem.rs`, the work behind them in `calls.rs`, lock waits in
//! `locking.rs`; `open_file.rs` one open, `kernel.rs` the limits asked for at INIT), one
//! `File` per open file; Weft inode numbers are the
//! FUSE node ids; each request acts with the caller's credentials (one client per
//! credential; `default_permissions`); write-through page cache with close-to-open caching
//! (no FUSE writeback cache, under which the kernel would trust its own file size over
//! other clients'), small writes (< 128 KiB) kept by the daemon and sent as one list write
//! per io server at close, fsync, read, truncate, append or open of the file, or past 8 MiB
//! or 4,096 extents per file or 256 MiB per mount (`behind.rs`; a read, append or other
//! send of a file waits for a send of it already under way, so none goes to the io servers
//! ahead of the kept bytes; the size and the blocks the mount reports count the kept
//! bytes, since a file with a size and no blocks is "all hole" to `tar --sparse`); byte-range and
//! `flock` locks are the manager's, cluster-wide (`locks.rs`, below); read and write requests
//! of up to 4 MiB (a root mount raises Linux's `fs.fuse.max_pages_limit` to 1024 pages if
//! lower; older kernels keep 1 MiB) with a 16 MiB read-ahead, each worker answering reads
//! into a 4 MiB buffer of the process's read pool (weft-rpc `shm::Pool`, one buffer per
//! worker, leased per read), where the io servers place the reply's bytes themselves
//! (`ShmScatter`), so the daemon copies nothing before the reply's write to /dev/fuse;
//! with no pool (`WEFT_READ_POOL=0`, `WEFT_TRANSPORT=unix|tcp`, a server without it) or
//! every buffer busy, from the worker's own 4 MiB buffer of transparent huge pages where
//! the kernel allows them, into which the connections copy (`buffer.rs`: the reply's write
//! to /dev/fuse pins the buffer page by page, and with 4 KiB pages that pinning was 15% of
//! a cold read's daemon time; the pool is shmem, 4 KiB pages where shmem huge pages are
//! off, as on the development machine); layouts
//! as the `user.weft.layout` extended attribute, other `user.*`/`trusted.*`/`security.*`
//! attributes stored by the manager (`security.*` set by root only, read and listed by
//! anyone, as on ext4; not `security.capability`, which a write by another user would have
//! to drop); hard links, FIFOs, devices and sockets; fallocate; the kernel
//! leaves setuid/setgid dropping to the mount (`FUSE_HANDLE_KILLPRIV_V2`); mounted as type
//! `fuse.weft` (by mount(2) as root, by fusermount3 otherwise); files removed while open are kept by the
//! manager, nameless, for the mount's session until their last close (`kept.rs`).
//! `fcntl` and `flock` locks are held cluster-wide by the manager (`locks.rs`; the kernel
//! sends them with `FUSE_POSIX_LOCKS` and `FUSE_FLOCK_LOCKS`, `flock` as a whole-file lock
//! of the open file, so, as on NFS, the two kinds exclude each other): a granted lock drops
//! the kernel's pages and attributes of the file and its cached names beside it (SQLite
//! looks for its journal there right after locking), kept writes are sent before an
//! unlock, a waiting F_SETLKW asks again with a growing pause (2-100 ms) on a thread of
//! its own (at most 256) and ends with EINTR once its process is gone or has SIGKILL pending (the kernel keeps a killed waiter until the answer) or its thread has a caught, unblocked signal pending (read from /proc/TID/status at each try: fuser answers FUSE_INTERRUPT with ENOSYS, so the kernel cannot tell the daemon), the owner's close
//! (flush) or the open file's release drops its locks, and the session is renewed while
//! any are held. A read-only open made while the mount holds no lock gets FOPEN_NOFLUSH
//! (a flush would send nothing for it; without it a close costs no round trip): the
//! release of such an open drops the locks taken through it (`OpenFile::lockers`), a
//! moment after the close returns (the kernel sends releases without waiting, as it
//! does for `flock` locks), and a lock taken through another descriptor after such an
//! open is not dropped by that open's close but by the closes that flush. The mount keeps a copy of its own locks (a `LockTable`) and, while it
//! holds any, and for 60 s (twice `LOCK_RECORD_IDLE`) after its last, asks the manager's
//! incarnation every second (`LockSession`); a new one (the manager restarted) makes it
//! send every lock again as a reclaim (with the same session: its id is the mount's), then
//! `LockReclaimComplete` (still holding the order lock, so no lock of its own is granted
//! meanwhile). At unmount, after dropping its locks, a mount that took any sends
//! `LockSessionEnd`. A reclaim refused is a lost lock: logged (`LOST LOCK`), and
//! every read, write, fsync and close through descriptors of the file open at the loss
//! fails with EIO, as on Linux NFS; I/O on a locked file whose locks went unconfirmed for
//! 3 s (the daemon was stopped, the manager silent) first asks the manager itself,
//! waiting for a renewal under way. Lock requests and F_GETLK that the grace holds back
//! are asked again on a waiting thread until answered. Every
//! open revalidates (`names.rs`): the mount remembers the directory and name the kernel
//! knows each inode by, and an open checks that path with the manager and reads the size
//! afresh; a stale name is answered ESTALE, on which the kernel looks the path up again and
//! retries once (that retry is trusted). An open whose own path walk ended in a lookup
//! makes no second check (`walked.rs`): the lookup of a name whose inode the mount knew is
//! sent as a `Revalidate` of the parent's path plus that name (same cost as a plain lookup,
//! the size and data stamp asked of the io servers meanwhile), and the same thread's open
//! of that inode within 5 ms of its answer goes by it, as NFS trusts its open's lookup: it
//! was made after the open began, so it is as fresh as a second check. A lookup for an
//! earlier call (a `stat` whose entry the kernel still holds), another thread's, one
//! answered from a listing, one whose check failed (a plain lookup then answers) and any
//! open of a file open here are not trusted. mdtest's read phase went from two manager
//! requests and eight io-server requests per open to one and four. O_APPEND writes append at the file's true end
//! (`File::append`) and bypass the page cache. Directory streams (`dir.rs`) fetch
//! readdir-plus pages (1,024 entries), so the kernel's readdirplus costs no per-entry
//! request to the manager, and the sizes of a page's files are asked of the io servers once
//! per page (one request per server, `DirStream::size_page`), not per kernel call (~25
//! entries). A lookup or getattr of a file the mount knows
//! asks the io servers for its size while the manager answers (`Client::lookup_sized`,
//! `getattr_sized`: the size is kept only if the manager confirms the same inode and
//! layout), one round trip's wait instead of two. A directory that sends 16 found names
//! to the manager within a second is listed instead (`recent.rs`: readdir-plus pages plus
//! one size request per io server per page, up to 16,384 entries), and its next lookups
//! are answered from that listing while it is younger than three quarters of the attribute
//! timeout, the kernel told to keep each answer only for what remains of the timeout, so no
//! answer is older than one the manager gave and the kernel cached; a name the listing
//! lacks, a thread retrying after ESTALE and an inode open here always ask the manager, and
//! the mount's own changes drop what they change (and discard a listing fetched across
//! them); a directory this mount changed within the last second is not listed (an unlink
//! or create phase would throw every listing away) until 64 found names went to the manager
//! with no change here in between (its changes stopped: mdtest's stat phase right after its
//! create phase went name by name before); opening for writing drops nothing, the first
//! write, truncate or allocation through the descriptor does, and the close of a descriptor
//! that did none of those (open only for reading, or O_RDWR and never written) changes
//! nothing and drops nothing (readers closing file after file threw away every listing
//! being fetched; mdtest's read phase opens O_RDWR, and its every open and close did). mdtest's stat phase, which comes after the timeout, costs a few requests per
//! 1,024 files instead of five per file. Mode, owner and time changes of a file the mount
//! made (its create made the name, with or without O_EXCL) and holds open (tar's futimens, fchown, fchmod after each file),
//! by root or the owner where the outcome is known without the manager, are kept, merged
//! in the manager's order (owner, mode, times) and sent as one setattr at close, fsync,
//! release or another open of the file (`deferred.rs`); every attribute the mount reports
//! is overlaid with them meanwhile. Such a file has no extended attributes (the manager
//! gives a new file none), so until its first close, another open of it here, or a
//! setxattr/removexattr of it here, the mount answers getxattr itself (the kernel's
//! `security.capability` questions at the first write and at each chown). At such a file's first
//! kept write, one background thread asks the manager for its write capability
//! (`prefetch.rs`, `File::prepare_writing`), so that the close sends its writes without
//! that round trip first. A create without O_EXCL (the kernel asks only after finding the name
//! missing) is made exclusively first, so a new file needs neither a size request to every io
//! server nor, for O_TRUNC (a shell's `>`), a truncate (a durable manager commit and a request per
//! io server); only if another client made the name meanwhile is it opened as it is. Every create, mkdir, symlink, mknod and link asks for the
//! directory's attributes with it (`WithParent`, `Client::create_in_made` and the other
//! `*_made` calls); the kernel drops its cached attributes of the directory at each such
//! operation and asks again (GETATTR, for `default_permissions`) at the next permission
//! check there, and that GETATTR is answered once with them (`parents.rs`), the kernel told
//! to keep them for what remains of the attribute timeout counted from when the operation
//! was sent: no answer is older than one a GETATTR sent with the operation would have
//! given, and `tar x` makes one manager request less per entry. An answer is kept only if
//! no other change of that directory by this mount began or ended while the operation was
//! on its way, any later change of it here drops it, and a rename drops them all and
//! keeps none while in flight (it changes a moved directory's `..` and times too).
//! Every inode answers the read-only
//! `user.weft.cluster` attribute (`meta=HOST:PORT`, `key=PATH`: how the mount reaches its
//! cluster), by which weft-mpiio serves MPI-IO on paths in the mount natively. Invariant: the daemon caches no data
//! for reading; a write it acknowledged is on its io servers, or kept in `behind.rs`,
//! counted in every size the mount reports, and sent before anything in the mount reads,
//! opens, truncates or appends to the file and before its close or fsync returns (a
//! failure to send is that call's error, as on NFS). Kept pages: the open's check
//! (`Client::revalidate_stamped`) gives the file's `DataStamp`, the manager's vouch when
//! it gives one (then the check is one request to the manager, which also grants the read
//! capability the open's first read needs: `VouchedReadable`), else the objects'
//! stamps from the size query (`ObjStamp`); the mount remembers it at each open and returns
//! FOPEN_KEEP_CACHE only when the new one equals it (and the manager's attributes are as
//! the kernel was told), else the kernel drops the file's pages at the open. A stamp
//! counts only once the open that found it has completed (its first read, flush or release came:
//! the kernel drops the pages as an open without the flag completes, after the daemon's
//! answer), so a concurrent open cannot keep pages older than the stamp. A file made
//! here by an exclusive create without `O_APPEND` or `O_DIRECT` starts as `Seen::Written`
//! with the stamp of the grant that came with the create (`CreateStamped`,
//! `Made::written_under`): its writes went through the kernel's pages (one the daemon
//! refused is left not up to date by the kernel; a kept write whose later send failed
//! counts in `WriteBehind::failures`, which must not have moved), so an open that finds
//! the manager vouching at that stamp keeps them although the attributes changed (by
//! those writes); any other open of the file here replaces the record. Invariant:
//! every write, truncate or allocation of any object, by any client (native, MPI-IO, C ABI,
//! another mount, this one), needs a write capability, whose grant moves the vouch, and
//! changes that object's ctime on its server, so a kept page was read after the last
//! change; object stamps are withheld while unsettled, and files in the cache tier (whose
//! managers hold data the objects do not) get neither, so those opens drop pages.
//! A read-only handle takes the size its open checked as the file's end for the attribute
//! timeout (the kernel reads no further meanwhile), so a read that reaches it asks no io
//! server for the size; any write, truncate or allocation through this mount since the
//! open's check ends that (`OpenFile::sized_at`).
//! `log.rs`: the background daemon's log. Its standard error is a pipe to a logger
//! process it forks first (while it has one thread; a process, so that a daemon that
//! aborts still has its last words written), which stamps each line with the UTC time
//! (lines cut at 16 KiB) and writes them to a `RotatingLog`: at 8 MiB the file becomes
//! `FILE.1` (the older `.1` replaced) and starts again. The default file is
//! `mount-NAME.log` (NAME the mountpoint, slashes as dashes, plus a hash of the path when
//! that would not be one to one: `/a-b` and `/a/b`) in `$XDG_STATE_HOME/weft`,
//! else `/var/log/weft` for root, else `~/.local/state/weft` (files 0600, directories
//! 0700); `--log FILE` is bounded the same way, `--no-log` discards. Invariant: a mount's
//! log takes at most 2 x 8 MiB.

mod attr;
mod behind;
mod buffer;
mod creds;
mod deferred;
mod dir;
mod floor;
mod fs;
mod handed;
mod kept;
mod kernel;
mod leases;
mod locks;
pub mod log;
mod mount;
mod names;
mod open_file;
mod parents;
mod prefetch;
mod recent;
mod walked;
mod watchdog;
mod xattr;

pub use floor::{mount_floor, FillFn, FloorMount, FLOOR_INODES_MAX};
pub use fs::CacheOptions;
pub use kernel::REQUEST_BYTES_MAX;
pub use leases::LEASE_DEFAULT;
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
    /// How long the kernel keeps names and attributes that only the manager changes
    /// while the mount hears the manager's change feed (see `leases`; not above
    /// `attr_ttl`: no leases).
    pub lease: Duration,
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
            lease: leases::LEASE_DEFAULT,
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

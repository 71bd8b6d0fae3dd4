//! Value types shared by messages: credentials, attributes, layouts, directory entries.

use crate::codec::{DecodeError, Reader, Wire, Writer};
use crate::name::Name;
use weft_layout::stripe::{STRIPE_COUNT_MAX, STRIPE_SIZE_BYTES_MAX, STRIPE_SIZE_BYTES_MIN};
use weft_layout::{CacheMapping, CacheMode, InodeId, Layout, LayoutRequest, Redundancy, ServerId};
use weft_wire_derive::Wire;

/// Most supplementary groups carried in a credential.
pub const GROUPS_MAX: usize = 64;

/// Who is asking: checked against mode bits on every metadata operation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Wire)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    #[wire(max = GROUPS_MAX, what = "group list")]
    pub groups: Vec<u32>,
}

impl Cred {
    pub fn root() -> Cred {
        Cred::default()
    }
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether this credential may do `want` (a mask of read 4, write 2, execute 1) on
    /// an inode of `kind` with permission bits `mode` owned by `uid`:`gid`: POSIX
    /// owner/group/other bits. Root may read and write anything and search any
    /// directory, but executes a file only if some execute bit is set (as Linux does).
    pub fn permits(&self, kind: FileKind, mode: u32, uid: u32, gid: u32, want: u32) -> bool {
        if self.uid == 0 {
            return want & 1 == 0 || kind == FileKind::Directory || mode & 0o111 != 0;
        }
        let bits = if self.uid == uid {
            mode >> 6
        } else if self.in_group(gid) {
            mode >> 3
        } else {
            mode
        } & 0o7;
        bits & want == want
    }
}

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash, Wire)]
#[wire(check = Timespec::check)]
pub struct Timespec {
    pub secs: i64,
    pub nanos: u32,
}

impl Timespec {
    /// The decoder's check: nanoseconds within a second.
    fn check(&self) -> Result<(), DecodeError> {
        if self.nanos >= 1_000_000_000 {
            return Err(DecodeError::Invalid {
                what: "nanoseconds",
                value: self.nanos as u64,
            });
        }
        Ok(())
    }

    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            secs: d.as_secs() as i64,
            nanos: d.subsec_nanos(),
        }
    }
}

/// What an inode is. FIFOs, devices and sockets are namespace objects only: their data
/// (if any) never reaches Weft's io servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Wire)]
#[wire(tag_what = "file kind")]
pub enum FileKind {
    File = 1,
    Directory = 2,
    Symlink = 3,
    Fifo = 4,
    CharDevice = 5,
    BlockDevice = 6,
    Socket = 7,
}

impl FileKind {
    pub fn from_code(code: u8) -> Option<FileKind> {
        Some(match code {
            1 => FileKind::File,
            2 => FileKind::Directory,
            3 => FileKind::Symlink,
            4 => FileKind::Fifo,
            5 => FileKind::CharDevice,
            6 => FileKind::BlockDevice,
            7 => FileKind::Socket,
            _ => return None,
        })
    }

    /// FIFOs, devices and sockets: made by mknod, with no data on io servers.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            FileKind::Fifo | FileKind::CharDevice | FileKind::BlockDevice | FileKind::Socket
        )
    }
}

impl Wire for CacheMode {
    fn encode(&self, w: &mut Writer) {
        w.u8(*self as u8)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let code = r.u8()?;
        CacheMode::from_code(code).ok_or(DecodeError::Invalid {
            what: "cache mode",
            value: code as u64,
        })
    }
}

impl Wire for CacheMapping {
    fn encode(&self, w: &mut Writer) {
        w.u8(*self as u8)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let code = r.u8()?;
        CacheMapping::from_code(code).ok_or(DecodeError::Invalid {
            what: "cache mapping",
            value: code as u64,
        })
    }
}

impl Wire for InodeId {
    fn encode(&self, w: &mut Writer) {
        w.u64(self.0)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(InodeId(r.u64()?))
    }
}

impl Wire for ServerId {
    fn encode(&self, w: &mut Writer) {
        w.u32(self.0)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(ServerId(r.u32()?))
    }
}

/// Set in a layout's encoded stripe size (never above 2^30) when its replication
/// follows: a plain layout encodes as before redundancy existed, so the manager's
/// stored records and orphans written then decode unchanged.
const LAYOUT_REPLICATED_FLAG: u64 = 1 << 63;

/// Set in a layout request's first option tag when its redundancy follows (same
/// reason: directory defaults stored before redundancy decode unchanged).
const REQUEST_REDUNDANCY_FLAG: u8 = 2;

impl Wire for Layout {
    fn encode(&self, w: &mut Writer) {
        let replicated = self.replication != Default::default();
        w.u64(self.stripe_size_bytes | if replicated { LAYOUT_REPLICATED_FLAG } else { 0 });
        w.seq(&self.servers);
        if replicated {
            w.seq(&self.replication.copies);
            w.seq(&self.replication.stale);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let stripe = r.u64()?;
        let servers = r.seq()?;
        let replication = match stripe & LAYOUT_REPLICATED_FLAG {
            0 => Default::default(),
            _ => weft_layout::Replication {
                copies: r.seq()?,
                stale: r.seq()?,
            },
        };
        let layout = Layout {
            stripe_size_bytes: stripe & !LAYOUT_REPLICATED_FLAG,
            servers,
            replication,
        };
        layout.validate().map_err(|e| DecodeError::View(e.to_string()))?;
        Ok(layout)
    }
}

impl Wire for LayoutRequest {
    fn encode(&self, w: &mut Writer) {
        let flag = match self.redundancy {
            Some(_) => REQUEST_REDUNDANCY_FLAG,
            None => 0,
        };
        match self.stripe_size_bytes {
            None => w.u8(flag),
            Some(s) => {
                w.u8(flag | 1);
                w.u64(s);
            }
        }
        w.opt(&self.stripe_count);
        w.opt(&self.first_server);
        w.opt(&self.cache);
        if let Some(Redundancy::Replicas(n)) = self.redundancy {
            w.u8(n);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let tag = r.u8()?;
        if tag & !(REQUEST_REDUNDANCY_FLAG | 1) != 0 {
            return Err(DecodeError::Invalid {
                what: "option tag",
                value: tag as u64,
            });
        }
        let mut request = LayoutRequest {
            stripe_size_bytes: match tag & 1 {
                0 => None,
                _ => Some(r.u64()?),
            },
            stripe_count: r.opt()?,
            first_server: r.opt()?,
            cache: r.opt()?,
            redundancy: None,
        };
        if tag & REQUEST_REDUNDANCY_FLAG != 0 {
            let n = r.u8()?;
            if !(1..=weft_layout::redundancy::REPLICAS_MAX).contains(&n) {
                return Err(DecodeError::Invalid {
                    what: "replicas",
                    value: n as u64,
                });
            }
            request.redundancy = Some(Redundancy::Replicas(n));
        }
        if let Some(s) = request.stripe_size_bytes {
            if !(STRIPE_SIZE_BYTES_MIN..=STRIPE_SIZE_BYTES_MAX).contains(&s) {
                return Err(DecodeError::Invalid {
                    what: "stripe size",
                    value: s,
                });
            }
        }
        if let Some(c) = request.stripe_count {
            if c as usize > STRIPE_COUNT_MAX {
                return Err(DecodeError::Invalid {
                    what: "stripe count",
                    value: c as u64,
                });
            }
        }
        Ok(request)
    }
}

/// One object's size and change stamp (`ObjStamp`).
///
/// The stamp is the object file's ctime on its server, in nanoseconds, and changes with
/// every write, truncate or allocation of the object there, whoever makes it: a
/// client that cached the object's data when the stamp was S may keep it while the
/// stamp is still S. Timestamps come from a coarse clock, so a write just after a
/// stamp was read could leave it as it was; the server therefore answers `UNSETTLED`
/// for an object changed less than `SETTLE_NS` ago by its clock (or in its future),
/// which a client never takes as unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
pub struct ObjStamped {
    /// Logical end of the file as this object says, `u64::MAX` when it is missing.
    pub end: u64,
    /// Bytes allocated on disk.
    pub allocated: u64,
    pub stamp: u64,
    /// When the object's data last changed (its mtime; zero when it is missing). Writes
    /// reach only the io servers, so a file's modification time is the latest of its
    /// objects' and the manager's (which creates, truncates and explicit times set).
    pub mtime: Timespec,
}

impl ObjStamped {
    /// The object does not exist (a stable state: creating it sets a stamp).
    pub const ABSENT: u64 = 0;
    /// Changed too recently to compare.
    pub const UNSETTLED: u64 = u64::MAX;
    /// How long after its last change an object's stamp is trusted: far above any
    /// kernel's timestamp granularity (a tick, 10 ms at most), and above the time a
    /// write takes between setting the time and copying its data.
    pub const SETTLE_NS: u64 = 1_000_000_000;

    /// Adds what this object says to its file's `size`, `blocks` and `mtime` (the
    /// largest end, the 512-byte blocks allocated, the latest data change), as every
    /// reader of a file's objects sums them; a missing object adds nothing. Whether it
    /// was there.
    pub fn add_to(&self, size: &mut u64, blocks: &mut u64, mtime: &mut Timespec) -> bool {
        if self.end == u64::MAX {
            return false;
        }
        *size = (*size).max(self.end);
        *blocks += self.allocated.div_ceil(512);
        *mtime = (*mtime).max(self.mtime);
        true
    }
}

/// What a `FileLock` does: take a shared or exclusive lock, or drop what the owner
/// holds in the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
#[wire(tag_what = "lock kind")]
#[repr(u8)]
pub enum LockKind {
    Read = 0,
    Write = 1,
    Unlock = 2,
}

/// A byte-range lock as the manager holds it for a mount's lock owner (`FileLock`,
/// `FileLockTest`): `[start, end]`, both inclusive (`end` `u64::MAX`: to the end of any
/// file), shared (`write` false) or exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
pub struct HeldLock {
    pub write: bool,
    pub start: u64,
    pub end: u64,
    /// The holding process, on its own machine (what F_GETLK reports).
    pub pid: u32,
}

/// One lock request of a mount, as every layer passes it on (`FileLock`,
/// `FileLockReclaim`, `FileLockTest`, the client's `file_lock`, the manager's table, the
/// mount's): mount session `session`'s lock owner `owner` (a process's descriptors, or
/// one open file for `flock`, as the kernel names them) asks for `kind` on bytes
/// `[start, end]` of `inode`, both inclusive (`end` `u64::MAX`: to the end of any file).
/// `pid` is the asking process on its machine (what F_GETLK reports; unused by tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
pub struct LockRequest {
    pub session: u64,
    pub owner: u64,
    pub inode: InodeId,
    pub pid: u32,
    pub kind: LockKind,
    pub start: u64,
    pub end: u64,
}

/// How often a mount that holds locks tells the manager it is alive and learns the
/// manager's incarnation (`LockSession`): a restarted manager is noticed within about
/// this, and its grace for reclaims (`LOCK_GRACE_DEFAULT`) is a multiple of it.
pub const LOCK_RENEW_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// The manager's default grace after a start, during which it grants only reclaims of
/// locks its previous incarnation held: ten of the mounts' `LOCK_RENEW_PERIOD`, so a
/// live mount notices the restart and reclaims with ample margin (NFS's grace is its
/// lease, for the same reason).
pub const LOCK_GRACE_DEFAULT: std::time::Duration = std::time::Duration::from_secs(10);

/// The metadata manager's default commit interval (`commit_interval_ms`): operations
/// are answered once applied and made durable within this (and at once by fsync, sync,
/// `MPI_File_sync`, `weft put`); clients that survive a manager crash replay what was
/// not durable, and so they do after a disk error made the manager reopen its store
/// without it (the manager then acts as restarted). A client that ends asks for a
/// commit of what it did first, and the manager's database holds its blocks ahead
/// (weft-meta `store/room.rs`), so that a full disk does not make that commit fail.
/// 0: every operation durable before it is answered (one disk flush per group).
pub const COMMIT_INTERVAL_DEFAULT: std::time::Duration = std::time::Duration::from_millis(5);

/// How long a mount session that holds no lock any more stays in the manager's durable
/// record of lock-holding sessions (whose reclaims a restart waits for). A mount goes on
/// asking the manager's incarnation (`LockSession`) for twice this after its last lock,
/// so that it still answers a restart with `LockReclaimComplete` while it may be in
/// the record.
pub const LOCK_RECORD_IDLE: std::time::Duration = std::time::Duration::from_secs(30);

/// The manager's answer about its lock state (`LockState`): the process's incarnation
/// (another value after every restart) and how long its grace for reclaims lasts still
/// (0: over; a lock request answered with a grace left was not granted: ask again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
pub struct LockState {
    pub incarnation: u64,
    pub grace_left_ms: u64,
}

/// The striping parameters an io server needs to place a request: the file's stripe
/// size and count, and which of the file's servers it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Wire)]
#[wire(check = Striping::check)]
pub struct Striping {
    pub stripe_size_bytes: u64,
    pub stripe_count: u32,
    pub server_index: u32,
}

impl Striping {
    /// The decoder's check: a stripe size and count within the limits, and this
    /// server among them.
    fn check(&self) -> Result<(), DecodeError> {
        if !(STRIPE_SIZE_BYTES_MIN..=STRIPE_SIZE_BYTES_MAX).contains(&self.stripe_size_bytes)
            || self.stripe_count == 0
            || self.stripe_count as usize > STRIPE_COUNT_MAX
            || self.server_index >= self.stripe_count
        {
            return Err(DecodeError::Invalid {
                what: "striping",
                value: self.stripe_size_bytes,
            });
        }
        Ok(())
    }

    /// A layout with placeholder server ids: all that striping math needs.
    pub fn layout(&self) -> Layout {
        Layout {
            stripe_size_bytes: self.stripe_size_bytes,
            servers: (0..self.stripe_count).map(ServerId).collect(),
            replication: Default::default(),
        }
    }
}

/// Attributes of an inode as the metadata manager knows them. For regular files
/// `size` is filled in by the client from the io servers' extents (PVFS): the manager
/// never sees file data.
#[derive(Debug, Clone, PartialEq, Eq, Wire)]
pub struct Attr {
    pub inode: InodeId,
    pub kind: FileKind,
    /// Permission bits only (`0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    /// A file's layout.
    pub layout: Option<Layout>,
    /// A file's caching mode (fixed at create).
    pub cache: CacheMode,
    /// A directory's default layout for new files.
    pub dir_layout: Option<LayoutRequest>,
    /// Character and block devices: the device number.
    pub rdev: u64,
    /// 512-byte blocks allocated (`st_blocks`): for files, filled in by the client from
    /// the io servers' allocation, like `size`.
    pub blocks: u64,
}

/// What a setattr changes; `None` leaves a field alone.
#[derive(Debug, Clone, PartialEq, Eq, Default, Wire)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Truncate (or extend) to this size. The manager checks permission and updates
    /// times; the client then truncates the objects on the io servers.
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
    /// Clear setuid, and setgid if the group may execute, as a write (or truncate) by an
    /// unprivileged process does on Linux; needs only write access, not ownership.
    pub kill_privileges: bool,
    /// The caller acts through a file it opened for writing: a size or time change
    /// needs no write permission now (ftruncate(2), futimens(2)).
    pub by_handle: bool,
}

/// A time to set: an explicit value, or the server's clock (`utimensat(UTIME_NOW)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
#[wire(tag_what = "time tag")]
pub enum TimeSet {
    #[wire(tag = 0)]
    Now,
    #[wire(tag = 1)]
    At(Timespec),
}

#[derive(Debug, Clone, PartialEq, Eq, Wire)]
pub struct DirEntry {
    pub name: Name,
    pub inode: InodeId,
    pub kind: FileKind,
}

/// One step of a path as a client resolved it: `parent`'s entry `name` named `child`.
#[derive(Debug, Clone, PartialEq, Eq, Wire)]
pub struct PathStep {
    pub parent: InodeId,
    pub name: Name,
    pub child: InodeId,
}

/// One io server as clients see it.
#[derive(Debug, Clone, PartialEq, Eq, Wire)]
pub struct IoServer {
    pub id: ServerId,
    /// `host:port`.
    pub addr: String,
    /// A Unix socket path the server also listens on, for clients on its machine.
    pub socket: Option<String>,
}

/// The cache tier as clients see it: which servers are cache managers and how blocks
/// of cached files map onto them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Wire)]
#[wire(check = CacheTier::check)]
pub struct CacheTier {
    /// Servers with the cache role, in id order; empty when the cluster has no tier.
    pub managers: Vec<IoServer>,
    pub mapping: CacheMapping,
    /// Size of a cache block; 0 means each file's stripe size.
    pub block_size_bytes: u64,
}

impl CacheTier {
    /// The decoder's check: a block size of 0 (no cache tier) or within the stripe
    /// size limits.
    fn check(&self) -> Result<(), DecodeError> {
        if self.block_size_bytes != 0
            && !(STRIPE_SIZE_BYTES_MIN..=STRIPE_SIZE_BYTES_MAX).contains(&self.block_size_bytes)
        {
            return Err(DecodeError::Invalid {
                what: "cache block size",
                value: self.block_size_bytes,
            });
        }
        Ok(())
    }
}

/// What a client learns from the metadata manager when it connects.
#[derive(Debug, Clone, PartialEq, Eq, Wire)]
pub struct ClusterInfo {
    pub name: String,
    pub io_servers: Vec<IoServer>,
    pub default_layout: LayoutRequest,
    pub root: InodeId,
    pub cache: CacheTier,
}

/// Namespace counts from the metadata manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Wire)]
pub struct MetaStatfs {
    pub files: u64,
    pub directories: u64,
    /// Removed files whose objects the manager has not yet purged from io servers.
    pub orphans: u64,
}

/// Space on one io server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Wire)]
pub struct IoStatfs {
    pub objects: u64,
    /// Sum of the logical sizes of the objects stored.
    pub bytes_stored: u64,
    /// Free bytes of the file system holding the objects that unprivileged writers may
    /// use (statvfs f_bavail).
    pub bytes_free: u64,
    pub bytes_total: u64,
    /// Free bytes in all, the root-reserved ones too (statvfs f_bfree): what df's "Used"
    /// is counted from.
    pub bytes_unused: u64,
    /// Which file system holds the objects: equal for io servers sharing one (same
    /// machine, same device), so that a cluster's space counts it once; 0 = unknown.
    pub file_system: u64,
}

/// A file byte range `[offset, offset + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
#[wire(check = Range::check)]
pub struct Range {
    pub offset: u64,
    pub len: u64,
}

impl Range {
    /// The decoder's check: the range ends within 2^64.
    fn check(&self) -> Result<(), DecodeError> {
        weft_layout::stripe::check_range(self.offset, self.len).map_err(|_| DecodeError::Invalid {
            what: "range end (offset + length overflows)",
            value: self.offset,
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod redundancy_tests {
    use super::*;
    use weft_layout::Replication;

    fn plain() -> Layout {
        Layout {
            stripe_size_bytes: 65536,
            servers: vec![ServerId(1), ServerId(2)],
            replication: Replication::default(),
        }
    }

    #[test]
    fn a_plain_layout_and_request_encode_as_before_redundancy() {
        // What protocol version 4 (and the manager's stored records) wrote.
        let mut old = Writer::default();
        old.u64(65536);
        old.seq(&[ServerId(1), ServerId(2)]);
        assert_eq!(plain().to_bytes(), old.bytes);
        assert_eq!(Layout::from_bytes(&old.bytes).unwrap(), plain());
        let request = LayoutRequest {
            stripe_size_bytes: Some(4096),
            first_server: Some(1),
            ..Default::default()
        };
        let mut old = Writer::default();
        old.opt(&Some(4096u64));
        old.opt(&None::<u32>);
        old.opt(&Some(1u32));
        old.opt(&None::<CacheMode>);
        assert_eq!(request.to_bytes(), old.bytes);
        assert_eq!(LayoutRequest::from_bytes(&old.bytes).unwrap(), request);
    }

    #[test]
    fn replicated_layouts_and_requests_round_trip() {
        let layout = Layout {
            replication: Replication {
                copies: vec![ServerId(3), ServerId(4)],
                stale: vec![ServerId(1)],
            },
            ..plain()
        };
        assert_eq!(Layout::from_bytes(&layout.to_bytes()).unwrap(), layout);
        for stripe in [None, Some(1 << 20)] {
            let request = LayoutRequest {
                stripe_size_bytes: stripe,
                redundancy: Some(Redundancy::Replicas(3)),
                ..Default::default()
            };
            assert_eq!(LayoutRequest::from_bytes(&request.to_bytes()).unwrap(), request);
        }
        // A copy on a primary's server, a stale piece outside the layout: refused.
        let mut bad = layout.clone();
        bad.replication.copies[1] = ServerId(2);
        assert!(Layout::from_bytes(&bad.to_bytes()).is_err());
        let mut bad = layout;
        bad.replication.stale = vec![ServerId(9)];
        assert!(Layout::from_bytes(&bad.to_bytes()).is_err());
    }
}

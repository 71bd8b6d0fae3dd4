//! Requests and responses. A request's opcode travels in the frame header; its body
//! is the encoded message; bulk data (write payloads, read results) follows raw.

use crate::capability::{self, Capability};
use crate::codec::{DecodeError, Reader, Wire, Writer};
use crate::error::WireError;
use crate::handshake::{read_fixed, Identity, NONCE_BYTES, PROOF_BYTES};
use crate::name::Name;
use crate::types::*;
use weft_layout::view::View;
use weft_layout::{InodeId, LayoutRequest, ServerId};

/// Most ranges in one list-I/O request to one server.
pub const RANGES_MAX: usize = 16_384;
/// Most separate pieces a range-list read or write may have on the server it goes to:
/// bounds the memory a server holds to place them. Clients cut list requests at this
/// many pieces as well as at the data limit. (View requests need no such limit: the
/// server walks them a bounded window at a time.)
pub const PIECES_PER_REQUEST_MAX: usize = 1 << 18;
/// Most pieces of the client's read pool one `ShmScatter` names.
pub const SCATTER_PIECES_MAX: usize = 4096;
/// Longest extended attribute name (bytes, prefix included), as Linux's XATTR_NAME_MAX.
pub const XATTR_NAME_BYTES_MAX: usize = 255;
/// Largest extended attribute value (bytes), as Linux's XATTR_SIZE_MAX.
pub const XATTR_VALUE_BYTES_MAX: usize = 65_536;

/// Most names in one `Revalidate` (the deepest path a mount checks in one request).
pub const REVALIDATE_STEPS_MAX: usize = 256;
/// Most entries a readdir page may return.
pub const READDIR_ENTRIES_MAX: u32 = 4096;
/// Most names one `LookupMany` asks for.
pub const LOOKUP_MANY_MAX: usize = 4096;
/// Most files one `ReleaseWrites` gives back.
pub const RELEASE_WRITES_MAX: usize = 4096;
/// Most inodes in one batched io-server request (create/remove/extents).
pub const BATCH_INODES_MAX: usize = 4096;
/// Largest wire form of a view in a `RegisterView` (the message limit less room for the
/// length prefix): views are datatype trees, not byte lists, and real ones take a few
/// hundred bytes.
pub const VIEW_BYTES_MAX: usize = crate::frame::MESSAGE_BYTES_MAX as usize - 1024;
/// Most views registered at once on one connection to an io server. A client keeps one
/// per file view it uses over that connection; closing the connection releases them.
pub const VIEWS_PER_CONNECTION_MAX: usize = 64;

/// Most byte ranges one extent lock covers (a client merges the ranges of an access on
/// one server, closest first, until they fit). Merged ranges cover other processes'
/// bytes and make false conflicts: 4096 keeps the 3D block with 8 processes free of
/// them (1024 did not), in a 64 KiB message.
pub const LOCK_RANGES_MAX: usize = 4096;

/// A view registered on one connection to one io server (Clusterfile "view I/O"):
/// assigned by the server, meaningful only on the connection that registered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ViewId(pub u32);

impl std::fmt::Display for ViewId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "view {}", self.0)
    }
}

impl Wire for ViewId {
    fn encode(&self, w: &mut Writer) {
        w.u32(self.0)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(ViewId(r.u32()?))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Opcode {
    Hello = 1,
    ServerInfo = 2,
    Authenticate = 3,
    GetCluster = 10,
    Resolve = 11,
    Lookup = 12,
    GetAttr = 13,
    SetAttr = 14,
    Mkdir = 15,
    Create = 16,
    Readdir = 17,
    Unlink = 18,
    Rmdir = 19,
    Rename = 20,
    Statfs = 21,
    SetDirLayout = 22,
    Symlink = 23,
    Readlink = 24,
    ObjCreate = 40,
    ObjRemove = 41,
    Write = 42,
    Read = 43,
    Sync = 44,
    Extents = 45,
    Truncate = 46,
    IoStatfs = 47,
    RegisterView = 48,
    ReleaseView = 49,
    WriteView = 50,
    ReadView = 51,
    ViaCache = 80,
    CacheFlush = 81,
    CacheTruncate = 82,
    CacheExtents = 83,
    CacheClose = 84,
    CacheStats = 85,
    CacheDrop = 86,
    CachePunch = 187,
    RenameExchange = 188,
    RenameNoReplace = 189,
    AppendLock = 60,
    AppendUnlock = 61,
    Revalidate = 62,
    Release = 63,
    RenewSession = 64,
    FileLock = 180,
    FileLockTest = 181,
    FileLockReclaim = 182,
    LockSession = 183,
    LockReclaimComplete = 184,
    LockSessionEnd = 185,
    CommitMetadata = 200,
    MarkStale = 230,
    ViaCacheAware = 87,
    CacheCioStats = 88,
    Link = 65,
    Mknod = 66,
    SetXattr = 67,
    GetXattr = 68,
    ListXattr = 69,
    RemoveXattr = 70,
    ObjStat = 71,
    ObjStamp = 151,
    ObjTimes = 160,
    WithParent = 152,
    Allocate = 72,
    SharedPointer = 125,
    SharedPointerSince = 150,
    ObjPrecreate = 73,
    ReaddirPlus = 74,
    Metrics = 130,
    ExtentLock = 120,
    ExtentUnlock = 121,
    LockStats = 122,
    ShmAttach = 140,
    ShmCall = 141,
    ShmAttachPool = 186,
    ShmScatter = 190,
    PresentCapability = 100,
    GrantCapability = 101,
    RevokeCapabilities = 102,
    VerifyCapability = 103,
    CreateGranted = 191,
    LookupMany = 192,
    Vouched = 220,
    ReleaseWrites = 221,
    Tracked = 210,
    ReplayDone = 211,
}

/// Which roles a server process carries (bit set).
pub mod roles {
    pub const META: u32 = 1;
    pub const IO: u32 = 2;
    pub const CACHE: u32 = 4;
}

/// A cached file as a cache manager needs it with every request: where its data lives
/// on the io servers (to fetch and write back), and which incarnation of the manager
/// the client has been writing through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheFile {
    pub inode: InodeId,
    /// The file's layout on its io servers.
    pub layout: weft_layout::Layout,
    /// The manager's incarnation as the client first saw it on this file (from the
    /// handshake); 0 = not known yet. A manager that restarted refuses requests of an
    /// older incarnation, so a client never reads around writes the crash lost.
    pub incarnation: u64,
}

impl Wire for CacheFile {
    fn encode(&self, w: &mut Writer) {
        self.inode.encode(w);
        self.layout.encode(w);
        w.u64(self.incarnation);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(CacheFile {
            inode: InodeId::decode(r)?,
            layout: weft_layout::Layout::decode(r)?,
            incarnation: r.u64()?,
        })
    }
}

/// What a cache manager counted of the original access patterns it was given
/// (collective-I/O-aware caching): every (process request, block) reference, those that
/// found the block cached, their bytes, and blocks aggregated requests fetched that no
/// process asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CioStats {
    pub references: u64,
    pub hits: u64,
    pub bytes: u64,
    pub hit_bytes: u64,
    pub unasked_fetched: u64,
}

/// An io server's extent-lock counts since it started (`LockStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockStats {
    /// `ExtentLock` requests answered (granted or not).
    pub requests: u64,
    /// Locks granted.
    pub grants: u64,
    /// Requests refused because a held lock overlapped (the client tries again).
    pub conflicts: u64,
    /// Grants that came after at least one conflict (the client waited).
    pub waits: u64,
    /// Locks held now.
    pub held: u64,
    /// Locks taken over after their holder kept them past the hold limit.
    pub lapsed: u64,
}

impl Wire for LockStats {
    fn encode(&self, w: &mut Writer) {
        for v in [
            self.requests,
            self.grants,
            self.conflicts,
            self.waits,
            self.held,
            self.lapsed,
        ] {
            w.u64(v);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(LockStats {
            requests: r.u64()?,
            grants: r.u64()?,
            conflicts: r.u64()?,
            waits: r.u64()?,
            held: r.u64()?,
            lapsed: r.u64()?,
        })
    }
}

impl Wire for CioStats {
    fn encode(&self, w: &mut Writer) {
        for v in [
            self.references,
            self.hits,
            self.bytes,
            self.hit_bytes,
            self.unasked_fetched,
        ] {
            w.u64(v);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(CioStats {
            references: r.u64()?,
            hits: r.u64()?,
            bytes: r.u64()?,
            hit_bytes: r.u64()?,
            unasked_fetched: r.u64()?,
        })
    }
}

/// What one cache manager reports about itself (`weft status`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheStats {
    pub incarnation: u64,
    pub policy: String,
    pub capacity_bytes: u64,
    pub cached_bytes: u64,
    pub dirty_bytes: u64,
    pub blocks: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub write_backs: u64,
    pub write_back_bytes: u64,
    pub write_back_errors: u64,
    pub fetched_bytes: u64,
    /// Of `write_backs`, the blocks written whole; the rest were partly dirty and
    /// written as their dirty extents (list I/O). Encoded last, so an older peer's
    /// shorter answer still decodes (as 0).
    pub write_backs_full: u64,
}

impl Wire for CacheStats {
    fn encode(&self, w: &mut Writer) {
        w.u64(self.incarnation);
        w.str(&self.policy);
        for v in [
            self.capacity_bytes,
            self.cached_bytes,
            self.dirty_bytes,
            self.blocks,
            self.hits,
            self.misses,
            self.evictions,
            self.write_backs,
            self.write_back_bytes,
            self.write_back_errors,
            self.fetched_bytes,
            self.write_backs_full,
        ] {
            w.u64(v);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(CacheStats {
            incarnation: r.u64()?,
            policy: r.string()?,
            capacity_bytes: r.u64()?,
            cached_bytes: r.u64()?,
            dirty_bytes: r.u64()?,
            blocks: r.u64()?,
            hits: r.u64()?,
            misses: r.u64()?,
            evictions: r.u64()?,
            write_backs: r.u64()?,
            write_back_bytes: r.u64()?,
            write_back_errors: r.u64()?,
            fetched_bytes: r.u64()?,
            write_backs_full: if r.remaining() == 0 { 0 } else { r.u64()? },
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// First frame on every connection; the server answers with a `Challenge`.
    Hello {
        client: String,
    },
    /// Second frame on every connection: proves the client holds the cluster key (see
    /// `handshake`); the server answers with `Hello`, or refuses and closes.
    Authenticate {
        nonce: [u8; NONCE_BYTES],
        identity: Identity,
        proof: [u8; PROOF_BYTES],
    },
    /// The server's protocol and build versions, for `weft status`. Added after
    /// protocol version 1 shipped without a version bump: older servers answer it with
    /// an unknown-opcode error, and the Hello exchange is unchanged.
    ServerInfo,
    GetCluster,
    /// Walks an absolute path ("/a/b") from the root.
    Resolve {
        cred: Cred,
        path: String,
    },
    Lookup {
        cred: Cred,
        parent: InodeId,
        name: Name,
    },
    GetAttr {
        cred: Cred,
        inode: InodeId,
    },
    SetAttr {
        cred: Cred,
        inode: InodeId,
        changes: SetAttr,
    },
    Mkdir {
        cred: Cred,
        parent: InodeId,
        name: Name,
        mode: u32,
    },
    Create {
        cred: Cred,
        parent: InodeId,
        name: Name,
        mode: u32,
        layout: LayoutRequest,
        exclusive: bool,
    },
    /// Entries with names strictly after `after`, in name order.
    Readdir {
        cred: Cred,
        dir: InodeId,
        after: Name,
        max_entries: u32,
    },
    /// `Readdir` with every entry's attributes (without file sizes, which the io
    /// servers know): `ls -l` in one round trip per page (added within version 3).
    /// A page may hold fewer than `max_entries` to stay within the message limit.
    ReaddirPlus {
        cred: Cred,
        dir: InodeId,
        after: Name,
        max_entries: u32,
    },
    /// Removes a name. `keep`: the mount session that has the file open, which keeps it
    /// alive, nameless, if this was its last name (until `Release`).
    Unlink {
        cred: Cred,
        parent: InodeId,
        name: Name,
        keep: Option<u64>,
    },
    Rmdir {
        cred: Cred,
        parent: InodeId,
        name: Name,
    },
    /// Answered with `Renamed`. `keep` as for `Unlink`, for a replaced file.
    Rename {
        cred: Cred,
        src_parent: InodeId,
        src_name: Name,
        dst_parent: InodeId,
        dst_name: Name,
        keep: Option<u64>,
    },
    /// Swaps two names atomically (rename(2) with RENAME_EXCHANGE): `a_name` of
    /// `a_parent` then leads to what `b_name` of `b_parent` led to, and the other way
    /// round; both must exist. Answered with `Renamed` (`moved`: what `a_name` led to,
    /// nothing kept). Added within protocol version 3: an older manager answers
    /// `UnknownOpcode`.
    RenameExchange {
        cred: Cred,
        a_parent: InodeId,
        a_name: Name,
        b_parent: InodeId,
        b_name: Name,
    },
    /// `Rename` that never replaces (rename(2) with RENAME_NOREPLACE): `Exists` when the
    /// target name exists, checked in the move's own transaction. Answered with
    /// `Renamed` (nothing kept). Added within protocol version 3: an older manager
    /// answers `UnknownOpcode`.
    RenameNoReplace {
        cred: Cred,
        src_parent: InodeId,
        src_name: Name,
        dst_parent: InodeId,
        dst_name: Name,
    },
    Statfs {
        cred: Cred,
    },
    /// Sets (or with `None` clears) a directory's default layout for new files.
    SetDirLayout {
        cred: Cred,
        dir: InodeId,
        layout: Option<LayoutRequest>,
    },
    Symlink {
        cred: Cred,
        parent: InodeId,
        name: Name,
        target: Name,
    },
    Readlink {
        cred: Cred,
        inode: InodeId,
    },
    /// io (from the manager, with a server capability): set the modification time of
    /// these objects that exist, so that an explicitly set time (utimensat, `touch -d`,
    /// tar and cp -p restoring times) is what a stat shows, not an object's later one.
    ObjTimes {
        inodes: Vec<InodeId>,
        mtime: Timespec,
    },
    /// io: create empty objects for new files.
    ObjCreate {
        inodes: Vec<InodeId>,
    },
    /// io: create empty objects for fresh inode numbers, each one exclusively (an
    /// existing object is never taken over: the whole request then fails and none of its
    /// new objects is left), and make them durable before answering (added within
    /// version 3; the manager's pool of precreated objects).
    ObjPrecreate {
        inodes: Vec<InodeId>,
    },
    /// io: delete objects of removed files (missing ones are fine).
    ObjRemove {
        inodes: Vec<InodeId>,
    },
    /// io: the bulk data is this server's pieces of `ranges`, in file order.
    Write {
        inode: InodeId,
        striping: Striping,
        ranges: Vec<Range>,
    },
    /// io: the reply's bulk data is this server's pieces of `ranges`, in file order,
    /// with holes and bytes past the object's end read as zeros.
    Read {
        inode: InodeId,
        striping: Striping,
        ranges: Vec<Range>,
    },
    Sync {
        inode: InodeId,
    },
    /// io: the logical end of each object (`u64::MAX` when the object is missing).
    Extents {
        items: Vec<(InodeId, Striping)>,
    },
    Truncate {
        inode: InodeId,
        striping: Striping,
        size: u64,
    },
    IoStatfs,
    /// io: remember `view` for later `WriteView`/`ReadView` on this connection. The
    /// view travels in its wire form and is decoded (with every limit checked) here.
    RegisterView {
        view: View,
    },
    /// io: forget a view registered on this connection.
    ReleaseView {
        view: ViewId,
    },
    /// io: the bulk data is this server's pieces of view bytes
    /// `[view_offset, view_offset + len)` of a registered view, in file order (one
    /// PVFS I/O stream: the server finds the pieces itself from the view and striping).
    WriteView {
        inode: InodeId,
        striping: Striping,
        view: ViewId,
        view_offset: u64,
        len: u64,
    },
    /// io: the reply's bulk data is this server's pieces of the view interval, in file
    /// order, holes and bytes past the object's end read as zeros.
    ReadView {
        inode: InodeId,
        striping: Striping,
        view: ViewId,
        view_offset: u64,
        len: u64,
    },
    /// cache: a data request (`Read`, `Write`, `ReadView` or `WriteView`) of a cached
    /// file, served by a cache manager from and into its blocks. The inner request's
    /// striping is the cache's: block size, the file's number of managers, and which
    /// of them this is; its pieces are this manager's blocks, exactly as an io
    /// server's are its stripes.
    ViaCache {
        file: CacheFile,
        request: Box<Request>,
    },
    /// cache: a read (`Read` or `ReadView`) of a collective call, as `ViaCache`, with the
    /// processes' original pattern of the call (collective-I/O-aware caching): the
    /// manager looks the aggregated request up without counting it as a reference and
    /// feeds its replacement the pattern's references to its blocks, in time order,
    /// once per call. Added within protocol version 1: a manager that does not know it
    /// answers `UnknownOpcode`, and the client sends `ViaCache` instead.
    ViaCacheAware {
        file: CacheFile,
        pattern: std::sync::Arc<crate::pattern::AccessPattern>,
        request: Box<Request>,
    },
    /// cache: write this manager's dirty blocks of the file back to the io servers and
    /// wait for write-backs in progress; reports a failed earlier write-back.
    CacheFlush {
        file: CacheFile,
    },
    /// cache: forget the file's bytes at and after `size` (a truncate), waiting for
    /// write-backs in progress, before the client truncates the objects.
    CacheTruncate {
        file: CacheFile,
        size: u64,
    },
    /// cache: forget the file's bytes in `[offset, offset + len)`, dirty or not (a hole
    /// punched in it), waiting for write-backs in progress; the client sends it after
    /// `CacheFlush` and the punch of the objects. Added within protocol version 3: an
    /// older manager answers `UnknownOpcode`.
    CachePunch {
        file: CacheFile,
        offset: u64,
        len: u64,
    },
    /// cache: for each file, the end of the data written into this manager and not yet
    /// written back (0 if none): with the io servers' extents, the file's size.
    CacheExtents {
        inodes: Vec<InodeId>,
    },
    /// cache: a client closed the file: write its dirty blocks back soon.
    CacheClose {
        inode: InodeId,
    },
    CacheStats,
    /// cache: the manager's counters of original access patterns.
    CacheCioStats,
    /// cache: the files were removed: drop their blocks, dirty or not.
    CacheDrop {
        inodes: Vec<InodeId>,
    },
    /// Any server: the URL of its metrics endpoint (answered with `Metrics`), and with
    /// `text` its metrics in the Prometheus text format as the reply's bulk data, for
    /// clients that cannot reach the endpoint (none runs, or it is firewalled). Added
    /// within protocol version 3: an older server answers `UnknownOpcode`.
    Metrics {
        text: bool,
    },
    /// io: take the append lock of `inode` (held at the server of the file's first
    /// stripe): answered with a token, or `Busy` while another client holds it. The lock
    /// goes with the connection that took it, and lapses after a bound.
    AppendLock {
        inode: InodeId,
    },
    /// io: release the append lock taken with `token`.
    AppendUnlock {
        inode: InodeId,
        token: u64,
    },
    /// io: lock file byte ranges of `inode` (the ranges of an access that this server
    /// holds), shared (`exclusive` false: readers) or exclusive (writers): answered with
    /// a token, or `Busy` while a conflicting lock is held (never waited for on the
    /// server). `attempt` counts the client's earlier tries of this lock (0 on the
    /// first), for the wait count. The lock goes with the connection that took it.
    /// Added within protocol version 3: an older server answers `UnknownOpcode`.
    ExtentLock {
        inode: InodeId,
        exclusive: bool,
        attempt: u32,
        ranges: Vec<Range>,
    },
    /// io: release the extent lock taken with `token`.
    ExtentUnlock {
        inode: InodeId,
        token: u64,
    },
    /// io: the server's extent-lock counts (answered with `LockStats`).
    LockStats,
    /// Shared-memory transport (Unix socket only): the client passes, with this
    /// frame's header bytes (SCM_RIGHTS), a sealed memfd of `bytes` bytes that both
    /// sides map; later `ShmCall`s move their bulk data through it. Answered `Done`, or
    /// refused (the client then sends its data over the socket).
    ShmAttach {
        bytes: u64,
    },
    /// Shared-memory transport: `request` with its bulk data in the connection's
    /// segment instead of the frame. `[offset, offset + len)` of the segment is this
    /// call's region; its first `data_len` bytes are the request's bulk data, and the
    /// reply's bulk data is written from the region's start when it fits (answered
    /// `ShmPlaced`), else travels in the reply frame as usual.
    ShmCall {
        offset: u64,
        len: u64,
        data_len: u64,
        request: Box<Request>,
    },
    /// Shared-memory transport (Unix socket, added within version 3; an older server
    /// answers `UnknownOpcode`): the client passes, with this frame's bytes
    /// (SCM_RIGHTS), its process's read pool, a sealed memfd of `bytes` bytes shared
    /// by all its connections; later `ShmScatter`s place read replies there. Answered
    /// `Done`, or refused (the client then reads as before).
    ShmAttachPool {
        bytes: u64,
    },
    /// Shared-memory transport: a read (`Read` or `ReadView`, nothing else) whose
    /// reply's bulk data the server puts into the connection's pool: the reply's bytes
    /// in order fill `pieces` (pool offset, length) one after another. The pieces do
    /// not wrap, do not overlap, are not empty, are at most `SCATTER_PIECES_MAX`, and
    /// must hold exactly the reply (else an error, nothing sent). Answered
    /// `ShmPlaced`.
    ShmScatter {
        pieces: Vec<(u64, u64)>,
        request: Box<Request>,
    },
    /// Checks, in one snapshot, that every step's `parent` still has an entry `name`
    /// naming `child` and that the caller may search every `parent`; answers with the
    /// last child's attributes, or `Stale` when a step no longer holds (a name another
    /// client removed, renamed or replaced).
    Revalidate {
        cred: Cred,
        steps: Vec<PathStep>,
    },
    /// Mount session `session` closed its last descriptor of `inode`, which an `Unlink`
    /// or `Rename` kept for it: a file still without a name goes.
    Release {
        session: u64,
        inode: InodeId,
    },
    /// Mount session `session` is alive: files it keeps stay. A session not renewed for
    /// a while (its mount crashed) loses them.
    RenewSession {
        session: u64,
    },
    /// meta: a mount's lock owner takes, changes or drops its lock, cluster-wide (see
    /// `LockRequest`). A lock another owner holds in conflict refuses it with `Busy`
    /// (the caller polls to wait); taking renews the session, and a lapsed session's
    /// locks go. Answered `Done`; during the manager's grace after a restart a lock
    /// that no reclaimed lock refuses is not granted yet: answered `LockState` (ask
    /// again).
    FileLock(LockRequest),
    /// meta: the first lock of another owner that would refuse `FileLock` with this
    /// request (F_GETLK; `pid` is not sent); answered `LockHolder`, or during the
    /// grace, when no reclaimed lock conflicts, `LockState` (ask again).
    FileLockTest(LockRequest),
    /// meta: a lock the mount held before the manager restarted, taken again during the
    /// manager's grace (answered `LockState`). A conflict with another reclaim is
    /// `Busy`; after the grace, `Stale` unless the owner already holds it: the lock is
    /// lost.
    FileLockReclaim(LockRequest),
    /// meta: mount session `session`, holding locks, is alive; answered `LockState`
    /// (the manager's incarnation tells the mount whether its locks need reclaiming).
    LockSession {
        session: u64,
    },
    /// meta: mount session `session` has reclaimed every lock it holds from manager
    /// `incarnation` (or holds none): NFSv4's RECLAIM_COMPLETE. The manager's grace
    /// ends once every session its record names as holding locks before its start has
    /// said so (see the manager's `file_locks`); one naming another incarnation is
    /// ignored. Answered `LockState`. Added within protocol version 3: an older
    /// manager answers `UnknownOpcode`, and its grace runs full.
    LockReclaimComplete {
        session: u64,
        incarnation: u64,
    },
    /// meta: with `wait`, make every metadata operation acknowledged so far durable
    /// (fsync, sync: a manager with a commit interval acknowledges operations before
    /// they are durable) and answer after; without, only say where commits stand.
    /// Answered `Committed`. Added within protocol version 3: an older manager answers
    /// `UnknownOpcode`, and commits every operation before answering it anyway.
    CommitMetadata {
        wait: bool,
    },
    /// meta: a writer found io server `server` down while writing replicated file
    /// `inode`: its piece of the file is stale (missed writes), recorded in the file's
    /// layout before the write is acknowledged, so that no reader uses it until it is
    /// rebuilt. Needs write permission on the file. Answered `Attr` (the layout with
    /// the piece marked). Refused if that would leave some slot with no fresh copy.
    MarkStale {
        cred: Cred,
        inode: InodeId,
        server: ServerId,
    },
    /// meta: mount session `session` ends (its mount is unmounting and dropped its
    /// locks): the manager forgets it in its record of lock-holding sessions, so that a
    /// restart soon after does not wait for it. Answered `Done`. Added within protocol
    /// version 3: an older manager answers `UnknownOpcode`.
    LockSessionEnd {
        session: u64,
    },
    /// A new name `name` in `parent` for non-directory `inode` (a hard link).
    Link {
        cred: Cred,
        inode: InodeId,
        parent: InodeId,
        name: Name,
    },
    /// A FIFO, character or block device, or socket: a namespace object only.
    Mknod {
        cred: Cred,
        parent: InodeId,
        name: Name,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    },
    /// Sets extended attribute `name` (`user.*` or `trusted.*`) of `inode`.
    SetXattr {
        cred: Cred,
        inode: InodeId,
        name: Name,
        value: Vec<u8>,
        how: XattrSet,
    },
    /// Answered with `Value`; `NoData` when the attribute is not set.
    GetXattr {
        cred: Cred,
        inode: InodeId,
        name: Name,
    },
    /// Answered with `Names`: the attributes the caller may see.
    ListXattr {
        cred: Cred,
        inode: InodeId,
    },
    RemoveXattr {
        cred: Cred,
        inode: InodeId,
        name: Name,
    },
    /// io: the logical end and the bytes allocated on disk of each object (`u64::MAX`
    /// end when the object is missing).
    ObjStat {
        items: Vec<(InodeId, Striping)>,
    },
    /// io: `ObjStat` with each object's change stamp (see `ObjStamped`), by which a
    /// client tells whether data it cached is still what the object holds. Answered
    /// `ObjStamps`; servers before it answer `UnknownOpcode`.
    ObjStamp {
        items: Vec<(InodeId, Striping)>,
    },
    /// io: allocates this server's pieces of `[offset, offset + len)` (fallocate(2)
    /// `mode`: 0, or `FALLOC_FL_KEEP_SIZE`, or that with `FALLOC_FL_PUNCH_HOLE`, or
    /// `FALLOC_FL_ZERO_RANGE` with or without `FALLOC_FL_KEEP_SIZE`; servers before
    /// ZERO_RANGE answer it `Unsupported`).
    Allocate {
        inode: InodeId,
        striping: Striping,
        offset: u64,
        len: u64,
        mode: u32,
    },
    /// meta: an MPI-IO shared file pointer, one per collective open (`open`, a random
    /// id) of `inode`, held in the manager's memory; answered with `Position`, the
    /// pointer's value before `op`. A request of a newer view `epoch` than the
    /// pointer's first resets it to 0 (`MPI_File_set_view`). `NotFound` when the
    /// pointer is not there (never created, dropped, or the manager restarted).
    SharedPointer {
        inode: InodeId,
        open: u64,
        epoch: u64,
        op: SharedOp,
    },
    /// io, cache: the capability for the requests that follow on this connection
    /// (see `capability`); answered with `Done`, or refused when forged or expired.
    /// `reset`: first forget the capabilities presented before on this connection (a
    /// client that keeps a bounded set starts it over).
    PresentCapability {
        cap: Capability,
        reset: bool,
    },
    /// meta: a capability for `rights` (`capability::rights::READ`, `WRITE`, or both)
    /// on the data of file `inode`, after the same permission check as an open;
    /// answered with `Capability`.
    GrantCapability {
        cred: Cred,
        inode: InodeId,
        rights: u8,
    },
    /// io, cache (servers only): capabilities of these inodes issued at or before
    /// `at_ms` (the manager's clock, after the chmod or chown that took rights away)
    /// are void; their holders must ask again.
    RevokeCapabilities {
        inodes: Vec<InodeId>,
        at_ms: u64,
    },
    /// meta: whether `cap` verifies (the manager's key, its expiry, the revocations
    /// the manager sent); answered with `Done`, or refused as an io server refuses a
    /// `PresentCapability`, or `Unsupported` when the cluster asks for no
    /// capabilities. Asked by a job's delegate, which holds no capability key.
    VerifyCapability {
        cap: Capability,
    },
    /// meta: `SharedPointer` of an open that made no pointer: one missing is made (at 0)
    /// by the first request, provided the manager is still the one the open saw (its
    /// handshake's `incarnation`); after a restart, or for a pointer the manager let go
    /// to make room, `NotFound` as for `SharedPointer`. Saves a collective open its
    /// round trip to make a pointer most programs never use.
    SharedPointerSince {
        inode: InodeId,
        open: u64,
        epoch: u64,
        incarnation: u64,
        op: SharedOp,
    },
    /// meta: `request` (a `Create`, `Mkdir`, `Symlink`, `Mknod` or `Link`, never another
    /// kind), answered with `Made`: what it made and its directory's attributes as the
    /// operation left them, read in the operation's own transaction. A mount answers the
    /// kernel's next `GETATTR` of the directory (which every create invalidates) with
    /// them instead of asking again. Added within protocol version 3: an older manager
    /// answers `UnknownOpcode`, and the client sends `request` alone.
    WithParent {
        request: Box<Request>,
    },
    /// meta: `request`, always a `Create`, answered with `MadeGranted`: what a
    /// `WithParent` create answers, plus a capability to read and write the file (when
    /// the cluster uses capabilities and the caller may have one), granted in the same
    /// round trip: the new file's first write asks the manager for nothing. Added within
    /// protocol version 3: an older manager answers `UnknownOpcode`, and the client
    /// sends a `WithParent` instead.
    CreateGranted {
        request: Box<Request>,
    },
    /// meta: looks up every one of `names` (at most `LOOKUP_MANY_MAX`) in directory
    /// `parent`, answered with `EntriesPlus` (`more` false): the names found, in the order
    /// asked, with their attributes (files' sizes 0: their io servers hold them); names
    /// not there are left out. One request for what takes one `Lookup` per name (a
    /// stat-many, `Client::stat_many`). Added within protocol version 3: an older manager
    /// answers `UnknownOpcode`, and the client sends the lookups one by one (pipelined).
    LookupMany {
        cred: Cred,
        parent: InodeId,
        names: Vec<Name>,
    },
    /// meta: `request` (a `Lookup`, `Revalidate` or `GetAttr`), answered with
    /// `AttrVouched`: its attributes and, for a regular file, the manager's vouch that
    /// no write capability of the file is live and none was issued since the stamp it
    /// gives (see `weft_meta::writers`). A client that asked the io servers for the
    /// file's size and change stamps after it was told that stamp, and is told the
    /// same stamp again, knows the file's data did not change in between: it skips the
    /// io servers. Added in protocol version 5.
    Vouched {
        request: Box<Request>,
    },
    /// meta: the caller gives back write capabilities: for each inode, how many write
    /// grants it had from the manager (all of them: it holds no writable handle of the
    /// file any more and wrote everything it will write with them) and the issue time
    /// of the first (a manager started after it ignores the entry: those grants were
    /// another run's). Answered with `Done`. At most `RELEASE_WRITES_MAX` entries. Added
    /// in protocol version 5.
    ReleaseWrites {
        releases: Vec<(InodeId, (u32, u64))>,
    },
    /// meta: `request` (one that changes the namespace: `Request::TRACKED`, or a
    /// `WithParent`/`CreateGranted` of one), sent by client `client` (a random number
    /// for the client's life) in its request slot `slot` as its request number `xid`
    /// (rising). Answered `Tracked` with the operation's sequence number. The manager
    /// records the answer in the operation's own transaction, per (client, slot): a
    /// request sent again (its answer lost) is answered from the record, not done twice
    /// (see weft-meta's `replay.rs`). `replay`: the sequence number the operation had
    /// when first acknowledged (0: not a replay), sent again after a manager restart;
    /// `made`: what it made then (its inode number is used again). Added in protocol
    /// version 5.
    Tracked {
        client: u64,
        slot: u32,
        xid: u64,
        replay: u64,
        made: Option<Attr>,
        request: Box<Request>,
    },
    /// meta: client `client` has replayed everything it kept (or had nothing to), after
    /// a manager restart; answered `Done`. The manager's replay window ends once every
    /// client it expects said so. Added in protocol version 5.
    ReplayDone {
        client: u64,
    },
}

/// What a `SharedPointer` request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedOp {
    /// Creates the pointer at 0 (an open).
    Create,
    /// Reads it.
    Get,
    /// Adds to it atomically (an access of that many etypes).
    FetchAdd(u64),
    /// Sets it (`MPI_File_seek_shared`).
    Set(u64),
    /// Forgets it (the close).
    Drop,
}

impl Wire for SharedOp {
    fn encode(&self, w: &mut Writer) {
        let (tag, value) = match *self {
            SharedOp::Create => (0, 0),
            SharedOp::Get => (1, 0),
            SharedOp::FetchAdd(n) => (2, n),
            SharedOp::Set(n) => (3, n),
            SharedOp::Drop => (4, 0),
        };
        w.u8(tag);
        w.u64(value);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let tag = r.u8()?;
        let value = r.u64()?;
        match tag {
            0 => Ok(SharedOp::Create),
            1 => Ok(SharedOp::Get),
            2 => Ok(SharedOp::FetchAdd(value)),
            3 => Ok(SharedOp::Set(value)),
            4 => Ok(SharedOp::Drop),
            v => Err(DecodeError::Invalid {
                what: "shared pointer operation",
                value: v as u64,
            }),
        }
    }
}

/// How a `SetXattr` treats an existing attribute (setxattr(2) flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    /// Create or replace.
    Either = 0,
    /// Fail with `Exists` if it is set (`XATTR_CREATE`).
    Create = 1,
    /// Fail with `NoData` if it is not set (`XATTR_REPLACE`).
    Replace = 2,
}

impl Wire for XattrSet {
    fn encode(&self, w: &mut Writer) {
        w.u8(*self as u8)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match r.u8()? {
            0 => Ok(XattrSet::Either),
            1 => Ok(XattrSet::Create),
            2 => Ok(XattrSet::Replace),
            v => Err(DecodeError::Invalid {
                what: "xattr set mode",
                value: v as u64,
            }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// The answer to a client's `Authenticate`: the handshake is done.
    Hello {
        server_id: ServerId,
        roles: u32,
        /// Differs each time the server process starts: a client that sees another
        /// value than before knows state it kept in the server (a cache manager's dirty
        /// blocks) may be gone.
        incarnation: u64,
        /// The server's MAC over both nonces: it holds the cluster key too.
        proof: [u8; PROOF_BYTES],
    },
    /// The answer to `Hello`: the nonce the client's proof must cover.
    Challenge {
        nonce: [u8; NONCE_BYTES],
    },
    /// The answer to `Hello` from a metadata manager in `munge` identity mode: as
    /// `Challenge`, and the client should claim an `Identity::Munge` for the connection.
    MungeChallenge {
        nonce: [u8; NONCE_BYTES],
    },
    ServerInfo {
        protocol_version: u16,
        /// The server binary's version and git revision, "0.1.0 (git 1a2b3c4)".
        build: String,
    },
    Cluster(ClusterInfo),
    Attr(Attr),
    Entries {
        entries: Vec<DirEntry>,
        more: bool,
    },
    /// `ReaddirPlus`: names with their inodes' attributes.
    EntriesPlus {
        entries: Vec<(Name, Attr)>,
        more: bool,
    },
    Done,
    Statfs(MetaStatfs),
    Link(Name),
    /// Bytes moved by a read or write.
    Bytes(u64),
    Extents(Vec<u64>),
    IoStatfs(IoStatfs),
    /// The id of a view just registered.
    View(ViewId),
    CacheStats(CacheStats),
    CacheCioStats(CioStats),
    /// A lock's token (`AppendLock`, `ExtentLock`).
    Token(u64),
    /// `LockStats`: an io server's extent-lock counts.
    LockStats(LockStats),
    /// A name went (`Unlink`); the inode kept for the session that asked, if any.
    Unlinked {
        kept: Option<InodeId>,
    },
    /// `Rename`: the moved inode, and a replaced file kept for the session that asked.
    Renamed {
        moved: Attr,
        kept: Option<InodeId>,
    },
    /// An extended attribute's value.
    Value(Vec<u8>),
    /// Extended attribute names.
    Names(Vec<Name>),
    /// `ObjStat`: (logical end, bytes allocated) per object.
    ObjStats(Vec<(u64, u64)>),
    /// `ObjStamp`: per object.
    ObjStamps(Vec<ObjStamped>),
    /// `Metrics`: the server's metrics endpoint, `http://host:port/metrics`, or empty
    /// when it serves none.
    Metrics {
        url: String,
    },
    /// `SharedPointer`: the pointer's value before the operation.
    Position(u64),
    /// `FileLockTest`: the conflicting lock, if any.
    LockHolder(Option<HeldLock>),
    /// `FileLockReclaim`, `LockSession`, and `FileLock` or `FileLockTest` held back by
    /// the grace: the manager's incarnation and grace left.
    LockState(LockState),
    /// `ShmCall`: the inner request's answer; its bulk data, `data_len` bytes, is at
    /// the start of the call's region of the shared segment.
    ShmPlaced {
        data_len: u64,
        response: Box<Response>,
    },
    /// `GrantCapability`: the capability.
    Capability(Capability),
    /// `WithParent`: the inode made (or, for a non-exclusive create of an existing
    /// file, found; for `Link`, linked) and the attributes of the directory the name is
    /// in, just after the operation.
    Made {
        attr: Attr,
        parent: Attr,
    },
    /// `CommitMetadata`: where the manager's commits stand.
    Committed(CommitInfo),
    /// `CreateGranted`: `Made`'s fields and the capability granted with the create
    /// (`None`: the cluster asks for none, or the grant was refused; the client asks
    /// at the first write, as for any open).
    MadeGranted {
        attr: Attr,
        parent: Attr,
        capability: Option<Capability>,
    },
    /// `Vouched`: the attributes and, for a regular file no writer may be changing,
    /// the stamp of the manager's vouch (`None`: a write capability may be live, or
    /// the manager cannot say).
    AttrVouched {
        attr: Attr,
        vouch: Option<u64>,
    },
    /// `Tracked`: the operation's answer, its sequence number (0: it changed nothing),
    /// the last sequence number the manager made durable, and the manager's epoch (its
    /// incarnation: another value after a restart).
    Tracked {
        seq: u64,
        durable_seq: u64,
        epoch: u64,
        response: Box<Response>,
    },
}

/// Where a metadata manager's commits stand (`CommitMetadata`, `weft status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitInfo {
    /// Interval between background durable commits, microseconds (0: every operation
    /// is durable before it is answered).
    pub interval_us: u64,
    /// Sequence number of the last operation acknowledged.
    pub seq: u64,
    /// Sequence number of the last operation in a durable commit.
    pub durable_seq: u64,
    /// Milliseconds since the last durable commit (`u64::MAX`: none since the start).
    pub since_durable_ms: u64,
}

impl Wire for CommitInfo {
    fn encode(&self, w: &mut Writer) {
        w.u64(self.interval_us);
        w.u64(self.seq);
        w.u64(self.durable_seq);
        w.u64(self.since_durable_ms);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(CommitInfo {
            interval_us: r.u64()?,
            seq: r.u64()?,
            durable_seq: r.u64()?,
            since_durable_ms: r.u64()?,
        })
    }
}

impl Request {
    /// The credential a metadata request claims, to be replaced by the one the server
    /// verified (a cluster in `owner` mode acts as the key's owner whatever is claimed);
    /// `None` for requests that carry none.
    pub fn cred_mut(&mut self) -> Option<&mut Cred> {
        match self {
            Request::Resolve { cred, .. }
            | Request::Lookup { cred, .. }
            | Request::GetAttr { cred, .. }
            | Request::SetAttr { cred, .. }
            | Request::Mkdir { cred, .. }
            | Request::Create { cred, .. }
            | Request::Readdir { cred, .. }
            | Request::ReaddirPlus { cred, .. }
            | Request::Unlink { cred, .. }
            | Request::Rmdir { cred, .. }
            | Request::Rename { cred, .. }
            | Request::RenameExchange { cred, .. }
            | Request::RenameNoReplace { cred, .. }
            | Request::Statfs { cred, .. }
            | Request::SetDirLayout { cred, .. }
            | Request::MarkStale { cred, .. }
            | Request::Symlink { cred, .. }
            | Request::Readlink { cred, .. }
            | Request::Revalidate { cred, .. }
            | Request::Link { cred, .. }
            | Request::Mknod { cred, .. }
            | Request::SetXattr { cred, .. }
            | Request::GetXattr { cred, .. }
            | Request::ListXattr { cred, .. }
            | Request::RemoveXattr { cred, .. }
            | Request::GrantCapability { cred, .. } => Some(cred),
            Request::WithParent { request } | Request::CreateGranted { request } => request.cred_mut(),
            Request::Tracked { request, .. } => request.cred_mut(),
            Request::LookupMany { cred, .. } => Some(cred),
            Request::Vouched { request } => request.cred_mut(),
            _ => None,
        }
    }
    pub fn opcode(&self) -> Opcode {
        use Request::*;
        match self {
            Hello { .. } => Opcode::Hello,
            ServerInfo => Opcode::ServerInfo,
            Authenticate { .. } => Opcode::Authenticate,
            GetCluster => Opcode::GetCluster,
            Resolve { .. } => Opcode::Resolve,
            Lookup { .. } => Opcode::Lookup,
            GetAttr { .. } => Opcode::GetAttr,
            SetAttr { .. } => Opcode::SetAttr,
            Mkdir { .. } => Opcode::Mkdir,
            Create { .. } => Opcode::Create,
            Readdir { .. } => Opcode::Readdir,
            ReaddirPlus { .. } => Opcode::ReaddirPlus,
            Unlink { .. } => Opcode::Unlink,
            Rmdir { .. } => Opcode::Rmdir,
            Rename { .. } => Opcode::Rename,
            RenameExchange { .. } => Opcode::RenameExchange,
            RenameNoReplace { .. } => Opcode::RenameNoReplace,
            Statfs { .. } => Opcode::Statfs,
            SetDirLayout { .. } => Opcode::SetDirLayout,
            Symlink { .. } => Opcode::Symlink,
            Readlink { .. } => Opcode::Readlink,
            ObjCreate { .. } => Opcode::ObjCreate,
            ObjRemove { .. } => Opcode::ObjRemove,
            ObjPrecreate { .. } => Opcode::ObjPrecreate,
            Write { .. } => Opcode::Write,
            Read { .. } => Opcode::Read,
            Sync { .. } => Opcode::Sync,
            Extents { .. } => Opcode::Extents,
            Truncate { .. } => Opcode::Truncate,
            IoStatfs => Opcode::IoStatfs,
            RegisterView { .. } => Opcode::RegisterView,
            ReleaseView { .. } => Opcode::ReleaseView,
            WriteView { .. } => Opcode::WriteView,
            ReadView { .. } => Opcode::ReadView,
            ViaCache { .. } => Opcode::ViaCache,
            ViaCacheAware { .. } => Opcode::ViaCacheAware,
            CacheFlush { .. } => Opcode::CacheFlush,
            CacheTruncate { .. } => Opcode::CacheTruncate,
            CacheExtents { .. } => Opcode::CacheExtents,
            CacheClose { .. } => Opcode::CacheClose,
            CacheStats => Opcode::CacheStats,
            CacheCioStats => Opcode::CacheCioStats,
            CacheDrop { .. } => Opcode::CacheDrop,
            CachePunch { .. } => Opcode::CachePunch,
            AppendLock { .. } => Opcode::AppendLock,
            AppendUnlock { .. } => Opcode::AppendUnlock,
            Revalidate { .. } => Opcode::Revalidate,
            Release { .. } => Opcode::Release,
            RenewSession { .. } => Opcode::RenewSession,
            FileLock(_) => Opcode::FileLock,
            FileLockTest(_) => Opcode::FileLockTest,
            FileLockReclaim(_) => Opcode::FileLockReclaim,
            LockSession { .. } => Opcode::LockSession,
            LockReclaimComplete { .. } => Opcode::LockReclaimComplete,
            LockSessionEnd { .. } => Opcode::LockSessionEnd,
            CommitMetadata { .. } => Opcode::CommitMetadata,
            MarkStale { .. } => Opcode::MarkStale,
            Link { .. } => Opcode::Link,
            Mknod { .. } => Opcode::Mknod,
            SetXattr { .. } => Opcode::SetXattr,
            GetXattr { .. } => Opcode::GetXattr,
            ListXattr { .. } => Opcode::ListXattr,
            RemoveXattr { .. } => Opcode::RemoveXattr,
            ObjStat { .. } => Opcode::ObjStat,
            ObjStamp { .. } => Opcode::ObjStamp,
            ObjTimes { .. } => Opcode::ObjTimes,
            Allocate { .. } => Opcode::Allocate,
            SharedPointer { .. } => Opcode::SharedPointer,
            SharedPointerSince { .. } => Opcode::SharedPointerSince,
            Metrics { .. } => Opcode::Metrics,
            ExtentLock { .. } => Opcode::ExtentLock,
            ExtentUnlock { .. } => Opcode::ExtentUnlock,
            LockStats => Opcode::LockStats,
            ShmAttach { .. } => Opcode::ShmAttach,
            ShmCall { .. } => Opcode::ShmCall,
            ShmAttachPool { .. } => Opcode::ShmAttachPool,
            ShmScatter { .. } => Opcode::ShmScatter,
            PresentCapability { .. } => Opcode::PresentCapability,
            GrantCapability { .. } => Opcode::GrantCapability,
            RevokeCapabilities { .. } => Opcode::RevokeCapabilities,
            VerifyCapability { .. } => Opcode::VerifyCapability,
            WithParent { .. } => Opcode::WithParent,
            CreateGranted { .. } => Opcode::CreateGranted,
            LookupMany { .. } => Opcode::LookupMany,
            Vouched { .. } => Opcode::Vouched,
            ReleaseWrites { .. } => Opcode::ReleaseWrites,
            Tracked { .. } => Opcode::Tracked,
            ReplayDone { .. } => Opcode::ReplayDone,
        }
    }

    pub fn encode_body(&self) -> Vec<u8> {
        use Request::*;
        let mut w = Writer::default();
        match self {
            Hello { client } => w.str(client),
            Authenticate {
                nonce,
                identity,
                proof,
            } => {
                w.bytes(nonce);
                identity.encode(&mut w);
                w.bytes(proof);
            }
            ServerInfo | GetCluster | IoStatfs | CacheStats | CacheCioStats => {}
            ViaCache { file, request } => {
                file.encode(&mut w);
                w.u16(request.opcode() as u16);
                w.bytes.extend_from_slice(&request.encode_body());
            }
            WithParent { request } => {
                w.u16(request.opcode() as u16);
                w.bytes.extend_from_slice(&request.encode_body());
            }
            // The create's own body: decoding reads it back as a `Create`.
            CreateGranted { request } => w.bytes.extend_from_slice(&request.encode_body()),
            Tracked {
                client,
                slot,
                xid,
                replay,
                made,
                request,
            } => {
                w.u64(*client);
                w.u32(*slot);
                w.u64(*xid);
                w.u64(*replay);
                w.opt(made);
                w.u16(request.opcode() as u16);
                w.bytes.extend_from_slice(&request.encode_body());
            }
            ReplayDone { client } => w.u64(*client),
            LookupMany { cred, parent, names } => {
                cred.encode(&mut w);
                parent.encode(&mut w);
                w.seq(names);
            }
            Vouched { request } => {
                w.u16(request.opcode() as u16);
                w.bytes.extend_from_slice(&request.encode_body());
            }
            ReleaseWrites { releases } => w.seq(releases),
            ViaCacheAware {
                file,
                pattern,
                request,
            } => {
                file.encode(&mut w);
                pattern.encode(&mut w);
                w.u16(request.opcode() as u16);
                w.bytes.extend_from_slice(&request.encode_body());
            }
            CacheFlush { file } => file.encode(&mut w),
            CacheTruncate { file, size } => {
                file.encode(&mut w);
                w.u64(*size);
            }
            CachePunch { file, offset, len } => {
                file.encode(&mut w);
                w.u64(*offset);
                w.u64(*len);
            }
            CacheExtents { inodes } | CacheDrop { inodes } => w.seq(inodes),
            CacheClose { inode } => inode.encode(&mut w),
            Metrics { text } => w.bool(*text),
            ExtentLock {
                inode,
                exclusive,
                attempt,
                ranges,
            } => {
                inode.encode(&mut w);
                w.bool(*exclusive);
                w.u32(*attempt);
                w.seq(ranges);
            }
            ExtentUnlock { inode, token } => {
                inode.encode(&mut w);
                w.u64(*token);
            }
            LockStats => {}
            ShmAttach { bytes } => w.u64(*bytes),
            ShmCall {
                offset,
                len,
                data_len,
                request,
            } => return Request::encode_shm_call(*offset, *len, *data_len, request),
            ShmAttachPool { bytes } => w.u64(*bytes),
            ShmScatter { pieces, request } => return Request::encode_shm_scatter(pieces, request),
            Resolve { cred, path } => {
                cred.encode(&mut w);
                w.str(path);
            }
            Lookup { cred, parent, name } | Rmdir { cred, parent, name } => {
                cred.encode(&mut w);
                parent.encode(&mut w);
                name.encode(&mut w);
            }
            Unlink {
                cred,
                parent,
                name,
                keep,
            } => {
                cred.encode(&mut w);
                parent.encode(&mut w);
                name.encode(&mut w);
                w.opt(keep);
            }
            GetAttr { cred, inode } | Readlink { cred, inode } => {
                cred.encode(&mut w);
                inode.encode(&mut w);
            }
            SetAttr { cred, inode, changes } => {
                cred.encode(&mut w);
                inode.encode(&mut w);
                changes.encode(&mut w);
            }
            Mkdir {
                cred,
                parent,
                name,
                mode,
            } => {
                cred.encode(&mut w);
                parent.encode(&mut w);
                name.encode(&mut w);
                w.u32(*mode);
            }
            Create {
                cred,
                parent,
                name,
                mode,
                layout,
                exclusive,
            } => {
                cred.encode(&mut w);
                parent.encode(&mut w);
                name.encode(&mut w);
                w.u32(*mode);
                layout.encode(&mut w);
                w.bool(*exclusive);
            }
            Readdir {
                cred,
                dir,
                after,
                max_entries,
            }
            | ReaddirPlus {
                cred,
                dir,
                after,
                max_entries,
            } => {
                cred.encode(&mut w);
                dir.encode(&mut w);
                after.encode(&mut w);
                w.u32(*max_entries);
            }
            Rename {
                cred,
                src_parent,
                src_name,
                dst_parent,
                dst_name,
                keep,
            } => {
                cred.encode(&mut w);
                src_parent.encode(&mut w);
                src_name.encode(&mut w);
                dst_parent.encode(&mut w);
                dst_name.encode(&mut w);
                w.opt(keep);
            }
            RenameExchange {
                cred,
                a_parent,
                a_name,
                b_parent,
                b_name,
            } => {
                cred.encode(&mut w);
                a_parent.encode(&mut w);
                a_name.encode(&mut w);
                b_parent.encode(&mut w);
                b_name.encode(&mut w);
            }
            RenameNoReplace {
                cred,
                src_parent,
                src_name,
                dst_parent,
                dst_name,
            } => {
                cred.encode(&mut w);
                src_parent.encode(&mut w);
                src_name.encode(&mut w);
                dst_parent.encode(&mut w);
                dst_name.encode(&mut w);
            }
            Statfs { cred } => cred.encode(&mut w),
            SetDirLayout { cred, dir, layout } => {
                cred.encode(&mut w);
                dir.encode(&mut w);
                w.opt(layout);
            }
            Symlink {
                cred,
                parent,
                name,
                target,
            } => {
                cred.encode(&mut w);
                parent.encode(&mut w);
                name.encode(&mut w);
                target.encode(&mut w);
            }
            ObjCreate { inodes } | ObjRemove { inodes } | ObjPrecreate { inodes } => w.seq(inodes),
            ObjTimes { inodes, mtime } => {
                w.seq(inodes);
                mtime.encode(&mut w);
            }
            Write {
                inode,
                striping,
                ranges,
            }
            | Read {
                inode,
                striping,
                ranges,
            } => {
                inode.encode(&mut w);
                striping.encode(&mut w);
                w.seq(ranges);
            }
            Sync { inode } => inode.encode(&mut w),
            Extents { items } => w.seq(items),
            Truncate {
                inode,
                striping,
                size,
            } => {
                inode.encode(&mut w);
                striping.encode(&mut w);
                w.u64(*size);
            }
            RegisterView { view } => w.bytes(&view.encode()),
            ReleaseView { view } => view.encode(&mut w),
            WriteView {
                inode,
                striping,
                view,
                view_offset,
                len,
            }
            | ReadView {
                inode,
                striping,
                view,
                view_offset,
                len,
            } => {
                inode.encode(&mut w);
                striping.encode(&mut w);
                view.encode(&mut w);
                w.u64(*view_offset);
                w.u64(*len);
            }
            AppendLock { inode } => inode.encode(&mut w),
            AppendUnlock { inode, token } => {
                inode.encode(&mut w);
                w.u64(*token);
            }
            Revalidate { cred, steps } => {
                cred.encode(&mut w);
                w.seq(steps);
            }
            Release { session, inode } => {
                w.u64(*session);
                inode.encode(&mut w);
            }
            RenewSession { session } => w.u64(*session),
            FileLock(lock) | FileLockReclaim(lock) => lock.encode(&mut w),
            // As first defined, without the pid.
            FileLockTest(lock) => {
                w.u64(lock.session);
                w.u64(lock.owner);
                lock.inode.encode(&mut w);
                lock.kind.encode(&mut w);
                w.u64(lock.start);
                w.u64(lock.end);
            }
            LockSession { session } => w.u64(*session),
            LockReclaimComplete { session, incarnation } => {
                w.u64(*session);
                w.u64(*incarnation);
            }
            LockSessionEnd { session } => w.u64(*session),
            CommitMetadata { wait } => w.bool(*wait),
            MarkStale { cred, inode, server } => {
                cred.encode(&mut w);
                inode.encode(&mut w);
                server.encode(&mut w);
            }
            Link {
                cred,
                inode,
                parent,
                name,
            } => {
                cred.encode(&mut w);
                inode.encode(&mut w);
                parent.encode(&mut w);
                name.encode(&mut w);
            }
            Mknod {
                cred,
                parent,
                name,
                kind,
                mode,
                rdev,
            } => {
                cred.encode(&mut w);
                parent.encode(&mut w);
                name.encode(&mut w);
                kind.encode(&mut w);
                w.u32(*mode);
                w.u64(*rdev);
            }
            SetXattr {
                cred,
                inode,
                name,
                value,
                how,
            } => {
                cred.encode(&mut w);
                inode.encode(&mut w);
                name.encode(&mut w);
                w.bytes(value);
                how.encode(&mut w);
            }
            GetXattr { cred, inode, name } | RemoveXattr { cred, inode, name } => {
                cred.encode(&mut w);
                inode.encode(&mut w);
                name.encode(&mut w);
            }
            ListXattr { cred, inode } => {
                cred.encode(&mut w);
                inode.encode(&mut w);
            }
            ObjStat { items } | ObjStamp { items } => w.seq(items),
            SharedPointerSince {
                inode,
                open,
                epoch,
                incarnation,
                op,
            } => {
                inode.encode(&mut w);
                w.u64(*open);
                w.u64(*epoch);
                w.u64(*incarnation);
                op.encode(&mut w);
            }
            SharedPointer {
                inode,
                open,
                epoch,
                op,
            } => {
                inode.encode(&mut w);
                w.u64(*open);
                w.u64(*epoch);
                op.encode(&mut w);
            }
            Allocate {
                inode,
                striping,
                offset,
                len,
                mode,
            } => {
                inode.encode(&mut w);
                striping.encode(&mut w);
                w.u64(*offset);
                w.u64(*len);
                w.u32(*mode);
            }
            PresentCapability { cap, reset } => {
                cap.encode(&mut w);
                w.bool(*reset);
            }
            GrantCapability { cred, inode, rights } => {
                cred.encode(&mut w);
                inode.encode(&mut w);
                w.u8(*rights);
            }
            RevokeCapabilities { inodes, at_ms } => {
                w.seq(inodes);
                w.u64(*at_ms);
            }
            VerifyCapability { cap } => cap.encode(&mut w),
        }
        w.bytes
    }

    /// Decodes a request body for `opcode`; the whole body must be consumed.
    /// The body of a `ShmCall` carrying `request`, without building the call (the
    /// client wraps its requests this way, without cloning them).
    pub fn encode_shm_call(offset: u64, len: u64, data_len: u64, request: &Request) -> Vec<u8> {
        let mut w = Writer::default();
        w.u64(offset);
        w.u64(len);
        w.u64(data_len);
        w.u16(request.opcode() as u16);
        w.bytes.extend_from_slice(&request.encode_body());
        w.bytes
    }

    /// The body of a `ShmScatter` carrying `request` (see `encode_shm_call`).
    pub fn encode_shm_scatter(pieces: &[(u64, u64)], request: &Request) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(pieces.len() as u32);
        for &(offset, len) in pieces {
            w.u64(offset);
            w.u64(len);
        }
        w.u16(request.opcode() as u16);
        w.bytes.extend_from_slice(&request.encode_body());
        w.bytes
    }

    pub fn decode(opcode: u16, body: &[u8]) -> Result<Request, DecodeError> {
        let mut r = Reader::new(body);
        let r = &mut r;
        let req = match opcode {
            1 => Request::Hello { client: r.string()? },
            2 => Request::ServerInfo,
            3 => Request::Authenticate {
                nonce: read_fixed(r, "nonce length")?,
                identity: Identity::decode(r)?,
                proof: read_fixed(r, "proof length")?,
            },
            10 => Request::GetCluster,
            11 => Request::Resolve {
                cred: Cred::decode(r)?,
                path: r.string()?,
            },
            12 => Request::Lookup {
                cred: Cred::decode(r)?,
                parent: InodeId::decode(r)?,
                name: Name::decode(r)?,
            },
            13 => Request::GetAttr {
                cred: Cred::decode(r)?,
                inode: InodeId::decode(r)?,
            },
            14 => Request::SetAttr {
                cred: Cred::decode(r)?,
                inode: InodeId::decode(r)?,
                changes: SetAttr::decode(r)?,
            },
            15 => Request::Mkdir {
                cred: Cred::decode(r)?,
                parent: InodeId::decode(r)?,
                name: Name::decode(r)?,
                mode: r.u32()?,
            },
            16 => Request::Create {
                cred: Cred::decode(r)?,
                parent: InodeId::decode(r)?,
                name: Name::decode(r)?,
                mode: r.u32()?,
                layout: LayoutRequest::decode(r)?,
                exclusive: r.bool()?,
            },
            17 => Request::Readdir {
                cred: Cred::decode(r)?,
                dir: InodeId::decode(r)?,
                after: Name::decode(r)?,
                max_entries: r.u32()?,
            },
            74 => Request::ReaddirPlus {
                cred: Cred::decode(r)?,
                dir: InodeId::decode(r)?,
                after: Name::decode(r)?,
                max_entries: r.u32()?,
            },
            18 => Request::Unlink {
                cred: Cred::decode(r)?,
                parent: InodeId::decode(r)?,
                name: Name::decode(r)?,
                keep: r.opt()?,
            },
            19 => Request::Rmdir {
                cred: Cred::decode(r)?,
                parent: InodeId::decode(r)?,
                name: Name::decode(r)?,
            },
            20 => Request::Rename {
                cred: Cred::decode(r)?,
                src_parent: InodeId::decode(r)?,
                src_name: Name::decode(r)?,
                dst_parent: InodeId::decode(r)?,
                dst_name: Name::decode(r)?,
                keep: r.opt()?,
            },
            188 => Request::RenameExchange {
                cred: Cred::decode(r)?,
                a_parent: InodeId::decode(r)?,
                a_name: Name::decode(r)?,
                b_parent: InodeId::decode(r)?,
                b_name: Name::decode(r)?,
            },
            189 => Request::RenameNoReplace {
                cred: Cred::decode(r)?,
                src_parent: InodeId::decode(r)?,
                src_name: Name::decode(r)?,
                dst_parent: InodeId::decode(r)?,
                dst_name: Name::decode(r)?,
            },
            21 => Request::Statfs {
                cred: Cred::decode(r)?,
            },
            22 => Request::SetDirLayout {
                cred: Cred::decode(r)?,
                dir: InodeId::decode(r)?,
                layout: r.opt()?,
            },
            23 => Request::Symlink {
                cred: Cred::decode(r)?,
                parent: InodeId::decode(r)?,
                name: Name::decode(r)?,
                target: Name::decode(r)?,
            },
            24 => Request::Readlink {
                cred: Cred::decode(r)?,
                inode: InodeId::decode(r)?,
            },
            40 => Request::ObjCreate {
                inodes: bounded(r.seq()?, BATCH_INODES_MAX, "inode batch")?,
            },
            41 => Request::ObjRemove {
                inodes: bounded(r.seq()?, BATCH_INODES_MAX, "inode batch")?,
            },
            73 => Request::ObjPrecreate {
                inodes: bounded(r.seq()?, BATCH_INODES_MAX, "inode batch")?,
            },
            42 | 43 => {
                let inode = InodeId::decode(r)?;
                let striping = Striping::decode(r)?;
                let ranges = bounded(r.seq()?, RANGES_MAX, "range list")?;
                if opcode == 42 {
                    Request::Write {
                        inode,
                        striping,
                        ranges,
                    }
                } else {
                    Request::Read {
                        inode,
                        striping,
                        ranges,
                    }
                }
            }
            44 => Request::Sync {
                inode: InodeId::decode(r)?,
            },
            45 => Request::Extents {
                items: bounded(r.seq()?, BATCH_INODES_MAX, "extent batch")?,
            },
            46 => Request::Truncate {
                inode: InodeId::decode(r)?,
                striping: Striping::decode(r)?,
                size: r.u64()?,
            },
            47 => Request::IoStatfs,
            48 => {
                let bytes = r.bytes_max(VIEW_BYTES_MAX)?;
                let view = View::decode(bytes).map_err(|e| DecodeError::View(e.to_string()))?;
                Request::RegisterView { view }
            }
            49 => Request::ReleaseView {
                view: ViewId::decode(r)?,
            },
            50 | 51 => {
                let inode = InodeId::decode(r)?;
                let striping = Striping::decode(r)?;
                let view = ViewId::decode(r)?;
                let view_offset = r.u64()?;
                let len = r.u64()?;
                if view_offset.checked_add(len).is_none() {
                    return Err(DecodeError::Invalid {
                        what: "view interval end (offset + length overflows)",
                        value: view_offset,
                    });
                }
                if opcode == 50 {
                    Request::WriteView {
                        inode,
                        striping,
                        view,
                        view_offset,
                        len,
                    }
                } else {
                    Request::ReadView {
                        inode,
                        striping,
                        view,
                        view_offset,
                        len,
                    }
                }
            }
            80 => {
                let file = CacheFile::decode(r)?;
                let inner = r.u16()?;
                if ![Opcode::Read, Opcode::Write, Opcode::ReadView, Opcode::WriteView]
                    .iter()
                    .any(|o| *o as u16 == inner)
                {
                    return Err(DecodeError::Invalid {
                        what: "request through a cache manager (only reads and writes are)",
                        value: inner as u64,
                    });
                }
                let request = Request::decode(inner, r.take_rest())?;
                Request::ViaCache {
                    file,
                    request: Box::new(request),
                }
            }
            87 => {
                let file = CacheFile::decode(r)?;
                let pattern = crate::pattern::AccessPattern::decode(r)?;
                let inner = r.u16()?;
                if ![Opcode::Read, Opcode::ReadView]
                    .iter()
                    .any(|o| *o as u16 == inner)
                {
                    return Err(DecodeError::Invalid {
                        what: "request with an access pattern (only reads carry one)",
                        value: inner as u64,
                    });
                }
                let request = Request::decode(inner, r.take_rest())?;
                Request::ViaCacheAware {
                    file,
                    pattern: std::sync::Arc::new(pattern),
                    request: Box::new(request),
                }
            }
            81 => Request::CacheFlush {
                file: CacheFile::decode(r)?,
            },
            82 => Request::CacheTruncate {
                file: CacheFile::decode(r)?,
                size: r.u64()?,
            },
            187 => Request::CachePunch {
                file: CacheFile::decode(r)?,
                offset: r.u64()?,
                len: r.u64()?,
            },
            83 => Request::CacheExtents {
                inodes: bounded(r.seq()?, BATCH_INODES_MAX, "inode batch")?,
            },
            84 => Request::CacheClose {
                inode: InodeId::decode(r)?,
            },
            85 => Request::CacheStats,
            130 => Request::Metrics { text: r.bool()? },
            120 => Request::ExtentLock {
                inode: InodeId::decode(r)?,
                exclusive: r.bool()?,
                attempt: r.u32()?,
                ranges: bounded(r.seq()?, LOCK_RANGES_MAX, "locked ranges")?,
            },
            121 => Request::ExtentUnlock {
                inode: InodeId::decode(r)?,
                token: r.u64()?,
            },
            122 => Request::LockStats,
            140 => Request::ShmAttach { bytes: r.u64()? },
            141 => {
                let offset = r.u64()?;
                let len = r.u64()?;
                let data_len = r.u64()?;
                if offset.checked_add(len).is_none() || data_len > len {
                    return Err(DecodeError::Invalid {
                        what: "shared-memory region (data longer than the region, or past 2^64)",
                        value: data_len,
                    });
                }
                let inner = r.u16()?;
                if [
                    Opcode::Hello,
                    Opcode::Authenticate,
                    Opcode::ShmAttach,
                    Opcode::ShmCall,
                ]
                .iter()
                .any(|o| *o as u16 == inner)
                {
                    return Err(DecodeError::Invalid {
                        what: "request through shared memory (not a handshake or shared-memory request)",
                        value: inner as u64,
                    });
                }
                Request::ShmCall {
                    offset,
                    len,
                    data_len,
                    request: Box::new(Request::decode(inner, r.take_rest())?),
                }
            }
            186 => Request::ShmAttachPool { bytes: r.u64()? },
            190 => {
                let count = r.u32()? as usize;
                if count == 0 || count > SCATTER_PIECES_MAX {
                    return Err(DecodeError::Invalid {
                        what: "number of pool pieces (1 to SCATTER_PIECES_MAX)",
                        value: count as u64,
                    });
                }
                let mut pieces = Vec::with_capacity(count.min(r.remaining() / 16));
                for _ in 0..count {
                    let (offset, len) = (r.u64()?, r.u64()?);
                    if len == 0 || offset.checked_add(len).is_none() {
                        return Err(DecodeError::Invalid {
                            what: "pool piece (empty, or past 2^64)",
                            value: offset,
                        });
                    }
                    pieces.push((offset, len));
                }
                let mut sorted = pieces.clone();
                sorted.sort_unstable();
                if let Some(w) = sorted.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
                    return Err(DecodeError::Invalid {
                        what: "pool pieces that overlap, at pool offset",
                        value: w[1].0,
                    });
                }
                let inner = r.u16()?;
                if inner != Opcode::Read as u16 && inner != Opcode::ReadView as u16 {
                    return Err(DecodeError::Invalid {
                        what: "request placed into the pool (only Read and ReadView)",
                        value: inner as u64,
                    });
                }
                Request::ShmScatter {
                    pieces,
                    request: Box::new(Request::decode(inner, r.take_rest())?),
                }
            }
            88 => Request::CacheCioStats,
            86 => Request::CacheDrop {
                inodes: bounded(r.seq()?, BATCH_INODES_MAX, "inode batch")?,
            },
            60 => Request::AppendLock {
                inode: InodeId::decode(r)?,
            },
            61 => Request::AppendUnlock {
                inode: InodeId::decode(r)?,
                token: r.u64()?,
            },
            62 => Request::Revalidate {
                cred: Cred::decode(r)?,
                steps: bounded(r.seq()?, REVALIDATE_STEPS_MAX, "revalidated path")?,
            },
            63 => Request::Release {
                session: r.u64()?,
                inode: InodeId::decode(r)?,
            },
            64 => Request::RenewSession { session: r.u64()? },
            180 => Request::FileLock(LockRequest::decode(r)?),
            181 => Request::FileLockTest(LockRequest {
                session: r.u64()?,
                owner: r.u64()?,
                inode: InodeId::decode(r)?,
                pid: 0,
                kind: LockKind::decode(r)?,
                start: r.u64()?,
                end: r.u64()?,
            }),
            182 => Request::FileLockReclaim(LockRequest::decode(r)?),
            183 => Request::LockSession { session: r.u64()? },
            184 => Request::LockReclaimComplete {
                session: r.u64()?,
                incarnation: r.u64()?,
            },
            185 => Request::LockSessionEnd { session: r.u64()? },
            200 => Request::CommitMetadata { wait: r.bool()? },
            230 => Request::MarkStale {
                cred: Cred::decode(r)?,
                inode: InodeId::decode(r)?,
                server: ServerId::decode(r)?,
            },
            65 => Request::Link {
                cred: Cred::decode(r)?,
                inode: InodeId::decode(r)?,
                parent: InodeId::decode(r)?,
                name: Name::decode(r)?,
            },
            66 => Request::Mknod {
                cred: Cred::decode(r)?,
                parent: InodeId::decode(r)?,
                name: Name::decode(r)?,
                kind: FileKind::decode(r)?,
                mode: r.u32()?,
                rdev: r.u64()?,
            },
            67 => Request::SetXattr {
                cred: Cred::decode(r)?,
                inode: InodeId::decode(r)?,
                name: Name::decode(r)?,
                value: r.bytes_max(XATTR_VALUE_BYTES_MAX)?.to_vec(),
                how: XattrSet::decode(r)?,
            },
            68 => Request::GetXattr {
                cred: Cred::decode(r)?,
                inode: InodeId::decode(r)?,
                name: Name::decode(r)?,
            },
            69 => Request::ListXattr {
                cred: Cred::decode(r)?,
                inode: InodeId::decode(r)?,
            },
            70 => Request::RemoveXattr {
                cred: Cred::decode(r)?,
                inode: InodeId::decode(r)?,
                name: Name::decode(r)?,
            },
            71 => Request::ObjStat {
                items: bounded(r.seq()?, BATCH_INODES_MAX, "object batch")?,
            },
            151 => Request::ObjStamp {
                items: bounded(r.seq()?, BATCH_INODES_MAX, "object batch")?,
            },
            160 => Request::ObjTimes {
                inodes: bounded(r.seq()?, BATCH_INODES_MAX, "object batch")?,
                mtime: Timespec::decode(r)?,
            },
            72 => {
                let allocate = Request::Allocate {
                    inode: InodeId::decode(r)?,
                    striping: Striping::decode(r)?,
                    offset: r.u64()?,
                    len: r.u64()?,
                    mode: r.u32()?,
                };
                if let Request::Allocate { offset, len, .. } = allocate {
                    weft_layout::stripe::check_range(offset, len).map_err(|_| DecodeError::Invalid {
                        what: "allocated range end (offset + length overflows)",
                        value: offset,
                    })?;
                }
                allocate
            }
            125 => Request::SharedPointer {
                inode: InodeId::decode(r)?,
                open: r.u64()?,
                epoch: r.u64()?,
                op: SharedOp::decode(r)?,
            },
            100 => Request::PresentCapability {
                cap: Capability::decode(r)?,
                reset: r.bool()?,
            },
            101 => Request::GrantCapability {
                cred: Cred::decode(r)?,
                inode: InodeId::decode(r)?,
                rights: {
                    let rights = r.u8()?;
                    if rights == 0 || rights & !(capability::rights::READ | capability::rights::WRITE) != 0 {
                        return Err(DecodeError::Invalid {
                            what: "requested capability rights (read, write or both)",
                            value: rights as u64,
                        });
                    }
                    rights
                },
            },
            102 => Request::RevokeCapabilities {
                inodes: bounded(r.seq()?, BATCH_INODES_MAX, "inode batch")?,
                at_ms: r.u64()?,
            },
            103 => Request::VerifyCapability {
                cap: Capability::decode(r)?,
            },
            150 => Request::SharedPointerSince {
                inode: InodeId::decode(r)?,
                open: r.u64()?,
                epoch: r.u64()?,
                incarnation: r.u64()?,
                op: SharedOp::decode(r)?,
            },
            152 => {
                let inner = r.u16()?;
                if !Request::MAKES_NAMES.iter().any(|o| *o as u16 == inner) {
                    return Err(DecodeError::Invalid {
                        what: "request answered with its directory (only create, mkdir, symlink, mknod and link are)",
                        value: inner as u64,
                    });
                }
                Request::WithParent {
                    request: Box::new(Request::decode(inner, r.take_rest())?),
                }
            }
            191 => Request::CreateGranted {
                request: Box::new(Request::decode(Opcode::Create as u16, r.take_rest())?),
            },
            192 => {
                let cred = Cred::decode(r)?;
                let parent = InodeId::decode(r)?;
                let names: Vec<Name> = r.seq()?;
                if names.len() > LOOKUP_MANY_MAX {
                    return Err(DecodeError::TooLarge {
                        what: "names of one lookup-many",
                        len: names.len() as u64,
                        max: LOOKUP_MANY_MAX as u64,
                    });
                }
                Request::LookupMany { cred, parent, names }
            }
            220 => {
                let inner = r.u16()?;
                if !Request::VOUCHABLE.iter().any(|o| *o as u16 == inner) {
                    return Err(DecodeError::Invalid {
                        what: "request answered with a vouch (only lookup, revalidate and getattr are)",
                        value: inner as u64,
                    });
                }
                Request::Vouched {
                    request: Box::new(Request::decode(inner, r.take_rest())?),
                }
            }
            221 => Request::ReleaseWrites {
                releases: bounded(r.seq()?, RELEASE_WRITES_MAX, "write releases")?,
            },
            210 => {
                let client = r.u64()?;
                let slot = r.u32()?;
                let xid = r.u64()?;
                let replay = r.u64()?;
                let made = r.opt()?;
                let inner = r.u16()?;
                let wrapped = [Opcode::WithParent, Opcode::CreateGranted];
                if !Request::TRACKED
                    .iter()
                    .chain(&wrapped)
                    .any(|o| *o as u16 == inner)
                {
                    return Err(DecodeError::Invalid {
                        what: "tracked request (only namespace changes are)",
                        value: inner as u64,
                    });
                }
                Request::Tracked {
                    client,
                    slot,
                    xid,
                    replay,
                    made,
                    request: Box::new(Request::decode(inner, r.take_rest())?),
                }
            }
            211 => Request::ReplayDone { client: r.u64()? },
            other => return Err(DecodeError::UnknownOpcode(other)),
        };
        r.finish()?;
        Ok(req)
    }

    /// The requests a `WithParent` may carry: those that make a name in a directory.
    pub const MAKES_NAMES: [Opcode; 5] = [
        Opcode::Create,
        Opcode::Mkdir,
        Opcode::Symlink,
        Opcode::Mknod,
        Opcode::Link,
    ];

    /// The requests a `Vouched` may carry: those answered with one inode's attributes.
    pub const VOUCHABLE: [Opcode; 3] = [Opcode::Lookup, Opcode::Revalidate, Opcode::GetAttr];
    /// The requests a client sends `Tracked` (alone or in a `WithParent` or
    /// `CreateGranted`): those that change the namespace in the manager's store.
    pub const TRACKED: [Opcode; 15] = [
        Opcode::Create,
        Opcode::Mkdir,
        Opcode::Symlink,
        Opcode::Mknod,
        Opcode::Link,
        Opcode::SetAttr,
        Opcode::Unlink,
        Opcode::Rmdir,
        Opcode::Rename,
        Opcode::RenameExchange,
        Opcode::RenameNoReplace,
        Opcode::SetDirLayout,
        Opcode::SetXattr,
        Opcode::RemoveXattr,
        Opcode::Release,
    ];

    /// Whether a client sends this request `Tracked` (see `TRACKED`).
    pub fn is_tracked(&self) -> bool {
        let op = self.meta_request().opcode();
        Request::TRACKED.contains(&op)
    }

    /// The request a manager carries out: the request itself, or the one a
    /// `WithParent` (or `Tracked`) carries (what metrics count it as).
    pub fn meta_request(&self) -> &Request {
        match self {
            Request::WithParent { request }
            | Request::CreateGranted { request }
            | Request::Vouched { request } => request,
            Request::Tracked { request, .. } => request.meta_request(),
            other => other,
        }
    }

    /// The file a data request is about and the request an io server would get: the
    /// request itself, or the one a `ViaCache` carries.
    pub fn data_request(&self) -> &Request {
        match self {
            Request::ViaCache { request, .. } | Request::ViaCacheAware { request, .. } => request,
            other => other,
        }
    }
}

fn bounded<T>(items: Vec<T>, max: usize, what: &'static str) -> Result<Vec<T>, DecodeError> {
    if items.len() > max {
        Err(DecodeError::TooLarge {
            what,
            len: items.len() as u64,
            max: max as u64,
        })
    } else {
        Ok(items)
    }
}

impl Wire for Response {
    fn encode(&self, w: &mut Writer) {
        use Response::*;
        match self {
            Hello {
                server_id,
                roles,
                incarnation,
                proof,
            } => {
                w.u8(1);
                server_id.encode(w);
                w.u32(*roles);
                w.u64(*incarnation);
                w.bytes(proof);
            }
            Challenge { nonce } => {
                w.u8(32);
                w.bytes(nonce);
            }
            MungeChallenge { nonce } => {
                w.u8(41);
                w.bytes(nonce);
            }
            ServerInfo {
                protocol_version,
                build,
            } => {
                w.u8(12);
                w.u16(*protocol_version);
                w.str(build);
            }
            Cluster(c) => {
                w.u8(2);
                c.encode(w);
            }
            Attr(a) => {
                w.u8(3);
                a.encode(w);
            }
            Entries { entries, more } => {
                w.u8(4);
                w.seq(entries);
                w.bool(*more);
            }
            EntriesPlus { entries, more } => {
                w.u8(21);
                w.seq(entries);
                w.bool(*more);
            }
            Done => w.u8(5),
            Statfs(s) => {
                w.u8(6);
                s.encode(w);
            }
            Link(target) => {
                w.u8(7);
                target.encode(w);
            }
            Bytes(n) => {
                w.u8(8);
                w.u64(*n);
            }
            Extents(v) => {
                w.u8(9);
                w.seq(v);
            }
            IoStatfs(s) => {
                w.u8(10);
                s.encode(w);
            }
            View(id) => {
                w.u8(11);
                id.encode(w);
            }
            CacheCioStats(stats) => {
                w.u8(17);
                stats.encode(w);
            }
            CacheStats(stats) => {
                w.u8(13);
                stats.encode(w);
            }
            Token(token) => {
                w.u8(14);
                w.u64(*token);
            }
            Unlinked { kept } => {
                w.u8(15);
                w.opt(kept);
            }
            Renamed { moved, kept } => {
                w.u8(16);
                moved.encode(w);
                w.opt(kept);
            }
            Value(value) => {
                w.u8(18);
                w.bytes(value);
            }
            Names(names) => {
                w.u8(19);
                w.seq(names);
            }
            ObjStats(stats) => {
                w.u8(20);
                w.seq(stats);
            }
            ObjStamps(stamps) => {
                w.u8(65);
                w.seq(stamps);
            }
            Metrics { url } => {
                w.u8(55);
                w.str(url);
            }
            LockStats(stats) => {
                w.u8(50);
                stats.encode(w);
            }
            Position(value) => {
                w.u8(53);
                w.u64(*value);
            }
            LockHolder(holder) => {
                w.u8(76);
                w.opt(holder);
            }
            LockState(state) => {
                w.u8(77);
                state.encode(w);
            }
            ShmPlaced { data_len, response } => {
                w.u8(60);
                w.u64(*data_len);
                response.encode(w);
            }
            Capability(cap) => {
                w.u8(40);
                cap.encode(w);
            }
            Made { attr, parent } => {
                w.u8(66);
                attr.encode(w);
                parent.encode(w);
            }
            Committed(info) => {
                w.u8(67);
                info.encode(w);
            }
            MadeGranted {
                attr,
                parent,
                capability,
            } => {
                w.u8(68);
                attr.encode(w);
                parent.encode(w);
                w.opt(capability);
            }
            AttrVouched { attr, vouch } => {
                w.u8(85);
                attr.encode(w);
                w.opt(vouch);
            }
            Tracked {
                seq,
                durable_seq,
                epoch,
                response,
            } => {
                w.u8(80);
                w.u64(*seq);
                w.u64(*durable_seq);
                w.u64(*epoch);
                response.encode(w);
            }
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let tag = r.u8()?;
        Response::decode_tagged(tag, r)
    }
}

impl Response {
    fn decode_tagged(tag: u8, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(match tag {
            1 => Response::Hello {
                server_id: ServerId::decode(r)?,
                roles: r.u32()?,
                incarnation: r.u64()?,
                proof: read_fixed(r, "proof length")?,
            },
            32 => Response::Challenge {
                nonce: read_fixed(r, "nonce length")?,
            },
            41 => Response::MungeChallenge {
                nonce: read_fixed(r, "nonce length")?,
            },
            2 => Response::Cluster(ClusterInfo::decode(r)?),
            3 => Response::Attr(Attr::decode(r)?),
            4 => Response::Entries {
                entries: r.seq()?,
                more: r.bool()?,
            },
            21 => Response::EntriesPlus {
                entries: r.seq()?,
                more: r.bool()?,
            },
            5 => Response::Done,
            6 => Response::Statfs(MetaStatfs::decode(r)?),
            7 => Response::Link(Name::decode(r)?),
            8 => Response::Bytes(r.u64()?),
            9 => Response::Extents(r.seq()?),
            10 => Response::IoStatfs(IoStatfs::decode(r)?),
            11 => Response::View(ViewId::decode(r)?),
            12 => Response::ServerInfo {
                protocol_version: r.u16()?,
                build: r.string()?,
            },
            13 => Response::CacheStats(CacheStats::decode(r)?),
            17 => Response::CacheCioStats(CioStats::decode(r)?),
            14 => Response::Token(r.u64()?),
            15 => Response::Unlinked { kept: r.opt()? },
            16 => Response::Renamed {
                moved: Attr::decode(r)?,
                kept: r.opt()?,
            },
            18 => Response::Value(r.bytes_max(XATTR_VALUE_BYTES_MAX)?.to_vec()),
            19 => Response::Names(r.seq()?),
            20 => Response::ObjStats(r.seq()?),
            65 => Response::ObjStamps(r.seq()?),
            55 => Response::Metrics { url: r.string()? },
            50 => Response::LockStats(LockStats::decode(r)?),
            53 => Response::Position(r.u64()?),
            76 => Response::LockHolder(r.opt()?),
            77 => Response::LockState(LockState::decode(r)?),
            60 => {
                let data_len = r.u64()?;
                // Refused before recursing: nesting must not grow the stack.
                let inner = r.u8()?;
                if inner == 60 {
                    return Err(DecodeError::Invalid {
                        what: "response tag inside ShmPlaced",
                        value: 60,
                    });
                }
                Response::ShmPlaced {
                    data_len,
                    response: Box::new(Response::decode_tagged(inner, r)?),
                }
            }
            40 => Response::Capability(Capability::decode(r)?),
            66 => Response::Made {
                attr: Attr::decode(r)?,
                parent: Attr::decode(r)?,
            },
            67 => Response::Committed(CommitInfo::decode(r)?),
            68 => Response::MadeGranted {
                attr: Attr::decode(r)?,
                parent: Attr::decode(r)?,
                capability: r.opt()?,
            },
            85 => Response::AttrVouched {
                attr: Attr::decode(r)?,
                vouch: r.opt()?,
            },
            80 => {
                let (seq, durable_seq, epoch) = (r.u64()?, r.u64()?, r.u64()?);
                let inner = r.u8()?;
                if inner == 80 || inner == 60 {
                    return Err(DecodeError::Invalid {
                        what: "response tag inside Tracked",
                        value: inner as u64,
                    });
                }
                Response::Tracked {
                    seq,
                    durable_seq,
                    epoch,
                    response: Box::new(Response::decode_tagged(inner, r)?),
                }
            }
            v => {
                return Err(DecodeError::Invalid {
                    what: "response tag",
                    value: v as u64,
                })
            }
        })
    }
}

/// A response body: success with a response, or an error.
pub fn encode_result(result: &Result<Response, WireError>) -> Vec<u8> {
    let mut w = Writer::default();
    match result {
        Ok(resp) => {
            w.u8(0);
            resp.encode(&mut w);
        }
        Err(e) => {
            w.u8(1);
            e.encode(&mut w);
        }
    }
    w.bytes
}

pub fn decode_result(body: &[u8]) -> Result<Result<Response, WireError>, DecodeError> {
    let mut r = Reader::new(body);
    let out = match r.u8()? {
        0 => Ok(Response::decode(&mut r)?),
        1 => Err(WireError::decode(&mut r)?),
        v => {
            return Err(DecodeError::Invalid {
                what: "result tag",
                value: v as u64,
            })
        }
    };
    r.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_layout::Layout;

    fn test_capability() -> Capability {
        Capability {
            inode: InodeId(77),
            rights: capability::rights::WRITE,
            issued_ms: 1,
            expiry_ms: u64::MAX,
            mac: std::array::from_fn(|i| i as u8),
        }
    }

    #[test]
    fn capabilities_with_unknown_rights_or_short_macs_are_refused() {
        let mut cap = test_capability();
        for rights in [0u8, 8, 0x80, 0xff] {
            cap.rights = rights;
            let body = Request::PresentCapability {
                cap: cap.clone(),
                reset: false,
            }
            .encode_body();
            assert!(
                Request::decode(Opcode::PresentCapability as u16, &body).is_err(),
                "{rights}"
            );
        }
        // A client may ask for read and write only, never for a server's rights.
        for rights in [0u8, capability::rights::SERVER, 0x10] {
            let body = Request::GrantCapability {
                cred: cred(),
                inode: InodeId(3),
                rights,
            }
            .encode_body();
            assert!(
                Request::decode(Opcode::GrantCapability as u16, &body).is_err(),
                "{rights}"
            );
        }
        // A MAC of another length.
        let mut w = Writer::default();
        InodeId(1).encode(&mut w);
        w.u8(capability::rights::READ);
        w.u64(0);
        w.u64(1);
        w.bytes(&[0u8; 31]);
        w.bool(false);
        assert!(Request::decode(Opcode::PresentCapability as u16, &w.bytes).is_err());
    }

    fn cred() -> Cred {
        Cred {
            uid: 1000,
            gid: 100,
            groups: vec![4, 27],
        }
    }

    #[test]
    fn every_request_round_trips() {
        let s = Striping {
            stripe_size_bytes: 65536,
            stripe_count: 4,
            server_index: 2,
        };
        let reqs = vec![
            Request::Hello { client: "t".into() },
            Request::Authenticate {
                nonce: [1; NONCE_BYTES],
                identity: Identity::Cluster,
                proof: [2; PROOF_BYTES],
            },
            Request::ServerInfo,
            Request::GetCluster,
            Request::Resolve {
                cred: cred(),
                path: "/a/b".into(),
            },
            Request::Lookup {
                cred: cred(),
                parent: InodeId(5),
                name: "x".into(),
            },
            Request::GetAttr {
                cred: cred(),
                inode: InodeId(9),
            },
            Request::SetAttr {
                cred: cred(),
                inode: InodeId(9),
                changes: SetAttr {
                    mode: Some(0o600),
                    size: Some(77),
                    atime: Some(TimeSet::Now),
                    mtime: Some(TimeSet::At(Timespec { secs: -5, nanos: 7 })),
                    ..Default::default()
                },
            },
            Request::Mkdir {
                cred: cred(),
                parent: InodeId(1),
                name: "d".into(),
                mode: 0o755,
            },
            Request::Create {
                cred: cred(),
                parent: InodeId(1),
                name: "f".into(),
                mode: 0o644,
                layout: LayoutRequest {
                    cache: None,
                    stripe_size_bytes: Some(4096),
                    stripe_count: Some(2),
                    first_server: None,
                    redundancy: None,
                },
                exclusive: true,
            },
            Request::Readdir {
                cred: cred(),
                dir: InodeId(1),
                after: "m".into(),
                max_entries: 100,
            },
            Request::ReaddirPlus {
                cred: cred(),
                dir: InodeId(1),
                after: "z".into(),
                max_entries: 7,
            },
            Request::Unlink {
                cred: cred(),
                parent: InodeId(1),
                name: "f".into(),
                keep: Some(77),
            },
            Request::Rmdir {
                cred: cred(),
                parent: InodeId(1),
                name: "d".into(),
            },
            Request::Rename {
                cred: cred(),
                src_parent: InodeId(1),
                src_name: "a".into(),
                dst_parent: InodeId(2),
                dst_name: "b".into(),
                keep: None,
            },
            Request::RenameExchange {
                cred: cred(),
                a_parent: InodeId(1),
                a_name: "a".into(),
                b_parent: InodeId(2),
                b_name: "b".into(),
            },
            Request::RenameNoReplace {
                cred: cred(),
                src_parent: InodeId(1),
                src_name: "a".into(),
                dst_parent: InodeId(2),
                dst_name: "b".into(),
            },
            Request::Statfs { cred: cred() },
            Request::SetDirLayout {
                cred: cred(),
                dir: InodeId(3),
                layout: None,
            },
            Request::Symlink {
                cred: cred(),
                parent: InodeId(1),
                name: "l".into(),
                target: "/x".into(),
            },
            Request::Readlink {
                cred: cred(),
                inode: InodeId(4),
            },
            Request::ObjCreate {
                inodes: vec![InodeId(1), InodeId(2)],
            },
            Request::ObjRemove { inodes: vec![] },
            Request::ObjPrecreate {
                inodes: vec![InodeId(7), InodeId(9)],
            },
            Request::Write {
                inode: InodeId(3),
                striping: s,
                ranges: vec![Range { offset: 0, len: 10 }],
            },
            Request::Read {
                inode: InodeId(3),
                striping: s,
                ranges: vec![Range { offset: 5, len: 1 }],
            },
            Request::Sync { inode: InodeId(3) },
            Request::Extents {
                items: vec![(InodeId(3), s)],
            },
            Request::Truncate {
                inode: InodeId(3),
                striping: s,
                size: 1 << 33,
            },
            Request::IoStatfs,
            Request::RegisterView { view: strided_view() },
            Request::ReleaseView { view: ViewId(3) },
            Request::WriteView {
                inode: InodeId(3),
                striping: s,
                view: ViewId(1),
                view_offset: 100,
                len: 1 << 20,
            },
            Request::ReadView {
                inode: InodeId(3),
                striping: s,
                view: ViewId(u32::MAX),
                view_offset: 0,
                len: 7,
            },
            Request::ViaCache {
                file: cache_file(),
                request: Box::new(Request::WriteView {
                    inode: InodeId(3),
                    striping: s,
                    view: ViewId(2),
                    view_offset: 8,
                    len: 9,
                }),
            },
            Request::ViaCache {
                file: cache_file(),
                request: Box::new(Request::Read {
                    inode: InodeId(3),
                    striping: s,
                    ranges: vec![Range { offset: 1, len: 2 }],
                }),
            },
            Request::ViaCacheAware {
                file: cache_file(),
                pattern: std::sync::Arc::new(crate::pattern::tests::pattern()),
                request: Box::new(Request::ReadView {
                    inode: InodeId(3),
                    striping: s,
                    view: ViewId(2),
                    view_offset: 8,
                    len: 9,
                }),
            },
            Request::ViaCacheAware {
                file: cache_file(),
                pattern: std::sync::Arc::new(crate::pattern::tests::pattern()),
                request: Box::new(Request::Read {
                    inode: InodeId(3),
                    striping: s,
                    ranges: vec![Range { offset: 1, len: 2 }],
                }),
            },
            Request::CacheFlush { file: cache_file() },
            Request::CacheTruncate {
                file: cache_file(),
                size: 12,
            },
            Request::CachePunch {
                file: cache_file(),
                offset: 5,
                len: 70_000,
            },
            Request::CacheExtents {
                inodes: vec![InodeId(3), InodeId(4)],
            },
            Request::CacheClose { inode: InodeId(3) },
            Request::CacheStats,
            Request::CacheCioStats,
            Request::Metrics { text: true },
            Request::CacheDrop {
                inodes: vec![InodeId(5)],
            },
            Request::AppendLock { inode: InodeId(8) },
            Request::ShmAttach { bytes: 16 << 20 },
            Request::ShmCall {
                offset: 4096,
                len: 8192,
                data_len: 100,
                request: Box::new(Request::Write {
                    inode: InodeId(3),
                    striping: s,
                    ranges: vec![Range { offset: 0, len: 100 }],
                }),
            },
            Request::ShmAttachPool { bytes: 32 << 20 },
            Request::ShmScatter {
                pieces: vec![(8192, 100), (0, 4096)],
                request: Box::new(Request::Read {
                    inode: InodeId(3),
                    striping: s,
                    ranges: vec![Range { offset: 0, len: 4196 }],
                }),
            },
            Request::ExtentLock {
                inode: InodeId(8),
                exclusive: true,
                attempt: 3,
                ranges: vec![Range { offset: 0, len: 8 }, Range { offset: 64, len: 1 }],
            },
            Request::ExtentUnlock {
                inode: InodeId(8),
                token: u64::MAX,
            },
            Request::LockStats,
            Request::Release {
                session: 5,
                inode: InodeId(8),
            },
            Request::RenewSession { session: u64::MAX },
            Request::FileLock(LockRequest {
                session: 7,
                owner: u64::MAX,
                inode: InodeId(8),
                pid: 4242,
                kind: LockKind::Write,
                start: 10,
                end: u64::MAX,
            }),
            Request::FileLockTest(LockRequest {
                session: 7,
                owner: 1,
                inode: InodeId(8),
                pid: 0,
                kind: LockKind::Unlock,
                start: 0,
                end: 0,
            }),
            Request::FileLockReclaim(LockRequest {
                session: u64::MAX,
                owner: 3,
                inode: InodeId(9),
                pid: 1,
                kind: LockKind::Read,
                start: 0,
                end: 99,
            }),
            Request::LockSession { session: 12 },
            Request::LockReclaimComplete {
                session: 12,
                incarnation: u64::MAX,
            },
            Request::LockSessionEnd { session: 13 },
            Request::CommitMetadata { wait: true },
            Request::MarkStale {
                cred: cred(),
                inode: InodeId(9),
                server: ServerId(3),
            },
            Request::PresentCapability {
                cap: test_capability(),
                reset: true,
            },
            Request::GrantCapability {
                cred: cred(),
                inode: InodeId(9),
                rights: capability::rights::READ | capability::rights::WRITE,
            },
            Request::RevokeCapabilities {
                inodes: vec![InodeId(9), InodeId(u64::MAX)],
                at_ms: 1 << 41,
            },
            Request::VerifyCapability {
                cap: test_capability(),
            },
            Request::Link {
                cred: cred(),
                inode: InodeId(9),
                parent: InodeId(1),
                name: Name::new(b"\xff\xfe".to_vec()),
            },
            Request::Mknod {
                cred: cred(),
                parent: InodeId(1),
                name: "fifo".into(),
                kind: FileKind::Fifo,
                mode: 0o644,
                rdev: 0,
            },
            Request::SetXattr {
                cred: cred(),
                inode: InodeId(9),
                name: "user.x".into(),
                value: vec![0, 1, 2],
                how: XattrSet::Replace,
            },
            Request::GetXattr {
                cred: cred(),
                inode: InodeId(9),
                name: "trusted.y".into(),
            },
            Request::ListXattr {
                cred: cred(),
                inode: InodeId(9),
            },
            Request::RemoveXattr {
                cred: cred(),
                inode: InodeId(9),
                name: "user.x".into(),
            },
            Request::ObjStat {
                items: vec![(InodeId(3), s)],
            },
            Request::ObjStamp {
                items: vec![(InodeId(3), s), (InodeId(4), s)],
            },
            Request::ObjTimes {
                inodes: vec![InodeId(3), InodeId(9)],
                mtime: Timespec {
                    secs: 978_307_200,
                    nanos: 5,
                },
            },
            Request::Allocate {
                inode: InodeId(3),
                striping: s,
                offset: 4096,
                len: 1 << 20,
                mode: 1,
            },
            Request::AppendUnlock {
                inode: InodeId(8),
                token: 1 << 40,
            },
            Request::SharedPointer {
                inode: InodeId(9),
                open: u64::MAX,
                epoch: 2,
                op: SharedOp::FetchAdd(1 << 33),
            },
            Request::SharedPointer {
                inode: InodeId(9),
                open: 5,
                epoch: 0,
                op: SharedOp::Drop,
            },
            Request::SharedPointerSince {
                inode: InodeId(9),
                open: 5,
                epoch: 1,
                incarnation: u64::MAX - 3,
                op: SharedOp::Set(77),
            },
            Request::Revalidate {
                cred: cred(),
                steps: vec![
                    PathStep {
                        parent: InodeId(1),
                        name: "d".into(),
                        child: InodeId(5),
                    },
                    PathStep {
                        parent: InodeId(5),
                        name: "f".into(),
                        child: InodeId(9),
                    },
                ],
            },
            Request::WithParent {
                request: Box::new(Request::Create {
                    cred: cred(),
                    parent: InodeId(5),
                    name: "new".into(),
                    mode: 0o600,
                    layout: LayoutRequest::default(),
                    exclusive: true,
                }),
            },
            Request::WithParent {
                request: Box::new(Request::Link {
                    cred: cred(),
                    inode: InodeId(9),
                    parent: InodeId(5),
                    name: "other".into(),
                }),
            },
            Request::CreateGranted {
                request: Box::new(Request::Create {
                    cred: cred(),
                    parent: InodeId(5),
                    name: "granted".into(),
                    mode: 0o644,
                    layout: LayoutRequest::default(),
                    exclusive: false,
                }),
            },
            Request::LookupMany {
                cred: cred(),
                parent: InodeId(5),
                names: vec!["a".into(), "bb".into(), "".into()],
            },
            Request::Vouched {
                request: Box::new(Request::Lookup {
                    cred: cred(),
                    parent: InodeId(5),
                    name: "seen".into(),
                }),
            },
            Request::Vouched {
                request: Box::new(Request::GetAttr {
                    cred: cred(),
                    inode: InodeId(9),
                }),
            },
            Request::ReleaseWrites {
                releases: vec![(InodeId(9), (2, 1_700_000_000_000)), (InodeId(12), (1, 5))],
            },
        ];
        for mut req in reqs {
            // Every request that claims a credential lets the server replace it (owner
            // mode): one that carried a claim past `cred_mut` would be believed.
            let claims = format!("{req:?}").contains("cred: Cred");
            assert_eq!(req.cred_mut().is_some(), claims, "{req:?}");
            let body = req.encode_body();
            assert_eq!(Request::decode(req.opcode() as u16, &body).unwrap(), req);
            // Every strict prefix of a body is rejected, never panics.
            for cut in 0..body.len() {
                assert!(
                    Request::decode(req.opcode() as u16, &body[..cut]).is_err(),
                    "{req:?} cut at {cut}"
                );
            }
        }
    }

    fn cache_file() -> CacheFile {
        CacheFile {
            inode: InodeId(3),
            layout: Layout {
                stripe_size_bytes: 4096,
                servers: vec![ServerId(2), ServerId(5)],
                replication: Default::default(),
            },
            incarnation: 77,
        }
    }

    /// Only reads and writes travel through a cache manager: anything else nested in a
    /// `ViaCache` (another `ViaCache` included) is refused at decode.
    #[test]
    fn only_data_requests_nest_in_via_cache() {
        for inner in [
            Request::Sync { inode: InodeId(3) },
            Request::ObjRemove {
                inodes: vec![InodeId(3)],
            },
            Request::ViaCache {
                file: cache_file(),
                request: Box::new(Request::Sync { inode: InodeId(1) }),
            },
        ] {
            let mut w = Writer::default();
            cache_file().encode(&mut w);
            w.u16(inner.opcode() as u16);
            w.bytes.extend_from_slice(&inner.encode_body());
            assert!(
                Request::decode(Opcode::ViaCache as u16, &w.bytes).is_err(),
                "{inner:?}"
            );
        }
    }

    /// Only requests that make a name travel in a `WithParent`: a lookup, a removal or
    /// another `WithParent` is refused at decode, and the inner request still gets its
    /// own checks.
    #[test]
    fn only_name_making_requests_carry_their_directory() {
        for inner in [
            Request::Lookup {
                cred: cred(),
                parent: InodeId(1),
                name: "x".into(),
            },
            Request::Unlink {
                cred: cred(),
                parent: InodeId(1),
                name: "x".into(),
                keep: None,
            },
            Request::WithParent {
                request: Box::new(Request::Mkdir {
                    cred: cred(),
                    parent: InodeId(1),
                    name: "d".into(),
                    mode: 0o755,
                }),
            },
        ] {
            let mut w = Writer::default();
            w.u16(inner.opcode() as u16);
            w.bytes.extend_from_slice(&inner.encode_body());
            assert!(
                Request::decode(Opcode::WithParent as u16, &w.bytes).is_err(),
                "{inner:?}"
            );
        }
        let mkdir = Request::WithParent {
            request: Box::new(Request::Mkdir {
                cred: cred(),
                parent: InodeId(1),
                name: "d".into(),
                mode: 0o755,
            }),
        };
        let mut body = mkdir.encode_body();
        body.push(0);
        assert!(
            Request::decode(Opcode::WithParent as u16, &body).is_err(),
            "trailing byte"
        );
        assert_eq!(mkdir.meta_request().opcode(), Opcode::Mkdir);
    }

    /// Only reads carry an access pattern: a write (or anything else) nested in a
    /// `ViaCacheAware` is refused at decode, and a pattern cut short fails the request.
    #[test]
    fn only_reads_carry_a_pattern() {
        let s = Striping {
            stripe_size_bytes: 65536,
            stripe_count: 4,
            server_index: 2,
        };
        let pattern = crate::pattern::tests::pattern();
        let body = |inner: &Request, cut: usize| {
            let mut w = Writer::default();
            cache_file().encode(&mut w);
            let mut p = Writer::default();
            pattern.encode(&mut p);
            w.bytes.extend_from_slice(&p.bytes[..p.bytes.len() - cut]);
            w.u16(inner.opcode() as u16);
            w.bytes.extend_from_slice(&inner.encode_body());
            w.bytes
        };
        let write = Request::Write {
            inode: InodeId(3),
            striping: s,
            ranges: vec![Range { offset: 0, len: 1 }],
        };
        let read = Request::Read {
            inode: InodeId(3),
            striping: s,
            ranges: vec![Range { offset: 0, len: 1 }],
        };
        let aware = Opcode::ViaCacheAware as u16;
        assert!(Request::decode(aware, &body(&write, 0)).is_err());
        assert!(Request::decode(aware, &body(&Request::Sync { inode: InodeId(3) }, 0)).is_err());
        assert!(Request::decode(aware, &body(&read, 0)).is_ok());
        assert!(Request::decode(aware, &body(&read, 1)).is_err());
        // The pattern's request as an io server sees it.
        let r = Request::decode(aware, &body(&read, 0)).unwrap();
        assert_eq!(r.data_request(), &read);
        assert_eq!(r.opcode(), Opcode::ViaCacheAware);
    }

    #[test]
    fn responses_round_trip() {
        let attr = Attr {
            cache: weft_layout::CacheMode::Cached,
            inode: InodeId(7),
            kind: FileKind::File,
            mode: 0o644,
            uid: 1,
            gid: 2,
            nlink: 1,
            size: 3,
            atime: Timespec::default(),
            mtime: Timespec { secs: 1, nanos: 2 },
            ctime: Timespec::default(),
            layout: Some(Layout {
                stripe_size_bytes: 65536,
                servers: vec![ServerId(1), ServerId(2)],
                replication: Default::default(),
            }),
            dir_layout: None,
            rdev: 0x0801,
            blocks: 16,
        };
        let results = vec![
            Ok(Response::Attr(attr.clone())),
            Ok(Response::Unlinked {
                kept: Some(InodeId(3)),
            }),
            Ok(Response::EntriesPlus {
                entries: vec![("f".into(), attr.clone())],
                more: false,
            }),
            Ok(Response::Renamed {
                moved: attr.clone(),
                kept: None,
            }),
            Ok(Response::Entries {
                entries: vec![DirEntry {
                    name: "a".into(),
                    inode: InodeId(2),
                    kind: FileKind::Directory,
                }],
                more: true,
            }),
            Ok(Response::Extents(vec![0, u64::MAX])),
            Ok(Response::Committed(CommitInfo {
                interval_us: 5000,
                seq: 9,
                durable_seq: 7,
                since_durable_ms: u64::MAX,
            })),
            Ok(Response::View(ViewId(9))),
            Ok(Response::CacheCioStats(CioStats {
                references: 5,
                hits: 3,
                bytes: 500,
                hit_bytes: 300,
                unasked_fetched: 1,
            })),
            Ok(Response::CacheStats(CacheStats {
                incarnation: 5,
                policy: "arc".into(),
                hits: 9,
                write_back_errors: 1,
                write_backs: 4,
                write_backs_full: 3,
                ..Default::default()
            })),
            Ok(Response::Hello {
                server_id: ServerId(3),
                roles: 6,
                incarnation: 11,
                proof: [7; PROOF_BYTES],
            }),
            Ok(Response::MungeChallenge {
                nonce: [4; NONCE_BYTES],
            }),
            Ok(Response::Challenge {
                nonce: [9; NONCE_BYTES],
            }),
            Ok(Response::ServerInfo {
                protocol_version: 1,
                build: "0.1.0 (git 1a2b3c4)".into(),
            }),
            Ok(Response::Token(77)),
            Ok(Response::LockStats(LockStats {
                requests: 9,
                grants: 7,
                conflicts: 5,
                waits: 2,
                held: 1,
                lapsed: 0,
            })),
            Ok(Response::Position(1 << 50)),
            Ok(Response::LockHolder(None)),
            Ok(Response::LockState(LockState {
                incarnation: u64::MAX,
                grace_left_ms: 9_000,
            })),
            Ok(Response::LockHolder(Some(HeldLock {
                write: true,
                start: 3,
                end: u64::MAX,
                pid: 77,
            }))),
            Ok(Response::ShmPlaced {
                data_len: 4096,
                response: Box::new(Response::Bytes(4096)),
            }),
            Ok(Response::Capability(test_capability())),
            Ok(Response::Value(vec![1, 2, 3])),
            Ok(Response::Names(vec!["user.a".into(), Name::new(vec![0xff])])),
            Ok(Response::ObjStats(vec![(10, 4096), (u64::MAX, 0)])),
            Ok(Response::ObjStamps(vec![
                ObjStamped {
                    end: 10,
                    allocated: 4096,
                    stamp: ObjStamped::UNSETTLED,
                    mtime: Timespec {
                        secs: 1_700_000_000,
                        nanos: 999_999_999,
                    },
                },
                ObjStamped {
                    end: u64::MAX,
                    allocated: 0,
                    stamp: ObjStamped::ABSENT,
                    mtime: Timespec::default(),
                },
            ])),
            Ok(Response::Metrics {
                url: "http://127.0.0.1:9100/metrics".into(),
            }),
            Ok(Response::Made {
                attr: attr.clone(),
                parent: Attr {
                    kind: FileKind::Directory,
                    nlink: 3,
                    layout: None,
                    ..attr.clone()
                },
            }),
            Ok(Response::MadeGranted {
                attr: attr.clone(),
                parent: Attr {
                    kind: FileKind::Directory,
                    ..attr.clone()
                },
                capability: Some(test_capability()),
            }),
            Ok(Response::MadeGranted {
                attr: attr.clone(),
                parent: attr.clone(),
                capability: None,
            }),
            Ok(Response::AttrVouched {
                attr: attr.clone(),
                vouch: Some(1 << 40),
            }),
            Ok(Response::AttrVouched {
                attr: attr.clone(),
                vouch: None,
            }),
            Err(WireError::new(crate::ErrorCode::NotEmpty, "dir /x is not empty")),
        ];
        for res in results {
            assert_eq!(decode_result(&encode_result(&res)).unwrap(), res);
        }
    }

    /// 16 bytes every 48 from offset 4096.
    fn strided_view() -> View {
        View::partition(4096, 16, 48).unwrap()
    }

    #[test]
    fn view_registration_checks_the_view_and_its_size() {
        let register = |bytes: &[u8]| {
            let mut w = Writer::default();
            w.bytes(bytes);
            Request::decode(Opcode::RegisterView as u16, &w.bytes)
        };
        let good = strided_view().encode();
        assert_eq!(
            register(&good).unwrap(),
            Request::RegisterView { view: strided_view() }
        );
        // Malformed: a bad version byte, a truncated tree, trailing garbage.
        let mut bad_version = good.clone();
        bad_version[0] ^= 0x40;
        for bad in [
            &bad_version[..],
            &good[..good.len() - 1],
            &[good.clone(), vec![0]].concat(),
        ] {
            assert!(matches!(register(bad), Err(DecodeError::View(_))), "{bad:?}");
        }
        // Too deep: nested two-copy vectors whose strides (4^(level+1)) never continue
        // their child's spacing, so normalisation cannot fold the levels.
        let mut deep = weft_layout::view::Datatype::bytes(1).unwrap();
        let mut nested = None;
        for level in 0..20 {
            match weft_layout::view::Datatype::hvector(2, 1, 1 << (2 * level + 2), &deep) {
                Ok(t) => deep = t,
                Err(e) => {
                    nested = Some(e);
                    break;
                }
            }
        }
        assert!(nested.is_some(), "the constructors refuse depth past the limit");
        // Hand-built wire form of the same chain, past the limit: refused on decode.
        // view := version displacement node_count nodes; node 0 is one byte (tag 0,
        // size 1, displacement 0), node n a vector over node n - 1.
        let mut body = vec![weft_layout::view::WIRE_VERSION, 0, 18, 0, 1, 0];
        for level in 0..17u32 {
            // tag 1 vector: count 2, block_len 1, element_stride 0 (zigzag 0),
            // block_stride 4^(level+1) (zigzag), displacement 0, child = previous node.
            body.push(1);
            body.extend_from_slice(&[2, 1, 0]);
            let mut stride = (1u64 << (2 * level + 2)) << 1;
            while stride >= 0x80 {
                body.push((stride as u8) | 0x80);
                stride >>= 7;
            }
            body.push(stride as u8);
            body.extend_from_slice(&[0, level as u8]);
        }
        match register(&body) {
            Err(DecodeError::View(m)) => assert!(m.contains("depth"), "{m}"),
            other => panic!("expected a depth error, got {other:?}"),
        }
        // Oversized: refused by length before anything is decoded.
        let mut w = Writer::default();
        w.u32(VIEW_BYTES_MAX as u32 + 1);
        assert!(matches!(
            Request::decode(Opcode::RegisterView as u16, &w.bytes),
            Err(DecodeError::TooLarge { .. })
        ));
        // A view interval whose end overflows.
        let mut w = Writer::default();
        InodeId(1).encode(&mut w);
        Striping {
            stripe_size_bytes: 65536,
            stripe_count: 1,
            server_index: 0,
        }
        .encode(&mut w);
        ViewId(1).encode(&mut w);
        w.u64(u64::MAX);
        w.u64(2);
        assert!(Request::decode(Opcode::ReadView as u16, &w.bytes).is_err());
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(matches!(
            Request::decode(999, &[]),
            Err(DecodeError::UnknownOpcode(999))
        ));
        // A range whose end overflows.
        let mut w = Writer::default();
        InodeId(1).encode(&mut w);
        Striping {
            stripe_size_bytes: 65536,
            stripe_count: 1,
            server_index: 0,
        }
        .encode(&mut w);
        w.seq(&[Range {
            offset: u64::MAX - 5,
            len: 10,
        }]);
        assert!(Request::decode(Opcode::Read as u16, &w.bytes).is_err());
        // A server index outside the stripe count.
        let mut w = Writer::default();
        InodeId(1).encode(&mut w);
        w.u64(65536);
        w.u32(2);
        w.u32(2);
        w.u32(0);
        assert!(Request::decode(Opcode::Read as u16, &w.bytes).is_err());
        // A huge sequence length claims more than is there.
        let mut w = Writer::default();
        w.u32(u32::MAX);
        assert!(Request::decode(Opcode::ObjCreate as u16, &w.bytes).is_err());
    }

    fn shm_call_body(offset: u64, len: u64, data_len: u64, inner: &Request) -> Vec<u8> {
        let mut w = Writer::default();
        w.u64(offset);
        w.u64(len);
        w.u64(data_len);
        w.u16(inner.opcode() as u16);
        w.bytes.extend_from_slice(&inner.encode_body());
        w.bytes
    }

    #[test]
    fn hostile_shared_memory_descriptors_are_refused() {
        let sync = Request::Sync { inode: InodeId(1) };
        // Data longer than its region; a region past 2^64.
        assert!(Request::decode(141, &shm_call_body(0, 10, 11, &sync)).is_err());
        assert!(Request::decode(141, &shm_call_body(u64::MAX, 2, 0, &sync)).is_err());
        // Nested shared-memory calls and handshakes inside one.
        let nested = Request::ShmCall {
            offset: 0,
            len: 1,
            data_len: 0,
            request: Box::new(sync.clone()),
        };
        assert!(Request::decode(141, &shm_call_body(0, 1, 0, &nested)).is_err());
        assert!(Request::decode(141, &shm_call_body(0, 1, 0, &Request::ShmAttach { bytes: 1 })).is_err());
        let hello = Request::Hello { client: "x".into() };
        assert!(Request::decode(141, &shm_call_body(0, 1, 0, &hello)).is_err());
        // A deep nest of ShmPlaced answers is refused without recursing.
        let mut body = vec![0u8];
        for _ in 0..100_000 {
            body.push(60);
            body.extend_from_slice(&0u64.to_le_bytes());
        }
        body.push(5);
        assert!(decode_result(&body).is_err());
        // A sound one decodes.
        assert!(Request::decode(141, &shm_call_body(8, 16, 16, &sync)).is_ok());
    }

    fn scatter_body(pieces: &[(u64, u64)], inner: &Request) -> Vec<u8> {
        Request::encode_shm_scatter(pieces, inner)
    }

    #[test]
    fn hostile_pool_descriptors_are_refused() {
        let read = Request::Read {
            inode: InodeId(1),
            striping: Striping {
                stripe_size_bytes: 65536,
                stripe_count: 1,
                server_index: 0,
            },
            ranges: vec![Range { offset: 0, len: 10 }],
        };
        // Sound: pieces in any order, adjacent but not overlapping.
        assert!(Request::decode(190, &scatter_body(&[(100, 5), (0, 100), (105, 1)], &read)).is_ok());
        // No pieces, an empty piece, a piece past 2^64, overlapping pieces.
        assert!(Request::decode(190, &scatter_body(&[], &read)).is_err());
        assert!(Request::decode(190, &scatter_body(&[(0, 0)], &read)).is_err());
        assert!(Request::decode(190, &scatter_body(&[(u64::MAX, 2)], &read)).is_err());
        assert!(Request::decode(190, &scatter_body(&[(0, 10), (9, 1)], &read)).is_err());
        assert!(Request::decode(190, &scatter_body(&[(50, 10), (0, 51)], &read)).is_err());
        assert!(Request::decode(190, &scatter_body(&[(5, 5), (5, 5)], &read)).is_err());
        // Too many pieces.
        let many: Vec<(u64, u64)> = (0..SCATTER_PIECES_MAX as u64 + 1).map(|i| (i * 2, 1)).collect();
        assert!(Request::decode(190, &scatter_body(&many, &read)).is_err());
        assert!(Request::decode(190, &scatter_body(&many[1..], &read)).is_ok());
        // A count claiming more pieces than the body holds.
        let mut w = Writer::default();
        w.u32(4000);
        assert!(Request::decode(190, &w.bytes).is_err());
        // Anything but a read inside: writes, syncs, handshakes, shared-memory calls.
        let sync = Request::Sync { inode: InodeId(1) };
        assert!(Request::decode(190, &scatter_body(&[(0, 1)], &sync)).is_err());
        let nested = Request::ShmScatter {
            pieces: vec![(0, 1)],
            request: Box::new(read.clone()),
        };
        assert!(Request::decode(190, &scatter_body(&[(0, 1)], &nested)).is_err());
        assert!(Request::decode(
            190,
            &scatter_body(&[(0, 1)], &Request::ShmAttachPool { bytes: 1 })
        )
        .is_err());
        let hello = Request::Hello { client: "x".into() };
        assert!(Request::decode(190, &scatter_body(&[(0, 1)], &hello)).is_err());
    }

    proptest::proptest! {
        /// Any segment descriptor decodes to exactly what was sent, or is refused: the
        /// decoder never yields a region whose data overruns it or that wraps.
        #[test]
        fn shm_descriptors_decode_only_when_sound(
            offset in proptest::prelude::any::<u64>(),
            len in proptest::prelude::any::<u64>(),
            data_len in proptest::prelude::any::<u64>(),
            trailing in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16),
        ) {
            let inner = Request::Sync { inode: InodeId(7) };
            let mut body = shm_call_body(offset, len, data_len, &inner);
            match Request::decode(141, &body) {
                Ok(Request::ShmCall { offset: o, len: l, data_len: d, request }) => {
                    proptest::prop_assert!(o.checked_add(l).is_some() && d <= l);
                    proptest::prop_assert_eq!((o, l, d), (offset, len, data_len));
                    proptest::prop_assert_eq!(*request, inner);
                }
                Ok(other) => proptest::prop_assert!(false, "decoded as {:?}", other),
                Err(_) => proptest::prop_assert!(offset.checked_add(len).is_none() || data_len > len),
            }
            body.extend_from_slice(&trailing);
            let _ = Request::decode(141, &body);
            let _ = decode_result(&body);
        }

        /// Any pool scatter list decodes to exactly what was sent, or is refused: the
        /// decoder never yields an empty, wrapping or overlapping piece.
        #[test]
        fn pool_descriptors_decode_only_when_sound(
            pieces in proptest::collection::vec(
                proptest::prelude::Strategy::prop_map(
                    (proptest::prelude::any::<u64>(), 0u64..1 << 20),
                    |(o, l)| (o >> (o % 64), l),
                ),
                0..12,
            ),
            trailing in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16),
        ) {
            let inner = Request::Read {
                inode: InodeId(7),
                striping: Striping { stripe_size_bytes: 65536, stripe_count: 2, server_index: 1 },
                ranges: vec![Range { offset: 0, len: 1 }],
            };
            let mut body = scatter_body(&pieces, &inner);
            let mut sorted = pieces.clone();
            sorted.sort_unstable();
            let sound = !pieces.is_empty()
                && pieces.iter().all(|&(o, l)| l > 0 && o.checked_add(l).is_some())
                && sorted.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0);
            match Request::decode(190, &body) {
                Ok(Request::ShmScatter { pieces: p, request }) => {
                    proptest::prop_assert!(sound);
                    proptest::prop_assert_eq!(p, pieces);
                    proptest::prop_assert_eq!(*request, inner);
                }
                Ok(other) => proptest::prop_assert!(false, "decoded as {:?}", other),
                Err(_) => proptest::prop_assert!(!sound),
            }
            body.extend_from_slice(&trailing);
            let _ = Request::decode(190, &body);
        }
    }
}

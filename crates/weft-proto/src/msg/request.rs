//! Requests: `Request`, each variant declared once with its wire layout derived
//! (`#[derive(Wire)]`, opcode `Opcode::<variant>`). Decoding checks every limit a field
//! attribute names; `nested` holds the hand-written parts: requests carried inside
//! others, shared-memory regions, and checks that span fields.

use super::cache::CacheFile;
use super::opcode::Opcode;
use super::values::{SharedOp, ViewId, XattrSet};
use super::{
    BATCH_INODES_MAX, CREATE_MANY_MAX, LOCK_RANGES_MAX, LOOKUP_MANY_MAX, OBJ_LIST_MAX, RANGES_MAX,
    RELEASE_WRITES_MAX, REVALIDATE_STEPS_MAX, XATTR_VALUE_BYTES_MAX,
};
use crate::capability::Capability;
use crate::codec::{DecodeError, Reader, Writer};
use crate::handshake::{Identity, NONCE_BYTES, PROOF_BYTES};
use crate::name::Name;
use crate::types::*;
use weft_layout::view::View;
use weft_layout::{InodeId, LayoutRequest, ServerId};
use weft_wire_derive::Wire;

mod nested;

#[derive(Debug, Clone, PartialEq, Eq, Wire)]
#[wire(opcode = Opcode)]
pub enum Request {
    /// First frame on every connection; the server answers with a `Challenge`.
    Hello {
        client: String,
    },
    /// Second frame on every connection: proves the client holds the cluster key (see
    /// `handshake`); the server answers with `Hello`, or refuses and closes.
    Authenticate {
        #[wire(fixed = "nonce length")]
        nonce: [u8; NONCE_BYTES],
        identity: Identity,
        #[wire(fixed = "proof length")]
        proof: [u8; PROOF_BYTES],
    },
    /// The server's protocol and build versions, for `weft status`. Added after
    /// protocol version 1 shipped without a version bump: older servers answer it with
    /// an unknown-opcode error, and the Hello exchange is unchanged.
    ServerInfo,
    /// meta (within protocol 8): how the cluster protects itself, for `weft status`
    /// run without the cluster's description (`WEFT_META`): answered `Security` by the
    /// manager's connection layer, which applies it. An older manager answers
    /// `UnknownOpcode`.
    SecurityInfo,
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
    /// `ReaddirPlus` in which every regular file whose size the manager knows (no
    /// writer since its io servers told it, see `Vouched`) carries that size, so a
    /// listing asks the io servers only for the others (`EntriesSized`). Added within
    /// protocol version 8: an older manager answers `UnknownOpcode` and the client
    /// sends `ReaddirPlus`.
    ReaddirSized {
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
        #[wire(max = BATCH_INODES_MAX, what = "object batch")]
        inodes: Vec<InodeId>,
        mtime: Timespec,
    },
    /// io: create empty objects for new files.
    ObjCreate {
        #[wire(max = BATCH_INODES_MAX, what = "inode batch")]
        inodes: Vec<InodeId>,
    },
    /// io: create empty objects for fresh inode numbers, each one exclusively (an
    /// existing object is never taken over: the whole request then fails and none of its
    /// new objects is left), and make them durable before answering (added within
    /// version 3; the manager's pool of precreated objects).
    ObjPrecreate {
        #[wire(max = BATCH_INODES_MAX, what = "inode batch")]
        inodes: Vec<InodeId>,
    },
    /// io: delete objects of removed files (missing ones are fine).
    ObjRemove {
        #[wire(max = BATCH_INODES_MAX, what = "inode batch")]
        inodes: Vec<InodeId>,
    },
    /// io: the bulk data is this server's pieces of `ranges`, in file order.
    Write {
        inode: InodeId,
        striping: Striping,
        #[wire(max = RANGES_MAX, what = "range list")]
        ranges: Vec<Range>,
    },
    /// io: the reply's bulk data is this server's pieces of `ranges`, in file order,
    /// with holes and bytes past the object's end read as zeros.
    Read {
        inode: InodeId,
        striping: Striping,
        #[wire(max = RANGES_MAX, what = "range list")]
        ranges: Vec<Range>,
    },
    Sync {
        inode: InodeId,
    },
    /// io: the logical end of each object (`u64::MAX` when the object is missing).
    Extents {
        #[wire(max = BATCH_INODES_MAX, what = "extent batch")]
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
        #[wire(with = nested::registered_view)]
        view: View,
    },
    /// io: forget a view registered on this connection.
    ReleaseView {
        view: ViewId,
    },
    /// io: the bulk data is this server's pieces of view bytes
    /// `[view_offset, view_offset + len)` of a registered view, in file order (one
    /// PVFS I/O stream: the server finds the pieces itself from the view and striping).
    #[wire(check = nested::view_interval)]
    WriteView {
        inode: InodeId,
        striping: Striping,
        view: ViewId,
        view_offset: u64,
        len: u64,
    },
    /// io: the reply's bulk data is this server's pieces of the view interval, in file
    /// order, holes and bytes past the object's end read as zeros.
    #[wire(check = nested::view_interval)]
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
        #[wire(encode = nested::encode, decode = nested::data_request)]
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
        #[wire(encode = nested::encode, decode = nested::read_request)]
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
        #[wire(max = BATCH_INODES_MAX, what = "inode batch")]
        inodes: Vec<InodeId>,
    },
    /// cache: a client closed the file: write its dirty blocks back soon.
    CacheClose {
        inode: InodeId,
    },
    CacheStats,
    /// cache: the manager's counters of original access patterns.
    CacheCioStats,
    /// cache (servers only; within protocol 8): the manager's step (`migrate_step`) of
    /// the migration of cached file `inode` to a new layout. `FREEZE`: refuse changes of
    /// the file here (`Busy`, `FROZEN_MARK`) for a lease the same request renews, wait
    /// for those under way, write its dirty blocks back; answered `Stamp` with the
    /// hold's epoch, the same while it lasts without a lapse. `THAW`: take changes
    /// again; with `layout` (the switch committed), first drop the file's blocks and
    /// refuse requests carrying another layout (`Stale`). Answered `Done`.
    CacheMigrate {
        inode: InodeId,
        step: u8,
        layout: Option<weft_layout::Layout>,
    },
    /// cache: the files were removed: drop their blocks, dirty or not.
    CacheDrop {
        #[wire(max = BATCH_INODES_MAX, what = "inode batch")]
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
        #[wire(max = LOCK_RANGES_MAX, what = "locked ranges")]
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
    #[wire(encode = nested::encode_shm_call, decode = nested::decode_shm_call)]
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
        #[wire(decode = nested::pool_pieces)]
        pieces: Vec<(u64, u64)>,
        #[wire(encode = nested::encode, decode = nested::pooled_request)]
        request: Box<Request>,
    },
    /// Checks, in one snapshot, that every step's `parent` still has an entry `name`
    /// naming `child` and that the caller may search every `parent`; answers with the
    /// last child's attributes, or `Stale` when a step no longer holds (a name another
    /// client removed, renamed or replaced).
    Revalidate {
        cred: Cred,
        #[wire(max = REVALIDATE_STEPS_MAX, what = "revalidated path")]
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
    FileLockTest(#[wire(with = nested::lock_without_pid)] LockRequest),
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
    /// io (rebuild, protocol 6): the stamp of this server's pieces of `ranges` of
    /// `inode`: a number that changes whenever a write, view write, truncate or
    /// allocation of any of those bytes arrives here (and may change more often, never
    /// less). With `create`, a missing object is made first (a server whose disk was
    /// replaced). Needs write access to the file. Answered `Stamp`.
    RebuildStamp {
        inode: InodeId,
        striping: Striping,
        #[wire(max = RANGES_MAX, what = "range list")]
        ranges: Vec<Range>,
        create: bool,
    },
    /// io (rebuild, protocol 6): as `Write` (the bulk data is this server's pieces of
    /// `ranges`), applied only if the stamp of those ranges is still `stamp`; else
    /// refused `Busy` and nothing written: a client's write arrived meanwhile, and its
    /// bytes, not the rebuild's older copy of them, must stay.
    RebuildWrite {
        inode: InodeId,
        striping: Striping,
        #[wire(max = RANGES_MAX, what = "range list")]
        ranges: Vec<Range>,
        stamp: u64,
    },
    /// meta (rebuild, protocol 6): the generation of `server`'s piece of replicated file
    /// `inode`: it changes with every `MarkStale` of that piece (also of an already stale
    /// one). Needs write permission. Answered `Generation`.
    StaleGeneration {
        cred: Cred,
        inode: InodeId,
        server: ServerId,
    },
    /// meta (rebuild, protocol 6): `server`'s piece of `inode` has been copied from a
    /// fresh copy: clear its stale mark, but only if its generation is still
    /// `generation` (no writer marked it again while it was copied), else refused
    /// `Busy`. Needs write permission. Answered `Attr`.
    ClearStale {
        cred: Cred,
        inode: InodeId,
        server: ServerId,
        generation: u64,
    },
    /// meta (rebuild, protocol 6): replicated files after inode `after`, in inode order,
    /// with their stale pieces: only files with a stale piece, or with `all` every
    /// replicated file; only those with a piece on `server` if given. At most `max`
    /// (capped at `STALE_LIST_MAX`). Needs a key holder (root in `trusted` mode).
    /// Answered `StaleFiles`.
    StaleList {
        cred: Cred,
        server: Option<ServerId>,
        all: bool,
        after: InodeId,
        max: u32,
    },
    /// io (migrate, protocol 7; servers only): one step (`migrate_step`) of the
    /// migration of `inode`'s object to a new layout; `temp` is the file whose object
    /// holds the new layout's bytes on this server, `striping` this server's striping in
    /// the new layout (`None`: this server has no piece in it). Answered `Stamp`
    /// (`FREEZE`, `CHECK`) or `Done`.
    MigrateObject {
        inode: InodeId,
        temp: InodeId,
        striping: Option<Striping>,
        step: u8,
    },
    /// meta (migrate, protocol 7): file `temp`, made by the caller with the new layout,
    /// is to take over regular file `inode`'s data: the manager freezes `inode`'s
    /// objects (writes wait, refused `Busy`, for a lease the same request renews).
    /// Needs write permission on both. Answered `Attr` (`inode`'s).
    MigrateBegin {
        cred: Cred,
        inode: InodeId,
        temp: InodeId,
    },
    /// meta (migrate, protocol 7): with `commit`, `temp`'s objects become `inode`'s and
    /// `inode` takes `temp`'s layout in one transaction (readers see the old layout or
    /// the new, never a mix), then the old objects go; without, the migration is
    /// abandoned. Either way writes of `inode` resume. Answered `Attr` (`inode`'s).
    MigrateEnd {
        cred: Cred,
        inode: InodeId,
        temp: InodeId,
        commit: bool,
    },
    /// meta (migrate, protocol 7): files after inode `after`, in inode order, with a
    /// piece on io server `server`, at most `max` (capped at `STALE_LIST_MAX`). Root
    /// only. Answered `StaleFiles` (with each file's stale pieces).
    ServerFiles {
        cred: Cred,
        server: ServerId,
        after: InodeId,
        max: u32,
    },
    /// meta (migrate, protocol 7): io server `server` takes state `state`
    /// (`server_state`): new files are placed only on active ones. Root only.
    /// Answered `ServerStates`.
    SetServerState {
        cred: Cred,
        server: ServerId,
        state: u8,
    },
    /// meta (migrate, protocol 7): the state of every io server of the cluster.
    /// Answered `ServerStates`.
    ServerStates {
        cred: Cred,
    },
    /// meta (protocol 8): io server `server` joins the running cluster (`weft server
    /// add`): the manager checks that it answers at its address as that io server,
    /// records it durably and places new files on it. Root only. Answered `Cluster`
    /// with the description that includes it.
    AddServer {
        cred: Cred,
        server: IoServer,
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
        #[wire(bytes_max = XATTR_VALUE_BYTES_MAX)]
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
        #[wire(max = BATCH_INODES_MAX, what = "object batch")]
        items: Vec<(InodeId, Striping)>,
    },
    /// io: `ObjStat` with each object's change stamp (see `ObjStamped`), by which a
    /// client tells whether data it cached is still what the object holds. Answered
    /// `ObjStamps`; servers before it answer `UnknownOpcode`.
    ObjStamp {
        #[wire(max = BATCH_INODES_MAX, what = "object batch")]
        items: Vec<(InodeId, Striping)>,
    },
    /// io: allocates this server's pieces of `[offset, offset + len)` (fallocate(2)
    /// `mode`: 0, or `FALLOC_FL_KEEP_SIZE`, or that with `FALLOC_FL_PUNCH_HOLE`, or
    /// `FALLOC_FL_ZERO_RANGE` with or without `FALLOC_FL_KEEP_SIZE`; servers before
    /// ZERO_RANGE answer it `Unsupported`).
    #[wire(check = nested::allocated_range)]
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
        #[wire(decode = nested::requested_rights)]
        rights: u8,
    },
    /// io, cache (servers only): capabilities of these inodes issued at or before
    /// `at_ms` (the manager's clock, after the chmod or chown that took rights away)
    /// are void; their holders must ask again.
    RevokeCapabilities {
        #[wire(max = BATCH_INODES_MAX, what = "inode batch")]
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
        #[wire(encode = nested::encode, decode = nested::name_making_request)]
        request: Box<Request>,
    },
    /// meta: `request`, always a `Create`, answered with `MadeGranted`: what a
    /// `WithParent` create answers, plus a capability to read and write the file (when
    /// the cluster uses capabilities and the caller may have one), granted in the same
    /// round trip: the new file's first write asks the manager for nothing. Added within
    /// protocol version 3: an older manager answers `UnknownOpcode`, and the client
    /// sends a `WithParent` instead.
    CreateGranted {
        #[wire(encode = nested::encode_create, decode = nested::granted_create)]
        request: Box<Request>,
    },
    /// meta: `request`, always a `Create`, answered with `MadeStamped`: what a
    /// `CreateGranted` answers, plus the stamp of the capability's grant among the
    /// manager's write grants (the stamp it vouches for the file at while no other
    /// grant followed). A client that made the file with it and wrote it only under
    /// that grant knows, when a later open is vouched for at the same stamp, that the
    /// file's data is what it wrote: a mount lets the kernel keep the pages of its own
    /// writes. Added within protocol version 8: an older manager answers
    /// `UnknownOpcode`, and the client sends a `CreateGranted` instead.
    CreateStamped {
        #[wire(encode = nested::encode_create, decode = nested::granted_create)]
        request: Box<Request>,
    },
    /// meta: creates every one of `names` (at most `CREATE_MANY_MAX`, each at most once)
    /// in directory `parent` as an exclusive create would (`O_CREAT|O_EXCL`), with
    /// `mode` and `layout` for all, in one transaction made durable before the answer,
    /// `MadeMany`: the files made and the names refused with why (`Exists`, quota,
    /// ...), each in the order asked. A refusal of the whole request (no such
    /// directory, no permission to write it, a disk error) makes none. One request for
    /// what takes a `Create` per file; no write capability comes with the files (the
    /// first write asks). Sent `Tracked`: a resend is answered from its record. Added
    /// within protocol version 8: an older manager answers `UnknownOpcode` (or refuses
    /// it inside `Tracked`), and the client creates the files one by one.
    CreateMany {
        cred: Cred,
        parent: InodeId,
        #[wire(max = CREATE_MANY_MAX, what = "names of one create-many")]
        names: Vec<Name>,
        mode: u32,
        layout: LayoutRequest,
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
        #[wire(max = LOOKUP_MANY_MAX, what = "names of one lookup-many")]
        names: Vec<Name>,
    },
    /// meta: `request` (a `Lookup`, `Revalidate`, `GetAttr` or, from protocol 8,
    /// `Resolve`), answered with `AttrVouched` (or, from protocol 8, `AttrSized`: the
    /// file's size known to the manager under the vouch): its attributes and, for a regular file, the manager's vouch that
    /// no write capability of the file is live and none was issued since the stamp it
    /// gives (see `weft_meta::writers`). A client that asked the io servers for the
    /// file's size and change stamps after it was told that stamp, and is told the
    /// same stamp again, knows the file's data did not change in between: it skips the
    /// io servers. Added in protocol version 5.
    Vouched {
        #[wire(encode = nested::encode, decode = nested::vouchable_request)]
        request: Box<Request>,
    },
    /// meta: a `Vouched` whose answer, for a regular file the caller may read, also
    /// carries a read capability of it (`ReadableVouched`): what an open's check and its
    /// first read need from the manager, in one round trip where they took two (the
    /// check, then `GrantCapability` at the first read). A grant refused (the cluster
    /// asks for none, the mode gives no read access) is no error: the answer carries
    /// none. Added within protocol version 8: an older manager answers `UnknownOpcode`.
    VouchedReadable {
        #[wire(encode = nested::encode, decode = nested::vouchable_request)]
        request: Box<Request>,
    },
    /// meta: the manager's change feed: the inodes whose attributes, or (for a
    /// directory) entries, changed since position `after` of the feed, at most `max`
    /// of them (`Changed`). A mount polls it to keep what the kernel caches of names
    /// and attributes for longer than its attribute timeout, dropping what another
    /// client changed (its leases). Only inode numbers travel, never names: any
    /// client may ask. Added within protocol version 8: an older manager answers
    /// `UnknownOpcode` and the mount keeps the attribute timeout.
    Changes {
        after: u64,
        max: u32,
    },
    /// meta: the caller gives back write capabilities: for each inode, how many write
    /// grants it had from the manager (all of them: it holds no writable handle of the
    /// file any more and wrote everything it will write with them) and the issue time
    /// of the first (a manager started after it ignores the entry: those grants were
    /// another run's). Answered with `Done`. At most `RELEASE_WRITES_MAX` entries. Added
    /// in protocol version 5.
    ReleaseWrites {
        #[wire(max = RELEASE_WRITES_MAX, what = "write releases")]
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
        #[wire(encode = nested::encode, decode = nested::tracked_request)]
        request: Box<Request>,
    },
    /// meta: client `client` has replayed everything it kept (or had nothing to), after
    /// a manager restart; answered `Done`. The manager's replay window ends once every
    /// client it expects said so. Added in protocol version 5.
    ReplayDone {
        client: u64,
    },
    /// meta (quotas, protocol 7): sets the limits of `kind` id `id` (all 0: none).
    /// Needs root or the owner of the root directory. Answered `Quota`.
    QuotaSet {
        cred: Cred,
        kind: crate::quota::QuotaKind,
        id: u32,
        limits: crate::quota::QuotaLimits,
    },
    /// meta (quotas): the limits and usage of `kind` id `id`. A user sees only his own
    /// uid, his groups and projects; root and the root directory's owner see any.
    /// Answered `Quota`.
    QuotaGet {
        cred: Cred,
        kind: crate::quota::QuotaKind,
        id: u32,
    },
    /// meta (quotas): sets the grace periods of `kind`'s soft limits (as `QuotaSet`
    /// needs). Answered `Quota` (of id 0).
    QuotaGrace {
        cred: Cred,
        kind: crate::quota::QuotaKind,
        grace: crate::quota::QuotaGrace,
    },
    /// meta (quotas): the project of `inode`; with `set`, first gives it that project
    /// (0: none), and a directory also everything below it when `recursive` (as `lfs
    /// project -p ID -r -s`). What is created in a directory takes its project. Setting
    /// needs root or the root directory's owner. Answered `ProjectId`.
    Project {
        cred: Cred,
        inode: InodeId,
        set: Option<u32>,
        recursive: bool,
    },
    /// meta (quotas): counts every id's inodes again from the namespace and its bytes
    /// from what was last settled per file, and settles every file's bytes from its io
    /// servers (as `QuotaSet` needs). Answered `Done`.
    QuotaRecount {
        cred: Cred,
    },
    /// meta (protocol 7): take a consistent snapshot of the namespace (one committed
    /// state; writes go on) into a file beside the database, to be read with
    /// `BackupRead` and dropped with `BackupEnd`. Key holders only (root in `munge`
    /// mode). Answered `BackupReady`.
    BackupBegin,
    /// meta (protocol 7): up to `len` bytes (capped at `BACKUP_CHUNK_BYTES_MAX`) of
    /// snapshot `snapshot` from `offset`. Answered `BackupChunk`; empty at the end.
    BackupRead {
        snapshot: u64,
        offset: u64,
        len: u32,
    },
    /// meta (protocol 7): the snapshot is read (or abandoned): its file goes. Answered
    /// `Done`; an unknown snapshot is `NotFound`.
    BackupEnd {
        snapshot: u64,
    },
    /// io (protocol 7): the objects of fan-out directory `dir` (0-255, inode mod 256)
    /// with numbers above `after`, in inode order, at most `max` (capped at
    /// `OBJ_LIST_MAX`). Needs a server capability. Answered `ObjectPage`.
    ObjList {
        dir: u16,
        after: InodeId,
        max: u32,
    },
    /// meta (protocol 7): what the namespace knows of each inode number (see
    /// `Response::States`), for `weft check`. Key holders only.
    InodeStates {
        #[wire(max = OBJ_LIST_MAX, what = "inode state batch")]
        inodes: Vec<InodeId>,
    },
    /// meta (protocol 7): objects of `inodes`, found on io server `server`, belong to no
    /// file: the purger removes every object of those numbers (from every io server). An
    /// inode the namespace knows (a file, the precreated pool, a removal under way) is
    /// skipped, checked in the same transaction. Key holders only. Answered `States`
    /// with each one's state as found (`0`: taken).
    AdoptOrphans {
        server: ServerId,
        #[wire(max = OBJ_LIST_MAX, what = "orphan batch")]
        inodes: Vec<InodeId>,
    },
    /// meta (protocol 7): regular files after inode `after` with their layouts, in
    /// inode order, at most `max` (capped at `LAYOUT_SCAN_MAX`). Key holders only.
    /// Answered `Layouts`.
    LayoutScan {
        after: InodeId,
        max: u32,
    },
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
            | Request::ReaddirSized { cred, .. }
            | Request::Unlink { cred, .. }
            | Request::Rmdir { cred, .. }
            | Request::Rename { cred, .. }
            | Request::RenameExchange { cred, .. }
            | Request::RenameNoReplace { cred, .. }
            | Request::Statfs { cred, .. }
            | Request::SetDirLayout { cred, .. }
            | Request::MarkStale { cred, .. }
            | Request::StaleGeneration { cred, .. }
            | Request::ClearStale { cred, .. }
            | Request::StaleList { cred, .. }
            | Request::MigrateBegin { cred, .. }
            | Request::MigrateEnd { cred, .. }
            | Request::ServerFiles { cred, .. }
            | Request::SetServerState { cred, .. }
            | Request::ServerStates { cred }
            | Request::AddServer { cred, .. }
            | Request::Symlink { cred, .. }
            | Request::Readlink { cred, .. }
            | Request::Revalidate { cred, .. }
            | Request::Link { cred, .. }
            | Request::Mknod { cred, .. }
            | Request::SetXattr { cred, .. }
            | Request::GetXattr { cred, .. }
            | Request::ListXattr { cred, .. }
            | Request::RemoveXattr { cred, .. }
            | Request::GrantCapability { cred, .. }
            | Request::QuotaSet { cred, .. }
            | Request::QuotaGet { cred, .. }
            | Request::QuotaGrace { cred, .. }
            | Request::Project { cred, .. }
            | Request::QuotaRecount { cred } => Some(cred),
            Request::WithParent { request }
            | Request::CreateGranted { request }
            | Request::CreateStamped { request } => request.cred_mut(),
            Request::Tracked { request, .. } => request.cred_mut(),
            Request::LookupMany { cred, .. } | Request::CreateMany { cred, .. } => Some(cred),
            Request::Vouched { request } | Request::VouchedReadable { request } => request.cred_mut(),
            _ => None,
        }
    }
    /// The request's body: what follows the frame header (the opcode travels in it).
    pub fn encode_body(&self) -> Vec<u8> {
        let mut w = Writer::default();
        self.encode_body_to(&mut w);
        w.bytes
    }

    /// The body of a `ShmCall` carrying `request`, without building the call (the
    /// client wraps its requests this way, without cloning them).
    pub fn encode_shm_call(offset: u64, len: u64, data_len: u64, request: &Request) -> Vec<u8> {
        let mut w = Writer::default();
        nested::shm_call_to(&mut w, offset, len, data_len, request);
        w.bytes
    }

    /// The body of a `ShmScatter` carrying `request` (see `encode_shm_call`).
    pub fn encode_shm_scatter(pieces: &[(u64, u64)], request: &Request) -> Vec<u8> {
        let mut w = Writer::default();
        w.seq(pieces);
        nested::encode(request, &mut w);
        w.bytes
    }

    /// Decodes a request body for `opcode`; the whole body must be consumed.
    pub fn decode(opcode: u16, body: &[u8]) -> Result<Request, DecodeError> {
        let mut r = Reader::new(body);
        let request = Request::decode_body(opcode, &mut r)?;
        r.finish()?;
        Ok(request)
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
    pub const VOUCHABLE: [Opcode; 4] = [
        Opcode::Lookup,
        Opcode::Revalidate,
        Opcode::GetAttr,
        Opcode::Resolve,
    ];
    /// The requests a client sends `Tracked` (alone or in a `WithParent`,
    /// `CreateGranted` or `CreateStamped`): those that change the namespace in the manager's store.
    pub const TRACKED: [Opcode; 16] = [
        Opcode::Create,
        Opcode::CreateMany,
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
            | Request::CreateStamped { request }
            | Request::Vouched { request }
            | Request::VouchedReadable { request } => request,
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

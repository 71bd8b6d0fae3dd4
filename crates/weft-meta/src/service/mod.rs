//! `MetaService`: turns metadata requests into store operations, creates and
//! removes file objects on the io servers through [`ObjectServers`], and purges
//! the objects of removed files in the background. Here: the service's state and the
//! dispatch of every request (`serve`), with what every request shares (screening,
//! the store's answers); by subject: `tracked.rs` (replayable namespace changes),
//! `capabilities.rs` (grants and vouching), `locks.rs` (lock sessions and the grace),
//! `create.rs` (creates and their objects), `precreate.rs` (precreated objects),
//! `servers.rs` (io servers joining while the manager runs) and `background.rs`
//! (purger and committer).

use std::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;
use std::time::Instant;

use weft_layout::{InodeId, Layout, LayoutRequest, ServerId};
use weft_proto::msg::BATCH_INODES_MAX;
use weft_proto::{
    Attr, ClusterInfo, Cred, ErrorCode, FileKind, Name, Request, Response, SetAttr, TimeSet, Timespec,
    WireError,
};

use crate::store::{ClusterLayout, CreateCheck, Made, MetaStore};

mod background;
mod backup;
mod capabilities;
mod changes;
mod create;
mod locks;
mod migrate;
mod precreate;
mod quota;
mod servers;
mod sizes;
mod tracked;

pub use background::PurgerHandle;
use create::first_failure;
pub use servers::merge_added;
pub use sizes::MeasurerHandle;

/// The io servers as the metadata service needs them: object creation and
/// removal. The server binary implements it over the network; tests use doubles.
pub trait ObjectServers: Send + Sync {
    /// Create empty objects for `inodes` on io server `server` (one batched request).
    fn create_objects(&self, server: ServerId, inodes: &[InodeId]) -> Result<(), WireError>;
    /// Create empty objects for fresh `inodes` on io server `server`, each exclusively
    /// (never taking over an existing object; on failure none of the request's new ones
    /// is left), durable before the call returns. Doubles may create them as
    /// `create_objects` does.
    fn precreate_objects(&self, server: ServerId, inodes: &[InodeId]) -> Result<(), WireError> {
        self.create_objects(server, inodes)
    }
    /// Remove the objects of `inodes` from io server `server`; missing objects are
    /// not an error.
    fn remove_objects(&self, server: ServerId, inodes: &[InodeId]) -> Result<(), WireError>;
    /// The bytes allocated on io server `server` to the objects of `items`' inodes
    /// (0 for a missing one), in their order (`ObjStat`): what quotas charge.
    fn object_bytes(
        &self,
        _server: ServerId,
        _items: &[(InodeId, weft_proto::Striping)],
    ) -> Result<Vec<u64>, WireError> {
        Err(WireError::new(
            ErrorCode::Unsupported,
            "these io servers report no bytes",
        ))
    }
    /// What io server `server` says of the objects of `items`' inodes (`ObjStamp`): each
    /// one's logical end under its striping, allocated bytes, stamp and mtime, in their
    /// order. What the manager measures a quiet file's size with (`sizes.rs`).
    fn object_stamps(
        &self,
        _server: ServerId,
        _items: &[(InodeId, weft_proto::Striping)],
    ) -> Result<Vec<weft_proto::ObjStamped>, WireError> {
        Err(WireError::new(
            ErrorCode::Unsupported,
            "these io servers report no object stamps",
        ))
    }
    /// The incarnation of io server `server`'s process as the manager's connection to it
    /// says (`None`: unknown, or not reachable now). Another value than before means the
    /// process restarted, perhaps on a new, empty disk.
    fn incarnation(&self, _server: ServerId) -> Option<u64> {
        None
    }
    /// Checks that `server` answers at its address as that io server of this cluster
    /// (its handshake proves the cluster key and the protocol version), and reaches it
    /// there from then on (`weft server add`).
    fn join(&self, server: &weft_proto::IoServer) -> Result<(), WireError> {
        Err(WireError::new(
            ErrorCode::Unsupported,
            format!(
                "io server {}: these object servers take no new servers",
                server.id
            ),
        ))
    }
    /// One step of a migration at io server `server` (`Request::MigrateObject`): the
    /// stamp it answers (`FREEZE`, `CHECK`), else 0.
    fn migrate_object(&self, server: ServerId, _request: Request) -> Result<u64, WireError> {
        Err(WireError::new(
            ErrorCode::Unsupported,
            format!("io server {server}: these object servers do not migrate"),
        ))
    }
    /// One step (`migrate_step::FREEZE` or `THAW`) of the migration of cached file
    /// `inode` at cache manager `manager` (`Request::CacheMigrate`): the hold's epoch
    /// (`FREEZE`), else 0.
    fn cache_migrate(
        &self,
        manager: ServerId,
        _inode: InodeId,
        _step: u8,
        _layout: Option<&Layout>,
    ) -> Result<u64, WireError> {
        Err(WireError::new(
            ErrorCode::Unsupported,
            format!("cache manager {manager}: these servers do not migrate cached files"),
        ))
    }
    /// Tell cache manager `manager` that `inodes` were removed: it drops their blocks
    /// (dirty ones too: there is nothing to write them back to). Best effort: a
    /// manager that misses it drops them when their write-back finds no object.
    fn drop_cached(&self, _manager: ServerId, _inodes: &[InodeId]) -> Result<(), WireError> {
        Ok(())
    }
    /// Set the modification time of the objects of `inodes` on io server `server` (an
    /// explicitly set time: a file's time is the latest of its objects' and its own).
    fn set_mtime(&self, _server: ServerId, _inodes: &[InodeId], _mtime: Timespec) -> Result<(), WireError> {
        Ok(())
    }
    /// `set_mtime` on every server of `servers`, the results in their order, with
    /// `meanwhile` run while the requests are on their way. A setattr waits for it on a
    /// file's close: an implementation should ask all servers at once (the network one
    /// sends every request, runs `meanwhile`, then awaits the answers, with no thread per
    /// server); doubles may run `meanwhile` first and then ask the servers one after
    /// another, as this default does.
    fn set_mtime_each(
        &self,
        servers: &[ServerId],
        inodes: &[InodeId],
        mtime: Timespec,
        meanwhile: &mut dyn FnMut(),
    ) -> Vec<Result<(), WireError>> {
        meanwhile();
        servers
            .iter()
            .map(|&server| self.set_mtime(server, inodes, mtime))
            .collect()
    }
}

/// Most orphans one purge round handles.
pub const PURGE_BATCH_INODES_MAX: usize = BATCH_INODES_MAX;
/// Most threads talking to io servers at once for one create or purge round.
pub const OBJECT_CALLS_PARALLEL_MAX: usize = 16;
/// Inode numbers whose objects one pool refill precreates on every server of a set:
/// one round trip per server and one fsync per server and at the manager for this many
/// creates.
pub const PRECREATE_BATCH: usize = 128;
/// Server sets with a pool of their own; files of other sets have their objects made
/// one create at a time. Files take turns for their first server, so a stripe count
/// below the number of io servers makes one set per io server: room for that on a
/// large cluster (a pool holds at most a few batches of 8-byte numbers).
pub const PRECREATE_POOLS_MAX: usize = 256;
/// How often a non-exclusive create retries after losing a race for its name
/// to another create (each retry finds the winner's file and returns it).
const CREATE_ATTEMPTS_MAX: usize = 4;

/// How long a mount session lives without renewing itself: the files it keeps alive
/// nameless are released after that (its mount crashed). Mounts renew far more often.
pub const SESSION_LEASE: Duration = Duration::from_secs(60);
/// Mount sessions remembered at once; past this, lapsed ones are forgotten.
const SESSIONS_MAX: usize = 65_536;
/// Kept files looked at per purge round for lapsed sessions.
const KEPT_SCAN_MAX: usize = 4096;

/// A background refill asked for: a layout of the set, and the set (sorted).
type RefillAsk = (Layout, Vec<ServerId>);

/// Who sends a request, as the server process established it (see `handle_as`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Believed for the credentials its requests carry and for the inodes they name by
    /// number: the single-identity modes (`owner`: every key holder is the key's owner;
    /// `claimed`: no identity is checked) and a uid in `munge_trusted_uids`, a FUSE
    /// mount's daemon, whose kernel walked the path and checked the open.
    Trusted,
    /// A user whose MUNGE credential the server verified (`munge` mode), acting as this
    /// credential. Besides each operation's own permission checks: every inode a
    /// request names by number must be reachable by this user (search permission on
    /// the directories from the root to it, `MetaStore::may_reach`); a handle-based
    /// `SetAttr` must match a capability the manager granted this user (`handles`);
    /// a removed file is read only by a user it was granted to before; a file lock
    /// needs the right to open the file in the lock's mode.
    User(Cred),
}

/// Most entries a listing served on the event loop asks for (`MetaService::runs_inline`):
/// a larger page goes to a worker.
pub const INLINE_ENTRIES_MAX: u64 = 1_024;

/// The metadata role of a server.
pub struct MetaService {
    store: MetaStore,
    /// What `GetCluster` answers; io servers join it while the manager runs
    /// (`servers.rs`).
    cluster: std::sync::RwLock<ClusterInfo>,
    /// Held while an io server is being added (one at a time).
    adding: Mutex<()>,
    /// Ids and addresses of the description's servers, which no added io server may
    /// take (`set_reserved`).
    reserved: Vec<(ServerId, String)>,
    objects: Arc<dyn ObjectServers>,
    /// Mount sessions -> when they last renewed (in memory: after a restart every
    /// session has a full lease to come back).
    sessions: Mutex<HashMap<u64, Instant>>,
    /// How long a session lives without renewing (`SESSION_LEASE` unless a test says).
    session_lease: Duration,
    /// Sessions whose locks were dropped for lapsing, until their mounts hear it.
    lapsed: Mutex<crate::lapsed::Lapsed>,
    started: Instant,
    /// Orphans the purger thread saw in its previous round: it purges only those, so
    /// that an open that found a file an instant before another client replaced it
    /// still reads it (see the mount's retried opens).
    purge_candidates: Mutex<BTreeSet<InodeId>>,
    /// Creates whose commit failed on a disk error while the store could not say
    /// whether it landed: their objects go if it did not (see `discard_if_uncommitted`).
    uncertain: Mutex<Vec<(InodeId, Layout)>>,
    /// MPI-IO shared file pointers (in memory).
    shared_pointers: crate::shared_pointer::SharedPointers,
    /// Mounts' fcntl and flock locks (in memory, see `file_locks`).
    file_locks: crate::file_locks::FileLocks,
    /// The server process's incarnation (its handshake's), told to mounts that lock.
    incarnation: AtomicU64,
    /// Tells the incarnation of the connection a request came on (`restart_on_loss`).
    serving: std::sync::OnceLock<fn() -> Option<u64>>,
    /// The inodes changed, for mounts that hold names and attributes (`Changes`).
    feed: crate::feed::Feed,
    /// Held across each durable write of the record of lock sessions (see
    /// `file_locks`), so that an addition and a removal of one session never cross.
    lock_records: Mutex<()>,
    /// Precreated inode numbers ready for creates, by the (sorted) set of io servers
    /// holding their objects; every one is in the store's precreated table too.
    precreated: Mutex<HashMap<Vec<ServerId>, Vec<InodeId>>>,
    /// Per pool, its servers' incarnations when it was last refilled: a pool whose
    /// server restarted since is dropped (`drop_pool_if_restarted`).
    pool_incarnations: Mutex<HashMap<Vec<ServerId>, Vec<Option<u64>>>>,
    /// Held while refilling a pool, so that creates that find it empty wait for one
    /// refill rather than each starting one.
    refilling: Mutex<()>,
    /// Numbers per refill (`PRECREATE_BATCH` unless set; 0: no pool).
    precreate_batch: AtomicUsize,
    /// Server sets whose creates outran the background refiller (found their pool
    /// empty): how many times their refills double `precreate_batch` (see
    /// `batch_for`), and whether the pool is empty since (one doubling per time).
    batch_doublings: Mutex<HashMap<Vec<ServerId>, (u32, bool)>>,
    /// The opens this manager granted to verified users (see `handles`).
    handles: crate::handles::Handles,
    /// Grants capabilities (none: the cluster asks for none, see `GrantCapability`).
    capabilities: std::sync::OnceLock<Arc<dyn CapabilityIssuer>>,
    /// The write capabilities granted and not given back, per inode (set with the
    /// issuer: without capabilities nothing is vouched for; see `writers`).
    writers: std::sync::OnceLock<crate::writers::Writers>,
    /// The background refiller (`spawn_refiller`), if started: asked to refill a
    /// server set's pool once it runs low, so that creates seldom wait for a refill.
    refiller: Mutex<Option<mpsc::SyncSender<RefillAsk>>>,
    /// Server sets a background refill was asked for and has not finished.
    refills_asked: Mutex<BTreeSet<Vec<ServerId>>>,
    /// Tracked requests' records and the replay window (`replay.rs`).
    replay: crate::replay::Replay,
    /// The files whose bytes the quota settler follows (`quota.rs`).
    settling: quota::Settling,
    /// Migrations under way (`migrate.rs`).
    migrations: migrate::Migrations,
    /// Metadata snapshots being read by `weft backup` (`backup.rs`).
    snapshots: backup::SnapshotTable,
    /// Sizes of quiet files as their io servers told the manager (`sizes.rs`).
    sizes: crate::sizes::Sizes,
    /// Told each file and server whose piece was just marked stale (the server
    /// process's rebuilder, `on_stale`).
    stale_hook: std::sync::OnceLock<StaleHook>,
}

/// See `MetaService::on_stale`.
type StaleHook = Box<dyn Fn(InodeId, ServerId) + Send + Sync>;

/// Signs the capabilities the manager grants and tells the servers of revocations
/// (the server process provides it: the key and the network are its).
pub trait CapabilityIssuer: Send + Sync {
    /// The issue time of a capability whose permission check starts now: later than
    /// every revocation so far, so that a capability checked after a chmod survives
    /// its revocation and one checked before does not.
    fn issue_time(&self) -> u64;
    /// A capability of `rights` on `inode` issued at `issued_ms`, signed.
    fn issue(&self, inode: InodeId, rights: u8, issued_ms: u64) -> weft_proto::Capability;
    /// Capabilities of `inodes` issued until now must be refused (their permissions
    /// changed). Must not block on the servers.
    fn revoke(&self, inodes: &[InodeId]);
}

/// Most failed creates remembered for the purger to settle (`MetaService::uncertain`).
const UNCERTAIN_CREATES_MAX: usize = 4096;

impl MetaService {
    /// Serves `store` for the cluster described by `cluster` (its `root` is set to
    /// the store's root), creating and removing objects through `objects`.
    /// The incarnation this server's handshake gives clients (shared file pointers made
    /// lazily check it: see `SharedPointerSince`).
    pub fn set_incarnation(&self, incarnation: u64) {
        self.shared_pointers.set_incarnation(incarnation);
        self.incarnation.store(incarnation, Ordering::Relaxed);
    }

    pub fn new(
        store: MetaStore,
        mut cluster: ClusterInfo,
        objects: Arc<dyn ObjectServers>,
    ) -> Result<MetaService, WireError> {
        let io_servers: Vec<ServerId> = cluster.io_servers.iter().map(|s| s.id).collect();
        let distinct: BTreeSet<ServerId> = io_servers.iter().copied().collect();
        if distinct.len() != io_servers.len() {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                "cluster description lists an io server id twice",
            ));
        }
        store.set_cluster(ClusterLayout {
            io_servers,
            default_layout: cluster.default_layout,
            cache_managers: cluster.cache.managers.len(),
        })?;
        cluster.root = InodeId::ROOT;
        MetaService {
            store,
            cluster: std::sync::RwLock::new(cluster),
            adding: Mutex::new(()),
            reserved: Vec::new(),
            objects,
            sessions: Mutex::new(HashMap::new()),
            session_lease: SESSION_LEASE,
            lapsed: Mutex::default(),
            file_locks: Default::default(),
            incarnation: AtomicU64::new(0),
            feed: crate::feed::Feed::default(),
            serving: std::sync::OnceLock::new(),
            stale_hook: std::sync::OnceLock::new(),
            lock_records: Mutex::new(()),
            started: Instant::now(),
            purge_candidates: Mutex::new(BTreeSet::new()),
            uncertain: Mutex::new(Vec::new()),
            shared_pointers: Default::default(),
            precreated: Mutex::new(HashMap::new()),
            pool_incarnations: Mutex::new(HashMap::new()),
            refilling: Mutex::new(()),
            precreate_batch: AtomicUsize::new(PRECREATE_BATCH),
            batch_doublings: Mutex::new(HashMap::new()),
            handles: Default::default(),
            capabilities: Default::default(),
            writers: Default::default(),
            refiller: Mutex::new(None),
            refills_asked: Mutex::new(BTreeSet::new()),
            replay: Default::default(),
            settling: Default::default(),
            migrations: Default::default(),
            snapshots: Default::default(),
            sizes: Default::default(),
        }
        .with_server_states()
    }

    /// Places new files only on the io servers recorded active (`migrate.rs`).
    fn with_server_states(self) -> Result<MetaService, WireError> {
        self.apply_server_states()?;
        Ok(self)
    }

    /// The database was made by this run: no capability was granted before it, and the
    /// manager vouches for files at once (after a restart it waits until capabilities
    /// of the earlier run can have expired, see `writers`). Call after
    /// `set_capability_issuer`.
    pub fn fresh_start(&self) {
        if let Some(writers) = self.writers.get() {
            writers.no_earlier_grants(unix_ms());
        }
    }

    /// `LookupMany`: every name of `names` found in `parent`, with its attributes, in
    /// the order asked; a name not there is left out, any other failure (no such
    /// directory, no search permission) fails the whole request.
    fn lookup_many(&self, cred: &Cred, parent: InodeId, names: &[Name]) -> Result<Response, WireError> {
        names_at_most(names.len(), weft_proto::msg::LOOKUP_MANY_MAX, "lookup-many")?;
        let mut entries = Vec::with_capacity(names.len());
        for name in names {
            match self.store.lookup(cred, parent, name) {
                Ok(attr) => entries.push((name.clone(), attr)),
                Err(e) if e.code == ErrorCode::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Response::EntriesPlus { entries, more: false })
    }

    pub fn store(&self) -> &MetaStore {
        &self.store
    }

    /// The cluster as `GetCluster` describes it now.
    pub fn cluster(&self) -> ClusterInfo {
        self.cluster.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The cluster as `GetCluster` tells clients: without the io servers taken out of
    /// service (`weft server remove`: no file has a piece there), so that `df`,
    /// statfs and the cache tier leave a server whose machine is gone alone.
    fn cluster_in_service(&self) -> ClusterInfo {
        let mut cluster = self.cluster();
        let ids: Vec<ServerId> = cluster.io_servers.iter().map(|s| s.id).collect();
        if let Ok(states) = self.store.server_states(&ids) {
            cluster.io_servers.retain(|s| {
                !states
                    .iter()
                    .any(|(id, state)| *id == s.id && *state == weft_proto::msg::server_state::REMOVED)
            });
        }
        cluster
    }

    /// Ids and addresses no added io server may take (the description's servers, the
    /// manager's own included).
    pub fn set_reserved(&mut self, servers: Vec<(ServerId, String)>) {
        self.reserved = servers;
    }

    /// Calls `hook` with every file and server whose piece is marked stale from now on
    /// (a writer found the server unreachable): the server process's rebuilder, which
    /// copies the piece back once that server answers. Set once; later calls are
    /// ignored.
    pub fn on_stale(&self, hook: impl Fn(InodeId, ServerId) + Send + Sync + 'static) {
        let _ = self.stale_hook.set(Box::new(hook));
    }

    /// Whether `request` only reads what the manager holds (its store and its tables
    /// in memory) and never calls another server, waits for a commit or holds a lock
    /// for long: the event loop that read it may serve it itself
    /// (`weft_rpc::Handler::runs_inline`), saving the two thread wake-ups of a hand-off
    /// to a worker, which cost more than the lookup itself on a loaded manager. A
    /// listing counts only if small (`INLINE_ENTRIES_MAX`).
    pub fn runs_inline(request: &Request) -> bool {
        match request {
            Request::Lookup { .. }
            | Request::LookupMany { .. }
            | Request::GetAttr { .. }
            | Request::Revalidate { .. }
            | Request::Resolve { .. }
            | Request::Readlink { .. }
            | Request::GetXattr { .. }
            | Request::ListXattr { .. }
            | Request::ReleaseWrites { .. }
            | Request::Changes { .. }
            | Request::GetCluster => true,
            // A read grant is a permission check, a signature and (munge) a handle
            // recorded in memory: as quick as the check it comes with.
            Request::Vouched { request } | Request::VouchedReadable { request } => Self::runs_inline(request),
            Request::Readdir { max_entries, .. }
            | Request::ReaddirPlus { max_entries, .. }
            | Request::ReaddirSized { max_entries, .. } => u64::from(*max_entries) <= INLINE_ENTRIES_MAX,
            _ => false,
        }
    }

    /// Whether a request `runs_inline` chose may be served now without waiting: not
    /// while the replay window after a restart holds requests back (`handle_as`).
    pub fn serves_at_once(&self) -> bool {
        self.replay.passes()
    }

    /// Answers one request of a trusted caller (see `handle_as`).
    pub fn handle(&self, request: Request) -> Result<Response, WireError> {
        self.handle_as(&Caller::Trusted, request)
    }

    /// Answers one request of `caller`. `Hello` and `ServerInfo` belong to the
    /// connection layer (it knows the server id, roles and build) and io opcodes to io
    /// servers: all are `Unsupported`.
    pub fn handle_as(&self, caller: &Caller, request: Request) -> Result<Response, WireError> {
        // During the replay window after a restart only replays (and what a client needs
        // to make them) are served: the rest waits for the namespace they rebuild.
        if !matches!(
            request,
            Request::Tracked { .. }
                | Request::ReplayDone { .. }
                | Request::GetCluster
                | Request::CommitMetadata { .. }
                | Request::RenewSession { .. }
                | Request::FileLock(_)
                | Request::FileLockReclaim(_)
                | Request::FileLockTest(_)
                | Request::LockSession { .. }
                | Request::LockReclaimComplete { .. }
                | Request::LockSessionEnd { .. }
                | Request::VerifyCapability { .. }
                | Request::Changes { .. }
        ) {
            self.replay.wait_open();
        }
        let touched = self.touched(&request);
        // A namespace change that does not grow the database (a removal, a rename, an
        // attribute change) and met a full disk is served once more: the store released
        // its reserve file on that error (`MetaStore::recover`), and removals must commit
        // into it (a tracked change's answer record needs a little room too). The failed
        // commit left nothing, so the second try is the only one applied.
        let again = (request.is_tracked() && !grows_namespace(&request)).then(|| request.clone());
        let result = match (self.serve(caller, request), again) {
            (Err(e), Some(again)) if e.code == ErrorCode::NoSpace => self.serve(caller, again),
            (result, _) => result,
        };
        if result.is_ok() {
            self.feed.record(&touched);
        }
        result
    }

    /// `handle_as` once the replay window lets `request` through.
    fn serve(&self, caller: &Caller, mut request: Request) -> Result<Response, WireError> {
        if let Caller::User(user) = caller {
            self.screen(user, &mut request)?;
        }
        let store = &self.store;
        if grows_namespace(&request) {
            store.check_room()?;
        }
        match request {
            Request::GetCluster => Ok(Response::Cluster(self.cluster_in_service())),
            Request::AddServer { cred, server } => self.add_server(&cred, server),
            Request::Resolve { cred, path } => store.resolve(&cred, &path).map(Response::Attr),
            Request::Lookup { cred, parent, name } => store.lookup(&cred, parent, &name).map(Response::Attr),
            Request::LookupMany { cred, parent, names } => self.lookup_many(&cred, parent, &names),
            Request::CreateMany {
                cred,
                parent,
                names,
                mode,
                layout,
            } => self.create_many(&cred, parent, names, mode, &layout),
            Request::GetAttr { cred, inode } => store.getattr(&cred, inode).map(Response::Attr),
            Request::SetAttr { cred, inode, changes } => self.setattr(&cred, inode, &changes),
            Request::GrantCapability { cred, inode, rights } => {
                self.grant_capability(caller, &cred, inode, rights)
            }
            migrate @ (Request::MigrateBegin { .. }
            | Request::MigrateEnd { .. }
            | Request::ServerFiles { .. }
            | Request::SetServerState { .. }
            | Request::ServerStates { .. }) => self.serve_migrate(migrate),
            Request::Mkdir {
                cred,
                parent,
                name,
                mode,
            } => store.mkdir(&cred, parent, &name, mode).map(Response::Attr),
            Request::Create {
                cred,
                parent,
                name,
                mode,
                layout,
                exclusive,
            } => self
                .create(&cred, parent, name.as_bytes(), mode, &layout, exclusive)
                .map(Response::Attr),
            Request::Readdir {
                cred,
                dir,
                after,
                max_entries,
            } => store
                .readdir(&cred, dir, &after, max_entries)
                .map(|(entries, more)| Response::Entries { entries, more }),
            listing @ (Request::ReaddirPlus { .. } | Request::ReaddirSized { .. }) => self.listing_plus(listing),
            Request::Unlink {
                cred,
                parent,
                name,
                keep,
            } => {
                self.renewed(keep);
                store
                    .unlink(&cred, parent, &name, keep)
                    .map(|kept| Response::Unlinked { kept })
            }
            Request::Rmdir { cred, parent, name } => {
                store.rmdir(&cred, parent, &name).map(|()| Response::Done)
            }
            Request::Rename {
                cred,
                src_parent,
                src_name,
                dst_parent,
                dst_name,
                keep,
            } => {
                self.renewed(keep);
                store
                    .rename(&cred, (src_parent, &src_name), (dst_parent, &dst_name), keep)
                    .map(|(moved, kept)| Response::Renamed { moved, kept })
            }
            Request::RenameExchange {
                cred,
                a_parent,
                a_name,
                b_parent,
                b_name,
            } => store
                .exchange(&cred, (a_parent, &a_name), (b_parent, &b_name))
                .map(|moved| Response::Renamed { moved, kept: None }),
            Request::RenameNoReplace {
                cred,
                src_parent,
                src_name,
                dst_parent,
                dst_name,
            } => store
                .rename_no_replace(&cred, (src_parent, &src_name), (dst_parent, &dst_name))
                .map(|moved| Response::Renamed { moved, kept: None }),
            Request::Statfs { cred } => store.statfs(&cred).map(Response::Statfs),
            Request::SetDirLayout { cred, dir, layout } => {
                store.set_dir_layout(&cred, dir, layout).map(Response::Attr)
            }
            Request::MarkStale { cred, inode, server } => store.mark_stale(&cred, inode, server).map(|attr| {
                if let Some(hook) = self.stale_hook.get() {
                    hook(inode, server);
                }
                Response::Attr(attr)
            }),
            Request::StaleGeneration { cred, inode, server } => store
                .stale_generation(&cred, inode, server)
                .map(Response::Generation),
            Request::ClearStale {
                cred,
                inode,
                server,
                generation,
            } => store
                .clear_stale(&cred, inode, server, generation)
                .map(Response::Attr),
            Request::StaleList {
                cred,
                server,
                all,
                after,
                max,
            } => store
                .stale_list(&cred, server, all, after, max)
                .map(|(files, more)| Response::StaleFiles { files, more }),
            Request::BackupBegin => self.backup_begin(caller),
            Request::BackupRead {
                snapshot,
                offset,
                len,
            } => self.backup_read(caller, snapshot, offset, len),
            Request::BackupEnd { snapshot } => self.backup_end(caller, snapshot),
            Request::InodeStates { .. } | Request::AdoptOrphans { .. } | Request::LayoutScan { .. } => {
                self.check_scan(caller, request)
            }
            Request::Symlink {
                cred,
                parent,
                name,
                target,
            } => store.symlink(&cred, parent, &name, &target).map(Response::Attr),
            Request::Readlink { cred, inode } => store.readlink(&cred, inode).map(Response::Link),
            Request::Revalidate { cred, steps } => store.revalidate(&cred, &steps).map(Response::Attr),
            Request::Release { session, inode } => {
                self.renewed(Some(session));
                store.release(inode, session).map(|()| Response::Done)
            }
            Request::RenewSession { session } => {
                self.renewed(Some(session));
                Ok(Response::Done)
            }
            Request::FileLock(lock) => {
                use crate::file_locks::Outcome;
                self.may_lock(&lock)?;
                self.renewed(Some(lock.session));
                self.check_lapsed(lock.session, false)?;
                // Twice at most: once recorded, a session stays so for LOCK_RECORD_IDLE
                // (or until its mount ends it, after which it sends no lock).
                loop {
                    match self.file_locks.set(&lock, Instant::now())? {
                        Outcome::Done => break Ok(Response::Done),
                        Outcome::InGrace(held_back) => break Ok(self.lock_state(Some(held_back.left))),
                        Outcome::Unrecorded => self.record_lock_session(lock.session)?,
                    }
                }
            }
            Request::FileLockReclaim(lock) => {
                self.may_lock(&lock)?;
                self.renewed(Some(lock.session));
                self.check_lapsed(lock.session, false)?;
                while self.file_locks.reclaim(&lock, Instant::now())?
                    == crate::file_locks::Outcome::Unrecorded
                {
                    self.record_lock_session(lock.session)?;
                }
                Ok(self.lock_state(self.lock_grace_left()))
            }
            Request::LockReclaimComplete { session, incarnation } => {
                self.renewed(Some(session));
                // One for an earlier incarnation says nothing of this one's reclaims.
                if incarnation == self.incarnation.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    let during = self.file_locks.grace_left(now).is_some();
                    if during && self.file_locks.reclaim_complete(session, now).is_none() {
                        self.log_grace_over();
                    }
                }
                Ok(self.lock_state(self.lock_grace_left()))
            }
            Request::FileLockTest(lock) => match self.file_locks.test(&lock, Instant::now()) {
                Ok(holder) => Ok(Response::LockHolder(holder)),
                Err(held_back) => Ok(self.lock_state(Some(held_back.left))),
            },
            Request::LockSession { session } => {
                self.renewed(Some(session));
                self.check_lapsed(session, true)?;
                Ok(self.lock_state(self.lock_grace_left()))
            }
            Request::LockSessionEnd { session } => self.end_lock_session(session).map(|()| Response::Done),
            Request::CommitMetadata { wait } => {
                if wait {
                    store.commit()?;
                }
                Ok(Response::Committed(self.commit_info()))
            }
            Request::SharedPointer {
                inode,
                open,
                epoch,
                op,
            } => self
                .shared_pointers
                .apply(inode, open, epoch, op)
                .map(Response::Position),
            Request::SharedPointerSince {
                inode,
                open,
                epoch,
                incarnation,
                op,
            } => self
                .shared_pointers
                .apply_since(inode, open, epoch, incarnation, op)
                .map(Response::Position),
            Request::Hello { .. } | Request::Authenticate { .. } | Request::ServerInfo | Request::SecurityInfo => {
                Err(WireError::new(
                    ErrorCode::Unsupported,
                    "hello, server and security info are answered by the connection layer, not the metadata service",
                ))
            }
            Request::Metrics { .. } => Err(WireError::new(
                ErrorCode::Unsupported,
                "metrics are answered by the server process (weftd), not the metadata service",
            )),
            Request::Link {
                cred,
                inode,
                parent,
                name,
            } => store.link(&cred, inode, parent, &name).map(Response::Attr),
            Request::Mknod {
                cred,
                parent,
                name,
                kind,
                mode,
                rdev,
            } => store
                .mknod(&cred, parent, &name, kind, mode, rdev)
                .map(Response::Attr),
            Request::SetXattr {
                cred,
                inode,
                name,
                value,
                how,
            } => store
                .setxattr(&cred, inode, &name, &value, how)
                .map(|()| Response::Done),
            Request::GetXattr { cred, inode, name } => {
                store.getxattr(&cred, inode, &name).map(Response::Value)
            }
            Request::ListXattr { cred, inode } => store.listxattr(&cred, inode).map(Response::Names),
            Request::RemoveXattr { cred, inode, name } => {
                store.removexattr(&cred, inode, &name).map(|()| Response::Done)
            }
            Request::WithParent { request } => self
                .made(*request)
                .map(|Made { attr, parent }| Response::Made { attr, parent }),
            Request::CreateGranted { request } => self.create_granted(caller, *request, false),
            Request::CreateStamped { request } => self.create_granted(caller, *request, true),
            Request::Vouched { request } => self.vouched(*request),
            Request::VouchedReadable { request } => self.vouched_readable(caller, *request),
            Request::Changes { after, max } => Ok(self.changes(after, max)),
            Request::ReleaseWrites { releases } => {
                if let Some(writers) = self.writers.get() {
                    let now = unix_ms();
                    for (inode, (count, first_issued_ms)) in releases {
                        writers.released(inode, holder(caller), count, first_issued_ms);
                        // Quiet now: its size is measured once for the stats to come.
                        if writers.vouch(inode, now).is_some() {
                            self.sizes.want(inode);
                        }
                    }
                }
                Ok(Response::Done)
            }
            tracked @ Request::Tracked { .. } => self.tracked(caller, tracked),
            quota @ (Request::QuotaSet { .. }
            | Request::QuotaGet { .. }
            | Request::QuotaGrace { .. }
            | Request::Project { .. }
            | Request::QuotaRecount { .. }) => self.serve_quota(&quota),
            Request::ReplayDone { client } => {
                self.replay.done(client);
                Ok(Response::Done)
            }
            io @ (Request::ObjCreate { .. }
            | Request::ObjRemove { .. }
            | Request::ObjPrecreate { .. }
            | Request::ObjList { .. }
            | Request::Write { .. }
            | Request::Read { .. }
            | Request::Sync { .. }
            | Request::Extents { .. }
            | Request::Truncate { .. }
            | Request::IoStatfs
            | Request::RegisterView { .. }
            | Request::ReleaseView { .. }
            | Request::WriteView { .. }
            | Request::ReadView { .. }
            | Request::AppendLock { .. }
            | Request::AppendUnlock { .. }
            | Request::ExtentLock { .. }
            | Request::ExtentUnlock { .. }
            | Request::LockStats
            | Request::RebuildStamp { .. }
            | Request::RebuildWrite { .. }
            | Request::MigrateObject { .. }
            | Request::ShmAttach { .. }
            | Request::ShmCall { .. }
            | Request::ShmAttachPool { .. }
            | Request::ShmScatter { .. }
            | Request::ObjStat { .. }
            | Request::ObjStamp { .. }
            | Request::ObjTimes { .. }
            | Request::Allocate { .. }
            | Request::PresentCapability { .. }
            | Request::RevokeCapabilities { .. }) => Err(WireError::new(
                ErrorCode::Unsupported,
                format!(
                    "this is a metadata server: {:?} goes to an io server",
                    io.opcode()
                ),
            )),
            cache @ (Request::ViaCache { .. }
            | Request::ViaCacheAware { .. }
            | Request::CacheFlush { .. }
            | Request::CacheTruncate { .. }
            | Request::CachePunch { .. }
            | Request::CacheExtents { .. }
            | Request::CacheClose { .. }
            | Request::CacheStats
            | Request::CacheCioStats
            | Request::CacheDrop { .. }
            | Request::CacheMigrate { .. }) => Err(WireError::new(
                ErrorCode::Unsupported,
                format!(
                    "this is a metadata server: {:?} goes to a cache manager",
                    cache.opcode()
                ),
            )),
            // The server process answers it with its issuer's key (weft-server's
            // `roles.rs`); a service without one has none to verify with.
            Request::VerifyCapability { .. } => Err(WireError::new(
                ErrorCode::Unsupported,
                "this cluster's io servers ask for no capabilities",
            )),
        }
    }

    /// `SetAttr`. An explicit mtime is set on the file's objects too (their own times
    /// are later: they were written before), and the answer waits for them. When the
    /// change cannot be refused (root's, on a regular file; only the file's removal or
    /// a storage failure can fail it), the objects are asked while the change commits
    /// rather than after: the writes it must follow were answered before the client
    /// sent it. Otherwise only once it has committed, so that a refused change sets no
    /// object's time.
    fn setattr(&self, cred: &Cred, inode: InodeId, changes: &SetAttr) -> Result<Response, WireError> {
        let store = &self.store;
        let mut early = None;
        if let (Some(TimeSet::At(mtime)), 0, None, false) =
            (changes.mtime, cred.uid, changes.size, changes.kill_privileges)
        {
            if let Ok(Attr {
                kind: FileKind::File,
                layout: Some(layout),
                ..
            }) = store.getattr(cred, inode)
            {
                early = Some((mtime, layout));
            }
        }
        let (attr, times) = match early {
            Some((mtime, layout)) => {
                let mut committed = None;
                let results =
                    self.objects
                        .set_mtime_each(&layout.all_servers(), &[inode], mtime, &mut || {
                            committed = Some(store.setattr(cred, inode, changes));
                        });
                // An implementation that did not run `meanwhile` leaves the commit here.
                let attr = match committed {
                    Some(result) => result?,
                    None => store.setattr(cred, inode, changes)?,
                };
                (attr, Some((mtime, layout.all_servers(), results)))
            }
            None => {
                let attr = store.setattr(cred, inode, changes)?;
                let times = match (changes.mtime, &attr.layout) {
                    (Some(TimeSet::At(mtime)), Some(layout)) => Some((
                        mtime,
                        layout.all_servers(),
                        self.objects
                            .set_mtime_each(&layout.all_servers(), &[inode], mtime, &mut || {}),
                    )),
                    _ => None,
                };
                (attr, times)
            }
        };
        for (server, result) in times
            .iter()
            .flat_map(|(_, servers, results)| servers.iter().zip(results))
        {
            if let Err(e) = result {
                eprintln!(
                    "weftd meta: setting the time of inode {inode}'s object on io server {server}: {}; \
                     a stat may show the object's later time",
                    e.message
                );
            }
        }
        // Sizes and times are the io servers' too (the objects' were set above): a
        // vouch given before no longer covers what a client read of them.
        if changes.size.is_some() || changes.mtime.is_some() || changes.atime.is_some() {
            if let Some(writers) = self.writers.get() {
                writers.changed(inode);
            }
        }
        // A chmod or chown may take rights away: capabilities issued before it
        // go (their holders ask again, and are checked again).
        if changes.mode.is_some() || changes.uid.is_some() || changes.gid.is_some() {
            self.handles.forget(inode);
            if let Some(issuer) = self.capabilities.get() {
                issuer.revoke(&[inode]);
            }
        }
        Ok(Response::Attr(attr))
    }

    /// What a verified user's `request` must pass before it is served (see
    /// `Caller::User`); a handle-based `SetAttr` without a matching grant loses its
    /// handle (it is then checked as a path-based one).
    fn screen(&self, user: &Cred, request: &mut Request) -> Result<(), WireError> {
        for inode in addressed(request) {
            self.store.may_reach(user, inode)?;
        }
        match request {
            Request::SetAttr { inode, changes, .. } if changes.by_handle => {
                let owner = match self.store.getattr(user, *inode) {
                    Ok(attr) => attr.uid,
                    Err(_) => return Ok(()),
                };
                // The owner (and root) may chmod the file anyway: a claimed handle
                // gives them nothing they could not take.
                let holds = user.uid == 0
                    || user.uid == owner
                    || self.capabilities.get().is_none()
                    || self
                        .handles
                        .holds(*inode, user.uid, weft_proto::capability::rights::WRITE, unix_ms());
                if !holds {
                    changes.by_handle = false;
                }
            }
            Request::FileLock(lock) | Request::FileLockReclaim(lock) => {
                let want = match lock.kind {
                    weft_proto::LockKind::Read => crate::store::MAY_READ,
                    weft_proto::LockKind::Write => crate::store::MAY_WRITE,
                    weft_proto::LockKind::Unlock => return Ok(()),
                };
                self.store
                    .may_access_data(user, lock.inode, want, false)
                    .map_err(|e| {
                        WireError::new(
                            e.code,
                            format!("no {:?} lock on inode {}: {}", lock.kind, lock.inode, e.message),
                        )
                    })?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A lock (not an unlock) only on an inode that exists (a file kept nameless by a
    /// mount does): a lock on a missing one would block the number for nothing.
    fn may_lock(&self, lock: &weft_proto::LockRequest) -> Result<(), WireError> {
        if lock.kind == weft_proto::LockKind::Unlock {
            return Ok(());
        }
        self.store.getattr(&Cred::root(), lock.inode).map(|_| ())
    }

    /// A `WithParent`'s request (one that makes a name) with its directory's
    /// attributes as the operation's own transaction left them. Decoding lets only
    /// those requests through; anything else here is a caller's mistake.
    fn made(&self, request: Request) -> Result<Made, WireError> {
        let store = &self.store;
        match request {
            Request::Create {
                cred,
                parent,
                name,
                mode,
                layout,
                exclusive,
            } => self.create_made(&cred, parent, name.as_bytes(), mode, &layout, exclusive),
            Request::Mkdir {
                cred,
                parent,
                name,
                mode,
            } => store.mkdir_made(&cred, parent, &name, mode),
            Request::Symlink {
                cred,
                parent,
                name,
                target,
            } => store.symlink_made(&cred, parent, &name, &target),
            Request::Mknod {
                cred,
                parent,
                name,
                kind,
                mode,
                rdev,
            } => store.mknod_made(&cred, parent, &name, kind, mode, rdev),
            Request::Link {
                cred,
                inode,
                parent,
                name,
            } => store.link_made(&cred, inode, parent, &name),
            other => Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "{:?} makes no name: only create, mkdir, symlink, mknod and link are answered with their directory",
                    other.opcode()
                ),
            )),
        }
    }
}

/// Refuses a request of `count` names above `max` (`what`: the request, in the message).
pub(super) fn names_at_most(count: usize, max: usize, what: &str) -> Result<(), WireError> {
    if count > max {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("{count} names in one {what}: at most {max}"),
        ));
    }
    Ok(())
}

/// The inodes `request` names by number (directories it acts in, files it acts on).
fn addressed(request: &Request) -> Vec<InodeId> {
    match request {
        Request::Lookup { parent, .. }
        | Request::LookupMany { parent, .. }
        | Request::CreateMany { parent, .. }
        | Request::Mkdir { parent, .. }
        | Request::Create { parent, .. }
        | Request::Unlink { parent, .. }
        | Request::Rmdir { parent, .. }
        | Request::Symlink { parent, .. }
        | Request::Mknod { parent, .. } => vec![*parent],
        Request::GetAttr { inode, .. }
        | Request::SetAttr { inode, .. }
        | Request::GrantCapability { inode, .. }
        | Request::Readlink { inode, .. }
        | Request::SetXattr { inode, .. }
        | Request::GetXattr { inode, .. }
        | Request::ListXattr { inode, .. }
        | Request::RemoveXattr { inode, .. }
        | Request::SharedPointer { inode, .. }
        | Request::SharedPointerSince { inode, .. }
        | Request::MarkStale { inode, .. }
        | Request::StaleGeneration { inode, .. }
        | Request::ClearStale { inode, .. }
        | Request::Project { inode, .. } => vec![*inode],
        Request::MigrateBegin { inode, temp, .. } | Request::MigrateEnd { inode, temp, .. } => {
            vec![*inode, *temp]
        }
        Request::Readdir { dir, .. }
        | Request::ReaddirPlus { dir, .. }
        | Request::ReaddirSized { dir, .. }
        | Request::SetDirLayout { dir, .. } => {
            vec![*dir]
        }
        Request::Rename {
            src_parent,
            dst_parent,
            ..
        }
        | Request::RenameNoReplace {
            src_parent,
            dst_parent,
            ..
        } => vec![*src_parent, *dst_parent],
        Request::RenameExchange {
            a_parent, b_parent, ..
        } => vec![*a_parent, *b_parent],
        Request::Link { inode, parent, .. } => vec![*inode, *parent],
        // Each step's parent is searched by the revalidation itself: only where the
        // chain starts (or restarts) must be reached.
        Request::Revalidate { steps, .. } => steps
            .iter()
            .enumerate()
            .filter(|(i, step)| *i == 0 || steps[i - 1].child != step.parent)
            .map(|(_, step)| step.parent)
            .collect(),
        Request::FileLock(lock) | Request::FileLockReclaim(lock) | Request::FileLockTest(lock) => {
            vec![lock.inode]
        }
        Request::WithParent { request }
        | Request::CreateGranted { request }
        | Request::CreateStamped { request }
        | Request::Vouched { request }
        | Request::VouchedReadable { request } => addressed(request),
        Request::Tracked { request, .. } => addressed(request),
        _ => Vec::new(),
    }
}

/// Now, in Unix ms (the time capabilities are stamped with).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Whether `request` adds to the manager's database (a new name or inode, an xattr):
/// refused on a nearly full file system (`MetaStore::check_room`), unlike removals,
/// renames and attribute changes, which must go on so that space can be freed.
fn grows_namespace(request: &Request) -> bool {
    match request {
        Request::Create { .. }
        | Request::CreateMany { .. }
        | Request::Mkdir { .. }
        | Request::Symlink { .. }
        | Request::Link { .. }
        | Request::Mknod { .. }
        | Request::SetXattr { .. } => true,
        Request::WithParent { request }
        | Request::CreateGranted { request }
        | Request::CreateStamped { request } => grows_namespace(request),
        Request::Tracked { request, .. } => grows_namespace(request),
        _ => false,
    }
}

/// Whose write grants a caller's `ReleaseWrites` may give back: its own only.
fn holder(caller: &Caller) -> crate::writers::Holder {
    match caller {
        Caller::Trusted => crate::writers::Holder::Servers,
        Caller::User(user) => crate::writers::Holder::Uid(user.uid),
    }
}

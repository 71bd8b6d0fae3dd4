//! `MetaService`: turns metadata requests into store operations, creates and
//! removes file objects on the io servers through [`ObjectServers`], and purges
//! the objects of removed files in the background.

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
/// one create at a time.
pub const PRECREATE_POOLS_MAX: usize = 16;
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

/// The metadata role of a server.
pub struct MetaService {
    store: MetaStore,
    cluster: ClusterInfo,
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
    /// Held across each durable write of the record of lock sessions (see
    /// `file_locks`), so that an addition and a removal of one session never cross.
    lock_records: Mutex<()>,
    /// Precreated inode numbers ready for creates, by the (sorted) set of io servers
    /// holding their objects; every one is in the store's precreated table too.
    precreated: Mutex<HashMap<Vec<ServerId>, Vec<InodeId>>>,
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
}

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

    /// Grants only reclaims of locks (see `file_locks`) for `grace` from this service's
    /// start, or until every mount session its record names as holding locks has
    /// reclaimed them; none if no session is recorded, or if `grace` is zero or its
    /// database was created by this start (the record is then stale: it goes).
    pub fn set_lock_grace(&self, grace: Duration) {
        let (recorded, overflow) = match self.store.lock_sessions() {
            Ok(found) => found,
            Err(e) => {
                eprintln!(
                    "weftd meta: reading the record of mounts that held file locks: {e}; waiting the whole grace for reclaims"
                );
                (Vec::new(), true)
            }
        };
        let wanted = !self.store.created() && !grace.is_zero();
        if wanted {
            self.file_locks
                .start_records(&recorded, overflow, Some(self.started + grace), self.started);
            return;
        }
        if !recorded.is_empty() || overflow {
            let _one = self.lock_records.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = self.store.forget_lock_sessions(&recorded, overflow) {
                eprintln!("weftd meta: clearing the record of mounts that held file locks: {e}");
            }
        }
        self.file_locks.start_records(&[], false, None, self.started);
    }

    /// Mount sessions the grace still waits for (`None`: no grace, or one that runs
    /// for its whole time).
    pub fn lock_grace_waiting_for(&self) -> Option<usize> {
        self.file_locks.waiting_for(Instant::now())
    }

    /// Records `session` durably as one that takes locks, if it is not yet (see
    /// `file_locks`); the lock is granted only once this returned.
    fn record_lock_session(&self, session: u64) -> Result<(), WireError> {
        use crate::file_locks::Recording;
        let _one = self.lock_records.lock().unwrap_or_else(|p| p.into_inner());
        match self.file_locks.recording(session) {
            Recording::Recorded => {}
            Recording::Record => {
                self.store.record_lock_session(session)?;
                self.file_locks.recorded(session, Instant::now());
            }
            Recording::Full => {
                self.store.record_lock_overflow()?;
                self.file_locks.overflowed();
                eprintln!(
                    "weftd meta: the record of mounts holding file locks is full ({} sessions): after a crash the next start waits its whole grace for reclaims",
                    crate::file_locks::RECORDED_MAX
                );
            }
        }
        Ok(())
    }

    /// `LockSessionEnd`: `session`'s mount unmounts; unless it still holds locks here it
    /// leaves the record, and the grace, if any, stops waiting for it.
    fn end_lock_session(&self, session: u64) -> Result<(), WireError> {
        let _one = self.lock_records.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let during = self.file_locks.grace_left(now).is_some();
        if self.file_locks.end_session(session, now) {
            self.store.forget_lock_sessions(&[session], false)?;
        }
        if during && self.file_locks.grace_left(now).is_none() {
            self.log_grace_over();
        }
        Ok(())
    }

    fn log_grace_over(&self) {
        eprintln!(
            "weftd meta: every mount that held file locks has reclaimed them: the grace ends {} ms after the start",
            self.started.elapsed().as_millis()
        );
    }

    /// Drops from the record the sessions that held no lock for `LOCK_RECORD_IDLE`
    /// (the purger's, every round).
    pub fn forget_idle_lock_sessions(&self) {
        let _one = self.lock_records.lock().unwrap_or_else(|p| p.into_inner());
        let idle = self
            .file_locks
            .idle_records(weft_proto::LOCK_RECORD_IDLE, Instant::now());
        if let Err(e) = self.store.forget_lock_sessions(&idle.sessions, idle.overflow) {
            eprintln!(
                "weftd meta: dropping {} idle mounts from the record of mounts holding file locks: {e} (a crash costs the next start its whole grace)",
                idle.sessions.len()
            );
        }
    }

    /// Stops granting file locks for good (the server is stopping): from here every
    /// lock request is held back as during a grace (mounts ask again, then ask the next
    /// manager), so the locks held can only go down. Returns how many are held.
    pub fn stop_locks(&self) -> usize {
        self.file_locks
            .start_grace(Instant::now() + Duration::from_secs(24 * 3600));
        self.file_locks.held()
    }

    /// The grace for lock reclaims left (`None`: over, or none).
    pub fn lock_grace_left(&self) -> Option<Duration> {
        self.file_locks.grace_left(Instant::now())
    }

    fn lock_state(&self, grace: Option<Duration>) -> Response {
        Response::LockState(weft_proto::LockState {
            incarnation: self.incarnation.load(Ordering::Relaxed),
            // Rounded up: a grace left of under a millisecond is still one.
            grace_left_ms: grace.map_or(0, |left| left.as_nanos().div_ceil(1_000_000) as u64),
        })
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
        Ok(MetaService {
            store,
            cluster,
            objects,
            sessions: Mutex::new(HashMap::new()),
            session_lease: SESSION_LEASE,
            lapsed: Mutex::default(),
            file_locks: Default::default(),
            incarnation: AtomicU64::new(0),
            lock_records: Mutex::new(()),
            started: Instant::now(),
            purge_candidates: Mutex::new(BTreeSet::new()),
            uncertain: Mutex::new(Vec::new()),
            shared_pointers: Default::default(),
            precreated: Mutex::new(HashMap::new()),
            refilling: Mutex::new(()),
            precreate_batch: AtomicUsize::new(PRECREATE_BATCH),
            batch_doublings: Mutex::new(HashMap::new()),
            handles: Default::default(),
            capabilities: Default::default(),
            writers: Default::default(),
            refiller: Mutex::new(None),
            refills_asked: Mutex::new(BTreeSet::new()),
            replay: Default::default(),
        })
    }

    /// Loads the records of tracked requests; with `window` (a start that may have lost
    /// acknowledged operations: a commit interval above 0) holds the replay window
    /// (see `replay.rs`).
    pub fn start_replay(&self, window: Option<Duration>) -> Result<(), WireError> {
        let records = self.store.replies()?;
        self.replay.start(records, window);
        Ok(())
    }

    /// Whether the replay window after the start is still open.
    pub fn replay_window_open(&self) -> bool {
        self.replay.window_open()
    }

    /// A `Tracked` request (see `replay.rs`): answered from its record if it was done,
    /// else done, with its answer recorded in its own transaction.
    fn tracked(&self, caller: &Caller, tracked: Request) -> Result<Response, WireError> {
        let Request::Tracked {
            client,
            slot,
            xid,
            replay,
            made,
            request,
        } = tracked
        else {
            unreachable!("tracked() is given Tracked requests");
        };
        if replay == 0 {
            self.replay.wait_open();
        }
        let answer = |seq: u64, response: Response| {
            Ok(Response::Tracked {
                seq,
                durable_seq: self.store.commit_state().durable_seq,
                epoch: self.incarnation.load(Ordering::Relaxed),
                response: Box::new(response),
            })
        };
        let key = (client, slot);
        let (_hold, seen) = self.replay.claim(key, xid);
        match seen {
            crate::replay::Seen::Done(seq, body) => {
                let response = match (crate::replay::decode_reply(&body)?, &*request) {
                    // The capability is not recorded: the client asks at its first write.
                    (Response::Made { attr, parent }, Request::CreateGranted { .. }) => {
                        Response::MadeGranted {
                            attr,
                            parent,
                            capability: None,
                        }
                    }
                    (response, _) => response,
                };
                return answer(seq, response);
            }
            crate::replay::Seen::Superseded if replay > 0 => return answer(0, Response::Done),
            crate::replay::Seen::Superseded => {
                return Err(WireError::new(
                    ErrorCode::Stale,
                    format!("request {xid} of client {client:x} slot {slot} was overtaken by a later one"),
                ))
            }
            crate::replay::Seen::New => {}
        }
        if replay > 0 {
            self.replay.turn(client, replay);
        }
        // A client's first tracked request commits durably before it is answered: its
        // record must survive a crash for the next start's replay window to wait for it
        // (a client whose every record a crash undid would not be expected, and its
        // replays would come after others had seen the namespace without them).
        let first_of_client = !self.replay.knows(client);
        crate::store::replies::track(crate::store::replies::Tracking {
            client,
            slot,
            xid,
            reuse: made.map(|attr| (attr.inode, attr.layout)),
            reply_of: crate::replay::reply_of(&request),
            forget: self.replay.to_forget(),
            recorded: None,
        });
        let result = self.serve(caller, *request);
        let tracking = crate::store::replies::untrack();
        if replay > 0 {
            self.replay.turn_over();
        }
        let response = result?;
        let seq = match tracking.and_then(|t| t.recorded) {
            Some(reply) => {
                let seq = reply.seq;
                self.replay.recorded(key, reply);
                seq
            }
            None => 0,
        };
        if first_of_client && seq > 0 {
            self.store.commit()?;
        }
        answer(seq, response)
    }

    /// Objects to precreate per refill of a pool, at most `BATCH_INODES_MAX`; 0 turns
    /// the pools off (every create makes its objects; numbers already pooled are used).
    pub fn set_precreate_batch(&self, batch: usize) {
        self.precreate_batch
            .store(batch.min(BATCH_INODES_MAX), Ordering::Relaxed);
    }

    /// Grants capabilities with `issuer` (set once; without one, `GrantCapability`
    /// answers that the cluster asks for none).
    pub fn set_capability_issuer(&self, issuer: Arc<dyn CapabilityIssuer>) {
        let now = unix_ms();
        let sample = issuer.issue(InodeId(0), 0, now);
        let lifetime = sample.expiry_ms.saturating_sub(sample.issued_ms);
        if self.capabilities.set(issuer).is_ok() {
            let _ = self.writers.set(crate::writers::Writers::new(now, lifetime));
        }
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

    /// `Vouched`: `request`'s attributes, and for a regular file outside the cache tier
    /// (whose managers write back on their own) the manager's vouch (see `writers`).
    fn vouched(&self, cred_request: Request) -> Result<Response, WireError> {
        let store = &self.store;
        let attr = match cred_request {
            Request::Lookup { cred, parent, name } => store.lookup(&cred, parent, &name)?,
            Request::Revalidate { cred, steps } => store.revalidate(&cred, &steps)?,
            Request::GetAttr { cred, inode } => store.getattr(&cred, inode)?,
            other => {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("{:?} is answered with no vouch", other.opcode()),
                ))
            }
        };
        let vouch = match self.writers.get() {
            Some(writers) if attr.kind == FileKind::File && !attr.cache.uses_tier() => {
                writers.vouch(attr.inode, unix_ms())
            }
            _ => None,
        };
        Ok(Response::AttrVouched { attr, vouch })
    }

    /// `GrantCapability`: the permission check of an open, then a signed capability. A
    /// verified user's grant is recorded (`handles`): it is the open that the user's
    /// handle-based requests, and reads of the file once removed, are checked against.
    fn grant_capability(
        &self,
        caller: &Caller,
        cred: &Cred,
        inode: InodeId,
        rights: u8,
    ) -> Result<Response, WireError> {
        use weft_proto::capability::rights::{READ, WRITE};
        let Some(issuer) = self.capabilities.get() else {
            return Err(WireError::new(
                ErrorCode::Unsupported,
                "this cluster's io servers ask for no capabilities",
            ));
        };
        let mut want = 0;
        if rights & READ != 0 {
            want |= crate::store::MAY_READ;
        }
        if rights & WRITE != 0 {
            want |= crate::store::MAY_WRITE;
        }
        let issued = issuer.issue_time();
        let orphan_read = match caller {
            Caller::Trusted => true,
            Caller::User(user) => self.handles.holds(inode, user.uid, rights, unix_ms()),
        };
        self.store.may_access_data(cred, inode, want, orphan_read)?;
        let capability = issuer.issue(inode, rights, issued);
        if rights & WRITE != 0 {
            if let Some(writers) = self.writers.get() {
                writers.granted(inode, holder(caller), capability.expiry_ms, unix_ms());
            }
        }
        if let Caller::User(user) = caller {
            self.handles
                .record(inode, user.uid, rights, capability.expiry_ms, unix_ms());
        }
        Ok(Response::Capability(capability))
    }

    /// `CreateGranted`: the create as a `WithParent` makes it, then the capability to
    /// read and write the file that its first write would ask for, in the same round
    /// trip. A grant refused (the cluster asks for none, the mode gives the creator no
    /// access) is no error: the file is made, and the client asks at its first write as
    /// for any open.
    fn create_granted(&self, caller: &Caller, request: Request) -> Result<Response, WireError> {
        use weft_proto::capability::rights::{READ, WRITE};
        let cred = match &request {
            Request::Create { cred, .. } => cred.clone(),
            other => {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("{:?} is no create: only a create is granted with", other.opcode()),
                ))
            }
        };
        let Made { attr, parent } = self.made(request)?;
        let capability = match self.grant_capability(caller, &cred, attr.inode, READ | WRITE) {
            Ok(Response::Capability(cap)) => Some(cap),
            _ => None,
        };
        Ok(Response::MadeGranted {
            attr,
            parent,
            capability,
        })
    }

    /// `LookupMany`: every name of `names` found in `parent`, with its attributes, in
    /// the order asked; a name not there is left out, any other failure (no such
    /// directory, no search permission) fails the whole request.
    fn lookup_many(&self, cred: &Cred, parent: InodeId, names: &[Name]) -> Result<Response, WireError> {
        if names.len() > weft_proto::msg::LOOKUP_MANY_MAX {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "{} names in one lookup-many: at most {}",
                    names.len(),
                    weft_proto::msg::LOOKUP_MANY_MAX
                ),
            ));
        }
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

    /// Notes that mount session `session` is alive.
    fn renewed(&self, session: Option<u64>) {
        let Some(session) = session else { return };
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.len() >= SESSIONS_MAX && !sessions.contains_key(&session) {
            sessions.retain(|_, at| at.elapsed() < self.session_lease);
        }
        if sessions.len() < SESSIONS_MAX || sessions.contains_key(&session) {
            sessions.insert(session, Instant::now());
        }
    }

    /// How long a mount session lives without renewing (`SESSION_LEASE` by default;
    /// shorter in tests).
    pub fn set_session_lease(&mut self, lease: Duration) {
        self.session_lease = lease;
    }

    /// `Stale` if `session`'s locks were dropped for lapsing and its mount was not told
    /// yet; `tell`: this answer tells it (its `LockSession`), so it is forgotten.
    fn check_lapsed(&self, session: u64, tell: bool) -> Result<(), WireError> {
        let mut lapsed = self.lapsed.lock().unwrap_or_else(|p| p.into_inner());
        let was = if tell {
            lapsed.take(session)
        } else {
            lapsed.contains(session)
        };
        if was {
            return Err(WireError::new(
                ErrorCode::Stale,
                format!(
                    "this mount's file locks were dropped: its session {session:#x} was not renewed for {} ms (the mount was stopped or cut off from the metadata manager), and other processes may have taken them",
                    self.session_lease.as_millis()
                ),
            ));
        }
        Ok(())
    }

    /// Releases files kept by sessions that have not renewed within the lease (their
    /// mounts are gone). Returns how many were released.
    pub fn release_lapsed_sessions(&self) -> usize {
        if self.started.elapsed() < self.session_lease {
            return 0;
        }
        let lapsed_session = |session: u64| {
            let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            sessions
                .get(&session)
                .is_none_or(|at| at.elapsed() >= self.session_lease)
        };
        // Those holding locks are remembered, so that their mounts learn it if they
        // come back (see `lapsed`).
        let lapsing: Vec<u64> = self
            .file_locks
            .sessions()
            .into_iter()
            .filter(|&s| lapsed_session(s))
            .collect();
        if !lapsing.is_empty() {
            let dropped = self.file_locks.drop_sessions(|s| lapsing.contains(&s));
            let mut lapsed = self.lapsed.lock().unwrap_or_else(|p| p.into_inner());
            for &session in &lapsing {
                lapsed.add(session);
            }
            eprintln!(
                "weftd meta: dropped {dropped} file locks of {} mounts that stopped renewing their sessions (for {} ms); they are told when they come back",
                lapsing.len(),
                self.session_lease.as_millis()
            );
        }
        let kept = match self.store.kept(KEPT_SCAN_MAX) {
            Ok(kept) => kept,
            Err(error) => {
                eprintln!("weftd meta: reading kept files: {error}");
                return 0;
            }
        };
        let lapsed: Vec<(InodeId, u64)> = {
            let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            kept.into_iter()
                .filter(|(_, s)| {
                    sessions
                        .get(s)
                        .is_none_or(|at| at.elapsed() >= self.session_lease)
                })
                .collect()
        };
        let mut released = 0;
        for (inode, session) in lapsed {
            match self.store.release(inode, session) {
                Ok(()) => released += 1,
                Err(error) => {
                    eprintln!("weftd meta: releasing inode {inode} of lapsed session {session:#x}: {error}")
                }
            }
        }
        released
    }

    pub fn cluster(&self) -> &ClusterInfo {
        &self.cluster
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
        ) {
            self.replay.wait_open();
        }
        // A namespace change that does not grow the database (a removal, a rename, an
        // attribute change) and met a full disk is served once more: the store released
        // its reserve file on that error (`MetaStore::recover`), and removals must commit
        // into it (a tracked change's answer record needs a little room too). The failed
        // commit left nothing, so the second try is the only one applied.
        let again = (request.is_tracked() && !grows_namespace(&request)).then(|| request.clone());
        match (self.serve(caller, request), again) {
            (Err(e), Some(again)) if e.code == ErrorCode::NoSpace => self.serve(caller, again),
            (result, _) => result,
        }
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
            Request::GetCluster => Ok(Response::Cluster(self.cluster.clone())),
            Request::Resolve { cred, path } => store.resolve(&cred, &path).map(Response::Attr),
            Request::Lookup { cred, parent, name } => store.lookup(&cred, parent, &name).map(Response::Attr),
            Request::LookupMany { cred, parent, names } => self.lookup_many(&cred, parent, &names),
            Request::GetAttr { cred, inode } => store.getattr(&cred, inode).map(Response::Attr),
            Request::SetAttr { cred, inode, changes } => self.setattr(&cred, inode, &changes),
            Request::GrantCapability { cred, inode, rights } => {
                self.grant_capability(caller, &cred, inode, rights)
            }
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
            Request::ReaddirPlus {
                cred,
                dir,
                after,
                max_entries,
            } => store
                .readdir_plus(&cred, dir, &after, max_entries)
                .map(|(entries, more)| Response::EntriesPlus { entries, more }),
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
            Request::MarkStale { cred, inode, server } => {
                store.mark_stale(&cred, inode, server).map(Response::Attr)
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
            Request::Hello { .. } | Request::Authenticate { .. } | Request::ServerInfo => {
                Err(WireError::new(
                    ErrorCode::Unsupported,
                    "hello and server info are answered by the connection layer, not the metadata service",
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
            Request::CreateGranted { request } => self.create_granted(caller, *request),
            Request::Vouched { request } => self.vouched(*request),
            Request::ReleaseWrites { releases } => {
                if let Some(writers) = self.writers.get() {
                    for (inode, (count, first_issued_ms)) in releases {
                        writers.released(inode, holder(caller), count, first_issued_ms);
                    }
                }
                Ok(Response::Done)
            }
            tracked @ Request::Tracked { .. } => self.tracked(caller, tracked),
            Request::ReplayDone { client } => {
                self.replay.done(client);
                Ok(Response::Done)
            }
            io @ (Request::ObjCreate { .. }
            | Request::ObjRemove { .. }
            | Request::ObjPrecreate { .. }
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
            | Request::CacheDrop { .. }) => Err(WireError::new(
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

    /// `create`, with the parent's attributes after it (for an existing file a
    /// non-exclusive create opens, the parent as it is then).
    pub fn create_made(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: &[u8],
        mode: u32,
        layout: &LayoutRequest,
        exclusive: bool,
    ) -> Result<Made, WireError> {
        match self.create_or_open(cred, parent, name, mode, layout, exclusive)? {
            Created::Made(made) => Ok(*made),
            Created::Existing(attr) => Ok(Made {
                attr: *attr,
                parent: self.store.getattr(cred, parent)?,
            }),
        }
    }

    /// Creates a file: check, take a precreated inode number for the layout's servers
    /// (its objects exist and are durable: no round trip to the io servers, see
    /// `take_precreated`) or, for a server set without a pool, create its objects now
    /// (in parallel threads, at most `OBJECT_CALLS_PARALLEL_MAX` at once), then commit.
    /// Objects of a create that does not commit go back to the pool, or are removed
    /// again, or left to the purger if that fails. A crash before the commit leaves
    /// precreated objects, which the next start hands to the purger, or (without a pool)
    /// empty objects with a never-reused inode number (harmless, not reclaimed).
    pub fn create(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: &[u8],
        mode: u32,
        layout: &LayoutRequest,
        exclusive: bool,
    ) -> Result<Attr, WireError> {
        match self.create_or_open(cred, parent, name, mode, layout, exclusive)? {
            Created::Made(made) => Ok(made.attr),
            Created::Existing(attr) => Ok(*attr),
        }
    }

    fn create_or_open(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: &[u8],
        mode: u32,
        layout: &LayoutRequest,
        exclusive: bool,
    ) -> Result<Created, WireError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            // A replay makes the file under its first number (see `replay.rs`).
            let again = crate::store::replies::reuse_peek();
            let mut pending = match self
                .store
                .create_check(cred, parent, name, mode, layout, exclusive)?
            {
                CreateCheck::Existing(attr) => return Ok(Created::Existing(Box::new(attr))),
                CreateCheck::New(pending) => pending,
            };
            let again = again.filter(|(inode, layout)| *inode == pending.inode() && layout.is_some());
            if let Some((_, Some(layout))) = &again {
                pending = pending.use_again(layout.clone());
            }
            let taken = match again {
                Some(_) => Ok(None),
                None => self.take_precreated(pending.layout()),
            };
            let pooled = match taken {
                Ok(Some(inode)) => {
                    pending = pending.use_precreated(inode);
                    true
                }
                Ok(None) => false,
                Err(error) => {
                    return Err(WireError::new(
                        error.code,
                        format!("creating {}: {}", String::from_utf8_lossy(name), error.message),
                    ))
                }
            };
            let inode = pending.inode();
            if !pooled {
                let servers = &pending.layout().all_servers();
                let created =
                    self.on_each_server(servers, |server| self.objects.precreate_objects(server, &[inode]));
                let created = match pending.reused() {
                    // A replayed create's objects are its own, maybe with data since.
                    true => created
                        .into_iter()
                        .map(|r| {
                            r.or_else(|e| {
                                if e.code == ErrorCode::Exists {
                                    Ok(())
                                } else {
                                    Err(e)
                                }
                            })
                        })
                        .collect(),
                    false => self.replace_stale_objects(inode, servers, created),
                };
                if let Some((server, error)) = first_failure(servers, created) {
                    self.discard_objects(inode, pending.layout());
                    // A stale object that could not be replaced is this server's fault,
                    // not a name that exists: never `Exists`, which clients take for a
                    // create that lost a race.
                    let code = match error.code {
                        ErrorCode::Exists => ErrorCode::Io,
                        code => code,
                    };
                    return Err(WireError::new(
                        code,
                        format!(
                            "creating the object of {name:?} (inode {inode}) on io server {server}: {}",
                            error.message
                        ),
                    ));
                }
            }
            let layout = pending.layout().clone();
            match self.store.create_commit_made(cred, pending) {
                Ok(made) => return Ok(Created::Made(Box::new(made))),
                Err(error) => {
                    if matches!(error.code, ErrorCode::Io | ErrorCode::NoSpace) {
                        // The commit may have reached the disk before failing: its
                        // objects go only once the store says it did not.
                        self.discard_if_uncommitted(inode, layout);
                        return Err(error);
                    }
                    if pooled {
                        // Still in the precreated table: back to the pool.
                        self.return_precreated(&layout, inode);
                    } else {
                        self.discard_objects(inode, &layout);
                    }
                    let lost_race = error.code == ErrorCode::Exists && !exclusive;
                    if !lost_race || attempt == CREATE_ATTEMPTS_MAX {
                        return Err(error);
                    }
                }
            }
        }
    }

    /// Io servers create objects exclusively: an object already there for a freshly
    /// allocated inode number was left by a bug or planted by a peer holding the
    /// cluster key, hoping a new file would serve its bytes. Logged, removed and
    /// created again, once per server; what still fails stays in `results`.
    fn replace_stale_objects(
        &self,
        inode: InodeId,
        servers: &[ServerId],
        results: Vec<Result<(), WireError>>,
    ) -> Vec<Result<(), WireError>> {
        servers
            .iter()
            .zip(results)
            .map(|(&server, result)| match result {
                Err(error) if error.code == ErrorCode::Exists => {
                    eprintln!(
                        "weftd meta: io server {server} already held an object for new inode {inode} \
                         (a bug, or planted by a peer with the cluster key); removing it and creating it afresh"
                    );
                    self.objects
                        .remove_objects(server, &[inode])
                        .and_then(|()| self.objects.precreate_objects(server, &[inode]))
                        .map_err(|e| {
                            WireError::new(
                                e.code,
                                format!("{}; replacing it failed: {}", error.message, e.message),
                            )
                        })
                }
                other => other,
            })
            .collect()
    }

    /// After a commit of `inode` failed on a disk error: removes its objects if the
    /// store (reopened by then) does not have it, keeps them if it does, and leaves
    /// the question to the purger while the store cannot answer. No object of a
    /// failed create leaks, and no committed file loses its objects.
    fn discard_if_uncommitted(&self, inode: InodeId, layout: Layout) {
        match self.store.getattr(&Cred::root(), inode) {
            Ok(_) => eprintln!(
                "weftd meta: the failed commit of inode {inode} reached the store; keeping its objects"
            ),
            Err(e) if e.code == ErrorCode::Stale => self.discard_objects(inode, &layout),
            Err(e) => {
                eprintln!(
                    "weftd meta: cannot tell whether inode {inode} committed ({e}); the purger will ask again"
                );
                let mut uncertain = self.uncertain.lock().unwrap_or_else(|p| p.into_inner());
                if uncertain.len() < UNCERTAIN_CREATES_MAX {
                    uncertain.push((inode, layout));
                } else {
                    eprintln!(
                        "weftd meta: too many uncertain creates; the objects of inode {inode} may leak"
                    );
                }
            }
        }
    }

    /// Settles the creates `discard_if_uncommitted` could not, now that the store may
    /// answer again.
    fn settle_uncertain_creates(&self) {
        let pending = std::mem::take(&mut *self.uncertain.lock().unwrap_or_else(|p| p.into_inner()));
        for (inode, layout) in pending {
            self.discard_if_uncommitted(inode, layout);
        }
    }

    /// A precreated inode number for a file of `layout`, refilling its server set's
    /// pool when empty (one request per server for `PRECREATE_BATCH` numbers). `None`
    /// when the set has no pool and cannot get one (`PRECREATE_POOLS_MAX`).
    fn take_precreated(&self, layout: &Layout) -> Result<Option<InodeId>, WireError> {
        // Every server of the file, its copies' too (a replicated file's objects are
        // made on all of them).
        let mut servers = layout.all_servers();
        servers.sort_unstable();
        let batch = self.batch_for(&servers);
        // `ran_dry`: the set's pool was filled before and is empty now.
        let pop = |ran_dry: &mut bool| -> Option<Option<InodeId>> {
            let mut pools = self.precreated.lock().unwrap_or_else(|p| p.into_inner());
            if !pools.contains_key(&servers) && pools.len() >= PRECREATE_POOLS_MAX {
                return Some(None);
            }
            *ran_dry = pools.contains_key(&servers);
            pools.get_mut(&servers).and_then(|pool| pool.pop()).map(Some)
        };
        let mut ran_dry = false;
        if let Some(found) = pop(&mut ran_dry) {
            if found.is_some() {
                self.refill_if_low(layout, &servers, batch);
            }
            return Ok(found);
        }
        if batch == 0 {
            return Ok(None);
        }
        if ran_dry {
            self.outran_refiller(&servers);
        }
        let batch = self.batch_for(&servers);
        let _refill = self.refilling.lock().unwrap_or_else(|p| p.into_inner());
        // Another create may have refilled it while this one waited.
        if let Some(found) = pop(&mut ran_dry) {
            return Ok(found);
        }
        let mut fresh = match self.refill(layout, &servers, batch) {
            Ok(fresh) => fresh,
            // An object already under one of the batch's fresh numbers (a bug, or planted
            // by a peer holding the cluster key): the batch went to the purger, which
            // removes that object too; this create makes its own objects instead.
            Err(error) if error.code == ErrorCode::Exists => {
                eprintln!(
                    "weftd meta: {} (a bug, or planted by a peer with the cluster key); \
                     the batch goes to the purger and this create makes its own objects",
                    error.message
                );
                return Ok(None);
            }
            Err(error) => return Err(error),
        };
        let taken = fresh.pop();
        self.precreated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(servers)
            .or_default()
            .extend(fresh);
        Ok(taken)
    }

    /// Asks the background refiller, if there is one, to refill the pool of `servers` once
    /// it holds `batch / 2` numbers or fewer (one request per set at a time).
    fn refill_if_low(&self, layout: &Layout, servers: &[ServerId], batch: usize) {
        let left = self
            .precreated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(servers)
            .map_or(0, Vec::len);
        if batch == 0 || left > batch / 2 {
            return;
        }
        let refiller = self.refiller.lock().unwrap_or_else(|p| p.into_inner());
        let Some(refiller) = refiller.as_ref() else {
            return;
        };
        let mut asked = self.refills_asked.lock().unwrap_or_else(|p| p.into_inner());
        if asked.contains(servers) {
            return;
        }
        // A full queue (more sets running low at once than it holds): the next create
        // of that set asks again, or refills itself when the pool is empty.
        if refiller.try_send((layout.clone(), servers.to_vec())).is_ok() {
            asked.insert(servers.to_vec());
        }
    }

    /// One background refill (`spawn_refiller`): skipped if the pool was refilled
    /// meanwhile; a failure is logged (the next create that finds the pool empty
    /// refills itself and reports it).
    fn refill_in_background(&self, layout: &Layout, servers: &[ServerId]) {
        let batch = self.batch_for(servers);
        let _refill = self.refilling.lock().unwrap_or_else(|p| p.into_inner());
        let left = self
            .precreated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(servers)
            .map_or(0, Vec::len);
        if batch > 0 && left <= batch / 2 {
            match self.refill(layout, servers, batch) {
                Ok(fresh) => self
                    .precreated
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(servers.to_vec())
                    .or_default()
                    .extend(fresh),
                // An object already under a fresh number: a bug, or planted by a peer
                // holding the cluster key. The batch went to the purger (which removes
                // that object too); creates make their own objects until a refill works.
                Err(error) if error.code == ErrorCode::Exists => eprintln!(
                    "weftd meta: refilling the pool of precreated objects on io servers {servers:?}: \
                     {} (a bug, or planted by a peer with the cluster key); the batch goes to the purger",
                    error.message
                ),
                Err(error) => eprintln!(
                    "weftd meta: refilling the pool of precreated objects on io servers {servers:?}: {error}"
                ),
            }
        }
        self.refills_asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(servers);
    }

    /// Starts the background refiller: a pool that runs down to half a batch is refilled
    /// by this thread while creates go on taking from it, as Lustre's precreate threads
    /// keep ahead of creates. Without it (tests), a create that finds the pool empty
    /// refills it. The thread ends when the service is dropped.
    pub fn spawn_refiller(self: &Arc<Self>) {
        let service: Weak<MetaService> = Arc::downgrade(self);
        let (ask, asked) = mpsc::sync_channel::<RefillAsk>(PRECREATE_POOLS_MAX);
        *self.refiller.lock().unwrap_or_else(|p| p.into_inner()) = Some(ask);
        std::thread::Builder::new()
            .name("weft-meta-refiller".into())
            .spawn(move || {
                // Ends when the service (holding the sender) is dropped.
                while let Ok((layout, servers)) = asked.recv() {
                    let Some(service) = service.upgrade() else {
                        return;
                    };
                    service.refill_in_background(&layout, &servers);
                }
            })
            .expect("spawning the precreate refiller thread");
    }

    /// Precreates `PRECREATE_BATCH` objects on every server of `servers`: the numbers
    /// are recorded in the store first (a crash then hands them to the purger at the
    /// next start), the objects made (durable) after; only then may creates use them.
    fn refill(&self, layout: &Layout, servers: &[ServerId], batch: usize) -> Result<Vec<InodeId>, WireError> {
        let inodes = self.store.allocate_inodes(batch)?;
        let pool_layout = Layout {
            servers: servers.to_vec(),
            replication: Default::default(),
            ..layout.clone()
        };
        self.store.add_precreated(&inodes, &pool_layout)?;
        let results = self.on_each_server(servers, |server| self.objects.precreate_objects(server, &inodes));
        let made = Layout {
            servers: servers
                .iter()
                .zip(&results)
                .filter(|(_, r)| r.is_ok())
                .map(|(s, _)| *s)
                .collect(),
            ..pool_layout.clone()
        };
        if let Some((server, error)) = first_failure(servers, results) {
            if let Err(e) = self.store.orphan_precreated(&inodes, &made) {
                eprintln!("weftd meta: handing {} unused precreated inodes to the purger failed (they go at the next start): {e}", inodes.len());
            }
            return Err(WireError::new(
                error.code,
                format!("precreating objects on io server {server}: {}", error.message),
            ));
        }
        if let Some((_, dry)) = self
            .batch_doublings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(servers)
        {
            *dry = false;
        }
        Ok(inodes)
    }

    /// Numbers per refill of the pool of `servers`: `precreate_batch`, doubled each
    /// time creates of that set outran the background refiller, up to
    /// `BATCH_INODES_MAX`. A refill takes about as long for many objects as for a few
    /// (one request and one `syncfs` per server, which a busy disk makes slow: 0.05 to
    /// 6 s measured on a shared VM), so a pool that creates empty before its refill
    /// lands needs bigger refills, not more of them: with 128, 4 clients creating at 300
    /// files/s emptied the 64 numbers left when the refill was asked for before it came
    /// back, and every create of the set waited for it.
    fn batch_for(&self, servers: &[ServerId]) -> usize {
        let batch = self.precreate_batch.load(Ordering::Relaxed);
        let doublings = self
            .batch_doublings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(servers)
            .map_or(0, |(doublings, _)| *doublings);
        // BATCH_INODES_MAX is 2^12: more doublings never matter.
        batch.saturating_mul(1 << doublings.min(12)).min(BATCH_INODES_MAX)
    }

    /// A create found the pool of `servers` empty after it had been filled: with a
    /// background refiller, creates outran it, and the set's refills double (see
    /// `batch_for`), once until a refill lands (creates finding it empty together
    /// double it once). Without a refiller (every empty pool is refilled by a create),
    /// nothing changes.
    fn outran_refiller(&self, servers: &[ServerId]) {
        if self.refiller.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return;
        }
        let batch = self.precreate_batch.load(Ordering::Relaxed);
        if batch == 0 || self.batch_for(servers) >= BATCH_INODES_MAX {
            return;
        }
        let mut doublings = self.batch_doublings.lock().unwrap_or_else(|p| p.into_inner());
        if !doublings.contains_key(servers) && doublings.len() >= PRECREATE_POOLS_MAX {
            return;
        }
        let (count, dry) = doublings.entry(servers.to_vec()).or_insert((0, false));
        if !*dry {
            *dry = true;
            *count += 1;
        }
    }

    /// Puts a precreated number a create did not use back into its pool.
    fn return_precreated(&self, layout: &Layout, inode: InodeId) {
        // Every server of the file, its copies' too (a replicated file's objects are
        // made on all of them).
        let mut servers = layout.all_servers();
        servers.sort_unstable();
        self.precreated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(servers)
            .or_default()
            .push(inode);
    }

    /// Removes the objects of a create that will not commit; on failure hands
    /// them to the purger through the orphans table.
    fn discard_objects(&self, inode: InodeId, layout: &Layout) {
        let servers = layout.all_servers();
        let removed = self.on_each_server(&servers, |server| self.objects.remove_objects(server, &[inode]));
        if let Some((server, error)) = first_failure(&servers, removed) {
            eprintln!(
                "weftd meta: removing objects of uncommitted inode {inode} from io server {server} failed ({error}); leaving them to the purger"
            );
            if let Err(error) = self.store.add_orphan(inode, layout) {
                eprintln!("weftd meta: recording uncommitted inode {inode} as an orphan failed, its objects leak: {error}");
            }
        }
    }

    /// Calls `call` for every server, in parallel when there are several: the
    /// servers are split into at most `OBJECT_CALLS_PARALLEL_MAX` chunks, the
    /// first handled on this thread, each other on a scoped thread of its own.
    /// Results are in the order of `servers`.
    fn on_each_server(
        &self,
        servers: &[ServerId],
        call: impl Fn(ServerId) -> Result<(), WireError> + Sync,
    ) -> Vec<Result<(), WireError>> {
        if servers.len() <= 1 {
            return servers.iter().map(|&server| call(server)).collect();
        }
        let mut results = vec![Ok(()); servers.len()];
        let per_thread = servers.len().div_ceil(OBJECT_CALLS_PARALLEL_MAX);
        let run = |chunk: &[ServerId], slots: &mut [Result<(), WireError>]| {
            for (&server, slot) in chunk.iter().zip(slots) {
                *slot = call(server);
            }
        };
        std::thread::scope(|scope| {
            let mut chunks = servers.chunks(per_thread).zip(results.chunks_mut(per_thread));
            let here = chunks.next();
            for (chunk, slots) in chunks {
                let run = &run;
                scope.spawn(move || run(chunk, slots));
            }
            if let Some((chunk, slots)) = here {
                run(chunk, slots);
            }
        });
        results
    }

    /// One purge round: removes the objects of up to `PURGE_BATCH_INODES_MAX`
    /// orphans from their io servers (one batched request per server, servers in
    /// parallel) and forgets the orphans whose objects are gone from every
    /// server. Failures are logged; those orphans stay for a later round.
    /// Returns how many orphans were forgotten.
    pub fn purge_orphans_once(&self) -> usize {
        self.purge_round(false)
    }

    /// A purge round; `ripe_only` skips orphans the previous such round did not see.
    fn purge_round(&self, ripe_only: bool) -> usize {
        self.settle_uncertain_creates();
        let orphans = match self.store.orphans(PURGE_BATCH_INODES_MAX) {
            Ok(orphans) => orphans,
            Err(error) => {
                eprintln!("weftd meta: purge: reading orphans: {error}");
                return 0;
            }
        };
        // Purge what the previous round saw already; the rest waits one round.
        let orphans: Vec<(InodeId, Layout)> = if !ripe_only {
            orphans
        } else {
            let mut candidates = self.purge_candidates.lock().unwrap_or_else(|p| p.into_inner());
            let seen = std::mem::take(&mut *candidates);
            let (ripe, young): (Vec<_>, Vec<_>) = orphans.into_iter().partition(|(i, _)| seen.contains(i));
            candidates.extend(young.iter().map(|(i, _)| *i));
            ripe
        };
        if orphans.is_empty() {
            return 0;
        }
        // The removals that made these orphans must be durable before their objects
        // go: a crash must never bring back a name whose objects were purged.
        if let Err(error) = self.store.commit() {
            eprintln!("weftd meta: purge: committing the removals first: {error}; will retry");
            return 0;
        }
        let inodes: Vec<InodeId> = orphans.iter().map(|(inode, _)| *inode).collect();
        let managers: Vec<ServerId> = self.cluster.cache.managers.iter().map(|m| m.id).collect();
        for (manager, result) in managers.iter().zip(self.on_each_server(&managers, |manager| {
            inodes
                .chunks(BATCH_INODES_MAX)
                .try_for_each(|batch| self.objects.drop_cached(manager, batch))
        })) {
            if let Err(error) = result {
                eprintln!("weftd meta: purge: dropping removed files from cache manager {manager}: {error}");
            }
        }
        let mut by_server: BTreeMap<ServerId, Vec<InodeId>> = BTreeMap::new();
        for (inode, layout) in &orphans {
            for server in layout.all_servers() {
                by_server.entry(server).or_default().push(*inode);
            }
        }
        let servers: Vec<ServerId> = by_server.keys().copied().collect();
        let results = self.on_each_server(&servers, |server| {
            by_server[&server]
                .chunks(BATCH_INODES_MAX)
                .try_for_each(|batch| self.objects.remove_objects(server, batch))
        });
        let mut failed = BTreeSet::new();
        for (server, result) in servers.iter().zip(results) {
            if let Err(error) = result {
                eprintln!("weftd meta: purge: removing objects from io server {server}: {error}; will retry");
                failed.insert(*server);
            }
        }
        let done: Vec<InodeId> = orphans
            .iter()
            .filter(|(_, layout)| layout.all_servers().iter().all(|s| !failed.contains(s)))
            .map(|(inode, _)| *inode)
            .collect();
        if done.is_empty() {
            return 0;
        }
        match self.store.forget_orphans(&done) {
            Ok(forgotten) => forgotten,
            Err(error) => {
                eprintln!(
                    "weftd meta: purge: forgetting {} purged orphans: {error}; will retry",
                    done.len()
                );
                0
            }
        }
    }

    /// Acknowledges operations once applied and makes them durable every `interval`
    /// in a background thread (0: every operation is durable before it is answered, no
    /// thread), until the handle is stopped or dropped, or the service is dropped.
    pub fn spawn_committer(self: &Arc<Self>, interval: Duration) -> Option<PurgerHandle> {
        self.store.set_commit_interval(interval);
        if interval.is_zero() {
            return None;
        }
        let service: Weak<MetaService> = Arc::downgrade(self);
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("weft-meta-committer".into())
            .spawn(move || loop {
                match stopped.recv_timeout(interval) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                let Some(service) = service.upgrade() else {
                    return;
                };
                if let Err(e) = service.store.commit() {
                    eprintln!("weftd meta: background commit of the metadata store: {e}; will retry");
                }
            })
            .expect("spawning the committer thread");
        Some(PurgerHandle {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where the store's commits stand, as `CommitMetadata` tells it.
    pub fn commit_info(&self) -> weft_proto::CommitInfo {
        let state = self.store.commit_state();
        weft_proto::CommitInfo {
            interval_us: state.interval.as_micros().min(u64::MAX as u128) as u64,
            seq: state.seq,
            durable_seq: state.durable_seq,
            since_durable_ms: state
                .since_durable
                .map_or(u64::MAX, |d| d.as_millis().min(u64::MAX as u128 - 1) as u64),
        }
    }

    /// Runs purge rounds every `period` in a background thread (back to back
    /// while rounds come back full) until the handle is stopped or dropped, or
    /// the service is dropped.
    pub fn spawn_purger(self: &Arc<Self>, period: Duration) -> PurgerHandle {
        let service: Weak<MetaService> = Arc::downgrade(self);
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("weft-meta-purger".into())
            .spawn(move || loop {
                match stopped.recv_timeout(period) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                let Some(service) = service.upgrade() else {
                    return;
                };
                service.release_lapsed_sessions();
                service.forget_idle_lock_sessions();
                // A replay may yet make a file of a number a restart made an orphan.
                if service.replay_window_open() {
                    continue;
                }
                while service.purge_round(true) == PURGE_BATCH_INODES_MAX {
                    if !matches!(stopped.try_recv(), Err(TryRecvError::Empty)) {
                        return;
                    }
                }
            })
            .expect("spawning the purger thread");
        PurgerHandle {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

/// The inodes `request` names by number (directories it acts in, files it acts on).
fn addressed(request: &Request) -> Vec<InodeId> {
    match request {
        Request::Lookup { parent, .. }
        | Request::LookupMany { parent, .. }
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
        | Request::SharedPointerSince { inode, .. } => vec![*inode],
        Request::Readdir { dir, .. }
        | Request::ReaddirPlus { dir, .. }
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
        | Request::Vouched { request } => addressed(request),
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

/// The first failed call, with its server.
/// What `create_or_open` did.
enum Created {
    /// Both boxed: attributes with their layouts (a replicated one's copies) are large.
    Made(Box<Made>),
    /// A non-exclusive create found a file of that name.
    Existing(Box<Attr>),
}

fn first_failure(servers: &[ServerId], results: Vec<Result<(), WireError>>) -> Option<(ServerId, WireError)> {
    servers
        .iter()
        .zip(results)
        .find_map(|(server, result)| result.err().map(|e| (*server, e)))
}

/// Stops the purger (or committer) thread when stopped or dropped (after its current
/// round).
pub struct PurgerHandle {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl PurgerHandle {
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // A panic in the purger was already reported by the panic hook.
            let _ = thread.join();
        }
    }
}

impl Drop for PurgerHandle {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Whether `request` adds to the manager's database (a new name or inode, an xattr):
/// refused on a nearly full file system (`MetaStore::check_room`), unlike removals,
/// renames and attribute changes, which must go on so that space can be freed.
fn grows_namespace(request: &Request) -> bool {
    match request {
        Request::Create { .. }
        | Request::Mkdir { .. }
        | Request::Symlink { .. }
        | Request::Link { .. }
        | Request::Mknod { .. }
        | Request::SetXattr { .. } => true,
        Request::WithParent { request } | Request::CreateGranted { request } => grows_namespace(request),
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

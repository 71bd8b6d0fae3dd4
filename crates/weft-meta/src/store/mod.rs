//! `MetaStore`: the durable namespace (directories, inodes, attributes, layouts) on
//! redb. Mutating operations run in write transactions, concurrent ones sharing one
//! transaction (group commit, `group.rs`). With a commit interval of 0 an operation is
//! acknowledged only after its transaction is durable; with one above 0 it is
//! acknowledged once applied (a non-durable commit) and made durable within the
//! interval, or at once by `commit` (fsync, sync); a crash then returns the namespace to
//! its last durable commit, a prefix of the acknowledged history. What acts outside the
//! database on the strength of a commit (inode number reservations, precreated objects,
//! the record of lock sessions, the purger) waits for a durable one.
//!
//! Tables, one per concern:
//! - `inodes`: inode number -> encoded inode record (`record.rs`);
//! - `names`: (parent inode, name bytes) -> (child inode, kind), so that a directory's
//!   entries are one contiguous key range in name (byte) order (format 1 kept UTF-8
//!   names in `dirents`, moved here when such a store is opened);
//! - `orphans`: inode number -> encoded `Layout` of a removed file whose objects
//!   are still on the io servers;
//! - `kept`: inode number -> mount session, for files whose last name went while that
//!   mount had them open: the inode lives on, nameless (links 0), until the mount
//!   releases it (or its session lapses);
//! - `xattrs`: (inode, attribute name) -> value, the `user.*`, `trusted.*` and
//!   `security.*` extended attributes, a bounded number per inode;
//! - `precreated`: inode number -> encoded `Layout` whose servers hold durable empty
//!   objects for a file not created yet (the manager's pool, `ops/precreated.rs`);
//! - `file_parents`: (non-directory inode, directory) -> how many of its names are in
//!   that directory: every directory a file (hard links: all of them) can be reached
//!   through, for the search-rights walk of `ops/search.rs`;
//! - `lock_sessions`: mount session -> when recorded (ms since the epoch), the mounts
//!   that took fcntl/flock locks, whose reclaims a restarted manager waits for (see
//!   `ops/lock_sessions.rs` and the service's `file_locks`);
//! - `quota_*`: quota limits, usage, projects and bytes charged (`quota.rs`);
//! - `counters`: name -> u64 (format, next inode number, statfs counts, and
//!   `lock_sessions_overflow`: the record of lock sessions was full).
//!
//! Each operation lives in its own file under `ops/`.
//!
//! A failed disk write (a full disk, most often) makes redb refuse every later
//! operation ("Previous I/O error occurred"). The store then closes the database and
//! opens it again from what was committed, at once and, if that fails too, at the next
//! operation after `REOPEN_RETRY` (a full disk rarely gets that far: the database file
//! holds its blocks ahead, `room.rs`): nothing acknowledged is lost, and writes resume by
//! themselves once space is freed. With a commit interval above 0 the reopened
//! database lacks the non-durable commits since the last durable one: acknowledged
//! operations are gone, as after a crash. The store then tells its loss hook
//! (`on_loss`: the service acts as a restarted manager, whose clients replay them) with
//! the record of tracked requests as it is now, while no operation can run.

mod access;
mod backup;
mod group;
mod names;
mod ops;
mod quota;
mod record;
pub mod replies;
mod room;
pub mod scan;
mod upgrade;
mod xattrs;

pub use access::{MAY_READ, MAY_WRITE};
pub use backup::{prepare_restore, prepare_restore_target, store_format, SnapshotFacts, RESTORE_INODE_GAP};
pub use group::CommitState;
pub use names::{NAME_BYTES_MAX, PATH_BYTES_MAX};
pub use ops::create::{CreateCheck, MadeMany, PendingCreate};
pub use ops::link::LINKS_MAX;
pub use ops::migrate::{pending_error as migrate_pending_error, PendingSwitch, SwitchServer};
pub use ops::Made;
pub use xattrs::{XATTRS_PER_INODE_MAX, XATTR_BYTES_PER_INODE_MAX};

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use redb::{
    Database, Durability, ReadOnlyTable, ReadableDatabase, ReadableTable, Table, TableDefinition,
    WriteTransaction,
};
use weft_layout::{CacheMode, InodeId, Layout, LayoutRequest, ServerId};
use weft_proto::{Cred, ErrorCode, FileKind, Timespec, Wire, WireError};

use access::{permits, MAY_EXECUTE};
use record::InodeRecord;

const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");
const DIRENTS: TableDefinition<(u64, &[u8]), (u64, u8)> = TableDefinition::new("names");
/// Format 1's entries table, with names as UTF-8 strings.
const DIRENTS_FORMAT_1: TableDefinition<(u64, &str), (u64, u8)> = TableDefinition::new("dirents");
const ORPHANS: TableDefinition<u64, &[u8]> = TableDefinition::new("orphans");
const KEPT: TableDefinition<u64, u64> = TableDefinition::new("kept");
const XATTRS: TableDefinition<(u64, &[u8]), &[u8]> = TableDefinition::new("xattrs");
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
const PRECREATED: TableDefinition<u64, &[u8]> = TableDefinition::new("precreated");
const LOCK_SESSIONS: TableDefinition<u64, u64> = TableDefinition::new("lock_sessions");
const FILE_PARENTS: TableDefinition<(u64, u64), u64> = TableDefinition::new("file_parents");
/// Io servers added to the running cluster (`weft server add`): id -> `IoServer`'s wire
/// form. The cluster description's own io servers are not here.
const ADDED_SERVERS: TableDefinition<u32, &[u8]> = TableDefinition::new("added_io_servers");
/// Migrations whose objects the io servers may have renamed and that are not finished
/// at every io server yet (`ops::migrate::PendingSwitch`), by the migrating file's inode.
const SWITCHES: TableDefinition<u64, &[u8]> = TableDefinition::new("pending_switches");
/// Set once `file_parents` holds every name of every non-directory (built at the first
/// open of a store made before the table existed).
const COUNTER_FILE_PARENTS: &str = "file_parents";

/// The on-disk schema version, kept under [`COUNTER_FORMAT`]. Format 1 had names as
/// UTF-8 strings (table `dirents`); it is migrated when opened.
const STORE_FORMAT: u64 = 2;
const COUNTER_FORMAT: &str = "format";
/// Every inode number below this value may have been handed out: the allocator
/// reserves blocks by advancing it durably before using them.
const COUNTER_INODE_NEXT: &str = "inode_next";
/// Non-directory inodes (regular files and symlinks).
const COUNTER_FILES: &str = "files";
const COUNTER_DIRECTORIES: &str = "directories";
const COUNTER_ORPHANS: &str = "orphans";

/// Inode numbers reserved per durable counter update. A crash forfeits the unused
/// rest of a block, which is harmless: numbers are 64-bit and never reused.
const INODE_RESERVATION_BLOCK: u64 = 1024;

/// How long after a failed reopen of the database the next operation tries again.
const REOPEN_RETRY: Duration = Duration::from_millis(500);

/// Errors opening the store. Operations on an open store return [`WireError`]s.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("metadata database: {0}")]
    Database(#[from] redb::Error),
    #[error("metadata database has format {found}, this build reads format {STORE_FORMAT}")]
    UnknownFormat { found: u64 },
    #[error("metadata database: handing precreated objects to the purger: {0}")]
    Precreated(String),
    #[error("metadata database: {0}")]
    Io(String),
}

/// What the store needs to know of the cluster to resolve layouts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterLayout {
    /// The io servers, in cluster order (`first_server` indexes this list).
    pub io_servers: Vec<ServerId>,
    /// Used for any field neither the request nor the directory default sets.
    pub default_layout: LayoutRequest,
    /// Cache managers in the cluster: a file may be `cached` or `delegated` only when
    /// there is at least one.
    pub cache_managers: usize,
}

/// Inode numbers reserved durably but not yet handed out: `[next, end)`.
#[derive(Debug, Default)]
struct InodeReservation {
    next: u64,
    end: u64,
}

/// Why the database is closed, and when to try opening it again.
#[derive(Debug)]
struct Closed {
    cause: WireError,
    retry_at: Instant,
}

/// The namespace of one file system. Safe to share between threads: reads run in
/// parallel on snapshots, writes are serialised by redb.
pub struct MetaStore {
    path: PathBuf,
    /// The database; `None` while closed after a disk error it could not be reopened
    /// from. Every operation holds the read side for its whole transaction, so a
    /// reopen (the write side) never closes the database under a live transaction.
    db: RwLock<Option<Database>>,
    /// Counts reopens, so that operations that failed together reopen once.
    generation: AtomicU64,
    /// This open created the database (a new file system).
    created: bool,
    /// A file of preallocated blocks beside the database (`<db>.reserve`), released
    /// when a commit finds the disk full anyway (filled by something other than Weft's
    /// clients, which `check_room` stops first), so that the next removal has room.
    reserve_file: PathBuf,
    /// The reserve file is made and not released since.
    reserve_held: AtomicBool,
    closed: Mutex<Option<Closed>>,
    cluster: RwLock<ClusterLayout>,
    /// The first io server of the next file whose layout names none: files take turns,
    /// so that small files (all their data in their first stripe) and files of one-stripe
    /// layouts spread over the io servers, not all on the first one's disk.
    next_first: std::sync::atomic::AtomicUsize,
    reservation: Mutex<InodeReservation>,
    group: group::GroupCommit,
    /// Stale pieces' generations, for rebuilds (`ops/rebuild.rs`).
    stale_generations: ops::rebuild::StaleGenerations,
    /// Reopens that lost acknowledged operations, and who is told (module comment).
    losses: replies::Losses,
}

pub use replies::LossHook;

thread_local! {
    /// Set by `storage()` when redb reports a disk error: the database refuses every
    /// later operation until it is reopened.
    static DISK_FAILED: Cell<bool> = const { Cell::new(false) };
}

impl std::fmt::Debug for MetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaStore").finish_non_exhaustive()
    }
}

/// fsync of the directory holding `path`.
fn sync_parent_directory(path: &Path) -> Result<(), StoreError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| StoreError::Io(format!("syncing the directory {}: {e}", parent.display())))
}

impl MetaStore {
    /// Opens the database at `path`, creating it, and the root directory (mode 0755,
    /// owned by `root_owner` = (uid, gid)), on first open. Layout resolution needs
    /// [`MetaStore::set_cluster`] before files can be created.
    pub fn open(path: &Path, root_owner: (u32, u32)) -> Result<MetaStore, StoreError> {
        let db = Database::create(path).map_err(redb::Error::from)?;
        let mut txn = db.begin_write().map_err(redb::Error::from)?;
        txn.set_durability(Durability::Immediate)
            .map_err(redb::Error::from)?;
        let mut created = false;
        {
            let mut inodes = txn.open_table(INODES).map_err(redb::Error::from)?;
            txn.open_table(DIRENTS).map_err(redb::Error::from)?;
            txn.open_table(ORPHANS).map_err(redb::Error::from)?;
            txn.open_table(KEPT).map_err(redb::Error::from)?;
            txn.open_table(XATTRS).map_err(redb::Error::from)?;
            txn.open_table(PRECREATED).map_err(redb::Error::from)?;
            txn.open_table(LOCK_SESSIONS).map_err(redb::Error::from)?;
            txn.open_table(FILE_PARENTS).map_err(redb::Error::from)?;
            txn.open_table(ADDED_SERVERS).map_err(redb::Error::from)?;
            txn.open_table(SWITCHES).map_err(redb::Error::from)?;
            txn.open_table(replies::REPLIES).map_err(redb::Error::from)?;
            let mut counters = txn.open_table(COUNTERS).map_err(redb::Error::from)?;
            let format = counters
                .get(COUNTER_FORMAT)
                .map_err(redb::Error::from)?
                .map(|v| v.value());
            match format {
                Some(STORE_FORMAT) => {}
                Some(1) => {
                    upgrade::migrate_format_1(&txn)?;
                    counters
                        .insert(COUNTER_FORMAT, STORE_FORMAT)
                        .map_err(redb::Error::from)?;
                }
                Some(found) => return Err(StoreError::UnknownFormat { found }),
                None => {
                    created = true;
                    let root = InodeRecord::new(
                        FileKind::Directory,
                        0o755,
                        root_owner,
                        InodeId::ROOT,
                        Timespec::now(),
                    );
                    inodes
                        .insert(InodeId::ROOT.0, root.encode().as_slice())
                        .map_err(redb::Error::from)?;
                    for (key, value) in [
                        (COUNTER_INODE_NEXT, InodeId::ROOT.0 + 1),
                        (COUNTER_FILES, 0),
                        (COUNTER_DIRECTORIES, 1),
                        (COUNTER_ORPHANS, 0),
                        (COUNTER_FILE_PARENTS, 1),
                        // Written last in the same transaction: its presence means
                        // the rest is there.
                        (COUNTER_FORMAT, STORE_FORMAT),
                    ] {
                        counters.insert(key, value).map_err(redb::Error::from)?;
                    }
                }
            }
            if !created
                && counters
                    .get(COUNTER_FILE_PARENTS)
                    .map_err(redb::Error::from)?
                    .is_none()
            {
                upgrade::build_file_parents(&txn)?;
                counters
                    .insert(COUNTER_FILE_PARENTS, 1)
                    .map_err(redb::Error::from)?;
            }
        }
        quota::open_tables(&txn)?;
        let last_seq = txn
            .open_table(COUNTERS)
            .map_err(redb::Error::from)?
            .get(group::COUNTER_COMMIT_SEQ)
            .map_err(redb::Error::from)?
            .map_or(0, |v| v.value());
        txn.commit().map_err(redb::Error::from)?;
        let store = MetaStore {
            path: path.to_owned(),
            db: RwLock::new(Some(db)),
            generation: AtomicU64::new(0),
            closed: Mutex::new(None),
            cluster: RwLock::new(ClusterLayout::default()),
            next_first: Default::default(),
            reservation: Mutex::new(InodeReservation::default()),
            group: group::GroupCommit::default(),
            stale_generations: Default::default(),
            losses: replies::Losses::default(),
            created,
            reserve_file: reserve_path(path),
            reserve_held: AtomicBool::new(false),
        };
        store.group.start_at(last_seq);
        store.group.hold_room(room::Room::new(path.to_owned()));
        store.hold_reserve();
        if created {
            // A new database file (and its reserve beside it): their names must be
            // durable before anything in them is acknowledged. ext4, xfs and btrfs make
            // a name durable with its fsynced file; POSIX promises it only after an
            // fsync of the directory, so a power cut before the first clean restart
            // could otherwise lose the whole namespace on another file system.
            sync_parent_directory(path)?;
        }
        // The pool of precreated objects lived in the last process's memory: purge them.
        store
            .write_durable(|tx| tx.precreated_to_orphans(None))
            .map_err(|e| StoreError::Precreated(e.to_string()))?;
        Ok(store)
    }

    /// Whether this open created the database: nothing of an earlier manager process
    /// (its mounts' locks, say) can exist.
    pub fn created(&self) -> bool {
        self.created
    }

    /// The open database, reopening it first if a disk error closed it (at most once
    /// per `REOPEN_RETRY`), with the generation it belongs to.
    fn database(&self) -> Result<(RwLockReadGuard<'_, Option<Database>>, u64), WireError> {
        loop {
            let db = self.db.read().unwrap_or_else(|p| p.into_inner());
            if db.is_some() {
                let generation = self.generation.load(Ordering::SeqCst);
                return Ok((db, generation));
            }
            drop(db);
            let mut db = self.db.write().unwrap_or_else(|p| p.into_inner());
            if db.is_some() {
                continue;
            }
            let mut closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = closed.as_ref() {
                if Instant::now() < c.retry_at {
                    return Err(c.cause.clone());
                }
            }
            match Database::open(&self.path) {
                Ok(opened) => {
                    eprintln!("weftd meta: metadata store {} reopened", self.path.display());
                    self.reopened(&opened);
                    *db = Some(opened);
                    *closed = None;
                    self.generation.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) => {
                    let cause = self.closed_error(&redb::Error::from(e));
                    eprintln!("weftd meta: {}", cause.message);
                    *closed = Some(Closed {
                        cause: cause.clone(),
                        retry_at: Instant::now() + REOPEN_RETRY,
                    });
                    return Err(cause);
                }
            }
        }
    }

    /// Reopens so far that lost acknowledged operations, with what `also` reads, never
    /// amid a loss and its hook (a tracked request notes both when it comes: see
    /// `replies::fence`, `replies::Losses`).
    pub fn losses_seen<T>(&self, also: impl FnOnce() -> T) -> (T, u64) {
        self.losses.seen(also)
    }

    /// Sets what is told when a reopen loses acknowledged operations (once).
    pub fn on_loss(&self, hook: LossHook) {
        self.losses.set_hook(hook);
    }

    /// After a reopen (the database held alone): if it is back before operations that
    /// were acknowledged (non-durable commits the failed database never made durable),
    /// numbers go on from where it is and the loss hook hears it. Before, the process
    /// went on as if nothing was lost, and its clients, seeing the same manager, never
    /// replayed what they had been answered for (issue 30).
    fn reopened(&self, db: &Database) {
        let acknowledged = self.group.state().seq;
        let found = (|| -> Result<_, redb::Error> {
            let txn = db.begin_read()?;
            let stored = txn
                .open_table(COUNTERS)?
                .get(group::COUNTER_COMMIT_SEQ)?
                .map_or(0, |v| v.value());
            Ok((stored, replies::read_all(&txn)?))
        })();
        match found {
            Ok((stored, _)) if stored >= acknowledged => {}
            Ok((stored, records)) => {
                eprintln!(
                    "weftd meta: the reopened metadata store is back at operation {stored}: the {} acknowledged after it (not durable yet) are lost with the failed database; acting as a restarted manager so that clients replay them",
                    acknowledged - stored
                );
                self.group.restart_at(stored);
                // The hook first: a request that sees the new count finds its restart done.
                self.losses.lost(records);
            }
            Err(e) => eprintln!(
                "weftd meta: reading the reopened metadata store's commit number: {e}; cannot tell whether acknowledged operations were lost"
            ),
        }
    }

    /// The error operations get while the database cannot be reopened.
    fn closed_error(&self, e: &redb::Error) -> WireError {
        let code = match disk_error(e) {
            Some(code) => code,
            None => ErrorCode::Io,
        };
        WireError::new(
            code,
            format!(
                "metadata store {} is closed after a disk error and could not be reopened: {e}; \
                 retried at the next operation",
                self.path.display()
            ),
        )
    }

    /// Reopens the database after an operation of `generation` hit a disk error, unless
    /// another operation did already. Committed transactions are all there afterwards;
    /// a commit that failed is either wholly there or wholly absent.
    fn recover(&self, generation: u64, error: &WireError) {
        let mut db = self.db.write().unwrap_or_else(|p| p.into_inner());
        if self.generation.load(Ordering::SeqCst) != generation || db.is_none() {
            return;
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        if error.code == ErrorCode::NoSpace {
            self.release_reserve();
        }
        eprintln!(
            "weftd meta: {}; closing and reopening the metadata store {}",
            error.message,
            self.path.display()
        );
        // Closing first: redb holds a lock on the file while open.
        drop(db.take());
        match Database::open(&self.path) {
            Ok(opened) => {
                self.reopened(&opened);
                *db = Some(opened)
            }
            Err(e) => {
                let cause = self.closed_error(&redb::Error::from(e));
                eprintln!("weftd meta: {}", cause.message);
                *self.closed.lock().unwrap_or_else(|p| p.into_inner()) = Some(Closed {
                    cause,
                    retry_at: Instant::now() + REOPEN_RETRY,
                });
            }
        }
    }

    /// Refuses, with `NoSpace`, an operation that grows the database (a create, a
    /// link, an xattr) once less than the manager's reserve of its file system is free
    /// (`weft_proto::space`): that room is kept for removals, which must always commit,
    /// as they are how space comes back. Removals never ask.
    pub fn check_room(&self) -> Result<(), WireError> {
        let Ok((free, total)) = file_system_space(self.directory()) else {
            // Not knowing, the commit itself finds out.
            return Ok(());
        };
        let reserve = weft_proto::space::meta_reserve_bytes(total);
        if !self.reserve_held.load(Ordering::Relaxed) && free >= 2 * reserve {
            self.hold_reserve();
        }
        if free < reserve {
            return Err(WireError::new(
                ErrorCode::NoSpace,
                format!(
                    "metadata manager: no space left for new entries: {} free on its file system, \
                     and the last {} are kept so that removing files always works; remove files to free space",
                    weft_proto::space::human(free),
                    weft_proto::space::human(reserve)
                ),
            ));
        }
        Ok(())
    }

    fn directory(&self) -> &Path {
        self.path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }

    /// Makes the reserve file (half the manager's reserve, at most 1 MiB) if the disk
    /// has room for it; a failure leaves it to the next try.
    fn hold_reserve(&self) {
        let Ok((free, total)) = file_system_space(self.directory()) else {
            return;
        };
        let bytes = (weft_proto::space::meta_reserve_bytes(total) / 2).min(RESERVE_FILE_BYTES_MAX);
        if free < 4 * bytes {
            return;
        }
        let made = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.reserve_file)
            .and_then(|f| {
                use std::os::fd::AsRawFd;
                // SAFETY: fallocate on an open descriptor of ours.
                match unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, bytes as libc::off_t) } {
                    0 => f.sync_all(),
                    _ => Err(std::io::Error::last_os_error()),
                }
            });
        match made {
            Ok(()) => self.reserve_held.store(true, Ordering::Relaxed),
            Err(_) => {
                let _ = std::fs::remove_file(&self.reserve_file);
            }
        }
    }

    /// Frees the reserve file's blocks for the commits that follow.
    fn release_reserve(&self) {
        if std::fs::remove_file(&self.reserve_file).is_ok() {
            eprintln!(
                "weftd meta: its disk is full: released the reserve file {} so that removals can commit",
                self.reserve_file.display()
            );
        }
        self.reserve_held.store(false, Ordering::Relaxed);
    }

    /// Runs `op` on the database, reopening it if `op` hit a disk error.
    fn with_database<T>(&self, op: impl FnOnce(&Database) -> Result<T, WireError>) -> Result<T, WireError> {
        let (db, generation) = self.database()?;
        DISK_FAILED.with(|f| f.set(false));
        let result = op(db.as_ref().expect("database() returns an open database"));
        drop(db);
        if DISK_FAILED.with(|f| f.replace(false)) {
            if let Err(error) = &result {
                self.recover(generation, error);
            }
        }
        result
    }

    /// Sets the io servers and cluster default layout used to resolve layouts. The
    /// default must resolve on its own, unless there are no io servers yet (then
    /// the namespace works but creating files fails with `InvalidLayout`).
    pub fn set_cluster(&self, cluster: ClusterLayout) -> Result<(), WireError> {
        if !cluster.io_servers.is_empty() {
            Layout::resolve(
                &LayoutRequest::default(),
                &cluster.default_layout,
                &cluster.io_servers,
            )
            .map_err(|e| WireError::new(ErrorCode::InvalidLayout, format!("cluster default layout: {e}")))?;
        }
        *self.cluster.write().unwrap_or_else(|p| p.into_inner()) = cluster;
        Ok(())
    }

    /// Write transactions committed so far and the operations they held: concurrent
    /// operations share transactions (group commit), so the second can exceed the first.
    pub fn group_commits(&self) -> (u64, u64) {
        self.group.committed()
    }

    pub fn cluster(&self) -> ClusterLayout {
        self.cluster.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Resolves a layout and caching mode: fields of `request`, else of the directory
    /// default `directory`, else of the cluster default; a first server none of them
    /// names is the next in turn (`next_first`, as Lustre's stripe offset -1).
    fn resolve_layout(
        &self,
        request: &LayoutRequest,
        directory: Option<&LayoutRequest>,
    ) -> Result<(Layout, CacheMode), WireError> {
        let cluster = self.cluster.read().unwrap_or_else(|p| p.into_inner());
        let cluster_default = &cluster.default_layout;
        let defaults = match directory {
            None => *cluster_default,
            Some(d) => LayoutRequest {
                stripe_size_bytes: d.stripe_size_bytes.or(cluster_default.stripe_size_bytes),
                stripe_count: d.stripe_count.or(cluster_default.stripe_count),
                first_server: d.first_server.or(cluster_default.first_server),
                cache: d.cache.or(cluster_default.cache),
                redundancy: d.redundancy.or(cluster_default.redundancy),
            },
        };
        let mut request = *request;
        if request.first_server.or(defaults.first_server).is_none() && !cluster.io_servers.is_empty() {
            let turn = self.next_first.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            request.first_server = Some((turn % cluster.io_servers.len()) as u32);
        }
        let request = &request;
        let layout = Layout::resolve(request, &defaults, &cluster.io_servers)
            .map_err(|e| WireError::new(ErrorCode::InvalidLayout, e.to_string()))?;
        // A replicated file is uncached unless the create asks for caching itself
        // (refused below): a default caching mode does not apply to it.
        let cache = match (request.cache, layout.replica_count() > 1) {
            (None, true) => CacheMode::None,
            (asked, _) => asked.or(defaults.cache).unwrap_or_default(),
        };
        if cache.uses_tier() && layout.replica_count() > 1 {
            return Err(WireError::new(
                ErrorCode::InvalidLayout,
                format!(
                    "cache mode {cache} with {}: the cache tier does not write replicated files back yet",
                    layout.redundancy()
                ),
            ));
        }
        if cache.uses_tier() && cluster.cache_managers == 0 {
            return Err(WireError::new(
                ErrorCode::InvalidLayout,
                format!(
                    "cache mode {cache} needs a cache tier, and this cluster has no cache managers \
                     (start one with `weft up --cache colocated` or `--cache N`)"
                ),
            ));
        }
        Ok((layout, cache))
    }

    /// Hands out a fresh inode number. Must not be called while this thread holds a
    /// write transaction: it may commit one of its own to reserve the next block.
    fn allocate_inode(&self) -> Result<InodeId, WireError> {
        // A replayed operation makes its inode under the number it had (reserved
        // durably then, never handed out again).
        if let Some(inode) = replies::take_reuse() {
            return Ok(inode);
        }
        let mut reservation = self.reservation.lock().unwrap_or_else(|p| p.into_inner());
        if reservation.next == reservation.end {
            // Durable before any number of the block is used: objects on the io servers
            // are named by them, and a crash must never hand one out again.
            let start = self.write_durable(|tx| {
                let start = tx.counter(COUNTER_INODE_NEXT)?;
                let end = start
                    .checked_add(INODE_RESERVATION_BLOCK)
                    .ok_or_else(|| WireError::new(ErrorCode::NoSpace, "inode numbers exhausted"))?;
                tx.set_counter(COUNTER_INODE_NEXT, end)?;
                Ok(start)
            })?;
            reservation.next = start;
            reservation.end = start + INODE_RESERVATION_BLOCK;
        }
        let inode = InodeId(reservation.next);
        reservation.next += 1;
        Ok(inode)
    }

    /// Runs `body` in a write transaction and returns once that transaction is durably
    /// committed; on error nothing of `body` is written. Concurrent callers share
    /// transactions (group commit, see `group.rs`): one commit, one fsync, for every
    /// operation that arrived while the previous group was committing. Bodies check
    /// everything before their first write, so a refusal leaves the group's transaction
    /// as it found it; a storage or internal error fails the whole group.
    fn write<T: 'static>(
        &self,
        body: impl FnOnce(&mut WriteTables<'_>) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        // Group commit inside the reopen guard: a group's transaction belongs to the
        // database it began on, and a reopen waits until every member has its outcome.
        self.with_database(|db| {
            replies::fence(self.losses.count())?;
            self.group.write(db, false, body)
        })
    }

    /// As `write`, returning only once `body`'s transaction (and so every one before
    /// it) is durable, whatever the commit interval.
    fn write_durable<T: 'static>(
        &self,
        body: impl FnOnce(&mut WriteTables<'_>) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        self.with_database(|db| {
            replies::fence(self.losses.count())?;
            self.group.write(db, true, body)
        })
    }

    /// Makes every operation acknowledged so far durable (fsync, sync, the committer,
    /// the purger); returns at once if they are.
    pub fn commit(&self) -> Result<(), WireError> {
        if !self.group.pending() {
            return Ok(());
        }
        self.write_durable(|_| Ok(()))
    }

    /// A clean stop's last commit: from here every operation is durable before it is
    /// answered, and one durable commit follows every group already under way (`commit`
    /// would skip a group committing non-durably at this moment: its members are not
    /// counted as acknowledged until it returns).
    pub fn commit_final(&self) -> Result<(), WireError> {
        self.set_commit_interval(Duration::ZERO);
        self.write_durable(|_| Ok(()))
    }

    /// Sets how long an acknowledged operation may stay non-durable: 0 (the default)
    /// commits every operation durably before it is answered; above 0 the caller must
    /// call `commit` at least this often (the service's committer thread does).
    pub fn set_commit_interval(&self, interval: Duration) {
        self.group.set_interval(interval);
    }

    /// Where the commits stand: sequence numbers acknowledged and durable.
    pub fn commit_state(&self) -> CommitState {
        self.group.state()
    }

    /// Runs `body` on a consistent snapshot.
    fn read<T>(&self, body: impl FnOnce(&ReadTables) -> Result<T, WireError>) -> Result<T, WireError> {
        self.with_database(|db| {
            let txn = db.begin_read().storage()?;
            let tables = ReadTables {
                inodes: txn.open_table(INODES).storage()?,
                dirents: txn.open_table(DIRENTS).storage()?,
                orphans: txn.open_table(ORPHANS).storage()?,
                kept: txn.open_table(KEPT).storage()?,
                xattrs: txn.open_table(XATTRS).storage()?,
                counters: txn.open_table(COUNTERS).storage()?,
                precreated: txn.open_table(PRECREATED).storage()?,
                file_parents: txn.open_table(FILE_PARENTS).storage()?,
                added_servers: txn.open_table(ADDED_SERVERS).storage()?,
                switches: txn.open_table(SWITCHES).storage()?,
            };
            body(&tables)
        })
    }
}

/// Largest reserve file kept beside the database.
const RESERVE_FILE_BYTES_MAX: u64 = 1 << 20;

/// The reserve file of the database at `db`.
fn reserve_path(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(".reserve");
    db.with_file_name(name)
}

/// (free bytes for unprivileged use, total bytes) of the file system holding `path`.
fn file_system_space(path: &Path) -> std::io::Result<(u64, u64)> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs fills the zeroed struct; the path is a valid C string.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut v) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((
        v.f_bavail as u64 * v.f_frsize as u64,
        v.f_blocks as u64 * v.f_frsize as u64,
    ))
}

/// The code of a redb error that comes from the disk (a full one is `NoSpace`), after
/// which redb refuses every operation until the database is reopened; `None` for
/// others.
fn disk_error(e: &redb::Error) -> Option<ErrorCode> {
    match e {
        redb::Error::Io(io) => Some(match io.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => ErrorCode::NoSpace,
            _ if io.kind() == std::io::ErrorKind::StorageFull => ErrorCode::NoSpace,
            _ => ErrorCode::Io,
        }),
        redb::Error::PreviousIo | redb::Error::DatabaseClosed => Some(ErrorCode::Io),
        _ => None,
    }
}

/// Maps storage failures to `ErrorCode::Io` (`NoSpace` for a full disk), noting disk
/// errors for `with_database` to reopen the database after.
trait StorageResult<T> {
    fn storage(self) -> Result<T, WireError>;
}

impl<T, E: Into<redb::Error>> StorageResult<T> for Result<T, E> {
    fn storage(self) -> Result<T, WireError> {
        self.map_err(|e| {
            let e: redb::Error = e.into();
            let code = disk_error(&e);
            if code.is_some() {
                DISK_FAILED.with(|f| f.set(true));
            }
            match code {
                Some(ErrorCode::NoSpace) => WireError::new(
                    ErrorCode::NoSpace,
                    format!("metadata manager: no space left for its database: {e}"),
                ),
                _ => WireError::new(ErrorCode::Io, format!("metadata store: {e}")),
            }
        })
    }
}

type InodeTable<'t> = Table<'t, u64, &'static [u8]>;
type DirentTable<'t> = Table<'t, (u64, &'static [u8]), (u64, u8)>;
type XattrTable<'t> = Table<'t, (u64, &'static [u8]), &'static [u8]>;
type XattrRange<'a> = redb::Range<'a, (u64, &'static [u8]), &'static [u8]>;

/// The tables of a write transaction, opened once per operation.
struct WriteTables<'t> {
    inodes: InodeTable<'t>,
    dirents: DirentTable<'t>,
    orphans: Table<'t, u64, &'static [u8]>,
    kept: Table<'t, u64, u64>,
    xattrs: XattrTable<'t>,
    counters: Table<'t, &'static str, u64>,
    precreated: Table<'t, u64, &'static [u8]>,
    file_parents: Table<'t, (u64, u64), u64>,
    added_servers: Table<'t, u32, &'static [u8]>,
    switches: Table<'t, u64, &'static [u8]>,
    quota: quota::QuotaTables<'t>,
    /// One clock reading per operation, so that all times it sets agree.
    now: Timespec,
}

/// The tables of a read snapshot.
struct ReadTables {
    inodes: ReadOnlyTable<u64, &'static [u8]>,
    dirents: ReadOnlyTable<(u64, &'static [u8]), (u64, u8)>,
    orphans: ReadOnlyTable<u64, &'static [u8]>,
    kept: ReadOnlyTable<u64, u64>,
    xattrs: ReadOnlyTable<(u64, &'static [u8]), &'static [u8]>,
    counters: ReadOnlyTable<&'static str, u64>,
    precreated: ReadOnlyTable<u64, &'static [u8]>,
    file_parents: ReadOnlyTable<(u64, u64), u64>,
    added_servers: ReadOnlyTable<u32, &'static [u8]>,
    switches: ReadOnlyTable<u64, &'static [u8]>,
}

/// Lookups shared by read snapshots and write transactions.
trait Namespace {
    type Inodes: ReadableTable<u64, &'static [u8]>;
    type Dirents: ReadableTable<(u64, &'static [u8]), (u64, u8)>;
    type Counters: ReadableTable<&'static str, u64>;
    type Xattrs: ReadableTable<(u64, &'static [u8]), &'static [u8]>;
    fn inodes(&self) -> &Self::Inodes;
    fn dirents(&self) -> &Self::Dirents;
    fn counters(&self) -> &Self::Counters;
    fn xattrs(&self) -> &Self::Xattrs;

    /// The record of `inode`, if it exists.
    fn find_inode(&self, inode: InodeId) -> Result<Option<InodeRecord>, WireError> {
        match self.inodes().get(inode.0).storage()? {
            None => Ok(None),
            Some(bytes) => InodeRecord::decode(bytes.value()).map(Some).map_err(|e| {
                WireError::new(
                    ErrorCode::Internal,
                    format!("inode {inode} record is corrupt: {e}"),
                )
            }),
        }
    }

    /// The record of `inode`; `Stale` if it does not exist (a client holds the
    /// number of something removed since).
    fn inode(&self, inode: InodeId) -> Result<InodeRecord, WireError> {
        self.find_inode(inode)?
            .ok_or_else(|| WireError::new(ErrorCode::Stale, format!("inode {inode} does not exist")))
    }

    /// The record of directory `inode` after checking `want` permission on it.
    fn directory(&self, cred: &Cred, inode: InodeId, want: u32) -> Result<InodeRecord, WireError> {
        let record = self.inode(inode)?;
        if !record.is_directory() {
            return Err(WireError::new(
                ErrorCode::NotDirectory,
                format!("inode {inode} is not a directory"),
            ));
        }
        require(cred, &record, want, || format!("directory inode {inode}"))?;
        Ok(record)
    }

    /// The entry `name` of `parent`, if any.
    fn entry(&self, parent: InodeId, name: &[u8]) -> Result<Option<(InodeId, FileKind)>, WireError> {
        match self.dirents().get((parent.0, name)).storage()? {
            None => Ok(None),
            Some(v) => {
                let (child, kind) = v.value();
                Ok(Some((InodeId(child), decode_kind(kind, parent, name)?)))
            }
        }
    }

    fn counter(&self, key: &str) -> Result<u64, WireError> {
        Ok(self.counters().get(key).storage()?.map_or(0, |v| v.value()))
    }
}

impl Namespace for ReadTables {
    type Inodes = ReadOnlyTable<u64, &'static [u8]>;
    type Dirents = ReadOnlyTable<(u64, &'static [u8]), (u64, u8)>;
    type Counters = ReadOnlyTable<&'static str, u64>;
    type Xattrs = ReadOnlyTable<(u64, &'static [u8]), &'static [u8]>;
    fn inodes(&self) -> &Self::Inodes {
        &self.inodes
    }
    fn dirents(&self) -> &Self::Dirents {
        &self.dirents
    }
    fn counters(&self) -> &Self::Counters {
        &self.counters
    }
    fn xattrs(&self) -> &Self::Xattrs {
        &self.xattrs
    }
}

impl<'t> Namespace for WriteTables<'t> {
    type Inodes = InodeTable<'t>;
    type Dirents = DirentTable<'t>;
    type Counters = Table<'t, &'static str, u64>;
    type Xattrs = XattrTable<'t>;
    fn inodes(&self) -> &Self::Inodes {
        &self.inodes
    }
    fn dirents(&self) -> &Self::Dirents {
        &self.dirents
    }
    fn counters(&self) -> &Self::Counters {
        &self.counters
    }
    fn xattrs(&self) -> &Self::Xattrs {
        &self.xattrs
    }
}

impl<'t> WriteTables<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self, WireError> {
        Ok(WriteTables {
            inodes: txn.open_table(INODES).storage()?,
            dirents: txn.open_table(DIRENTS).storage()?,
            orphans: txn.open_table(ORPHANS).storage()?,
            kept: txn.open_table(KEPT).storage()?,
            xattrs: txn.open_table(XATTRS).storage()?,
            counters: txn.open_table(COUNTERS).storage()?,
            precreated: txn.open_table(PRECREATED).storage()?,
            file_parents: txn.open_table(FILE_PARENTS).storage()?,
            added_servers: txn.open_table(ADDED_SERVERS).storage()?,
            switches: txn.open_table(SWITCHES).storage()?,
            quota: quota::QuotaTables::open(txn)?,
            now: Timespec::now(),
        })
    }

    fn put_inode(&mut self, inode: InodeId, record: &InodeRecord) -> Result<(), WireError> {
        self.inodes
            .insert(inode.0, record.encode().as_slice())
            .storage()?;
        Ok(())
    }

    /// Removes an inode's record and its extended attributes.
    fn remove_inode(&mut self, inode: InodeId) -> Result<(), WireError> {
        self.quota_release(inode)?;
        self.inodes.remove(inode.0).storage()?;
        let names: Vec<Vec<u8>> = xattr_range(&self.xattrs, inode)?
            .map(|item| item.map(|(key, _)| key.value().1.to_vec()))
            .collect::<Result<_, _>>()
            .storage()?;
        for name in names {
            self.xattrs.remove((inode.0, name.as_slice())).storage()?;
        }
        Ok(())
    }

    fn put_entry(
        &mut self,
        parent: InodeId,
        name: &[u8],
        child: InodeId,
        kind: FileKind,
    ) -> Result<(), WireError> {
        let replaced = self
            .dirents
            .insert((parent.0, name), (child.0, kind as u8))
            .storage()?
            .map(|v| v.value());
        if let Some((old, old_kind)) = replaced {
            self.count_file_parent(InodeId(old), old_kind, parent, -1)?;
        }
        self.count_file_parent(child, kind as u8, parent, 1)
    }

    /// Counts a name of non-directory `child` in `parent` in or out of `file_parents`.
    fn count_file_parent(
        &mut self,
        child: InodeId,
        kind: u8,
        parent: InodeId,
        delta: i64,
    ) -> Result<(), WireError> {
        if kind == FileKind::Directory as u8 {
            return Ok(());
        }
        let key = (child.0, parent.0);
        let count = self.file_parents.get(key).storage()?.map_or(0, |v| v.value());
        match count.saturating_add_signed(delta) {
            0 => self.file_parents.remove(key).storage()?.map(|_| ()),
            n => self.file_parents.insert(key, n).storage()?.map(|_| ()),
        };
        Ok(())
    }

    /// Stores `record` for `inode` and names it `name` in `parent`, counting the entry in
    /// the parent (whose times move). A `new` inode is counted in the statfs counters.
    fn add_name(
        &mut self,
        (parent, parent_record): (InodeId, &mut InodeRecord),
        name: &[u8],
        (inode, record): (InodeId, &InodeRecord),
        new: bool,
    ) -> Result<(), WireError> {
        self.quota_charge_new(new, (inode, record), parent)?;
        self.put_inode(inode, record)?;
        self.put_entry(parent, name, inode, record.kind)?;
        parent_record.entries += 1;
        if record.is_directory() {
            parent_record.subdirectories += 1;
        }
        parent_record.mtime = self.now;
        parent_record.ctime = self.now;
        self.put_inode(parent, parent_record)?;
        if new {
            let counter = if record.is_directory() {
                COUNTER_DIRECTORIES
            } else {
                COUNTER_FILES
            };
            self.add_counter(counter, 1)?;
        }
        Ok(())
    }

    fn remove_entry(&mut self, parent: InodeId, name: &[u8]) -> Result<(), WireError> {
        let removed = self
            .dirents
            .remove((parent.0, name))
            .storage()?
            .map(|v| v.value());
        if let Some((child, kind)) = removed {
            self.count_file_parent(InodeId(child), kind, parent, -1)?;
        }
        Ok(())
    }

    fn set_counter(&mut self, key: &str, value: u64) -> Result<(), WireError> {
        self.counters.insert(key, value).storage()?;
        Ok(())
    }

    fn add_counter(&mut self, key: &str, delta: i64) -> Result<(), WireError> {
        let value = self.counter(key)?;
        let updated = value.checked_add_signed(delta).ok_or_else(|| {
            WireError::new(
                ErrorCode::Internal,
                format!("counter {key} would leave range ({value} + {delta})"),
            )
        })?;
        self.set_counter(key, updated)
    }

    /// A name of non-directory `inode` went. Its last name: a file kept open by mount
    /// session `keep` lives on nameless (see the `kept` table), anything else goes (a
    /// file's objects become an orphan for the purger). Returns the inode if kept.
    fn unlinked(
        &mut self,
        inode: InodeId,
        mut record: InodeRecord,
        keep: Option<u64>,
    ) -> Result<Option<InodeId>, WireError> {
        debug_assert!(!record.is_directory());
        record.links = record.links.saturating_sub(1);
        record.ctime = self.now;
        if record.links > 0 {
            self.put_inode(inode, &record)?;
            return Ok(None);
        }
        self.add_counter(COUNTER_FILES, -1)?;
        match keep {
            Some(session) if record.kind == FileKind::File => {
                self.put_inode(inode, &record)?;
                self.kept.insert(inode.0, session).storage()?;
                Ok(Some(inode))
            }
            _ => {
                self.drop_inode(inode, &record)?;
                Ok(None)
            }
        }
    }

    /// Removes a non-directory inode with no name left: a file's objects become an
    /// orphan for the purger; anything else simply goes.
    fn drop_inode(&mut self, inode: InodeId, record: &InodeRecord) -> Result<(), WireError> {
        debug_assert!(!record.is_directory() && record.links == 0);
        self.remove_inode(inode)?;
        if let Some(layout) = &record.layout {
            self.orphans
                .insert(inode.0, layout.to_bytes().as_slice())
                .storage()?;
            self.add_counter(COUNTER_ORPHANS, 1)?;
        }
        Ok(())
    }
}

/// The extended attributes of `inode`: one contiguous key range, in name order.
fn xattr_range<'a, T: ReadableTable<(u64, &'static [u8]), &'static [u8]>>(
    table: &'a T,
    inode: InodeId,
) -> Result<XattrRange<'a>, WireError> {
    use std::ops::Bound;
    let lower = Bound::Included((inode.0, &[][..]));
    let upper = match inode.0.checked_add(1) {
        Some(next) => Bound::Excluded((next, &[][..])),
        None => Bound::Unbounded,
    };
    table.range::<(u64, &[u8])>((lower, upper)).storage()
}

fn decode_kind(kind: u8, parent: InodeId, name: &[u8]) -> Result<FileKind, WireError> {
    FileKind::from_code(kind).ok_or_else(|| {
        WireError::new(
            ErrorCode::Internal,
            format!(
                "entry {} of directory {parent} has unknown kind {kind}",
                names::quoted(name)
            ),
        )
    })
}

/// `PermissionDenied` unless `cred` may do `want` on `record`; `what` names it.
fn require(
    cred: &Cred,
    record: &InodeRecord,
    want: u32,
    what: impl FnOnce() -> String,
) -> Result<(), WireError> {
    if permits(cred, record, want) {
        Ok(())
    } else {
        let verb = match want {
            w if w == MAY_EXECUTE && record.is_directory() => "search",
            w if w == MAY_EXECUTE => "execute",
            access::MAY_READ => "read",
            access::MAY_WRITE => "write",
            _ => "write and search",
        };
        Err(WireError::new(
            ErrorCode::PermissionDenied,
            format!("permission denied: uid {} may not {verb} {}", cred.uid, what()),
        ))
    }
}

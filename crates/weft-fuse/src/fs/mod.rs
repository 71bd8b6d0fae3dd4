//! The FUSE operations: each kernel request becomes calls of the native client, made
//! with the caller's credentials. Inodes are Weft inode numbers as they are, so the
//! adapter keeps no inode table; it keeps open files (one `weft_client::File` per
//! open, so the data path makes no metadata round trips) and open directory streams.
//! Here: the mount's state (`WeftFs`) and what every request shares; `filesystem.rs`
//! answers the kernel's requests, `calls.rs` holds the work behind the larger ones,
//! `locking.rs` the waiting for fcntl/flock locks.

use crate::attr::file_attr;
use crate::behind::WriteBehind;
use crate::buffer::ReadBuffer;
use crate::creds::Clients;
use crate::deferred::Deferred;
use crate::dir::DirStream;
use crate::kept::{self, OpenInodes};
use crate::leases::Leases;
use crate::locks::Holders;
use crate::names::{Names, Retries};
use crate::open_file::OpenFile;
use crate::parents::Parents;
use crate::prefetch::Prefetch;
use crate::recent::Recent;
use crate::walked::Walks;
use crate::xattr::{self};
use fuser::{Errno, FileAttr, FileHandle, INodeNo, Notifier, Request};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use weft_client::{Attr, Client, ClientError, DataStamp, ErrorCode, File, FileKind, InodeId, Name};
use weft_proto::LOCK_RENEW_PERIOD;

mod calls;
mod feed;
mod filesystem;
mod locking;

/// Open files and open directories of one mount, each. Past this, open fails (ENFILE).
const OPEN_HANDLES_MAX: usize = 1 << 16;

/// Inodes whose attributes are remembered as the kernel was last told them, so that an
/// open knows whether the kernel's cached ones are still right (and may ask the io
/// servers for the size while the manager checks the name: layouts never change). The
/// table starts over when full.
const ATTRS_CACHED_MAX: usize = 1 << 17;

/// Entries whose attributes one readdirplus round asks for at once.
const READDIRPLUS_BATCH: usize = 32;

/// How the mount caches.
#[derive(Debug, Clone, Copy)]
pub struct CacheOptions {
    /// How long the kernel may use attributes and names without asking again.
    pub attr_ttl: Duration,
    /// Keep file data cached across opens (off: every open starts with an empty page
    /// cache for the file, which with write-through gives close-to-open consistency).
    pub keep_cache: bool,
    /// How long after a lookup checked for an open the same thread's open of that file
    /// goes by it (see `walked`).
    pub walk_window: Duration,
    /// How long the kernel may keep names and attributes only the manager changes
    /// while the manager's change feed answers (see `leases`; not above `attr_ttl`:
    /// none).
    pub lease: Duration,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            attr_ttl: Duration::from_secs(1),
            keep_cache: false,
            walk_window: crate::walked::WINDOW,
            lease: crate::leases::LEASE_DEFAULT,
        }
    }
}

pub struct WeftFs {
    /// The value of `user.weft.cluster` (xattr::CLUSTER_XATTR).
    cluster_xattr: Vec<u8>,
    clients: Clients,
    cache: CacheOptions,
    files: RwLock<HashMap<u64, Arc<OpenFile>>>,
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirStream>>>>,
    next_handle: AtomicU64,
    attrs: Mutex<HashMap<InodeId, Attr>>,
    /// The inode each (directory, name) last led to here: a lookup asks the io servers
    /// for that inode's size while the manager looks the name up (a guess, used only
    /// when the manager confirms the same inode). Starts over when full.
    last_found: Mutex<HashMap<(InodeId, Name), InodeId>>,
    open_inodes: Arc<OpenInodes>,
    /// This mount's session with the manager, for files it keeps open after their
    /// last name went (see `kept`).
    session: u64,
    /// The names the kernel knows inodes by, which an open checks (see `names`).
    names: Arc<Names>,
    retries: Retries,
    /// Each thread's last lookup checked as an open checks its names, which that
    /// thread's open of the file may go by (see `walked`).
    walks: Walks,
    /// Set once the session exists: tells the kernel to drop cached attributes.
    notifier: Arc<OnceLock<Notifier>>,
    /// Calls in flight, answered EINTR when their caller is signalled (see `watchdog`).
    watchdog: Arc<crate::watchdog::Watchdog>,
    /// Small writes not yet sent to the io servers (see `behind`).
    behind: WriteBehind,
    /// What each file's data was (`DataStamp`) when it was last opened here: an open
    /// that finds the same stamp again, settled, lets the kernel keep the file's cached
    /// pages. Starts over when full.
    stamps: Mutex<HashMap<InodeId, Seen>>,
    /// Small files' bytes handed to libweft_posix, by data stamp (see `handed`).
    handed: crate::handed::HandedContent,
    /// Directories listed to answer a run of lookups (see `recent`).
    recent: Recent,
    /// Writes, truncates and allocations through this mount so far: a read-only handle
    /// trusts the size its open checked only while none came (`OpenFile::sized_at`).
    data_changes: AtomicU64,
    /// Attribute changes of files created here and open, sent at close (see `deferred`).
    deferred: Deferred,
    /// Write capabilities of new files asked for in the background (see `prefetch`).
    prefetch: Prefetch,
    /// Directories' attributes from the answers to creates in them (see `parents`).
    parents: Parents,
    /// Lock owners holding cluster-wide fcntl/flock locks through this mount (see `locks`).
    lock_holders: Arc<Holders>,
    /// Names and attributes the kernel may keep past `attr_ttl` (see `leases`).
    leases: Arc<Leases>,
}

/// A file's data as an open here found it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// Found by open `fh`, which did not keep the kernel's pages: the kernel drops them
    /// as that open completes, after the daemon answered it, so until then they may
    /// still be older than the stamp and no other open may keep them. The first read
    /// or flush of `fh` shows that the open completed.
    Pending { stamp: DataStamp, fh: u64 },
    /// Every page the kernel holds of the file was read after the stamp was taken.
    Settled(DataStamp),
    /// Made here by an exclusive create with a write grant whose stamp is `stamp`
    /// (`Made::written_under`) and written only through the kernel's page cache: while
    /// the manager vouches for the file at `stamp`, no other grant, truncate or time
    /// change came, so its data is what this mount wrote, and the kernel's pages hold
    /// that (a write the kernel sent and the daemon refused left its page not up to
    /// date, and a kept write that failed later counts in `failures`: the pages are
    /// trusted only while that count is the one at the create).
    Written { stamp: DataStamp, failures: u64 },
}

/// What the kernel is told of an inode's attributes, as one number (two answers with
/// the same one told it the same).
fn fingerprint(attr: &Attr) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        attr.kind,
        attr.mode,
        attr.uid,
        attr.gid,
        attr.nlink,
        attr.size,
        attr.blocks,
    )
        .hash(&mut h);
    (attr.mtime, attr.ctime, attr.rdev).hash(&mut h);
    h.finish()
}

/// Records what `ino`'s data was seen as in the stamp table, which starts over when
/// full.
fn record(stamps: &mut HashMap<InodeId, Seen>, ino: InodeId, seen: Seen) {
    if stamps.len() >= ATTRS_CACHED_MAX && !stamps.contains_key(&ino) {
        stamps.clear();
    }
    stamps.insert(ino, seen);
}

thread_local! {
    /// Each FUSE worker thread's read buffer, reused across requests (see `ReadBuffer`).
    static READ_BUFFER: RefCell<Option<ReadBuffer>> = const { RefCell::new(None) };
}

fn errno(e: &ClientError, what: &str) -> Errno {
    let n = e.errno();
    // Refusals (ENOENT, EEXIST, EACCES...) are answers; anything else is worth a line
    // in the daemon's log.
    if matches!(
        e.code(),
        ErrorCode::Io | ErrorCode::Internal | ErrorCode::Unavailable | ErrorCode::TimedOut
    ) || !matches!(e, ClientError::Refused { .. })
    {
        eprintln!("weft-fuse: {what}: {e}");
    }
    Errno::from_i32(n)
}

/// A name as the bytes it is (Weft names, as POSIX ones, need not be UTF-8).
fn name_bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

fn inode(ino: INodeNo) -> InodeId {
    InodeId(ino.0)
}

impl WeftFs {
    pub fn new(client: Client, cache: CacheOptions, notifier: Arc<OnceLock<Notifier>>) -> WeftFs {
        let session = kept::new_session();
        WeftFs {
            cluster_xattr: xattr::cluster_value(client.meta_addr()),
            clients: Clients::new(client),
            cache,
            files: RwLock::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            attrs: Mutex::new(HashMap::new()),
            last_found: Mutex::new(HashMap::new()),
            open_inodes: Arc::new(OpenInodes::default()),
            session,
            names: Arc::new(Names::default()),
            retries: Retries::default(),
            walks: Walks::new(cache.walk_window),
            notifier,
            watchdog: crate::watchdog::Watchdog::start(),
            behind: WriteBehind::default(),
            stamps: Mutex::new(HashMap::new()),
            handed: Default::default(),
            recent: Recent::new(cache.attr_ttl),
            data_changes: AtomicU64::new(0),
            deferred: Deferred::default(),
            prefetch: Prefetch::default(),
            parents: Parents::new(cache.attr_ttl),
            lock_holders: Arc::new(Holders::new(session)),
            leases: Arc::new(Leases::new(cache.lease, cache.attr_ttl)),
        }
    }

    /// Renews this mount's session while it keeps files, until the file system goes.
    fn renew_session_in_background(&self) {
        let open: std::sync::Weak<OpenInodes> = Arc::downgrade(&self.open_inodes);
        let (client, session) = (self.clients.base(), self.session);
        let holders = Arc::downgrade(&self.lock_holders);
        let spawned = std::thread::Builder::new()
            .name("weft-fuse-session".into())
            .spawn(move || {
                // Every LOCK_RENEW_PERIOD while locks are held and for a while after
                // (that also renews the session, and notices a restarted manager: see
                // `locks`), else every
                // SESSION_RENEW_PERIOD while files are kept.
                let ticks = (kept::SESSION_RENEW_PERIOD.as_millis() / LOCK_RENEW_PERIOD.as_millis()).max(1);
                for tick in 1u128.. {
                    std::thread::sleep(LOCK_RENEW_PERIOD);
                    let Some(open) = open.upgrade() else { return };
                    let Some(holders) = holders.upgrade() else { return };
                    if holders.wants_renewal() {
                        holders.renew(&client);
                    } else if tick % ticks == 0 && open.any_kept() {
                        if let Err(e) = client.renew_session(session) {
                            eprintln!("weft-fuse: renewing the session: {e}");
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            eprintln!(
                "weft-fuse: no session renewal thread ({e}); files removed while open may go after a minute"
            );
        }
    }

    fn caller(&self, req: &Request) -> Client {
        self.clients.for_caller(req.uid(), req.gid(), req.pid())
    }

    /// `reply` of `req`, answered EINTR if its caller is signalled while it waits.
    fn watch<R: crate::watchdog::Abandon>(&self, req: &Request, reply: R) -> crate::watchdog::Watched<R> {
        self.watchdog.watch(req.pid(), reply)
    }

    fn ttl(&self) -> Duration {
        self.cache.attr_ttl
    }

    /// How long the kernel may keep `attr` fetched since `mark` (see `leases`): never
    /// past `attr_ttl` while this mount holds the file open (what it keeps of writes
    /// and attribute changes shows in its answers, and its handles change the file).
    fn lease_ttl(&self, mark: crate::leases::Mark, attr: &Attr, leasable: bool) -> Duration {
        let leasable = leasable && !self.open_inodes.is_open(attr.inode);
        self.leases.ttl(
            mark,
            attr.inode,
            fingerprint(attr),
            leasable,
            std::time::Instant::now(),
        )
    }

    /// How long the kernel may keep `attr` from a directory listing (see
    /// `Leases::renewed`).
    fn listed_ttl(&self, attr: &Attr) -> Duration {
        if self.open_inodes.is_open(attr.inode) {
            return self.ttl();
        }
        self.leases
            .renewed(attr.inode, fingerprint(attr), std::time::Instant::now())
    }

    /// Remembers an inode's attributes for `open` and answers with the kernel's form.
    fn remember(&self, attr: &Attr) -> FileAttr {
        let mut with_kept = attr.clone();
        // Changes kept here and not yet sent show (see `deferred`).
        self.deferred.overlay(&mut with_kept);
        if attr.kind == FileKind::File {
            // Bytes written here and not yet sent count in the size (see `behind`), and
            // in the blocks: none with a size above 0 means "all hole" to tools that
            // skip holes (`tar --sparse` archives such a file as zeros, unread). The
            // larger of the two counts, so that answering twice from the same
            // attributes counts nothing twice.
            let (end, bytes) = self.behind.counted(attr.inode);
            with_kept.size = with_kept.size.max(end);
            with_kept.blocks = with_kept.blocks.max(bytes.div_ceil(512));
        }
        let attr = &with_kept;
        if attr.kind == FileKind::File {
            let mut table = self.attrs.lock().expect("attribute table poisoned");
            if table.len() >= ATTRS_CACHED_MAX {
                table.clear();
            }
            table.insert(attr.inode, attr.clone());
        }
        file_attr(attr)
    }

    fn remembered(&self, ino: InodeId) -> Option<Attr> {
        self.attrs
            .lock()
            .expect("attribute table poisoned")
            .get(&ino)
            .cloned()
    }

    fn new_handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    /// EIO if this mount lost locks on `open`'s file since its open (a manager restart
    /// it could not reclaim them from, see `locks`): the holder must not go on as if it
    /// still held them.
    fn locks_kept(&self, open: &OpenFile, what: &str) -> Result<(), Errno> {
        let inode = open.file.inode();
        match self
            .lock_holders
            .check(&self.clients.base(), inode, open.losses_at_open)
        {
            Ok(()) => Ok(()),
            Err(()) => {
                eprintln!("weft-fuse: {what} of inode {inode}: EIO, a lock on the file was lost while it was open (see above)");
                Err(Errno::EIO)
            }
        }
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<OpenFile>, Errno> {
        self.files
            .read()
            .expect("file table poisoned")
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// `sized_at`: `data_changes` before the open checked the file (`OpenFile::sized_at`).
    fn add_file(&self, file: File, changed: bool, sized_at: u64, no_flush: bool) -> Result<u64, Errno> {
        let mut files = self.files.write().expect("file table poisoned");
        if files.len() >= OPEN_HANDLES_MAX {
            return Err(Errno::ENFILE);
        }
        let fh = self.new_handle();
        self.open_inodes.opened(file.inode());
        let losses_at_open = self.lock_holders.losses();
        files.insert(
            fh,
            Arc::new(OpenFile {
                file,
                changed: AtomicBool::new(changed),
                losses_at_open,
                sized_at,
                no_flush,
                lockers: Mutex::default(),
            }),
        );
        Ok(fh)
    }

    /// The session to keep a file for if a name about to go is the last one of a file
    /// open here (the manager keeps whatever file that was; `kept_by_manager` releases it
    /// at once if it is not open here after all).
    fn keep(&self) -> Option<u64> {
        self.open_inodes.any_open().then_some(self.session)
    }

    /// The manager kept `inode` for this mount: released at its last close here, or now
    /// if none has it open.
    fn kept_by_manager(&self, inode: Option<InodeId>) {
        if let Some(inode) = inode {
            if !self.open_inodes.keep(inode) {
                kept::release(&self.clients.base(), self.session, inode);
            }
        }
    }

    /// An entry for `attr` as `name` in `parent` goes to the kernel: its name and
    /// attributes are remembered.
    fn entered(&self, parent: InodeId, name: &[u8], attr: &Attr) -> FileAttr {
        self.names.entered(parent, name, attr.inode);
        if attr.kind == FileKind::File {
            let mut found = self.last_found.lock().expect("lookup table poisoned");
            if found.len() >= ATTRS_CACHED_MAX {
                found.clear();
            }
            found.insert((parent, Name::from(name)), attr.inode);
        }
        self.remember(attr)
    }

    /// `open` (of `ino`) is about to change the file (write, truncate, allocate): the
    /// first time, its attributes are dropped from listings and a listing being fetched
    /// is thrown away (see `recent`); its close does that again.
    fn changed_through(&self, ino: InodeId, open: &OpenFile) {
        self.data_changed();
        if !open.changed.swap(true, Ordering::Relaxed) {
            self.recent.inode_changed(ino);
        }
    }

    /// A write, truncate or allocation goes through this mount: read-only handles open
    /// before it ask for the size again (`OpenFile::sized_at`).
    fn data_changed(&self) {
        self.data_changes.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether a data change went through this mount since `sized_at`.
    fn data_changed_since(&self, sized_at: u64) -> bool {
        self.data_changes.load(Ordering::SeqCst) != sized_at
    }

    /// Sends what is kept of `ino`: its writes to the io servers, then its attribute
    /// changes to the manager. Not both at once: a change of mode or owner makes the
    /// manager revoke the file's write capabilities on the io servers, which would
    /// refuse writes still on their way (EACCES at close).
    fn send_kept(&self, ino: InodeId) -> Result<(), Errno> {
        self.behind.send(ino)?;
        self.deferred.send(ino)
    }

    /// The attributes an open must go by: the name the kernel found the inode by is
    /// checked with the manager (one round trip, the size asked of the io servers at the
    /// same time). `Stale` when the name no longer leads there.
    /// With them, what the file's data is (`DataStamp`, if it can be said), from the
    /// same requests to the io servers.
    fn current_attr(
        &self,
        client: &Client,
        ino: InodeId,
        told: Option<&Attr>,
    ) -> Result<(Attr, Option<DataStamp>), ClientError> {
        let path = self.names.path_of(ino);
        if path.is_empty() {
            // Not known by name (the table started over): at least the inode must exist.
            let attr = client.getattr(ino)?;
            client.attr_stamped(attr)
        } else {
            client.revalidate_stamped(path, told)
        }
    }

    /// Whether the kernel may keep the pages it cached of `ino` at open `fh`: only if its
    /// data provably is what it was when they were read (the same `DataStamp` as a
    /// settled open here before; every write, truncate or allocation by any client,
    /// this mount included, changes the stamp), and `may_keep` (the attributes are as
    /// the kernel was told). Remembers what this open found.
    fn keeps_pages(&self, ino: InodeId, now: Option<DataStamp>, fh: u64, may_keep: bool) -> bool {
        let mut stamps = self.stamps.lock().expect("stamp table poisoned");
        let Some(now) = now else {
            stamps.remove(&ino);
            return false;
        };
        let keep = match stamps.get(&ino) {
            Some(Seen::Settled(seen)) => may_keep && *seen == now,
            // The attributes changed by this mount's own writes: not a reason to drop.
            Some(Seen::Written { stamp, failures }) => *stamp == now && *failures == self.behind.failures(),
            _ => false,
        };
        if !keep {
            record(&mut stamps, ino, Seen::Pending { stamp: now, fh });
        }
        keep
    }

    /// `ino` was made here by an exclusive create whose write grant has the stamp
    /// `stamp`, and its handle writes through the page cache (see `Seen::Written`).
    fn written_here(&self, ino: InodeId, stamp: DataStamp) {
        let failures = self.behind.failures();
        record(
            &mut self.stamps.lock().expect("stamp table poisoned"),
            ino,
            Seen::Written { stamp, failures },
        );
    }

    /// A read or flush of open `fh` of `ino` came: that open has completed in the
    /// kernel (see `Seen::Pending`).
    fn open_completed(&self, ino: InodeId, fh: FileHandle) {
        let mut stamps = self.stamps.lock().expect("stamp table poisoned");
        if let Some(seen) = stamps.get_mut(&ino) {
            if let Seen::Pending { stamp, fh: pending } = seen {
                if *pending == fh.0 {
                    *seen = Seen::Settled(stamp.clone());
                }
            }
        }
    }
}

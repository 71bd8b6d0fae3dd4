//! The FUSE operations: each kernel request becomes calls of the native client, made
//! with the caller's credentials. Inodes are Weft inode numbers as they are, so the
//! adapter keeps no inode table; it keeps open files (one `weft_client::File` per
//! open, so the data path makes no metadata round trips) and open directory streams.

use crate::attr::{file_attr, kind_of_mode, time_set};
use crate::behind::{WriteBehind, SMALL_WRITE_BYTES};
use crate::buffer::ReadBuffer;
use crate::creds::Clients;
use crate::deferred::{Caller, Deferred};
use crate::dir::{DirStream, Listed};
use crate::kept::{self, OpenInodes};
use crate::locks::{self, Asked, Holders};
use crate::names::{Names, Retries};
use crate::parents::Parents;
use crate::prefetch::Prefetch;
use crate::recent::{Recent, Ticket};
use crate::walked::Walks;
use crate::xattr::{self, CLUSTER_XATTR, LAYOUT_XATTR};
use fuser::{
    Errno, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, Notifier, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, SystemTime};
use weft_client::{
    Attr, Client, ClientError, CreateOptions, DataStamp, ErrorCode, File, FileKind, InodeId, Made, Name,
    PathStep, SetAttr, XattrSet,
};
use weft_proto::{LockKind, LockRequest, LOCK_RENEW_PERIOD};

/// Largest read or write request the kernel sends (`max_write`, and readahead): 4 MiB,
/// 1 MiB per io server of a default layout, where 1 MiB requests gave 0.2-0.3x the
/// native client's sequential read (each request pays a kernel round trip and a
/// fan-out to the servers). Kernels cap it at `fs.fuse.max_pages_limit` pages (256,
/// 1 MiB, unless raised: a root mount raises it, see `mount`).
pub const REQUEST_BYTES_MAX: u32 = 4 << 20;

/// Requests the kernel keeps in flight in the background (readahead, async reads).
const BACKGROUND_REQUESTS_MAX: u16 = 64;

/// The request size and background limits a Weft mount (and the FUSE floor) asks the
/// kernel for at INIT. Each is best effort: an older kernel keeps its own limit.
pub(crate) fn request_limits(config: &mut KernelConfig) {
    let _ = config.set_max_write(REQUEST_BYTES_MAX);
    let _ = config.set_max_readahead(REQUEST_BYTES_MAX);
    let _ = config.set_max_background(BACKGROUND_REQUESTS_MAX);
    let _ = config.set_congestion_threshold(BACKGROUND_REQUESTS_MAX * 3 / 4);
}

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
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            attr_ttl: Duration::from_secs(1),
            keep_cache: false,
            walk_window: crate::walked::WINDOW,
        }
    }
}

pub(crate) struct OpenFile {
    pub(crate) file: File,
    /// Made by this open, or written, truncated or allocated through it: its close
    /// changes what other clients see of the file. A descriptor opened for writing and
    /// never written (mdtest's read phase opens O_RDWR) changed nothing.
    pub(crate) changed: AtomicBool,
    /// Locks lost by this mount before this open (`Holders::losses`): a later loss on
    /// the file fails this descriptor's I/O.
    pub(crate) losses_at_open: u64,
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
    /// Small writes not yet sent to the io servers (see `behind`).
    behind: WriteBehind,
    /// What each file's data was (`DataStamp`) when it was last opened here: an open
    /// that finds the same stamp again, settled, lets the kernel keep the file's cached
    /// pages. Starts over when full.
    stamps: Mutex<HashMap<InodeId, Seen>>,
    /// Directories listed to answer a run of lookups (see `recent`).
    recent: Recent,
    /// Attribute changes of files created here and open, sent at close (see `deferred`).
    deferred: Deferred,
    /// Write capabilities of new files asked for in the background (see `prefetch`).
    prefetch: Prefetch,
    /// Directories' attributes from the answers to creates in them (see `parents`).
    parents: Parents,
    /// Lock owners holding cluster-wide fcntl/flock locks through this mount (see `locks`).
    lock_holders: Arc<Holders>,
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
}

thread_local! {
    /// Each FUSE worker thread's read buffer, reused across requests (see `ReadBuffer`).
    static READ_BUFFER: RefCell<Option<ReadBuffer>> = const { RefCell::new(None) };
}

/// Whether the mount makes a read pool (`weft_rpc::shm::Pool`): unless
/// `WEFT_READ_POOL=0` (or the transport is forced off shared memory,
/// `WEFT_TRANSPORT=unix|tcp`, which `Pool::install` heeds).
pub(crate) fn read_pool_wanted() -> bool {
    std::env::var("WEFT_READ_POOL").as_deref() != Ok("0")
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

/// F_RDLCK, F_WRLCK or F_UNLCK.
fn lock_kind(typ: i32) -> Option<LockKind> {
    match typ {
        libc::F_RDLCK => Some(LockKind::Read),
        libc::F_WRLCK => Some(LockKind::Write),
        libc::F_UNLCK => Some(LockKind::Unlock),
        _ => None,
    }
}

/// A lock refused by another's: EAGAIN, as fcntl's F_SETLK says it; too many locks:
/// ENOLCK.
fn lock_errno(e: &ClientError) -> Errno {
    match e.code() {
        ErrorCode::Busy => Errno::EAGAIN,
        ErrorCode::TooLarge => Errno::ENOLCK,
        _ => errno(e, "lock"),
    }
}

/// Drops every lock of `owner` on `inode` at the manager (its close, or the mount's
/// end; `Holders::forget` dropped them here); a failure is logged (the manager drops
/// them when the session lapses).
/// Runs `task` on a waiting thread of its own if there is room (so that waiting locks
/// do not hold the workers every other request needs), else here.
fn on_waiting_thread(holders: &Arc<Holders>, task: impl FnOnce() + Send + 'static) {
    if !holders.start_waiter() {
        return task();
    }
    let ended = Arc::clone(holders);
    let spawned = std::thread::Builder::new()
        .name("weft-fuse-lock".into())
        .spawn(move || {
            task();
            ended.end_waiter();
        });
    if let Err(e) = spawned {
        // The reply went with the closure: fuser answers it with an error.
        holders.end_waiter();
        eprintln!("weft-fuse: no thread for a waiting lock ({e})");
    }
}

/// One F_SETLK/F_SETLKW: what it asks of the manager, and what a granted lock does here.
struct LockTaker {
    client: Client,
    request: LockRequest,
    /// F_SETLKW: wait while another's lock refuses it.
    sleep: bool,
    /// The thread that asked (a signal to it ends the wait).
    tid: u32,
    holders: Arc<Holders>,
    notifier: Arc<OnceLock<Notifier>>,
    names: Arc<Names>,
}

impl LockTaker {
    fn try_once(&self) -> Result<Asked<()>, ClientError> {
        let asked = self.holders.apply(&self.client, &self.request)?;
        if matches!(asked, Asked::Answered(())) && self.request.kind != LockKind::Unlock {
            // What another client wrote before it let go of the lock is read from the
            // io servers, not from pages this kernel cached earlier; and names it
            // removed or made beside the file are looked up afresh.
            let file = self.request.inode;
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(INodeNo(file.0), 0, 0);
                if let Some((dir, names)) = self.names.siblings_of(file, locks::SIBLINGS_DROPPED_MAX) {
                    for name in names {
                        let _ = n.inval_entry(INodeNo(dir.0), OsStr::from_bytes(name.as_bytes()));
                    }
                }
            }
        }
        Ok(asked)
    }

    /// Asks until the lock is granted, refused (F_SETLK, or an error), or the process
    /// is gone or interrupted. The manager's grace after a restart is waited out either way.
    fn wait(self, reply: ReplyEmpty) {
        let mut tries = 0u32;
        loop {
            std::thread::sleep(locks::pause(tries));
            tries = tries.saturating_add(1);
            if locks::waiter_interrupted(self.request.pid, self.tid) {
                return reply.error(Errno::EINTR);
            }
            match self.try_once() {
                Ok(Asked::Answered(())) => return reply.ok(),
                Ok(Asked::Grace) => continue,
                Err(e) if e.code() == ErrorCode::Busy && self.sleep => continue,
                Err(e) => return reply.error(lock_errno(&e)),
            }
        }
    }
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
            behind: WriteBehind::default(),
            stamps: Mutex::new(HashMap::new()),
            recent: Recent::new(cache.attr_ttl),
            deferred: Deferred::default(),
            prefetch: Prefetch::default(),
            parents: Parents::new(cache.attr_ttl),
            lock_holders: Arc::new(Holders::new(session)),
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

    fn ttl(&self) -> Duration {
        self.cache.attr_ttl
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
            with_kept.size = with_kept.size.max(self.behind.end(attr.inode));
            let kept_blocks = self.behind.kept_bytes(attr.inode).div_ceil(512);
            with_kept.blocks = with_kept.blocks.max(kept_blocks);
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

    fn add_file(&self, file: File, changed: bool) -> Result<u64, Errno> {
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

    /// The entry for `name` in `parent`, how long the kernel may keep it, and a listing
    /// of `parent` to fetch once the kernel is answered (see `recent`).
    fn do_lookup(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
    ) -> Result<(FileAttr, Duration, Option<Ticket>), Errno> {
        let name = name_bytes(name);
        if !self.retries.retrying(req.pid()) {
            if let Some((attr, left)) = self.recent.get(inode(parent), name) {
                // What is open here may have changed here since the listing.
                if !self.open_inodes.is_open(attr.inode) {
                    self.retries.looked_up(req.pid(), attr.inode);
                    // Up to the attribute timeout old: no open may go by it.
                    self.walks.unchecked(req.pid());
                    return Ok((self.entered(inode(parent), name, &attr), left, None));
                }
            }
        }
        let client = self.caller(req);
        let guess = self
            .last_found
            .lock()
            .expect("lookup table poisoned")
            .get(&(inode(parent), Name::from(name)))
            .and_then(|ino| self.remembered(*ino));
        let checked = match &guess {
            Some(g) => self
                .checked_lookup(&client, inode(parent), name, g)
                .map_err(|e| errno(&e, "lookup"))?,
            None => None,
        };
        let attr = match checked {
            Some((attr, stamp)) => {
                self.walks.checked(req.pid(), attr.clone(), stamp);
                attr
            }
            None => {
                self.walks.unchecked(req.pid());
                client
                    .lookup_sized(inode(parent), name, guess.as_ref())
                    .map_err(|e| errno(&e, "lookup"))?
            }
        };
        self.retries.looked_up(req.pid(), attr.inode);
        let ticket = self.recent.looked_up(inode(parent));
        Ok((self.entered(inode(parent), name, &attr), self.ttl(), ticket))
    }

    /// The lookup of `name` in `parent` made as an open checks its names (see `walked`):
    /// the path the kernel knows `parent` by and `name` in it must still lead to
    /// `guess`'s inode, the file the name led to here before, whose size and data stamp
    /// are asked of the io servers meanwhile. Same round trips as a plain lookup. `None`
    /// when the name leads elsewhere now, a name on the way changed, or a server refused
    /// the check: the plain lookup answers then (with its own errors). A server that
    /// could not be reached is the lookup's error: the plain lookup would only wait for
    /// it again (two timeouts per lookup while the manager is down).
    fn checked_lookup(
        &self,
        client: &Client,
        parent: InodeId,
        name: &[u8],
        guess: &Attr,
    ) -> Result<Option<(Attr, Option<DataStamp>)>, ClientError> {
        if guess.kind != FileKind::File {
            return Ok(None);
        }
        let mut steps = if parent == InodeId::ROOT {
            Vec::new()
        } else {
            self.names.path_of(parent)
        };
        steps.push(PathStep {
            parent,
            name: Name::from(name),
            child: guess.inode,
        });
        // As deep as an open checks: the names nearest the file.
        let extra = steps.len().saturating_sub(weft_client::REVALIDATE_STEPS_MAX);
        steps.drain(..extra);
        match client.revalidate_stamped(steps, Some(guess)) {
            Ok((attr, stamp)) if attr.kind == FileKind::File && attr.nlink > 0 => Ok(Some((attr, stamp))),
            Err(e @ ClientError::Transport(_)) => Err(e),
            _ => Ok(None),
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
        if !open.changed.swap(true, Ordering::Relaxed) {
            self.recent.inode_changed(ino);
        }
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
        let keep = may_keep && stamps.get(&ino) == Some(&Seen::Settled(now.clone()));
        if !keep {
            if stamps.len() >= ATTRS_CACHED_MAX && !stamps.contains_key(&ino) {
                stamps.clear();
            }
            stamps.insert(ino, Seen::Pending { stamp: now, fh });
        }
        keep
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

    fn do_setattr(&self, req: &Request, ino: INodeNo, changes: SetAttr) -> Result<FileAttr, Errno> {
        if self.open_inodes.is_open(inode(ino)) {
            if let Some(current) = self.remembered(inode(ino)) {
                let caller = Caller {
                    uid: req.uid(),
                    gid: req.gid(),
                    client: self.caller(req),
                };
                if self.deferred.keep(inode(ino), &current, &caller, &changes) {
                    // Sent at close; this mount shows it from now on.
                    self.recent.inode_changed(inode(ino));
                    return Ok(self.remember(&current));
                }
            }
        }
        // Kept writes land before this change (a truncate or a time set that came after
        // them; the objects' times are the file's), kept attribute changes after the
        // writes and before this one.
        self.send_kept(inode(ino))?;
        if let Some(size) = changes.size {
            self.behind.truncated(inode(ino), size);
        }
        let client = self.caller(req);
        let attr = if changes == SetAttr::default() {
            client.getattr(inode(ino))
        } else {
            let change = self.parents.begin(inode(ino));
            let set = client.setattr_inode(inode(ino), &changes);
            self.parents.end(change, None);
            self.recent.inode_changed(inode(ino));
            set
        }
        .map_err(|e| errno(&e, "setattr"))?;
        Ok(self.remember(&attr))
    }

    /// Attributes of `ino`. An inode another client removed (or replaced) is still
    /// there for what holds it: an open descriptor (`fh`) sees it with link count 0, as
    /// POSIX has it, and so does the retried walk of a thread just answered ESTALE (the
    /// kernel checks permission before it opens what the walk found). Anything else gets
    /// ESTALE, on which the kernel looks the path up again.
    fn do_getattr(&self, req: &Request, ino: InodeId, fh: Option<FileHandle>) -> Result<FileAttr, Errno> {
        let client = self.caller(req);
        match client.getattr_sized(ino, self.remembered(ino).as_ref()) {
            Ok(attr) => Ok(self.remember(&attr)),
            Err(e) if e.code() == ErrorCode::Stale => {
                let held = fh.is_some() || self.retries.expects(req.pid(), ino);
                match self.remembered(ino).filter(|_| held) {
                    Some(mut attr) => {
                        attr.nlink = 0;
                        // Its data may still be there for a while; the size is as last known
                        // otherwise.
                        let _ = client.fill_sizes(std::slice::from_mut(&mut attr));
                        Ok(file_attr(&attr))
                    }
                    None => {
                        self.retries.refused(req.pid());
                        Err(Errno::ESTALE)
                    }
                }
            }
            Err(e) => Err(errno(&e, "getattr")),
        }
    }

    /// Opens with close-to-open consistency: the name the kernel found the inode by is
    /// checked against the manager (see `names`), and the attributes and size are read
    /// afresh. A name that no longer leads to the inode is answered ESTALE, on which the
    /// kernel looks the whole path up again and retries once; that retry is trusted.
    fn do_open(&self, req: &Request, ino: INodeNo, flags: OpenFlags) -> Result<(u64, FopenFlags), Errno> {
        // What another descriptor here wrote is on the io servers before this open reads
        // the size (close-to-open holds between descriptors of one mount too), and the
        // attributes kept here are the manager's.
        self.behind.send(inode(ino))?;
        self.deferred.send(inode(ino))?;
        self.deferred.xattrs_unknown(inode(ino));
        let client = self.caller(req);
        let told = self.remembered(inode(ino));
        // The lookup that ended this open's walk checked every name, size and data stamp
        // a moment ago (see `walked`); not for a file open here, whose kept writes
        // were sent just now.
        let walked = self
            .walks
            .take(req.pid(), inode(ino))
            .filter(|_| told.is_some() && !self.open_inodes.is_open(inode(ino)));
        let (attr, stamp) = match told
            .clone()
            .filter(|_| self.retries.trusts(req.pid(), inode(ino)))
        {
            // Found by the retried walk a moment ago, within this very open (its data
            // is not vouched for: the cached pages go).
            Some(attr) => (attr, None),
            None => match walked
                .map(Ok)
                .unwrap_or_else(|| self.current_attr(&client, inode(ino), told.as_ref()))
            {
                // A file kept nameless for some mount's open descriptors is not opened anew.
                Ok((attr, _)) if attr.kind == FileKind::File && attr.nlink == 0 => {
                    self.retries.refused(req.pid());
                    return Err(Errno::ESTALE);
                }
                Ok(found) => found,
                Err(e) if e.code() == ErrorCode::Stale || e.code() == ErrorCode::NotFound => {
                    self.retries.refused(req.pid());
                    return Err(Errno::ESTALE);
                }
                Err(e) => return Err(errno(&e, "open")),
            },
        };
        if attr.kind != FileKind::File {
            return Err(Errno::EISDIR);
        }
        let changed = told.as_ref().is_none_or(|t| {
            (t.size, t.mtime, t.ctime, t.mode, t.uid, t.gid)
                != (attr.size, attr.mtime, attr.ctime, attr.mode, attr.uid, attr.gid)
        });
        self.remember(&attr);
        // Opened for writing, the file is dropped from listings once it is written
        // through this descriptor (see `OpenFile::changed`); open here, it is not
        // answered from them meanwhile.
        let writable = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let file = client.open_attr(attr, writable).map_err(|e| errno(&e, "open"))?;
        if changed {
            // The kernel's cached attributes (the size above all, which bounds reads) are
            // dropped; the page cache starts empty anyway (no FOPEN_KEEP_CACHE). That
            // takes no inode lock, so it is safe during the open.
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(ino, -1, 0);
            }
        }
        let fh = self.add_file(file, false)?;
        // Close-to-open: the pages the kernel holds of the file stay only if no byte of
        // it changed since they were read (another client's same-size rewrite changes no
        // attribute, but does change the stamp); see `keeps_pages`.
        let keep = self.keeps_pages(inode(ino), stamp, fh, !changed);
        Ok((fh, self.open_flags(flags.0, keep)))
    }

    /// How the kernel is to treat an open file: `keep`, whether the pages it has cached
    /// of the file are still right (else they are dropped at this open). O_APPEND files
    /// bypass the page cache: the daemon writes each append at the file's true end,
    /// which need not be the offset the kernel chose from its cached size, so cached
    /// pages would sit at wrong offsets.
    fn open_flags(&self, flags: i32, keep: bool) -> FopenFlags {
        let mut out = FopenFlags::empty();
        if self.cache.keep_cache || keep {
            out |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        if flags & libc::O_APPEND != 0 {
            out |= FopenFlags::FOPEN_DIRECT_IO;
        }
        out
    }

    fn do_create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Result<(FileAttr, u64), Errno> {
        let name = name_bytes(name);
        let client = self.caller(req);
        let exclusive = flags & libc::O_EXCL != 0;
        let truncate = flags & libc::O_TRUNC != 0 && !exclusive;
        let options = CreateOptions {
            mode,
            exclusive,
            truncate,
            ..CreateOptions::default()
        };
        let change = self.parents.begin(inode(parent));
        // The kernel asks to create only a name it just found missing: made exclusively
        // first, the file is known new (empty: no size to ask every io server for, nothing
        // to truncate, which costs a durable manager commit and a request per io server).
        // Only if another client made the name meanwhile is it opened as it is.
        let mut made = client.create_in_made(
            inode(parent),
            name,
            &CreateOptions {
                exclusive: true,
                truncate: false,
                ..options
            },
        );
        let new = made.is_ok();
        if !exclusive && made.as_ref().is_err_and(|e| e.code() == ErrorCode::Exists) {
            made = client.create_in_made(inode(parent), name, &options);
        }
        self.parents
            .end(change, made.as_ref().ok().and_then(|m| m.parent.as_ref()));
        self.recent.dir_changed(inode(parent));
        let file = made.map_err(|e| errno(&e, "create"))?.made;
        let mut attr = file.attr().clone();
        if new || exclusive || truncate {
            attr.size = 0;
        } else {
            // The file may have existed (another client made it since the kernel looked).
            client
                .fill_sizes(std::slice::from_mut(&mut attr))
                .map_err(|e| errno(&e, "create"))?;
        }
        let fattr = self.entered(inode(parent), name, &attr);
        let fh = self.add_file(file, true)?;
        if exclusive {
            // New, and open here (see `deferred`).
            self.deferred.created(attr.inode);
        }
        Ok((fattr, fh))
    }

    fn do_rename(
        &self,
        req: &Request,
        (parent, name): (INodeNo, &OsStr),
        (new_parent, new_name): (INodeNo, &OsStr),
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let (name, new_name) = (name_bytes(name), name_bytes(new_name));
        let client = self.caller(req);
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return self.do_exchange(&client, (parent, name), (new_parent, new_name));
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        if (parent, name) == (new_parent, new_name) && !no_replace {
            return Ok(());
        }
        // A replaced target that is open here stays readable by its descriptors.
        self.parents.rename_begins();
        let renamed = if no_replace {
            // The manager refuses an existing target in the move's own transaction, so
            // a create by another client meanwhile is never replaced.
            self.rename_no_replace(&client, (inode(parent), name), (inode(new_parent), new_name))
        } else {
            client.rename_keeping((inode(parent), name), (inode(new_parent), new_name), self.keep())
        };
        self.parents.rename_ends();
        self.recent.dir_changed(inode(parent));
        self.recent.dir_changed(inode(new_parent));
        let (moved, kept) = renamed.map_err(|e| errno(&e, "rename"))?;
        self.names.renamed(inode(new_parent), new_name, moved.inode);
        self.recent.inode_changed(moved.inode);
        self.kept_by_manager(kept);
        Ok(())
    }

    /// rename(2) with RENAME_NOREPLACE. A manager from before `RenameNoReplace` is
    /// asked whether the target exists first, then to rename: not atomic against
    /// another client's create in between.
    fn rename_no_replace(
        &self,
        client: &Client,
        src: (InodeId, &[u8]),
        dst: (InodeId, &[u8]),
    ) -> Result<(Attr, Option<InodeId>), ClientError> {
        match client.rename_no_replace(src, dst) {
            Err(e) if e.code() == ErrorCode::UnknownOpcode => {}
            other => return other.map(|moved| (moved, None)),
        }
        match client.lookup(dst.0, dst.1) {
            Ok(_) => Err(ClientError::Refused {
                code: ErrorCode::Exists,
                message: format!(
                    "{} exists (rename without replacing)",
                    String::from_utf8_lossy(dst.1)
                ),
            }),
            Err(e) if e.code() == ErrorCode::NotFound => client.rename_keeping(src, dst, None),
            Err(e) => Err(e),
        }
    }

    /// rename(2) with RENAME_EXCHANGE: the manager swaps the two names in one
    /// transaction; this mount's memory of both names and both inodes is renewed.
    fn do_exchange(
        &self,
        client: &Client,
        (parent, name): (INodeNo, &[u8]),
        (new_parent, new_name): (INodeNo, &[u8]),
    ) -> Result<(), Errno> {
        self.parents.rename_begins();
        let swapped = client.rename_exchange((inode(parent), name), (inode(new_parent), new_name));
        self.parents.rename_ends();
        self.recent.dir_changed(inode(parent));
        self.recent.dir_changed(inode(new_parent));
        let moved = swapped.map_err(|e| errno(&e, "rename"))?;
        self.names.renamed(inode(new_parent), new_name, moved.inode);
        self.recent.inode_changed(moved.inode);
        if let Ok(other) = client.lookup(inode(parent), name) {
            self.names.renamed(inode(parent), name, other.inode);
            self.recent.inode_changed(other.inode);
        }
        Ok(())
    }

    fn do_read(&self, ino: INodeNo, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
        let open = match self
            .file(fh)
            .and_then(|open| self.locks_kept(&open, "read").map(|()| open))
        {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        self.open_completed(inode(ino), fh);
        // Reads see this mount's kept writes (the kernel asks only for what its page
        // cache lacks, so this is rare).
        if let Err(e) = self.behind.send(inode(ino)) {
            return reply.error(e);
        }
        let size = size.min(REQUEST_BYTES_MAX) as usize;
        // A buffer of the read pool: the io servers place the reply's bytes there
        // themselves, and it goes from there to the kernel. Every buffer busy (or
        // held by a call given up on), or no pool: this worker's own buffer, into
        // which the connections copy.
        if let Some(mut slot) = weft_rpc::shm::Pool::get().and_then(|pool| pool.lease()) {
            let bytes = slot.bytes();
            match open.file.read_at(offset, &mut bytes[..size]) {
                Ok(n) => reply.data(&bytes[..n]),
                Err(e) => reply.error(errno(&e, "read")),
            }
            return;
        }
        READ_BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            if buffer.is_none() {
                match ReadBuffer::new() {
                    Ok(made) => *buffer = Some(made),
                    Err(e) => {
                        eprintln!("weft-fuse: read: cannot map this worker's read buffer: {e}");
                        return reply.error(Errno::ENOMEM);
                    }
                }
            }
            let bytes = buffer.as_mut().expect("made above").bytes();
            match open.file.read_at(offset, &mut bytes[..size]) {
                Ok(n) => reply.data(&bytes[..n]),
                Err(e) => reply.error(errno(&e, "read")),
            }
        })
    }

    /// Entries after `offset` of open directory `fh`.
    fn listing(&self, req: &Request, fh: FileHandle, offset: u64) -> Result<Vec<Listed>, Errno> {
        let stream = self
            .dirs
            .lock()
            .expect("directory table poisoned")
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)?;
        let client = self.caller(req);
        let mut stream = stream.lock().expect("directory stream poisoned");
        stream.after(&client, offset).map_err(|e| errno(&e, "readdir"))
    }

    /// Entries after `offset` of open directory `fh`, with the sized attributes of its
    /// page (`DirStream::size_page`: one request per io server per page), or `None` if
    /// the sizes could not be had that way (then `listed_attrs` asks per batch).
    fn listing_sized(
        &self,
        client: &Client,
        fh: FileHandle,
        offset: u64,
    ) -> Result<(Vec<Listed>, Option<crate::dir::SizedPage>), Errno> {
        let stream = self
            .dirs
            .lock()
            .expect("directory table poisoned")
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)?;
        let mut stream = stream.lock().expect("directory stream poisoned");
        let entries = stream.after(client, offset).map_err(|e| errno(&e, "readdir"))?;
        let sized = stream.size_page(client).ok().map(|page| {
            entries
                .iter()
                .filter_map(|e| page.get(&e.offset).map(|a| (e.offset, a.clone())))
                .collect()
        });
        Ok((entries, sized))
    }

    /// Attributes of listed entries, from the listing's page with sizes asked of the io
    /// servers (one request per server for the batch); files removed since the listing
    /// are left out.
    fn listed_attrs(&self, client: &Client, entries: &[Listed]) -> Vec<Option<Attr>> {
        let mut attrs: Vec<Attr> = entries.iter().filter_map(|e| e.attr.clone()).collect();
        if attrs.len() != entries.len() {
            return entries.iter().map(|e| client.getattr(e.inode).ok()).collect();
        }
        match client.fill_sizes_or_gone(&mut attrs) {
            Ok(gone) => attrs
                .into_iter()
                .zip(gone)
                .map(|(a, gone)| (!gone).then_some(a))
                .collect(),
            Err(_) => entries.iter().map(|e| client.getattr(e.inode).ok()).collect(),
        }
    }

    fn xattr_value(&self, req: &Request, ino: INodeNo, name: &OsStr) -> Result<Vec<u8>, Errno> {
        if name != OsStr::new(LAYOUT_XATTR) {
            return Err(Errno::NO_XATTR);
        }
        let attr = self
            .caller(req)
            .getattr(inode(ino))
            .map_err(|e| errno(&e, "getxattr"))?;
        xattr::format(&attr)
            .map(String::into_bytes)
            .ok_or(Errno::NO_XATTR)
    }

    /// setxattr of the layout attribute, with setxattr(2)'s create/replace flags.
    fn set_layout_xattr_as(
        &self,
        req: &Request,
        ino: INodeNo,
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), Errno> {
        if how != XattrSet::Either {
            let exists = self.xattr_value(req, ino, OsStr::new(LAYOUT_XATTR)).is_ok();
            if how == XattrSet::Replace && !exists {
                return Err(Errno::NO_XATTR);
            }
            if how == XattrSet::Create && exists {
                return Err(Errno::EEXIST);
            }
        }
        self.set_layout_xattr(req, ino, Some(value))
    }

    /// mknod(2): FIFOs, devices and sockets are namespace objects; a regular file is
    /// created as `create` would, and not opened.
    fn do_mknod(
        &self,
        req: &Request,
        parent: InodeId,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<FileAttr, Errno> {
        let client = self.caller(req);
        let permissions = mode & !umask & 0o7777;
        let change = self.parents.begin(parent);
        let made = match kind_of_mode(mode) {
            Some(FileKind::File) => {
                let options = CreateOptions {
                    mode: permissions,
                    exclusive: true,
                    truncate: false,
                    ..CreateOptions::default()
                };
                client.create_in_made(parent, name, &options).map(|made| {
                    let mut attr = made.made.attr().clone();
                    attr.size = 0;
                    Made {
                        made: attr,
                        parent: made.parent,
                    }
                })
            }
            Some(kind) if kind.is_special() => {
                client.mknod_in_made(parent, name, kind, permissions, rdev as u64)
            }
            _ => {
                self.parents.end(change, None);
                return Err(Errno::EINVAL);
            }
        };
        self.parents
            .end(change, made.as_ref().ok().and_then(|m| m.parent.as_ref()));
        let attr = made.map_err(|e| errno(&e, "mknod"))?.made;
        Ok(self.entered(parent, name, &attr))
    }

    /// `attr` with a file's size filled in (kept as it is if the servers cannot say).
    fn with_size(&self, req: &Request, mut attr: Attr) -> Attr {
        if attr.kind == FileKind::File {
            let _ = self.caller(req).fill_sizes(std::slice::from_mut(&mut attr));
        }
        attr
    }

    fn set_layout_xattr(&self, req: &Request, ino: INodeNo, value: Option<&[u8]>) -> Result<(), Errno> {
        let client = self.caller(req);
        let attr = client.getattr(inode(ino)).map_err(|e| errno(&e, "setxattr"))?;
        if attr.kind != FileKind::Directory {
            // A file's layout is fixed when it is created: set the directory's default.
            return Err(Errno::EOPNOTSUPP);
        }
        let layout = match value {
            Some(v) => {
                let text = std::str::from_utf8(v).map_err(|_| Errno::EINVAL)?;
                Some(xattr::parse(text).map_err(|why| {
                    eprintln!("weft-fuse: setxattr {LAYOUT_XATTR}={text:?}: {why}");
                    Errno::EINVAL
                })?)
            }
            None if attr.dir_layout.is_none() => return Err(Errno::NO_XATTR),
            None => None,
        };
        client
            .set_dir_layout_in(inode(ino), layout)
            .map_err(|e| errno(&e, "setxattr"))?;
        Ok(())
    }
}

fn reply_xattr(value: &[u8], size: u32, reply: ReplyXattr) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

impl Filesystem for WeftFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        request_limits(config);
        let wanted = [
            // ls -l, find and tar get names and attributes in one pass.
            InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO,
            // Lookups and creates in one directory run in parallel: the manager orders them.
            InitFlags::FUSE_PARALLEL_DIROPS,
            // Writes, truncates and chowns by unprivileged processes drop setuid/setgid
            // here (the manager) rather than by a chmod from the kernel, which a
            // writer who does not own the file may not do.
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
            // fcntl and flock locks come here and are held cluster-wide (see `locks`).
            InitFlags::FUSE_POSIX_LOCKS,
            InitFlags::FUSE_FLOCK_LOCKS,
        ];
        for flags in wanted {
            let _ = config.add_capabilities(flags);
        }
        self.renew_session_in_background();
        Ok(())
    }

    fn destroy(&mut self) {
        self.behind.send_all();
        self.deferred.send_all();
        let base = self.clients.base();
        for (inode, owner) in self.lock_holders.drain() {
            locks::unlock_all(&base, self.session, inode, owner);
        }
        self.lock_holders.end(&base);
        for inode in self.open_inodes.drain_kept() {
            kept::release(&base, self.session, inode);
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.names.forget(inode(ino), nlookup);
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.do_lookup(req, parent, name) {
            Ok((attr, ttl, ticket)) => {
                reply.entry(&ttl, &attr, Generation(0));
                if let Some(ticket) = ticket {
                    self.recent.fetch(&self.caller(req), ticket);
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        // A directory this mount just made a name in: as the manager answered that.
        if let Some((attr, left)) = self.parents.take(inode(ino)) {
            return reply.attr(&left, &self.remember(&attr));
        }
        match self.do_getattr(req, inode(ino), fh) {
            Ok(attr) => reply.attr(&self.ttl(), &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let changes = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
            kill_privileges: false,
            // ftruncate(2): the kernel passes the descriptor, which it checked is open
            // for writing; the mode may deny writing by now.
            by_handle: fh.is_some() && size.is_some(),
        };
        if let Some(open) = fh.and_then(|fh| self.file(fh).ok()) {
            self.changed_through(inode(ino), &open);
        }
        if changes.by_handle {
            // The manager honours the handle of a mount run by a verified user only
            // against the write capability it granted that user.
            self.caller(req).hold_write_grant(inode(ino));
        }
        match self.do_setattr(req, ino, changes) {
            Ok(attr) => reply.attr(&self.ttl(), &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.caller(req).readlink_inode(inode(ino)) {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(errno(&e, "readlink")),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let name = name_bytes(name);
        let change = self.parents.begin(inode(parent));
        let made = self
            .caller(req)
            .mkdir_in_made(inode(parent), name, mode & !umask & 0o7777);
        self.parents
            .end(change, made.as_ref().ok().and_then(|m| m.parent.as_ref()));
        let result = made
            .map(|made| self.entered(inode(parent), name, &made.made))
            .map_err(|e| errno(&e, "mkdir"));
        self.recent.dir_changed(inode(parent));
        match result {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let change = self.parents.begin(inode(parent));
        let result = Ok(name_bytes(name)).and_then(|name| {
            let kept = self
                .caller(req)
                .unlink_keeping(inode(parent), name, self.keep())
                .map_err(|e| errno(&e, "unlink"))?;
            self.kept_by_manager(kept);
            Ok(())
        });
        self.parents.end(change, None);
        self.recent.dir_changed(inode(parent));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let change = self.parents.begin(inode(parent));
        let result = Ok(name_bytes(name)).and_then(|name| {
            self.caller(req)
                .rmdir_in(inode(parent), name)
                .map_err(|e| errno(&e, "rmdir"))
        });
        self.parents.end(change, None);
        self.recent.dir_changed(inode(parent));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let name = name_bytes(link_name);
        let change = self.parents.begin(inode(parent));
        let made = self
            .caller(req)
            .symlink_in_made(target.as_os_str().as_bytes(), inode(parent), name);
        self.parents
            .end(change, made.as_ref().ok().and_then(|m| m.parent.as_ref()));
        let result = made
            .map(|made| self.entered(inode(parent), name, &made.made))
            .map_err(|e| errno(&e, "symlink"));
        self.recent.dir_changed(inode(parent));
        match result {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.do_rename(req, (parent, name), (newparent, newname), flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.do_open(req, ino, flags) {
            Ok((fh, open_flags)) => reply.opened(FileHandle(fh), open_flags),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.do_read(ino, fh, offset, size, reply)
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = self.file(fh).and_then(|open| {
            self.locks_kept(&open, "write")?;
            self.changed_through(inode(ino), &open);
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                // The writer lacks CAP_FSETID: its write drops setuid/setgid (the kernel
                // leaves that to the file system, FUSE_HANDLE_KILLPRIV_V2).
                open.file.drop_privileges().map_err(|e| errno(&e, "write"))?;
                if let Some(n) = self.notifier.get() {
                    let _ = n.inval_inode(ino, -1, 0);
                }
            }
            if flags.0 & libc::O_APPEND != 0 {
                // At the true end of the file, whoever wrote last, not at the offset the
                // kernel chose from its cached size; after what this mount wrote before.
                self.behind.send(inode(ino))?;
                open.file.append(data).map(|_| data.len())
            } else if data.len() < SMALL_WRITE_BYTES {
                // Kept, and sent with the file's other small writes (see `behind`).
                open.file
                    .check_write(offset, data.len())
                    .map_err(|e| errno(&e, "write"))?;
                if self.deferred.first_write(inode(ino)) {
                    // Held by the close, which then sends at once (see `prefetch`).
                    self.prefetch.ask(open.clone());
                }
                return self
                    .behind
                    .write(inode(ino), &open, offset, data)
                    .map(|()| data.len());
            } else {
                self.behind.send(inode(ino))?;
                open.file.write_at(offset, data)
            }
            .map_err(|e| errno(&e, "write"))
        });
        match result {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty) {
        // Kept writes go to the io servers now: by close, every byte is on its server
        // and the next getattr anywhere sees the new size. A failure to send them is
        // close's error, as on NFS.
        self.open_completed(inode(ino), fh);
        self.deferred.xattrs_unknown(inode(ino));
        let open = self.file(fh);
        let sent = open
            .as_ref()
            .map_err(|e| *e)
            .and_then(|_| self.send_kept(inode(ino)))
            .and_then(|()| match &open {
                // A descriptor whose locks were lost reports it at close too.
                Ok(o) => self.locks_kept(o, "close"),
                Err(_) => Ok(()),
            });
        // A descriptor that changed nothing (open only for reading, or for writing and
        // never written) changed nothing whatever its close sent (bytes kept through
        // another descriptor, open here, whose own close follows); its close must not
        // throw away a listing being fetched (see `recent`): readers closing file after
        // file (mdtest's read phase, which opens O_RDWR) did, listing after listing.
        if !matches!(&open, Ok(o) if !o.changed.load(Ordering::Relaxed)) {
            self.recent.inode_changed(inode(ino));
        }
        // A process's close of any descriptor of a file drops its record locks on it
        // (POSIX), after what it wrote under them was sent.
        if self.lock_holders.forget(inode(ino), lock_owner.0) {
            locks::unlock_all(&self.clients.base(), self.session, inode(ino), lock_owner.0);
        }
        match sent {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Normally sent by flush already; a descriptor dropped without one (mmap) sends
        // here, before a kept file may be released. Nobody is left to tell of a failure
        // but the log.
        let _ = self.behind.send(inode(ino));
        let _ = self.deferred.send(inode(ino));
        // The open file's flock lock goes with its last descriptor.
        if let Some(owner) = lock_owner {
            if self.lock_holders.forget(inode(ino), owner.0) {
                locks::unlock_all(&self.clients.base(), self.session, inode(ino), owner.0);
            }
        }
        let closed = self.files.write().expect("file table poisoned").remove(&fh.0);
        // As at flush: only a descriptor that changed the file.
        if closed.as_ref().is_none_or(|o| o.changed.load(Ordering::Relaxed)) {
            self.recent.inode_changed(inode(ino));
        }
        if let Some(open) = closed {
            if let Some(inode) = self.open_inodes.closed(open.file.inode()) {
                kept::release(&self.clients.base(), self.session, inode);
            }
            if !self.open_inodes.is_open(open.file.inode()) {
                self.lock_holders.closed(open.file.inode());
                self.behind.forget(open.file.inode());
                self.deferred.closed(open.file.inode());
            }
        }
        reply.ok();
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let Some(kind) = lock_kind(typ) else {
            return reply.error(Errno::EINVAL);
        };
        let request = LockRequest {
            session: self.session,
            owner: lock_owner.0,
            inode: inode(ino),
            pid,
            kind,
            start,
            end,
        };
        let (client, holders) = (self.clients.base(), Arc::clone(&self.lock_holders));
        let tid = req.pid();
        let answer = move |asked: Result<Asked<Option<weft_proto::HeldLock>>, ClientError>,
                           reply: ReplyLock| {
            match asked {
                Ok(Asked::Answered(Some(held))) => {
                    let typ = if held.write { libc::F_WRLCK } else { libc::F_RDLCK };
                    reply.locked(held.start, held.end, typ, held.pid)
                }
                Ok(Asked::Answered(None)) => reply.locked(start, end, libc::F_UNLCK, 0),
                Ok(Asked::Grace) => unreachable!("answered only once out of the grace"),
                Err(e) => reply.error(lock_errno(&e)),
            }
        };
        match holders.test(&client, &request) {
            Ok(Asked::Grace) => {
                // The manager's grace after a restart: asked again until answered.
                let waiting = Arc::clone(&holders);
                on_waiting_thread(&waiting, move || {
                    let mut tries = 0u32;
                    loop {
                        std::thread::sleep(locks::pause(tries));
                        tries = tries.saturating_add(1);
                        if locks::waiter_interrupted(pid, tid) {
                            return reply.error(Errno::EINTR);
                        }
                        match holders.test(&client, &request) {
                            Ok(Asked::Grace) => continue,
                            asked => return answer(asked, reply),
                        }
                    }
                });
            }
            asked => answer(asked, reply),
        }
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let Some(kind) = lock_kind(typ) else {
            return reply.error(Errno::EINVAL);
        };
        let file = inode(ino);
        if kind == LockKind::Unlock {
            // What the owner wrote under the lock reaches the io servers before another
            // client may take it.
            if let Err(e) = self.send_kept(file) {
                return reply.error(e);
            }
        }
        let taker = LockTaker {
            client: self.clients.base(),
            request: LockRequest {
                session: self.session,
                owner: lock_owner.0,
                inode: file,
                pid,
                kind,
                start,
                end,
            },
            sleep,
            tid: req.pid(),
            holders: Arc::clone(&self.lock_holders),
            notifier: Arc::clone(&self.notifier),
            names: Arc::clone(&self.names),
        };
        match taker.try_once() {
            Ok(Asked::Answered(())) => reply.ok(),
            // F_SETLKW waits while another's lock refuses it; either waits out the
            // manager's grace after a restart (F_SETLK is answered after it, not early).
            Ok(Asked::Grace) => on_waiting_thread(&self.lock_holders, move || taker.wait(reply)),
            Err(e) if e.code() == ErrorCode::Busy && sleep => {
                on_waiting_thread(&self.lock_holders, move || taker.wait(reply))
            }
            Err(e) => reply.error(lock_errno(&e)),
        }
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let result = self.file(fh).and_then(|open| {
            self.locks_kept(&open, "fsync")?;
            self.behind.send(inode(ino))?;
            self.deferred.send(inode(ino))?;
            open.file.sync().map_err(|e| errno(&e, "fsync"))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut dirs = self.dirs.lock().expect("directory table poisoned");
        if dirs.len() >= OPEN_HANDLES_MAX {
            return reply.error(Errno::ENFILE);
        }
        let fh = self.new_handle();
        dirs.insert(fh, Arc::new(Mutex::new(DirStream::new(inode(ino)))));
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn readdir(&self, req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        match self.listing(req, fh, offset) {
            Ok(entries) => {
                for e in entries {
                    let kind = crate::attr::file_type(e.kind);
                    if reply.add(
                        INodeNo(e.inode.0),
                        e.offset,
                        kind,
                        OsStr::from_bytes(e.name.as_bytes()),
                    ) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let client = self.caller(req);
        let (entries, sized) = match self.listing_sized(&client, fh, offset) {
            Ok(listed) => listed,
            Err(e) => return reply.error(e),
        };
        let ttl = self.ttl();
        let mut dir_attr = None;
        'batches: for batch in entries.chunks(READDIRPLUS_BATCH) {
            let (dots, named): (Vec<&Listed>, Vec<&Listed>) =
                batch.iter().partition(|e| e.name == "." || e.name == "..");
            for e in dots {
                // The kernel does not look "." and ".." up from here; any directory's
                // attributes will do, and the listed one is at hand.
                if dir_attr.is_none() {
                    match client.getattr(inode(ino)) {
                        Ok(a) => dir_attr = Some(file_attr(&a)),
                        Err(err) => return reply.error(errno(&err, "readdirplus")),
                    }
                }
                let attr = dir_attr.as_ref().expect("set above");
                let name = OsStr::from_bytes(e.name.as_bytes());
                if reply.add(INodeNo(e.inode.0), e.offset, name, &ttl, attr, Generation(0)) {
                    break 'batches;
                }
            }
            let named: Vec<Listed> = named.into_iter().cloned().collect();
            let attrs = match &sized {
                Some(sized) => named
                    .iter()
                    .map(|e| sized.get(&e.offset).cloned().flatten())
                    .collect(),
                None => self.listed_attrs(&client, &named),
            };
            for (e, attr) in named.iter().zip(attrs) {
                let Some(attr) = attr else { continue };
                let fattr = self.entered(inode(ino), e.name.as_bytes(), &attr);
                let name = OsStr::from_bytes(e.name.as_bytes());
                if reply.add(INodeNo(e.inode.0), e.offset, name, &ttl, &fattr, Generation(0)) {
                    break 'batches;
                }
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().expect("directory table poisoned").remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // A manager with a commit interval answers namespace changes before they are
        // durable: fsync of a directory commits them (all of them, as a journal would).
        match self.caller(req).sync_metadata() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e, "fsyncdir")),
        }
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let b = match self.caller(req).statfs() {
            Ok(s) => s.blocks(),
            Err(e) => return reply.error(errno(&e, "statfs")),
        };
        reply.statfs(
            b.blocks,
            b.blocks_free,
            b.blocks_avail,
            b.files,
            b.files_free,
            b.block_bytes as u32,
            b.name_bytes_max as u32,
            b.block_bytes as u32,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let how = if flags & libc::XATTR_CREATE != 0 {
            XattrSet::Create
        } else if flags & libc::XATTR_REPLACE != 0 {
            XattrSet::Replace
        } else {
            XattrSet::Either
        };
        // Before the change: from now on a getxattr of this file asks the manager.
        self.deferred.xattrs_unknown(inode(ino));
        let change = self.parents.begin(inode(ino));
        let result = if name == OsStr::new(CLUSTER_XATTR) {
            Err(Errno::EPERM)
        } else if name == OsStr::new(LAYOUT_XATTR) {
            self.set_layout_xattr_as(req, ino, value, how)
        } else {
            self.caller(req)
                .setxattr(inode(ino), name.as_bytes(), value, how)
                .map_err(|e| errno(&e, "setxattr"))
        };
        self.parents.end(change, None);
        self.recent.inode_changed(inode(ino));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let value = if name == OsStr::new(CLUSTER_XATTR) {
            Ok(self.cluster_xattr.clone())
        } else if name == OsStr::new(LAYOUT_XATTR) {
            self.xattr_value(req, ino, name)
        } else if self.deferred.has_no_xattrs(inode(ino)) {
            // New here and open here: none (see `Deferred::has_no_xattrs`).
            Err(Errno::NO_XATTR)
        } else {
            self.caller(req)
                .getxattr(inode(ino), name.as_bytes())
                .map_err(|e| errno(&e, "getxattr"))
        };
        match value {
            Ok(value) => reply_xattr(&value, size, reply),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let mut names = match self.xattr_value(req, ino, OsStr::new(LAYOUT_XATTR)) {
            Ok(_) => format!("{LAYOUT_XATTR}\0").into_bytes(),
            Err(e) if e == Errno::NO_XATTR => Vec::new(),
            Err(e) => return reply.error(e),
        };
        match self.caller(req).listxattr(inode(ino)) {
            Ok(stored) => {
                for name in stored {
                    names.extend_from_slice(name.as_bytes());
                    names.push(0);
                }
            }
            Err(e) => return reply.error(errno(&e, "listxattr")),
        }
        reply_xattr(&names, size, reply)
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        // Before the change: from now on a getxattr of this file asks the manager.
        self.deferred.xattrs_unknown(inode(ino));
        let change = self.parents.begin(inode(ino));
        let result = if name == OsStr::new(CLUSTER_XATTR) {
            Err(Errno::EPERM)
        } else if name == OsStr::new(LAYOUT_XATTR) {
            self.set_layout_xattr(req, ino, None)
        } else {
            self.caller(req)
                .removexattr(inode(ino), name.as_bytes())
                .map_err(|e| errno(&e, "removexattr"))
        };
        self.parents.end(change, None);
        self.recent.inode_changed(inode(ino));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let name = name_bytes(newname);
        let change = self.parents.begin(inode(newparent));
        let linked = self.caller(req).link_in_made(inode(ino), inode(newparent), name);
        self.parents
            .end(change, linked.as_ref().ok().and_then(|m| m.parent.as_ref()));
        self.recent.dir_changed(inode(newparent));
        self.recent.inode_changed(inode(ino));
        match linked.map(|made| made.made) {
            Ok(attr) => {
                let attr = self.with_size(req, attr);
                reply.entry(
                    &self.ttl(),
                    &self.entered(inode(newparent), name, &attr),
                    Generation(0),
                )
            }
            Err(e) => reply.error(errno(&e, "link")),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let made = self.do_mknod(req, inode(parent), name_bytes(name), mode, umask, rdev);
        self.recent.dir_changed(inode(parent));
        match made {
            Ok(attr) => reply.entry(&self.ttl(), &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let result = self.file(fh).and_then(|open| {
            self.changed_through(inode(ino), &open);
            // A hole punched after kept writes must not be filled by them later.
            self.behind.send(inode(ino))?;
            open.file
                .allocate(offset, length, mode as u32)
                .map_err(|e| errno(&e, "fallocate"))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.do_create(req, parent, name, mode & !umask & 0o7777, flags) {
            Ok((attr, fh)) => reply.created(
                &self.ttl(),
                &attr,
                Generation(0),
                FileHandle(fh),
                self.open_flags(flags, false),
            ),
            Err(e) => reply.error(e),
        }
    }
}

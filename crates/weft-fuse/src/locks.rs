//! `fcntl` record locks and `flock` locks, cluster-wide: the mount asks the manager
//! (`Client::file_lock`, the manager's `file_locks`), so a lock taken through one mount
//! excludes processes on every other mount, as on one machine. Without this the kernel
//! kept locks per mount, and writers coordinating through them on two mounts (SQLite)
//! corrupted their file.
//!
//! - The kernel sends F_SETLK/F_SETLKW/F_GETLK here (`FUSE_POSIX_LOCKS`) and `flock` as
//!   a whole-file lock whose owner is the open file (`FUSE_FLOCK_LOCKS`), so, as on NFS,
//!   `flock` and `fcntl` locks of one file exclude each other.
//! - Taking a lock drops the kernel's cached pages and attributes of the file and its
//!   cached names of the files beside it (up to `SIBLINGS_DROPPED_MAX`), and writes
//!   this mount kept are sent before a lock is dropped, so what one lock holder wrote,
//!   made or removed is what the next one sees (as NFS revalidates at lock). SQLite
//!   needs the names: right after locking its database it looks for a journal beside
//!   it, and a name another client removed a moment ago, still cached here, made it
//!   take the next writer's live journal for a crashed one and delete it.
//! - A waiting F_SETLKW (or `flock` without LOCK_NB) asks again with a growing pause
//!   (`WAIT_PAUSE_MIN` to `WAIT_PAUSE_MAX`) on a thread of its own (at most `WAITERS_MAX`
//!   at once; past that the worker itself waits), and gives up with EINTR once the
//!   waiting process is gone or has SIGKILL pending (the kernel keeps a killed waiter
//!   until the daemon answers), or the waiting thread has a signal to handle (an
//!   `alarm()` or `flock -w` timeout; see `waiter_interrupted`).
//! - POSIX locks go at the owner's close of the file (the kernel's flush names the
//!   owner), `flock` locks at the open file's release, and all of them when the mount
//!   ends. Only owners that took a lock here send an unlock at close, so a close costs
//!   no request otherwise. While any lock is held the mount renews its session, so the
//!   manager drops the locks of a mount that died (after its lease).
//! - Reclaim after a manager restart (the manager's `file_locks` has the other half):
//!   the mount keeps a copy of its own locks (`Holders`, weft-proto's `LockTable`) and,
//!   while it holds any, asks the manager's incarnation every `LOCK_RENEW_PERIOD`
//!   (`LockSession`; every lock answer carries it too). A new incarnation: every lock
//!   is sent again as a reclaim, during the manager's grace. A reclaim refused (another
//!   mount's reclaim conflicts, or the grace is over) is a lost lock: logged, and every
//!   read, write, fsync and close through descriptors of that file open at the loss
//!   fails with EIO (as Linux NFS does), rather than let the holder write on believing
//!   it holds the lock. I/O on a locked file whose locks were not confirmed for
//!   `LOCKS_UNCONFIRMED_MAX` (this daemon was stopped, say) first asks the manager.
//! - During the grace, a lock or F_GETLK the manager holds back is asked again (on a
//!   waiting thread) until answered: F_SETLK answers after the grace, not early.
//! - Once its reclaims are answered the mount says so (`LockReclaimComplete`, naming
//!   the incarnation): the manager ends its grace as soon as every mount its durable
//!   record names has (see its `file_locks`). The manager keeps a mount in that record
//!   until it has held no lock for `LOCK_RECORD_IDLE`, so the mount goes on asking the
//!   incarnation for twice that after its last lock (`wants_renewal`), and answers a
//!   restart then with a reclaim of nothing and its "complete". At unmount, its locks
//!   dropped, a mount that took any ends its session (`LockSessionEnd`), which leaves
//!   the record at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use weft_client::{Client, ClientError, InodeId};
use weft_proto::lock_table::{LockTable, Owner};
use weft_proto::{LockKind, LockRequest, LockState, LOCK_RECORD_IDLE, LOCK_RENEW_PERIOD};

/// The shortest and longest pause between two tries of a waiting lock.
pub const WAIT_PAUSE_MIN: Duration = Duration::from_millis(2);
pub const WAIT_PAUSE_MAX: Duration = Duration::from_millis(100);
/// Waiting locks served by threads of their own at once.
pub const WAITERS_MAX: usize = 256;
/// Names beside a newly locked file whose cached entries the kernel is told to drop.
pub const SIBLINGS_DROPPED_MAX: usize = 4096;
/// I/O on a file this mount holds locks on asks the manager first once the locks were
/// last confirmed longer ago than this (the renewal thread confirms them every
/// `LOCK_RENEW_PERIOD`; a daemon that was stopped, or a manager that did not answer,
/// leaves them unconfirmed).
pub const LOCKS_UNCONFIRMED_MAX: Duration = Duration::from_secs(3);

/// This mount's locks (a copy of what the manager holds for its session, to reclaim
/// after a manager restart) and the files whose locks were lost.
pub struct Holders {
    session: u64,
    table: Mutex<LockTable>,
    /// Locks in `table`, published at each change (`TableGuard`), so that reads and
    /// writes of a mount holding none never take the table's lock.
    held: AtomicUsize,
    /// Read by every lock request from its sending to its record in `table`, written by
    /// a reclaim: a reclaim sees every lock granted so far.
    order: RwLock<()>,
    /// The manager incarnation that granted (or took back) the locks in `table`; 0:
    /// none seen yet.
    incarnation: AtomicU64,
    /// When the manager last confirmed the locks (ms since `base`), and when this mount
    /// last asked it from an I/O path.
    confirmed_ms: AtomicU64,
    asked_ms: AtomicU64,
    /// When the manager last answered a lock request or renewal of this mount (ms since
    /// `base`): past `trusted_ms` without one, I/O under the locks fails (`check`).
    answered_ms: AtomicU64,
    trusted_ms: u64,
    /// When this mount last held a lock (ms since `base`, plus one; 0: never).
    held_ms: AtomicU64,
    base: Instant,
    /// Held by each renewal for its whole course: I/O that finds the locks unconfirmed
    /// waits for the one under way (the renewal thread's, right after this daemon was
    /// stopped and resumed) rather than go on before its reclaim is done.
    renewing: Mutex<()>,
    /// Locks lost so far; each open file notes the count at its open.
    losses: AtomicU64,
    /// Files whose locks were lost -> the `losses` count of the last loss: descriptors
    /// opened before it fail their I/O. Bounded by the locks held (`LOCKS_MAX`); a file's
    /// entry goes at its last close here.
    lost: Mutex<HashMap<InodeId, u64>>,
    waiters: AtomicUsize,
}

/// The lock table, locked; at its end the count of locks it holds goes to `held`.
struct TableGuard<'a> {
    table: std::sync::MutexGuard<'a, LockTable>,
    held: &'a AtomicUsize,
}

impl std::ops::Deref for TableGuard<'_> {
    type Target = LockTable;
    fn deref(&self) -> &LockTable {
        &self.table
    }
}

impl std::ops::DerefMut for TableGuard<'_> {
    fn deref_mut(&mut self) -> &mut LockTable {
        &mut self.table
    }
}

impl Drop for TableGuard<'_> {
    fn drop(&mut self) {
        self.held.store(self.table.held(), Ordering::Relaxed);
    }
}

/// What one try of a lock request got.
pub enum Asked<T> {
    Answered(T),
    /// The manager's grace after its restart holds it back: ask again.
    Grace,
}

impl Holders {
    pub fn new(session: u64) -> Holders {
        Holders {
            session,
            table: Mutex::default(),
            held: AtomicUsize::new(0),
            order: RwLock::default(),
            incarnation: AtomicU64::new(0),
            confirmed_ms: AtomicU64::new(0),
            asked_ms: AtomicU64::new(0),
            answered_ms: AtomicU64::new(0),
            trusted_ms: locks_trusted().as_millis() as u64,
            held_ms: AtomicU64::new(0),
            base: Instant::now(),
            renewing: Mutex::new(()),
            losses: AtomicU64::new(0),
            lost: Mutex::default(),
            waiters: AtomicUsize::new(0),
        }
    }

    fn table(&self) -> TableGuard<'_> {
        TableGuard {
            table: self.table.lock().unwrap_or_else(|p| p.into_inner()),
            held: &self.held,
        }
    }

    fn ordered(&self) -> RwLockReadGuard<'_, ()> {
        self.order.read().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }

    /// `request` of this mount's session, sent to the manager and, if granted or an
    /// unlock, recorded here. A reclaim runs first if the answer shows a restart; if
    /// the manager answers that this session lapsed, every lock held here is lost
    /// (`lapsed`) and the request is sent once more.
    pub fn apply(&self, client: &Client, request: &LockRequest) -> Result<Asked<()>, ClientError> {
        match self.apply_once(client, request) {
            Err(e) if session_lapsed(&e) => {
                self.lapsed(client, true);
                self.apply_once(client, request)
            }
            other => other,
        }
    }

    fn apply_once(&self, client: &Client, request: &LockRequest) -> Result<Asked<()>, ClientError> {
        debug_assert_eq!(request.session, self.session);
        if self.incarnation.load(Ordering::SeqCst) == 0 && request.kind != LockKind::Unlock {
            // The incarnation that grants the first lock must be known before: a
            // restart right after it would otherwise go unnoticed. (A restart between
            // the two is harmless: the lock is then held back, or granted by the new
            // manager and reclaimed from it again, which it grants.)
            self.renew(client);
        }
        let held_back = {
            let _order = self.ordered();
            let held_back = client.file_lock(request)?;
            self.answered_ms.store(self.now_ms(), Ordering::Relaxed);
            if held_back.is_none() {
                // Cannot be refused: the manager's table held this lock for the same
                // owner under the same rules and bounds.
                let _ = self.table().set(request);
                self.note_held();
            }
            held_back
        };
        match held_back {
            None => Ok(Asked::Answered(())),
            Some(state) => {
                self.saw(client, state);
                Ok(Asked::Grace)
            }
        }
    }

    /// F_GETLK: the first conflicting lock, if any.
    pub fn test(
        &self,
        client: &Client,
        request: &LockRequest,
    ) -> Result<Asked<Option<weft_proto::HeldLock>>, ClientError> {
        match client.file_lock_test(request)? {
            weft_client::LockTest::Holder(holder) => Ok(Asked::Answered(holder)),
            weft_client::LockTest::Grace(state) => {
                self.saw(client, state);
                Ok(Asked::Grace)
            }
        }
    }

    /// Forgets `owner`'s locks on `inode` here; true if it held any (then the caller
    /// drops them at the manager).
    pub fn forget(&self, inode: InodeId, owner: u64) -> bool {
        let _order = self.ordered();
        self.table().drop_owner(
            inode,
            Owner {
                session: self.session,
                owner,
            },
        )
    }

    /// Every (file, owner) holding locks, forgotten.
    pub fn drain(&self) -> Vec<(InodeId, u64)> {
        let _order = self.ordered();
        let mut table = self.table();
        let mut held: Vec<(InodeId, u64)> = table.requests().iter().map(|r| (r.inode, r.owner)).collect();
        held.sort_unstable_by_key(|&(inode, owner)| (inode.0, owner));
        held.dedup();
        *table = LockTable::default();
        held
    }

    pub fn any(&self) -> bool {
        self.held.load(Ordering::Relaxed) > 0
    }

    fn note_held(&self) {
        self.held_ms.store(self.now_ms() + 1, Ordering::Relaxed);
    }

    /// Tells the manager this mount's session ends (at unmount, after its locks were
    /// dropped), if it ever took a lock: the manager then need not wait for it after
    /// a restart.
    pub fn end(&self, client: &Client) {
        if self.held_ms.load(Ordering::Relaxed) == 0 {
            return;
        }
        match client.lock_session_end(self.session) {
            // An older manager (UnknownOpcode) forgets the session after a while.
            Ok(()) | Err(ClientError::Refused { .. }) => {}
            Err(e) => {
                eprintln!("weft-fuse: telling the metadata manager this mount's lock session ends: {e}")
            }
        }
    }

    /// Whether the renewal thread should ask the manager's incarnation now: while
    /// this mount holds locks, and for `2 * LOCK_RECORD_IDLE` after its last (the
    /// manager may still have it in its record, and a restart then waits for its
    /// "reclaim complete").
    pub fn wants_renewal(&self) -> bool {
        if self.any() {
            self.note_held();
            return true;
        }
        let held = self.held_ms.load(Ordering::Relaxed);
        held != 0 && (self.now_ms() + 1).saturating_sub(held) < 2 * LOCK_RECORD_IDLE.as_millis() as u64
    }

    /// Tells the manager this session is alive and checks its incarnation, reclaiming
    /// if it restarted (the renewal thread's, every `LOCK_RENEW_PERIOD`).
    pub fn renew(&self, client: &Client) {
        let _one = self.renewing.lock().unwrap_or_else(|p| p.into_inner());
        self.renew_now(client);
    }

    fn renew_now(&self, client: &Client) {
        self.asked_ms.store(self.now_ms(), Ordering::Relaxed);
        // Once more on a transport failure: the first call after a manager restart may
        // go out on the dead connection, which the pool replaces only then.
        let asked = match client.lock_session(self.session) {
            Err(ClientError::Transport(_)) => client.lock_session(self.session),
            other => other,
        };
        match asked {
            Ok(state) => self.saw(client, state),
            // That answer took the manager's note of the lapse: nothing more to tell it.
            Err(e) if session_lapsed(&e) => self.lapsed(client, false),
            Err(e) => eprintln!("weft-fuse: renewing the lock session with the metadata manager: {e}"),
        }
    }

    /// The manager dropped this session's locks: the mount did not renew it within the
    /// manager's lease (this daemon was stopped, or cut off from the manager), so
    /// another process may have taken them since. Every lock held here is lost, as a
    /// reclaim refused: logged, and descriptors of those files open now fail their I/O
    /// with EIO. `tell`: the manager is then asked (`LockSession`) so that it answers
    /// this session's requests again (the renewal that learnt the lapse did that).
    /// Under `order`, so no lock request of this mount is under way; a lock granted
    /// between the manager's note and this (in the renewal's case) is lost with the
    /// others and unlocked at the manager, so both sides agree.
    fn lapsed(&self, client: &Client, tell: bool) {
        let _order = self.order.write().unwrap_or_else(|p| p.into_inner());
        let requests = self.table().requests();
        for request in &requests {
            self.lose(request);
            eprintln!(
                "weft-fuse: LOST LOCK: {} lock of bytes {}..={} of inode {} (process {}): the metadata manager dropped this mount's locks, which it did not renew within the manager's lease (the mount daemon was stopped or cut off from the manager); reads, writes, fsyncs and closes of that file through descriptors open now fail with EIO",
                if request.kind == LockKind::Write { "exclusive" } else { "shared" },
                request.start,
                request.end,
                request.inode,
                request.pid,
            );
        }
        if tell {
            match client.lock_session(self.session) {
                Ok(state) => self.saw(client, state),
                Err(e) if session_lapsed(&e) => {}
                Err(e) => eprintln!(
                    "weft-fuse: telling the metadata manager this mount knows its locks lapsed: {e}"
                ),
            }
        }
        let mut owners: Vec<(InodeId, u64)> = requests.iter().map(|r| (r.inode, r.owner)).collect();
        owners.sort_unstable_by_key(|&(inode, owner)| (inode.0, owner));
        owners.dedup();
        for (inode, owner) in owners {
            unlock_all(client, self.session, inode, owner);
        }
    }

    /// Before I/O on `inode`: if this mount holds locks on it that were not confirmed
    /// lately (at most once per `LOCK_RENEW_PERIOD`), asks the manager now; then
    /// whether descriptor state `opened_at` (its `losses()` at open) lost its locks.
    pub fn check(&self, client: &Client, inode: InodeId, opened_at: u64) -> Result<(), ()> {
        let stale = |at: &AtomicU64| self.now_ms().saturating_sub(at.load(Ordering::Relaxed));
        let unconfirmed = || stale(&self.confirmed_ms) > LOCKS_UNCONFIRMED_MAX.as_millis() as u64;
        if self.any() && unconfirmed() && self.table().on(inode) {
            let _one = self.renewing.lock().unwrap_or_else(|p| p.into_inner());
            if unconfirmed() && stale(&self.asked_ms) > LOCK_RENEW_PERIOD.as_millis() as u64 {
                self.renew_now(client);
            }
        }
        if self.any() && stale(&self.answered_ms) > self.trusted_ms && self.table().on(inode) {
            eprintln!(
                "weft-fuse: I/O on inode {inode} refused (EIO): the metadata manager has not answered this mount for {} ms, so it may have dropped the mount's locks on the file (it keeps them {} ms without renewal) and another process may hold them",
                stale(&self.answered_ms),
                session_lease().as_millis()
            );
            return Err(());
        }
        if self.lost_since(inode, opened_at) {
            Err(())
        } else {
            Ok(())
        }
    }

    /// Whether a lock on `inode` was lost after `opened_at` (a `losses()` count).
    fn lost_since(&self, inode: InodeId, opened_at: u64) -> bool {
        if self.losses.load(Ordering::Relaxed) == opened_at {
            return false;
        }
        let lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        lost.get(&inode).is_some_and(|&at| at > opened_at)
    }

    /// `request`'s lock (held here) is lost: it goes from the table, and descriptors of
    /// its file open now fail their I/O.
    fn lose(&self, request: &LockRequest) {
        let _ = self.table().set(&LockRequest {
            kind: LockKind::Unlock,
            ..*request
        });
        let at = self.losses.fetch_add(1, Ordering::SeqCst) + 1;
        self.lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(request.inode, at);
    }

    /// The count of losses so far (an open file notes it).
    pub fn losses(&self) -> u64 {
        self.losses.load(Ordering::Relaxed)
    }

    /// `inode` has no open descriptor here any more: its lost mark goes.
    pub fn closed(&self, inode: InodeId) {
        if self.losses.load(Ordering::Relaxed) > 0 {
            self.lost.lock().unwrap_or_else(|p| p.into_inner()).remove(&inode);
        }
    }

    /// The manager answered `state`: if another incarnation than the one that granted
    /// the locks here, it restarted and they are reclaimed.
    fn saw(&self, client: &Client, state: LockState) {
        self.answered_ms.store(self.now_ms(), Ordering::Relaxed);
        let known = self.incarnation.load(Ordering::SeqCst);
        if known == state.incarnation
            || (known == 0
                && self
                    .incarnation
                    .compare_exchange(0, state.incarnation, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok())
        {
            self.confirmed_ms.store(self.now_ms(), Ordering::Relaxed);
            return;
        }
        self.reclaim(client, state.incarnation);
    }

    /// Sends every lock held here again as a reclaim to manager `incarnation`; a refused
    /// one is lost. A transport failure leaves the rest for the next renewal.
    fn reclaim(&self, client: &Client, incarnation: u64) {
        let _order = self.order.write().unwrap_or_else(|p| p.into_inner());
        let known = self.incarnation.load(Ordering::SeqCst);
        if known == incarnation {
            return; // another thread reclaimed meanwhile
        }
        let requests = self.table().requests();
        eprintln!(
            "weft-fuse: the metadata manager restarted (incarnation {known:#x} is now {incarnation:#x}): reclaiming {} locks",
            requests.len()
        );
        let mut lost = 0usize;
        for request in &requests {
            match client.file_lock_reclaim(request) {
                Ok(state) if state.incarnation == incarnation => {}
                Ok(_) => {
                    eprintln!("weft-fuse: the metadata manager restarted again while this mount reclaimed its locks; reclaiming from the start");
                    return;
                }
                Err(ClientError::Refused { code, message }) => {
                    lost += 1;
                    self.lose(request);
                    eprintln!(
                        "weft-fuse: LOST LOCK: {} lock of bytes {}..={} of inode {} (process {}) could not be reclaimed after the metadata manager restarted ({code:?}: {message}); reads, writes, fsyncs and closes of that file through descriptors open now fail with EIO",
                        if request.kind == LockKind::Write { "exclusive" } else { "shared" },
                        request.start,
                        request.end,
                        request.inode,
                        request.pid,
                    );
                }
                Err(e) => {
                    eprintln!("weft-fuse: reclaiming locks from the restarted metadata manager: {e}; trying again at the next renewal");
                    return;
                }
            }
        }
        self.incarnation.store(incarnation, Ordering::SeqCst);
        self.confirmed_ms.store(self.now_ms(), Ordering::Relaxed);
        eprintln!(
            "weft-fuse: reclaimed {} of {} locks from the restarted metadata manager",
            requests.len() - lost,
            requests.len()
        );
        // Still under `order`: no lock of this mount is granted by `incarnation` before
        // it hears that every reclaim is done, so the grace it ends covered them all.
        let complete = match client.lock_reclaim_complete(self.session, incarnation) {
            Err(ClientError::Transport(_)) => client.lock_reclaim_complete(self.session, incarnation),
            other => other,
        };
        match complete {
            Ok(_) => {}
            // An older manager (UnknownOpcode): its grace runs its whole time.
            Err(ClientError::Refused { .. }) => {}
            Err(e) => eprintln!(
                "weft-fuse: telling the restarted metadata manager this mount's reclaims are complete: {e} (its grace runs its whole time)"
            ),
        }
    }

    /// A place for one more waiting thread, if there is room.
    pub fn start_waiter(&self) -> bool {
        self.waiters
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < WAITERS_MAX).then_some(n + 1)
            })
            .is_ok()
    }

    pub fn end_waiter(&self) {
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The manager's mount session lease (weft-meta's `SESSION_LEASE`, 60 s; tests shorten
/// both sides with `WEFT_SESSION_LEASE_MS`, as weftd reads it).
fn session_lease() -> Duration {
    let ms = std::env::var("WEFT_SESSION_LEASE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(60_000, |ms| ms.clamp(1000, 3_600_000));
    Duration::from_millis(ms)
}

/// How long a mount goes on doing I/O under its locks without an answer from the
/// manager: five sixths of the lease, so that it stops before the manager may drop the
/// locks (at the lease, measured from the manager's receipt of the last renewal, which
/// is before this mount's receipt of its answer), as an NFS client stops at its lease's
/// end. A mount cut off from the manager but not from the io servers would otherwise
/// write on under locks another process may hold by then.
fn locks_trusted() -> Duration {
    session_lease() * 5 / 6
}

/// Drops every lock of `owner` of `session` on `inode` at the manager (errors are
/// logged: the manager drops them anyway when the session lapses).
pub fn unlock_all(client: &Client, session: u64, inode: InodeId, owner: u64) {
    let unlock = LockRequest {
        session,
        owner,
        inode,
        pid: 0,
        kind: LockKind::Unlock,
        start: 0,
        end: u64::MAX,
    };
    if let Err(e) = client.file_lock(&unlock) {
        eprintln!("weft-fuse: dropping the locks of owner {owner:#x} on inode {inode}: {e}");
    }
}

/// Whether the manager answered that this mount's session lapsed: it dropped the
/// session's locks (weft-meta's `lapsed`).
fn session_lapsed(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Refused {
            code: weft_proto::ErrorCode::Stale,
            ..
        }
    )
}

/// The pause after `tries` refused tries of a waiting lock.
pub fn pause(tries: u32) -> Duration {
    WAIT_PAUSE_MIN
        .saturating_mul(1u32 << tries.min(16))
        .min(WAIT_PAUSE_MAX)
}

/// Whether process `pid` (in this mount's pid namespace) may still want its lock: it
/// exists and has no SIGKILL pending. A process killed while it waits for a lock stays
/// (in uninterruptible sleep) until the daemon answers, so its existence alone says
/// nothing.
pub fn process_alive(pid: u32) -> bool {
    if pid == 0 {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => !kill_pending(&status),
        Err(_) => false,
    }
}

/// Whether the waiter of a lock should be answered EINTR now: process `pid` is gone or
/// killed (`process_alive`), or its thread `tid` (the caller the kernel named) has a
/// signal to handle (`signal_to_handle`). Without this, `alarm()` or `flock -w`'s timer
/// could never end an F_SETLKW: fuser answers FUSE_INTERRUPT with ENOSYS, after which
/// the kernel keeps the waiter, signals and all, until the daemon answers.
pub fn waiter_interrupted(pid: u32, tid: u32) -> bool {
    if !process_alive(pid) {
        return true;
    }
    tid != 0
        && std::fs::read_to_string(format!("/proc/{tid}/status"))
            .map(|status| signal_to_handle(&status))
            .unwrap_or(true)
}

/// Whether a /proc/TID/status text shows a signal the thread would run a handler for:
/// pending for the thread, or for the process when the process has this one thread
/// (another thread might take a process's signal), caught and not blocked. Signals
/// left to their default action do not count: a fatal one comes with SIGKILL pending
/// (`kill_pending`), the others are discarded or stop the process, as they would a
/// local waiter.
fn signal_to_handle(status: &str) -> bool {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
    };
    let mask = |name: &str| {
        field(name)
            .and_then(|m| u64::from_str_radix(m, 16).ok())
            .unwrap_or(0)
    };
    let only_thread = field("Threads:") == Some("1");
    let pending = mask("SigPnd:") | if only_thread { mask("ShdPnd:") } else { 0 };
    pending & mask("SigCgt:") & !mask("SigBlk:") != 0
}

/// Whether a /proc/PID/status text shows SIGKILL pending (for the thread or the
/// process).
fn kill_pending(status: &str) -> bool {
    const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);
    status
        .lines()
        .filter_map(|line| {
            line.strip_prefix("SigPnd:")
                .or_else(|| line.strip_prefix("ShdPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & SIGKILL_BIT != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_sigkill_is_seen() {
        let quiet =
            "Name:\tflock\nState:\tS (sleeping)\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n";
        let killed =
            "Name:\tflock\nState:\tD (disk sleep)\nSigPnd:\t0000000000000100\nShdPnd:\t0000000000000100\n";
        let interrupted = "SigPnd:\t0000000000000002\nShdPnd:\t0000000000000000\n";
        assert!(!kill_pending(quiet));
        assert!(kill_pending(killed));
        assert!(!kill_pending(interrupted));
        assert!(process_alive(std::process::id()));
    }

    #[test]
    fn a_caught_unblocked_pending_signal_interrupts() {
        // SIGALRM (14, bit 13) pending for the process, caught, a single thread.
        let alarm = "Threads:\t1\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000002000\n\
                     SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\nSigCgt:\t0000000000002000\n";
        assert!(signal_to_handle(alarm));
        // Blocked: it waits, as the kernel would keep it pending.
        assert!(!signal_to_handle(
            &alarm.replace("SigBlk:\t0000000000000000", "SigBlk:\t0000000000002000")
        ));
        // Not caught (default action): not ours to end.
        assert!(!signal_to_handle(
            &alarm.replace("SigCgt:\t0000000000002000", "SigCgt:\t0000000000000000")
        ));
        // A process's signal with several threads: another thread may take it...
        let threads = alarm.replace("Threads:\t1", "Threads:\t3");
        assert!(!signal_to_handle(&threads));
        // ...but one sent to this thread is this thread's.
        assert!(signal_to_handle(
            &threads.replace("SigPnd:\t0000000000000000", "SigPnd:\t0000000000002000")
        ));
        assert!(!signal_to_handle("Name:\tx\n"));
        // This test's own thread has no signal waiting.
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        assert!(!waiter_interrupted(std::process::id(), tid));
    }

    #[test]
    fn pauses_grow_to_the_bound() {
        assert_eq!(pause(0), WAIT_PAUSE_MIN);
        assert!(pause(3) > pause(2));
        assert_eq!(pause(40), WAIT_PAUSE_MAX);
    }

    #[test]
    fn a_lost_lock_fails_the_descriptors_open_before_it_only() {
        let holders = Holders::new(1);
        let lock = |kind, start, end| LockRequest {
            session: 1,
            owner: 7,
            inode: InodeId(3),
            pid: 42,
            kind,
            start,
            end,
        };
        holders.table().set(&lock(LockKind::Write, 0, 99)).unwrap();
        holders.table().set(&lock(LockKind::Read, 200, 299)).unwrap();
        let before = holders.losses();
        holders.lose(&lock(LockKind::Write, 0, 99));
        let after = holders.losses();
        assert!(holders.lost_since(InodeId(3), before));
        assert!(!holders.lost_since(InodeId(3), after), "opened after the loss");
        assert!(!holders.lost_since(InodeId(4), before), "another file");
        // Only the lost lock left the table: the other is still reclaimed and dropped.
        assert_eq!(holders.table().requests(), vec![lock(LockKind::Read, 200, 299)]);
        assert!(holders.forget(InodeId(3), 7));
        assert!(!holders.any());
        // The mark goes with the file's last close here.
        holders.closed(InodeId(3));
        assert!(!holders.lost_since(InodeId(3), before));
    }

    #[test]
    fn a_mount_asks_the_incarnation_while_it_holds_locks_and_for_a_while_after() {
        let holders = Holders::new(1);
        assert!(!holders.wants_renewal(), "never held a lock");
        let lock = |kind| LockRequest {
            session: 1,
            owner: 7,
            inode: InodeId(3),
            pid: 42,
            kind,
            start: 0,
            end: 9,
        };
        holders.table().set(&lock(LockKind::Write)).unwrap();
        assert!(holders.wants_renewal());
        holders.table().set(&lock(LockKind::Unlock)).unwrap();
        assert!(holders.wants_renewal(), "just after its last lock");
        // Last held longer ago than twice LOCK_RECORD_IDLE: the manager forgot it.
        let long_ago = 2 * LOCK_RECORD_IDLE + Duration::from_millis(1);
        let idle = Holders {
            base: Instant::now().checked_sub(long_ago).unwrap(),
            ..Holders::new(1)
        };
        idle.held_ms.store(1, Ordering::Relaxed);
        assert!(!idle.wants_renewal());
    }

    #[test]
    fn waiters_are_bounded() {
        let holders = Holders::new(1);
        for _ in 0..WAITERS_MAX {
            assert!(holders.start_waiter());
        }
        assert!(!holders.start_waiter());
        holders.end_waiter();
        assert!(holders.start_waiter());
    }
}

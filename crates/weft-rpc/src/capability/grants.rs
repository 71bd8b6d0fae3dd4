//! Where a client's connections get their capabilities: the metadata manager, which
//! grants one after the permission check of an open (`GrantCapability`). Kept per
//! inode and right until close to expiry, so that the manager is asked once per file,
//! right and lifetime, however many io servers the file spans; renewed transparently
//! (a long-lived open file never sees its capability expire), and asked again when a
//! server refused one as revoked (the manager checks permission again).

use super::{now_ms, renew_due, rights, CapabilitySource};
use crate::{ConnectionPool, RpcError};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use weft_layout::InodeId;
use weft_proto::msg::{Request, Response};
use weft_proto::{Capability, Cred, ErrorCode};

/// Most capabilities kept (one of both rights counts twice); past this those due
/// for renewal are forgotten, and if that is not enough, all (asked for again when
/// next needed). 32,768 (some 4 MiB): a mount's files written and then read back
/// within the lifetime (mdtest's 4 x 1,000 files, a build's outputs) keep theirs;
/// at 4,096, 4,000 files written were forgotten again and again, and each read-back
/// open asked the manager anew.
const KEPT_MAX: usize = 32_768;
/// Most inodes whose write grants are counted (`Writes::granted`); past this the
/// counts start over: those grants are never given back, and expire.
const GRANTED_MAX: usize = 65_536;
/// Most write grants waiting to be given back; past this more are not (they
/// expire).
const RELEASES_QUEUED_MAX: usize = 65_536;

/// Write handles and grants, for giving write capabilities back at the last close.
#[derive(Default)]
struct Writes {
    /// Handles open for writing, per inode.
    open: HashMap<InodeId, u32>,
    /// Write grants had from the manager and not given back, per inode, with the
    /// issue time of the first.
    granted: HashMap<InodeId, (u32, u64)>,
}

/// Write grants of one inode to give back: how many, and the first one's issue time.
type Release = (InodeId, (u32, u64));

/// Write grants to give back, sent by a thread of their own in batches: a close
/// waits for no manager. The manager vouches for a file only once it has them.
#[derive(Default)]
struct Releases {
    /// The grants, and whether the sending thread runs.
    queue: Mutex<(Vec<Release>, bool)>,
    queued: Condvar,
    /// The manager does not know `ReleaseWrites`.
    off: AtomicBool,
    /// A batch taken from the queue is being sent.
    sending: AtomicBool,
}

/// A client's source: the metadata manager at `meta_addr`, asked as `cred`.
pub struct ManagerGrants {
    pool: Weak<ConnectionPool>,
    /// A pool of its own, when it has one (see `with_own_pool`).
    _own: Option<std::sync::Arc<ConnectionPool>>,
    meta_addr: String,
    cred: Cred,
    /// Per inode and single right (`READ` or `WRITE`); a capability of both rights
    /// is kept under both.
    kept: Mutex<HashMap<(InodeId, u8), Capability>>,
    /// The (inode, right)s some thread is asking the manager for: the others wait
    /// for its answer rather than ask too (a file's first write reaches all its io
    /// servers at once, each connection wanting the same capability).
    asking: Mutex<HashSet<(InodeId, u8)>>,
    answered: Condvar,
    /// The manager said the cluster asks for no capabilities.
    off: AtomicBool,
    writes: Mutex<Writes>,
    releases: Arc<Releases>,
}

impl ManagerGrants {
    pub fn new(pool: Weak<ConnectionPool>, meta_addr: &str, cred: Cred) -> ManagerGrants {
        ManagerGrants {
            pool,
            _own: None,
            meta_addr: meta_addr.to_owned(),
            cred,
            kept: Mutex::default(),
            asking: Mutex::default(),
            answered: Condvar::new(),
            off: AtomicBool::new(false),
            writes: Mutex::default(),
            releases: Arc::default(),
        }
    }

    /// Counts a write grant of `cap`'s inode (given back at the last close).
    fn count_grant(&self, cap: &Capability) {
        if cap.rights & rights::WRITE == 0 {
            return;
        }
        let mut writes = self.writes.lock().unwrap();
        if writes.granted.len() >= GRANTED_MAX && !writes.granted.contains_key(&cap.inode) {
            writes.granted.clear();
        }
        let counted = writes.granted.entry(cap.inode).or_insert((0, cap.issued_ms));
        counted.0 += 1;
        counted.1 = counted.1.min(cap.issued_ms);
    }

    /// Queues `count` write grants of `inode` to be given back.
    fn give_back(&self, inode: InodeId, count: (u32, u64)) {
        // Grants asked over another pool's connections may be presented where this
        // one cannot see: those expire instead.
        if count.0 == 0 || self._own.is_some() || self.releases.off.load(Ordering::Relaxed) {
            return;
        }
        let mut queue = self.releases.queue.lock().unwrap();
        if queue.0.len() >= RELEASES_QUEUED_MAX {
            return;
        }
        queue.0.push((inode, count));
        if !queue.1 {
            queue.1 = true;
            let releases = self.releases.clone();
            let pool = self.pool.clone();
            let meta_addr = self.meta_addr.clone();
            let spawned = std::thread::Builder::new()
                .name("weft-release".into())
                .spawn(move || send_releases(releases, pool, meta_addr));
            if spawned.is_err() {
                queue.0.clear();
                queue.1 = false;
            }
        }
        self.releases.queued.notify_one();
    }

    /// Asks the manager over a pool of its own (for connections of another pool).
    pub fn with_own_pool(pool: ConnectionPool, meta_addr: &str, cred: Cred) -> ManagerGrants {
        let pool = std::sync::Arc::new(pool);
        let mut grants = ManagerGrants::new(std::sync::Arc::downgrade(&pool), meta_addr, cred);
        grants._own = Some(pool);
        grants
    }

    /// The kept capability for `key`, unless it is due for renewal.
    fn fresh(&self, key: (InodeId, u8)) -> Option<Capability> {
        let kept = self.kept.lock().unwrap();
        kept.get(&key).filter(|cap| !renew_due(cap, now_ms())).cloned()
    }

    fn keep(&self, cap: &Capability) {
        let mut kept = self.kept.lock().unwrap();
        if kept.len() + 2 > KEPT_MAX {
            let now = now_ms();
            kept.retain(|_, c| !renew_due(c, now));
            if kept.len() + 2 > KEPT_MAX {
                kept.clear();
            }
        }
        for right in [rights::READ, rights::WRITE] {
            if cap.rights & right != 0 {
                kept.insert((cap.inode, right), cap.clone());
            }
        }
    }

    fn grant(&self, inode: InodeId, rights: u8) -> Result<Capability, RpcError> {
        let Some(pool) = self.pool.upgrade() else {
            return Err(RpcError::Disconnected {
                addr: self.meta_addr.clone(),
                reason: "the client was dropped".into(),
            });
        };
        let request = Request::GrantCapability {
            cred: self.cred.clone(),
            inode,
            rights,
        };
        // A grant changes nothing: asked again, as often as needed, while the
        // manager restarts (its answer lost with the connection), for as long as a
        // client's namespace changes wait for it (weft-client `replay.rs`).
        let wait = std::env::var("WEFT_RESTART_WAIT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(
                std::time::Duration::from_secs(15),
                std::time::Duration::from_millis,
            );
        let deadline = std::time::Instant::now() + wait;
        let answer = loop {
            match pool.call(&self.meta_addr, &request, &[]) {
                Err(e) if e.is_transport() && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                other => break other?,
            }
        };
        match answer {
            (Response::Capability(cap), _) => Ok(cap),
            (other, _) => Err(RpcError::Protocol {
                addr: self.meta_addr.clone(),
                detail: format!("unexpected reply to a capability request: {other:?}"),
            }),
        }
    }

    /// Asks the manager for `right`. A writer asks for reading too, so that reading
    /// back what it wrote (the usual next step) costs no second grant and no second
    /// present at each io server; where the user may write but not read, it gets
    /// the write right alone.
    fn ask(&self, inode: InodeId, right: u8) -> Result<Option<Capability>, RpcError> {
        let first = if right == rights::WRITE {
            rights::READ | rights::WRITE
        } else {
            right
        };
        let granted = match self.grant(inode, first) {
            Err(RpcError::Remote { error, .. })
                if first != right && error.code == ErrorCode::PermissionDenied =>
            {
                self.grant(inode, right)
            }
            other => other,
        };
        match granted {
            Ok(cap) => {
                self.count_grant(&cap);
                self.keep(&cap);
                Ok(Some(cap))
            }
            Err(RpcError::Remote { error, .. }) if error.code == ErrorCode::Unsupported => {
                self.off.store(true, Ordering::Relaxed);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// Marks `key` as asked for while alive; wakes the waiters when dropped.
struct Asking<'a> {
    grants: &'a ManagerGrants,
    key: (InodeId, u8),
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.grants.asking.lock().unwrap().remove(&self.key);
        self.grants.answered.notify_all();
    }
}

impl CapabilitySource for ManagerGrants {
    fn capability(&self, inode: InodeId, rights: u8) -> Result<Option<Capability>, RpcError> {
        if self.off.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if rights != rights::READ && rights != rights::WRITE {
            return Err(RpcError::Remote {
                addr: self.meta_addr.clone(),
                error: weft_proto::WireError::new(
                    ErrorCode::PermissionDenied,
                    "this operation is for servers only: no client is granted a server capability",
                ),
            });
        }
        let key = (inode, rights);
        let _asking = loop {
            if let Some(cap) = self.fresh(key) {
                return Ok(Some(cap));
            }
            if self.off.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let mut asking = self.asking.lock().unwrap();
            if asking.insert(key) {
                break Asking { grants: self, key };
            }
            // Another thread is asking for the same: its answer is kept (or, if it
            // failed, this thread asks in turn).
            while asking.contains(&key) {
                asking = self.answered.wait(asking).unwrap();
            }
        };
        self.ask(inode, rights)
    }

    fn adopt(&self, cap: &Capability) {
        if cap.rights & (rights::READ | rights::WRITE) != 0 && !renew_due(cap, now_ms()) {
            self.keep(cap);
        }
    }

    fn forget(&self, inode: InodeId) {
        self.kept.lock().unwrap().retain(|(i, _), _| *i != inode);
    }

    fn granted(&self, cap: &Capability) {
        if cap.rights & (rights::READ | rights::WRITE) != 0 {
            self.count_grant(cap);
            if !renew_due(cap, now_ms()) {
                self.keep(cap);
            }
        }
    }

    fn holds(&self, cap: &Capability) -> bool {
        self.kept
            .lock()
            .unwrap()
            .get(&(cap.inode, rights::WRITE))
            .is_some_and(|kept| kept.issued_ms == cap.issued_ms && kept.mac == cap.mac)
    }

    fn flush_releases(&self, wait: std::time::Duration) {
        let deadline = std::time::Instant::now() + wait;
        loop {
            let queue = self.releases.queue.lock().unwrap();
            // Empty and nothing in flight (a batch is marked sending before it leaves
            // the queue, under the queue's lock).
            if queue.0.is_empty() && !self.releases.sending.load(Ordering::SeqCst) {
                return;
            }
            drop(queue);
            if std::time::Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    fn writer_opened(&self, inode: InodeId) {
        *self.writes.lock().unwrap().open.entry(inode).or_insert(0) += 1;
    }

    fn writer_closed(&self, inode: InodeId) {
        let mut writes = self.writes.lock().unwrap();
        match writes.open.get_mut(&inode) {
            Some(open) if *open > 1 => {
                *open -= 1;
                return;
            }
            Some(_) => {
                writes.open.remove(&inode);
            }
            None => return,
        }
        let count = writes.granted.remove(&inode).unwrap_or((0, 0));
        // Under the same lock as `writer_opened`: a handle opened after this asks
        // for a new capability (and a connection that presented this one presents
        // that instead, see `holds`), which the manager counts.
        self.kept.lock().unwrap().remove(&(inode, rights::WRITE));
        drop(writes);
        self.give_back(inode, count);
    }

    fn shared(&self, inode: InodeId) {
        self.writes.lock().unwrap().granted.remove(&inode);
    }
}

/// The thread that gives write grants back, in batches, until its pool is dropped.
fn send_releases(releases: Arc<Releases>, pool: Weak<ConnectionPool>, meta_addr: String) {
    loop {
        let batch: Vec<Release> = {
            let mut queue = releases.queue.lock().unwrap();
            while queue.0.is_empty() {
                if pool.strong_count() == 0 {
                    queue.1 = false;
                    return;
                }
                queue = releases
                    .queued
                    .wait_timeout(queue, std::time::Duration::from_millis(500))
                    .unwrap()
                    .0;
            }
            let n = queue.0.len().min(weft_proto::msg::RELEASE_WRITES_MAX);
            releases.sending.store(true, Ordering::SeqCst);
            queue.0.drain(..n).collect()
        };
        let Some(pool) = pool.upgrade() else {
            releases.queue.lock().unwrap().1 = false;
            return;
        };
        let request = Request::ReleaseWrites { releases: batch };
        if let Err(RpcError::Remote { error, .. }) = pool.call(&meta_addr, &request, &[]) {
            if error.code == ErrorCode::UnknownOpcode {
                releases.off.store(true, Ordering::Relaxed);
            }
        }
        releases.sending.store(false, Ordering::SeqCst);
    }
}

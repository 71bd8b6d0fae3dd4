//! Capabilities (see `weft_proto::capability`): their MAC, the servers' gate that
//! serves a data request only on a connection that presented a valid capability for
//! its object and operation, and the client side that presents them.
//!
//! The MAC key is `ClusterKey::derive(CAPABILITY_LABEL)`: every server of the cluster
//! derives it from the key it already holds, and a capability made for one cluster or
//! one purpose never verifies for another.
//!
//! Server side (`Gate`): `PresentCapability` verifies the MAC once (constant time) and
//! remembers, for that connection, until when it may read or write which inode; every
//! later request is checked against that memory (a hash lookup, no MAC). A capability
//! is refused once it expired, and once a revocation (`RevokeCapabilities`, sent by
//! the manager after a chmod or chown) covers the time it was issued.
//!
//! A gate without the key (a job's delegate, run by a user who holds no servers' key)
//! has each capability it has not seen verified by the metadata manager
//! (`VerifyCapability`, through a `CapabilityVerifier`): the same checks, made where
//! the key is; what it then remembers per connection is checked as above.
//!
//! Client side: a `CapabilitySource` gives capabilities (a client asks the manager,
//! which checks permission as for an open; a server makes its own server
//! capability), and each `Connection` presents what its requests need before the first
//! of them, renewing ahead of expiry, so a long-lived open file never sees one expire.

use crate::auth::ClusterKey;
use crate::server::ConnectionId;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use weft_layout::InodeId;
use weft_proto::capability::{need, rights, Capability, Need};
use weft_proto::msg::Request;
use weft_proto::{ErrorCode, WireError};

/// The label of the capability MAC key.
pub const CAPABILITY_LABEL: &str = "weft capability v1";
/// Longest lifetime a server honours (issue to expiry): bounds how long a revocation
/// must be remembered.
pub const LIFETIME_MAX_MS: u64 = 3_600_000;
/// Default lifetime of the capabilities a manager issues, and so the longest a chmod
/// or chown that takes rights away could take to reach a server that missed its
/// revocation (a restarted or unreachable one).
pub const LIFETIME_DEFAULT_MS: u64 = 60_000;
/// Most capabilities remembered per connection (a client presenting more starts over
/// with `reset`).
pub const PER_CONNECTION_MAX: usize = 1024;
/// Most revoked inodes a server remembers; past that it voids every capability issued
/// before the newest revocation it forgets (its holders ask again).
const REVOKED_MAX: usize = 65_536;

type HmacSha256 = Hmac<Sha256>;

/// Milliseconds since the Unix epoch. Servers and manager compare capability times
/// with their clocks: a cluster's hosts keep time in step (NTP), as Kerberos assumes.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The key capabilities are signed with.
#[derive(Clone)]
pub struct CapabilityKey {
    key: [u8; 32],
}

impl std::fmt::Debug for CapabilityKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapabilityKey(..)")
    }
}

impl CapabilityKey {
    pub fn new(cluster: &ClusterKey) -> CapabilityKey {
        CapabilityKey {
            key: cluster.derive(CAPABILITY_LABEL),
        }
    }

    fn mac(&self, cap: &Capability) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(&cap.signed_bytes());
        mac
    }

    /// A capability of `rights` on `inode`, issued at `issued_ms`, valid for
    /// `lifetime_ms` from then.
    pub fn issue(&self, inode: InodeId, rights: u8, issued_ms: u64, lifetime_ms: u64) -> Capability {
        let mut cap = Capability {
            inode,
            rights,
            issued_ms,
            expiry_ms: issued_ms.saturating_add(lifetime_ms.min(LIFETIME_MAX_MS)),
            mac: [0; 32],
        };
        cap.mac = self.mac(&cap).finalize().into_bytes().into();
        cap
    }

    /// A server's own capability (any inode, any operation).
    pub fn server(&self) -> Capability {
        self.issue(InodeId(0), rights::SERVER, now_ms(), LIFETIME_DEFAULT_MS)
    }

    /// Whether `cap`'s MAC is ours (constant time).
    pub fn verifies(&self, cap: &Capability) -> bool {
        self.mac(cap).verify_slice(&cap.mac).is_ok()
    }
}

/// What one connection presented: per (inode, right) the capability's issue and
/// expiry times.
#[derive(Default)]
struct Presented {
    /// The revocation epoch the entries were last checked against.
    epoch: u64,
    server: Option<(u64, u64)>,
    entries: HashMap<(InodeId, u8), (u64, u64)>,
}

#[derive(Default)]
struct Revocations {
    /// Inode to the time of its last revocation: capabilities issued at or before it
    /// are void.
    inodes: HashMap<InodeId, u64>,
    /// Capabilities (of any inode) issued at or before this are void.
    all_before: u64,
}

impl Revocations {
    fn voids(&self, inode: InodeId, issued_ms: u64) -> bool {
        issued_ms <= self.all_before || self.inodes.get(&inode).is_some_and(|at| issued_ms <= *at)
    }
}

/// Where a gate without the capability key has capabilities verified: the metadata
/// manager, which holds the key and the revocations it sent.
pub trait CapabilityVerifier: Send + Sync {
    /// `Ok` when `cap` verifies (its MAC, expiry, lifetime and the revocations known
    /// where it is checked); the refusal otherwise, as `Gate::verify` gives it;
    /// `Unsupported` when the cluster asks for no capabilities at all.
    fn verify(&self, cap: &Capability) -> Result<(), WireError>;
}

/// Most capabilities a remote-checking gate remembers as verified by the manager.
const VERIFIED_MAX: usize = 4096;
/// How long a capability verified by the manager is taken as verified for another
/// connection without asking again (the ranks of a job present the same one to every
/// delegate at an open): bounds how long a revocation the gate never hears of can be
/// missed by a new connection.
const VERIFIED_FOR_MS: u64 = 2_000;

/// How a gate checks what is presented.
enum Checker {
    /// Capabilities are off (a cluster started for benchmarking without them).
    Off,
    /// With the capability key: the MAC here.
    Key(CapabilityKey),
    /// Without it: asked of the manager.
    Remote(Remote),
}

struct Remote {
    verifier: std::sync::Arc<dyn CapabilityVerifier>,
    /// Capabilities verified (all of each: a MAC alone would let one be relabelled) to
    /// the time until which they are taken as verified (bounded, `VERIFIED_MAX`).
    verified: Mutex<HashMap<Verified, u64>>,
    /// Whether the cluster asks for capabilities, once the manager said.
    enforced: std::sync::OnceLock<bool>,
}

/// Every field of a capability, as a verified one is remembered.
type Verified = (InodeId, u8, u64, u64, [u8; 32]);

fn verified_key(cap: &Capability) -> Verified {
    (cap.inode, cap.rights, cap.issued_ms, cap.expiry_ms, cap.mac)
}

impl Remote {
    /// Asks the manager about `cap` unless it said yes lately.
    fn verify(&self, cap: &Capability) -> Result<(), WireError> {
        let now = now_ms();
        if self
            .verified
            .lock()
            .unwrap()
            .get(&verified_key(cap))
            .is_some_and(|until| *until > now)
        {
            return Ok(());
        }
        match self.verifier.verify(cap) {
            Ok(()) => {
                let _ = self.enforced.set(true);
                let mut verified = self.verified.lock().unwrap();
                if verified.len() >= VERIFIED_MAX {
                    verified.retain(|_, until| *until > now);
                    if verified.len() >= VERIFIED_MAX {
                        verified.clear();
                    }
                }
                verified.insert(verified_key(cap), (now + VERIFIED_FOR_MS).min(cap.expiry_ms));
                Ok(())
            }
            Err(e) if e.code == ErrorCode::Unsupported => {
                let _ = self.enforced.set(false);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Whether capabilities are asked for: once known, as known; else the manager is
    /// asked about a capability no key made (refused where capabilities are on,
    /// `Unsupported` where they are off).
    fn enforced(&self) -> Result<bool, WireError> {
        if let Some(on) = self.enforced.get() {
            return Ok(*on);
        }
        let blank = Capability {
            inode: InodeId(0),
            rights: rights::READ,
            issued_ms: 0,
            expiry_ms: 0,
            mac: [0; 32],
        };
        match self.verifier.verify(&blank) {
            Err(e) if e.code == ErrorCode::Unsupported => {
                let _ = self.enforced.set(false);
                Ok(false)
            }
            Err(e)
                if matches!(
                    e.code,
                    ErrorCode::PermissionDenied | ErrorCode::CapabilityRequired
                ) =>
            {
                let _ = self.enforced.set(true);
                Ok(true)
            }
            Err(e) => Err(e),
            Ok(()) => Err(WireError::new(
                ErrorCode::Io,
                "the metadata manager verified a capability no key made: refusing to serve on its word",
            )),
        }
    }
}

/// Which connections may touch which objects: the io servers' and cache managers'
/// side of capabilities.
pub struct Gate {
    checker: Checker,
    /// How refusals name this server ("io server 3").
    name: String,
    shards: Vec<Mutex<HashMap<ConnectionId, Presented>>>,
    revocations: Mutex<Revocations>,
    /// Bumped by each revocation, so that connections recheck what they remember.
    epoch: AtomicU64,
}

const SHARDS: usize = 64;

impl Gate {
    pub fn new(key: Option<CapabilityKey>, name: impl Into<String>) -> Gate {
        Gate::with(
            match key {
                Some(key) => Checker::Key(key),
                None => Checker::Off,
            },
            name,
        )
    }

    /// A gate that holds no capability key and has `verifier` (the metadata manager)
    /// verify what is presented: a job's delegate.
    pub fn remote(verifier: std::sync::Arc<dyn CapabilityVerifier>, name: impl Into<String>) -> Gate {
        Gate::with(
            Checker::Remote(Remote {
                verifier,
                verified: Mutex::default(),
                enforced: std::sync::OnceLock::new(),
            }),
            name,
        )
    }

    fn with(checker: Checker, name: impl Into<String>) -> Gate {
        Gate {
            checker,
            name: name.into(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            revocations: Mutex::default(),
            epoch: AtomicU64::new(0),
        }
    }

    /// Whether capabilities are checked at all.
    pub fn enforced(&self) -> bool {
        !matches!(self.checker, Checker::Off)
    }

    fn shard(&self, connection: ConnectionId) -> &Mutex<HashMap<ConnectionId, Presented>> {
        &self.shards[(connection.0 as usize) % SHARDS]
    }

    /// Serves `PresentCapability`.
    pub fn present(&self, connection: ConnectionId, cap: &Capability, reset: bool) -> Result<(), WireError> {
        match &self.checker {
            Checker::Off => return Ok(()),
            Checker::Key(_) => self.verify(cap)?,
            Checker::Remote(remote) => remote.verify(cap)?,
        }
        let now = now_ms();
        let mut shard = self.shard(connection).lock().unwrap();
        let presented = shard.entry(connection).or_default();
        if reset {
            presented.entries.clear();
        }
        if cap.rights & rights::SERVER != 0 {
            presented.server = Some((cap.issued_ms, cap.expiry_ms));
            return Ok(());
        }
        if presented.entries.len() + 2 > PER_CONNECTION_MAX {
            presented.entries.retain(|_, (_, expiry)| *expiry > now);
            if presented.entries.len() + 2 > PER_CONNECTION_MAX {
                // Start over: a request relying on a forgotten one is refused with
                // `CapabilityRequired`, and its client presents it again.
                presented.entries.clear();
            }
        }
        for right in [rights::READ, rights::WRITE] {
            if cap.rights & right != 0 {
                presented
                    .entries
                    .insert((cap.inode, right), (cap.issued_ms, cap.expiry_ms));
            }
        }
        Ok(())
    }

    /// Whether `connection` may have `request` served: refuses with a clear error
    /// when it presented no valid capability for the request's object and operation.
    pub fn check(&self, connection: ConnectionId, request: &Request) -> Result<(), WireError> {
        if let Checker::Off = self.checker {
            return Ok(());
        }
        let need = need(request);
        if need == Need::None {
            return Ok(());
        }
        let refusal = self.check_presented(connection, request, need);
        match (&self.checker, refusal) {
            // Nothing valid presented: a remote-checking gate serves it only where the
            // cluster asks for no capabilities (its clients present none).
            (Checker::Remote(remote), Err(_)) if !remote.enforced()? => Ok(()),
            (_, result) => result,
        }
    }

    /// Checks `request`, which needs `need`, against what `connection` presented.
    fn check_presented(
        &self,
        connection: ConnectionId,
        request: &Request,
        need: Need,
    ) -> Result<(), WireError> {
        let now = now_ms();
        let epoch = self.epoch.load(Ordering::Acquire);
        let mut shard = self.shard(connection).lock().unwrap();
        let presented = shard.entry(connection).or_default();
        if presented.epoch != epoch {
            let revocations = self.revocations.lock().unwrap();
            presented
                .entries
                .retain(|(inode, _), (issued, _)| !revocations.voids(*inode, *issued));
            presented.epoch = epoch;
        }
        if presented.server.is_some_and(|(_, expiry)| expiry > now) {
            return Ok(());
        }
        let (inode, wanted) = match need {
            Need::Inode { inode, rights } => (inode, rights),
            _ => {
                return Err(WireError::new(
                    ErrorCode::PermissionDenied,
                    format!(
                        "{}: {:?} is for servers only (it needs a server capability)",
                        self.name,
                        request.opcode()
                    ),
                ))
            }
        };
        let mut expired = None;
        for right in [rights::READ, rights::WRITE] {
            if wanted & right == 0 {
                continue;
            }
            match presented.entries.get(&(inode, right)) {
                Some((_, expiry)) if *expiry > now => return Ok(()),
                Some((_, expiry)) => expired = Some(*expiry),
                None => {}
            }
        }
        let what = match wanted {
            rights::READ => "read",
            rights::WRITE => "write",
            _ => "read or write",
        };
        Err(WireError::new(
            ErrorCode::CapabilityRequired,
            match expired {
                Some(expiry) => format!(
                    "{}: the {what} capability for inode {inode} on this connection expired {} ms ago; ask the metadata manager for a new one",
                    self.name,
                    now.saturating_sub(expiry)
                ),
                None => format!(
                    "{}: no valid {what} capability for inode {inode} on this connection (none presented, or it was revoked): {:?} refused",
                    self.name,
                    request.opcode()
                ),
            },
        ))
    }

    /// Whether `cap` verifies with this gate's key: its MAC, its expiry, its lifetime,
    /// and the revocations this gate heard of (a gate without the key refuses it).
    /// Remembers nothing: `present` does that for a connection; the manager answers
    /// `VerifyCapability` with it.
    pub fn verify(&self, cap: &Capability) -> Result<(), WireError> {
        let Checker::Key(key) = &self.checker else {
            return Err(WireError::new(
                ErrorCode::Unsupported,
                format!("{}: holds no capability key to verify with", self.name),
            ));
        };
        if !key.verifies(cap) {
            return Err(WireError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "{}: the capability for inode {} does not verify (forged, altered, or made with another cluster's key)",
                    self.name, cap.inode
                ),
            ));
        }
        let now = now_ms();
        if cap.expiry_ms <= now {
            return Err(WireError::new(
                ErrorCode::CapabilityRequired,
                format!(
                    "{}: the {} capability for inode {} expired {} ms ago; ask the metadata manager for a new one",
                    self.name,
                    rights::describe(cap.rights),
                    cap.inode,
                    now - cap.expiry_ms
                ),
            ));
        }
        if cap.expiry_ms.saturating_sub(cap.issued_ms) > LIFETIME_MAX_MS {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "{}: a capability may live at most {LIFETIME_MAX_MS} ms",
                    self.name
                ),
            ));
        }
        if cap.rights & rights::SERVER == 0
            && self.revocations.lock().unwrap().voids(cap.inode, cap.issued_ms)
        {
            return Err(revoked(&self.name, cap.inode));
        }
        Ok(())
    }

    /// Serves `RevokeCapabilities`: capabilities of `inodes` issued at or before
    /// `at_ms` are void.
    pub fn revoke(&self, inodes: &[InodeId], at_ms: u64) {
        let now = now_ms();
        let mut revocations = self.revocations.lock().unwrap();
        if revocations.inodes.len() + inodes.len() > REVOKED_MAX {
            // Revocations older than any capability's lifetime cover nothing live.
            revocations
                .inodes
                .retain(|_, at| now.saturating_sub(*at) <= LIFETIME_MAX_MS);
            if revocations.inodes.len() + inodes.len() > REVOKED_MAX {
                revocations.all_before = revocations.all_before.max(at_ms);
                revocations.inodes.clear();
            }
        }
        for inode in inodes {
            let at = revocations.inodes.entry(*inode).or_insert(at_ms);
            *at = (*at).max(at_ms);
        }
        drop(revocations);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    pub fn connection_closed(&self, connection: ConnectionId) {
        self.shard(connection).lock().unwrap().remove(&connection);
    }
}

fn revoked(name: &str, inode: InodeId) -> WireError {
    WireError::new(
        ErrorCode::CapabilityRequired,
        format!("{name}: capabilities for inode {inode} were revoked (its permissions changed); ask the metadata manager for a new one"),
    )
}

/// Where a client's connections get the capabilities their requests need.
pub trait CapabilitySource: Send + Sync {
    /// A capability of `rights` (`READ` or `WRITE`) on `inode`, or `None` when the
    /// cluster asks for none (started for benchmarking without them). A server's
    /// source answers with its server capability whatever is asked.
    fn capability(&self, inode: InodeId, rights: u8) -> Result<Option<Capability>, crate::RpcError>;
    /// `cap` was refused (revoked): do not hand it out again.
    fn forget(&self, _cap_inode: InodeId) {}
    /// Keeps `cap`, granted to another process of the same user for the same file
    /// (an MPI job's rank 0 at a collective open), to hand out as if granted here: a
    /// source that asks a manager is spared the round trip. Refused or expired, it is
    /// forgotten and asked for as usual.
    fn adopt(&self, _cap: &Capability) {}
    /// Keeps `cap`, granted to this process along with another request (a create's):
    /// as `adopt`, and a write right counts as granted here (given back at the last
    /// close, see `writer_closed`).
    fn granted(&self, cap: &Capability) {
        self.adopt(cap)
    }
    /// Whether `cap`, presented on a connection before, may still be used for writing:
    /// a write capability given back to the manager may not (a new one is asked for).
    fn holds(&self, _cap: &Capability) -> bool {
        true
    }
    /// A handle that may write `inode` was opened.
    fn writer_opened(&self, _inode: InodeId) {}
    /// A handle that may write `inode` was closed, everything written through it
    /// acknowledged: after the last one, the write capabilities granted for it go back
    /// to the manager.
    fn writer_closed(&self, _inode: InodeId) {}
    /// `inode`'s write capability was handed to other processes (`adopt`): it is never
    /// given back (it expires).
    fn shared(&self, _inode: InodeId) {}
}

/// A server's source: its own server capability, made from the key.
pub struct ServerCapabilities {
    key: CapabilityKey,
    current: Mutex<Option<Capability>>,
}

impl ServerCapabilities {
    pub fn new(key: CapabilityKey) -> ServerCapabilities {
        ServerCapabilities {
            key,
            current: Mutex::new(None),
        }
    }
}

impl CapabilitySource for ServerCapabilities {
    fn capability(&self, _inode: InodeId, _rights: u8) -> Result<Option<Capability>, crate::RpcError> {
        let mut current = self.current.lock().unwrap();
        match &*current {
            Some(cap) if !renew_due(cap, now_ms()) => Ok(Some(cap.clone())),
            _ => {
                let cap = self.key.server();
                *current = Some(cap.clone());
                Ok(Some(cap))
            }
        }
    }
}

/// Whether `cap` is close enough to its expiry to be renewed before use: within a
/// quarter of its lifetime (at least 2 s), so that a request sent with it reaches the
/// server before it expires.
pub fn renew_due(cap: &Capability, now: u64) -> bool {
    let lifetime = cap.expiry_ms.saturating_sub(cap.issued_ms);
    let margin = (lifetime / 4).max(2_000).min(lifetime / 2);
    now.saturating_add(margin) >= cap.expiry_ms
}

/// A client connection's memory of what it presented (bounded like the server's).
#[derive(Default)]
pub(crate) struct PresentedHere {
    entries: HashMap<(InodeId, u8), Capability>,
}

impl PresentedHere {
    /// The capability presented for `(inode, right)` still good for a while.
    pub(crate) fn covers(&self, key: (InodeId, u8), now: u64) -> bool {
        self.entries.get(&key).is_some_and(|cap| !renew_due(cap, now))
    }

    /// Records `cap` as presented; `true` when the set was full and started over
    /// (the server must be told to forget too).
    pub(crate) fn record(&mut self, cap: &Capability) -> bool {
        let reset = self.entries.len() + 2 > PER_CONNECTION_MAX;
        if reset {
            self.entries.clear();
        }
        if cap.rights & rights::SERVER != 0 {
            self.entries.insert((InodeId(0), rights::SERVER), cap.clone());
        }
        for right in [rights::READ, rights::WRITE] {
            if cap.rights & right != 0 {
                self.entries.insert((cap.inode, right), cap.clone());
            }
        }
        reset
    }

    /// The capability presented for `key`, if any.
    pub(crate) fn presented(&self, key: (InodeId, u8)) -> Option<&Capability> {
        self.entries.get(&key)
    }

    /// Whether recording one more would start over.
    pub(crate) fn full(&self) -> bool {
        self.entries.len() + 2 > PER_CONNECTION_MAX
    }

    pub(crate) fn forget(&mut self, inode: InodeId) {
        self.entries.retain(|(i, _), _| *i != inode);
    }
}

/// Where a client's connections get their capabilities: the metadata manager, which
/// grants one after the permission check of an open (`GrantCapability`). Kept per
/// inode and right until close to expiry, so that the manager is asked once per file,
/// right and lifetime, however many io servers the file spans; renewed transparently
/// (a long-lived open file never sees its capability expire), and asked again when a
/// server refused one as revoked (the manager checks permission again).
mod grants {
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
        }
    }
}
pub use grants::ManagerGrants;

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::{Range, Striping};

    fn read(inode: u64) -> Request {
        Request::Read {
            inode: InodeId(inode),
            striping: Striping {
                stripe_size_bytes: 65536,
                stripe_count: 1,
                server_index: 0,
            },
            ranges: vec![Range { offset: 0, len: 1 }],
        }
    }

    fn truncate(inode: u64) -> Request {
        Request::Truncate {
            inode: InodeId(inode),
            striping: Striping {
                stripe_size_bytes: 65536,
                stripe_count: 1,
                server_index: 0,
            },
            size: 0,
        }
    }

    fn gate() -> (Gate, CapabilityKey) {
        let key = CapabilityKey::new(&ClusterKey::generate().unwrap());
        (Gate::new(Some(key.clone()), "io server 1"), key)
    }

    const A: ConnectionId = ConnectionId(1);
    const B: ConnectionId = ConnectionId(2);

    #[test]
    fn a_presented_capability_serves_its_connection_inode_and_right_only() {
        let (gate, key) = gate();
        let cap = key.issue(InodeId(7), rights::READ, now_ms(), 60_000);
        assert_eq!(
            gate.check(A, &read(7)).unwrap_err().code,
            ErrorCode::CapabilityRequired
        );
        gate.present(A, &cap, false).unwrap();
        gate.check(A, &read(7)).unwrap();
        assert!(gate.check(A, &read(8)).is_err(), "another inode");
        assert!(gate.check(A, &truncate(7)).is_err(), "another right");
        assert!(gate.check(B, &read(7)).is_err(), "another connection");
        // Statistics and sizes need none; object removal needs a server's.
        gate.check(A, &Request::IoStatfs).unwrap();
        let remove = Request::ObjRemove {
            inodes: vec![InodeId(7)],
        };
        assert_eq!(
            gate.check(A, &remove).unwrap_err().code,
            ErrorCode::PermissionDenied
        );
        gate.present(B, &key.server(), false).unwrap();
        gate.check(B, &remove).unwrap();
        gate.check(B, &truncate(9)).unwrap();
        gate.connection_closed(A);
        assert!(gate.check(A, &read(7)).is_err(), "closing forgets");
    }

    #[test]
    fn other_keys_expiry_and_revocation_are_refused() {
        let (gate, key) = gate();
        let other = CapabilityKey::new(&ClusterKey::generate().unwrap());
        let forged = other.issue(InodeId(7), rights::READ, now_ms(), 60_000);
        assert_eq!(
            gate.present(A, &forged, false).unwrap_err().code,
            ErrorCode::PermissionDenied
        );
        let old = key.issue(InodeId(7), rights::READ, now_ms() - 10_000, 5_000);
        assert_eq!(
            gate.present(A, &old, false).unwrap_err().code,
            ErrorCode::CapabilityRequired
        );
        let long = key.issue(InodeId(7), rights::READ, now_ms(), LIFETIME_MAX_MS);
        let mut longer = long.clone();
        longer.expiry_ms += 1;
        assert!(gate.present(A, &longer, false).is_err());
        // Revocation: voids what was issued at or before it, on every connection.
        let issued = now_ms();
        let cap = key.issue(InodeId(7), rights::READ | rights::WRITE, issued, 60_000);
        gate.present(A, &cap, false).unwrap();
        gate.present(B, &cap, false).unwrap();
        gate.check(B, &truncate(7)).unwrap();
        gate.revoke(&[InodeId(7)], issued);
        assert!(gate.check(A, &read(7)).unwrap_err().message.contains("inode 7"));
        assert!(gate.check(B, &truncate(7)).is_err());
        assert!(gate
            .present(A, &cap, false)
            .unwrap_err()
            .message
            .contains("revoked"));
        let renewed = key.issue(InodeId(7), rights::READ, issued + 1, 60_000);
        gate.present(A, &renewed, false).unwrap();
        gate.check(A, &read(7)).unwrap();
    }

    #[test]
    fn a_connection_holds_a_bounded_number_and_starts_over_past_it() {
        let (gate, key) = gate();
        let now = now_ms();
        let mut refused = None;
        for inode in 0..PER_CONNECTION_MAX as u64 {
            if let Err(e) = gate.present(A, &key.issue(InodeId(inode), rights::READ, now, 60_000), false) {
                refused = Some(e);
                break;
            }
        }
        assert!(refused.is_none(), "{refused:?}");
        // Past the bound a connection starts over: memory stays bounded, and what was
        // forgotten is refused (its client presents it again).
        let fresh = key.issue(InodeId(1 << 40), rights::READ, now, 60_000);
        gate.present(A, &fresh, false).unwrap();
        gate.check(A, &read(1 << 40)).unwrap();
        assert!(gate.check(A, &read(0)).is_err(), "the rest was forgotten");
        let shard = gate.shard(A).lock().unwrap();
        assert!(shard[&A].entries.len() <= PER_CONNECTION_MAX);
        drop(shard);
        let other = key.issue(InodeId(1 << 41), rights::READ, now, 60_000);
        gate.present(A, &other, true).unwrap();
        assert!(gate.check(A, &read(1 << 40)).is_err(), "reset forgot the rest");
    }

    /// The manager as a job's delegate asks it, here its gate in one process, counting
    /// the questions; or a manager of a cluster without capabilities.
    struct Manager {
        gate: Option<Gate>,
        asked: AtomicU64,
    }

    impl CapabilityVerifier for Manager {
        fn verify(&self, cap: &Capability) -> Result<(), WireError> {
            self.asked.fetch_add(1, Ordering::Relaxed);
            match &self.gate {
                Some(gate) => gate.verify(cap),
                None => Err(WireError::new(ErrorCode::Unsupported, "no capabilities")),
            }
        }
    }

    /// A delegate holds no capability key: what it is presented the manager verifies,
    /// and the delegate then serves only the connection, inode and right presented,
    /// as an io server does. Before, a delegate's gate had no key and served anything
    /// (issue 29, finding 1: another user read and overwrote a file through it).
    #[test]
    fn a_gate_without_the_key_has_the_manager_verify_and_then_checks_as_an_io_server() {
        let (manager_gate, key) = gate();
        let manager = std::sync::Arc::new(Manager {
            gate: Some(manager_gate),
            asked: AtomicU64::new(0),
        });
        let delegate = Gate::remote(manager.clone(), "delegate 0");
        assert!(delegate.enforced());
        assert_eq!(
            delegate.check(A, &read(7)).unwrap_err().code,
            ErrorCode::CapabilityRequired,
            "nothing presented"
        );
        let other = CapabilityKey::new(&ClusterKey::generate().unwrap());
        let forged = other.issue(InodeId(7), rights::READ | rights::WRITE, now_ms(), 60_000);
        assert_eq!(
            delegate.present(A, &forged, false).unwrap_err().code,
            ErrorCode::PermissionDenied
        );
        assert!(
            delegate.check(A, &read(7)).is_err(),
            "a forged one serves nothing"
        );
        let cap = key.issue(InodeId(7), rights::READ, now_ms(), 60_000);
        delegate.present(A, &cap, false).unwrap();
        delegate.check(A, &read(7)).unwrap();
        assert!(delegate.check(A, &read(8)).is_err(), "another inode");
        assert!(delegate.check(A, &truncate(7)).is_err(), "another right");
        assert!(delegate.check(B, &read(7)).is_err(), "another connection");
        // The ranks of a job present the same capability: the manager is asked once.
        let asked = manager.asked.load(Ordering::Relaxed);
        delegate.present(B, &cap, false).unwrap();
        assert_eq!(manager.asked.load(Ordering::Relaxed), asked);
        delegate.check(B, &read(7)).unwrap();
        // The same MAC on another inode or right is no verified capability.
        for relabelled in [
            Capability {
                inode: InodeId(8),
                ..cap.clone()
            },
            Capability {
                rights: rights::READ | rights::WRITE,
                ..cap.clone()
            },
        ] {
            assert_eq!(
                delegate.present(A, &relabelled, false).unwrap_err().code,
                ErrorCode::PermissionDenied
            );
        }
        assert!(delegate.check(A, &read(8)).is_err());
        assert!(delegate.check(A, &truncate(7)).is_err());
        // A revocation the manager heard of before the present refuses it.
        let revoked_cap = key.issue(InodeId(9), rights::WRITE, now_ms(), 60_000);
        manager.gate.as_ref().unwrap().revoke(&[InodeId(9)], now_ms());
        assert_eq!(
            delegate.present(A, &revoked_cap, false).unwrap_err().code,
            ErrorCode::CapabilityRequired
        );
        assert!(
            delegate.verify(&cap).is_err(),
            "a delegate verifies nothing itself"
        );
    }

    /// Where the cluster asks for no capabilities (its clients present none), a
    /// delegate learns so from the manager and serves as before.
    #[test]
    fn a_gate_without_the_key_serves_unchecked_only_where_the_cluster_asks_for_none() {
        let manager = std::sync::Arc::new(Manager {
            gate: None,
            asked: AtomicU64::new(0),
        });
        let delegate = Gate::remote(manager.clone(), "delegate 0");
        delegate.check(A, &truncate(3)).unwrap();
        delegate.check(B, &read(4)).unwrap();
        assert_eq!(manager.asked.load(Ordering::Relaxed), 1, "asked once");
    }

    #[test]
    fn an_unenforcing_gate_serves_everything() {
        let gate = Gate::new(None, "io server 1");
        gate.check(A, &truncate(3)).unwrap();
        assert!(!gate.enforced());
    }
    /// A client that wrote 4,000 files (mdtest's create phase through one mount) still
    /// holds their capabilities when it reads them back: each is kept under both rights,
    /// and a table of 4,096 forgot them all, so every read-back open asked the manager.
    #[test]
    fn capabilities_of_thousands_of_files_written_are_kept_for_reading_back() {
        let key = CapabilityKey::new(&ClusterKey::generate().unwrap());
        // No manager to ask: a capability not kept fails (the pool is gone).
        let grants = ManagerGrants::new(
            std::sync::Weak::new(),
            "127.0.0.1:1",
            weft_proto::Cred {
                uid: 0,
                gid: 0,
                groups: Vec::new(),
            },
        );
        const FILES: u64 = 4000;
        for inode in 1..=FILES {
            grants.adopt(&key.issue(InodeId(inode), rights::READ | rights::WRITE, now_ms(), 60_000));
        }
        for inode in 1..=FILES {
            let cap = grants.capability(InodeId(inode), rights::READ);
            assert!(
                matches!(cap, Ok(Some(ref c)) if c.inode == InodeId(inode)),
                "file {inode} of {FILES}: {cap:?}"
            );
        }
    }
}

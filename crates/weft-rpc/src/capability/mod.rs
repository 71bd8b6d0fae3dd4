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

    /// Whether `present` answers without asking another server (the key is here, or
    /// nothing is checked): quick enough for the event loop, which then applies it
    /// before it reads the connection's next request (see `Connection::send_with`).
    pub fn verifies_locally(&self) -> bool {
        !matches!(self.checker, Checker::Remote(_))
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
    /// Waits, at most `wait`, until the write capabilities queued to go back have been
    /// sent (a short-lived process before it exits: what is not sent expires instead,
    /// and the manager cannot vouch for those files until then).
    fn flush_releases(&self, _wait: std::time::Duration) {}
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

mod grants;
pub use grants::ManagerGrants;

#[cfg(test)]
mod tests;

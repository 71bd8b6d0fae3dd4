//! Accounting by peer and for the whole server: connections (in all and per peer),
//! failed handshakes per peer, and the bytes of requests and replies held in memory
//! (in all and per peer), so that no peer can take more than its share.
//!
//! A stranger (no key) must not be able to turn a limit on others. So a connection is
//! counted against its peer's cap of established connections only once its handshake
//! proved the key: before, it is one of its peer's pending handshakes, of which a peer
//! may have `peer_handshakes_max`, the oldest making way for a new one (a stranger who
//! holds handshakes open is evicted by the next comer, and a client's own handshake
//! takes a round trip). Failed handshakes are counted per peer, but only a peer the
//! kernel names (a user on the Unix socket) is ever refused for them: a network address
//! may be shared by every user of a login node or a NAT, and a failed handshake costs
//! the server one MAC, so refusing the address would hand a stranger a lock-out.

use super::ServerLimits;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Requests of at most this many bytes (message, bulk data and reply hint) are not
/// held back by their peer's share, only by the server's budget: a peer's stalled bulk
/// transfers never delay its small requests (opens, reads from files, metadata).
pub const SMALL_REQUEST_BYTES: u64 = 64 * 1024;

/// Most peers remembered for their failed handshakes after their last connection
/// closed; past this the oldest records are forgotten.
const FAILURE_RECORDS_MAX: usize = 65_536;

/// Who is on the other end, for limits: a network address (every connection from one
/// machine is one peer), or, on the Unix socket, the connecting user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerKey {
    Ip(IpAddr),
    LocalUser(u32),
}

impl std::fmt::Display for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerKey::Ip(ip) => write!(f, "{ip}"),
            PeerKey::LocalUser(uid) => write!(f, "local user {uid}"),
        }
    }
}

impl PeerKey {
    /// Whether failed handshakes may get this peer refused: only a user the kernel
    /// vouches for (who locks out nobody but themselves), never an address.
    fn bannable(self) -> bool {
        matches!(self, PeerKey::LocalUser(_))
    }
}

#[derive(Debug, Default)]
struct PeerState {
    /// Connections whose handshake succeeded.
    connections: usize,
    /// Connections still in their handshake, oldest first: (connection, loop).
    pending: VecDeque<(u64, usize)>,
    bytes: u64,
    /// Failed handshakes since `window_start`.
    failures: u32,
    window_start: Option<Instant>,
}

impl PeerState {
    fn idle(&self) -> bool {
        self.connections == 0 && self.pending.is_empty() && self.bytes == 0 && self.failures == 0
    }
}

struct Inner {
    connections: usize,
    bytes: u64,
    peers: HashMap<PeerKey, PeerState>,
}

/// What happened to a failed handshake's peer.
pub struct Failure {
    /// Failures of this peer in the current window, this one included.
    pub failures: u32,
    /// This failure reached the limit: the peer is refused from now on until the
    /// window ends (a Unix-socket user), or, for an address, is logged once.
    pub limit_now: bool,
    /// The peer is refused from now on (never an address: see the module's text).
    pub banned_now: bool,
}

/// A pending handshake that made way for a newer one of its peer: the loop serving it
/// ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evict {
    pub connection: u64,
    pub loop_index: usize,
}

pub struct Peers {
    limits: ServerLimits,
    inner: Mutex<Inner>,
    /// Connections waiting for bytes to be released: releases wake the event loops
    /// only when some wait. A refused charge counts its connection here before the
    /// lock it was refused under is released (see `try_charge`).
    waiters: AtomicUsize,
}

impl Peers {
    pub fn new(limits: ServerLimits) -> Peers {
        Peers {
            limits,
            inner: Mutex::new(Inner {
                connections: 0,
                bytes: 0,
                peers: HashMap::new(),
            }),
            waiters: AtomicUsize::new(0),
        }
    }

    /// Counts a new connection `connection` of `peer`, served by loop `loop_index`, as
    /// a pending handshake, or says why it is refused. If the peer has
    /// `peer_handshakes_max` pending already, its oldest is no longer counted and is
    /// returned for its loop to end.
    pub fn admit(
        &self,
        peer: PeerKey,
        connection: u64,
        loop_index: usize,
        now: Instant,
    ) -> Result<Option<Evict>, String> {
        let limits = &self.limits;
        let mut inner = self.inner.lock().unwrap();
        if inner.connections >= limits.connections_max {
            return Err(format!(
                "the server has too many connections ({}); try again later",
                limits.connections_max
            ));
        }
        let state = inner.peers.entry(peer).or_default();
        if let Some(left) = banned_for(peer, state, limits, now) {
            return Err(format!(
                "too many failed authentications from {peer}; refused for another {} s",
                left.as_secs().max(1)
            ));
        }
        let evicted = if state.pending.len() >= limits.peer_handshakes_max.max(1) {
            state.pending.pop_front().map(|(connection, loop_index)| Evict {
                connection,
                loop_index,
            })
        } else {
            None
        };
        state.pending.push_back((connection, loop_index));
        inner.connections += 1;
        Ok(evicted)
    }

    /// `connection` of `peer` proved the key: it leaves the pending handshakes and is
    /// counted against its peer's cap of established connections (per user on the Unix
    /// socket, per address on TCP), or is refused with the reason (it stays counted as
    /// pending until it closes). A connection evicted meanwhile is refused too.
    pub fn established(&self, peer: PeerKey, connection: u64) -> Result<(), String> {
        let limits = &self.limits;
        let mut inner = self.inner.lock().unwrap();
        let state = inner.peers.entry(peer).or_default();
        let Some(at) = state.pending.iter().position(|p| p.0 == connection) else {
            return Err(format!(
                "too many handshakes pending from {peer}; this one made way for a newer one"
            ));
        };
        if state.connections >= limits.peer_connections_max {
            return Err(format!(
                "too many connections from {peer} ({}); close some or try again later",
                limits.peer_connections_max
            ));
        }
        state.pending.remove(at);
        state.connections += 1;
        Ok(())
    }

    /// A connection counted by `admit` closed; `established` says whether its
    /// handshake was counted by `established`.
    pub fn leave(&self, peer: PeerKey, connection: u64, established: bool) {
        let mut inner = self.inner.lock().unwrap();
        inner.connections -= 1;
        if let Some(state) = inner.peers.get_mut(&peer) {
            if established {
                state.connections -= 1;
            } else if let Some(at) = state.pending.iter().position(|p| p.0 == connection) {
                state.pending.remove(at);
            }
            if state.idle() {
                inner.peers.remove(&peer);
            }
        }
    }

    /// Records a failed handshake of `peer`.
    pub fn failed(&self, peer: PeerKey, now: Instant) -> Failure {
        let limits = &self.limits;
        let mut inner = self.inner.lock().unwrap();
        if inner.peers.len() >= FAILURE_RECORDS_MAX {
            forget_oldest_failures(&mut inner.peers);
        }
        let state = inner.peers.entry(peer).or_default();
        let expired = state
            .window_start
            .is_none_or(|start| now.duration_since(start) >= limits.auth_failure_window);
        if expired {
            state.failures = 0;
            state.window_start = Some(now);
        }
        state.failures += 1;
        let limit_now = state.failures == limits.auth_failures_max;
        Failure {
            failures: state.failures,
            limit_now,
            banned_now: limit_now && peer.bannable(),
        }
    }

    /// Charges `n` more bytes to `peer` and to the server if both have room (the
    /// peer's share is not checked for small requests), and returns what was charged;
    /// the request holds `held` bytes charged already. A request larger than a whole
    /// budget is charged up to that budget: it runs alone rather than never.
    ///
    /// A refusal counts the caller as waiting for bytes (`waiters`) at once, under the
    /// lock every `release` takes: a release that comes after the refusal, however
    /// soon, reports a waiter, so the caller is woken to try again. (Counted later, by
    /// the caller, a release in between woke nobody, and a connection refused for the
    /// last bytes held was never read again.) The caller ends the count with
    /// `wait_ended` once it stops waiting: charged on a later try, refused anew (that
    /// refusal counts again), or gone.
    pub fn try_charge(&self, peer: PeerKey, n: u64, held: u64) -> Option<u64> {
        if n == 0 {
            return Some(0);
        }
        let limits = &self.limits;
        let charge = n
            .min(limits.data_bytes_inflight_max.saturating_sub(held))
            .min(limits.peer_data_bytes_max.saturating_sub(held));
        let mut inner = self.inner.lock().unwrap();
        let refused = inner.bytes + charge > limits.data_bytes_inflight_max || {
            let state = inner.peers.entry(peer).or_default();
            n > SMALL_REQUEST_BYTES && state.bytes + charge > limits.peer_data_bytes_max
        };
        if refused {
            self.waiters.fetch_add(1, Ordering::SeqCst);
            return None;
        }
        let state = inner.peers.entry(peer).or_default();
        state.bytes += charge;
        inner.bytes += charge;
        Some(charge)
    }

    /// Charges bytes already in memory (a reply larger than its hint): counted so that
    /// others wait for them, never refused.
    pub fn charge_held(&self, peer: PeerKey, n: u64) {
        if n == 0 {
            return;
        }
        let mut inner = self.inner.lock().unwrap();
        inner.peers.entry(peer).or_default().bytes += n;
        inner.bytes += n;
    }

    /// Releases bytes charged to `peer`; true if connections wait for bytes (the
    /// caller wakes the event loops).
    pub fn release(&self, peer: PeerKey, n: u64) -> bool {
        if n == 0 {
            return false;
        }
        let mut inner = self.inner.lock().unwrap();
        inner.bytes -= n;
        if let Some(state) = inner.peers.get_mut(&peer) {
            state.bytes -= n;
            if state.idle() {
                inner.peers.remove(&peer);
            }
        }
        self.waiters.load(Ordering::SeqCst) > 0
    }

    /// A caller refused by `try_charge` no longer waits for that refusal's bytes.
    pub fn wait_ended(&self) {
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Forgets failure records whose window is over.
    pub fn sweep(&self, now: Instant) {
        let window = self.limits.auth_failure_window;
        let mut inner = self.inner.lock().unwrap();
        inner.peers.retain(|_, state| {
            if state
                .window_start
                .is_some_and(|s| now.duration_since(s) >= window)
            {
                state.failures = 0;
                state.window_start = None;
            }
            !state.idle()
        });
    }

    /// (connections, bytes held) of the whole server.
    pub fn totals(&self) -> (usize, u64) {
        let inner = self.inner.lock().unwrap();
        (inner.connections, inner.bytes)
    }
}

/// How much longer `peer` is refused, if it is.
fn banned_for(peer: PeerKey, state: &PeerState, limits: &ServerLimits, now: Instant) -> Option<Duration> {
    if !peer.bannable() || state.failures < limits.auth_failures_max {
        return None;
    }
    let end = state.window_start? + limits.auth_failure_window;
    (end > now).then(|| end - now)
}

fn forget_oldest_failures(peers: &mut HashMap<PeerKey, PeerState>) {
    let mut starts: Vec<Instant> = peers.values().filter_map(|s| s.window_start).collect();
    if starts.is_empty() {
        return;
    }
    starts.sort_unstable();
    let cut = starts[starts.len() / 2];
    peers.retain(|_, s| {
        s.connections > 0 || !s.pending.is_empty() || s.bytes > 0 || s.window_start.is_some_and(|w| w > cut)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ServerLimits {
        ServerLimits {
            connections_max: 3,
            peer_connections_max: 2,
            data_bytes_inflight_max: 100,
            peer_data_bytes_max: 60,
            auth_failures_max: 2,
            auth_failure_window: Duration::from_secs(10),
            ..ServerLimits::default()
        }
    }

    /// Admits connection `id` of `peer` and completes its handshake.
    fn open(peers: &Peers, peer: PeerKey, id: u64, now: Instant) -> Result<(), String> {
        peers.admit(peer, id, 0, now)?;
        peers
            .established(peer, id)
            .inspect_err(|_| peers.leave(peer, id, false))
    }

    #[test]
    fn connections_are_limited_in_all_and_per_peer() {
        let peers = Peers::new(limits());
        let (a, b) = (PeerKey::LocalUser(1), PeerKey::LocalUser(2));
        let now = Instant::now();
        open(&peers, a, 1, now).unwrap();
        open(&peers, a, 2, now).unwrap();
        assert!(open(&peers, a, 3, now)
            .unwrap_err()
            .contains("too many connections from local user 1"));
        open(&peers, b, 4, now).unwrap();
        assert!(open(&peers, b, 5, now)
            .unwrap_err()
            .contains("server has too many connections"));
        peers.leave(a, 1, true);
        open(&peers, b, 6, now).unwrap();
        assert_eq!(peers.totals().0, 3);
    }

    /// Handshakes in progress do not count against the peer's cap of connections, and
    /// a peer's oldest handshake makes way for its newest past `peer_handshakes_max`:
    /// a stranger holding handshakes open neither fills the cap nor keeps a client out.
    #[test]
    fn pending_handshakes_make_way_and_do_not_fill_the_cap() {
        let peers = Peers::new(ServerLimits {
            connections_max: 100,
            peer_handshakes_max: 3,
            ..limits()
        });
        let a = PeerKey::Ip("127.0.0.1".parse().unwrap());
        let now = Instant::now();
        for id in 1..=3 {
            assert_eq!(peers.admit(a, id, 0, now), Ok(None));
        }
        // The client's handshake pushes out the stranger's oldest and goes through.
        assert_eq!(
            peers.admit(a, 10, 1, now),
            Ok(Some(Evict {
                connection: 1,
                loop_index: 0
            }))
        );
        peers.established(a, 10).unwrap();
        // The evicted one cannot complete any more.
        assert!(peers.established(a, 1).unwrap_err().contains("made way"));
        peers.leave(a, 1, false);
        for id in [2, 3] {
            peers.leave(a, id, false);
        }
        peers.leave(a, 10, true);
        assert_eq!(peers.totals(), (0, 0));
    }

    #[test]
    fn bytes_are_limited_in_all_and_per_peer_and_oversized_requests_run_alone() {
        let (a, b) = (PeerKey::LocalUser(1), PeerKey::LocalUser(2));
        let big = SMALL_REQUEST_BYTES;
        let peers = Peers::new(ServerLimits {
            data_bytes_inflight_max: 100 * big,
            peer_data_bytes_max: 60 * big,
            ..limits()
        });
        assert_eq!(peers.try_charge(a, 50 * big, 0), Some(50 * big));
        assert_eq!(peers.try_charge(a, 20 * big, 0), None, "past the peer's share");
        assert_eq!(
            peers.try_charge(a, 10 * big, 0),
            Some(10 * big),
            "the whole share"
        );
        // A small request is held back by the server's budget only.
        assert_eq!(peers.try_charge(a, big, 0), Some(big));
        peers.release(a, 11 * big);
        assert_eq!(peers.try_charge(b, 50 * big, 0), Some(50 * big));
        assert_eq!(peers.try_charge(b, 1, 0), None, "past the server's budget");
        peers.release(a, 50 * big);
        // Larger than a peer's share: charged the share, when the peer holds nothing.
        assert_eq!(
            peers.try_charge(a, 1000 * big, 0),
            None,
            "the server holds 50 of 100"
        );
        peers.release(b, 50 * big);
        assert_eq!(peers.try_charge(a, 1000 * big, 0), Some(60 * big));
        peers.release(a, 60 * big);
        // What the request holds already counts toward running alone.
        assert_eq!(peers.try_charge(a, 100, 0), Some(100));
        assert_eq!(peers.try_charge(a, 1000 * big, 100), Some(60 * big - 100));
        peers.release(a, 60 * big);
        assert_eq!(peers.totals(), (0, 0));
    }

    /// A connection refused bytes is counted as waiting by the refusal itself, so the
    /// release that frees them wakes it even when it comes before the event loop has
    /// put the connection on its waiting list. Counted by the loop afterwards (as
    /// before), that release reported nobody waiting: if it freed the last bytes held,
    /// nothing ever woke the connection, and its next request (a sync) was never read.
    #[test]
    fn a_release_right_after_a_refusal_wakes_the_refused_connection() {
        let a = PeerKey::LocalUser(1);
        let big = SMALL_REQUEST_BYTES;
        let peers = Peers::new(ServerLimits {
            data_bytes_inflight_max: 10 * big,
            peer_data_bytes_max: 10 * big,
            ..limits()
        });
        let held = peers.try_charge(a, 10 * big, 0).unwrap();
        assert_eq!(peers.try_charge(a, big, 0), None, "the server's budget is full");
        // Here the loop has not paused the refused connection yet.
        assert!(
            peers.release(a, held),
            "the last bytes held were released with nobody told to try again"
        );
        // It tries again and is charged: its wait is over, and releases wake no one.
        assert_eq!(peers.try_charge(a, big, 0), Some(big));
        peers.wait_ended();
        assert!(!peers.release(a, big));
        assert_eq!(peers.totals(), (0, 0));
    }

    #[test]
    fn a_user_that_fails_too_often_is_refused_until_its_window_ends_but_an_address_never() {
        let peers = Peers::new(limits());
        let a = PeerKey::LocalUser(1);
        let t0 = Instant::now();
        assert!(!peers.failed(a, t0).banned_now);
        assert!(peers.failed(a, t0).banned_now);
        let e = peers.admit(a, 1, 0, t0 + Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("failed authentications"), "{e}");
        // Others are not affected.
        peers.admit(PeerKey::LocalUser(2), 2, 0, t0).unwrap();
        peers.admit(a, 3, 0, t0 + Duration::from_secs(11)).unwrap();
        peers.sweep(t0 + Duration::from_secs(11));
        // An address (maybe shared by a whole login node) is counted, never refused.
        let ip = PeerKey::Ip("10.0.0.7".parse().unwrap());
        assert!(!peers.failed(ip, t0).limit_now);
        let at_limit = peers.failed(ip, t0);
        assert!(at_limit.limit_now && !at_limit.banned_now);
        peers.failed(ip, t0);
        peers.admit(ip, 4, 0, t0 + Duration::from_secs(1)).unwrap();
    }
}

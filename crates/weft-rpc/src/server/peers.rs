//! Accounting by peer and for the whole server: connections (in all and per peer),
//! failed handshakes per peer (a peer that fails too often is refused for a while),
//! and the bytes of requests and replies held in memory (in all and per peer), so
//! that no peer can take more than its share.

use super::ServerLimits;
use std::collections::HashMap;
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

#[derive(Debug, Default)]
struct PeerState {
    connections: usize,
    bytes: u64,
    /// Failed handshakes since `window_start`.
    failures: u32,
    window_start: Option<Instant>,
}

impl PeerState {
    fn idle(&self) -> bool {
        self.connections == 0 && self.bytes == 0 && self.failures == 0
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
    /// window ends.
    pub banned_now: bool,
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

    /// Counts a new connection of `peer`, or says why it is refused.
    pub fn admit(&self, peer: PeerKey, now: Instant) -> Result<(), String> {
        let limits = &self.limits;
        let mut inner = self.inner.lock().unwrap();
        if inner.connections >= limits.connections_max {
            return Err(format!(
                "the server has too many connections ({}); try again later",
                limits.connections_max
            ));
        }
        let state = inner.peers.entry(peer).or_default();
        if let Some(left) = banned_for(state, limits, now) {
            return Err(format!(
                "too many failed authentications from {peer}; refused for another {} s",
                left.as_secs().max(1)
            ));
        }
        if state.connections >= limits.peer_connections_max {
            return Err(format!(
                "too many connections from {peer} ({}); close some or try again later",
                limits.peer_connections_max
            ));
        }
        state.connections += 1;
        inner.connections += 1;
        Ok(())
    }

    /// A connection counted by `admit` closed.
    pub fn leave(&self, peer: PeerKey) {
        let mut inner = self.inner.lock().unwrap();
        inner.connections -= 1;
        if let Some(state) = inner.peers.get_mut(&peer) {
            state.connections -= 1;
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
        Failure {
            failures: state.failures,
            banned_now: state.failures == limits.auth_failures_max,
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

/// How much longer `state`'s peer is refused, if it is.
fn banned_for(state: &PeerState, limits: &ServerLimits, now: Instant) -> Option<Duration> {
    if state.failures < limits.auth_failures_max {
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
    peers.retain(|_, s| s.connections > 0 || s.bytes > 0 || s.window_start.is_some_and(|w| w > cut));
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

    #[test]
    fn connections_are_limited_in_all_and_per_peer() {
        let peers = Peers::new(limits());
        let (a, b) = (PeerKey::LocalUser(1), PeerKey::LocalUser(2));
        let now = Instant::now();
        peers.admit(a, now).unwrap();
        peers.admit(a, now).unwrap();
        assert!(peers
            .admit(a, now)
            .unwrap_err()
            .contains("too many connections from local user 1"));
        peers.admit(b, now).unwrap();
        assert!(peers
            .admit(b, now)
            .unwrap_err()
            .contains("server has too many connections"));
        peers.leave(a);
        peers.admit(b, now).unwrap();
        assert_eq!(peers.totals().0, 3);
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
    fn a_peer_that_fails_too_often_is_refused_until_its_window_ends() {
        let peers = Peers::new(limits());
        let a = PeerKey::LocalUser(1);
        let t0 = Instant::now();
        assert!(!peers.failed(a, t0).banned_now);
        assert!(peers.failed(a, t0).banned_now);
        let e = peers.admit(a, t0 + Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("failed authentications"), "{e}");
        // Others are not affected.
        peers.admit(PeerKey::LocalUser(2), t0).unwrap();
        peers.admit(a, t0 + Duration::from_secs(11)).unwrap();
        peers.sweep(t0 + Duration::from_secs(11));
    }
}

//! Capability keys, the gate's checks and revocations, and the manager's grants kept per
//! connection pool.

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

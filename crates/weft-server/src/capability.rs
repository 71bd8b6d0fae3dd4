//! The server process's side of capabilities (see `weft_rpc::capability`): the
//! manager's issuer, which signs what it grants and tells the io servers and cache
//! managers of revocations, in the background so that a chmod never waits on them;
//! and verifies capabilities for the servers that hold no key (a job's delegate asks
//! with `VerifyCapability`), against the revocations it sent.

use std::sync::mpsc;
use std::sync::Arc;
use weft_layout::{InodeId, ServerId};
use weft_meta::CapabilityIssuer;
use weft_proto::msg::Request;
use weft_rpc::{CapabilityKey, ConnectionPool};

/// Revocations waiting to be sent; past this a chmod's revocation is dropped and the
/// capabilities it would have voided lapse at their expiry (the stated bound).
const REVOCATIONS_QUEUED_MAX: usize = 1024;

pub struct Issuer {
    key: CapabilityKey,
    lifetime_ms: u64,
    revocations: mpsc::SyncSender<(Vec<InodeId>, u64)>,
    /// The time of the latest revocation (ms).
    last_revocation: std::sync::Mutex<u64>,
    /// What `verify` checks with: the key and every revocation made here.
    gate: weft_rpc::Gate,
}

impl Issuer {
    /// Signs with `key` for `lifetime_ms`; revocations go to the servers at `addrs`
    /// (io servers and cache managers) through `pool`, whose connections present the
    /// manager's server capability.
    pub fn start(
        key: CapabilityKey,
        lifetime_ms: u64,
        pool: Arc<ConnectionPool>,
        addrs: Addresses,
    ) -> Issuer {
        let (sender, receiver) = mpsc::sync_channel::<(Vec<InodeId>, u64)>(REVOCATIONS_QUEUED_MAX);
        std::thread::Builder::new()
            .name("weftd-revoke".into())
            .spawn(move || {
                while let Ok((mut inodes, mut at_ms)) = receiver.recv() {
                    // Whatever queued meanwhile goes in the same request, at the
                    // latest time (revoking a little more is harmless).
                    while let Ok((more, at)) = receiver.try_recv() {
                        if inodes.len() + more.len() > weft_proto::msg::BATCH_INODES_MAX {
                            send(&pool, &addrs, std::mem::take(&mut inodes), at_ms);
                        }
                        inodes.extend(more);
                        at_ms = at_ms.max(at);
                    }
                    send(&pool, &addrs, inodes, at_ms);
                }
            })
            .expect("spawning the revocation thread");
        Issuer {
            gate: weft_rpc::Gate::new(Some(key.clone()), "the metadata manager"),
            key,
            lifetime_ms,
            revocations: sender,
            last_revocation: std::sync::Mutex::new(0),
        }
    }
}

impl Issuer {
    /// Serves `VerifyCapability`: whether `cap` verifies here as at an io server that
    /// heard every revocation.
    pub fn verify(&self, cap: &weft_proto::Capability) -> Result<(), weft_proto::WireError> {
        self.gate.verify(cap)
    }
}

fn send(pool: &ConnectionPool, addrs: &Addresses, inodes: Vec<InodeId>, at_ms: u64) {
    if inodes.is_empty() {
        return;
    }
    let request = Request::RevokeCapabilities { inodes, at_ms };
    // Io servers added meanwhile (`weft server add`) are in the map.
    let addrs: Vec<(ServerId, String)> = addresses(addrs);
    for (server, addr) in &addrs {
        if let Err(e) = pool.call(addr, &request, &[]) {
            // That server honours the old capabilities until they expire.
            eprintln!("weftd meta: telling server {server} of revoked capabilities: {e}");
        }
    }
}

impl CapabilityIssuer for Issuer {
    fn issue_time(&self) -> u64 {
        let last = *self.last_revocation.lock().unwrap();
        weft_rpc::capability::now_ms().max(last + 1)
    }

    fn issue(&self, inode: InodeId, rights: u8, issued_ms: u64) -> weft_proto::Capability {
        self.key.issue(inode, rights, issued_ms, self.lifetime_ms)
    }

    fn revoke(&self, inodes: &[InodeId]) {
        let at_ms = {
            let mut last = self.last_revocation.lock().unwrap();
            *last = weft_rpc::capability::now_ms().max(*last + 1);
            *last
        };
        self.gate.revoke(inodes, at_ms);
        if self.revocations.try_send((inodes.to_vec(), at_ms)).is_err() {
            eprintln!(
                "weftd meta: {} revocations queued; inodes {inodes:?} keep their capabilities until they expire",
                REVOCATIONS_QUEUED_MAX
            );
        }
    }
}

/// The address of every io server and cache manager the manager reaches, shared by its
/// object calls and its revocations; io servers join it while the manager runs.
pub type Addresses = Arc<std::sync::RwLock<std::collections::HashMap<ServerId, String>>>;

/// A copy of `addrs` (no lock held across calls).
pub fn addresses(addrs: &Addresses) -> Vec<(ServerId, String)> {
    let map = addrs.read().unwrap_or_else(|p| p.into_inner());
    map.iter().map(|(id, addr)| (*id, addr.clone())).collect()
}

//! The server process's side of capabilities (see `weft_rpc::capability`): the
//! manager's issuer, which signs what it grants and tells the io servers and cache
//! managers of revocations, in the background so that a chmod never waits on them.

use std::collections::HashMap;
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
    revocations: mpsc::SyncSender<Vec<InodeId>>,
}

impl Issuer {
    /// Signs with `key` for `lifetime_ms`; revocations go to the servers at `addrs`
    /// (io servers and cache managers) through `pool`, whose connections present the
    /// manager's server capability.
    pub fn start(
        key: CapabilityKey,
        lifetime_ms: u64,
        pool: Arc<ConnectionPool>,
        addrs: HashMap<ServerId, String>,
    ) -> Issuer {
        let (sender, receiver) = mpsc::sync_channel::<Vec<InodeId>>(REVOCATIONS_QUEUED_MAX);
        std::thread::Builder::new()
            .name("weftd-revoke".into())
            .spawn(move || {
                while let Ok(mut inodes) = receiver.recv() {
                    // Whatever queued meanwhile goes in the same request.
                    while let Ok(more) = receiver.try_recv() {
                        if inodes.len() + more.len() > weft_proto::msg::BATCH_INODES_MAX {
                            send(&pool, &addrs, std::mem::take(&mut inodes));
                        }
                        inodes.extend(more);
                    }
                    send(&pool, &addrs, inodes);
                }
            })
            .expect("spawning the revocation thread");
        Issuer {
            key,
            lifetime_ms,
            revocations: sender,
        }
    }
}

fn send(pool: &ConnectionPool, addrs: &HashMap<ServerId, String>, inodes: Vec<InodeId>) {
    if inodes.is_empty() {
        return;
    }
    let request = Request::RevokeCapabilities { inodes };
    for (server, addr) in addrs {
        if let Err(e) = pool.call(addr, &request, &[]) {
            // That server honours the old capabilities until they expire.
            eprintln!("weftd meta: telling server {server} of revoked capabilities: {e}");
        }
    }
}

impl CapabilityIssuer for Issuer {
    fn issue(&self, inode: InodeId, rights: u8) -> weft_proto::Capability {
        self.key.issue(inode, rights, self.lifetime_ms)
    }

    fn revoke(&self, inodes: &[InodeId]) {
        if self.revocations.try_send(inodes.to_vec()).is_err() {
            eprintln!(
                "weftd meta: {} revocations queued; inodes {inodes:?} keep their capabilities until they expire",
                REVOCATIONS_QUEUED_MAX
            );
        }
    }
}

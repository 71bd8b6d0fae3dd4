//! Where a client's connections get their capabilities: the metadata manager, which
//! grants one after the permission check of an open (`GrantCapability`). Kept per
//! inode and right until close to expiry, so that the manager is asked once per file,
//! right and lifetime, however many io servers the file spans; renewed transparently
//! (a long-lived open file never sees its capability expire), and asked again when a
//! server refused one as revoked (the manager checks permission again).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Weak};
use weft_layout::InodeId;
use weft_proto::msg::{Request, Response};
use weft_proto::{Capability, Cred, ErrorCode};
use weft_rpc::capability::{now_ms, renew_due};
use weft_rpc::{CapabilitySource, ConnectionPool, RpcError};

/// Most capabilities kept; past this the oldest are forgotten (and asked for again
/// when next needed).
const KEPT_MAX: usize = 4096;

pub(crate) struct ManagerGrants {
    pool: Weak<ConnectionPool>,
    meta_addr: String,
    cred: Cred,
    kept: Mutex<HashMap<(InodeId, u8), Capability>>,
    /// The manager said the cluster asks for no capabilities.
    off: AtomicBool,
}

impl ManagerGrants {
    pub(crate) fn new(pool: Weak<ConnectionPool>, meta_addr: &str, cred: Cred) -> ManagerGrants {
        ManagerGrants {
            pool,
            meta_addr: meta_addr.to_owned(),
            cred,
            kept: Mutex::default(),
            off: AtomicBool::new(false),
        }
    }
}

impl CapabilitySource for ManagerGrants {
    fn capability(&self, inode: InodeId, rights: u8) -> Result<Option<Capability>, RpcError> {
        if self.off.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if let Some(cap) = self.kept.lock().unwrap().get(&(inode, rights)) {
            if !renew_due(cap, now_ms()) {
                return Ok(Some(cap.clone()));
            }
        }
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
        match pool.call(&self.meta_addr, &request, &[]) {
            Ok((Response::Capability(cap), _)) => {
                let mut kept = self.kept.lock().unwrap();
                if kept.len() >= KEPT_MAX {
                    let now = now_ms();
                    kept.retain(|_, c| !renew_due(c, now));
                    if kept.len() >= KEPT_MAX {
                        kept.clear();
                    }
                }
                kept.insert((inode, rights), cap.clone());
                Ok(Some(cap))
            }
            Ok((other, _)) => Err(RpcError::Protocol {
                addr: self.meta_addr.clone(),
                detail: format!("unexpected reply to a capability request: {other:?}"),
            }),
            Err(RpcError::Remote { error, .. }) if error.code == ErrorCode::Unsupported => {
                self.off.store(true, Ordering::Relaxed);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn forget(&self, inode: InodeId) {
        self.kept.lock().unwrap().retain(|(i, _), _| *i != inode);
    }
}

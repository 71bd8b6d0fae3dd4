//! The metadata manager's calls to io servers and cache managers (`weft_meta`'s
//! `ObjectServers`), over the same transport as clients use.

use weft_layout::{InodeId, ServerId};
use weft_meta::ObjectServers;
use weft_proto::msg::{roles, Request, Response};
use weft_proto::{ErrorCode, IoServer, WireError};
use weft_rpc::{ClientAuth, ConnectionPool};

/// The manager's calls to io servers, over the same transport as clients use.
pub(crate) struct NetObjectServers {
    pub(crate) pool: ConnectionPool,
    pub(crate) addrs: crate::capability::Addresses,
    /// What a joining io server's handshake proves (`join`).
    pub(crate) auth: ClientAuth,
    /// When `incarnation` last failed to connect to each server: it tries again only
    /// `INCARNATION_RETRY` later, so creates do not each wait for a connect to a server
    /// that is down.
    pub(crate) incarnation_failed: std::sync::Mutex<std::collections::HashMap<ServerId, std::time::Instant>>,
}

/// How long `incarnation` answers `None` at once after a connect to a server failed.
const INCARNATION_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

impl NetObjectServers {
    fn addr(&self, server: ServerId) -> Result<String, WireError> {
        let map = self.addrs.read().unwrap_or_else(|p| p.into_inner());
        map.get(&server).cloned().ok_or_else(|| {
            WireError::new(
                ErrorCode::Unavailable,
                format!("io server {server} is not in the cluster description"),
            )
        })
    }

    /// `request` to io server `server`: its answer.
    fn answer(&self, server: ServerId, request: &Request) -> Result<Response, WireError> {
        let addr = self.addr(server)?;
        match self.pool.call(&addr, request, &[]) {
            Ok((response, _)) => Ok(response),
            Err(weft_rpc::RpcError::Remote { error, .. }) => Err(error),
            Err(e) => Err(WireError::new(e.code(), format!("io server {server}: {e}"))),
        }
    }

    fn call(&self, server: ServerId, request: Request) -> Result<(), WireError> {
        self.answer(server, &request).map(|_| ())
    }
}

impl ObjectServers for NetObjectServers {
    /// From the pooled connection, made again if the old one broke (the server ended):
    /// one connect after a restart, none otherwise. A server that refuses, is marked
    /// unresponsive, or failed to connect less than `INCARNATION_RETRY` ago answers
    /// `None` at once.
    fn incarnation(&self, server: ServerId) -> Option<u64> {
        let addr = self.addr(server).ok()?;
        if let Some(c) = self.pool.existing(&addr) {
            return Some(c.incarnation());
        }
        let failed = || self.incarnation_failed.lock().unwrap_or_else(|p| p.into_inner());
        if failed()
            .get(&server)
            .is_some_and(|at| at.elapsed() < INCARNATION_RETRY)
        {
            return None;
        }
        match self.pool.get(&addr) {
            Ok(c) => {
                failed().remove(&server);
                Some(c.incarnation())
            }
            Err(_) => {
                failed().insert(server, std::time::Instant::now());
                None
            }
        }
    }
    fn create_objects(&self, server: ServerId, inodes: &[InodeId]) -> Result<(), WireError> {
        self.call(
            server,
            Request::ObjCreate {
                inodes: inodes.to_vec(),
            },
        )
    }
    fn precreate_objects(&self, server: ServerId, inodes: &[InodeId]) -> Result<(), WireError> {
        self.call(
            server,
            Request::ObjPrecreate {
                inodes: inodes.to_vec(),
            },
        )
    }
    fn remove_objects(&self, server: ServerId, inodes: &[InodeId]) -> Result<(), WireError> {
        self.call(
            server,
            Request::ObjRemove {
                inodes: inodes.to_vec(),
            },
        )
    }
    fn join(&self, server: &IoServer) -> Result<(), WireError> {
        let refused = |why: String| {
            WireError::new(
                ErrorCode::Unavailable,
                format!("io server {} at {}: {why}", server.id, server.addr),
            )
        };
        // A fresh connection: the handshake proves the cluster key both ways and the
        // protocol version, and says the server's id and roles.
        let connection =
            weft_rpc::Connection::connect(&server.addr, "weftd meta", &self.auth, self.pool.timeouts())
                .map_err(|e| refused(format!("no answer as a server of this cluster: {e}")))?;
        let (id, roles) = connection.server();
        if id != server.id {
            return Err(refused(format!(
                "the server there is server {id}, not {}",
                server.id
            )));
        }
        if roles & roles::IO == 0 {
            return Err(refused(
                "the server there has no io role (weftd --role io)".into(),
            ));
        }
        self.addrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(server.id, server.addr.clone());
        Ok(())
    }
    fn migrate_object(&self, server: ServerId, request: Request) -> Result<u64, WireError> {
        match self.answer(server, &request)? {
            Response::Stamp(stamp) => Ok(stamp),
            _ => Ok(0),
        }
    }
    fn set_mtime(
        &self,
        server: ServerId,
        inodes: &[InodeId],
        mtime: weft_proto::Timespec,
    ) -> Result<(), WireError> {
        self.call(
            server,
            Request::ObjTimes {
                inodes: inodes.to_vec(),
                mtime,
            },
        )
    }
    /// Every request sent, then `meanwhile` run, then the answers awaited: one round
    /// trip for the lot, with no thread per server (threads cost more than the round
    /// trip on a loaded manager). A request that could not be sent, or was refused for
    /// want of a fresh capability, is made again alone, as `call` does.
    fn set_mtime_each(
        &self,
        servers: &[ServerId],
        inodes: &[InodeId],
        mtime: weft_proto::Timespec,
        meanwhile: &mut dyn FnMut(),
    ) -> Vec<Result<(), WireError>> {
        let request = Request::ObjTimes {
            inodes: inodes.to_vec(),
            mtime,
        };
        let connections: Vec<_> = servers
            .iter()
            .map(|server| self.addr(*server).ok().and_then(|addr| self.pool.get(&addr).ok()))
            .collect();
        let pending: Vec<_> = connections
            .iter()
            .map(|connection| connection.as_ref().and_then(|c| c.send(&request, &[]).ok()))
            .collect();
        meanwhile();
        servers
            .iter()
            .zip(pending)
            .map(|(&server, call)| {
                let Some(call) = call else {
                    // Not sent (no connection, or it had broken): alone, as `call` does.
                    return self.call(server, request.clone());
                };
                match call.wait() {
                    Ok(_) => Ok(()),
                    Err(weft_rpc::RpcError::Remote { error, .. })
                        if error.code == ErrorCode::CapabilityRequired =>
                    {
                        self.call(server, request.clone())
                    }
                    Err(weft_rpc::RpcError::Remote { error, .. }) => Err(error),
                    Err(e) => Err(WireError::new(e.code(), format!("io server {server}: {e}"))),
                }
            })
            .collect()
    }
    fn object_bytes(
        &self,
        server: ServerId,
        items: &[(InodeId, weft_proto::Striping)],
    ) -> Result<Vec<u64>, WireError> {
        let request = Request::ObjStat {
            items: items.to_vec(),
        };
        match self.answer(server, &request)? {
            Response::ObjStats(stats) if stats.len() == items.len() => {
                Ok(stats.into_iter().map(|(_, allocated)| allocated).collect())
            }
            other => Err(WireError::new(
                ErrorCode::Malformed,
                format!("io server {server} answered ObjStat with {other:?}"),
            )),
        }
    }
    fn object_stamps(
        &self,
        server: ServerId,
        items: &[(InodeId, weft_proto::Striping)],
    ) -> Result<Vec<weft_proto::ObjStamped>, WireError> {
        let request = Request::ObjStamp {
            items: items.to_vec(),
        };
        match self.answer(server, &request)? {
            Response::ObjStamps(stamped) if stamped.len() == items.len() => Ok(stamped),
            other => Err(WireError::new(
                ErrorCode::Malformed,
                format!("io server {server} answered ObjStamp with {other:?}"),
            )),
        }
    }
    fn cache_migrate(
        &self,
        manager: ServerId,
        inode: InodeId,
        step: u8,
        layout: Option<&weft_layout::Layout>,
    ) -> Result<u64, WireError> {
        let request = Request::CacheMigrate {
            inode,
            step,
            layout: layout.cloned(),
        };
        let named = |code, message: &dyn std::fmt::Display| {
            WireError::new(code, format!("cache manager {manager}: {message}"))
        };
        match self.pool.call(&self.addr(manager)?, &request, &[]) {
            Ok((response, _)) => Ok(if let Response::Stamp(epoch) = response {
                epoch
            } else {
                0
            }),
            Err(weft_rpc::RpcError::Remote { error, .. }) => Err(named(error.code, &error.message)),
            Err(e) => Err(named(e.code(), &e)),
        }
    }
    fn drop_cached(&self, manager: ServerId, inodes: &[InodeId]) -> Result<(), WireError> {
        self.call(
            manager,
            Request::CacheDrop {
                inodes: inodes.to_vec(),
            },
        )
    }
}

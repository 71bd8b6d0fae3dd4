//! `ConnectionPool`: one connection per server address, made on first use, remade
//! after a break, with the authentication and capability source they share.

use super::{CallReply, Connection, Timeouts};
use crate::auth::ClientAuth;
use crate::capability::CapabilitySource;
use crate::error::RpcError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use weft_proto::msg::Request;
use weft_proto::ErrorCode;

/// Connections by address, created on first use and replaced when broken, so that a
/// restarted server is reached again without restarting the client.
pub struct ConnectionPool {
    pub(super) client_name: String,
    pub(super) auth: ClientAuth,
    pub(super) timeouts: Timeouts,
    pub(super) connections: Mutex<HashMap<String, Arc<Connection>>>,
    /// How errors name the server behind an address, where that differs from it.
    pub(super) labels: Mutex<HashMap<String, String>>,
    /// Addresses of servers found hung (they took a connection and did not answer),
    /// with the error and when: `get` fails at once with it for a request timeout.
    pub(super) unresponsive: Mutex<HashMap<String, (RpcError, Instant)>>,
    /// Given to every connection the pool makes.
    pub(super) capabilities: std::sync::RwLock<Option<Arc<dyn CapabilitySource>>>,
    /// What connections to these addresses prove instead of `auth` (a job's
    /// delegates: the job's key); at most `AUTH_OVERRIDES_MAX`.
    pub(super) auth_overrides: Mutex<HashMap<String, ClientAuth>>,
}

/// Most addresses a pool proves another key to (`ConnectionPool::set_auth`); past it,
/// those it holds no connection to are forgotten.
pub(super) const AUTH_OVERRIDES_MAX: usize = 4096;

impl ConnectionPool {
    pub fn new(client_name: &str, auth: ClientAuth, timeouts: Timeouts) -> ConnectionPool {
        ConnectionPool {
            client_name: client_name.to_owned(),
            auth,
            timeouts,
            connections: Mutex::new(HashMap::new()),
            labels: Mutex::new(HashMap::new()),
            unresponsive: Mutex::new(HashMap::new()),
            capabilities: Default::default(),
            auth_overrides: Mutex::new(HashMap::new()),
        }
    }

    /// Connections to `addr` prove `auth` rather than the pool's own (a job's
    /// delegates, which serve only holders of the job's key). A connection already made
    /// there is dropped, so the next call connects with `auth`.
    pub fn set_auth(&self, addr: &str, auth: ClientAuth) {
        let mut overrides = self.auth_overrides.lock().unwrap();
        if overrides.len() >= AUTH_OVERRIDES_MAX && !overrides.contains_key(addr) {
            let connections = self.connections.lock().unwrap();
            overrides.retain(|a, _| connections.contains_key(a));
        }
        overrides.insert(addr.to_owned(), auth);
        drop(overrides);
        self.connections.lock().unwrap().remove(addr);
    }

    /// Data requests on this pool's connections (made from now on) get their
    /// capabilities from `source`.
    pub fn set_capability_source(&self, source: Arc<dyn CapabilitySource>) {
        *self.capabilities.write().unwrap() = Some(source);
    }

    /// Where this pool's data requests get their capabilities, if anywhere.
    pub fn capability_source(&self) -> Option<Arc<dyn CapabilitySource>> {
        self.capabilities.read().unwrap().clone()
    }

    /// The server at `addr` was found hung with `error` by another way of reaching it
    /// (its Unix socket): calls to `addr` fail at once with that error until a request
    /// timeout has passed, rather than waiting a second timeout for the same server.
    pub fn note_unresponsive(&self, addr: &str, error: RpcError) {
        self.unresponsive
            .lock()
            .unwrap()
            .insert(addr.to_owned(), (error, Instant::now()));
    }

    /// Errors of connections to `addr` will name the server as `label`.
    pub fn set_label(&self, addr: &str, label: &str) {
        self.labels
            .lock()
            .unwrap()
            .insert(addr.to_owned(), label.to_owned());
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// The live connection to `addr` this pool holds, if any (no connecting).
    pub fn existing(&self, addr: &str) -> Option<Arc<Connection>> {
        self.connections
            .lock()
            .unwrap()
            .get(addr)
            .filter(|c| !c.is_broken())
            .cloned()
    }

    /// A live connection to `addr`, connecting if there is none.
    pub fn get(&self, addr: &str) -> Result<Arc<Connection>, RpcError> {
        if let Some(c) = self.connections.lock().unwrap().get(addr) {
            if !c.is_broken() {
                return Ok(c.clone());
            }
        }
        {
            let mut unresponsive = self.unresponsive.lock().unwrap();
            if let Some((error, at)) = unresponsive.get(addr) {
                if at.elapsed() < self.timeouts.request {
                    return Err(error.clone());
                }
                unresponsive.remove(addr);
            }
        }
        // Connect without holding the lock: a dead server must not stall calls to others.
        let label = self
            .labels
            .lock()
            .unwrap()
            .get(addr)
            .cloned()
            .unwrap_or_else(|| addr.to_owned());
        let auth = self.auth_overrides.lock().unwrap().get(addr).cloned();
        let auth = auth.as_ref().unwrap_or(&self.auth);
        let fresh = Connection::connect_as(addr, &label, &self.client_name, auth, self.timeouts)?;
        if let Some(source) = self.capabilities.read().unwrap().clone() {
            fresh.set_capability_source(source);
        }
        let mut map = self.connections.lock().unwrap();
        match map.get(addr) {
            Some(existing) if !existing.is_broken() => Ok(existing.clone()),
            _ => {
                map.insert(addr.to_owned(), fresh.clone());
                Ok(fresh)
            }
        }
    }

    /// Calls `addr`, retrying once on a fresh connection if the old one had broken
    /// before the request went out (a server restarted since the last call).
    /// A request refused for want of a capability (revoked since it was presented) is
    /// sent once more with a fresh one.
    pub fn call(&self, addr: &str, request: &Request, data: &[u8]) -> Result<CallReply, RpcError> {
        let connection = self.get(addr)?;
        let sent = connection.send(request, data);
        match sent {
            Ok(pending) => match pending.wait() {
                Err(RpcError::Remote { error, .. }) if error.code == ErrorCode::CapabilityRequired => {
                    connection.call(request, data)
                }
                other => other,
            },
            Err(e) if e.is_transport() => self.get(addr)?.call(request, data),
            Err(e) => Err(e),
        }
    }
}

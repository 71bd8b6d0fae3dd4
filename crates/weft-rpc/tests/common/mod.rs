//! What the transport's tests share: a cluster key, servers on loopback that hold it,
//! and raw connections that completed the handshake.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;
use weft_layout::ServerId;
use weft_rpc::auth::client_handshake;
use weft_rpc::{
    serve, ClientAuth, ClusterKey, Handler, ServerHandle, ServerIdentity, ServerLimits, Timeouts,
};

/// The key of the tests' cluster (a fixed one: tests must be repeatable).
pub fn key() -> ClusterKey {
    ClusterKey::from_bytes([0x5a; 32])
}

/// A key of some other cluster.
pub fn other_key() -> ClusterKey {
    ClusterKey::from_bytes([0xa5; 32])
}

pub fn auth() -> ClientAuth {
    ClientAuth::cluster(key())
}

pub fn timeouts(ms: u64) -> Timeouts {
    Timeouts {
        connect: Duration::from_millis(ms),
        request: Duration::from_millis(ms),
    }
}

pub fn identity(id: u32) -> ServerIdentity {
    ServerIdentity {
        server_id: ServerId(id),
        roles: 2,
        incarnation: 1,
        build: "test",
        munge: false,
    }
}

/// A server with `handler` on an ephemeral loopback port.
pub fn start(handler: Arc<dyn Handler>, id: u32, limits: ServerLimits) -> ServerHandle {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    serve(listener, handler, identity(id), limits, key()).unwrap()
}

/// A raw TCP connection that completed the handshake with `key`.
pub fn raw(addr: impl std::net::ToSocketAddrs, key: &ClusterKey) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    client_handshake(&mut s, "raw", "raw", &ClientAuth::cluster(key.clone()), 10_000).unwrap();
    s
}

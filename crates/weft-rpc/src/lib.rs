//! Weft's transport: framed requests multiplexed over one authenticated connection
//! per peer (TCP, or a Unix socket on the server's machine, whose bulk data moves
//! through a segment of shared memory where one can be had: `shm`).
//!
//! Invariant: one connection carries many requests in flight, matched to responses by
//! request id; no call waits longer than its timeout; a broken connection fails every
//! call waiting on it with an error naming the peer; no request is served on a
//! connection before both ends proved they hold the cluster key.

pub mod auth;
pub mod capability;
pub mod client;
pub mod frame_io;
pub mod server;
pub mod shm;
pub mod stream;

pub use auth::{munge_credential, munge_socket, ClientAuth, ClusterKey, KeyError};
pub use capability::{CapabilityKey, CapabilitySource, CapabilityVerifier, Gate, ServerCapabilities};
pub use client::{
    CallReply, Connection, ConnectionPool, PendingCall, ReplySink, RpcError, SinkReply, Timeouts,
    BIG_REPLY_BYTES,
};
pub use server::{
    new_incarnation, serve, Changes, ConnectionId, FileReply, Handler, Inline, Peer, ReplyInto, ServerHandle,
    ServerIdentity, ServerLimits,
};

//! The transport's error: what failed between a client and a server.

use weft_proto::frame::PROTOCOL_VERSION;
use weft_proto::{ErrorCode, WireError};

#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("connection to {addr} lost: {reason}")]
    Disconnected { addr: String, reason: String },
    #[error("no answer from {addr} within {after_ms} ms")]
    TimedOut { addr: String, after_ms: u64 },
    #[error("protocol error talking to {addr}: {detail}")]
    Protocol { addr: String, detail: String },
    #[error("{addr}: {error}")]
    Remote { addr: String, error: WireError },
    #[error("{addr} speaks Weft protocol version {server_version}, this program version {PROTOCOL_VERSION}; upgrade the older side")]
    ProtocolVersion { addr: String, server_version: u16 },
    /// The handshake failed: the server refused this client's proof, or the server
    /// could not prove it holds the cluster key.
    #[error("{addr} refused the connection: {reason}")]
    Authentication { addr: String, reason: String },
}

impl RpcError {
    /// The error as a wire error code, for boundaries that speak codes or errno.
    pub fn code(&self) -> ErrorCode {
        match self {
            RpcError::Connect { .. } | RpcError::Disconnected { .. } => ErrorCode::Unavailable,
            RpcError::TimedOut { .. } => ErrorCode::TimedOut,
            RpcError::Protocol { .. } => ErrorCode::Io,
            RpcError::Remote { error, .. } => error.code,
            RpcError::ProtocolVersion { .. } => ErrorCode::ProtocolVersion,
            RpcError::Authentication { .. } => ErrorCode::PermissionDenied,
        }
    }

    /// True when the request may not have reached the server or its answer was lost,
    /// so that a fresh connection could succeed.
    pub fn is_transport(&self) -> bool {
        matches!(self, RpcError::Connect { .. } | RpcError::Disconnected { .. })
    }
}

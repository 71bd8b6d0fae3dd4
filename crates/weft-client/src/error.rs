//! The client's error type: what failed, which server, and a stable code.

use weft_proto::msg::Response;
use weft_proto::ErrorCode;
use weft_rpc::RpcError;

#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// A server refused the operation (not found, permission, ...).
    #[error("{message}")]
    Refused { code: ErrorCode, message: String },
    /// A server could not be reached or stopped answering.
    #[error("{0}")]
    Transport(RpcError),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    Config(String),
}

impl ClientError {
    pub fn code(&self) -> ErrorCode {
        match self {
            ClientError::Refused { code, .. } => *code,
            ClientError::Transport(e) => e.code(),
            ClientError::InvalidArgument(_) => ErrorCode::InvalidArgument,
            ClientError::Config(_) => ErrorCode::Unavailable,
        }
    }

    /// The errno a POSIX caller expects for this error.
    pub fn errno(&self) -> i32 {
        self.code().errno()
    }

    pub(crate) fn refused(code: ErrorCode, message: impl Into<String>) -> ClientError {
        ClientError::Refused {
            code,
            message: message.into(),
        }
    }

    /// Prefixes the message with what was being done (a path, usually).
    /// A message that already names a path (the manager names the component it could
    /// not find) is left as it is, rather than saying the path twice.
    pub(crate) fn context(self, what: &str) -> ClientError {
        match self {
            ClientError::Refused { code, message } if what.is_empty() || message.starts_with('/') => {
                ClientError::Refused { code, message }
            }
            ClientError::Refused { code, message } => ClientError::Refused {
                code,
                message: format!("{what}: {message}"),
            },
            other => other,
        }
    }
}

impl From<RpcError> for ClientError {
    fn from(e: RpcError) -> Self {
        match e {
            RpcError::Remote { error, .. } => ClientError::Refused {
                code: error.code,
                message: error.message,
            },
            other => ClientError::Transport(other),
        }
    }
}

impl From<weft_config::ConfigError> for ClientError {
    fn from(e: weft_config::ConfigError) -> Self {
        ClientError::Config(e.to_string())
    }
}

/// A server answered with a response of the wrong kind.
pub(crate) fn unexpected(response: &Response) -> ClientError {
    ClientError::refused(
        ErrorCode::Io,
        format!("unexpected answer from server: {response:?}"),
    )
}

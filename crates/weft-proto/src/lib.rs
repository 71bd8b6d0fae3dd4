//! Weft's wire protocol: frame headers, a bounded binary codec, messages and error codes.
//!
//! Invariant: this crate does no I/O; it turns bytes into typed messages and back, and
//! rejects anything malformed or oversized with a [`DecodeError`] instead of panicking.
//!
//! A frame is a fixed 32-byte [`FrameHeader`], then `header_len` bytes of encoded
//! message, then `data_len` bytes of bulk data that travel raw (never re-encoded).

pub mod capability;
pub mod codec;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod lock_table;
pub mod msg;
pub mod name;
pub mod pattern;
pub mod space;
pub mod types;

pub use capability::{Capability, Need};
pub use codec::{DecodeError, Reader, Wire, Writer};
pub use error::{ErrorCode, WireError};
pub use frame::{FrameHeader, FrameKind, FRAME_HEADER_BYTES, PROTOCOL_VERSION};

pub use msg::{CommitInfo, Opcode, Request, Response, SharedOp, ViewId, XattrSet};
pub use name::Name;
pub use pattern::{AccessPattern, PatternRef};
pub use types::*;

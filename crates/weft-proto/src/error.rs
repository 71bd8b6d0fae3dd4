//! Stable numbered error codes carried on the wire, and their errno equivalents.
//!
//! The numbers never change meaning; new codes get new numbers. The C ABI returns
//! `-errno()` and the FUSE adapter replies with `errno()`.

use crate::codec::{DecodeError, Reader, Wire, Writer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    NotFound = 1,
    Exists = 2,
    NotDirectory = 3,
    IsDirectory = 4,
    NotEmpty = 5,
    PermissionDenied = 6,
    InvalidArgument = 7,
    NameTooLong = 8,
    NoSpace = 9,
    Io = 10,
    ProtocolVersion = 11,
    Malformed = 12,
    TooLarge = 13,
    UnknownOpcode = 14,
    /// The file was removed while a client still used it.
    Stale = 15,
    Unavailable = 16,
    TimedOut = 17,
    Unsupported = 18,
    Internal = 19,
    InvalidLayout = 20,
    Busy = 21,
    NotPermitted = 22,
    CrossesDirectory = 23,
    TooManyLinks = 40,
    /// No such extended attribute.
    NoData = 41,
    /// A value does not fit the buffer or range given (an xattr name too long).
    OutOfRange = 42,
    /// An argument too large (an xattr value past the limit).
    ArgumentTooLarge = 43,
    /// An io server or cache manager has no valid capability for the object and the
    /// operation on this connection (none presented, or it expired or was revoked):
    /// ask the metadata manager for one and present it.
    CapabilityRequired = 44,
    /// A user's, group's or project's quota refuses the allocation (`quota.rs`).
    QuotaExceeded = 45,
}

impl ErrorCode {
    pub fn from_u16(v: u16) -> ErrorCode {
        use ErrorCode::*;
        match v {
            1 => NotFound,
            2 => Exists,
            3 => NotDirectory,
            4 => IsDirectory,
            5 => NotEmpty,
            6 => PermissionDenied,
            7 => InvalidArgument,
            8 => NameTooLong,
            9 => NoSpace,
            10 => Io,
            11 => ProtocolVersion,
            12 => Malformed,
            13 => TooLarge,
            14 => UnknownOpcode,
            15 => Stale,
            16 => Unavailable,
            17 => TimedOut,
            18 => Unsupported,
            20 => InvalidLayout,
            21 => Busy,
            22 => NotPermitted,
            23 => CrossesDirectory,
            40 => TooManyLinks,
            41 => NoData,
            42 => OutOfRange,
            43 => ArgumentTooLarge,
            44 => CapabilityRequired,
            45 => QuotaExceeded,
            _ => Internal,
        }
    }

    pub fn errno(self) -> i32 {
        use ErrorCode::*;
        match self {
            NotFound => libc_errno::ENOENT,
            Exists => libc_errno::EEXIST,
            NotDirectory => libc_errno::ENOTDIR,
            IsDirectory => libc_errno::EISDIR,
            NotEmpty => libc_errno::ENOTEMPTY,
            PermissionDenied | CapabilityRequired => libc_errno::EACCES,
            InvalidArgument | InvalidLayout | Malformed | UnknownOpcode => libc_errno::EINVAL,
            NameTooLong => libc_errno::ENAMETOOLONG,
            NoSpace => libc_errno::ENOSPC,
            Io | Internal | ProtocolVersion => libc_errno::EIO,
            TooLarge => libc_errno::EFBIG,
            Stale => libc_errno::ESTALE,
            Unavailable => libc_errno::EHOSTDOWN,
            TimedOut => libc_errno::ETIMEDOUT,
            Unsupported => libc_errno::EOPNOTSUPP,
            Busy => libc_errno::EBUSY,
            NotPermitted => libc_errno::EPERM,
            CrossesDirectory => libc_errno::EINVAL,
            TooManyLinks => libc_errno::EMLINK,
            NoData => libc_errno::ENODATA,
            OutOfRange => libc_errno::ERANGE,
            ArgumentTooLarge => libc_errno::E2BIG,
            QuotaExceeded => libc_errno::EDQUOT,
        }
    }
}

/// Linux errno values, spelled out so that this crate needs no libc.
pub mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const E2BIG: i32 = 7;
    pub const EBADF: i32 = 9;
    pub const EACCES: i32 = 13;
    pub const EBUSY: i32 = 16;
    pub const EEXIST: i32 = 17;
    pub const ENOTDIR: i32 = 20;
    pub const EISDIR: i32 = 21;
    pub const EINVAL: i32 = 22;
    pub const EFBIG: i32 = 27;
    pub const ENOSPC: i32 = 28;
    pub const EMLINK: i32 = 31;
    pub const ERANGE: i32 = 34;
    pub const ENAMETOOLONG: i32 = 36;
    pub const ENOTEMPTY: i32 = 39;
    pub const ENODATA: i32 = 61;
    pub const EOPNOTSUPP: i32 = 95;
    pub const ETIMEDOUT: i32 = 110;
    pub const EHOSTDOWN: i32 = 112;
    pub const ESTALE: i32 = 116;
    pub const EDQUOT: i32 = 122;
}

/// An error as it travels in a response: a code and a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct WireError {
    pub code: ErrorCode,
    pub message: String,
}

impl WireError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        WireError {
            code,
            message: message.into(),
        }
    }
}

impl Wire for WireError {
    fn encode(&self, w: &mut Writer) {
        w.u16(self.code as u16);
        // Messages are for people; cut them rather than exceed the string limit.
        let mut m = self.message.as_str();
        if m.len() > 1024 {
            let mut end = 1024;
            while !m.is_char_boundary(end) {
                end -= 1;
            }
            m = &m[..end];
        }
        w.str(m);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(WireError {
            code: ErrorCode::from_u16(r.u16()?),
            message: r.string()?,
        })
    }
}

impl From<DecodeError> for WireError {
    fn from(e: DecodeError) -> Self {
        let code = match e {
            DecodeError::TooLarge { .. } => ErrorCode::TooLarge,
            DecodeError::UnknownOpcode(_) => ErrorCode::UnknownOpcode,
            _ => ErrorCode::Malformed,
        };
        WireError::new(code, e.to_string())
    }
}

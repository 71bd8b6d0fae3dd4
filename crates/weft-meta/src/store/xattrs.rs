//! The rules of extended attributes as Linux has them for the namespaces Weft stores:
//! `user.*` (regular files and directories; read permission to read, write permission
//! to change, sticky directories their owner's) and `trusted.*` (root only, and hidden
//! from others' listings). Other namespaces (`security.*`, `system.*` ACLs) are not
//! supported. Limits keep one inode's attributes small.

use super::access::{is_owner_or_root, is_root, permits, MAY_WRITE, MODE_STICKY};
use super::names::quoted;
use super::record::InodeRecord;
use super::{require, Namespace, StorageResult};
use weft_layout::InodeId;
use weft_proto::msg::{XATTR_NAME_BYTES_MAX, XATTR_VALUE_BYTES_MAX};
use weft_proto::{Cred, ErrorCode, FileKind, WireError};

/// Most extended attributes one inode may have.
pub const XATTRS_PER_INODE_MAX: usize = 128;
/// Most bytes (names and values) of one inode's extended attributes.
pub const XATTR_BYTES_PER_INODE_MAX: usize = 256 * 1024;

const USER: &[u8] = b"user.";
const TRUSTED: &[u8] = b"trusted.";

/// Checks `name` and returns whether it is a `trusted.*` name.
pub fn check_xattr_name(name: &[u8]) -> Result<bool, WireError> {
    if name.len() > XATTR_NAME_BYTES_MAX {
        return Err(WireError::new(
            ErrorCode::OutOfRange,
            format!(
                "extended attribute name of {} bytes, longer than {XATTR_NAME_BYTES_MAX}",
                name.len()
            ),
        ));
    }
    if name.contains(&0) {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            "extended attribute name contains NUL",
        ));
    }
    let (trusted, rest) = if let Some(rest) = name.strip_prefix(USER) {
        (false, rest)
    } else if let Some(rest) = name.strip_prefix(TRUSTED) {
        (true, rest)
    } else {
        return Err(WireError::new(
            ErrorCode::Unsupported,
            format!(
                "extended attribute {}: only the user.* and trusted.* namespaces are supported",
                quoted(name)
            ),
        ));
    };
    if rest.is_empty() {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("extended attribute name {} is only a namespace", quoted(name)),
        ));
    }
    Ok(trusted)
}

/// Checks the value's size.
pub fn check_xattr_value(value: &[u8]) -> Result<(), WireError> {
    if value.len() > XATTR_VALUE_BYTES_MAX {
        return Err(WireError::new(
            ErrorCode::ArgumentTooLarge,
            format!(
                "extended attribute value of {} bytes, larger than {XATTR_VALUE_BYTES_MAX}",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// Linux's `xattr_permission` for reading (`want` = MAY_READ) or changing (MAY_WRITE)
/// attribute `name` of `record`. A refusal to read is `NoData`, as Linux answers.
pub fn xattr_permission(
    cred: &Cred,
    inode: InodeId,
    record: &InodeRecord,
    trusted: bool,
    want: u32,
) -> Result<(), WireError> {
    let writing = want & MAY_WRITE != 0;
    let refused = |why: String| {
        if writing {
            WireError::new(ErrorCode::NotPermitted, why)
        } else {
            WireError::new(ErrorCode::NoData, why)
        }
    };
    if trusted {
        if !is_root(cred) {
            return Err(refused(format!(
                "uid {} may not use trusted.* attributes of inode {inode}",
                cred.uid
            )));
        }
        return Ok(());
    }
    if !matches!(record.kind, FileKind::File | FileKind::Directory) {
        return Err(refused(format!(
            "inode {inode} is a {:?}: user.* attributes are for files and directories",
            record.kind
        )));
    }
    if record.is_directory() && record.mode & MODE_STICKY != 0 && writing && !is_owner_or_root(cred, record) {
        return Err(WireError::new(
            ErrorCode::NotPermitted,
            format!(
                "uid {} may not change attributes of sticky directory {inode}: not its owner",
                cred.uid
            ),
        ));
    }
    if !permits(cred, record, want) {
        // Linux answers EACCES here whether reading or writing.
        require(cred, record, want, || format!("inode {inode}"))?;
    }
    Ok(())
}

/// Names and total bytes of `inode`'s attributes, other than `except`.
pub fn xattr_usage(ns: &impl Namespace, inode: InodeId, except: &[u8]) -> Result<(usize, usize), WireError> {
    let (mut count, mut bytes) = (0, 0);
    for item in super::xattr_range(ns.xattrs(), inode)? {
        let (key, value) = item.storage()?;
        let name = key.value().1;
        if name != except {
            count += 1;
            bytes += name.len() + value.value().len();
        }
    }
    Ok((count, bytes))
}

//! The rules of extended attributes as Linux has them for the namespaces Weft stores:
//! `user.*` (regular files and directories; read permission to read, write permission
//! to change, sticky directories their owner's), `trusted.*` (root only, and hidden
//! from others' listings) and `security.*` (root only to set or remove, as the kernel's
//! capability module has it without another security module; read and listed by
//! anyone, as ext4 answers: `cp -a` and `tar --xattrs` carry SELinux labels and the
//! like). `security.capability` (file capabilities) is not stored: Linux drops it at
//! a write or chown by another user, which Weft's io servers could not do, so it
//! would outlive a change of the file it empowers. `system.*` (ACLs) is not supported.
//! Limits, the same for every namespace, keep one inode's attributes small.

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
const SECURITY: &[u8] = b"security.";
/// File capabilities: see the module's opening comment.
const CAPABILITY: &[u8] = b"security.capability";

/// The namespace of a stored attribute's name, which says who may use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrNamespace {
    User,
    Trusted,
    Security,
}

impl XattrNamespace {
    /// Whether `cred` sees the attribute `name` (a stored one) in a listing.
    pub fn listed(cred: &Cred, name: &[u8]) -> bool {
        is_root(cred) || !name.starts_with(TRUSTED)
    }
}

/// Checks `name` and returns its namespace.
pub fn check_xattr_name(name: &[u8]) -> Result<XattrNamespace, WireError> {
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
    if name == CAPABILITY {
        return Err(WireError::new(
            ErrorCode::Unsupported,
            "security.capability (file capabilities) is not stored: a write or chown by \
             another user could not drop it, as Linux does",
        ));
    }
    let (namespace, rest) = if let Some(rest) = name.strip_prefix(USER) {
        (XattrNamespace::User, rest)
    } else if let Some(rest) = name.strip_prefix(TRUSTED) {
        (XattrNamespace::Trusted, rest)
    } else if let Some(rest) = name.strip_prefix(SECURITY) {
        (XattrNamespace::Security, rest)
    } else {
        return Err(WireError::new(
            ErrorCode::Unsupported,
            format!(
                "extended attribute {}: only the user.*, trusted.* and security.* namespaces \
                 are supported",
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
    Ok(namespace)
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
    namespace: XattrNamespace,
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
    match namespace {
        XattrNamespace::Trusted if !is_root(cred) => {
            return Err(refused(format!(
                "uid {} may not use trusted.* attributes of inode {inode}",
                cred.uid
            )))
        }
        XattrNamespace::Security if writing && !is_root(cred) => {
            return Err(refused(format!(
                "uid {} may not change security.* attributes of inode {inode}: root only",
                cred.uid
            )))
        }
        // Of any kind of inode (a symbolic link's SELinux label too).
        XattrNamespace::Trusted | XattrNamespace::Security => return Ok(()),
        XattrNamespace::User => {}
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

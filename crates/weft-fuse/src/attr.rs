//! Weft attributes as the kernel sees them: `Attr` to `fuser::FileAttr`, times both ways.

use fuser::{FileAttr, FileType, INodeNo, TimeOrNow};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weft_client::{Attr, FileKind, TimeSet, Timespec};

/// `st_blksize` of every file: 1 MiB (requests may be up to `REQUEST_BYTES_MAX`), so that
/// tools that size their buffers by it (cp, cat) send large requests.
pub const BLOCK_SIZE_BYTES: u32 = 1 << 20;

pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Socket => FileType::Socket,
    }
}

/// The kind of a mode's file-type bits (`S_IFMT`), for mknod.
pub fn kind_of_mode(mode: u32) -> Option<FileKind> {
    match mode & libc::S_IFMT {
        libc::S_IFREG => Some(FileKind::File),
        libc::S_IFDIR => Some(FileKind::Directory),
        libc::S_IFLNK => Some(FileKind::Symlink),
        libc::S_IFIFO => Some(FileKind::Fifo),
        libc::S_IFCHR => Some(FileKind::CharDevice),
        libc::S_IFBLK => Some(FileKind::BlockDevice),
        libc::S_IFSOCK => Some(FileKind::Socket),
        _ => None,
    }
}

pub fn system_time(t: Timespec) -> SystemTime {
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::new(t.secs as u64, t.nanos)
    } else {
        // -1.5 s is stored as secs = -2, nanos = 5e8.
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs()) + Duration::from_nanos(t.nanos as u64)
    }
}

pub fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            secs: d.as_secs() as i64,
            nanos: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            let mut secs = -(d.as_secs() as i64);
            let mut nanos = d.subsec_nanos();
            if nanos > 0 {
                secs -= 1;
                nanos = 1_000_000_000 - nanos;
            }
            Timespec { secs, nanos }
        }
    }
}

pub fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(timespec(t)),
    }
}

/// The kernel's view of an inode. Weft inode numbers are FUSE node ids as they are: the
/// root is 1 in both, and Weft never reuses a number, so generations are always 0.
pub fn file_attr(attr: &Attr) -> FileAttr {
    let size = match attr.kind {
        FileKind::Directory => 4096,
        _ => attr.size,
    };
    FileAttr {
        ino: INodeNo(attr.inode.0),
        size,
        // Allocated blocks as the manager and io servers report them (a sparse file
        // reports only what it has).
        blocks: attr.blocks,
        atime: system_time(attr.atime),
        mtime: system_time(attr.mtime),
        ctime: system_time(attr.ctime),
        crtime: system_time(attr.ctime),
        kind: file_type(attr.kind),
        perm: (attr.mode & 0o7777) as u16,
        // 0 for a file removed while open.
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        rdev: attr.rdev as u32,
        blksize: BLOCK_SIZE_BYTES,
        flags: 0,
    }
}

/// Attributes to send with "." and ".." in a readdirplus answer, which the kernel
/// takes nothing from (fuse_direntplus_link skips both names): a directory's shape,
/// with no request to the manager for it.
pub fn dot_attr(inode: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(inode),
        size: 4096,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: FileType::Directory,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: BLOCK_SIZE_BYTES,
        flags: 0,
    }
}

/// An empty regular file's attributes, for unit tests of the tables that keep them.
#[cfg(test)]
pub(crate) fn test_file(inode: u64, mode: u32) -> Attr {
    use weft_client::{CacheMode, InodeId};
    Attr {
        inode: InodeId(inode),
        kind: FileKind::File,
        mode,
        uid: 0,
        gid: 0,
        nlink: 1,
        size: 0,
        atime: Default::default(),
        mtime: Default::default(),
        ctime: Default::default(),
        layout: None,
        cache: CacheMode::default(),
        dir_layout: None,
        rdev: 0,
        blocks: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_also_before_the_epoch() {
        for t in [
            Timespec { secs: 0, nanos: 0 },
            Timespec {
                secs: 1_700_000_000,
                nanos: 123_456_789,
            },
            Timespec {
                secs: -2,
                nanos: 500_000_000,
            },
            Timespec { secs: -1, nanos: 1 },
        ] {
            assert_eq!(timespec(system_time(t)), t, "{t:?}");
        }
    }
}

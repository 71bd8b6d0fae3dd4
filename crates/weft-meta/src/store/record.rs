//! The stored form of an inode: what the `inodes` table holds, and its conversion to
//! the wire [`Attr`].

use weft_layout::{CacheMode, InodeId, Layout, LayoutRequest};
use weft_proto::{Attr, DecodeError, FileKind, Name, Reader, Timespec, Wire, Writer};

/// First byte of every encoded record; bump it (and keep a decoder for the old one)
/// whenever the encoding changes. Format 1 had no caching mode (files are `none`) and
/// directory defaults without one; formats 1 and 2 had no link count (every
/// non-directory had one name) and no device number.
const RECORD_FORMAT: u8 = 3;

/// One inode as the manager stores it. Directories keep their entry and subdirectory
/// counts here so that `nlink`, `size` and the emptiness check never scan `dirents`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InodeRecord {
    pub kind: FileKind,
    /// Permission bits only (`0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Directories: the directory holding this one's only name; the root is its own
    /// parent. Walked by rename to refuse moving a directory into its own subtree.
    /// Other inodes: the directory of their first name (informational; they may have
    /// several names).
    pub parent: InodeId,
    /// Non-directories: how many directory entries name this inode (hard links). 0 for
    /// a file kept alive, nameless, while a mount has it open.
    pub links: u32,
    /// Character and block devices: the device number.
    pub rdev: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    /// Directories: number of entries.
    pub entries: u64,
    /// Directories: number of entries that are directories.
    pub subdirectories: u64,
    /// Files: where the data lives.
    pub layout: Option<Layout>,
    /// Files: whether data I/O goes through the cache tier.
    pub cache: CacheMode,
    /// Directories: default layout for new files (and, copied, for new directories).
    pub dir_layout: Option<LayoutRequest>,
    /// Symlinks: the target, stored verbatim (bytes; formats before 3 wrote UTF-8 here,
    /// with the same encoding).
    pub target: Option<Name>,
}

impl InodeRecord {
    /// A fresh inode of `kind` with all three times set to `now`.
    pub fn new(kind: FileKind, mode: u32, owner: (u32, u32), parent: InodeId, now: Timespec) -> Self {
        InodeRecord {
            kind,
            mode: mode & 0o7777,
            uid: owner.0,
            gid: owner.1,
            parent,
            links: 1,
            rdev: 0,
            atime: now,
            mtime: now,
            ctime: now,
            entries: 0,
            subdirectories: 0,
            layout: None,
            cache: CacheMode::None,
            dir_layout: None,
            target: None,
        }
    }

    pub fn is_directory(&self) -> bool {
        self.kind == FileKind::Directory
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(RECORD_FORMAT);
        self.kind.encode(&mut w);
        w.u32(self.mode);
        w.u32(self.uid);
        w.u32(self.gid);
        self.parent.encode(&mut w);
        self.atime.encode(&mut w);
        self.mtime.encode(&mut w);
        self.ctime.encode(&mut w);
        w.u64(self.entries);
        w.u64(self.subdirectories);
        w.opt(&self.layout);
        self.cache.encode(&mut w);
        w.opt(&self.dir_layout);
        w.opt(&self.target);
        w.u32(self.links);
        w.u64(self.rdev);
        w.bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let format = r.u8()?;
        if !(1..=RECORD_FORMAT).contains(&format) {
            return Err(DecodeError::Invalid {
                what: "inode record format",
                value: format as u64,
            });
        }
        let record = InodeRecord {
            kind: FileKind::decode(&mut r)?,
            mode: r.u32()?,
            uid: r.u32()?,
            gid: r.u32()?,
            parent: InodeId::decode(&mut r)?,
            atime: Timespec::decode(&mut r)?,
            mtime: Timespec::decode(&mut r)?,
            ctime: Timespec::decode(&mut r)?,
            entries: r.u64()?,
            subdirectories: r.u64()?,
            layout: r.opt()?,
            cache: if format == 1 {
                CacheMode::None
            } else {
                CacheMode::decode(&mut r)?
            },
            dir_layout: if format == 1 {
                decode_format1_dir_layout(&mut r)?
            } else {
                r.opt()?
            },
            target: r.opt()?,
            links: 1,
            rdev: 0,
        };
        let record = if format >= 3 {
            InodeRecord {
                links: r.u32()?,
                rdev: r.u64()?,
                ..record
            }
        } else {
            record
        };
        r.finish()?;
        Ok(record)
    }
}

/// A directory default as format 1 stored it: the three striping fields, no caching mode.
fn decode_format1_dir_layout(r: &mut Reader<'_>) -> Result<Option<LayoutRequest>, DecodeError> {
    if !r.bool()? {
        return Ok(None);
    }
    Ok(Some(LayoutRequest {
        stripe_size_bytes: r.opt()?,
        stripe_count: r.opt()?,
        first_server: r.opt()?,
        cache: None,
        redundancy: None,
    }))
}

impl InodeRecord {
    /// The wire attributes. Files report size 0: their size lives on the io servers
    /// and the client derives it from the extents there.
    pub fn attr(&self, inode: InodeId) -> Attr {
        let (nlink, size) = match self.kind {
            FileKind::Directory => (
                u32::try_from(2 + self.subdirectories).unwrap_or(u32::MAX),
                self.entries,
            ),
            FileKind::File => (self.links, 0),
            // lstat reports a symlink's size as the length of its target.
            FileKind::Symlink => (self.links, self.target.as_ref().map_or(0, |t| t.len() as u64)),
            _ => (self.links, 0),
        };
        Attr {
            inode,
            kind: self.kind,
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            nlink,
            size,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            layout: self.layout.clone(),
            cache: self.cache,
            dir_layout: self.dir_layout,
            rdev: self.rdev,
            // A directory takes a block; a file's blocks are its objects', which the
            // client adds up; other inodes take none.
            blocks: if self.is_directory() { 8 } else { 0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_layout::ServerId;

    #[test]
    fn records_round_trip_and_reject_damage() {
        let mut record = InodeRecord::new(
            FileKind::File,
            0o104644,
            (1000, 100),
            InodeId(7),
            Timespec { secs: 5, nanos: 6 },
        );
        // Only permission bits are kept: the file-type bits of a raw st_mode go.
        assert_eq!(record.mode, 0o4644);
        record.layout = Some(Layout {
            stripe_size_bytes: 65536,
            servers: vec![ServerId(3), ServerId(1)],
            replication: Default::default(),
        });
        record.cache = CacheMode::Delegated;
        let bytes = record.encode();
        assert_eq!(InodeRecord::decode(&bytes).unwrap(), record);
        assert!(InodeRecord::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut newer = bytes.clone();
        newer[0] = RECORD_FORMAT + 1;
        assert!(InodeRecord::decode(&newer).is_err());
        let mut longer = bytes;
        longer.push(0);
        assert!(InodeRecord::decode(&longer).is_err());
    }

    /// Databases written before caching modes existed (record format 1) still open:
    /// their files are uncached and their directory defaults keep their striping.
    #[test]
    fn format_1_records_decode_without_a_caching_mode() {
        let mut dir = InodeRecord::new(
            FileKind::Directory,
            0o755,
            (1, 2),
            InodeId(1),
            Timespec::default(),
        );
        dir.dir_layout = Some(LayoutRequest {
            stripe_size_bytes: Some(4096),
            stripe_count: None,
            first_server: Some(2),
            cache: None,
            redundancy: None,
        });
        let mut file = InodeRecord::new(FileKind::File, 0o644, (1, 2), InodeId(1), Timespec::default());
        file.layout = Some(Layout {
            stripe_size_bytes: 8192,
            servers: vec![ServerId(4)],
            replication: Default::default(),
        });
        for record in [dir, file] {
            // Format 1, written field by field as that version did.
            let mut w = Writer::default();
            w.u8(1);
            record.kind.encode(&mut w);
            w.u32(record.mode);
            w.u32(record.uid);
            w.u32(record.gid);
            record.parent.encode(&mut w);
            record.atime.encode(&mut w);
            record.mtime.encode(&mut w);
            record.ctime.encode(&mut w);
            w.u64(record.entries);
            w.u64(record.subdirectories);
            w.opt(&record.layout);
            match &record.dir_layout {
                None => w.u8(0),
                Some(d) => {
                    w.u8(1);
                    w.opt(&d.stripe_size_bytes);
                    w.opt(&d.stripe_count);
                    w.opt(&d.first_server);
                }
            }
            w.opt(&record.target);
            assert_eq!(InodeRecord::decode(&w.bytes).unwrap(), record);
        }
    }

    /// Databases of record format 2 (no link count, no device number) still open: their
    /// non-directories have one name.
    #[test]
    fn format_2_records_decode_with_one_link() {
        let mut file = InodeRecord::new(FileKind::File, 0o644, (1, 2), InodeId(1), Timespec::default());
        file.layout = Some(Layout {
            stripe_size_bytes: 8192,
            servers: vec![ServerId(4)],
            replication: Default::default(),
        });
        file.cache = CacheMode::Cached;
        // Format 2 was format 3 without the last two fields (u32 links, u64 rdev).
        let mut bytes = file.encode();
        bytes.truncate(bytes.len() - 12);
        bytes[0] = 2;
        let decoded = InodeRecord::decode(&bytes).unwrap();
        assert_eq!(decoded, file);
        assert_eq!(decoded.attr(InodeId(9)).nlink, 1);
        file.links = 3;
        file.rdev = 0x0801;
        assert_eq!(
            InodeRecord::decode(&file.encode())
                .unwrap()
                .attr(InodeId(9))
                .nlink,
            3
        );
    }

    #[test]
    fn directory_attr_counts_subdirectories_and_entries() {
        let mut record = InodeRecord::new(
            FileKind::Directory,
            0o755,
            (0, 0),
            InodeId::ROOT,
            Timespec::default(),
        );
        record.entries = 5;
        record.subdirectories = 3;
        let attr = record.attr(InodeId(9));
        assert_eq!((attr.nlink, attr.size), (5, 5));
        let mut link = InodeRecord::new(
            FileKind::Symlink,
            0o777,
            (0, 0),
            InodeId::ROOT,
            Timespec::default(),
        );
        link.target = Some("../x".into());
        assert_eq!(link.attr(InodeId(10)).size, 4);
    }
}

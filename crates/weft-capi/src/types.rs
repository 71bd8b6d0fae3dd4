//! The plain `#[repr(C)]` structs of the ABI (file attributes, layouts, directory
//! entries, file-system statistics), their constants, and conversions from the client's
//! types.

use crate::error::{Failure, Outcome};
use std::ffi::c_char;
use weft_client::{Attr, FileKind, FsStats, Layout, LayoutRequest, Timespec};

/// File type mask of `weft_stat_t.mode` (these are the values of Linux's `S_IFMT` and
/// friends, so `S_ISREG(st.mode)` from `<sys/stat.h>` works too).
pub const WEFT_S_IFMT: u32 = 0xF000;
/// A regular file.
pub const WEFT_S_IFREG: u32 = 0x8000;
/// A directory.
pub const WEFT_S_IFDIR: u32 = 0x4000;
/// A symbolic link.
pub const WEFT_S_IFLNK: u32 = 0xA000;
/// A FIFO (named pipe).
pub const WEFT_S_IFIFO: u32 = 0x1000;
/// A character device.
pub const WEFT_S_IFCHR: u32 = 0x2000;
/// A block device.
pub const WEFT_S_IFBLK: u32 = 0x6000;
/// A socket.
pub const WEFT_S_IFSOCK: u32 = 0xC000;

/// `weft_dirent_t.type` of a regular file (Linux's `DT_REG`).
pub const WEFT_DT_REG: u32 = 8;
/// `weft_dirent_t.type` of a directory (Linux's `DT_DIR`).
pub const WEFT_DT_DIR: u32 = 4;
/// `weft_dirent_t.type` of a symbolic link (Linux's `DT_LNK`).
pub const WEFT_DT_LNK: u32 = 10;
/// `weft_dirent_t.type` of a FIFO (Linux's `DT_FIFO`).
pub const WEFT_DT_FIFO: u32 = 1;
/// `weft_dirent_t.type` of a character device (Linux's `DT_CHR`).
pub const WEFT_DT_CHR: u32 = 2;
/// `weft_dirent_t.type` of a block device (Linux's `DT_BLK`).
pub const WEFT_DT_BLK: u32 = 6;
/// `weft_dirent_t.type` of a socket (Linux's `DT_SOCK`).
pub const WEFT_DT_SOCK: u32 = 12;

/// `weft_layout_t.fields`: `stripe_size_bytes` is set.
pub const WEFT_LAYOUT_STRIPE_SIZE: u32 = 1;
/// `weft_layout_t.fields`: `stripe_count` is set.
pub const WEFT_LAYOUT_STRIPE_COUNT: u32 = 2;
/// `weft_layout_t.fields`: `first_server` is set.
pub const WEFT_LAYOUT_FIRST_SERVER: u32 = 4;
const LAYOUT_FIELDS_ALL: u32 = WEFT_LAYOUT_STRIPE_SIZE | WEFT_LAYOUT_STRIPE_COUNT | WEFT_LAYOUT_FIRST_SERVER;

/// Most io servers one file is striped over: a server-id buffer of this many entries
/// always holds a whole layout.
pub const WEFT_STRIPE_COUNT_MAX: u32 = 1024;

/// Longest name of a directory entry, in bytes, without the terminating NUL.
pub const WEFT_NAME_MAX: u32 = 255;

/// A point in time: seconds and nanoseconds since the Unix epoch.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct weft_timespec_t {
    pub sec: i64,
    /// 0 to 999999999.
    pub nsec: u32,
}

/// Attributes of a file or directory, as `weft_stat` and `weft_fstat` report them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct weft_stat_t {
    /// Inode number, unique in the file system and never reused.
    pub inode: u64,
    /// Type bits (`WEFT_S_IFREG`, `WEFT_S_IFDIR`, `WEFT_S_IFLNK`, `WEFT_S_IFIFO`,
    /// `WEFT_S_IFCHR`, `WEFT_S_IFBLK`, `WEFT_S_IFSOCK`) and permission bits,
    /// as `st_mode` of stat(2).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    /// Size in bytes; for a regular file derived from its io servers.
    pub size: u64,
    pub atime: weft_timespec_t,
    pub mtime: weft_timespec_t,
    pub ctime: weft_timespec_t,
    /// A regular file's stripe size; 0 for others.
    pub stripe_size_bytes: u64,
    /// The number of io servers a regular file is striped over; 0 for others.
    pub stripe_count: u32,
}

/// A striping layout. To create a file or set a directory's default, set the wanted
/// fields and their `WEFT_LAYOUT_*` bits in `fields`: what is left out comes from the
/// directory's default, then the cluster's, so a zeroed struct asks for the defaults.
/// `weft_get_layout` fills in the fields it knows and sets their bits.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct weft_layout_t {
    /// Which of the fields below are set: `WEFT_LAYOUT_STRIPE_SIZE`,
    /// `WEFT_LAYOUT_STRIPE_COUNT`, `WEFT_LAYOUT_FIRST_SERVER`; other bits are `EINVAL`.
    pub fields: u32,
    /// Number of io servers to stripe over; 0 means all of the cluster's.
    pub stripe_count: u32,
    /// Bytes of one stripe (512 B to 1 GiB).
    pub stripe_size_bytes: u64,
    /// Index in the cluster's io-server list of the server holding the first stripe;
    /// the others follow in list order.
    pub first_server: u32,
}

/// One entry of a directory, as `weft_readdir` returns it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct weft_dirent_t {
    pub inode: u64,
    /// `WEFT_DT_REG`, `WEFT_DT_DIR`, `WEFT_DT_LNK`, `WEFT_DT_FIFO`, `WEFT_DT_CHR`,
    /// `WEFT_DT_BLK` or `WEFT_DT_SOCK`.
    pub kind: u32,
    /// The entry's name, NUL-terminated.
    pub name: [c_char; 256],
}

/// File-system statistics, as `weft_statfs` reports them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct weft_statfs_t {
    /// Regular files in the namespace.
    pub files: u64,
    /// Directories in the namespace.
    pub directories: u64,
    /// io servers of the cluster.
    pub io_servers: u32,
    /// io servers that did not answer; the byte counts below leave them out.
    pub io_servers_unreachable: u32,
    /// Capacity of the answering io servers' storage.
    pub bytes_total: u64,
    /// Free space of the answering io servers' storage.
    pub bytes_free: u64,
    /// Sum of the sizes of the objects the answering io servers store.
    pub bytes_stored: u64,
}

fn timespec(t: Timespec) -> weft_timespec_t {
    weft_timespec_t {
        sec: t.secs,
        nsec: t.nanos,
    }
}

impl From<&Attr> for weft_stat_t {
    fn from(attr: &Attr) -> weft_stat_t {
        let kind_bits = match attr.kind {
            FileKind::File => WEFT_S_IFREG,
            FileKind::Directory => WEFT_S_IFDIR,
            FileKind::Symlink => WEFT_S_IFLNK,
            FileKind::Fifo => WEFT_S_IFIFO,
            FileKind::CharDevice => WEFT_S_IFCHR,
            FileKind::BlockDevice => WEFT_S_IFBLK,
            FileKind::Socket => WEFT_S_IFSOCK,
        };
        let (stripe_size_bytes, stripe_count) = match (&attr.kind, &attr.layout) {
            (FileKind::File, Some(l)) => (l.stripe_size_bytes, l.servers.len() as u32),
            _ => (0, 0),
        };
        weft_stat_t {
            inode: attr.inode.0,
            mode: kind_bits | (attr.mode & 0o7777),
            uid: attr.uid,
            gid: attr.gid,
            nlink: attr.nlink,
            size: attr.size,
            atime: timespec(attr.atime),
            mtime: timespec(attr.mtime),
            ctime: timespec(attr.ctime),
            stripe_size_bytes,
            stripe_count,
        }
    }
}

impl weft_layout_t {
    /// The request this struct makes; unknown `fields` bits are `EINVAL` so that a
    /// program built for a later version fails loudly rather than being half-obeyed.
    pub fn to_request(&self) -> Outcome<LayoutRequest> {
        if self.fields & !LAYOUT_FIELDS_ALL != 0 {
            return Err(Failure::invalid(format!(
                "layout fields {:#x} has unknown bits",
                self.fields
            )));
        }
        let set = |bit: u32| self.fields & bit != 0;
        Ok(LayoutRequest {
            cache: None,
            stripe_size_bytes: set(WEFT_LAYOUT_STRIPE_SIZE).then_some(self.stripe_size_bytes),
            stripe_count: set(WEFT_LAYOUT_STRIPE_COUNT).then_some(self.stripe_count),
            first_server: set(WEFT_LAYOUT_FIRST_SERVER).then_some(self.first_server),
            // The C ABI has no redundancy field yet (its struct is fixed): the
            // directory's or the cluster's default applies.
            redundancy: None,
        })
    }

    /// The fields a request sets (a directory's default).
    pub fn from_request(request: &LayoutRequest) -> weft_layout_t {
        let mut out = weft_layout_t::default();
        if let Some(v) = request.stripe_size_bytes {
            out.fields |= WEFT_LAYOUT_STRIPE_SIZE;
            out.stripe_size_bytes = v;
        }
        if let Some(v) = request.stripe_count {
            out.fields |= WEFT_LAYOUT_STRIPE_COUNT;
            out.stripe_count = v;
        }
        if let Some(v) = request.first_server {
            out.fields |= WEFT_LAYOUT_FIRST_SERVER;
            out.first_server = v;
        }
        out
    }

    /// A file's layout; `first_server` is set if its first server is in `cluster_servers`.
    pub fn from_layout(layout: &Layout, cluster_servers: &[weft_client::ServerId]) -> weft_layout_t {
        let mut out = weft_layout_t {
            fields: WEFT_LAYOUT_STRIPE_SIZE | WEFT_LAYOUT_STRIPE_COUNT,
            stripe_count: layout.servers.len() as u32,
            stripe_size_bytes: layout.stripe_size_bytes,
            first_server: 0,
        };
        let first = layout.servers.first();
        if let Some(index) = cluster_servers.iter().position(|s| Some(s) == first) {
            out.fields |= WEFT_LAYOUT_FIRST_SERVER;
            out.first_server = index as u32;
        }
        out
    }
}

impl weft_dirent_t {
    pub fn new(inode: u64, kind: FileKind, name: &[u8]) -> Outcome<weft_dirent_t> {
        let mut out = weft_dirent_t {
            inode,
            kind: match kind {
                FileKind::File => WEFT_DT_REG,
                FileKind::Directory => WEFT_DT_DIR,
                FileKind::Symlink => WEFT_DT_LNK,
                FileKind::Fifo => WEFT_DT_FIFO,
                FileKind::CharDevice => WEFT_DT_CHR,
                FileKind::BlockDevice => WEFT_DT_BLK,
                FileKind::Socket => WEFT_DT_SOCK,
            },
            name: [0; 256],
        };
        // The name and its NUL must fit; the manager never stores longer names or NULs,
        // so either is a broken answer rather than something to cut.
        if name.len() >= out.name.len() || name.contains(&0) {
            return Err(Failure::new(
                libc::EIO,
                format!(
                    "the manager returned an invalid entry name \"{}\"",
                    name.escape_ascii()
                ),
            ));
        }
        for (to, from) in out.name.iter_mut().zip(name.iter().copied()) {
            *to = from as c_char;
        }
        Ok(out)
    }
}

impl From<&FsStats> for weft_statfs_t {
    fn from(stats: &FsStats) -> weft_statfs_t {
        let mut out = weft_statfs_t {
            files: stats.meta.files,
            directories: stats.meta.directories,
            io_servers: stats.servers.len() as u32,
            ..Default::default()
        };
        for (_, answer) in &stats.servers {
            match answer {
                Ok(s) => {
                    out.bytes_total += s.bytes_total;
                    out.bytes_free += s.bytes_free;
                    out.bytes_stored += s.bytes_stored;
                }
                Err(_) => out.io_servers_unreachable += 1,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_match_the_client_and_layout_crates() {
        // Spelled out above so that the header shows numbers, not Rust paths.
        assert_eq!(
            WEFT_STRIPE_COUNT_MAX as usize,
            weft_layout::stripe::STRIPE_COUNT_MAX
        );
        assert_eq!(WEFT_NAME_MAX as usize, weft_client::path::NAME_BYTES_MAX);
        let entry = weft_dirent_t::new(1, FileKind::File, b"x").unwrap();
        assert_eq!(entry.name.len(), WEFT_NAME_MAX as usize + 1);
    }

    #[test]
    fn layout_fields_round_trip_and_unknown_bits_are_refused() {
        let request = LayoutRequest {
            cache: None,
            stripe_size_bytes: Some(4096),
            stripe_count: None,
            first_server: Some(0),
            redundancy: None,
        };
        let c = weft_layout_t::from_request(&request);
        assert_eq!(c.fields, WEFT_LAYOUT_STRIPE_SIZE | WEFT_LAYOUT_FIRST_SERVER);
        assert_eq!(c.to_request().unwrap(), request);
        assert_eq!(
            weft_layout_t::default().to_request().unwrap(),
            LayoutRequest::default()
        );
        let bad = weft_layout_t { fields: 8, ..c };
        assert_eq!(bad.to_request().unwrap_err().errno, libc::EINVAL);
    }

    #[test]
    fn entry_names_fill_the_buffer_with_a_nul() {
        let longest = "n".repeat(WEFT_NAME_MAX as usize);
        let e = weft_dirent_t::new(7, FileKind::Directory, longest.as_bytes()).unwrap();
        assert_eq!(e.kind, WEFT_DT_DIR);
        assert_eq!(e.name[254], b'n' as c_char);
        assert_eq!(e.name[255], 0);
        assert!(weft_dirent_t::new(7, FileKind::File, "n".repeat(256).as_bytes()).is_err());
    }
}

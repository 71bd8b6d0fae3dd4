//! `readdir`: one page of a directory, by a range scan of `dirents`; `readdir_plus`:
//! the same page with every entry's attributes, from the same snapshot.

use std::ops::Bound;

use super::super::access::MAY_READ;
use super::super::{decode_kind, MetaStore, Namespace, StorageResult};
use super::child_record;
use weft_layout::InodeId;
use weft_proto::msg::READDIR_ENTRIES_MAX;
use weft_proto::{Attr, Cred, DirEntry, Name, WireError};

/// Most bytes of entries (names and attributes, as an estimate of their wire form) in one
/// `readdir_plus` page: half the message limit, whatever the layouts' server lists.
pub const READDIR_PLUS_BYTES_MAX: usize = 512 << 10;

/// A generous estimate of an entry's wire size: the name, the fixed fields of an
/// attribute, and its layouts' server lists.
fn entry_bytes(name: &[u8], attr: &Attr) -> usize {
    let servers = attr.layout.as_ref().map_or(0, |l| l.servers.len());
    let dir_servers = attr.dir_layout.as_ref().map_or(0, |_| 64);
    name.len() + 256 + 8 * servers + dir_servers
}

impl MetaStore {
    /// Up to `max_entries` entries of `dir` with names strictly after `after`, in
    /// byte order of the names, and whether more follow. `max_entries` is capped at
    /// `READDIR_ENTRIES_MAX`; 0 asks for that cap. Needs read permission on `dir`.
    /// Touches only the page asked for, so million-entry directories page in
    /// constant memory.
    pub fn readdir(
        &self,
        cred: &Cred,
        dir: InodeId,
        after: impl AsRef<[u8]>,
        max_entries: u32,
    ) -> Result<(Vec<DirEntry>, bool), WireError> {
        let after = after.as_ref();
        let limit = match max_entries {
            0 => READDIR_ENTRIES_MAX,
            n => n.min(READDIR_ENTRIES_MAX),
        } as usize;
        self.read(|ns| {
            ns.directory(cred, dir, MAY_READ)?;
            let lower = Bound::Excluded((dir.0, after));
            // Every entry of `dir` sorts before (dir + 1, ""); no inode number
            // reaches u64::MAX, but stay correct if one did.
            let upper = match dir.0.checked_add(1) {
                Some(next) => Bound::Excluded((next, &[][..])),
                None => Bound::Unbounded,
            };
            let mut entries = Vec::with_capacity(limit.min(256));
            for item in ns.dirents().range((lower, upper)).storage()? {
                let (key, value) = item.storage()?;
                let (_, name) = key.value();
                if entries.len() == limit {
                    return Ok((entries, true));
                }
                let (child, kind) = value.value();
                entries.push(DirEntry {
                    name: Name::from(name),
                    inode: InodeId(child),
                    kind: decode_kind(kind, dir, name)?,
                });
            }
            Ok((entries, false))
        })
    }

    /// Like `readdir`, with each entry's attributes (file sizes left to the io
    /// servers) read in the same snapshot; a page also stops at
    /// `READDIR_PLUS_BYTES_MAX` bytes of entries.
    pub fn readdir_plus(
        &self,
        cred: &Cred,
        dir: InodeId,
        after: impl AsRef<[u8]>,
        max_entries: u32,
    ) -> Result<(Vec<(Name, Attr)>, bool), WireError> {
        let after = after.as_ref();
        let limit = match max_entries {
            0 => READDIR_ENTRIES_MAX,
            n => n.min(READDIR_ENTRIES_MAX),
        } as usize;
        self.read(|ns| {
            ns.directory(cred, dir, MAY_READ)?;
            let lower = Bound::Excluded((dir.0, after));
            let upper = match dir.0.checked_add(1) {
                Some(next) => Bound::Excluded((next, &[][..])),
                None => Bound::Unbounded,
            };
            let mut entries = Vec::with_capacity(limit.min(256));
            let mut bytes = 0;
            for item in ns.dirents().range((lower, upper)).storage()? {
                let (key, value) = item.storage()?;
                let (_, name) = key.value();
                if entries.len() == limit {
                    return Ok((entries, true));
                }
                let (child, _) = value.value();
                let child = InodeId(child);
                let attr = child_record(ns, dir, name, child)?.attr(child);
                bytes += entry_bytes(name, &attr);
                if bytes > READDIR_PLUS_BYTES_MAX && !entries.is_empty() {
                    return Ok((entries, true));
                }
                entries.push((Name::from(name), attr));
            }
            Ok((entries, false))
        })
    }
}

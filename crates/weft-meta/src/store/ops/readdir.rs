//! `readdir`: one page of a directory, by a range scan of `dirents`.

use std::ops::Bound;

use super::super::access::MAY_READ;
use super::super::{decode_kind, MetaStore, Namespace, StorageResult};
use weft_layout::InodeId;
use weft_proto::msg::READDIR_ENTRIES_MAX;
use weft_proto::{Cred, DirEntry, Name, WireError};

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
}

//! Upgrades of a store made by an older release, run once at its first open: format
//! 1's entries moved to byte names, `file_parents` built for a store made before it.

use super::{DIRENTS, DIRENTS_FORMAT_1, FILE_PARENTS};
use redb::{ReadableTable, WriteTransaction};
use weft_proto::FileKind;

/// Fills `file_parents` from every entry of a store made before it existed, in the
/// caller's transaction (once: a scan of all names).
pub(super) fn build_file_parents(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let names = txn.open_table(DIRENTS)?;
    let mut parents = txn.open_table(FILE_PARENTS)?;
    for item in names.iter()? {
        let (key, value) = item?;
        let (child, kind) = value.value();
        if kind != FileKind::Directory as u8 {
            let key = (child, key.value().0);
            let count = parents.get(key)?.map_or(0, |v| v.value());
            parents.insert(key, count + 1)?;
        }
    }
    Ok(())
}

/// Moves format 1's entries (UTF-8 names) into the byte-named table, in the caller's
/// transaction: the move and the new format number commit together.
pub(super) fn migrate_format_1(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let mut names = txn.open_table(DIRENTS)?;
    {
        let old = txn.open_table(DIRENTS_FORMAT_1)?;
        for item in old.iter()? {
            let (key, value) = item?;
            let (parent, name) = key.value();
            names.insert((parent, name.as_bytes()), value.value())?;
        }
    }
    txn.delete_table(DIRENTS_FORMAT_1)?;
    Ok(())
}

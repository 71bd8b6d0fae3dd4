//! Backup and restore of the namespace: a snapshot of one committed state copied into
//! a database file of its own while writes go on (`snapshot_to`), and the checks and
//! fix-up a snapshot gets before a stopped manager is started on it (`prepare_restore`).
//!
//! A snapshot is one redb read transaction (redb's MVCC: it sees one commit, and
//! commits after it neither block on it nor show in it) whose every table is copied,
//! typed, into a new database: the copy is a valid store of this format, opened by
//! `MetaStore::open` like any other. Copying the file's bytes instead would race with
//! the commits rewriting its header.

use std::path::Path;

use redb::{
    Database, Durability, Key, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition, TableError,
    Value, WriteTransaction,
};
use weft_proto::{ErrorCode, WireError};

use super::{
    replies, MetaStore, StorageResult, StoreError, ADDED_SERVERS, COUNTERS, COUNTER_FORMAT,
    COUNTER_INODE_NEXT, DIRENTS, FILE_PARENTS, INODES, KEPT, LOCK_SESSIONS, ORPHANS, PRECREATED,
    STORE_FORMAT, XATTRS,
};

/// How far a restore moves the inode allocator past the snapshot's: inode numbers
/// handed out after the snapshot was taken (whose objects may still be on the io
/// servers, and which `weft check` reports as orphans) are never handed out again.
/// Numbers are 64-bit: 2^24 restores fit.
pub const RESTORE_INODE_GAP: u64 = 1 << 40;

/// What a snapshot holds, read back from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotFacts {
    pub store_format: u64,
    /// The allocator's next inode number after the restore's gap.
    pub inode_next: u64,
    pub files: u64,
    pub directories: u64,
}

/// The store format this build reads and its snapshots are in.
pub fn store_format() -> u64 {
    STORE_FORMAT
}

/// An error of the snapshot's own file (not the live database's: a full disk writing
/// a snapshot must not make the store reopen its database).
fn snapshot_error(dest: &Path, e: impl Into<redb::Error>) -> WireError {
    let e: redb::Error = e.into();
    let full = matches!(&e, redb::Error::Io(io) if io.raw_os_error() == Some(libc::ENOSPC)
        || io.kind() == std::io::ErrorKind::StorageFull);
    WireError::new(
        if full { ErrorCode::NoSpace } else { ErrorCode::Io },
        format!("writing the metadata snapshot {}: {e}", dest.display()),
    )
}

/// Copies every entry of `table` from the snapshot into `to`; a table the snapshot
/// lacks is made empty. Returns the entries copied.
fn copy_table<K: Key + 'static, V: Value + 'static>(
    from: &ReadTransaction,
    to: &WriteTransaction,
    table: TableDefinition<K, V>,
    dest: &Path,
) -> Result<u64, WireError> {
    let mut target = to.open_table(table).map_err(|e| snapshot_error(dest, e))?;
    let source = match from.open_table(table) {
        Ok(source) => source,
        Err(TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(e).storage(),
    };
    let mut copied = 0;
    for item in source.iter().storage()? {
        let (key, value) = item.storage()?;
        target
            .insert(key.value(), value.value())
            .map_err(|e| snapshot_error(dest, e))?;
        copied += 1;
    }
    Ok(copied)
}

impl MetaStore {
    /// The database file.
    pub fn database_path(&self) -> &Path {
        &self.path
    }

    /// Writes a snapshot of the last committed state into a new database at `dest`
    /// (which must not exist), durably; returns the entries copied. Writes go on
    /// meanwhile. On failure `dest` is removed.
    pub fn snapshot_to(&self, dest: &Path) -> Result<u64, WireError> {
        if dest.exists() {
            return Err(WireError::new(
                ErrorCode::Exists,
                format!("metadata snapshot {} exists already", dest.display()),
            ));
        }
        let copied = self.with_database(|db| {
            let snapshot = db.begin_read().storage()?;
            let copy = || -> Result<u64, WireError> {
                let out = Database::create(dest).map_err(|e| snapshot_error(dest, e))?;
                let mut txn = out.begin_write().map_err(|e| snapshot_error(dest, e))?;
                txn.set_durability(Durability::Immediate)
                    .map_err(|e| snapshot_error(dest, e))?;
                let copied = copy_table(&snapshot, &txn, INODES, dest)?
                    + copy_table(&snapshot, &txn, DIRENTS, dest)?
                    + copy_table(&snapshot, &txn, ORPHANS, dest)?
                    + copy_table(&snapshot, &txn, KEPT, dest)?
                    + copy_table(&snapshot, &txn, XATTRS, dest)?
                    + copy_table(&snapshot, &txn, COUNTERS, dest)?
                    + copy_table(&snapshot, &txn, PRECREATED, dest)?
                    + copy_table(&snapshot, &txn, LOCK_SESSIONS, dest)?
                    + copy_table(&snapshot, &txn, FILE_PARENTS, dest)?
                    + copy_table(&snapshot, &txn, ADDED_SERVERS, dest)?
                    + copy_table(&snapshot, &txn, replies::REPLIES, dest)?
                    // Quotas: limits, usage, grace periods, projects, settled bytes.
                    + copy_table(&snapshot, &txn, super::quota::LIMITS, dest)?
                    + copy_table(&snapshot, &txn, super::quota::USAGE, dest)?
                    + copy_table(&snapshot, &txn, super::quota::GRACE, dest)?
                    + copy_table(&snapshot, &txn, super::quota::PROJECTS, dest)?
                    + copy_table(&snapshot, &txn, super::quota::CHARGED, dest)?;
                txn.commit().map_err(|e| snapshot_error(dest, e))?;
                Ok(copied)
            };
            copy()
        });
        if copied.is_err() {
            let _ = std::fs::remove_file(dest);
        }
        copied
    }
}

/// Checks that the database at `path` (a snapshot about to replace a stopped manager's
/// database) is a store this build reads, and moves its inode allocator
/// `RESTORE_INODE_GAP` on, durably. Refuses a database another process has open.
pub fn prepare_restore(path: &Path) -> Result<SnapshotFacts, StoreError> {
    let db = Database::open(path).map_err(redb::Error::from)?;
    let txn = db.begin_write().map_err(redb::Error::from)?;
    let facts = {
        let mut counters = txn.open_table(COUNTERS).map_err(|e| match e {
            TableError::TableDoesNotExist(_) => {
                StoreError::Io("the snapshot has no counters table: not a Weft metadata store".into())
            }
            e => StoreError::Database(e.into()),
        })?;
        let get = |key: &str| -> Result<Option<u64>, StoreError> {
            Ok(counters.get(key).map_err(redb::Error::from)?.map(|v| v.value()))
        };
        let store_format = get(COUNTER_FORMAT)?.ok_or_else(|| {
            StoreError::Io("the snapshot has no format number: not a Weft metadata store".into())
        })?;
        if store_format != STORE_FORMAT {
            return Err(StoreError::UnknownFormat { found: store_format });
        }
        let inode_next = get(COUNTER_INODE_NEXT)?
            .unwrap_or(0)
            .checked_add(RESTORE_INODE_GAP)
            .ok_or_else(|| StoreError::Io("the snapshot's inode numbers are used up".into()))?;
        let files = get(super::COUNTER_FILES)?.unwrap_or(0);
        let directories = get(super::COUNTER_DIRECTORIES)?.unwrap_or(0);
        counters
            .insert(COUNTER_INODE_NEXT, inode_next)
            .map_err(redb::Error::from)?;
        SnapshotFacts {
            store_format,
            inode_next,
            files,
            directories,
        }
    };
    txn.commit().map_err(redb::Error::from)?;
    Ok(facts)
}

/// Checks that no process has the database at `path` open (a running manager holds it
/// locked), so that a restore may replace it.
pub fn prepare_restore_target(path: &Path) -> Result<(), StoreError> {
    let db = Database::open(path).map_err(redb::Error::from)?;
    drop(db);
    Ok(())
}

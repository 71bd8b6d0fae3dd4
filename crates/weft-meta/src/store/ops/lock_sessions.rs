//! The durable record of mount sessions that took fcntl/flock locks (the `lock_sessions`
//! table), as NFS's client-tracking database: a restarted manager's grace waits for
//! these sessions' reclaims only (see the service's `file_locks`). Written on a
//! session's first lock, not per lock, so each write is its own small transaction
//! rather than a member of the namespace's group commits: it is rare, and it waits for
//! the group committing at the time as any writer does.

use super::super::{group, MetaStore, StorageResult, COUNTERS, LOCK_SESSIONS};
use redb::{ReadableDatabase, ReadableTable, WriteTransaction};
use weft_proto::WireError;

/// Counter set while the record was full: every session may hold locks unrecorded, so
/// the next start gives the full grace.
const COUNTER_LOCK_SESSIONS_OVERFLOW: &str = "lock_sessions_overflow";

impl MetaStore {
    /// The sessions recorded, and whether the record overflowed.
    pub fn lock_sessions(&self) -> Result<(Vec<u64>, bool), WireError> {
        self.with_database(|db| {
            let txn = db.begin_read().storage()?;
            let table = txn.open_table(LOCK_SESSIONS).storage()?;
            let mut sessions = Vec::new();
            for item in table.iter().storage()? {
                sessions.push(item.storage()?.0.value());
            }
            let counters = txn.open_table(COUNTERS).storage()?;
            let overflow = counters
                .get(COUNTER_LOCK_SESSIONS_OVERFLOW)
                .storage()?
                .is_some_and(|v| v.value() != 0);
            Ok((sessions, overflow))
        })
    }

    /// Records `session` durably (returns once committed).
    pub fn record_lock_session(&self, session: u64) -> Result<(), WireError> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.lock_record_write(|txn| {
            txn.open_table(LOCK_SESSIONS)
                .storage()?
                .insert(session, now_ms)
                .storage()?;
            Ok(())
        })
    }

    /// Records durably that the record is full (sessions from here are not named).
    pub fn record_lock_overflow(&self) -> Result<(), WireError> {
        self.lock_record_write(|txn| {
            txn.open_table(COUNTERS)
                .storage()?
                .insert(COUNTER_LOCK_SESSIONS_OVERFLOW, 1)
                .storage()?;
            Ok(())
        })
    }

    /// Removes `sessions` from the record, and the overflow mark if `overflow`.
    pub fn forget_lock_sessions(&self, sessions: &[u64], overflow: bool) -> Result<(), WireError> {
        if sessions.is_empty() && !overflow {
            return Ok(());
        }
        self.lock_record_write(|txn| {
            let mut table = txn.open_table(LOCK_SESSIONS).storage()?;
            for session in sessions {
                table.remove(*session).storage()?;
            }
            if overflow {
                txn.open_table(COUNTERS)
                    .storage()?
                    .remove(COUNTER_LOCK_SESSIONS_OVERFLOW)
                    .storage()?;
            }
            Ok(())
        })
    }

    fn lock_record_write(
        &self,
        body: impl FnOnce(&WriteTransaction) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        self.with_database(|db| {
            let txn = group::begin(db)?;
            match body(&txn) {
                Ok(()) => txn.commit().storage(),
                Err(e) => {
                    let _ = txn.abort();
                    Err(e)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_survives_a_reopen_and_forgets_what_it_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        {
            let store = MetaStore::open(&path, (0, 0)).unwrap();
            assert_eq!(store.lock_sessions().unwrap(), (vec![], false));
            store.record_lock_session(7).unwrap();
            store.record_lock_session(u64::MAX).unwrap();
            store.record_lock_session(7).unwrap();
        }
        let store = MetaStore::open(&path, (0, 0)).unwrap();
        assert_eq!(store.lock_sessions().unwrap(), (vec![7, u64::MAX], false));
        store.record_lock_overflow().unwrap();
        store.forget_lock_sessions(&[7, 9], false).unwrap();
        assert_eq!(store.lock_sessions().unwrap(), (vec![u64::MAX], true));
        store.forget_lock_sessions(&[], true).unwrap();
        assert_eq!(store.lock_sessions().unwrap(), (vec![u64::MAX], false));
    }
}

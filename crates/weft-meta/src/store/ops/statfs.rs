//! `statfs`: namespace counts, kept transactionally in the `counters` table.

use super::super::{MetaStore, Namespace, COUNTER_DIRECTORIES, COUNTER_FILES, COUNTER_ORPHANS};
use weft_proto::{Cred, MetaStatfs, WireError};

impl MetaStore {
    /// Counts of files (regular files and symlinks), directories (the root
    /// included) and orphans awaiting purge. Reads three counters, never scans.
    pub fn statfs(&self, _cred: &Cred) -> Result<MetaStatfs, WireError> {
        self.read(|ns| {
            Ok(MetaStatfs {
                files: ns.counter(COUNTER_FILES)?,
                directories: ns.counter(COUNTER_DIRECTORIES)?,
                orphans: ns.counter(COUNTER_ORPHANS)?,
            })
        })
    }
}

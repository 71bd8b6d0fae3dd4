//! Who may be writing a file: the manager issues every write capability, so it can
//! vouch for a file "no write capability of it is live, and none was issued since
//! stamp S" (`Vouched`). A client that asked the io servers for a file's size and change
//! stamps after it was told S, and is told S again at a later open or stat, knows no
//! byte changed in between and skips the io servers (close-to-open holds: a writer
//! gives its capabilities back only after its last handle is closed, everything it
//! wrote acknowledged).
//!
//! Per inode, in memory: how many write grants each holder has not given back yet
//! (`ReleaseWrites`; a holder is the authenticated user, or the servers: a release
//! counts only against its sender's own grants, so no user can make the manager vouch
//! for a file another user is writing),
//! the latest expiry among them, and the stamp of the latest grant (stamps rise, and
//! start above any of an earlier run of the manager). A grant not given back counts
//! until its expiry (plus `EXPIRY_GRACE_MS`, for writes accepted just before it): a
//! client that dies holding one costs vouches only for that long.
//!
//! Bounded (`WRITERS_MAX` inodes): an inode with no entry is vouched for at `floor`,
//! which is raised past the stamp of every entry let go. When every entry is live the
//! table starts over and vouches for nothing until every capability issued before can
//! have expired; so does a manager just started (grants of its previous run are
//! unknown).

use std::collections::HashMap;
use std::sync::Mutex;
use weft_layout::InodeId;

/// Most inodes remembered.
pub const WRITERS_MAX: usize = 65_536;
/// How long after its expiry a write capability still counts as live: a write an io
/// server accepted just before the expiry may land a little after it.
pub const EXPIRY_GRACE_MS: u64 = 2_000;
/// Most holders counted apart per inode; grants of further holders count as never
/// given back (they expire).
pub const HOLDERS_MAX: usize = 16;

/// Who holds a write grant: releases count only against the sender's own grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Holder {
    /// The servers (a trusted connection).
    Servers,
    /// A user, by the uid the manager acts as for the connection.
    Uid(u32),
}

#[derive(Debug, Clone)]
struct Entry {
    /// Write grants not given back, per holder (at most `HOLDERS_MAX`).
    holders: Vec<(Holder, u32)>,
    /// Grants of holders past `HOLDERS_MAX`: never given back, they expire.
    unowned: u32,
    /// Latest expiry among them.
    expiry_ms: u64,
    /// Stamp of the latest write grant.
    stamp: u64,
}

impl Entry {
    fn quiet(&self, now_ms: u64) -> bool {
        let live = self.unowned > 0 || self.holders.iter().any(|&(_, n)| n > 0);
        !live || self.expiry_ms.saturating_add(EXPIRY_GRACE_MS) < now_ms
    }

    fn empty(stamp: u64) -> Entry {
        Entry {
            holders: Vec::new(),
            unowned: 0,
            expiry_ms: 0,
            stamp,
        }
    }
}

struct Table {
    entries: HashMap<InodeId, Entry>,
    /// The next grant's stamp.
    next: u64,
    /// The vouch of an inode without an entry.
    floor: u64,
    /// No vouch before this (Unix ms).
    vouch_from_ms: u64,
    /// When this table was made (Unix ms): grants issued before were another run's.
    started_ms: u64,
}

/// The manager's table of write grants (see the module's text).
pub struct Writers {
    table: Mutex<Table>,
    /// Longest a capability the manager issues lives.
    lifetime_ms: u64,
    max: usize,
}

impl Writers {
    /// A table for a manager started at `now_ms` that issues capabilities living
    /// `lifetime_ms`: it vouches for nothing until those of an earlier run expired.
    pub fn new(now_ms: u64, lifetime_ms: u64) -> Writers {
        Writers::bounded(now_ms, lifetime_ms, WRITERS_MAX)
    }

    pub fn bounded(now_ms: u64, lifetime_ms: u64, max: usize) -> Writers {
        // Above every stamp of an earlier run (fewer than 2^16 grants a millisecond).
        let start = now_ms << 16;
        Writers {
            table: Mutex::new(Table {
                entries: HashMap::new(),
                next: start + 1,
                floor: start,
                vouch_from_ms: now_ms + lifetime_ms + EXPIRY_GRACE_MS,
                started_ms: now_ms,
            }),
            lifetime_ms,
            max,
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A write capability of `inode` expiring at `expiry_ms` was granted to `holder`;
    /// returns the grant's stamp (what `vouch` says of `inode` while no other grant or
    /// change follows).
    pub fn granted(&self, inode: InodeId, holder: Holder, expiry_ms: u64, now_ms: u64) -> u64 {
        let mut table = self.table();
        if !table.entries.contains_key(&inode) && table.entries.len() >= self.max {
            let mut let_go = table.floor;
            table.entries.retain(|_, e| {
                let keep = !e.quiet(now_ms);
                if !keep {
                    let_go = let_go.max(e.stamp);
                }
                keep
            });
            table.floor = let_go;
            if table.entries.len() >= self.max {
                // All live: forget them all, and vouch for nothing until they expired.
                table.entries.clear();
                table.floor = table.next;
                table.next += 1;
                table.vouch_from_ms = table
                    .vouch_from_ms
                    .max(now_ms + self.lifetime_ms + EXPIRY_GRACE_MS);
            }
        }
        let stamp = table.next;
        table.next += 1;
        let entry = table.entries.entry(inode).or_insert_with(|| Entry::empty(stamp));
        if let Some((_, n)) = entry.holders.iter_mut().find(|(h, _)| *h == holder) {
            *n = n.saturating_add(1);
        } else if entry.holders.len() < HOLDERS_MAX {
            entry.holders.push((holder, 1));
        } else {
            entry.unowned = entry.unowned.saturating_add(1);
        }
        entry.expiry_ms = entry.expiry_ms.max(expiry_ms);
        entry.stamp = stamp;
        stamp
    }

    /// `inode`'s size or times were set by the manager (on its objects too): what a
    /// client read of them before is no longer vouched for.
    pub fn changed(&self, inode: InodeId) {
        let mut table = self.table();
        let stamp = table.next;
        table.next += 1;
        let room = table.entries.len() < self.max;
        match table.entries.get_mut(&inode) {
            Some(entry) => entry.stamp = stamp,
            None if room => {
                table.entries.insert(inode, Entry::empty(stamp));
            }
            // No room: every inode without an entry moves on.
            None => table.floor = stamp,
        }
    }

    /// `count` write grants of `inode` that `holder` got, the first issued at
    /// `first_issued_ms`, were given back. Only `holder`'s own count goes down. Ignored
    /// when some were issued before this table was made (another run's: subtracting them
    /// would take this run's grants of other writers off).
    pub fn released(&self, inode: InodeId, holder: Holder, count: u32, first_issued_ms: u64) {
        let mut table = self.table();
        if first_issued_ms < table.started_ms {
            return;
        }
        if let Some(entry) = table.entries.get_mut(&inode) {
            if let Some((_, n)) = entry.holders.iter_mut().find(|(h, _)| *h == holder) {
                *n = n.saturating_sub(count);
            }
        }
    }

    /// The stamp `inode` is vouched for at, if no write capability of it is live.
    pub fn vouch(&self, inode: InodeId, now_ms: u64) -> Option<u64> {
        let table = self.table();
        if now_ms < table.vouch_from_ms {
            return None;
        }
        match table.entries.get(&inode) {
            Some(entry) if entry.quiet(now_ms) => Some(entry.stamp),
            Some(_) => None,
            None => Some(table.floor),
        }
    }

    /// Nothing was granted before `now_ms` (a new file system): vouch from now on.
    pub fn no_earlier_grants(&self, now_ms: u64) {
        let mut table = self.table();
        table.vouch_from_ms = table.vouch_from_ms.min(now_ms);
    }

    /// Inodes remembered (for tests and metrics).
    pub fn len(&self) -> usize {
        self.table().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIFE: u64 = 60_000;
    const U: Holder = Holder::Uid(1000);
    const T0: u64 = 1_000_000;
    const A: InodeId = InodeId(7);
    const B: InodeId = InodeId(8);

    fn ready() -> (Writers, u64) {
        let w = Writers::new(T0, LIFE);
        (w, T0 + LIFE + EXPIRY_GRACE_MS)
    }

    #[test]
    fn no_vouch_while_capabilities_of_an_earlier_run_may_live() {
        let (w, ready) = ready();
        assert_eq!(w.vouch(A, T0), None);
        assert_eq!(w.vouch(A, ready - 1), None);
        assert!(w.vouch(A, ready).is_some());
    }

    #[test]
    fn a_grant_stops_the_vouch_until_given_back_and_changes_the_stamp() {
        let (w, now) = ready();
        let before = w.vouch(A, now).unwrap();
        w.granted(A, U, now + LIFE, now);
        w.granted(A, U, now + LIFE, now);
        assert_eq!(w.vouch(A, now), None);
        assert_eq!(w.vouch(B, now), Some(before), "other files keep theirs");
        w.released(A, U, 1, now);
        assert_eq!(w.vouch(A, now), None, "one grant still out");
        w.released(A, U, 1, now);
        let after = w.vouch(A, now).unwrap();
        assert!(after > before);
        // A grant given back more than once changes nothing more.
        w.released(A, U, 5, now);
        assert_eq!(w.vouch(A, now), Some(after));
    }

    #[test]
    fn grants_of_an_earlier_run_given_back_take_nothing_off() {
        let (w, now) = ready();
        w.granted(A, U, now + LIFE, now);
        // A writer of the earlier run closes: its grants were never counted here.
        w.released(A, U, 3, T0 - 1);
        assert_eq!(w.vouch(A, now), None, "this run's writer is still live");
        w.released(A, U, 1, now);
        assert!(w.vouch(A, now).is_some());
    }

    #[test]
    fn a_grant_never_given_back_counts_until_it_expired() {
        let (w, now) = ready();
        w.granted(A, U, now + 10, now);
        assert_eq!(w.vouch(A, now + 10 + EXPIRY_GRACE_MS), None);
        assert!(w.vouch(A, now + 11 + EXPIRY_GRACE_MS).is_some());
    }

    #[test]
    fn the_table_is_bounded_and_never_vouches_wrongly_when_full() {
        let w = Writers::bounded(T0, LIFE, 4);
        let now = T0 + LIFE + EXPIRY_GRACE_MS;
        for i in 0..4 {
            w.granted(InodeId(100 + i), U, now + LIFE, now);
            w.released(InodeId(100 + i), U, 1, now);
        }
        let quiet = w.vouch(InodeId(100), now).unwrap();
        // A fifth lets the quiet ones go: their vouch moves (a miss, never a wrong hit).
        w.granted(InodeId(200), U, now + LIFE, now);
        assert!(w.len() <= 4);
        assert_ne!(w.vouch(InodeId(100), now), Some(quiet));
        assert_eq!(w.vouch(InodeId(200), now), None);
        // Full of live ones: it starts over and vouches for nothing until they expired.
        for i in 0..4 {
            w.granted(InodeId(300 + i), U, now + LIFE, now);
        }
        assert!(w.len() <= 4);
        assert_eq!(w.vouch(InodeId(200), now), None);
        assert_eq!(w.vouch(InodeId(999), now + 1), None);
        assert!(w
            .vouch(InodeId(999), now + 2 * LIFE + 2 * EXPIRY_GRACE_MS)
            .is_some());
    }

    #[test]
    fn a_release_counts_only_against_its_senders_own_grants() {
        // Another user's ReleaseWrites for a file user 1000 is writing: before, it took
        // the grant off and the manager vouched for a file being written.
        let now = T0 + LIFE + EXPIRY_GRACE_MS;
        let w = Writers::new(T0, LIFE);
        w.granted(A, U, now + LIFE, now);
        w.released(A, Holder::Uid(1001), 1, now);
        assert_eq!(w.vouch(A, now), None, "another user's release ended the grant");
        w.released(A, Holder::Servers, 1, now);
        assert_eq!(w.vouch(A, now), None, "the servers' release ended a user's grant");
        w.released(A, U, 1, now);
        assert!(
            w.vouch(A, now).is_some(),
            "the holder's own release did not end it"
        );
    }

    #[test]
    fn grants_past_the_holders_bound_count_until_they_expire() {
        let now = T0 + LIFE + EXPIRY_GRACE_MS;
        let w = Writers::new(T0, LIFE);
        for uid in 0..=HOLDERS_MAX as u32 {
            w.granted(A, Holder::Uid(uid), now + LIFE, now);
        }
        for uid in 0..=HOLDERS_MAX as u32 {
            w.released(A, Holder::Uid(uid), 1, now);
        }
        assert_eq!(w.vouch(A, now), None, "a grant nobody can give back was dropped");
        assert!(w.vouch(A, now + LIFE + EXPIRY_GRACE_MS + 1).is_some());
    }
}

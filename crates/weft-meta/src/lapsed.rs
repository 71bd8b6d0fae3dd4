//! Mount sessions whose file locks the manager dropped because they stopped renewing
//! (`SESSION_LEASE`), remembered so that the mount learns it when it comes back.
//!
//! A mount cut off from the manager, or a mount daemon stopped (SIGSTOP, a suspended
//! machine) for longer than the lease, has its locks dropped here, and another process
//! may then take them. Without this record the returning mount saw the same manager
//! incarnation, took its locks for confirmed and let its processes write on under a
//! lock another process held. With it, the manager answers the session's next lock
//! request or renewal with `Stale` (until the session's `LockSession` takes the news:
//! see `MetaService`), and the mount counts every lock it held as lost (EIO on the
//! descriptors open at the loss), as after a reclaim refused.

use std::collections::{HashSet, VecDeque};

/// Sessions remembered at most; the oldest is forgotten first. A forgotten session's
/// mount is not told (as before this record), so the bound is generous: mounts that
/// lapse while holding locks are few.
pub const LAPSED_MAX: usize = 4096;

/// A bounded set of lapsed sessions, oldest first.
#[derive(Debug, Default)]
pub struct Lapsed {
    order: VecDeque<u64>,
    set: HashSet<u64>,
}

impl Lapsed {
    /// `session`'s locks were dropped.
    pub fn add(&mut self, session: u64) {
        if !self.set.insert(session) {
            return;
        }
        self.order.push_back(session);
        while self.order.len() > LAPSED_MAX {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    pub fn contains(&self, session: u64) -> bool {
        self.set.contains(&session)
    }

    /// The mount of `session` was told: it starts afresh. Whether it was lapsed.
    pub fn take(&mut self, session: u64) -> bool {
        if !self.set.remove(&session) {
            return false;
        }
        self.order.retain(|&s| s != session);
        true
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_told_once_and_the_set_is_bounded() {
        let mut lapsed = Lapsed::default();
        lapsed.add(7);
        lapsed.add(7);
        assert!(lapsed.contains(7));
        assert_eq!(lapsed.len(), 1);
        assert!(lapsed.take(7));
        assert!(!lapsed.take(7));
        assert!(!lapsed.contains(7));
        for s in 0..(LAPSED_MAX as u64 + 10) {
            lapsed.add(s);
        }
        assert_eq!(lapsed.len(), LAPSED_MAX);
        // The oldest went first.
        assert!(!lapsed.contains(9));
        assert!(lapsed.contains(10));
        assert!(lapsed.contains(LAPSED_MAX as u64 + 9));
    }
}

//! The change feed (`Changes`): the inodes whose attributes, (directories) entries or
//! names changed (with whether a name of theirs went or moved), in the order the manager applied the changes, each at a position that
//! only rises. A mount polls it from the position it last got and drops from the
//! kernel's cache what another client changed, so that it may let the kernel keep
//! names and attributes longer than its attribute timeout (its leases, see weft-fuse's
//! `leases`).
//!
//! In memory, bounded (`FEED_MAX` positions): a poll from a position older than the
//! feed keeps is told `lost` (everything may have changed). The epoch differs per
//! manager start and per restart on a loss, so that a poller never takes positions of
//! another run for this one's. Only inode numbers are kept, never names: the feed is
//! open to every client.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use weft_layout::InodeId;

/// Most positions kept.
pub const FEED_MAX: usize = 131_072;

/// What one poll gets (see `Feed::since`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Since {
    pub epoch: u64,
    pub next: u64,
    pub lost: bool,
    /// Each inode once, with whether a name of it went or moved.
    pub inodes: Vec<(InodeId, bool)>,
}

pub struct Feed {
    epoch: AtomicU64,
    kept: Mutex<Kept>,
    max: usize,
}

struct Kept {
    /// Position of `ring[0]`.
    first: u64,
    ring: VecDeque<(InodeId, bool)>,
}

impl Kept {
    fn next(&self) -> u64 {
        self.first + self.ring.len() as u64
    }
}

impl Default for Feed {
    fn default() -> Self {
        Feed::bounded(FEED_MAX)
    }
}

impl Feed {
    pub fn bounded(max: usize) -> Feed {
        Feed {
            epoch: AtomicU64::new(fresh_epoch(0)),
            kept: Mutex::new(Kept {
                first: 0,
                ring: VecDeque::new(),
            }),
            max: max.max(1),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `inodes` changed (each at a position of its own), each with whether a name of
    /// it went or moved.
    pub fn record(&self, inodes: &[(InodeId, bool)]) {
        if inodes.is_empty() {
            return;
        }
        let mut kept = self.kept();
        for &change in inodes {
            if kept.ring.len() >= self.max {
                kept.ring.pop_front();
                kept.first += 1;
            }
            kept.ring.push_back(change);
        }
    }

    /// Everything may have changed (the store lost acknowledged operations): pollers
    /// of the old epoch are told so at their next poll.
    pub fn new_epoch(&self) {
        let old = self.epoch.load(Ordering::Relaxed);
        self.epoch.store(fresh_epoch(old), Ordering::Relaxed);
    }

    /// The inodes changed from `after` on, at most `max` distinct ones.
    pub fn since(&self, after: u64, max: usize) -> Since {
        let epoch = self.epoch.load(Ordering::Relaxed);
        let kept = self.kept();
        let next = kept.next();
        if after < kept.first || after > next {
            return Since {
                epoch,
                next,
                lost: true,
                inodes: Vec::new(),
            };
        }
        let mut seen: HashMap<InodeId, usize> = HashMap::new();
        let mut inodes: Vec<(InodeId, bool)> = Vec::new();
        let mut at = after;
        for &(inode, moved) in kept.ring.iter().skip((after - kept.first) as usize) {
            match seen.get(&inode) {
                Some(&k) => inodes[k].1 |= moved,
                None => {
                    if inodes.len() >= max {
                        break;
                    }
                    seen.insert(inode, inodes.len());
                    inodes.push((inode, moved));
                }
            }
            at += 1;
        }
        Since {
            epoch,
            next: at,
            lost: false,
            inodes,
        }
    }
}

/// An epoch unlike `old`: the clock's nanoseconds and the process id.
fn fresh_epoch(old: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let e = nanos ^ ((std::process::id() as u64) << 40);
    if e == old {
        e.wrapping_add(1)
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u64]) -> Vec<(InodeId, bool)> {
        v.iter().map(|&i| (InodeId(i), false)).collect()
    }

    #[test]
    fn a_poll_gets_what_changed_since_its_position_once_each() {
        let feed = Feed::bounded(100);
        let start = feed.since(0, 10);
        assert_eq!((start.next, start.lost, start.inodes.len()), (0, false, 0));
        feed.record(&ids(&[5, 6, 5]));
        feed.record(&ids(&[7]));
        let got = feed.since(0, 10);
        assert_eq!(got.inodes, ids(&[5, 6, 7]));
        assert_eq!(got.next, 4);
        let again = feed.since(got.next, 10);
        assert!(again.inodes.is_empty() && !again.lost && again.next == 4);
        assert_eq!(feed.since(3, 10).inodes, ids(&[7]));
        assert_eq!(feed.since(3, 10).epoch, got.epoch);
    }

    #[test]
    fn a_poll_stops_at_max_distinct_inodes_and_goes_on_from_there() {
        let feed = Feed::bounded(100);
        feed.record(&ids(&[1, 1, 2, 3, 2, 4]));
        let first = feed.since(0, 2);
        assert_eq!(first.inodes, ids(&[1, 2]));
        assert_eq!(first.next, 3, "stopped before the third distinct inode");
        let rest = feed.since(first.next, 2);
        assert_eq!(rest.inodes, ids(&[3, 2]));
        assert_eq!(rest.next, 5);
        assert_eq!(feed.since(rest.next, 2).inodes, ids(&[4]));
    }

    #[test]
    fn an_inode_whose_name_went_in_any_of_its_changes_is_told_so() {
        let feed = Feed::bounded(100);
        feed.record(&[
            (InodeId(3), false),
            (InodeId(4), true),
            (InodeId(3), true),
            (InodeId(3), false),
        ]);
        assert_eq!(
            feed.since(0, 10).inodes,
            vec![(InodeId(3), true), (InodeId(4), true)]
        );
        assert_eq!(feed.since(3, 10).inodes, vec![(InodeId(3), false)]);
    }

    #[test]
    fn a_poll_from_before_what_is_kept_or_past_the_end_is_told_lost() {
        let feed = Feed::bounded(3);
        feed.record(&ids(&[1, 2, 3, 4, 5]));
        let old = feed.since(1, 10);
        assert!(old.lost && old.inodes.is_empty());
        assert_eq!(old.next, 5);
        let kept = feed.since(2, 10);
        assert!(!kept.lost);
        assert_eq!(kept.inodes, ids(&[3, 4, 5]));
        assert!(feed.since(6, 10).lost, "a position this feed never gave");
    }

    #[test]
    fn a_new_epoch_differs_from_the_old() {
        let feed = Feed::default();
        let before = feed.since(0, 1).epoch;
        feed.new_epoch();
        assert_ne!(feed.since(0, 1).epoch, before);
    }
}

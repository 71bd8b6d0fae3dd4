//! Leases: names and attributes the kernel may keep past the attribute timeout.
//!
//! The kernel asks the daemon again for a name or an inode's attributes once the
//! timeout of its last answer ran out (`attr_ttl`, 1 s): a `stat` of a file looked at
//! more than a second ago costs a FUSE round trip and a request to the manager, where
//! a local file system answers from memory. A mount that hears what other clients
//! change may let the kernel keep answers longer, as Lustre's clients keep what their
//! locks cover and NFSv4's what their delegations do. Weft's manager keeps a feed of
//! the inodes whose attributes or entries changed (`Changes`); the mount polls it
//! every `POLL_PERIOD` (a request served on the manager's event loop) and tells the
//! kernel to drop what it holds of every inode named (its attributes, and the name it
//! knows the inode by, so a removal or rename shows), twice, the second time one poll
//! later (a lookup answered just before the drop may reach the kernel's cache just after
//! it). Answers are then given for `lease` (30 s by default) instead of `attr_ttl`:
//! - only for what only the manager changes: directories, symbolic links, and regular
//!   files the manager vouched for (no write capability live, so their size and times
//!   change only after a grant, which the feed names);
//! - only while the feed answers: a poll older than half of `attr_ttl` makes the
//!   mount drop everything the kernel holds of every inode it knows and answer with
//!   `attr_ttl` until a poll succeeds again, so the promise stays the one without
//!   leases: another client's change shows within `attr_ttl`, here usually within a
//!   poll period;
//! - only for an inode the feed did not name while its answer was being fetched (a
//!   change in between may or may not be in the answer);
//! - never for a file open in this mount: its open ends a lease the kernel may hold,
//!   its attributes then live for `attr_ttl`, and the feed does not drop them while
//!   it is open (a drop under a program's dirty mapped pages made fsx fault past a
//!   size the io servers gave meanwhile).
//!
//! A manager that predates the feed answers `UnknownOpcode`: the mount keeps
//! `attr_ttl` for everything. This module holds the bookkeeping (pure logic); the
//! polling thread is in `fs/feed.rs`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_client::InodeId;

/// How often the feed is polled.
pub const POLL_PERIOD: Duration = Duration::from_millis(25);
/// Default lease.
pub const LEASE_DEFAULT: Duration = Duration::from_secs(30);
/// Most inodes remembered as named by a recent poll; past it every fetch in flight
/// counts as overtaken.
const NAMED_MAX: usize = 65_536;

/// Where the feed stood when a fetch began (`Leases::mark`).
#[derive(Debug, Clone, Copy)]
pub struct Mark(u64);

pub struct Leases {
    lease: Duration,
    /// What the mount promises without leases: a change shows within this.
    bound: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Last successful poll (`None`: none yet, or none since the feed was lost).
    polled: Option<Instant>,
    /// Polls that named inodes so far.
    batches: u64,
    /// Inode -> the batch that last named it.
    named: HashMap<InodeId, u64>,
    /// Every inode counts as named at this batch (after `named` started over, or
    /// everything was dropped).
    floor: u64,
    /// Inode -> the batch its last leased answer was fetched at and that answer's
    /// fingerprint (`renewed`).
    leased: HashMap<InodeId, (u64, u64)>,
    /// Everything was dropped since the last successful poll (once per outage).
    dropped: bool,
}

impl Leases {
    /// `lease` zero (or not above `bound`): no leases, every answer gets `bound`.
    pub fn new(lease: Duration, bound: Duration) -> Leases {
        Leases {
            lease,
            bound,
            state: Mutex::new(State::default()),
        }
    }

    /// Whether leases are given at all.
    pub fn on(&self) -> bool {
        self.lease > self.bound
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Taken before an answer is fetched (see `ttl`).
    pub fn mark(&self) -> Mark {
        Mark(self.state().batches)
    }

    /// How long the kernel may keep an answer about `inode` (whose attributes have
    /// fingerprint `print`) fetched since `mark`: the lease when it is `leasable` (see
    /// the module), the feed answers, and no poll named the inode since `mark`; else
    /// `bound`.
    pub fn ttl(&self, mark: Mark, inode: InodeId, print: u64, leasable: bool, now: Instant) -> Duration {
        if !leasable || !self.on() {
            return self.bound;
        }
        let mut state = self.state();
        if !self.holds(&state, mark.0, inode, now) {
            return self.bound;
        }
        if state.leased.len() >= NAMED_MAX && !state.leased.contains_key(&inode) {
            state.leased.clear();
        }
        state.leased.insert(inode, (mark.0, print));
        self.lease
    }

    /// How long the kernel may keep attributes of `inode` with fingerprint `print`
    /// that come without a fetch of their own (a directory listing's, which may be
    /// older than what the kernel was told since): the lease when the last leased
    /// answer about the inode had the same fingerprint and no poll named the inode
    /// since; else `bound`.
    pub fn renewed(&self, inode: InodeId, print: u64, now: Instant) -> Duration {
        if !self.on() {
            return self.bound;
        }
        let state = self.state();
        match state.leased.get(&inode) {
            Some(&(mark, p)) if p == print && self.holds(&state, mark, inode, now) => self.lease,
            _ => self.bound,
        }
    }

    /// A descriptor of this mount opens `inode`: no lease of it is given while it is
    /// open here, and one the kernel may hold is ended (the caller drops it from the
    /// kernel when this says one may be held).
    pub fn end(&self, inode: InodeId) -> bool {
        self.state().leased.remove(&inode).is_some()
    }

    /// Whether the feed answers and did not name `inode` since batch `mark`.
    fn holds(&self, state: &State, mark: u64, inode: InodeId, now: Instant) -> bool {
        let fresh = state
            .polled
            .is_some_and(|at| now.saturating_duration_since(at) < self.bound / 2);
        let named = state.floor > mark || state.named.get(&inode).is_some_and(|b| *b > mark);
        fresh && !named
    }

    /// A poll succeeded at `now`, naming `inodes` (dropped from the kernel's cache by
    /// the caller after this returns).
    pub fn polled(&self, inodes: &[InodeId], now: Instant) {
        let mut state = self.state();
        state.polled = Some(now);
        state.dropped = false;
        if inodes.is_empty() {
            return;
        }
        state.batches += 1;
        let batch = state.batches;
        if state.named.len() + inodes.len() > NAMED_MAX {
            state.named.clear();
            state.floor = batch;
        }
        for &inode in inodes {
            state.named.insert(inode, batch);
        }
    }

    /// The feed cannot be trusted any more (lost, another manager run): everything
    /// counts as named; leases wait for the next good poll. The caller drops
    /// everything the kernel holds after this returns.
    pub fn lost(&self) {
        let mut state = self.state();
        state.batches += 1;
        state.floor = state.batches;
        state.named.clear();
        state.leased.clear();
        state.polled = None;
        state.dropped = true;
    }

    /// Whether the kernel's leased answers must all be dropped now: no poll succeeded
    /// for half of `bound` (once per such outage; then as `lost`).
    pub fn due_drop(&self, now: Instant) -> bool {
        if !self.on() {
            return false;
        }
        let late = {
            let state = self.state();
            !state.dropped
                && state
                    .polled
                    .is_some_and(|at| now.saturating_duration_since(at) >= self.bound / 2)
        };
        if late {
            self.lost();
        }
        late
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_secs(1);
    const LEASE: Duration = Duration::from_secs(30);
    const A: InodeId = InodeId(7);
    const B: InodeId = InodeId(8);

    #[test]
    fn no_lease_before_the_feed_answered_or_for_what_may_change_unseen() {
        let leases = Leases::new(LEASE, BOUND);
        let now = Instant::now();
        assert_eq!(leases.ttl(leases.mark(), A, 0, true, now), BOUND, "no poll yet");
        leases.polled(&[], now);
        assert_eq!(leases.ttl(leases.mark(), A, 0, true, now), LEASE);
        assert_eq!(leases.ttl(leases.mark(), A, 0, false, now), BOUND, "not leasable");
        let off = Leases::new(Duration::ZERO, BOUND);
        off.polled(&[], now);
        assert!(!off.on());
        assert_eq!(off.ttl(off.mark(), A, 0, true, now), BOUND);
    }

    #[test]
    fn an_inode_named_while_its_answer_was_fetched_gets_no_lease() {
        let leases = Leases::new(LEASE, BOUND);
        let now = Instant::now();
        leases.polled(&[], now);
        let mark = leases.mark();
        leases.polled(&[A], now);
        assert_eq!(leases.ttl(mark, A, 0, true, now), BOUND);
        assert_eq!(leases.ttl(mark, B, 0, true, now), LEASE, "another inode");
        assert_eq!(leases.ttl(leases.mark(), A, 0, true, now), LEASE, "fetched after");
    }

    #[test]
    fn a_silent_feed_drops_everything_once_and_gives_no_leases_until_it_answers() {
        let leases = Leases::new(LEASE, BOUND);
        let start = Instant::now();
        leases.polled(&[], start);
        let mark = leases.mark();
        assert!(!leases.due_drop(start + BOUND / 4));
        let late = start + BOUND / 2;
        assert_eq!(leases.ttl(leases.mark(), A, 0, true, late), BOUND, "stale feed");
        assert!(leases.due_drop(late));
        assert!(!leases.due_drop(late + BOUND), "once per outage");
        let back = late + BOUND;
        leases.polled(&[], back);
        assert_eq!(
            leases.ttl(mark, A, 0, true, back),
            BOUND,
            "fetched before the drop"
        );
        assert_eq!(leases.ttl(leases.mark(), A, 0, true, back), LEASE);
    }

    #[test]
    fn a_listing_renews_only_a_lease_on_the_same_attributes_not_named_since() {
        let leases = Leases::new(LEASE, BOUND);
        let now = Instant::now();
        leases.polled(&[], now);
        assert_eq!(leases.renewed(A, 5, now), BOUND, "never leased");
        assert_eq!(leases.ttl(leases.mark(), A, 5, true, now), LEASE);
        assert_eq!(leases.renewed(A, 5, now), LEASE);
        assert_eq!(leases.renewed(A, 6, now), BOUND, "other attributes");
        leases.polled(&[A], now);
        assert_eq!(leases.renewed(A, 5, now), BOUND, "named since");
        assert_eq!(leases.renewed(A, 5, now + BOUND), BOUND);
        assert_eq!(leases.ttl(leases.mark(), A, 5, true, now), LEASE);
        assert!(leases.end(A), "an open ends the lease");
        assert!(!leases.end(A));
        assert_eq!(leases.renewed(A, 5, now), BOUND);
    }

    #[test]
    fn a_lost_feed_makes_every_fetch_in_flight_count_as_overtaken() {
        let leases = Leases::new(LEASE, BOUND);
        let now = Instant::now();
        leases.polled(&[], now);
        let mark = leases.mark();
        leases.lost();
        leases.polled(&[], now);
        assert_eq!(leases.ttl(mark, B, 0, true, now), BOUND);
    }
}

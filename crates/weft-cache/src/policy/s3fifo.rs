//! S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction", SOSP 2023).
//!
//! 1. Three FIFO queues: small S (10% of the capacity, at least 1 key), main M (the
//!    rest) and ghost G (keys only, as many as M's share).
//! 2. A hit adds one to the key's 2-bit frequency (at most 3); nothing moves.
//! 3. A missed key enters M if it is in G (and leaves G), else S, with frequency 0.
//! 4. Evict from S while S holds at least its share (or M is empty), else from M.
//! 5. From S: the oldest key goes to M if it was hit while in S (frequency reset to 0),
//!    and the next oldest is looked at; the first one never hit is evicted into G.
//!    From M: an oldest key with frequency > 0 is reinserted at the new end with one
//!    less; the first with 0 is evicted (no ghost).
//!
//! One victim per call, as [`Policy::evict`] asks: a key moved from S to M stays
//! resident, so M may exceed its share until the next call evicts from it. Keys the
//! caller cannot evict are passed over in place; if the queue chosen in step 4 has no
//! evictable key, the other one is tried.

use std::hash::Hash;

use super::linked::{End, Linked};
use super::{Admission, Incoming, Policy};

const SMALL: u32 = 0;
const MAIN: u32 = 1;
const GHOST: u32 = 2;
const FREQ: u8 = 0b11;
/// Admitted cold and not referenced since: evicted from S without a ghost entry.
const COLD: u8 = 0b100;

#[derive(Clone, Debug)]
pub struct S3Fifo<K> {
    keys: Linked<K>,
    capacity: usize,
    small_capacity: usize,
    ghost_capacity: usize,
}

impl<K: Copy + Eq + Hash> S3Fifo<K> {
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let small_capacity = (capacity / 10).max(1);
        S3Fifo {
            keys: Linked::new(3),
            capacity,
            small_capacity,
            ghost_capacity: (capacity - small_capacity).max(1),
        }
    }

    /// Raises the capacity to `capacity` (never lowers it), S's and G's with it: the
    /// queues, within the old bounds, are within the new ones.
    pub fn grow(&mut self, capacity: usize) {
        if capacity > self.capacity {
            let grown = S3Fifo::<K>::new(capacity);
            self.capacity = grown.capacity;
            self.small_capacity = grown.small_capacity;
            self.ghost_capacity = grown.ghost_capacity;
        }
    }

    /// The queues from oldest to newest: S, M, G.
    #[cfg(test)]
    pub(crate) fn queues(&self) -> [Vec<K>; 3] {
        [SMALL, MAIN, GHOST].map(|q| self.keys.keys(q))
    }

    #[cfg(test)]
    pub(crate) fn frequency(&self, key: &K) -> Option<u8> {
        self.keys.find(key).map(|n| self.keys.meta(n) & FREQ)
    }

    fn evict_small(&mut self, evictable: &dyn Fn(&K) -> bool) -> Option<K> {
        let mut at = self.keys.coldest(SMALL);
        while let Some(n) = at {
            at = self.keys.hotter(n);
            let meta = self.keys.meta(n);
            if meta & FREQ != 0 {
                self.keys.relink(n, MAIN, End::Hot);
                self.keys.set_meta(n, 0);
            } else if evictable(&self.keys.key(n)) {
                let key = self.keys.key(n);
                if meta & COLD != 0 {
                    self.keys.remove(n);
                } else {
                    self.keys.relink(n, GHOST, End::Hot);
                    if self.keys.len(GHOST) > self.ghost_capacity {
                        let oldest = self.keys.coldest(GHOST).expect("ghost queue is not empty");
                        self.keys.remove(oldest);
                    }
                }
                return Some(key);
            }
        }
        None
    }

    fn evict_main(&mut self, evictable: &dyn Fn(&K) -> bool) -> Option<K> {
        // A pass walks from the oldest key on, into the keys it reinserts; another pass
        // is needed only if keys were passed over (not evictable) after reinsertions.
        loop {
            let mut reinserted = false;
            let mut at = self.keys.coldest(MAIN);
            while let Some(n) = at {
                at = self.keys.hotter(n);
                let meta = self.keys.meta(n);
                if meta & FREQ != 0 {
                    self.keys.set_meta(n, meta - 1);
                    self.keys.relink(n, MAIN, End::Hot);
                    reinserted = true;
                } else if evictable(&self.keys.key(n)) {
                    return Some(self.keys.remove(n));
                }
            }
            if !reinserted {
                return None;
            }
        }
    }
}

impl<K: Copy + Eq + Hash> Policy<K> for S3Fifo<K> {
    fn name(&self) -> &'static str {
        "s3fifo"
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.keys.len(SMALL) + self.keys.len(MAIN)
    }

    fn contains(&self, key: &K) -> bool {
        self.keys.find(key).is_some_and(|n| self.keys.list_of(n) != GHOST)
    }

    fn touch(&mut self, key: &K) -> bool {
        match self.keys.find(key) {
            Some(n) if self.keys.list_of(n) != GHOST => {
                let freq = (self.keys.meta(n) & FREQ).saturating_add(1).min(FREQ);
                self.keys.set_meta(n, freq);
                true
            }
            _ => false,
        }
    }

    fn admit(&mut self, key: K, admission: Admission) {
        assert!(self.len() < self.capacity, "admit into a full policy");
        let ghost = self.keys.find(&key);
        assert!(
            ghost.is_none_or(|n| self.keys.list_of(n) == GHOST),
            "admit of a resident key"
        );
        match (admission, ghost) {
            (Admission::Normal, Some(n)) => {
                self.keys.relink(n, MAIN, End::Hot);
                self.keys.set_meta(n, 0);
            }
            (Admission::Normal, None) => {
                self.keys.insert(key, SMALL, End::Hot, 0);
            }
            (Admission::Cold, ghost) => {
                if let Some(n) = ghost {
                    self.keys.remove(n);
                }
                self.keys.insert(key, SMALL, End::Cold, COLD);
            }
        }
    }

    fn evict(&mut self, _incoming: Option<Incoming<K>>, evictable: &dyn Fn(&K) -> bool) -> Option<K> {
        if self.keys.len(SMALL) >= self.small_capacity || self.keys.len(MAIN) == 0 {
            self.evict_small(evictable).or_else(|| self.evict_main(evictable))
        } else {
            self.evict_main(evictable).or_else(|| self.evict_small(evictable))
        }
    }

    fn remove(&mut self, key: &K) -> bool {
        match self.keys.find(key) {
            Some(n) if self.keys.list_of(n) != GHOST => {
                self.keys.remove(n);
                true
            }
            _ => false,
        }
    }
}

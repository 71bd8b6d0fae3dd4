//! LRU and FIFO: one queue of resident keys, evicted from the cold end. LRU moves a
//! key to the hot end on every reference; FIFO leaves it where it was admitted.

use std::hash::Hash;

use super::linked::{End, Linked};
use super::{Admission, Incoming, Policy};

/// One queue; `MOVE_ON_HIT` makes it LRU, otherwise FIFO.
#[derive(Clone, Debug)]
pub struct Queue<K, const MOVE_ON_HIT: bool> {
    keys: Linked<K>,
    capacity: usize,
}

/// Least recently used.
pub type Lru<K> = Queue<K, true>;
/// First in, first out.
pub type Fifo<K> = Queue<K, false>;

const QUEUE: u32 = 0;

impl<K: Copy + Eq + Hash, const MOVE_ON_HIT: bool> Queue<K, MOVE_ON_HIT> {
    /// A policy holding at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Self {
        Queue {
            keys: Linked::new(1),
            capacity: capacity.max(1),
        }
    }

    /// Raises the capacity to `capacity` (never lowers it): see [`super::AnyPolicy::grow`].
    pub fn grow(&mut self, capacity: usize) {
        self.capacity = self.capacity.max(capacity);
    }

    /// Resident keys from the cold end to the hot end.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> Vec<K> {
        self.keys.keys(QUEUE)
    }
}

impl<K: Copy + Eq + Hash, const MOVE_ON_HIT: bool> Policy<K> for Queue<K, MOVE_ON_HIT> {
    fn name(&self) -> &'static str {
        if MOVE_ON_HIT {
            "lru"
        } else {
            "fifo"
        }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.keys.len(QUEUE)
    }

    fn contains(&self, key: &K) -> bool {
        self.keys.find(key).is_some()
    }

    fn touch(&mut self, key: &K) -> bool {
        let Some(n) = self.keys.find(key) else {
            return false;
        };
        if MOVE_ON_HIT {
            self.keys.relink(n, QUEUE, End::Hot);
        }
        true
    }

    fn admit(&mut self, key: K, admission: Admission) {
        assert!(self.len() < self.capacity, "admit into a full policy");
        let end = match admission {
            Admission::Normal => End::Hot,
            Admission::Cold => End::Cold,
        };
        self.keys.insert(key, QUEUE, end, 0);
    }

    fn evict(&mut self, _incoming: Option<Incoming<K>>, evictable: &dyn Fn(&K) -> bool) -> Option<K> {
        let n = self.keys.find_cold(QUEUE, evictable)?;
        Some(self.keys.remove(n))
    }

    fn remove(&mut self, key: &K) -> bool {
        match self.keys.find(key) {
            Some(n) => {
                self.keys.remove(n);
                true
            }
            None => false,
        }
    }
}

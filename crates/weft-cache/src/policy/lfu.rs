//! LFU: evict the key with the fewest references since it was admitted; among equal
//! counts, the least recently referenced. O(1): one list per count in use (a key moves
//! to the hot end of the next count's list on each reference), and the lists chained in
//! count order, as in the seed's "frequency list of block lists".

use std::hash::Hash;

use super::linked::{End, Linked};
use super::{Admission, Incoming, Policy};

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Bucket {
    count: u64,
    lower: u32,
    higher: u32,
}

/// Least frequently used, LRU among equal counts. A normal admission counts as the
/// first reference (count 1); a cold admission has count 0, below every referenced key.
#[derive(Clone, Debug)]
pub struct Lfu<K> {
    keys: Linked<K>,
    /// Indexed by list number: the count of that list and its neighbours.
    buckets: Vec<Bucket>,
    lowest: u32,
    capacity: usize,
}

impl<K: Copy + Eq + Hash> Lfu<K> {
    pub fn new(capacity: usize) -> Self {
        Lfu {
            keys: Linked::new(0),
            buckets: Vec::new(),
            lowest: NIL,
            capacity: capacity.max(1),
        }
    }

    /// Raises the capacity to `capacity` (never lowers it): see [`super::AnyPolicy::grow`].
    pub fn grow(&mut self, capacity: usize) {
        self.capacity = self.capacity.max(capacity);
    }

    /// The reference count of a resident key.
    pub fn count(&self, key: &K) -> Option<u64> {
        let n = self.keys.find(key)?;
        Some(self.buckets[self.keys.list_of(n) as usize].count)
    }

    /// The bucket for `count` right above `below` (or the lowest bucket for NIL),
    /// created if missing.
    fn bucket_above(&mut self, below: u32, count: u64) -> u32 {
        let next = if below == NIL {
            self.lowest
        } else {
            self.buckets[below as usize].higher
        };
        if next != NIL && self.buckets[next as usize].count == count {
            return next;
        }
        let b = self.keys.add_list();
        let bucket = Bucket {
            count,
            lower: below,
            higher: next,
        };
        if b as usize == self.buckets.len() {
            self.buckets.push(bucket);
        } else {
            self.buckets[b as usize] = bucket;
        }
        if below == NIL {
            self.lowest = b;
        } else {
            self.buckets[below as usize].higher = b;
        }
        if next != NIL {
            self.buckets[next as usize].lower = b;
        }
        b
    }

    fn drop_if_empty(&mut self, b: u32) {
        if self.keys.len(b) > 0 {
            return;
        }
        let Bucket { lower, higher, .. } = self.buckets[b as usize];
        if lower == NIL {
            self.lowest = higher;
        } else {
            self.buckets[lower as usize].higher = higher;
        }
        if higher != NIL {
            self.buckets[higher as usize].lower = lower;
        }
        self.keys.drop_list(b);
    }
}

impl<K: Copy + Eq + Hash> Policy<K> for Lfu<K> {
    fn name(&self) -> &'static str {
        "lfu"
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.keys.total()
    }

    fn contains(&self, key: &K) -> bool {
        self.keys.find(key).is_some()
    }

    fn touch(&mut self, key: &K) -> bool {
        let Some(n) = self.keys.find(key) else {
            return false;
        };
        let b = self.keys.list_of(n);
        let count = self.buckets[b as usize].count;
        let target = self.bucket_above(b, count + 1);
        self.keys.relink(n, target, End::Hot);
        self.drop_if_empty(b);
        true
    }

    fn admit(&mut self, key: K, admission: Admission) {
        assert!(self.len() < self.capacity, "admit into a full policy");
        let (b, end) = match admission {
            Admission::Normal => {
                let zero = self.lowest != NIL && self.buckets[self.lowest as usize].count == 0;
                (
                    self.bucket_above(if zero { self.lowest } else { NIL }, 1),
                    End::Hot,
                )
            }
            Admission::Cold => (self.bucket_above(NIL, 0), End::Cold),
        };
        self.keys.insert(key, b, end, 0);
    }

    fn evict(&mut self, _incoming: Option<Incoming<K>>, evictable: &dyn Fn(&K) -> bool) -> Option<K> {
        let mut b = self.lowest;
        while b != NIL {
            if let Some(n) = self.keys.find_cold(b, evictable) {
                let key = self.keys.remove(n);
                self.drop_if_empty(b);
                return Some(key);
            }
            b = self.buckets[b as usize].higher;
        }
        None
    }

    fn remove(&mut self, key: &K) -> bool {
        let Some(n) = self.keys.find(key) else {
            return false;
        };
        let b = self.keys.list_of(n);
        self.keys.remove(n);
        self.drop_if_empty(b);
        true
    }
}

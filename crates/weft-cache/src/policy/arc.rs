//! ARC, the Adaptive Replacement Cache (Megiddo and Modha, FAST 2003).
//!
//! 1. Resident keys are in T1 (seen once recently) or T2 (seen at least twice); ghost
//!    lists B1 and B2 remember keys recently evicted from T1 and T2 (keys only).
//! 2. A hit in T1 or T2 moves the key to the hot end of T2.
//! 3. A miss that hits ghost B1 (B2) raises (lowers) the target size `p` of T1 by
//!    max(|B2|/|B1|, 1) (max(|B1|/|B2|, 1), integer division), clamped to [0, c], and
//!    the key enters T2.
//! 4. REPLACE: evict T1's coldest key into B1 if |T1| > p, or |T1| == p and the
//!    incoming key is in B2; else T2's coldest into B2.
//! 5. A brand-new key enters T1; before that, if |T1|+|B1| == c, B1's coldest ghost is
//!    dropped, else if the directory holds 2c keys, B2's coldest ghost is.
//!
//! Mapping onto [`Policy`]: the caller asks for a victim (REPLACE, step 4) only when the
//! cache is full and then admits (steps 3 and 5), so the paper's "delete LRU of T1"
//! case (|T1| == c) becomes: REPLACE moves T1's coldest into B1 and step 5 drops it
//! from there at once, the same end state. The adaptation of step 3 happens in
//! [`Policy::evict`] when the incoming key is a ghost (REPLACE must see the new `p`)
//! and is not repeated by the admission that follows. If REPLACE's list holds only
//! keys the caller cannot evict, the coldest evictable key of the other list goes.
//! Keys removed for other reasons leave no ghost, so the cache may be below c while
//! ghosts remain; the bounds |T1|+|T2| <= c, |T1|+|B1| <= c, total <= 2c and
//! 0 <= p <= c hold after every operation.

use std::hash::Hash;

use super::linked::{End, Linked};
use super::{Admission, Incoming, Policy};

const T1: u32 = 0;
const T2: u32 = 1;
const B1: u32 = 2;
const B2: u32 = 3;
/// Admitted cold and not referenced since: evicted without a ghost entry.
const COLD: u8 = 1;

#[derive(Clone, Debug)]
pub struct ArcPolicy<K> {
    keys: Linked<K>,
    capacity: usize,
    /// Target size of T1.
    p: usize,
    /// The incoming ghost key `p` was already adapted for by `evict`.
    adapted_for: Option<K>,
}

/// ARC's list sizes and target, for invariant checks and statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArcSizes {
    pub t1: usize,
    pub t2: usize,
    pub b1: usize,
    pub b2: usize,
    pub p: usize,
}

impl<K: Copy + Eq + Hash> ArcPolicy<K> {
    pub fn new(capacity: usize) -> Self {
        ArcPolicy {
            keys: Linked::new(4),
            capacity: capacity.max(1),
            p: 0,
            adapted_for: None,
        }
    }

    /// Raises `c` to `capacity` (never lowers it): every bound of the module comment
    /// still holds, `p` stays where it was.
    pub fn grow(&mut self, capacity: usize) {
        self.capacity = self.capacity.max(capacity);
    }

    pub fn sizes(&self) -> ArcSizes {
        ArcSizes {
            t1: self.keys.len(T1),
            t2: self.keys.len(T2),
            b1: self.keys.len(B1),
            b2: self.keys.len(B2),
            p: self.p,
        }
    }

    /// The lists from cold end to hot end: T1, T2, B1, B2.
    #[cfg(test)]
    pub(crate) fn lists(&self) -> [Vec<K>; 4] {
        [T1, T2, B1, B2].map(|l| self.keys.keys(l))
    }

    /// The key's node and list if it is a ghost.
    fn ghost(&self, key: &K) -> Option<(u32, u32)> {
        let n = self.keys.find(key)?;
        let list = self.keys.list_of(n);
        (list == B1 || list == B2).then_some((n, list))
    }

    /// Step 3: a ghost hit in `list` moves the target.
    fn adapt(&mut self, list: u32) {
        let (b1, b2) = (self.keys.len(B1), self.keys.len(B2));
        if list == B1 {
            let delta = (b2 / b1).max(1);
            self.p = (self.p + delta).min(self.capacity);
        } else {
            let delta = (b1 / b2).max(1);
            self.p = self.p.saturating_sub(delta);
        }
    }
}

impl<K: Copy + Eq + Hash> Policy<K> for ArcPolicy<K> {
    fn name(&self) -> &'static str {
        "arc"
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.keys.len(T1) + self.keys.len(T2)
    }

    fn contains(&self, key: &K) -> bool {
        self.keys.find(key).is_some_and(|n| self.keys.list_of(n) <= T2)
    }

    fn touch(&mut self, key: &K) -> bool {
        match self.keys.find(key) {
            Some(n) if self.keys.list_of(n) <= T2 => {
                self.keys.relink(n, T2, End::Hot);
                self.keys.set_meta(n, 0);
                true
            }
            _ => false,
        }
    }

    fn admit(&mut self, key: K, admission: Admission) {
        assert!(self.len() < self.capacity, "admit into a full policy");
        let ghost = self.keys.find(&key).map(|n| (n, self.keys.list_of(n)));
        assert!(
            ghost.is_none_or(|(_, list)| list >= B1),
            "admit of a resident key"
        );
        match (admission, ghost) {
            (Admission::Normal, Some((n, list))) => {
                if self.adapted_for != Some(key) {
                    self.adapt(list);
                }
                self.keys.relink(n, T2, End::Hot);
                self.keys.set_meta(n, 0);
            }
            (_, ghost) => {
                // A cold admission is no reference: the ghost is forgotten, not credited.
                if let Some((n, _)) = ghost {
                    self.keys.remove(n);
                }
                let c = self.capacity;
                if self.keys.len(T1) + self.keys.len(B1) >= c {
                    let n = self
                        .keys
                        .coldest(B1)
                        .expect("|T1| < c, so B1 holds the rest of L1");
                    self.keys.remove(n);
                } else if self.keys.total() >= 2 * c {
                    let n = self
                        .keys
                        .coldest(B2)
                        .expect("|L1| < c and |T2| < c, so B2 is not empty");
                    self.keys.remove(n);
                }
                let (end, meta) = match admission {
                    Admission::Normal => (End::Hot, 0),
                    Admission::Cold => (End::Cold, COLD),
                };
                self.keys.insert(key, T1, end, meta);
            }
        }
        self.adapted_for = None;
    }

    fn evict(&mut self, incoming: Option<Incoming<K>>, evictable: &dyn Fn(&K) -> bool) -> Option<K> {
        let mut incoming_in_b2 = false;
        if let Some(Incoming {
            key,
            admission: Admission::Normal,
        }) = incoming
        {
            if let Some((_, list)) = self.ghost(&key) {
                if self.adapted_for != Some(key) {
                    self.adapt(list);
                    self.adapted_for = Some(key);
                }
                incoming_in_b2 = list == B2;
            }
        }
        let t1 = self.keys.len(T1);
        let t1_first = t1 >= 1 && ((incoming_in_b2 && t1 == self.p) || t1 > self.p);
        let order = if t1_first { [T1, T2] } else { [T2, T1] };
        for list in order {
            if let Some(n) = self.keys.find_cold(list, evictable) {
                let key = self.keys.key(n);
                if self.keys.meta(n) & COLD != 0 {
                    self.keys.remove(n);
                } else {
                    self.keys.relink(n, if list == T1 { B1 } else { B2 }, End::Hot);
                }
                return Some(key);
            }
        }
        None
    }

    fn remove(&mut self, key: &K) -> bool {
        match self.keys.find(key) {
            Some(n) if self.keys.list_of(n) <= T2 => {
                self.keys.remove(n);
                true
            }
            _ => false,
        }
    }
}

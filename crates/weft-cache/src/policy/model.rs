//! Naive reference models of the policies for tests: plain vectors, linear scans,
//! written from the papers' descriptions, obviously correct rather than fast. Public
//! only with the `naive-models` feature (test support for the simulator).

use super::{Admission, Incoming, Policy};

/// Removes `k` from `v` if present; returns whether it was.
fn take(v: &mut Vec<u32>, k: u32) -> bool {
    match v.iter().position(|&x| x == k) {
        Some(i) => {
            v.remove(i);
            true
        }
        None => false,
    }
}

fn first_evictable(v: &[u32], evictable: &dyn Fn(&u32) -> bool) -> Option<u32> {
    v.iter().copied().find(|k| evictable(k))
}

/// LRU (`move_on_hit`) or FIFO: one vector, cold end first.
pub struct NaiveQueue {
    pub keys: Vec<u32>,
    pub capacity: usize,
    pub move_on_hit: bool,
}

impl NaiveQueue {
    pub fn lru(capacity: usize) -> Self {
        NaiveQueue {
            keys: vec![],
            capacity,
            move_on_hit: true,
        }
    }
    pub fn fifo(capacity: usize) -> Self {
        NaiveQueue {
            keys: vec![],
            capacity,
            move_on_hit: false,
        }
    }
}

impl Policy<u32> for NaiveQueue {
    fn name(&self) -> &'static str {
        "naive-queue"
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn len(&self) -> usize {
        self.keys.len()
    }
    fn contains(&self, key: &u32) -> bool {
        self.keys.contains(key)
    }
    fn touch(&mut self, key: &u32) -> bool {
        if !self.contains(key) {
            return false;
        }
        if self.move_on_hit {
            take(&mut self.keys, *key);
            self.keys.push(*key);
        }
        true
    }
    fn admit(&mut self, key: u32, admission: Admission) {
        match admission {
            Admission::Normal => self.keys.push(key),
            Admission::Cold => self.keys.insert(0, key),
        }
    }
    fn evict(&mut self, _: Option<Incoming<u32>>, evictable: &dyn Fn(&u32) -> bool) -> Option<u32> {
        let k = first_evictable(&self.keys, evictable)?;
        take(&mut self.keys, k);
        Some(k)
    }
    fn remove(&mut self, key: &u32) -> bool {
        take(&mut self.keys, *key)
    }
}

/// LFU: (key, count, tick); the victim has the smallest (count, tick). A reference
/// takes a new, larger tick; a cold admission a new, smaller one (coldest of all).
pub struct NaiveLfu {
    pub entries: Vec<(u32, u64, i64)>,
    pub capacity: usize,
    pub tick: i64,
    pub cold_tick: i64,
}

impl NaiveLfu {
    pub fn new(capacity: usize) -> Self {
        NaiveLfu {
            entries: vec![],
            capacity,
            tick: 0,
            cold_tick: 0,
        }
    }
}

impl Policy<u32> for NaiveLfu {
    fn name(&self) -> &'static str {
        "naive-lfu"
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn len(&self) -> usize {
        self.entries.len()
    }
    fn contains(&self, key: &u32) -> bool {
        self.entries.iter().any(|e| e.0 == *key)
    }
    fn touch(&mut self, key: &u32) -> bool {
        self.tick += 1;
        let tick = self.tick;
        match self.entries.iter_mut().find(|e| e.0 == *key) {
            Some(e) => {
                e.1 += 1;
                e.2 = tick;
                true
            }
            None => false,
        }
    }
    fn admit(&mut self, key: u32, admission: Admission) {
        match admission {
            Admission::Normal => {
                self.tick += 1;
                self.entries.push((key, 1, self.tick));
            }
            Admission::Cold => {
                self.cold_tick -= 1;
                self.entries.push((key, 0, self.cold_tick));
            }
        }
    }
    fn evict(&mut self, _: Option<Incoming<u32>>, evictable: &dyn Fn(&u32) -> bool) -> Option<u32> {
        let i = (0..self.entries.len())
            .filter(|&i| evictable(&self.entries[i].0))
            .min_by_key(|&i| (self.entries[i].1, self.entries[i].2))?;
        Some(self.entries.remove(i).0)
    }
    fn remove(&mut self, key: &u32) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.0 != *key);
        before != self.entries.len()
    }
}

/// ARC straight from the paper's four cases, each list a vector (cold end first).
pub struct NaiveArc {
    pub t1: Vec<u32>,
    pub t2: Vec<u32>,
    pub b1: Vec<u32>,
    pub b2: Vec<u32>,
    /// Resident keys admitted cold and not referenced since.
    pub cold: Vec<u32>,
    pub p: usize,
    pub c: usize,
    pub adapted_for: Option<u32>,
}

impl NaiveArc {
    pub fn new(c: usize) -> Self {
        NaiveArc {
            t1: vec![],
            t2: vec![],
            b1: vec![],
            b2: vec![],
            cold: vec![],
            p: 0,
            c,
            adapted_for: None,
        }
    }

    fn adapt(&mut self, in_b1: bool) {
        if in_b1 {
            let delta = std::cmp::max(self.b2.len() / self.b1.len(), 1);
            self.p = std::cmp::min(self.c, self.p + delta);
        } else {
            let delta = std::cmp::max(self.b1.len() / self.b2.len(), 1);
            self.p = self.p.saturating_sub(delta);
        }
    }
}

impl Policy<u32> for NaiveArc {
    fn name(&self) -> &'static str {
        "naive-arc"
    }
    fn capacity(&self) -> usize {
        self.c
    }
    fn len(&self) -> usize {
        self.t1.len() + self.t2.len()
    }
    fn contains(&self, key: &u32) -> bool {
        self.t1.contains(key) || self.t2.contains(key)
    }
    fn touch(&mut self, key: &u32) -> bool {
        // Case I: move to the MRU end of T2.
        if take(&mut self.t1, *key) || take(&mut self.t2, *key) {
            self.t2.push(*key);
            take(&mut self.cold, *key);
            true
        } else {
            false
        }
    }
    fn admit(&mut self, key: u32, admission: Admission) {
        let in_b1 = self.b1.contains(&key);
        let in_b2 = self.b2.contains(&key);
        if admission == Admission::Normal && (in_b1 || in_b2) {
            // Cases II and III.
            if self.adapted_for != Some(key) {
                self.adapt(in_b1);
            }
            take(&mut self.b1, key);
            take(&mut self.b2, key);
            self.t2.push(key);
        } else {
            take(&mut self.b1, key);
            take(&mut self.b2, key);
            // Case IV.
            let total = self.t1.len() + self.t2.len() + self.b1.len() + self.b2.len();
            if self.t1.len() + self.b1.len() >= self.c {
                self.b1.remove(0);
            } else if total >= 2 * self.c {
                self.b2.remove(0);
            }
            if admission == Admission::Normal {
                self.t1.push(key);
            } else {
                self.t1.insert(0, key);
                self.cold.push(key);
            }
        }
        self.adapted_for = None;
    }
    fn evict(&mut self, incoming: Option<Incoming<u32>>, evictable: &dyn Fn(&u32) -> bool) -> Option<u32> {
        let mut x_in_b2 = false;
        if let Some(Incoming {
            key,
            admission: Admission::Normal,
        }) = incoming
        {
            let (in_b1, in_b2) = (self.b1.contains(&key), self.b2.contains(&key));
            if (in_b1 || in_b2) && self.adapted_for != Some(key) {
                self.adapt(in_b1);
                self.adapted_for = Some(key);
            }
            x_in_b2 = in_b2;
        }
        // REPLACE(x, p), falling back to the other list when nothing can go.
        let t1 = self.t1.len();
        let from_t1 = t1 >= 1 && ((x_in_b2 && t1 == self.p) || t1 > self.p);
        let try_t1 = |s: &mut Self| {
            let k = first_evictable(&s.t1, evictable)?;
            take(&mut s.t1, k);
            if !take(&mut s.cold, k) {
                s.b1.push(k);
            }
            Some(k)
        };
        let try_t2 = |s: &mut Self| {
            let k = first_evictable(&s.t2, evictable)?;
            take(&mut s.t2, k);
            if !take(&mut s.cold, k) {
                s.b2.push(k);
            }
            Some(k)
        };
        if from_t1 {
            try_t1(self).or_else(|| try_t2(self))
        } else {
            try_t2(self).or_else(|| try_t1(self))
        }
    }
    fn remove(&mut self, key: &u32) -> bool {
        take(&mut self.cold, *key);
        take(&mut self.t1, *key) || take(&mut self.t2, *key)
    }
}

/// S3-FIFO from the paper's pseudocode, one victim per call.
pub struct NaiveS3 {
    pub small: Vec<u32>,
    pub main: Vec<u32>,
    pub ghost: Vec<u32>,
    /// (key, frequency) of resident keys.
    pub freq: Vec<(u32, u8)>,
    pub cold: Vec<u32>,
    pub c: usize,
}

impl NaiveS3 {
    pub fn new(c: usize) -> Self {
        NaiveS3 {
            small: vec![],
            main: vec![],
            ghost: vec![],
            freq: vec![],
            cold: vec![],
            c,
        }
    }
    fn small_cap(&self) -> usize {
        std::cmp::max(self.c / 10, 1)
    }
    fn f(&self, k: u32) -> u8 {
        self.freq.iter().find(|e| e.0 == k).map_or(0, |e| e.1)
    }
    fn set_f(&mut self, k: u32, f: u8) {
        self.freq.retain(|e| e.0 != k);
        self.freq.push((k, f));
    }
    fn evict_s(&mut self, evictable: &dyn Fn(&u32) -> bool) -> Option<u32> {
        let mut i = 0;
        while i < self.small.len() {
            let k = self.small[i];
            if self.f(k) >= 1 {
                self.small.remove(i);
                self.main.push(k);
                self.set_f(k, 0);
            } else if evictable(&k) {
                self.small.remove(i);
                self.freq.retain(|e| e.0 != k);
                if !take(&mut self.cold, k) {
                    self.ghost.push(k);
                    if self.ghost.len() > std::cmp::max(self.c - self.small_cap(), 1) {
                        self.ghost.remove(0);
                    }
                }
                return Some(k);
            } else {
                i += 1;
            }
        }
        None
    }
    fn evict_m(&mut self, evictable: &dyn Fn(&u32) -> bool) -> Option<u32> {
        // Sweep the queue like a clock until a key with frequency 0 that may go is
        // found, or a whole sweep changes nothing.
        loop {
            let mut changed = false;
            let snapshot = self.main.clone();
            for k in snapshot {
                let f = self.f(k);
                if f > 0 {
                    self.set_f(k, f - 1);
                    take(&mut self.main, k);
                    self.main.push(k);
                    changed = true;
                } else if evictable(&k) {
                    take(&mut self.main, k);
                    self.freq.retain(|e| e.0 != k);
                    return Some(k);
                }
            }
            if !changed {
                return None;
            }
        }
    }
}

impl Policy<u32> for NaiveS3 {
    fn name(&self) -> &'static str {
        "naive-s3fifo"
    }
    fn capacity(&self) -> usize {
        self.c
    }
    fn len(&self) -> usize {
        self.small.len() + self.main.len()
    }
    fn contains(&self, key: &u32) -> bool {
        self.small.contains(key) || self.main.contains(key)
    }
    fn touch(&mut self, key: &u32) -> bool {
        if !self.contains(key) {
            return false;
        }
        let f = std::cmp::min(self.f(*key) + 1, 3);
        self.set_f(*key, f);
        take(&mut self.cold, *key);
        true
    }
    fn admit(&mut self, key: u32, admission: Admission) {
        let in_ghost = take(&mut self.ghost, key);
        self.set_f(key, 0);
        match admission {
            Admission::Normal if in_ghost => self.main.push(key),
            Admission::Normal => self.small.push(key),
            Admission::Cold => {
                self.small.insert(0, key);
                self.cold.push(key);
            }
        }
    }
    fn evict(&mut self, _: Option<Incoming<u32>>, evictable: &dyn Fn(&u32) -> bool) -> Option<u32> {
        if self.small.len() >= self.small_cap() || self.main.is_empty() {
            self.evict_s(evictable).or_else(|| self.evict_m(evictable))
        } else {
            self.evict_m(evictable).or_else(|| self.evict_s(evictable))
        }
    }
    fn remove(&mut self, key: &u32) -> bool {
        self.freq.retain(|e| e.0 != *key);
        take(&mut self.cold, *key);
        take(&mut self.small, *key) || take(&mut self.main, *key)
    }
}

/// The delegates' rule over LRU: preferred keys first (LRU among them), then LRU.
pub struct NaivePreferLru {
    pub lru: NaiveQueue,
    /// Preferred keys, least recently referenced first.
    pub preferred: Vec<u32>,
}

impl Policy<u32> for NaivePreferLru {
    fn name(&self) -> &'static str {
        "naive-prefer-lru"
    }
    fn capacity(&self) -> usize {
        self.lru.capacity
    }
    fn len(&self) -> usize {
        self.lru.len()
    }
    fn contains(&self, key: &u32) -> bool {
        self.lru.contains(key)
    }
    fn touch(&mut self, key: &u32) -> bool {
        if take(&mut self.preferred, *key) {
            self.preferred.push(*key);
        }
        self.lru.touch(key)
    }
    fn admit(&mut self, key: u32, admission: Admission) {
        self.lru.admit(key, admission)
    }
    fn evict(&mut self, incoming: Option<Incoming<u32>>, evictable: &dyn Fn(&u32) -> bool) -> Option<u32> {
        if let Some(k) = first_evictable(&self.preferred, evictable) {
            take(&mut self.preferred, k);
            take(&mut self.lru.keys, k);
            return Some(k);
        }
        self.lru.evict(incoming, evictable)
    }
    fn remove(&mut self, key: &u32) -> bool {
        take(&mut self.preferred, *key);
        self.lru.remove(key)
    }
    fn set_preferred(&mut self, key: &u32, preferred: bool) {
        if preferred && self.lru.contains(key) && !self.preferred.contains(key) {
            self.preferred.push(*key);
        } else if !preferred {
            take(&mut self.preferred, *key);
        }
    }
}

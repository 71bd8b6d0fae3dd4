//! Evict preferred keys first: the delegates' write-back cache (I/O delegation, VI-B)
//! evicts fully dirty blocks first, least recently used among them, because writing
//! back a block written whole costs one aligned write and no read; otherwise it falls
//! back to the policy it wraps. The cache marks and unmarks keys with
//! [`Policy::set_preferred`] as blocks become fully dirty or are written back.
//!
//! A preferred key evicted this way is removed from the wrapped policy with
//! [`Policy::remove`], so it leaves no ghost entry there.

use std::hash::Hash;

use super::linked::{End, Linked};
use super::{Admission, Incoming, Policy};

const PREFERRED: u32 = 0;

/// `P`, except that resident keys marked preferred are evicted first, the least
/// recently referenced of them first.
#[derive(Clone, Debug)]
pub struct Prefer<K, P> {
    inner: P,
    preferred: Linked<K>,
}

impl<K: Copy + Eq + Hash, P: Policy<K>> Prefer<K, P> {
    pub fn new(inner: P) -> Self {
        Prefer {
            inner,
            preferred: Linked::new(1),
        }
    }

    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped policy, for changes that keep its resident keys (see
    /// [`super::AnyPolicy::grow`]).
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }

    /// Number of resident keys marked preferred.
    pub fn preferred_len(&self) -> usize {
        self.preferred.len(PREFERRED)
    }

    pub fn is_preferred(&self, key: &K) -> bool {
        self.preferred.find(key).is_some()
    }
}

impl<K: Copy + Eq + Hash, P: Policy<K>> Policy<K> for Prefer<K, P> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn contains(&self, key: &K) -> bool {
        self.inner.contains(key)
    }

    fn touch(&mut self, key: &K) -> bool {
        if let Some(n) = self.preferred.find(key) {
            self.preferred.relink(n, PREFERRED, End::Hot);
        }
        self.inner.touch(key)
    }

    fn admit(&mut self, key: K, admission: Admission) {
        self.inner.admit(key, admission);
    }

    fn evict(&mut self, incoming: Option<Incoming<K>>, evictable: &dyn Fn(&K) -> bool) -> Option<K> {
        if let Some(n) = self.preferred.find_cold(PREFERRED, evictable) {
            let key = self.preferred.remove(n);
            let resident = self.inner.remove(&key);
            debug_assert!(resident, "a preferred key is resident");
            return Some(key);
        }
        self.inner.evict(incoming, evictable)
    }

    fn remove(&mut self, key: &K) -> bool {
        if let Some(n) = self.preferred.find(key) {
            self.preferred.remove(n);
        }
        self.inner.remove(key)
    }

    fn set_preferred(&mut self, key: &K, preferred: bool) {
        match (self.preferred.find(key), preferred) {
            (None, true) if self.inner.contains(key) => {
                self.preferred.insert(*key, PREFERRED, End::Hot, 0);
            }
            (Some(n), false) => {
                self.preferred.remove(n);
            }
            _ => {}
        }
    }
}

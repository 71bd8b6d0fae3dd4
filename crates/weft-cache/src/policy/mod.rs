//! Replacement policies over keys: which resident key to evict. A policy knows keys
//! only (no bytes, no times): the store, or a simulator, tells it about references,
//! admissions and removals, and asks it for victims.
//!
//! Policies: [`Lru`], [`Fifo`], [`Lfu`] (least-recently-used among equal counts),
//! [`ArcPolicy`] (Megiddo and Modha, FAST 2003), [`S3Fifo`] (Yang et al., SOSP 2023), and
//! [`Prefer`], a wrapper that evicts keys marked "preferred" first (the delegates'
//! fully-dirty-first rule) and otherwise defers to the policy it wraps. [`AnyPolicy`]
//! picks one at run time by name.
//!
//! Every operation is O(1) (amortised for S3-FIFO's reinsertions), plus the keys a
//! victim search skips because the caller cannot evict them (pinned).
//!
//! Collective-I/O-aware caching feeds a policy the original per-process references in
//! their time order (the caller sorts them); a block that no process asked for is
//! admitted with [`Admission::Cold`] (or not at all: the caller then simply does not
//! admit it). A cold admission is not a reference: the key goes where it is evicted
//! next, earns no frequency, and leaves no ghost entry if it is evicted before any
//! reference, so it cannot later pass for a key the workload wanted.

mod arc;
mod hash;
mod lfu;
mod linked;
mod prefer;
mod queue;
mod s3fifo;

// The naive models are test support: public only with the `naive-models` feature, so
// that the simulator's tests (weft-trace) check its loop against them too.
#[cfg(any(test, feature = "naive-models"))]
pub mod model;
#[cfg(test)]
mod tests;

use std::fmt;
use std::hash::Hash;
use std::str::FromStr;

pub use arc::{ArcPolicy, ArcSizes};
pub use lfu::Lfu;
pub use prefer::Prefer;
pub use queue::{Fifo, Lru, Queue};
pub use s3fifo::S3Fifo;

/// How a missed key enters the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Admission {
    /// A reference: the key goes where the policy puts new keys.
    Normal,
    /// Not a reference (a block fetched because it lay between requested ones): the
    /// key goes to the cold end, to be evicted first.
    Cold,
}

/// The key a victim is being chosen for (ARC's REPLACE depends on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Incoming<K> {
    pub key: K,
    pub admission: Admission,
}

/// A replacement policy over keys, with a capacity in keys fixed at construction.
///
/// The caller keeps the resident set within the capacity: on a miss it calls
/// [`Policy::evict`] while `len() == capacity()`, then [`Policy::admit`].
pub trait Policy<K> {
    /// Short name, as on the command line (`lru`, `arc`, ...).
    fn name(&self) -> &'static str;

    /// Most resident keys.
    fn capacity(&self) -> usize;

    /// Resident keys (ghost entries are not resident).
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn contains(&self, key: &K) -> bool;

    /// A reference to `key`. Returns false, changing nothing, if it is not resident.
    fn touch(&mut self, key: &K) -> bool;

    /// Makes a missed key resident. Panics if it is resident already or the policy is
    /// full: both are bugs in the caller.
    fn admit(&mut self, key: K, admission: Admission);

    /// Chooses a resident key to evict, removes it (recording a ghost entry where the
    /// policy keeps them) and returns it. Only keys for which `evictable` returns true
    /// may be chosen; `None` if there is none. `incoming` is the key to be admitted
    /// next, when there is one.
    fn evict(&mut self, incoming: Option<Incoming<K>>, evictable: &dyn Fn(&K) -> bool) -> Option<K>;

    /// Removes a resident key for a reason other than replacement (invalidation,
    /// truncation): no ghost entry. Returns whether it was resident.
    fn remove(&mut self, key: &K) -> bool;

    /// Marks a resident key as preferred for eviction, or not. Only [`Prefer`] acts
    /// on it; other policies ignore it.
    fn set_preferred(&mut self, _key: &K, _preferred: bool) {}
}

/// What a reference did, for simulators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access<K> {
    Hit,
    Miss { evicted: Option<K> },
}

/// One reference as a simulator sees it: a hit touches the key (unless the reference is
/// cold), a miss evicts a key if the policy is full and admits the referenced one.
pub fn access<K: Copy, P: Policy<K> + ?Sized>(policy: &mut P, key: K, admission: Admission) -> Access<K> {
    if policy.contains(&key) {
        if admission == Admission::Normal {
            policy.touch(&key);
        }
        return Access::Hit;
    }
    let evicted = if policy.len() >= policy.capacity() {
        policy.evict(Some(Incoming { key, admission }), &|_| true)
    } else {
        None
    };
    policy.admit(key, admission);
    Access::Miss { evicted }
}

/// The policies by name, for configuration and command lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    Lru,
    Lfu,
    Fifo,
    Arc,
    S3Fifo,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::Lru,
        PolicyKind::Lfu,
        PolicyKind::Fifo,
        PolicyKind::Arc,
        PolicyKind::S3Fifo,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Lfu => "lfu",
            PolicyKind::Fifo => "fifo",
            PolicyKind::Arc => "arc",
            PolicyKind::S3Fifo => "s3fifo",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown policy name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown cache policy {0:?} (expected lru, lfu, fifo, arc or s3fifo)")]
pub struct UnknownPolicy(pub String);

impl FromStr for PolicyKind {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, UnknownPolicy> {
        PolicyKind::ALL
            .into_iter()
            .find(|k| {
                k.as_str().eq_ignore_ascii_case(s)
                    || (s.eq_ignore_ascii_case("s3-fifo") && *k == PolicyKind::S3Fifo)
            })
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// A policy chosen at run time (enum dispatch: no allocation, no virtual calls).
#[derive(Clone, Debug)]
pub enum AnyPolicy<K> {
    Lru(Lru<K>),
    Lfu(Lfu<K>),
    Fifo(Fifo<K>),
    Arc(ArcPolicy<K>),
    S3Fifo(S3Fifo<K>),
}

impl<K: Copy + Eq + Hash> AnyPolicy<K> {
    pub fn new(kind: PolicyKind, capacity: usize) -> Self {
        match kind {
            PolicyKind::Lru => AnyPolicy::Lru(Lru::new(capacity)),
            PolicyKind::Lfu => AnyPolicy::Lfu(Lfu::new(capacity)),
            PolicyKind::Fifo => AnyPolicy::Fifo(Fifo::new(capacity)),
            PolicyKind::Arc => AnyPolicy::Arc(ArcPolicy::new(capacity)),
            PolicyKind::S3Fifo => AnyPolicy::S3Fifo(S3Fifo::new(capacity)),
        }
    }
}

macro_rules! dispatch {
    ($self:expr, $p:ident => $e:expr) => {
        match $self {
            AnyPolicy::Lru($p) => $e,
            AnyPolicy::Lfu($p) => $e,
            AnyPolicy::Fifo($p) => $e,
            AnyPolicy::Arc($p) => $e,
            AnyPolicy::S3Fifo($p) => $e,
        }
    };
}

impl<K: Copy + Eq + Hash> AnyPolicy<K> {
    /// Raises the capacity to `capacity` keys (never lowers it), keeping every key,
    /// ghost and count: for an owner that learns only later how many keys its memory
    /// holds (a cache manager, once it knows its block size). ARC's and S3-FIFO's list
    /// targets scale with the capacity, so a policy sized far above what is resident
    /// would not act as the one simulated.
    pub fn grow(&mut self, capacity: usize) {
        dispatch!(self, p => p.grow(capacity))
    }
}

impl<K: Copy + Eq + Hash> Policy<K> for AnyPolicy<K> {
    fn name(&self) -> &'static str {
        dispatch!(self, p => p.name())
    }
    fn capacity(&self) -> usize {
        dispatch!(self, p => p.capacity())
    }
    fn len(&self) -> usize {
        dispatch!(self, p => p.len())
    }
    fn contains(&self, key: &K) -> bool {
        dispatch!(self, p => p.contains(key))
    }
    fn touch(&mut self, key: &K) -> bool {
        dispatch!(self, p => p.touch(key))
    }
    fn admit(&mut self, key: K, admission: Admission) {
        dispatch!(self, p => p.admit(key, admission))
    }
    fn evict(&mut self, incoming: Option<Incoming<K>>, evictable: &dyn Fn(&K) -> bool) -> Option<K> {
        dispatch!(self, p => p.evict(incoming, evictable))
    }
    fn remove(&mut self, key: &K) -> bool {
        dispatch!(self, p => p.remove(key))
    }
}

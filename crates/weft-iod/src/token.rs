//! Lock tokens (append and extent locks): numbers a holder presents to unlock, which
//! nobody else can guess. An unlock needs no capability (its holder may have lost
//! the file's rights meanwhile), so the token is the only proof of holding: a
//! counter would let another key holder release a lock it never took by trying the
//! numbers next to its own, and break another writer's atomic append.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

/// Makes tokens: a counter passed through SipHash under a key drawn at random when
/// the server starts (std's `RandomState`), so tokens never repeat within a run and
/// differ between runs, and one token tells nothing of another.
pub(crate) struct Tokens {
    key: RandomState,
    next: AtomicU64,
}

impl Default for Tokens {
    fn default() -> Self {
        Tokens {
            key: RandomState::new(),
            next: AtomicU64::new(0),
        }
    }
}

impl Tokens {
    /// A fresh token (never 0).
    pub(crate) fn next(&self) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.key.hash_one(n) | 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_and_not_a_progression() {
        let tokens = Tokens::default();
        let made: Vec<u64> = (0..1000).map(|_| tokens.next()).collect();
        let distinct: std::collections::HashSet<_> = made.iter().collect();
        assert_eq!(distinct.len(), made.len());
        // No constant step between consecutive tokens (a counter's would be one).
        let steps: std::collections::HashSet<_> = made.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(steps.len() > 900, "{} distinct steps", steps.len());
    }
}

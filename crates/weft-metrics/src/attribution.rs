//! Bounded per-key counters (per job, per file): Lustre's jobstats in a fixed number
//! of slots, so that 10,000 files or a thousand jobs never make 10,000 series.
//!
//! A table keeps at most `max` keys. A new key when the table is full replaces the key
//! idle longest (least recently active); its series then disappears from the scrape and
//! its counters start again from zero if it comes back, which Prometheus reads as a
//! counter reset. Busy keys are touched on every request, so they stay.

use std::collections::HashMap;
use std::hash::Hash;

/// What is counted for one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub requests: u64,
    /// Bulk data a client read (sent by the server).
    pub read_bytes: u64,
    /// Bulk data a client wrote (received by the server).
    pub written_bytes: u64,
}

#[derive(Debug)]
struct Slot {
    usage: Usage,
    /// Value of the table's clock when last touched.
    touched: u64,
}

/// At most `max` keys with their usage.
#[derive(Debug)]
pub struct Table<K> {
    slots: HashMap<K, Slot>,
    max: usize,
    clock: u64,
    /// Keys pushed out to make room, since the table was made.
    evictions: u64,
}

impl<K: Hash + Eq + Clone> Table<K> {
    /// A table of at most `max` keys (at least 1).
    pub fn new(max: usize) -> Table<K> {
        Table {
            slots: HashMap::new(),
            max: max.max(1),
            clock: 0,
            evictions: 0,
        }
    }

    /// Adds one request of `key` that moved these bytes.
    pub fn record(&mut self, key: &K, read_bytes: u64, written_bytes: u64) {
        self.clock += 1;
        let clock = self.clock;
        if !self.slots.contains_key(key) && self.slots.len() >= self.max {
            // O(max) only when a new key arrives at a full table; max is small.
            if let Some(idle) = self
                .slots
                .iter()
                .min_by_key(|(_, slot)| slot.touched)
                .map(|(k, _)| k.clone())
            {
                self.slots.remove(&idle);
                self.evictions += 1;
            }
        }
        let slot = self.slots.entry(key.clone()).or_insert(Slot {
            usage: Usage::default(),
            touched: clock,
        });
        slot.touched = clock;
        slot.usage.requests += 1;
        slot.usage.read_bytes += read_bytes;
        slot.usage.written_bytes += written_bytes;
    }

    /// Every key held now and its usage, in no particular order.
    pub fn entries(&self) -> Vec<(K, Usage)> {
        self.slots.iter().map(|(k, s)| (k.clone(), s.usage)).collect()
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn evictions(&self) -> u64 {
        self.evictions
    }
}

/// Most bytes of a job id kept as a label value.
pub const JOB_ID_BYTES_MAX: usize = 64;

/// The job id a client named in its handshake ("weft pid 12 job 4711"), cut to the
/// characters a job id of Slurm, PBS, Open MPI or a user's `WEFT_JOB` uses and to
/// `JOB_ID_BYTES_MAX` bytes: the name comes from the peer and becomes a label value.
pub fn job_of_client_name(client: &str) -> Option<String> {
    let (_, rest) = client.rsplit_once(" job ")?;
    let job: String = rest
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._:@-+/".contains(*c))
        .take(JOB_ID_BYTES_MAX)
        .collect();
    (!job.is_empty()).then_some(job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_full_table_replaces_the_key_idle_longest() {
        let mut t = Table::new(2);
        t.record(&"a", 10, 0);
        t.record(&"b", 0, 5);
        t.record(&"a", 1, 0);
        t.record(&"c", 0, 0);
        let mut keys: Vec<_> = t.entries().into_iter().map(|(k, _)| k).collect();
        keys.sort();
        assert_eq!(keys, vec!["a", "c"]);
        assert_eq!(t.evictions(), 1);
        let a = t.entries().into_iter().find(|(k, _)| *k == "a").unwrap().1;
        assert_eq!(
            a,
            Usage {
                requests: 2,
                read_bytes: 11,
                written_bytes: 0
            }
        );
    }

    #[test]
    fn job_ids_are_cut_to_safe_label_values() {
        assert_eq!(job_of_client_name("weft pid 3 job 4711").as_deref(), Some("4711"));
        assert_eq!(job_of_client_name("weft pid 3"), None);
        assert_eq!(job_of_client_name("x job \"}\n"), None);
        assert_eq!(
            job_of_client_name("x job a\"b\\c{d}").as_deref(),
            Some("abcd"),
            "quotes, backslashes and braces never reach a label"
        );
        let long = format!("x job {}", "9".repeat(500));
        assert_eq!(job_of_client_name(&long).unwrap().len(), JOB_ID_BYTES_MAX);
    }

    proptest! {
        /// Against a naive model: the table never holds more than max keys, and a key
        /// held has exactly the usage of its requests since it last entered.
        #[test]
        fn matches_a_naive_model(max in 1usize..6, ops in proptest::collection::vec((0u8..10, 0u64..100), 0..200)) {
            let mut t = Table::new(max);
            // The model: keys in order of last touch, with usage since entering.
            let mut model: Vec<(u8, Usage)> = Vec::new();
            for (key, bytes) in ops {
                t.record(&key, bytes, 1);
                if let Some(i) = model.iter().position(|(k, _)| *k == key) {
                    let (k, mut u) = model.remove(i);
                    u.requests += 1;
                    u.read_bytes += bytes;
                    u.written_bytes += 1;
                    model.push((k, u));
                } else {
                    if model.len() == max {
                        model.remove(0);
                    }
                    model.push((key, Usage { requests: 1, read_bytes: bytes, written_bytes: 1 }));
                }
                prop_assert!(t.len() <= max);
            }
            let mut got = t.entries();
            got.sort_by_key(|(k, _)| *k);
            model.sort_by_key(|(k, _)| *k);
            prop_assert_eq!(got, model);
        }
    }
}

//! Arrival order of overlapping data-changing requests: a request that changes bytes
//! of an object (as its handler's `Handler::changes` says) runs only after every
//! earlier-arrived request changing an overlapping part of the same object has
//! finished. Requests that touch disjoint bytes never wait for each other.
//!
//! Why: a client that got no answer in time tells its caller the write failed, and the
//! caller may write the same bytes anew on another connection. If the server had begun
//! the old write (a worker stuck in pwrite under writeback throttling, or the process
//! stopped mid-job), that old write used to finish after the new one and put stale
//! bytes over acknowledged ones. With this ordering the new write, having arrived
//! later, waits for the old one to finish, so the newer bytes always land last. (A
//! job not yet begun when its peer hung up is dropped instead: `run_job`.)
//!
//! 1. On dispatch, on the event loop and in arrival order, a request registers its
//!    object and byte runs with a ticket (`Order::admit`).
//! 2. If an earlier entry of that object overlaps, the job is kept in its entry
//!    (deferred): no thread waits for it, neither a worker nor the event loop. Else it
//!    goes on at once (inline or to a worker, as before).
//! 3. When a job finishes (done, failed, or dropped because its peer hung up) its entry
//!    goes (`Order::finish`), and every deferred job of the object that now has no
//!    earlier overlapping entry is handed to the workers.
//!
//! No deadlock, with any number of workers: a job is only ever deferred behind
//! earlier tickets, so the earliest entry of an object is never deferred (nothing
//! earlier overlaps it once what was earlier has finished, and `finish` launches it
//! then). A launched job never waits for another (it is queued or running, and its
//! handler finishes in bounded time), so the earliest entry always finishes, and by
//! induction every entry does. Deferred jobs hold no thread, so a stuck job delays only
//! the requests overlapping it, never a worker, the loop, or disjoint requests.
//!
//! Bound: an entry exists only for a request dispatched and not yet finished, which
//! holds one of its connection's request slots; so at most `connections_max ×
//! requests_inflight_max` entries, each of at most `CHANGED_RUNS_MAX` runs.

use std::collections::HashMap;
use std::sync::Mutex;

/// Most byte runs a request registers; a request that changes more is registered as
/// the one run covering them all (ordered more often than needed, never less).
pub const CHANGED_RUNS_MAX: usize = 256;

/// Tables of in-flight changes, by object (hashed), so that requests on different
/// objects seldom meet on one lock.
const SHARDS: usize = 64;

/// What a data-changing request changes at this server: an object (named by the
/// handler: an inode number) and byte runs of it, `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    pub object: u64,
    pub runs: Vec<(u64, u64)>,
}

impl Changes {
    /// `runs` sorted and merged, empty ones left out; more than `CHANGED_RUNS_MAX`
    /// become the one run covering them.
    pub fn new(object: u64, mut runs: Vec<(u64, u64)>) -> Changes {
        runs.retain(|r| r.0 < r.1);
        runs.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
        for run in runs {
            match merged.last_mut() {
                Some(last) if run.0 <= last.1 => last.1 = last.1.max(run.1),
                _ => merged.push(run),
            }
        }
        if merged.len() > CHANGED_RUNS_MAX {
            let (start, end) = (merged[0].0, merged[merged.len() - 1].1);
            merged = vec![(start, end)];
        }
        Changes { object, runs: merged }
    }

    /// Whether any byte is in both (both sorted and disjoint within themselves).
    fn overlaps(&self, other: &[(u64, u64)]) -> bool {
        let (mut a, mut b) = (self.runs.iter().peekable(), other.iter().peekable());
        while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
            if x.0 < y.1 && y.0 < x.1 {
                return true;
            }
            if x.1 <= y.1 {
                a.next();
            } else {
                b.next();
            }
        }
        false
    }
}

/// A job's place in the order, released when it finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    object: u64,
    number: u64,
}

struct Entry<J> {
    number: u64,
    changes: Changes,
    /// The job, while it waits for earlier overlapping entries.
    deferred: Option<J>,
}

struct Shard<J> {
    next_number: u64,
    /// Entries of each object in ticket order.
    objects: HashMap<u64, Vec<Entry<J>>>,
}

/// The table of in-flight changes; `J` is what is kept of a deferred request (a job).
pub(crate) struct Order<J> {
    shards: Box<[Mutex<Shard<J>>]>,
}

impl<J> Default for Order<J> {
    fn default() -> Self {
        Order {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        next_number: 0,
                        objects: HashMap::new(),
                    })
                })
                .collect(),
        }
    }
}

impl<J> Order<J> {
    fn shard(&self, object: u64) -> std::sync::MutexGuard<'_, Shard<J>> {
        // Objects are inode numbers, mostly consecutive: a multiplicative hash spreads them.
        let index = (object.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS;
        self.shards[index].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a request that changes `changes` after every one registered before,
    /// `job` being made with its ticket. Returns the job if it may run now (its ticket
    /// to be finished when it is done); else keeps it until `finish` hands it back.
    pub(crate) fn admit(&self, changes: Changes, job: impl FnOnce(Ticket) -> J) -> Option<J> {
        let mut shard = self.shard(changes.object);
        let number = shard.next_number;
        shard.next_number += 1;
        let job = job(Ticket {
            object: changes.object,
            number,
        });
        let entries = shard.objects.entry(changes.object).or_default();
        let blocked = entries.iter().any(|e| changes.overlaps(&e.changes.runs));
        let (deferred, admitted) = if blocked {
            (Some(job), None)
        } else {
            (None, Some(job))
        };
        entries.push(Entry {
            number,
            changes,
            deferred,
        });
        admitted
    }

    /// Ends `ticket`'s entry; returns the deferred jobs that may run now, in ticket order.
    pub(crate) fn finish(&self, ticket: Ticket) -> Vec<J> {
        let mut shard = self.shard(ticket.object);
        let Some(entries) = shard.objects.get_mut(&ticket.object) else {
            debug_assert!(false, "a ticket finished twice");
            return Vec::new();
        };
        entries.retain(|e| e.number != ticket.number);
        let mut ready = Vec::new();
        for i in 0..entries.len() {
            if entries[i].deferred.is_none() {
                continue;
            }
            let (earlier, rest) = entries.split_at_mut(i);
            let entry = &mut rest[0];
            if !earlier.iter().any(|e| entry.changes.overlaps(&e.changes.runs)) {
                ready.extend(entry.deferred.take());
            }
        }
        if entries.is_empty() {
            shard.objects.remove(&ticket.object);
        }
        ready
    }

    /// Entries held now (requests changing data, in flight), for tests.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap().objects.values().map(Vec::len).sum::<usize>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_merged_and_capped_and_overlap_is_exact() {
        let c = Changes::new(1, vec![(10, 20), (0, 5), (5, 8), (30, 30), (15, 25)]);
        assert_eq!(c.runs, vec![(0, 8), (10, 25)]);
        assert!(!c.overlaps(&[(8, 10)]), "the gap between runs is not changed");
        assert!(!c.overlaps(&[(25, 100)]), "ends are exclusive");
        assert!(c.overlaps(&[(7, 8)]));
        assert!(c.overlaps(&[(9, 11)]));
        assert!(!c.overlaps(&[]));
        // Interleaved and disjoint (two ranks' blocks of one stripe).
        let even: Vec<_> = (0..100u64).map(|k| (k * 20, k * 20 + 10)).collect();
        let odd: Vec<_> = (0..100u64).map(|k| (k * 20 + 10, k * 20 + 20)).collect();
        assert!(!Changes::new(1, even.clone()).overlaps(&odd));
        assert!(Changes::new(1, even).overlaps(&[(1985, 1986)]));
        let many: Vec<_> = (0..1000u64).map(|k| (k * 4, k * 4 + 1)).collect();
        assert_eq!(Changes::new(1, many).runs, vec![(0, 3997)]);
    }

    /// A model run: jobs are numbers; a job "runs" when admit or finish hands it out.
    #[test]
    fn overlapping_jobs_run_in_arrival_order_and_disjoint_ones_at_once() {
        let order = Order::<u32>::default();
        let mut tickets = HashMap::new();
        let mut admit = |job: u32, object: u64, runs: Vec<(u64, u64)>| {
            order.admit(Changes::new(object, runs), |t| {
                tickets.insert(job, t);
                job
            })
        };
        // 1 runs; 2 overlaps 1 and waits; 3 is disjoint from both and runs; 4 overlaps
        // only 2 (still waiting) and waits behind it; 5 is another object.
        assert_eq!(admit(1, 7, vec![(0, 100)]), Some(1));
        assert_eq!(admit(2, 7, vec![(50, 150)]), None);
        assert_eq!(admit(3, 7, vec![(200, 300)]), Some(3));
        assert_eq!(admit(4, 7, vec![(120, 130)]), None);
        assert_eq!(admit(5, 8, vec![(0, 1000)]), Some(5));
        // A truncate to 250 changes everything from there: behind 3.
        assert_eq!(admit(6, 7, vec![(250, u64::MAX)]), None);
        assert_eq!(order.len(), 6);
        assert_eq!(order.finish(tickets[&3]), vec![6], "6 waited only for 3");
        assert_eq!(order.finish(tickets[&5]), vec![]);
        assert_eq!(order.finish(tickets[&1]), vec![2], "4 still waits for 2");
        assert_eq!(order.finish(tickets[&6]), vec![]);
        assert_eq!(order.finish(tickets[&2]), vec![4]);
        assert_eq!(order.finish(tickets[&4]), vec![]);
        assert_eq!(order.len(), 0, "the table holds only what is in flight");
    }
}

//! Extent locks: byte-range locks on the files whose objects this server holds, shared
//! (readers) or exclusive (writers), what MPI-IO's atomic mode takes around each access
//! (as Lustre's lock manager does per server). A client locks, at every io server its
//! access touches and in server order, the access's ranges there; does the I/O; unlocks.
//!
//! 1. A request names a file's byte ranges (file offsets, at most `LOCK_RANGES_MAX`).
//! 2. It conflicts with a held lock of the same file when either is exclusive and their
//!    ranges overlap; then it is answered `Busy` and the client tries again (a worker
//!    thread is never parked: waiting is the client's, bounded by its timeout).
//! 3. Otherwise it is granted with a token, and the lock belongs to the connection that
//!    took it: when the connection closes (the client ended or died) its locks go.
//! 4. A lock held past [`EXTENT_LOCK_HOLD_MAX`] (a wedged client) may be taken over; its
//!    holder's unlock is then answered `Stale`, so the client learns it was not atomic.
//! 5. A writer refused for a conflict leaves a reservation of its ranges for a moment
//!    ([`WRITER_RESERVATION`], renewed by each retry): new shared locks overlapping it
//!    are refused meanwhile, so that a stream of readers cannot starve the writer.
//!    Writers ignore reservations (two waiting writers must not hold each other off).
//! 6. The table is bounded: locks per connection, locks and ranges in all, reservations.

use crate::token::Tokens;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_layout::InodeId;
use weft_proto::msg::LockStats;
use weft_proto::{ErrorCode, Range, WireError};
use weft_rpc::ConnectionId;

/// Most extent locks one connection holds at once (a client holds one per file it is
/// accessing in atomic mode, per thread).
pub const EXTENT_LOCKS_PER_CONNECTION_MAX: usize = 256;
/// Most extent locks held at once on one server.
pub const EXTENT_LOCKS_MAX: usize = 65_536;
/// Most ranges held in all locks at once on one server (16 bytes each).
pub const EXTENT_LOCK_RANGES_MAX: usize = 1 << 20;
/// Longest a holder keeps a lock before another client may take it over: far longer
/// than any one access takes, short enough that a stopped client does not wedge a file
/// until the server restarts.
pub const EXTENT_LOCK_HOLD_MAX: Duration = Duration::from_secs(600);

/// How long a refused writer's reservation holds readers back without a retry: many
/// times the clients' longest pause between retries (5 ms).
pub const WRITER_RESERVATION: Duration = Duration::from_millis(50);
/// Most writer reservations kept on one server.
const RESERVATIONS_MAX: usize = 4096;

struct Reservation {
    connection: ConnectionId,
    ranges: Vec<(u64, u64)>,
    until: Instant,
}

struct Held {
    token: u64,
    connection: ConnectionId,
    exclusive: bool,
    /// Sorted by offset, disjoint.
    ranges: Vec<(u64, u64)>,
    since: Instant,
}

impl Held {
    fn lapsed(&self) -> bool {
        self.since.elapsed() >= EXTENT_LOCK_HOLD_MAX
    }
}

#[derive(Default)]
struct Table {
    files: HashMap<InodeId, Vec<Held>>,
    reservations: HashMap<InodeId, Vec<Reservation>>,
    per_connection: HashMap<ConnectionId, usize>,
    locks: usize,
    ranges: usize,
}

impl Table {
    /// Reserves `ranges` for a writer of `connection` until `until` (renewing its
    /// reservation if it has one), unless the server keeps too many already.
    fn reserve(&mut self, inode: InodeId, connection: ConnectionId, ranges: &[(u64, u64)], until: Instant) {
        let count: usize = self.reservations.values().map(Vec::len).sum();
        let list = self.reservations.entry(inode).or_default();
        if let Some(r) = list.iter_mut().find(|r| r.connection == connection) {
            r.until = until;
            r.ranges = ranges.to_vec();
        } else if count < RESERVATIONS_MAX {
            list.push(Reservation {
                connection,
                ranges: ranges.to_vec(),
                until,
            });
        }
    }

    fn remove_where(&mut self, inode: InodeId, mut gone: impl FnMut(&Held) -> bool) -> usize {
        let Some(list) = self.files.get_mut(&inode) else {
            return 0;
        };
        let mut removed = 0;
        let (mut locks, mut ranges) = (0, 0);
        let per_connection = &mut self.per_connection;
        list.retain(|h| {
            if !gone(h) {
                return true;
            }
            removed += 1;
            locks += 1;
            ranges += h.ranges.len();
            if let Some(n) = per_connection.get_mut(&h.connection) {
                *n -= 1;
                if *n == 0 {
                    per_connection.remove(&h.connection);
                }
            }
            false
        });
        if list.is_empty() {
            self.files.remove(&inode);
        }
        self.locks -= locks;
        self.ranges -= ranges;
        removed
    }
}

/// The extent locks of one io server and their counts.
pub struct ExtentLocks {
    table: Mutex<Table>,
    next_token: Tokens,
    requests: AtomicU64,
    grants: AtomicU64,
    conflicts: AtomicU64,
    waits: AtomicU64,
    lapsed: AtomicU64,
}

impl Default for ExtentLocks {
    fn default() -> Self {
        ExtentLocks {
            table: Mutex::default(),
            next_token: Tokens::default(),
            requests: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            lapsed: AtomicU64::new(0),
        }
    }
}

/// Whether two sorted, disjoint range lists share a byte.
fn overlap(a: &[(u64, u64)], b: &[(u64, u64)]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (a0, a1) = (a[i].0, a[i].0 + a[i].1);
        let (b0, b1) = (b[j].0, b[j].0 + b[j].1);
        if a0 < b1 && b0 < a1 {
            return true;
        }
        if a1 <= b1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    false
}

/// `ranges` sorted and merged where they overlap or touch, empty ones dropped.
fn normalized(ranges: &[Range]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = ranges
        .iter()
        .filter(|r| r.len > 0)
        .map(|r| (r.offset, r.len))
        .collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (offset, len) in v {
        match out.last_mut() {
            Some(last) if offset <= last.0 + last.1 => {
                let end = (last.0 + last.1).max(offset + len);
                last.1 = end - last.0;
            }
            _ => out.push((offset, len)),
        }
    }
    out
}

impl ExtentLocks {
    /// Locks `ranges` of `inode` for `connection`, or `Busy` while a conflicting lock is
    /// held or the table is full. `attempt` > 0 marks a retry (for the wait count).
    pub fn lock(
        &self,
        connection: ConnectionId,
        inode: InodeId,
        exclusive: bool,
        attempt: u32,
        ranges: &[Range],
    ) -> Result<u64, WireError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let ranges = normalized(ranges);
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let mut lapsed = 0;
        if let Some(list) = table.files.get(&inode) {
            if list.iter().any(|h| h.lapsed()) {
                lapsed = table.remove_where(inode, Held::lapsed);
            }
        }
        if lapsed > 0 {
            self.lapsed.fetch_add(lapsed as u64, Ordering::Relaxed);
        }
        let now = Instant::now();
        if let Some(list) = table.reservations.get_mut(&inode) {
            list.retain(|r| r.until > now && !(exclusive && r.connection == connection));
            if list.is_empty() {
                table.reservations.remove(&inode);
            }
        }
        if !exclusive {
            let reserved = table.reservations.get(&inode).is_some_and(|list| {
                list.iter()
                    .any(|r| r.connection != connection && overlap(&r.ranges, &ranges))
            });
            if reserved {
                self.conflicts.fetch_add(1, Ordering::Relaxed);
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!("bytes of inode {inode} are reserved by a waiting writer"),
                ));
            }
        }
        if let Some(list) = table.files.get(&inode) {
            if let Some(h) = list
                .iter()
                .find(|h| (exclusive || h.exclusive) && overlap(&h.ranges, &ranges))
            {
                let token = h.token;
                let held_exclusive = h.exclusive;
                self.conflicts.fetch_add(1, Ordering::Relaxed);
                if exclusive {
                    table.reserve(inode, connection, &ranges, now + WRITER_RESERVATION);
                }
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!(
                        "bytes of inode {inode} are locked ({} lock {token})",
                        if held_exclusive {
                            "an exclusive"
                        } else {
                            "a shared"
                        },
                    ),
                ));
            }
        }
        let mine = table.per_connection.get(&connection).copied().unwrap_or(0);
        if mine >= EXTENT_LOCKS_PER_CONNECTION_MAX {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "this connection holds {EXTENT_LOCKS_PER_CONNECTION_MAX} extent locks, the most it may"
                ),
            ));
        }
        if table.locks >= EXTENT_LOCKS_MAX || table.ranges + ranges.len() > EXTENT_LOCK_RANGES_MAX {
            return Err(WireError::new(
                ErrorCode::Busy,
                format!(
                    "this server's extent lock table is full ({} locks, {} ranges held)",
                    table.locks, table.ranges
                ),
            ));
        }
        let token = self.next_token.next();
        table.locks += 1;
        table.ranges += ranges.len();
        *table.per_connection.entry(connection).or_insert(0) += 1;
        table.files.entry(inode).or_default().push(Held {
            token,
            connection,
            exclusive,
            ranges,
            since: Instant::now(),
        });
        self.grants.fetch_add(1, Ordering::Relaxed);
        if attempt > 0 {
            self.waits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(token)
    }

    /// Releases the lock taken with `token`; `Stale` when it is not held (it lapsed and
    /// was taken over, or its connection closed).
    pub fn unlock(&self, inode: InodeId, token: u64) -> Result<(), WireError> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if table.remove_where(inode, |h| h.token == token) == 0 {
            return Err(WireError::new(
                ErrorCode::Stale,
                format!(
                    "extent lock {token} of inode {inode} is not held (it lapsed or its connection closed)"
                ),
            ));
        }
        Ok(())
    }

    /// Releases every lock taken on `connection`.
    pub fn connection_closed(&self, connection: ConnectionId) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let inodes: Vec<InodeId> = table
            .files
            .iter()
            .filter(|(_, list)| list.iter().any(|h| h.connection == connection))
            .map(|(i, _)| *i)
            .collect();
        for inode in inodes {
            table.remove_where(inode, |h| h.connection == connection);
        }
        table.reservations.retain(|_, list| {
            list.retain(|r| r.connection != connection);
            !list.is_empty()
        });
    }

    pub fn stats(&self) -> LockStats {
        let held = self.table.lock().unwrap_or_else(|p| p.into_inner()).locks as u64;
        LockStats {
            requests: self.requests.load(Ordering::Relaxed),
            grants: self.grants.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            held,
            lapsed: self.lapsed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(offset: u64, len: u64) -> Range {
        Range { offset, len }
    }

    #[test]
    fn shared_locks_share_and_exclusive_ones_exclude_overlaps_only() {
        let locks = ExtentLocks::default();
        let (a, b) = (ConnectionId(1), ConnectionId(2));
        let file = InodeId(7);
        let ra = locks.lock(a, file, false, 0, &[r(0, 10), r(100, 10)]).unwrap();
        let rb = locks.lock(b, file, false, 0, &[r(5, 10)]).unwrap();
        // A writer overlapping either reader waits; one in the gap does not.
        let busy = locks.lock(b, file, true, 0, &[r(9, 1)]).unwrap_err();
        assert_eq!(busy.code, ErrorCode::Busy);
        assert_eq!(
            locks.lock(b, file, true, 1, &[r(105, 1)]).unwrap_err().code,
            ErrorCode::Busy
        );
        let gap = locks.lock(b, file, true, 1, &[r(15, 85)]).unwrap();
        // Another file is independent.
        locks.lock(b, InodeId(8), true, 0, &[r(0, 1000)]).unwrap();
        // Readers go: the writer gets in.
        locks.unlock(file, ra).unwrap();
        locks.unlock(file, rb).unwrap();
        let w = locks.lock(a, file, true, 2, &[r(0, 15), r(100, 10)]).unwrap();
        assert_eq!(
            locks.lock(a, file, false, 0, &[r(14, 1)]).unwrap_err().code,
            ErrorCode::Busy
        );
        // A wrong or repeated unlock is told so.
        assert_eq!(locks.unlock(file, w + 2).unwrap_err().code, ErrorCode::Stale);
        locks.unlock(file, w).unwrap();
        assert_eq!(locks.unlock(file, w).unwrap_err().code, ErrorCode::Stale);
        let s = locks.stats();
        assert_eq!((s.requests, s.grants, s.conflicts, s.waits), (8, 5, 3, 2));
        assert_eq!(s.held, 2); // `gap` and inode 8's, both b's.
        locks.connection_closed(b);
        assert_eq!(locks.stats().held, 0);
        assert_eq!(locks.unlock(file, gap).unwrap_err().code, ErrorCode::Stale);
        locks.lock(a, InodeId(8), true, 0, &[r(0, 1)]).unwrap();
    }

    #[test]
    fn a_waiting_writer_holds_new_readers_back_until_it_is_in() {
        let locks = ExtentLocks::default();
        let (reader, writer, late) = (ConnectionId(1), ConnectionId(2), ConnectionId(3));
        let file = InodeId(7);
        let first = locks.lock(reader, file, false, 0, &[r(0, 100)]).unwrap();
        // The writer is refused and reserves its bytes: a new reader of them waits,
        // one of other bytes does not, nor does the reader's own connection.
        assert_eq!(
            locks.lock(writer, file, true, 0, &[r(50, 10)]).unwrap_err().code,
            ErrorCode::Busy
        );
        assert_eq!(
            locks.lock(late, file, false, 0, &[r(55, 1)]).unwrap_err().code,
            ErrorCode::Busy
        );
        locks.lock(late, file, false, 0, &[r(60, 40)]).unwrap();
        // Another writer is not held back by the reservation (only by held locks).
        locks.lock(late, file, true, 0, &[r(200, 1)]).unwrap();
        locks.unlock(file, first).unwrap();
        let w = locks.lock(writer, file, true, 1, &[r(50, 10)]).unwrap();
        locks.unlock(file, w).unwrap();
        // Granted: the reservation is gone.
        locks.lock(late, file, false, 0, &[r(55, 1)]).unwrap();
        // A reservation lapses without retries.
        let held = locks.lock(reader, InodeId(8), false, 0, &[r(0, 1)]).unwrap();
        assert!(locks.lock(writer, InodeId(8), true, 0, &[r(0, 1)]).is_err());
        std::thread::sleep(WRITER_RESERVATION + Duration::from_millis(10));
        locks.lock(late, InodeId(8), false, 0, &[r(0, 1)]).unwrap();
        // A closed connection's reservations go with it.
        locks.unlock(InodeId(8), held).unwrap();
        assert!(locks.lock(late, InodeId(9), true, 0, &[r(0, 1)]).is_ok());
        assert!(locks.lock(writer, InodeId(9), true, 0, &[r(0, 1)]).is_err());
        locks.connection_closed(writer);
        locks.lock(reader, InodeId(9), false, 0, &[r(5, 1)]).unwrap();
    }

    #[test]
    fn a_connection_holds_a_bounded_number_of_locks() {
        let locks = ExtentLocks::default();
        let a = ConnectionId(1);
        for i in 0..EXTENT_LOCKS_PER_CONNECTION_MAX as u64 {
            locks.lock(a, InodeId(i), true, 0, &[r(0, 1)]).unwrap();
        }
        let e = locks.lock(a, InodeId(u64::MAX), true, 0, &[r(0, 1)]).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        // Another connection is not held back by a's count.
        locks
            .lock(ConnectionId(2), InodeId(u64::MAX), true, 0, &[r(0, 1)])
            .unwrap();
        locks.connection_closed(a);
        assert_eq!(locks.stats().held, 1);
        locks.lock(a, InodeId(0), true, 0, &[r(0, 1)]).unwrap();
    }

    #[test]
    fn overlap_walks_both_lists() {
        assert!(!overlap(&[(0, 5), (10, 5)], &[(5, 5), (15, 5)]));
        assert!(overlap(&[(0, 5), (10, 5)], &[(5, 5), (14, 5)]));
        assert!(overlap(&[(0, 100)], &[(50, 1)]));
        assert!(!overlap(&[], &[(0, 1)]));
        assert_eq!(
            normalized(&[r(10, 5), r(0, 10), r(30, 0), r(12, 10)]),
            vec![(0, 22)]
        );
    }
}

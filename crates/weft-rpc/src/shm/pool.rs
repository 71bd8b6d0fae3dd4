//! The read pool: one shared mapping per client process that servers place read
//! replies into (`ShmScatter`), cut into slots a call holds until its reply is read.

use super::*;

/// Bytes this process (a server) placed straight into clients' read pools
/// (`ShmScatter`), for its metrics and for tests that must see the pool path taken.
static POOL_PLACED_BYTES: AtomicU64 = AtomicU64::new(0);

pub fn pool_placed_bytes() -> u64 {
    POOL_PLACED_BYTES.load(Ordering::Relaxed)
}

pub(crate) fn count_pool_placed(bytes: u64) {
    POOL_PLACED_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// A client process's read pool: one sealed memfd of `slots` buffers of `slot_bytes`,
/// attached to every connection of the process that has a shared segment
/// (`ShmAttachPool`), so that a read whose reply goes into a buffer of the pool is
/// placed there by the server itself (`ShmScatter`) and copied by nobody in this
/// process. Made once per process by whoever wants its reads placed (the mount: one
/// buffer per FUSE worker), before the connections it should serve are made.
///
/// A buffer is leased by one reader at a time (`PoolSlot`) and not handed out again
/// while a call that names it may still be written by a server (`PoolHold`): a call
/// given up on holds it until its answer comes; a call whose connection broke first
/// leaves the buffer retired for good (the server may still be writing into it, and
/// nothing tells when it stops), which only shrinks the pool.
pub struct Pool {
    map: Arc<Mapping>,
    slot_bytes: usize,
    state: Mutex<PoolState>,
}

struct PoolState {
    /// Slots free now, the most recently used last (handed out first: its pages are
    /// populated in both processes' page tables).
    free: Vec<usize>,
    leased: Vec<bool>,
    /// Calls in flight that name bytes of the slot.
    holds: Vec<u32>,
    retired: Vec<bool>,
}

impl PoolState {
    fn release_if_idle(&mut self, slot: usize) {
        if !self.leased[slot] && self.holds[slot] == 0 && !self.retired[slot] {
            self.free.push(slot);
        }
    }
}

static POOL: std::sync::OnceLock<Option<Arc<Pool>>> = std::sync::OnceLock::new();

impl Pool {
    /// Makes this process's pool of `slots` buffers of `slot_bytes` (rounded up to
    /// pages) once; later calls get the same pool (or `None` again). `None` where the
    /// transport is forced to the socket or TCP (`WEFT_TRANSPORT=unix|tcp`), the pool
    /// would pass `SEGMENT_BYTES_MAX`, or the memfd cannot be made (the reason is
    /// printed; reads then take the usual path).
    pub fn install(slots: usize, slot_bytes: usize) -> Option<Arc<Pool>> {
        POOL.get_or_init(|| {
            if matches!(Transport::from_env(), Transport::Unix | Transport::Tcp) || slots == 0 {
                return None;
            }
            match Pool::new(slots, slot_bytes) {
                Ok(pool) => Some(pool),
                Err(e) => {
                    eprintln!(
                        "weft: no read pool ({slots} x {slot_bytes} bytes): {e}; reads are copied as before"
                    );
                    None
                }
            }
        })
        .clone()
    }

    pub(super) fn new(slots: usize, slot_bytes: usize) -> io::Result<Arc<Pool>> {
        let slot_bytes = slot_bytes.max(1).next_multiple_of(PAGE);
        let bytes = (slots as u64).saturating_mul(slot_bytes as u64);
        let map = Mapping::create_named(bytes, c"weft-shm-pool")?;
        Ok(Arc::new(Pool {
            map: Arc::new(map),
            slot_bytes,
            state: Mutex::new(PoolState {
                free: (0..slots).rev().collect(),
                leased: vec![false; slots],
                holds: vec![0; slots],
                retired: vec![false; slots],
            }),
        }))
    }

    /// The process's pool, if one was made.
    pub fn get() -> Option<Arc<Pool>> {
        POOL.get().cloned().flatten()
    }

    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// A free buffer, if there is one now.
    pub fn lease(self: &Arc<Pool>) -> Option<PoolSlot> {
        let mut state = self.state.lock().unwrap();
        let slot = state.free.pop()?;
        state.leased[slot] = true;
        drop(state);
        // This process's page-table entries for the buffer, once (a fresh mapping
        // would take a fault per page in the reply's pinning).
        self.map.populate(slot * self.slot_bytes, self.slot_bytes, true);
        Some(PoolSlot {
            pool: self.clone(),
            slot,
        })
    }

    /// Buffers free now, and retired (tests).
    pub fn counts(&self) -> (usize, usize) {
        let state = self.state.lock().unwrap();
        (state.free.len(), state.retired.iter().filter(|r| **r).count())
    }

    /// The pool offsets of `parts` (address, length; empty ones left out) if every one
    /// lies within the pool, else `None`.
    pub fn pieces_of(&self, parts: &[(*mut u8, usize)]) -> Option<Vec<(u64, u64)>> {
        let base = self.map.base as usize;
        let end = base + self.map.len;
        parts
            .iter()
            .filter(|p| p.1 > 0)
            .map(|&(ptr, len)| {
                let at = ptr as usize;
                (at >= base && at.checked_add(len)? <= end).then(|| ((at - base) as u64, len as u64))
            })
            .collect::<Option<Vec<_>>>()
            .filter(|pieces| !pieces.is_empty())
    }

    /// Holds the buffers `pieces` lie in until the returned hold is dropped (or
    /// retired): they are not handed out again meanwhile.
    pub fn hold(self: &Arc<Pool>, pieces: &[(u64, u64)]) -> PoolHold {
        let mut slots: Vec<usize> = Vec::new();
        for &(offset, len) in pieces {
            let first = offset as usize / self.slot_bytes;
            let last = (offset + len - 1) as usize / self.slot_bytes;
            slots.extend(first..=last);
        }
        slots.sort_unstable();
        slots.dedup();
        let mut state = self.state.lock().unwrap();
        for &slot in &slots {
            state.holds[slot] += 1;
        }
        PoolHold {
            pool: self.clone(),
            slots,
            retire: false,
        }
    }
}

/// One buffer of the pool, leased by one reader.
pub struct PoolSlot {
    pool: Arc<Pool>,
    slot: usize,
}

impl PoolSlot {
    /// The buffer (`slot_bytes`; whatever an earlier lease left there until written).
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the slot lies within the mapping, and only this lease reaches it
        // (servers write into it only for calls this lease's holder made).
        unsafe {
            std::slice::from_raw_parts_mut(
                self.pool.map.base.add(self.slot * self.pool.slot_bytes),
                self.pool.slot_bytes,
            )
        }
    }
}

impl Drop for PoolSlot {
    fn drop(&mut self) {
        let mut state = self.pool.state.lock().unwrap();
        state.leased[self.slot] = false;
        state.release_if_idle(self.slot);
    }
}

/// The pool buffers a `ShmScatter` in flight names (see `Pool::hold`).
pub struct PoolHold {
    pool: Arc<Pool>,
    slots: Vec<usize>,
    retire: bool,
}

impl PoolHold {
    /// The call's connection broke before its answer came: a server may still write
    /// into these buffers, so they are never handed out again.
    pub fn retire(mut self) {
        self.retire = true;
    }
}

impl Drop for PoolHold {
    fn drop(&mut self) {
        let mut state = self.pool.state.lock().unwrap();
        for &slot in &self.slots {
            state.holds[slot] -= 1;
            if self.retire {
                state.retired[slot] = true;
            }
            state.release_if_idle(slot);
        }
    }
}

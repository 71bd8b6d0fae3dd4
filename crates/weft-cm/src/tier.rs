//! This manager's share of the global cache: weft-cache's `Cache` (blocks, valid and
//! dirty extents, the replacement policy, the memory bound) behind one lock, with what
//! a server adds around it: each file's layout (to fetch and write back), fetches that
//! two requests for one block do not both make, and waiting for write-backs in flight.
//!
//! The lock is held for bookkeeping and for copying a write's bytes in, never for I/O:
//! reads copy out of a snapshot after letting go, and write-backs send a snapshot.
//! `settled` is signalled whenever a fetch or a write-back ends, for those waiting on
//! one.
//!
//! A truncate, punch or drop of a file revokes the fetches of the blocks it cuts (each
//! fetch holds a ticket; a revoked one installs nothing), so bytes read from the io
//! servers before it are never cached after it. A truncate also holds its cut (the
//! file's bytes from the new end on) while this manager truncates the io servers'
//! objects: no fetch of a block there starts, and no write-back of one is handed out,
//! until the objects are cut too.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use weft_cache::policy::{AnyPolicy, Policy, PolicyKind, Prefer};
use weft_cache::store::{Cache, CacheConfig, CacheStats, Lookup, Snapshot, Touch, WriteBack};
use weft_cache::{Admission, BlockKey, BlockMap, CacheError, NoSpace};
use weft_layout::{InodeId, Layout};
use weft_proto::{ErrorCode, WireError};

/// The policy's capacity in blocks is the memory bound over the charge of the smallest
/// block the tier has served (its bytes and [`weft_cache::store::ENTRY_OVERHEAD_BYTES`]),
/// and never more than the bound over this size, so that the policy's ghost lists stay
/// a few megabytes. Sizing the policy for the blocks actually cached matters for ARC
/// and S3-FIFO, whose list targets scale with it: sized for 4 KiB blocks while 64 KiB
/// ones fill the memory, ARC's target for T1 could grow far past what T1 can ever hold
/// and the tier would no longer act as the ARC that `weft sim` simulates.
const POLICY_BLOCK_BYTES: u64 = 4096;
/// Longest wait for a fetch or write-back of someone else before looking again.
const SETTLE_WAIT: Duration = Duration::from_millis(50);

/// What the tier knows of one file with cached blocks.
struct FileEntry {
    layout: Layout,
    block_size_bytes: u64,
}

struct State {
    /// Wrapped in [`Prefer`]: it only acts when the tier marks fully dirty blocks
    /// (a delegate), otherwise it is the inner policy.
    cache: Cache<Prefer<BlockKey, AnyPolicy<BlockKey>>>,
    files: BTreeMap<InodeId, FileEntry>,
    /// Blocks being fetched, each with its fetch's ticket: a second reader waits for
    /// the first one's fetch; a truncate, punch or drop revokes the fetches of the
    /// blocks it cuts (removes them), and `fill` installs nothing for a revoked ticket.
    fetching: HashMap<BlockKey, Ticket>,
    next_ticket: u64,
    /// Truncates in progress here, (inode, new size): their io objects are being cut,
    /// so no fetch of the file's bytes from the size on starts, and no write-back of
    /// those blocks is handed out, until they end. At most one per request being
    /// served.
    cuts: Vec<(InodeId, u64)>,
    /// Files migrated to a new layout while cached (`migrated`): requests carrying
    /// another layout are refused `Stale`, so a handle opened before the switch can
    /// never bring the old layout's routing back. The oldest [`MIGRATED_MAX`] are
    /// kept (then an old handle's request meets the io servers' fences instead).
    migrated: HashMap<InodeId, Layout>,
    migrated_order: std::collections::VecDeque<InodeId>,
}

/// Most migrated files whose new layout the tier remembers.
pub const MIGRATED_MAX: usize = 65_536;

impl State {
    /// Whether a truncate in progress cuts bytes of block `key` (of `block_size`).
    fn cut(&self, key: BlockKey, block_size: u64) -> bool {
        self.cuts
            .iter()
            .any(|&(inode, size)| inode == key.inode && (key.block + 1).saturating_mul(block_size) > size)
    }

    /// Forgets every block of `inode`, dirty or not, and its entry.
    fn forget_file(&mut self, inode: InodeId) {
        self.cache.invalidate_inode(inode);
        self.files.remove(&inode);
        // A fetch in flight would bring the blocks (and the file's entry) back.
        self.revoke_fetches(inode, 0..=u64::MAX);
    }

    /// Revokes the fetches in flight of `inode`'s blocks `blocks`: what they read from
    /// the io servers is older than the change that revokes them.
    fn revoke_fetches(&mut self, inode: InodeId, blocks: std::ops::RangeInclusive<u64>) {
        self.fetching
            .retain(|k, _| !(k.inode == inode && blocks.contains(&k.block)));
    }
}

/// One fetch of a block (see `State::fetching`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u64);

/// A truncate holding its cut (`Tier::begin_truncate`); ended by `Tier::end_truncate`.
#[must_use]
pub struct Cut {
    inode: InodeId,
    size: u64,
}

/// What a lookup of a request's pieces in one block gave.
pub enum Found {
    /// The whole block's bytes, every piece valid in it.
    Hit(Snapshot),
    /// Fetch these ranges of the block (all its bytes not valid), then `fill`;
    /// `resident`: the block is cached (partly valid, or reserved empty).
    Fetch {
        gaps: Vec<Range<u32>>,
        resident: bool,
        ticket: Ticket,
    },
    /// Another request is fetching the block, or a truncate is cutting it: ask again.
    Wait,
}

/// Bytes a fetch brings to `Tier::fill`.
pub enum Fetched<'a> {
    /// `(offset in block, bytes)` pieces, copied into the block.
    Parts(&'a [(u32, &'a [u8])]),
    /// The whole block, read into a buffer of `Tier::fetch_buffer`: it becomes the
    /// block's bytes.
    Block(std::sync::Arc<[u8]>),
}

/// What a lookup does when another request is fetching the block.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Fetching {
    /// Wait a while for the fetch to settle.
    Wait,
    /// Return at once.
    Return,
}

/// Why an operation needs the caller to act before it can go on.
pub enum Blocked {
    /// Write these blocks (of these files) back, then try again.
    WriteBack(Vec<BlockKey>),
    /// Write-backs of victims are in flight: wait, then try again.
    Wait,
    /// The fetch was revoked (a truncate, punch or drop of its block meanwhile): look
    /// the block up again.
    Again,
}

pub struct Tier {
    state: Mutex<State>,
    settled: Condvar,
    policy_kind: PolicyKind,
    prefer_full_dirty: bool,
    capacity_bytes: u64,
    started: Instant,
}

impl Tier {
    /// `prefer_full_dirty`: evict fully dirty blocks first (written whole, no fetch),
    /// then by `policy`: the delegates' write-back cache.
    pub fn new(capacity_bytes: u64, policy: PolicyKind, prefer_full_dirty: bool) -> Tier {
        // Grown to the memory's count of blocks by the first file (`check_file`), before
        // anything is admitted.
        let entries = 1;
        Tier {
            state: Mutex::new(State {
                cache: Cache::new(
                    Prefer::new(AnyPolicy::new(policy, entries)),
                    CacheConfig {
                        memory_bytes_max: capacity_bytes,
                        prefer_full_dirty,
                    },
                ),
                files: BTreeMap::new(),
                fetching: HashMap::new(),
                next_ticket: 0,
                cuts: Vec::new(),
                migrated: HashMap::new(),
                migrated_order: std::collections::VecDeque::new(),
            }),
            settled: Condvar::new(),
            policy_kind: policy,
            prefer_full_dirty,
            capacity_bytes,
            started: Instant::now(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits (bounded) for a fetch or write-back to end.
    fn wait<'a>(&'a self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.settled
            .wait_timeout(state, SETTLE_WAIT)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0)
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy_kind.as_str()
    }

    /// Whether fully dirty blocks are evicted first (a delegate).
    pub fn prefers_full_dirty(&self) -> bool {
        self.prefer_full_dirty
    }

    pub fn stats(&self) -> CacheStats {
        self.state().cache.stats()
    }

    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// Records the file's layout and block size, or checks them against what earlier
    /// requests said: every client of a file must route it the same way.
    /// Also sizes the policy for the file's blocks (see [`POLICY_BLOCK_BYTES`]).
    fn check_file(
        &self,
        state: &mut State,
        inode: InodeId,
        layout: &Layout,
        block_size_bytes: u64,
    ) -> Result<(), WireError> {
        if state
            .migrated
            .get(&inode)
            .is_some_and(|current| current != layout)
        {
            return Err(WireError::new(
                ErrorCode::Stale,
                format!(
                    "inode {inode} migrated to a new layout since this handle was opened: reopen the file"
                ),
            ));
        }
        let entry = match state.files.entry(inode) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                let charge =
                    block_size_bytes.max(POLICY_BLOCK_BYTES) + weft_cache::store::ENTRY_OVERHEAD_BYTES;
                let fit = (self.capacity_bytes / charge).max(1) as usize;
                if fit > state.cache.policy().capacity() {
                    state.cache.policy_mut().inner_mut().grow(fit);
                }
                v.insert(FileEntry {
                    layout: layout.clone(),
                    block_size_bytes,
                })
            }
        };
        if entry.block_size_bytes != block_size_bytes || entry.layout != *layout {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "inode {inode}: this request's layout or block size ({block_size_bytes} bytes) differs \
                     from the one its cached blocks have ({} bytes)",
                    entry.block_size_bytes
                ),
            ));
        }
        Ok(())
    }

    /// Writes pieces `(offset in block, bytes)` into a block (write-allocate).
    pub fn write(
        &self,
        key: BlockKey,
        layout: &Layout,
        block_size_bytes: u64,
        pieces: &[(u32, &[u8])],
    ) -> Result<Result<(), Blocked>, WireError> {
        let now = self.now_ms();
        let mut state = self.state();
        self.check_file(&mut state, key.inode, layout, block_size_bytes)?;
        let written = state
            .cache
            .write_pieces(key, block_size_bytes as u32, pieces, now);
        blocked(written)
    }

    /// Looks up a request's pieces in a block; with `Touch::Yes` a reference for the
    /// policy. When another request is fetching the block, `Found::Wait` comes after a
    /// wait for it to settle, or at once with `Fetching::Return`: for a caller holding
    /// fetches of its own open (a batch), which must not wait for others that may be
    /// waiting for it.
    pub fn lookup(
        &self,
        key: BlockKey,
        layout: &Layout,
        block_size_bytes: u64,
        ranges: &[Range<u32>],
        touch: Touch,
        fetching: Fetching,
    ) -> Result<Found, WireError> {
        let mut state = self.state();
        self.check_file(&mut state, key.inode, layout, block_size_bytes)?;
        if state.fetching.contains_key(&key) {
            if fetching == Fetching::Wait {
                drop(self.wait(state));
            }
            return Ok(Found::Wait);
        }
        let len = block_size_bytes as u32;
        match state
            .cache
            .lookup_ranges(key, len, ranges, touch)
            .map_err(cache_error)?
        {
            Lookup::Hit(snapshot) => Ok(Found::Hit(snapshot)),
            Lookup::Miss { .. } if state.cut(key, block_size_bytes) => {
                // Its io objects are being truncated: what they hold now may be cut.
                if fetching == Fetching::Wait {
                    drop(self.wait(state));
                }
                Ok(Found::Wait)
            }
            Lookup::Miss { resident, .. } => {
                // Fetch all the block lacks: a stripe-sized read, and what follows in
                // the block is likely wanted next.
                let gaps = match state.cache.valid_extents(&key) {
                    Some(valid) => valid.missing(0..len),
                    None => std::iter::once(0..len).collect(),
                };
                let ticket = Ticket(state.next_ticket);
                state.next_ticket += 1;
                state.fetching.insert(key, ticket);
                Ok(Found::Fetch {
                    gaps,
                    resident,
                    ticket,
                })
            }
        }
    }

    /// A fetch failed: another request may try.
    pub fn abandon_fetch(&self, key: BlockKey, ticket: Ticket) {
        let mut state = self.state();
        if state.fetching.get(&key) == Some(&ticket) {
            state.fetching.remove(&key);
        }
        self.settled.notify_all();
    }

    /// A buffer to fetch a whole block of `block_size_bytes` into, for `fill` with
    /// `Fetched::Block` (pooled block memory when there is some).
    pub fn fetch_buffer(&self, block_size_bytes: u64) -> std::sync::Arc<[u8]> {
        self.state().cache.fetch_buffer(block_size_bytes as u32)
    }

    /// Hands in fetched bytes and ends the fetch; returns the block's bytes for the
    /// request that fetched them (every piece of `ranges` valid). A block not cached is
    /// admitted with `admission` (a whole block fetched into its own buffer becomes the
    /// block, no copy), or with `None` left out of the cache: `Ok(Ok(None))` for
    /// `Fetched::Parts` (the caller serves its fetched bytes themselves), the buffer
    /// itself for `Fetched::Block`. A fetch revoked meanwhile installs nothing
    /// (`Blocked::Again`).
    #[allow(clippy::too_many_arguments)]
    pub fn fill(
        &self,
        key: BlockKey,
        ticket: Ticket,
        layout: &Layout,
        block_size_bytes: u64,
        ranges: &[Range<u32>],
        fetched: Fetched<'_>,
        admission: Option<Admission>,
    ) -> Result<Result<Option<Snapshot>, Blocked>, WireError> {
        let mut state = self.state();
        self.settled.notify_all();
        if state.fetching.get(&key) != Some(&ticket) {
            // A truncate, punch or drop came after the fetch read the io servers.
            return Ok(Err(Blocked::Again));
        }
        state.fetching.remove(&key);
        let admission = match (admission, fetched) {
            (Some(a), fetched) => (a, fetched),
            (None, Fetched::Block(buffer)) if !state.cache.contains(&key) => {
                return Ok(Ok(Some(Snapshot::detached(buffer))))
            }
            (None, _) if !state.cache.contains(&key) => return Ok(Ok(None)),
            (None, fetched) => (Admission::Normal, fetched),
        };
        let (admission, fetched) = admission;
        // The file's entry may have gone while the fetch ran (its last block dropped).
        self.check_file(&mut state, key.inode, layout, block_size_bytes)?;
        let len = block_size_bytes as u32;
        match fetched {
            Fetched::Block(buffer) => {
                if let Err(b) = blocked(state.cache.install(key, len, buffer, admission))? {
                    return Ok(Err(b));
                }
            }
            Fetched::Parts(parts) => {
                for (offset, bytes) in parts {
                    if let Err(b) = blocked(state.cache.fill(key, len, *offset, bytes, admission))? {
                        return Ok(Err(b));
                    }
                }
            }
        }
        // Under the same lock: every byte is valid now (fetched, or dirty).
        match state
            .cache
            .lookup_ranges(key, len, ranges, Touch::No)
            .map_err(cache_error)?
        {
            Lookup::Hit(snapshot) => Ok(Ok(Some(snapshot))),
            Lookup::Miss { .. } => Ok(Err(Blocked::Wait)),
        }
    }

    /// References from the processes' original pattern (collective-I/O-aware caching),
    /// in time order, from `references[*next]` on: a cached block is touched (a hit); a
    /// missing one is made room for and admitted now (a miss: its bytes come with the
    /// aggregated request that follows). Stops, returning what the store asks for,
    /// when room needs dirty victims written back first (`*next` then names the
    /// reference to resume with); a block that cannot be admitted at all (everything
    /// pinned) is left out. Adds the hits and their bytes to `counts`.
    pub fn reference_all(
        &self,
        layout: &Layout,
        block_size_bytes: u64,
        references: &[(BlockKey, u64)],
        next: &mut usize,
        counts: &mut (u64, u64),
    ) -> Result<Option<Blocked>, WireError> {
        let mut state = self.state();
        while let Some((key, bytes)) = references.get(*next) {
            self.check_file(&mut state, key.inode, layout, block_size_bytes)?;
            if state.cache.reference(key) {
                counts.0 += 1;
                counts.1 += bytes;
            } else {
                match blocked(
                    state
                        .cache
                        .reserve(*key, block_size_bytes as u32, Admission::Normal),
                ) {
                    Ok(Ok(())) => {}
                    Ok(Err(b)) => return Ok(Some(b)),
                    // Everything pinned: the aggregated request still serves the bytes.
                    Err(_) => {}
                }
            }
            *next += 1;
        }
        Ok(None)
    }

    /// Waits a little for a fetch or write-back to end.
    pub fn pause(&self) {
        drop(self.wait(self.state()));
    }

    /// Hands out write-backs of `keys` (one file's), skipping clean blocks and blocks
    /// already being written back, with the file's layout and block size.
    pub fn take_write_backs(
        &self,
        inode: InodeId,
        keys: &[BlockKey],
    ) -> Option<(Layout, u64, Vec<WriteBack>)> {
        let mut state = self.state();
        let file = state.files.get(&inode)?;
        let (layout, block_size) = (file.layout.clone(), file.block_size_bytes);
        // A block a truncate is cutting goes back once the io objects are cut: written
        // before, the truncate of the objects would remove bytes the block holds as
        // clean.
        while keys.iter().any(|k| state.cut(*k, block_size)) {
            state = self.wait(state);
        }
        let taken = keys
            .iter()
            .filter_map(|k| state.cache.take_write_back(k))
            .collect();
        Some((layout, block_size, taken))
    }

    /// Ends write-backs: written (clean what they carried) or not (keep dirty).
    pub fn end_write_backs(&self, write_backs: Vec<WriteBack>, written: bool) {
        let mut state = self.state();
        for wb in write_backs {
            if written {
                state.cache.finish_write_back(wb.token);
            } else {
                state.cache.abort_write_back(wb.token);
            }
        }
        self.settled.notify_all();
    }

    /// The file's dirty blocks now, in block order.
    pub fn dirty_of(&self, inode: InodeId) -> Vec<BlockKey> {
        self.state().cache.dirty_blocks_of(inode).collect()
    }

    /// Waits until none of `keys` is being written back.
    pub fn wait_write_backs(&self, inode: InodeId, keys: &[BlockKey]) {
        let mut state = self.state();
        loop {
            let busy = state
                .cache
                .write_backs_in_flight_of(inode)
                .any(|k| keys.binary_search(&k).is_ok());
            if !busy {
                return;
            }
            state = self.wait(state);
        }
    }

    /// Forgets the file's bytes at and after `size`, once no write-back of it is in
    /// flight (one might carry bytes past the new end), revokes the fetches of the
    /// blocks cut, and holds the cut (no fetch or write-back of those blocks) until
    /// `end_truncate`: the caller truncates the io objects in between.
    pub fn begin_truncate(&self, inode: InodeId, size: u64) -> Cut {
        let mut state = self.state();
        while state.cache.write_backs_in_flight_of(inode).next().is_some() {
            state = self.wait(state);
        }
        if let Some(file) = state.files.get(&inode) {
            let block_size = file.block_size_bytes;
            let map = BlockMap::new(block_size).expect("checked when the file was first seen");
            state.cache.truncate(inode, size, &map);
            state.revoke_fetches(inode, size / block_size..=u64::MAX);
        } else {
            // No block size known: no block cached, but a fetch may be in flight.
            state.revoke_fetches(inode, 0..=u64::MAX);
        }
        state.cuts.push((inode, size));
        Cut { inode, size }
    }

    /// The io objects are cut (or failed to be): fetches and write-backs of the blocks
    /// go on.
    pub fn end_truncate(&self, cut: Cut) {
        let mut state = self.state();
        if let Some(at) = state
            .cuts
            .iter()
            .position(|&(inode, size)| inode == cut.inode && size == cut.size)
        {
            state.cuts.swap_remove(at);
        }
        self.settled.notify_all();
    }

    /// Forgets the file's cached bytes in `[offset, offset + len)` (a hole punched in
    /// it), dirty or not, once its write-backs in flight are done (one of them could
    /// otherwise write old bytes into the hole).
    pub fn punch(&self, inode: InodeId, offset: u64, len: u64) {
        let mut state = self.state();
        while state.cache.write_backs_in_flight_of(inode).next().is_some() {
            state = self.wait(state);
        }
        if let Some(file) = state.files.get(&inode) {
            let block_size = file.block_size_bytes;
            let map = BlockMap::new(block_size).expect("checked when the file was first seen");
            state.cache.punch(inode, offset, len, &map);
            if len > 0 {
                let last = offset.saturating_add(len - 1) / block_size;
                state.revoke_fetches(inode, offset / block_size..=last);
            }
        } else {
            state.revoke_fetches(inode, 0..=u64::MAX);
        }
    }

    /// Drops every block of the file, dirty or not.
    pub fn drop_file(&self, inode: InodeId) {
        self.state().forget_file(inode);
    }

    /// The file migrated to `layout`: from now on only requests with `layout` are served
    /// (others are refused `Stale`), and its blocks are fetched and written back under
    /// it whatever the requests that made them carried. The caller then drops them.
    pub fn migrated(&self, inode: InodeId, layout: &Layout) {
        let mut state = self.state();
        if let Some(file) = state.files.get_mut(&inode) {
            file.layout = layout.clone();
        }
        if state.migrated.insert(inode, layout.clone()).is_none() {
            state.migrated_order.push_back(inode);
            if state.migrated_order.len() > MIGRATED_MAX {
                if let Some(oldest) = state.migrated_order.pop_front() {
                    state.migrated.remove(&oldest);
                }
            }
        }
    }

    /// The end of the file's data held dirty here (0 if none).
    pub fn dirty_end(&self, inode: InodeId) -> u64 {
        let state = self.state();
        let Some(file) = state.files.get(&inode) else {
            return 0;
        };
        state
            .cache
            .dirty_blocks_of(inode)
            .filter_map(|k| {
                let last = state.cache.dirty_extents(&k)?.iter().last()?;
                Some(k.block * file.block_size_bytes + last.end as u64)
            })
            .max()
            .unwrap_or(0)
    }

    /// Bytes dirty in this manager now.
    pub fn dirty_bytes(&self) -> u64 {
        self.state().cache.dirty_bytes()
    }

    /// Fully dirty blocks not being written back, at most `most`, by file (the eager
    /// write-back of a stream of writes, see `writeback`).
    pub fn fully_dirty(&self, most: usize) -> BTreeMap<InodeId, Vec<BlockKey>> {
        let state = self.state();
        let mut by_file: BTreeMap<InodeId, Vec<BlockKey>> = BTreeMap::new();
        for k in state.cache.fully_dirty_idle().take(most) {
            by_file.entry(k.inode).or_default().push(k);
        }
        by_file
    }

    /// Dirty blocks to write back in the background: dirty since before
    /// `older_than_ms`; and when more than `limit_bytes` are dirty, the oldest until
    /// half of that remains. At most `most` of each kind, by file.
    pub fn background(
        &self,
        older_than_ms: u64,
        limit_bytes: u64,
        most: usize,
    ) -> BTreeMap<InodeId, Vec<BlockKey>> {
        let mut state = self.state();
        let mut chosen: Vec<BlockKey> = state.cache.dirty_older_than(older_than_ms).take(most).collect();
        if state.cache.dirty_beyond(limit_bytes).next().is_some() {
            chosen.extend(state.cache.dirty_beyond(limit_bytes / 2).take(most));
        }
        chosen.sort();
        chosen.dedup();
        let mut by_file: BTreeMap<InodeId, Vec<BlockKey>> = BTreeMap::new();
        for k in chosen {
            by_file.entry(k.inode).or_default().push(k);
        }
        // Files whose blocks are all gone need no layout any more.
        let State {
            cache,
            files,
            fetching,
            ..
        } = &mut *state;
        files.retain(|inode, _| {
            cache.blocks_of(*inode).next().is_some() || fetching.keys().any(|k| k.inode == *inode)
        });
        by_file
    }
}

/// A store result as "done", "caller must act", or an error to report.
fn blocked(result: Result<(), CacheError>) -> Result<Result<(), Blocked>, WireError> {
    match result {
        Ok(()) => Ok(Ok(())),
        Err(CacheError::NoSpace(NoSpace::WriteBack(keys))) => Ok(Err(Blocked::WriteBack(keys))),
        Err(CacheError::NoSpace(NoSpace::WriteBacksInFlight)) => Ok(Err(Blocked::Wait)),
        Err(e) => Err(cache_error(e)),
    }
}

fn cache_error(e: CacheError) -> WireError {
    let code = match e {
        CacheError::NoSpace(NoSpace::AllPinned { .. }) => ErrorCode::Busy,
        CacheError::BlockTooLarge { .. } => ErrorCode::TooLarge,
        _ => ErrorCode::InvalidArgument,
    };
    WireError::new(code, format!("cache manager: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_cache::store::ENTRY_OVERHEAD_BYTES;

    fn layout(stripe: u64) -> Layout {
        Layout {
            stripe_size_bytes: stripe,
            servers: vec![weft_layout::ServerId(1)],
            replication: Default::default(),
        }
    }

    fn capacity(tier: &Tier) -> usize {
        tier.state().cache.policy().capacity()
    }

    /// The policy holds as many keys as the memory holds blocks of the smallest size
    /// served: grown by each new file, never lowered, at most the memory over 4 KiB.
    /// With 64 KiB blocks and room for 10, ARC evicts at 10 keys as the simulator's does.
    #[test]
    fn the_policy_is_sized_for_the_blocks_the_memory_holds() {
        let block = 65_536u64;
        let memory = 10 * (block + ENTRY_OVERHEAD_BYTES) + 100;
        let tier = Tier::new(memory, PolicyKind::Arc, false);
        let refs: Vec<(BlockKey, u64)> = (0..30).map(|b| (BlockKey::new(InodeId(7), b), 100)).collect();
        let (mut next, mut counts) = (0, (0, 0));
        assert!(tier
            .reference_all(&layout(block), block, &refs, &mut next, &mut counts)
            .unwrap()
            .is_none());
        assert_eq!(capacity(&tier), 10);
        assert_eq!(tier.state().cache.len(), 10, "evicted at 10 blocks");
        // A file of larger blocks lowers nothing; one of smaller blocks raises it.
        let big: Vec<(BlockKey, u64)> = vec![(BlockKey::new(InodeId(8), 0), 100)];
        let (mut next, mut counts) = (0, (0, 0));
        let _ = tier.reference_all(&layout(4 * block), 4 * block, &big, &mut next, &mut counts);
        assert_eq!(capacity(&tier), 10);
        let small: Vec<(BlockKey, u64)> = vec![(BlockKey::new(InodeId(9), 0), 100)];
        let (mut next, mut counts) = (0, (0, 0));
        let _ = tier.reference_all(&layout(1024), 1024, &small, &mut next, &mut counts);
        assert_eq!(
            capacity(&tier) as u64,
            memory / (POLICY_BLOCK_BYTES + ENTRY_OVERHEAD_BYTES)
        );
    }
}

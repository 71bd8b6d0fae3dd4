//! Store tests: worked examples of each operation, and random operation sequences
//! against a model (the io server's bytes and the bytes a client should read, one
//! array per block, plus a naive LRU of the resident blocks) checking the memory
//! bound, the accounting, the data, and that no dirty byte is lost.

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;

use super::*;
use crate::policy::{AnyPolicy, Lru, PolicyKind, Prefer};

const LEN: u32 = 64;
const INODE: InodeId = InodeId(7);

fn key(block: u64) -> BlockKey {
    BlockKey::new(INODE, block)
}

/// Room for `blocks` blocks of LEN bytes with little bookkeeping.
fn room_for(blocks: u64) -> u64 {
    blocks * (LEN as u64 + ENTRY_OVERHEAD_BYTES + 64) + 2 * 3 * 8
}

fn lru_cache(blocks: u64) -> Cache<Lru<BlockKey>> {
    Cache::new(
        Lru::new(1000),
        CacheConfig {
            memory_bytes_max: room_for(blocks),
            prefer_full_dirty: false,
        },
    )
}

fn hit_bytes<P: Policy<BlockKey>>(c: &mut Cache<P>, b: u64, r: Range<u32>) -> Vec<u8> {
    match c.lookup(key(b), LEN, r, Touch::Yes).unwrap() {
        Lookup::Hit(s) => s.to_vec(),
        miss => panic!("expected a hit, got {miss:?}"),
    }
}

fn write_back_all<P: Policy<BlockKey>>(c: &mut Cache<P>, keys: &[BlockKey]) {
    for k in keys {
        let wb = c.take_write_back(k).expect("dirty");
        assert!(c.finish_write_back(wb.token));
    }
}

/// A fetch that read the server before a write of the block was written back must not
/// put its older bytes over the written ones, now clean: fills skip every valid byte,
/// not only dirty ones. They went over clean bytes, and the tier's model test
/// (weft-cm tier_model) read the fetch's zeros where a write had put 1s (issue 28).
#[test]
fn fills_keep_bytes_written_and_written_back_meanwhile() {
    let mut c = lru_cache(4);
    // A read's fetch of block 0 starts (nothing cached); meanwhile a write of 10..20
    // lands and is written back.
    c.write(key(0), LEN, 10, &[1; 10], 0).unwrap();
    write_back_all(&mut c, &[key(0)]);
    assert!(c.dirty_extents(&key(0)).is_none_or(|d| d.is_empty()));
    // The fetch's bytes, read before the write-back, arrive for the whole block.
    c.fill(key(0), LEN, 0, &[9; LEN as usize], Admission::Normal)
        .unwrap();
    let mut expect = vec![9; LEN as usize];
    expect[10..20].fill(1);
    assert_eq!(hit_bytes(&mut c, 0, 0..LEN), expect);
}

#[test]
fn reads_fetch_only_what_is_missing_and_fills_keep_dirty_bytes() {
    let mut c = lru_cache(4);
    c.write(key(0), LEN, 10, &[1; 10], 0).unwrap();
    assert_eq!(hit_bytes(&mut c, 0, 10..20), vec![1; 10]);
    match c.lookup(key(0), LEN, 0..30, Touch::Yes).unwrap() {
        Lookup::Miss { resident, missing } => {
            assert!(resident);
            assert_eq!(missing, vec![0..10, 20..30]);
        }
        hit => panic!("{hit:?}"),
    }
    // The server's bytes (9s) arrive for the whole range: the dirty 1s are kept.
    c.fill(key(0), LEN, 0, &[9; 30], Admission::Normal).unwrap();
    let mut expect = vec![9; 30];
    expect[10..20].fill(1);
    assert_eq!(hit_bytes(&mut c, 0, 0..30), expect);
    assert_eq!(c.dirty_extents(&key(0)).unwrap().to_vec(), vec![10..20]);
    let s = c.stats();
    assert_eq!((s.hits, s.misses, s.bytes_valid, s.bytes_dirty), (2, 1, 30, 10));
    match c.lookup(key(5), LEN, 0..LEN, Touch::Yes).unwrap() {
        Lookup::Miss { resident, missing } => {
            assert!(!resident && missing == std::slice::from_ref(&(0..LEN)))
        }
        hit => panic!("{hit:?}"),
    }
}

#[test]
fn a_write_racing_a_write_back_stays_dirty() {
    let mut c = lru_cache(4);
    c.write(key(0), LEN, 0, &[1; LEN as usize], 5).unwrap();
    let wb = c.take_write_back(&key(0)).unwrap();
    assert!(wb.full);
    assert_eq!(wb.extents, vec![0..LEN]);
    assert!(c.take_write_back(&key(0)).is_none(), "one write-back at a time");
    c.write(key(0), LEN, 5, &[2], 6).unwrap();
    // The hand-off is a snapshot: it still shows the old byte.
    assert_eq!(wb.pieces().next().unwrap().1[5], 1);
    assert!(c.finish_write_back(wb.token));
    assert!(!c.finish_write_back(wb.token), "a token finishes once");
    assert_eq!(c.dirty_extents(&key(0)).unwrap().to_vec(), vec![5..6]);
    let again = c.take_write_back(&key(0)).unwrap();
    assert_eq!(again.extents, std::slice::from_ref(&(5..6)));
    assert!(!again.full);
    assert!(c.abort_write_back(again.token));
    assert_eq!(c.dirty_extents(&key(0)).unwrap().to_vec(), vec![5..6]);
    let s = c.stats();
    assert_eq!(
        (
            s.write_backs,
            s.write_backs_full,
            s.write_back_bytes,
            s.bytes_dirty
        ),
        (1, 1, 64, 1)
    );
}

#[test]
fn pressure_drops_clean_victims_and_hands_out_dirty_ones() {
    let mut c = lru_cache(2);
    c.fill(key(0), LEN, 0, &[9; LEN as usize], Admission::Normal)
        .unwrap();
    c.write(key(1), LEN, 0, &[1; 8], 0).unwrap();
    // Block 0 is clean and least recently used: dropped.
    c.write(key(2), LEN, 0, &[2; 8], 0).unwrap();
    assert!(!c.contains(&key(0)));
    // Now the victim is block 1, dirty: it must be written back first.
    let err = c.write(key(3), LEN, 0, &[3; 8], 0).unwrap_err();
    assert_eq!(err, CacheError::NoSpace(NoSpace::WriteBack(vec![key(1)])));
    // Still cached and readable while on its way out.
    assert_eq!(hit_bytes(&mut c, 1, 0..8), vec![1; 8]);
    let wb = c.take_write_back(&key(1)).unwrap();
    assert_eq!(
        c.write(key(3), LEN, 0, &[3; 8], 0),
        Err(CacheError::NoSpace(NoSpace::WriteBacksInFlight))
    );
    assert!(c.finish_write_back(wb.token));
    assert!(!c.contains(&key(1)), "dropped once clean");
    c.write(key(3), LEN, 0, &[3; 8], 0).unwrap();
    assert_eq!(c.stats().evictions, 2);
    assert!(c.stats().memory_bytes <= c.config().memory_bytes_max);
}

#[test]
fn pinned_blocks_stay_and_everything_pinned_is_reported() {
    let mut c = lru_cache(1);
    c.write(key(0), LEN, 0, &[1; 4], 0).unwrap();
    let pin = c.pin(&key(0)).unwrap();
    assert_eq!(
        c.fill(key(1), LEN, 0, &[0; 4], Admission::Normal),
        Err(CacheError::NoSpace(NoSpace::AllPinned { pinned_blocks: 1 }))
    );
    assert!(c.unpin(pin));
    assert_eq!(
        c.fill(key(1), LEN, 0, &[0; 4], Admission::Normal),
        Err(CacheError::NoSpace(NoSpace::WriteBack(vec![key(0)])))
    );
    // Pinned while evicting: written back but kept until unpinned.
    let pin = c.pin(&key(0)).unwrap();
    write_back_all(&mut c, &[key(0)]);
    assert!(c.contains(&key(0)));
    assert!(c.unpin(pin));
    assert!(!c.contains(&key(0)));
}

#[test]
fn bad_input_is_an_error() {
    let mut c = lru_cache(1);
    assert!(matches!(
        c.write(key(0), LEN, 60, &[0; 5], 0),
        Err(CacheError::OutsideBlock { .. })
    ));
    assert!(matches!(
        c.write(key(0), 0, 0, &[], 0),
        Err(CacheError::BlockSize(0))
    ));
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 9..3;
    assert!(matches!(
        c.lookup(key(0), LEN, reversed, Touch::Yes),
        Err(CacheError::OutsideBlock { .. })
    ));
    c.write(key(0), LEN, 0, &[0; 5], 0).unwrap();
    assert!(matches!(
        c.write(key(0), 128, 0, &[0; 5], 0),
        Err(CacheError::BlockLength {
            cached: 64,
            requested: 128,
            ..
        })
    ));
    assert!(matches!(
        c.reserve(key(1), 1 << 20, Admission::Normal),
        Err(CacheError::BlockTooLarge { .. })
    ));
}

#[test]
fn truncate_and_invalidate_drop_bytes_explicitly() {
    let mut c = lru_cache(8);
    for b in 0..3 {
        c.write(key(b), LEN, 0, &[b as u8 + 1; LEN as usize], b).unwrap();
    }
    let other = BlockKey::new(InodeId(8), 0);
    c.write(other, LEN, 0, &[7; 4], 0).unwrap();
    let blocks = BlockMap::new(LEN as u64).unwrap();
    let dropped = c.truncate(INODE, LEN as u64 + 10, &blocks);
    assert_eq!(
        dropped,
        Invalidated {
            blocks: 1,
            dirty_bytes: 64 + 54
        }
    );
    assert!(!c.contains(&key(2)));
    assert_eq!(c.dirty_extents(&key(1)).unwrap().to_vec(), vec![0..10]);
    let wb = c.take_write_back(&key(0)).unwrap();
    let dropped = c.invalidate_inode(INODE);
    assert_eq!(
        dropped,
        Invalidated {
            blocks: 2,
            dirty_bytes: 64 + 10
        }
    );
    assert!(!c.finish_write_back(wb.token), "stale after invalidation");
    assert_eq!(c.dirty_blocks().collect::<Vec<_>>(), vec![other]);
    assert_eq!(c.stats().bytes_dirty, 4);
}

#[test]
fn punch_drops_the_blocks_inside_and_cuts_those_at_the_ends() {
    let mut c = lru_cache(8);
    for b in 0..4 {
        c.write(key(b), LEN, 0, &[b as u8 + 1; LEN as usize], b).unwrap();
    }
    let other = BlockKey::new(InodeId(8), 1);
    c.write(other, LEN, 0, &[7; LEN as usize], 0).unwrap();
    let blocks = BlockMap::new(LEN as u64).unwrap();
    // From 10 bytes into block 0 to 20 bytes into block 2.
    let dropped = c.punch(INODE, 10, 2 * LEN as u64 + 10, &blocks);
    assert_eq!(
        dropped,
        Invalidated {
            blocks: 1,
            dirty_bytes: 54 + 64 + 20
        }
    );
    assert!(!c.contains(&key(1)));
    assert_eq!(c.dirty_extents(&key(0)).unwrap().to_vec(), vec![0..10]);
    assert_eq!(c.dirty_extents(&key(2)).unwrap().to_vec(), vec![20..64]);
    assert_eq!(c.dirty_extents(&key(3)).unwrap().to_vec(), vec![0..64]);
    assert_eq!(c.dirty_extents(&other).unwrap().to_vec(), vec![0..64]);
    // The punched bytes are no longer cached: a read of them misses.
    assert!(!matches!(
        c.lookup(key(0), LEN, 5..15, Touch::No).unwrap(),
        Lookup::Hit(_)
    ));
    assert_eq!(hit_bytes(&mut c, 2, 20..30), vec![3; 10]);
    assert_eq!(c.punch(INODE, 0, 0, &blocks), Invalidated::default());
}

#[test]
fn dirty_blocks_by_file_age_and_limit() {
    let mut c = lru_cache(8);
    c.write(key(2), LEN, 0, &[1; LEN as usize], 10).unwrap();
    c.write(key(0), LEN, 0, &[1; LEN as usize], 20).unwrap();
    c.write(key(1), LEN, 0, &[1; LEN as usize], 30).unwrap();
    c.write(key(2), LEN, 0, &[2; 4], 40).unwrap(); // stays dated 10
    c.write(BlockKey::new(InodeId(9), 0), LEN, 0, &[1], 50).unwrap();
    assert_eq!(
        c.dirty_blocks_of(INODE).collect::<Vec<_>>(),
        vec![key(0), key(1), key(2)]
    );
    assert_eq!(c.dirty_older_than(25).collect::<Vec<_>>(), vec![key(2), key(0)]);
    // 3*64 + 1 dirty bytes; down to 64 takes the two oldest.
    assert_eq!(c.dirty_beyond(65).collect::<Vec<_>>(), vec![key(2), key(0)]);
    assert_eq!(c.dirty_beyond(1000).count(), 0);
}

#[test]
fn delegates_evict_fully_dirty_blocks_first() {
    let mut c = Cache::new(
        Prefer::new(Lru::new(1000)),
        CacheConfig {
            memory_bytes_max: room_for(3),
            prefer_full_dirty: true,
        },
    );
    c.write(key(0), LEN, 0, &[1; 8], 0).unwrap(); // partly dirty, least recent
    c.write(key(1), LEN, 0, &[1; LEN as usize], 0).unwrap(); // fully dirty
    c.fill(key(2), LEN, 0, &[1; 8], Admission::Normal).unwrap(); // clean
    assert_eq!(
        c.write(key(3), LEN, 0, &[1; 8], 0),
        Err(CacheError::NoSpace(NoSpace::WriteBack(vec![key(1)])))
    );
    write_back_all(&mut c, &[key(1)]);
    assert!(!c.contains(&key(1)));
    c.write(key(3), LEN, 0, &[1; 8], 0).unwrap();
    // No fully dirty block left: plain LRU, block 0 (dirty) before block 2 (clean).
    assert_eq!(
        c.write(key(4), LEN, 0, &[1; 8], 0),
        Err(CacheError::NoSpace(NoSpace::WriteBack(vec![key(0)])))
    );
}

#[test]
fn snapshots_that_outlive_their_block_are_counted() {
    let mut c = lru_cache(4);
    c.write(key(0), LEN, 0, &[1; LEN as usize], 0).unwrap();
    let before = c.stats().memory_bytes;
    let Lookup::Hit(snapshot) = c.lookup(key(0), LEN, 0..LEN, Touch::Yes).unwrap() else {
        panic!("hit expected");
    };
    c.write(key(0), LEN, 0, &[2; 4], 0).unwrap(); // copy on write
    assert_eq!(snapshot[0], 1);
    assert_eq!(hit_bytes(&mut c, 0, 0..1), vec![2]);
    assert_eq!(c.stats().memory_bytes, before + LEN as u64);
    drop(snapshot);
    c.write(key(0), LEN, 0, &[3; 4], 0).unwrap();
    assert_eq!(c.stats().memory_bytes, before);
}

#[test]
fn collective_io_aware_references_come_separately() {
    let mut c = Cache::new(
        Lru::new(2),
        CacheConfig {
            memory_bytes_max: room_for(10),
            prefer_full_dirty: false,
        },
    );
    c.fill(key(0), LEN, 0, &[0; 4], Admission::Normal).unwrap();
    c.fill(key(1), LEN, 0, &[0; 4], Admission::Normal).unwrap();
    // An aggregated read of block 0 that no process asked for again: no reference.
    assert!(matches!(
        c.lookup(key(0), LEN, 0..4, Touch::No).unwrap(),
        Lookup::Hit(_)
    ));
    c.fill(key(2), LEN, 0, &[0; 4], Admission::Normal).unwrap();
    assert!(!c.contains(&key(0)));
    // The original pattern referenced block 1: block 2 goes next.
    assert!(c.reference(&key(1)));
    c.fill(key(3), LEN, 0, &[0; 4], Admission::Cold).unwrap();
    assert!(c.contains(&key(1)) && !c.contains(&key(2)));
    // A cold block is the next victim.
    c.fill(key(4), LEN, 0, &[0; 4], Admission::Normal).unwrap();
    assert!(!c.contains(&key(3)));
}

// ---- random operations against a model ----

const BLOCKS: u64 = 6;

#[derive(Debug, Clone)]
enum Op {
    Write {
        block: u64,
        offset: u32,
        len: u32,
        value: u8,
    },
    Fill {
        block: u64,
        offset: u32,
        len: u32,
        cold: bool,
    },
    Lookup {
        block: u64,
        offset: u32,
        len: u32,
        touch: bool,
    },
    Reference(u64),
    Take(u64),
    Finish(usize),
    Abort(usize),
    Pin(u64),
    Unpin(usize),
    Truncate(u64),
    Invalidate,
}

fn span() -> impl Strategy<Value = (u32, u32)> {
    prop_oneof![
        (0..LEN, 1..=LEN).prop_map(|(o, l)| (o, l.min(LEN - o))),
        (0..LEN, 1u32..4).prop_map(|(o, l)| (o, l.min(LEN - o))),
        Just((0, LEN)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let b = 0..BLOCKS;
    prop_oneof![
        8 => (b.clone(), span(), any::<u8>()).prop_map(|(block, (offset, len), value)| Op::Write { block, offset, len, value }),
        5 => (b.clone(), span(), any::<bool>()).prop_map(|(block, (offset, len), cold)| Op::Fill { block, offset, len, cold }),
        5 => (b.clone(), span(), any::<bool>()).prop_map(|(block, (offset, len), touch)| Op::Lookup { block, offset, len, touch }),
        1 => b.clone().prop_map(Op::Reference),
        3 => b.clone().prop_map(Op::Take),
        2 => any::<usize>().prop_map(Op::Finish),
        1 => any::<usize>().prop_map(Op::Abort),
        1 => b.clone().prop_map(Op::Pin),
        1 => any::<usize>().prop_map(Op::Unpin),
        1 => (0..BLOCKS * LEN as u64 + 10).prop_map(Op::Truncate),
        1 => Just(Op::Invalidate),
    ]
}

/// The world outside the store: what the io server holds and what a client must read.
struct World {
    server: HashMap<u64, Vec<u8>>,
    latest: HashMap<u64, Vec<u8>>,
    pending: Vec<WriteBack>,
    pins: Vec<PinToken>,
}

impl World {
    fn new() -> Self {
        let zero = |_| vec![0u8; LEN as usize];
        World {
            server: (0..BLOCKS).map(|b| (b, zero(b))).collect(),
            latest: (0..BLOCKS).map(|b| (b, zero(b))).collect(),
            pending: vec![],
            pins: vec![],
        }
    }

    /// What the role does with a finished write-back: the bytes reach the server.
    fn land(&mut self, wb: &WriteBack) {
        let server = self.server.get_mut(&wb.key.block).unwrap();
        for (offset, bytes) in wb.pieces() {
            server[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
        }
    }
}

/// A naive LRU over the blocks in the policy, with the store's victim rules: the
/// least recently used unpinned block goes; a clean one is dropped, a dirty one moves
/// out to "evicting" until written back. Used where memory is ample and the policy's
/// capacity in blocks is what limits the cache.
struct NaiveLruResidency {
    capacity: usize,
    lru: Vec<u64>,
    evicting: BTreeSet<u64>,
}

impl NaiveLruResidency {
    fn touch(&mut self, b: u64) {
        if let Some(i) = self.lru.iter().position(|&x| x == b) {
            self.lru.remove(i);
            self.lru.push(b);
        }
    }

    /// Room for a new block `b`; false if no victim could go.
    fn admit<P: Policy<BlockKey>>(&mut self, c: &Cache<P>, b: u64, cold: bool) -> bool {
        while self.lru.len() >= self.capacity {
            let Some(i) = self.lru.iter().position(|&x| c.entries[&key(x)].pins == 0) else {
                return false;
            };
            let v = self.lru.remove(i);
            let e = &c.entries[&key(v)];
            if !e.dirty.is_empty() || e.write_back.is_some() {
                self.evicting.insert(v);
            }
        }
        if cold {
            self.lru.insert(0, b);
        } else {
            self.lru.push(b);
        }
        true
    }
}

fn check<P: Policy<BlockKey>>(c: &Cache<P>, w: &World) -> Result<(), TestCaseError> {
    let max = c.config.memory_bytes_max;
    prop_assert!(c.memory_bytes <= max, "{} > {}", c.memory_bytes, max);
    let charges: u64 = c.entries.values().map(Entry::charge).sum();
    let detached: u64 = c.detached.iter().map(|(_, len)| len).sum();
    prop_assert_eq!(c.memory_bytes, charges + detached + c.pool_bytes);
    prop_assert_eq!(c.pool_bytes, c.pool.iter().map(|b| b.len() as u64).sum::<u64>());
    prop_assert!(c.pool_bytes <= max / POOL_FRACTION);
    prop_assert_eq!(c.detached_bytes, detached);
    let (mut valid, mut dirty) = (0u64, 0u64);
    for b in 0..BLOCKS {
        let (server, latest) = (&w.server[&b], &w.latest[&b]);
        let Some(e) = c.entries.get(&key(b)) else {
            prop_assert_eq!(server, latest, "block {} dropped with unwritten bytes", b);
            continue;
        };
        prop_assert_eq!(e.charged, e.charge());
        prop_assert_eq!(e.data.len(), LEN as usize);
        prop_assert_eq!(c.policy.contains(&key(b)), !e.evicting);
        prop_assert_eq!(c.dirty_keys.contains(&key(b)), !e.dirty.is_empty());
        for i in 0..LEN {
            let byte = i as usize;
            if e.valid.covers(i..i + 1) {
                prop_assert_eq!(e.data[byte], latest[byte], "block {} byte {}", b, i);
            }
            if e.dirty.covers(i..i + 1) {
                prop_assert!(e.valid.covers(i..i + 1), "dirty but not valid");
            } else {
                prop_assert_eq!(server[byte], latest[byte], "block {} byte {} lost", b, i);
            }
        }
        valid += e.valid.bytes() as u64;
        dirty += e.dirty.bytes() as u64;
    }
    prop_assert_eq!((c.stats.bytes_valid, c.stats.bytes_dirty), (valid, dirty));
    prop_assert_eq!(c.dirty_by_age.len(), c.dirty_keys.len());
    Ok(())
}

/// Applies a write or a fill to the store and, if it succeeds, to the world.
fn write_or_fill<P: Policy<BlockKey>>(
    c: &mut Cache<P>,
    w: &mut World,
    op: &Op,
    now: u64,
) -> Result<(), CacheError> {
    match *op {
        Op::Write {
            block,
            offset,
            len,
            value,
        } => {
            c.write(key(block), LEN, offset, &vec![value; len as usize], now)?;
            w.latest.get_mut(&block).unwrap()[offset as usize..(offset + len) as usize].fill(value);
            Ok(())
        }
        Op::Fill {
            block,
            offset,
            len,
            cold,
        } => {
            let bytes = w.server[&block][offset as usize..(offset + len) as usize].to_vec();
            let admission = if cold { Admission::Cold } else { Admission::Normal };
            c.fill(key(block), LEN, offset, &bytes, admission)
        }
        _ => unreachable!(),
    }
}

/// Runs `ops`; the role's reaction to [`NoSpace::WriteBack`] is to write the named
/// blocks back and retry once. With `lru`, residency is compared with the naive LRU.
fn run<P: Policy<BlockKey>>(
    c: &mut Cache<P>,
    ops: &[Op],
    mut lru: Option<NaiveLruResidency>,
) -> Result<(), TestCaseError> {
    let mut w = World::new();
    for (now, op) in ops.iter().enumerate() {
        let now = now as u64;
        match op {
            &Op::Write { block, .. } | &Op::Fill { block, .. } => {
                let existed = c.contains(&key(block));
                let cold = matches!(op, Op::Fill { cold: true, .. });
                let predicted = lru.as_mut().map(|m| {
                    if !existed {
                        return m.admit(c, block, cold);
                    }
                    if matches!(op, Op::Write { .. }) && !m.evicting.contains(&block) {
                        m.touch(block);
                    }
                    true
                });
                let mut result = write_or_fill(c, &mut w, op, now);
                if let Err(CacheError::NoSpace(NoSpace::WriteBack(keys))) = &result {
                    for k in keys {
                        let wb = c.take_write_back(k).expect("handed out dirty");
                        w.land(&wb);
                        prop_assert!(c.finish_write_back(wb.token));
                    }
                    result = write_or_fill(c, &mut w, op, now);
                }
                if let Some(predicted) = predicted {
                    prop_assert_eq!(predicted, result.is_ok(), "{:?} gave {:?}", op, result);
                }
                match result {
                    Ok(()) | Err(CacheError::NoSpace(_)) => {}
                    Err(e) => prop_assert!(false, "unexpected {:?}", e),
                }
            }
            &Op::Lookup {
                block,
                offset,
                len,
                touch,
            } => {
                let t = if touch { Touch::Yes } else { Touch::No };
                let range = offset..offset + len;
                match c.lookup(key(block), LEN, range.clone(), t).unwrap() {
                    Lookup::Hit(s) => {
                        prop_assert_eq!(
                            &s[..],
                            &w.latest[&block][offset as usize..(offset + len) as usize]
                        );
                    }
                    Lookup::Miss { missing, .. } => {
                        prop_assert!(!missing.is_empty());
                        prop_assert!(missing
                            .iter()
                            .all(|m| m.start >= range.start && m.end <= range.end && m.start < m.end));
                    }
                }
                if let (Some(lru), true) = (&mut lru, touch) {
                    lru.touch(block);
                }
            }
            &Op::Reference(block) => {
                c.reference(&key(block));
                if let Some(lru) = &mut lru {
                    lru.touch(block);
                }
            }
            &Op::Take(block) => {
                if let Some(wb) = c.take_write_back(&key(block)) {
                    w.pending.push(wb);
                }
            }
            &Op::Finish(i) | &Op::Abort(i) if !w.pending.is_empty() => {
                let wb = w.pending.remove(i % w.pending.len());
                if matches!(op, Op::Finish(_)) {
                    w.land(&wb);
                    prop_assert!(c.finish_write_back(wb.token));
                } else {
                    prop_assert!(c.abort_write_back(wb.token));
                }
            }
            &Op::Pin(block) => w.pins.extend(c.pin(&key(block))),
            &Op::Unpin(i) if !w.pins.is_empty() => {
                let token = w.pins.remove(i % w.pins.len());
                prop_assert!(c.unpin(token));
            }
            &Op::Truncate(size) if w.pending.is_empty() && lru.is_none() => {
                // The role truncates the io server too, after its write-backs landed.
                c.truncate(INODE, size, &BlockMap::new(LEN as u64).unwrap());
                // Pins of dropped blocks are stale; eviction never drops a pinned block.
                w.pins.retain(|t| c.contains(&t.key));
                for b in 0..BLOCKS {
                    for i in 0..LEN as u64 {
                        if b * LEN as u64 + i >= size {
                            w.server.get_mut(&b).unwrap()[i as usize] = 0;
                            w.latest.get_mut(&b).unwrap()[i as usize] = 0;
                        }
                    }
                }
            }
            Op::Invalidate if w.pending.is_empty() && lru.is_none() => {
                c.invalidate_inode(INODE);
                w.latest = w.server.clone();
                w.pins.clear();
            }
            _ => {}
        }
        if let Some(lru) = &mut lru {
            lru.evicting.retain(|b| c.contains(&key(*b)));
            let resident: BTreeSet<u64> = (0..BLOCKS).filter(|&b| c.contains(&key(b))).collect();
            let expected: BTreeSet<u64> = lru.lru.iter().chain(&lru.evicting).copied().collect();
            prop_assert_eq!(resident, expected, "after {:?}", op);
        }
        check(c, &w)?;
    }
    // Flush: every dirty byte reaches the server.
    for wb in std::mem::take(&mut w.pending) {
        w.land(&wb);
        prop_assert!(c.finish_write_back(wb.token));
    }
    let dirty: Vec<BlockKey> = c.dirty_blocks().collect();
    for k in dirty {
        let wb = c.take_write_back(&k).unwrap();
        w.land(&wb);
        prop_assert!(c.finish_write_back(wb.token));
    }
    prop_assert_eq!(c.stats.bytes_dirty, 0);
    prop_assert_eq!(&w.server, &w.latest);
    Ok(())
}

fn policy() -> impl Strategy<Value = (PolicyKind, bool)> {
    (prop::sample::select(PolicyKind::ALL.to_vec()), any::<bool>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Tight memory (1 to 5 blocks' worth) with every policy, with and without the
    /// fully-dirty-first wrapper.
    #[test]
    fn store_keeps_bound_bytes_and_dirty_data((kind, prefer) in policy(), blocks in 1u64..5,
                                               ops in prop::collection::vec(op(), 0..120)) {
        let config = CacheConfig { memory_bytes_max: room_for(blocks), prefer_full_dirty: prefer };
        let mut c = Cache::new(Prefer::new(AnyPolicy::new(kind, blocks as usize)), config);
        run(&mut c, &ops, None)?;
    }

    /// Ample memory, at most `capacity` blocks: residency follows a naive LRU.
    #[test]
    fn store_residency_follows_naive_lru(capacity in 1usize..5, ops in prop::collection::vec(op(), 0..120)) {
        let config = CacheConfig { memory_bytes_max: room_for(100), prefer_full_dirty: false };
        let mut c = Cache::new(Lru::new(capacity), config);
        let lru = NaiveLruResidency { capacity, lru: vec![], evicting: BTreeSet::new() };
        run(&mut c, &ops, Some(lru))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A batch of pieces written at once leaves the block exactly as the same pieces
    /// written one by one (bytes, valid and dirty extents, dirty bytes), and a lookup
    /// of several ranges hits exactly when each range alone would.
    #[test]
    fn batched_writes_and_lookups_equal_one_by_one(
        pieces in prop::collection::vec((0u32..LEN, 1u32..16, any::<u8>()), 0..40),
        probes in prop::collection::vec((0u32..LEN, 0u32..16), 1..6),
    ) {
        let pieces: Vec<(u32, Vec<u8>)> = pieces
            .into_iter()
            .map(|(o, n, v)| (o, vec![v; n.min(LEN - o) as usize]))
            .collect();
        let mut one = lru_cache(4);
        let mut batch = lru_cache(4);
        for (o, data) in &pieces {
            one.write(key(0), LEN, *o, data, 5).unwrap();
        }
        let borrowed: Vec<(u32, &[u8])> = pieces.iter().map(|(o, d)| (*o, d.as_slice())).collect();
        batch.write_pieces(key(0), LEN, &borrowed, 5).unwrap();
        prop_assert_eq!(one.stats().bytes_dirty, batch.stats().bytes_dirty);
        if pieces.is_empty() {
            return Ok(());
        }
        prop_assert_eq!(one.valid_extents(&key(0)).unwrap().to_vec(), batch.valid_extents(&key(0)).unwrap().to_vec());
        prop_assert_eq!(one.dirty_extents(&key(0)).unwrap().to_vec(), batch.dirty_extents(&key(0)).unwrap().to_vec());
        let whole = |c: &mut Cache<Lru<BlockKey>>| match c.lookup_ranges(key(0), LEN, std::slice::from_ref(&(0..LEN)), Touch::No).unwrap() {
            Lookup::Hit(s) => Some(s.to_vec()),
            Lookup::Miss { .. } => None,
        };
        prop_assert_eq!(whole(&mut one), whole(&mut batch));
        let ranges: Vec<Range<u32>> = probes.iter().map(|&(o, n)| o..(o + n).min(LEN)).collect();
        let each_valid = ranges.iter().all(|r| one.valid_extents(&key(0)).unwrap().covers(r.clone()));
        match batch.lookup_ranges(key(0), LEN, &ranges, Touch::Yes).unwrap() {
            Lookup::Hit(s) => {
                prop_assert!(each_valid);
                // The snapshot is the whole block: every written byte reads back.
                let mut expected = vec![None; LEN as usize];
                for (o, d) in &pieces {
                    for (k, b) in d.iter().enumerate() {
                        expected[*o as usize + k] = Some(*b);
                    }
                }
                for r in &ranges {
                    for x in r.clone() {
                        prop_assert_eq!(Some(s.block()[x as usize]), expected[x as usize]);
                    }
                }
            }
            Lookup::Miss { resident, missing } => {
                prop_assert!(!each_valid);
                prop_assert!(resident);
                for m in &missing {
                    prop_assert!(!m.is_empty());
                    prop_assert!(one.valid_extents(&key(0)).unwrap().missing(m.clone()) == vec![m.clone()]);
                }
            }
        }
    }
}

fn data_ptr<P: Policy<BlockKey>>(c: &Cache<P>, block: u64) -> *const u8 {
    Arc::as_ptr(&c.entries[&key(block)].data) as *const u8
}

/// A write to a block no snapshot holds writes in place. It used to move the whole
/// block into a fresh allocation at every write (the bookkeeping's weak reference made
/// `Arc::make_mut` copy): a fresh 64 KiB of anonymous memory and a copy per write.
#[test]
fn a_write_to_a_block_nobody_else_holds_keeps_its_memory() {
    let mut c = lru_cache(4);
    c.write(key(0), LEN, 0, &[1; 4], 0).unwrap();
    let at = data_ptr(&c, 0);
    c.write(key(0), LEN, 4, &[2; 4], 0).unwrap();
    assert_eq!(data_ptr(&c, 0), at, "written in place");
    c.write_pieces(key(0), LEN, &[(8, &[3; 4][..]), (20, &[4; 4][..])], 0)
        .unwrap();
    assert_eq!(data_ptr(&c, 0), at, "written in place");
    assert_eq!(hit_bytes(&mut c, 0, 0..12), [[1; 4], [2; 4], [3; 4]].concat());
}

/// The bytes of a dropped block serve the next new block (no fresh memory), counted
/// in the memory while pooled, and the pool gives them back when room is needed.
#[test]
fn dropped_blocks_lend_their_memory_to_new_ones() {
    let mut c = lru_cache(4);
    c.write(key(0), LEN, 0, &[9; LEN as usize], 0).unwrap();
    let at = data_ptr(&c, 0);
    let before = c.stats().memory_bytes;
    c.invalidate_inode(INODE);
    assert_eq!(c.stats().memory_bytes, LEN as u64, "the pooled buffer is counted");
    c.write(key(5), LEN, 0, &[1; 4], 0).unwrap();
    assert_eq!(data_ptr(&c, 5), at, "the new block took the dropped one's bytes");
    assert_eq!(c.stats().memory_bytes, before);
    // Only valid bytes are read: the former block's 9s never show.
    assert!(matches!(
        c.lookup(key(5), LEN, 0..8, Touch::No).unwrap(),
        Lookup::Miss { .. }
    ));
    // A cache full of blocks with a full pool still takes new blocks up to its bound.
    for b in 0..4 {
        c.write(key(10 + b), LEN, 0, &[2; LEN as usize], 0).ok();
    }
    assert!(c.stats().memory_bytes <= c.config().memory_bytes_max);
}

/// A block fetched whole into a fetch buffer becomes the block itself (no copy into
/// fresh memory), all valid, counted once; installed over a block cached meanwhile it
/// keeps that block's bytes (a write that came first is newer than the fetch) and
/// goes back to the pool.
#[test]
fn a_block_fetched_whole_becomes_the_block_without_a_copy() {
    let mut c = lru_cache(4);
    let mut buffer = c.fetch_buffer(LEN);
    Arc::get_mut(&mut buffer)
        .unwrap()
        .copy_from_slice(&[5; LEN as usize]);
    let at = buffer.as_ptr() as usize;
    c.install(key(0), LEN, buffer, Admission::Normal).unwrap();
    assert_eq!(
        data_ptr(&c, 0) as usize,
        at,
        "the fetched buffer is the block's bytes"
    );
    assert_eq!(hit_bytes(&mut c, 0, 0..LEN), vec![5; LEN as usize]);
    // Counted as a block filled whole by a copy is: once.
    let mut filled = lru_cache(4);
    filled
        .fill(key(0), LEN, 0, &[5; LEN as usize], Admission::Normal)
        .unwrap();
    assert_eq!(c.stats().memory_bytes, filled.stats().memory_bytes);
    assert_eq!(c.stats().bytes_valid, LEN as u64);
    assert_eq!(c.stats().bytes_dirty, 0);

    // Written while its fetch ran: the write's bytes stay, the rest comes from the
    // fetch, and the fetch buffer goes to the pool for the next block.
    c.write(key(1), LEN, 8, &[1; 8], 0).unwrap();
    let mut buffer = c.fetch_buffer(LEN);
    Arc::get_mut(&mut buffer)
        .unwrap()
        .copy_from_slice(&[6; LEN as usize]);
    let pooled = buffer.as_ptr() as usize;
    c.install(key(1), LEN, buffer, Admission::Normal).unwrap();
    let mut want = vec![6u8; LEN as usize];
    want[8..16].fill(1);
    assert_eq!(hit_bytes(&mut c, 1, 0..LEN), want);
    assert_eq!(c.dirty_extents(&key(1)).unwrap().bytes() as u64, 8);
    assert_eq!(
        c.fetch_buffer(LEN).as_ptr() as usize,
        pooled,
        "the unused buffer was pooled"
    );
    assert!(c.stats().memory_bytes <= c.config().memory_bytes_max);
}

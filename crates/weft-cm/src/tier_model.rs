//! The tier's block states against truncates, punches and drops interleaved with
//! writes, reads, fetches (begun, their io read, their fill: three steps) and
//! write-backs (taken, landed or failed), checked against a naive model: the file as a
//! byte array and the io servers' objects as another (issue 28).
//!
//! A truncate runs as the manager runs it: begun (write-backs in flight finished first,
//! as `begin_truncate` waits for them), the io objects cut later, then ended, with other
//! steps in between. Every read must return the model's bytes (zeros past the end), and
//! after the run, everything flushed, the objects must hold exactly the file.
//!
//! Without the fetch tickets (a fetch whose io read came before a truncate installed its
//! bytes after it) or without the cut (a read fetched a block between the manager
//! forgetting it and the objects being cut), this fails within a few hundred cases.

use proptest::prelude::*;

use crate::tier::{Blocked, Fetched, Fetching, Found, Ticket, Tier};
use weft_cache::policy::PolicyKind;
use weft_cache::store::{Touch, WriteBack, ENTRY_OVERHEAD_BYTES};
use weft_cache::BlockKey;
use weft_layout::{InodeId, Layout, ServerId};

const BS: u64 = 16;
const BLOCKS: u64 = 5;
const INODE: InodeId = InodeId(3);
/// Every read and fetch asks for the whole block (one range, as the tier takes them).
#[allow(clippy::single_range_in_vec_init)]
const WHOLE: &[std::ops::Range<u32>] = &[0..BS as u32];

#[derive(Debug, Clone)]
enum Op {
    Write { at: u64, len: u64, byte: u8 },
    Read { block: u64 },
    BeginFetch { block: u64 },
    IoRead { i: usize },
    Fill { i: usize },
    TakeWriteBack { block: u64 },
    Land { i: usize },
    Fail { i: usize },
    TruncateBegin { size: u64 },
    TruncateIo,
    TruncateEnd,
    Punch { at: u64, len: u64 },
    Drop,
}

fn op() -> impl Strategy<Value = Op> {
    let end = BS * BLOCKS;
    prop_oneof![
        3 => (0..end, 1..BS * 2, 1u8..=255).prop_map(move |(at, len, byte)| Op::Write { at, len: len.min(end - at), byte }),
        2 => (0..BLOCKS).prop_map(|block| Op::Read { block }),
        3 => (0..BLOCKS).prop_map(|block| Op::BeginFetch { block }),
        2 => any::<usize>().prop_map(|i| Op::IoRead { i }),
        2 => any::<usize>().prop_map(|i| Op::Fill { i }),
        2 => (0..BLOCKS).prop_map(|block| Op::TakeWriteBack { block }),
        2 => any::<usize>().prop_map(|i| Op::Land { i }),
        1 => any::<usize>().prop_map(|i| Op::Fail { i }),
        2 => (0..=end).prop_map(|size| Op::TruncateBegin { size }),
        1 => Just(Op::TruncateIo),
        1 => Just(Op::TruncateEnd),
        1 => (0..end, 1..BS * 2).prop_map(|(at, len)| Op::Punch { at, len }),
        1 => Just(Op::Drop),
    ]
}

/// A fetch begun: its ticket, the gaps it fetches, and what its io read returned.
struct Pending {
    key: BlockKey,
    ticket: Ticket,
    gaps: Vec<std::ops::Range<u32>>,
    read: Option<Vec<u8>>,
}

struct Run {
    tier: Tier,
    layout: Layout,
    /// The file as its users must see it.
    file: Vec<u8>,
    /// The io servers' objects (zeros past their end).
    io: Vec<u8>,
    fetches: Vec<Pending>,
    write_backs: Vec<WriteBack>,
    /// A truncate begun: its cut, and whether the io objects are cut yet.
    cut: Option<(crate::tier::Cut, u64, bool)>,
}

impl Run {
    fn new() -> Run {
        Run {
            // Room for every block (the policy is sized for 4 KiB blocks at least): no
            // evictions (the store's own tests cover those).
            tier: Tier::new(64 * (4096 + ENTRY_OVERHEAD_BYTES), PolicyKind::Lru, false),
            layout: Layout {
                stripe_size_bytes: BS,
                servers: vec![ServerId(1)],
                replication: Default::default(),
            },
            file: Vec::new(),
            io: Vec::new(),
            fetches: Vec::new(),
            write_backs: Vec::new(),
            cut: None,
        }
    }

    fn key(block: u64) -> BlockKey {
        BlockKey::new(INODE, block)
    }

    fn expected(&self, block: u64) -> Vec<u8> {
        let start = (block * BS) as usize;
        (start..start + BS as usize)
            .map(|i| self.file.get(i).copied().unwrap_or(0))
            .collect()
    }

    fn io_read(&self, key: BlockKey, gaps: &[std::ops::Range<u32>]) -> Vec<u8> {
        let start = (key.block * BS) as usize;
        gaps.iter()
            .flat_map(|g| g.clone())
            .map(|i| self.io.get(start + i as usize).copied().unwrap_or(0))
            .collect()
    }

    fn check(&self, block: u64, got: &[u8], how: &str) -> Result<(), TestCaseError> {
        let want = self.expected(block);
        prop_assert_eq!(got, &want[..], "block {} ({}): file {:?}", block, how, self.file);
        Ok(())
    }

    fn whether_cut(&self, block: u64) -> bool {
        matches!(self.cut, Some((_, size, _)) if (block + 1) * BS > size)
    }

    /// Lands every write-back in flight (a truncate, punch or flush waits for them).
    fn land_all(&mut self) {
        while !self.write_backs.is_empty() {
            self.land(0);
        }
    }

    fn land(&mut self, i: usize) {
        let wb = self.write_backs.remove(i);
        let start = (wb.key.block * BS) as usize;
        for (offset, bytes) in wb.pieces() {
            let at = start + offset as usize;
            if self.io.len() < at + bytes.len() {
                self.io.resize(at + bytes.len(), 0);
            }
            self.io[at..at + bytes.len()].copy_from_slice(bytes);
        }
        self.tier.end_write_backs(vec![wb], true);
    }

    /// Writes every dirty block back (the client's `CacheFlush`).
    fn flush(&mut self) {
        self.land_all();
        let dirty = self.tier.dirty_of(INODE);
        if let Some((_, _, taken)) = self.tier.take_write_backs(INODE, &dirty) {
            self.write_backs.extend(taken);
        }
        self.land_all();
    }

    /// A read of a whole block, to its end: hit, or fetched and filled at once.
    fn read(&mut self, block: u64) -> Result<(), TestCaseError> {
        let key = Self::key(block);
        match self
            .tier
            .lookup(key, &self.layout, BS, WHOLE, Touch::Yes, Fetching::Return)
            .unwrap()
        {
            Found::Hit(s) => self.check(block, &s.block()[..], "hit"),
            Found::Wait => Ok(()),
            Found::Fetch { gaps, ticket, .. } => {
                let read = self.io_read(key, &gaps);
                self.fill(Pending {
                    key,
                    ticket,
                    gaps,
                    read: Some(read),
                })
            }
        }
    }

    fn fill(&mut self, p: Pending) -> Result<(), TestCaseError> {
        let read = p.read.unwrap_or_else(|| self.io_read(p.key, &p.gaps));
        let mut at = 0usize;
        let parts: Vec<(u32, &[u8])> = p
            .gaps
            .iter()
            .map(|g| {
                let n = (g.end - g.start) as usize;
                at += n;
                (g.start, &read[at - n..at])
            })
            .collect();
        // A whole block fetched goes in as the block's own buffer (the read path's
        // cold fetch), anything else as pieces.
        let fetched = if p.gaps.len() == 1 && p.gaps[0] == (0..BS as u32) {
            let mut buffer = self.tier.fetch_buffer(BS);
            std::sync::Arc::get_mut(&mut buffer)
                .expect("a fresh buffer")
                .copy_from_slice(&read);
            Fetched::Block(buffer)
        } else {
            Fetched::Parts(&parts)
        };
        match self
            .tier
            .fill(
                p.key,
                p.ticket,
                &self.layout,
                BS,
                WHOLE,
                fetched,
                Some(weft_cache::Admission::Normal),
            )
            .unwrap()
        {
            Ok(Some(s)) => self.check(p.key.block, &s.block()[..], "filled"),
            Ok(None) => Err(TestCaseError::fail("admitted block not cached")),
            Err(Blocked::Again) => Ok(()),
            Err(Blocked::Wait | Blocked::WriteBack(_)) => {
                Err(TestCaseError::fail("no room with room for all"))
            }
        }
    }

    fn end_cut(&mut self) {
        if let Some((cut, size, io_done)) = self.cut.take() {
            if !io_done {
                self.io.truncate(size as usize);
            }
            self.tier.end_truncate(cut);
        }
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Write { at, len, byte } => {
                let end = (at + len) as usize;
                if self.file.len() < end {
                    self.file.resize(end, 0);
                }
                self.file[at as usize..end].fill(byte);
                let mut x = at;
                while x < at + len {
                    let block = x / BS;
                    let upto = ((block + 1) * BS).min(at + len);
                    let piece = vec![byte; (upto - x) as usize];
                    let written = self
                        .tier
                        .write(Self::key(block), &self.layout, BS, &[((x % BS) as u32, &piece)])
                        .unwrap();
                    prop_assert!(written.is_ok(), "no room with room for all");
                    x = upto;
                }
            }
            Op::Read { block } => self.read(block)?,
            Op::BeginFetch { block } => {
                let key = Self::key(block);
                match self
                    .tier
                    .lookup(key, &self.layout, BS, WHOLE, Touch::Yes, Fetching::Return)
                    .unwrap()
                {
                    Found::Hit(s) => self.check(block, &s.block()[..], "hit")?,
                    Found::Wait => {}
                    Found::Fetch { gaps, ticket, .. } => self.fetches.push(Pending {
                        key,
                        ticket,
                        gaps,
                        read: None,
                    }),
                }
            }
            Op::IoRead { i } if !self.fetches.is_empty() => {
                let n = self.fetches.len();
                let p = &self.fetches[i % n];
                if p.read.is_none() {
                    let read = self.io_read(p.key, &p.gaps);
                    self.fetches[i % n].read = Some(read);
                }
            }
            Op::Fill { i } if !self.fetches.is_empty() => {
                let n = self.fetches.len();
                let p = self.fetches.remove(i % n);
                self.fill(p)?;
            }
            // A write-back of a block being cut waits for the cut (it would block here).
            Op::TakeWriteBack { block } if !self.whether_cut(block) => {
                if let Some((_, _, taken)) = self.tier.take_write_backs(INODE, &[Self::key(block)]) {
                    self.write_backs.extend(taken);
                }
            }
            Op::Land { i } if !self.write_backs.is_empty() => {
                let n = self.write_backs.len();
                self.land(i % n);
            }
            Op::Fail { i } if !self.write_backs.is_empty() => {
                let n = self.write_backs.len();
                let wb = self.write_backs.remove(i % n);
                self.tier.end_write_backs(vec![wb], false);
            }
            Op::TruncateBegin { size } if self.cut.is_none() => {
                self.land_all();
                self.file.resize(size as usize, 0);
                let cut = self.tier.begin_truncate(INODE, size);
                self.cut = Some((cut, size, false));
            }
            Op::TruncateIo => {
                if let Some((_, size, io_done)) = &mut self.cut {
                    self.io.truncate(*size as usize);
                    *io_done = true;
                }
            }
            Op::TruncateEnd => self.end_cut(),
            // As the client punches: flush, punch the objects, then the managers.
            Op::Punch { at, len } if self.cut.is_none() => {
                self.flush();
                for i in at..at + len {
                    if let Some(b) = self.file.get_mut(i as usize) {
                        *b = 0;
                    }
                    if let Some(b) = self.io.get_mut(i as usize) {
                        *b = 0;
                    }
                }
                self.tier.punch(INODE, at, len);
            }
            // A delegate letting a closed file go: synced, then dropped.
            Op::Drop if self.cut.is_none() => {
                self.flush();
                self.tier.drop_file(INODE);
            }
            _ => {}
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn tier_blocks_against_truncates_punches_and_drops(ops in prop::collection::vec(op(), 1..80)) {
        let mut run = Run::new();
        for op in &ops {
            run.step(op)?;
        }
        run.end_cut();
        // Fetches still open are filled (or revoked), then every block is read.
        while let Some(p) = run.fetches.pop() {
            run.fill(p)?;
        }
        for block in 0..BLOCKS {
            run.read(block)?;
        }
        run.flush();
        let mut want = run.file.clone();
        want.resize(run.io.len().max(want.len()), 0);
        let mut io = run.io.clone();
        io.resize(want.len(), 0);
        prop_assert_eq!(io, want, "the io objects after a flush");
    }
}

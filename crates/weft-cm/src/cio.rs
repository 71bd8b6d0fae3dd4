//! Collective-I/O-aware caching: what a cache manager keeps of the processes' original
//! access patterns that come with collective reads (`ViaCacheAware`). A call's
//! references are applied once, whichever of its aggregated requests arrives first; the
//! blocks each recent call asked for are remembered (bounded) so that its requests can
//! tell a block a process wanted from one aggregation merely swept up.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use weft_cache::Admission;
use weft_layout::InodeId;
use weft_proto::msg::CioStats;

/// Calls remembered per file (their requests arrive close together).
const CALLS_PER_FILE_MAX: usize = 4;
/// Files with remembered calls; beyond, the oldest file's calls are forgotten.
const FILES_MAX: usize = 1024;
/// Blocks remembered per call; a call asking for more counts every block as asked.
const ASKED_BLOCKS_MAX: usize = 1 << 18;
/// Most (reference, block) pairs applied per call: bounds the memory and time a
/// pattern costs; references past it are not applied (the call's blocks still count as
/// asked).
pub const REFERENCES_PER_CALL_MAX: usize = 1 << 20;
/// Most references a record ([`Record`]) holds; past it, one line says so.
pub const RECORDED_MAX: u64 = 1 << 20;

/// A test hook: the references applied, in the order the policy saw them, one line
/// each: `inode call rank block` (call in hex), appended to a file while the call's
/// references are being applied, so that a test can replay exactly that order through
/// the simulator. Bounded by [`RECORDED_MAX`] lines.
pub struct Record {
    out: std::io::BufWriter<std::fs::File>,
    path: std::path::PathBuf,
    lines: u64,
}

impl Record {
    pub fn create(path: &std::path::Path) -> std::io::Result<Record> {
        Ok(Record {
            out: std::io::BufWriter::new(std::fs::File::create(path)?),
            path: path.to_owned(),
            lines: 0,
        })
    }

    /// Appends a call's references `(rank, block)` and writes them out; an error stops
    /// the record (said once on stderr), never the read.
    pub fn append(
        this: &mut Option<Record>,
        inode: InodeId,
        call: u64,
        refs: impl Iterator<Item = (u32, u64)>,
    ) {
        use std::io::Write;
        let Some(r) = this.as_mut() else { return };
        let mut result = Ok(());
        for (rank, block) in refs {
            if r.lines >= RECORDED_MAX {
                result = writeln!(r.out, "truncated after {RECORDED_MAX} references");
                r.lines += 1;
                break;
            }
            if let Err(e) = writeln!(r.out, "{inode} {call:x} {rank} {block}") {
                result = Err(e);
                break;
            }
            r.lines += 1;
        }
        if let Err(e) = result.and_then(|()| r.out.flush()) {
            eprintln!(
                "weftd: cache reference record {}: {e}; recording stops",
                r.path.display()
            );
            *this = None;
        } else if r.lines > RECORDED_MAX {
            *this = None;
        }
    }
}

/// The blocks of a call that some process asked for.
pub struct Asked {
    /// `None`: more than the bound; treat every block as asked.
    blocks: Option<HashSet<u64>>,
}

impl Asked {
    pub fn new() -> Asked {
        Asked {
            blocks: Some(HashSet::new()),
        }
    }

    /// Every block counts as asked.
    pub fn everything() -> Asked {
        Asked { blocks: None }
    }

    pub fn insert(&mut self, block: u64) {
        if let Some(set) = &mut self.blocks {
            if set.len() >= ASKED_BLOCKS_MAX {
                self.blocks = None;
            } else {
                set.insert(block);
            }
        }
    }

    pub fn contains(&self, block: u64) -> bool {
        self.blocks.as_ref().is_none_or(|s| s.contains(&block))
    }
}

/// How a read is served.
pub enum ReadMode {
    /// A reference for the policy, missing blocks admitted (`ViaCache`).
    Plain,
    /// The call's references were applied; the aggregated request is no reference, and
    /// a missing block nobody asked for is admitted with `unrequested` (or not at all).
    Aware {
        asked: Arc<Asked>,
        unrequested: Option<Admission>,
    },
}

impl ReadMode {
    /// Whether a lookup of this read references the block for the policy (a
    /// pattern-aware read's references were applied already).
    pub fn touch(&self) -> weft_cache::store::Touch {
        match self {
            ReadMode::Plain => weft_cache::store::Touch::Yes,
            ReadMode::Aware { .. } => weft_cache::store::Touch::No,
        }
    }
}

/// Per file, its recent calls and their asked blocks; and the files in arrival order.
type Recent = (HashMap<InodeId, VecDeque<(u64, Arc<Asked>)>>, VecDeque<InodeId>);

#[derive(Default)]
pub struct Patterns {
    /// Held while a call's references are checked, applied and recorded, so that two
    /// requests of one call arriving at once apply them once.
    pub applying: Mutex<()>,
    calls: Mutex<Recent>,
    pub references: AtomicU64,
    pub hits: AtomicU64,
    pub bytes: AtomicU64,
    pub hit_bytes: AtomicU64,
    pub unasked_fetched: AtomicU64,
    /// The test hook's record, when on; locked while `applying` is held.
    pub record: Mutex<Option<Record>>,
}

impl Patterns {
    /// The asked blocks of `call` on `inode`, if its references were applied already.
    pub fn applied(&self, inode: InodeId, call: u64) -> Option<Arc<Asked>> {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls
            .0
            .get(&inode)?
            .iter()
            .find(|(c, _)| *c == call)
            .map(|(_, a)| a.clone())
    }

    /// Records that `call`'s references were applied; returns its asked blocks.
    pub fn remember(&self, inode: InodeId, call: u64, asked: Asked) -> Arc<Asked> {
        let asked = Arc::new(asked);
        let mut guard = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let (by_file, order) = &mut *guard;
        if !by_file.contains_key(&inode) {
            if by_file.len() >= FILES_MAX {
                if let Some(oldest) = order.pop_front() {
                    by_file.remove(&oldest);
                }
            }
            order.push_back(inode);
        }
        let recent = by_file.entry(inode).or_default();
        if recent.len() >= CALLS_PER_FILE_MAX {
            recent.pop_front();
        }
        recent.push_back((call, asked.clone()));
        asked
    }

    pub fn stats(&self) -> CioStats {
        CioStats {
            references: self.references.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            hit_bytes: self.hit_bytes.load(Ordering::Relaxed),
            unasked_fetched: self.unasked_fetched.load(Ordering::Relaxed),
        }
    }
}

//! Block reference streams from traces: what a cache below the processes sees.
//!
//! 1. Every process's trace is decoded; its requests are cut into blocks (a request
//!    references each of its blocks once, with the bytes it wants there).
//! 2. The original requests of each collective call say which blocks some process
//!    asked for (the call's "asked" set).
//! 3. All processes' requests are merged in time order (ties: process, then record).
//! 4. The aggregated stream is every sent request's blocks; a block outside its call's
//!    asked set is marked unasked (fetched only because it lay inside an aggregated
//!    request).
//! 5. The original stream (collective-I/O-aware) is every original request's blocks,
//!    plus, at the time of each sent request of a call, the blocks of it no process
//!    asked for, marked extra (admitted cold or not at all, never a reference). Sent
//!    requests of no MPI-IO call (a native client's) are original requests.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use weft_layout::view::View;

use crate::format::{CallId, FileRecord, Reader, Record, RequestRecord, Shape, Side, TraceError};

/// Bits of a reference key holding the block number; the file index is above them.
pub const BLOCK_BITS: u32 = 48;
/// Most files one simulation distinguishes.
pub const FILES_MAX: usize = 1 << (64 - BLOCK_BITS);
/// Default bound on the references of each stream (16 bytes each).
pub const REFS_MAX_DEFAULT: usize = 64 << 20;
/// Pieces (ranges) looked at per reference allowed: bounds the time spent on requests
/// of many pieces inside few blocks.
pub const PIECES_PER_REF_MAX: u64 = 64;

/// What a reference is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RefKind {
    /// A block some process asked for.
    Asked,
    /// Aggregated stream: a block of a sent request that no process of its call asked for.
    Unasked,
    /// Original stream: the same, at the time of the sent request: fetched, but not a
    /// reference of any process.
    Extra,
}

/// One block reference: `key` is `file index << BLOCK_BITS | block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ref {
    pub key: u64,
    /// Bytes of the block the request wanted.
    pub bytes: u32,
    pub kind: RefKind,
}

impl Ref {
    pub fn file(&self) -> usize {
        (self.key >> BLOCK_BITS) as usize
    }
    pub fn block(&self) -> u64 {
        self.key & ((1 << BLOCK_BITS) - 1)
    }
}

/// Which requests count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ops {
    Reads,
    Writes,
    All,
}

impl std::str::FromStr for Ops {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "reads" | "read" => Ok(Ops::Reads),
            "writes" | "write" => Ok(Ops::Writes),
            "all" => Ok(Ops::All),
            _ => Err(format!("unknown operations {s:?} (reads, writes or all)")),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RefOptions {
    /// Block size; default: the largest stripe size of the traced files.
    pub block_size_bytes: Option<u64>,
    pub ops: Ops,
    /// Most references per stream.
    pub refs_max: usize,
}

impl Default for RefOptions {
    fn default() -> Self {
        RefOptions {
            block_size_bytes: None,
            ops: Ops::Reads,
            refs_max: REFS_MAX_DEFAULT,
        }
    }
}

/// A file of the traces, by index in keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimFile {
    pub inode: u64,
    pub path: String,
    pub stripe_size_bytes: u64,
    pub stripe_count: u32,
}

/// Both reference streams of a set of traces.
#[derive(Clone, Debug, Default)]
pub struct Refs {
    pub block_size_bytes: u64,
    pub files: Vec<SimFile>,
    pub aggregated: Vec<Ref>,
    pub original: Vec<Ref>,
    /// Distinct blocks some process asked for: the data touched.
    pub touched_blocks: u64,
    pub processes: usize,
    pub original_requests: u64,
    pub sent_requests: u64,
    /// Notes found in the traces and problems met reading them.
    pub notes: Vec<String>,
}

impl Refs {
    pub fn touched_bytes(&self) -> u64 {
        self.touched_blocks * self.block_size_bytes
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RefsError {
    #[error("trace {trace}: {error}")]
    Trace { trace: String, error: TraceError },
    #[error("trace {trace}: a request of inode {inode} before any file record of it")]
    UnknownFile { trace: String, inode: u64 },
    #[error("trace {trace}: a request through view {view}, which the trace never recorded")]
    UnknownView { trace: String, view: u32 },
    #[error("trace {trace}: {message}")]
    BadRequest { trace: String, message: String },
    #[error("more than {FILES_MAX} files")]
    TooManyFiles,
    #[error("block {block} of inode {inode} does not fit a simulation key: use a larger --block-size")]
    BlockTooLarge { inode: u64, block: u64 },
    #[error("more than {0} block references in one stream: use a larger --block-size or fewer traces")]
    TooManyRefs(usize),
    #[error("block size must be at least 1 byte")]
    BlockSize,
    #[error("more than {0} pieces in the traces' requests: use fewer traces")]
    TooManyPieces(u64),
}

/// One request after block cutting: its place in time and its blocks.
struct Event {
    time_ns: u64,
    process: usize,
    order: usize,
    side: Side,
    call: Option<CallId>,
    /// Range of the process's block list.
    blocks: std::ops::Range<usize>,
}

/// A decoded process trace, blocks cut.
struct Process {
    events: Vec<Event>,
    blocks: Vec<(u64, u32)>,
}

/// Reads traces (name, bytes) and builds both streams.
pub fn build(traces: &[(String, &[u8])], options: &RefOptions) -> Result<Refs, RefsError> {
    let mut refs = Refs {
        processes: traces.len(),
        ..Refs::default()
    };
    // First pass: the files, so that the default block size is known before cutting.
    let mut file_index: HashMap<u64, usize> = HashMap::new();
    for (name, bytes) in traces {
        let reader = Reader::new(bytes).map_err(|error| RefsError::Trace {
            trace: name.clone(),
            error,
        })?;
        for record in reader {
            match record {
                Ok(Record::File(f)) => add_file(&mut refs.files, &mut file_index, &f)?,
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
    let block_size = match options.block_size_bytes {
        Some(0) => return Err(RefsError::BlockSize),
        Some(b) => b,
        None => refs
            .files
            .iter()
            .map(|f| f.stripe_size_bytes)
            .max()
            .unwrap_or(65536),
    };
    refs.block_size_bytes = block_size;

    let mut processes = Vec::with_capacity(traces.len());
    let mut block_refs = 0usize;
    for (p, (name, bytes)) in traces.iter().enumerate() {
        let process = cut(
            p,
            name,
            bytes,
            block_size,
            &file_index,
            options,
            &mut refs,
            &mut block_refs,
        )?;
        processes.push(process);
    }

    // The asked set of every call.
    let mut asked: HashMap<CallId, HashSet<u64>> = HashMap::new();
    let mut touched: HashSet<u64> = HashSet::new();
    for proc in &processes {
        for e in &proc.events {
            let is_original = e.side == Side::Original || e.call.is_none();
            if !is_original {
                continue;
            }
            let blocks = &proc.blocks[e.blocks.clone()];
            touched.extend(blocks.iter().map(|b| b.0));
            if let (Side::Original, Some(call)) = (e.side, e.call) {
                asked.entry(call).or_default().extend(blocks.iter().map(|b| b.0));
            }
        }
    }
    refs.touched_blocks = touched.len() as u64;
    drop(touched);

    // Merge all events in time order.
    let mut order: Vec<(u64, usize, usize)> = processes
        .iter()
        .flat_map(|p| p.events.iter().map(|e| (e.time_ns, e.process, e.order)))
        .collect();
    order.sort_unstable();
    let limit = options.refs_max;
    for (_, p, i) in order {
        let proc = &processes[p];
        let e = &proc.events[i];
        let blocks = &proc.blocks[e.blocks.clone()];
        match (e.side, e.call) {
            (Side::Original, _) => push_all(&mut refs.original, blocks, RefKind::Asked, limit)?,
            (Side::Sent, None) => {
                push_all(&mut refs.original, blocks, RefKind::Asked, limit)?;
                push_all(&mut refs.aggregated, blocks, RefKind::Asked, limit)?;
            }
            (Side::Sent, Some(call)) => {
                let set = asked.get(&call);
                for &(key, bytes) in blocks {
                    let is_asked = set.is_some_and(|s| s.contains(&key));
                    let kind = if is_asked {
                        RefKind::Asked
                    } else {
                        RefKind::Unasked
                    };
                    push(&mut refs.aggregated, Ref { key, bytes, kind }, limit)?;
                    if !is_asked {
                        push(
                            &mut refs.original,
                            Ref {
                                key,
                                bytes,
                                kind: RefKind::Extra,
                            },
                            limit,
                        )?;
                    }
                }
            }
        }
    }
    Ok(refs)
}

fn push(v: &mut Vec<Ref>, r: Ref, limit: usize) -> Result<(), RefsError> {
    if v.len() >= limit {
        return Err(RefsError::TooManyRefs(limit));
    }
    v.push(r);
    Ok(())
}

fn push_all(v: &mut Vec<Ref>, blocks: &[(u64, u32)], kind: RefKind, limit: usize) -> Result<(), RefsError> {
    for &(key, bytes) in blocks {
        push(v, Ref { key, bytes, kind }, limit)?;
    }
    Ok(())
}

fn add_file(
    files: &mut Vec<SimFile>,
    index: &mut HashMap<u64, usize>,
    f: &FileRecord,
) -> Result<(), RefsError> {
    if index.contains_key(&f.inode) {
        return Ok(());
    }
    if files.len() >= FILES_MAX {
        return Err(RefsError::TooManyFiles);
    }
    index.insert(f.inode, files.len());
    files.push(SimFile {
        inode: f.inode,
        path: f.path.clone(),
        stripe_size_bytes: f.stripe_size_bytes,
        stripe_count: f.stripe_count,
    });
    Ok(())
}

/// Decodes one process's trace and cuts its requests into blocks.
#[allow(clippy::too_many_arguments)]
fn cut(
    p: usize,
    name: &str,
    bytes: &[u8],
    block_size: u64,
    file_index: &HashMap<u64, usize>,
    options: &RefOptions,
    refs: &mut Refs,
    block_refs: &mut usize,
) -> Result<Process, RefsError> {
    let trace_err = |error| RefsError::Trace {
        trace: name.to_owned(),
        error,
    };
    let mut reader = Reader::new(bytes).map_err(trace_err)?;
    let mut views: HashMap<u32, Arc<View>> = HashMap::new();
    let mut process = Process {
        events: Vec::new(),
        blocks: Vec::new(),
    };
    let mut scratch: Vec<(u64, u32)> = Vec::new();
    let pieces_max = (options.refs_max as u64).saturating_mul(PIECES_PER_REF_MAX);
    let mut pieces_seen = 0u64;
    for record in reader.by_ref() {
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                // Keep what came before a damaged or cut tail (a process killed while
                // writing its trace), and say so.
                refs.notes
                    .push(format!("{name}: {e}; the records before it are used"));
                break;
            }
        };
        let r: RequestRecord = match record {
            Record::Request(r) => r,
            Record::View { view, decoded, .. } => {
                views.insert(view, decoded);
                continue;
            }
            Record::Note(text) => {
                refs.notes.push(format!("{name}: {text}"));
                continue;
            }
            Record::File(_) => continue,
        };
        let wanted = match options.ops {
            Ops::All => true,
            Ops::Reads => !r.flags.write(),
            Ops::Writes => r.flags.write(),
        };
        if !wanted {
            continue;
        }
        match r.flags.side() {
            Side::Original => refs.original_requests += !r.flags.continued() as u64,
            Side::Sent => refs.sent_requests += !r.flags.continued() as u64,
        }
        let file = *file_index.get(&r.inode).ok_or(RefsError::UnknownFile {
            trace: name.to_owned(),
            inode: r.inode,
        })?;
        scratch.clear();
        let mut add = |offset: u64, len: u64| -> Result<(), RefsError> {
            pieces_seen += 1;
            if pieces_seen > pieces_max {
                return Err(RefsError::TooManyPieces(pieces_max));
            }
            let mut at = offset;
            let end = offset + len;
            while at < end {
                let block = at / block_size;
                let next = ((block + 1).saturating_mul(block_size)).min(end);
                if block >= 1 << BLOCK_BITS {
                    return Err(RefsError::BlockTooLarge {
                        inode: r.inode,
                        block,
                    });
                }
                let key = (file as u64) << BLOCK_BITS | block;
                let n = (next - at) as u32;
                match scratch.last_mut() {
                    Some(last) if last.0 == key => last.1 = last.1.saturating_add(n),
                    _ => {
                        *block_refs += 1;
                        if *block_refs > options.refs_max.saturating_mul(2) {
                            return Err(RefsError::TooManyRefs(options.refs_max));
                        }
                        scratch.push((key, n));
                    }
                }
                at = next;
            }
            Ok(())
        };
        match &r.shape {
            Shape::Runs(runs) => {
                for run in runs {
                    for (offset, len) in run.ranges() {
                        add(offset, len)?;
                    }
                }
            }
            Shape::View {
                view,
                view_offset,
                len,
            } => {
                let v = views.get(view).ok_or(RefsError::UnknownView {
                    trace: name.to_owned(),
                    view: *view,
                })?;
                let pieces = v.pieces(*view_offset, *len).map_err(|e| RefsError::BadRequest {
                    trace: name.to_owned(),
                    message: e.to_string(),
                })?;
                for piece in pieces {
                    add(piece.file_offset, piece.len)?;
                }
            }
        }
        // A request references each block once: merge repeats when its pieces were not
        // in block order.
        if scratch.windows(2).any(|w| w[0].0 >= w[1].0) {
            scratch.sort_by_key(|b| b.0);
            scratch.dedup_by(|b, a| {
                if a.0 == b.0 {
                    a.1 = a.1.saturating_add(b.1);
                    true
                } else {
                    false
                }
            });
        }
        // A continued record is the same request: join it to the previous event.
        let continues = r.flags.continued()
            && process
                .events
                .last()
                .is_some_and(|e| e.side == r.flags.side() && e.call == r.call);
        if continues {
            let last = process.events.last_mut().expect("checked");
            let mut first = 0;
            if let (Some(prev), Some(next)) = (process.blocks.last_mut(), scratch.first()) {
                if prev.0 == next.0 {
                    prev.1 = prev.1.saturating_add(next.1);
                    first = 1;
                }
            }
            process.blocks.extend_from_slice(&scratch[first..]);
            last.blocks.end = process.blocks.len();
            continue;
        }
        let start = process.blocks.len();
        process.blocks.extend_from_slice(&scratch);
        let order = process.events.len();
        process.events.push(Event {
            time_ns: r.time_ns,
            process: p,
            order,
            side: r.flags.side(),
            call: r.call,
            blocks: start..process.blocks.len(),
        });
    }
    if reader.skipped > 0 {
        refs.notes.push(format!(
            "{name}: {} records of kinds this build does not know were skipped",
            reader.skipped
        ));
    }
    Ok(process)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::format::{Flags, Header, TargetKind};
    use crate::runs::Run;

    pub(crate) fn file(inode: u64) -> Record {
        Record::File(FileRecord {
            inode,
            path: format!("/f{inode}"),
            stripe_size_bytes: 100,
            stripe_count: 2,
            target_kind: TargetKind::IoServers,
            target_unit_bytes: 100,
            target_count: 2,
        })
    }

    pub(crate) fn request(time_ns: u64, flags: u8, call: Option<u64>, ranges: &[(u64, u64)]) -> Record {
        Record::Request(RequestRecord {
            time_ns,
            flags: Flags(flags),
            inode: 1,
            rank: None,
            call: call.map(|seq| CallId { handle: 1, seq }),
            shape: Shape::Runs(crate::runs::fold(ranges.iter().copied())),
        })
    }

    pub(crate) fn trace(rank: u32, records: &[Record]) -> Vec<u8> {
        let h = Header {
            rank: Some(rank),
            pid: rank,
            host: "h".into(),
            start_unix_ns: 0,
        };
        crate::format::tests::encode(&h, records)
    }

    /// The seed's Figure 1: four processes ask for blocks at t0..t3, aggregation reads
    /// one contiguous chunk at t4 holding blocks nobody asked for.
    #[test]
    fn figure_one_streams() {
        let o = 0; // original, read, independent flags
        let c = Flags::COLLECTIVE;
        let s = Flags::SENT | Flags::COLLECTIVE;
        // Blocks of 100 bytes. P3 asks 0,1 at t0; P0 asks 4,5 at t1; P1 asks 1 at t2;
        // P2 asks 5 at t3. The aggregator (P0) reads blocks 0..=5 at t4.
        let t3 = trace(3, &[file(1), request(10, o | c, Some(0), &[(0, 200)])]);
        let t0 = trace(
            0,
            &[
                file(1),
                request(11, c, Some(0), &[(400, 200)]),
                request(14, s, Some(0), &[(0, 600)]),
            ],
        );
        let t1 = trace(1, &[file(1), request(12, c, Some(0), &[(150, 10)])]);
        let t2 = trace(2, &[file(1), request(13, c, Some(0), &[(550, 50)])]);
        let traces = [
            ("p0".to_string(), &t0[..]),
            ("p1".to_string(), &t1[..]),
            ("p2".to_string(), &t2[..]),
            ("p3".to_string(), &t3[..]),
        ];
        let refs = build(&traces, &RefOptions::default()).unwrap();
        assert_eq!(refs.block_size_bytes, 100);
        assert_eq!(refs.touched_blocks, 4);
        let keys = |v: &[Ref]| v.iter().map(|r| (r.block(), r.kind, r.bytes)).collect::<Vec<_>>();
        use RefKind::*;
        assert_eq!(
            keys(&refs.original),
            vec![
                (0, Asked, 100),
                (1, Asked, 100),
                (4, Asked, 100),
                (5, Asked, 100),
                (1, Asked, 10),
                (5, Asked, 50),
                (2, Extra, 100),
                (3, Extra, 100),
            ]
        );
        assert_eq!(
            keys(&refs.aggregated),
            vec![
                (0, Asked, 100),
                (1, Asked, 100),
                (2, Unasked, 100),
                (3, Unasked, 100),
                (4, Asked, 100),
                (5, Asked, 100),
            ]
        );
        assert_eq!((refs.original_requests, refs.sent_requests), (4, 1));
    }

    #[test]
    fn writes_are_left_out_unless_asked_for_and_native_requests_are_original() {
        let w = Flags::SENT | Flags::WRITE;
        let t = trace(
            0,
            &[
                file(1),
                request(1, w, None, &[(0, 300)]),
                request(2, Flags::SENT, None, &[(250, 100)]),
            ],
        );
        let traces = [("p".to_string(), &t[..])];
        let reads = build(&traces, &RefOptions::default()).unwrap();
        let blocks: Vec<u64> = reads.original.iter().map(|r| r.block()).collect();
        assert_eq!(blocks, vec![2, 3]);
        assert_eq!(reads.aggregated, reads.original);
        let all = build(
            &traces,
            &RefOptions {
                ops: Ops::All,
                ..RefOptions::default()
            },
        )
        .unwrap();
        assert_eq!(all.original.len(), 5);
        assert_eq!(all.touched_blocks, 4);
    }

    #[test]
    fn bad_references_are_errors() {
        let t = trace(0, &[request(1, Flags::SENT, None, &[(0, 1)])]);
        let e = build(&[("p".into(), &t[..])], &RefOptions::default()).unwrap_err();
        assert!(matches!(e, RefsError::UnknownFile { inode: 1, .. }), "{e}");
        let t = trace(
            0,
            &[
                file(1),
                Record::Request(RequestRecord {
                    time_ns: 0,
                    flags: Flags(0),
                    inode: 1,
                    rank: None,
                    call: None,
                    shape: Shape::View {
                        view: 5,
                        view_offset: 0,
                        len: 10,
                    },
                }),
            ],
        );
        let e = build(&[("p".into(), &t[..])], &RefOptions::default()).unwrap_err();
        assert!(matches!(e, RefsError::UnknownView { view: 5, .. }), "{e}");
        let t = trace(0, &[file(1), request(1, Flags::SENT, None, &[(0, 10_000)])]);
        let small = RefOptions {
            refs_max: 10,
            ..RefOptions::default()
        };
        assert!(matches!(
            build(&[("p".into(), &t[..])], &small),
            Err(RefsError::TooManyRefs(10))
        ));
        let _ = Run::new(0, 1, 0, 1);
    }
}

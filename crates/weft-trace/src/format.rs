//! The trace file format: a versioned header, then length-framed records, integers as
//! LEB128 varints. Encoding is into byte vectors (the recorder writes them); decoding
//! reads untrusted bytes: it never panics, never allocates more than the input could
//! hold, and stops at the first damaged record, keeping what came before.
//!
//! ```text
//! trace   := magic:"WEFTTRC\0" version:u16le header record*
//! header  := rank+1 pid host_len host start_unix_ns
//! record  := tag:u8 body_len body            (unknown tags are skipped)
//!   tag 1 file:    inode path_len path stripe_size stripe_count target_kind:u8
//!                  target_unit target_count
//!   tag 2 view:    view_id inode view_wire_len view_wire   (weft-layout's view wire form)
//!   tag 3 request: time_delta_ns(zigzag) flags:u8 inode rank+1 [call_handle call_seq]
//!                  shape:u8 (0: view_id view_offset len | 1: run_count run*)
//!         run := offset len count [stride]              (stride only when count > 1)
//!   tag 4 note:    text_len text
//! ```
//! A request's time is the previous request's plus its delta (the first one's is
//! relative to `start_unix_ns`): wall-clock nanoseconds, comparable across the
//! processes of one machine (and across machines as far as their clocks agree).

use std::sync::Arc;

use weft_layout::view::View;

use crate::runs::Run;

/// The first bytes of every trace.
pub const MAGIC: [u8; 8] = *b"WEFTTRC\0";
/// The format version this crate writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Largest record body: a view's wire form, or a request of [`RUNS_PER_RECORD_MAX`] runs.
pub const RECORD_BYTES_MAX: usize = 4 << 20;
/// Most runs in one request record; a longer request is split into records marked
/// [`Flags::CONTINUED`].
pub const RUNS_PER_RECORD_MAX: usize = 65_536;
/// Longest path, host name and note.
pub const PATH_BYTES_MAX: usize = 4096;
pub const HOST_BYTES_MAX: usize = 255;
pub const NOTE_BYTES_MAX: usize = 4096;
/// Largest view wire form in a trace (as large as a view registered with a server).
pub const VIEW_BYTES_MAX: usize = 1 << 20;

const TAG_FILE: u8 = 1;
const TAG_VIEW: u8 = 2;
const TAG_REQUEST: u8 = 3;
const TAG_NOTE: u8 = 4;

/// Who wrote a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The process's rank in its MPI job (MPI_COMM_WORLD), if it runs in one.
    pub rank: Option<u32>,
    pub pid: u32,
    pub host: String,
    /// Wall-clock time of the trace's start, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
}

/// Where a file's data requests go: its io servers or, cached, its cache managers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TargetKind {
    IoServers,
    CacheManagers,
}

/// A file as the process opened it: enough to say which server each byte goes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRecord {
    pub inode: u64,
    pub path: String,
    /// The file's striping over its io servers.
    pub stripe_size_bytes: u64,
    pub stripe_count: u32,
    /// What data requests are cut by: stripes over io servers, or blocks over cache
    /// managers (unit `target_unit_bytes`, dealt round robin over `target_count`).
    pub target_kind: TargetKind,
    pub target_unit_bytes: u64,
    pub target_count: u32,
}

impl FileRecord {
    /// The target (io server or cache manager index) holding file byte `offset`.
    pub fn target_of(&self, offset: u64) -> u32 {
        ((offset / self.target_unit_bytes.max(1)) % u64::from(self.target_count.max(1))) as u32
    }
}

/// Which side of aggregation a request was recorded on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// As the process asked for it (MPI-IO, before collective aggregation).
    Original,
    /// As sent to Weft (the client's data calls: after aggregation).
    Sent,
}

/// Request flags (bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u8);

impl Flags {
    pub const WRITE: u8 = 1;
    pub const COLLECTIVE: u8 = 2;
    pub const SENT: u8 = 4;
    /// The request goes on from the previous record (a request of more runs than one
    /// record holds).
    pub const CONTINUED: u8 = 8;
    const CALL: u8 = 16;
    const KNOWN: u8 = 31;

    pub fn write(self) -> bool {
        self.0 & Self::WRITE != 0
    }
    pub fn collective(self) -> bool {
        self.0 & Self::COLLECTIVE != 0
    }
    pub fn side(self) -> Side {
        if self.0 & Self::SENT != 0 {
            Side::Sent
        } else {
            Side::Original
        }
    }
    pub fn continued(self) -> bool {
        self.0 & Self::CONTINUED != 0
    }
}

/// One MPI-IO call: `handle` names the open file (the same on every rank of a
/// collective open), `seq` the call on it. The original requests of a collective call
/// and the requests its aggregators sent carry the same id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId {
    pub handle: u64,
    pub seq: u64,
}

/// What a request accesses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// View bytes `[view_offset, view_offset + len)` of a view recorded earlier.
    View { view: u32, view_offset: u64, len: u64 },
    /// File ranges, as runs of equal strided ranges, in the order accessed.
    Runs(Vec<Run>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// Wall-clock nanoseconds since the Unix epoch.
    pub time_ns: u64,
    pub flags: Flags,
    pub inode: u64,
    /// Original requests: the rank in the file's communicator; sent ones: none (the
    /// process's rank is the header's).
    pub rank: Option<u32>,
    pub call: Option<CallId>,
    pub shape: Shape,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    File(FileRecord),
    /// A view used by later requests of the same trace (ids are per trace).
    View {
        view: u32,
        inode: u64,
        decoded: Arc<View>,
    },
    Request(RequestRecord),
    /// Something the reader should know (the size limit was hit, ...).
    Note(String),
}

/// What is wrong with a trace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    #[error("not a Weft trace (bad magic)")]
    Magic,
    #[error("trace format version {0}; this build reads version {FORMAT_VERSION}")]
    Version(u16),
    #[error("trace ends inside {0}")]
    Truncated(&'static str),
    #[error("bad {what} in a trace: {value}")]
    Invalid { what: &'static str, value: u64 },
    #[error("{what} of {len} bytes in a trace exceeds the limit of {max}")]
    TooLong { what: &'static str, len: u64, max: u64 },
    #[error("bad view in a trace: {0}")]
    View(String),
}

// ----- encoding -----

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Cuts `s` to at most `max` bytes at a character boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The trace's first bytes.
pub fn encode_header(header: &Header) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    put_varint(&mut out, header.rank.map_or(0, |r| u64::from(r) + 1));
    put_varint(&mut out, u64::from(header.pid));
    put_bytes(&mut out, clip(&header.host, HOST_BYTES_MAX).as_bytes());
    put_varint(&mut out, header.start_unix_ns);
    out
}

/// Encodes records one after another; keeps the time of the last request, since
/// request times are deltas.
#[derive(Clone, Debug)]
pub struct Encoder {
    last_time_ns: u64,
}

impl Encoder {
    pub fn new(header: &Header) -> Self {
        Encoder {
            last_time_ns: header.start_unix_ns,
        }
    }

    /// Appends `record` to `out`. Paths and notes longer than their limits are cut;
    /// a view longer than [`VIEW_BYTES_MAX`] or a request of more than
    /// [`RUNS_PER_RECORD_MAX`] runs is a bug in the caller (split requests with
    /// [`Encoder::request`]).
    pub fn record(&mut self, record: &Record, out: &mut Vec<u8>) {
        let mut body = Vec::new();
        let tag = match record {
            Record::File(f) => {
                put_varint(&mut body, f.inode);
                put_bytes(&mut body, clip(&f.path, PATH_BYTES_MAX).as_bytes());
                put_varint(&mut body, f.stripe_size_bytes);
                put_varint(&mut body, u64::from(f.stripe_count));
                body.push(match f.target_kind {
                    TargetKind::IoServers => 0,
                    TargetKind::CacheManagers => 1,
                });
                put_varint(&mut body, f.target_unit_bytes);
                put_varint(&mut body, u64::from(f.target_count));
                TAG_FILE
            }
            Record::View { view, inode, decoded } => {
                put_varint(&mut body, u64::from(*view));
                put_varint(&mut body, *inode);
                let wire = decoded.encode();
                assert!(wire.len() <= VIEW_BYTES_MAX, "view too large for a trace");
                put_bytes(&mut body, &wire);
                TAG_VIEW
            }
            Record::Request(r) => {
                let delta = r.time_ns.wrapping_sub(self.last_time_ns) as i64;
                self.last_time_ns = r.time_ns;
                put_varint(&mut body, zigzag(delta));
                let mut flags = r.flags.0 & (Flags::KNOWN & !Flags::CALL);
                if r.call.is_some() {
                    flags |= Flags::CALL;
                }
                body.push(flags);
                put_varint(&mut body, r.inode);
                put_varint(&mut body, r.rank.map_or(0, |x| u64::from(x) + 1));
                if let Some(call) = r.call {
                    put_varint(&mut body, call.handle);
                    put_varint(&mut body, call.seq);
                }
                match &r.shape {
                    Shape::View {
                        view,
                        view_offset,
                        len,
                    } => {
                        body.push(0);
                        put_varint(&mut body, u64::from(*view));
                        put_varint(&mut body, *view_offset);
                        put_varint(&mut body, *len);
                    }
                    Shape::Runs(runs) => {
                        assert!(runs.len() <= RUNS_PER_RECORD_MAX, "too many runs for one record");
                        body.push(1);
                        put_varint(&mut body, runs.len() as u64);
                        for run in runs {
                            put_varint(&mut body, run.offset);
                            put_varint(&mut body, run.len);
                            put_varint(&mut body, run.count);
                            if run.count > 1 {
                                put_varint(&mut body, run.stride);
                            }
                        }
                    }
                }
                TAG_REQUEST
            }
            Record::Note(text) => {
                put_bytes(&mut body, clip(text, NOTE_BYTES_MAX).as_bytes());
                TAG_NOTE
            }
        };
        debug_assert!(body.len() <= RECORD_BYTES_MAX);
        out.push(tag);
        put_varint(out, body.len() as u64);
        out.extend_from_slice(&body);
    }

    /// Appends a request of any number of runs: one record per [`RUNS_PER_RECORD_MAX`]
    /// runs, the later ones marked continued.
    pub fn request(&mut self, request: &RequestRecord, out: &mut Vec<u8>) {
        match &request.shape {
            Shape::Runs(runs) if runs.len() > RUNS_PER_RECORD_MAX => {
                for (i, chunk) in runs.chunks(RUNS_PER_RECORD_MAX).enumerate() {
                    let mut flags = request.flags;
                    if i > 0 {
                        flags.0 |= Flags::CONTINUED;
                    }
                    self.record(
                        &Record::Request(RequestRecord {
                            flags,
                            shape: Shape::Runs(chunk.to_vec()),
                            ..request.clone()
                        }),
                        out,
                    );
                }
            }
            _ => self.record(&Record::Request(request.clone()), out),
        }
    }
}

// ----- decoding -----

/// A bounded cursor over untrusted bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Cursor<'a> {
    fn u8(&mut self) -> Result<u8, TraceError> {
        let b = *self.bytes.get(self.at).ok_or(TraceError::Truncated(self.what))?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, TraceError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                break;
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(TraceError::Invalid {
            what: "varint (longer than 64 bits)",
            value: v,
        })
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, TraceError> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| TraceError::Invalid { what, value: v })
    }

    fn bytes(&mut self, what: &'static str, max: usize) -> Result<&'a [u8], TraceError> {
        let len = self.varint()?;
        if len > max as u64 {
            return Err(TraceError::TooLong {
                what,
                len,
                max: max as u64,
            });
        }
        let end = self
            .at
            .checked_add(len as usize)
            .filter(|&e| e <= self.bytes.len());
        let end = end.ok_or(TraceError::Truncated(what))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn string(&mut self, what: &'static str, max: usize) -> Result<String, TraceError> {
        Ok(String::from_utf8_lossy(self.bytes(what, max)?).into_owned())
    }

    fn finish(&self, what: &'static str) -> Result<(), TraceError> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(TraceError::Invalid {
                what,
                value: (self.bytes.len() - self.at) as u64,
            })
        }
    }
}

/// Decodes a trace's records one by one. After an error it yields nothing more: a
/// damaged record leaves no reliable place to resume.
pub struct Reader<'a> {
    header: Header,
    bytes: &'a [u8],
    at: usize,
    last_time_ns: u64,
    failed: bool,
    /// Records of unknown kinds skipped so far.
    pub skipped: u64,
}

impl<'a> Reader<'a> {
    /// Reads the header; the records follow through the iterator.
    pub fn new(bytes: &'a [u8]) -> Result<Self, TraceError> {
        if bytes.len() < MAGIC.len() + 2 {
            return Err(if bytes.starts_with(&MAGIC[..bytes.len().min(MAGIC.len())]) {
                TraceError::Truncated("the header")
            } else {
                TraceError::Magic
            });
        }
        if bytes[..MAGIC.len()] != MAGIC {
            return Err(TraceError::Magic);
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version != FORMAT_VERSION {
            return Err(TraceError::Version(version));
        }
        let mut c = Cursor {
            bytes,
            at: 10,
            what: "the header",
        };
        let rank = match c.varint()? {
            0 => None,
            r => Some(u32::try_from(r - 1).map_err(|_| TraceError::Invalid {
                what: "rank",
                value: r,
            })?),
        };
        let pid = c.u32("pid")?;
        let host = c.string("host name", HOST_BYTES_MAX)?;
        let start_unix_ns = c.varint()?;
        let header = Header {
            rank,
            pid,
            host,
            start_unix_ns,
        };
        Ok(Reader {
            last_time_ns: start_unix_ns,
            header,
            bytes,
            at: c.at,
            failed: false,
            skipped: 0,
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Bytes decoded so far.
    pub fn position(&self) -> usize {
        self.at
    }

    fn next_record(&mut self) -> Result<Option<Record>, TraceError> {
        loop {
            if self.at == self.bytes.len() {
                return Ok(None);
            }
            let mut c = Cursor {
                bytes: self.bytes,
                at: self.at,
                what: "a record",
            };
            let tag = c.u8()?;
            let body = c.bytes("record", RECORD_BYTES_MAX)?;
            self.at = c.at;
            let mut b = Cursor {
                bytes: body,
                at: 0,
                what: "a record body",
            };
            let record = match tag {
                TAG_FILE => Record::File(decode_file(&mut b)?),
                TAG_VIEW => {
                    let view = b.u32("view id")?;
                    let inode = b.varint()?;
                    let wire = b.bytes("view", VIEW_BYTES_MAX)?;
                    let decoded = View::decode(wire).map_err(|e| TraceError::View(e.to_string()))?;
                    Record::View {
                        view,
                        inode,
                        decoded: Arc::new(decoded),
                    }
                }
                TAG_REQUEST => Record::Request(self.decode_request(&mut b)?),
                TAG_NOTE => Record::Note(b.string("note", NOTE_BYTES_MAX)?),
                _ => {
                    self.skipped += 1;
                    continue;
                }
            };
            b.finish("bytes after a record's fields")?;
            return Ok(Some(record));
        }
    }

    fn decode_request(&mut self, b: &mut Cursor<'_>) -> Result<RequestRecord, TraceError> {
        let delta = unzigzag(b.varint()?);
        let time_ns = self.last_time_ns.wrapping_add(delta as u64);
        let flags = b.u8()?;
        if flags & !Flags::KNOWN != 0 {
            return Err(TraceError::Invalid {
                what: "request flags",
                value: u64::from(flags),
            });
        }
        let inode = b.varint()?;
        let rank = match b.varint()? {
            0 => None,
            r => Some(u32::try_from(r - 1).map_err(|_| TraceError::Invalid {
                what: "rank",
                value: r,
            })?),
        };
        let call = if flags & Flags::CALL != 0 {
            Some(CallId {
                handle: b.varint()?,
                seq: b.varint()?,
            })
        } else {
            None
        };
        let shape = match b.u8()? {
            0 => {
                let view = b.u32("view id")?;
                let view_offset = b.varint()?;
                let len = b.varint()?;
                if view_offset.checked_add(len).is_none() {
                    return Err(TraceError::Invalid {
                        what: "view interval (offset + length overflows)",
                        value: view_offset,
                    });
                }
                Shape::View {
                    view,
                    view_offset,
                    len,
                }
            }
            1 => {
                let count = b.varint()?;
                // Each run takes at least three bytes: nothing is allocated for runs
                // the body cannot hold.
                let room = (b.bytes.len() - b.at) / 3;
                if count > RUNS_PER_RECORD_MAX as u64 || count > room as u64 {
                    return Err(TraceError::Invalid {
                        what: "run count",
                        value: count,
                    });
                }
                let mut runs = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    let offset = b.varint()?;
                    let len = b.varint()?;
                    let n = b.varint()?;
                    let stride = if n > 1 { b.varint()? } else { 0 };
                    let run = Run::new(offset, len, stride, n).ok_or(TraceError::Invalid {
                        what: "run (past the largest file offset, or overlapping itself)",
                        value: offset,
                    })?;
                    runs.push(run);
                }
                Shape::Runs(runs)
            }
            other => {
                return Err(TraceError::Invalid {
                    what: "request shape",
                    value: u64::from(other),
                })
            }
        };
        self.last_time_ns = time_ns;
        Ok(RequestRecord {
            time_ns,
            flags: Flags(flags & !Flags::CALL),
            inode,
            rank,
            call,
            shape,
        })
    }
}

fn decode_file(b: &mut Cursor<'_>) -> Result<FileRecord, TraceError> {
    let inode = b.varint()?;
    let path = b.string("path", PATH_BYTES_MAX)?;
    let stripe_size_bytes = b.varint()?;
    let stripe_count = b.u32("stripe count")?;
    let target_kind = match b.u8()? {
        0 => TargetKind::IoServers,
        1 => TargetKind::CacheManagers,
        other => {
            return Err(TraceError::Invalid {
                what: "target kind",
                value: u64::from(other),
            })
        }
    };
    let target_unit_bytes = b.varint()?;
    let target_count = b.u32("target count")?;
    if stripe_size_bytes == 0 || target_unit_bytes == 0 || stripe_count == 0 || target_count == 0 {
        return Err(TraceError::Invalid {
            what: "file layout (a zero size or count)",
            value: inode,
        });
    }
    Ok(FileRecord {
        inode,
        path,
        stripe_size_bytes,
        stripe_count,
        target_kind,
        target_unit_bytes,
        target_count,
    })
}

impl Iterator for Reader<'_> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.next_record() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use weft_layout::view::Datatype;

    fn header() -> Header {
        Header {
            rank: Some(3),
            pid: 4242,
            host: "node7".into(),
            start_unix_ns: 1_700_000_000_000_000_000,
        }
    }

    fn sample_records() -> Vec<Record> {
        let view = View::new(
            100,
            Datatype::vector(4, 2, 5, &Datatype::bytes(8).unwrap()).unwrap(),
        )
        .unwrap();
        vec![
            Record::File(FileRecord {
                inode: 77,
                path: "/data/tile".into(),
                stripe_size_bytes: 65536,
                stripe_count: 4,
                target_kind: TargetKind::CacheManagers,
                target_unit_bytes: 65536,
                target_count: 2,
            }),
            Record::View {
                view: 1,
                inode: 77,
                decoded: Arc::new(view),
            },
            Record::Request(RequestRecord {
                time_ns: 1_700_000_000_000_000_500,
                flags: Flags(Flags::COLLECTIVE),
                inode: 77,
                rank: Some(2),
                call: Some(CallId { handle: 9, seq: 0 }),
                shape: Shape::View {
                    view: 1,
                    view_offset: 64,
                    len: 1000,
                },
            }),
            // Earlier than the one before: another thread took its time first.
            Record::Request(RequestRecord {
                time_ns: 1_700_000_000_000_000_400,
                flags: Flags(Flags::SENT | Flags::WRITE),
                inode: 77,
                rank: None,
                call: None,
                shape: Shape::Runs(vec![
                    Run::new(0, 10, 0, 1).unwrap(),
                    Run::new(4096, 512, 8192, 1000).unwrap(),
                ]),
            }),
            Record::Note("size limit reached".into()),
        ]
    }

    /// A whole trace of `records` under `h`.
    pub(crate) fn encode(h: &Header, records: &[Record]) -> Vec<u8> {
        let mut out = encode_header(h);
        let mut e = Encoder::new(h);
        for r in records {
            e.record(r, &mut out);
        }
        out
    }

    fn encode_all(records: &[Record]) -> Vec<u8> {
        encode(&header(), records)
    }

    #[test]
    fn records_round_trip() {
        let records = sample_records();
        let bytes = encode_all(&records);
        let reader = Reader::new(&bytes).unwrap();
        assert_eq!(reader.header(), &header());
        let back: Vec<Record> = reader.map(|r| r.unwrap()).collect();
        assert_eq!(back, records);
    }

    #[test]
    fn a_cut_trace_keeps_every_whole_record() {
        let records = sample_records();
        let bytes = encode_all(&records);
        let header_len = encode_header(&header()).len();
        for cut in header_len..bytes.len() {
            let reader = Reader::new(&bytes[..cut]).unwrap();
            let mut whole = 0;
            let mut error = None;
            for r in reader {
                match r {
                    Ok(_) => whole += 1,
                    Err(e) => error = Some(e),
                }
            }
            assert!(whole < records.len(), "cut at {cut}");
            if cut > header_len {
                // Only a cut exactly between records reads cleanly.
                let clean = error.is_none();
                let boundary = (0..=records.len()).any(|n| encode_all(&records[..n]).len() == cut);
                assert_eq!(clean, boundary, "cut at {cut}: {error:?}");
            }
        }
        for cut in 0..header_len {
            assert!(Reader::new(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn bad_magic_version_and_unknown_records() {
        let mut bytes = encode_all(&sample_records());
        assert_eq!(Reader::new(b"not a trace at all").err(), Some(TraceError::Magic));
        bytes[8] = 9;
        assert_eq!(Reader::new(&bytes).err(), Some(TraceError::Version(9)));
        // An unknown record kind between two known ones is skipped.
        let h = header();
        let mut out = encode_header(&h);
        let mut e = Encoder::new(&h);
        e.record(&Record::Note("a".into()), &mut out);
        out.extend_from_slice(&[99, 3, 1, 2, 3]);
        e.record(&Record::Note("b".into()), &mut out);
        let mut reader = Reader::new(&out).unwrap();
        let notes: Vec<Record> = reader.by_ref().map(|r| r.unwrap()).collect();
        assert_eq!(notes, vec![Record::Note("a".into()), Record::Note("b".into())]);
        assert_eq!(reader.skipped, 1);
    }

    #[test]
    fn long_requests_split_into_continued_records() {
        let runs: Vec<Run> = (0..RUNS_PER_RECORD_MAX as u64 + 10)
            .map(|i| Run::new(i * 100, 1 + i % 7, 0, 1).unwrap())
            .collect();
        let request = RequestRecord {
            time_ns: 5,
            flags: Flags(Flags::SENT),
            inode: 1,
            rank: None,
            call: None,
            shape: Shape::Runs(runs.clone()),
        };
        let h = header();
        let mut out = encode_header(&h);
        Encoder::new(&h).request(&request, &mut out);
        let back: Vec<RequestRecord> = Reader::new(&out)
            .unwrap()
            .map(|r| match r.unwrap() {
                Record::Request(r) => r,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(back.len(), 2);
        assert!(!back[0].flags.continued() && back[1].flags.continued());
        let joined: Vec<Run> = back
            .iter()
            .flat_map(|r| match &r.shape {
                Shape::Runs(v) => v.clone(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(joined, runs);
    }

    proptest! {
        /// Arbitrary bytes after a valid header never panic, and decoding stops.
        #[test]
        fn garbage_never_panics(tail in prop::collection::vec(any::<u8>(), 0..400)) {
            let mut bytes = encode_header(&header());
            bytes.extend_from_slice(&tail);
            let reader = Reader::new(&bytes).unwrap();
            prop_assert!(reader.count() <= tail.len());
        }

        #[test]
        fn varints_round_trip(v in any::<u64>(), s in any::<i64>()) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut c = Cursor { bytes: &out, at: 0, what: "test" };
            prop_assert_eq!(c.varint().unwrap(), v);
            prop_assert_eq!(unzigzag(zigzag(s)), s);
        }
    }
}

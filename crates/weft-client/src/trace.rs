//! Trace capture, off unless asked for: each process appends the requests it sends to
//! Weft (and, through the MPI-IO layer, the original requests of every MPI-IO call) to
//! one trace file in weft-trace's format. `WEFT_TRACE=DIR` turns it on for every file a
//! process opens; the MPI-IO layer turns it on or off per file (hint `weft_trace`).
//!
//! Cheap when off (one `Option` test per call) and bounded when on: records are
//! encoded into a buffer written out every [`FLUSH_BYTES`] and when a traced file
//! handle is dropped; past `WEFT_TRACE_MAX_BYTES` (default [`TRACE_BYTES_MAX_DEFAULT`])
//! a note says so and nothing more is recorded. A trace that cannot be written is
//! reported once on stderr and dropped: tracing never fails an I/O call.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use weft_layout::view::{Datatype, View};
use weft_trace::format::{
    encode_header, CallId, Encoder, FileRecord, Flags, Header, Record, RequestRecord, Shape, TargetKind,
};
use weft_trace::runs::RunsBuilder;

/// Default bound on one process's trace file.
pub const TRACE_BYTES_MAX_DEFAULT: u64 = 256 << 20;
/// Encoded bytes kept in memory before they are written out.
pub const FLUSH_BYTES: usize = 64 << 10;
/// Most trace directories one process writes to at once.
pub const TRACE_DIRS_MAX: usize = 16;
/// Set in the sequence number of an independent call's id (rank in bits 32..63).
pub const INDEPENDENT_CALL: u64 = 1 << 63;
/// Views remembered per traced file (a view seen again is not recorded again).
const VIEWS_REMEMBERED: usize = 16;

/// One process's trace file.
pub struct Tracer {
    path: PathBuf,
    limit_bytes: u64,
    state: Mutex<State>,
}

struct State {
    out: Option<std::fs::File>,
    buffer: Vec<u8>,
    encoder: Encoder,
    /// Bytes written out plus buffered.
    bytes: u64,
    full: bool,
    /// Requests not recorded because the trace was full.
    dropped: u64,
    files: HashSet<u64>,
    next_view: u32,
}

/// Nanoseconds since the Unix epoch (wall clock: comparable between processes).
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The process's rank in its MPI job, from the launcher's environment (Open MPI,
/// PMIx, MPICH's PMI), so that no MPI call is needed.
fn launcher_rank() -> Option<u32> {
    ["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// Names tried for a trace file before giving up.
const TRACE_NAMES_MAX: u32 = 64;

/// Creates `STEM.wtrace` in `dir`, or `STEM-N.wtrace` when that exists, exclusively
/// (O_EXCL, which also refuses a symbolic link there). Pids wrap and repeat across
/// hosts and containers: a trace left by a killed earlier run with this pid and rank,
/// or one another job is writing into a shared directory, was truncated (or its two
/// writers' records interleaved), and a symbolic link under the name followed.
fn create_trace_file(dir: &Path, stem: &str) -> std::io::Result<(std::fs::File, PathBuf)> {
    for attempt in 0..TRACE_NAMES_MAX {
        let path = match attempt {
            0 => dir.join(format!("{stem}.wtrace")),
            n => dir.join(format!("{stem}-{n}.wtrace")),
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(out) => return Ok((out, path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!(
            "{}: {stem}.wtrace and {} more names like it exist",
            dir.display(),
            TRACE_NAMES_MAX - 1
        ),
    ))
}

static TRACERS: Mutex<Vec<(PathBuf, Arc<Tracer>)>> = Mutex::new(Vec::new());

/// `$WEFT_TRACE`, read once.
pub fn env_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        std::env::var_os("WEFT_TRACE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
    .as_deref()
}

impl Tracer {
    /// The process's tracer writing into `dir` (created if missing), one per directory,
    /// bounded by `WEFT_TRACE_MAX_BYTES` (default [`TRACE_BYTES_MAX_DEFAULT`]).
    pub fn for_dir(dir: &Path) -> std::io::Result<Arc<Tracer>> {
        let limit_bytes = std::env::var("WEFT_TRACE_MAX_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(TRACE_BYTES_MAX_DEFAULT);
        Self::for_dir_with_limit(dir, limit_bytes)
    }

    /// [`Tracer::for_dir`] with a size limit (the first call for a directory sets it).
    /// The file is `rank-RRRRR.PID.wtrace` in an MPI job, else `HOST.PID.wtrace`; with
    /// `-N` after the pid when that name exists (see `create_trace_file`).
    pub fn for_dir_with_limit(dir: &Path, limit_bytes: u64) -> std::io::Result<Arc<Tracer>> {
        let mut tracers = TRACERS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, t)) = tracers.iter().find(|(d, _)| d == dir) {
            return Ok(t.clone());
        }
        if tracers.len() >= TRACE_DIRS_MAX {
            return Err(std::io::Error::other(format!(
                "a process traces into at most {TRACE_DIRS_MAX} directories"
            )));
        }
        std::fs::create_dir_all(dir)?;
        let rank = launcher_rank();
        let pid = std::process::id();
        let host = host_name();
        let stem = match rank {
            Some(r) => format!("rank-{r:05}.{pid}"),
            None => format!("{host}.{pid}"),
        };
        let (out, path) = create_trace_file(dir, &stem)?;
        let header = Header {
            rank,
            pid,
            host,
            start_unix_ns: now_ns(),
        };
        let buffer = encode_header(&header);
        let tracer = Arc::new(Tracer {
            path,
            limit_bytes,
            state: Mutex::new(State {
                out: Some(out),
                bytes: buffer.len() as u64,
                buffer,
                encoder: Encoder::new(&header),
                full: false,
                dropped: 0,
                files: HashSet::new(),
                next_view: 1,
            }),
        });
        tracers.push((dir.to_owned(), tracer.clone()));
        Ok(tracer)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Encodes what `encode` appends (given the time, taken under the lock so that a
    /// trace's times never go back unless the clock does), within the size limit.
    fn record(&self, encode: impl FnOnce(&mut Encoder, &mut Vec<u8>, u64)) {
        let mut s = self.state();
        if s.full || s.out.is_none() {
            s.dropped += 1;
            return;
        }
        let before = s.buffer.len();
        let time = now_ns();
        let State { encoder, buffer, .. } = &mut *s;
        encode(encoder, buffer, time);
        let added = (s.buffer.len() - before) as u64;
        if s.bytes + added > self.limit_bytes {
            s.buffer.truncate(before);
            s.full = true;
            s.dropped += 1;
            let note = format!(
                "trace size limit of {} bytes (WEFT_TRACE_MAX_BYTES) reached; later requests are not recorded",
                self.limit_bytes
            );
            let State { encoder, buffer, .. } = &mut *s;
            encoder.record(&Record::Note(note), buffer);
            s.bytes = self.limit_bytes;
        } else {
            s.bytes += added;
        }
        if s.buffer.len() >= FLUSH_BYTES || s.full {
            self.write_out(&mut s);
        }
    }

    fn write_out(&self, s: &mut State) {
        if s.buffer.is_empty() {
            return;
        }
        if let Some(out) = s.out.as_mut() {
            if let Err(e) = out.write_all(&s.buffer) {
                eprintln!("weft: trace {}: {e}; tracing stops", self.path.display());
                s.out = None;
            }
        }
        s.buffer.clear();
    }

    /// Writes out what is buffered.
    pub fn flush(&self) {
        let mut s = self.state();
        self.write_out(&mut s);
    }

    /// Requests not recorded because the trace was full.
    pub fn dropped(&self) -> u64 {
        self.state().dropped
    }
}

/// What a traced file records with: its tracer and the current MPI-IO call.
pub struct FileTrace {
    tracer: Arc<Tracer>,
    inode: u64,
    calls: Mutex<Calls>,
    /// The time of the last original request recorded (0: none), for an access pattern
    /// to carry the same time as the trace (so that `weft sim` orders a call's ranks as
    /// the cache manager did).
    last_original_ns: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Calls {
    handle: u64,
    next_seq: u64,
    next_independent: u32,
    current: Option<(CallId, bool)>,
    /// Views recorded for this file: (displacement, filetype, id).
    views: Vec<(u64, Arc<Datatype>, u32)>,
}

impl FileTrace {
    /// Starts tracing a file: records its layout once per trace.
    pub(crate) fn new(tracer: Arc<Tracer>, record: FileRecord) -> FileTrace {
        let inode = record.inode;
        let first = tracer.state().files.insert(inode);
        if first {
            tracer.record(|e, out, _| e.record(&Record::File(record), out));
        }
        FileTrace {
            tracer,
            inode,
            calls: Mutex::new(Calls::default()),
            last_original_ns: Default::default(),
        }
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn tracer(&self) -> &Arc<Tracer> {
        &self.tracer
    }

    /// Names the open file for call ids (the MPI-IO layer gives every rank of a
    /// collective open the same handle).
    pub fn set_handle(&self, handle: u64) {
        self.calls().handle = handle;
    }

    /// Starts an MPI-IO call: requests recorded until [`FileTrace::end_call`] carry its
    /// id. Collective calls are numbered in call order, the same on every rank;
    /// independent ones by a counter of `rank`'s own, with [`INDEPENDENT_CALL`] set.
    pub fn begin_call(&self, collective: bool, rank: u32) -> CallId {
        let mut c = self.calls();
        let seq = if collective {
            c.next_seq += 1;
            c.next_seq - 1
        } else {
            c.next_independent = c.next_independent.wrapping_add(1);
            INDEPENDENT_CALL | u64::from(rank) << 32 | u64::from(c.next_independent)
        };
        let id = CallId {
            handle: c.handle,
            seq,
        };
        c.current = Some((id, collective));
        id
    }

    pub fn end_call(&self) {
        self.calls().current = None;
    }

    /// The id of a view, recording the view the first time it is seen.
    fn view_id(&self, view: &View) -> u32 {
        let mut c = self.calls();
        let found = c.views.iter().find(|(d, t, _)| {
            *d == view.displacement() && (Arc::ptr_eq(t, view.filetype()) || **t == **view.filetype())
        });
        if let Some(&(_, _, id)) = found {
            return id;
        }
        let id = {
            let mut s = self.tracer.state();
            let id = s.next_view;
            s.next_view = s.next_view.wrapping_add(1);
            id
        };
        let inode = self.inode;
        let decoded = Arc::new(view.clone());
        self.tracer.record(|e, out, _| {
            e.record(
                &Record::View {
                    view: id,
                    inode,
                    decoded,
                },
                out,
            )
        });
        if c.views.len() >= VIEWS_REMEMBERED {
            c.views.remove(0);
        }
        c.views.push((view.displacement(), view.filetype().clone(), id));
        id
    }

    fn request(&self, sent: bool, write: bool, rank: Option<u32>, shape: Shape) -> u64 {
        let current = self.calls().current;
        let mut flags = 0;
        if write {
            flags |= Flags::WRITE;
        }
        if sent {
            flags |= Flags::SENT;
        }
        if current.is_some_and(|c| c.1) {
            flags |= Flags::COLLECTIVE;
        }
        let inode = self.inode;
        let mut at = 0;
        self.tracer.record(|e, out, time_ns| {
            at = time_ns;
            e.request(
                &RequestRecord {
                    time_ns,
                    flags: Flags(flags),
                    inode,
                    rank,
                    call: current.map(|c| c.0),
                    shape,
                },
                out,
            )
        });
        at
    }

    /// When the last original request was recorded (ns since the epoch), if any.
    pub fn last_original_ns(&self) -> Option<u64> {
        Some(self.last_original_ns.load(std::sync::atomic::Ordering::Relaxed)).filter(|t| *t != 0)
    }

    /// The original request of an MPI-IO call: view bytes `[view_offset, +len)`.
    pub fn original(&self, rank: u32, write: bool, view: &View, view_offset: u64, len: u64) {
        let shape = if view.filetype().fits_wire() {
            Shape::View {
                view: self.view_id(view),
                view_offset,
                len,
            }
        } else {
            // A view without a wire form (too many blocks) cannot be a trace record:
            // the request goes as its file ranges.
            let mut runs = RunsBuilder::default();
            if let Ok(pieces) = view.pieces(view_offset, len) {
                for piece in pieces {
                    runs.push(piece.file_offset, piece.len);
                }
            }
            if runs.is_empty() {
                return;
            }
            Shape::Runs(runs.finish())
        };
        let at = self.request(false, write, Some(rank), shape);
        self.last_original_ns
            .store(at, std::sync::atomic::Ordering::Relaxed);
    }

    /// A request sent to Weft: file ranges.
    pub(crate) fn sent_ranges(&self, write: bool, ranges: impl IntoIterator<Item = (u64, u64)>) {
        let mut runs = RunsBuilder::default();
        for (offset, len) in ranges {
            runs.push(offset, len);
        }
        if !runs.is_empty() {
            let _ = self.request(true, write, None, Shape::Runs(runs.finish()));
        }
    }

    /// A request sent to Weft: view bytes.
    pub(crate) fn sent_view(&self, write: bool, view: &View, view_offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let id = self.view_id(view);
        let _ = self.request(
            true,
            write,
            None,
            Shape::View {
                view: id,
                view_offset,
                len,
            },
        );
    }
}

impl Drop for FileTrace {
    fn drop(&mut self) {
        self.tracer.flush();
    }
}

/// The trace record of a file: its striping and where its data requests go.
pub(crate) fn file_record(
    inode: u64,
    path: &str,
    io: &weft_layout::Layout,
    data: &weft_layout::Layout,
    cached: bool,
) -> FileRecord {
    FileRecord {
        inode,
        path: path.to_owned(),
        stripe_size_bytes: io.stripe_size_bytes,
        stripe_count: io.servers.len() as u32,
        target_kind: if cached {
            TargetKind::CacheManagers
        } else {
            TargetKind::IoServers
        },
        target_unit_bytes: data.stripe_size_bytes,
        target_count: data.servers.len() as u32,
    }
}

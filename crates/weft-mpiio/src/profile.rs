//! The MPI-IO profile (`WEFT_PROFILE`), in the spirit of a Darshan summary: per `weft:`
//! file, the calls of each MPI-IO function (count, bytes, seconds, errors), the bytes
//! read and written, the collective methods chosen, and the time of the calls split
//! into exchange, I/O and waiting. At `MPI_Finalize` rank 0 of `MPI_COMM_WORLD` gathers
//! every process's profile, prints the merged one on standard error and writes it as
//! JSON (`weft-profile-<unix seconds>-<pid>.json`).
//!
//! `WEFT_PROFILE=1` (or `yes`, `on`, `true`) writes the JSON in the working directory;
//! any other value but `0`, `no`, `off`, `false` and the empty string names the
//! directory. It must be set alike for every process of the job (`mpirun -x`): the
//! gather at `MPI_Finalize` is collective.
//!
//! The time split, per call: *exchange* is time in the MPI calls that move data among
//! the processes (allgather, alltoall(v), bcast), *waiting* time in the ones that only
//! synchronise (barriers, and the allreduces that agree on errors and end of file),
//! where a process waits for the slowest; *I/O* is the rest of the call: Weft client
//! requests, and packing and planning around them.
//!
//! Hooks, one line each where they are: [`open`], [`close`], [`io`] and [`call`]
//! around the `abi` entry points, [`method`] where a collective method is run, [`span`]
//! in the `mpi` wrappers, [`finalize`] at `MPI_Finalize`. With the profile off each is
//! one check of a static.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::mpi::{Comm, Handle};
#[cfg(test)]
use crate::timing::setting;
pub use crate::timing::{enabled, method, span, Phase, Span};
use crate::timing::{COLLECTIVES, DIR, EXCHANGE_NS, METHOD, WAITING_NS};

/// Most files one process profiles by name; the calls on further files are added to
/// one entry, [`OTHER_FILES`].
pub const FILES_MAX: usize = 256;
pub const OTHER_FILES: &str = "(other files)";
/// Largest merged profile gathered to rank 0 (bytes of JSON); a larger one is written
/// per process instead.
const GATHER_BYTES_MAX: usize = 1 << 30;

/// One MPI-IO function on one file.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calls {
    pub count: u64,
    /// Bytes moved (data calls only).
    pub bytes: u64,
    pub time_s: f64,
    /// Calls that returned an error.
    pub errors: u64,
    /// MPI collective operations (allgather, allreduce, alltoall(v), bcast, barrier,
    /// ...) the library made within these calls: what a call costs in synchronisation.
    #[serde(default)]
    pub mpi_collectives: u64,
}

/// The time of a file's calls, split (seconds, summed over processes).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Time {
    pub total_s: f64,
    pub exchange_s: f64,
    pub io_s: f64,
    pub waiting_s: f64,
}

/// One file's profile (of one process, or summed over processes).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileProfile {
    /// The name the program opened (`weft:/...`).
    pub file: String,
    /// Processes that called MPI-IO functions on it.
    pub processes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Per MPI-IO function (`MPI_File_write_at_all`, ...).
    pub calls: BTreeMap<String, Calls>,
    /// Collective calls per method the library ran them with (`two_phase`, ...).
    pub methods: BTreeMap<String, u64>,
    pub time: Time,
}

impl FileProfile {
    fn add(&mut self, other: &FileProfile) {
        self.processes += other.processes;
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        for (name, c) in &other.calls {
            let mine = self.calls.entry(name.clone()).or_default();
            mine.count += c.count;
            mine.bytes += c.bytes;
            mine.time_s += c.time_s;
            mine.errors += c.errors;
            mine.mpi_collectives += c.mpi_collectives;
        }
        for (m, n) in &other.methods {
            *self.methods.entry(m.clone()).or_default() += n;
        }
        self.time.total_s += other.time.total_s;
        self.time.exchange_s += other.time.exchange_s;
        self.time.io_s += other.time.io_s;
        self.time.waiting_s += other.time.waiting_s;
    }
}

/// One process's profile, as gathered.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ProcessProfile {
    pub rank: usize,
    pub pid: u32,
    pub host: String,
    pub files: Vec<FileProfile>,
}

/// The merged profile: the JSON file.
#[derive(Debug, Serialize, Deserialize)]
pub struct JobProfile {
    pub weft_profile: u32,
    pub command: String,
    pub processes: usize,
    /// Summed over the processes, by file name.
    pub files: Vec<FileProfile>,
    /// Each process's totals over its files (calls, bytes, time).
    pub per_process: Vec<ProcessTotals>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ProcessTotals {
    pub rank: usize,
    pub pid: u32,
    pub host: String,
    pub calls: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub time: Time,
}

#[derive(Default)]
struct State {
    files: Vec<FileProfile>,
    by_name: HashMap<String, usize>,
    /// Open handle → its file's index.
    handles: HashMap<Handle, usize>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Default::default);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    fn index(&mut self, name: &str) -> usize {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let key = if self.files.len() < FILES_MAX {
            name
        } else {
            OTHER_FILES
        };
        if let Some(&i) = self.by_name.get(key) {
            return i;
        }
        self.files.push(FileProfile {
            file: key.to_owned(),
            processes: 1,
            ..Default::default()
        });
        self.by_name.insert(key.to_owned(), self.files.len() - 1);
        self.files.len() - 1
    }
}

/// Which file a call is on.
enum On<'a> {
    Name(&'a str),
    Handle(Handle),
}

/// Runs `f`, MPI-IO function `function` on `on`, and adds it to the file's profile
/// (`bytes` of what it returned: read if `read`, else written).
fn timed<T>(
    on: On<'_>,
    function: &str,
    read: bool,
    bytes: impl Fn(&T) -> u64,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    if !enabled() {
        return f();
    }
    let (exchange0, waiting0) = (EXCHANGE_NS.with(Cell::get), WAITING_NS.with(Cell::get));
    let collectives0 = COLLECTIVES.with(Cell::get);
    METHOD.with(|m| m.set(None));
    let start = Instant::now();
    let result = f();
    let total = start.elapsed().as_secs_f64();
    let exchange = EXCHANGE_NS.with(Cell::get).saturating_sub(exchange0) as f64 / 1e9;
    let waiting = WAITING_NS.with(Cell::get).saturating_sub(waiting0) as f64 / 1e9;
    let method = METHOD.with(|m| m.take());
    let collectives = COLLECTIVES.with(Cell::get).saturating_sub(collectives0);
    let mut s = state();
    let index = match on {
        On::Name(name) => s.index(name),
        On::Handle(h) => match s.handles.get(&h) {
            Some(&i) => i,
            None => return result,
        },
    };
    let file = &mut s.files[index];
    let moved = result.as_ref().map_or(0, &bytes);
    let calls = file.calls.entry(function.to_owned()).or_default();
    calls.count += 1;
    calls.bytes += moved;
    calls.time_s += total;
    calls.errors += u64::from(result.is_err());
    calls.mpi_collectives += collectives;
    if read {
        file.bytes_read += moved;
    } else {
        file.bytes_written += moved;
    }
    if let Some(m) = method {
        *file.methods.entry(m.to_owned()).or_default() += 1;
    }
    file.time.total_s += total;
    file.time.exchange_s += exchange;
    file.time.waiting_s += waiting;
    file.time.io_s += (total - exchange - waiting).max(0.0);
    result
}

/// `MPI_File_open` of `name`: `f` opens and returns the new handle.
pub fn open(name: &str, f: impl FnOnce() -> Result<Handle>) -> Result<Handle> {
    let result = timed(On::Name(name), "MPI_File_open", false, |_| 0, f);
    if let Ok(h) = result {
        if enabled() {
            let mut s = state();
            let i = s.index(name);
            s.handles.insert(h, i);
        }
    }
    result
}

/// `MPI_File_close` of handle `fh`.
pub fn close(fh: Handle, f: impl FnOnce() -> Result<()>) -> Result<()> {
    let result = timed(On::Handle(fh), "MPI_File_close", false, |_| 0, f);
    if enabled() {
        state().handles.remove(&fh);
    }
    result
}

/// Any other function without data, on handle `fh`.
pub fn call<T>(fh: Handle, function: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    timed(On::Handle(fh), function, false, |_| 0, f)
}

/// A data call on handle `fh` with the `io` flags (1 write, 2 collective, 4 explicit
/// offset); `f` returns the bytes moved.
pub fn io(fh: Handle, flags: i32, f: impl FnOnce() -> Result<u64>) -> Result<u64> {
    if !enabled() {
        return f();
    }
    let write = flags & 1 != 0;
    timed(On::Handle(fh), &function_of(flags), !write, |n| *n, f)
}

/// The MPI-IO function of the `io` flags.
fn function_of(flags: i32) -> String {
    let mut name = String::from(if flags & 1 != 0 {
        "MPI_File_write"
    } else {
        "MPI_File_read"
    });
    if flags & 4 != 0 {
        name += "_at";
    }
    if flags & 2 != 0 {
        name += "_all";
    }
    if flags & !7 != 0 {
        name += &format!(" (flags {flags:#x})");
    }
    name
}

extern "C" {
    fn wm_comm_world() -> Handle;
}

/// At `MPI_Finalize`, on every process when profiling: gathers the profiles to rank 0
/// of `MPI_COMM_WORLD`, which prints and writes the merged one. Failures are reported
/// and do not stop the finalize.
pub fn finalize() {
    let Some(dir) = DIR.as_ref() else { return };
    // SAFETY: a constant handle of the MPI library.
    let world = match Comm::dup(unsafe { wm_comm_world() }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft-mpiio: WEFT_PROFILE: {}; no profile", e.message);
            return;
        }
    };
    let mine = ProcessProfile {
        rank: world.rank(),
        pid: std::process::id(),
        host: crate::mpi::processor_name(),
        files: state().files.clone(),
    };
    match gather(&world, &mine) {
        Ok(Some(all)) => {
            let job = merge(all);
            if job.files.is_empty() {
                return;
            }
            let path = dir.join(format!(
                "weft-profile-{}-{}.json",
                unix_now_s(),
                std::process::id()
            ));
            let written = write(&path, &job);
            eprint!("{}", summary(&job, &path, written.as_ref().err()));
        }
        Ok(None) => {}
        Err(e) => {
            // Each process keeps its own then.
            let job = merge(vec![mine]);
            if job.files.is_empty() {
                return;
            }
            let path = dir.join(format!(
                "weft-profile-{}-{}.json",
                unix_now_s(),
                std::process::id()
            ));
            let written = write(&path, &job);
            eprintln!(
                "weft-mpiio: WEFT_PROFILE: gathering the profiles failed ({e}); this process's is {}",
                match written {
                    Ok(()) => path.display().to_string(),
                    Err(w) => format!("not written either: {w}"),
                }
            );
        }
    }
}

/// Every process's profile at rank 0 (None elsewhere).
fn gather(world: &Comm, mine: &ProcessProfile) -> std::result::Result<Option<Vec<ProcessProfile>>, String> {
    let text = serde_json::to_vec(mine).map_err(|e| e.to_string())?;
    let lens = world.allgather(&[text.len() as i64]).map_err(|e| e.message)?;
    let total: usize = lens.iter().map(|&l| l as usize).sum();
    if total > GATHER_BYTES_MAX {
        return Err(format!("{total} bytes of profiles, more than {GATHER_BYTES_MAX}"));
    }
    let n = world.size();
    let mut scounts = vec![0i32; n];
    scounts[0] = text.len() as i32;
    let sdispls = vec![0i32; n];
    let (mut recv, mut rcounts, mut rdispls) = (Vec::new(), vec![0i32; n], vec![0i32; n]);
    if world.rank() == 0 {
        recv = vec![0u8; total];
        let mut at = 0i32;
        for r in 0..n {
            rcounts[r] = lens[r] as i32;
            rdispls[r] = at;
            at += lens[r] as i32;
        }
    }
    world
        .alltoallv(&text, &scounts, &sdispls, &mut recv, &rcounts, &rdispls)
        .map_err(|e| e.message)?;
    if world.rank() != 0 {
        return Ok(None);
    }
    (0..n)
        .map(|r| {
            let at = rdispls[r] as usize;
            serde_json::from_slice(&recv[at..at + rcounts[r] as usize])
                .map_err(|e| format!("rank {r}'s profile: {e}"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Some)
}

/// The job's profile from every process's.
pub fn merge(all: Vec<ProcessProfile>) -> JobProfile {
    let mut files: BTreeMap<String, FileProfile> = BTreeMap::new();
    let mut per_process = Vec::new();
    for p in &all {
        let mut totals = ProcessTotals {
            rank: p.rank,
            pid: p.pid,
            host: p.host.clone(),
            calls: 0,
            bytes_read: 0,
            bytes_written: 0,
            time: Time::default(),
        };
        for f in &p.files {
            files
                .entry(f.file.clone())
                .or_insert_with(|| FileProfile {
                    file: f.file.clone(),
                    ..Default::default()
                })
                .add(f);
            totals.calls += f.calls.values().map(|c| c.count).sum::<u64>();
            totals.bytes_read += f.bytes_read;
            totals.bytes_written += f.bytes_written;
            totals.time.total_s += f.time.total_s;
            totals.time.exchange_s += f.time.exchange_s;
            totals.time.io_s += f.time.io_s;
            totals.time.waiting_s += f.time.waiting_s;
        }
        per_process.push(totals);
    }
    JobProfile {
        weft_profile: 1,
        command: command_line(),
        processes: all.len(),
        files: files.into_values().collect(),
        per_process,
    }
}

fn write(path: &Path, job: &JobProfile) -> std::result::Result<(), String> {
    let text = serde_json::to_string_pretty(job).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("writing {}: {e}", path.display()))
}

/// The profile as text, per file: its totals, then a line per function and the methods.
pub fn summary(job: &JobProfile, path: &Path, error: Option<&String>) -> String {
    let mut out = format!(
        "weft-mpiio profile: {} processes, {} weft: files; JSON: {}\n",
        job.processes,
        job.files.len(),
        match error {
            None => path.display().to_string(),
            Some(e) => format!("not written ({e})"),
        }
    );
    for f in &job.files {
        let t = &f.time;
        out += &format!(
            "{}: {} processes, {} bytes written, {} bytes read, {:.6} s (exchange {:.6}, I/O {:.6}, waiting {:.6})\n",
            f.file, f.processes, f.bytes_written, f.bytes_read, t.total_s, t.exchange_s, t.io_s, t.waiting_s
        );
        let width = f.calls.keys().map(String::len).max().unwrap_or(0);
        for (name, c) in &f.calls {
            out += &format!(
                "  {name:<width$} {:>8} calls {:>14} bytes {:>12.6} s {:>8} MPI collectives{}\n",
                c.count,
                c.bytes,
                c.time_s,
                c.mpi_collectives,
                if c.errors > 0 {
                    format!("  {} errors", c.errors)
                } else {
                    String::new()
                }
            );
        }
        if !f.methods.is_empty() {
            let methods: Vec<String> = f.methods.iter().map(|(m, n)| format!("{m} {n}")).collect();
            out += &format!("  methods: {}\n", methods.join(", "));
        }
    }
    out
}

fn command_line() -> String {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn unix_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn the_setting_is_off_on_or_a_directory() {
        for off in [None, Some(""), Some("0"), Some("off"), Some("no"), Some("false")] {
            assert_eq!(setting(off), None, "{off:?}");
        }
        assert_eq!(setting(Some("1")), Some(PathBuf::from(".")));
        assert_eq!(setting(Some("yes")), Some(PathBuf::from(".")));
        assert_eq!(setting(Some("/tmp/p")), Some(PathBuf::from("/tmp/p")));
    }

    #[test]
    fn functions_are_named_from_the_io_flags() {
        assert_eq!(function_of(0), "MPI_File_read");
        assert_eq!(function_of(1), "MPI_File_write");
        assert_eq!(function_of(1 | 2 | 4), "MPI_File_write_at_all");
        assert_eq!(function_of(2), "MPI_File_read_all");
        assert_eq!(function_of(4), "MPI_File_read_at");
        assert_eq!(function_of(8 | 1), "MPI_File_write (flags 0x9)");
    }

    fn process(rank: usize, files: &[(&str, u64)]) -> ProcessProfile {
        ProcessProfile {
            rank,
            pid: 100 + rank as u32,
            host: "h".into(),
            files: files
                .iter()
                .map(|&(name, bytes)| FileProfile {
                    file: name.into(),
                    processes: 1,
                    bytes_written: bytes,
                    calls: [(
                        "MPI_File_write_at_all".to_owned(),
                        Calls {
                            count: 2,
                            bytes,
                            time_s: 0.5,
                            errors: 0,
                            mpi_collectives: 3,
                        },
                    )]
                    .into(),
                    methods: [("two_phase".to_owned(), 2)].into(),
                    time: Time {
                        total_s: 0.5,
                        exchange_s: 0.1,
                        io_s: 0.3,
                        waiting_s: 0.1,
                    },
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn merging_sums_each_file_over_the_processes_that_used_it() {
        let job = merge(vec![
            process(0, &[("weft:/a", 10), ("weft:/b", 1)]),
            process(1, &[("weft:/a", 20)]),
        ]);
        assert_eq!(job.processes, 2);
        let a = &job.files[0];
        assert_eq!(
            (a.file.as_str(), a.processes, a.bytes_written),
            ("weft:/a", 2, 30)
        );
        assert_eq!(a.calls["MPI_File_write_at_all"].count, 4);
        assert_eq!(a.calls["MPI_File_write_at_all"].mpi_collectives, 6);
        assert_eq!(a.methods["two_phase"], 4);
        assert!((a.time.total_s - 1.0).abs() < 1e-9 && (a.time.io_s - 0.6).abs() < 1e-9);
        assert_eq!(job.files[1].processes, 1);
        assert_eq!(job.per_process[0].bytes_written, 11);
        assert_eq!(job.per_process[1].calls, 2);
        let text = summary(&job, Path::new("p.json"), None);
        assert!(
            text.starts_with("weft-mpiio profile: 2 processes, 2 weft: files; JSON: p.json\n"),
            "{text}"
        );
        assert!(text.contains("methods: two_phase 4"), "{text}");
    }

    #[test]
    fn files_past_the_bound_share_one_entry() {
        let mut s = State::default();
        for i in 0..FILES_MAX + 10 {
            s.index(&format!("weft:/f{i}"));
        }
        assert_eq!(s.files.len(), FILES_MAX + 1);
        assert_eq!(s.files[FILES_MAX].file, OTHER_FILES);
        assert_eq!(s.index("weft:/f3"), 3);
        assert_eq!(s.index("weft:/new"), FILES_MAX);
    }
}

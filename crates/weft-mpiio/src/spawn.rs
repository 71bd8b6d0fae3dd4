//! Job-scoped delegates (I/O delegation as in the seed): at the open of a file with
//! hint `weft_delegates=N` (or `$WEFT_DELEGATES`), the processes start N delegates for
//! that file only with `MPI_Comm_spawn` of `weft-delegate`, each of which runs a
//! `weftd --role cache --delegate`; the file's handle then routes its data through
//! them (`File::use_delegates`) exactly as through a persistent delegated tier. At
//! close the processes sync (the delegates write back, the io servers fsync) and the
//! delegates forget the file; they stay, idle, for the next open by the same processes
//! with the same delegate hints, and stop at `MPI_Finalize` (those of files left open
//! write back first). Files the same processes have open at once with the same
//! delegate hints share one set: only the first open of the job pays for the spawn. Spawning once per job, not once per open, is also what keeps
//! Open MPI 4.1 with PMIx 4 (Debian 12) reliable: its spawns hang now and then when
//! they follow other spawns' teardowns (openpmix issue 2735).
//!
//! 1. The count is made a factor or a multiple of the file's stripe count (said on
//!    stderr when it changes), unless `weft_delegate_mapping=any`.
//! 2. Rank 0 finds the programs and what the delegates need (the metadata manager's
//!    address, the cluster key's file); every rank agrees before the collective spawn.
//! 3. Rank 0 makes the set's job key and sends each delegate the key and the job's
//!    processes to watch, and waits for each delegate's address (or its error).
//! 4. The key and the addresses are broadcast; every rank's handle uses them, proving
//!    the key (a delegate serves no one else) and presenting its capabilities.
//! 5. A failure after the spawn stops the delegates already started; a failed spawn
//!    (no spawn support, a singleton without slots) is an error naming the persistent
//!    alternative. `MPI_COMM_WORLD` never changes: the delegates are another job.

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use weft_client::{Client, File};

use crate::collective::engine::agree;
use crate::delegate_link as link;
use crate::error::{ErrorClass, MpiioError, Result};
use crate::hints::Hints;
use crate::mpi::Comm;

/// How long rank 0 waits for the delegates to serve after the spawn returned.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long rank 0 waits for a delegate to write back and stop.
const STOPPED_TIMEOUT: Duration = Duration::from_secs(900);

/// The persistent alternative, for errors.
const PERSISTENT: &str = "use persistent delegates instead: a cluster with cache managers on the aligned \
     mapping (`weft up --cache N --cache-mapping aligned`) and a delegated file (`weft layout --set --cache \
     delegated DIR`, or hint weft_cache=delegated at create)";

/// The delegates of one open file.
pub struct JobDelegates {
    /// Key in [`LIVE`].
    id: u64,
    /// Where each delegate serves, in block order (block `x` to `addrs[x mod n]`).
    pub addrs: Vec<String>,
    /// What the delegates serve: the set's own key.
    pub job_key: weft_client::ClusterKey,
    /// The communicator of the file using it (the layer's duplicate).
    comm: crate::mpi::Handle,
}

/// A set of delegates started and not yet stopped: in use by one open file, or idle.
struct Live {
    id: u64,
    /// What the set was started for (the processes and the delegate hints): a later
    /// open with the same key reuses it.
    key: u64,
    /// The communicators of the files using the set (the layer's duplicates, alive
    /// while their files are open); empty: idle.
    comms: Vec<crate::mpi::Handle>,
    rank: usize,
    intercomm: link::Handle,
    addrs: Vec<String>,
    /// The set's job key (hexadecimal).
    job_key: String,
}

/// Sets started and not yet stopped, in the order they started (the same order in
/// every process of a set: they are started by collective opens).
static LIVE: Mutex<Vec<Live>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<Live>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The key of a set for `processes` (the watch list) and `hints`' delegate hints.
fn key_of(watch: &str, count: usize, hints: &Hints) -> u64 {
    let text = format!(
        "{watch}|{count}|{:?}|{:?}",
        hints.delegate_memory, hints.delegate_hosts
    );
    link::host_hash(&text) as u64
}

fn io_error(message: String) -> MpiioError {
    MpiioError::new(ErrorClass::Io, message)
}

/// Starts the delegates `hints` ask for (collective over `comm`); `None`: none asked.
/// `name` is the file's MPI name, for messages.
pub fn start(
    comm: &Comm,
    file: &File,
    client: &Client,
    hints: &Hints,
    name: &str,
) -> Result<Option<JobDelegates>> {
    let asked = match hints.delegates {
        None | Some(0) => return Ok(None),
        Some(n) => n as usize,
    };
    let stripes = file.layout().servers.len();
    let count = if hints.delegate_mapping_any {
        asked
    } else {
        weft_client::aligned_count(asked, stripes)
    };
    let root = comm.rank() == 0;
    if root && count != asked {
        eprintln!(
            "weft-mpiio: {name}: weft_delegates={asked}: starting {count}, the largest factor or multiple of \
             the file's {stripes} io servers not above it (weft_delegate_mapping=any keeps {asked})"
        );
    }
    // Whatever the persistent tier holds of the file goes back first: from here on the
    // file's bytes live in the new delegates.
    let prepared = if root {
        let synced = if file.cache_mode().uses_tier() {
            file.sync().map_err(MpiioError::from)
        } else {
            Ok(())
        };
        synced.and_then(|()| plan(client, hints))
    } else {
        Ok(Plan::default())
    };
    // Every rank's host and pid: the delegates watch them, and they name the set.
    let me = [
        link::host_hash(&link::processor_name()),
        std::process::id() as i64,
    ];
    let processes = comm.allgather(&me)?;
    let pairs: Vec<(i64, i64)> = processes.chunks(2).map(|p| (p[0], p[1])).collect();
    let watch = link::watch_text(&pairs);
    let key = key_of(&watch, count, hints);
    // Every rank holds the same sets (started and released by the same collective opens
    // and closes), so every rank finds the same one, idle or in use by another file.
    {
        let mut sets = live();
        if let Some(set) = sets.iter_mut().find(|s| s.key == key) {
            set.comms.push(comm.handle());
            let delegates = JobDelegates {
                id: set.id,
                addrs: set.addrs.clone(),
                job_key: link::job_key(&set.job_key).map_err(io_error)?,
                comm: comm.handle(),
            };
            drop(sets);
            // The synced tier above may have changed the file: nothing of it is cached
            // in an idle set (forgotten at its last close).
            agree(comm, prepared)?;
            return Ok(Some(delegates));
        }
    }
    let plan = agree(comm, prepared).inspect_err(|e| {
        if root {
            eprintln!("weft-mpiio: {name}: {}", e.message);
        }
    })?;
    let spawned = link::spawn(
        comm.handle(),
        &plan.program,
        &plan.args,
        count,
        hints.delegate_hosts.as_deref(),
        0,
    )
    .map_err(|e| {
        MpiioError::new(
            ErrorClass::UnsupportedOperation,
            format!(
                "weft_delegates={asked}: cannot start job-scoped delegates: {e} (Open MPI needs free slots for \
                 them: mpirun --oversubscribe, a hostfile with room, or for a singleton \
                 OMPI_MCA_rmaps_base_oversubscribe=1); {PERSISTENT}"
            ),
        )
    });
    let intercomm = agree(comm, spawned).inspect_err(|e| {
        if root {
            eprintln!("weft-mpiio: {name}: {}", e.message);
        }
    })?;
    // "ok JOBKEY ADDR..." or "error TEXT", to every rank of the job (the key goes to
    // no one else).
    let text = if root {
        match link::new_job_key().and_then(|job_key| {
            wait_ready(intercomm, count, &link::watch_message(&job_key, &watch)).map(|addrs| (job_key, addrs))
        }) {
            Ok((job_key, addrs)) => format!("ok {job_key} {}", addrs.join(" ")),
            Err(e) => format!("error {e}"),
        }
    } else {
        String::new()
    };
    let started = comm.bcast_text(text, 0).and_then(|text| {
        link::answer(text.as_bytes())
            .and_then(|rest| {
                let mut words = rest.split(' ').map(str::to_owned);
                let job_key = words.next().unwrap_or_default();
                link::job_key(&job_key)?;
                Ok((job_key, words.collect::<Vec<_>>()))
            })
            .map_err(|e| {
                io_error(format!(
                    "weft_delegates={asked}: starting job-scoped delegates: {e}"
                ))
            })
    });
    let mut set = Live {
        id: next_id(),
        key,
        comms: vec![comm.handle()],
        rank: comm.rank(),
        intercomm,
        addrs: Vec::new(),
        job_key: String::new(),
    };
    match started {
        Ok((job_key, addrs)) => {
            let id = set.id;
            set.addrs = addrs.clone();
            let delegates = JobDelegates {
                id,
                addrs,
                job_key: link::job_key(&job_key).map_err(io_error)?,
                comm: comm.handle(),
            };
            set.job_key = job_key;
            live().push(set);
            Ok(Some(delegates))
        }
        Err(e) => {
            if root {
                eprintln!("weft-mpiio: {name}: {}", e.message);
            }
            let _ = stop_set(set);
            Err(e)
        }
    }
}

fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What rank 0 spawns.
#[derive(Default)]
struct Plan {
    program: String,
    args: Vec<String>,
}

/// The launcher and its arguments: the metadata manager's address and the cluster
/// key's file (the delegates prove the key like any server), the delegates' memory.
fn plan(client: &Client, hints: &Hints) -> Result<Plan> {
    let program = launcher()?;
    let key = weft_config::client_key_path()
        .map_err(|e| io_error(format!("job-scoped delegates need the cluster key's file: {e}")))?;
    let meta = client.meta_addr().to_owned();
    let host = if is_loopback(&meta) { "127.0.0.1" } else { "auto" };
    let mut args: Vec<String> = ["--host", host, "--", "--role", "cache", "--delegate", "--meta"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(meta);
    args.push("--key".into());
    args.push(key.display().to_string());
    if let Some(bytes) = hints.delegate_memory {
        args.push("--cache-memory".into());
        args.push(bytes.to_string());
    }
    Ok(Plan {
        program: program.display().to_string(),
        args,
    })
}

fn is_loopback(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `weft-delegate`: `$WEFT_DELEGATE_PROGRAM`, else beside this library (a build's
/// target directory) or in `../bin` of it (an installation), else on `PATH`.
fn launcher() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("WEFT_DELEGATE_PROGRAM").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    // The MPICH build of this library (package weft-mpiio-mpich) spawns the MPICH build.
    let name = if env!("CARGO_PKG_NAME") == "weft-mpiio-mpich" {
        "weft-delegate-mpich"
    } else {
        "weft-delegate"
    };
    let mut candidates = Vec::new();
    if let Some(dir) = library_dir() {
        candidates.push(dir.join(name));
        candidates.push(dir.join("../bin").join(name));
        if dir.ends_with("deps") {
            candidates.push(dir.join("..").join(name));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join(name)));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        io_error(format!(
            "job-scoped delegates: {name} not found beside libweft_mpiio.so, in ../bin of it, or on PATH \
                 (set WEFT_DELEGATE_PROGRAM); {PERSISTENT}"
        ))
    })
}

/// The directory of the loaded libweft_mpiio.so.
fn library_dir() -> Option<PathBuf> {
    // SAFETY: dladdr fills `info` for an address inside a loaded object; dli_fname
    // then points at a NUL-terminated name owned by the loader.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(library_dir as *const libc::c_void, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let path = PathBuf::from(OsStr::from_bytes(CStr::from_ptr(info.dli_fname).to_bytes()));
        Some(path.canonicalize().unwrap_or(path).parent()?.to_path_buf())
    }
}

/// Rank 0: sends every delegate `message` (the job key and the watch list), then
/// collects their addresses.
fn wait_ready(
    intercomm: link::Handle,
    count: usize,
    message: &str,
) -> std::result::Result<Vec<String>, String> {
    for k in 0..count {
        link::send(intercomm, k, link::tag::WATCH, message.as_bytes())?;
    }
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut addrs = Vec::with_capacity(count);
    let mut errors = Vec::new();
    for k in 0..count {
        match link::recv_until(intercomm, k, link::tag::READY, deadline, || None) {
            Ok(message) => match link::answer(&message) {
                Ok(addr) if !addr.is_empty() && !addr.contains(' ') => addrs.push(addr),
                Ok(addr) => errors.push(format!("delegate {k} sent the address {addr:?}")),
                Err(e) => errors.push(e),
            },
            Err(e) => errors.push(format!("delegate {k}: {e}")),
        }
    }
    if errors.is_empty() {
        Ok(addrs)
    } else {
        Err(errors.join("; "))
    }
}

impl JobDelegates {
    /// The file closes (after it was synced): the delegates forget it (rank 0 tells
    /// them) and serve the set's other open files, or wait, idle, for the next open of
    /// the same processes, or MPI_Finalize.
    pub fn release(self, file: &File, rank: usize) -> Result<()> {
        let forgotten = if rank == 0 {
            file.drop_from_cache_managers().map_err(MpiioError::from)
        } else {
            Ok(())
        };
        if let Some(set) = live().iter_mut().find(|s| s.id == self.id) {
            set.comms.retain(|&c| c != self.comm);
        }
        forgotten
    }
}

/// Rank 0 tells every delegate of `set` to stop and waits for each; then every rank
/// disconnects. Rank 0's result (the others: Ok).
fn stop_set(set: Live) -> Result<()> {
    let mut result = Ok(());
    let count = link::remote_size(set.intercomm).unwrap_or(0);
    if set.rank == 0 {
        let deadline = Instant::now() + STOPPED_TIMEOUT;
        let mut errors = Vec::new();
        for k in 0..count {
            if let Err(e) = link::send(set.intercomm, k, link::tag::STOP, &[]) {
                errors.push(format!("delegate {k}: {e}"));
            }
        }
        for k in 0..count {
            match link::recv_until(set.intercomm, k, link::tag::STOPPED, deadline, || None) {
                Ok(message) => {
                    if let Err(e) = link::answer(&message) {
                        errors.push(e);
                    }
                }
                Err(e) => errors.push(format!("delegate {k}: {e}")),
            }
        }
        if !errors.is_empty() {
            result = Err(io_error(format!(
                "stopping job-scoped delegates: {}",
                errors.join("; ")
            )));
        }
    }
    if let Err(e) = link::disconnect(set.intercomm) {
        result = result.and(Err(io_error(format!("job-scoped delegates: {e}"))));
    }
    result
}

/// MPI_Finalize: stops every set, in the order they started (every process of a set
/// finalizes too); a set still in use by an open file after a barrier of its
/// processes. Delegates write back what they hold; nothing is fsynced, as no sync
/// asked (a closed file was synced at its close).
pub fn finalize() {
    let sets: Vec<Live> = std::mem::take(&mut *live());
    for set in sets {
        if let Some(&comm) = set.comms.first() {
            if let Err(e) = crate::mpi::barrier_of(comm) {
                eprintln!("weft-mpiio: MPI_Finalize: job-scoped delegates: {}", e.message);
            }
        }
        let rank = set.rank;
        if let Err(e) = stop_set(set) {
            if rank == 0 {
                eprintln!("weft-mpiio: MPI_Finalize: {}", e.message);
            }
        }
    }
}

/// The delegates' counters, one line each, for WEFT_PRINT_HINTS at close (job-scoped
/// delegates are in no cluster description, so `weft status` does not list them).
pub fn status_lines(file: &File) -> Vec<String> {
    match file.cache_manager_stats() {
        Ok(all) => all
            .iter()
            .enumerate()
            .map(|(k, (addr, s))| {
                format!(
                    "delegate {k} at {addr}: {} blocks cached ({} bytes), {} bytes dirty, {} write-backs \
                     ({} full, {} partial), {} hits, {} misses, {} evictions",
                    s.blocks,
                    s.cached_bytes,
                    s.dirty_bytes,
                    s.write_backs,
                    s.write_backs_full,
                    s.write_backs - s.write_backs_full.min(s.write_backs),
                    s.hits,
                    s.misses,
                    s.evictions
                )
            })
            .collect(),
        Err(e) => vec![format!("delegates: {e}")],
    }
}

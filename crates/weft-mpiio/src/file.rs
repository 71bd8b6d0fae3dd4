//! A Weft file opened through MPI-IO: its communicator, hints, view and file pointer,
//! and the operations behind the `weft_mpiio_*` functions of `abi.rs`. Collective
//! operations agree on their error among all ranks ([`agree`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use weft_client::{Client, CreateOptions, File, OpenOptions};
use weft_layout::view::{self, Datatype, View};

use crate::collective::engine::{agree, settle};
use crate::collective::no_exchange::{self, History, Plan};
use crate::collective::{auto, spread, Context, Request};
use crate::datatype;
use crate::error::{ErrorClass, MpiioError, Result};
use crate::hints::Hints;
use crate::mpi::{self, Comm, Constant, Handle};

/// An `io` flag beside the C half's (`WM_IO_*`): an access through the shared file
/// pointer, whose writes go to the servers before the call returns (programs read
/// other ranks' records, or the size they make, after a barrier alone).
pub const THROUGH_SHARED: i32 = 32;

/// How an independent access goes: straight to the servers (atomic mode), through the
/// write-behind buffer and read-ahead window, or past the buffer, sending now (after
/// the buffered bytes it overlaps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Direct,
    Buffered,
    Through,
}

impl Route {
    fn of(atomic: bool, flags: i32) -> Route {
        match (atomic, flags & THROUGH_SHARED != 0) {
            (true, _) => Route::Direct,
            (false, false) => Route::Buffered,
            (false, true) => Route::Through,
        }
    }
}

/// Access mode bits (`enum wm_amode`).
pub mod amode {
    pub const RDONLY: i32 = 1;
    pub const RDWR: i32 = 2;
    pub const WRONLY: i32 = 4;
    pub const CREATE: i32 = 8;
    pub const EXCL: i32 = 16;
    pub const DELETE_ON_CLOSE: i32 = 32;
    pub const SEQUENTIAL: i32 = 128;
    pub const APPEND: i32 = 256;
}

/// The process's connection to the cluster, made at the first open.
static CLIENT: Mutex<Option<Client>> = Mutex::new(None);

pub(crate) fn client() -> Result<Client> {
    let mut c = CLIENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(client) = c.as_ref() {
        return Ok(client.clone());
    }
    let client = Client::from_env().map_err(|e| {
        MpiioError::new(
            ErrorClass::Io,
            format!("cannot reach the Weft cluster (WEFT_HOME / WEFT_META): {e}"),
        )
    })?;
    note_servers_here(&client);
    *c = Some(client.clone());
    Ok(client)
}

/// Whether any server of the client's cluster runs on this machine (its Unix socket
/// exists here, or its address is a loopback one): then the agreeing collectives wait
/// sleeping (see `mpi::note_local_servers`).
fn note_servers_here(client: &Client) {
    let info = client.cluster_info();
    let here = info.io_servers.iter().chain(info.cache.managers.iter()).any(|s| {
        s.socket
            .as_deref()
            .is_some_and(|p| std::path::Path::new(p).exists())
            || s.addr.starts_with("127.")
            || s.addr.starts_with("localhost:")
            || s.addr.starts_with("[::1]:")
    });
    if here {
        mpi::note_local_servers();
    }
}

/// The process's client when it reaches the cluster of a Weft mount (src/mount.rs):
/// the environment's, else, when the environment names no cluster, one made from the
/// mount's address and key.
pub(crate) fn client_for_mount(cluster: &crate::mount::MountCluster) -> Result<Client> {
    let mut c = CLIENT.lock().unwrap_or_else(|e| e.into_inner());
    let client = weft_interpose::mount::client_for(cluster, c.clone())
        .map_err(|why| MpiioError::new(ErrorClass::Io, why))?;
    note_servers_here(&client);
    *c = Some(client.clone());
    Ok(client)
}

/// The Weft path of an MPI file name "weft:/path", or of a path inside a Weft mount.
pub fn weft_path(name: &str) -> Result<String> {
    if !name.starts_with("weft:") {
        if let Some(mounted) = crate::mount::resolve(name) {
            return Ok(mounted.path);
        }
    }
    let rest = name.strip_prefix("weft:").unwrap_or(name);
    if rest.is_empty() {
        return Err(MpiioError::new(
            ErrorClass::BadFile,
            format!("{name}: no path after weft:"),
        ));
    }
    Ok(if rest.starts_with('/') {
        rest.to_owned()
    } else {
        format!("/{rest}")
    })
}

fn print_hints() -> bool {
    std::env::var("WEFT_PRINT_HINTS").is_ok_and(|v| v == "1")
}

fn verbose() -> bool {
    std::env::var("WEFT_MPIIO_VERBOSE").is_ok_and(|v| v == "1")
}

thread_local! {
    /// The message of this thread's last failed call, for the error code the C half
    /// returns for it and MPI_ERRORS_ARE_FATAL's report (`weft_mpiio_take_last_error`);
    /// cleared by every call that succeeds and by that taking.
    static LAST_ERROR: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Most of a message kept for the fatal report (a message can name many servers).
const LAST_ERROR_MAX: usize = 4096;

/// Reports an error on stderr when WEFT_MPIIO_VERBOSE=1 (MPI returns only a class),
/// and keeps its message for a fatal error handler.
pub fn report(error: &MpiioError) {
    if verbose() {
        eprintln!("weft-mpiio: {} ({:?})", error.message, error.class);
    }
    LAST_ERROR.with(|last| {
        let mut last = last.borrow_mut();
        last.clear();
        let mut end = error.message.len().min(LAST_ERROR_MAX);
        while !error.message.is_char_boundary(end) {
            end -= 1;
        }
        last.push_str(&error.message[..end]);
    });
}

/// Forgets this thread's last error (a call succeeded).
pub fn forget_error() {
    LAST_ERROR.with(|last| last.borrow_mut().clear());
}

/// This thread's last error message ("" if the last call succeeded).
pub fn last_error() -> String {
    LAST_ERROR.with(|last| last.borrow().clone())
}

/// This thread's last error message, forgotten here: the C half moves it into the error
/// code it returns for that failure (`weft_mpiio_take_last_error`), so that no later
/// error is given it.
pub fn take_error() -> String {
    LAST_ERROR.with(|last| std::mem::take(&mut *last.borrow_mut()))
}

struct State {
    hints: Hints,
    aggregators: Vec<usize>,
    view: View,
    /// Kept references to the view's types (derived ones duplicated).
    etype: Handle,
    filetype: Handle,
    etype_size: u64,
    /// Individual file pointer, in etypes.
    position: u64,
    /// Whether `view` is the view set on the file handle (registered with the servers
    /// at first use), so that requests go as view intervals; false when it could not be
    /// set (a view too large to register): list I/O then.
    view_on_file: bool,
    /// Some rank's view overlaps itself (legal on a file opened read-only, MPI 13.3):
    /// every access is then read piece by piece in typemap order
    /// (`read_overlapping`), collective ones agreed without an exchange. The same on
    /// every rank.
    overlapping: bool,
    atomic: bool,
    /// The handle's collective calls so far, for calls planned without a gather
    /// (`collective::no_exchange`); the same on every rank.
    history: History,
}

/// An open Weft file. `MPI_File` handles of Weft files point at one of these.
pub struct MpiFile {
    comm: Comm,
    file: File,
    /// Job-scoped delegates started for this file (hint `weft_delegates`).
    delegates: Option<crate::spawn::JobDelegates>,
    path: String,
    /// This open's shared file pointer at the manager (see `shared`).
    shared_id: crate::shared::SharedId,
    /// Whether this rank used the shared file pointer (the manager made it then).
    shared_used: std::sync::atomic::AtomicBool,
    /// Whether the view's data representation is `external32` (the C half converts
    /// the data: see `datarep`).
    external32: std::sync::atomic::AtomicBool,
    amode: i32,
    errhandler: AtomicUsize,
    state: Mutex<State>,
    /// Write-behind buffer and read-ahead window (see `behind`). Locked after `state`
    /// when both are held.
    behind: Mutex<crate::behind::Behind>,
}

/// Rank 0's hints (defaults, $WEFT_HINTS, then `info`) on every rank.
fn shared_hints(comm: &Comm, base: Option<&Hints>, info: Handle) -> Result<Hints> {
    let mut text = String::new();
    if comm.rank() == 0 {
        text = root_hints(base, info).to_text();
    }
    Hints::from_text(&comm.bcast_text(text, 0)?)
}

/// The hints of rank 0: `base` (or the defaults and $WEFT_HINTS), then `info`. Rank 0
/// must reach the broadcast that follows whatever happens: an unreadable info object or
/// hint is a warning, not an error.
fn root_hints(base: Option<&Hints>, info: Handle) -> Hints {
    let mut hints = match base {
        Some(h) => h.clone(),
        None => Hints::from_env().unwrap_or_else(|e| {
            eprintln!("weft-mpiio: {e}; using the default hints");
            Hints::default()
        }),
    };
    let entries = mpi::info_entries(info).unwrap_or_else(|e| {
        eprintln!("weft-mpiio: reading the info object: {e}; its hints are ignored");
        Vec::new()
    });
    for (k, v) in entries {
        if let Err(e) = hints.set(&k, &v) {
            eprintln!("weft-mpiio: {e}; hint ignored");
        }
    }
    hints
}

/// Rank 0's part of a collective open: creates (MPI_MODE_CREATE) or opens the file and
/// makes the open's shared file pointer at the manager; returns the handle and the
/// pointer's id.
fn root_open(
    client: &Client,
    path: &str,
    name: &str,
    mode: i32,
    write: bool,
    hints: &Hints,
) -> Result<(File, crate::shared::SharedId)> {
    let file = if mode & amode::CREATE != 0 {
        let options = CreateOptions {
            exclusive: mode & amode::EXCL != 0,
            truncate: false,
            layout: hints.layout_request(client.cluster_info().io_servers.len()),
            ..CreateOptions::default()
        };
        client.create(path, &options).map_err(MpiioError::from)?
    } else {
        client
            .open(
                path,
                &OpenOptions {
                    write,
                    create: None,
                    truncate: false,
                },
            )
            .map_err(|e| {
                let mut e = MpiioError::from(e);
                e.message = format!("{name}: {}", e.message);
                e
            })?
    };
    let shared = crate::shared::new_pointer(client, path)?;
    Ok((file, shared))
}

/// What rank 0 broadcasts at open: its error (class and message), or the hints, the
/// shared file pointer's id and the handle's handoff (`File::handoff`).
struct OpenOutcome;

impl OpenOutcome {
    fn encode_ok(hints: &Hints, shared: crate::shared::SharedId, handoff: &[u8]) -> Vec<u8> {
        let text = hints.to_text();
        let mut out = vec![0u8];
        out.extend_from_slice(&shared.open.to_le_bytes());
        out.extend_from_slice(&shared.incarnation.to_le_bytes());
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(handoff);
        out
    }

    fn encode_err(e: &MpiioError) -> Vec<u8> {
        let mut out = vec![1u8];
        out.extend_from_slice(&(e.class as i32).to_le_bytes());
        out.extend_from_slice(e.message.as_bytes());
        out
    }

    /// `Err` for a blob that does not parse; `Ok(Err)` for rank 0's error.
    #[allow(clippy::type_complexity)]
    fn decode(blob: &[u8]) -> Result<Result<(Hints, crate::shared::SharedId, Vec<u8>)>> {
        let bad = || MpiioError::new(ErrorClass::Intern, "a damaged open broadcast from rank 0");
        let (&tag, rest) = blob.split_first().ok_or_else(bad)?;
        let u64_at = |b: &[u8], at: usize| -> Result<u64> {
            b.get(at..at + 8)
                .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
                .ok_or_else(bad)
        };
        match tag {
            0 => {
                let shared = crate::shared::SharedId {
                    open: u64_at(rest, 0)?,
                    incarnation: u64_at(rest, 8)?,
                };
                let len = usize::try_from(u64_at(rest, 16)?).map_err(|_| bad())?;
                let text = rest
                    .get(24..24usize.checked_add(len).ok_or_else(bad)?)
                    .ok_or_else(bad)?;
                let hints = Hints::from_text(&String::from_utf8_lossy(text))?;
                Ok(Ok((hints, shared, rest[24 + len..].to_vec())))
            }
            1 => {
                let class = rest.get(..4).ok_or_else(bad)?;
                let class = i32::from_le_bytes(class.try_into().expect("4 bytes"));
                Ok(Err(MpiioError::new(
                    ErrorClass::from_code(class).unwrap_or(ErrorClass::Other),
                    String::from_utf8_lossy(&rest[4..]).into_owned(),
                )))
            }
            _ => Err(bad()),
        }
    }
}

/// `agree` over `local`, and whether `flag` is set on any rank, in one allreduce.
fn agree_and_any(comm: &Comm, local: Result<()>, flag: bool) -> Result<(Result<()>, bool)> {
    let mine = local.as_ref().err().map_or(0, |e| e.class as i64);
    let mut v = [mine, i64::from(flag)];
    comm.allreduce(&mut v, mpi::Op::Max)?;
    let outcome = match (v[0], local) {
        (0, local) => local,
        (worst, Err(e)) if e.class as i64 == worst => Err(e),
        (worst, _) => Err(MpiioError::new(
            ErrorClass::from_code(worst as i32).unwrap_or(ErrorClass::Other),
            "the collective call failed on another rank",
        )),
    };
    Ok((outcome, v[1] != 0))
}

/// Whether cb_config_list asks for aggregators per host (`*:N`), which needs the
/// ranks' host names.
fn per_host_aggregators(hints: &Hints) -> bool {
    hints.cb_config_list.trim().starts_with("*:")
}

/// The aggregator ranks from cb_config_list ("*:N" per host) and cb_nodes.
fn aggregators_of(comm: &Comm, hints: &Hints) -> Result<Vec<usize>> {
    let size = comm.size();
    let mut ranks: Vec<usize> = (0..size).collect();
    let per_host = hints.cb_config_list.trim().strip_prefix("*:").map(|n| {
        if n == "*" {
            Some(usize::MAX)
        } else {
            n.parse::<usize>().ok()
        }
    });
    if let Some(per_host) = per_host {
        let per_host = per_host.unwrap_or(1).max(1);
        let name = mpi::processor_name();
        let hash = name.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
        });
        let hosts = comm.allgather(&[hash as i64])?;
        let mut taken: std::collections::HashMap<i64, usize> = Default::default();
        ranks.retain(|&r| {
            let n = taken.entry(hosts[r]).or_default();
            *n += 1;
            *n <= per_host
        });
    }
    if let Some(n) = hints.cb_nodes {
        ranks = spread(n, ranks.len()).into_iter().map(|i| ranks[i]).collect();
    }
    Ok(ranks)
}

/// A nonblocking access prepared by [`MpiFile::prepare_nonblocking`].
pub(crate) struct Prepared {
    hints: Hints,
    /// Atomic mode when the access was started: it runs under extent locks.
    atomic: bool,
    route: Route,
    write: bool,
    access: Access,
    memory: Memory,
}

/// What a prepared access does: a request, or a read through a view that overlaps
/// itself (the view and the start in it, bytes).
enum Access {
    Request(Request),
    Overlapping(View, u64),
}

// SAFETY: `Prepared` holds a pointer into the caller's buffer, which MPI forbids the
// program to touch until the request completes; the buffer is used by one thread at a
// time (the file's worker) and not after completion.
unsafe impl Send for Prepared {}

/// The memory side of an access: `count` copies of a datatype from a buffer.
struct Memory {
    /// The type shifted so its data starts at 0 of `region`.
    tree: Arc<Datatype>,
    count: u64,
    /// Start of the bytes the copies span, and their length.
    region: *mut u8,
    region_len: usize,
    contiguous: bool,
    bytes: u64,
}

fn memory(buf: *mut u8, count: i32, datatype: Handle) -> Result<Memory> {
    if count < 0 {
        return Err(MpiioError::new(
            ErrorClass::Count,
            format!("negative count {count}"),
        ));
    }
    let tree = datatype::decode(datatype)?;
    let count = count as u64;
    let bytes = tree
        .size_bytes()
        .checked_mul(count)
        .ok_or_else(|| MpiioError::new(ErrorClass::Count, "count times datatype size overflows"))?;
    if bytes == 0 {
        return Ok(Memory {
            tree,
            count,
            region: buf,
            region_len: 0,
            contiguous: true,
            bytes,
        });
    }
    if buf.is_null() {
        return Err(MpiioError::new(ErrorClass::Arg, "NULL buffer"));
    }
    let true_lb = tree.true_lb();
    let region_len = tree.true_extent() as u64 + (count - 1) * tree.extent() as u64;
    let contiguous = tree.is_contiguous() && (count == 1 || tree.extent() as u64 == tree.size_bytes());
    let shifted = if true_lb == 0 {
        tree
    } else {
        let moved = Datatype::hindexed_block(1, &[-true_lb], &tree)?;
        Datatype::resized(&moved, tree.lb() - true_lb, tree.extent())?
    };
    Ok(Memory {
        tree: shifted,
        count,
        region: buf.wrapping_offset(true_lb as isize),
        region_len: region_len as usize,
        contiguous,
        bytes,
    })
}

impl MpiFile {
    /// MPI_File_open (collective over `comm`).
    pub fn open(
        comm: Handle,
        name: &str,
        mode: i32,
        info: Handle,
        errhandler: Handle,
    ) -> Result<Box<MpiFile>> {
        let comm = Comm::dup_for_file(comm)?;
        let checked = (|| -> Result<(String, Client)> {
            let access = mode & (amode::RDONLY | amode::RDWR | amode::WRONLY);
            if access.count_ones() != 1 {
                return Err(MpiioError::new(
                    ErrorClass::Amode,
                    "exactly one of MPI_MODE_RDONLY, MPI_MODE_RDWR, MPI_MODE_WRONLY is required",
                ));
            }
            if access == amode::RDONLY && mode & (amode::CREATE | amode::EXCL) != 0 {
                return Err(MpiioError::new(
                    ErrorClass::Amode,
                    "MPI_MODE_RDONLY with MPI_MODE_CREATE or MPI_MODE_EXCL",
                ));
            }
            Ok((weft_path(name)?, client()?))
        })();
        let write = mode & (amode::RDWR | amode::WRONLY) != 0;
        // Rank 0 alone asks the manager (creates or opens the file, makes the shared
        // file pointer) and broadcasts what it got, hints included: one broadcast and
        // one agreement in all, whatever the number of processes, where every rank
        // asking the manager cost a round trip each and five collective rounds.
        let mut root_file = None;
        let outcome = if comm.rank() == 0 {
            let hints = root_hints(None, info);
            let opened = checked
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|(path, client)| root_open(client, path, name, mode, write, &hints));
            let blob = match opened {
                Ok((file, shared)) => {
                    // With rank 0's capability: the other ranks (the same user's) need
                    // no grant of their own from the manager before their first I/O.
                    let blob = OpenOutcome::encode_ok(&hints, shared, &file.handoff_with_capability());
                    root_file = Some(file);
                    blob
                }
                Err(e) => OpenOutcome::encode_err(&e),
            };
            comm.bcast_bytes(blob, 0)
        } else {
            comm.bcast_bytes(Vec::new(), 0)
        }
        .and_then(|blob| OpenOutcome::decode(&blob));
        let opened = outcome.and_then(|outcome| {
            let (hints, shared, handoff) = outcome?;
            let (path, client) = checked?;
            let file = match root_file.take() {
                Some(file) => file,
                None => client.open_handoff(&handoff, &path, write).map_err(|e| {
                    let mut e = MpiioError::from(e);
                    e.message = format!("{name}: {}", e.message);
                    e
                })?,
            };
            Ok((path, client, hints, shared, file))
        });
        let (path, client, hints, shared_id, mut file) = agree(&comm, opened)?;
        // Before anything else uses the handle: its data may go to delegates of its own.
        let delegates = crate::spawn::start(&comm, &file, &client, &hints, name)?;
        let kind = match &delegates {
            Some(d) => {
                file.use_delegates(&d.addrs, &d.job_key)
                    .map_err(MpiioError::from)?;
                Some("job-scoped")
            }
            None => (file.cache_mode() == weft_client::CacheMode::Delegated).then_some("persistent"),
        };
        if let (Some(kind), true) = (kind, print_hints() && comm.rank() == 0) {
            let addrs = file.data_addrs();
            eprintln!(
                "weft-mpiio: {name}: {} {kind} delegates: {}",
                addrs.len(),
                addrs.join(" ")
            );
        }
        crate::trace::attach(&comm, &hints, &mut file)?;
        // MPI_MODE_APPEND: every individual file pointer starts at the end of the file (in
        // bytes: the view at open is the whole file, etype MPI_BYTE). It positions, it
        // does not make later writes appends (MPI has no such mode).
        let position = if mode & amode::APPEND != 0 {
            agree(&comm, file.size().map_err(MpiioError::from))?
        } else {
            0
        };
        // Without a per-host cb_config_list the aggregators are worked out locally from
        // hints every rank holds alike: nothing to agree on.
        let aggregators = if per_host_aggregators(&hints) {
            agree(&comm, aggregators_of(&comm, &hints))?
        } else {
            aggregators_of(&comm, &hints)?
        };
        if print_hints() && comm.rank() == 0 {
            let entries: Vec<String> = with_cache_mode(hints.entries(aggregators.len()), &file)
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            eprintln!("weft-mpiio: {name}: hints {}", entries.join(" "));
        }
        let byte = mpi::type_byte();
        Ok(Box::new(MpiFile {
            comm,
            file,
            delegates,
            path,
            shared_id,
            shared_used: Default::default(),
            external32: Default::default(),
            amode: mode,
            errhandler: AtomicUsize::new(errhandler),
            state: Mutex::new(State {
                hints,
                aggregators,
                view: View::contiguous(),
                etype: byte,
                filetype: byte,
                etype_size: 1,
                position,
                view_on_file: true,
                overlapping: false,
                atomic: false,
                history: History::default(),
            }),
            behind: Default::default(),
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn behind(&self) -> MutexGuard<'_, crate::behind::Behind> {
        self.behind.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends this process's write-behind buffer and drops its read-ahead window, before
    /// something observes the file through this process; an error waits for the next
    /// sync or close (see `behind`).
    pub(crate) fn flush_behind(&self) {
        self.behind().flush(&self.file);
    }

    /// At MPI_Finalize with the file still open (MPI asks programs to close files
    /// first; many do not): sends what write-behind holds, as ROMIO, which keeps
    /// nothing back, would have written it already. The error of a deferred write, which
    /// no sync or close will now report, is returned to be printed.
    pub(crate) fn settle_at_finalize(&self) -> Result<()> {
        self.behind().settle(&self.file)
    }

    /// Bytes in the write-behind buffer.
    pub fn write_behind_bytes(&self) -> u64 {
        self.behind().buffered()
    }

    pub fn errhandler(&self) -> Handle {
        self.errhandler.load(Ordering::SeqCst)
    }

    pub fn set_errhandler(&self, h: Handle) {
        self.errhandler.store(h, Ordering::SeqCst);
    }

    pub fn amode(&self) -> i32 {
        self.amode
    }

    /// MPI_File_close (collective): frees the handle's resources; with
    /// MPI_MODE_DELETE_ON_CLOSE rank 0 removes the file once all ranks are done.
    pub fn close(mut self: Box<Self>) -> Result<bool> {
        let used = self.shared_used.load(Ordering::Relaxed);
        // One allreduce agrees on the outcome and on whether any rank used the shared
        // file pointer (rank 0 then drops it: see `shared::drop_pointer`).
        let (done, any_used) = match self.delegates.take() {
            Some(delegates) => {
                let done = self.release_delegates(delegates);
                let any = self.comm.allreduce_one(i64::from(used), mpi::Op::Max)?;
                (done, any != 0)
            }
            None => agree_and_any(&self.comm, self.behind().settle(&self.file), used)?,
        };
        let mut result = done;
        if result.is_ok() && self.amode & amode::DELETE_ON_CLOSE != 0 {
            let r = if self.comm.rank() == 0 {
                client().and_then(|c| c.unlink(&self.path).map_err(MpiioError::from))
            } else {
                Ok(())
            };
            result = agree(&self.comm, r);
        }
        let state = self.state();
        mpi::free_if_derived(state.etype);
        mpi::free_if_derived(state.filetype);
        result.map(|()| any_used)
    }

    /// At close, job-scoped delegates: once every rank is done writing, the file is
    /// synced (the delegates write back, the io servers fsync), then the delegates let
    /// it go (see `spawn`).
    fn release_delegates(&self, delegates: crate::spawn::JobDelegates) -> Result<()> {
        let synced = self.sync();
        if print_hints() && self.comm.rank() == 0 {
            for line in crate::spawn::status_lines(&self.file) {
                eprintln!("weft-mpiio: {}: {line}", self.path);
            }
        }
        let released = delegates.release(&self.file, self.comm.rank());
        agree(&self.comm, synced.and(released))
    }

    pub fn delete(name: &str) -> Result<()> {
        let path = weft_path(name)?;
        client()?.unlink(&path).map_err(MpiioError::from)
    }

    pub fn sync(&self) -> Result<()> {
        // Each rank sends what it holds back (write-behind) and learns of its deferred
        // writes' errors; every rank's writes have returned once all ranks are here,
        // and one sync of every server then covers them all.
        let flushed = self.behind().settle(&self.file);
        self.comm.barrier()?;
        let r = if self.comm.rank() == 0 {
            self.file.sync().map_err(MpiioError::from)
        } else {
            Ok(())
        };
        agree(&self.comm, flushed.and(r))
    }

    pub fn size(&self) -> Result<u64> {
        self.flush_behind();
        Ok(self.file.size()?)
    }

    pub fn set_size(&self, size: i64, only_grow: bool) -> Result<()> {
        let r = (|| {
            let size = u64::try_from(size)
                .map_err(|_| MpiioError::new(ErrorClass::Arg, format!("negative size {size}")))?;
            if self.amode & (amode::RDWR | amode::WRONLY) == 0 {
                return Err(MpiioError::new(ErrorClass::ReadOnly, "file opened read-only"));
            }
            Ok(size)
        })();
        let size = agree(&self.comm, r)?;
        self.flush_behind();
        self.comm.barrier()?;
        let r = if self.comm.rank() == 0 {
            (|| {
                if only_grow && self.file.size()? >= size {
                    return Ok(());
                }
                self.file.truncate(size)?;
                Ok(())
            })()
        } else {
            Ok(())
        };
        agree(&self.comm, r)
    }

    pub fn info(&self) -> Result<Handle> {
        let state = self.state();
        mpi::info_from(&with_layout(
            with_cache_mode(state.hints.entries(state.aggregators.len()), &self.file),
            &self.file,
        ))
    }

    pub fn set_info(&self, info: Handle) -> Result<()> {
        self.flush_behind();
        let current = self.state().hints.clone();
        let hints = agree(&self.comm, shared_hints(&self.comm, Some(&current), info))?;
        let aggregators = agree(&self.comm, aggregators_of(&self.comm, &hints))?;
        let mut state = self.state();
        state.hints = hints;
        state.aggregators = aggregators;
        Ok(())
    }

    pub fn set_atomicity(&self, flag: bool) -> Result<()> {
        // Atomic mode bypasses the write-behind buffer: it is empty from here on.
        self.flush_behind();
        agree(&self.comm, Ok(()))?;
        self.state().atomic = flag;
        Ok(())
    }

    pub fn atomicity(&self) -> bool {
        self.state().atomic
    }

    pub fn group(&self) -> Result<Handle> {
        self.comm.group()
    }

    pub fn set_view(
        &self,
        disp: i64,
        etype: Handle,
        filetype: Handle,
        datarep: &str,
        info: Handle,
    ) -> Result<()> {
        self.flush_behind();
        let checked = (|| -> Result<(View, u64, &'static str)> {
            let datarep = crate::datarep::check(datarep)?;
            if disp == i64::from(mpi::constant(Constant::DisplacementCurrent)) {
                return Err(MpiioError::new(
                    ErrorClass::UnsupportedOperation,
                    "MPI_DISPLACEMENT_CURRENT is only valid on a file opened with MPI_MODE_SEQUENTIAL",
                ));
            }
            let disp = u64::try_from(disp)
                .map_err(|_| MpiioError::new(ErrorClass::Arg, format!("negative displacement {disp}")))?;
            let etype_size = mpi::type_size(etype)?;
            if etype_size <= 0 {
                return Err(MpiioError::new(ErrorClass::Type, "etype of size 0"));
            }
            let read_only = self.amode & (amode::RDONLY | amode::RDWR | amode::WRONLY) == amode::RDONLY;
            check_typemap("etype", &datatype::decode(etype)?, 0, read_only)?;
            let mut tree = datatype::decode(filetype)?;
            check_typemap("filetype", &tree, disp, read_only)?;
            // A filetype whose data spans more than its extent (HDF5 builds such
            // types) is legal in MPI as long as no access reaches a second tile, since
            // that tile's data would come before the first's end. Stretching the extent
            // to the data's span changes no legal access and lets the view tile.
            if tree.true_extent() > tree.extent() {
                tree = Datatype::resized(&tree, tree.lb(), tree.true_extent())?;
            }
            if tree.size_bytes() % etype_size as u64 != 0 {
                return Err(MpiioError::new(
                    ErrorClass::Type,
                    "the filetype is not made of whole etypes",
                ));
            }
            let view = if read_only {
                View::for_reading(disp, tree)
            } else {
                View::new(disp, tree)
            }
            .map_err(view_error)?;
            Ok((view, etype_size as u64, datarep))
        })();
        let current = self.state().hints.clone();
        let hints = shared_hints(&self.comm, Some(&current), info);
        let (view, etype_size, datarep) = agree(&self.comm, checked)?;
        // Only a read-only file can have an overlapping view (the same amode on every
        // rank): other views cost no further collective call.
        let read_only = self.amode & (amode::RDONLY | amode::RDWR | amode::WRONLY) == amode::RDONLY;
        let overlapping = read_only
            && self
                .comm
                .allreduce_one(i64::from(!view.filetype().is_monotonic()), mpi::Op::Max)?
                != 0;
        let hints = agree(&self.comm, hints)?;
        let aggregators = agree(&self.comm, aggregators_of(&self.comm, &hints))?;
        let etype = mpi::type_keep(etype)?;
        let filetype = mpi::type_keep(filetype)?;
        // The handle's view from now on: registered with each server at its first use.
        // One the servers would refuse (too large) leaves the whole file as the
        // handle's view, and accesses go as offset lists.
        self.file.clear_view();
        let view_on_file = !overlapping && self.file.set_view_to(view.clone()).is_ok();
        self.external32
            .store(datarep == crate::datarep::EXTERNAL32, Ordering::Relaxed);
        let mut state = self.state();
        mpi::free_if_derived(state.etype);
        mpi::free_if_derived(state.filetype);
        *state = State {
            view,
            etype,
            filetype,
            etype_size,
            position: 0,
            view_on_file,
            overlapping,
            hints,
            aggregators,
            atomic: state.atomic,
            // Kept: a new view is often the same pattern again (HDF5 sets one per
            // dataset access), and a wrong prediction costs one call's speed only.
            history: state.history,
        };
        Ok(())
    }

    /// Whether the view's data representation is `external32`.
    pub fn external32(&self) -> bool {
        self.external32.load(Ordering::Relaxed)
    }

    /// (displacement, etype, filetype): new references the caller frees.
    pub fn view(&self) -> Result<(u64, Handle, Handle)> {
        let state = self.state();
        Ok((
            state.view.displacement(),
            mpi::type_keep(state.etype)?,
            mpi::type_keep(state.filetype)?,
        ))
    }

    pub fn seek(&self, offset: i64, whence: i32) -> Result<()> {
        let mut state = self.state();
        let base = match whence {
            0 => 0i128,
            1 => i128::from(state.position),
            2 => {
                self.flush_behind();
                let size = self.file.size()?;
                i128::from(state.view.file_to_view(size) / state.etype_size)
            }
            _ => return Err(MpiioError::new(ErrorClass::Arg, format!("bad whence {whence}"))),
        };
        let to = base + i128::from(offset);
        if to < 0 {
            return Err(MpiioError::new(
                ErrorClass::Arg,
                "seek before the start of the view",
            ));
        }
        state.position = u64::try_from(to)
            .map_err(|_| MpiioError::new(ErrorClass::Arg, "seek past the largest offset"))?;
        Ok(())
    }

    pub fn position(&self) -> u64 {
        self.state().position
    }

    pub fn byte_offset(&self, offset: i64) -> Result<u64> {
        let state = self.state();
        let offset = u64::try_from(offset)
            .map_err(|_| MpiioError::new(ErrorClass::Arg, format!("negative offset {offset}")))?;
        let view_offset = offset
            .checked_mul(state.etype_size)
            .ok_or_else(|| MpiioError::new(ErrorClass::Arg, "offset overflows"))?;
        if view_offset == 0 && state.view.filetype().size_bytes() == 0 {
            return Ok(state.view.displacement());
        }
        Ok(state.view.view_to_file(view_offset)?)
    }

    /// Reads or writes `count` items of `datatype` at `buf`, at view offset `offset`
    /// (etypes) or the file pointer; returns the bytes transferred.
    pub fn io(&self, flags: i32, offset: i64, buf: *mut u8, count: i32, datatype: Handle) -> Result<u64> {
        let write = flags & 1 != 0;
        let collective = flags & 2 != 0;
        let explicit = flags & 4 != 0;
        let mut state = self.state();
        if state.overlapping {
            let local = self
                .checked_access(&state, write, explicit, offset, buf, count, datatype)
                .and_then(|(view_offset, memory)| self.read_overlapping(&state.view, view_offset, &memory));
            let result = if collective {
                agree(&self.comm, local)
            } else {
                local
            };
            if let Ok(bytes) = result {
                if !explicit {
                    state.position += bytes / state.etype_size;
                }
            }
            return result;
        }
        crate::trace::begin(&self.file, collective, self.comm.rank());
        let prepared = self.prepare(&state, write, explicit, offset, buf, count, datatype);
        let result = if collective {
            let view_offset =
                if explicit { offset as u64 } else { state.position }.wrapping_mul(state.etype_size);
            self.collective_io(&mut state, write, view_offset, prepared)
        } else {
            prepared.and_then(|(request, memory)| match state.atomic {
                true => crate::atomic::locked(&self.file, write, &request, || {
                    self.independent(&state.hints, Route::Direct, write, &request, &memory)
                }),
                false => self.independent(&state.hints, Route::of(false, flags), write, &request, &memory),
            })
        };
        crate::trace::end(&self.file);
        crate::collective::pattern::detach(&self.file);
        drop(state);
        if let Ok(bytes) = result {
            if !explicit {
                let mut state = self.state();
                state.position += bytes / state.etype_size;
            }
        }
        result
    }

    /// The checks of a data access; its start in the view (bytes) and its memory.
    #[allow(clippy::too_many_arguments)]
    fn checked_access(
        &self,
        state: &State,
        write: bool,
        explicit: bool,
        offset: i64,
        buf: *mut u8,
        count: i32,
        datatype: Handle,
    ) -> Result<(u64, Memory)> {
        let access = self.amode & (amode::RDONLY | amode::RDWR | amode::WRONLY);
        if write && access == amode::RDONLY {
            return Err(MpiioError::new(
                ErrorClass::ReadOnly,
                format!("{}: opened read-only", self.path),
            ));
        }
        if !write && access == amode::WRONLY {
            return Err(MpiioError::new(
                ErrorClass::Access,
                format!("{}: opened write-only", self.path),
            ));
        }
        let etypes = if explicit {
            u64::try_from(offset)
                .map_err(|_| MpiioError::new(ErrorClass::Arg, format!("negative offset {offset}")))?
        } else {
            state.position
        };
        let memory = memory(buf, count, datatype)?;
        if memory.bytes % state.etype_size != 0 {
            return Err(MpiioError::new(
                ErrorClass::Type,
                "the access is not a whole number of etypes",
            ));
        }
        let view_offset = etypes
            .checked_mul(state.etype_size)
            .ok_or_else(|| MpiioError::new(ErrorClass::Arg, "offset overflows"))?;
        Ok((view_offset, memory))
    }

    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &self,
        state: &State,
        write: bool,
        explicit: bool,
        offset: i64,
        buf: *mut u8,
        count: i32,
        datatype: Handle,
    ) -> Result<(Request, Memory)> {
        let (view_offset, memory) =
            self.checked_access(state, write, explicit, offset, buf, count, datatype)?;
        crate::trace::original(
            &self.file,
            self.comm.rank(),
            write,
            &state.view,
            view_offset,
            memory.bytes,
        );
        let request = Request::new(&state.view, view_offset, memory.bytes, state.view_on_file)?;
        Ok((request, memory))
    }

    /// Reads `memory.bytes` view bytes from `view_offset` piece by piece in typemap
    /// order, for a view that overlaps itself (see `State::overlapping`); stops at the
    /// end of the file. Returns the bytes read.
    fn read_overlapping(&self, view: &View, view_offset: u64, memory: &Memory) -> Result<u64> {
        with_data(memory, false, |data| {
            let mut done = 0usize;
            for piece in view.pieces(view_offset, data.len() as u64)? {
                let len = piece.len as usize;
                let n = self
                    .file
                    .read_at(piece.file_offset, &mut data[done..done + len])?;
                done += n;
                if n < len {
                    break;
                }
            }
            Ok(done as u64)
        })
    }

    /// A nonblocking independent access (`MPI_File_iread*`/`iwrite*`), prepared on
    /// the calling thread (datatypes decoded, arguments checked, the individual file
    /// pointer moved past the data requested, as MPI says for nonblocking calls);
    /// [`MpiFile::run_prepared`] then does its Weft I/O on any thread, without MPI.
    pub(crate) fn prepare_nonblocking(
        &self,
        flags: i32,
        offset: i64,
        buf: *mut u8,
        count: i32,
        datatype: Handle,
    ) -> Result<Prepared> {
        let write = flags & 1 != 0;
        let explicit = flags & 4 != 0;
        let mut state = self.state();
        if state.overlapping {
            let (view_offset, memory) =
                self.checked_access(&state, write, explicit, offset, buf, count, datatype)?;
            if !explicit {
                state.position += memory.bytes / state.etype_size;
            }
            return Ok(Prepared {
                hints: state.hints.clone(),
                atomic: state.atomic,
                route: Route::of(state.atomic, flags),
                write,
                access: Access::Overlapping(state.view.clone(), view_offset),
                memory,
            });
        }
        crate::trace::begin(&self.file, false, self.comm.rank());
        let prepared = self.prepare(&state, write, explicit, offset, buf, count, datatype);
        crate::trace::end(&self.file);
        let (request, memory) = prepared?;
        if !explicit {
            state.position += memory.bytes / state.etype_size;
        }
        Ok(Prepared {
            hints: state.hints.clone(),
            atomic: state.atomic,
            route: Route::of(state.atomic, flags),
            write,
            access: Access::Request(request),
            memory,
        })
    }

    /// Does the I/O of a prepared access; returns the bytes transferred.
    pub(crate) fn run_prepared(&self, p: &Prepared) -> Result<u64> {
        let request = match &p.access {
            Access::Request(request) => request,
            Access::Overlapping(view, view_offset) => {
                return self.read_overlapping(view, *view_offset, &p.memory)
            }
        };
        match p.atomic {
            true => crate::atomic::locked(&self.file, p.write, request, || {
                self.independent(&p.hints, Route::Direct, p.write, request, &p.memory)
            }),
            false => self.independent(&p.hints, p.route, p.write, request, &p.memory),
        }
    }

    /// The size of the view's etype in bytes.
    pub(crate) fn etype_size(&self) -> u64 {
        self.state().etype_size
    }

    /// The view's size in etypes of the file's current size (MPI_SEEK_END).
    pub(crate) fn size_in_etypes(&self) -> Result<u64> {
        self.flush_behind();
        let size = self.file.size()?;
        let state = self.state();
        Ok(state.view.file_to_view(size) / state.etype_size)
    }

    pub(crate) fn comm(&self) -> &Comm {
        &self.comm
    }

    pub(crate) fn shared_id(&self) -> crate::shared::SharedId {
        self.shared_id
    }

    /// Notes that this rank used the shared file pointer (see `close`).
    pub(crate) fn shared_pointer_used(&self) {
        self.shared_used.store(true, Ordering::Relaxed);
    }

    pub(crate) fn weft_file(&self) -> &File {
        &self.file
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// An independent access; outside atomic mode through the write-behind buffer and
    /// read-ahead window (see `behind`).
    fn independent(
        &self,
        hints: &Hints,
        route: Route,
        write: bool,
        request: &Request,
        memory: &Memory,
    ) -> Result<u64> {
        use crate::collective::independent;
        // Files whose small writes something else absorbs (job-scoped or persistent
        // delegates, the cache tier: their caches are what aggregates them, and what a
        // job that aborts has handed its bytes to), and traced files (a trace records
        // the requests as the program made them, and the CIO-aware cache replays them
        // in that order), go straight through.
        let route = match self.file.cache_mode() != weft_client::CacheMode::None
            || self.delegates.is_some()
            || self.file.trace().is_some()
        {
            true if route == Route::Buffered => Route::Direct,
            _ => route,
        };
        with_data(memory, write, |data| match (route, write) {
            (Route::Direct, true) => independent::write(&self.file, request, data).map(|()| memory.bytes),
            (Route::Direct, false) => independent::read(&self.file, hints, request, data),
            (route, true) => self
                .behind()
                .write(&self.file, hints, request, data, route == Route::Buffered)
                .map(|()| memory.bytes),
            (_, false) => self.behind().read(&self.file, hints, request, data),
        })
    }

    /// A collective data call: every rank's outcome agreed. `view_offset` is where this
    /// rank's request starts in its view (bytes).
    fn collective_io(
        &self,
        state: &mut State,
        write: bool,
        view_offset: u64,
        prepared: Result<(Request, Memory)>,
    ) -> Result<u64> {
        // A collective call reads or writes around this process's buffer: what it
        // holds goes first (its bytes are older), and the window may go stale. Its own
        // bytes are not buffered, even when it runs `independent`: programs (ours in
        // tests/c/errors.c, ROMIO's) read other ranks' collective writes in the next
        // collective call without a sync, which ROMIO's collective I/O always allows.
        self.flush_behind();
        if let Some(plan) = no_exchange::plan(&self.file, &state.hints, state.atomic, write, &state.history) {
            // Nothing of the other ranks is needed before the I/O: one allgather after
            // it agrees on the outcome and collects the extents for the history.
            let extent = prepared.as_ref().ok().and_then(|(r, _)| r.extent());
            let local = prepared.and_then(|(request, memory)| match plan {
                // Atomic mode: each rank's part under its own locks (see `atomic`).
                Plan::Atomic => crate::atomic::locked(&self.file, write, &request, || {
                    self.independent(&state.hints, Route::Direct, write, &request, &memory)
                }),
                Plan::Method(method, why) => {
                    let ctx = Context {
                        comm: &self.comm,
                        file: &self.file,
                        hints: &state.hints,
                        aggregators: &[],
                        extents: &[],
                        bytes_total: 0,
                        views_registered: false,
                    };
                    self.run_method(&ctx, method, why, write, &request, &memory)
                }
            });
            let (outcome, interleaved) = no_exchange::conclude(&self.comm, local, extent)?;
            state
                .history
                .record(write, outcome.is_ok().then_some(interleaved));
            return outcome;
        }
        // The full path: one allgather agrees on the errors so far and gives every rank
        // all extents, for `auto` to choose and for the exchange methods to plan.
        let mine = match &prepared {
            Ok((request, _)) => {
                let (lo, hi) = request.extent().unwrap_or((u64::MAX, 0));
                [
                    0,
                    lo as i64,
                    hi as i64,
                    request.bytes() as i64,
                    i64::from(request.view_on_file),
                ]
            }
            Err(e) => [e.class as i64, u64::MAX as i64, 0, 0, 0],
        };
        let all = self.comm.allgather(&mine)?;
        let worst = all.chunks(5).map(|c| c[0]).max().unwrap_or(0);
        let (request, memory) = match settle(prepared, worst) {
            Ok(p) => p,
            Err(e) => {
                state.history.record(write, None);
                return Err(e);
            }
        };
        let extents: Vec<(u64, u64)> = all.chunks(5).map(|c| (c[1] as u64, c[2] as u64)).collect();
        let result = crate::collective::pattern::attach(
            &self.comm,
            &self.file,
            &state.hints,
            write,
            &state.view,
            view_offset,
            memory.bytes,
        )
        .and_then(|()| {
            let ctx = Context {
                comm: &self.comm,
                file: &self.file,
                hints: &state.hints,
                aggregators: &state.aggregators,
                extents: &extents,
                bytes_total: all.chunks(5).map(|c| c[3] as u64).sum(),
                views_registered: all.chunks(5).all(|c| c[4] == 1),
            };
            self.collective(&ctx, write, &request, &memory)
        });
        let result = agree(&self.comm, result);
        let interleaved = crate::collective::interleaved(extents.iter().copied());
        state.history.record(write, result.is_ok().then_some(interleaved));
        result
    }

    fn collective(&self, ctx: &Context<'_>, write: bool, request: &Request, memory: &Memory) -> Result<u64> {
        if let Some((method, why)) = crate::delegation::direct_method(ctx.file, ctx.hints) {
            return self.run_method(ctx, method, why, write, request, memory);
        }
        // Listing the pieces costs a pass over the view: only when `auto` needs their
        // number (a collective call: on every rank or none).
        let pieces_total = || -> Result<u64> {
            let counts = self.comm.allgather(&[request.pieces().len() as i64])?;
            Ok(counts.iter().map(|&n| n as u64).sum())
        };
        let (method, why) = auto::choose(ctx, write, pieces_total)?;
        self.run_method(ctx, method, why, write, request, memory)
    }

    /// Runs the chosen collective `method` for this rank's part.
    fn run_method(
        &self,
        ctx: &Context<'_>,
        method: Box<dyn crate::collective::Method>,
        why: &str,
        write: bool,
        request: &Request,
        memory: &Memory,
    ) -> Result<u64> {
        if print_hints() && self.comm.rank() == 0 {
            eprintln!(
                "weft-mpiio: {} {}: method {} ({why})",
                if write { "write" } else { "read" },
                self.path,
                method.name()
            );
        }
        crate::profile::method(method.name());
        with_data(memory, write, |data| {
            if write {
                method.write(ctx, request, data)?;
                Ok(memory.bytes)
            } else {
                let eof = method.read(ctx, request, data)?;
                Ok(request.bytes_before(eof))
            }
        })
    }
}

/// Hint entries with `weft_cache` set to the file's caching mode (the hint's value
/// only applies to a file the open created).
/// A view refused as MPI forbids it (non-monotonic, before offset 0): `MPI_ERR_IO`, as
/// `check_typemap`; other view errors keep their class.
fn view_error(e: view::ViewError) -> MpiioError {
    match e {
        view::ViewError::NotMonotonic | view::ViewError::NegativeFileOffset { .. } => {
            MpiioError::new(ErrorClass::Io, e.to_string())
        }
        other => other.into(),
    }
}

/// MPI's rules for the typemap of an etype or filetype (MPI 3.1, 13.3): displacements
/// non-negative (here: no data byte before file offset 0 once `disp` is added, which
/// accepts a negative lower bound the displacement makes up for) and monotonically
/// nondecreasing, and no overlapping data in a file opened for writing (read-only, a
/// filetype may overlap itself: see `State::overlapping`). A view breaking them fails with
/// `MPI_ERR_IO`, the class ROMIO gives (ADIO_Set_view); `MPI_ERR_TYPE` is left for
/// datatypes that are not valid at all.
fn check_typemap(kind: &str, tree: &Arc<Datatype>, disp: u64, read_only: bool) -> Result<()> {
    if tree.size_bytes() == 0 {
        return Ok(());
    }
    if i128::from(disp) + i128::from(tree.true_lb()) < 0 {
        return Err(MpiioError::new(
            ErrorClass::Io,
            format!(
                "displacements of the {kind} must be non-negative: its first data byte is at {} \
                 (view displacement {disp})",
                tree.true_lb()
            ),
        ));
    }
    // Read-only: overlaps are legal; View::for_reading refuses decreasing runs.
    if read_only && !tree.is_monotonic() {
        return View::for_reading(disp, tree.clone())
            .map(|_| ())
            .map_err(|e| MpiioError::new(ErrorClass::Io, format!("{kind}: {e}")));
    }
    if !tree.is_monotonic() {
        return Err(MpiioError::new(
            ErrorClass::Io,
            format!(
                "displacements of the {kind} must be monotonically nondecreasing, with no \
                 overlapping data (MPI 3.1, 13.3)"
            ),
        ));
    }
    Ok(())
}

fn with_cache_mode(mut entries: Vec<(String, String)>, file: &File) -> Vec<(String, String)> {
    entries.retain(|(k, _)| k != "weft_cache");
    entries.push(("weft_cache".into(), file.cache_mode().name().into()));
    entries
}

/// Hint entries with `striping_unit` and `striping_factor` as the file's layout has
/// them (what was applied, whatever was asked).
fn with_layout(mut entries: Vec<(String, String)>, file: &File) -> Vec<(String, String)> {
    entries.retain(|(k, _)| k != "striping_unit" && k != "striping_factor");
    let layout = file.layout();
    entries.push(("striping_unit".into(), layout.stripe_size_bytes.to_string()));
    entries.push(("striping_factor".into(), layout.servers.len().to_string()));
    entries
}

/// Runs `work` on the access's data stream: the user's buffer itself when the memory
/// type is contiguous, else a packed copy (packed before a write, unpacked after a
/// read, as far as the read got).
fn with_data(memory: &Memory, write: bool, work: impl FnOnce(&mut [u8]) -> Result<u64>) -> Result<u64> {
    if memory.bytes == 0 {
        let mut empty = [0u8; 0];
        return work(&mut empty);
    }
    // SAFETY: MPI's contract: `buf` holds `count` copies of the datatype, i.e. the
    // bytes [true_lb, true_ub + (count-1)*extent) from it, which is `region`.
    let region = unsafe { std::slice::from_raw_parts_mut(memory.region, memory.region_len) };
    if memory.contiguous {
        return work(&mut region[..memory.bytes as usize]);
    }
    let mut packed = vec![0u8; memory.bytes as usize];
    if write {
        view::pack(&memory.tree, memory.count, region, 0, &mut packed)?;
        work(&mut packed)
    } else {
        let n = work(&mut packed)?;
        view::unpack(&memory.tree, memory.count, &packed[..n as usize], 0, region)?;
        Ok(n)
    }
}

//! `weft-delegate`: the program libweft_mpiio starts with `MPI_Comm_spawn` for
//! job-scoped delegates (hint `weft_delegates=N`). Each copy runs one `weftd --role
//! cache --delegate` as its child and speaks for it over the intercommunicator (see
//! `delegate_link.rs`): it says where the weftd listens, stops it when the job closes
//! the file or finalizes, and stops it as well when the job dies without doing so
//! (MPI_Abort or a crash leave spawned processes running under Open MPI).
//!
//! weftd itself links no MPI: this launcher is the MPI process, and the weftd reads its
//! standard input from the launcher, so it writes back and exits as soon as the
//! launcher goes, however it goes (kill -9 included).
//!
//! Usage (by libweft_mpiio only): `weft-delegate [--weftd PATH] [--host HOST] --
//! WEFTD_ARGS...`; `--host` is the address to listen on and advertise (default
//! 127.0.0.1; `auto`: this machine's name, listening on every interface).

#[path = "../delegate_link.rs"]
mod link;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a weftd may take to start serving.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the parent may take to send the watch list after the spawn.
const WATCH_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a weftd may take to write its dirty blocks back and exit.
const EXIT_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the launcher looks for a stop, a dead parent or a dead weftd.
const POLL_PERIOD: Duration = Duration::from_millis(20);
/// Most bytes of the weftd's log quoted in an error.
const LOG_QUOTE_BYTES_MAX: u64 = 4096;

struct Options {
    weftd: PathBuf,
    host: String,
    weftd_args: Vec<String>,
}

fn options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let mut weftd = None;
    let mut host = "127.0.0.1".to_owned();
    let mut weftd_args = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--weftd" => weftd = Some(PathBuf::from(args.next().ok_or("--weftd needs a path")?)),
            "--host" => host = args.next().ok_or("--host needs a value")?,
            "--" => {
                weftd_args = args.by_ref().collect();
                break;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let weftd = match weftd {
        Some(path) => path,
        // Installed and built side by side: bin/weftd, target/release/weftd.
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.join("weftd")))
            .filter(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("weftd")),
    };
    Ok(Options {
        weftd,
        host,
        weftd_args,
    })
}

fn main() {
    let options = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("weft-delegate: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = link::init() {
        eprintln!("weft-delegate: {e}");
        std::process::exit(1);
    }
    let parent = match link::parent() {
        Ok(Some(p)) => p,
        Ok(None) => {
            eprintln!(
                "weft-delegate: not started by MPI_Comm_spawn: libweft_mpiio starts it for the hint \
                 weft_delegates=N; a delegate of your own is `weftd --role cache --delegate`"
            );
            let _ = link::finalize();
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("weft-delegate: {e}");
            std::process::exit(1);
        }
    };
    std::process::exit(serve(&options, parent));
}

/// Why the launcher stops serving.
enum End {
    /// The parent sent STOP.
    Stop,
    /// The parent job is gone (the reason).
    Orphaned(String),
}

fn serve(options: &Options, parent: link::Handle) -> i32 {
    let rank = link::world_rank().unwrap_or(0);
    let ppid = std::os::unix::process::parent_id();
    let host = link::host_hash(&link::processor_name());
    let orphaned =
        || (std::os::unix::process::parent_id() != ppid).then(|| "its MPI launcher exited".to_owned());
    let message = match link::recv_until(
        parent,
        0,
        link::tag::WATCH,
        Instant::now() + WATCH_TIMEOUT,
        orphaned,
    ) {
        Ok(text) => String::from_utf8_lossy(&text).into_owned(),
        Err(e) => {
            eprintln!("weft-delegate {rank}: waiting for the job's processes: {e}");
            // SAFETY: leaving without MPI_Finalize, which would wait for the lost parent.
            unsafe { libc::_exit(1) };
        }
    };
    // A message without the job key starts no weftd; the error goes back as READY's.
    let (job_key, watch) = match link::parse_watch(&message) {
        Ok((key, watch)) => (Ok(key), watch),
        Err(e) => (Err(e), ""),
    };
    let parents = link::watched_here(watch, host);
    // The weftd and its scratch directory, while it runs.
    let mut weftd = None;
    let started = job_key.and_then(|key| {
        let dir = fresh_dir()?;
        match start_weftd(options, rank, &dir, key) {
            Ok((child, addr)) => Ok((child, dir, addr)),
            Err(e) => {
                // The error already quotes its log.
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    });
    let ready = match started {
        Ok((child, dir, addr)) => {
            weftd = Some((child, dir));
            format!("ok {addr}")
        }
        Err(e) => format!("error delegate {rank}: {e}"),
    };
    let mut end = match link::send(parent, 0, link::tag::READY, ready.as_bytes()) {
        Ok(()) => None,
        Err(e) => Some(End::Orphaned(e)),
    };
    let mut told_exit = false;
    while end.is_none() {
        // A weftd that ends mid-job is said at once, with its log's end (the job's
        // calls to it fail, and an abort would end this process before the stop that
        // reports it).
        if let (false, Some((child, dir))) = (told_exit, weftd.as_mut()) {
            if let Ok(Some(status)) = child.try_wait() {
                told_exit = true;
                eprintln!(
                    "weft-delegate {rank}: its weftd exited while the job runs ({status}): {}",
                    quote(&dir.join("weftd.log"))
                );
            }
        }
        match link::try_recv(parent, 0, link::tag::STOP) {
            Ok(Some(_)) => end = Some(End::Stop),
            Ok(None) => {}
            Err(e) => end = Some(End::Orphaned(e)),
        }
        if end.is_none() {
            if let Some(why) = orphaned().or_else(|| parent_died(&parents)) {
                end = Some(End::Orphaned(why));
            }
        }
        std::thread::sleep(POLL_PERIOD);
    }
    let stopped = weftd.map_or(Ok(()), |(child, dir)| {
        let stopped = stop_weftd(child, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        stopped
    });
    match end {
        Some(End::Stop) => {
            let reply = match &stopped {
                Ok(()) => "ok".to_owned(),
                Err(e) => format!("error delegate {rank}: {e}"),
            };
            let sent = link::send(parent, 0, link::tag::STOPPED, reply.as_bytes());
            let disconnected = link::disconnect(parent);
            let finalized = link::finalize();
            match sent.and(disconnected).and(finalized) {
                Ok(()) => i32::from(stopped.is_err()),
                Err(e) => {
                    eprintln!("weft-delegate {rank}: {e}");
                    1
                }
            }
        }
        Some(End::Orphaned(why)) => {
            eprintln!(
                "weft-delegate {rank}: the job that started this delegate is gone ({why}); {}",
                match &stopped {
                    Ok(()) => "its dirty blocks were written back".to_owned(),
                    Err(e) => e.clone(),
                }
            );
            // SAFETY: leaving without MPI_Finalize, which would wait for the lost parent.
            unsafe { libc::_exit(1) }
        }
        None => unreachable!("the loop runs until an end"),
    }
}

/// Most directory names tried before giving up (names taken by other delegates).
const DIR_TRIES_MAX: u32 = 1000;

/// A new, empty scratch directory for the weftd, which only this user may enter (it
/// holds the job key). Never one that exists: a directory
/// left by a killed job whose launcher had the same pid would hold that job's `ready`
/// file, and its stale address would be handed to the job (pids wrap quickly on a busy
/// machine; this made delegates "refuse connections" mid-job).
fn fresh_dir() -> Result<PathBuf, String> {
    let base = std::env::temp_dir();
    let pid = std::process::id();
    for k in 0..DIR_TRIES_MAX {
        let dir = base.join(format!("weft-delegate-{pid}-{k}"));
        let mut builder = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match builder.create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("creating {}: {e}", dir.display())),
        }
    }
    Err(format!(
        "no free name weft-delegate-{pid}-K in {} after {DIR_TRIES_MAX} tries (remove old weft-delegate-* \
         directories there)",
        base.display()
    ))
}

/// The first of `pids` (parent processes on this host) that no longer exists.
fn parent_died(pids: &[i32]) -> Option<String> {
    pids.iter().find_map(|&pid| {
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        gone.then(|| format!("process {pid} of the job died"))
    })
}

/// Starts the weftd of delegate `rank` in `dir`, serving holders of `job_key` (hex)
/// only, and waits until it serves: the child and the address clients reach it at.
/// The key reaches the weftd in a file only this user may read, not in its arguments
/// or environment (a command line is anyone's to read in /proc).
fn start_weftd(options: &Options, rank: usize, dir: &Path, job_key: &str) -> Result<(Child, String), String> {
    let key_file = dir.join("job.key");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key_file)
            .and_then(|mut f| f.write_all(format!("{job_key}\n").as_bytes()))
            .map_err(|e| format!("writing the job key {}: {e}", key_file.display()))?;
    }
    let ready = dir.join("ready");
    let log = dir.join("weftd.log");
    let log_file = std::fs::File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let (listen, advertise) = match options.host.as_str() {
        "auto" => ("0.0.0.0".to_owned(), link::processor_name()),
        host => (host.to_owned(), host.to_owned()),
    };
    // Its own process group: the MPI runtime kills an aborted job's process groups,
    // and the weftd must outlive its launcher long enough to write back.
    let mut child = Command::new(&options.weftd)
        .args(&options.weftd_args)
        .args([
            "--id",
            &(weft_client::JOB_DELEGATE_ID_BASE + rank as u32).to_string(),
        ])
        .arg("--listen")
        .arg(format!("{listen}:0"))
        .arg("--data")
        .arg(dir.join("data"))
        .arg("--ready-file")
        .arg(&ready)
        .arg("--job-key")
        .arg(&key_file)
        .arg("--exit-on-stdin-eof")
        .arg("--remove-on-exit")
        .arg(dir)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", options.weftd.display()))?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(&ready) {
            let port = text
                .trim()
                .rsplit_once(':')
                .map(|(_, port)| port.to_owned())
                .ok_or_else(|| format!("weftd wrote {text:?} as its address"))?;
            return Ok((child, format!("{advertise}:{port}")));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("weftd exited ({status}): {}", quote(&log)));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "weftd did not serve within {} s: {}",
                START_TIMEOUT.as_secs(),
                quote(&log)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Closes the weftd's standard input (it writes its dirty blocks back and exits) and
/// waits for it.
fn stop_weftd(mut child: Child, dir: &Path) -> Result<(), String> {
    drop(child.stdin.take());
    let deadline = Instant::now() + EXIT_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                return Err(format!(
                    "weftd exited ({status}): {}",
                    quote(&dir.join("weftd.log"))
                ))
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL_PERIOD),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "weftd did not finish writing back within {} s and was killed",
                    EXIT_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("waiting for weftd: {e}")),
        }
    }
}

/// The end of a log file, for an error message.
fn quote(log: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let len = f.metadata().map_or(0, |m| m.len());
        use std::io::Seek;
        let _ = f.seek(std::io::SeekFrom::Start(len.saturating_sub(LOG_QUOTE_BYTES_MAX)));
        let _ = f.read_to_string(&mut text);
    }
    let text = text.trim();
    if text.is_empty() {
        "(no log)".into()
    } else {
        text.to_owned()
    }
}

//! The cluster a benchmark runs against: connecting to it, and the fresh file each
//! benchmark measures.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, Once};
use weft_client::{Client, CreateOptions, ErrorCode, Layout, LayoutRequest};

/// A client of the cluster named by the environment (`WEFT_HOME`, ...).
pub fn connect() -> Result<Client> {
    Client::from_env().context("no Weft cluster to benchmark (start one with `weft up`)")
}

/// Removes `path` if it exists and creates it afresh, so that the layout asked for
/// is the one measured; returns that layout. On a cluster of the benchmark's own (gone
/// with it); on the user's cluster [`WeftFile::recreate`], which removes the file again.
pub fn recreate(client: &Client, path: &str, create: &CreateOptions) -> Result<Layout> {
    match client.unlink(path) {
        Err(e) if e.code() != ErrorCode::NotFound => return Err(e.into()),
        _ => {}
    }
    Ok(client.create(path, create)?.layout().clone())
}

/// The one directory in the cluster's namespace that a benchmark puts everything it
/// makes in: made fresh (an existing one is refused, so that nothing of the user's is
/// removed) and removed with all it holds when dropped, even after an error, unless kept
/// (`--keep`).
pub struct WeftDir {
    client: Client,
    path: String,
    keep: bool,
}

impl WeftDir {
    pub fn make(client: &Client, path: &str, keep: bool) -> Result<WeftDir> {
        let path = path.trim_end_matches('/');
        anyhow::ensure!(
            path.starts_with('/') && path.len() > 1,
            "{path:?}: the benchmark's directory must be an absolute path below / (it is removed afterwards)"
        );
        // Before the directory exists: a signal from now on removes it (see `on_signals`).
        on_signals();
        match client.mkdir(path, 0o755) {
            Err(e) if e.code() == ErrorCode::Exists => anyhow::bail!(
                "{path} exists already (left by a run with --keep?): remove it (`weft rm -r {path}`) \
                 or give the benchmark another directory; it makes its own and removes it afterwards"
            ),
            Err(e) => return Err(anyhow::Error::from(e).context(format!("making {path}"))),
            Ok(_) => {}
        }
        if !keep {
            lock_weft_paths().push(path.to_owned());
        }
        Ok(WeftDir {
            client: client.clone(),
            path: path.to_owned(),
            keep,
        })
    }

    /// The directory, without a trailing slash.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl Drop for WeftDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("kept {} (--keep)", self.path);
            return;
        }
        forget_removing(&self.path, || remove_tree(&self.client, &self.path));
    }
}

/// The one file in the cluster's namespace that a file benchmark (concurrent, mount,
/// noncontig) measures: made afresh (a file of that name is removed first, so that the
/// layout asked for is the one measured) and removed when dropped, even after an error,
/// and by the signal thread on an interrupt, unless kept (`--keep`).
pub struct WeftFile {
    client: Client,
    path: String,
    keep: bool,
}

impl WeftFile {
    /// `path` created afresh as `create` asks; with its layout.
    pub fn recreate(
        client: &Client,
        path: &str,
        create: &CreateOptions,
        keep: bool,
    ) -> Result<(WeftFile, Layout)> {
        // Before the file exists: a signal from now on removes it (see `on_signals`).
        on_signals();
        if !keep {
            lock_weft_paths().push(path.to_owned());
        }
        // From here on a failure removes what was made.
        let file = WeftFile {
            client: client.clone(),
            path: path.to_owned(),
            keep,
        };
        let layout = recreate(client, path, create)?;
        Ok((file, layout))
    }
}

impl Drop for WeftFile {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        forget_removing(&self.path, || match self.client.unlink(&self.path) {
            Err(e) if e.code() != ErrorCode::NotFound => Err(e.into()),
            _ => Ok(()),
        });
    }
}

/// Removes a registered path (`remove`) and forgets it, under the lock: the signal
/// thread, holding it until exit, removes it otherwise.
fn forget_removing(path: &str, remove: impl FnOnce() -> Result<()>) {
    let mut paths = lock_weft_paths();
    if let Err(e) = remove() {
        eprintln!("weft bench: could not remove {path}: {e:#}");
    }
    paths.retain(|p| p != path);
}

/// The `WeftDir`s and `WeftFile`s not kept and not removed yet: removed by the signal
/// thread too.
static WEFT_PATHS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn lock_weft_paths() -> std::sync::MutexGuard<'static, Vec<String>> {
    WEFT_PATHS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes the Weft directory `dir` and everything below it, depth first, without
/// recursion (deep trees cannot overflow the stack).
pub fn remove_tree(client: &Client, dir: &str) -> Result<()> {
    // (path, listed already): a directory is removed once its entries are gone.
    let mut stack = vec![(dir.to_owned(), false)];
    while let Some((path, listed)) = stack.pop() {
        if listed {
            client.rmdir(&path).with_context(|| format!("removing {path}"))?;
            continue;
        }
        stack.push((path.clone(), true));
        for entry in client.readdir(&path).with_context(|| format!("listing {path}"))? {
            let child = format!("{path}/{}", String::from_utf8_lossy(entry.name.as_ref()));
            match entry.kind {
                weft_client::FileKind::Directory => stack.push((child, false)),
                _ => client
                    .unlink(&child)
                    .with_context(|| format!("removing {child}"))?,
            }
        }
    }
    Ok(())
}

/// An exclusive create of a file striped as the benchmark's options ask (a size or count
/// of `None` leaves the cluster's default).
pub fn striped(stripe_size_bytes: Option<u64>, stripe_count: Option<u32>) -> CreateOptions {
    CreateOptions {
        layout: LayoutRequest {
            cache: None,
            stripe_size_bytes,
            stripe_count,
            first_server: None,
            redundancy: None,
        },
        exclusive: true,
        ..Default::default()
    }
}

/// Clusters a benchmark started and has not stopped yet (the `weft` executable and the
/// home), so that an interrupted benchmark stops them too.
static STARTED: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());
/// Scratch directories of a running benchmark (not cluster homes): removed by the signal
/// thread too, since the main thread may be between dropping a directory's tie (which
/// kills its sweeper) and dropping the directory itself when the exit comes.
static SCRATCH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// The write end of the pipe on which the signal handler passes the signal's number.
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);
/// Set once a signal made the benchmark stop its clusters: what the main thread then
/// meets (servers gone) is no failure of its own, and the signal thread's exit status
/// (128 + the signal) is the one to give.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Whether a signal is stopping the benchmark's clusters (see `STOPPING`): the caller
/// should then wait for the process to exit rather than report an error of its own.
pub fn stopping_on_signal() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Records a cluster this benchmark started in `home`. From the first one on, SIGINT,
/// SIGTERM and SIGHUP make the benchmark stop every recorded cluster (`weft down`),
/// remove its home and exit with 128 + the signal's number, instead of dying at once
/// and leaving the servers running.
pub(crate) fn started(weft: &Path, home: &Path) {
    on_signals();
    lock_started().push((weft.to_path_buf(), home.to_path_buf()));
}

/// From the first call on, SIGINT, SIGTERM and SIGHUP make the benchmark remove its
/// `WeftDir`s and `WeftFile`s (`weft rm -r`, on the cluster of its environment), stop
/// the clusters it started and exit with 128 + the signal.
fn on_signals() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(stop_clusters_on_signals);
}

/// A scratch directory the benchmark removes when done: an interrupted benchmark removes
/// it as well. Dropping the returned guard removes the directory and forgets it; declare
/// it after the directory's other owners, so that it drops first.
pub(crate) fn scratch(dir: &Path) -> ScratchGuard {
    lock_scratch().push(dir.to_path_buf());
    ScratchGuard(dir.to_path_buf())
}

/// Removes and forgets its scratch directory (see [`scratch`]) when dropped.
pub(crate) struct ScratchGuard(PathBuf);

impl Drop for ScratchGuard {
    fn drop(&mut self) {
        // Under the lock: the signal thread, holding it until exit, removes it otherwise.
        let mut scratch = lock_scratch();
        let _ = std::fs::remove_dir_all(&self.0);
        scratch.retain(|d| d != &self.0);
    }
}

fn lock_scratch() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    SCRATCH.lock().unwrap_or_else(|e| e.into_inner())
}

/// The cluster in `home` is stopped (or about to be, by its owner).
pub(crate) fn stopped(home: &Path) {
    lock_started().retain(|(_, h)| h != home);
}

fn lock_started() -> std::sync::MutexGuard<'static, Vec<(PathBuf, PathBuf)>> {
    STARTED.lock().unwrap_or_else(|e| e.into_inner())
}

extern "C" fn on_signal(signal: libc::c_int) {
    let byte = signal as u8;
    // SAFETY: write(2) is async-signal-safe; the byte lives on this frame.
    unsafe {
        libc::write(
            SIGNAL_PIPE.load(Ordering::Relaxed),
            (&byte as *const u8).cast(),
            1,
        )
    };
}

/// A thread waits on a pipe the handlers write to and does the stopping there (running
/// `weft down` is nothing a signal handler may do).
fn stop_clusters_on_signals() {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 returns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        eprintln!(
            "weft bench: no pipe for signals ({}); an interrupted run leaves its clusters running",
            std::io::Error::last_os_error()
        );
        return;
    }
    SIGNAL_PIPE.store(fds[1], Ordering::Relaxed);
    let read_end = fds[0];
    let spawned = std::thread::Builder::new()
        .name("weft-bench-signals".into())
        .spawn(move || {
            let mut byte = 0u8;
            // SAFETY: reads one byte into `byte` from the pipe this thread owns.
            while unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) } != 1 {}
            let signal = i32::from(byte);
            STOPPING.store(true, Ordering::SeqCst);
            // First the directories and files, while the clusters they are on still
            // run. Held until exit, so that the main thread removes none of them
            // meanwhile.
            let weft_paths = lock_weft_paths();
            if let (false, Ok(weft)) = (weft_paths.is_empty(), std::env::current_exe()) {
                eprintln!(
                    "weft bench: interrupted (signal {signal}); removing {}",
                    weft_paths.join(", ")
                );
                for dir in weft_paths.iter() {
                    let _ = std::process::Command::new(&weft)
                        .args(["rm", "-r", dir])
                        .stdout(std::process::Stdio::null())
                        .status();
                }
            }
            let clusters = std::mem::take(&mut *lock_started());
            eprintln!(
                "weft bench: interrupted (signal {signal}); stopping the {} cluster(s) it started",
                clusters.len()
            );
            for (weft, home) in clusters {
                let _ = std::process::Command::new(&weft)
                    .args(["down", "--home"])
                    .arg(&home)
                    .stdout(std::process::Stdio::null())
                    .status();
                let _ = std::fs::remove_dir_all(&home);
            }
            // Held until exit, so the main thread forgets none of them meanwhile.
            let scratch = lock_scratch();
            for dir in scratch.iter() {
                let _ = std::fs::remove_dir_all(dir);
            }
            std::process::exit(128 + signal);
        });
    if spawned.is_err() {
        eprintln!("weft bench: no thread for signals; an interrupted run leaves its clusters running");
        return;
    }
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs a handler that only calls write(2); sigaction is zeroed
        // otherwise (no flags, empty mask).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

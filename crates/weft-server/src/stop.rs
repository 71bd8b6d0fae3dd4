//! How a weftd ends cleanly: at SIGTERM (`weft down`, a service manager), SIGINT (Ctrl-C
//! of a server in a terminal) or SIGHUP, and with `--exit-on-stdin-eof` at the end of
//! its standard input. The caller then writes dirty cache blocks back before exiting: a
//! manager killed by the signal's default action lost what programs had written and
//! closed but not synced (files written through a mount and `weft down` at once came
//! back empty).
//!
//! The handler only writes the signal's number to a pipe (what a handler may do);
//! [`wait`] reads it. A second signal while the write-back runs ends the process at
//! once, as the default action would have.

use anyhow::{Context, Result};
use std::io::Read;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The pipe's write end, for the handler (-1 until [`wait`] made it).
static PIPE: AtomicI32 = AtomicI32::new(-1);
/// Set by the first stop: a second signal then exits at once.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Signals that stop a server cleanly.
const SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

extern "C" fn on_signal(signal: libc::c_int) {
    if STOPPING.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + signal) };
    }
    let byte = signal as u8;
    let fd = PIPE.load(Ordering::SeqCst);
    // SAFETY: write(2) is async-signal-safe; the buffer is one byte on this stack.
    unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
}

/// Blocks until this server should stop, and says why.
pub fn wait(stdin_eof: bool) -> Result<String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors, owned from here on.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("making the stop pipe");
    }
    // SAFETY: fds[0] is a fresh descriptor owned by nothing else.
    let mut read = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    PIPE.store(fds[1], Ordering::SeqCst);
    for signal in SIGNALS {
        // SAFETY: installs a handler that only touches atomics and write(2).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: a valid action for a catchable signal.
        if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error()).context("installing the stop handler");
        }
    }
    if stdin_eof {
        let fd = fds[1];
        std::thread::spawn(move || {
            // Standard input carries nothing: its end is the signal.
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            if !STOPPING.swap(true, Ordering::SeqCst) {
                // SAFETY: a one-byte write to the pipe made above, never closed.
                unsafe { libc::write(fd, [0u8].as_ptr().cast(), 1) };
            }
        });
    }
    let mut byte = [0u8; 1];
    read.read_exact(&mut byte).context("waiting for a stop")?;
    Ok(match i32::from(byte[0]) {
        0 => "standard input closed".to_string(),
        libc::SIGTERM => "SIGTERM".to_string(),
        libc::SIGINT => "SIGINT".to_string(),
        libc::SIGHUP => "SIGHUP".to_string(),
        other => format!("signal {other}"),
    })
}

/// In the metadata manager's data directory after a clean stop with no file lock held:
/// its next start needs no grace for mounts to reclaim locks (there are none to
/// reclaim), so the first locks after `weft down` and `weft up` do not wait. Removed
/// (durably) by that start before it serves anything, so a crash later still gets the
/// grace.
const LOCKS_CLEAN: &str = "locks-clean-stop";

/// In the metadata manager's data directory after a clean stop that made every
/// operation it had answered durable (and answered later ones only once durable): its
/// next start lost nothing acknowledged, so it holds no replay window (clients' replays
/// of what it did are answered from its records). Removed durably by that start, as
/// [`LOCKS_CLEAN`].
const ALL_DURABLE: &str = "all-durable-stop";

/// Records a clean stop with no lock held in `data_dir` (see [`LOCKS_CLEAN`]).
pub fn record_no_locks(data_dir: &std::path::Path) -> std::io::Result<()> {
    record(data_dir, LOCKS_CLEAN)
}

/// Whether the last stop was clean with no lock held; the record is gone afterwards.
/// A record that cannot be removed counts as absent (the grace is the safe side).
pub fn take_no_locks(data_dir: &std::path::Path) -> bool {
    take(data_dir, LOCKS_CLEAN)
}

/// Records a clean stop with every answered operation durable (see [`ALL_DURABLE`]).
pub fn record_all_durable(data_dir: &std::path::Path) -> std::io::Result<()> {
    record(data_dir, ALL_DURABLE)
}

/// Whether the last stop left every answered operation durable; the record is gone
/// afterwards (a record that cannot be removed counts as absent: a replay window).
pub fn take_all_durable(data_dir: &std::path::Path) -> bool {
    take(data_dir, ALL_DURABLE)
}

fn record(data_dir: &std::path::Path, name: &str) -> std::io::Result<()> {
    let path = data_dir.join(name);
    std::fs::File::create(&path)?.sync_all()?;
    std::fs::File::open(data_dir)?.sync_all()
}

fn take(data_dir: &std::path::Path, name: &str) -> bool {
    let path = data_dir.join(name);
    if !path.exists() {
        return false;
    }
    let removed = std::fs::remove_file(&path)
        .and_then(|()| std::fs::File::open(data_dir)?.sync_all())
        .map_err(|e| eprintln!("weftd meta: removing {}: {e}", path.display()));
    removed.is_ok()
}

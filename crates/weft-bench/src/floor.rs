//! `weft bench floor`: mounts the FUSE floor (see `weft_fuse::mount_floor`) for outside
//! tools such as fio, so that their figures on a Weft mount can be set against what any
//! FUSE file system reaches on the same machine (`weft bench mount --floor` does this
//! itself for sequential I/O).

use anyhow::{ensure, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub const LONG_ABOUT: &str = "\
Mounts the FUSE floor on a directory and serves it until interrupted (Ctrl-C, SIGTERM) or \
unmounted (fusermount3 -u DIR): a file system that keeps its namespace in memory and stores no \
data, with the Weft mount's request size, readahead and worker threads. Directories, files and \
symbolic links, their modes, owners, times and sizes behave as on a local file system (at most \
--inodes of them); reads return zeros (one copy from memory, as a daemon holding the data makes) \
and writes are acknowledged and dropped. It is built on the FUSE library the Weft mount uses \
(fuser), so what a program reaches there is what the mount's FUSE path allows on this machine: it \
shows how much of a gap between a Weft mount and a local directory is that path's own cost (FUSE \
over io_uring, which the mount does not use, can do better on small requests). Examples, random 4 KiB writes by fio and a tar extraction:
  weft bench floor --mountpoint /tmp/floor &
  fio --name=small --directory=/tmp/floor --rw=randwrite --bs=4k --size=32m --numjobs=4
  scripts/bench-small-io.sh --runs 3 --tar doc.tar local=/tmp/local floor=/tmp/floor mount=/mnt/weft/small";

/// How often the floor checks that it is still mounted while it waits for a signal.
const POLL: Duration = Duration::from_millis(200);

#[derive(Args, Debug, Clone)]
pub struct FloorArgs {
    /// The directory to mount on (created if missing; must be empty).
    #[arg(long, value_name = "DIR")]
    pub mountpoint: PathBuf,
    /// Most inodes (files, directories, links) the floor holds; more are refused with
    /// ENOSPC. Each takes some 200 bytes of memory.
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub inodes: u64,
}

pub fn run(args: &FloorArgs) -> Result<()> {
    ensure!(
        (2..=weft_fuse::FLOOR_INODES_MAX).contains(&args.inodes),
        "--inodes must be 2 to {} (the root is one)",
        weft_fuse::FLOOR_INODES_MAX
    );
    std::fs::create_dir_all(&args.mountpoint)
        .with_context(|| format!("creating {}", args.mountpoint.display()))?;
    let mut entries = std::fs::read_dir(&args.mountpoint)
        .with_context(|| format!("reading {}", args.mountpoint.display()))?;
    ensure!(
        entries.next().is_none(),
        "{} is not empty: mount the floor on an empty directory",
        args.mountpoint.display()
    );
    let mountpoint = args
        .mountpoint
        .canonicalize()
        .with_context(|| format!("resolving {}", args.mountpoint.display()))?;
    let signals = block_stop_signals();
    let zeros = vec![0u8; weft_fuse::REQUEST_BYTES_MAX as usize];
    let fill = Arc::new(move |_file: u64, _offset: u64, out: &mut [u8]| {
        let n = out.len().min(zeros.len());
        out[..n].copy_from_slice(&zeros[..n]);
    });
    let floor = weft_fuse::mount_floor(
        &mountpoint,
        &[],
        args.inodes,
        weft_fuse::THREADS_DEFAULT,
        weft_fuse::READAHEAD_KIB_DEFAULT,
        fill,
    )
    .with_context(|| {
        format!(
            "mounting the FUSE floor on {} (needs /dev/fuse)",
            mountpoint.display()
        )
    })?;
    eprintln!(
        "weft bench floor: mounted on {} (at most {} inodes); stop with Ctrl-C or fusermount3 -u {}",
        mountpoint.display(),
        args.inodes,
        mountpoint.display()
    );
    loop {
        if let Some(signal) = wait_signal(&signals, POLL) {
            eprintln!("weft bench floor: signal {signal}: unmounting");
            break;
        }
        if !mounted(&mountpoint) {
            eprintln!("weft bench floor: {} was unmounted", mountpoint.display());
            break;
        }
    }
    floor.unmount().context("unmounting the FUSE floor")
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and the ones it starts (the floor's
/// workers), so that `wait_signal` takes them. Returns the set.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use; the mask
    // change only affects this thread and those it starts.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// A signal of `set` taken within `timeout`, if one came.
fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let spec = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` is a valid signal set and `spec` a valid timeout; no info wanted.
    let signal = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &spec) };
    (signal > 0).then_some(signal)
}

/// Whether `mountpoint` is still a mount point in /proc/self/mounts.
fn mounted(mountpoint: &std::path::Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return true;
    };
    let wanted = mountpoint.to_string_lossy();
    mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .any(|m| m == wanted)
}

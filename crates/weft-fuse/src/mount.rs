//! Mounting and unmounting: the FUSE session, the daemon that serves it in the
//! background, and signals that unmount a foreground mount.

use crate::fs::{CacheOptions, WeftFs};
use crate::{MountError, MountOptions};
use fuser::{Config, MountOption, Session, SessionACL};
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use weft_client::Client;

/// The file system type the mount shows in /proc/mounts: `fuse.weft`.
pub const FS_NAME: &str = "weft";

/// FUSE worker threads, at most (each holds a 16 MiB request buffer, mostly untouched).
pub const THREADS_MAX: usize = 64;

/// FUSE worker threads of `weft mount` unless told otherwise.
pub const THREADS_DEFAULT: usize = 8;

/// Signals that end a mount served in the foreground (or by a daemon): blocked in every
/// thread and taken by one that unmounts.
const STOP_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Mounts and serves until unmounted (`weft umount`, `fusermount3 -u`, or a signal).
pub fn mount_foreground(options: &MountOptions) -> Result<(), MountError> {
    let mountpoint = check_mountpoint(&options.mountpoint)?;
    block_stop_signals();
    let client = connect(options)?;
    let session = start(client, &mountpoint, options)?;
    serve(session, &mountpoint)
}

/// Mounts, then returns once the mount is usable, leaving a daemon to serve it. A
/// failure (no cluster, a bad mountpoint, no permission to mount) is returned here,
/// before anything is left behind.
///
/// Must be called while the process has one thread: it forks.
pub fn mount_background(options: &MountOptions) -> Result<(), MountError> {
    let mountpoint = check_mountpoint(&options.mountpoint)?;
    if threads_running() != Some(1) {
        // fork() copies only the calling thread: locks held by others would stay held.
        return Err(MountError::Daemon(
            "internal error: background mounting must start before any other thread".into(),
        ));
    }
    let mut log = log_path(options, &mountpoint)?;
    if let Some(path) = &log {
        // Made and opened here, so that a log that cannot be written is reported now:
        // an error for the file asked for, a note for the default one (a user with a
        // read-only home can still mount).
        if let Err(e) = crate::log::RotatingLog::open(path, crate::log::LOG_BYTES_MAX) {
            if options.log != crate::MountLog::Default {
                return Err(MountError::Mountpoint {
                    path: path.clone(),
                    message: format!("cannot open the mount's log: {e} (--no-log discards the messages)"),
                });
            }
            eprintln!(
                "weft mount: note: cannot write the log {}: {e}; the daemon's messages are discarded \
                 (--log FILE puts them elsewhere)",
                path.display()
            );
            log = None;
        }
    }
    let (mut from_daemon, to_parent) = pipe()?;
    // SAFETY: the caller guarantees a single thread; the child only calls what is safe
    // after fork in that case (everything) and never returns from this function.
    match unsafe { libc::fork() } {
        -1 => Err(MountError::Io(std::io::Error::last_os_error())),
        0 => {
            drop(from_daemon);
            let code = daemon(options, &mountpoint, log.as_deref(), to_parent);
            // SAFETY: ends the daemon without unwinding into the caller's main.
            unsafe { libc::_exit(code) }
        }
        _child => {
            drop(to_parent);
            let mut message = String::new();
            from_daemon.read_to_string(&mut message).map_err(MountError::Io)?;
            match message.strip_prefix("ok") {
                Some(_) => {
                    match &log {
                        Some(path) => println!(
                            "weft mount: {} mounted; its messages go to {}",
                            mountpoint.display(),
                            path.display()
                        ),
                        None => println!(
                            "weft mount: {} mounted; its messages are discarded",
                            mountpoint.display()
                        ),
                    }
                    Ok(())
                }
                None if message.is_empty() => Err(MountError::Daemon(
                    "the mount daemon exited before the mount was ready".into(),
                )),
                None => Err(MountError::Daemon(message)),
            }
        }
    }
}

/// The background daemon: connects, mounts, tells the parent, serves. Returns the exit
/// code.
fn daemon(
    options: &MountOptions,
    mountpoint: &Path,
    log: Option<&Path>,
    mut to_parent: std::fs::File,
) -> i32 {
    // SAFETY: no preconditions; detaches from the terminal's session and signals.
    unsafe { libc::setsid() };
    // The logger forks: first, while this process still has one thread.
    let log = match log.map(crate::log::start_logger).transpose() {
        Ok(log) => log,
        Err(e) => {
            let _ = write!(to_parent, "cannot start the mount's logger: {e}");
            return 1;
        }
    };
    block_stop_signals();
    // Whether standard error is the log yet: before, it is `weft mount`'s own, which
    // reports a failure itself (from the message sent to it), so the daemon stays quiet.
    let mut logging = false;
    let ready = (|| -> Result<Session<WeftFs>, MountError> {
        let client = connect(options)?;
        redirect_stdio(log)?;
        logging = true;
        eprintln!(
            "weft mount: mounting {} (daemon pid {}, weft {})",
            mountpoint.display(),
            std::process::id(),
            env!("CARGO_PKG_VERSION")
        );
        let session = start(client, mountpoint, options)?;
        std::env::set_current_dir("/").map_err(MountError::Io)?;
        Ok(session)
    })();
    match ready {
        Ok(session) => {
            let _ = to_parent.write_all(b"ok");
            drop(to_parent);
            match serve(session, mountpoint) {
                Ok(()) => {
                    eprintln!("weft mount: {} unmounted", mountpoint.display());
                    0
                }
                Err(e) => {
                    eprintln!("weft-fuse: {e}");
                    1
                }
            }
        }
        Err(e) => {
            if logging {
                eprintln!("weft mount: {e}");
            }
            let _ = to_parent.write_all(e.to_string().as_bytes());
            1
        }
    }
}

/// Threads of this process, from /proc/self/status.
fn threads_running() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

fn connect(options: &MountOptions) -> Result<Client, MountError> {
    // Before any connection is made: each io server connection with a shared segment
    // then takes the pool too, and replies are placed straight into the workers'
    // buffers (`fs.rs`'s `do_read`).
    if crate::kernel::read_pool_wanted() {
        weft_rpc::shm::Pool::install(
            options.threads.clamp(1, THREADS_MAX),
            crate::kernel::REQUEST_BYTES_MAX as usize,
        );
    }
    let client = match &options.meta_addr {
        Some(addr) => Client::connect(addr),
        None => Client::from_env(),
    };
    client.map_err(MountError::Cluster)
}

/// Mounts and completes the FUSE handshake: when this returns, the kernel serves
/// requests on the mount (queued until `serve` starts the workers).
fn start(client: Client, mountpoint: &Path, options: &MountOptions) -> Result<Session<WeftFs>, MountError> {
    let notifier = Arc::new(OnceLock::new());
    let cache = CacheOptions {
        attr_ttl: options.attr_ttl,
        keep_cache: options.keep_cache,
        walk_window: options.walk_window.min(options.attr_ttl),
        lease: options.lease,
    };
    let fs = WeftFs::new(client, cache, notifier.clone());
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(FS_NAME.into()),
        MountOption::Subtype(FS_NAME.into()),
        // The kernel checks mode bits with the caller's full credentials (supplementary
        // groups, capabilities) before open, which is the only gate for data: io servers
        // check nothing. See the crate documentation.
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    // A system-wide mount (root) serves every user; a user's mount serves that user.
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(options.threads.clamp(1, THREADS_MAX));
    // Each worker reads its own clone of /dev/fuse, so requests do not queue on one fd.
    config.clone_fd = true;
    let failed = |source| MountError::Mount {
        path: mountpoint.to_path_buf(),
        source,
    };
    raise_request_pages_limit();
    // SAFETY: no preconditions.
    let session = if unsafe { libc::geteuid() } == 0 {
        // Mounted here rather than by fuser, which names the type plain `fuse`: the
        // mount shows as `fuse.weft`, as fusermount3 makes it for users.
        let fd = mount_as_root(mountpoint).map_err(failed)?;
        Session::from_fd(fs, fd, SessionACL::All, config)
    } else {
        Session::new(fs, mountpoint, &config)
    }
    .map_err(failed)?;
    let _ = notifier.set(session.notifier());
    set_readahead(mountpoint, options.readahead_kib);
    Ok(session)
}

/// mount(2) of a FUSE file system of type `fuse.weft` on `mountpoint` as root, serving
/// every user (`allow_other`, with the kernel checking permissions), nosuid and nodev as
/// fusermount3 mounts. Returns the /dev/fuse descriptor the session reads.
fn mount_as_root(mountpoint: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::PermissionsExt;
    let root_mode = (std::fs::metadata(mountpoint)?.permissions().mode() & libc::S_IFMT) | 0o755;
    let device = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?;
    let fd: OwnedFd = device.into();
    let data = format!(
        "fd={},rootmode={root_mode:o},user_id=0,group_id=0,default_permissions,allow_other",
        fd.as_raw_fd()
    );
    let cstring =
        |s: &[u8]| CString::new(s).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e));
    let (source, target, fs_type, data) = (
        cstring(FS_NAME.as_bytes())?,
        cstring(mountpoint.as_os_str().as_bytes())?,
        cstring(format!("fuse.{FS_NAME}").as_bytes())?,
        cstring(data.as_bytes())?,
    );
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOATIME;
    // SAFETY: valid C strings; the data names the open descriptor.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fs_type.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// Linux 6.13 and later cap a FUSE request at `fs.fuse.max_pages_limit` pages (256 by
/// default, 1 MiB), read when a connection starts: as root, raise it (never lower it) so
/// that this mount's requests may be `REQUEST_BYTES_MAX`. It only lets a FUSE file
/// system ask for more; others keep what they ask for. Older kernels (no such knob) keep
/// 1 MiB requests.
pub(crate) fn raise_request_pages_limit() {
    const KNOB: &str = "/proc/sys/fs/fuse/max_pages_limit";
    let wanted = crate::kernel::REQUEST_BYTES_MAX as u64 / 4096;
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let Ok(current) = std::fs::read_to_string(KNOB) else {
        return;
    };
    match current.trim().parse::<u64>() {
        Ok(limit) if limit >= wanted => {}
        _ => {
            if let Err(e) = std::fs::write(KNOB, wanted.to_string()) {
                eprintln!(
                    "weft-fuse: cannot raise {KNOB} to {wanted} ({e}); requests stay at most {} KiB",
                    current.trim().parse::<u64>().unwrap_or(256) * 4
                );
            }
        }
    }
}

/// The kernel reads ahead at most the device's `read_ahead_kb` (128 KiB by default, less
/// than FUSE's `max_readahead`), so a sequential read would be cut into 128 KiB requests
/// one or two at a time. Raising it keeps several large requests in flight, which
/// triples sequential read bandwidth. Only root may; a user's mount keeps the default.
pub(crate) fn set_readahead(mountpoint: &Path, kib: u32) {
    // Not stat(2) on the mountpoint: that would wait for this daemon to answer.
    let device = match mount_entry(mountpoint) {
        Ok(Some(entry)) => entry.device,
        _ => return,
    };
    let knob = format!("/sys/class/bdi/{device}/read_ahead_kb");
    if let Err(e) = std::fs::write(&knob, kib.to_string()) {
        eprintln!("weft-fuse: cannot raise readahead ({knob}: {e}); sequential reads will be slower");
    }
}

/// Serves until the mount goes away; a stop signal unmounts (lazily, so that open files
/// do not keep the daemon from ending).
fn serve(session: Session<WeftFs>, mountpoint: &Path) -> Result<(), MountError> {
    let target = mountpoint.to_path_buf();
    std::thread::Builder::new()
        .name("weft-fuse-signals".into())
        .spawn(move || loop {
            let signal = wait_stop_signal();
            eprintln!("weft-fuse: signal {signal}: unmounting {}", target.display());
            if let Err(e) = unmount(&target, true) {
                eprintln!("weft-fuse: {e}");
            }
        })
        .map_err(MountError::Io)?;
    session.run().map_err(MountError::Io)
}

/// Unmounts a Weft mount: umount(2) as root, else `fusermount3 -u`. `lazy` detaches it
/// now and finishes when the last open file closes.
pub fn unmount(mountpoint: &Path, lazy: bool) -> Result<(), MountError> {
    let path = absolute_no_follow(mountpoint)?;
    let fail = |message: String| MountError::Unmount {
        path: path.clone(),
        message,
    };
    match mount_entry(&path).map_err(MountError::Io)? {
        Some(entry) if entry.is_weft() => {}
        Some(entry) => return Err(fail(format!("not a Weft mount (it is {})", entry.fs_type))),
        None => return Err(fail("not mounted".into())),
    }
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| fail("NUL in path".into()))?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: a valid C string.
        if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(fail(if e.raw_os_error() == Some(libc::EBUSY) {
                "busy (files open, or a process's working directory, in it): close them, or use --lazy".into()
            } else {
                e.to_string()
            }));
        }
        return Ok(());
    }
    let mut command = std::process::Command::new("fusermount3");
    command.arg("-u");
    if lazy {
        command.arg("-z");
    }
    let out = command
        .arg(&path)
        .output()
        .map_err(|e| fail(format!("running fusermount3: {e}")))?;
    if !out.status.success() {
        return Err(fail(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    Ok(())
}

/// What is mounted at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub fs_type: String,
    pub source: String,
    /// The device number ("0:39"), which names the mount's backing device info in sysfs.
    pub device: String,
}

impl MountEntry {
    /// A Weft mount: type `fuse.weft` (also `fuse` with source `weft`, as mounts made
    /// before the type was named).
    pub fn is_weft(&self) -> bool {
        self.fs_type == format!("fuse.{FS_NAME}") || (self.fs_type == "fuse" && self.source == FS_NAME)
    }
}

/// Whether a Weft mount is at `path` (exactly there, not above it).
pub fn is_weft_mount(path: &Path) -> std::io::Result<bool> {
    Ok(mount_entry(path)?.is_some_and(|e| e.is_weft()))
}

/// The mount exactly at `path`, from /proc/self/mountinfo.
pub fn mount_entry(path: &Path) -> std::io::Result<Option<MountEntry>> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let want = path.as_os_str().as_bytes();
    let mut found = None;
    for line in info.lines() {
        // id parent major:minor root mountpoint options [optional...] - type source super
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < 5 || dash + 2 >= fields.len() {
            continue;
        }
        if unescape_mountinfo(fields[4]) == want {
            // The last mount on a path is the visible one.
            found = Some(MountEntry {
                device: fields[2].to_string(),
                fs_type: fields[dash + 1].to_string(),
                source: String::from_utf8_lossy(&unescape_mountinfo(fields[dash + 2])).into_owned(),
            });
        }
    }
    Ok(found)
}

/// mountinfo writes space, tab, newline and backslash as octal escapes (`\040`).
fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// An absolute path with its parent resolved but not the last component, which may be
/// a mount whose daemon is gone (stat fails with ENOTCONN there).
fn absolute_no_follow(path: &Path) -> Result<PathBuf, MountError> {
    let bad = |e: std::io::Error| MountError::Mountpoint {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let absolute = std::path::absolute(path).map_err(bad)?;
    match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => Ok(parent.canonicalize().map_err(bad)?.join(name)),
        _ => Ok(absolute),
    }
}

fn check_mountpoint(path: &Path) -> Result<PathBuf, MountError> {
    let bad = |message: String| MountError::Mountpoint {
        path: path.to_path_buf(),
        message,
    };
    let absolute = path.canonicalize().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            bad(format!(
                "the mount point does not exist; create it first (mkdir -p {})",
                path.display()
            ))
        } else {
            bad(e.to_string())
        }
    })?;
    if !absolute.is_dir() {
        return Err(bad("not a directory".into()));
    }
    if is_weft_mount(&absolute).map_err(MountError::Io)? {
        return Err(bad("Weft is already mounted here".into()));
    }
    // As mount(8) and fusermount3, a directory with entries is mounted over; its entries
    // are hidden until the unmount, which a user who picked the wrong directory should
    // hear of rather than find their files gone.
    if let Ok(mut entries) = std::fs::read_dir(&absolute) {
        if entries.next().is_some() {
            eprintln!(
                "weft mount: note: {} is not empty; its files are hidden (not changed) while Weft is mounted there",
                absolute.display()
            );
        }
    }
    Ok(absolute)
}

/// The file a background mount logs to: `--log FILE`, else the default place
/// (crate::log::default_path); none with `--no-log`.
fn log_path(options: &MountOptions, mountpoint: &Path) -> Result<Option<PathBuf>, MountError> {
    match &options.log {
        crate::MountLog::Off => Ok(None),
        crate::MountLog::File(path) => Ok(Some(std::path::absolute(path).map_err(MountError::Io)?)),
        crate::MountLog::Default => {
            let path = crate::log::default_path(mountpoint);
            if path.is_none() {
                eprintln!(
                    "weft mount: note: neither XDG_STATE_HOME nor HOME is set, so the daemon's messages \
                     are discarded (--log FILE keeps them)"
                );
            }
            Ok(path)
        }
    }
}

/// Standard input and output to /dev/null, standard error to the logger's pipe (or
/// /dev/null), so that the daemon holds no terminal and fds 0-2 stay taken.
fn redirect_stdio(log: Option<OwnedFd>) -> Result<(), MountError> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(MountError::Io)?;
    let err_fd = log.as_ref().map_or(null.as_raw_fd(), |f| f.as_raw_fd());
    for (from, to) in [(null.as_raw_fd(), 0), (null.as_raw_fd(), 1), (err_fd, 2)] {
        // SAFETY: both are open descriptors.
        if unsafe { libc::dup2(from, to) } < 0 {
            return Err(MountError::Io(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn pipe() -> Result<(std::fs::File, std::fs::File), MountError> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(MountError::Io(std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 just opened both and nothing else owns them.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((r.into(), w.into()))
}

fn stop_sigset() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before sigaddset uses it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in STOP_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks the stop signals in this thread and every thread it starts from now on.
fn block_stop_signals() {
    let set = stop_sigset();
    // SAFETY: a valid set; the old mask is not wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

fn wait_stop_signal() -> i32 {
    let set = stop_sigset();
    let mut signal = 0;
    // SAFETY: a valid set and a place for the answer.
    unsafe { libc::sigwait(&set, &mut signal) };
    signal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo(r"/tmp/a\040b"), b"/tmp/a b");
        assert_eq!(unescape_mountinfo(r"/x\134y"), b"/x\\y");
        assert_eq!(unescape_mountinfo(r"/plain"), b"/plain");
        assert_eq!(unescape_mountinfo(r"/end\04"), b"/end\\04");
    }

    #[test]
    fn the_root_is_mounted_and_is_not_weft() {
        let entry = mount_entry(Path::new("/")).unwrap().expect("/ is mounted");
        assert!(!entry.is_weft());
        assert!(unmount(Path::new("/"), false).is_err());
    }
}

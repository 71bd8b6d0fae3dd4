//! fcntl and flock locks hold across mounts of one cluster, as they hold across
//! processes on one machine (the manager keeps them). Each case runs the same steps on a
//! local directory in the same test and expects the same outcome; the processes that
//! contend are separate (forked, or `flock(1)`), as locks are per process. The last
//! cases restart the manager (kill -9) under held locks: the mounts reclaim them during
//! its grace, and a lock lost is an EIO to its holder, never a silent loss.

mod common;

use common::Mount;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_testkit::{ClusterOptions, TestCluster};

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn flock_struct(kind: i32, start: i64, len: i64) -> libc::flock {
    // SAFETY: flock is plain old data; zero is a valid value of every field.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = start;
    lock.l_len = len;
    lock
}

/// fcntl(fd, cmd, lock): 0, or the errno.
fn fcntl_lock(fd: i32, cmd: i32, lock: &mut libc::flock) -> i32 {
    // SAFETY: `lock` is a valid flock for the call's duration.
    if unsafe { libc::fcntl(fd, cmd, lock as *mut libc::flock) } == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    }
}

/// Runs `child` in a forked process and returns the i64 values it wrote. `child` may
/// only make async-signal-safe calls (open, fcntl, pread, pwrite, close), since the test
/// process has other threads.
fn in_child(child: impl FnOnce() -> Vec<i64>) -> Vec<i64> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only makes async-signal-safe calls and ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let values = child();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        // SAFETY: writing our own buffer to the pipe, then leaving without unwinding.
        unsafe {
            libc::write(fds[1], bytes.as_ptr().cast(), bytes.len());
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end; reading into our own buffer.
    unsafe { libc::close(fds[1]) };
    let mut bytes = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        // SAFETY: `buf` is ours and as long as stated.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n as usize]);
    }
    let mut status = 0;
    // SAFETY: waiting for our own child; closing our read end.
    unsafe {
        libc::waitpid(pid, &mut status, 0);
        libc::close(fds[0]);
    }
    assert!(libc::WIFEXITED(status), "child died: status {status}");
    bytes
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn open_rw(path: &CString) -> i32 {
    // Close-on-exec: a server that `weft up` starts (a manager restarted under a held
    // lock) must not inherit a descriptor of a file on a mount, whose close at its
    // exit would wait for that mount's daemon.
    // SAFETY: a valid C string.
    unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) }
}

/// The fcntl steps, with `holder_path` and `other_path` naming one file (through two
/// mounts, or twice the same local path): what each step gave.
fn fcntl_steps(holder_path: &Path, other_path: &Path) -> Vec<i64> {
    std::fs::write(holder_path, b"0123456789abcdefghij").unwrap();
    let other = cpath(other_path);
    let fd = open_rw(&cpath(holder_path));
    assert!(fd >= 0);
    assert_eq!(
        fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_WRLCK, 0, 10)),
        0
    );
    let holder_pid = std::process::id() as i64;
    let mut seen = in_child(move || {
        let fd = open_rw(&other);
        let refused = fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_WRLCK, 5, 1)) as i64;
        let shared_refused = fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_RDLCK, 9, 3)) as i64;
        let beside = fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_WRLCK, 10, 5)) as i64;
        let mut probe = flock_struct(libc::F_WRLCK, 0, 0);
        let tested = fcntl_lock(fd, libc::F_GETLK, &mut probe) as i64;
        vec![
            refused,
            shared_refused,
            beside,
            tested,
            probe.l_type as i64,
            probe.l_start,
            probe.l_len,
            probe.l_pid as i64,
        ]
    });
    // The holder's pid, as F_GETLK named it, is compared as "the holder's".
    if seen[7] == holder_pid {
        seen[7] = -1;
    }
    // A shared lock of the holder's own (a downgrade) lets readers in, not writers.
    assert_eq!(
        fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_RDLCK, 0, 10)),
        0
    );
    let other = cpath(other_path);
    seen.extend(in_child(move || {
        let fd = open_rw(&other);
        vec![
            fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_RDLCK, 0, 10)) as i64,
            fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_WRLCK, 0, 10)) as i64,
        ]
    }));
    // Closing any descriptor of the file drops the process's locks on it.
    let second = open_rw(&cpath(holder_path));
    // SAFETY: our own descriptors.
    unsafe {
        libc::close(second);
    }
    let other = cpath(other_path);
    seen.extend(in_child(move || {
        let fd = open_rw(&other);
        vec![fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_WRLCK, 0, 0)) as i64]
    }));
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    seen
}

#[test]
fn fcntl_locks_exclude_processes_on_another_mount() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    let local = tempfile::tempdir().unwrap();
    let expected = fcntl_steps(&local.path().join("f"), &local.path().join("f"));
    // As Linux has it: refused with EAGAIN twice, the range beside granted, F_GETLK
    // names the holder's exclusive lock of 0..10; after the downgrade a reader gets in
    // and a writer does not; after a close by the holder, a writer of the whole file.
    assert_eq!(
        expected,
        vec![
            libc::EAGAIN as i64,
            libc::EAGAIN as i64,
            0,
            0,
            libc::F_WRLCK as i64,
            0,
            10,
            -1,
            0,
            libc::EAGAIN as i64,
            0
        ]
    );
    assert_eq!(fcntl_steps(&a.join("f"), &b.join("f")), expected);
}

/// A read lock taken through a read-only descriptor (the mount gives such opens no
/// flush at close while it holds no lock), then that descriptor closed: what a writer
/// through `other_path` got before the close (F_SETLK) and after it (F_SETLKW; an
/// alarm ends the child after 10 s if the read lock outlived the close).
fn read_lock_steps(holder_path: &Path, other_path: &Path) -> Vec<i64> {
    std::fs::write(holder_path, b"0123456789").unwrap();
    // SAFETY: a valid C string.
    let fd = unsafe { libc::open(cpath(holder_path).as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    assert!(fd >= 0);
    assert_eq!(
        fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_RDLCK, 0, 0)),
        0
    );
    let other = cpath(other_path);
    let mut seen = in_child(move || {
        let fd = open_rw(&other);
        vec![fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_WRLCK, 0, 0)) as i64]
    });
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    let other = cpath(other_path);
    seen.extend(in_child(move || {
        let fd = open_rw(&other);
        // SAFETY: alarm is async-signal-safe.
        unsafe { libc::alarm(10) };
        vec![fcntl_lock(fd, libc::F_SETLKW, &mut flock_struct(libc::F_WRLCK, 0, 0)) as i64]
    }));
    seen
}

#[test]
fn a_read_lock_through_a_read_only_descriptor_goes_at_its_close() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    let local = tempfile::tempdir().unwrap();
    let expected = read_lock_steps(&local.path().join("f"), &local.path().join("f"));
    assert_eq!(expected, vec![libc::EAGAIN as i64, 0]);
    assert_eq!(read_lock_steps(&a.join("f"), &b.join("f")), expected);
}

fn flock_cmd(args: &[&str], file: &Path) -> Command {
    let mut command = Command::new("flock");
    command.args(args).arg(file).stdin(Stdio::null());
    command
}

/// A `flock` process holding `holder` for `secs` seconds, returned once a `flock -n` on
/// `probe` (the same file) is refused.
fn hold_with_flock(holder: &Path, probe: &Path, secs: &str) -> std::process::Child {
    let held = flock_cmd(&[], holder).args(["sleep", secs]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while flock_cmd(&["-n"], probe).arg("true").status().unwrap().success() {
        assert!(Instant::now() < deadline, "the holder never took its lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    held
}

/// Ends a `hold_with_flock` holder and the `sleep` it runs with the lock's descriptor
/// (found through /proc: no pkill needed).
fn end_holder(mut holder: std::process::Child) {
    let pid = holder.id();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(n) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{n}/stat")) else {
            continue;
        };
        // "PID (COMM) STATE PPID ...": the parent is the second field after the ')'.
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        let parent = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if parent == Some(pid) {
            // SAFETY: kill(2) of a process of ours, the holder's child.
            unsafe { libc::kill(n, libc::SIGKILL) };
        }
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// `flock -n` on `other` while a `flock` process holds `holder`: refused; a blocking
/// `flock` on `other` waits for the holder to end. Returns (refused status, waited).
fn flock_steps(holder: &Path, other: &Path) -> (Option<i32>, Duration) {
    std::fs::write(holder, b"x").unwrap();
    let mut held = hold_with_flock(holder, holder, "2");
    let refused = flock_cmd(&["-n"], other).arg("true").status().unwrap().code();
    let started = Instant::now();
    let waited = flock_cmd(&["-w", "30"], other).arg("true").status().unwrap();
    assert!(waited.success(), "a blocking flock on {} failed", other.display());
    let waited = started.elapsed();
    held.wait().unwrap();
    (refused, waited)
}

#[test]
fn flock_excludes_across_mounts_and_a_waiter_gets_the_lock_once_released() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    let local = tempfile::tempdir().unwrap();
    let (local_refused, _) = flock_steps(&local.path().join("f"), &local.path().join("f"));
    assert_eq!(local_refused, Some(1));
    let (refused, waited) = flock_steps(&a.join("f"), &b.join("f"));
    assert_eq!(refused, local_refused, "flock -n through the other mount");
    // The holder sleeps 2 s from before the refusal: the waiter waited most of that.
    assert!(waited > Duration::from_millis(500), "waited only {waited:?}");
}

/// Two processes, each through its own path to one file, increment a counter in it
/// `rounds` times each under an exclusive F_SETLKW lock (read, add one, write, unlock).
fn counter_steps(first: &Path, second: &Path, rounds: i64) -> i64 {
    std::fs::write(first, 0i64.to_le_bytes()).unwrap();
    let children: Vec<_> = [first, second]
        .into_iter()
        .map(|path| {
            let path = cpath(path);
            std::thread::spawn(move || {
                in_child(move || {
                    let fd = open_rw(&path);
                    for _ in 0..rounds {
                        if fcntl_lock(fd, libc::F_SETLKW, &mut flock_struct(libc::F_WRLCK, 0, 0)) != 0 {
                            return vec![-1];
                        }
                        let mut bytes = [0u8; 8];
                        // SAFETY: our own buffer and descriptor.
                        if unsafe { libc::pread(fd, bytes.as_mut_ptr().cast(), 8, 0) } != 8 {
                            return vec![-2];
                        }
                        // Long enough inside the lock that, without it, the two
                        // processes' increments would interleave and some be lost.
                        let pause = libc::timespec {
                            tv_sec: 0,
                            tv_nsec: 500_000,
                        };
                        // SAFETY: nanosleep with a valid timespec.
                        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
                        let next = (i64::from_le_bytes(bytes) + 1).to_le_bytes();
                        // SAFETY: as above.
                        if unsafe { libc::pwrite(fd, next.as_ptr().cast(), 8, 0) } != 8 {
                            return vec![-3];
                        }
                        if fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_UNLCK, 0, 0)) != 0 {
                            return vec![-4];
                        }
                    }
                    vec![0]
                })
            })
        })
        .collect();
    for child in children {
        assert_eq!(child.join().unwrap(), vec![0], "a child failed a step");
    }
    i64::from_le_bytes(std::fs::read(first).unwrap()[..8].try_into().unwrap())
}

/// Regression: locks were per mount, so writers coordinating through them on two
/// mounts (SQLite) overwrote each other; and a lock taken must also show what the last
/// holder wrote through the other mount, not pages this kernel cached before.
#[test]
fn a_counter_under_fcntl_locks_through_two_mounts_loses_no_increment() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    let local = tempfile::tempdir().unwrap();
    let rounds = 150;
    let path: PathBuf = local.path().join("counter");
    assert_eq!(counter_steps(&path, &path, rounds), 2 * rounds);
    assert_eq!(
        counter_steps(&a.join("counter"), &b.join("counter"), rounds),
        2 * rounds
    );
}

/// A lock holder killed with SIGKILL loses its lock (its descriptors close), and a
/// process on the other mount then gets it.
#[test]
fn a_killed_holders_lock_goes_with_it() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    std::fs::write(a.join("f"), b"x").unwrap();
    // flock(1) runs `sleep` as its child with the lock's descriptor: both are killed.
    end_holder(hold_with_flock(&a.join("f"), &b.join("f"), "60"));
    let status = flock_cmd(&["-w", "20"], &b.join("f"))
        .arg("true")
        .status()
        .unwrap();
    assert!(status.success(), "the lock of a killed holder stayed");
}

/// Regression (SQLite across two mounts: "disk I/O error" at commit): a lock taken
/// makes the kernel forget the names it cached beside the file, so a file another
/// client removed (a journal the last lock holder deleted) is not still seen as there.
#[test]
fn taking_a_lock_shows_files_beside_it_as_they_are_now() {
    let cluster = TestCluster::start();
    // Names kept by the kernel for 30 s: only the lock makes it look again.
    let a = Mount::with_args(&cluster, &["--attr-timeout-ms", "30000"]);
    let b = Mount::new(&cluster);
    std::fs::write(a.join("db"), b"data").unwrap();
    std::fs::write(a.join("db-journal"), b"journal").unwrap();
    assert!(a.join("db-journal").exists());
    std::fs::remove_file(b.join("db-journal")).unwrap();
    std::fs::write(b.join("db-new"), b"new").unwrap();
    let fd = open_rw(&cpath(&a.join("db")));
    assert!(fd >= 0);
    assert_eq!(
        fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_RDLCK, 0, 0)),
        0
    );
    let gone = std::fs::metadata(a.join("db-journal")).map(|_| ()).unwrap_err();
    assert_eq!(
        gone.kind(),
        std::io::ErrorKind::NotFound,
        "a removed name still seen after the lock"
    );
    assert_eq!(std::fs::read(a.join("db-new")).unwrap(), b"new");
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
}

/// A process killed while it waits for a lock (flock without -n) ends at once, not
/// when the holder lets go: the kernel keeps it until the daemon answers, and the
/// daemon answers once it sees SIGKILL pending.
#[test]
fn a_waiter_killed_while_waiting_ends_before_the_lock_is_free() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    std::fs::write(a.join("f"), b"x").unwrap();
    let holder = hold_with_flock(&a.join("f"), &b.join("f"), "30");
    let mut waiter = flock_cmd(&[], &b.join("f")).arg("true").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(waiter.try_wait().unwrap().is_none(), "the waiter did not wait");
    waiter.kill().unwrap();
    let killed = Instant::now();
    while waiter.try_wait().unwrap().is_none() {
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "a killed waiter stayed until its lock was free"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    end_holder(holder);
}

/// A waiting lock ends with EINTR when its thread gets a signal it catches, as a local
/// one does: `flock -w 1` (a timer's SIGALRM) gives up after its timeout, and F_SETLKW
/// with alarm() set fails with EINTR. They waited until the holder let go before.
#[test]
fn a_caught_signal_ends_a_waiting_lock() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    std::fs::write(a.join("f"), b"x").unwrap();
    std::fs::write(a.join("g"), [0u8; 100]).unwrap();
    let flocked = hold_with_flock(&a.join("f"), &b.join("f"), "60");
    let holder = Holder::start(&a.join("g"));
    assert_eq!(holder.step(b'l'), 0);

    let mut waiter = flock_cmd(&["-w", "1"], &b.join("f")).arg("true").spawn().unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = waiter.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = waiter.kill();
            let _ = waiter.wait();
            end_holder(flocked);
            panic!("flock -w 1 still waited after 20 s: its timer's signal did not end the wait");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    end_holder(flocked);
    // flock(1)'s status for a timeout.
    assert_eq!(status.code(), Some(1), "flock -w 1 of a held file: {status}");

    let path = cpath(&b.join("g"));
    let got = in_child(move || {
        extern "C" fn on_alarm(_: libc::c_int) {}
        let fd = open_rw(&path);
        // SAFETY: a zeroed sigaction with a handler and no flags (no SA_RESTART), and
        // alarm: both async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_alarm as extern "C" fn(libc::c_int) as usize;
            libc::sigaction(libc::SIGALRM, &action, std::ptr::null_mut());
            libc::alarm(1);
        }
        let waited = fcntl_lock(fd, libc::F_SETLKW, &mut flock_struct(libc::F_WRLCK, 0, 10));
        vec![waited as i64]
    });
    assert_eq!(
        got,
        vec![libc::EINTR as i64],
        "F_SETLKW of a held range with an alarm set (EINTR is {})",
        libc::EINTR
    );
    // The holder kept its lock.
    assert_eq!(contend(&b.join("g"))[0], libc::EAGAIN as i64);
    drop(holder);
}

/// A child process that opens one file itself (so that no process the test starts
/// later inherits its descriptor: closing a copy of it, as an exec does, would wait
/// for a stopped mount daemon) and does what it is told, one byte a step.
struct Holder {
    pid: i32,
    ask: i32,
    answer: i32,
}

impl Holder {
    /// Steps: `l` exclusive F_SETLK of bytes 0..10, `u` their F_UNLCK, `w` a one-byte
    /// pwrite, `s` fsync, `c` close; each answers 0 or the errno. Any other byte ends
    /// the child (a pipe's end is no signal: other tests' children hold copies of it).
    fn start(path: &Path) -> Holder {
        let path = cpath(path);
        let (mut asks, mut answers) = ([0i32; 2], [0i32; 2]);
        // SAFETY: two pipes into arrays of two.
        assert_eq!(unsafe { libc::pipe(asks.as_mut_ptr()) }, 0);
        assert_eq!(unsafe { libc::pipe(answers.as_mut_ptr()) }, 0);
        // SAFETY: the child makes only async-signal-safe calls and ends with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let fd = open_rw(&path);
            let mut step = [0u8; 1];
            // SAFETY: our own descriptors and buffers; _exit leaves without unwinding.
            unsafe {
                libc::close(asks[1]);
                libc::close(answers[0]);
                while libc::read(asks[0], step.as_mut_ptr().cast(), 1) == 1 {
                    let done = match step[0] {
                        b'l' => libc::fcntl(fd, libc::F_SETLK, &flock_struct(libc::F_WRLCK, 0, 10)),
                        b'u' => libc::fcntl(fd, libc::F_SETLK, &flock_struct(libc::F_UNLCK, 0, 10)),
                        b'w' => libc::pwrite(fd, b"x".as_ptr().cast(), 1, 0) as i32 - 1,
                        b's' => libc::fsync(fd),
                        b'c' => libc::close(fd),
                        _ => libc::_exit(0),
                    };
                    let result: i64 = if done == 0 {
                        0
                    } else {
                        *libc::__errno_location() as i64
                    };
                    libc::write(answers[1], result.to_le_bytes().as_ptr().cast(), 8);
                }
                libc::_exit(0);
            }
        }
        // SAFETY: closing the child's ends.
        unsafe {
            libc::close(asks[0]);
            libc::close(answers[1]);
        }
        Holder {
            pid,
            ask: asks[1],
            answer: answers[0],
        }
    }

    fn step(&self, step: u8) -> i64 {
        let mut result = [0u8; 8];
        // SAFETY: our own pipe ends and buffers.
        unsafe {
            assert_eq!(libc::write(self.ask, [step].as_ptr().cast(), 1), 1);
            assert_eq!(libc::read(self.answer, result.as_mut_ptr().cast(), 8), 8);
        }
        i64::from_le_bytes(result)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let mut status = 0;
        // SAFETY: telling our child to end, waiting for it; closing our pipe ends.
        unsafe {
            libc::write(self.ask, b"q".as_ptr().cast(), 1);
            libc::close(self.ask);
            libc::close(self.answer);
            libc::waitpid(self.pid, &mut status, 0);
        }
    }
}

/// A cluster whose manager's grace after a restart is `grace`.
fn cluster_with_grace(grace: Duration) -> TestCluster {
    TestCluster::start_with(&ClusterOptions {
        extra: vec!["--lock-grace-ms".into(), grace.as_millis().to_string()],
        ..Default::default()
    })
}

/// Two mounts of a cluster whose manager's grace is `grace`, and a process holding an
/// exclusive lock of bytes 0..10 of `db` through the first. Fields drop in order: the
/// holder before the mounts, the mounts before the cluster.
struct Held {
    holder: Holder,
    b: Mount,
    a: Mount,
    cluster: TestCluster,
}

fn held_with_grace(grace: Duration) -> Held {
    let cluster = cluster_with_grace(grace);
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    std::fs::write(a.join("db"), [0u8; 100]).unwrap();
    let holder = Holder::start(&a.join("db"));
    assert_eq!(holder.step(b'l'), 0);
    Held {
        holder,
        b,
        a,
        cluster,
    }
}

/// Through `path` (another mount's), in a child process: F_SETLK of an exclusive lock
/// of bytes 5..6, then F_GETLK of the whole file: [setlk's errno, getlk's errno, type,
/// start, len, pid].
fn contend(path: &Path) -> Vec<i64> {
    let path = cpath(path);
    in_child(move || {
        let fd = open_rw(&path);
        let refused = fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_WRLCK, 5, 1)) as i64;
        let mut probe = flock_struct(libc::F_WRLCK, 0, 0);
        let tested = fcntl_lock(fd, libc::F_GETLK, &mut probe) as i64;
        vec![
            refused,
            tested,
            probe.l_type as i64,
            probe.l_start,
            probe.l_len,
            probe.l_pid as i64,
        ]
    })
}

/// Regression (silent loss of exclusion): a manager restart dropped every lock without
/// telling the holders, so a process on another mount was granted a lock a process on
/// the first still held and wrote under (two SQLite writers then corrupt their
/// database). Now mount A reclaims its lock during the restarted manager's grace: B
/// is refused during the grace and after it, F_GETLK names A's process, and B gets A's
/// range once A unlocks.
///
/// Regression (every first lock waited the whole grace): A, the one mount recorded as
/// holding locks, says its reclaims are complete, which ends the grace then: a lock on
/// other bytes is granted seconds after the restart, not after the grace's 60 s.
#[test]
fn a_lock_held_across_a_manager_restart_is_reclaimed_and_ends_the_grace_early() {
    let grace = Duration::from_secs(60);
    let Held {
        holder,
        b,
        a,
        cluster,
    } = &held_with_grace(grace);
    let refused_as_held = vec![
        libc::EAGAIN as i64,
        0,
        libc::F_WRLCK as i64,
        0,
        10,
        holder.pid as i64,
    ];
    cluster.kill9(0);
    cluster.restart();
    let restarted = Instant::now();
    // A reclaims (within about a second): B is refused, and F_GETLK names A's process.
    assert_eq!(contend(&b.join("db")), refused_as_held, "right after the restart");
    // A lock on other bytes: granted once A said its reclaims are complete.
    assert_eq!(lock_beside(&b.join("db")), 0);
    let waited = restarted.elapsed();
    eprintln!("first lock after the restart granted {waited:?} after `weft up` returned (grace {grace:?})");
    assert!(
        waited < grace / 2,
        "a lock beside the reclaimed one waited {waited:?} (grace {grace:?}): the grace did not end at A's reclaim-complete"
    );
    // Still A's.
    assert_eq!(contend(&b.join("db")), refused_as_held, "after the grace");
    assert!(
        a.log_text().contains("reclaimed 1 of 1 locks"),
        "mount A's log:\n{}",
        a.log_text()
    );
    let log = std::fs::read_to_string(cluster.home().join("logs/server-0.log")).unwrap();
    assert!(
        log.contains("every mount that held file locks has reclaimed them"),
        "manager's log:\n{log}"
    );
    // A lets go: B gets it.
    assert_eq!(holder.step(b'u'), 0);
    let seen = contend(&b.join("db"));
    assert_eq!(seen[0], 0, "B's lock after A's unlock: {seen:?}");
}

/// Regression (every first lock waited the whole grace): after a kill -9 of a manager
/// no mount ever held a lock on, its restart gave the whole grace all the same. Its record
/// of lock-holding mounts is empty, so a first lock is granted at once.
#[test]
fn a_crash_with_no_lock_ever_taken_costs_the_first_lock_no_grace() {
    let grace = Duration::from_secs(60);
    let cluster = cluster_with_grace(grace);
    let b = Mount::new(&cluster);
    std::fs::write(b.join("db"), [0u8; 100]).unwrap();
    cluster.kill9(0);
    cluster.restart();
    let restarted = Instant::now();
    assert_eq!(lock_beside(&b.join("db")), 0);
    let waited = restarted.elapsed();
    eprintln!("first lock after the restart granted {waited:?} after `weft up` returned (grace {grace:?})");
    assert!(
        waited < grace / 2,
        "the first lock after a crash with no lock ever held waited {waited:?} (grace {grace:?})"
    );
}

/// Regression (a crash soon after a mount that used locks unmounted waited the whole
/// grace): the manager kept that mount in its record of lock holders for 30 s after its
/// last lock, and it could not say "complete" any more. Its unmount now ends its
/// session, so a first lock after the restart is granted at once.
#[test]
fn a_mount_unmounted_just_before_a_crash_is_not_waited_for() {
    let grace = Duration::from_secs(60);
    let cluster = cluster_with_grace(grace);
    let b = Mount::new(&cluster);
    {
        let a = Mount::new(&cluster);
        std::fs::write(a.join("db"), [0u8; 100]).unwrap();
        // A lock through A (it goes with the child): A's session is recorded.
        assert_eq!(lock_beside(&a.join("db")), 0);
    }
    cluster.kill9(0);
    cluster.restart();
    let restarted = Instant::now();
    assert_eq!(lock_beside(&b.join("db")), 0);
    let waited = restarted.elapsed();
    assert!(
        waited < grace / 2,
        "the first lock after a crash that followed mount A's unmount waited {waited:?} (grace {grace:?})"
    );
}

/// Safety of the early end: mount A, recorded as holding a lock, is stopped across the
/// restart and so cannot reclaim or say it is done: B's lock (on other bytes) waits
/// for the whole grace, as A might have held those bytes.
#[test]
fn a_holder_that_cannot_reclaim_keeps_the_whole_grace() {
    let grace = Duration::from_secs(5);
    let Held {
        holder: _holder,
        b,
        a,
        cluster,
    } = &held_with_grace(grace);
    let stopped = Stopped::new(a.pid() as i32);
    cluster.kill9(0);
    // The grace starts after this, so B's lock can come no sooner than `grace` from here.
    let restarting = Instant::now();
    cluster.restart();
    assert_eq!(lock_beside(&b.join("db")), 0);
    let waited = restarting.elapsed();
    drop(stopped);
    assert!(
        waited >= grace,
        "B's lock was granted {waited:?} after the restart began, inside the grace (A never reclaimed)"
    );
}

/// A process stopped (SIGSTOP) until this drops (SIGCONT).
struct Stopped(i32);

impl Stopped {
    fn new(pid: i32) -> Stopped {
        // SAFETY: stopping a process this test started.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: resuming a process this test started.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// Regression (silent loss of exclusion): a mount that could not reclaim its lock in
/// time (its daemon stopped past the restarted manager's grace) let its holder go on
/// writing while another mount's process held the lock. Now the holder's next write,
/// its fsync and its close fail with EIO, and the mount logs the lost lock; a new
/// descriptor of the file works.
#[test]
fn a_lock_lost_to_a_late_reclaim_fails_its_holders_io_with_eio() {
    let grace = Duration::from_secs(2);
    let Held {
        holder,
        b,
        a,
        cluster,
    } = &held_with_grace(grace);
    let daemon = a.pid() as i32;
    // SAFETY: stopping (and below resuming) the mount daemon this test started.
    unsafe { libc::kill(daemon, libc::SIGSTOP) };
    cluster.kill9(0);
    cluster.restart();
    std::thread::sleep(grace + Duration::from_secs(1));
    // A never reclaimed: B is granted the lock A's process believes it holds.
    let other = cpath(&b.join("db"));
    let taken = in_child(move || {
        let fd = open_rw(&other);
        vec![fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_WRLCK, 0, 10)) as i64]
    });
    // SAFETY: as above.
    unsafe { libc::kill(daemon, libc::SIGCONT) };
    assert_eq!(taken, vec![0], "B's lock after the grace");
    let eio = libc::EIO as i64;
    assert_eq!(holder.step(b'w'), eio, "A's write under its lost lock");
    assert_eq!(holder.step(b's'), eio, "A's fsync under its lost lock");
    assert_eq!(holder.step(b'c'), eio, "A's close under its lost lock");
    assert!(
        a.log_text().contains("LOST LOCK"),
        "mount A's log:\n{}",
        a.log_text()
    );
    // A descriptor opened after the loss is not affected.
    std::fs::write(a.join("db"), b"after").unwrap();
    assert_eq!(std::fs::read(b.join("db")).unwrap(), b"after");
}

/// Regression (silent loss of exclusion without any restart): a mount that did not
/// renew its session within the manager's lease (its daemon stopped; a 2 s lease here,
/// 60 s by default) has its locks dropped, and another process takes them. The holder
/// went on writing as if it held the lock, since the manager it came back to was the
/// same incarnation. Now the manager tells the mount, and the holder's write, fsync and
/// close fail with EIO; the mount logs the lost lock and can lock again afterwards.
#[test]
fn a_mount_whose_session_lapsed_loses_its_locks_visibly() {
    let lease = Duration::from_secs(2);
    let cluster = TestCluster::start_with_env(
        &ClusterOptions::default(),
        &[("WEFT_SESSION_LEASE_MS", &lease.as_millis().to_string())],
    );
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    std::fs::write(a.join("db"), [0u8; 100]).unwrap();
    let holder = Holder::start(&a.join("db"));
    assert_eq!(holder.step(b'l'), 0);
    let other = Holder::start(&b.join("db"));
    assert_eq!(other.step(b'l'), libc::EAGAIN as i64, "B's lock while A holds it");

    let stopped = Stopped::new(a.pid() as i32);
    let stopped_at = Instant::now();
    let deadline = Instant::now() + lease * 10;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        match other.step(b'l') {
            0 => break,
            e if e == libc::EAGAIN as i64 && Instant::now() < deadline => continue,
            e => panic!("B's lock after A's session lapsed: errno {e}"),
        }
    }
    // As long as a real lapse takes at least (60 s): longer than the mount waits before
    // it asks the manager again from an I/O path (weft-fuse's LOCKS_UNCONFIRMED_MAX, 3 s).
    std::thread::sleep((stopped_at + Duration::from_millis(4500)).saturating_duration_since(Instant::now()));
    drop(stopped);

    let eio = libc::EIO as i64;
    assert_eq!(holder.step(b'w'), eio, "A's write under its lapsed lock");
    assert_eq!(holder.step(b's'), eio, "A's fsync under its lapsed lock");
    assert_eq!(holder.step(b'c'), eio, "A's close under its lapsed lock");
    assert!(
        a.log_text().contains("LOST LOCK"),
        "mount A's log:\n{}",
        a.log_text()
    );
    // B still holds its lock; once B lets go, A's mount locks again.
    assert_eq!(lock_beside(&a.join("db")), 0, "a lock beside B's through A");
    assert_eq!(
        contend(&a.join("db"))[0],
        libc::EAGAIN as i64,
        "A against B's lock"
    );
    assert_eq!(other.step(b'u'), 0);
    assert_eq!(contend(&a.join("db"))[0], 0, "A after B's unlock");
}

/// A mount the manager has not answered for most of its session lease stops doing I/O
/// under its locks (EIO), as an NFS client does at its lease's end: past the lease the
/// manager may drop them and grant them to another process, and a mount cut off from
/// the manager but not from the io servers would write on under them. Here the manager
/// is stopped for longer than 5/6 of a 3 s lease; the holder's write used to succeed.
#[test]
fn io_under_locks_the_manager_has_not_confirmed_for_most_of_the_lease_fails() {
    let lease = "3000";
    let cluster =
        TestCluster::start_with_env(&ClusterOptions::default(), &[("WEFT_SESSION_LEASE_MS", lease)]);
    let a = Mount::with_env(
        &cluster,
        &[],
        &[("WEFT_SESSION_LEASE_MS", lease), ("WEFT_TIMEOUT_MS", "1000")],
    );
    std::fs::write(a.join("db"), [0u8; 100]).unwrap();
    let holder = Holder::start(&a.join("db"));
    assert_eq!(holder.step(b'l'), 0);
    assert_eq!(holder.step(b'w'), 0, "A's write under its lock");
    let manager = Stopped::new(cluster.pid(0).expect("the manager runs"));
    std::thread::sleep(Duration::from_millis(3500));
    let written = holder.step(b'w');
    drop(manager);
    assert_eq!(
        written,
        libc::EIO as i64,
        "A's write, the manager silent for 3.5 s of a 3 s lease"
    );
    assert!(
        a.log_text().contains("refused (EIO)"),
        "mount A's log:\n{}",
        a.log_text()
    );
    drop(holder);
}

/// F_SETLK of bytes 50..51 of `path` in a child process: its errno (the lock goes with
/// the child).
fn lock_beside(path: &Path) -> i64 {
    let path = cpath(path);
    in_child(move || {
        let fd = open_rw(&path);
        vec![fcntl_lock(fd, libc::F_SETLK, &mut flock_struct(libc::F_WRLCK, 50, 1)) as i64]
    })[0]
}

/// A clean stop (`weft down`) with a lock held gives the next start its grace, and the
/// holder keeps its lock; a clean stop with no lock held is recorded, so the next start
/// grants locks at once instead of making every first lock wait out the grace.
#[test]
fn a_clean_stop_with_no_lock_held_spares_the_next_start_its_grace() {
    let grace = Duration::from_secs(5);
    let Held {
        holder,
        b,
        a: _a,
        cluster,
    } = &held_with_grace(grace);
    let stop_and_start = || {
        let down = cluster.weft(&["down"]);
        assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
        cluster.restart();
        Instant::now()
    };
    stop_and_start();
    let seen = contend(&b.join("db"));
    assert_eq!(
        seen[0],
        libc::EAGAIN as i64,
        "A's lock after a clean stop: {seen:?}"
    );
    assert_eq!(lock_beside(&b.join("db")), 0);
    assert_eq!(holder.step(b'u'), 0);
    let restarted = stop_and_start();
    assert_eq!(lock_beside(&b.join("db")), 0);
    let waited = restarted.elapsed();
    assert!(
        waited < grace / 2,
        "with no lock held at the stop, the first lock waited {waited:?} (a grace of {grace:?} after a clean stop)"
    );
}

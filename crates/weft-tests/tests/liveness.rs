//! A stopped (or hung) server is found out within seconds, not at the request timeout
//! (a minute by default): a connection silent for 2 s with calls waiting has its server
//! probed with a fresh connection's first handshake step, which the server's event loop
//! answers at once whatever its workers do; no answer to that probe nor to a second
//! one, each within the probe's wait, fails the calls, naming the server. A new
//! connection's handshake waits 10 s at most. Before, `ls -l`, `stat`, `cat` and `df`
//! each froze 61 s on a SIGSTOPped io server.
//!
//! Its own test binary: it sets `WEFT_PROBE_WAIT_MS` for this process and keeps the
//! default request timeout, which other test binaries shorten.

mod common;

use std::sync::Once;
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError};
use weft_testkit::TestCluster;

/// A failing call's bound: 2 s of silence, the probe's 2 s, a busy machine's slack;
/// far below the 60 s request timeout.
const BOUND: Duration = Duration::from_secs(20);

fn init() -> TestCluster {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        std::env::remove_var("WEFT_TIMEOUT_MS");
        std::env::set_var("WEFT_PROBE_WAIT_MS", "2000");
    });
    TestCluster::start()
}

#[track_caller]
fn fails_within<T>(
    what: &str,
    limit: Duration,
    call: impl FnOnce() -> Result<T, ClientError>,
) -> ClientError {
    let started = Instant::now();
    let result = call();
    let took = started.elapsed();
    let error = match result {
        Ok(_) => panic!("{what}: succeeded although the server is stopped"),
        Err(e) => e,
    };
    eprintln!("{what}: failed after {} ms: {error}", took.as_millis());
    assert!(
        took <= limit,
        "{what}: took {took:?}, more than {limit:?}: {error}"
    );
    error
}

#[test]
fn a_stopped_io_server_fails_calls_within_seconds_and_serves_again_when_resumed() {
    let cluster = init();
    let client = cluster.client();
    let file = client.create("/f", &Default::default()).unwrap();
    assert_eq!(file.layout().servers.len(), 4);
    file.write_at(0, &common::pattern(1, 0, 1 << 20)).unwrap();
    file.sync().unwrap();
    let stopped = cluster.addr(2);
    common::hang(&cluster, 2);

    // On connections made before it stopped.
    let mut buf = vec![0u8; 1 << 20];
    let read = fails_within("read", BOUND, || file.read_at(0, &mut buf));
    let write = fails_within("large write", BOUND, || {
        file.write_at(0, &common::pattern(2, 0, 8 << 20))
    });
    // On a new client: its handshake with the stopped server.
    let stat = fails_within("stat from a new client", BOUND, || {
        Client::connect_with(&cluster.meta_addr(), cluster.auth())?.stat("/f")
    });
    for error in [&read, &write, &stat] {
        assert!(
            error.to_string().contains(&stopped),
            "{error} does not name {stopped}"
        );
    }
    assert!(read.to_string().contains("does not answer"), "{read}");

    // A program through the command line, with its default timeouts.
    let started = Instant::now();
    let out = cluster.command("weft").args(["cat", "/f"]).output().unwrap();
    assert!(
        !out.status.success(),
        "weft cat succeeded with a stopped io server"
    );
    assert!(
        started.elapsed() <= BOUND,
        "weft cat took {:?}",
        started.elapsed()
    );

    cluster.signal(2, libc::SIGCONT);
    // The same handle works again once the server runs.
    let data = common::pattern(3, 0, 2 << 20);
    common::wait_for("the resumed server to answer", Duration::from_secs(10), || {
        file.write_at(0, &data).ok()
    });
    file.sync().unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "data after resuming differs");
}

/// A server that answers the probe in time (here: stopped for a moment only) is not
/// taken for a stopped one: the call waits on and succeeds.
#[test]
fn a_server_resumed_within_the_probes_wait_is_waited_for() {
    // Shorter than the probe's silence plus its wait.
    a_call_succeeds_with_the_manager_stopped_for(Duration::from_millis(2500), "the probe's");
}

/// A server that misses the first probe's wait but answers a second probe (a machine
/// so loaded that nothing of the server ran for one wait, as on a busy 2-core CI
/// machine) is not taken for a stopped one either: the call waits on and succeeds.
/// Stopped for 5 s here: past the 2 s silence and the first 2 s probe, within the
/// second.
#[test]
fn a_server_that_answers_only_the_second_probe_is_waited_for() {
    a_call_succeeds_with_the_manager_stopped_for(Duration::from_millis(5000), "the second probe's");
}

/// A server on this machine that answers neither probe but whose process runs (here:
/// frozen by the cgroup freezer, in uninterruptible sleep as a process waiting for its
/// disk is; on a 2-core CI machine an io server waited that long for an fsync behind
/// other tests' gigabytes) is busy, not hung: the call waits on and succeeds. Frozen
/// 7 s: past the 2 s silence and both 2 s probes.
#[test]
fn a_local_server_that_runs_but_answers_no_probe_is_waited_for() {
    let cluster = init();
    let client = cluster.client();
    client.mkdir("/d", 0o755).unwrap();
    let frozen = Frozen::new(cluster.pid(0).unwrap());
    let thawer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(7000));
        drop(frozen);
    });
    let started = Instant::now();
    let made = client.mkdir("/d/e", 0o755);
    thawer.join().unwrap();
    assert!(
        made.is_ok(),
        "a call to a frozen (running) server failed: {made:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(6500));
}

/// A process frozen by the cgroup freezer (v1 `freezer.state`, else v2 `cgroup.freeze`)
/// until this drops: it then runs again, back in its cgroup's root.
struct Frozen {
    pid: i32,
    dir: std::path::PathBuf,
    v1: bool,
}

impl Frozen {
    fn new(pid: i32) -> Frozen {
        let v1 = std::path::Path::new("/sys/fs/cgroup/freezer").is_dir();
        let root = if v1 {
            "/sys/fs/cgroup/freezer"
        } else {
            "/sys/fs/cgroup"
        };
        let dir = std::path::Path::new(root).join(format!("weft-liveness-{}", std::process::id()));
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("making the freezer cgroup {}: {e}", dir.display()));
        let frozen = Frozen { pid, dir, v1 };
        std::fs::write(frozen.dir.join("cgroup.procs"), pid.to_string()).unwrap();
        frozen.set(true);
        // Frozen once /proc says so: uninterruptible sleep, not stopped.
        common::wait_for("the server to freeze", Duration::from_secs(10), || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('D'))
                })
                .then_some(())
        });
        frozen
    }

    fn set(&self, frozen: bool) {
        let (file, value) = match (self.v1, frozen) {
            (true, true) => ("freezer.state", "FROZEN"),
            (true, false) => ("freezer.state", "THAWED"),
            (false, true) => ("cgroup.freeze", "1"),
            (false, false) => ("cgroup.freeze", "0"),
        };
        std::fs::write(self.dir.join(file), value).unwrap_or_else(|e| panic!("{file} <- {value}: {e}"));
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.set(false);
        let root = self.dir.parent().unwrap().join("cgroup.procs");
        let _ = std::fs::write(root, self.pid.to_string());
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Stops the manager, resumes it after `stopped`, and checks that a call made
/// meanwhile waited for it and succeeded.
fn a_call_succeeds_with_the_manager_stopped_for(stopped: Duration, wait: &str) {
    let cluster = init();
    let client = cluster.client();
    client.mkdir("/d", 0o755).unwrap();
    common::hang(&cluster, 0);
    let resumer = std::thread::spawn({
        let pid = cluster.pid(0).unwrap();
        move || {
            std::thread::sleep(stopped);
            // SAFETY: a signal to a process this test started.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    });
    let started = Instant::now();
    let made = client.mkdir("/d/e", 0o755);
    resumer.join().unwrap();
    assert!(
        made.is_ok(),
        "a call to a server resumed within {wait} wait failed: {made:?}"
    );
    assert!(started.elapsed() >= stopped - Duration::from_millis(500));
}

/// Runs `command` (a program reading `path` through the mount while an io server is
/// stopped), checks it is still waiting after a moment, sends it `signal` and returns
/// how it ended and how long after the signal.
fn signalled_while_waiting(
    mut command: std::process::Command,
    signal: i32,
) -> (std::process::ExitStatus, Duration) {
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the reader did not wait for the stopped io server"
    );
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(child.id() as i32, signal) };
    let signalled = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, signalled.elapsed());
        }
        assert!(
            signalled.elapsed() < BOUND,
            "the reader did not end within {BOUND:?} of the signal"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_call_through_the_mount_waiting_for_a_stopped_server_ends_at_a_signal() {
    use std::os::unix::process::ExitStatusExt;
    let cluster = init();
    let client = cluster.client();
    let tied = weft_testkit::TiedDir::new("weft-liveness-");
    let mount = weft_testkit::WeftMount::start(&cluster, &tied, "mnt");
    for name in ["/a", "/b"] {
        let file = client.create(name, &Default::default()).unwrap();
        file.write_at(0, &common::pattern(4, 0, 1 << 20)).unwrap();
        file.sync().unwrap();
    }
    common::hang(&cluster, 2);
    // Far below the stopped server's detection (2 s of silence and a 2 s probe).
    let prompt = Duration::from_millis(1500);

    // A fatal signal (SIGTERM, default action): the process ends.
    let mut cat = std::process::Command::new("cat");
    cat.arg(mount.path().join("a"));
    let (status, took) = signalled_while_waiting(cat, libc::SIGTERM);
    eprintln!("cat ended {} ms after SIGTERM: {status}", took.as_millis());
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status}");
    assert!(took < prompt, "cat ended {took:?} after SIGTERM");

    // A caught signal: the call returns EINTR and the handler runs.
    let mut python = std::process::Command::new("python3");
    python.args([
        "-c",
        "import signal, sys\n\
         def caught(*_):\n    raise SystemExit(7)\n\
         signal.signal(signal.SIGUSR1, caught)\n\
         open(sys.argv[1], 'rb').read()\n",
    ]);
    python.arg(mount.path().join("b"));
    let (status, took) = signalled_while_waiting(python, libc::SIGUSR1);
    eprintln!("python ended {} ms after SIGUSR1: {status}", took.as_millis());
    assert_eq!(status.code(), Some(7), "{status}");
    assert!(took < prompt, "python ended {took:?} after SIGUSR1");

    cluster.signal(2, libc::SIGCONT);
    let back = std::fs::read(mount.path().join("a")).unwrap();
    assert!(
        back == common::pattern(4, 0, 1 << 20),
        "the file after resuming differs"
    );
}

//! A killed test leaves no servers behind: a helper process (this program, re-run with
//! `HELPER_ENV` set) starts a TestCluster from a thread that then ends, restarts one of
//! its servers, stops another (SIGSTOP), records every server's pid, and waits; the test SIGKILLs it (as a CI
//! timeout or `pkill` would: no Drop runs) and every weftd it started must be gone
//! within seconds. Before the parent-death guard they ran on for good (weft up detaches
//! them). A second helper starts a weftd itself, as weft-tests' launch.rs and
//! hostile_peers.rs do, through a TiedDir: it must end the same way, its directory
//! removed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_testkit::{ClusterOptions, TestCluster};

const HELPER_ENV: &str = "WEFT_TESTKIT_KILLED_HELPER";
/// Set (to anything) for the helper that starts its weftd itself.
const DIRECT_ENV: &str = "WEFT_TESTKIT_KILLED_DIRECT";

fn main() {
    match std::env::var_os(HELPER_ENV) {
        Some(record) if std::env::var_os(DIRECT_ENV).is_some() => direct_helper(Path::new(&record)),
        Some(record) => helper(Path::new(&record)),
        None => {
            servers_end_when_the_test_process_is_killed();
            println!("test servers_end_when_the_test_process_is_killed ... ok");
            a_server_the_test_started_itself_ends_when_the_test_process_is_killed();
            println!("test a_server_the_test_started_itself_ends_when_the_test_process_is_killed ... ok");
        }
    }
}

/// Writes the home and pids to `record` in one rename, then waits to be killed.
fn record_and_park(record: &Path, home: &Path, pids: &[i32]) -> ! {
    let mut text = format!("{}\n", home.display());
    for pid in pids {
        text.push_str(&format!("{pid}\n"));
    }
    let partial = record.with_extension("partial");
    std::fs::write(&partial, text).unwrap();
    std::fs::rename(&partial, record).unwrap();
    loop {
        std::thread::park();
    }
}

/// The second helper: a standalone io server started with `Command` in a TiedDir (as
/// hostile_peers.rs starts its one), from a thread that then ends.
fn direct_helper(record: &Path) -> ! {
    let (dir, child) = std::thread::spawn(|| {
        let dir = weft_testkit::TiedDir::new("weft-killed-direct-");
        let key = dir.path().join("cluster.key");
        let made = Command::new(weft_testkit::bin("weft"))
            .args(["key", "create"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        let ready = dir.path().join("ready");
        let child = dir.spawn(
            dir.weftd()
                .args(["--role", "io", "--id", "1", "--listen", "127.0.0.1:0"])
                .arg("--data")
                .arg(dir.path().join("data"))
                .arg("--key")
                .arg(&key)
                .arg("--ready-file")
                .arg(&ready)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready.exists() {
            assert!(Instant::now() < deadline, "weftd did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        (dir, child)
    })
    .join()
    .expect("starting the server");
    record_and_park(record, dir.path(), &[child.id() as i32])
}

/// The helper: a cluster with a cache manager (a role that writes back at its end),
/// started by a thread that ends before the kill, one server restarted (a second
/// `weft up`), one stopped, the pids and home written to `record` in one rename.
fn helper(record: &Path) -> ! {
    let cluster = std::thread::spawn(|| TestCluster::start_with(&ClusterOptions::cached("1", "16M")))
        .join()
        .expect("starting the cluster");
    cluster.kill9(2);
    cluster.restart();
    // A hung server (as the server_down tests make one): it reads nothing while stopped.
    cluster.signal(3, libc::SIGSTOP);
    let ids: Vec<u32> = cluster.config().servers.iter().map(|s| s.id).collect();
    let pids: Vec<i32> = ids
        .iter()
        .map(|&id| {
            cluster
                .pid(id)
                .unwrap_or_else(|| panic!("server {id} not running"))
        })
        .collect();
    record_and_park(record, cluster.home(), &pids)
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence.
    let exists = unsafe { libc::kill(pid, 0) == 0 };
    exists
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
}

fn servers_end_when_the_test_process_is_killed() {
    let (home, pids) = run_and_kill_helper(false);
    assert_eq!(
        pids.len(),
        6,
        "a manager, 4 io servers and a cache manager: {pids:?}"
    );
    assert_all_gone(&home, &pids);
}

fn a_server_the_test_started_itself_ends_when_the_test_process_is_killed() {
    let (home, pids) = run_and_kill_helper(true);
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert_all_gone(&home, &pids);
}

/// Runs a helper (`direct`: the one starting its weftd itself), SIGKILLs it once it
/// recorded its servers, and returns its home and their pids.
fn run_and_kill_helper(direct: bool) -> (PathBuf, Vec<i32>) {
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("servers");
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.env(HELPER_ENV, &record).stdin(Stdio::null());
    if direct {
        command.env(DIRECT_ENV, "1");
    }
    let mut helper = Helper(command.spawn().expect("starting the helper"));
    let helper = &mut helper.0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !record.exists() {
        if let Some(status) = helper.try_wait().unwrap() {
            panic!("the helper ended ({status}) before starting its cluster");
        }
        assert!(
            Instant::now() < deadline,
            "the helper did not start its cluster in 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&record).unwrap();
    let mut lines = text.lines();
    let home = PathBuf::from(lines.next().unwrap());
    let pids: Vec<i32> = lines.map(|l| l.parse().unwrap()).collect();
    assert!(
        pids.iter().all(|&p| alive(p)),
        "servers running before the kill: {pids:?}"
    );

    helper.kill().unwrap(); // SIGKILL
    helper.wait().unwrap();
    (home, pids)
}

/// The helper process, SIGKILLed on drop too: a failed assertion before the kill must
/// not leave it (and what it started) running.
struct Helper(std::process::Child);

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every one of `pids` ends within 10 s and `home` is removed within 10 s more; a
/// failure kills what is left, so that it leaves nothing running either.
fn assert_all_gone(home: &Path, pids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut left: Vec<i32> = pids.to_vec();
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left.retain(|&p| alive(p));
    }
    // Whatever is left is killed here, so that a failure leaves nothing running either.
    for &pid in &left {
        // SAFETY: a weftd the helper started (its pid recorded a moment ago).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    for &pid in &left {
        // SAFETY: as above (a stopped one ends at SIGKILL too).
        unsafe { libc::kill(pid, libc::SIGCONT) };
    }
    assert!(
        left.is_empty(),
        "weftd processes {left:?} of {pids:?} outlived the killed test process by 10 s"
    );
    // The sweeper removes the home the test's TempDir would have.
    let deadline = Instant::now() + Duration::from_secs(10);
    while home.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let kept = home.exists();
    std::fs::remove_dir_all(home).ok();
    assert!(!kept, "the killed test's home {} was left behind", home.display());
}

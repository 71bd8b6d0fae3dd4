//! A killed test leaves no servers behind: a helper process (this program, re-run with
//! `HELPER_ENV` set) starts a TestCluster from a thread that then ends, restarts one of
//! its servers, stops another (SIGSTOP), records every server's pid, and waits; the test SIGKILLs it (as a CI
//! timeout or `pkill` would: no Drop runs) and every weftd it started must be gone
//! within seconds. Before the parent-death guard they ran on for good (weft up detaches
//! them).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_testkit::{ClusterOptions, TestCluster};

const HELPER_ENV: &str = "WEFT_TESTKIT_KILLED_HELPER";

fn main() {
    match std::env::var_os(HELPER_ENV) {
        Some(record) => helper(Path::new(&record)),
        None => {
            servers_end_when_the_test_process_is_killed();
            println!("test servers_end_when_the_test_process_is_killed ... ok");
        }
    }
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
    let mut text = format!("{}\n", cluster.home().display());
    for id in ids {
        let pid = cluster
            .pid(id)
            .unwrap_or_else(|| panic!("server {id} not running"));
        text.push_str(&format!("{pid}\n"));
    }
    let partial = record.with_extension("partial");
    std::fs::write(&partial, text).unwrap();
    std::fs::rename(&partial, record).unwrap();
    loop {
        std::thread::park();
    }
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
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("servers");
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .env(HELPER_ENV, &record)
        .stdin(Stdio::null())
        .spawn()
        .expect("starting the helper");
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
    assert_eq!(
        pids.len(),
        6,
        "a manager, 4 io servers and a cache manager: {pids:?}"
    );
    assert!(
        pids.iter().all(|&p| alive(p)),
        "servers running before the kill: {pids:?}"
    );

    helper.kill().unwrap(); // SIGKILL
    helper.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut left: Vec<i32> = pids.clone();
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
    std::fs::remove_dir_all(&home).ok();
    assert!(!kept, "the killed test's home {} was left behind", home.display());
}

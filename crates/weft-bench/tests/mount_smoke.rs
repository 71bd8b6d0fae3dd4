//! `weft bench mount` end to end on a small real cluster and a real FUSE mount: not
//! timed, only that the benchmark mounts, moves and verifies every byte both ways,
//! reports it, and leaves no mount, daemon or file behind.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use weft_testkit::TestCluster;

const MIB: u64 = 1 << 20;

/// Runs `weft bench mount ARGS --json JSON` with TMPDIR in `scratch`/tmp (its temporary
/// mountpoints go there, so that leftovers are seen); its stdout and that TMPDIR.
fn bench_mount(cluster: &TestCluster, scratch: &Path, args: &[&str], json: &Path) -> (String, PathBuf) {
    let tmp = scratch.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out = cluster
        .command("weft")
        .args(["bench", "mount"])
        .args(args)
        .arg("--json")
        .arg(json)
        .env("TMPDIR", &tmp)
        .output()
        .expect("running weft bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weft bench failed:\n{stdout}{stderr}");
    (stdout, tmp)
}

#[test]
fn the_mount_benchmark_moves_and_verifies_every_byte_and_unmounts() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("out").join("mount.json");
    // 40 MiB: the native side's last 16 MiB block is short.
    let (stdout, tmp) = bench_mount(
        &cluster,
        scratch.path(),
        &["--size", "40M", "--repeat", "2", "--stripe-size", "64K"],
        &json,
    );
    assert!(stdout.contains("mount   read"), "no table:\n{stdout}");
    assert!(
        stdout.contains("target: mount read >= 0.50x the native client: "),
        "{stdout}"
    );

    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    // Its figure drawn next to the JSON: native and mount per phase.
    let plot = common::svg_check::assert_draws(&json, &json.with_extension("svg"));
    assert_eq!(plot["panels"][0]["series"].as_array().unwrap().len(), 2);
    let size = 40 * MIB;
    assert_eq!(results["size_bytes"], size);
    assert_eq!(results["stripe_size_bytes"], 64 * 1024);
    assert_eq!(results["mounted_by_benchmark"], true);
    let runs = results["runs"].as_array().unwrap();
    let methods: Vec<&str> = runs.iter().map(|r| r["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        ["mount", "native", "native", "mount"],
        "alternating order"
    );
    for run in runs {
        assert_eq!(run["size_after_write"], size, "{run}");
        assert_eq!(run["bytes_verified"], size, "{run}");
        for key in ["write_ns", "sync_ns", "read_ns", "reread_ns"] {
            assert!(run[key].as_u64().unwrap() > 0, "{key}: {run}");
        }
    }
    let rows: Vec<(&str, &str)> = results["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["method"].as_str().unwrap(), s["phase"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rows,
        [
            ("native", "write+sync"),
            ("native", "read"),
            ("native", "re-read"),
            ("mount", "write+sync"),
            ("mount", "read"),
            ("mount", "re-read"),
        ]
    );

    // Unmounted, the mountpoint removed, the daemon gone, the Weft file removed.
    let mountpoint = Path::new(results["mountpoint"].as_str().unwrap());
    assert!(mountpoint.starts_with(&tmp), "{}", mountpoint.display());
    assert!(!weft_fuse::is_weft_mount(mountpoint).unwrap(), "still mounted");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
    let stat = cluster.weft(&["stat", "/bench-mount.dat"]);
    assert!(!stat.status.success(), "the Weft file was left behind");
    common::assert_clean_and_plotted(&cluster, &json);
}

/// With --floor the FUSE floor runs in turn with the others, its reads are checked
/// byte for byte as theirs are (it answers with the data a read must find), it gets
/// rows of its own, and it is unmounted and its mountpoint removed afterwards.
#[test]
fn the_floor_is_measured_checked_and_unmounted() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("mount.json");
    let (stdout, tmp) = bench_mount(
        &cluster,
        scratch.path(),
        &["--size", "40M", "--repeat", "3", "--floor"],
        &json,
    );
    assert!(stdout.contains("floor   read"), "no floor row:\n{stdout}");
    assert!(stdout.contains("mount read vs floor read: "), "{stdout}");
    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let runs = results["runs"].as_array().unwrap();
    let methods: Vec<&str> = runs.iter().map(|r| r["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        ["mount", "native", "floor", "native", "floor", "mount", "floor", "mount", "native"],
        "rotating order"
    );
    for run in runs.iter().filter(|r| r["method"] == "floor") {
        assert_eq!(run["bytes_verified"], 40 * MIB, "{run}");
    }
    let floor_rows = results["summary"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["method"] == "floor")
        .count();
    assert_eq!(floor_rows, 3);
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        !mounts.contains("weft-bench-floor-"),
        "the floor is still mounted:\n{mounts}"
    );
}

/// `weft bench floor` serves a file system outside tools can use: directories, files
/// and links as on a local one, sizes following writes and truncates, data reading as
/// zeros, at most --inodes inodes; Ctrl-C unmounts it and the command ends well. A
/// non-empty mountpoint is refused.
#[test]
fn the_floor_command_serves_files_until_interrupted() {
    let scratch = tempfile::tempdir().unwrap();
    let mnt = scratch.path().join("floor");
    let mut child = std::process::Command::new(weft_testkit::bin("weft"))
        .args(["bench", "floor", "--inodes", "4", "--mountpoint"])
        .arg(&mnt)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mounted = |p: &Path| {
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(p.to_str().unwrap()))
    };
    while !mounted(&mnt) {
        assert!(std::time::Instant::now() < deadline, "the floor did not mount");
        assert!(child.try_wait().unwrap().is_none(), "weft bench floor exited");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let file = mnt.join("data.0");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(&file).unwrap();
        f.write_all_at(&[7u8; 4096], MIB - 4096).unwrap();
    }
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(bytes.len(), MIB as usize, "the size follows the writes");
    assert!(bytes.iter().all(|b| *b == 0), "the floor keeps no data");
    std::fs::create_dir(mnt.join("d")).unwrap();
    std::os::unix::fs::symlink("../data.0", mnt.join("d/l")).unwrap();
    assert_eq!(
        std::fs::read_link(mnt.join("d/l")).unwrap(),
        Path::new("../data.0")
    );
    assert_eq!(
        std::fs::metadata(mnt.join("d/l")).unwrap().len(),
        MIB,
        "the link leads to the file"
    );
    let full = std::fs::write(mnt.join("data.1"), b"x").unwrap_err();
    assert_eq!(full.raw_os_error(), Some(libc::ENOSPC), "{full}");
    std::fs::remove_file(mnt.join("d/l")).unwrap();
    std::fs::remove_dir(mnt.join("d")).unwrap();
    std::fs::write(mnt.join("data.1"), b"x").unwrap();
    std::fs::remove_file(&file).unwrap();
    let names: Vec<_> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["data.1"]);
    // SAFETY: kill(2) of the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!mounted(&mnt), "still mounted after Ctrl-C");

    let busy = scratch.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("x"), b"x").unwrap();
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .args(["bench", "floor", "--mountpoint"])
        .arg(&busy)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not empty"));
}

#[test]
fn a_mountpoint_that_is_not_a_weft_mount_is_refused() {
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let out = cluster
        .command("weft")
        .args(["bench", "mount", "--size", "1M", "--repeat", "1", "--mountpoint"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not a Weft mount"), "{stderr}");
}

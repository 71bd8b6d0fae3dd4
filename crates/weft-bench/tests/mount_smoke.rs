//! `weft bench mount` end to end on a small real cluster and a real FUSE mount: not
//! timed, only that the benchmark mounts, moves and verifies every byte both ways,
//! reports it, and leaves no mount, daemon or file behind.

mod common;

use serde_json::Value;
use std::path::Path;
use weft_testkit::TestCluster;

const MIB: u64 = 1 << 20;

#[test]
fn the_mount_benchmark_moves_and_verifies_every_byte_and_unmounts() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("out").join("mount.json");
    // The temporary mountpoint goes under TMPDIR: here, so that leftovers are seen.
    let tmp = scratch.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    // 40 MiB: the native side's last 16 MiB block is short.
    let out = cluster
        .command("weft")
        .args([
            "bench",
            "mount",
            "--size",
            "40M",
            "--repeat",
            "2",
            "--stripe-size",
            "64K",
        ])
        .arg("--json")
        .arg(&json)
        .env("TMPDIR", &tmp)
        .output()
        .expect("running weft bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weft bench failed:\n{stdout}{stderr}");
    assert!(stdout.contains("mount   read"), "no table:\n{stdout}");
    assert!(stdout.contains("target: mount read vs native"), "{stdout}");

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

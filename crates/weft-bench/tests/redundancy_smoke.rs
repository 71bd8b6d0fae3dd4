//! `weft bench redundancy` end to end, tiny: not timed, only that it measures both
//! layouts, kills a server holding a copy, reads and rewrites the replicated file
//! without it, rebuilds the dead server's pieces, and reads every byte right with the
//! other copy's server killed in turn (so from the rebuilt copies), then draws it all.

mod common;

use serde_json::Value;

const MIB: u64 = 1 << 20;

#[test]
fn the_redundancy_benchmark_survives_a_killed_server_and_reads_the_rebuilt_copies() {
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("redundancy.json");
    let stdout = common::bench_on_own_clusters(
        &[
            "redundancy",
            "--procs",
            "2",
            "--block-mib",
            "2",
            "--repeat",
            "2",
            "--io-servers",
            "4",
            "--stripe-size",
            "64K",
        ],
        &json,
    );

    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let total = 2 * 2 * MIB;
    assert_eq!(r["total_bytes"], total);
    assert_eq!(r["replicated_slots"], 2, "{}", r["replicated_slots"]);
    // Every read checked every byte: healthy (2 per layout), degraded (2), and the
    // last one from the rebuilt copies.
    let runs = r["runs"].as_array().unwrap();
    let reads: Vec<&Value> = runs.iter().filter(|run| run["phase"] == "read").collect();
    assert_eq!(reads.len(), 2 + 2 + 2 + 1, "{runs:?}");
    assert!(reads.iter().all(|run| run["bytes_verified"] == total), "{runs:?}");
    let kinds: Vec<(&str, &str)> = r["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["kind"].as_str().unwrap(), s["phase"].as_str().unwrap()))
        .collect();
    for kind in ["plain", "replicas=2", "replicas=2, one server down"] {
        for phase in ["write+sync", "read"] {
            assert!(kinds.contains(&(kind, phase)), "no {kind} {phase} row: {kinds:?}");
        }
    }
    // The dead server held the first slot's copy, half the file: the rebuild copied
    // exactly that, and the other copy's server is another one.
    let rebuild = &r["rebuild"];
    assert_eq!(rebuild["bytes"], total / 2, "{rebuild}");
    assert!(rebuild["pieces"].as_u64().unwrap() >= 1, "{rebuild}");
    assert_ne!(rebuild["server"], rebuild["other_copy_server"], "{rebuild}");
    assert_eq!(rebuild["bytes_verified_after"], total, "{rebuild}");
    assert_eq!(r["goals"].as_array().unwrap().len(), 2);
    assert!(
        stdout.contains("target: replicas=2 write+sync >= 0.45x plain: "),
        "{stdout}"
    );
    assert!(
        stdout.contains("read back right from the rebuilt copies"),
        "{stdout}"
    );
    common::svg_check::assert_draws(&json, &json.with_extension("svg"));
}

#[test]
fn the_redundancy_benchmark_refuses_a_cluster_too_small_for_two_copies() {
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .args(["bench", "redundancy", "--io-servers", "1"])
        .output()
        .expect("running weft bench");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--io-servers must be 2 to"), "{stderr}");
}

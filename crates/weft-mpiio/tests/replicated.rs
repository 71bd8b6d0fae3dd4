//! MPI-IO on a replicated file (`weft_redundancy=replicas=2`, issue 33) with an io server
//! killed by SIGKILL between two halves of a collective write through a file view
//! (`c/replicated.c`): every call succeeds, every byte reads back right with the server
//! still down (same job) and after it returns (a second job).
//!
//! Needs mpicc/mpirun (Open MPI) and the workspace's release build.

mod support;

use std::io::{BufRead, BufReader};

use support::{compile, mpirun, spawn};
use weft_testkit::TestCluster;

#[test]
fn collective_view_io_on_a_replicated_file_survives_a_killed_io_server() {
    let dir = tempfile::tempdir().unwrap();
    let program = compile(dir.path(), "replicated");
    let cluster = TestCluster::start();
    let go = dir.path().join("go");
    let go_arg = go.to_str().unwrap();
    let mut job = spawn(
        3,
        &cluster,
        &[],
        &program,
        &[
            "weft:/rep",
            "write",
            go_arg,
            "weft_redundancy=replicas=2",
            "striping_unit=65536",
        ],
    );
    let mut lines = BufReader::new(job.stdout.take().unwrap()).lines();
    let first = lines.next().map(|l| l.unwrap());
    assert_eq!(
        first.as_deref(),
        Some("halfway"),
        "the job did not reach its halfway mark"
    );
    let layout = cluster.client().resolve("/rep").unwrap().layout.unwrap();
    assert_eq!(layout.replica_count(), 2, "{layout:?}");
    // Slot 0's primary copy dies in the middle of the job.
    let victim = layout.servers[0];
    cluster.kill9(victim.0);
    std::fs::write(&go, b"").unwrap();
    let out = job.wait_with_output().unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(
        out.status.success() && rest.last().map(String::as_str) == Some("ok"),
        "the job failed with io server {victim} killed ({}): {rest:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let layout = cluster.client().resolve("/rep").unwrap().layout.unwrap();
    assert_eq!(layout.replication.stale, vec![victim]);

    // Still down: a new job reads it all back right.
    let verify = |when: &str| {
        // As many ranks as wrote it: the program checks the size and blocks from that.
        let out = mpirun(3, &cluster, &[], &program, &["weft:/rep", "verify"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.ends_with("ok\n"),
            "verify {when}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    verify("with the server down");
    cluster.restart();
    verify("after the server returned");
}

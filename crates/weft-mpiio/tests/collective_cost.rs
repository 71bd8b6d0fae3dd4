//! What one small collective call costs, counted, and that the calls planned without a
//! gather before their I/O (src/collective/no_exchange.rs) keep every byte right
//! (`c/coll_small.c`, under mpirun through libweft_mpiio.so on a real cluster):
//! - IOR's pattern (`-a MPIIO -c -t 3000`: each rank its own block, one small piece per
//!   call) costs one MPI collective per call once [`STREAK`] calls did not interleave,
//!   counted by WEFT_PROFILE (`mpi_collectives`); with `weft_cb_predict=disable` every
//!   call takes the gather and the agreement (two), as all did before, where main took
//!   three;
//! - the data of interleaved calls, of a view that starts interleaving after such a
//!   streak, of overlapping reads, of a call failing on one rank, of ordered writes and
//!   of calls where some ranks have nothing, on uncached and cached files, with 1, 3
//!   and 4 processes, each setting of the hint and each way of waiting
//!   (`WEFT_MPIIO_WAIT`).
//!
//! Regression: IOR collective with 3000-byte transfers ran at 1/5 of independent; each
//! call made an allreduce (errors), an allgather (extents) and an allreduce (outcome)
//! around one small independent write.
//!
//! Needs mpicc/mpirun (Open MPI) and the workspace's release build.

mod support;

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use support::{compile, mpirun};
use weft_testkit::{ClusterOptions, TestCluster};

/// Calls per rank in each section of coll_small.c (its N).
const CALLS: u64 = 24;
/// Calls in a row that did not interleave before `auto` skips the gather
/// (`no_exchange::STREAK_AUTOMATIC`).
const STREAK: u64 = 4;

fn cluster(cached: bool) -> TestCluster {
    let base = if cached {
        ClusterOptions::cached("colocated", "64M")
    } else {
        ClusterOptions::default()
    };
    TestCluster::start_with(&ClusterOptions {
        io_servers: 4,
        stripe_size: 64 * 1024,
        stripe_count: 0,
        ..base
    })
}

fn assert_passed(out: &Output, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("coll_small OK"),
        "{what} ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs coll_small with `np` processes on files `weft:/DIR/...` with the hints, under
/// WEFT_PROFILE; returns the profile's files by name.
fn run(cluster: &TestCluster, np: usize, dir: &str, hints: &[&str], program: &Path) -> Vec<Value> {
    run_with(cluster, np, dir, hints, &[], program)
}

/// [`run`] with more environment for every rank.
fn run_with(
    cluster: &TestCluster,
    np: usize,
    dir: &str,
    hints: &[&str],
    env: &[(&str, &str)],
    program: &Path,
) -> Vec<Value> {
    cluster.weft(&["mkdir", &format!("/{dir}")]);
    let profile = tempfile::tempdir().unwrap();
    let prefix = format!("weft:/{dir}/");
    let mut args = vec![prefix.as_str()];
    args.extend_from_slice(hints);
    let mut env = env.to_vec();
    env.push(("WEFT_PROFILE", profile.path().to_str().unwrap()));
    let out = mpirun(np, cluster, &env, program, &args);
    assert_passed(
        &out,
        &format!("coll_small, {np} processes, hints {hints:?}, {env:?}"),
    );
    let found: Vec<_> = std::fs::read_dir(profile.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(found.len(), 1, "one profile: {found:?}");
    let job: Value = serde_json::from_slice(&std::fs::read(&found[0]).unwrap()).unwrap();
    job["files"].as_array().unwrap().clone()
}

/// (calls, MPI collectives) of `function` on file `name`.
fn cost(files: &[Value], name: &str, function: &str) -> (u64, u64) {
    let file = files
        .iter()
        .find(|f| f["file"] == name)
        .unwrap_or_else(|| panic!("{name} not in the profile"));
    let c = &file["calls"][function];
    (
        c["count"].as_u64().unwrap(),
        c["mpi_collectives"].as_u64().unwrap(),
    )
}

#[test]
fn small_collective_calls_that_do_not_interleave_cost_one_mpi_collective_each() {
    let work = tempfile::tempdir().unwrap();
    let program = compile(work.path(), "coll_small");
    let cluster = cluster(false);
    let np = 4u64;

    let files = run(&cluster, np as usize, "auto", &[], &program);
    for function in ["MPI_File_write_at_all", "MPI_File_read_at_all"] {
        let (calls, collectives) = cost(&files, "weft:/auto/contig", function);
        assert_eq!(calls, np * CALLS, "{function}");
        // The first STREAK calls gather and agree (2 each), the others agree only
        // (writes: gather before going into the write-behind buffers); the first read
        // waits for the buffered writes to be sent (one barrier).
        let transition = u64::from(function == "MPI_File_read_at_all");
        assert!(
            collectives <= np * (CALLS + STREAK + transition),
            "{function}: {collectives} MPI collectives for {calls} calls"
        );
    }
    // Some ranks without data: the same.
    let (calls, collectives) = cost(&files, "weft:/auto/sparse", "MPI_File_write_at_all");
    assert!(collectives <= np * (CALLS + STREAK), "{collectives} for {calls}");
    // Each rank reading its neighbour's block (IOR -C) does not interleave either: no
    // exchange method ran on that file.
    let contig = files.iter().find(|f| f["file"] == "weft:/auto/contig").unwrap();
    assert_eq!(
        contig["methods"],
        serde_json::json!({"independent": 2 * np * CALLS}),
        "{contig}"
    );

    // The hint turns the prediction off: every call gathers first, and still only two.
    let files = run(
        &cluster,
        np as usize,
        "nopredict",
        &["weft_cb_predict=disable"],
        &program,
    );
    let (calls, collectives) = cost(&files, "weft:/nopredict/contig", "MPI_File_write_at_all");
    assert_eq!(collectives, 2 * calls);
}

#[test]
fn calls_planned_without_a_gather_keep_every_byte_right() {
    let work = tempfile::tempdir().unwrap();
    let program = compile(work.path(), "coll_small");
    let plain = cluster(false);
    for (np, dir, hints) in [
        (3, "p3", &[][..]),
        (3, "e3", &["weft_cb_predict=enable"][..]),
        (1, "p1", &[][..]),
        (4, "ind", &["weft_cb_method=independent"][..]),
        (4, "dis", &["romio_cb_write=disable", "romio_cb_read=disable"][..]),
    ] {
        run(&plain, np, dir, hints, &program);
    }
    // Each way of waiting in the small collectives (csrc/shim.c): the MPI library's
    // polling, and polling then sleeping (the default here: 4 ranks on fewer CPUs).
    for (dir, wait) in [("spin", "spin"), ("sleep", "sleep")] {
        run_with(&plain, 4, dir, &[], &[("WEFT_MPIIO_WAIT", wait)], &program);
    }
    drop(plain);
    // On a cached file (colocated tier): auto's interleaved calls go server_directed,
    // the others independent; and with the pattern exchange of weft_cio_aware.
    let cached = cluster(true);
    let files = run(&cached, 4, "c", &[], &program);
    let (calls, collectives) = cost(&files, "weft:/c/contig", "MPI_File_write_at_all");
    assert!(collectives <= 4 * (CALLS + STREAK), "{collectives} for {calls}");
    run(&cached, 4, "aware", &["weft_cio_aware=true"], &program);
}

//! Atomic mode (`MPI_File_set_atomicity(fh, 1)`) under mpirun with real weftd processes
//! (4 io servers, 64 KiB stripes), through libweft_mpiio.so (`c/atomic.c`):
//! - overlapping writers: 4 ranks write the same noncontiguous region (all four servers)
//!   with their own values, by independent and collective calls, 40 rounds; every round
//!   leaves one writer's values throughout, never a mix;
//! - a reader that never sees a partial write: rank 0 rewrites the region while 3 ranks
//!   read it, 60 times each;
//! - the io servers counted the lock requests and conflicts.
//!
//! Regression: atomic mode was accepted and get_atomicity said 1, but nothing was
//! locked: both programs saw torn data within their first rounds, in every run, and
//! ROMIO's test/atomicity.c in 3 of 4 runs.
//!
//! Needs mpicc/mpirun (Open MPI) and the workspace's release build.

mod support;

use std::process::Output;

use support::{compile, mpirun};
use weft_proto::msg::{Request, Response};
use weft_testkit::{ClusterOptions, TestCluster};

fn assert_atomic(out: &Output, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("atomic OK"),
        "{what} ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn atomic_mode_never_mixes_overlapping_writes_nor_shows_a_partial_one() {
    let dir = tempfile::tempdir().unwrap();
    let program = compile(dir.path(), "atomic");
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 4,
        stripe_size: 64 * 1024,
        stripe_count: 0,
        ..Default::default()
    });
    let out = mpirun(
        4,
        &cluster,
        &[],
        &program,
        &["writers", "weft:/writers", "40", "1"],
    );
    assert_atomic(&out, "overlapping writers in atomic mode");
    let out = mpirun(4, &cluster, &[], &program, &["reader", "weft:/reader", "60", "1"]);
    assert_atomic(&out, "a reader beside a writer in atomic mode");

    // Every access took its locks at the servers it touched; overlapping ones waited.
    let client = cluster.client();
    let pool = weft_rpc::ConnectionPool::new("test", cluster.auth(), Default::default());
    let (mut grants, mut conflicts) = (0, 0);
    for s in &client.cluster_info().io_servers {
        match pool.call(&s.addr, &Request::LockStats, &[]).unwrap().0 {
            Response::LockStats(st) => {
                assert_eq!(st.held, 0, "locks left held at {}: {st:?}", s.addr);
                grants += st.grants;
                conflicts += st.conflicts;
            }
            other => panic!("LockStats answered {other:?}"),
        }
    }
    // Writers: 40 rounds x 4 ranks + 40 reads back; reader: 60 x 4 + 1; per server.
    assert!(grants >= 4 * (40 * 5 + 60 * 4 + 1), "{grants} grants");
    assert!(conflicts > 0, "no conflicts among overlapping accesses");
}

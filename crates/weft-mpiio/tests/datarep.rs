//! Data representations (`c/datarep.c`) on a `weft:` file through libweft_mpiio.so
//! under mpirun with 1 and 3 processes against a real cluster: `internal` is served
//! (the native bytes; get_view then says `native`, as ROMIO does), an unknown name fails
//! with `MPI_ERR_UNSUPPORTED_DATAREP` on every rank and leaves the view as it was,
//! `external32` is served (big-endian ints in the file, read back as written through
//! blocking, collective, nonblocking and split calls; `MPI_LONG`, 4 bytes in MPI's
//! external32 table, fails with `MPI_ERR_UNSUPPORTED_DATAREP` on every rank where the
//! MPI library packs it so, and is served where it packs it in 8 bytes, as Open MPI does), and
//! the file holds exactly what the three representations' writes put there.
//!
//! Needs mpicc/mpirun (Open MPI) and the workspace's release build.

mod support;

use weft_testkit::{ClusterOptions, TestCluster};

/// Ints per rank and call in c/datarep.c, in blocks of 8 dealt among the ranks.
const N: usize = 64;

/// Rank 0's lines on a weft: file.
const EXPECTED: &str = "set_view internal: ok
get_view after internal: ok native disp 0
write_all internal: ok
set_view no_such_representation: unsupported
get_view after no_such_representation: ok native disp 0
set_view external32: ok
get_view after external32: ok external32 disp 0
write_at_all external32: ok
read_at_all external32: ok
iread_at external32: ok
read_at_all_begin/end external32: ok
read_at_all MPI_LONG external32 as its size says: ok
set_view native: ok
get_view after native: ok native disp 0
read native: ok
write native: ok
values ok
";

/// The file: three rows of blocks, each rank's 8-int blocks dealt round robin; the
/// first row written under "internal", the second (negated) under "native", the third
/// (+ 50000) under "external32": big-endian.
fn expected_file(np: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for row in 0..3 {
        for block in 0..N / 8 {
            for rank in 0..np {
                for k in 0..8 {
                    let v = (rank * 100_000 + block * 8 + k) as i32;
                    out.extend_from_slice(&match row {
                        0 => v.to_ne_bytes(),
                        1 => (-v).to_ne_bytes(),
                        _ => (v + 50_000).to_be_bytes(),
                    });
                }
            }
        }
    }
    out
}

fn runs_on_weft(np: usize) {
    let dir = tempfile::tempdir().unwrap();
    let program = support::compile(dir.path(), "datarep");
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        stripe_size: 4096,
        ..Default::default()
    });
    let out = support::mpirun(np, &cluster, &[], &program, &["weft:/"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "datarep with {np} processes: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, EXPECTED, "datarep with {np} processes");
    let file = cluster
        .client()
        .open("/datarep", &weft_client::OpenOptions::default())
        .unwrap();
    let mut bytes = vec![0u8; file.size().unwrap() as usize];
    let n = file.read_at(0, &mut bytes).unwrap();
    bytes.truncate(n);
    assert!(
        bytes == expected_file(np),
        "datarep with {np} processes: the file ({} bytes) is not what the internal, native and external32 writes wrote ({} bytes)",
        bytes.len(),
        expected_file(np).len()
    );
}

#[test]
fn internal_is_native_and_external32_is_big_endian_with_1_process() {
    runs_on_weft(1);
}

#[test]
fn internal_is_native_and_external32_is_big_endian_with_3_processes() {
    runs_on_weft(3);
}

//! MPI-IO on weft: files when things are not as asked, under mpirun with real weftd
//! processes (4 io servers):
//! - hints that cannot be honoured are ignored, and `MPI_File_get_info` reports what
//!   was applied (`c/hints.c`); a `WEFT_HINTS` file keeps the first of a key, as ROMIO;
//! - with an io server stopped (SIGSTOP), every MPI-IO call that needs it gives up
//!   within the client's timeout with `MPI_ERR_IO` on every rank (`c/stopped.c`).
//!
//! Needs mpicc/mpirun (Open MPI) and the workspace's release build.

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};

use support::{compile, mpirun, spawn};
use weft_testkit::TestCluster;

/// The reported `key=value` lines of `c/hints.c`, after asserting the open's class.
fn info_of(out: &std::process::Output, class: i32) -> HashMap<String, String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("open class {class}\n")),
        "hints ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

// Regression: striping_factor larger than the number of io servers made MPI_File_open
// fail with MPI_ERR_ARG (ROMIO and OMPIO ignore it; MPICH's simple_collective and IOR
// with Lustre-style hints broke on it), and a WEFT_HINTS file's last duplicate won.
#[test]
fn hints_that_cannot_be_honoured_are_ignored_and_get_info_says_what_was_applied() {
    let dir = tempfile::tempdir().unwrap();
    let program = compile(dir.path(), "hints");
    let cluster = TestCluster::start();
    let out = mpirun(
        3,
        &cluster,
        &[],
        &program,
        &["weft:/wide", "striping_factor=64", "striping_unit=1048576"],
    );
    let info = info_of(&out, 0);
    assert_eq!(info["striping_factor"], "4", "{info:?}");
    assert_eq!(info["striping_unit"], "1048576", "{info:?}");
    let layout = cluster.client().stat("/wide").unwrap().layout.unwrap();
    assert_eq!((layout.servers.len(), layout.stripe_size_bytes), (4, 1 << 20));

    // A stripe unit Weft cannot use is left to the default; a bad value is skipped.
    let out = mpirun(
        2,
        &cluster,
        &[],
        &program,
        &[
            "weft:/small",
            "striping_unit=16",
            "striping_factor=2",
            "cb_nodes=banana",
        ],
    );
    let info = info_of(&out, 0);
    assert_eq!(info["striping_factor"], "2", "{info:?}");
    assert_eq!(info["striping_unit"], "65536", "{info:?}");

    // A hints file: the first of a key holds, a bad line is skipped, not the file.
    let hints = dir.path().join("hints.txt");
    std::fs::write(
        &hints,
        "cb_buffer_size 1048576\nstriping_factor 3\nromio_cb_write banana\ncb_buffer_size 4194304\nstriping_factor 1\n",
    )
    .unwrap();
    let out = mpirun(
        2,
        &cluster,
        &[("WEFT_HINTS", hints.to_str().unwrap())],
        &program,
        &["weft:/filed"],
    );
    let info = info_of(&out, 0);
    assert_eq!(info["cb_buffer_size"], "1048576", "{info:?}");
    assert_eq!(info["striping_factor"], "3", "{info:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the first one holds"), "{stderr}");
}

/// Sends SIGCONT to the stopped server when the test ends, however it ends.
struct Resume<'a>(&'a TestCluster, u32);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.signal(self.1, libc::SIGCONT);
    }
}

// Regression: with an io server stopped, MPI-IO calls blocked until it resumed; a
// collective write took twice the timeout (a send that crept forward got the send
// timeout afresh for each system call).
#[test]
fn every_call_gives_up_within_the_timeout_with_mpi_err_io_when_an_io_server_stops() {
    const TIMEOUT_MS: u64 = 2000;
    let dir = tempfile::tempdir().unwrap();
    let program = compile(dir.path(), "stopped");
    let cluster = TestCluster::start();
    let go = dir.path().join("go");
    let mut run = spawn(
        4,
        &cluster,
        &[("WEFT_TIMEOUT_MS", &TIMEOUT_MS.to_string())],
        &program,
        &["weft:/stopped", go.to_str().unwrap()],
    );
    let mut lines = BufReader::new(run.stdout.take().unwrap())
        .lines()
        .map(|l| l.unwrap());
    let first = lines.next();
    let Some(err_io) = first
        .as_deref()
        .and_then(|l| l.strip_prefix("MPI_ERR_IO is "))
        .map(|v| v.parse::<i32>().unwrap())
    else {
        let _ = run.kill();
        let out = run.wait_with_output().unwrap();
        panic!(
            "the program's first line does not name MPI_ERR_IO ({first:?}); its stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    assert_eq!(lines.next().as_deref(), Some("opened"));
    // Server 3 is an io server (server 0 the metadata manager): it stops answering.
    cluster.signal(3, libc::SIGSTOP);
    let _resume = Resume(&cluster, 3);
    std::fs::write(&go, "").unwrap();
    let mut seen = Vec::new();
    for line in lines {
        if line == "done" {
            break;
        }
        let (call, rest) = line.split_once(" class ").unwrap_or_else(|| panic!("{line}"));
        let (class, ms) = rest.split_once(' ').unwrap();
        let class: i32 = class.parse().unwrap();
        let ms: f64 = ms.trim_end_matches(" ms").parse().unwrap();
        // Close and a reopen need no io server; a create succeeds when the manager has
        // precreated objects in its pool and fails like the rest when it must make
        // them; a small independent write waits in the write-behind buffer (its error
        // shows at the read of the same bytes that follows, and at the sync); every
        // other call needs the stopped server.
        let expected: &[i32] = match call {
            "close" | "open" | "write_at" => &[0],
            "create" => &[0, err_io],
            _ => &[err_io],
        };
        assert!(
            expected.contains(&class),
            "{call}: class {class}, expected one of {expected:?} (-1: the ranks disagree)"
        );
        assert!(
            ms < (TIMEOUT_MS + 1500) as f64,
            "{call} took {ms} ms with a timeout of {TIMEOUT_MS} ms"
        );
        seen.push(call.to_owned());
    }
    let status = run.wait().unwrap();
    assert!(status.success(), "mpirun: {status}");
    assert_eq!(seen.len(), 11, "calls reported: {seen:?}");
}

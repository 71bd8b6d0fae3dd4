//! statvfs/statfs of a `weft:` name through the library (LD_PRELOAD, as MPI programs
//! load it): IOR asks it of its `-o weft:/file` before every run. `stat -f` (coreutils,
//! which calls statfs) is the outside program here: a `weft:` name reports the
//! cluster's io servers' space and namespace, and any other path is still the C
//! library's answer.

use std::process::Command;
use weft_testkit::mpi::library;
use weft_testkit::TestCluster;

/// `stat -f -c FORMAT path` with the library preloaded (or not) and the cluster's
/// environment: its output, which must have succeeded.
fn stat_f(cluster: &TestCluster, preload: bool, format: &str, path: &str) -> String {
    let mut c = Command::new("stat");
    c.args(["-f", "-c", format, path]).envs(cluster.env());
    if preload {
        c.env("LD_PRELOAD", library());
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "stat -f {path} (preload {preload}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn statfs_of_a_weft_name_reports_the_cluster_and_other_paths_are_untouched() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/d", 0o755).unwrap();
    // The io servers' file system (they all keep objects under the cluster's home:
    // counted once), in the 4 KiB blocks statfs counts in.
    let stats = client.statfs().unwrap();
    assert!(
        stats.servers.len() >= 2,
        "the test needs several io servers on one file system"
    );
    let total_bytes: u64 = stats
        .servers
        .iter()
        .map(|(_, s)| s.as_ref().expect("an io server's statfs").bytes_total)
        .max()
        .unwrap();
    let got = stat_f(&cluster, true, "%S %b %l", "weft:/d/not-yet-made");
    assert_eq!(
        got,
        format!("4096 {} 255", total_bytes / 4096),
        "statfs of weft:/d/not-yet-made"
    );
    assert_eq!(
        stat_f(&cluster, true, "%b", "weft:"),
        (total_bytes / 4096).to_string()
    );

    // Not a weft: name: the C library's answer, as without the library.
    let here = std::env::temp_dir();
    let here = here.to_str().unwrap();
    assert_eq!(
        stat_f(&cluster, true, "%T %S %b", here),
        stat_f(&cluster, false, "%T %S %b", here)
    );
    let missing = Command::new("stat")
        .args(["-f", "/no/such/dir/anywhere"])
        .env("LD_PRELOAD", library())
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("No such file"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

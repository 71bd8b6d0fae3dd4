//! `weft down` when $WEFT_META names the cluster (as on a client machine, or a user who
//! exported it from `weft status`): before, it looked only at the default home and,
//! finding no cluster started there, said "nothing to stop" with exit 0 while the
//! cluster $WEFT_META named kept running. Now it stops that cluster when the default
//! home started it, and otherwise fails saying how such a cluster is stopped.

use weft_testkit::TestCluster;

fn down_with_meta(cluster: &TestCluster, home: &std::path::Path) -> std::process::Output {
    cluster
        .command("weft")
        .arg("down")
        .env("WEFT_META", cluster.meta_addr())
        .env("WEFT_HOME", home)
        .output()
        .expect("running weft down")
}

#[test]
fn down_with_weft_meta_stops_that_cluster_or_says_why_not() {
    let cluster = TestCluster::start();
    let elsewhere = tempfile::tempdir().unwrap();

    // The default home started another cluster (none): refused, nothing stopped.
    let out = down_with_meta(&cluster, elsewhere.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "weft down succeeded:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains(&cluster.meta_addr()) && stderr.contains("systemctl stop weft.target"),
        "{stderr}"
    );
    assert!(cluster.pid(0).is_some(), "the manager was stopped anyway");
    let status = cluster.weft(&["status"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );

    // The default home is the cluster's: stopped, as `weft down --home` would.
    let out = down_with_meta(&cluster, cluster.home());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("stopped"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(cluster.pid(0).is_none(), "the manager still runs after weft down");
}

//! Acknowledge at apply (issue 30): a manager with a commit interval answers metadata
//! operations once applied and commits them durably in the background; fsync commits at
//! once, and nothing outside the database acts on a commit a crash could undo.
//!
//! The interval is set long here (10 s) so that the background committer stays out of
//! the way: what is durable at the kill is what fsync, the purger's commit and the
//! manager's own durable commits (inode reservations, precreated objects) made so.

mod common;

use common::{pattern, wait_for};
use std::collections::BTreeSet;
use std::time::Duration;
use weft_client::{Client, OpenOptions};
use weft_testkit::{ClusterOptions, TestCluster};

/// A cluster whose manager commits durably only every 10 s (and when asked).
fn deferred_commits() -> TestCluster {
    TestCluster::start_with(&ClusterOptions {
        extra: vec!["--commit-interval-ms".into(), "10000".into()],
        ..ClusterOptions::default()
    })
}

fn names(client: &Client, dir: &str) -> BTreeSet<String> {
    client
        .readdir(dir)
        .unwrap()
        .iter()
        .map(|e| e.name.to_str().unwrap().to_owned())
        .collect()
}

/// Creates, renames and a file's data acknowledged before an fsync survive a kill -9 of
/// the manager (no client is left to replay anything: the client that made them is
/// rebuilt after the restart, as if it had died too); what came after the fsync, never
/// made durable, is a prefix of it (never a later operation without an earlier one).
/// Before this change fsync did not reach the manager: with deferred commits the
/// operations before it were lost by the kill.
#[test]
fn fsync_makes_every_metadata_operation_before_it_survive_a_manager_kill() {
    let cluster = deferred_commits();
    let client = cluster.client();
    client.mkdir("/d", 0o755).unwrap();
    for k in 0..20 {
        drop(client.create(&format!("/d/a{k}"), &Default::default()).unwrap());
    }
    for k in 0..10 {
        client.rename(&format!("/d/a{k}"), &format!("/d/r{k}")).unwrap();
    }
    let data = pattern(30, 0, 100_000);
    let file = client.create("/d/synced", &Default::default()).unwrap();
    file.write_at(0, &data).unwrap();
    file.sync().unwrap();
    // After the fsync: acknowledged, not durable (the interval is 10 s).
    for k in 0..20 {
        drop(client.create(&format!("/d/b{k}"), &Default::default()).unwrap());
    }
    let status = common::weft_ok(&cluster, &["status"]);
    let line = status
        .lines()
        .find(|l| l.contains("commits:"))
        .unwrap_or_else(|| panic!("weft status shows no commit line:\n{status}"));
    assert!(line.contains("lag"), "{line}");
    cluster.kill9(0);
    drop(client);
    cluster.restart();

    let checker = cluster.client();
    let found = names(&checker, "/d");
    for k in 0..10 {
        assert!(
            found.contains(&format!("r{k}")),
            "rename of a{k} to r{k} before the fsync lost: {found:?}"
        );
        assert!(
            !found.contains(&format!("a{k}")),
            "a{k} renamed before the fsync came back: {found:?}"
        );
    }
    for k in 10..20 {
        assert!(
            found.contains(&format!("a{k}")),
            "create of a{k} before the fsync lost: {found:?}"
        );
    }
    let mut back = vec![0u8; data.len()];
    let file = checker.open("/d/synced", &OpenOptions::default()).unwrap();
    assert_eq!(file.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "the synced file's data differs");
    // The creates after the fsync: a prefix b0..b(n-1), whatever n the kill left.
    let after: Vec<usize> = (0..20).filter(|k| found.contains(&format!("b{k}"))).collect();
    assert_eq!(
        after,
        (0..after.len()).collect::<Vec<_>>(),
        "not a prefix: {found:?}"
    );
    eprintln!(
        "{} of the 20 creates after the fsync were durable at the kill",
        after.len()
    );
    assert_eq!(found.len(), 21 + after.len(), "{found:?}");
}

/// The purger removes a removed file's objects only once the removal is durable. It
/// used to act on what it read, acknowledged or durable: with deferred commits it
/// purged the objects of an unlink that the kill then undid, and the file came back
/// without its data.
#[test]
fn the_purger_never_removes_objects_of_a_removal_a_crash_undoes() {
    let cluster = deferred_commits();
    let client = cluster.client();
    let data = pattern(31, 0, 300_000);
    let file = client.create("/victim", &Default::default()).unwrap();
    file.write_at(0, &data).unwrap();
    file.sync().unwrap();
    drop(file);
    client.unlink("/victim").unwrap();
    common::wait_orphans_purged(&client);
    cluster.kill9(0);
    drop(client);
    cluster.restart();

    let checker = cluster.client();
    let found = names(&checker, "/");
    if found.contains("victim") {
        let mut back = vec![0u8; data.len()];
        let read = checker
            .open("/victim", &OpenOptions::default())
            .and_then(|f| f.read_at(0, &mut back));
        panic!(
            "/victim came back after its objects were purged (read: {read:?}, same data: {})",
            back == data
        );
    }
    // The purger carries on after the restart (its orphan record was durable).
    wait_for(
        "orphans purged after the restart",
        Duration::from_secs(20),
        || (checker.statfs().unwrap().meta.orphans == 0).then_some(()),
    );
}

/// Lines of the manager's log (server 0) that open a replay window.
fn replay_windows(cluster: &TestCluster) -> usize {
    std::fs::read_to_string(cluster.home().join("logs").join("server-0.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("clients to replay what they were answered for"))
        .count()
}

/// A commit interval answers at apply (issue 30 item 1), so a crash of the manager may
/// lose acknowledged operations: its next start holds a replay window, and the
/// surviving client's unsynced mkdir comes back by replay. A clean stop (SIGTERM, as
/// `weft down`) makes everything it answered durable first, so the start after it holds
/// no window: before the stop's record, each `weft down` and `weft up` kept new requests
/// waiting for replays for up to 3 s.
#[test]
fn a_clean_stop_needs_no_replay_window_and_a_crash_does() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        extra: vec!["--commit-interval-ms".into(), "5".into()],
        ..ClusterOptions::default()
    });
    let client = cluster.client();
    client.mkdir("/before-stop", 0o755).unwrap();
    cluster.signal(0, libc::SIGTERM);
    wait_for("the manager to stop", Duration::from_secs(20), || {
        cluster.pid(0).is_none().then_some(())
    });
    cluster.restart();
    assert_eq!(replay_windows(&cluster), 0, "a replay window after a clean stop");
    assert!(client.stat("/before-stop").is_ok());

    client.mkdir("/before-crash", 0o755).unwrap();
    cluster.kill9(0);
    cluster.restart();
    assert!(
        client.stat("/before-crash").is_ok(),
        "the acknowledged mkdir was lost"
    );
    assert_eq!(
        replay_windows(&cluster),
        1,
        "no replay window after a crash with a commit interval"
    );
}

/// A client that sends nothing after a manager restart still replays what it was
/// answered for within the manager's replay window (its watcher notices the restart),
/// so another client sees its operations. Before the watcher, an idle client replayed
/// only at its next call: the window ended without it and the other client's stat of
/// its acknowledged mkdir said ENOENT (the storm test's idle mount client made a probe
/// believe a name gone that its late replay brought back). And before a client's first
/// change committed durably, a crash that undid all its records left the manager not
/// expecting it at all: no window, the same ENOENT.
#[test]
fn an_idle_client_replays_within_the_window_and_others_see_its_operations() {
    let cluster = deferred_commits();
    let idle = cluster.client();
    // Its first change commits durably (so that the manager expects it after a crash);
    // the second is answered at apply.
    idle.mkdir("/first-of-an-idle-client", 0o755).unwrap();
    idle.mkdir("/made-by-an-idle-client", 0o755).unwrap();
    cluster.kill9(0);
    cluster.restart();
    let other = cluster.client();
    let seen = other.stat("/made-by-an-idle-client");
    assert!(
        seen.is_ok(),
        "the idle client's acknowledged mkdir is not seen after the restart: {seen:?}"
    );
    drop(idle);
}

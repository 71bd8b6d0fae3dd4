//! fsync of a directory through the mount makes the manager commit (issue 30): with a
//! commit interval the manager answers namespace changes before they are durable, and
//! the mount's fsyncdir used to answer at once, so a kill -9 of the manager right after
//! it lost the directory's entries.

mod common;

use common::Mount;
use weft_testkit::{ClusterOptions, TestCluster};

#[test]
fn fsync_of_a_directory_makes_its_entries_survive_a_manager_kill() {
    let _alone = common::one_at_a_time();
    // A 10 s interval: nothing becomes durable in the background during the test.
    let cluster = TestCluster::start_with(&ClusterOptions {
        extra: vec!["--commit-interval-ms".into(), "10000".into()],
        ..ClusterOptions::default()
    });
    let mount = Mount::new(&cluster);
    std::fs::create_dir(mount.join("d")).unwrap();
    for k in 0..10 {
        std::fs::write(mount.join(&format!("d/f{k}")), format!("file {k}")).unwrap();
    }
    std::fs::rename(mount.join("d/f0"), mount.join("d/g0")).unwrap();
    std::fs::File::open(mount.join("d")).unwrap().sync_all().unwrap();
    drop(mount);
    cluster.kill9(0);
    cluster.restart();

    let client = cluster.client();
    let mut names: Vec<String> = client
        .readdir("/d")
        .unwrap()
        .iter()
        .map(|e| e.name.to_str().unwrap().to_owned())
        .collect();
    names.sort();
    let mut expected: Vec<String> = (1..10).map(|k| format!("f{k}")).collect();
    expected.push("g0".into());
    expected.sort();
    assert_eq!(names, expected);
}

//! `weft stat` and `weft ls -l FILE` with an io server down, on a real cluster: what the
//! manager knows is shown with the size as `?`, the server is named, and the exit
//! status is 1. Both failed as a whole before (nothing shown), as `ls -l DIR` did
//! until it was made to list every entry.

use weft_client::CreateOptions;
use weft_testkit::TestCluster;

/// A cluster with `/spread` (an object on every io server, 300,000 bytes) and
/// `/elsewhere` (1234 bytes on the first io server only), and the last io server
/// killed; answers the killed server's id.
fn cluster_with_a_server_down() -> (TestCluster, u32) {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let io: Vec<u32> = client.cluster_info().io_servers.iter().map(|s| s.id.0).collect();
    let dead = *io.last().unwrap();
    let spread = client.create("/spread", &CreateOptions::default()).unwrap();
    spread.write_at(0, &[1u8; 300_000]).unwrap();
    spread.sync().unwrap();
    assert!(spread.layout().servers.iter().any(|s| s.0 == dead));
    let mut one = CreateOptions::default();
    one.layout.stripe_count = Some(1);
    one.layout.first_server = Some(0);
    let elsewhere = client.create("/elsewhere", &one).unwrap();
    elsewhere.write_at(0, &[2u8; 1234]).unwrap();
    elsewhere.sync().unwrap();
    assert!(!elsewhere.layout().servers.iter().any(|s| s.0 == dead));
    cluster.kill9(dead);
    (cluster, dead)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn stat_shows_what_the_manager_knows_when_an_io_server_is_down() {
    let (cluster, dead) = cluster_with_a_server_down();
    let out = cluster.weft(&["stat", "/spread", "/elsewhere"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    // Both files shown, whole: the manager's fields, the size unknown for the one
    // with an object on the dead server only.
    assert_eq!(stdout.matches("  File: ").count(), 2, "{stdout}{stderr}");
    let spread = stdout.split("  File: /elsewhere").next().unwrap();
    assert!(spread.contains("  File: /spread"), "{stdout}");
    assert!(spread.contains("Type: regular file"), "{stdout}");
    assert!(spread.contains("  Size: ? "), "size shown as unknown:\n{stdout}");
    assert!(spread.contains("Access: (0"), "{stdout}");
    assert!(spread.contains("Layout: stripe_size="), "{stdout}");
    assert!(
        stdout.contains("  Size: 1234 "),
        "the other file's size is known:\n{stdout}"
    );
    // The reason names the server, once, against the path.
    assert_eq!(
        stderr
            .matches(&format!("io server {dead} could not be reached"))
            .count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("/spread: size unknown"), "{stderr}");
    assert!(!stderr.contains("/elsewhere"), "{stderr}");
}

#[test]
fn ls_long_of_a_file_lists_it_when_an_io_server_is_down() {
    let (cluster, dead) = cluster_with_a_server_down();
    let out = cluster.weft(&["ls", "-l", "/spread", "/elsewhere"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let lines: Vec<Vec<&str>> = stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.len(), 2, "both files listed:\n{stdout}{stderr}");
    // mode, links, uid, gid, size, date, time, name
    assert_eq!(lines[0][7], "/spread", "{stdout}");
    assert!(lines[0][0].starts_with("-rw"), "{stdout}");
    assert_eq!(lines[0][4], "?", "an unknowable size is shown as ?:\n{stdout}");
    assert_eq!(lines[1][7], "/elsewhere", "{stdout}");
    assert_eq!(lines[1][4], "1234", "{stdout}");
    assert_eq!(
        stderr
            .matches(&format!("server {dead} could not be reached"))
            .count(),
        1,
        "said once:\n{stderr}"
    );
    assert_eq!(stderr.matches("marked ?").count(), 1, "{stderr}");
    // Without -l no size is needed: nothing is missing.
    let out = cluster.weft(&["ls", "/spread"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "/spread\n");
}

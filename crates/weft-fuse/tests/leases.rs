//! Leases (issue 30): the kernel keeps names and attributes that only the manager
//! changes past the attribute timeout while the mount hears the manager's change feed,
//! and drops them as soon as the feed names them: another client's change still shows
//! within the attribute timeout (here well within it), and a restarted manager (a new
//! feed) makes the mount ask again.

mod common;

use common::{native_write, Mount};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};
use weft_proto::SetAttr;
use weft_testkit::TestCluster;

fn chmod(client: &weft_client::Client, path: &str, mode: u32) {
    let changes = SetAttr {
        mode: Some(mode),
        ..Default::default()
    };
    client.setattr(path, &changes).unwrap();
}

/// Requests that answer a name or attributes (what a stat costs the manager).
fn attribute_requests(cluster: &TestCluster) -> f64 {
    cluster.manager_requests_where(|op| matches!(op, Some("lookup" | "get_attr" | "revalidate")))
}

/// Stats `paths` every 100 ms for `span`.
fn stat_for(paths: &[&Path], span: Duration) {
    let end = Instant::now() + span;
    while Instant::now() < end {
        for p in paths {
            std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (at most 5 s, far below the 30 s lease) until `check` holds of what the mount
/// shows; panics with `what` otherwise.
fn shows_within(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what}: not seen by the other mount after 5 s (kept under a lease?)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A file another client wrote and closed, with a directory and a symbolic link:
/// stats through the mount past the 1 s attribute timeout ask the manager nothing
/// while nothing changes; with `--lease-ms 0` they ask again every second.
#[test]
fn quiet_names_and_attributes_are_kept_past_the_attribute_timeout() {
    let cluster = TestCluster::start();
    let native = cluster.client();
    native.mkdir("/d", 0o755).unwrap();
    native_write(&native, "/d/f", 0, b"quiet bytes");
    native.symlink("f", "/d/l").unwrap();
    let leased = Mount::new(&cluster);
    let plain = Mount::with_args(&cluster, &["--lease-ms", "0"]);
    let mut asked = Vec::new();
    for mount in [&leased, &plain] {
        let (d, f, l) = (mount.join("d"), mount.join("d/f"), mount.join("d/l"));
        let paths = [d.as_path(), f.as_path(), l.as_path()];
        // The writer's capability goes back at its close; until the manager vouches
        // for the file its attributes get the attribute timeout only.
        stat_for(&paths, Duration::from_millis(1500));
        let before = attribute_requests(&cluster);
        stat_for(&paths, Duration::from_millis(2500));
        asked.push(attribute_requests(&cluster) - before);
        assert_eq!(std::fs::metadata(&f).unwrap().len(), 11);
    }
    assert!(
        asked[0] <= 1.0,
        "a leased mount asked the manager {} times",
        asked[0]
    );
    assert!(
        asked[1] >= 6.0,
        "the mount without leases asked only {} times (the test cannot tell leases apart)",
        asked[1]
    );
}

/// A listing (readdirplus, as `ls -l` makes) of leased names renews their leases
/// rather than cutting them to the attribute timeout: stats past that timeout still
/// look nothing up.
#[test]
fn a_listing_keeps_the_leases_of_what_it_lists() {
    let cluster = TestCluster::start();
    let native = cluster.client();
    native.mkdir("/d", 0o755).unwrap();
    for name in ["a", "b", "c"] {
        native_write(&native, &format!("/d/{name}"), 0, name.as_bytes());
    }
    let mount = Mount::new(&cluster);
    let dir = mount.join("d");
    let files = ["a", "b", "c"].map(|n| mount.join(&format!("d/{n}")));
    let paths: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    stat_for(&paths, Duration::from_millis(1500));
    let lookups = || cluster.manager_requests_where(|op| matches!(op, Some("lookup" | "revalidate")));
    let before = lookups();
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 3);
    stat_for(&paths, Duration::from_millis(2500));
    let asked = lookups() - before;
    assert!(asked <= 1.0, "names asked {asked} times after a listing");
}

/// Changes by the native client and by a second mount to what the first mount holds
/// under leases: each shows there within the attribute timeout's order, not the lease's.
#[test]
fn another_clients_changes_show_despite_leases() {
    let cluster = TestCluster::start();
    let native = cluster.client();
    native.mkdir("/d", 0o755).unwrap();
    for name in ["mode", "moved", "gone", "grown", "cut", "linked"] {
        native_write(&native, &format!("/d/{name}"), 0, b"0123456789");
    }
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    let at = |name: &str| a.join(&format!("d/{name}"));
    let all = ["mode", "moved", "gone", "grown", "cut", "linked"].map(at);
    let dir = a.join("d");
    let mut paths: Vec<&Path> = all.iter().map(|p| p.as_path()).collect();
    paths.push(&dir);
    // Held under leases by now (see the test above).
    stat_for(&paths, Duration::from_millis(1500));
    let nlink_before = std::fs::metadata(&dir).unwrap().nlink();

    chmod(&native, "/d/mode", 0o600);
    shows_within("a chmod", || {
        std::fs::metadata(at("mode")).unwrap().mode() & 0o777 == 0o600
    });

    std::fs::rename(b.join("d/moved"), b.join("d/moved2")).unwrap();
    shows_within("a rename through another mount", || {
        std::fs::symlink_metadata(at("moved")).is_err() && std::fs::symlink_metadata(at("moved2")).is_ok()
    });

    native.unlink("/d/gone").unwrap();
    shows_within("an unlink", || std::fs::symlink_metadata(at("gone")).is_err());

    native_write(&native, "/d/grown", 10, b"more");
    shows_within("a write past the end", || {
        std::fs::metadata(at("grown")).unwrap().len() == 14
    });

    native
        .setattr(
            "/d/cut",
            &SetAttr {
                size: Some(3),
                ..Default::default()
            },
        )
        .unwrap();
    shows_within("a truncate", || std::fs::metadata(at("cut")).unwrap().len() == 3);

    native.link("/d/linked", "/d/linked2").unwrap();
    shows_within("a hard link", || {
        std::fs::metadata(at("linked")).unwrap().nlink() == 2
    });

    native.mkdir("/d/sub", 0o755).unwrap();
    shows_within("a mkdir in the directory", || {
        std::fs::metadata(&dir).unwrap().nlink() == nlink_before + 1
    });
}

/// A restarted manager starts a new feed: the mount drops what it held and asks again,
/// so a change made while it was away (here through the native client right after the
/// restart, before any poll could name it in the old feed) shows.
#[test]
fn a_restarted_manager_makes_the_mount_ask_again() {
    let cluster = TestCluster::start();
    let native = cluster.client();
    native_write(&native, "/f", 0, b"abc");
    let a = Mount::new(&cluster);
    let f = a.join("f");
    stat_for(&[f.as_path()], Duration::from_millis(1500));
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o644);
    cluster.kill9(0);
    cluster.restart();
    let native = cluster.client();
    chmod(&native, "/f", 0o640);
    shows_within("a chmod after a manager restart", || {
        std::fs::metadata(&f).is_ok_and(|m| m.mode() & 0o777 == 0o640)
    });
}

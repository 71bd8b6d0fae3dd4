//! The manager answers a create (mkdir, symlink, mknod, link) through the mount with
//! the directory's attributes after it, and the mount answers the kernel's next
//! GETATTR of the directory with them (weft-fuse `parents`): no manager round trip for
//! it, and what the mount shows is what the manager has, also when other clients
//! changed the directory before; their later changes show once the attribute timeout
//! has passed, as for any cached attributes.

mod common;

use common::Mount;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;
use weft_client::{Client, CreateOptions};
use weft_testkit::TestCluster;

/// The mount's attribute timeout (`CacheOptions::default`), and a margin.
const PAST_TIMEOUT: Duration = Duration::from_millis(1500);

/// (mtime, ctime, nlink) of a directory through a mount, by fstat of a descriptor open
/// on it: the kernel asks the mount (GETATTR) whenever its attributes are stale, never
/// refreshing them by a lookup of the path.
fn mounted(dir: &std::fs::File) -> ((i64, i64), (i64, i64), u64) {
    let m = dir.metadata().unwrap();
    (
        (m.mtime(), m.mtime_nsec()),
        (m.ctime(), m.ctime_nsec()),
        m.nlink(),
    )
}

/// The same, as the manager has it.
fn managed(client: &Client, path: &str) -> ((i64, i64), (i64, i64), u64) {
    let a = client.stat(path).unwrap();
    (
        (a.mtime.secs, a.mtime.nanos as i64),
        (a.ctime.secs, a.ctime.nanos as i64),
        a.nlink as u64,
    )
}

/// One way of making a name in a directory.
type Step = dyn Fn(&Path);

fn create(path: &Path) {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
}

#[test]
fn a_directory_just_made_a_name_in_shows_what_the_manager_has_without_asking_it() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let client = cluster.client();
    let d = mount.join("d");
    std::fs::create_dir(&d).unwrap();
    let dh = std::fs::File::open(&d).unwrap();
    // Each kind of name made, checked at once against the manager.
    let steps: [(&str, &Step); 6] = [
        ("create", &|d| create(&d.join("f"))),
        ("mkdir", &|d| std::fs::create_dir(d.join("sub")).unwrap()),
        ("symlink", &|d| {
            std::os::unix::fs::symlink("f", d.join("l")).unwrap()
        }),
        ("link", &|d| std::fs::hard_link(d.join("f"), d.join("h")).unwrap()),
        ("mknod", &|d| {
            let path = std::ffi::CString::new(d.join("fifo").as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid C string.
            assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o644) }, 0, "mkfifo");
        }),
        ("mkdir 2", &|d| std::fs::create_dir(d.join("sub2")).unwrap()),
    ];
    for (what, step) in steps {
        step(&d);
        assert_eq!(mounted(&dh), managed(&client, "/d"), "after {what}");
    }
    assert_eq!(mounted(&dh).2, 4, "two subdirectories");

    // Another client changed the directory before this mount's create: the create's
    // answer has both.
    let native = client.create("/d/native1", &CreateOptions::default()).unwrap();
    drop(native);
    std::thread::sleep(Duration::from_millis(20));
    create(&d.join("after-native"));
    assert_eq!(
        mounted(&dh),
        managed(&client, "/d"),
        "create after another client's"
    );
    // ... and after it: seen once the timeout has passed.
    std::thread::sleep(Duration::from_millis(20));
    client.mkdir("/d/native-dir", 0o755).unwrap();
    std::thread::sleep(PAST_TIMEOUT);
    assert_eq!(
        mounted(&dh),
        managed(&client, "/d"),
        "another client's mkdir after the timeout"
    );
    assert_eq!(mounted(&dh).2, 5);

    // A second mount's changes, both ways.
    let other = Mount::new(&cluster);
    let oh = std::fs::File::open(other.join("d")).unwrap();
    create(&other.join("d/from-other"));
    std::thread::sleep(Duration::from_millis(20));
    std::fs::create_dir(d.join("sub3")).unwrap();
    assert_eq!(
        mounted(&dh),
        managed(&client, "/d"),
        "mkdir after the other mount's create"
    );
    // The other mount may show its create's answer for what remains of the timeout
    // (as it may any attributes it fetched); then the manager's.
    std::thread::sleep(PAST_TIMEOUT);
    assert_eq!(
        mounted(&oh),
        managed(&client, "/d"),
        "the other mount after the timeout"
    );
    // A create's answer not asked for within the timeout is not used after it.
    create(&d.join("unasked"));
    std::thread::sleep(Duration::from_millis(20));
    client.mkdir("/d/native-dir2", 0o755).unwrap();
    std::thread::sleep(PAST_TIMEOUT);
    assert_eq!(
        mounted(&dh),
        managed(&client, "/d"),
        "an answer older than the timeout"
    );
    assert_eq!(mounted(&dh).2, 7);
    std::thread::sleep(Duration::from_millis(20));
    std::fs::create_dir(other.join("d/sub4")).unwrap();
    std::thread::sleep(PAST_TIMEOUT);
    assert_eq!(
        mounted(&dh),
        managed(&client, "/d"),
        "the other mount's mkdir after the timeout"
    );
    assert_eq!(mounted(&dh).2, 8);

    // This mount's own removal and rename show at once (what was kept goes).
    create(&d.join("gone"));
    std::fs::remove_file(d.join("gone")).unwrap();
    assert_eq!(mounted(&dh), managed(&client, "/d"), "after an unlink here");
    std::fs::create_dir(d.join("sub5")).unwrap();
    std::fs::remove_dir(d.join("sub5")).unwrap();
    assert_eq!(mounted(&dh), managed(&client, "/d"), "after an rmdir here");
    assert_eq!(mounted(&dh).2, 8);
    create(&d.join("moving"));
    std::fs::rename(d.join("moving"), mount.join("moved")).unwrap();
    assert_eq!(mounted(&dh), managed(&client, "/d"), "after a rename here");
}

#[test]
fn creates_in_a_directory_cost_no_manager_getattr_of_it() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let d = mount.join("d");
    std::fs::create_dir(&d).unwrap();
    let before = cluster.manager_requests("get_attr");
    const FILES: usize = 60;
    for k in 0..FILES {
        create(&d.join(format!("f{k}")));
        if k % 10 == 0 {
            std::fs::create_dir(d.join(format!("s{k}"))).unwrap();
        }
    }
    let get_attrs = cluster.manager_requests("get_attr") - before;
    // Without the directory's attributes in the answers: one per file and directory.
    assert!(
        get_attrs <= 5.0,
        "{get_attrs} manager getattrs for {FILES} creates and 6 mkdirs in one directory"
    );
    // Counted as creates and mkdirs still.
    let client = cluster.client();
    assert_eq!(client.readdir("/d").unwrap().len(), FILES + 6);
}

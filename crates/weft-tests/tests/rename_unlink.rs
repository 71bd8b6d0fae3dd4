//! Rename and unlink semantics against real servers: atomic replacement (readers never
//! see the name missing), purge of the replaced file's objects, directory renames,
//! refusals with specific codes, and I/O on a removed file.

mod common;

use common::{expect_code, io_server_ids, object_path, pattern, wait_for, Rng};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use weft_client::{Client, ErrorCode, File, OpenOptions};
use weft_testkit::TestCluster;

fn put(client: &Client, path: &str, data: &[u8]) -> File {
    let file = client.create(path, &Default::default()).unwrap();
    file.write_at(0, data).unwrap();
    file.sync().unwrap();
    file
}

fn get(client: &Client, path: &str) -> Vec<u8> {
    let file = client.open(path, &OpenOptions::default()).unwrap();
    let size = file.size().unwrap();
    let mut buf = vec![0u8; size as usize];
    assert_eq!(file.read_at(0, &mut buf).unwrap(), size as usize);
    buf
}

#[test]
fn rename_replaces_a_file_atomically_and_its_objects_are_purged() {
    let mut rng = Rng::new(common::seed(
        "rename_replaces_a_file_atomically_and_its_objects_are_purged",
    ));
    let cluster = TestCluster::start();
    let client = cluster.client();
    let servers = io_server_ids(&client);
    let old = put(&client, "/target", &rng.bytes(300_000));
    let new_data = rng.bytes(200_000);
    let new = put(&client, "/incoming", &new_data);
    for s in &servers {
        assert!(object_path(&cluster, *s, old.inode()).exists());
    }
    client.rename("/incoming", "/target").unwrap();
    expect_code(client.stat("/incoming"), ErrorCode::NotFound);
    assert_eq!(client.stat("/target").unwrap().inode, new.inode());
    assert_eq!(get(&client, "/target"), new_data);

    // The replaced file is unreachable; its objects leave every io server.
    wait_for(
        "the replaced file's objects to go",
        Duration::from_secs(20),
        || {
            servers
                .iter()
                .all(|s| !object_path(&cluster, *s, old.inode()).exists())
                .then_some(())
        },
    );
    common::wait_orphans_purged(&client);
    // The manager's pool of precreated objects holds more; a manager restart hands the
    // unused ones to the purger, after which only files' objects may remain.
    cluster.kill9(0);
    cluster.restart();
    common::wait_orphans_purged(&client);
    let objects: u64 = client
        .statfs()
        .unwrap()
        .servers
        .into_iter()
        .map(|(_, s)| s.unwrap().objects)
        .sum();
    assert_eq!(objects, servers.len() as u64, "only /target's objects remain");
    // A handle on the replaced file gets a clear error, not zeros.
    let mut buf = [0u8; 10];
    expect_code(old.read_at(0, &mut buf), ErrorCode::Stale);
    expect_code(old.write_at(0, b"late"), ErrorCode::Stale);
    assert_eq!(get(&client, "/target"), new_data, "the late write went nowhere");
}

/// While a writer replaces `/current` again and again, readers on other connections
/// always find the name, and read one whole version or, if the version they opened was
/// purged meanwhile, a Stale error; never a missing name, a mix or zeros.
#[test]
fn readers_never_see_a_replaced_name_missing() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    const VERSIONS: u64 = 25;
    const LEN: usize = 100_000;
    put(&client, "/current", &pattern(0, 0, LEN));
    let done = AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            let meta = cluster.meta_addr();
            let auth = cluster.auth();
            let (done, reads) = (&done, &reads);
            scope.spawn(move || {
                let reader = Client::connect_with(&meta, auth.clone()).unwrap();
                while !done.load(Ordering::SeqCst) {
                    let file = reader
                        .open("/current", &OpenOptions::default())
                        .unwrap_or_else(|e| panic!("/current is missing during renames: {e}"));
                    let mut buf = vec![0u8; LEN];
                    match file.read_at(0, &mut buf) {
                        Ok(n) => {
                            assert_eq!(n, LEN, "short read of a complete version");
                            let version = (0..VERSIONS)
                                .find(|v| buf[..64] == pattern(*v, 0, 64)[..])
                                .unwrap_or_else(|| panic!("read bytes of no version"));
                            assert!(buf == pattern(version, 0, LEN), "version {version} is mixed");
                            reads.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => assert_eq!(e.code(), ErrorCode::Stale, "{e}"),
                    }
                }
            });
        }
        for v in 1..VERSIONS {
            let tmp = format!("/next-{v}");
            put(&client, &tmp, &pattern(v, 0, LEN));
            client.rename(&tmp, "/current").unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        done.store(true, Ordering::SeqCst);
    });
    assert!(
        reads.load(Ordering::SeqCst) > 0,
        "the readers never completed a read"
    );
    assert_eq!(get(&client, "/current"), pattern(VERSIONS - 1, 0, LEN));
    common::wait_orphans_purged(&client);
}

#[test]
fn directory_renames_and_refusals() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir_all("/d1/sub/deeper", 0o755).unwrap();
    let data = pattern(7, 0, 5000);
    put(&client, "/d1/sub/file", &data);

    client.rename("/d1", "/d2").unwrap();
    expect_code(client.stat("/d1"), ErrorCode::NotFound);
    expect_code(client.stat("/d1/sub/file"), ErrorCode::NotFound);
    assert_eq!(get(&client, "/d2/sub/file"), data);
    let names: Vec<String> = client
        .readdir("/d2/sub")
        .unwrap()
        .into_iter()
        .map(|e| e.name.to_string())
        .collect();
    assert_eq!(names, ["deeper", "file"]);

    // Into its own subtree, or onto itself from below: refused, nothing changes.
    let m = expect_code(client.rename("/d2", "/d2/sub/x"), ErrorCode::InvalidArgument);
    assert!(m.contains("subtree"), "{m}");
    expect_code(client.rename("/d2", "/d2/x"), ErrorCode::InvalidArgument);
    expect_code(
        client.rename("/d2/sub", "/d2/sub/deeper/sub"),
        ErrorCode::InvalidArgument,
    );
    assert_eq!(get(&client, "/d2/sub/file"), data);

    // Replacing: a directory over an empty directory is fine, over a non-empty one not;
    // kinds must match.
    client.mkdir("/empty", 0o755).unwrap();
    client.mkdir("/full", 0o755).unwrap();
    put(&client, "/full/x", b"x");
    put(&client, "/plain", b"plain");
    expect_code(client.rename("/d2", "/full"), ErrorCode::NotEmpty);
    expect_code(client.rename("/d2", "/plain"), ErrorCode::NotDirectory);
    expect_code(client.rename("/plain", "/empty"), ErrorCode::IsDirectory);
    client.rename("/d2", "/empty").unwrap();
    assert_eq!(get(&client, "/empty/sub/file"), data);
    expect_code(client.stat("/d2"), ErrorCode::NotFound);
    // A missing source, and a missing target directory.
    expect_code(client.rename("/nothing", "/n2"), ErrorCode::NotFound);
    expect_code(client.rename("/plain", "/no/such/dir"), ErrorCode::NotFound);
    assert_eq!(get(&client, "/plain"), b"plain");

    // rmdir and unlink refuse the wrong kinds and non-empty directories.
    expect_code(client.rmdir("/full"), ErrorCode::NotEmpty);
    expect_code(client.rmdir("/plain"), ErrorCode::NotDirectory);
    expect_code(client.unlink("/full"), ErrorCode::IsDirectory);
    expect_code(client.rmdir("/"), ErrorCode::Busy);
    client.unlink("/full/x").unwrap();
    client.rmdir("/full").unwrap();
    let stats = client.statfs().unwrap().meta;
    // Left: /plain, /empty/sub/file; directories /, /empty, /empty/sub, /empty/sub/deeper.
    assert_eq!((stats.files, stats.directories), (2, 4));
}

#[test]
fn io_on_an_unlinked_open_file_fails_with_stale() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let file = put(&client, "/doomed", &pattern(3, 0, 70_000));
    let reader = cluster.client().open("/doomed", &OpenOptions::default()).unwrap();
    client.unlink("/doomed").unwrap();
    expect_code(client.stat("/doomed"), ErrorCode::NotFound);
    expect_code(client.unlink("/doomed"), ErrorCode::NotFound);
    // Weft removes a file's data when it is unlinked (PVFS), not at last close: once
    // purged, every handle gets Stale for data, size and sync alike.
    common::wait_orphans_purged(&client);
    let mut buf = [0u8; 100];
    let m = expect_code(reader.read_at(0, &mut buf), ErrorCode::Stale);
    assert!(m.contains("/doomed"), "the error names the file: {m}");
    expect_code(file.write_at(10, b"more"), ErrorCode::Stale);
    expect_code(file.size(), ErrorCode::Stale);
    expect_code(file.sync(), ErrorCode::Stale);
    expect_code(file.truncate(5), ErrorCode::Stale);
    // The name can be used again, for a different file.
    let again = put(&client, "/doomed", b"new");
    assert_ne!(again.inode(), file.inode());
    assert_eq!(get(&client, "/doomed"), b"new");
}

/// The root cannot be made, removed, renamed or replaced; each call on "/" gets the
/// error Linux gives for it (rmdir("/") is EBUSY, unlink EISDIR, mkdir EEXIST), and
/// the root and what is in it stay.
#[test]
fn calls_on_the_root_get_the_errors_linux_gives() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/kept", 0o755).unwrap();
    expect_code(client.rmdir("/"), ErrorCode::Busy);
    expect_code(client.unlink("/"), ErrorCode::IsDirectory);
    expect_code(client.mkdir("/", 0o755), ErrorCode::Exists);
    expect_code(client.rename("/", "/elsewhere"), ErrorCode::Busy);
    expect_code(client.rename("/kept", "/"), ErrorCode::Busy);
    expect_code(client.create("/", &Default::default()), ErrorCode::IsDirectory);
    expect_code(client.symlink("/kept", "/"), ErrorCode::Exists);
    expect_code(client.link("/kept", "/"), ErrorCode::Exists);
    assert_eq!(
        client.stat("/kept").unwrap().kind,
        weft_client::FileKind::Directory
    );
    assert!(client.stat("/elsewhere").is_err());
}

/// A path ending with "/" names a directory, as in Linux: a file reached so is
/// ENOTDIR (stat, open, unlink, rename), a create of one is EISDIR, unlink of a
/// directory so is EISDIR, and directories work with it; nothing is changed by a refusal.
#[test]
fn a_trailing_slash_names_a_directory() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    put(&client, "/file", b"data");
    client.mkdir("/dir", 0o755).unwrap();
    expect_code(client.stat("/file/"), ErrorCode::NotDirectory);
    expect_code(
        client.open("/file/", &OpenOptions::default()),
        ErrorCode::NotDirectory,
    );
    expect_code(client.unlink("/file/"), ErrorCode::NotDirectory);
    expect_code(client.unlink("/dir/"), ErrorCode::IsDirectory);
    expect_code(client.rename("/file/", "/moved"), ErrorCode::NotDirectory);
    expect_code(client.rename("/file", "/moved/"), ErrorCode::NotDirectory);
    expect_code(
        client.create("/new/", &Default::default()),
        ErrorCode::IsDirectory,
    );
    assert_eq!(get(&client, "/file"), b"data");
    assert!(client.stat("/moved").is_err() && client.stat("/new").is_err());
    // Directories take the slash.
    assert_eq!(
        client.stat("/dir/").unwrap().kind,
        weft_client::FileKind::Directory
    );
    client.mkdir("/made/", 0o755).unwrap();
    client.rename("/made/", "/renamed/").unwrap();
    client.rmdir("/renamed/").unwrap();
    assert!(client.stat("/renamed").is_err());
}

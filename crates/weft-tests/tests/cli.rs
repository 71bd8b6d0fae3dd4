//! The `weft` command line as a user meets it: cluster management messages and exit
//! codes, status after a crash, and the file commands end to end.

mod common;

use common::{io_server_ids, object_path, weft_err, weft_ok, Rng};
use weft_client::{CreateOptions, FileKind};
use weft_testkit::TestCluster;

/// `weft status` rows as (server id, state).
fn states(status: &str) -> Vec<(u32, String)> {
    status
        .lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let id = cols.first()?.parse().ok()?;
            Some((id, cols.get(4)?.to_string()))
        })
        .collect()
}

#[test]
fn cluster_management_says_clearly_what_it_did() {
    let cluster = TestCluster::start();
    let (code, err) = weft_err(&cluster, &["up"]);
    assert_eq!(code, 1);
    assert!(err.contains("already running"), "{err}");

    let scratch = tempfile::tempdir().unwrap();
    let local = scratch.path().join("kept.bin");
    let data = Rng::new(5).bytes(100_000);
    std::fs::write(&local, &data).unwrap();
    weft_ok(&cluster, &["put", local.to_str().unwrap(), "/kept.bin"]);

    let up = weft_ok(&cluster, &["status"]);
    assert_eq!(
        states(&up),
        (0..=4).map(|id| (id, "up".to_string())).collect::<Vec<_>>(),
        "{up}"
    );
    assert!(up.contains("1 files"), "the manager reports its namespace:\n{up}");

    // After a crash, status shows which server is down and exits with 2.
    cluster.kill9(2);
    let out = cluster.weft(&["status"]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    for (id, state) in states(&text) {
        assert_eq!(state, if id == 2 { "down" } else { "up" }, "server {id}:\n{text}");
    }

    let stopped = weft_ok(&cluster, &["down"]);
    assert!(stopped.contains("stopped 4"), "{stopped}");
    let again = cluster.weft(&["down"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&again.stdout),
        String::from_utf8_lossy(&again.stderr)
    );
    assert!(said.contains("not running"), "weft down twice: {said}");
    let out = cluster.weft(&["status"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(states(&String::from_utf8_lossy(&out.stdout))
        .iter()
        .all(|(_, s)| s == "down"));

    // `weft up` on a stopped cluster starts it again with its data.
    let restarted = weft_ok(&cluster, &["up"]);
    assert!(restarted.contains("restarted"), "{restarted}");
    let back = scratch.path().join("back.bin");
    weft_ok(&cluster, &["get", "/kept.bin", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == data, "data after down and up");

    // A home without a cluster.
    let empty = tempfile::tempdir().unwrap();
    let out = cluster
        .command("weft")
        .args(["down", "--home"])
        .arg(empty.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no Weft cluster"));
}

#[test]
fn file_commands_work_end_to_end() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let ids = io_server_ids(&client);
    let scratch = tempfile::tempdir().unwrap();
    let local = scratch.path().join("data.bin");
    let data = Rng::new(11).bytes(300_001);
    std::fs::write(&local, &data).unwrap();
    let local = local.to_str().unwrap();

    weft_ok(&cluster, &["mkdir", "-p", "/a/b/c"]);
    weft_ok(&cluster, &["mkdir", "-p", "/a/b/c"]);
    let (_, err) = weft_err(&cluster, &["mkdir", "/x/y"]);
    assert!(err.contains("/x"), "{err}");
    let (_, err) = weft_err(&cluster, &["mkdir", "/a"]);
    assert!(err.contains("exists"), "{err}");

    // A directory's default layout is inherited by files put into it.
    let set = weft_ok(
        &cluster,
        &[
            "layout",
            "--set",
            "--stripe-size",
            "8K",
            "--stripe-count",
            "2",
            "/a/b/c",
        ],
    );
    assert!(
        set.contains("stripe_size=8192") && set.contains("stripe_count=2"),
        "{set}"
    );
    weft_ok(&cluster, &["put", local, "/a/b/c/"]);
    let attr = client.stat("/a/b/c/data.bin").unwrap();
    let layout = attr.layout.unwrap();
    assert_eq!((layout.stripe_size_bytes, layout.servers.len()), (8192, 2));
    assert_eq!(attr.size, data.len() as u64);
    let shown = weft_ok(&cluster, &["layout", "/a/b/c/data.bin"]);
    assert!(
        shown.contains("stripe_size=8192") && shown.contains("stripe_count=2"),
        "{shown}"
    );
    let (_, err) = weft_err(
        &cluster,
        &["layout", "--set", "--stripe-size", "8K", "/a/b/c/data.bin"],
    );
    assert!(err.contains("directories"), "{err}");

    // An explicit layout on put: 3 servers from the second one.
    weft_ok(
        &cluster,
        &[
            "put",
            local,
            "/explicit",
            "--stripe-size",
            "4K",
            "--stripe-count",
            "3",
            "--first-server",
            "1",
        ],
    );
    let layout = client.stat("/explicit").unwrap().layout.unwrap();
    assert_eq!(layout.stripe_size_bytes, 4096);
    assert_eq!(layout.servers, ids[1..4].to_vec());

    // get and cat return the bytes that were put.
    let back = scratch.path().join("back.bin");
    weft_ok(&cluster, &["get", "/a/b/c/data.bin", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == data, "weft get");
    let out = cluster.weft(&["cat", "/explicit"]);
    assert!(out.status.success());
    assert!(out.stdout == data, "weft cat");

    // ls and ls -l.
    assert_eq!(weft_ok(&cluster, &["ls", "/a/b"]), "c/\n");
    let long = weft_ok(&cluster, &["ls", "-l", "/a/b/c"]);
    let line = long.lines().find(|l| l.ends_with(" data.bin")).expect(&long);
    assert!(line.starts_with("-rw-r--r--"), "{line}");
    assert!(line.split_whitespace().any(|c| c == "300001"), "{line}");
    let root = weft_ok(&cluster, &["ls", "/"]);
    assert_eq!(root, "a/\nexplicit\n");

    // mv: rename, and into a directory keeping the name.
    weft_ok(&cluster, &["mv", "/a/b/c/data.bin", "/a/moved"]);
    let (_, err) = weft_err(&cluster, &["stat", "/a/b/c/data.bin"]);
    assert!(err.contains("not found"), "{err}");
    weft_ok(&cluster, &["mv", "/a/moved", "/a/b"]);
    let attr = client.stat("/a/b/moved").unwrap();
    assert_eq!((attr.kind, attr.size), (FileKind::File, data.len() as u64));

    // rm refuses a directory without -r, and removes the whole tree with it.
    let (_, err) = weft_err(&cluster, &["rm", "/a"]);
    assert!(err.contains("rm -r"), "{err}");
    weft_ok(&cluster, &["rm", "-r", "/a"]);
    assert_eq!(weft_ok(&cluster, &["ls", "/"]), "explicit\n");
    weft_ok(&cluster, &["rm", "/explicit"]);
    assert_eq!(weft_ok(&cluster, &["ls", "/"]), "");

    // Errors name what they are about.
    let (_, err) = weft_err(&cluster, &["get", "/nope", back.to_str().unwrap()]);
    assert!(err.contains("/nope") && err.contains("not found"), "{err}");
    let (_, err) = weft_err(&cluster, &["put", "/no/such/local/file", "/x"]);
    assert!(err.contains("/no/such/local/file"), "{err}");
    common::wait_orphans_purged(&client);
    let df = weft_ok(&cluster, &["df"]);
    assert!(df.contains("0 files, 1 directories, 0 removed"), "{df}");
}

/// `weft ls -l` goes by readdir-plus pages (attributes with the names, sizes from the io
/// servers per page) and lists a directory whole even when one of its files has lost its
/// objects (removed between the listing and the sizes, or damaged): that file is left
/// out, the rest keep their true sizes.
#[test]
fn ls_long_lists_true_sizes_and_survives_a_file_without_objects() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/l", 0o755).unwrap();
    for k in 0..5u64 {
        let file = client
            .create(&format!("/l/f{k}"), &CreateOptions::default())
            .unwrap();
        file.write_at(0, &vec![7u8; (k * 100_000) as usize]).unwrap();
    }
    let l = client.resolve("/l").unwrap().inode;
    let (page, more) = client.readdir_plus_page(l, b"", 0).unwrap();
    assert!(!more);
    let sizes: Vec<(String, u64)> = page.iter().map(|(n, a)| (n.to_string(), a.size)).collect();
    let expected: Vec<(String, u64)> = (0..5u64).map(|k| (format!("f{k}"), k * 100_000)).collect();
    assert_eq!(sizes, expected);
    // f2's objects vanish from every io server.
    let gone = client.stat("/l/f2").unwrap();
    for server in &gone.layout.as_ref().unwrap().servers {
        let _ = std::fs::remove_file(object_path(&cluster, *server, gone.inode));
    }
    let long = weft_ok(&cluster, &["ls", "-l", "/l"]);
    let names: Vec<&str> = long.lines().filter_map(|l| l.split_whitespace().last()).collect();
    assert_eq!(names, ["f0", "f1", "f3", "f4"], "{long}");
    assert!(long.contains("400000"), "{long}");
}

/// A lookup that asks the io servers for a guessed inode's size while the manager looks
/// the name up uses that size only for the same inode: a name replaced meanwhile gets the
/// new file's size, and a guess that is right gets the size as it is now.
#[test]
fn sized_lookups_and_getattrs_never_take_a_guess_for_another_file() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let root = client.resolve("/").unwrap().inode;
    let old = client.create("/f", &CreateOptions::default()).unwrap();
    old.write_at(0, &[1u8; 10]).unwrap();
    let guess = client.stat("/f").unwrap();
    assert_eq!(guess.size, 10);
    // Right guess, file grown since.
    old.write_at(10, &[2u8; 90]).unwrap();
    let found = client.lookup_sized(root, "f", Some(&guess)).unwrap();
    assert_eq!((found.inode, found.size), (guess.inode, 100));
    assert_eq!(client.getattr_sized(guess.inode, Some(&guess)).unwrap().size, 100);
    // Wrong guess: the name now leads to another file.
    let new = client.create("/g", &CreateOptions::default()).unwrap();
    new.write_at(0, &[3u8; 7]).unwrap();
    client.rename("/g", "/f").unwrap();
    let found = client.lookup_sized(root, "f", Some(&guess)).unwrap();
    assert_eq!((found.inode, found.size), (new.inode(), 7));
    // A guess that is not a file, or none: the size is asked after the answer.
    assert_eq!(client.lookup_sized(root, "f", None).unwrap().size, 7);
}

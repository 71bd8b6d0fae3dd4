//! The admin commands that work without a mount (chmod, chown, chgrp, touch, du, find)
//! and relative Weft paths, end to end on a real cluster, each compared with what the
//! coreutils and GNU find do to the same tree on a local directory.

mod common;

use common::{output_ok, weft_err, weft_ok, Rng};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use weft_testkit::TestCluster;

/// The tree made in both places: (path, size) of files; directories end in '/'.
const TREE: &[(&str, usize)] = &[
    ("t/", 0),
    ("t/a.txt", 3),
    ("t/b.h5", 70_000),
    ("t/sub/", 0),
    ("t/sub/c.h5", 1),
    ("t/sub/deep/", 0),
    ("t/sub/deep/big.h5", 2_500_000),
    ("t/sub/deep/small.dat", 999),
    ("t/other/", 0),
    ("t/other/x.h5.bak", 12_345),
];

/// Makes the tree locally under `local` and in Weft at /, through `weft mkdir`/`put`.
fn make_tree(cluster: &TestCluster, local: &Path) {
    let mut rng = Rng::new(11);
    for (path, size) in TREE {
        let here = local.join(path);
        if path.ends_with('/') {
            std::fs::create_dir_all(&here).unwrap();
            weft_ok(cluster, &["mkdir", "-p", &format!("/{path}")]);
        } else {
            std::fs::write(&here, rng.bytes(*size)).unwrap();
            weft_ok(cluster, &["put", here.to_str().unwrap(), &format!("/{path}")]);
        }
    }
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// GNU find on the local tree, its paths rewritten to Weft's.
fn gnu_find(local: &Path, args: &[&str]) -> Vec<String> {
    let out = std::process::Command::new("find")
        .arg(local.join("t"))
        .args(args)
        .output()
        .unwrap();
    let text = output_ok(out, &format!("find {args:?}"));
    let prefix = local.to_str().unwrap();
    sorted_lines(&text.replace(prefix, ""))
}

#[test]
fn find_selects_what_gnu_find_selects() {
    let cluster = TestCluster::start();
    let local = tempfile::tempdir().unwrap();
    make_tree(&cluster, local.path());
    // (weft's tests, GNU find's): sizes in bytes are GNU's `c` unit.
    let cases: &[(&[&str], &[&str])] = &[
        (&[], &[]),
        (&["--name", "*.h5"], &["-name", "*.h5"]),
        (&["--type", "d"], &["-type", "d"]),
        (
            &["--type", "f", "--size", "+1000"],
            &["-type", "f", "-size", "+1000c"],
        ),
        (&["--size", "-1000"], &["-type", "f", "-size", "-1000c"]),
        (&["--size", "999"], &["-type", "f", "-size", "999c"]),
        (&["--maxdepth", "1"], &["-maxdepth", "1"]),
        (
            &["--maxdepth", "2", "--type", "f"],
            &["-maxdepth", "2", "-type", "f"],
        ),
        (
            &["--mtime", "-1", "--name", "?.txt"],
            &["-mtime", "-1", "-name", "?.txt"],
        ),
        (&["--mtime", "+3"], &["-mtime", "+3"]),
    ];
    for (ours, gnus) in cases {
        let mut args = vec!["find", "/t"];
        args.extend_from_slice(ours);
        let found = sorted_lines(&weft_ok(&cluster, &args));
        assert_eq!(found, gnu_find(local.path(), gnus), "weft find /t {ours:?}");
    }
    // Relative to -C and to $WEFT_CWD, as from inside the directory.
    let here = weft_ok(&cluster, &["-C", "/t/sub", "find", "--name", "*.h5"]);
    assert_eq!(sorted_lines(&here), ["/t/sub/c.h5", "/t/sub/deep/big.h5"]);
    let out = cluster
        .command("weft")
        .env("WEFT_CWD", "/t/sub/deep")
        .args(["find", "..", "--type", "f", "--size", "+1M"])
        .output()
        .unwrap();
    assert_eq!(output_ok(out, "find with WEFT_CWD").trim(), "/t/sub/deep/big.h5");
    // Bad tests and paths are refused clearly.
    let (_, err) = weft_err(&cluster, &["find", "/t", "--size", "+1Q"]);
    assert!(err.contains("not a size test"), "{err}");
    let (_, err) = weft_err(&cluster, &["find", "/nowhere"]);
    assert!(err.contains("/nowhere") && err.contains("not found"), "{err}");
    let (_, err) = weft_err(&cluster, &["-C", "relative", "find"]);
    assert!(err.contains("absolute"), "{err}");
}

/// The mode of a local file after `chmod SPEC` from `start` (umask 0, as weft chmod
/// never applies one).
fn gnu_chmod(dir: &Path, start: u32, spec: &str) -> u32 {
    let file = dir.join("probe");
    std::fs::write(&file, b"").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(start)).unwrap();
    let status = std::process::Command::new("sh")
        .args(["-c", "umask 0; chmod -- \"$0\" \"$1\""])
        .arg(spec)
        .arg(&file)
        .status()
        .unwrap();
    assert!(status.success(), "chmod {spec}");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777;
    std::fs::remove_file(&file).unwrap();
    mode
}

fn weft_mode(cluster: &TestCluster, path: &str) -> u32 {
    cluster.client().stat(path).unwrap().mode & 0o7777
}

#[test]
fn chmod_chown_chgrp_and_touch_change_what_the_coreutils_change() {
    let cluster = TestCluster::start();
    let local = tempfile::tempdir().unwrap();
    make_tree(&cluster, local.path());
    let client = cluster.client();
    for (start, spec) in [
        (0o644, "u+x"),
        (0o666, "go-w"),
        (0o755, "a=r"),
        (0o600, "+x"),
        (0o600, "a+X"),
        (0o700, "a+X"),
        (0o777, "u=rw,g=r,o="),
        (0o755, "u+s,g+s"),
        (0o640, "o+t"),
        (0o4755, "u-s"),
        (0o640, "750"),
        (0o640, "0"),
    ] {
        weft_ok(&cluster, &["chmod", &format!("{start:o}"), "/t/a.txt"]);
        assert_eq!(weft_mode(&cluster, "/t/a.txt"), start);
        weft_ok(&cluster, &["chmod", spec, "/t/a.txt"]);
        assert_eq!(
            weft_mode(&cluster, "/t/a.txt"),
            gnu_chmod(local.path(), start, spec),
            "chmod {spec} from {start:o}"
        );
    }
    // -R reaches every entry below.
    weft_ok(&cluster, &["-C", "/t", "chmod", "-R", "go-rwx", "sub"]);
    for path in ["/t/sub", "/t/sub/c.h5", "/t/sub/deep", "/t/sub/deep/big.h5"] {
        assert_eq!(weft_mode(&cluster, path) & 0o077, 0, "{path}");
    }
    assert_ne!(weft_mode(&cluster, "/t/b.h5") & 0o077, 0, "outside -R's tree");
    let (_, err) = weft_err(&cluster, &["chmod", "u+q", "/t/b.h5"]);
    assert!(err.contains("not a mode"), "{err}");

    // Owners by name and by number (the tests run as root).
    weft_ok(&cluster, &["chown", "-R", "nobody:65533", "/t/other"]);
    for path in ["/t/other", "/t/other/x.h5.bak"] {
        let a = client.stat(path).unwrap();
        assert_eq!((a.uid, a.gid), (65534, 65533), "{path}");
    }
    weft_ok(&cluster, &["chgrp", "0", "/t/other/x.h5.bak"]);
    let a = client.stat("/t/other/x.h5.bak").unwrap();
    assert_eq!((a.uid, a.gid), (65534, 0));
    let (_, err) = weft_err(&cluster, &["chown", "no-such-user-x", "/t/a.txt"]);
    assert!(err.contains("no such user"), "{err}");

    // touch: creates (mode 0666 under the umask), or moves the times on; -c creates nothing.
    let before = client.stat("/t/b.h5").unwrap().mtime;
    std::thread::sleep(std::time::Duration::from_millis(20));
    weft_ok(&cluster, &["touch", "/t/b.h5", "/t/made"]);
    let after = client.stat("/t/b.h5").unwrap();
    assert!(
        (after.mtime.secs, after.mtime.nanos) > (before.secs, before.nanos),
        "mtime not moved on"
    );
    assert_eq!(after.size, 70_000, "touch changed the size");
    let made = client.stat("/t/made").unwrap();
    assert_eq!(
        (made.size, made.mode & 0o777),
        (0, 0o644),
        "touch made with umask 022"
    );
    weft_ok(&cluster, &["touch", "-c", "/t/not-made"]);
    assert!(client.stat("/t/not-made").is_err(), "touch -c created a file");

    // Many missing files of a directory are made together (one request to the manager
    // per directory and 256 names); a name given twice, or one that exists, is touched;
    // a path under a missing directory is an error that names it, the others are made.
    client.mkdir("/t/many", 0o755).unwrap();
    let mut args: Vec<String> = vec!["touch".into()];
    args.extend((0..300).map(|i| format!("/t/many/f{i}")));
    args.push("/t/many/f7".into());
    args.push("/t/b.h5".into());
    args.push("/t/no-such-dir/x".into());
    args.push("/t/made2".into());
    let batches = cluster.manager_requests("create_many");
    let creates = cluster.manager_requests("create");
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_, err) = weft_err(&cluster, &argv);
    assert!(err.contains("/t/no-such-dir/x"), "{err}");
    assert!(err.contains("1 of 304 paths not touched"), "{err}");
    assert_eq!(
        cluster.manager_requests("create_many") - batches,
        3.0,
        "300 names in /t/many: 2 batches, /t/made2: 1"
    );
    assert_eq!(cluster.manager_requests("create") - creates, 0.0);
    for i in 0..300 {
        let a = client.stat(&format!("/t/many/f{i}")).unwrap();
        assert_eq!((a.size, a.mode & 0o777), (0, 0o644), "/t/many/f{i}");
    }
    assert_eq!(client.readdir("/t/many").unwrap().len(), 300);
    assert!(client.stat("/t/made2").is_ok());
    assert_eq!(
        client.stat("/t/b.h5").unwrap().size,
        70_000,
        "touch changed the size"
    );
}

#[test]
fn du_counts_what_the_files_hold() {
    let cluster = TestCluster::start();
    let local = tempfile::tempdir().unwrap();
    make_tree(&cluster, local.path());
    let total = |prefix: &str| -> u64 {
        TREE.iter()
            .filter(|(p, _)| p.starts_with(prefix) && !p.ends_with('/'))
            .map(|(_, s)| *s as u64)
            .sum()
    };
    let kib = |bytes: u64| bytes.div_ceil(1024).to_string();
    let out = weft_ok(&cluster, &["du", "--apparent-size", "/t"]);
    let rows: Vec<(String, String)> = out
        .lines()
        .map(|l| {
            let (n, p) = l.split_once('\t').expect("size TAB path");
            (p.to_string(), n.to_string())
        })
        .collect();
    // Every directory once, children before parents, as du prints them.
    let expected: Vec<(String, String)> = ["t/sub/deep/", "t/sub/", "t/other/", "t/"]
        .iter()
        .map(|d| (format!("/{}", d.trim_end_matches('/')), kib(total(d))))
        .collect();
    let mut got = rows.clone();
    got.sort();
    let mut want = expected.clone();
    want.sort();
    assert_eq!(got, want, "{out}");
    assert_eq!(rows.last().map(|r| r.0.as_str()), Some("/t"), "{out}");
    // -s: one line; allocated blocks cover the bytes.
    let summary = weft_ok(&cluster, &["-C", "/t", "du", "-s", "sub"]);
    let (blocks, path) = summary.trim().split_once('\t').unwrap();
    assert_eq!(path, "/t/sub");
    assert!(
        blocks.parse::<u64>().unwrap() >= total("t/sub/") / 1024,
        "{summary}"
    );
}

#[test]
fn put_and_get_copy_whole_trees_as_cp_r_does() {
    let cluster = TestCluster::start();
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("src");
    let mut rng = Rng::new(3);
    for dir in ["src/a/b", "src/empty", "src/ro"] {
        std::fs::create_dir_all(local.path().join(dir)).unwrap();
    }
    for (file, size) in [
        ("src/f", 10),
        ("src/a/g", 200_000),
        ("src/a/b/h", 0),
        ("src/ro/i", 5),
    ] {
        std::fs::write(local.path().join(file), rng.bytes(size)).unwrap();
    }
    std::os::unix::fs::symlink("../f", local.path().join("src/a/link")).unwrap();
    std::fs::set_permissions(local.path().join("src/a"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::fs::set_permissions(
        local.path().join("src/ro"),
        std::fs::Permissions::from_mode(0o555),
    )
    .unwrap();

    // Into an existing directory: under the source's name.
    weft_ok(&cluster, &["mkdir", "/in"]);
    weft_ok(&cluster, &["put", "-r", src.to_str().unwrap(), "/in"]);
    let client = cluster.client();
    assert_eq!(client.stat("/in/src/a").unwrap().mode & 0o777, 0o750);
    assert_eq!(client.readlink("/in/src/a/link").unwrap().as_ref(), b"../f");
    // Back out to a new name, and compared whole with the source.
    let back = local.path().join("back");
    weft_ok(
        &cluster,
        &["-C", "/in", "get", "-r", "src", back.to_str().unwrap()],
    );
    let diff = std::process::Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(&src)
        .arg(&back)
        .output()
        .unwrap();
    output_ok(diff, "diff -r of the source and the copy back");
    for dir in ["a", "ro", "empty"] {
        let mode = |root: &Path| std::fs::metadata(root.join(dir)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&back), mode(&src), "{dir}'s mode");
    }
    let (_, err) = weft_err(&cluster, &["put", "-r", "-", "/in"]);
    assert!(err.contains("standard input"), "{err}");
    std::fs::set_permissions(
        local.path().join("src/ro"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(back.join("ro"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

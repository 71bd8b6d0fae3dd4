//! The `weft` command line as a user meets it: cluster management messages and exit
//! codes, status after a crash, and the file commands end to end.

mod common;

use common::{io_server_ids, object_path, weft_err, weft_ok, Rng};
use weft_client::{CreateOptions, FileKind};
use weft_testkit::{ClusterOptions, TestCluster};

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
    // A file command on the stopped cluster says why it fails and what to do.
    let (code, err) = weft_err(&cluster, &["ls", "/"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("metadata manager does not answer") && err.contains("weft up"),
        "{err}"
    );

    // `weft up` on a stopped cluster starts it again with its data.
    let restarted = weft_ok(&cluster, &["up"]);
    assert!(restarted.contains("restarted"), "{restarted}");
    let back = scratch.path().join("back.bin");
    weft_ok(&cluster, &["get", "/kept.bin", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == data, "data after down and up");

    // Settings that shape a new cluster are refused on an existing one, naming each,
    // rather than ignored; the same settings as the cluster's are no obstacle.
    weft_ok(&cluster, &["down"]);
    let (code, err) = weft_err(
        &cluster,
        &[
            "up",
            "--io",
            "2",
            "--insecure-no-capabilities",
            "--identity",
            "owner",
        ],
    );
    assert_eq!(code, 1);
    assert!(err.contains("--io (asked 2, the cluster has 4)"), "{err}");
    assert!(
        err.contains("--insecure-no-capabilities (asked capabilities off"),
        "{err}"
    );
    assert!(
        !err.contains("--identity"),
        "the cluster has this identity: {err}"
    );
    assert!(
        states(&String::from_utf8_lossy(&cluster.weft(&["status"]).stdout))
            .iter()
            .all(|(_, s)| s == "down"),
        "a refused up starts nothing"
    );
    let restarted = weft_ok(&cluster, &["up", "--io", "4", "--identity", "owner"]);
    assert!(restarted.contains("restarted"), "{restarted}");

    // A home from before the servers had their own capability key gets one when the
    // whole cluster starts again; its files stay readable.
    weft_ok(&cluster, &["down"]);
    let description = cluster.home().join("cluster.toml");
    let text = std::fs::read_to_string(&description).unwrap();
    let old: String = text
        .lines()
        .filter(|l| !l.starts_with("capability_key_file"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(old, text, "the description names its capability key:\n{text}");
    std::fs::write(&description, old).unwrap();
    std::fs::remove_file(cluster.home().join("capability.key")).unwrap();
    let upgraded = weft_ok(&cluster, &["up"]);
    assert!(upgraded.contains("their own key"), "{upgraded}");
    assert!(cluster.home().join("capability.key").exists());
    assert!(std::fs::read_to_string(&description)
        .unwrap()
        .contains("capability_key_file"));
    let status = weft_ok(&cluster, &["status"]);
    assert!(!status.contains("derived from the cluster key"), "{status}");
    std::fs::remove_file(&back).unwrap();
    weft_ok(&cluster, &["get", "/kept.bin", back.to_str().unwrap()]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "data after the key upgrade"
    );

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
    // A local side that cannot take the bytes is named.
    let (code, err) = weft_err(&cluster, &["get", "/explicit", "/dev/full"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("writing /dev/full") && err.contains("No space left"),
        "{err}"
    );

    // stat takes several paths, as stat(1): one that fails is reported, the rest shown.
    let out = cluster.weft(&["stat", "/nope", "/explicit"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("File: /explicit"), "{shown}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nope not found"));

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
    // Refusals name the paths given, not the manager's inode numbers.
    let (_, err) = weft_err(&cluster, &["mkdir", "/a"]);
    assert!(
        err.contains("/a: already exists") && !err.contains("directory 1"),
        "{err}"
    );
    let (_, err) = weft_err(&cluster, &["mv", "/missing", "/a"]);
    assert!(
        err.contains("/missing not found") && !err.contains("directory 1"),
        "{err}"
    );
    weft_ok(&cluster, &["mkdir", "-p", "/t/a/full"]);
    let (_, err) = weft_err(&cluster, &["mv", "/a", "/t"]);
    assert!(err.contains("/t/a is a directory that is not empty"), "{err}");
    weft_ok(&cluster, &["rm", "-r", "/t"]);

    // rm refuses a directory without -r, and removes the whole tree with it.
    let (_, err) = weft_err(&cluster, &["rm", "/a"]);
    assert!(err.contains("rm -r"), "{err}");
    // ... but never the root: `rm -r /` removed every file, then failed on / itself.
    for args in [&["rm", "-r", "/"][..], &["rm", "-r", "/explicit", "/"]] {
        let (code, err) = weft_err(&cluster, args);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("refusing to remove /"), "{err}");
        assert_eq!(weft_ok(&cluster, &["ls", "/"]), "a/\nexplicit\n", "{args:?}");
    }
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

/// `sh -c SCRIPT` with this cluster's environment; `$WEFT` is the `weft` program.
fn shell(cluster: &TestCluster, script: &str) -> std::process::Command {
    let mut c = std::process::Command::new("sh");
    c.args(["-c", script])
        .envs(cluster.env())
        .env("WEFT", weft_testkit::bin("weft"));
    c
}

/// Names in the root, hidden ones (a put's temporary file) too.
fn root_names(cluster: &TestCluster) -> Vec<String> {
    cluster
        .client()
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name.to_string())
        .collect()
}

/// `weft put` gave every file mode 0644 whatever the source's, and a failed or
/// interrupted put left a file of the full size, partly zeros, under the target name.
#[test]
fn put_keeps_the_source_mode_under_the_umask_and_never_leaves_a_partial_file() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = TestCluster::start();
    let client = cluster.client();
    let scratch = tempfile::tempdir().unwrap();
    let private = scratch.path().join("private");
    std::fs::write(&private, b"secret").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let tool = scratch.path().join("tool");
    std::fs::write(&tool, b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o775)).unwrap();
    for (local, umask, target, mode) in [
        (&private, "022", "/private", 0o600),
        (&tool, "022", "/tool", 0o755),
        (&tool, "027", "/tool-027", 0o750),
    ] {
        let out = shell(
            &cluster,
            &format!("umask {umask}; exec \"$WEFT\" put \"$0\" {target}"),
        )
        .arg(local)
        .output()
        .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let attr = client.stat(target).unwrap();
        assert_eq!(attr.mode & 0o7777, mode, "{target} put under umask {umask}");
    }

    // An interrupted put over an existing file: the old file stays whole under the
    // name, and no temporary file remains.
    let old = Rng::new(3).bytes(100_000);
    let old_local = scratch.path().join("old");
    std::fs::write(&old_local, &old).unwrap();
    weft_ok(&cluster, &["put", old_local.to_str().unwrap(), "/target"]);
    let fifo = scratch.path().join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let put = cluster
        .command("weft")
        .args(["put", fifo.to_str().unwrap(), "/target"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    // More than one 16 MiB copy block: the first is written to Weft before the signal.
    let chunk = vec![0xAB; 1 << 20];
    for _ in 0..20 {
        std::io::Write::write_all(&mut writer, &chunk).unwrap();
    }
    common::wait_for(
        "the put's temporary file",
        std::time::Duration::from_secs(20),
        || {
            root_names(&cluster)
                .iter()
                .any(|n| n.starts_with(".target.weft-put-"))
                .then_some(())
        },
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: signalling the weft this test started.
    unsafe { libc::kill(put.id() as i32, libc::SIGINT) };
    // The copy notices at its next block.
    let _ = std::io::Write::write_all(&mut writer, &chunk);
    drop(writer);
    let out = put.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(read_file(&client, "/target"), old, "the old /target changed");
    let names = root_names(&cluster);
    assert!(
        !names.iter().any(|n| n.contains("weft-put")),
        "a temporary file remained: {names:?}"
    );

    // A put that fails (its source cannot be read) leaves nothing either.
    let (_, err) = weft_err(&cluster, &["put", scratch.path().to_str().unwrap(), "/failed"]);
    assert!(err.contains("reading"), "{err}");
    let names = root_names(&cluster);
    assert!(
        !names
            .iter()
            .any(|n| n.contains("failed") || n.contains("weft-put")),
        "{names:?}"
    );

    // A put the manager refuses (a layout, a cache mode) is told under the name asked
    // for, not under put's temporary name.
    for (option, value, said) in [
        (
            "--stripe-count",
            "99",
            "/refused.bin: stripe count 99 exceeds the 4 io servers",
        ),
        (
            "--cache",
            "cached",
            "/refused.bin: cache mode cached needs a cache tier",
        ),
    ] {
        let (code, err) = weft_err(
            &cluster,
            &["put", option, value, private.to_str().unwrap(), "/refused.bin"],
        );
        assert_eq!(code, 1, "{err}");
        assert!(err.contains(said), "{option} {value}: {err}");
        assert!(!err.contains("weft-put"), "{option} {value}: {err}");
    }
}

fn read_file(client: &weft_client::Client, path: &str) -> Vec<u8> {
    let file = client.open(path, &Default::default()).unwrap();
    let mut buf = vec![0u8; file.size().unwrap() as usize];
    assert_eq!(file.read_at(0, &mut buf).unwrap(), buf.len());
    buf
}

/// `weft put - PATH` reads standard input (it said "cannot open -"): the bytes of a
/// pipe land in PATH whole, mode as a shell's `>` makes it; a directory as PATH is
/// refused, since standard input has no name to put it under.
#[test]
fn put_reads_standard_input_for_a_dash() {
    use std::io::Write;
    let cluster = TestCluster::start();
    let data = Rng::new(9).bytes((1 << 20) + 7);
    let mut child = cluster
        .command("weft")
        .args(["put", "-", "/piped"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writing = {
        let data = data.clone();
        std::thread::spawn(move || stdin.write_all(&data))
    };
    let out = child.wait_with_output().unwrap();
    writing.join().unwrap().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let file = cluster.client().open("/piped", &Default::default()).unwrap();
    assert_eq!(file.size().unwrap(), data.len() as u64);
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "the piped bytes differ");
    let mode = cluster.client().stat("/piped").unwrap().mode & 0o777;
    assert_eq!(mode & 0o600, 0o600, "mode {mode:o}");

    cluster.client().mkdir("/into", 0o755).unwrap();
    let out = cluster
        .command("weft")
        .args(["put", "-", "/into"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is a directory"), "{err}");
}

/// With an io server stopped, `weft` gave up after twice `WEFT_TIMEOUT_MS`: it waited
/// once on the server's Unix socket and once more on its TCP address.
#[test]
fn a_stopped_io_server_costs_one_timeout() {
    const TIMEOUT_MS: u64 = 1500;
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let local = scratch.path().join("data.bin");
    std::fs::write(&local, Rng::new(4).bytes(1 << 20)).unwrap();
    weft_ok(&cluster, &["put", local.to_str().unwrap(), "/over-all"]);
    common::hang(&cluster, 1);
    for args in [
        vec!["cat", "/over-all"],
        vec!["ls", "-l", "/"],
        vec!["put", local.to_str().unwrap(), "/new"],
    ] {
        let started = std::time::Instant::now();
        let out = cluster
            .command("weft")
            .args(&args)
            .env("WEFT_TIMEOUT_MS", TIMEOUT_MS.to_string())
            .output()
            .unwrap();
        let took = started.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "weft {args:?} succeeded with a stopped io server"
        );
        assert!(
            err.contains(&format!("within {TIMEOUT_MS} ms")),
            "weft {args:?}: {err}"
        );
        // Which io server, not only its address.
        assert!(err.contains("io server 1"), "weft {args:?}: {err}");
        assert!(
            took.as_millis() < (TIMEOUT_MS * 3 / 2) as u128,
            "weft {args:?} gave up after {took:?}, more than one timeout of {TIMEOUT_MS} ms: {err}"
        );
    }
    // df shows the others and says, by its exit status too, that one did not answer.
    let out = cluster
        .command("weft")
        .arg("df")
        .env("WEFT_TIMEOUT_MS", TIMEOUT_MS.to_string())
        .output()
        .unwrap();
    let (shown, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(2), "{shown}{err}");
    assert_eq!(shown.matches("unreachable").count(), 1, "{shown}");
    assert!(err.contains("1 of 4 io servers did not answer"), "{err}");
}

/// `weft ls -l DIR`'s standard output and error; it must have exited with 1.
#[track_caller]
fn ls_long_failing(cluster: &TestCluster, dir: &str) -> (String, String) {
    let out = cluster.weft(&["ls", "-l", dir]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    (stdout, stderr)
}

/// One file whose objects were gone made `weft ls -l` of its whole directory fail.
#[test]
fn ls_lists_a_file_without_objects_marked_and_carries_on() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    for name in ["a", "broken", "c"] {
        let file = client.create(&format!("/{name}"), &Default::default()).unwrap();
        file.write_at(0, b"content").unwrap();
    }
    let broken = client.stat("/broken").unwrap();
    for server in broken.layout.as_ref().unwrap().servers.iter() {
        std::fs::remove_file(common::object_path(&cluster, *server, broken.inode)).unwrap();
    }
    let (stdout, stderr) = ls_long_failing(&cluster, "/");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for (line, name) in lines.iter().zip(["a", "broken", "c"]) {
        assert!(line.ends_with(&format!(" {name}")), "{stdout}");
        let marked = line.starts_with("-?????????");
        assert_eq!(marked, name == "broken", "{line}");
        if name != "broken" {
            assert!(line.split_whitespace().any(|c| c == "7"), "{line}");
        }
    }
    assert!(
        stderr.contains("cannot access /broken") && stderr.contains("no data objects"),
        "{stderr}"
    );
}

/// `weft stat | head` panicked ("failed printing to stdout") on the closed pipe.
#[test]
fn output_into_a_closed_pipe_ends_quietly_as_by_sigpipe() {
    use std::os::unix::process::ExitStatusExt;
    let cluster = TestCluster::start();
    weft_ok(&cluster, &["mkdir", "/d"]);
    for args in [
        vec!["stat", "/d"],
        vec!["ls", "/"],
        vec!["ls", "-l", "/"],
        vec!["layout", "/d"],
        vec!["df"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = cluster
            .command("weft")
            .args(&args)
            .stdout(writer)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "weft {args:?}: {err}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "weft {args:?}: {:?} {err}",
            out.status
        );
        assert!(err.is_empty(), "weft {args:?}: {err}");
    }
}

/// `weft ls` printed names holding newlines or bidirectional controls raw: a name
/// could pass for two entries or reorder the line on a terminal.
#[test]
fn ls_escapes_names_with_control_and_bidi_characters_as_gnu_ls_does() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let root = weft_client::InodeId::ROOT;
    for name in [
        &b"plain"[..],
        b"two\nlines",
        "evil\u{202E}txt.exe".as_bytes(),
        b"\x1b[2Jclear",
        b"not\xffutf8",
    ] {
        client.create_in(root, name, &Default::default()).unwrap();
    }
    let listed = weft_ok(&cluster, &["ls", "/"]);
    let expected = [
        "$'\\033''[2Jclear'",
        "'evil'$'\\342\\200\\256''txt.exe'",
        "'not'$'\\377''utf8'",
        "plain",
        "'two'$'\\n''lines'",
    ];
    assert_eq!(listed.lines().collect::<Vec<_>>(), expected, "{listed}");
    let long = weft_ok(&cluster, &["ls", "-l", "/"]);
    assert_eq!(long.lines().count(), expected.len(), "{long}");
    for (line, name) in long.lines().zip(expected) {
        assert!(line.ends_with(&format!(" {name}")), "{line}");
    }
}

/// `weft ls -l` goes by readdir-plus pages (attributes with the names, sizes from the io
/// servers per page) and lists a directory whole even when one of its files has lost its
/// objects (removed between the listing and the sizes, or damaged): that file is listed
/// marked and reported, the rest keep their true sizes.
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
    let out = cluster.weft(&["ls", "-l", "/l"]);
    let long = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{long}");
    let names: Vec<&str> = long.lines().filter_map(|l| l.split_whitespace().last()).collect();
    assert_eq!(names, ["f0", "f1", "f2", "f3", "f4"], "{long}");
    let marked: Vec<bool> = long.lines().map(|l| l.starts_with("-?????????")).collect();
    assert_eq!(marked, [false, false, true, false, false], "{long}");
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

/// `weft mkdir` made every directory 0755 whatever the umask (a private directory made
/// under umask 077 was open to all); now 0777 under the umask, or `-m MODE`, as mkdir(1).
#[test]
fn mkdir_honours_the_umask_and_takes_a_mode() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    for (script, path, mode) in [
        ("umask 077; exec \"$WEFT\" mkdir /private", "/private", 0o700),
        ("umask 022; exec \"$WEFT\" mkdir -p /a/b", "/a/b", 0o755),
        ("umask 077; exec \"$WEFT\" mkdir -m 750 /shared", "/shared", 0o750),
    ] {
        let out = shell(&cluster, script).output().unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(client.stat(path).unwrap().mode & 0o7777, mode, "{script}");
    }
    let (_, err) = weft_err(&cluster, &["mkdir", "-m", "999", "/bad"]);
    assert!(err.contains("not an octal mode"), "{err}");
}

/// `weft ARGS` with no cluster, only `env` (and no $WEFT_META unless `env` sets it): its
/// exit code and standard error.
fn weft_alone(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .args(args)
        .env_remove("WEFT_META")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn stripe_sizes_cache_memory_and_lifetimes_out_of_range_are_refused_before_anything_starts() {
    // No cluster: the values are checked where they are parsed, with the range, rather
    // than by the manager as a malformed request ("invalid stripe size: 1", naming
    // put's temporary file) or by `weft up` after it started its servers.
    let home = tempfile::tempdir().unwrap();
    let home_dir = home.path().to_str().unwrap();
    let weft = |args: &[&str]| weft_alone(args, &[("WEFT_HOME", home_dir)]);
    for args in [
        &["put", "--stripe-size", "1", "/etc/hostname", "/x"][..],
        &["layout", "--set", "--stripe-size", "2G", "/d"],
        &["up", "--stripe-size", "0"],
    ] {
        let (code, err) = weft(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("512 bytes to 1G"), "{args:?}: {err}");
    }
    let (code, err) = weft(&["up", "--capability-lifetime-ms", "5"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("1000 to 3600000 ms"), "{err}");
    for memory in ["0", "2T"] {
        let (code, err) = weft(&["up", "--cache", "colocated", "--cache-memory", memory]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("1M (1048576 bytes) to 1T"), "{err}");
    }
    assert_eq!(
        std::fs::read_dir(home.path()).unwrap().count(),
        0,
        "a refused `weft up` makes nothing in the home"
    );
    // A home that is a file is named as such, not as "creating FILE/logs: Not a directory".
    let file = home.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let (code, err) = weft(&["up", "--home", file.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is not a directory") && !err.contains("logs"),
        "{err}"
    );
}

#[test]
fn layout_options_without_set_are_refused_not_ignored() {
    // No cluster: both are refused before connecting.
    let weft = |args: &[&str]| weft_alone(args, &[("WEFT_META", "127.0.0.1:1")]);
    // `weft layout /f --stripe-size 1M` showed the layout and dropped the option.
    for args in [
        &["layout", "--stripe-size", "1M", "/d"][..],
        &["layout", "--clear", "--cache", "none", "/d"],
    ] {
        let (code, err) = weft(args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains("go with --set"), "{args:?}: {err}");
    }
    let (code, err) = weft(&["layout", "--set", "/d"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--cache"), "{err}");
}

/// `weft get` over an existing local file replaces it only once the whole copy is
/// synced: a get interrupted midway (SIGINT, seen copying) or failing before it copies
/// (an io server killed) leaves the old copy as it was and no temporary file; one that
/// succeeds keeps the old file's mode.
#[test]
fn a_failed_get_leaves_the_existing_local_file_as_it_was() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let data = Rng::new(common::seed(
        "a_failed_get_leaves_the_existing_local_file_as_it_was",
    ))
    .bytes(256 << 20);
    let source = dir.path().join("source.bin");
    std::fs::write(&source, &data).unwrap();
    weft_ok(&cluster, &["put", source.to_str().unwrap(), "/big.bin"]);
    std::fs::remove_file(&source).unwrap();
    let back = dir.path().join("back.bin");
    let old = b"the old copy";
    std::fs::write(&back, old).unwrap();
    std::fs::set_permissions(&back, std::fs::Permissions::from_mode(0o600)).unwrap();
    let entries = || {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = entries();

    // Interrupted once it is seen copying (a new name beside it, or the file changed).
    let mut get = cluster
        .command("weft")
        .args(["get", "/big.bin", back.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while entries() == before && std::fs::read(&back).map(|b| b == old).unwrap_or(false) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "get never began copying"
        );
        assert!(
            get.try_wait().unwrap().is_none(),
            "get ended before it was seen copying"
        );
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
    // SAFETY: signalling the child started above.
    unsafe { libc::kill(get.id() as i32, libc::SIGINT) };
    let out = get.wait_with_output().unwrap();
    assert!(!out.status.success(), "get was interrupted but succeeded");
    assert_eq!(std::fs::read(&back).unwrap(), old, "after an interrupted get");
    assert_eq!(entries(), before, "a temporary file was left behind");

    weft_ok(&cluster, &["get", "/big.bin", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == data, "the get's bytes");
    assert_eq!(
        std::fs::metadata(&back).unwrap().permissions().mode() & 0o777,
        0o600
    );
    std::fs::write(&back, old).unwrap();

    cluster.kill9(2);
    weft_err(&cluster, &["get", "/big.bin", back.to_str().unwrap()]);
    assert_eq!(std::fs::read(&back).unwrap(), old, "after a failed get");
    assert_eq!(entries(), before, "a temporary file was left behind");
}

/// `weft ls -l` of a directory failed as a whole when one io server was down, since a
/// size needs every server of the file: it must list every entry, the sizes it cannot
/// have as `?`, say which server it could not reach, and exit non-zero.
#[test]
fn ls_lists_every_entry_when_an_io_server_is_down() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/d", 0o755).unwrap();
    client.mkdir("/d/sub", 0o755).unwrap();
    let io = io_server_ids(&client);
    let dead = io.last().unwrap().0;
    let dead_index = io.len() as u32 - 1;
    // "spread" has an object on every io server; "elsewhere" one, on a server that
    // stays up.
    let spread = client.create("/d/spread", &CreateOptions::default()).unwrap();
    spread.write_at(0, &[1u8; 300_000]).unwrap();
    spread.sync().unwrap();
    let mut one = CreateOptions::default();
    one.layout.stripe_count = Some(1);
    one.layout.first_server = Some(0);
    let elsewhere = client.create("/d/elsewhere", &one).unwrap();
    elsewhere.write_at(0, &[2u8; 1234]).unwrap();
    elsewhere.sync().unwrap();
    assert!(!elsewhere.layout().servers.iter().any(|s| s.0 == dead));
    assert!(spread.layout().servers.iter().any(|s| s.0 == dead));
    assert_ne!(dead_index, 0);
    cluster.kill9(dead);

    let (stdout, stderr) = ls_long_failing(&cluster, "/d");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "every entry listed:\n{stdout}{stderr}");
    let line = |name: &str| {
        let cols: Vec<&str> = lines
            .iter()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("{name} not listed:\n{stdout}"))
            .split_whitespace()
            .collect();
        cols
    };
    // mode, links, uid, gid, size, date, time, name
    let spread_cols = line("spread");
    assert!(spread_cols[0].starts_with("-rw"), "{stdout}");
    assert_eq!(spread_cols[4], "?", "an unknowable size is shown as ?:\n{stdout}");
    assert_eq!(line("elsewhere")[4], "1234", "{stdout}");
    assert!(line("sub")[0].starts_with('d'), "{stdout}");
    // Said once, naming the server.
    assert_eq!(
        stderr
            .matches(&format!("server {dead} could not be reached"))
            .count(),
        1,
        "{stderr}"
    );
    assert_eq!(stderr.matches("marked ?").count(), 1, "said once:\n{stderr}");
}

/// The same on a cluster with a cache tier (`make run`'s demo cluster: every io server
/// with a cache manager): a server down is a cache manager down too, and a cached
/// file's last bytes may be on any manager, so every cached file's size is `?`; the
/// listing still shows every entry.
#[test]
fn ls_lists_every_entry_when_a_cache_manager_is_down() {
    let cluster = TestCluster::start_with(&ClusterOptions::cached("colocated", "64M"));
    let client = cluster.client();
    client.mkdir("/c", 0o755).unwrap();
    for name in ["a", "b"] {
        let f = client
            .create(&format!("/c/{name}"), &CreateOptions::default())
            .unwrap();
        f.write_at(0, &[3u8; 200_000]).unwrap();
        f.sync().unwrap();
        assert!(f.cache_mode().uses_tier(), "{name} is not in the cache tier");
    }
    let dead = io_server_ids(&client).last().unwrap().0;
    cluster.kill9(dead);
    let (stdout, stderr) = ls_long_failing(&cluster, "/c");
    let sizes: Vec<&str> = stdout
        .lines()
        .map(|l| l.split_whitespace().nth(4).unwrap_or(""))
        .collect();
    assert_eq!(
        sizes,
        ["?", "?"],
        "every entry listed, sizes unknown:\n{stdout}{stderr}"
    );
    assert_eq!(
        stderr
            .matches(&format!("server {dead} could not be reached"))
            .count(),
        1,
        "{stderr}"
    );
}

/// `weft up --io -1` got clap's "unexpected argument '-1' found" (a value that starts
/// with `-` was taken for an option), and so did every other whole-number option of
/// `weft up` and `weft bench`, and sizes such as `--cache-memory -1M`: each must say
/// what the option takes, with nothing started.
#[test]
fn negative_counts_to_up_and_bench_are_refused_saying_what_is_taken() {
    let home = tempfile::tempdir().unwrap();
    let home_dir = home.path().to_str().unwrap();
    let weft = |args: &[&str]| weft_alone(args, &[("WEFT_HOME", home_dir)]);
    for (args, says) in [
        (&["up", "--io", "-1"][..], "the count must be 1..=64"),
        (&["up", "--io", "0"], "the count must be 1..=64"),
        (&["up", "--io", "65"], "the count must be 1..=64"),
        (
            &["up", "--io", "four"],
            "not a whole number; the count must be 1..=64",
        ),
        (&["up", "--precreate", "-5"], "the count must be 0 or more"),
        (&["up", "--stripe-count", "-1"], "the count must be 0 or more"),
        (&["up", "--stripe-size", "-1"], "512 bytes to 1G"),
        (&["up", "--cache", "-2"], "a number of cache managers (1..=64)"),
        (
            &["up", "--cache", "colocated", "--cache-memory", "-1M"],
            "1M (1048576 bytes) to 1T",
        ),
        (
            &["up", "--capability-lifetime-ms", "-5"],
            "not a number of milliseconds",
        ),
        (&["bench", "meta", "--procs", "-3"], "the count must be 0 or more"),
        (&["bench", "meta", "--files", "-1"], "the count must be 0 or more"),
        (
            &["bench", "collective", "--k", "4,-4"],
            "the count must be 0 or more",
        ),
    ] {
        let (code, err) = weft(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
        // The value refused: of a list, the element.
        let value = args.last().unwrap().rsplit(',').next().unwrap();
        assert!(
            err.contains(&format!("'{value}'")),
            "{args:?} names the value: {err}"
        );
    }
    assert_eq!(
        std::fs::read_dir(home.path()).unwrap().count(),
        0,
        "a refused `weft up` makes nothing in the home"
    );
}

//! A full disk is survived: the metadata manager and an io server run on 8 MiB tmpfs
//! file systems, which the test fills to ENOSPC. Writes and metadata operations fail
//! with "no space" errors that name the server, reads go on, and once the test frees
//! the space everything works again without a restart, with every file written before
//! intact and no object of a failed create left behind.
//!
//! Before, the manager answered every operation after its disk filled once with redb's
//! "Previous I/O error occurred. Please close and re-open the database", even after
//! space was freed, until restarted (issue 12).
//!
//! Mounting needs root, which CI has.

use std::io::Write;
use std::path::{Path, PathBuf};
use weft_client::{Client, CreateOptions, ErrorCode, LayoutRequest};
use weft_testkit::{ClusterOptions, TestCluster, Tmpfs};

/// Fills the file system of `dir` to the last byte with a file `filler`.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0x5A; 64 * 1024];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    // The last partial chunks, byte by byte as far as they go.
    while f.write(&[0x5A; 512]).is_ok_and(|n| n > 0) {}
    while f.write(&[0x5A]).is_ok_and(|n| n > 0) {}
    path
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|k| ((k * 31 + seed * 7) % 251) as u8)
        .collect()
}

/// Objects on the io servers' disks.
fn objects_on_disk(home: &Path) -> usize {
    let mut n = 0;
    for server in ["server-1", "server-2"] {
        for shard in std::fs::read_dir(home.join("data").join(server).join("objects")).unwrap() {
            n += std::fs::read_dir(shard.unwrap().path()).unwrap().count();
        }
    }
    n
}

fn read_all(client: &Client, path: &str) -> Vec<u8> {
    let file = client.open(path, &Default::default()).unwrap();
    let mut buf = vec![0u8; file.size().unwrap() as usize];
    assert_eq!(file.read_at(0, &mut buf).unwrap(), buf.len());
    buf
}

#[test]
fn full_disks_give_clear_errors_keep_reads_going_and_recover_without_a_restart() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        ..Default::default()
    });
    let out = cluster.weft(&["down"]);
    assert!(out.status.success());
    let data = cluster.home().join("data");
    // Unmounted when dropped, also when the test fails.
    let mounts = [
        Tmpfs::over(&data.join("server-0"), "8m"),
        Tmpfs::over(&data.join("server-1"), "8m"),
    ];
    cluster.restart();
    let pids: Vec<Option<i32>> = (0..=2).map(|id| cluster.pid(id)).collect();
    let client = cluster.client();
    // One stripe per file, on the io server named.
    let on = |server: u32| CreateOptions {
        layout: LayoutRequest {
            stripe_count: Some(1),
            first_server: Some(server - 1),
            ..Default::default()
        },
        ..Default::default()
    };

    // Files written before the disks fill.
    let mut before = Vec::new();
    for k in 0..6u64 {
        let path = format!("/before-{k}");
        let file = client.create(&path, &on(1 + (k % 2) as u32)).unwrap();
        let bytes = pattern(k, 300_000);
        file.write_at(0, &bytes).unwrap();
        file.sync().unwrap();
        before.push((path, bytes));
    }
    client.mkdir("/dir", 0o755).unwrap();

    // Io server 1's disk fills: writes to it fail, naming it; reads go on.
    let io_filler = fill(&data.join("server-1"));
    let victim = client.create("/on-full-io", &on(1)).unwrap();
    let mut error = None;
    for k in 0..64u64 {
        if let Err(e) = victim.write_at(k << 20, &pattern(k, 1 << 20)) {
            error = Some(e);
            break;
        }
    }
    let error = error.expect("writes to a full io server failed");
    assert_eq!(error.code(), ErrorCode::NoSpace, "{error}");
    assert!(error.to_string().contains("io server 1"), "{error}");
    for (path, bytes) in &before {
        assert_eq!(
            &read_all(&client, path),
            bytes,
            "{path} while io server 1 is full"
        );
    }
    // `weft put` onto the full server says which server is full, and leaves no file.
    let local = cluster.home().join("big.bin");
    std::fs::write(&local, pattern(5, 12 << 20)).unwrap();
    let out = cluster
        .command("weft")
        .args(["put", "--stripe-count", "1", "--first-server", "0"])
        .arg(&local)
        .arg("/put-on-full")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a put onto a full io server succeeded");
    assert!(
        err.contains("/put-on-full") && err.contains("io server 1") && err.contains("No space left"),
        "{err}"
    );
    let names: Vec<String> = client
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name.to_string())
        .collect();
    assert!(
        !names.iter().any(|n| n.contains("put-on-full")),
        "a failed put left {names:?}"
    );
    // The other io server takes writes.
    let elsewhere = client.create("/on-io-2", &on(2)).unwrap();
    elsewhere.write_at(0, &pattern(9, 100_000)).unwrap();

    // The manager's disk fills: metadata operations fail with a clear error, lookups
    // and listings go on, and creates that fail leave no object behind.
    let meta_filler = fill(&data.join("server-0"));
    let mut meta_error = None;
    for k in 0..20_000 {
        let name = format!("/dir/{k:0>200}");
        let result = if k % 2 == 0 {
            client.mkdir(&name, 0o755).map(drop)
        } else {
            client.create(&name, &on(2)).map(drop)
        };
        if let Err(e) = result {
            meta_error = Some(e);
            break;
        }
    }
    let meta_error = meta_error.expect("metadata operations on a full manager failed");
    assert_eq!(meta_error.code(), ErrorCode::NoSpace, "{meta_error}");
    assert!(
        meta_error.to_string().contains("metadata manager"),
        "{meta_error}"
    );
    for k in 0..5 {
        let again = client.create(&format!("/dir/again-{k}"), &on(2));
        let e = again.map(drop).expect_err("creates on a full manager fail");
        assert!(
            !e.to_string().contains("Previous I/O error"),
            "the manager's database stayed poisoned: {e}"
        );
    }
    for (path, bytes) in &before {
        assert_eq!(
            &read_all(&client, path),
            bytes,
            "{path} while the manager is full"
        );
    }
    let listed = client.readdir("/").unwrap().len();
    assert!(listed >= before.len() + 3, "{listed} names in /");

    // Space freed: everything resumes by itself, in the same processes.
    std::fs::remove_file(io_filler).unwrap();
    std::fs::remove_file(meta_filler).unwrap();
    client.mkdir("/after", 0o755).unwrap();
    let after = client.create("/after/file", &on(1)).unwrap();
    let bytes = pattern(77, 1 << 20);
    after.write_at(0, &bytes).unwrap();
    after.sync().unwrap();
    assert_eq!(read_all(&client, "/after/file"), bytes);
    victim.write_at(0, b"resumed").unwrap();
    victim.sync().unwrap();
    for (path, bytes) in &before {
        assert_eq!(&read_all(&client, path), bytes, "{path} after space was freed");
    }
    assert_eq!(
        (0..=2).map(|id| cluster.pid(id)).collect::<Vec<_>>(),
        pids,
        "a server restarted"
    );

    // Every object on the io servers belongs to a file in the namespace (after the
    // manager's purger settled the failed creates). The manager's pool of precreated
    // objects lives in its memory and its store: a crash and restart hands the pool's
    // numbers to the purger, so that then objects and files must match exactly.
    cluster.kill9(0);
    cluster.restart();
    let client = cluster.client();
    let files = |client: &Client| {
        let mut n = 0;
        let mut dirs = vec!["/".to_string()];
        while let Some(dir) = dirs.pop() {
            for entry in client.readdir(&dir).unwrap() {
                let path = format!("{}/{}", dir.trim_end_matches('/'), entry.name);
                match client.stat(&path).unwrap().kind {
                    weft_client::FileKind::Directory => dirs.push(path),
                    // One stripe, so one object.
                    _ => n += 1,
                }
            }
        }
        n
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (on_disk, named) = (objects_on_disk(cluster.home()), files(&client));
        if on_disk == named {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{on_disk} objects on the io servers, {named} files in the namespace: failed creates leaked objects"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    drop(mounts);
}

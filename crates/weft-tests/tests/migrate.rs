//! Migration of files to a new layout in place (`weft migrate`) and the drain of an io
//! server (`weft server drain|remove`, issue 35), on real clusters: under concurrent
//! readers and writers, every byte a writer was told written is there afterwards
//! (checked against a model of the file), readers never see anything but the file's
//! bytes, the inode, extended attributes and time stay, and nothing is left behind
//! (no hidden file, no set-aside object). A drained server can then be stopped with
//! every byte still readable. Impossible layouts and a stopped server give a clear
//! error in bounded time with the file untouched.

mod common;

use common::{io_server_ids, pattern, weft_err, weft_ok};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError, ErrorCode, File, OpenOptions};
use weft_testkit::{Rng, TestCluster};

fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(at) = got.iter().zip(want).position(|(a, b)| a != b) {
        let zeros = got[at..].iter().take(4096).all(|b| *b == 0);
        panic!(
            "{what}: first wrong byte at offset {at} of {} (got {:?}, want {:?}; zeros after: {zeros})",
            got.len(),
            &got[at..(at + 8).min(got.len())],
            &want[at..(at + 8).min(want.len())]
        );
    }
}

fn read_all(client: &Client, path: &str) -> Vec<u8> {
    let file = client.open(path, &OpenOptions::default()).unwrap();
    let size = file.size().unwrap() as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(file.read_at(0, &mut buf).unwrap(), size);
    buf
}

fn put(cluster: &TestCluster, dir: &std::path::Path, path: &str, data: &[u8]) {
    let local = dir.join("src");
    std::fs::write(&local, data).unwrap();
    weft_ok(cluster, &["put", local.to_str().unwrap(), path]);
}

/// Files of the io servers' data directories whose name ends with `.migrated` (set
/// aside by a migration, never removed), and hidden migration files in `dir`.
fn leftovers(cluster: &TestCluster, client: &Client, dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![cluster.home().to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "migrated") {
                found.push(path.display().to_string());
            }
        }
    }
    for entry in client.readdir(dir).unwrap() {
        let name = String::from_utf8_lossy(entry.name.as_bytes()).into_owned();
        if name.contains("weft-migrate") {
            found.push(format!("{dir}/{name}"));
        }
    }
    found
}

/// A writer's write, reopening the file when its handle's layout was replaced.
fn write_reopening(client: &Client, file: &mut File, path: &str, offset: u64, data: &[u8]) {
    loop {
        match file.write_at(offset, data) {
            Ok(_) => return,
            Err(e) if e.code() == ErrorCode::Stale => {
                *file = client
                    .open(
                        path,
                        &OpenOptions {
                            write: true,
                            ..Default::default()
                        },
                    )
                    .unwrap();
            }
            Err(e) => panic!("write at {offset}: {e}"),
        }
    }
}

/// Makes directory `path` whose new files are striped over 2 io servers.
fn two_stripe_dir(cluster: &TestCluster, path: &str) {
    cached_two_stripe_dir(cluster, path, "none");
}

/// `two_stripe_dir` whose new files have caching mode `cache` (`none`, `cached`,
/// `delegated`).
fn cached_two_stripe_dir(cluster: &TestCluster, path: &str, cache: &str) {
    weft_ok(cluster, &["mkdir", path]);
    weft_ok(
        cluster,
        &["layout", "--set", "--stripe-count", "2", "--cache", cache, path],
    );
}

/// The server id of the cluster's metadata manager.
fn manager_id(cluster: &TestCluster) -> u32 {
    cluster
        .config()
        .servers
        .iter()
        .find(|s| s.roles.contains(&weft_config::Role::Meta))
        .unwrap()
        .id
}

fn is_stale(e: &ClientError) -> bool {
    e.code() == ErrorCode::Stale
}

/// Once the writer counting `writes` made more than `first` writes, migrates `path` to
/// 4 stripes of 128 KiB (each 4 MiB chunk of the copy waiting 150 ms, so that writes
/// surely race it), then waits for 5 more writes after the switch, which must come
/// within seconds. The write counts when the migration began and ended.
fn migrate_while_writing(cluster: &TestCluster, path: &str, writes: &AtomicU64, first: u64) -> (u64, u64) {
    common::wait_for("the writer to start", Duration::from_secs(30), || {
        (writes.load(Ordering::SeqCst) > first).then_some(())
    });
    let during = writes.load(Ordering::SeqCst);
    let out = cluster
        .command("weft")
        .args(["migrate", "--stripe-count", "4", "--stripe-size", "128K", path])
        .env("WEFT_FAULT_MIGRATE_PAUSE_MS", "150")
        .output()
        .unwrap();
    let out = common::output_ok(out, "weft migrate");
    assert!(out.contains("-> stripe size 128 KiB, count 4"), "{out}");
    let after = writes.load(Ordering::SeqCst);
    let switched = Instant::now();
    common::wait_for("writes after the switch", Duration::from_secs(30), || {
        (writes.load(Ordering::SeqCst) > after + 5).then_some(())
    });
    // Writes resume at the switch: a freeze or a cache manager's hold left to lapse
    // (30 s leases) would keep them waiting.
    let resumed = switched.elapsed();
    assert!(
        resumed < Duration::from_secs(10),
        "writes resumed {resumed:?} after the switch"
    );
    (during, after)
}

#[test]
fn a_file_migrates_under_readers_and_writers_and_keeps_every_byte_and_its_inode() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let dir = tempfile::Builder::new().prefix("migrate-").tempdir().unwrap();
    two_stripe_dir(&cluster, "/m");
    const SIZE: usize = 24 << 20;
    // The writer changes the first half only; readers check the second half.
    const HALF: u64 = (SIZE / 2) as u64;
    let original = pattern(1, 0, SIZE);
    put(&cluster, dir.path(), "/m/f", &original);
    let before = client.stat("/m/f").unwrap();
    client
        .setxattr(before.inode, "user.kept", b"yes", weft_client::XattrSet::Either)
        .unwrap();
    let model = Arc::new(Mutex::new(original.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));

    let writer = {
        let (client, model, stop, writes) = (cluster.client(), model.clone(), stop.clone(), writes.clone());
        std::thread::spawn(move || {
            let mut rng = Rng::new(7);
            let mut file = client
                .open(
                    "/m/f",
                    &OpenOptions {
                        write: true,
                        ..Default::default()
                    },
                )
                .unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let len = rng.between(1, 200_000) as usize;
                let offset = rng.below(HALF - len as u64);
                let data = pattern(100 + n, offset, len);
                write_reopening(&client, &mut file, "/m/f", offset, &data);
                // Acknowledged: the model has it too.
                model.lock().unwrap()[offset as usize..offset as usize + len].copy_from_slice(&data);
                n += 1;
                writes.store(n, Ordering::SeqCst);
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (client, stop) = (cluster.client(), stop.clone());
            let want = original[HALF as usize..].to_vec();
            std::thread::spawn(move || {
                let mut rng = Rng::new(20 + r);
                let mut reads = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let len = rng.between(1, 1 << 20) as usize;
                    let at = rng.below(want.len() as u64 - len as u64) as usize;
                    let file = match client.open("/m/f", &OpenOptions::default()) {
                        Ok(f) => f,
                        Err(e) if is_stale(&e) => continue,
                        Err(e) => panic!("open: {e}"),
                    };
                    let mut buf = vec![0u8; len];
                    match file.read_at(HALF + at as u64, &mut buf) {
                        Ok(got) => {
                            assert_eq!(got, len);
                            same_bytes(&buf, &want[at..at + len], "a read during the migration");
                            reads += 1;
                        }
                        // A handle of the old layout after the switch: reopened.
                        Err(e) if is_stale(&e) => {}
                        Err(e) => panic!("read: {e}"),
                    }
                }
                reads
            })
        })
        .collect();

    // Writes keep going while the copy runs, and after the switch through reopened
    // handles.
    let (during, after) = migrate_while_writing(&cluster, "/m/f", &writes, 0);
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    eprintln!(
        "writes: {} in all, {} while the migration ran; reads checked: {reads}",
        writes.load(Ordering::SeqCst),
        after - during
    );
    assert!(after > during, "no write ran during the migration");

    let now = client.stat("/m/f").unwrap();
    assert_eq!(now.inode, before.inode, "the inode changed");
    let layout = now.layout.clone().unwrap();
    assert_eq!((layout.servers.len(), layout.stripe_size_bytes), (4, 128 << 10));
    assert_eq!(client.getxattr(now.inode, "user.kept").unwrap(), b"yes");
    same_bytes(
        &read_all(&client, "/m/f"),
        &model.lock().unwrap(),
        "the file after the migration",
    );
    assert_eq!(leftovers(&cluster, &client, "/m"), Vec::<String>::new());
}

#[test]
fn a_quiet_file_keeps_its_time_and_holes_and_a_second_migration_to_the_same_layout_does_nothing() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let dir = tempfile::Builder::new().prefix("migrate-").tempdir().unwrap();
    let data = pattern(3, 0, 3 << 20);
    put(&cluster, dir.path(), "/q", &data);
    // A hole of 10 MiB, then 1 MiB of data: size 14 MiB.
    {
        let file = client
            .open(
                "/q",
                &OpenOptions {
                    write: true,
                    ..Default::default()
                },
            )
            .unwrap();
        file.write_at(13 << 20, &pattern(4, 0, 1 << 20)).unwrap();
    }
    let old_time = weft_client::Timespec {
        secs: 981_173_106,
        nanos: 0,
    };
    client
        .setattr(
            "/q",
            &weft_client::SetAttr {
                mtime: Some(weft_client::TimeSet::At(old_time)),
                ..Default::default()
            },
        )
        .unwrap();
    let before = client.stat("/q").unwrap();
    let mut want = data.clone();
    want.resize(13 << 20, 0);
    want.extend_from_slice(&pattern(4, 0, 1 << 20));

    weft_ok(&cluster, &["migrate", "--stripe-count", "1", "/q"]);
    let after = client.stat("/q").unwrap();
    assert_eq!(after.inode, before.inode);
    assert_eq!(before.mtime, old_time);
    assert_eq!(after.mtime, before.mtime, "the modification time changed");
    assert_eq!(after.size, before.size);
    assert_eq!(after.layout.as_ref().unwrap().servers.len(), 1);
    same_bytes(&read_all(&client, "/q"), &want, "the migrated file");
    let out = weft_ok(&cluster, &["migrate", "--stripe-count", "1", "/q"]);
    assert!(out.contains("has that layout already"), "{out}");
}

#[test]
fn a_drained_server_holds_nothing_and_can_stop_with_every_byte_still_readable() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let dir = tempfile::Builder::new().prefix("drain-").tempdir().unwrap();
    let servers = io_server_ids(&client);
    // Not the manager's own server: it is stopped at the end.
    let meta_id = manager_id(&cluster);
    let victim = *servers.iter().rev().find(|s| s.0 != meta_id).unwrap();
    weft_ok(&cluster, &["mkdir", "/d"]);
    weft_ok(&cluster, &["layout", "--set", "--stripe-count", "2", "/d"]);
    let mut files = Vec::new();
    for i in 0..12u64 {
        let data = pattern(200 + i, 0, (1 << 20) + 77_777 * i as usize);
        let path = format!("/d/f{i}");
        weft_ok(
            &cluster,
            &[
                "layout",
                "--set",
                "--stripe-count",
                "2",
                "--first-server",
                &(i % servers.len() as u64).to_string(),
                "/d",
            ],
        );
        put(&cluster, dir.path(), &path, &data);
        files.push((path, data));
    }
    // One file striped over every io server: it cannot keep its stripe count, so the
    // drain narrows it to the servers that stay (it failed the drain before).
    let wide_count = servers.len().to_string();
    weft_ok(
        &cluster,
        &["layout", "--set", "--stripe-count", &wide_count, "/d"],
    );
    let wide = pattern(300, 0, (3 << 20) + 12_345);
    put(&cluster, dir.path(), "/d/wide", &wide);
    files.push(("/d/wide".to_string(), wide));
    let on_victim = files
        .iter()
        .filter(|(p, _)| {
            client
                .resolve(p)
                .unwrap()
                .layout
                .unwrap()
                .piece_of(victim)
                .is_some()
        })
        .count();
    assert!(on_victim >= 3, "only {on_victim} files on io server {victim}");

    // A writer rewrites one file on the victim, readers read all, while the drain runs.
    let busy = files
        .iter()
        .find(|(p, _)| {
            client
                .resolve(p)
                .unwrap()
                .layout
                .unwrap()
                .piece_of(victim)
                .is_some()
        })
        .unwrap()
        .clone();
    let stop = Arc::new(AtomicBool::new(false));
    let final_tag = Arc::new(AtomicU64::new(0));
    let writer = {
        let (client, stop, final_tag, path, len) = (
            cluster.client(),
            stop.clone(),
            final_tag.clone(),
            busy.0.clone(),
            busy.1.len(),
        );
        std::thread::spawn(move || {
            let mut file = client
                .open(
                    &path,
                    &OpenOptions {
                        write: true,
                        ..Default::default()
                    },
                )
                .unwrap();
            let mut tag = 1000;
            while !stop.load(Ordering::SeqCst) {
                tag += 1;
                write_reopening(&client, &mut file, &path, 0, &pattern(tag, 0, len));
                final_tag.store(tag, Ordering::SeqCst);
            }
        })
    };
    let reader = {
        let (client, stop) = (cluster.client(), stop.clone());
        let quiet: Vec<_> = files.iter().filter(|(p, _)| *p != busy.0).cloned().collect();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                for (path, data) in &quiet {
                    let Ok(file) = client.open(path, &OpenOptions::default()) else {
                        continue;
                    };
                    let mut buf = vec![0u8; data.len()];
                    match file.read_at(0, &mut buf) {
                        Ok(_) => same_bytes(&buf, data, "a read during the drain"),
                        Err(e) if is_stale(&e) => {}
                        Err(e) => panic!("read {path}: {e}"),
                    }
                }
            }
        })
    };
    let victim_arg = victim.0.to_string();
    let out = weft_ok(&cluster, &["server", "drain", &victim_arg, "--quiet"]);
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    reader.join().unwrap();
    assert!(
        out.contains(&format!("drained io server {victim}: {on_victim} files moved")),
        "{out}"
    );
    let status = weft_ok(&cluster, &["status"]);
    assert!(status.contains("placement: drained"), "{status}");
    // Nothing on it any more, and new files go elsewhere.
    for (path, _) in &files {
        let layout = client.resolve(path).unwrap().layout.unwrap();
        assert!(
            layout.piece_of(victim).is_none(),
            "{path} still on io server {victim}: {layout:?}"
        );
    }
    let narrowed = client.resolve("/d/wide").unwrap().layout.unwrap();
    assert_eq!(narrowed.servers.len(), servers.len() - 1, "{narrowed:?}");
    weft_ok(&cluster, &["layout", "--set", "--stripe-count", "0", "/d"]);
    put(&cluster, dir.path(), "/d/new", b"fresh");
    let layout = client.resolve("/d/new").unwrap().layout.unwrap();
    assert!(
        layout.piece_of(victim).is_none(),
        "a new file was placed on the drained server"
    );
    assert_eq!(leftovers(&cluster, &client, "/"), Vec::<String>::new());

    // The drained server stops: every byte is still there.
    cluster.kill9(victim.0);
    let busy_want = pattern(final_tag.load(Ordering::SeqCst), 0, busy.1.len());
    for (path, data) in &files {
        let want = if *path == busy.0 { &busy_want } else { data };
        same_bytes(&read_all(&client, path), want, path);
    }
    weft_ok(&cluster, &["server", "remove", &victim_arg]);
    assert!(weft_ok(&cluster, &["server", "list"]).contains(&format!("io server {victim}: removed")));
    // Out of service: a removed server (stopped, its machine gone) is no longer part of
    // the cluster's space, and `df` does not fail for it.
    let df = weft_ok(&cluster, &["df"]);
    assert!(!df.contains("unreachable"), "{df}");
    assert!(
        !cluster
            .client()
            .cluster_info()
            .io_servers
            .iter()
            .any(|s| s.id == victim),
        "a new client still lists removed io server {victim}"
    );
    weft_ok(&cluster, &["server", "activate", &victim_arg]);
    assert!(cluster
        .client()
        .cluster_info()
        .io_servers
        .iter()
        .any(|s| s.id == victim));
}

#[test]
fn impossible_layouts_and_a_stopped_server_fail_clearly_in_bounded_time_leaving_the_file_whole() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let dir = tempfile::Builder::new().prefix("migrate-").tempdir().unwrap();
    let data = pattern(9, 0, 2 << 20);
    weft_ok(&cluster, &["mkdir", "/e"]);
    weft_ok(&cluster, &["layout", "--set", "--stripe-count", "2", "/e"]);
    put(&cluster, dir.path(), "/e/f", &data);
    let before = client.resolve("/e/f").unwrap();

    let (_, err) = weft_err(&cluster, &["migrate", "--stripe-count", "9", "/e/f"]);
    assert!(err.contains("9") && err.contains("io servers"), "{err}");
    let (_, err) = weft_err(
        &cluster,
        &[
            "migrate",
            "--redundancy",
            "replicas=3",
            "--stripe-count",
            "2",
            "/e/f",
        ],
    );
    assert!(
        err.contains("replicas") || err.contains("copies") || err.contains("servers"),
        "{err}"
    );
    let (_, err) = weft_err(&cluster, &["migrate", "/e"]);
    assert!(err.contains("-r"), "{err}");
    let (_, err) = weft_err(&cluster, &["server", "drain", "77"]);
    assert!(err.contains("77") && err.contains("not in the cluster"), "{err}");
    let servers = io_server_ids(&client);
    let (_, err) = weft_err(&cluster, &["server", "remove", &servers[0].0.to_string()]);
    assert!(err.contains("drain it first"), "{err}");

    // One of the file's servers stopped (SIGSTOP): the migration fails in bounded time.
    let stopped = before.layout.as_ref().unwrap().servers[1];
    common::hang(&cluster, stopped.0);
    let started = Instant::now();
    let (_, err) = weft_err(&cluster, &["migrate", "--stripe-count", "1", "/e/f"]);
    let took = started.elapsed();
    cluster.signal(stopped.0, libc::SIGCONT);
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert!(err.contains(&format!("io server {stopped}")), "{err}");
    eprintln!("migration with io server {stopped} stopped failed after {took:?}: {err}");

    // Nothing changed and nothing is left; writes go on; a migration now works.
    let after = client.resolve("/e/f").unwrap();
    assert_eq!(after.layout, before.layout);
    same_bytes(
        &read_all(&client, "/e/f"),
        &data,
        "the file after the failed migrations",
    );
    let file = client
        .open(
            "/e/f",
            &OpenOptions {
                write: true,
                ..Default::default()
            },
        )
        .unwrap();
    file.write_at(0, b"still writable").unwrap();
    drop(file);
    common::wait_for("no hidden file left", Duration::from_secs(10), || {
        leftovers(&cluster, &client, "/e").is_empty().then_some(())
    });
    weft_ok(&cluster, &["migrate", "--stripe-count", "1", "/e/f"]);
    let mut want = data.clone();
    want[..14].copy_from_slice(b"still writable");
    same_bytes(&read_all(&client, "/e/f"), &want, "the file migrated after all");
    assert_eq!(client.resolve("/e/f").unwrap().layout.unwrap().servers.len(), 1);
}

/// Reads `path` through `file` (a handle opened before a migration): a `Stale` refusal,
/// never other bytes than `want`.
fn old_handle_never_reads_wrong_bytes(file: &File, want: &[u8], what: &str) {
    let mut buf = vec![0u8; want.len()];
    match file.read_at(0, &mut buf) {
        Err(e) if is_stale(&e) => {}
        Err(e) => panic!("{what}: {e}"),
        Ok(got) => {
            buf.truncate(got);
            same_bytes(&buf, want, what);
        }
    }
}

#[test]
fn a_handle_opened_before_a_migration_never_reads_the_new_objects_even_after_io_servers_restart() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let dir = tempfile::Builder::new().prefix("fence-").tempdir().unwrap();
    two_stripe_dir(&cluster, "/m");
    let original = pattern(3, 0, 5 << 20);
    put(&cluster, dir.path(), "/m/f", &original);
    let old = client.open("/m/f", &OpenOptions::default()).unwrap();
    old_handle_never_reads_wrong_bytes(&old, &original, "before the migration");
    // Same bytes, new striping: a read with the old one would gather them wrongly.
    weft_ok(
        &cluster,
        &["migrate", "--stripe-count", "4", "--stripe-size", "64K", "/m/f"],
    );
    same_bytes(
        &read_all(&client, "/m/f"),
        &original,
        "a fresh open after the migration",
    );
    old_handle_never_reads_wrong_bytes(&old, &original, "the old handle after the migration");
    // Every io server restarts (a crash): the fences are on their disks.
    for id in io_server_ids(&client) {
        if cluster.pid(id.0).is_some() {
            cluster.kill9(id.0);
        }
    }
    cluster.restart();
    let client = cluster.client();
    old_handle_never_reads_wrong_bytes(&old, &original, "the old handle after the io servers restarted");
    let mut stale = 0;
    for at in (0..original.len()).step_by(64 << 10) {
        let mut buf = vec![0u8; 4096];
        match old.read_at(at as u64, &mut buf) {
            Err(e) if is_stale(&e) => stale += 1,
            Err(e) => panic!("old handle at {at}: {e}"),
            Ok(got) => same_bytes(&buf[..got], &original[at..at + got], "old handle, 4 KiB read"),
        }
    }
    assert!(stale > 0, "the old handle was never refused");
    same_bytes(
        &read_all(&client, "/m/f"),
        &original,
        "a fresh open after the restart",
    );
    // Removing the file removes its fences too: a new file reads as written.
    client.unlink("/m/f").unwrap();
    put(&cluster, dir.path(), "/m/g", &original[..1 << 20]);
    same_bytes(&read_all(&client, "/m/g"), &original[..1 << 20], "a new file");
}

/// A cluster whose manager aborts at the crash hook `hook` (a `WEFT_FAULT_MIGRATE_*`
/// variable) of the next migration once the returned trigger file exists; the
/// directory holding it is for the test's scratch files too.
fn crash_hooked(
    options: &weft_testkit::ClusterOptions,
    hook: &str,
) -> (tempfile::TempDir, std::path::PathBuf, TestCluster) {
    let dir = tempfile::Builder::new()
        .prefix("crash-migrate-")
        .tempdir()
        .unwrap();
    let trigger = dir.path().join("crash-now");
    let cluster = TestCluster::start_with_env(options, &[(hook, trigger.to_str().unwrap())]);
    (dir, trigger, cluster)
}

#[test]
fn a_manager_crash_between_the_object_switch_and_the_layout_commit_is_undone_after_its_restart() {
    let (dir, trigger, cluster) = crash_hooked(&Default::default(), "WEFT_FAULT_MIGRATE_CRASH");
    let client = cluster.client();
    two_stripe_dir(&cluster, "/m");
    let original = pattern(5, 0, (3 << 20) + 12_345);
    put(&cluster, dir.path(), "/m/f", &original);
    let before = client.stat("/m/f").unwrap();
    let meta_id = manager_id(&cluster);

    std::fs::write(&trigger, b"").unwrap();
    let migrate = cluster
        .command("weft")
        .args(["migrate", "--stripe-count", "4", "--stripe-size", "64K", "/m/f"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for("the manager to crash mid-switch", Duration::from_secs(60), || {
        (!trigger.exists() && cluster.pid(meta_id).is_none()).then_some(())
    });
    // The objects were switched at the io servers, the layout was not: reads are
    // refused until the switch is undone, never answered with the new objects' bytes.
    cluster.restart();
    let out = migrate.wait_with_output().unwrap();
    eprintln!(
        "weft migrate across the crash: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let client = cluster.client();
    let started = Instant::now();
    let mut refused = 0;
    loop {
        let read = client.open("/m/f", &OpenOptions::default()).and_then(|f| {
            let mut buf = vec![0u8; original.len()];
            let got = f.read_at(0, &mut buf)?;
            buf.truncate(got);
            Ok(buf)
        });
        match read {
            Ok(got) => {
                same_bytes(&got, &original, "the file after the manager's restart");
                break;
            }
            Err(e) if is_stale(&e) => refused += 1,
            Err(e) => panic!("reading after the restart: {e}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "still refused after 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("reads refused until the switch was undone: {refused}");
    let now = client.stat("/m/f").unwrap();
    assert_eq!(now.inode, before.inode);
    assert_eq!(
        now.layout, before.layout,
        "the layout switch did not commit: the old layout stays"
    );
    // The hidden file is gone (the command or the purger), and nothing is set aside.
    common::wait_for("no leftovers", Duration::from_secs(60), || {
        leftovers(&cluster, &client, "/m").is_empty().then_some(())
    });
    // A new migration goes through and keeps every byte.
    weft_ok(
        &cluster,
        &["migrate", "--stripe-count", "4", "--stripe-size", "64K", "/m/f"],
    );
    let after = client.stat("/m/f").unwrap();
    assert_eq!(after.layout.unwrap().servers.len(), 4);
    same_bytes(
        &read_all(&client, "/m/f"),
        &original,
        "the file after a second migration",
    );
}

/// A file in the cache tier (`cached`, then `delegated`) migrates while a writer writes
/// through the tier without ever syncing, so most acknowledged bytes are dirty in the
/// cache managers when the migration starts: every one of them is in the file
/// afterwards (the managers hold the file's changes and write its dirty blocks back
/// before its objects freeze); a handle opened before the switch is refused `ESTALE` by
/// the tier, never served by the old layout's routing; and a drain moves such files off
/// a server (it named them and stayed draining before).
#[test]
fn a_file_in_the_cache_tier_migrates_and_drains_keeping_its_unsynced_writes() {
    let cluster = TestCluster::start_with(&weft_testkit::ClusterOptions::cached("2", "64M"));
    let client = cluster.client();
    let dir = tempfile::Builder::new()
        .prefix("migrate-cached-")
        .tempdir()
        .unwrap();
    const SIZE: usize = 8 << 20;
    let mut files = Vec::new();
    for (k, mode) in ["cached", "delegated"].into_iter().enumerate() {
        let d = format!("/{mode}");
        cached_two_stripe_dir(&cluster, &d, mode);
        let path = format!("{d}/f");
        let original = pattern(400 + k as u64, 0, SIZE);
        put(&cluster, dir.path(), &path, &original);
        let before = client.stat(&path).unwrap();
        assert_eq!(before.cache.to_string(), mode, "{path}");
        let idle = client.open(&path, &OpenOptions::default()).unwrap();
        let model = Arc::new(Mutex::new(original));
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicU64::new(0));
        let writer = {
            let (client, model, stop, writes, path) = (
                cluster.client(),
                model.clone(),
                stop.clone(),
                writes.clone(),
                path.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng::new(70 + k as u64);
                let options = OpenOptions {
                    write: true,
                    ..Default::default()
                };
                let mut file = client.open(&path, &options).unwrap();
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let len = rng.between(1, 100_000) as usize;
                    let offset = rng.below((SIZE - len) as u64);
                    let data = pattern(1000 + n, offset, len);
                    write_reopening(&client, &mut file, &path, offset, &data);
                    model.lock().unwrap()[offset as usize..offset as usize + len].copy_from_slice(&data);
                    n += 1;
                    writes.store(n, Ordering::SeqCst);
                }
            })
        };
        let (during, after) = migrate_while_writing(&cluster, &path, &writes, 20);
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        assert!(after > during, "{path}: no write ran during the migration");

        let now = client.stat(&path).unwrap();
        assert_eq!(now.inode, before.inode, "{path}: the inode changed");
        assert_eq!(now.cache, before.cache, "{path}: the caching mode changed");
        let layout = now.layout.clone().unwrap();
        assert_eq!((layout.servers.len(), layout.stripe_size_bytes), (4, 128 << 10));
        same_bytes(&read_all(&client, &path), &model.lock().unwrap(), &path);
        let mut buf = vec![0u8; 4096];
        match idle.read_at(0, &mut buf) {
            Err(e) if is_stale(&e) => {}
            other => panic!("{path}: a handle of the old layout read through the tier: {other:?}"),
        }
        assert_eq!(leftovers(&cluster, &client, &d), Vec::<String>::new());
        let data = model.lock().unwrap().clone();
        files.push((path, data));
    }

    // Both files now have a piece on every io server: drain one (not the manager's).
    let meta_id = manager_id(&cluster);
    let victim = *io_server_ids(&client)
        .iter()
        .rev()
        .find(|s| s.0 != meta_id)
        .unwrap();
    let out = weft_ok(&cluster, &["server", "drain", &victim.0.to_string(), "--quiet"]);
    assert!(
        out.contains(&format!("drained io server {victim}: 2 files moved")),
        "{out}"
    );
    cluster.kill9(victim.0);
    for (path, data) in &files {
        let layout = client.resolve(path).unwrap().layout.unwrap();
        assert!(layout.piece_of(victim).is_none(), "{path}: {layout:?}");
        same_bytes(&read_all(&cluster.client(), path), data, path);
    }
}

/// A manager crash right after a cached file's layout switch committed, before the cache
/// managers heard of it: their holds lapse (30 s) and a handle opened before the switch
/// writes through the tier again under the old layout, which the io servers' fences now
/// refuse at write-back. The restarted manager finishes the switch, and the cache
/// managers write those bytes back under the new layout before dropping the file's
/// blocks: the acknowledged write is in the file (it was dropped with the blocks before).
#[test]
fn a_write_through_the_tier_after_a_manager_crash_at_a_cached_files_switch_is_kept() {
    let (dir, trigger, cluster) = crash_hooked(
        &weft_testkit::ClusterOptions::cached("2", "64M"),
        "WEFT_FAULT_MIGRATE_CRASH_COMMITTED",
    );
    let client = cluster.client();
    cached_two_stripe_dir(&cluster, "/c", "cached");
    let mut model = pattern(9, 0, (2 << 20) + 4321);
    put(&cluster, dir.path(), "/c/f", &model);
    let writable = OpenOptions {
        write: true,
        ..Default::default()
    };
    let old = client.open("/c/f", &writable).unwrap();
    old.write_at(0, b"before the switch").unwrap();
    model[..17].copy_from_slice(b"before the switch");
    let meta_id = manager_id(&cluster);

    std::fs::write(&trigger, b"").unwrap();
    let migrate = cluster
        .command("weft")
        .args(["migrate", "--stripe-count", "4", "/c/f"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for(
        "the manager to crash after the switch",
        Duration::from_secs(60),
        || (!trigger.exists() && cluster.pid(meta_id).is_none()).then_some(()),
    );
    // The cache managers' holds lapse (30 s leases); the old handle writes again.
    std::thread::sleep(Duration::from_secs(32));
    let late = pattern(77, 300_000, 50_000);
    old.write_at(300_000, &late)
        .expect("a write through the tier once the holds lapsed");
    model[300_000..350_000].copy_from_slice(&late);

    cluster.restart();
    let out = migrate.wait_with_output().unwrap();
    eprintln!(
        "weft migrate across the crash: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The restarted manager finishes the switch: then a new handle reads every byte,
    // the late write included.
    let started = Instant::now();
    let got = loop {
        let read = cluster
            .client()
            .open("/c/f", &OpenOptions::default())
            .and_then(|f| {
                let mut buf = vec![0u8; model.len()];
                let got = f.read_at(0, &mut buf)?;
                buf.truncate(got);
                Ok(buf)
            });
        match read {
            Ok(got) if got == model || started.elapsed() > Duration::from_secs(60) => break got,
            Ok(_) => {}
            // The cache managers still hold the old layout until the switch is finished.
            Err(e) => assert!(
                started.elapsed() < Duration::from_secs(60),
                "still failing after 60 s: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    same_bytes(
        &got,
        &model,
        "the file after the restarted manager finished the switch",
    );
    assert_eq!(client.stat("/c/f").unwrap().layout.unwrap().servers.len(), 4);
    // The old handle is refused from now on, never served by the old routing.
    let mut buf = vec![0u8; 16];
    match old.read_at(0, &mut buf) {
        Err(e) if is_stale(&e) => {}
        other => panic!("a handle of the old layout after the switch: {other:?}"),
    }
}

//! `weft backup`/`weft restore` and `weft check` end to end (issue 35): a backup taken
//! while files are being created holds every file acknowledged before it, a manager
//! whose database is wiped serves that namespace again after a restore, and the check
//! finds what the restore left behind (objects of files made after the backup), planted
//! objects and missing ones, repairs the safe cases, and reports a stopped server in
//! bounded time.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{hang, object_path, pattern, wait_for};
use weft_client::{Client, InodeId};
use weft_proto::msg::Request;
use weft_proto::{ErrorCode, Range, Striping};
use weft_rpc::Timeouts;
use weft_testkit::TestCluster;

/// Bytes of each file the writers make.
const FILE_BYTES: usize = 20_000;

/// A file the writer made: (name, tag, acknowledged at, begun at).
type Made = (String, u64, Instant, Instant);

fn write_file(client: &Client, path: &str, tag: u64) {
    let file = client.create(path, &Default::default()).unwrap();
    file.write_at(0, &pattern(tag, 0, FILE_BYTES)).unwrap();
    file.close().unwrap();
}

fn read_file(client: &Client, path: &str) -> Result<Vec<u8>, weft_client::ClientError> {
    let file = client.open(path, &Default::default())?;
    let mut buf = vec![0u8; file.size()? as usize];
    let n = file.read_at(0, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

fn run(cluster: &TestCluster, args: &[&str]) -> (i32, String, String) {
    let out = cluster.weft(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_restored_backup_serves_every_file_acknowledged_before_it_and_check_finds_the_later_ones() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/d", 0o755).unwrap();
    for i in 0..20 {
        write_file(&client, &format!("/d/early-{i}"), i);
    }
    // Creates go on through the backup: (name, tag, acknowledged at, begun at). A file
    // begun before the backup ended may be in it even if its close came back after.
    let acknowledged: Arc<Mutex<Vec<Made>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, acknowledged, stop) = (cluster.client(), acknowledged.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut k = 1000u64;
            while !stop.load(Ordering::SeqCst) {
                let name = format!("/d/during-{k}");
                let begun = Instant::now();
                write_file(&client, &name, k);
                acknowledged
                    .lock()
                    .unwrap()
                    .push((name, k, Instant::now(), begun));
                k += 1;
            }
        })
    };
    wait_for("creates under way", Duration::from_secs(30), || {
        (acknowledged.lock().unwrap().len() >= 10).then_some(())
    });
    let backup_dir = tempfile::tempdir().unwrap();
    let backup = backup_dir.path().join("meta.weftbak");
    let backup_str = backup.to_str().unwrap();
    let began = Instant::now();
    let (code, out, err) = run(&cluster, &["backup", backup_str]);
    let ended = Instant::now();
    assert_eq!(code, 0, "weft backup failed:\n{out}{err}");
    // Files made once the backup is over are not in it. More than the manager's pool
    // of precreated objects held at the backup (128 a set), so that objects are made
    // for numbers handed out after it too.
    wait_for("creates after the backup", Duration::from_secs(120), || {
        (acknowledged
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.3 > ended)
            .count()
            >= 300)
            .then_some(())
    });
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    let acknowledged = acknowledged.lock().unwrap().clone();
    let before: Vec<_> = acknowledged.iter().filter(|a| a.2 < began).collect();
    let after: Vec<_> = acknowledged.iter().filter(|a| a.3 > ended).collect();
    assert!(!before.is_empty() && !after.is_empty());

    // A restore is refused while the manager runs, and for a damaged file.
    let home = cluster.home().to_str().unwrap().to_owned();
    let (code, _, err) = run(&cluster, &["restore", backup_str, "--home", &home]);
    assert_ne!(code, 0);
    assert!(err.contains("stop the metadata manager"), "{err}");
    let damaged = backup_dir.path().join("damaged");
    let mut bytes = std::fs::read(&backup).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&damaged, &bytes).unwrap();
    let (code, _, err) = run(&cluster, &["restore", damaged.to_str().unwrap(), "--home", &home]);
    assert_ne!(code, 0);
    assert!(err.contains("checksum mismatch"), "{err}");
    std::fs::write(&damaged, &bytes[..100]).unwrap();
    let (code, _, err) = run(&cluster, &["restore", damaged.to_str().unwrap(), "--home", &home]);
    assert_ne!(code, 0);
    assert!(err.contains("truncated"), "{err}");

    // Where the objects of the files made after the backup are.
    let later_objects: Vec<_> = after
        .iter()
        .flat_map(|(name, _, _, _)| {
            let file = client.open(name, &Default::default()).unwrap();
            let inode = file.inode();
            file.layout()
                .all_servers()
                .into_iter()
                .map(|s| object_path(&cluster, s, inode))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(later_objects.iter().all(|p| p.exists()));

    // The manager dies and its database is lost.
    let meta = cluster.config().meta().id;
    drop(client);
    cluster.kill9(meta);
    let data = cluster.home().join("data").join(format!("server-{meta}"));
    std::fs::remove_file(data.join("meta.redb")).unwrap();
    let (code, out, err) = run(&cluster, &["restore", backup_str, "--home", &home]);
    assert_eq!(code, 0, "weft restore failed:\n{out}{err}");
    cluster.restart();

    let client = cluster.client();
    for i in 0..20 {
        assert_eq!(
            read_file(&client, &format!("/d/early-{i}")).unwrap(),
            pattern(i, 0, FILE_BYTES)
        );
    }
    for (name, tag, _, _) in &before {
        assert_eq!(
            read_file(&client, name).unwrap(),
            pattern(*tag, 0, FILE_BYTES),
            "{name}"
        );
    }
    for (name, _, _, _) in &after {
        let e = read_file(&client, name).unwrap_err();
        assert_eq!(e.code(), ErrorCode::NotFound, "{name}: {e}");
    }
    // New files get numbers never handed out before: no clash with the objects of the
    // files made after the backup.
    write_file(&client, "/d/new", 7);
    assert_eq!(read_file(&client, "/d/new").unwrap(), pattern(7, 0, FILE_BYTES));

    // The objects of the files made after the backup belong to nothing now.
    let (code, out, err) = run(&cluster, &["check", "--grace-secs", "0", "--quiet"]);
    assert_eq!(code, 1, "weft check found nothing:\n{out}{err}");
    assert!(out.contains("orphans"), "{out}");
    let (code, out, err) = run(&cluster, &["check", "--grace-secs", "0", "--repair", "--quiet"]);
    assert_eq!(code, 0, "weft check --repair:\n{out}{err}");
    assert!(out.contains("handed to the manager's purger"), "{out}");
    common::wait_orphans_purged(&client);
    let (code, out, err) = run(&cluster, &["check", "--grace-secs", "0", "--quiet"]);
    assert_eq!(code, 0, "weft check after the repair:\n{out}{err}");
    // The restored manager's purger (the pool's numbers of the backup) and the repair
    // (numbers handed out after it) left none of those files' objects.
    let left: Vec<_> = later_objects.iter().filter(|p| p.exists()).collect();
    assert!(
        left.is_empty(),
        "{} objects of files made after the backup are left: {left:?}",
        left.len()
    );
    // Nothing any file holds was taken.
    for (name, tag, _, _) in &before {
        assert_eq!(
            read_file(&client, name).unwrap(),
            pattern(*tag, 0, FILE_BYTES),
            "{name}"
        );
    }
    assert_eq!(read_file(&client, "/d/new").unwrap(), pattern(7, 0, FILE_BYTES));
}

#[test]
fn check_finds_planted_and_missing_objects_and_repairs_only_orphans() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    write_file(&client, "/a", 1);
    write_file(&client, "/b", 2);
    // A healthy cluster (with its precreated pool, whose objects no file has yet).
    let (code, out, err) = run(&cluster, &["check", "--grace-secs", "0", "--quiet"]);
    assert_eq!(code, 0, "a healthy cluster:\n{out}{err}");
    assert!(out.contains("check: all well"), "{out}");

    let b = client.stat("/b").unwrap().inode;
    let servers = common::io_server_ids(&client);
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        request: Duration::from_secs(20),
    };
    // An object under a number no file will have for ages, with bytes in it.
    let planted = InodeId(1 << 50);
    let io = cluster.server_connection(&cluster.addr(servers[1].0), timeouts);
    io.call(
        &Request::ObjCreate {
            inodes: vec![planted],
        },
        &[],
    )
    .unwrap();
    io.call(
        &Request::Write {
            inode: planted,
            striping: Striping {
                stripe_size_bytes: 65536,
                stripe_count: 1,
                server_index: 0,
            },
            ranges: vec![Range { offset: 0, len: 4096 }],
        },
        &[0xEE; 4096],
    )
    .unwrap();
    // /b's object on its first server is lost.
    let first = client.open("/b", &Default::default()).unwrap().layout().servers[0];
    let lost = object_path(&cluster, first, b);
    assert!(lost.exists());
    std::fs::remove_file(&lost).unwrap();

    let (code, out, _) = run(&cluster, &["check", "--grace-secs", "0", "--quiet"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("inode {planted}")), "{out}");
    assert!(out.contains(&format!("inode {b} on io server {first}")), "{out}");
    // Within the grace the planted object is left alone (a create may be under way).
    let (code, out, _) = run(&cluster, &["check", "--quiet"]);
    assert_eq!(code, 1, "{out}");
    assert!(!out.contains(&format!("inode {planted}")), "{out}");
    assert!(out.contains("younger than the grace"), "{out}");

    let (_, out, _) = run(&cluster, &["check", "--grace-secs", "0", "--repair", "--quiet"]);
    assert!(out.contains("1 orphans handed"), "{out}");
    let planted_path = object_path(&cluster, servers[1], planted);
    wait_for("the planted object purged", Duration::from_secs(30), || {
        (!planted_path.exists()).then_some(())
    });
    // /a is whole, and only the missing object is still reported.
    assert_eq!(read_file(&client, "/a").unwrap(), pattern(1, 0, FILE_BYTES));
    let (code, out, _) = run(&cluster, &["check", "--grace-secs", "0", "--quiet"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(", 0 orphans"), "{out}");
    assert!(out.contains("1 objects missing"), "{out}");
}

#[test]
fn check_reports_a_stopped_server_in_bounded_time() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    write_file(&client, "/a", 1);
    let victim = common::io_server_ids(&client)[2].0;
    hang(&cluster, victim);
    let started = Instant::now();
    let (code, out, err) = run(&cluster, &["check", "--timeout-secs", "2", "--quiet"]);
    let took = started.elapsed();
    cluster.signal(victim, libc::SIGCONT);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!("io {victim}")) && out.contains("does not answer"),
        "{out}"
    );
    assert!(out.contains("was not scanned"), "{out}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

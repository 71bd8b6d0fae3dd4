//! Rebuild of replicated files' stale pieces (issue 33, `weft rebuild`): after an io
//! server missed writes (killed with SIGKILL in the middle of them) or lost its disk,
//! the rebuild makes its pieces whole again, so that the file survives the loss of the
//! OTHER copy afterwards; writes racing the rebuild end byte-correct on both copies.
//!
//! Each test ends by reading every byte with the rebuilt piece's partner down: without
//! the rebuild (or with a rebuild that lets a racing write's bytes be overwritten by
//! the older copy) that read fails or returns wrong bytes.

mod common;

use common::{pattern, weft_ok};
use std::process::Stdio;
use std::time::{Duration, Instant};
use weft_client::{Client, OpenOptions, ServerId};
use weft_testkit::{Rng, TestCluster};

fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(at) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: first wrong byte at offset {at}");
    }
}

fn layout_of(client: &Client, path: &str) -> weft_client::Layout {
    client.resolve(path).unwrap().layout.expect("a file has a layout")
}

/// The other server of `server`'s slot (replicas=2).
fn partner(layout: &weft_client::Layout, server: ServerId) -> ServerId {
    let (slot, _) = layout.piece_of(server).unwrap();
    layout
        .slot_servers(slot)
        .into_iter()
        .find(|s| *s != server)
        .unwrap()
}

fn get_bytes(cluster: &TestCluster, path: &str, dir: &std::path::Path) -> Vec<u8> {
    let local = dir.join("back");
    std::fs::remove_file(&local).ok();
    weft_ok(cluster, &["get", path, local.to_str().unwrap()]);
    std::fs::read(&local).unwrap()
}

/// "rebuilt P pieces of F files: ... , R retries" -> (P, R).
fn rebuilt(out: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("rebuilt "))
        .unwrap_or_else(|| panic!("no summary in:\n{out}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let pieces = words[1].parse().unwrap();
    let retries = words[words.len() - 2].parse().unwrap();
    (pieces, retries)
}

#[test]
fn a_piece_that_missed_writes_is_rebuilt_and_survives_its_partner() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let dir = tempfile::Builder::new().prefix("rebuild-").tempdir().unwrap();
    weft_ok(&cluster, &["mkdir", "/r"]);
    weft_ok(&cluster, &["layout", "--set", "--redundancy", "replicas=2", "/r"]);
    let data = pattern(51, 0, 64 << 20);
    let source = dir.path().join("source");
    std::fs::write(&source, &data).unwrap();

    // Server 1 (slot 0's primary) is killed in the middle of the put.
    common::put_killing(&cluster, "/r/f", &data, 1);
    let layout = layout_of(&client, "/r/f");
    assert_eq!(layout.replication.stale, vec![ServerId(1)]);

    // It returns; the rebuild copies its piece back and clears the mark.
    cluster.restart();
    let started = Instant::now();
    let out = weft_ok(&cluster, &["rebuild", "/r/f"]);
    let rebuild_secs = started.elapsed().as_secs_f64();
    assert_eq!(rebuilt(&out).0, 1, "{out}");
    let layout = layout_of(&client, "/r/f");
    assert!(
        layout.replication.stale.is_empty(),
        "still stale after the rebuild: {layout:?}"
    );
    let shown = weft_ok(&cluster, &["layout", "/r/f"]);
    assert!(!shown.contains("stale"), "{shown}");
    // A second rebuild finds nothing to do.
    assert_eq!(rebuilt(&weft_ok(&cluster, &["rebuild", "/r/f"])).0, 0);

    // The figure: the same bytes copied by cp, in the same run.
    let started = Instant::now();
    std::fs::copy(&source, dir.path().join("copy")).unwrap();
    eprintln!(
        "rebuild of 32 MiB (one piece of a 64 MiB file): {rebuild_secs:.2} s; cp of the 64 MiB file: {:.2} s",
        started.elapsed().as_secs_f64()
    );

    // The OTHER copy of slot 0 dies: every byte comes from the rebuilt piece.
    let other = partner(&layout, ServerId(1));
    cluster.kill9(other.0);
    same_bytes(
        &get_bytes(&cluster, "/r/f", dir.path()),
        &data,
        "read with the rebuilt piece's partner down",
    );
}

#[test]
fn a_server_whose_disk_was_wiped_gets_every_piece_back() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let dir = tempfile::Builder::new().prefix("rebuild-").tempdir().unwrap();
    weft_ok(&cluster, &["mkdir", "/w"]);
    weft_ok(&cluster, &["layout", "--set", "--redundancy", "replicas=2", "/w"]);
    let mut files = Vec::new();
    for i in 0..3u64 {
        let data = pattern(60 + i, 0, (4 << 20) + 12_345 * i as usize);
        let source = dir.path().join(format!("s{i}"));
        std::fs::write(&source, &data).unwrap();
        let path = format!("/w/f{i}");
        weft_ok(&cluster, &["put", source.to_str().unwrap(), &path]);
        files.push((path, data));
    }
    // Server 3's data directory is lost; it comes back empty.
    let victim = ServerId(3);
    cluster.kill9(victim.0);
    let data_dir = cluster.home().join("data").join(format!("server-{}", victim.0));
    std::fs::remove_dir_all(&data_dir).unwrap();
    cluster.restart();
    let out = weft_ok(&cluster, &["rebuild", "--server", "3", "--missing"]);
    assert_eq!(rebuilt(&out).0, files.len() as u64, "{out}");
    // Nothing is missing or stale any more.
    assert_eq!(
        rebuilt(&weft_ok(&cluster, &["rebuild", "--server", "3", "--missing"])).0,
        0
    );
    // Every piece's partner on the other servers dies: the rebuilt pieces serve.
    let layout = layout_of(&client, &files[0].0);
    let other = partner(&layout, victim);
    cluster.kill9(other.0);
    for (path, data) in &files {
        assert!(layout_of(&client, path).replication.stale.is_empty());
        same_bytes(
            &get_bytes(&cluster, path, dir.path()),
            data,
            &format!("{path} from the rebuilt disk"),
        );
    }
}

#[test]
fn writes_racing_a_rebuild_end_right_on_both_copies() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    const LEN: usize = 16 << 20;
    let options = weft_testkit::replicated(64 << 10, 2);
    let file = client.create("/race", &options).unwrap();
    let mut expect = pattern(70, 0, LEN);
    file.write_at(0, &expect).unwrap();
    let layout = file.layout().clone();
    let victim = layout.servers[0];
    cluster.kill9(victim.0);
    // Missed by the victim: its piece is stale.
    expect = pattern(71, 0, LEN);
    file.write_at(0, &expect).unwrap();
    drop(file);
    assert_eq!(layout_of(&client, "/race").replication.stale, vec![victim]);
    cluster.restart();

    // The rebuild waits 100 ms between reading each chunk and writing it (test hook),
    // while writes land all over the file.
    let rebuild = cluster
        .command("weft")
        .args(["rebuild", "/race"])
        .env("WEFT_FAULT_REBUILD_PAUSE_MS", "100")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let writing = OpenOptions {
        write: true,
        ..Default::default()
    };
    let file = client.open("/race", &writing).unwrap();
    let mut rng = Rng::new(72);
    let until = Instant::now() + Duration::from_millis(1500);
    let mut writes = 0u64;
    while Instant::now() < until {
        let len = rng.between(1, 256 << 10) as usize;
        let at = rng.below((LEN - len) as u64) as usize;
        let bytes = pattern(1000 + writes, at as u64, len);
        file.write_at(at as u64, &bytes).unwrap();
        expect[at..at + len].copy_from_slice(&bytes);
        writes += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = rebuild.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rebuild: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (pieces, retries) = rebuilt(&text);
    assert_eq!(pieces, 1, "{text}");
    assert!(
        retries > 0,
        "no write raced the rebuild ({writes} writes): {text}"
    );
    drop(file);
    assert!(layout_of(&client, "/race").replication.stale.is_empty());

    // Each copy of slot 0 alone holds every byte.
    let read_all = |what: &str| {
        let file = client.open("/race", &OpenOptions::default()).unwrap();
        let mut back = vec![0u8; LEN];
        assert_eq!(file.read_at(0, &mut back).unwrap(), LEN);
        same_bytes(&back, &expect, what);
    };
    let other = partner(&layout, victim);
    cluster.kill9(other.0);
    read_all("the rebuilt copy alone");
    cluster.restart();
    cluster.kill9(victim.0);
    read_all("the fresh copy alone");
}

/// The manager's rebuilder (`--auto-rebuild`): stale pieces come back without anyone
/// running `weft rebuild`, once their server answers: marks made before a manager
/// restart (found by its walk of the stale list) and marks made while it runs (told
/// by the writers' MarkStale). Each time the rebuilt piece's partner then dies and
/// every byte must come from the rebuilt copy.
#[test]
fn the_manager_rebuilds_stale_pieces_by_itself_once_their_server_returns() {
    let options = weft_testkit::ClusterOptions {
        extra: vec!["--auto-rebuild".into(), "200M".into()],
        ..Default::default()
    };
    let cluster = TestCluster::start_with(&options);
    let client = cluster.client();
    let dir = tempfile::Builder::new().prefix("rebuild-").tempdir().unwrap();
    const LEN: usize = 8 << 20;
    let file = client
        .create("/auto", &weft_testkit::replicated(64 << 10, 2))
        .unwrap();
    file.write_at(0, &pattern(80, 0, LEN)).unwrap();
    file.sync().unwrap();
    let layout = file.layout().clone();
    let victim = layout.servers[0];
    let other = partner(&layout, victim);
    drop(file);
    let write = |seed: u64| {
        let data = pattern(seed, 0, LEN);
        let file = client
            .open(
                "/auto",
                &OpenOptions {
                    write: true,
                    ..Default::default()
                },
            )
            .unwrap();
        file.write_at(0, &data).unwrap();
        file.sync().unwrap();
        data
    };
    let fresh_again = |what: &str| {
        common::wait_for(what, Duration::from_secs(90), || {
            layout_of(&client, "/auto")
                .replication
                .stale
                .is_empty()
                .then_some(())
        })
    };
    let read_from_rebuilt = |data: &[u8], what: &str| {
        cluster.kill9(other.0);
        same_bytes(&get_bytes(&cluster, "/auto", dir.path()), data, what);
        cluster.restart();
    };

    // 1. A mark made before the manager restarts: its walk finds it.
    cluster.kill9(victim.0);
    let data = write(81);
    assert_eq!(layout_of(&client, "/auto").replication.stale, vec![victim]);
    cluster.kill9(0);
    cluster.restart();
    fresh_again("the restarted manager to rebuild the piece marked before");
    read_from_rebuilt(&data, "the piece the restarted manager rebuilt");

    // 2. A mark made while it runs, its server down for a while: rebuilt once it is
    // back, with no one asking.
    cluster.kill9(victim.0);
    let data = write(82);
    assert_eq!(layout_of(&client, "/auto").replication.stale, vec![victim]);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        layout_of(&client, "/auto").replication.stale,
        vec![victim],
        "a piece on a server that is down cannot have been rebuilt"
    );
    cluster.restart();
    fresh_again("the manager to rebuild the piece once its server returned");
    // `weft status` tells: nothing waits, two pieces (the victim's half, twice)
    // rebuilt since the manager's restart.
    let status = weft_ok(&cluster, &["status"]);
    let line = status
        .lines()
        .find(|l| l.trim_start().starts_with("rebuilder:"))
        .unwrap_or_else(|| panic!("no rebuilder line in:\n{status}"));
    assert!(
        line.contains("0 stale pieces waiting") && line.contains("since the start 2 pieces (8 MiB) rebuilt"),
        "{line}"
    );
    read_from_rebuilt(&data, "the piece the running manager rebuilt");
}

/// A stale mark is durable before the writer hears of it: with metadata commits 10 s
/// apart, a manager killed (SIGKILL) right after a write that marked a piece stale still
/// knows the piece stale when it restarts. Before, the mark was only in the non-durable
/// commit, and the restarted manager took the stale copy (old bytes) for fresh: the
/// CI run of the rebuilder's test read those old bytes back.
#[test]
fn a_stale_mark_survives_a_manager_crash() {
    let options = weft_testkit::ClusterOptions {
        extra: vec!["--commit-interval-ms".into(), "10000".into()],
        ..Default::default()
    };
    let cluster = TestCluster::start_with(&options);
    let client = cluster.client();
    const LEN: usize = 1 << 20;
    let file = client
        .create("/marked", &weft_testkit::replicated(64 << 10, 2))
        .unwrap();
    file.write_at(0, &pattern(100, 0, LEN)).unwrap();
    file.sync().unwrap();
    let layout = file.layout().clone();
    let victim = layout.servers[0];
    cluster.kill9(victim.0);
    file.write_at(0, &pattern(101, 0, LEN)).unwrap();
    drop(file);
    cluster.kill9(0);
    cluster.restart();
    assert_eq!(
        layout_of(&client, "/marked").replication.stale,
        vec![victim],
        "the restarted manager lost the stale mark"
    );
}

/// An io server whose disk was replaced by an empty one while the manager ran: new
/// files work at once. The manager's pool of precreated objects named objects on the
/// old disk; it is dropped when the server's process changed (another incarnation)
/// rather than handed out (every create failed with "no object on this io server"
/// until the manager restarted).
#[test]
fn new_files_work_at_once_on_a_server_whose_disk_was_replaced() {
    let cluster = TestCluster::start();
    let dir = tempfile::Builder::new().prefix("rebuild-").tempdir().unwrap();
    // The pool of the 4 io servers' set is filled by the first create.
    weft_ok(&cluster, &["put", "/dev/null", "/first"]);
    cluster.kill9(3);
    let data_dir = cluster.home().join("data").join("server-3");
    std::fs::remove_dir_all(&data_dir).unwrap();
    cluster.restart();
    for i in 0..4u64 {
        let data = pattern(90 + i, 0, 300_000);
        let source = dir.path().join(format!("n{i}"));
        std::fs::write(&source, &data).unwrap();
        let path = format!("/new{i}");
        weft_ok(&cluster, &["put", source.to_str().unwrap(), &path]);
        same_bytes(&get_bytes(&cluster, &path, dir.path()), &data, &path);
    }
}

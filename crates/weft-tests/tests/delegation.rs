//! I/O delegation end to end with persistent delegates (`weft up --cache N
//! --cache-mapping aligned`, files `delegated`): the managers are delegates (fully dirty
//! blocks evicted first), blocks written whole go back whole and partly dirty ones as
//! their dirty extents without fetching the rest, and `weft status` tells full from
//! partial write-backs per delegate. And a job-scoped delegate's server side without
//! MPI: `weftd --meta --exit-on-stdin-eof` under a handle's `use_delegates`.

mod common;

use common::{manager_stats, pattern, weft_ok};
use weft_client::{CacheMode, Client, CreateOptions, File, LayoutRequest, OpenOptions};
use weft_testkit::{ClusterOptions, TestCluster};

const STRIPE_BYTES: u64 = 64 << 10;

fn create_delegated(client: &Client, path: &str) -> File {
    client
        .create(
            path,
            &CreateOptions {
                layout: LayoutRequest {
                    stripe_size_bytes: Some(STRIPE_BYTES),
                    cache: Some(CacheMode::Delegated),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .unwrap()
}

/// Whole stripes and a few small unaligned pieces through two delegates with little
/// memory (the file is four times their caches): the data reads back exactly, every
/// whole block went back whole, the small pieces went back partial, nothing was
/// fetched to fill a partial block (no read-modify-write), and `weft status` shows it.
#[test]
fn delegates_write_full_blocks_whole_and_partial_blocks_as_extents() {
    let cluster = TestCluster::start_with(&ClusterOptions::delegates("2", "2M"));
    let client = cluster.client();
    let file = create_delegated(&client, "/d");
    assert_eq!(file.cache_mode(), CacheMode::Delegated);

    let whole_bytes = 16u64 << 20;
    let mut reference = vec![0u8; (whole_bytes + 4 * STRIPE_BYTES) as usize];
    // Whole blocks, written a stripe row (4 blocks) at a time.
    let row = 4 * STRIPE_BYTES;
    for offset in (0..whole_bytes).step_by(row as usize) {
        let data = pattern(1, offset, row as usize);
        file.write_at(offset, &data).unwrap();
        reference[offset as usize..(offset + row) as usize].copy_from_slice(&data);
    }
    // Small unaligned pieces in blocks nobody wrote before, one per io server.
    let pieces = [
        (10u64, 100usize),
        (STRIPE_BYTES + 3, 1000),
        (2 * STRIPE_BYTES + 7, 1),
        (3 * STRIPE_BYTES - 5, 9),
    ];
    for (at, len) in pieces {
        let offset = whole_bytes + at;
        let data = pattern(2, offset, len);
        file.write_at(offset, &data).unwrap();
        reference[offset as usize..offset as usize + len].copy_from_slice(&data);
    }
    file.sync().unwrap();
    drop(file);

    let managers: Vec<u32> = cluster.config().cache_managers().iter().map(|m| m.id).collect();
    assert_eq!(managers.len(), 2);
    let stats: Vec<_> = managers.iter().map(|&m| manager_stats(&cluster, m)).collect();
    for s in &stats {
        assert!(
            s.policy.contains("fully dirty first"),
            "an aligned manager is a delegate: {s:?}"
        );
        assert_eq!(s.dirty_bytes, 0, "sync leaves nothing dirty: {s:?}");
        assert_eq!(s.write_back_errors, 0, "{s:?}");
        assert_eq!(
            s.fetched_bytes, 0,
            "no block was read to fill it before a write-back: {s:?}"
        );
    }
    let full: u64 = stats.iter().map(|s| s.write_backs_full).sum();
    let partial: u64 = stats.iter().map(|s| s.write_backs - s.write_backs_full).sum();
    let whole_blocks = whole_bytes / STRIPE_BYTES;
    assert!(
        full >= whole_blocks,
        "{full} full write-backs for {whole_blocks} whole blocks"
    );
    assert_eq!(
        partial,
        pieces.len() as u64,
        "one partial write-back per small piece: {stats:?}"
    );

    let status = weft_ok(&cluster, &["status"]);
    let lines: Vec<&str> = status
        .lines()
        .filter(|l| l.contains("fully dirty first"))
        .collect();
    assert_eq!(lines.len(), 2, "a line per delegate:\n{status}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains(" full, ") && l.contains(" partial)")),
        "{status}"
    );

    // Read back through a fresh client, from the io servers and the delegates.
    let reader = cluster.client();
    let file = reader.open("/d", &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; reference.len()];
    let n = file.read_at(0, &mut back).unwrap();
    assert_eq!(n, (whole_bytes + 3 * STRIPE_BYTES + 4) as usize);
    assert!(back[..n] == reference[..n], "data through the delegates differs");
}

/// `kill -9` of a delegate: what `sync` acknowledged is all there after its restart,
/// and each of two writers with unsynced data gets a clear error at its next sync
/// instead of losing it in silence.
#[test]
fn a_delegate_killed_loses_nothing_synced_and_every_writer_hears_of_the_rest() {
    let cluster = TestCluster::start_with(&ClusterOptions::delegates("2", "16M"));
    let first = cluster.client();
    let second = cluster.client();
    let file = create_delegated(&first, "/k");
    let synced = pattern(5, 0, 2 << 20);
    file.write_at(0, &synced).unwrap();
    file.sync().unwrap();
    let other = second
        .open(
            "/k",
            &OpenOptions {
                write: true,
                ..Default::default()
            },
        )
        .unwrap();
    // Unsynced writes by both handles over every stripe (so through both delegates).
    file.write_at(0, &pattern(6, 0, 4 * STRIPE_BYTES as usize))
        .unwrap();
    other
        .write_at(
            4 * STRIPE_BYTES,
            &pattern(7, 4 * STRIPE_BYTES, 4 * STRIPE_BYTES as usize),
        )
        .unwrap();
    let victim = cluster.config().cache_managers()[0].id;
    cluster.kill9(victim);
    cluster.restart();
    for (name, handle) in [("first", &file), ("second", &other)] {
        let message = common::expect_code(handle.sync(), weft_client::ErrorCode::Io);
        assert!(message.contains("restarted"), "{name}: {message}");
    }
    // Beyond the unsynced writes, exactly the synced bytes.
    let fresh = cluster.client().open("/k", &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; synced.len()];
    fresh.read_at(0, &mut back).unwrap();
    let from = (8 * STRIPE_BYTES) as usize;
    assert!(back[from..] == synced[from..], "synced data lost");
}

/// A delegate as the MPI-IO layer starts one for a job, without MPI: a standalone
/// `weftd --role cache --delegate` that knows only the metadata manager (`--meta`) and
/// lives while its standard input is open (`--exit-on-stdin-eof`). A handle routed
/// through it (`File::use_delegates`) writes into it with nothing on the io servers;
/// when its input closes it writes every dirty block back and exits 0, and the bytes
/// are then in the file for any client.
#[test]
fn a_job_scoped_delegate_learns_the_io_servers_from_the_manager_and_writes_back_when_its_input_closes() {
    use std::io::Read;
    use std::process::{Command, Stdio};

    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 4,
        stripe_size: STRIPE_BYTES,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    // The job's own key: the delegate serves its holders only.
    let job_key_path = dir.path().join("job.key");
    let (job_key, _) = weft_client::ClusterKey::load_or_create(&job_key_path).unwrap();
    let mut delegate = Command::new(weft_testkit::bin("weftd"))
        .args(["--role", "cache", "--delegate", "--exit-on-stdin-eof"])
        .args(["--meta", &cluster.meta_addr()])
        .arg("--key")
        .arg(cluster.key_path())
        .arg("--job-key")
        .arg(&job_key_path)
        .arg("--data")
        .arg(dir.path().join("data"))
        .arg("--ready-file")
        .arg(&ready)
        .args(["--cache-memory", "8M", "--id", "1073741824"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = common::wait_for(
        "the delegate's address",
        std::time::Duration::from_secs(20),
        || std::fs::read_to_string(&ready).ok(),
    );
    let client = cluster.client();
    let mut file = client.create("/job", &CreateOptions::default()).unwrap();
    file.use_delegates(&[addr.trim().to_owned()], &job_key).unwrap();
    assert_eq!(file.cache_mode(), CacheMode::Delegated);
    // Whole stripes and an unaligned tail: 1 MiB + 1000 bytes over four io servers.
    let data = pattern(3, 0, (1 << 20) + 1000);
    file.write_at(0, &data).unwrap();
    assert_eq!(
        file.size().unwrap(),
        data.len() as u64,
        "the size counts the delegate's dirty end"
    );
    let plain = client.open("/job", &OpenOptions::default()).unwrap();
    assert_eq!(plain.size().unwrap(), 0, "nothing reached the io servers yet");
    drop(file);

    drop(delegate.stdin.take());
    let status = delegate.wait().unwrap();
    let mut log = String::new();
    delegate.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    assert!(status.success(), "the delegate exited with {status}:\n{log}");
    assert!(log.contains("standard input closed"), "{log}");
    let mut back = vec![0u8; data.len()];
    assert_eq!(plain.read_at(0, &mut back).unwrap(), data.len());
    assert!(
        back == data,
        "the delegate's write-back differs from what was written"
    );
}

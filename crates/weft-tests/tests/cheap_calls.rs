//! What opens, closes and small calls cost a process in resources: many open/close
//! cycles in one process reuse its connections (no growth in sockets or threads), and a
//! call over a file striped across many io servers drives them from a bounded number of
//! threads (small calls from the calling thread alone), with the data intact.

use std::sync::Mutex;
use weft_client::{
    transfer_threads_started, CreateOptions, ErrorCode, FileKind, InodeId, LayoutRequest, OpenOptions,
    TRANSFER_THREADS_MAX,
};
use weft_testkit::{ClusterOptions, TestCluster};

/// The tests count this process's threads and descriptors: one at a time.
static ALONE: Mutex<()> = Mutex::new(());

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

fn descriptors_now() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(31) ^ seed.wrapping_mul(131) ^ (i >> 9)) as u8)
        .collect()
}

#[test]
fn many_opens_and_closes_in_one_process_grow_neither_connections_nor_threads() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/cycles", 0o755).unwrap();
    // Striped over all 4 servers: every cycle touches every server.
    let cycle = |i: u64| {
        let path = format!("/cycles/f{}", i % 8);
        let data = pattern(i, 256 * 1024);
        let f = client
            .create(&path, &CreateOptions::default())
            .unwrap_or_else(|e| panic!("create {path}: {e}"));
        f.write_at(0, &data).unwrap();
        f.close().unwrap();
        let f = client
            .open(
                &path,
                &OpenOptions {
                    write: false,
                    ..OpenOptions::default()
                },
            )
            .unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(f.read_at(0, &mut back).unwrap(), data.len());
        assert!(back == data, "cycle {i}: {path} read back differs");
        // A handle another process would get by handoff reads the same.
        let handed = client.open_handoff(&f.handoff(), &path, false).unwrap();
        let mut again = vec![0u8; data.len()];
        assert_eq!(handed.read_at(0, &mut again).unwrap(), data.len());
        assert!(
            again == data,
            "cycle {i}: the handed-off handle reads other bytes"
        );
        f.close().unwrap();
        handed.close().unwrap();
    };
    // The first cycle makes the connections the later ones reuse.
    cycle(0);
    let (threads, descriptors, helpers) = (threads_now(), descriptors_now(), transfer_threads_started());
    for i in 1..300 {
        cycle(i);
    }
    let (threads_after, descriptors_after) = (threads_now(), descriptors_now());
    assert!(
        threads_after <= threads + 1,
        "300 open/write/read/close cycles grew the process from {threads} to {threads_after} threads"
    );
    assert!(
        descriptors_after <= descriptors + 1,
        "300 open/write/read/close cycles grew the process from {descriptors} to {descriptors_after} descriptors"
    );
    assert_eq!(
        transfer_threads_started(),
        helpers,
        "calls of 256 KiB over 4 servers started helper threads: they are driven from the calling thread"
    );
}

#[test]
fn a_call_over_many_io_servers_uses_a_bounded_number_of_threads() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    const SERVERS: u32 = 16;
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: SERVERS,
        ..ClusterOptions::default()
    });
    let client = cluster.client();
    let f = client
        .create(
            "/wide",
            &CreateOptions {
                layout: LayoutRequest {
                    stripe_size_bytes: Some(64 * 1024),
                    stripe_count: Some(SERVERS),
                    ..LayoutRequest::default()
                },
                ..CreateOptions::default()
            },
        )
        .unwrap();
    assert_eq!(f.layout().servers.len(), SERVERS as usize);
    // Connections first (a reader thread each), so that what follows counts only the
    // calls' own threads.
    let small = pattern(1, 64 * 1024 * SERVERS as usize);
    f.write_at(0, &small).unwrap();
    let baseline = threads_now();

    // A small call over all 16 servers: no helper thread at all.
    let helpers = transfer_threads_started();
    f.write_at(0, &small).unwrap();
    let mut back = vec![0u8; small.len()];
    assert_eq!(f.read_at(0, &mut back).unwrap(), small.len());
    assert!(
        back == small,
        "the small striped read differs from what was written"
    );
    assert_eq!(
        transfer_threads_started(),
        helpers,
        "a 1 MiB call over 16 servers started helper threads"
    );

    // A large call: at most TRANSFER_THREADS_MAX - 1 helpers each, never one per server.
    // A sampler watches the thread count while it runs.
    let big = pattern(2, 64 << 20);
    let done = std::sync::atomic::AtomicBool::new(false);
    let peak = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(threads_now());
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            peak
        });
        let helpers = transfer_threads_started();
        f.write_at(0, &big).unwrap();
        let mut back = vec![0u8; big.len()];
        assert_eq!(f.read_at(0, &mut back).unwrap(), big.len());
        assert!(
            back == big,
            "the 64 MiB striped read differs from what was written"
        );
        let started = transfer_threads_started() - helpers;
        assert!(
            started <= 2 * (TRANSFER_THREADS_MAX as u64 - 1),
            "a 64 MiB write and read over {SERVERS} servers started {started} helper threads"
        );
        assert!(
            started > 0,
            "a 64 MiB call used no helper thread: the bound is not exercised"
        );
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        sampler.join().unwrap()
    });
    // The sampler itself is one thread more than the baseline.
    assert!(
        peak <= baseline + 1 + TRANSFER_THREADS_MAX,
        "{peak} threads at once during a call over {SERVERS} servers (baseline {baseline})"
    );
}

/// Requests the metadata manager served so far, all operations together.
/// Requests the metadata manager served, apart from capability grants (counted by
/// `capability_grants`).
fn manager_requests(cluster: &TestCluster) -> f64 {
    cluster.manager_requests_where(|op| op != Some("grant_capability"))
}

/// Capability grants the metadata manager served: each process asks once per file and
/// right at its first read or write of the file (the open's handoff carries none yet).
fn capability_grants(cluster: &TestCluster) -> f64 {
    cluster.manager_requests_where(|op| op == Some("grant_capability"))
}

/// A file made by the native client is written without asking the manager for a
/// capability: the create's answer carries it (`CreateGranted`). Before, every new
/// file's first write cost a `GrantCapability` round trip (20 here). Another client
/// (its own connections and capabilities) reads every byte back.
#[test]
fn a_new_file_is_written_without_a_capability_request() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/granted", 0o777).unwrap();
    let grants = capability_grants(&cluster);
    for i in 0..20u64 {
        let f = client
            .create(&format!("/granted/f{i}"), &CreateOptions::default())
            .unwrap();
        f.write_at(0, &pattern(i, 4096 + i as usize)).unwrap();
        f.close().unwrap();
    }
    let asked = capability_grants(&cluster) - grants;
    assert_eq!(asked, 0.0, "{asked} capability grants for 20 new files written");
    let reader = cluster.client();
    for i in 0..20u64 {
        let data = pattern(i, 4096 + i as usize);
        let f = reader
            .open(&format!("/granted/f{i}"), &OpenOptions::default())
            .unwrap();
        let mut back = vec![0u8; data.len() + 10];
        assert_eq!(f.read_at(0, &mut back).unwrap(), data.len());
        assert!(back[..data.len()] == data, "f{i} reads back other bytes");
        f.close().unwrap();
    }
}

/// `Client::stat_many`: 200 names of one directory (some missing, some files
/// removed by another client after they were made) in one manager request and one size
/// request per io server, where a stat of each costs the manager one lookup per name;
/// sizes as written, missing and removed names `None`, in the order asked.
#[test]
fn many_names_are_stat_in_one_manager_request() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = TestCluster::start();
    let client = cluster.client();
    let dir = client.mkdir("/stats", 0o755).unwrap();
    for i in 0..200u64 {
        let f = client
            .create(&format!("/stats/f{i}"), &CreateOptions::default())
            .unwrap();
        f.write_at(0, &pattern(i, i as usize * 10)).unwrap();
        f.close().unwrap();
    }
    let other = cluster.client();
    other.unlink("/stats/f7").unwrap();
    let mut names: Vec<String> = (0..200).map(|i| format!("f{i}")).collect();
    names.insert(3, "nothing".into());
    let lookups = cluster.manager_requests("lookup");
    let batches = cluster.manager_requests("lookup_many");
    let found = client.stat_many(dir.inode, &names).unwrap();
    assert_eq!(cluster.manager_requests("lookup_many") - batches, 1.0);
    assert_eq!(cluster.manager_requests("lookup") - lookups, 0.0);
    assert_eq!(found.len(), names.len());
    for (name, attr) in names.iter().zip(&found) {
        match name.as_str() {
            "nothing" | "f7" => assert!(attr.is_none(), "{name}: {attr:?}"),
            _ => {
                let i: usize = name[1..].parse().unwrap();
                assert_eq!(attr.as_ref().map(|a| a.size), Some(i as u64 * 10), "{name}");
            }
        }
    }
    // More names than one request holds: split, still in order.
    let many: Vec<String> = (0..weft_proto::msg::LOOKUP_MANY_MAX + 3)
        .map(|i| format!("f{}", i % 200))
        .collect();
    let found = client.stat_many(dir.inode, &many).unwrap();
    assert_eq!(found.len(), many.len());
    assert_eq!(found[200 + 9].as_ref().map(|a| a.size), Some(90));
}

/// `Client::create_many`: 300 names of one directory (one taken before, one given
/// twice) in two manager requests (256 names each at most), where each file costs a
/// create of its own: the files are made with the mode asked, the taken and repeated
/// names refused with `Exists`, in the order asked; the manager answers a stat of a
/// new file without its io servers until someone writes it; a made file takes bytes; and what
/// the call answered is durable: a kill -9 of the manager (which commits in the
/// background only every 10 s here) right after, with the client gone too, loses none
/// of it, where single creates answered before their commit would be lost.
#[test]
fn many_files_are_made_in_few_manager_requests_and_are_durable_when_answered() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = TestCluster::start_with(&ClusterOptions {
        extra: vec!["--commit-interval-ms".into(), "10000".into()],
        ..ClusterOptions::default()
    });
    let client = cluster.client();
    let dir = client.mkdir("/made", 0o755).unwrap();
    // Made by a batch too: a file closed after a write grant is measured by the
    // manager in the background (`ObjStamp` to its io servers), which the count of
    // io server requests below would catch.
    let taken = client
        .create_many(dir.inode, &["taken"], 0o644, Default::default())
        .unwrap();
    assert!(taken[0].is_ok(), "{taken:?}");
    client.sync_metadata().unwrap();
    let mut names: Vec<String> = (0..298).map(|i| format!("m{i}")).collect();
    names.insert(10, "taken".into());
    names.insert(20, "m3".into());
    let creates = cluster.manager_requests("create");
    let batches = cluster.manager_requests("create_many");
    let made = client
        .create_many(dir.inode, &names, 0o640, Default::default())
        .unwrap();
    assert_eq!(cluster.manager_requests("create_many") - batches, 2.0);
    assert_eq!(cluster.manager_requests("create") - creates, 0.0);
    assert_eq!(made.len(), names.len());
    for (k, (name, result)) in names.iter().zip(&made).enumerate() {
        match (k, name.as_str()) {
            (10, "taken") | (20, "m3") => {
                let e = result.as_ref().expect_err(name);
                assert_eq!(e.code(), ErrorCode::Exists, "{name}: {e}");
            }
            _ => {
                let attr = result.as_ref().unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(attr.kind, FileKind::File, "{name}");
                assert_eq!(attr.mode & 0o7777, 0o640, "{name}");
            }
        }
    }
    // The manager knows they are empty: a stat of one asks no io server.
    let asked = || cluster.io_requests("obj_stat") + cluster.io_requests("obj_stamp");
    let before = asked();
    for k in [0, 150, 297] {
        assert_eq!(client.stat(&format!("/made/m{k}")).unwrap().size, 0, "m{k}");
    }
    assert_eq!(asked() - before, 0.0, "io server requests for the stats");
    let f = client
        .open(
            "/made/m297",
            &OpenOptions {
                write: true,
                ..Default::default()
            },
        )
        .unwrap();
    f.write_at(0, &pattern(5, 70_000)).unwrap();
    f.close().unwrap();
    // Written since: another client's stat sees the bytes, not the size learnt at create.
    assert_eq!(cluster.client().stat("/made/m297").unwrap().size, 70_000);
    // A directory that is not there refuses the whole call.
    let e = client
        .create_many(InodeId(u64::MAX - 3), &["x"], 0o644, Default::default())
        .unwrap_err();
    assert!(matches!(e.code(), ErrorCode::NotFound | ErrorCode::Stale), "{e}");

    cluster.kill9(0);
    drop(client);
    cluster.restart();
    let client = cluster.client();
    let listed = client.readdir("/made").unwrap();
    assert_eq!(listed.len(), 299, "the files made and the one there before");
    let f = client.open("/made/m297", &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; 70_000];
    assert_eq!(f.read_at(0, &mut back).unwrap(), back.len());
    assert!(back == pattern(5, 70_000), "m297 reads back other bytes");
}

/// `weft bench open-close`'s program: open/write/close, open/read/close (verified) and
/// open/rewrite/close cycles, one file per cycle.
const OPEN_CLOSE_C: &str = include_str!("../../weft-bench/c/open_close.c");

#[test]
fn a_collective_mpi_io_open_asks_the_manager_once_not_once_per_process() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    const NP: usize = 4;
    const CYCLES: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("open_close.c");
    std::fs::write(&source, OPEN_CLOSE_C).unwrap();
    let program = dir.path().join("open_close");
    let built = std::process::Command::new(std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into()))
        .args(["-O2", "-o"])
        .arg(&program)
        .arg(&source)
        .output()
        .expect("running mpicc");
    assert!(
        built.status.success(),
        "mpicc: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let cluster = TestCluster::start();
    cluster.client().mkdir("/o", 0o755).unwrap();
    let before = manager_requests(&cluster);
    let grants_before = capability_grants(&cluster);
    let mut c = weft_testkit::mpi::mpirun_command(NP, "120");
    c.arg("-x")
        .arg(format!("LD_PRELOAD={}", weft_testkit::mpi::library().display()));
    for (k, v) in cluster.env() {
        c.arg("-x").arg(format!("{k}={v}"));
    }
    let out = c
        .arg(&program)
        .args(["weft:/o/cycle", &CYCLES.to_string(), "64"])
        .output()
        .expect("running mpirun");
    weft_testkit::mpi::assert_ok(&out, "open_close under mpirun");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("cycle create_s"),
        "no timing line:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let served = manager_requests(&cluster) - before;
    let grants = capability_grants(&cluster) - grants_before;
    // 3 x CYCLES collective opens: a create (the parent's resolve and the create) or a
    // resolve each, by rank 0 alone; CYCLES deletes by rank 0; each process's first
    // contact. Every rank asking the manager at every open would be 4 x 60 at least.
    let opens = 3 * CYCLES;
    let bound = (opens * 2 + CYCLES * 3 + NP * 4) as f64;
    assert!(
        served <= bound,
        "{opens} collective opens by {NP} processes cost the manager {served} requests (at most {bound} expected: \
         rank 0 asks once per open and broadcasts)"
    );
    assert!(
        served >= opens as f64,
        "the manager counted only {served} requests for {opens} opens"
    );
    // Capabilities: at most one grant per process, file and right (each cycle's file
    // is new; the create and rewrite cycles write, the read cycle reads).
    assert!(
        grants <= (opens * NP) as f64,
        "{opens} opens by {NP} processes asked for {grants} capabilities (at most one per process and file expected)"
    );
}

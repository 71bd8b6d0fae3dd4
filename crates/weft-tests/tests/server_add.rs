//! An io server joining a running cluster (`weft server add`, issue 35), on real
//! clusters: a client and a mount that started before it use it for new files without
//! a restart, its data is read back byte for byte, the manager still serves it after a
//! restart, and `weft down`/`weft up` stop and start one `weft server add` started in a
//! `weft up` home. An unreachable address, a clashing id or address and a server that
//! is not the one named are refused with a clear error and change nothing.

mod common;

use common::{pattern, weft_err, weft_ok};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weft_client::{Client, CreateOptions, OpenOptions};
use weft_layout::{LayoutRequest, ServerId};
use weft_testkit::{ClusterOptions, TestCluster, TiedDir, WeftMount};

fn two_io_servers() -> TestCluster {
    TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        stripe_count: 0,
        ..Default::default()
    })
}

/// FNV-1a: a checksum of what was written, compared with one of what is read.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Starts io server `id` by hand (as an operator would on a new machine), with the
/// cluster's keys; its address once it listens.
fn start_io_server(cluster: &TestCluster, tied: &TiedDir, id: u32) -> (std::process::Child, String, PathBuf) {
    let data = tied.path().join(format!("data-{id}"));
    let ready = tied.path().join(format!("ready-{id}"));
    let log = std::fs::File::create(tied.path().join(format!("server-{id}.log"))).unwrap();
    let mut command = tied.weftd();
    command
        .args(["--role", "io", "--id", &id.to_string(), "--listen", "127.0.0.1:0"])
        .arg("--data")
        .arg(&data)
        .arg("--ready-file")
        .arg(&ready)
        .arg("--key")
        .arg(cluster.key_path())
        .arg("--capability-key")
        .arg(cluster.home().join(weft_config::CAPABILITY_KEY_FILE_NAME))
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let child = tied.spawn(&mut command);
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr = loop {
        if let Ok(addr) = std::fs::read_to_string(&ready) {
            if !addr.trim().is_empty() {
                break addr.trim().to_owned();
            }
        }
        assert!(Instant::now() < deadline, "io server {id} did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    (child, addr, data)
}

/// Bytes of the files under `dir` (an io server's objects).
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

fn io_ids(client: &Client) -> Vec<u32> {
    client.cluster_info().io_servers.iter().map(|s| s.id.0).collect()
}

fn write_and_check(client: &Client, path: &str, layout: LayoutRequest, tag: u64) -> Vec<ServerId> {
    let data = pattern(tag, 0, 3 * 64 * 1024 * 4 + 1234);
    let file = client
        .create(
            path,
            &CreateOptions {
                layout,
                exclusive: true,
                ..Default::default()
            },
        )
        .unwrap();
    file.write_at(0, &data).unwrap();
    file.sync().unwrap();
    drop(file);
    let file = client.open(path, &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), data.len());
    assert_eq!(checksum(&back), checksum(&data), "{path}: read back differs");
    client.stat(path).unwrap().layout.unwrap().servers
}

#[test]
fn an_io_server_joins_a_running_cluster_and_stays_after_a_manager_restart() {
    let cluster = two_io_servers();
    let tied = TiedDir::new("weft-server-add-");
    // A client and a mount that start before the new server exists.
    let client = cluster.client();
    assert_eq!(io_ids(&client), vec![1, 2]);
    let mount = WeftMount::start(&cluster, &tied, "mnt");
    std::fs::write(mount.path().join("before"), b"two servers").unwrap();

    let (mut child, addr, data) = start_io_server(&cluster, &tied, 3);

    // Refusals change nothing: nobody answers there; an id or an address the cluster
    // has; a server that is not the one named.
    let (_, err) = weft_err(&cluster, &["server", "add", "--id", "4", "--addr", "127.0.0.1:1"]);
    assert!(err.contains("io server 4 at 127.0.0.1:1"), "unreachable: {err}");
    let (_, err) = weft_err(&cluster, &["server", "add", "--id", "2", "--addr", &addr]);
    assert!(
        err.contains("io server 2 is in the cluster already"),
        "duplicate id: {err}"
    );
    let taken = cluster.addr(1);
    let (_, err) = weft_err(&cluster, &["server", "add", "--id", "5", "--addr", &taken]);
    assert!(err.contains("in the cluster already"), "duplicate address: {err}");
    let (_, err) = weft_err(&cluster, &["server", "add", "--id", "6", "--addr", &addr]);
    assert!(err.contains("is server 3, not 6"), "wrong id: {err}");
    // Bad addresses: a clear error, and the manager answers on.
    let long = "x".repeat(2000);
    for bad in ["", "no-port", "127.0.0.1:99999", long.as_str()] {
        let (_, err) = weft_err(&cluster, &["server", "add", "--id", "8", "--addr", bad]);
        assert!(
            err.contains("io server 8") || err.contains("address"),
            "{bad:.20}: {err}"
        );
    }
    let listed = weft_ok(&cluster, &["server", "list"]);
    assert_eq!(listed.lines().count(), 2, "refusals added something:\n{listed}");
    assert_eq!(io_ids(&cluster.client()), vec![1, 2]);

    weft_ok(&cluster, &["server", "add", "--id", "3", "--addr", &addr]);
    let listed = weft_ok(&cluster, &["server", "list"]);
    assert!(listed.contains("io server 3: active"), "{listed}");

    // The running client: a file over all servers (stripe count 0) and one over 3.
    let mut all = write_and_check(&client, "/all", LayoutRequest::default(), 1);
    // All three (the first is the next server in turn).
    all.sort_unstable();
    assert_eq!(all, vec![ServerId(1), ServerId(2), ServerId(3)]);
    let three = LayoutRequest {
        stripe_count: Some(3),
        ..Default::default()
    };
    assert_eq!(write_and_check(&client, "/three", three, 2).len(), 3);
    assert_eq!(
        io_ids(&client),
        vec![1, 2, 3],
        "the client learnt of the new server"
    );

    // The running mount.
    let through_mount = pattern(3, 0, 700_000);
    std::fs::write(mount.path().join("mounted"), &through_mount).unwrap();
    let back = std::fs::read(mount.path().join("mounted")).unwrap();
    assert_eq!(checksum(&back), checksum(&through_mount));
    let servers = client.stat("/mounted").unwrap().layout.unwrap().servers;
    assert!(servers.contains(&ServerId(3)), "mount's file on {servers:?}");
    assert!(bytes_under(&data) >= 3 * 64 * 1024, "io server 3 holds no data");

    let df = weft_ok(&cluster, &["df"]);
    assert!(df.contains(&addr), "weft df:\n{df}");
    let status = String::from_utf8_lossy(&cluster.weft(&["status"]).stdout).into_owned();
    assert!(status.contains(&addr), "weft status:\n{status}");

    // A manager restart keeps it.
    cluster.kill9(0);
    cluster.restart();
    let fresh = cluster.client();
    assert_eq!(io_ids(&fresh), vec![1, 2, 3]);
    let file = fresh.open("/all", &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; file.size().unwrap() as usize];
    file.read_at(0, &mut back).unwrap();
    assert_eq!(checksum(&back), checksum(&pattern(1, 0, back.len())));
    assert_eq!(
        write_and_check(&fresh, "/after", LayoutRequest::default(), 4).len(),
        3
    );
    let listed = weft_ok(&cluster, &["server", "list"]);
    assert!(listed.contains("io server 3: active"), "{listed}");

    drop(mount);
    tied.stop(&mut child);
}

#[test]
fn weft_server_add_starts_a_server_in_a_weft_up_home_that_down_and_up_keep() {
    let cluster = two_io_servers();
    let client = cluster.client();
    let out = weft_ok(&cluster, &["server", "add"]);
    assert!(out.contains("io server 3"), "{out}");
    assert!(cluster.pid(3).is_some(), "no weftd for server 3");
    assert!(cluster.config().servers.iter().any(|s| s.id == 3));
    let servers = write_and_check(&client, "/wide", LayoutRequest::default(), 5);
    assert_eq!(servers.len(), 3);
    let data = cluster.home().join("data").join("server-3");
    assert!(bytes_under(&data) > 0, "io server 3 holds no data");

    weft_ok(&cluster, &["down"]);
    assert!(cluster.pid(3).is_none(), "weft down left server 3 running");
    cluster.restart();
    assert!(cluster.pid(3).is_some(), "weft up did not start server 3 again");
    let fresh = cluster.client();
    assert_eq!(io_ids(&fresh), vec![1, 2, 3]);
    let file = fresh.open("/wide", &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; file.size().unwrap() as usize];
    file.read_at(0, &mut back).unwrap();
    assert_eq!(checksum(&back), checksum(&pattern(5, 0, back.len())));
}

#[test]
fn the_cache_tier_writes_back_to_and_reads_from_a_server_added_after_it_started() {
    let mut options = ClusterOptions::cached("colocated", "64M");
    options.io_servers = 2;
    let cluster = TestCluster::start_with(&options);
    let client = cluster.client();
    // The cache role learns the io servers at its first cached file.
    let before = write_and_check(
        &client,
        "/early",
        LayoutRequest {
            cache: Some(weft_layout::CacheMode::Cached),
            ..Default::default()
        },
        11,
    );
    assert_eq!(before.len(), 2);
    let out = weft_ok(&cluster, &["server", "add"]);
    assert!(out.contains("io server 3"), "{out}");
    let servers = write_and_check(
        &client,
        "/cached",
        LayoutRequest {
            stripe_count: Some(3),
            cache: Some(weft_layout::CacheMode::Cached),
            ..Default::default()
        },
        12,
    );
    assert!(servers.contains(&ServerId(3)), "{servers:?}");
    // Written back through the cache managers, which had to find server 3.
    let data = cluster.home().join("data").join("server-3");
    assert!(
        bytes_under(&data) > 0,
        "io server 3 holds no data of the cached file"
    );
}

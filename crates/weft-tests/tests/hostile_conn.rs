//! Named attacks on a real cluster's availability (issue 29, findings 3 and 7): what a
//! stranger without the key, or one key holder, does to everyone else on the same
//! machine. Each attack runs as an attacker would, then a legitimate client (another
//! user where the finding needs one) must still be served. Each failed on the code
//! before the fix, as its comment says.

use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use weft_rpc::{ClientAuth, ClusterKey, Connection, Timeouts};
use weft_testkit::{raise_descriptor_limit, ClusterOptions, TestCluster, Tmpfs};

/// The unprivileged user the victim runs as.
const OTHER_UID: u32 = 65534;

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(5),
        request: Duration::from_secs(10),
    }
}

/// The manager's Unix socket, as the description records it (none before the fix).
fn meta_socket(cluster: &TestCluster) -> Option<PathBuf> {
    cluster.config().meta().socket.clone()
}

/// Lets `OTHER_UID` reach the cluster: the home searchable, the description readable,
/// and a copy of the cluster key of its own (the key holder gave it the key).
fn admit_other_user(cluster: &TestCluster) -> PathBuf {
    let home = cluster.home();
    for dir in [home.to_path_buf(), home.join("run")] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(home.join("cluster.toml"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let key = home.join("other-user.key");
    std::fs::copy(cluster.key_path(), &key).unwrap();
    std::os::unix::fs::chown(&key, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    key
}

/// `weft args` run as `OTHER_UID` with its own copy of the key, in a directory it owns.
fn weft_as_other(cluster: &TestCluster, key: &Path, cwd: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(weft_testkit::bin("weft"));
    command
        .args(args)
        .envs(cluster.env())
        .env("WEFT_KEY", key)
        .env("HOME", cwd)
        .current_dir(cwd)
        .uid(OTHER_UID)
        .gid(OTHER_UID);
    command.output().unwrap()
}

#[track_caller]
fn assert_served(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} was refused: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Attack: a stranger without the key makes failed and merely slow handshakes to every
/// server from 127.0.0.1, to get the address refused.
///
/// Before: 20 failed (or slow: over 10 s) handshakes got 127.0.0.1 refused for 60 s,
/// and the manager had no Unix socket, so `weft ls` of every local user and a client
/// over TCP were both turned away with "too many failed authentications from
/// 127.0.0.1". Now an address is never refused, slow handshakes are no failures, and
/// local clients reach the manager on its socket.
#[test]
fn attack_keyless_ban_of_the_loopback_address() {
    let cluster = TestCluster::start();
    let stranger = ClientAuth::cluster(ClusterKey::from_bytes([0xa5; 32]));
    let servers: Vec<String> = cluster.config().servers.iter().map(|s| s.addr.clone()).collect();
    // Slow ones first: connected, silent, held until each server gives up on them.
    let mut silent: Vec<TcpStream> = Vec::new();
    for addr in &servers {
        for _ in 0..25 {
            silent.push(TcpStream::connect(addr).unwrap());
        }
    }
    for addr in &servers {
        for _ in 0..25 {
            match Connection::connect(addr, "stranger", &stranger, timeouts()) {
                Err(weft_rpc::RpcError::Authentication { .. }) => {}
                Err(weft_rpc::RpcError::Remote { error, .. })
                    if error.message.contains("failed authentications") => {}
                other => panic!("a stranger was not refused: {:?}", other.map(|_| ())),
            }
        }
    }
    let started = Instant::now();
    for s in &mut silent {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "silent handshakes were held for {:?}",
        started.elapsed()
    );
    // The key holder on this machine is served, through the CLI and over TCP.
    assert_served(
        "`weft mkdir` of a local key holder",
        &cluster.weft(&["mkdir", "/after"]),
    );
    assert_served("`weft ls` of a local key holder", &cluster.weft(&["ls", "/"]));
    let client = weft_client::Client::connect_with(&cluster.meta_addr(), cluster.auth())
        .expect("a client over TCP from 127.0.0.1 is served");
    client.stat("/after").unwrap();
}

/// Attack: one key holder opens as many connections as each server takes from it, over
/// TCP from 127.0.0.1 and over the manager's Unix socket, and holds them idle.
///
/// Before: 4,096 idle connections filled the per-address cap of 127.0.0.1, and every
/// other local user's `weft` got "too many connections from 127.0.0.1". Now local
/// clients reach the manager on its socket, where the cap is per user (as the kernel
/// tells it), and a connection counts only once it proved the key.
#[test]
fn attack_connection_cap_exhaustion_by_one_key_holder() {
    let cap = weft_rpc::ServerLimits::default().peer_connections_max;
    raise_descriptor_limit(4 * cap as u64 + 2048);
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 1,
        ..ClusterOptions::default()
    });
    let key = admit_other_user(&cluster);
    let auth = cluster.auth();
    let meta = cluster.meta_addr();
    // Over TCP: until the manager refuses this address.
    let mut held: Vec<TcpStream> = Vec::new();
    let refusal = loop {
        let mut s = TcpStream::connect(&meta).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        match weft_rpc::auth::client_handshake(&mut s, &meta, "hog", &auth, 10_000) {
            Ok(_) => held.push(s),
            Err(e) => break e.to_string(),
        }
        assert!(
            held.len() <= cap,
            "the manager took more than {cap} connections from one address"
        );
    };
    assert!(refusal.contains("too many connections"), "{refusal}");
    // Over the manager's socket, as itself: until its own share is full.
    let mut held_unix: Vec<UnixStream> = Vec::new();
    if let Some(socket) = meta_socket(&cluster) {
        let target = format!("unix:{}", socket.display());
        loop {
            let mut s = UnixStream::connect(&socket).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            match weft_rpc::auth::client_handshake(&mut s, &target, "hog", &auth, 10_000) {
                Ok(_) => held_unix.push(s),
                Err(e) => {
                    assert!(
                        e.to_string().contains("too many connections from local user 0"),
                        "{e}"
                    );
                    break;
                }
            }
            assert!(held_unix.len() <= cap);
        }
    }
    // Another local user is served: reads the namespace, writes and reads a file.
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let local = work.path().join("f");
    std::fs::write(&local, b"written by another user").unwrap();
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_served(
        "`weft ls` of another user",
        &weft_as_other(&cluster, &key, work.path(), &["ls", "/"]),
    );
    assert_served(
        "`weft put` of another user",
        &weft_as_other(
            &cluster,
            &key,
            work.path(),
            &["put", &local.display().to_string(), "/g"],
        ),
    );
    let got = weft_as_other(&cluster, &key, work.path(), &["cat", "/g"]);
    assert_served("`weft cat` of another user", &got);
    assert_eq!(got.stdout, b"written by another user");
    drop(held);
    drop(held_unix);
}

/// Attack: with every server's data and the manager's database on one file system (as
/// `weft up`'s home puts them), a key holder fills it with data and then with empty
/// files and directories, so that nobody can free space.
///
/// Before: once the disk was full, every `weft rm` failed with "metadata manager: no
/// space left for its database", and a failed `weft put` left its hidden temporary
/// file behind for the same reason; only a restart let one rm through. Now io servers
/// refuse writes while less than their reserve is free, the manager refuses new entries
/// while less than its (smaller) reserve is free, and removals always commit into it;
/// filled by another process, the manager releases its reserve file.
#[test]
fn attack_fill_the_shared_disk_so_that_nobody_can_remove() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        ..ClusterOptions::default()
    });
    assert!(cluster.weft(&["down"]).status.success());
    let data = cluster.home().join("data");
    let _disk = Tmpfs::over(&data, "24m");
    cluster.restart();
    let client = cluster.client();
    // Someone's files, written before the attack.
    let kept: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    for k in 0..3 {
        let file = client.create(&format!("/keep-{k}"), &Default::default()).unwrap();
        file.write_at(0, &kept).unwrap();
        file.sync().unwrap();
    }
    // A put larger than the disk fails and leaves nothing, not even its hidden file.
    let local = cluster.home().join("big.bin");
    std::fs::write(&local, vec![7u8; 30 << 20]).unwrap();
    let out = cluster
        .command("weft")
        .arg("put")
        .arg(&local)
        .arg("/big")
        .output()
        .unwrap();
    assert!(!out.status.success(), "a put larger than the disk succeeded");
    std::fs::remove_file(&local).unwrap();
    let names = |client: &weft_client::Client| -> Vec<String> {
        client
            .readdir("/")
            .unwrap()
            .into_iter()
            .map(|e| e.name.to_string())
            .collect()
    };
    let left = names(&client);
    assert!(
        !left.iter().any(|n| n.contains("big")),
        "a failed put left {left:?}"
    );
    // The attacker's data, until refused.
    let block = vec![0xA5u8; 1 << 20];
    let mut refused = None;
    for k in 0..64 {
        let written = client
            .create(&format!("/hog-{k}"), &Default::default())
            .and_then(|f| f.write_at(0, &block).and_then(|_| f.sync()));
        if let Err(e) = written {
            refused = Some(e);
            break;
        }
    }
    let refused = refused.expect("a 24 MiB disk took 64 MiB");
    assert_eq!(refused.code(), weft_client::ErrorCode::NoSpace, "{refused}");
    // Then empty directories, until refused: they grow only the manager's database.
    let mut made = 0;
    let refused = loop {
        match client.mkdir(&format!("/d{made:0>200}"), 0o755) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(
            made < 200_000,
            "the manager took 200,000 directories on a 24 MiB disk"
        );
    };
    assert_eq!(refused.code(), weft_client::ErrorCode::NoSpace, "{refused}");
    assert!(
        refused.to_string().contains("removing files always works"),
        "not refused for the reserve: {refused}"
    );
    // Something other than Weft fills the rest, to the last byte: the first commit that
    // finds no room fails, the manager releases its reserve file, and removals go on
    // (without the release every later rmdir failed too).
    let filler = fill(&data);
    let mut failed = Vec::new();
    for k in 0..made {
        if let Err(e) = client.rmdir(&format!("/d{k:0>200}")) {
            failed.push(e.to_string());
            assert!(
                failed.len() < 3,
                "rmdir on a disk another process filled: {failed:?}"
            );
            client.rmdir(&format!("/d{k:0>200}")).expect("rmdir again");
        }
    }
    std::fs::remove_file(filler).unwrap();
    // Anyone can still remove: files, and the attacker's directories.
    for k in 0..3 {
        let out = cluster.weft(&["rm", &format!("/keep-{k}")]);
        assert_served("`weft rm` on a full disk", &out);
    }
    for name in names(&client).iter().filter(|n| n.starts_with("hog-")) {
        client.unlink(&format!("/{name}")).expect("unlink on a full disk");
    }
    // And once the removed files' objects are purged, writes go on.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let written = client
            .create("/after", &Default::default())
            .and_then(|f| f.write_at(0, &block).and_then(|_| f.sync()));
        match written {
            Ok(_) => break,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "no write succeeded after the removals: {e}"
                );
                let _ = client.unlink("/after");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Fills the file system of `dir` to the last byte with a file, as another process
/// might.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0x5A; 64 * 1024];
    for size in [chunk.len(), 512, 1] {
        while f.write(&chunk[..size]).is_ok_and(|n| n > 0) {}
    }
    path
}

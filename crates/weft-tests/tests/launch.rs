//! Clusters beyond `weft up`: a job-scoped cluster launched with Open MPI's mpirun
//! (rank 0 meta, the others io), and a cluster started server by server from a
//! hand-written description. Every process started here is gone when a test ends.

mod common;

use common::pattern;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use weft_client::{Client, CreateOptions, OpenOptions};
use weft_rpc::{ClientAuth, ClusterKey};
use weft_testkit::{bin, TiedDir};

/// Live (not zombie) processes whose session is `session`: everything an mpirun
/// started in its own session, ranks included (Open MPI gives each rank its own
/// process group, so the group of mpirun does not cover them).
fn live_in_session(session: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the ")" closing the command name: state ppid pgrp session ...
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        if fields.len() > 3 && fields[0] != "Z" && fields[3] == session.to_string() {
            found.push(pid);
        }
    }
    found
}

/// An mpirun job in its own session, torn down on drop whatever happened, and by the
/// home's sweeper (SIGTERM, which mpirun forwards to the ranks) if the test is killed.
struct MpiJob<'a> {
    child: Child,
    home: &'a TiedDir,
}

impl MpiJob<'_> {
    fn session(&self) -> i32 {
        self.child.id() as i32
    }

    /// Asks mpirun to stop (SIGTERM, which it forwards to the ranks) and waits until
    /// it and every process of its session are gone; returns how long that took.
    fn stop(&mut self) -> Duration {
        let started = Instant::now();
        // SAFETY: signalling the mpirun this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        while started.elapsed() < Duration::from_secs(20) {
            let exited = self.child.try_wait().unwrap().is_some();
            if exited && live_in_session(self.session()).is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        started.elapsed()
    }
}

impl Drop for MpiJob<'_> {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.stop();
        }
        for pid in live_in_session(self.session()) {
            // SAFETY: these processes are in the session this test created.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        self.home.stop(&mut self.child);
    }
}

/// The manager's address in a cluster description (`[[server]]` tables, one of which
/// has the meta role), read without the configuration library.
fn meta_addr_in(description: &str) -> String {
    let mut roles = String::new();
    let mut found = None;
    for line in description.lines().map(str::trim) {
        if line == "[[server]]" {
            roles.clear();
        } else if let Some(r) = line.strip_prefix("roles = ") {
            roles = r.to_owned();
        } else if let Some(a) = line.strip_prefix("addr = ") {
            if roles.contains("meta") {
                found = Some(a.trim_matches('"').to_owned());
            }
        }
    }
    found.expect("a server with the meta role")
}

fn round_trip(client: &Client, path: &str, tag: u64) {
    let data = pattern(tag, 0, 1 << 20);
    let file = client.create(path, &CreateOptions::default()).unwrap();
    file.write_at(0, &data).unwrap();
    file.sync().unwrap();
    let back_file = client.open(path, &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(back_file.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "{path} read back differs");
}

#[test]
fn mpirun_launches_a_job_scoped_cluster_and_takes_it_down() {
    let home = TiedDir::new("weft-mpi-");
    let log = std::fs::File::create(home.path().join("mpirun.log")).unwrap();
    let mut command = Command::new("mpirun");
    weft_testkit::mpi::own_session_dir(&mut command);
    command
        .args(["-np", "3", "--oversubscribe"])
        .arg(bin("weftd"))
        .arg("--mpi")
        .arg("--home")
        .arg(home.path())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    // SAFETY: setsid is async-signal-safe. Its own session lets the test find (and
    // if need be kill) every process of the job.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    // Tied: if this test is killed, the sweeper SIGTERMs mpirun, which ends the ranks.
    let mut job = MpiJob {
        child: home.spawn(&mut command),
        home: &home,
    };
    let description = home.path().join("cluster.toml");
    let text = common::wait_for("cluster.toml from rank 0", Duration::from_secs(60), || {
        if let Some(status) = job.child.try_wait().unwrap() {
            panic!(
                "mpirun exited ({status}) before the cluster was ready:\n{}",
                std::fs::read_to_string(home.path().join("mpirun.log")).unwrap_or_default()
            );
        }
        std::fs::read_to_string(&description).ok()
    });
    let ranks = live_in_session(job.session());
    assert!(
        ranks.len() >= 4,
        "mpirun and 3 ranks expected, found pids {ranks:?}"
    );

    // Rank 0 made the key in the shared home, private to its owner, before any server
    // started.
    let key = home.path().join("cluster.key");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the key is readable by its owner only");
    let auth = ClientAuth::cluster(ClusterKey::load(&key).unwrap());
    let client = Client::connect_with(&meta_addr_in(&text), auth).unwrap();
    assert_eq!(
        client.cluster_info().io_servers.len(),
        2,
        "ranks 1 and 2 are io servers"
    );
    round_trip(&client, "/from-mpi", 1);
    let file = client.open("/from-mpi", &OpenOptions::default()).unwrap();
    assert_eq!(file.layout().servers.len(), 2, "striped over both io ranks");
    // The CLI finds the job's cluster through WEFT_HOME alone.
    let out = Command::new(bin("weft"))
        .args(["ls", "-l", "/"])
        .env("WEFT_HOME", home.path())
        .env_remove("WEFT_META")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains("1048576") && listing.contains("from-mpi"),
        "{listing}"
    );

    let took = job.stop();
    let left = live_in_session(job.session());
    assert!(
        left.is_empty(),
        "processes of the job still running after {took:?}: {left:?}"
    );
    assert!(took < Duration::from_secs(10), "stopping the job took {took:?}");
}

/// Servers started by hand (`weftd --config F --id N`); all killed on drop, and tied to
/// the test process (`--exit-on-stdin-eof` on the directory's pipe), so that a killed
/// test leaves none running either.
struct Servers<'a>(Vec<Child>, &'a TiedDir);

impl Drop for Servers<'_> {
    fn drop(&mut self) {
        for child in &mut self.0 {
            self.1.stop(child);
        }
    }
}

fn start_servers<'a>(tied: &'a TiedDir, ids: &[u32]) -> Servers<'a> {
    let dir = tied.path();
    let mut servers = Servers(Vec::new(), tied);
    for &id in ids {
        let ready = dir.join(format!("ready-{id}"));
        std::fs::remove_file(&ready).ok();
        let log = std::fs::File::create(dir.join(format!("server-{id}.log"))).unwrap();
        let child = tied.spawn(
            tied.weftd()
                .arg("--config")
                .arg(dir.join("cluster.toml"))
                .args(["--id", &id.to_string(), "--ready-file"])
                .arg(&ready)
                .stdout(log.try_clone().unwrap())
                .stderr(log),
        );
        servers.0.push(child);
        common::wait_for(&format!("server {id} ready"), Duration::from_secs(20), || {
            std::fs::read_to_string(&ready).ok()
        });
    }
    servers
}

#[test]
fn a_hand_written_cluster_description_starts_serves_and_restarts() {
    let dir = TiedDir::new("weft-described-");
    // Fixed ports, as an administrator would write them: found free by binding.
    let listeners: Vec<std::net::TcpListener> = (0..4)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    let mut text = String::from("name = \"handmade\"\nstripe_size = 4096\nstripe_count = 2\n");
    for (id, addr) in addrs.iter().enumerate() {
        let role = if id == 0 { "meta" } else { "io" };
        text += &format!(
            "\n[[server]]\nid = {id}\nroles = [\"{role}\"]\naddr = \"{addr}\"\ndata_dir = \"{}\"\n",
            dir.path().join(format!("data-{id}")).display()
        );
    }
    std::fs::write(dir.path().join("cluster.toml"), &text).unwrap();
    drop(listeners);

    // Without the cluster key no server starts, and the message says how to make one.
    let out = Command::new(bin("weftd"))
        .arg("--config")
        .arg(dir.path().join("cluster.toml"))
        .args(["--id", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no cluster key") && stderr.contains("weft key create"),
        "{stderr}"
    );
    let key = dir.path().join("cluster.key");
    let out = Command::new(bin("weft"))
        .arg("key")
        .arg("create")
        .arg(&key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A second create never replaces a key that servers and clients hold.
    let before = std::fs::read(&key).unwrap();
    let again = Command::new(bin("weft"))
        .arg("key")
        .arg("create")
        .arg(&key)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert_eq!(std::fs::read(&key).unwrap(), before);
    let auth = ClientAuth::cluster(ClusterKey::load(&key).unwrap());

    // An id the description does not list is refused with a message naming it.
    let out = Command::new(bin("weftd"))
        .arg("--config")
        .arg(dir.path().join("cluster.toml"))
        .args(["--id", "9"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("9") && stderr.contains("cluster.toml"),
        "{stderr}"
    );

    let mut servers = start_servers(&dir, &[1, 2, 3, 0]);
    for (id, addr) in addrs.iter().enumerate() {
        let ready = std::fs::read_to_string(dir.path().join(format!("ready-{id}"))).unwrap();
        assert_eq!(
            ready.trim(),
            addr,
            "server {id} listens where the description says"
        );
    }
    let client = Client::connect_with(&addrs[0], auth.clone()).unwrap();
    let info = client.cluster_info();
    let io: Vec<&str> = info.io_servers.iter().map(|s| s.addr.as_str()).collect();
    assert_eq!(io, addrs[1..].iter().map(String::as_str).collect::<Vec<_>>());
    round_trip(&client, "/handmade", 2);
    let file = client.open("/handmade", &OpenOptions::default()).unwrap();
    assert_eq!(file.layout().stripe_size_bytes, 4096, "the description's default");
    assert_eq!(file.layout().servers.len(), 2, "the description's default");
    // A client elsewhere needs the manager's address and the key; with the address
    // alone it is told which variable to set.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = Command::new(bin("weft"))
        .args(["cat", "/handmade"])
        .env("WEFT_META", &addrs[0])
        .env("HOME", elsewhere.path())
        .env_remove("WEFT_HOME")
        .env_remove("WEFT_KEY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("WEFT_KEY"), "{stderr}");
    let out = Command::new(bin("weft"))
        .args(["cat", "/handmade"])
        .env("WEFT_META", &addrs[0])
        .env("WEFT_KEY", &key)
        .env("HOME", elsewhere.path())
        .env_remove("WEFT_HOME")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout == pattern(2, 0, 1 << 20), "weft cat output differs");

    // Stop every server (SIGTERM ends weftd), start them again: data and namespace
    // come back from the data directories the description names.
    for child in &mut servers.0 {
        // SAFETY: signalling a weftd this test started.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    }
    let stopping = Instant::now();
    for child in &mut servers.0 {
        child.wait().unwrap();
    }
    assert!(stopping.elapsed() < Duration::from_secs(5));
    drop(servers);
    let _servers = start_servers(&dir, &[1, 2, 3, 0]);
    let client = Client::connect_with(&addrs[0], auth.clone()).unwrap();
    let file = client.open("/handmade", &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; 1 << 20];
    assert_eq!(file.read_at(0, &mut back).unwrap(), back.len());
    assert!(back == pattern(2, 0, 1 << 20), "data after restart differs");
}

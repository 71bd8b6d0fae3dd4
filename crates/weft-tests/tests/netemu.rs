//! The emulated network of `weft up --emulate-network`: servers in their own network
//! namespaces behind shaped links, data round trips over them at no more than the
//! links' rate, and `weft down` (or the stale sweep after a crash) leaves no namespace,
//! link or discipline behind.
//!
//! It needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2, as CI has; where they are
//! missing each test prints why it did not run ("SKIPPED ...") rather than pass silently.

use std::process::Command;
use std::time::Instant;
use weft_client::CreateOptions;
use weft_config::netemu::NetworkEmulation;
use weft_testkit::{ClusterOptions, TestCluster};

/// Rate of each emulated link in these tests, bits per second: low, so that the
/// links and not the machine bound the transfer.
const RATE_BITS: u64 = 200_000_000;
const IO_SERVERS: u32 = 2;

/// Why the emulated network cannot be tested here, if it cannot.
fn cannot_run() -> Option<String> {
    for program in ["ip", "tc"] {
        if Command::new(program).arg("-V").output().is_err() {
            return Some(format!("`{program}` not found (iproute2 is not installed)"));
        }
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let needed = (1u64 << 12) | (1u64 << 21);
    (effective & needed != needed)
        .then(|| "not root: CAP_NET_ADMIN and CAP_SYS_ADMIN are needed to make namespaces and links".into())
}

fn skip_unless_possible(test: &str) -> bool {
    match cannot_run() {
        Some(why) => {
            eprintln!("SKIPPED {test} (not run, not passed): {why}");
            false
        }
        None => true,
    }
}

fn output(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().expect(program);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Namespaces and host links named for cluster `id` that exist now.
fn leftovers(id: &str) -> Vec<String> {
    let prefix = format!("weft-{id}");
    let mut found: Vec<String> = output("ip", &["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
        .map(|n| format!("namespace {n}"))
        .collect();
    found.extend(
        output("ip", &["-o", "link", "show"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .filter(|n| n.starts_with(&prefix))
            .map(|n| format!("link {n}")),
    );
    found
}

fn emulated_cluster(latency: &str) -> (TestCluster, NetworkEmulation) {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: IO_SERVERS,
        extra: vec![
            "--emulate-network".into(),
            format!("{}mbit,{latency}", RATE_BITS / 1_000_000),
        ],
        ..Default::default()
    });
    let emu = NetworkEmulation::load(cluster.home())
        .unwrap()
        .expect("weft up --emulate-network records its network in netemu.toml");
    (cluster, emu)
}

#[test]
fn an_emulated_cluster_is_shaped_to_its_rate_and_leaves_nothing_behind() {
    if !skip_unless_possible("an_emulated_cluster_is_shaped_to_its_rate_and_leaves_nothing_behind") {
        return;
    }
    let (cluster, emu) = emulated_cluster("50us");
    assert_eq!(emu.rate_bits, RATE_BITS);
    assert_eq!(emu.io_servers, IO_SERVERS);
    // The latency is applied exactly where tc has netem; otherwise the record says so.
    assert_eq!(emu.latency_applied, emu.latency_note.is_empty(), "{emu:?}");

    // Every server listens in the cluster's subnet, in its own namespace, with no
    // Unix socket: clients must cross the links.
    let config = cluster.config();
    let subnet = emu.subnet.rsplit_once('.').unwrap().0.to_owned();
    let namespaces = output("ip", &["netns", "list"]);
    for s in &config.servers {
        assert!(
            s.addr.starts_with(&subnet),
            "server {} at {}, not in {}",
            s.id,
            s.addr,
            emu.subnet
        );
        assert!(s.socket.is_none(), "server {} has a Unix socket", s.id);
        let ns = emu.namespace(s.id);
        assert!(namespaces.contains(&ns), "no namespace {ns} in {namespaces}");
        let pid = cluster.pid(s.id).expect("server running");
        let ours = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
        assert_ne!(
            ours,
            std::fs::read_link("/proc/self/ns/net").unwrap(),
            "server {} runs in the host's namespace",
            s.id
        );
        // Both directions shaped: the host side and the server's side.
        let host_side = output("tc", &["qdisc", "show", "dev", &ns]);
        let server_side = output("tc", &["-n", &ns, "qdisc", "show", "dev", "eth0"]);
        for side in [&host_side, &server_side] {
            assert!(side.contains("tbf") && side.contains("200Mbit"), "{ns}: {side}");
        }
    }

    // A transfer of N bytes over the io servers' links takes at least N / total rate.
    let bytes: usize = 24 << 20;
    let data: Vec<u8> = (0..bytes as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let client = cluster.client();
    let file = client.create("/shaped", &CreateOptions::default()).unwrap();
    let floor_s = bytes as f64 / (RATE_BITS as f64 / 8.0 * f64::from(IO_SERVERS));
    let started = Instant::now();
    file.write_at(0, &data).unwrap();
    file.sync().unwrap();
    let write_s = started.elapsed().as_secs_f64();
    let mut back = vec![0u8; bytes];
    let started = Instant::now();
    assert_eq!(file.read_at(0, &mut back).unwrap(), bytes);
    let read_s = started.elapsed().as_secs_f64();
    assert!(back == data, "data read back over the emulated network differs");
    eprintln!(
        "{} MiB over {IO_SERVERS} links of {} Mbit/s: floor {floor_s:.3} s, write {write_s:.3} s, read {read_s:.3} s",
        bytes >> 20,
        RATE_BITS / 1_000_000
    );
    // tbf lets a burst through unshaped (128 KiB per link): allow that and no more.
    let burst_s = (2 * IO_SERVERS as usize * (128 << 10)) as f64 / (RATE_BITS as f64 / 8.0);
    for (phase, seconds) in [("write", write_s), ("read", read_s)] {
        assert!(
            seconds >= floor_s - burst_s,
            "the {phase} took {seconds:.3} s, less than the links allow ({floor_s:.3} s): not shaped"
        );
    }
    drop(file);
    drop(client);

    // `weft down` removes namespaces, links and disciplines; the record stays for a restart.
    let out = cluster.weft(&["down"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        leftovers(&emu.cluster_id),
        Vec::<String>::new(),
        "left after weft down"
    );
    // A restart makes the network again, with the data.
    cluster.restart();
    assert!(!leftovers(&emu.cluster_id).is_empty(), "restart made no network");
    let client = cluster.client();
    let file = client.open("/shaped", &Default::default()).unwrap();
    let mut again = vec![0u8; 4096];
    file.read_at(bytes as u64 - 4096, &mut again).unwrap();
    assert!(again == data[bytes - 4096..], "data differs after the restart");
    drop(file);
    drop(client);
    let out = cluster.weft(&["down"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        leftovers(&emu.cluster_id),
        Vec::<String>::new(),
        "left after the second weft down"
    );
}

#[test]
fn the_network_of_a_crashed_cluster_is_found_stale_and_removed() {
    if !skip_unless_possible("the_network_of_a_crashed_cluster_is_found_stale_and_removed") {
        return;
    }
    let (cluster, emu) = emulated_cluster("0");
    assert!(!emu.latency_applied && emu.latency_note.is_empty(), "{emu:?}");
    assert!(!leftovers(&emu.cluster_id).is_empty());
    // A sweep leaves a live cluster's network alone.
    let out = cluster
        .command("weft")
        .args(["down", "--stale-networks"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        !leftovers(&emu.cluster_id).is_empty(),
        "the sweep removed a live cluster's network"
    );
    // Every server dies, as when the machine's test run is killed: the set is stale.
    for s in cluster.config().servers {
        cluster.kill9(s.id);
    }
    let out = cluster
        .command("weft")
        .args(["down", "--stale-networks"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&emu.cluster_id),
        "the sweep did not name weft-{}: {said}",
        emu.cluster_id
    );
    assert_eq!(
        leftovers(&emu.cluster_id),
        Vec::<String>::new(),
        "left after the sweep"
    );
}

#[test]
fn bad_network_specs_are_refused_before_anything_starts() {
    let home = tempfile::tempdir().unwrap();
    for bad in ["fast", "1gbit,50", "10kbit", "1gbit,5us,1"] {
        let out = Command::new(weft_testkit::bin("weft"))
            .args(["up", "--home"])
            .arg(home.path())
            .args(["--emulate-network", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?} accepted");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("--emulate-network"), "{bad:?}: {said}");
        assert!(
            !home.path().join("cluster.toml").exists(),
            "{bad:?}: a cluster was made"
        );
    }
}

//! `weft up --emulate-network RATE[,LATENCY]`: every server of the cluster in its own
//! network namespace, joined by veth links to one bridge on this machine, each link
//! shaped with tc in both directions (tbf at RATE; netem's delay where the kernel has
//! netem). Clients stay in the host's namespace and reach the servers over TCP through
//! the bridge, as clients on other nodes would through a switch.
//!
//! Everything made is named `weft-<cluster id>...` (namespaces `weft-<id>-<server>`,
//! their host-side links of the same name, the bridge `weft-<id>`) and lives in a
//! private /22 of 10.213.0.0/16 checked unused first; the host's `lo`, its other links
//! and its routes are left alone (the only routes added are the bridge's own subnet,
//! which the kernel adds with its address). `weft down` removes the set; a set whose
//! servers are all gone (a killed `weft up`, a crashed test) is stale and removed by the
//! next `weft up --emulate-network` or by `weft down --stale-networks`. Creating and
//! sweeping take one lock (/run/weft-netemu.lock), so a sweep never removes a set that
//! is being made.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::Command;
use weft_config::netemu::{NetworkEmulation, NetworkSpec, NETEMU_FILE_NAME};

/// The range every emulated cluster takes a /22 of.
const RANGE_FIRST_OCTETS: [u8; 2] = [10, 213];
/// /22 blocks in the /16: at most this many emulated clusters at once.
const SLOTS: u8 = 64;
/// Most servers one emulated cluster holds (addresses .2 to .255 of its first /24).
pub const SERVERS_MAX: u32 = 250;
const LOCK_PATH: &str = "/run/weft-netemu.lock";
/// tbf's queue: packets waiting longer than this are dropped (TCP backs off).
const TBF_QUEUE_MS: u32 = 50;
/// CAP_NET_ADMIN and CAP_SYS_ADMIN (setns and network namespaces need both).
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

/// Runs `program args`; its standard output, or an error naming the command and what it said.
fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program} (is iproute2 installed? apt-get install iproute2)"))?;
    if !out.status.success() {
        bail!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Why this process cannot emulate a network, if it cannot: no iproute2, or not
/// allowed to make namespaces and links.
pub fn unavailable() -> Option<String> {
    for program in ["ip", "tc"] {
        if Command::new(program).arg("-V").output().is_err() {
            return Some(format!(
                "`{program}` was not found: the emulated network needs iproute2 (apt-get install iproute2)"
            ));
        }
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    for (bit, name) in [(CAP_NET_ADMIN, "CAP_NET_ADMIN"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN")] {
        if effective & (1 << bit) == 0 {
            return Some(format!(
                "this process lacks {name}: the emulated network makes network namespaces, veth links and \
                 tc disciplines, which needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN)"
            ));
        }
    }
    None
}

/// The lock every change to emulated networks takes; released on drop. `weft up`
/// holds it until its servers run in their namespaces, so that no sweep takes a set
/// being made for stale.
pub struct Lock(File);

impl Lock {
    fn take() -> Result<Lock> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK_PATH)
            .with_context(|| format!("opening {LOCK_PATH}"))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!("locking {LOCK_PATH}: {}", std::io::Error::last_os_error());
        }
        Ok(Lock(file))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: as above; closing the file would release it too.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Names of the network namespaces on this machine.
fn namespaces() -> Result<Vec<String>> {
    Ok(run("ip", &["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect())
}

/// Names of the links in the host's namespace.
fn links() -> Result<Vec<String>> {
    Ok(run("ip", &["-o", "link", "show"])?
        .lines()
        .filter_map(|l| {
            let name = l.split(": ").nth(1)?;
            Some(name.split('@').next()?.to_owned())
        })
        .collect())
}

/// The cluster id in a name we made: `weft-<5 hex>` or `weft-<5 hex>-<n>`.
fn cluster_id_of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("weft-")?;
    let (id, server) = match rest.split_once('-') {
        Some((id, server)) => (id, Some(server)),
        None => (rest, None),
    };
    let hex = id.len() == 5
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let server_ok = server.is_none_or(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    (hex && server_ok).then_some(id)
}

/// The address of server `id` in `emu`'s subnet.
pub fn address(emu: &NetworkEmulation, id: u32) -> String {
    let base = emu.subnet.split('/').next().unwrap_or_default();
    let prefix: Vec<&str> = base.split('.').collect();
    format!("{}.{}.{}.{}", prefix[0], prefix[1], prefix[2], id + 2)
}

fn bridge_address(emu: &NetworkEmulation) -> String {
    let base = emu.subnet.split('/').next().unwrap_or_default();
    let prefix: Vec<&str> = base.split('.').collect();
    format!("{}.{}.{}.1/22", prefix[0], prefix[1], prefix[2])
}

/// IPv4 prefixes (address, length) the host uses: its addresses and routes in every table.
fn host_prefixes() -> Result<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    let text =
        run("ip", &["-4", "-o", "addr", "show"])? + &run("ip", &["-4", "route", "show", "table", "all"])?;
    for word in text.split_whitespace() {
        let (addr, len) = match word.split_once('/') {
            Some((a, l)) => (a, l.parse::<u32>().unwrap_or(32)),
            None => (word, 32),
        };
        if let Ok(ip) = addr.parse::<std::net::Ipv4Addr>() {
            out.push((u32::from(ip), len.min(32)));
        }
    }
    Ok(out)
}

fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    let len = a.1.min(b.1);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    a.0 & mask == b.0 & mask
}

/// A /22 of 10.213.0.0/16 no address or route of the host touches.
fn free_subnet() -> Result<String> {
    let used = host_prefixes()?;
    for slot in 0..SLOTS {
        let base = u32::from_be_bytes([RANGE_FIRST_OCTETS[0], RANGE_FIRST_OCTETS[1], slot * 4, 0]);
        // The default route (0.0.0.0/0) overlaps everything; only specific ones count.
        if !used.iter().any(|&p| p.1 > 0 && overlaps(p, (base, 22))) {
            return Ok(format!("{}/22", std::net::Ipv4Addr::from(base)));
        }
    }
    bail!(
        "no free /22 in {}.{}.0.0/16 for the emulated network: the host uses all of them (other emulated \
         clusters? `weft down --stale-networks` removes those whose servers are gone)",
        RANGE_FIRST_OCTETS[0],
        RANGE_FIRST_OCTETS[1]
    )
}

/// Five random hex digits that no namespace or link on this machine uses yet.
fn fresh_cluster_id(taken: &[String]) -> Result<String> {
    let mut bytes = [0u8; 8];
    for _ in 0..64 {
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
            .context("reading /dev/urandom")?;
        let id = format!("{:05x}", u64::from_le_bytes(bytes) & 0xfffff);
        if !taken.iter().any(|n| cluster_id_of(n) == Some(id.as_str())) {
            return Ok(id);
        }
    }
    bail!("no free cluster id for the emulated network")
}

/// Bytes of burst for tbf at `rate_bits`: a millisecond's worth, and at least two
/// of the 64 KiB segments veth passes whole.
fn burst_bytes(rate_bits: u64) -> u64 {
    (rate_bits / 8 / 1000).max(128 << 10)
}

/// Shapes the egress of `device` (in namespace `netns`, or the host's): tbf at the
/// rate, under netem's delay when asked for and `netem` is true. Returns the error of
/// adding netem, if that failed (the caller then goes on without it).
fn shape(netns: Option<&str>, device: &str, emu: &NetworkEmulation, netem: bool) -> Result<Option<String>> {
    let mut base: Vec<String> = Vec::new();
    if let Some(ns) = netns {
        base.extend(["-n".into(), ns.to_owned()]);
    }
    let tc = |extra: &[String]| -> Result<String> {
        let args: Vec<&str> = base.iter().chain(extra).map(String::as_str).collect();
        run("tc", &args)
    };
    let words = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_owned).collect() };
    let rate = emu.rate_bits.to_string();
    let burst = burst_bytes(emu.rate_bits).to_string();
    let tbf = format!("tbf rate {rate}bit burst {burst} latency {TBF_QUEUE_MS}ms");
    let mut netem_error = None;
    if emu.latency_us > 0 && netem {
        match tc(&words(&format!(
            "qdisc add dev {device} root handle 1: netem delay {}us limit 100000",
            emu.latency_us
        ))) {
            Ok(_) => {
                tc(&words(&format!(
                    "qdisc add dev {device} parent 1:1 handle 10: {tbf}"
                )))?;
                return Ok(None);
            }
            // What tc said, without the command line.
            Err(e) => {
                netem_error = Some(
                    format!("{e:#}")
                        .rsplit("failed: ")
                        .next()
                        .unwrap_or_default()
                        .to_owned(),
                )
            }
        }
    }
    tc(&words(&format!("qdisc add dev {device} root {tbf}")))?;
    Ok(netem_error)
}

/// Makes what is missing of `emu`'s network for `servers`: the bridge, and each
/// server's namespace with its shaped link. Decides (and records in `emu`) whether the
/// latency is applied.
fn build(emu: &mut NetworkEmulation, servers: &[u32]) -> Result<()> {
    let present_links = links()?;
    let present_ns = namespaces()?;
    let bridge = emu.bridge();
    if !present_links.contains(&bridge) {
        run("ip", &["link", "add", &bridge, "type", "bridge"])?;
        run("ip", &["addr", "add", &bridge_address(emu), "dev", &bridge])?;
        run("ip", &["link", "set", &bridge, "up"])?;
    }
    let mut netem = emu.latency_us > 0;
    for &id in servers {
        if id > SERVERS_MAX {
            bail!("the emulated network holds at most {SERVERS_MAX} servers (server {id})");
        }
        let ns = emu.namespace(id);
        if present_ns.contains(&ns) {
            continue;
        }
        run("ip", &["netns", "add", &ns])?;
        // The host side is named as the namespace; the server's side is eth0 in it.
        run(
            "ip",
            &[
                "link", "add", &ns, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ],
        )?;
        run("ip", &["link", "set", &ns, "master", &bridge])?;
        run("ip", &["link", "set", &ns, "up"])?;
        let address = format!("{}/22", address(emu, id));
        run("ip", &["-n", &ns, "addr", "add", &address, "dev", "eth0"])?;
        run("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
        run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        // Into the server (its writes) on the host side, out of it (its reads) on eth0.
        for (netns, device) in [(None, ns.as_str()), (Some(ns.as_str()), "eth0")] {
            if let Some(error) = shape(netns, device, emu, netem)? {
                netem = false;
                emu.latency_note =
                    format!("tc could not add its netem delay discipline on this kernel: {error}");
            }
        }
    }
    emu.latency_applied = emu.latency_us > 0 && netem;
    if emu.latency_us == 0 {
        emu.latency_note.clear();
    }
    Ok(())
}

/// Makes a new emulated network for `servers` (ids) of the cluster in `home` and
/// records it there. On failure, removes whatever it made and says why. Returns the
/// lock too, to hold until the servers run.
pub fn create(
    home: &Path,
    spec: NetworkSpec,
    servers: &[u32],
    io_servers: u32,
) -> Result<(NetworkEmulation, Lock)> {
    if let Some(reason) = unavailable() {
        bail!("cannot emulate the network: {reason}");
    }
    let lock = Lock::take()?;
    sweep_locked()?;
    let mut taken = namespaces()?;
    taken.extend(links()?);
    let mut emu = NetworkEmulation {
        cluster_id: fresh_cluster_id(&taken)?,
        subnet: free_subnet()?,
        rate_bits: spec.rate_bits,
        latency_us: spec.latency_us,
        latency_applied: false,
        latency_note: String::new(),
        io_servers,
    };
    if let Err(e) = build(&mut emu, servers) {
        let _ = remove_locked(&emu.cluster_id);
        return Err(e.context("cannot emulate the network (what was made is removed)"));
    }
    if let Err(e) = emu.save(home) {
        let _ = remove_locked(&emu.cluster_id);
        bail!("recording the emulated network: {e}");
    }
    Ok((emu, lock))
}

/// Makes what is missing of the recorded network of `home` for `servers` (a restart).
/// Returns the lock, to hold until the servers run.
pub fn ensure(home: &Path, emu: &mut NetworkEmulation, servers: &[u32]) -> Result<Lock> {
    if let Some(reason) = unavailable() {
        bail!("cannot restart the cluster's emulated network: {reason}");
    }
    let lock = Lock::take()?;
    let bridge_missing = !links()?.contains(&emu.bridge());
    if bridge_missing {
        // Its subnet must still be free (the bridge carried it).
        let used = host_prefixes()?;
        let base: std::net::Ipv4Addr = emu
            .subnet
            .split('/')
            .next()
            .unwrap_or_default()
            .parse()
            .with_context(|| format!("{NETEMU_FILE_NAME}: subnet {:?}", emu.subnet))?;
        if used
            .iter()
            .any(|&p| p.1 > 0 && overlaps(p, (u32::from(base), 22)))
        {
            bail!(
                "the emulated network's subnet {} is now used on this host: remove this cluster's home and start afresh",
                emu.subnet
            );
        }
    }
    build(emu, servers).context("restarting the emulated network")?;
    emu.save(home).map_err(|e| anyhow::anyhow!(e))?;
    Ok(lock)
}

/// The namespace of server `id`, opened for `setns` in the server's process.
pub fn namespace_file(emu: &NetworkEmulation, id: u32) -> Result<File> {
    let path = format!("/run/netns/{}", emu.namespace(id));
    File::open(&path).with_context(|| format!("opening the network namespace {path}"))
}

/// Removes `emu`'s namespaces, links and bridge (the qdiscs go with the links);
/// `held` is the lock when the caller holds it already.
pub fn remove(emu: &NetworkEmulation, held: Option<Lock>) -> Result<()> {
    let _lock = match held {
        Some(lock) => lock,
        None => Lock::take()?,
    };
    remove_locked(&emu.cluster_id)
}

/// Removes every namespace and link named for cluster `id`.
fn remove_locked(id: &str) -> Result<()> {
    let mut errors = Vec::new();
    for ns in namespaces()? {
        if cluster_id_of(&ns) == Some(id) {
            if let Err(e) = run("ip", &["netns", "delete", &ns]) {
                errors.push(format!("{e:#}"));
            }
        }
    }
    // Deleting a namespace deletes its veth pair, a moment later; the bridge (and any
    // link whose namespace was already gone) remain.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left: Vec<String> = links()?
            .into_iter()
            .filter(|l| cluster_id_of(l) == Some(id))
            .collect();
        if left.is_empty() {
            break;
        }
        if std::time::Instant::now() > deadline {
            errors.push(format!("links {} remain", left.join(", ")));
            break;
        }
        for link in &left {
            // It may vanish meanwhile with its namespace: checked on the next round.
            let _ = run("ip", &["link", "delete", link]);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    if !errors.is_empty() {
        bail!("removing the emulated network weft-{id}: {}", errors.join("; "));
    }
    Ok(())
}

/// Removes the sets whose servers are all gone; returns their cluster ids.
pub fn sweep() -> Result<Vec<String>> {
    if let Some(reason) = unavailable() {
        bail!("cannot look for emulated networks: {reason}");
    }
    let _lock = Lock::take()?;
    sweep_locked()
}

fn sweep_locked() -> Result<Vec<String>> {
    // Per cluster id: does any of its namespaces still hold a process?
    let mut sets: BTreeMap<String, bool> = BTreeMap::new();
    for ns in namespaces()? {
        if let Some(id) = cluster_id_of(&ns) {
            let busy = !run("ip", &["netns", "pids", &ns])?.trim().is_empty();
            *sets.entry(id.to_owned()).or_default() |= busy;
        }
    }
    for link in links()? {
        if let Some(id) = cluster_id_of(&link) {
            sets.entry(id.to_owned()).or_default();
        }
    }
    let mut removed = Vec::new();
    for (id, busy) in sets {
        if !busy {
            remove_locked(&id)?;
            removed.push(id);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_names_are_ours() {
        assert_eq!(cluster_id_of("weft-0a1b2"), Some("0a1b2"));
        assert_eq!(cluster_id_of("weft-0a1b2-17"), Some("0a1b2"));
        for other in [
            "eth0",
            "lo",
            "weft",
            "weft-0a1b",
            "weft-0A1B2",
            "weft-0a1b2-",
            "weft-0a1b2-x",
            "weft-0a1b2x",
        ] {
            assert_eq!(cluster_id_of(other), None, "{other}");
        }
    }

    #[test]
    fn prefixes_overlap_as_subnets_do() {
        let net = |a: [u8; 4]| u32::from_be_bytes(a);
        assert!(overlaps((net([10, 213, 4, 9]), 32), (net([10, 213, 4, 0]), 22)));
        assert!(overlaps((net([10, 0, 0, 0]), 8), (net([10, 213, 4, 0]), 22)));
        assert!(!overlaps((net([10, 213, 8, 0]), 22), (net([10, 213, 4, 0]), 22)));
        assert!(!overlaps((net([192, 0, 2, 0]), 24), (net([10, 213, 0, 0]), 22)));
    }
}

//! `weft check`: an administrator's health check of a running cluster, like Lustre's
//! `lfs check servers` followed by an fsck of the namespace against the io servers.
//!
//! 1. Every server of the cluster answers (within the timeout), with this weft's
//!    protocol, and all run one build.
//! 2. Every io server has room (more than `LOW_SPACE_PERCENT` of its file system free).
//! 3. No replicated file has a stale piece (`weft rebuild` copies them back).
//! 4. Every object on the io servers belongs to something the namespace knows (a file,
//!    the precreated pool, a removal under way): those that do not, and are older than
//!    the grace, are orphans; `--repair` hands them to the manager's purger, which checks
//!    again in its own transaction that nothing holds them.
//! 5. Every regular file has its object on every server of its layout (a stale piece
//!    may lack one: it is counted under 3).
//!
//! The scans walk in pages (`ObjList`, `InodeStates`, `LayoutScan`, `ObjStat`), so memory
//! stays bounded by a page whatever the cluster holds; a progress line on stderr says
//! where they are. Exit status 0 when all is well, 1 when something is wrong.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use weft_config::{ClusterConfig, CLUSTER_FILE_NAME};
use weft_layout::{InodeId, ServerId};
use weft_proto::msg::{BATCH_INODES_MAX, OBJ_LIST_MAX, STALE_LIST_MAX};
use weft_proto::{Request, Response, Striping};
use weft_rpc::{CapabilityKey, ClientAuth, ClusterKey, Connection, RpcError, ServerCapabilities, Timeouts};

use crate::cluster::human_bytes;

/// An io server with less free space than this (percent of its file system) is
/// reported.
const LOW_SPACE_PERCENT: u64 = 5;
/// Most problems of one kind listed one by one (the rest are counted).
const LISTED_MAX: usize = 20;
/// Fan-out directories of an io server's objects (weft-iod's `listing.rs`).
const OBJECT_DIRS: u16 = 256;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Hand orphan objects older than the grace to the manager's purger, which removes
    /// them (never one a file, the precreated pool or a removal under way holds).
    #[arg(long)]
    pub repair: bool,
    /// Objects changed within this many seconds are never orphans: a create may be
    /// under way.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    pub grace_secs: u64,
    /// Seconds each server has to answer each request before it is reported down.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout_secs: u64,
    /// Only the servers (answers, versions, space, stale pieces): no scan of the
    /// namespace against the objects.
    #[arg(long)]
    pub servers_only: bool,
    /// No progress line on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// What the check found wrong, by kind.
#[derive(Default)]
struct Findings {
    problems: Vec<String>,
}

impl Findings {
    fn report(&mut self, text: String) {
        println!("PROBLEM: {text}");
        self.problems.push(text);
    }
}

/// A line on stderr at most twice a second.
struct Progress {
    quiet: bool,
    last: Instant,
    shown: bool,
}

impl Progress {
    fn show(&mut self, text: impl FnOnce() -> String) {
        if self.quiet || self.last.elapsed() < Duration::from_millis(500) {
            return;
        }
        self.last = Instant::now();
        self.shown = true;
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{:<78}", text());
        let _ = err.flush();
    }

    fn done(&mut self) {
        if self.shown {
            eprint!("\r{:<78}\r", "");
            self.shown = false;
        }
    }
}

/// The cluster key and the key the servers sign their own capabilities with.
fn keys() -> Result<(ClusterKey, CapabilityKey)> {
    let key_path = weft_config::client_key_path()?;
    let key = ClusterKey::load(&key_path).with_context(|| format!("loading {}", key_path.display()))?;
    let description = weft_config::home_dir().join(CLUSTER_FILE_NAME);
    let signing = match description.exists().then(|| ClusterConfig::load(&description)) {
        Some(Ok(config)) => match config.capability_key_path(&description) {
            Some(path) => CapabilityKey::new(
                &ClusterKey::load(&path).with_context(|| format!("loading {}", path.display()))?,
            ),
            None => CapabilityKey::new(&key),
        },
        _ => CapabilityKey::new(&key),
    };
    Ok((key, signing))
}

pub fn run(args: &CheckArgs) -> Result<()> {
    let timeouts = Timeouts {
        connect: Duration::from_secs(args.timeout_secs.clamp(1, 600)),
        request: Duration::from_secs(args.timeout_secs.clamp(1, 600)),
    };
    let meta_addr = weft_config::meta_address()?;
    let (key, signing) = keys()?;
    let auth = ClientAuth::cluster(key);
    let meta = Connection::connect(&meta_addr, "weft check", &auth, timeouts)
        .with_context(|| format!("the metadata manager at {meta_addr} does not answer"))?;
    let cluster = match meta.call(&Request::GetCluster, &[]) {
        Ok((Response::Cluster(info), _)) => info,
        Ok((other, _)) => bail!("the metadata manager answered GetCluster with {other:?}"),
        Err(e) => bail!("the metadata manager at {meta_addr} does not answer: {e}"),
    };
    let mut findings = Findings::default();
    let mut progress = Progress {
        quiet: args.quiet,
        last: Instant::now(),
        shown: false,
    };
    println!(
        "cluster \"{}\": metadata manager {meta_addr}, {} io servers, {} cache managers",
        cluster.name,
        cluster.io_servers.len(),
        cluster.cache.managers.len()
    );

    // 1 and 2: answers, versions, space.
    let ours = (
        weft_proto::PROTOCOL_VERSION,
        weft_build_info::version!().to_string(),
    );
    let mut up: BTreeMap<ServerId, Arc<Connection>> = BTreeMap::new();
    let mut builds: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut servers = vec![("meta".to_string(), meta_addr.clone(), None)];
    servers.extend(
        cluster
            .io_servers
            .iter()
            .map(|s| (format!("io {}", s.id), s.addr.clone(), Some(s.id))),
    );
    servers.extend(
        cluster
            .cache
            .managers
            .iter()
            .map(|s| (format!("cache {}", s.id), s.addr.clone(), None)),
    );
    for (what, addr, io) in &servers {
        let connection = match Connection::connect(addr, "weft check", &auth, timeouts) {
            Ok(c) => c,
            Err(RpcError::ProtocolVersion { server_version, .. }) => {
                findings.report(format!(
                    "{what} at {addr} speaks protocol {server_version}, this weft {}: upgrade every server and client together (docs: upgrading)",
                    ours.0
                ));
                continue;
            }
            Err(e) => {
                findings.report(format!("{what} at {addr} does not answer: {e}"));
                continue;
            }
        };
        let versions = match connection.server_info() {
            Ok(Some((protocol, build))) => (protocol, build),
            Ok(None) => (ours.0, "?".into()),
            Err(e) => {
                findings.report(format!("{what} at {addr} does not answer: {e}"));
                continue;
            }
        };
        let mut line = format!("{what:<9} {addr:<22} up, protocol {}, {}", versions.0, versions.1);
        if versions.0 != ours.0 {
            findings.report(format!(
                "{what} at {addr} speaks protocol {}, this weft {}",
                versions.0, ours.0
            ));
        }
        builds.entry(versions.1.clone()).or_default().push(what.clone());
        if let Some(id) = io {
            match connection.call(&Request::IoStatfs, &[]) {
                Ok((Response::IoStatfs(st), _)) => {
                    line.push_str(&format!(
                        ", {} free of {}",
                        human_bytes(st.bytes_free),
                        human_bytes(st.bytes_total)
                    ));
                    if st.bytes_total > 0
                        && st.bytes_free.saturating_mul(100) < st.bytes_total * LOW_SPACE_PERCENT
                    {
                        findings.report(format!(
                            "{what} at {addr} is nearly full: {} free of {} (under {LOW_SPACE_PERCENT}%)",
                            human_bytes(st.bytes_free),
                            human_bytes(st.bytes_total)
                        ));
                    }
                    connection.set_capability_source(Arc::new(ServerCapabilities::new(signing.clone())));
                    up.insert(*id, connection);
                }
                Ok((other, _)) => {
                    findings.report(format!("{what} at {addr} answered IoStatfs with {other:?}"))
                }
                Err(e) => findings.report(format!("{what} at {addr} does not answer: {e}")),
            }
        }
        println!("{line}");
    }

    // Servers of one protocol but several builds: an upgrade left half done.
    if builds.len() > 1 {
        let list: Vec<String> = builds
            .iter()
            .map(|(b, s)| format!("{b} ({})", s.join(", ")))
            .collect();
        findings.report(format!("the servers run different builds: {}", list.join("; ")));
    } else if builds.keys().any(|b| *b != ours.1) {
        println!(
            "note: the servers run another build than this weft ({}) of the same protocol",
            ours.1
        );
    }

    // 3: stale pieces.
    let stale = stale_pieces(&meta)?;
    if stale > 0 {
        findings.report(format!(
            "{stale} replicated files have stale pieces: `weft rebuild` copies them back"
        ));
    } else {
        println!("stale pieces: none");
    }

    if !args.servers_only {
        // 4: objects no inode refers to.
        for (id, connection) in &up {
            orphans(&meta, *id, connection, args, &mut findings, &mut progress)?;
        }
        // 5: files whose objects are missing.
        missing_objects(&meta, &up, &mut findings, &mut progress)?;
        for s in &cluster.io_servers {
            if !up.contains_key(&s.id) {
                findings.report(format!(
                    "io server {} was not scanned (it did not answer): run the check again once it is up",
                    s.id
                ));
            }
        }
    }
    progress.done();
    if findings.problems.is_empty() {
        println!("check: all well");
        return Ok(());
    }
    println!("check: {} problems", findings.problems.len());
    std::process::exit(1);
}

/// Replicated files with a stale piece.
fn stale_pieces(meta: &Connection) -> Result<u64> {
    let mut after = InodeId(0);
    let mut count = 0u64;
    loop {
        let request = Request::StaleList {
            // SAFETY: no preconditions.
            cred: weft_proto::Cred {
                uid: unsafe { libc::geteuid() },
                gid: unsafe { libc::getegid() },
                groups: Vec::new(),
            },
            server: None,
            all: false,
            after,
            max: STALE_LIST_MAX as u32,
        };
        let (files, more) = match meta.call(&request, &[]) {
            Ok((Response::StaleFiles { files, more }, _)) => (files, more),
            Ok((other, _)) => bail!("the metadata manager answered StaleList with {other:?}"),
            Err(e) => bail!("listing stale pieces: {e}"),
        };
        count += files.len() as u64;
        match files.last() {
            Some((last, _)) if more => after = *last,
            _ => return Ok(count),
        }
    }
}

/// Step 4 on io server `id`: its objects in pages, each page's numbers asked of the
/// namespace; unknown ones older than the grace are orphans (handed to the purger with
/// `--repair`).
fn orphans(
    meta: &Connection,
    id: ServerId,
    io: &Connection,
    args: &CheckArgs,
    findings: &mut Findings,
    progress: &mut Progress,
) -> Result<()> {
    let (mut objects, mut found, mut young, mut repaired) = (0u64, Vec::new(), 0u64, 0u64);
    let mut found_count = 0u64;
    for dir in 0..OBJECT_DIRS {
        let mut after = InodeId(0);
        loop {
            let (page, more) = match io.call(
                &Request::ObjList {
                    dir,
                    after,
                    max: OBJ_LIST_MAX as u32,
                },
                &[],
            ) {
                Ok((Response::ObjectPage { objects, more }, _)) => (objects, more),
                Ok((other, _)) => bail!("io server {id} answered ObjList with {other:?}"),
                Err(e) => {
                    findings.report(format!("io server {id}: listing its objects failed: {e}"));
                    return Ok(());
                }
            };
            objects += page.len() as u64;
            progress.show(|| {
                format!(
                    "check: io server {id}: directory {}/{OBJECT_DIRS}, {objects} objects",
                    dir + 1
                )
            });
            if page.is_empty() {
                break;
            }
            let inodes: Vec<InodeId> = page.iter().map(|o| o.0).collect();
            let states = match meta.call(
                &Request::InodeStates {
                    inodes: inodes.clone(),
                },
                &[],
            ) {
                Ok((Response::States(states), _)) if states.len() == inodes.len() => states,
                Ok((other, _)) => bail!("the metadata manager answered InodeStates with {other:?}"),
                Err(e) => bail!("asking the metadata manager about objects: {e}"),
            };
            let mut old_unknown = Vec::new();
            for (object, state) in page.iter().zip(&states) {
                if *state != weft_meta::store::scan::STATE_UNKNOWN {
                    continue;
                }
                if object.1 .1 < args.grace_secs {
                    young += 1;
                    continue;
                }
                old_unknown.push(object.0);
                found_count += 1;
                if found.len() < LISTED_MAX {
                    found.push(format!("inode {} ({})", object.0, human_bytes(object.1 .0)));
                }
            }
            if args.repair && !old_unknown.is_empty() {
                match meta.call(
                    &Request::AdoptOrphans {
                        server: id,
                        inodes: old_unknown,
                    },
                    &[],
                ) {
                    Ok((Response::States(states), _)) => {
                        repaired += states
                            .iter()
                            .filter(|s| **s == weft_meta::store::scan::STATE_UNKNOWN)
                            .count() as u64;
                    }
                    Ok((other, _)) => bail!("the metadata manager answered AdoptOrphans with {other:?}"),
                    Err(e) => bail!("handing orphans to the purger: {e}"),
                }
            }
            match page.last() {
                Some(last) if more => after = last.0,
                _ => break,
            }
        }
    }
    progress.done();
    println!(
        "io server {id}: {objects} objects, {found_count} orphans{}",
        if young > 0 {
            format!(
                ", {young} unknown to the namespace but younger than the grace ({} s): left alone",
                args.grace_secs
            )
        } else {
            String::new()
        }
    );
    if found_count > 0 {
        let more = found_count.saturating_sub(found.len() as u64);
        let listed = found.join(", ")
            + &if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
        if args.repair {
            println!("io server {id}: {repaired} orphans handed to the manager's purger: {listed}");
            if repaired < found_count {
                findings.report(format!(
                    "io server {id}: {} orphans were claimed meanwhile and left alone",
                    found_count - repaired
                ));
            }
        } else {
            findings.report(format!(
                "io server {id}: {found_count} objects belong to no file (orphans): {listed}; `weft check --repair` removes them"
            ));
        }
    }
    Ok(())
}

/// Step 5: every regular file's objects, asked of each server of its layout a page of
/// files at a time.
fn missing_objects(
    meta: &Connection,
    up: &BTreeMap<ServerId, Arc<Connection>>,
    findings: &mut Findings,
    progress: &mut Progress,
) -> Result<()> {
    let mut after = InodeId(0);
    let (mut files, mut missing, mut listed) = (0u64, 0u64, Vec::new());
    loop {
        let (page, more) = match meta.call(&Request::LayoutScan { after, max: u32::MAX }, &[]) {
            Ok((Response::Layouts { files, more }, _)) => (files, more),
            Ok((other, _)) => bail!("the metadata manager answered LayoutScan with {other:?}"),
            Err(e) => bail!("listing the files' layouts: {e}"),
        };
        files += page.len() as u64;
        progress.show(|| format!("check: {files} files' objects looked for"));
        // Per server: the (inode, striping) of its pieces on this page.
        let mut asks: BTreeMap<ServerId, Vec<(InodeId, Striping)>> = BTreeMap::new();
        for (inode, layout) in &page {
            for server in layout.all_servers() {
                if layout.is_stale(server) || !up.contains_key(&server) {
                    continue;
                }
                let (slot, _) = layout.piece_of(server).expect("a server of the layout");
                asks.entry(server).or_default().push((
                    *inode,
                    Striping {
                        stripe_size_bytes: layout.stripe_size_bytes,
                        stripe_count: layout.servers.len() as u32,
                        server_index: slot as u32,
                    },
                ));
            }
        }
        for (server, items) in asks {
            for batch in items.chunks(BATCH_INODES_MAX) {
                let stats = match up[&server].call(
                    &Request::ObjStat {
                        items: batch.to_vec(),
                    },
                    &[],
                ) {
                    Ok((Response::ObjStats(stats), _)) if stats.len() == batch.len() => stats,
                    Ok((other, _)) => bail!("io server {server} answered ObjStat with {other:?}"),
                    Err(e) => {
                        findings.report(format!("io server {server}: asking for objects failed: {e}"));
                        continue;
                    }
                };
                for ((inode, _), (end, _)) in batch.iter().zip(stats) {
                    if end == u64::MAX {
                        missing += 1;
                        if listed.len() < LISTED_MAX {
                            listed.push(format!("inode {inode} on io server {server}"));
                        }
                    }
                }
            }
        }
        match page.last() {
            Some((last, _)) if more => after = *last,
            _ => break,
        }
    }
    progress.done();
    println!("files: {files} regular files, {missing} objects missing");
    if missing > 0 {
        let more = missing.saturating_sub(listed.len() as u64);
        findings.report(format!(
            "{missing} objects of files are missing (their bytes read as zeros): {}{}",
            listed.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    Ok(())
}

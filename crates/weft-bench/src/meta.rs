//! `weft bench meta`: metadata operations in the manner of mdtest. P client processes
//! create, stat, list (names, then `ls -l`), rename and unlink N files in all, first in
//! one shared directory, then in one directory per process, through the native client,
//! through a FUSE mount and on a local directory, in the same run. Figures are
//! operations per second: all processes' operations over the parent's wall time from
//! the phase's start (sent to every worker back to back) to the last worker's answer.

use crate::cluster;
use crate::mount::MountGuard;
use crate::procs::{self, Workers};
use crate::report::{command_line, host_cpus, unix_now_s, write_json, Goal, Table};
use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use weft_client::{Client, CreateOptions, FileKind, InodeId, Name};

pub const LONG_ABOUT: &str = "Metadata operations in the manner of mdtest: P client processes \
(separate processes, started by this command) create N empty files in all (O_CREAT|O_EXCL), stat \
each of them, list the directory (names only, then names and attributes as `ls -l` does), rename \
each file within its directory and unlink it, first in one directory shared by all processes, then \
in one directory per process. Phases start together (a barrier through pipes); a figure is all \
processes' operations over the wall time from the start to the last process's answer. A listing \
counts one operation per entry listed (each process lists the whole directory it works in).\n\n\
Three methods in the same run: the native client (operations by directory inode and name), a FUSE \
mount of the cluster (std::fs calls, as any program makes them) and a local directory (the \
baseline). Every process checks what it sees (each stat finds a regular file, each listing the \
expected number of entries); a mismatch fails the benchmark. Prints a table and writes every \
figure to --json.\n\nWithout --mountpoint the benchmark mounts the cluster itself on a temporary \
directory and unmounts it at the end. Needs a running cluster (`weft up`) and, for the mount, FUSE \
(/dev/fuse). Example:\n  weft bench meta --files 10000 --procs 4";

/// More client processes than this is a typo, not a benchmark.
pub const PROCS_MAX: u32 = 256;
/// Most files in all (each listing holds a whole directory's names in memory).
pub const FILES_MAX: u64 = 10_000_000;
/// Entries asked per native directory page.
const NATIVE_PAGE_ENTRIES: u32 = 1024;

#[derive(Args, Debug, Clone)]
pub struct MetaArgs {
    /// Files in all, shared out evenly among the processes.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub files: u64,
    /// Client processes.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// Methods to run, comma separated: native, mount, local (the baseline, always run).
    #[arg(
        long,
        default_value = "native,mount,local",
        value_delimiter = ',',
        value_name = "LIST"
    )]
    pub methods: Vec<String>,
    /// A Weft mount of the cluster to use. Default: mount it on a temporary directory.
    #[arg(long, value_name = "DIR")]
    pub mountpoint: Option<PathBuf>,
    /// The Weft directory to work in (made if missing; what the benchmark makes in it is
    /// removed at the end).
    #[arg(long, default_value = "/bench-meta", value_name = "PATH")]
    pub path: String,
    /// Directory for the local baseline. Default: the system temporary directory.
    #[arg(long, value_name = "DIR")]
    pub local_dir: Option<PathBuf>,
    /// Where to write the JSON results (the directory is created).
    #[arg(long, default_value = "bench-results/meta.json", value_name = "FILE")]
    pub json: PathBuf,
}

/// One client process of `weft bench meta`.
#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    #[arg(long)]
    method: String,
    /// The directory holding `shared` and `p<rank>`: a Weft path for the native
    /// method, a local path for the others.
    #[arg(long)]
    root: String,
    #[arg(long)]
    rank: u32,
    #[arg(long)]
    procs: u32,
    /// Files of this process.
    #[arg(long)]
    files: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Method {
    Native,
    Mount,
    Local,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Native => "native",
            Method::Mount => "mount",
            Method::Local => "local",
        }
    }

    fn parse(s: &str) -> Result<Method> {
        Ok(match s.trim() {
            "native" => Method::Native,
            "mount" => Method::Mount,
            "local" => Method::Local,
            other => bail!("unknown method {other:?} (native, mount, local)"),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Layout {
    /// One directory for all processes.
    Shared,
    /// One directory per process.
    Private,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Shared => "shared",
            Layout::Private => "per-process",
        }
    }
}

const LAYOUTS: [Layout; 2] = [Layout::Shared, Layout::Private];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Phase {
    Create,
    Stat,
    Readdir,
    #[serde(rename = "ls-l")]
    LsL,
    Rename,
    Unlink,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Create => "create",
            Phase::Stat => "stat",
            Phase::Readdir => "readdir",
            Phase::LsL => "ls-l",
            Phase::Rename => "rename",
            Phase::Unlink => "unlink",
        }
    }

    fn parse(s: &str) -> Result<Phase> {
        Ok(match s {
            "create" => Phase::Create,
            "stat" => Phase::Stat,
            "readdir" => Phase::Readdir,
            "ls-l" => Phase::LsL,
            "rename" => Phase::Rename,
            "unlink" => Phase::Unlink,
            other => bail!("unknown phase {other:?}"),
        })
    }
}

const PHASES: [Phase; 6] = [
    Phase::Create,
    Phase::Stat,
    Phase::Readdir,
    Phase::LsL,
    Phase::Rename,
    Phase::Unlink,
];

#[derive(Debug, Serialize)]
struct Figure {
    method: Method,
    layout: Layout,
    phase: Phase,
    operations: u64,
    seconds: f64,
    ops_per_s: f64,
    /// `ops_per_s` over the local directory's in the same layout and phase.
    vs_local: f64,
}

#[derive(Debug, Serialize)]
struct Results {
    benchmark: &'static str,
    command_line: String,
    started_unix_s: u64,
    host_cpus: usize,
    io_servers: usize,
    files: u64,
    procs: u32,
    weft_path: String,
    mountpoint: Option<String>,
    local_dir: String,
    figures: Vec<Figure>,
    goals: Vec<Goal>,
    notes: Vec<&'static str>,
}

const NOTE_LOCAL: &str = "the local directory is on the machine's own file system (no network, no \
FUSE); the mount and the cluster share the same cores as the clients";

pub fn run(args: &MetaArgs) -> Result<()> {
    ensure!(
        (1..=PROCS_MAX).contains(&args.procs),
        "--procs must be 1 to {PROCS_MAX}"
    );
    ensure!(
        args.files >= u64::from(args.procs) && args.files <= FILES_MAX,
        "--files must be at least --procs and at most {FILES_MAX}"
    );
    ensure!(
        args.path.starts_with('/') && args.path != "/",
        "--path must be an absolute Weft directory other than /"
    );
    let mut methods = Vec::new();
    for m in &args.methods {
        let m = Method::parse(m)?;
        if !methods.contains(&m) {
            methods.push(m);
        }
    }
    if !methods.contains(&Method::Local) {
        methods.push(Method::Local);
    }
    let per_proc = args.files / u64::from(args.procs);
    let started_unix_s = unix_now_s();

    let client = cluster::connect()?;
    let weft_root = args.path.trim_end_matches('/').to_owned();
    client
        .mkdir_all(&weft_root, 0o755)
        .with_context(|| format!("making {weft_root}"))?;
    let mount = if methods.contains(&Method::Mount) {
        Some(match &args.mountpoint {
            Some(dir) => MountGuard::existing(dir)?,
            None => MountGuard::start()?,
        })
    } else {
        None
    };
    let local_parent = args.local_dir.clone().unwrap_or_else(std::env::temp_dir);
    let local = tempfile::Builder::new()
        .prefix("weft-bench-meta-")
        .tempdir_in(&local_parent)
        .with_context(|| format!("making a directory in {}", local_parent.display()))?;

    let mut figures = Vec::new();
    for &method in &methods {
        // Each method works in a directory of its own, made and removed here.
        let root = match method {
            Method::Native => format!("{weft_root}/native"),
            Method::Mount => mount
                .as_ref()
                .expect("mounted for the mount method")
                .path()
                .join(weft_root.trim_start_matches('/'))
                .join("mount")
                .display()
                .to_string(),
            Method::Local => local.path().join("local").display().to_string(),
        };
        make_dirs(&client, method, &root, args.procs)?;
        let mut workers = Workers::spawn("meta-worker", args.procs, |rank| {
            [
                "--method",
                method.name(),
                "--root",
                &root,
                "--rank",
                &rank.to_string(),
                "--procs",
                &args.procs.to_string(),
                "--files",
                &per_proc.to_string(),
            ]
            .iter()
            .map(OsString::from)
            .collect()
        })?;
        for layout in LAYOUTS {
            for phase in PHASES {
                let (replies, elapsed) = workers.step(&format!("{} {}", phase.name(), layout.name()))?;
                let mut operations = 0u64;
                for r in &replies {
                    operations += r
                        .parse::<u64>()
                        .with_context(|| format!("worker answered {r:?}"))?;
                }
                let seconds = elapsed.as_secs_f64();
                let ops_per_s = operations as f64 / seconds.max(1e-9);
                eprintln!(
                    "meta: {:<6} {:<11} {:<7} {:>9} ops {:>8.3} s {:>11.0} ops/s",
                    method.name(),
                    layout.name(),
                    phase.name(),
                    operations,
                    seconds,
                    ops_per_s
                );
                figures.push(Figure {
                    method,
                    layout,
                    phase,
                    operations,
                    seconds,
                    ops_per_s,
                    vs_local: 0.0,
                });
            }
        }
        workers.finish()?;
        remove_dirs(&client, method, &root, args.procs)?;
    }
    for k in 0..figures.len() {
        let local_rate = figures
            .iter()
            .find(|f| {
                f.method == Method::Local && f.layout == figures[k].layout && f.phase == figures[k].phase
            })
            .map(|f| f.ops_per_s)
            .expect("the local method always runs");
        figures[k].vs_local = figures[k].ops_per_s / local_rate;
    }
    // The issue's targets, as fractions of the local directory where one is absolute.
    let mut goals = Vec::new();
    for f in &figures {
        if f.phase == Phase::Create && f.layout == Layout::Shared && f.method == Method::Mount {
            goals.push(Goal::new("mount create (shared) vs local", 0.3, f.vs_local));
        }
    }
    let mountpoint = mount.as_ref().map(|m| m.path().display().to_string());
    if let Some(m) = mount {
        m.finish()?;
    }
    let results = Results {
        benchmark: "meta",
        command_line: command_line(),
        started_unix_s,
        host_cpus: host_cpus(),
        io_servers: client.cluster_info().io_servers.len(),
        files: per_proc * u64::from(args.procs),
        procs: args.procs,
        weft_path: weft_root,
        mountpoint,
        local_dir: local.path().display().to_string(),
        figures,
        goals,
        notes: vec![NOTE_LOCAL],
    };
    print!("{}", render(&results, &methods));
    write_json(&args.json, &results)?;
    eprintln!("meta: wrote {}", args.json.display());
    Ok(())
}

fn dir_of(root: &str, layout: Layout, rank: u32) -> String {
    match layout {
        Layout::Shared => format!("{root}/shared"),
        Layout::Private => format!("{root}/p{rank}"),
    }
}

fn make_dirs(client: &Client, method: Method, root: &str, procs: u32) -> Result<()> {
    let mut dirs = vec![dir_of(root, Layout::Shared, 0)];
    dirs.extend((0..procs).map(|r| dir_of(root, Layout::Private, r)));
    for dir in dirs {
        match method {
            Method::Native => {
                client
                    .mkdir_all(&dir, 0o755)
                    .with_context(|| format!("making {dir}"))?;
            }
            _ => std::fs::create_dir_all(&dir).with_context(|| format!("making {dir}"))?,
        }
    }
    Ok(())
}

fn remove_dirs(client: &Client, method: Method, root: &str, procs: u32) -> Result<()> {
    let mut dirs = vec![dir_of(root, Layout::Shared, 0)];
    dirs.extend((0..procs).map(|r| dir_of(root, Layout::Private, r)));
    dirs.push(root.to_owned());
    for dir in dirs {
        match method {
            Method::Native => client.rmdir(&dir).with_context(|| format!("removing {dir}"))?,
            _ => std::fs::remove_dir(&dir).with_context(|| format!("removing {dir}"))?,
        }
    }
    Ok(())
}

fn render(r: &Results, methods: &[Method]) -> String {
    let mut out = format!(
        "\nMetadata operations, {} files by {} processes; ops/s (all processes), ratio to the local directory\n\
         weft: {} on {} io servers; mount: {}; local: {}\n\n",
        r.files,
        r.procs,
        r.weft_path,
        r.io_servers,
        r.mountpoint.as_deref().unwrap_or("not run"),
        r.local_dir
    );
    let mut header: Vec<String> = vec!["directory".into(), "phase".into()];
    for m in methods {
        header.push(format!("{} ops/s", m.name()));
    }
    for m in methods.iter().filter(|m| **m != Method::Local) {
        header.push(format!("{} vs local", m.name()));
    }
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&header_refs);
    for layout in LAYOUTS {
        for phase in PHASES {
            let find = |m: Method| {
                r.figures
                    .iter()
                    .find(|f| f.method == m && f.layout == layout && f.phase == phase)
                    .expect("every method ran every phase")
            };
            let mut row = vec![layout.name().to_owned(), phase.name().to_owned()];
            for &m in methods {
                row.push(format!("{:.0}", find(m).ops_per_s));
            }
            for &m in methods.iter().filter(|m| **m != Method::Local) {
                row.push(format!("{:.3}", find(m).vs_local));
            }
            table.row(row);
        }
    }
    out.push_str(&table.render());
    out.push('\n');
    out.push_str(&crate::report::target_lines(&r.goals));
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// What a worker works with.
enum Target {
    Native {
        client: Client,
        dirs: Vec<(Layout, InodeId)>,
    },
    Posix,
}

struct Worker {
    args: WorkerArgs,
    target: Target,
}

impl Worker {
    fn names(&self, layout: Layout, prefix: &str) -> Vec<String> {
        let rank = self.args.rank;
        (0..self.args.files)
            .map(|i| match layout {
                Layout::Shared => format!("{prefix}.{rank}.{i}"),
                Layout::Private => format!("{prefix}.{i}"),
            })
            .collect()
    }

    /// Entries a listing of the directory must find after the create phase.
    fn expected_entries(&self, layout: Layout) -> u64 {
        match layout {
            Layout::Shared => self.args.files * u64::from(self.args.procs),
            Layout::Private => self.args.files,
        }
    }

    fn phase(&mut self, phase: Phase, layout: Layout) -> Result<u64> {
        let dir = dir_of(&self.args.root, layout, self.args.rank);
        let expected = self.expected_entries(layout);
        match &self.target {
            Target::Native { client, dirs } => {
                let dir_inode = dirs.iter().find(|(l, _)| *l == layout).expect("both layouts").1;
                native_phase(self, client, dir_inode, &dir, phase, layout, expected)
            }
            Target::Posix => posix_phase(self, Path::new(&dir), phase, layout, expected),
        }
    }
}

fn native_phase(
    w: &Worker,
    client: &Client,
    dir: InodeId,
    dir_path: &str,
    phase: Phase,
    layout: Layout,
    expected: u64,
) -> Result<u64> {
    let create = CreateOptions {
        mode: 0o644,
        exclusive: true,
        truncate: false,
        ..Default::default()
    };
    match phase {
        Phase::Create => {
            for name in w.names(layout, "f") {
                drop(
                    client
                        .create_in(dir, &name, &create)
                        .with_context(|| format!("creating {dir_path}/{name}"))?,
                );
            }
            Ok(w.args.files)
        }
        Phase::Stat => {
            for name in w.names(layout, "f") {
                let mut attr = client
                    .lookup(dir, &name)
                    .with_context(|| format!("stat {dir_path}/{name}"))?;
                client
                    .fill_sizes(std::slice::from_mut(&mut attr))
                    .with_context(|| format!("stat {dir_path}/{name}"))?;
                ensure!(
                    attr.kind == FileKind::File && attr.size == 0,
                    "{dir_path}/{name}: not an empty file"
                );
            }
            Ok(w.args.files)
        }
        Phase::Readdir | Phase::LsL => {
            let mut after = Name::default();
            let mut listed = 0u64;
            loop {
                let (count, more) = if phase == Phase::LsL {
                    // Names and attributes, sizes included: readdir-plus.
                    let (page, more) = client.readdir_plus_page(dir, &after, NATIVE_PAGE_ENTRIES)?;
                    ensure!(
                        page.iter().all(|(_, a)| a.kind == FileKind::File && a.size == 0),
                        "{dir_path}: an entry is not an empty file"
                    );
                    if let Some((last, _)) = page.last() {
                        after = last.clone();
                    }
                    (page.len(), more)
                } else {
                    let (page, more) = client.readdir_page(dir, &after, NATIVE_PAGE_ENTRIES)?;
                    if let Some(last) = page.last() {
                        after = last.name.clone();
                    }
                    (page.len(), more)
                };
                listed += count as u64;
                if !more {
                    break;
                }
            }
            ensure!(
                listed == expected,
                "{dir_path}: listed {listed} entries, expected {expected}"
            );
            Ok(listed)
        }
        Phase::Rename => {
            for (from, to) in w.names(layout, "f").iter().zip(w.names(layout, "r")) {
                client
                    .rename_in(dir, from, dir, &to)
                    .with_context(|| format!("renaming {dir_path}/{from}"))?;
            }
            Ok(w.args.files)
        }
        Phase::Unlink => {
            for name in w.names(layout, "r") {
                client
                    .unlink_in(dir, &name)
                    .with_context(|| format!("removing {dir_path}/{name}"))?;
            }
            Ok(w.args.files)
        }
    }
}

fn posix_phase(w: &Worker, dir: &Path, phase: Phase, layout: Layout, expected: u64) -> Result<u64> {
    match phase {
        Phase::Create => {
            for name in w.names(layout, "f") {
                let path = dir.join(&name);
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .with_context(|| format!("creating {}", path.display()))?;
            }
            Ok(w.args.files)
        }
        Phase::Stat => {
            for name in w.names(layout, "f") {
                let path = dir.join(&name);
                let m =
                    std::fs::symlink_metadata(&path).with_context(|| format!("stat {}", path.display()))?;
                ensure!(
                    m.is_file() && m.len() == 0,
                    "{}: not an empty file",
                    path.display()
                );
            }
            Ok(w.args.files)
        }
        Phase::Readdir | Phase::LsL => {
            let mut listed = 0u64;
            for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
                let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
                if phase == Phase::LsL {
                    let m = std::fs::symlink_metadata(entry.path())
                        .with_context(|| format!("stat {}", entry.path().display()))?;
                    ensure!(m.is_file(), "{}: not a file", entry.path().display());
                }
                listed += 1;
            }
            ensure!(
                listed == expected,
                "{}: listed {listed} entries, expected {expected}",
                dir.display()
            );
            Ok(listed)
        }
        Phase::Rename => {
            for (from, to) in w.names(layout, "f").iter().zip(w.names(layout, "r")) {
                std::fs::rename(dir.join(from), dir.join(&to))
                    .with_context(|| format!("renaming {}", dir.join(from).display()))?;
            }
            Ok(w.args.files)
        }
        Phase::Unlink => {
            for name in w.names(layout, "r") {
                let path = dir.join(&name);
                std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            }
            Ok(w.args.files)
        }
    }
}

pub fn worker(args: &WorkerArgs) -> Result<()> {
    procs::serve(
        || {
            let method = Method::parse(&args.method)?;
            let target = match method {
                Method::Native => {
                    let client = cluster::connect()?;
                    let mut dirs = Vec::new();
                    for layout in LAYOUTS {
                        let path = dir_of(&args.root, layout, args.rank);
                        let attr = client
                            .resolve(&path)
                            .with_context(|| format!("resolving {path}"))?;
                        dirs.push((layout, attr.inode));
                    }
                    Target::Native { client, dirs }
                }
                Method::Mount | Method::Local => Target::Posix,
            };
            Ok(Worker {
                args: args.clone(),
                target,
            })
        },
        |worker, command| {
            let (phase, layout) = command
                .split_once(' ')
                .with_context(|| format!("bad command {command:?}"))?;
            let phase = Phase::parse(phase)?;
            let layout = match layout {
                "shared" => Layout::Shared,
                "per-process" => Layout::Private,
                other => bail!("unknown directory layout {other:?}"),
            };
            let n = worker.phase(phase, layout)?;
            Ok(n.to_string())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_across_processes_in_the_shared_directory() {
        let worker = |rank| Worker {
            args: WorkerArgs {
                method: "local".into(),
                root: "/x".into(),
                rank,
                procs: 2,
                files: 3,
            },
            target: Target::Posix,
        };
        let mut all: Vec<String> = worker(0).names(Layout::Shared, "f");
        all.extend(worker(1).names(Layout::Shared, "f"));
        let distinct: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), 6);
        assert_eq!(worker(1).names(Layout::Private, "r"), ["r.0", "r.1", "r.2"]);
        assert_eq!(worker(1).expected_entries(Layout::Shared), 6);
        assert_eq!(dir_of("/a", Layout::Private, 3), "/a/p3");
    }

    #[test]
    fn every_phase_name_parses_back() {
        for p in PHASES {
            assert_eq!(Phase::parse(p.name()).unwrap(), p);
        }
        assert!(Phase::parse("chmod").is_err());
        assert!(Method::parse("nfs").is_err());
    }
}

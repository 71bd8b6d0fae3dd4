//! A client process of `weft bench meta` (`weft bench meta-worker`, started by it): the
//! mdtest phases on its files, through the native client or on a path (the mount or
//! the local directory).

use super::*;

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
    /// Bytes per file.
    #[arg(long, default_value_t = 0)]
    bytes: u64,
    /// The native method makes the files with `Client::create_many`.
    #[arg(long)]
    batch_creates: bool,
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

    /// What each file holds: `bytes` bytes of a pattern.
    fn content(&self) -> Vec<u8> {
        (0..self.args.bytes).map(|k| (k % 251) as u8).collect()
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
        Phase::Create if w.args.batch_creates => {
            let content = w.content();
            let names = w.names(layout, "f");
            let made = client
                .create_many(dir, &names, create.mode, create.layout)
                .with_context(|| format!("creating {} files in {dir_path}", names.len()))?;
            for (name, result) in names.iter().zip(made) {
                let attr = result.with_context(|| format!("creating {dir_path}/{name}"))?;
                if !content.is_empty() {
                    let file = client
                        .open_attr(attr, true)
                        .with_context(|| format!("opening {dir_path}/{name}"))?;
                    file.write_at(0, &content)
                        .with_context(|| format!("writing {dir_path}/{name}"))?;
                    file.close()
                        .with_context(|| format!("closing {dir_path}/{name}"))?;
                }
            }
            Ok(w.args.files)
        }
        Phase::Create => {
            let content = w.content();
            for name in w.names(layout, "f") {
                let file = client
                    .create_in(dir, &name, &create)
                    .with_context(|| format!("creating {dir_path}/{name}"))?;
                if !content.is_empty() {
                    file.write_at(0, &content)
                        .with_context(|| format!("writing {dir_path}/{name}"))?;
                }
                file.close()
                    .with_context(|| format!("closing {dir_path}/{name}"))?;
            }
            Ok(w.args.files)
        }
        Phase::Stat => {
            for name in w.names(layout, "f") {
                let attr = client
                    .lookup_sized(dir, &name, None)
                    .with_context(|| format!("stat {dir_path}/{name}"))?;
                ensure!(
                    attr.kind == FileKind::File && attr.size == w.args.bytes,
                    "{dir_path}/{name}: not a file of {} bytes",
                    w.args.bytes
                );
            }
            Ok(w.args.files)
        }
        Phase::Read => {
            let content = w.content();
            for name in w.names(layout, "f") {
                let attr = client
                    .lookup_sized(dir, &name, None)
                    .with_context(|| format!("opening {dir_path}/{name}"))?;
                let got = native_read(client, attr).with_context(|| format!("reading {dir_path}/{name}"))?;
                ensure!(got == content, "{dir_path}/{name}: wrong bytes");
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
                        page.iter()
                            .all(|(_, a)| a.kind == FileKind::File && a.size == w.args.bytes),
                        "{dir_path}: an entry is not a file of {} bytes",
                        w.args.bytes
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
            let content = w.content();
            for name in w.names(layout, "f") {
                let path = dir.join(&name);
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .with_context(|| format!("creating {}", path.display()))?;
                if !content.is_empty() {
                    std::io::Write::write_all(&mut file, &content)
                        .with_context(|| format!("writing {}", path.display()))?;
                }
            }
            Ok(w.args.files)
        }
        Phase::Stat => {
            for name in w.names(layout, "f") {
                let path = dir.join(&name);
                let m =
                    std::fs::symlink_metadata(&path).with_context(|| format!("stat {}", path.display()))?;
                ensure!(
                    m.is_file() && m.len() == w.args.bytes,
                    "{}: not a file of {} bytes",
                    path.display(),
                    w.args.bytes
                );
            }
            Ok(w.args.files)
        }
        Phase::Read => {
            let content = w.content();
            let mut buf = Vec::with_capacity(content.len());
            for name in w.names(layout, "f") {
                let path = dir.join(&name);
                buf.clear();
                std::fs::File::open(&path)
                    .and_then(|mut f| f.read_to_end(&mut buf))
                    .with_context(|| format!("reading {}", path.display()))?;
                ensure!(buf == content, "{}: wrong bytes", path.display());
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
                bytes: 0,
                batch_creates: false,
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
        for w in WORKLOADS {
            assert_eq!(Workload::parse(w.key()).unwrap(), w);
        }
        assert!(Workload::parse("make").is_err());
    }

    #[test]
    fn only_the_scan_runs_natively_and_scanned_files_differ() {
        assert!(Workload::Scan.runs_on(Method::Native));
        assert!(!Workload::Tar.runs_on(Method::Native));
        assert!(Workload::Tar.runs_on(Method::Mount));
        let sizes: std::collections::BTreeSet<usize> = (0..50).map(|i| scan_bytes(i).len()).collect();
        assert!(sizes.len() > 40 && sizes.iter().all(|s| (100..8000).contains(s)));
    }
}

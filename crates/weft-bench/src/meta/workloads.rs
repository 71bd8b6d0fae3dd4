//! The everyday programs of `weft bench meta` (tar, find, du, cp, git clone, an
//! import-like scan, rm), run by one process in a method's directory: the sources they
//! work on, made once, and the native client's own forms of the scan and the trees.

use super::*;

/// What the programs work on, made once per benchmark.
pub(super) struct Sources {
    /// Local scratch holding the archive (and, with --quick, the generated trees).
    _scratch: tempfile::TempDir,
    archive: PathBuf,
    /// The directory `cp -r` copies.
    copy: PathBuf,
    /// The repository `git clone` clones.
    pub(super) repo: PathBuf,
}

/// Runs a program to its end with its output thrown away; fails with its stderr.
fn run_quiet(command: &mut Command) -> Result<()> {
    let shown = format!("{command:?}");
    let out = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("running {shown}"))?;
    ensure!(
        out.status.success(),
        "{shown} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// The repository the current directory is in.
fn current_repo() -> Result<PathBuf> {
    let out = Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .stderr(Stdio::null())
        .output()
        .context("running git rev-parse (is git installed?)")?;
    ensure!(
        out.status.success(),
        "the current directory is in no git repository: give --repo"
    );
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A small tree of `files` files of 100 to 8,000 bytes, `SCAN_PER_DIR` per directory.
fn local_tree(root: &Path, files: u64) -> Result<()> {
    for i in 0..files {
        let dir = root.join(format!("pkg{}", i / SCAN_PER_DIR));
        if i % SCAN_PER_DIR == 0 {
            std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
        }
        let path = dir.join(format!("mod{}.py", i % SCAN_PER_DIR));
        std::fs::write(&path, scan_bytes(i)).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

pub(super) fn prepare_sources(
    args: &MetaArgs,
    workloads: &[Workload],
    local_parent: &Path,
) -> Result<Option<Sources>> {
    let wants = |w| workloads.contains(&w);
    if !(wants(Workload::Tar) || wants(Workload::Cp) || wants(Workload::Git)) {
        return Ok(None);
    }
    let scratch = tempfile::Builder::new()
        .prefix("weft-bench-meta-src-")
        .tempdir_in(local_parent)
        .with_context(|| format!("making a directory in {}", local_parent.display()))?;
    let archive = scratch.path().join("source.tar");
    let (tar_dir, copy, repo) = if args.quick {
        let tree = scratch.path().join("tree");
        local_tree(&tree, QUICK_SCAN_FILES)?;
        let repo = scratch.path().join("repo");
        local_tree(&repo, 20)?;
        run_quiet(Command::new("git").args(["init", "-q"]).arg(&repo))?;
        run_quiet(Command::new("git").arg("-C").arg(&repo).args(["add", "."]))?;
        run_quiet(
            Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
                .args(["commit", "-q", "-m", "bench"]),
        )?;
        (tree.clone(), tree, repo)
    } else {
        let repo = match &args.repo {
            Some(r) => r.clone(),
            None => current_repo()?,
        };
        let copy = repo.join("crates");
        if wants(Workload::Cp) {
            ensure!(copy.is_dir(), "{}: no crates/ directory to copy", repo.display());
        }
        (args.tar_source.clone(), copy, repo)
    };
    if wants(Workload::Tar) {
        let (parent, name) = match (tar_dir.parent(), tar_dir.file_name()) {
            (Some(p), Some(n)) => (p.to_owned(), n.to_owned()),
            _ => bail!("--tar-source {}: give a directory below /", tar_dir.display()),
        };
        run_quiet(
            Command::new("tar")
                .arg("cf")
                .arg(&archive)
                .arg("-C")
                .arg(parent)
                .arg(name),
        )?;
    }
    Ok(Some(Sources {
        _scratch: scratch,
        archive,
        copy,
        repo,
    }))
}

/// What the programs of one method in one repeat work with.
pub(super) struct WorkloadCtx<'a> {
    pub(super) client: &'a Client,
    pub(super) method: Method,
    pub(super) repeat: u32,
    pub(super) sources: Option<&'a Sources>,
    pub(super) scan_files: u64,
    pub(super) weft_root: &'a str,
    pub(super) mount_root: Option<&'a Path>,
    pub(super) local_root: &'a Path,
}

fn timed(what: &str, f: impl FnOnce() -> Result<()>) -> Result<f64> {
    let started = Instant::now();
    f().with_context(|| what.to_owned())?;
    Ok(started.elapsed().as_secs_f64())
}

pub(super) fn run_workloads(
    ctx: &WorkloadCtx,
    workloads: &[Workload],
    out: &mut Vec<WorkloadRun>,
) -> Result<()> {
    let method = ctx.method;
    let todo: Vec<Workload> = workloads.iter().copied().filter(|w| w.runs_on(method)).collect();
    if todo.is_empty() {
        return Ok(());
    }
    // The scan's files are the native client's in Weft (made as another client's, so
    // that the mount has seen none of them); the programs' tree is the method's.
    let weft_scan = format!("{}/scan-{}", ctx.weft_root, method.name());
    let tree: PathBuf = match method {
        Method::Native => PathBuf::new(),
        Method::Mount => ctx
            .mount_root
            .expect("mounted for the mount method")
            .join(ctx.weft_root.trim_start_matches('/'))
            .join("programs"),
        Method::Local => ctx.local_root.join("programs"),
    };
    if method != Method::Native {
        std::fs::create_dir(&tree).with_context(|| format!("making {}", tree.display()))?;
    }
    let mut record = |workload: Workload, seconds: f64| {
        eprintln!(
            "meta: #{} {:<6} {:<11} {:>9.3} s",
            ctx.repeat,
            method.name(),
            workload.name(),
            seconds
        );
        out.push(WorkloadRun {
            repeat: ctx.repeat,
            method,
            workload,
            seconds,
        });
    };
    let extracted = tree.join("tar");
    for &w in &todo {
        let sources = ctx.sources;
        let src = || sources.context("no sources prepared");
        let seconds = match w {
            Workload::Tar => {
                std::fs::create_dir(&extracted)?;
                let archive = &src()?.archive;
                timed("tar x", || {
                    run_quiet(
                        Command::new("tar")
                            .arg("xf")
                            .arg(archive)
                            .arg("-C")
                            .arg(&extracted),
                    )
                })?
            }
            Workload::Find => timed("find", || run_quiet(Command::new("find").arg(&extracted)))?,
            Workload::Du => timed("du", || run_quiet(Command::new("du").arg("-s").arg(&extracted)))?,
            Workload::Cp => {
                let from = &src()?.copy;
                timed("cp -r", || {
                    run_quiet(Command::new("cp").arg("-r").arg(from).arg(tree.join("cp")))
                })?
            }
            Workload::Git => {
                let repo = &src()?.repo;
                timed("git clone", || {
                    run_quiet(
                        Command::new("git")
                            .args(["clone", "-q", "--no-hardlinks"])
                            .arg(repo)
                            .arg(tree.join("git")),
                    )
                })?
            }
            Workload::Scan => {
                native_tree(ctx.client, &weft_scan, ctx.scan_files)?;
                let seconds = match method {
                    Method::Native => timed("scan", || native_scan(ctx.client, &weft_scan, ctx.scan_files))?,
                    Method::Mount => {
                        let at = ctx
                            .mount_root
                            .expect("mounted")
                            .join(weft_scan.trim_start_matches('/'));
                        timed("scan", || posix_scan(&at, ctx.scan_files))?
                    }
                    Method::Local => {
                        let at = ctx.local_root.join("scan");
                        local_tree(&at, ctx.scan_files)?;
                        let seconds = timed("scan", || posix_scan(&at, ctx.scan_files))?;
                        std::fs::remove_dir_all(&at)?;
                        seconds
                    }
                };
                remove_native_tree(ctx.client, &weft_scan, ctx.scan_files)?;
                seconds
            }
            Workload::Rm => timed("rm -rf", || {
                run_quiet(Command::new("rm").arg("-rf").arg(&extracted))
            })?,
        };
        record(w, seconds);
    }
    if method != Method::Native {
        run_quiet(Command::new("rm").arg("-rf").arg(&tree))?;
    }
    Ok(())
}

/// Makes the scanned tree in Weft with the native client (see `local_tree`).
fn native_tree(client: &Client, root: &str, files: u64) -> Result<()> {
    client
        .mkdir(root, 0o755)
        .with_context(|| format!("making {root}"))?;
    let create = CreateOptions {
        mode: 0o644,
        exclusive: true,
        truncate: false,
        ..Default::default()
    };
    let mut dir = InodeId::ROOT;
    for i in 0..files {
        if i % SCAN_PER_DIR == 0 {
            let path = format!("{root}/pkg{}", i / SCAN_PER_DIR);
            dir = client
                .mkdir(&path, 0o755)
                .with_context(|| format!("making {path}"))?
                .inode;
        }
        let name = format!("mod{}.py", i % SCAN_PER_DIR);
        let file = client
            .create_in(dir, &name, &create)
            .with_context(|| format!("creating {name}"))?;
        file.write_at(0, &scan_bytes(i))?;
        file.close()?;
    }
    Ok(())
}

fn remove_native_tree(client: &Client, root: &str, files: u64) -> Result<()> {
    for d in 0..files.div_ceil(SCAN_PER_DIR) {
        let dir = format!("{root}/pkg{d}");
        let inode = client.resolve(&dir)?.inode;
        for i in (d * SCAN_PER_DIR)..((d + 1) * SCAN_PER_DIR).min(files) {
            client.unlink_in(inode, format!("mod{}.py", i % SCAN_PER_DIR))?;
        }
        client.rmdir(&dir)?;
    }
    client.rmdir(root)?;
    Ok(())
}

/// The import-like scan through std::fs: list each package directory, then stat and
/// open+read+close each module, checking its bytes.
fn posix_scan(root: &Path, files: u64) -> Result<()> {
    let mut seen = 0u64;
    let mut buf = Vec::new();
    for d in 0..files.div_ceil(SCAN_PER_DIR) {
        let dir = root.join(format!("pkg{d}"));
        let listed = std::fs::read_dir(&dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .count() as u64;
        let first = d * SCAN_PER_DIR;
        let last = ((d + 1) * SCAN_PER_DIR).min(files);
        ensure!(listed == last - first, "{}: {listed} entries", dir.display());
        for i in first..last {
            let path = dir.join(format!("mod{}.py", i % SCAN_PER_DIR));
            let expected = scan_bytes(i);
            let m = std::fs::metadata(&path).with_context(|| format!("stat {}", path.display()))?;
            ensure!(
                m.len() == expected.len() as u64,
                "{}: size {}",
                path.display(),
                m.len()
            );
            buf.clear();
            std::fs::File::open(&path)
                .and_then(|mut f| f.read_to_end(&mut buf))
                .with_context(|| format!("reading {}", path.display()))?;
            ensure!(buf == expected, "{}: wrong bytes", path.display());
            seen += 1;
        }
    }
    ensure!(seen == files, "scanned {seen} files of {files}");
    Ok(())
}

/// The import-like scan through the native client.
fn native_scan(client: &Client, root: &str, files: u64) -> Result<()> {
    let mut seen = 0u64;
    for d in 0..files.div_ceil(SCAN_PER_DIR) {
        let path = format!("{root}/pkg{d}");
        let dir = client.resolve(&path)?.inode;
        let (page, _) = client.readdir_page(dir, b"", NATIVE_PAGE_ENTRIES)?;
        let first = d * SCAN_PER_DIR;
        let last = ((d + 1) * SCAN_PER_DIR).min(files);
        ensure!(
            page.len() as u64 == last - first,
            "{path}: {} entries",
            page.len()
        );
        for i in first..last {
            let name = format!("mod{}.py", i % SCAN_PER_DIR);
            let expected = scan_bytes(i);
            let attr = client
                .lookup_sized(dir, &name, None)
                .with_context(|| format!("stat {path}/{name}"))?;
            ensure!(
                attr.size == expected.len() as u64,
                "{path}/{name}: size {}",
                attr.size
            );
            let got = native_read(client, attr)?;
            ensure!(got == expected, "{path}/{name}: wrong bytes");
            seen += 1;
        }
    }
    ensure!(seen == files, "scanned {seen} files of {files}");
    Ok(())
}

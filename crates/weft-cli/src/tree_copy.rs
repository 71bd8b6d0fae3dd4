//! `weft put -r` and `weft get -r`: whole directory trees in and out, as `cp -r` copies
//! them. Each file goes through `put`/`get` (so a failed file never leaves a partial
//! one under its name); directories are made first with their source's mode (under the
//! umask going in); symbolic links are copied as links; other special files are
//! reported and skipped. A failure is reported and counted and the copy goes on; the
//! command fails at the end. A count of files and bytes is shown on a terminal every
//! second, and a summary at the end.

use crate::admin;
use crate::cluster::human_bytes;
use crate::files;
use anyhow::{bail, Context, Result};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weft_client::{Client, FileKind, LayoutRequest};

/// What a tree copy has done so far, shown every second on a terminal.
struct Tally {
    files: u64,
    dirs: u64,
    links: u64,
    bytes: u64,
    problems: u64,
    started: Instant,
    shown: Instant,
    tty: bool,
}

impl Tally {
    fn new() -> Tally {
        let now = Instant::now();
        Tally {
            files: 0,
            dirs: 0,
            links: 0,
            bytes: 0,
            problems: 0,
            started: now,
            shown: now,
            // SAFETY: isatty only inspects the descriptor.
            tty: unsafe { libc::isatty(2) } == 1,
        }
    }

    fn line(&self) -> String {
        format!(
            "{} files, {} directories, {} links, {} in {:.1} s",
            self.files,
            self.dirs,
            self.links,
            human_bytes(self.bytes),
            self.started.elapsed().as_secs_f64()
        )
    }

    fn tick(&mut self) {
        if self.tty && self.shown.elapsed() >= Duration::from_secs(1) {
            self.shown = Instant::now();
            eprint!("\r\x1b[Kweft: {}", self.line());
        }
    }

    fn problem(&mut self, what: impl std::fmt::Display) {
        if self.tty {
            eprint!("\r\x1b[K");
        }
        eprintln!("weft: {what}");
        self.problems += 1;
    }

    fn finish(self, verb: &str, target: &str) -> Result<()> {
        if self.tty {
            eprint!("\r\x1b[K");
        }
        eprintln!("weft: {verb} {}: {target}", self.line());
        match self.problems {
            0 => Ok(()),
            n => bail!("{n} entries could not be copied (see above)"),
        }
    }
}

/// Where a tree copy of `source` goes: into `dest` under the source's name if `dest` is
/// an existing directory, else `dest` itself (as cp -r).
fn tree_target(dest: &str, dest_is_dir: bool, source_name: &str) -> String {
    match dest_is_dir {
        true => weft_client::path::join(dest, source_name),
        false => dest.trim_end_matches('/').to_string(),
    }
}

/// `weft put -r LOCALDIR PATH`.
pub fn put_tree(client: &Client, local: &str, path: &str, layout: LayoutRequest) -> Result<()> {
    let top = std::fs::symlink_metadata(local).with_context(|| format!("cannot stat {local}"))?;
    if !top.is_dir() {
        return files::put(client, local, path, layout);
    }
    let name = Path::new(local)
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .with_context(|| format!("{local}: has no directory name to put it under"))?;
    let dest_is_dir = matches!(client.resolve(path), Ok(a) if a.kind == FileKind::Directory);
    let target = tree_target(path, dest_is_dir, &name);
    let umask = files::umask();
    let mut tally = Tally::new();
    let mut stack = vec![(PathBuf::from(local), target.clone(), top.mode())];
    while let Some((here, there, mode)) = stack.pop() {
        match client.mkdir(&there, mode & 0o7777 & !umask) {
            Ok(_) => tally.dirs += 1,
            Err(e) if e.code() == weft_client::ErrorCode::Exists => {}
            Err(e) => {
                tally.problem(format_args!("{there}: {e}"));
                continue;
            }
        }
        let mut entries = match std::fs::read_dir(&here).and_then(|d| d.collect::<std::io::Result<Vec<_>>>())
        {
            Ok(e) => e,
            Err(e) => {
                tally.problem(format_args!("{}: {e}", here.display()));
                continue;
            }
        };
        entries.sort_by_key(|e| e.file_name());
        let mut subdirs = Vec::new();
        for entry in entries {
            let from = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                tally.problem(format_args!(
                    "{}: a name that is not UTF-8; skipped",
                    from.display()
                ));
                continue;
            };
            let to = weft_client::path::join(&there, &name);
            let Ok(meta) = std::fs::symlink_metadata(&from) else {
                tally.problem(format_args!("{}: vanished", from.display()));
                continue;
            };
            let kind = meta.file_type();
            let done = if kind.is_dir() {
                subdirs.push((from.clone(), to, meta.mode()));
                Ok(())
            } else if kind.is_file() {
                files::put(client, from.to_str().unwrap_or_default(), &to, layout).map(|()| {
                    tally.files += 1;
                    tally.bytes += meta.len();
                })
            } else if kind.is_symlink() {
                std::fs::read_link(&from)
                    .map_err(anyhow::Error::from)
                    .and_then(|link| {
                        let link = link
                            .to_str()
                            .context("a link target that is not UTF-8")?
                            .to_string();
                        client.symlink(&link, &to).map_err(anyhow::Error::from)
                    })
                    .map(|_| tally.links += 1)
            } else {
                Err(anyhow::anyhow!(
                    "a special file (fifo, socket or device); skipped"
                ))
            };
            if let Err(e) = done {
                tally.problem(format_args!("{}: {e:#}", from.display()));
            }
            tally.tick();
        }
        stack.extend(subdirs.into_iter().rev());
    }
    tally.finish("put", &target)
}

/// `weft get -r PATH LOCALDIR`.
pub fn get_tree(client: &Client, path: &str, local: &str) -> Result<()> {
    let top = client.resolve(path)?;
    if top.kind != FileKind::Directory {
        return files::get(client, path, local);
    }
    let name = path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("root");
    let dest_is_dir = Path::new(local).is_dir();
    let target = PathBuf::from(match dest_is_dir {
        true => Path::new(local).join(name).to_string_lossy().into_owned(),
        false => local.trim_end_matches('/').to_string(),
    });
    let start = match path.trim_end_matches('/') {
        "" => "/".to_string(),
        p => p.to_string(),
    };
    let mut tally = Tally::new();
    // Directories' modes, set once they are filled (a read-only one could not be).
    let mut modes = Vec::new();
    let walked = admin::walk(client, &start, true, false, &mut |e| {
        let rest = e
            .path
            .strip_prefix(&start)
            .unwrap_or(&e.path)
            .trim_start_matches('/');
        let to = if rest.is_empty() {
            target.clone()
        } else {
            target.join(rest)
        };
        match e.attr.kind {
            FileKind::Directory => {
                match std::fs::create_dir(&to) {
                    Ok(()) => tally.dirs += 1,
                    Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && to.is_dir() => {}
                    Err(err) => bail!("cannot create {}: {err}", to.display()),
                }
                // Writable by the owner while it is filled; its own mode at the end.
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o700))
                    .with_context(|| format!("setting the mode of {}", to.display()))?;
                modes.push((to, e.attr.mode & 0o7777));
            }
            FileKind::File => {
                files::get(
                    client,
                    &e.path,
                    to.to_str().context("a local path that is not UTF-8")?,
                )?;
                tally.files += 1;
                tally.bytes += std::fs::metadata(&to).map(|m| m.len()).unwrap_or(0);
            }
            FileKind::Symlink => {
                let link = client.readlink_inode(e.attr.inode)?;
                let link: &std::ffi::OsStr = std::os::unix::ffi::OsStrExt::from_bytes(link.as_ref());
                std::os::unix::fs::symlink(link, &to).with_context(|| format!("linking {}", to.display()))?;
                tally.links += 1;
            }
            _ => bail!("a special file (fifo, socket or device); skipped"),
        }
        tally.tick();
        Ok(true)
    })?;
    tally.problems += walked as u64;
    for (dir, mode) in modes.into_iter().rev() {
        if let Err(e) = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)) {
            tally.problem(format_args!("setting the mode of {}: {e}", dir.display()));
        }
    }
    tally.finish("got", &target.to_string_lossy())
}

//! File commands: ls, stat, mkdir, rm, mv, put, get, cat, layout, df.

use crate::cluster::human_bytes;
use crate::escape;
use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::sync::mpsc;
use weft_client::{Attr, Client, CreateOptions, FileKind, LayoutRequest, OpenOptions, ServerId, SizeOf};

/// Bytes moved per read/write call in put/get/cat: whole rows of stripes keep every
/// server busy.
const COPY_BLOCK_BYTES: usize = 16 << 20;

fn kind_char(kind: FileKind) -> char {
    match kind {
        FileKind::File => '-',
        FileKind::Directory => 'd',
        FileKind::Symlink => 'l',
        FileKind::Fifo => 'p',
        FileKind::CharDevice => 'c',
        FileKind::BlockDevice => 'b',
        FileKind::Socket => 's',
    }
}

fn mode_string(attr: &Attr) -> String {
    let mut s = String::new();
    s.push(kind_char(attr.kind));
    for shift in [6, 3, 0] {
        let bits = (attr.mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

fn time_string(secs: i64) -> String {
    // SAFETY: localtime_r writes into the struct we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t = secs as libc::time_t;
    unsafe { libc::localtime_r(&t, &mut tm) };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min
    )
}

/// A time as stat(1) shows it: to the nanosecond, with the zone's offset.
fn full_time_string(t: weft_client::Timespec) -> String {
    // SAFETY: localtime_r writes into the struct we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let secs = t.secs as libc::time_t;
    unsafe { libc::localtime_r(&secs, &mut tm) };
    let offset = tm.tm_gmtoff / 60;
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:09} {}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        t.nanos,
        if offset < 0 { '-' } else { '+' },
        offset.abs() / 60,
        offset.abs() % 60
    )
}

/// An entry's line in a long listing; without `size_known` (a server of its objects
/// did not answer), what the manager holds with the size as `?`.
fn long_line(attr: &Attr, name: &str, size_known: bool) -> String {
    let size = match size_known {
        true => attr.size.to_string(),
        false => "?".to_string(),
    };
    format!(
        "{} {:>3} {:>5} {:>5} {:>12} {} {}",
        mode_string(attr),
        attr.nlink,
        attr.uid,
        attr.gid,
        size,
        time_string(attr.mtime.secs),
        name
    )
}

/// The line of an entry whose attributes could not be had, as GNU ls marks one.
fn unknown_line(kind: FileKind, name: &str) -> String {
    format!(
        "{}????????? {:>3} {:>5} {:>5} {:>12} {:>16} {}",
        kind_char(kind),
        "?",
        "?",
        "?",
        "?",
        "?",
        name
    )
}

/// Lists `paths`. An entry whose attributes or objects are missing is listed marked
/// with `?` and reported on standard error, and the listing goes on; the command then
/// fails at the end, as GNU ls does.
pub fn ls(client: &Client, paths: &[String], long: bool) -> Result<()> {
    let paths = if paths.is_empty() {
        vec!["/".to_string()]
    } else {
        paths.to_vec()
    };
    let several = paths.len() > 1;
    let mut problems = 0;
    // Io servers that failed to answer, each reported once, and how many files were
    // listed without their sizes for it.
    let mut unreachable: Vec<ServerId> = Vec::new();
    let mut sizes_unknown = 0;
    for (k, path) in paths.iter().enumerate() {
        // What the manager knows; the sizes (from the io servers) only where shown.
        let attr = client.resolve(path)?;
        if attr.kind != FileKind::Directory {
            if !long {
                println!("{path}");
                continue;
            }
            // As for a directory's entries: an io server that cannot be reached costs
            // the file its size (shown as `?`), not its line.
            let mut attrs = [attr];
            let partial = client.fill_sizes_partial(&mut attrs)?;
            report_unreachable(client, partial.failed, &mut unreachable)?;
            match partial.sizes[0] {
                SizeOf::Known => println!("{}", long_line(&attrs[0], path, true)),
                SizeOf::Unknown => {
                    println!("{}", long_line(&attrs[0], path, false));
                    sizes_unknown += 1;
                }
                SizeOf::Gone => {
                    println!("{}", unknown_line(attrs[0].kind, path));
                    std::io::stdout().flush()?;
                    eprintln!("weft: cannot access {path}: {}", no_objects(&attrs[0]));
                    problems += 1;
                }
            }
            continue;
        }
        if several {
            if k > 0 {
                println!();
            }
            println!("{path}:");
        }
        let out = std::io::stdout();
        let mut out = out.lock();
        if long {
            // One round trip to the manager per page (readdir-plus), one to each io
            // server for the page's sizes. A file whose objects are gone (removed
            // meanwhile, or lost) is listed marked and reported, as GNU ls does.
            let dir = attr;
            let mut after = weft_client::Name::default();
            loop {
                let (page, more) = client.readdir_attrs_page(dir.inode, &after, 0)?;
                let (names, mut attrs): (Vec<_>, Vec<_>) = page.into_iter().unzip();
                // A server that cannot be reached costs its files their sizes (shown as
                // `?`), not the listing.
                let partial = client.fill_sizes_partial(&mut attrs)?;
                out.flush()?;
                report_unreachable(client, partial.failed, &mut unreachable)?;
                for ((name, attr), size) in names.iter().zip(&attrs).zip(partial.sizes) {
                    let shown = escape::name(name.as_bytes());
                    if size == SizeOf::Unknown {
                        writeln!(out, "{}", long_line(attr, &shown, false))?;
                        sizes_unknown += 1;
                    } else if size == SizeOf::Gone {
                        writeln!(out, "{}", unknown_line(attr.kind, &shown))?;
                        out.flush()?;
                        eprintln!(
                            "weft: cannot access {}: {}",
                            weft_client::path::join(path, &shown),
                            no_objects(attr)
                        );
                        problems += 1;
                    } else {
                        writeln!(out, "{}", long_line(attr, &shown, true))?;
                    }
                }
                match names.last() {
                    Some(last) if more => after = last.clone(),
                    _ => break,
                }
            }
        } else {
            let entries = client.readdir(path)?;
            for e in entries {
                writeln!(
                    out,
                    "{}{}",
                    escape::name(e.name.as_bytes()),
                    if e.kind == FileKind::Directory { "/" } else { "" }
                )?;
            }
        }
    }
    // One closing line saying what is missing (each server was named once above).
    let mut missing = Vec::new();
    if problems > 0 {
        missing.push(format!(
            "{problems} entries listed without their attributes (marked ?)"
        ));
    }
    if sizes_unknown > 0 {
        let servers: Vec<String> = unreachable.iter().map(|s| s.to_string()).collect();
        missing.push(format!(
            "{sizes_unknown} files listed without their sizes (marked ?): server(s) {} not reached",
            servers.join(", ")
        ));
    }
    if !missing.is_empty() {
        bail!("{}", missing.join("; "));
    }
    Ok(())
}

/// Names each server in `failed` on standard error, once per command (`reported`
/// holds those already named).
fn report_unreachable(
    client: &Client,
    failed: Vec<(ServerId, weft_client::ClientError)>,
    reported: &mut Vec<ServerId>,
) -> Result<()> {
    for (server, error) in failed {
        if !reported.contains(&server) {
            std::io::stdout().flush()?;
            eprintln!("weft: {}", unreachable_server(client, server, &error));
            reported.push(server);
        }
    }
    Ok(())
}

/// `"io server 3 could not be reached: <error>"` (or "cache manager 5 ...").
fn unreachable_server(client: &Client, server: ServerId, error: &weft_client::ClientError) -> String {
    let role = if client.cluster_info().io_servers.iter().any(|s| s.id == server) {
        "io server"
    } else {
        "cache manager"
    };
    format!("{role} {server} could not be reached: {error}")
}

/// Why a file whose objects are all gone has no size.
fn no_objects(attr: &Attr) -> String {
    format!(
        "inode {} has no data objects on its io servers (removed?)",
        attr.inode
    )
}

pub fn describe_layout(attr: &Attr) -> String {
    if let Some(l) = &attr.layout {
        let servers: Vec<String> = l.servers.iter().map(|s| s.to_string()).collect();
        let mut text = format!(
            "stripe_size={} ({}) stripe_count={} servers={} (stripe i on servers[i mod {}]) cache={}",
            l.stripe_size_bytes,
            human_bytes(l.stripe_size_bytes),
            l.servers.len(),
            servers.join(","),
            l.servers.len(),
            attr.cache
        );
        text.push_str(&describe_pieces(l));
        return text;
    }
    match &attr.dir_layout {
        Some(r) => {
            let field = |v: Option<String>| v.unwrap_or_else(|| "inherit".into());
            format!(
                "default for new files: stripe_size={} stripe_count={} first_server={} cache={} redundancy={}",
                field(r.stripe_size_bytes.map(|v| v.to_string())),
                field(
                    r.stripe_count
                        .map(|v| if v == 0 { "all".to_string() } else { v.to_string() })
                ),
                field(r.first_server.map(|v| v.to_string())),
                field(r.cache.map(|v| v.to_string())),
                field(r.redundancy.map(|v| v.to_string()))
            )
        }
        None => "default for new files: the cluster default".into(),
    }
}

/// A replicated layout's pieces: per slot, the servers holding each copy of its
/// stripes (primary first), stale ones marked. Nothing for a plain layout.
fn describe_pieces(l: &weft_client::Layout) -> String {
    if l.replica_count() < 2 {
        return " redundancy=plain".into();
    }
    let mut text = format!(
        " redundancy={}\n  pieces (slot: servers of its copies, primary first):",
        l.redundancy()
    );
    for slot in 0..l.width() {
        let copies: Vec<String> = l
            .slot_servers(slot)
            .into_iter()
            .map(|s| match l.is_stale(s) {
                true => format!("{s}(stale)"),
                false => s.to_string(),
            })
            .collect();
        text.push_str(&format!("\n    slot {slot}: {}", copies.join(" ")));
    }
    text
}

/// Shows `path`'s attributes. When a server holding its objects cannot be reached,
/// what the manager knows is shown with the size as `?`, and the error names the
/// server (as `ls -l`).
pub fn stat(client: &Client, path: &str) -> Result<()> {
    let mut attrs = [client.resolve(path)?];
    let partial = client.fill_sizes_partial(&mut attrs)?;
    let [a] = attrs;
    if partial.sizes[0] == SizeOf::Gone {
        bail!("{path}: {}", no_objects(&a));
    }
    let size = match partial.sizes[0] {
        SizeOf::Unknown => "? (unknown: a server of its objects was not reached)".to_string(),
        _ => format!("{} ({})", a.size, human_bytes(a.size)),
    };
    let kind = match a.kind {
        FileKind::File => "regular file",
        FileKind::Directory => "directory",
        FileKind::Symlink => "symbolic link",
        FileKind::Fifo => "fifo",
        FileKind::CharDevice => "character special file",
        FileKind::BlockDevice => "block special file",
        FileKind::Socket => "socket",
    };
    println!("  File: {path}");
    println!("  Type: {kind}   Inode: {}   Links: {}", a.inode, a.nlink);
    println!("  Size: {size}");
    println!(
        "Access: ({:04o}/{})  Uid: {}  Gid: {}",
        a.mode & 0o7777,
        mode_string(&a),
        a.uid,
        a.gid
    );
    println!("Modify: {}", full_time_string(a.mtime));
    println!("Change: {}", full_time_string(a.ctime));
    println!("Layout: {}", describe_layout(&a));
    if partial.sizes[0] == SizeOf::Unknown {
        let reasons: Vec<String> = partial
            .failed
            .iter()
            .map(|(server, error)| unreachable_server(client, *server, error))
            .collect();
        bail!("{path}: size unknown: {}", reasons.join("; "));
    }
    Ok(())
}

/// Makes directories as mkdir(1) does: mode `mode` if given (as `-m`, not masked),
/// else 0777 under the umask.
pub fn mkdir(client: &Client, paths: &[String], parents: bool, mode: Option<u32>) -> Result<()> {
    let mode = mode.unwrap_or(0o777 & !umask());
    for p in paths {
        if parents {
            client.mkdir_all(p, mode)?;
        } else {
            client.mkdir(p, mode).map_err(|e| match e.code() {
                // The manager says '"a" already exists in directory 1': an inode number.
                weft_client::ErrorCode::Exists => anyhow::anyhow!("{p}: already exists"),
                _ => e.into(),
            })?;
        }
    }
    Ok(())
}

/// An octal mode for `weft mkdir -m` (at most 07777).
pub fn parse_mode(text: &str) -> Result<u32, String> {
    match u32::from_str_radix(text, 8) {
        Ok(mode) if mode <= 0o7777 => Ok(mode),
        _ => Err(format!("{text:?} is not an octal mode (0 to 7777, e.g. 750)")),
    }
}

pub fn rm(client: &Client, paths: &[String], recursive: bool) -> Result<()> {
    // As GNU rm's --preserve-root: `rm -r /` would remove every file of the cluster
    // before failing on the root itself. Refused before anything is removed.
    if let Some(root) = paths.iter().find(|p| p.trim_end_matches('/').is_empty()) {
        bail!(
            "refusing to remove {root}: that is every file of the cluster (remove the entries \
             under it by name if you mean to)"
        );
    }
    for p in paths {
        let attr = client.resolve(p)?;
        if attr.kind == FileKind::Directory {
            if !recursive {
                bail!("{p}: is a directory (use rm -r)");
            }
            remove_tree(client, p)?;
        } else {
            client.unlink(p)?;
        }
    }
    Ok(())
}

fn remove_tree(client: &Client, dir: &str) -> Result<()> {
    // Iterative, so that deep trees cannot overflow the stack. By inode and name, so
    // that names which are not UTF-8 go too.
    let top = client.resolve(dir)?.inode;
    // (directory, its parent and name (none for the top), listed already)
    let mut stack = vec![(top, None, false)];
    while let Some((inode, named, listed)) = stack.pop() {
        if listed {
            match named {
                Some((parent, name)) => client.rmdir_in(parent, &name)?,
                None => client.rmdir(dir)?,
            }
            continue;
        }
        stack.push((inode, named, true));
        let mut after = weft_client::Name::default();
        loop {
            let (page, more) = client.readdir_page(inode, &after, 0)?;
            for e in &page {
                if e.kind == FileKind::Directory {
                    stack.push((e.inode, Some((inode, e.name.clone())), false));
                } else {
                    client
                        .unlink_in(inode, &e.name)
                        .with_context(|| format!("removing {dir}/.../{}", e.name))?;
                }
            }
            match page.last() {
                Some(last) if more => after = last.name.clone(),
                _ => break,
            }
        }
    }
    Ok(())
}

/// The Weft path to write to: into a directory, the local file's name is appended.
fn target_path(client: &Client, local: &str, path: &str) -> Result<String> {
    let name = std::path::Path::new(local)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let is_dir =
        path.ends_with('/') || matches!(client.resolve(path), Ok(a) if a.kind == FileKind::Directory);
    if is_dir {
        let name = name.with_context(|| format!("{local}: has no file name"))?;
        Ok(weft_client::path::join(path, &name))
    } else {
        Ok(path.to_string())
    }
}

/// The process's umask, without changing it (from /proc; else set and restored).
pub(crate) fn umask() -> u32 {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        if let Some(mask) = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        {
            return mask;
        }
    }
    // SAFETY: umask has no preconditions; the old mask is put back at once.
    unsafe {
        let mask = libc::umask(0o022);
        libc::umask(mask);
        mask as u32
    }
}

/// Set by SIGINT, SIGTERM and SIGHUP while `put` or a replacing `get` copies, so that
/// it removes its temporary file before it goes.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn note_interrupt(_signal: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Copies local file `local` to `path`, as cp does: the new file has the source's
/// permission bits under the umask. The bytes go to a hidden temporary name in the
/// target's directory, renamed over the target once all are written and synced (as
/// rsync does), so that a failed or interrupted put never leaves a partial file under
/// the target name; the temporary file is removed on failure and on SIGINT/SIGTERM.
pub fn put(client: &Client, local: &str, path: &str, layout: LayoutRequest) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // `-`: standard input, as cp and dd take it (a pipe: its length is unknown).
    let from_stdin = local == "-";
    let input = if from_stdin {
        use std::os::fd::AsFd;
        let fd = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .context("standard input")?;
        std::fs::File::from(fd)
    } else {
        std::fs::File::open(local).with_context(|| format!("cannot open {local}"))?
    };
    let local = if from_stdin { "standard input" } else { local };
    let metadata = input.metadata().with_context(|| format!("cannot stat {local}"))?;
    let target = if from_stdin {
        if path.ends_with('/') || matches!(client.resolve(path), Ok(a) if a.kind == FileKind::Directory) {
            bail!("{path} is a directory: standard input has no name to put it under; name the file");
        }
        path.to_string()
    } else {
        target_path(client, local, path)?
    };
    let (dir, name) = weft_client::path::split(&target, weft_proto::ErrorCode::IsDirectory)?;
    let temporary = weft_client::path::join(
        &dir,
        &format!(
            ".{name}.weft-put-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        ),
    );
    let options = CreateOptions {
        layout,
        // From standard input as a shell's `>` would create it.
        mode: if from_stdin {
            0o666
        } else {
            metadata.permissions().mode()
        } & 0o777
            & !umask(),
        exclusive: true,
        truncate: false,
    };
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(signal, note_interrupt as *const () as libc::sighandler_t) };
    }
    let file = client
        .create(&temporary, &options)
        .map_err(|e| in_target_terms(&e.to_string(), &temporary, &target))?;
    let copied = copy_in(input, metadata.len(), &file, &target, local).and_then(|()| {
        drop(file);
        client
            .rename(&temporary, &target)
            .with_context(|| format!("renaming {temporary} to {target}"))?;
        Ok(())
    });
    if let Err(e) = copied {
        // Removed durably: this process ends next, and nobody would replay the removal
        // if the manager lost it.
        if let Err(removing) = client.unlink(&temporary).and_then(|()| client.sync_metadata()) {
            eprintln!("weft: removing {temporary}: {removing}");
        }
        if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            eprintln!("weft: put {target}: interrupted; nothing was written under that name");
            std::process::exit(130);
        }
        return Err(e);
    }
    // The name as well as the bytes are durable when put returns (the manager may
    // answer a rename before its commit: docs/src/consistency.md, Durability).
    client
        .sync_metadata()
        .with_context(|| format!("{target} is written; making its name durable"))
}

/// A refused create of put's temporary file, told under the name the user asked for:
/// the temporary name (`/dir/.name.weft-put-PID-NANOS`) is put's own affair, and what
/// refused it (a layout, a cache mode, an io server down) applies to the target.
fn in_target_terms(message: &str, temporary: &str, target: &str) -> anyhow::Error {
    let temporary_name = temporary.rsplit('/').next().unwrap_or(temporary);
    let target_name = target.rsplit('/').next().unwrap_or(target);
    anyhow::anyhow!(
        "{}",
        message
            .replace(temporary, target)
            .replace(temporary_name, target_name)
    )
}

/// Streams `input` into `file`, then syncs it.
fn copy_in(
    mut input: std::fs::File,
    total: u64,
    file: &weft_client::File,
    target: &str,
    local: &str,
) -> Result<()> {
    let mut progress = Progress::new(&format!("put {target}"), total);
    // A reader thread fills the next block while the previous one is being written.
    let (sender, receiver) = mpsc::sync_channel::<std::io::Result<Vec<u8>>>(2);
    let reader = std::thread::spawn(move || loop {
        let mut block = vec![0u8; COPY_BLOCK_BYTES];
        let mut filled = 0;
        let result = loop {
            match input.read(&mut block[filled..]) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    filled += n;
                    if filled == block.len() {
                        break Ok(());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        block.truncate(filled);
        let done = filled == 0 || result.is_err();
        if sender.send(result.map(|()| block)).is_err() || done {
            return;
        }
    });
    let mut offset = 0u64;
    for block in receiver {
        if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            bail!("interrupted");
        }
        let block = block.with_context(|| format!("reading {local}"))?;
        if block.is_empty() {
            break;
        }
        file.write_at(offset, &block)
            .with_context(|| format!("writing {target}"))?;
        offset += block.len() as u64;
        progress.set(offset);
    }
    reader.join().ok();
    file.sync().with_context(|| format!("writing {target}"))?;
    progress.finish(offset);
    Ok(())
}

pub fn get(client: &Client, path: &str, local: &str) -> Result<()> {
    let file = client.open(path, &OpenOptions::default())?;
    let total = file.size()?;
    let local_path = if std::path::Path::new(local).is_dir() {
        std::path::Path::new(local).join(path.rsplit('/').next().unwrap_or("file"))
    } else {
        std::path::PathBuf::from(local)
    };
    // An existing regular file is replaced only once the whole copy is synced: a get
    // that fails (an io server down, a full disk, Ctrl-C) leaves the old copy as it
    // was. Anything else (a new name, a device, a pipe, a symbolic link) is written in
    // place, as cp does.
    let replaced = std::fs::symlink_metadata(&local_path)
        .ok()
        .filter(|m| m.file_type().is_file());
    let Some(existing) = replaced else {
        let out = std::fs::File::create(&local_path)
            .with_context(|| format!("cannot create {}", local_path.display()))?;
        return get_into(&file, path, total, out, &local_path);
    };
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(signal, note_interrupt as *const () as libc::sighandler_t) };
    }
    let (out, temporary) = create_temporary(&local_path)?;
    let copied = get_into(&file, path, total, out, &temporary).and_then(|()| {
        std::fs::set_permissions(&temporary, existing.permissions())
            .with_context(|| format!("keeping the mode of {}", local_path.display()))?;
        std::fs::rename(&temporary, &local_path)
            .with_context(|| format!("renaming {} to {}", temporary.display(), local_path.display()))
    });
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&temporary);
        if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            eprintln!(
                "weft: get {path}: interrupted; {} is as it was",
                local_path.display()
            );
            std::process::exit(130);
        }
        return Err(e.context(format!("{} is as it was", local_path.display())));
    }
    Ok(())
}

/// Names tried for get's temporary file before giving up.
const TEMPORARY_NAMES_MAX: u32 = 64;

/// Creates get's temporary file beside `local_path`: `.NAME.weft-get-PID`, or with
/// `-N` after it when that exists. Created exclusively (O_EXCL, which also refuses a
/// symbolic link there): pids wrap, and a file a killed earlier get with this pid left
/// behind (or anything planted under the name) was truncated and written through, a
/// symbolic link followed to its target, and then renamed over `local_path`.
fn create_temporary(local_path: &std::path::Path) -> Result<(std::fs::File, std::path::PathBuf)> {
    let base = format!(
        ".{}.weft-get-{}",
        local_path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    );
    for attempt in 0..TEMPORARY_NAMES_MAX {
        let name = match attempt {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        };
        let temporary = local_path.with_file_name(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)
        {
            Ok(out) => return Ok((out, temporary)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!("cannot create {}", temporary.display())))
            }
        }
    }
    bail!(
        "cannot create a temporary file beside {}: {base} and {} more names like it exist (left by killed gets? remove them)",
        local_path.display(),
        TEMPORARY_NAMES_MAX - 1
    )
}

/// Copies `file` (`path`, `total` bytes) into `out`, the local file `local_path`
/// created or truncated, and syncs it.
fn get_into(
    file: &weft_client::File,
    path: &str,
    total: u64,
    mut out: std::fs::File,
    local_path: &std::path::Path,
) -> Result<()> {
    let mut progress = Progress::new(&format!("get {path}"), total);
    copy_out(file, total, &mut out, |done| progress.set(done)).map_err(|e| {
        if e.downcast_ref::<std::io::Error>().is_some() {
            e.context(format!("writing {}", local_path.display()))
        } else {
            e.context(format!("reading {path}"))
        }
    })?;
    match out.sync_all() {
        Ok(()) => {}
        // Devices, pipes and sockets (/dev/null, a FIFO) have nothing to sync.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EROFS)) => {}
        // Bytes a file system could not write back (EIO, ENOSPC, EDQUOT on NFS): the
        // copy is not whole, whatever write said.
        Err(e) => return Err(anyhow::Error::new(e).context(format!("syncing {}", local_path.display()))),
    }
    progress.finish(total);
    Ok(())
}

/// Streams a file to `out`, fetching the next block while the previous one is written.
fn copy_out(
    file: &weft_client::File,
    total: u64,
    out: &mut impl Write,
    mut on_progress: impl FnMut(u64),
) -> Result<()> {
    std::thread::scope(|scope| -> Result<()> {
        let (sender, receiver) = mpsc::sync_channel::<Result<Vec<u8>, weft_client::ClientError>>(2);
        scope.spawn(move || {
            let mut offset = 0u64;
            while offset < total {
                let n = COPY_BLOCK_BYTES.min((total - offset) as usize);
                let mut block = vec![0u8; n];
                let result = file.read_at(offset, &mut block).map(|got| {
                    block.truncate(got);
                    block
                });
                let stop = matches!(&result, Ok(b) if b.is_empty()) || result.is_err();
                if let Ok(b) = &result {
                    offset += b.len() as u64;
                }
                if sender.send(result).is_err() || stop {
                    return;
                }
            }
        });
        let mut done = 0u64;
        for block in receiver {
            if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
                bail!("interrupted");
            }
            let block = block?;
            if block.is_empty() {
                break;
            }
            out.write_all(&block)?;
            done += block.len() as u64;
            on_progress(done);
        }
        Ok(())
    })
}

pub fn cat(client: &Client, paths: &[String]) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for p in paths {
        let file = client.open(p, &OpenOptions::default())?;
        let total = file.size()?;
        match copy_out(&file, total, &mut out, |_| {}) {
            // `weft cat big | head` closes the pipe: not an error.
            Err(e)
                if e.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
            {
                return Ok(())
            }
            other => other?,
        }
    }
    out.flush().ok();
    Ok(())
}

pub fn mv(client: &Client, from: &str, to: &str) -> Result<()> {
    // Moving into an existing directory keeps the name, as mv(1) does.
    let target = match client.resolve(to) {
        Ok(a) if a.kind == FileKind::Directory => {
            let name = from.trim_end_matches('/').rsplit('/').next().unwrap_or(from);
            weft_client::path::join(to, name)
        }
        _ => to.to_string(),
    };
    // The manager names directories by inode number ('no entry "a" in directory 1',
    // 'cannot replace directory "a" in 2052: not empty'): say it with the paths given.
    client.rename(from, &target).map_err(|e| match e.code() {
        weft_client::ErrorCode::NotFound if client.resolve(from).is_err() => {
            anyhow::anyhow!("{from} not found")
        }
        weft_client::ErrorCode::NotEmpty => {
            anyhow::anyhow!("cannot move {from} to {target}: {target} is a directory that is not empty")
        }
        _ => e.into(),
    })?;
    Ok(())
}

pub fn layout(client: &Client, path: &str, set: Option<LayoutRequest>, clear: bool) -> Result<()> {
    if let (Some(request), false) = (set, clear) {
        // A path that does not exist yet: an empty file with that layout (as Lustre's
        // `lfs setstripe FILE`), which writes then fill.
        if let Err(e) = client.resolve(path) {
            if e.code() != weft_client::ErrorCode::NotFound {
                return Err(e.into());
            }
            let options = weft_client::CreateOptions {
                layout: request,
                exclusive: true,
                ..Default::default()
            };
            client.create(path, &options)?.close()?;
            let attr = client.resolve(path)?;
            println!("{path}: {}", describe_layout(&attr));
            return Ok(());
        }
    }
    if clear || set.is_some() {
        let attr = client.resolve(path)?;
        if attr.kind != FileKind::Directory {
            bail!("{path}: a file's layout is fixed at creation; --set applies to directories (the default for new files) and to paths that do not exist yet (an empty file is made)");
        }
        let attr = client.set_dir_layout(path, if clear { None } else { set })?;
        println!("{path}: {}", describe_layout(&attr));
        return Ok(());
    }
    // The manager's attributes: a layout needs no size, so it shows with a server down.
    let attr = client.resolve(path)?;
    println!("{path}: {}", describe_layout(&attr));
    Ok(())
}

pub fn df(client: &Client) -> Result<()> {
    let stats = client.statfs()?;
    println!(
        "{} files, {} directories, {} removed files awaiting purge",
        stats.meta.files, stats.meta.directories, stats.meta.orphans
    );
    println!(
        "{:<7} {:<22} {:>12} {:>10} {:>12}",
        "server", "address", "stored", "objects", "disk free"
    );
    let servers = stats.servers.len();
    let space = stats.blocks();
    let file_systems = stats
        .servers
        .iter()
        .filter_map(|(_, s)| s.as_ref().ok())
        .map(|s| s.file_system)
        .collect::<std::collections::HashSet<_>>()
        .len();
    let mut unreachable = 0;
    for (server, result) in stats.servers {
        unreachable += usize::from(result.is_err());
        match result {
            Ok(s) => println!(
                "{:<7} {:<22} {:>12} {:>10} {:>12}",
                server.id.to_string(),
                server.addr,
                human_bytes(s.bytes_stored),
                s.objects,
                human_bytes(s.bytes_free)
            ),
            Err(e) => println!(
                "{:<7} {:<22} unreachable: {e}",
                server.id.to_string(),
                server.addr
            ),
        }
    }
    let b = space;
    println!(
        "space: {} in all, {} free ({} file system{} under {servers} io server{})",
        human_bytes(b.blocks * b.block_bytes),
        human_bytes(b.blocks_avail * b.block_bytes),
        file_systems,
        if file_systems == 1 { "" } else { "s" },
        if servers == 1 { "" } else { "s" },
    );
    if unreachable > 0 {
        // As `weft status` and `weft top --once`: a script sees the cluster is not whole.
        eprintln!("weft: {unreachable} of {servers} io servers did not answer; their space is not counted");
        std::process::exit(2);
    }
    Ok(())
}

//! Admin commands without a mount, as `lfs` and the coreutils offer them: chmod, chown,
//! chgrp, touch, du, find; and relative Weft paths (`-C DIR` or `$WEFT_CWD`).
//!
//! Trees are walked by inode and name from a stack (deep trees cannot overflow it), a
//! page of names with their attributes per manager request (`readdir_attrs_page`), sizes
//! asked of the io servers only where a command needs them (du, find --size).

use crate::escape;
use anyhow::{bail, Context, Result};
use weft_client::{Attr, Client, CreateOptions, ErrorCode, FileKind, InodeId, Name, SetAttr, TimeSet};

/// Names asked of the manager per listing request while walking.
const PAGE_ENTRIES: u32 = 1024;

/// Deepest a walk goes below its starting directory (as a cycle cannot occur in a tree
/// of inodes, this only bounds the stack of a pathological tree).
const DEPTH_MAX: usize = 4096;

/// `path` as an absolute Weft path: relative ones are taken against `cwd` (`-C`, else
/// `$WEFT_CWD`, else `/`), with `.` and `..` resolved by name (as `realpath -m`).
pub fn absolute(path: &str, cwd: Option<&str>) -> Result<String> {
    if path.is_empty() {
        bail!("an empty path names nothing (use / for the root)");
    }
    let base = match cwd {
        Some(c) if !c.is_empty() => c.to_string(),
        _ => match std::env::var("WEFT_CWD") {
            Ok(c) if !c.is_empty() => c,
            _ => "/".to_string(),
        },
    };
    if !path.starts_with('/') && !base.starts_with('/') {
        bail!("the current Weft directory {base:?} (-C or WEFT_CWD) must be an absolute path");
    }
    let joined = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{base}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    let mut out = format!("/{}", parts.join("/"));
    // A trailing slash says "a directory": keep it.
    if path.len() > 1 && path.ends_with('/') && out.len() > 1 {
        out.push('/');
    }
    Ok(out)
}

/// One entry met by a walk: its path, attributes, depth below the start (0 for the
/// start itself) and where it is named (none for a start that is the root).
pub struct Entry {
    pub path: String,
    pub attr: Attr,
    pub depth: usize,
}

/// Calls `visit` for `start` and, if `recursive` and it is a directory, everything under
/// it, parents before children; `sized`: files carry their sizes (asked of the io
/// servers, a page at a time). `visit` returns whether to descend into a directory.
/// Errors below the start are reported on stderr and counted; the walk goes on.
pub fn walk(
    client: &Client,
    start: &str,
    recursive: bool,
    sized: bool,
    visit: &mut dyn FnMut(&Entry) -> Result<bool>,
) -> Result<usize> {
    let mut attr = client.resolve(start)?;
    if sized && attr.kind == FileKind::File {
        client
            .fill_sizes(std::slice::from_mut(&mut attr))
            .with_context(|| start.to_string())?;
    }
    let (kind, inode) = (attr.kind, attr.inode);
    let path = match start.trim_end_matches('/') {
        "" => "/".to_string(),
        p => p.to_string(),
    };
    let descend = visit(&Entry {
        path: path.clone(),
        attr,
        depth: 0,
    })?;
    let mut problems = 0;
    if !recursive || !descend || kind != FileKind::Directory {
        return Ok(problems);
    }
    let mut stack: Vec<(InodeId, String, usize)> = vec![(inode, path, 0)];
    while let Some((dir, path, depth)) = stack.pop() {
        if depth >= DEPTH_MAX {
            eprintln!("weft: {path}: deeper than {DEPTH_MAX} directories; not descending");
            problems += 1;
            continue;
        }
        let mut after = Name::default();
        loop {
            let (page, more) = match client.readdir_attrs_page(dir, &after, PAGE_ENTRIES) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("weft: {path}: {e}");
                    problems += 1;
                    break;
                }
            };
            let Some((last, _)) = page.last() else { break };
            after = last.clone();
            let (names, mut attrs): (Vec<Name>, Vec<Attr>) = page.into_iter().unzip();
            let mut gone = vec![false; attrs.len()];
            if sized {
                match client.fill_sizes_or_gone(&mut attrs) {
                    Ok(g) => gone = g,
                    Err(e) => {
                        eprintln!("weft: sizes in {path}: {e}");
                        problems += 1;
                    }
                }
            }
            let mut subdirs = Vec::new();
            for ((name, attr), gone) in names.into_iter().zip(attrs).zip(gone) {
                if gone {
                    continue;
                }
                let child = weft_client::path::join(&path, &String::from_utf8_lossy(name.as_ref()));
                let entry = Entry {
                    path: child,
                    attr,
                    depth: depth + 1,
                };
                match visit(&entry) {
                    Ok(true) if entry.attr.kind == FileKind::Directory => {
                        subdirs.push((entry.attr.inode, entry.path, depth + 1))
                    }
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("weft: {}: {e:#}", escape::name(entry.path.as_bytes()));
                        problems += 1;
                    }
                }
            }
            // Children in listing order once this page is done.
            stack.extend(subdirs.into_iter().rev());
            if !more {
                break;
            }
        }
    }
    Ok(problems)
}

/// Fails naming how many entries could not be handled, if any.
fn finish(problems: usize, what: &str) -> Result<()> {
    match problems {
        0 => Ok(()),
        n => bail!(
            "{n} {} could not be {what} (see above)",
            if n == 1 { "entry" } else { "entries" }
        ),
    }
}

/// A mode change as chmod(1) takes it: octal (`750`), or symbolic clauses
/// (`u+x,go-w`, `a=r`, `+X`).
#[derive(Debug, Clone)]
pub enum ModeChange {
    Set(u32),
    Symbolic(Vec<Clause>),
}

#[derive(Debug, Clone)]
pub struct Clause {
    who: u32,
    op: char,
    perms: u32,
    /// `X`: execute only for directories or files executable by someone.
    search: bool,
}

/// Parses chmod's MODE.
pub fn parse_mode_change(text: &str) -> Result<ModeChange, String> {
    if text.chars().all(|c| c.is_ascii_digit()) {
        return crate::files::parse_mode(text).map(ModeChange::Set);
    }
    let bad = || format!("{text:?} is not a mode (octal such as 750, or symbolic such as u+x,go-w)");
    let mut clauses = Vec::new();
    for part in text.split(',') {
        let mut chars = part.chars().peekable();
        let mut who = 0;
        while let Some(&c) = chars.peek() {
            who |= match c {
                'u' => 0o4700,
                'g' => 0o2070,
                'o' => 0o1007,
                'a' => 0o7777,
                _ => break,
            };
            chars.next();
        }
        let op = chars.next().filter(|c| "+-=".contains(*c)).ok_or_else(bad)?;
        let (mut perms, mut search) = (0, false);
        for c in chars {
            perms |= match c {
                'r' => 0o444,
                'w' => 0o222,
                'x' => 0o111,
                's' => 0o6000,
                't' => 0o1000,
                'X' => {
                    search = true;
                    0
                }
                _ => return Err(bad()),
            };
        }
        clauses.push(Clause {
            who: if who == 0 { 0o7777 } else { who },
            op,
            perms,
            search,
        });
    }
    Ok(ModeChange::Symbolic(clauses))
}

impl ModeChange {
    /// The new permission bits of an entry with `mode` and `kind`.
    pub fn apply(&self, mode: u32, kind: FileKind) -> u32 {
        let mut mode = mode & 0o7777;
        match self {
            ModeChange::Set(m) => *m,
            ModeChange::Symbolic(clauses) => {
                for c in clauses {
                    let mut perms = c.perms;
                    if c.search && (kind == FileKind::Directory || mode & 0o111 != 0) {
                        perms |= 0o111;
                    }
                    let bits = perms & c.who;
                    mode = match c.op {
                        '+' => mode | bits,
                        '-' => mode & !bits,
                        _ => (mode & !c.who) | bits,
                    };
                }
                mode
            }
        }
    }
}

/// `weft chmod [-R] MODE PATH...`.
pub fn chmod(client: &Client, change: &ModeChange, paths: &[String], recursive: bool) -> Result<()> {
    let mut problems = 0;
    for p in paths {
        problems += walk(client, p, recursive, false, &mut |e| {
            // Symbolic links have no mode of their own (chmod -R leaves them alone).
            if e.attr.kind != FileKind::Symlink {
                let mode = change.apply(e.attr.mode, e.attr.kind);
                if mode != e.attr.mode & 0o7777 {
                    set(
                        client,
                        e,
                        SetAttr {
                            mode: Some(mode),
                            ..SetAttr::default()
                        },
                    )?;
                }
            }
            Ok(true)
        })?;
    }
    finish(problems, "changed")
}

/// `weft chown [-R] OWNER[:GROUP] PATH...` and `weft chgrp [-R] GROUP PATH...`.
pub fn chown(
    client: &Client,
    uid: Option<u32>,
    gid: Option<u32>,
    paths: &[String],
    recursive: bool,
) -> Result<()> {
    let mut problems = 0;
    for p in paths {
        problems += walk(client, p, recursive, false, &mut |e| {
            if uid.is_some_and(|u| u != e.attr.uid) || gid.is_some_and(|g| g != e.attr.gid) {
                set(
                    client,
                    e,
                    SetAttr {
                        uid,
                        gid,
                        ..SetAttr::default()
                    },
                )?;
            }
            Ok(true)
        })?;
    }
    finish(problems, "changed")
}

fn set(client: &Client, e: &Entry, changes: SetAttr) -> Result<()> {
    client
        .setattr_unsized(e.attr.inode, &changes)
        .map(drop)
        .map_err(|err| anyhow::anyhow!("{}: {err}", escape::name(e.path.as_bytes())))
}

/// `OWNER[:GROUP]` (or `OWNER:` or `:GROUP`) as chown(1) takes it: names from the system's
/// user and group databases, or numbers.
pub fn parse_owner(text: &str) -> Result<(Option<u32>, Option<u32>)> {
    let (user, group) = match text.split_once([':', '.']) {
        Some((u, g)) => (u, Some(g)),
        None => (text, None),
    };
    let uid = match user {
        "" => None,
        u => Some(user_id(u)?),
    };
    let gid = match group {
        None | Some("") => None,
        Some(g) => Some(group_id(g)?),
    };
    if uid.is_none() && gid.is_none() {
        bail!("{text:?} names no owner and no group");
    }
    Ok((uid, gid))
}

/// A user name or number.
pub fn user_id(name: &str) -> Result<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let c = std::ffi::CString::new(name).context("a user name cannot hold a NUL byte")?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: getpwnam_r writes into the struct and buffer we own, and sets `found` to
    // point at the struct or to null.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found = std::ptr::null_mut();
    let rc = unsafe {
        libc::getpwnam_r(
            c.as_ptr(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        bail!("{name:?}: no such user on this machine (give a number to use another machine's)");
    }
    Ok(pw.pw_uid)
}

/// A group name or number.
pub fn group_id(name: &str) -> Result<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let c = std::ffi::CString::new(name).context("a group name cannot hold a NUL byte")?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: as in `user_id`, with getgrnam_r.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut found = std::ptr::null_mut();
    let rc = unsafe {
        libc::getgrnam_r(
            c.as_ptr(),
            &mut gr,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        bail!("{name:?}: no such group on this machine (give a number to use another machine's)");
    }
    Ok(gr.gr_gid)
}

/// `weft touch [-c] PATH...`: sets access and modification times to now, creating an
/// empty file (mode 0666 under the umask, the directory's layout) where none is.
pub fn touch(client: &Client, paths: &[String], no_create: bool) -> Result<()> {
    let now = SetAttr {
        atime: Some(TimeSet::Now),
        mtime: Some(TimeSet::Now),
        ..SetAttr::default()
    };
    let stamp = |inode: InodeId, p: &str| -> Result<()> {
        client
            .setattr_unsized(inode, &now)
            .with_context(|| p.to_string())?;
        Ok(())
    };
    let mut problems = 0usize;
    let mut problem = |e: anyhow::Error| {
        eprintln!("weft touch: {e:#}");
        problems += 1;
    };
    // Missing files, by directory (in the order met): made together, one request to
    // the manager per directory and 256 names (`Client::create_many`), where a create
    // each cost a request per file (`weft touch run/f{1..1000}`).
    let mut missing: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for p in paths {
        match client.resolve(p) {
            Ok(attr) => {
                if let Err(e) = stamp(attr.inode, p) {
                    problem(e);
                }
            }
            Err(e) if e.code() == ErrorCode::NotFound && !no_create => {
                let (dir, name) = match p.rsplit_once('/') {
                    Some(("", name)) => ("/", name),
                    Some((dir, name)) => (dir, name),
                    None => (".", p.as_str()),
                };
                let at = match missing.iter().position(|(d, _)| d == dir) {
                    Some(at) => at,
                    None => {
                        missing.push((dir.to_string(), Vec::new()));
                        missing.len() - 1
                    }
                };
                missing[at].1.push((name.to_string(), p.clone()));
            }
            Err(e) if e.code() == ErrorCode::NotFound => {}
            Err(e) => problem(anyhow::Error::new(e).context(p.clone())),
        }
    }
    let mode = 0o666 & !crate::files::umask();
    for (dir, names) in missing {
        let parent = match client.resolve(&dir) {
            Ok(attr) => attr.inode,
            Err(e) => {
                for (_, p) in &names {
                    problem(anyhow::Error::new(e.clone()).context(p.clone()));
                }
                continue;
            }
        };
        let asked: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
        let made = match client.create_many(parent, &asked, mode, CreateOptions::default().layout) {
            Ok(made) => made,
            Err(e) => {
                problem(anyhow::Error::new(e).context(dir.clone()));
                continue;
            }
        };
        for ((_, p), result) in names.iter().zip(made) {
            match result {
                Ok(_) => {}
                // Made meanwhile by someone else (or named twice): touch it.
                Err(e) if e.code() == ErrorCode::Exists => {
                    let found = client.resolve(p).with_context(|| p.clone());
                    if let Err(e) = found.and_then(|attr| stamp(attr.inode, p)) {
                        problem(e);
                    }
                }
                Err(e) => problem(anyhow::Error::new(e).context(p.clone())),
            }
        }
    }
    if problems > 0 {
        bail!("{problems} of {} paths not touched", paths.len());
    }
    Ok(())
}

/// `weft du [-s] [-H] [--apparent-size] PATH...`: the space under each path (blocks the
/// io servers allocated, or with `apparent` the sizes), per directory after what it
/// holds, as du(1) prints it, or one line per path with `summary`.
pub fn du(client: &Client, paths: &[String], summary: bool, human: bool, apparent: bool) -> Result<()> {
    struct Dir {
        path: String,
        parent: Option<usize>,
        total: u64,
        children: Vec<usize>,
    }
    let show = |bytes: u64| match human {
        true => crate::cluster::human_bytes(bytes),
        false => bytes.div_ceil(1024).to_string(),
    };
    let mut problems = 0;
    for p in paths {
        // Every directory met, a parent before its children; by path.
        let mut dirs: Vec<Dir> = Vec::new();
        let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        let mut lone_file = None;
        problems += walk(client, p, true, true, &mut |e| {
            let parent = e
                .path
                .rsplit_once('/')
                .map(|(d, _)| if d.is_empty() { "/" } else { d });
            let parent = parent.and_then(|d| index.get(d).copied()).filter(|_| e.depth > 0);
            match e.attr.kind {
                FileKind::Directory => {
                    let k = dirs.len();
                    index.insert(e.path.clone(), k);
                    if let Some(up) = parent {
                        dirs[up].children.push(k);
                    }
                    dirs.push(Dir {
                        path: e.path.clone(),
                        parent,
                        total: 0,
                        children: Vec::new(),
                    });
                }
                kind => {
                    let bytes = match kind {
                        FileKind::File if apparent => e.attr.size,
                        FileKind::File => e.attr.blocks * 512,
                        _ => 0,
                    };
                    match parent {
                        Some(up) => dirs[up].total += bytes,
                        None => lone_file = Some((e.path.clone(), bytes)),
                    }
                }
            }
            Ok(true)
        })?;
        if let Some((path, bytes)) = lone_file {
            println!("{}\t{}", show(bytes), escape::name(path.as_bytes()));
            continue;
        }
        // Children were met after their parents: totals from the last one back.
        for k in (0..dirs.len()).rev() {
            if let Some(up) = dirs[k].parent {
                dirs[up].total += dirs[k].total;
            }
        }
        if summary || dirs.is_empty() {
            if let Some(top) = dirs.first() {
                println!("{}\t{}", show(top.total), escape::name(top.path.as_bytes()));
            }
            continue;
        }
        // Post-order from the top: a directory after everything in it.
        let mut stack = vec![(0usize, false)];
        while let Some((k, done)) = stack.pop() {
            if done {
                println!(
                    "{}\t{}",
                    show(dirs[k].total),
                    escape::name(dirs[k].path.as_bytes())
                );
                continue;
            }
            stack.push((k, true));
            stack.extend(dirs[k].children.iter().rev().map(|c| (*c, false)));
        }
    }
    finish(problems, "measured")
}

/// What `weft find` selects.
#[derive(Default)]
pub struct FindFilter {
    pub name: Option<String>,
    pub kind: Option<FileKind>,
    /// `+N` more than, `-N` less than, `N` exactly (bytes, after the unit).
    pub size: Option<(std::cmp::Ordering, u64)>,
    /// Modified more than (`+N`), less than (`-N`) or exactly `N` whole days ago.
    pub mtime_days: Option<(std::cmp::Ordering, i64)>,
    pub stripe_count: Option<u32>,
    pub max_depth: Option<usize>,
}

/// A `+N`/`-N`/`N` comparison, as find(1) takes them; `unit` turns N into the compared
/// value (a size suffix K, M, G, T is taken by `parse_size_test`).
fn parse_compare(text: &str) -> Result<(std::cmp::Ordering, &str), String> {
    use std::cmp::Ordering::*;
    Ok(match text.as_bytes().first() {
        Some(b'+') => (Greater, &text[1..]),
        Some(b'-') => (Less, &text[1..]),
        Some(_) => (Equal, text),
        None => return Err("an empty comparison".into()),
    })
}

/// `--size [+-]N[KMGT]` (bytes without a suffix; K = 1024).
pub fn parse_size_test(text: &str) -> Result<(std::cmp::Ordering, u64), String> {
    let (order, rest) = parse_compare(text)?;
    let (digits, shift) = match rest.chars().last() {
        Some('K' | 'k') => (&rest[..rest.len() - 1], 10),
        Some('M' | 'm') => (&rest[..rest.len() - 1], 20),
        Some('G' | 'g') => (&rest[..rest.len() - 1], 30),
        Some('T' | 't') => (&rest[..rest.len() - 1], 40),
        _ => (rest, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size test (e.g. +1M, -4K, 100)"))?;
    let bytes = n
        .checked_shl(shift)
        .filter(|b| b >> shift == n)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    Ok((order, bytes))
}

/// `--mtime [+-]DAYS`.
pub fn parse_days_test(text: &str) -> Result<(std::cmp::Ordering, i64), String> {
    let (order, rest) = parse_compare(text)?;
    let days: i64 = rest
        .parse()
        .ok()
        .filter(|d| (0..=1_000_000).contains(d))
        .ok_or_else(|| format!("{text:?} is not a day count test (e.g. +7, -1, 0)"))?;
    Ok((order, days))
}

/// `--type f|d|l|p|s|c|b`.
pub fn parse_kind(text: &str) -> Result<FileKind, String> {
    Ok(match text {
        "f" => FileKind::File,
        "d" => FileKind::Directory,
        "l" => FileKind::Symlink,
        "p" => FileKind::Fifo,
        "s" => FileKind::Socket,
        "c" => FileKind::CharDevice,
        "b" => FileKind::BlockDevice,
        _ => return Err(format!("{text:?} is not a type (f, d, l, p, s, c or b)")),
    })
}

/// Whether a shell glob (`*`, `?`, `[...]`) matches the whole name, as find -name.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let c = |s: &str| std::ffi::CString::new(s).ok();
    match (c(pattern), c(name)) {
        // SAFETY: two NUL-terminated strings we own.
        (Some(p), Some(n)) => unsafe { libc::fnmatch(p.as_ptr(), n.as_ptr(), 0) == 0 },
        _ => false,
    }
}

/// `weft find PATH... [tests]`: prints every entry under the paths that passes them.
pub fn find(client: &Client, paths: &[String], filter: &FindFilter) -> Result<()> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let sized = filter.size.is_some();
    let mut problems = 0;
    for p in paths {
        problems += walk(client, p, true, sized, &mut |e| {
            let name = e.path.rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or("/");
            let passes = filter.name.as_ref().is_none_or(|g| glob_matches(g, name))
                && filter.kind.is_none_or(|k| k == e.attr.kind)
                && filter.size.is_none_or(|(order, bytes)| {
                    e.attr.kind == FileKind::File && e.attr.size.cmp(&bytes) == order
                })
                && filter.mtime_days.is_none_or(|(order, days)| {
                    ((now - e.attr.mtime.secs).max(0) / 86_400).cmp(&days) == order
                })
                && filter.stripe_count.is_none_or(|n| {
                    e.attr.kind == FileKind::File
                        && e.attr
                            .layout
                            .as_ref()
                            .is_some_and(|l| l.servers.len() == n as usize)
                });
            if passes && filter.max_depth.is_none_or(|m| e.depth <= m) {
                println!("{}", escape::name(e.path.as_bytes()));
            }
            Ok(filter.max_depth.is_none_or(|m| e.depth < m))
        })?;
    }
    finish(problems, "searched")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_taken_against_the_current_weft_directory() {
        assert_eq!(absolute("a/b", Some("/d")).unwrap(), "/d/a/b");
        assert_eq!(absolute("../x", Some("/d/e")).unwrap(), "/d/x");
        assert_eq!(absolute("/abs/./y/..", Some("/d")).unwrap(), "/abs");
        assert_eq!(absolute("..", Some("/")).unwrap(), "/");
        assert_eq!(absolute("sub/", Some("/d")).unwrap(), "/d/sub/");
        assert!(absolute("x", Some("rel")).is_err());
        assert!(absolute("", Some("/")).is_err());
    }

    #[test]
    fn symbolic_modes_change_what_chmod_changes() {
        let m = |spec: &str, mode: u32, kind: FileKind| parse_mode_change(spec).unwrap().apply(mode, kind);
        assert_eq!(m("750", 0o644, FileKind::File), 0o750);
        assert_eq!(m("u+x", 0o644, FileKind::File), 0o744);
        assert_eq!(m("go-w", 0o666, FileKind::File), 0o644);
        assert_eq!(m("a=r", 0o755, FileKind::File), 0o444);
        assert_eq!(m("+x", 0o600, FileKind::File), 0o711);
        assert_eq!(m("a+X", 0o600, FileKind::File), 0o600);
        assert_eq!(m("a+X", 0o600, FileKind::Directory), 0o711);
        assert_eq!(m("a+X", 0o700, FileKind::File), 0o711);
        assert_eq!(m("u=rw,g=r,o=", 0o777, FileKind::File), 0o640);
        assert_eq!(m("u+s", 0o755, FileKind::File), 0o4755);
        assert_eq!(m("o+t", 0o777, FileKind::Directory), 0o1777);
        for bad in ["u+q", "9", "ux", "", "77777"] {
            assert!(parse_mode_change(bad).is_err(), "{bad:?} taken");
        }
    }

    #[test]
    fn size_and_day_tests_parse_as_find_takes_them() {
        use std::cmp::Ordering::*;
        assert_eq!(parse_size_test("+1M").unwrap(), (Greater, 1 << 20));
        assert_eq!(parse_size_test("-4k").unwrap(), (Less, 4096));
        assert_eq!(parse_size_test("100").unwrap(), (Equal, 100));
        assert!(parse_size_test("+99999999999999999T").is_err());
        assert!(parse_size_test("x").is_err());
        assert_eq!(parse_days_test("+7").unwrap(), (Greater, 7));
        assert!(parse_days_test("-x").is_err());
        assert!(glob_matches("*.h5", "out.h5"));
        assert!(!glob_matches("*.h5", "out.h5.bak"));
        assert!(glob_matches("f?[0-9]", "fa7"));
    }

    #[test]
    fn owners_parse_as_chown_takes_them() {
        assert_eq!(parse_owner("0").unwrap(), (Some(0), None));
        assert_eq!(parse_owner("root:root").unwrap(), (Some(0), Some(0)));
        assert_eq!(parse_owner(":12").unwrap(), (None, Some(12)));
        assert_eq!(parse_owner("7:").unwrap(), (Some(7), None));
        assert!(parse_owner(":").is_err());
        assert!(parse_owner("no-such-user-here-x").is_err());
    }
}

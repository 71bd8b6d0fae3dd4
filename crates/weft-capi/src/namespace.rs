//! Operations on paths through the metadata manager: directories, removal, rename,
//! attributes, layouts, and file-system statistics.
//!
//! Paths are absolute and UTF-8, with no "." or ".." components; names are at most
//! `WEFT_NAME_MAX` bytes (longer is ENAMETOOLONG).

use crate::args;
use crate::error::{int_call, Failure, Outcome};
use crate::handles::weft_client_t;
use crate::types::{weft_layout_t, weft_stat_t, weft_statfs_t};
use std::ffi::{c_char, c_int};
use weft_client::{Attr, Client, FileKind, SetAttr};

/// Runs `body` with the client and one path argument.
///
/// # Safety
/// `client` is NULL or a live client handle; `path` is NULL or NUL-terminated.
unsafe fn with_path(
    function: &str,
    client: *mut weft_client_t,
    path: *const c_char,
    body: impl FnOnce(&Client, &str) -> Outcome<c_int>,
) -> c_int {
    int_call(function, || {
        // SAFETY: the caller's promises.
        let (client, path) = unsafe { (args::shared(client, "client")?, args::string(path, "path")?) };
        body(&client.client, path)
    })
}

/// Creates the directory `path` with permission bits `mode` (07777, no umask).
///
/// # Safety
/// `client` is NULL or a live client handle; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn weft_mkdir(client: *mut weft_client_t, path: *const c_char, mode: u32) -> c_int {
    // SAFETY: passed on from the caller.
    unsafe {
        with_path("weft_mkdir", client, path, |client, path| {
            client.mkdir(path, args::mode(mode)?)?;
            Ok(0)
        })
    }
}

/// Removes the empty directory `path` (-ENOTEMPTY if it is not empty).
///
/// # Safety
/// `client` is NULL or a live client handle; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn weft_rmdir(client: *mut weft_client_t, path: *const c_char) -> c_int {
    // SAFETY: passed on from the caller.
    unsafe {
        with_path("weft_rmdir", client, path, |client, path| {
            client.rmdir(path)?;
            Ok(0)
        })
    }
}

/// Removes the file (or symbolic link) `path`. Handles open on it see -ESTALE afterwards.
///
/// # Safety
/// `client` is NULL or a live client handle; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn weft_unlink(client: *mut weft_client_t, path: *const c_char) -> c_int {
    // SAFETY: passed on from the caller.
    unsafe {
        with_path("weft_unlink", client, path, |client, path| {
            client.unlink(path)?;
            Ok(0)
        })
    }
}

/// Renames `from` to `to` atomically, replacing an existing `to` as rename(2) does.
///
/// # Safety
/// `client` is NULL or a live client handle; `from` and `to` are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn weft_rename(
    client: *mut weft_client_t,
    from: *const c_char,
    to: *const c_char,
) -> c_int {
    // SAFETY: passed on from the caller.
    unsafe {
        with_path("weft_rename", client, from, |client, from| {
            // SAFETY: the caller's promise about `to`.
            let to = args::string(to, "to")?;
            client.rename(from, to)?;
            Ok(0)
        })
    }
}

/// Sets the permission bits of `path` to `mode` (07777).
///
/// # Safety
/// `client` is NULL or a live client handle; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn weft_chmod(client: *mut weft_client_t, path: *const c_char, mode: u32) -> c_int {
    // SAFETY: passed on from the caller.
    unsafe {
        with_path("weft_chmod", client, path, |client, path| {
            let changes = SetAttr {
                mode: Some(args::mode(mode)?),
                ..Default::default()
            };
            client.setattr(path, &changes)?;
            Ok(0)
        })
    }
}

/// Truncates or extends (with zeros) the file `path` to `length` bytes.
///
/// # Safety
/// `client` is NULL or a live client handle; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn weft_truncate(
    client: *mut weft_client_t,
    path: *const c_char,
    length: i64,
) -> c_int {
    // SAFETY: passed on from the caller.
    unsafe {
        with_path("weft_truncate", client, path, |client, path| {
            let changes = SetAttr {
                size: Some(args::offset(length, "length")?),
                ..Default::default()
            };
            client.setattr(path, &changes)?;
            Ok(0)
        })
    }
}

/// Fills `out` with the attributes of `path` (a symbolic link itself, not its target).
///
/// # Safety
/// `client` is NULL or a live client handle; `path` is NULL or NUL-terminated; `out` is
/// NULL or points to a `weft_stat_t`.
#[no_mangle]
pub unsafe extern "C" fn weft_stat(
    client: *mut weft_client_t,
    path: *const c_char,
    out: *mut weft_stat_t,
) -> c_int {
    // SAFETY: passed on from the caller.
    unsafe {
        with_path("weft_stat", client, path, |client, path| {
            // SAFETY: the caller's promise about `out`.
            let out = args::output(out, "out")?;
            *out = weft_stat_t::from(&client.stat(path)?);
            Ok(0)
        })
    }
}

/// Most names one `weft_stat_many` call takes.
pub const WEFT_STAT_MANY_MAX: usize = 1 << 20;

/// Stats many names of one directory at once: for each `i` below `count`, fills
/// `out[i]` with the attributes of `names[i]` in directory `dir`, as `weft_stat` would
/// (a regular file's size included), or zeroes it (`mode` 0) when there is no such name.
/// Returns how many were found. One request to the metadata manager per 4,096 names and
/// one to each io server involved, where a `weft_stat` of each costs two round trips per
/// name. `count` is at most `WEFT_STAT_MANY_MAX`; a name is one path component (no
/// '/').
///
/// # Safety
/// `client` is NULL or a live client handle; `dir` is NULL or NUL-terminated; `names`
/// is NULL or points to `count` pointers, each NULL or NUL-terminated; `out` is NULL or
/// writable for `count` `weft_stat_t`s.
#[no_mangle]
pub unsafe extern "C" fn weft_stat_many(
    client: *mut weft_client_t,
    dir: *const c_char,
    names: *const *const c_char,
    count: usize,
    out: *mut weft_stat_t,
) -> c_int {
    // SAFETY: passed on from the caller.
    unsafe {
        with_path("weft_stat_many", client, dir, |client, dir| {
            if count > WEFT_STAT_MANY_MAX {
                return Err(Failure::invalid(format!(
                    "{count} names: at most WEFT_STAT_MANY_MAX ({WEFT_STAT_MANY_MAX}) per call"
                )));
            }
            if count == 0 {
                return Ok(0);
            }
            if names.is_null() {
                return Err(Failure::invalid("names is NULL"));
            }
            if out.is_null() {
                return Err(Failure::invalid("out is NULL"));
            }
            // SAFETY: the caller's promise: `count` pointers.
            let pointers = std::slice::from_raw_parts(names, count);
            let list = one_component_names(pointers)?;
            let parent = client.resolve(dir)?;
            if parent.kind != FileKind::Directory {
                return Err(Failure::new(libc::ENOTDIR, format!("{dir}: not a directory")));
            }
            let found = client.stat_many(parent.inode, &list)?;
            // SAFETY: the caller's promise: writable for `count` entries.
            let out = std::slice::from_raw_parts_mut(out, count);
            let mut n = 0;
            for (slot, attr) in out.iter_mut().zip(&found) {
                *slot = match attr {
                    Some(a) => {
                        n += 1;
                        weft_stat_t::from(a)
                    }
                    None => weft_stat_t::default(),
                };
            }
            Ok(n)
        })
    }
}

/// Most names one `weft_create_many` call takes.
pub const WEFT_CREATE_MANY_MAX: usize = 1 << 20;

/// Creates many files in one directory at once: for each `i` below `count`, makes
/// regular file `names[i]` in directory `dir` with permission bits `mode` (less the
/// umask the caller applies itself, as `weft_create` does), as an exclusive create
/// would, and sets `errors[i]` to 0 if it was made or to the positive errno of why not
/// (`EEXIST` for a name that exists or is given twice, `EDQUOT`, ...). Returns how many
/// were made, or a negative errno when the call itself fails (no such directory, no
/// permission to write it, `count` too large, the manager unreachable). One request to
/// the metadata manager per 256 names, made durable before it is answered, where a
/// `weft_create` of each costs a request (and a close) per file. The files are left
/// closed and empty; the directory's default layout applies. `count` is at most
/// `WEFT_CREATE_MANY_MAX`; a name is one path component (no '/').
///
/// # Safety
/// `client` is NULL or a live client handle; `dir` is NULL or NUL-terminated; `names`
/// is NULL or points to `count` pointers, each NULL or NUL-terminated; `errors` is NULL
/// or writable for `count` `int`s.
#[no_mangle]
pub unsafe extern "C" fn weft_create_many(
    client: *mut weft_client_t,
    dir: *const c_char,
    names: *const *const c_char,
    count: usize,
    mode: u32,
    errors: *mut c_int,
) -> c_int {
    // SAFETY: passed on from the caller.
    unsafe {
        with_path("weft_create_many", client, dir, |client, dir| {
            if count > WEFT_CREATE_MANY_MAX {
                return Err(Failure::invalid(format!(
                    "{count} names: at most WEFT_CREATE_MANY_MAX ({WEFT_CREATE_MANY_MAX}) per call"
                )));
            }
            if count == 0 {
                return Ok(0);
            }
            if names.is_null() {
                return Err(Failure::invalid("names is NULL"));
            }
            if errors.is_null() {
                return Err(Failure::invalid("errors is NULL"));
            }
            if mode & !0o7777 != 0 {
                return Err(Failure::invalid(format!("mode {mode:#o} has bits beyond 07777")));
            }
            // SAFETY: the caller's promise: `count` pointers.
            let pointers = std::slice::from_raw_parts(names, count);
            let list = one_component_names(pointers)?;
            let parent = client.resolve(dir)?;
            if parent.kind != FileKind::Directory {
                return Err(Failure::new(libc::ENOTDIR, format!("{dir}: not a directory")));
            }
            let made = client.create_many(parent.inode, &list, mode, Default::default())?;
            // SAFETY: the caller's promise: writable for `count` entries.
            let errors = std::slice::from_raw_parts_mut(errors, count);
            let mut n = 0;
            for (slot, result) in errors.iter_mut().zip(&made) {
                *slot = match result {
                    Ok(_) => {
                        n += 1;
                        0
                    }
                    Err(e) => e.errno(),
                };
            }
            Ok(n)
        })
    }
}

/// `names` as strings, each one path component (`names[i]` in errors).
///
/// # Safety
/// Each pointer is NULL or NUL-terminated.
unsafe fn one_component_names<'a>(pointers: &[*const c_char]) -> Result<Vec<&'a str>, Failure> {
    let mut list = Vec::with_capacity(pointers.len());
    for (i, p) in pointers.iter().enumerate() {
        // SAFETY: the caller's promise.
        let name = unsafe { args::string(*p, &format!("names[{i}]"))? };
        if name.is_empty() || name.contains('/') {
            return Err(Failure::invalid(format!(
                "names[{i}] {name:?} is not one path component"
            )));
        }
        list.push(name);
    }
    Ok(list)
}

/// The layout of `path`. For a regular file: every field of `out` (`fields` has all
/// bits) and its io servers' ids, in stripe order, in `servers` (at most `servers_max`
/// of them; NULL and 0 to ask only the count); returns the stripe count, which may
/// exceed `servers_max` (it is at most `WEFT_STRIPE_COUNT_MAX`). For a directory: its
/// default layout for new files (only the fields it sets); returns 0.
///
/// # Safety
/// `client` is NULL or a live client handle; `path` is NULL or NUL-terminated; `out` is
/// NULL or points to a `weft_layout_t`; `servers` is NULL or writable for `servers_max`
/// entries.
#[no_mangle]
pub unsafe extern "C" fn weft_get_layout(
    client: *mut weft_client_t,
    path: *const c_char,
    out: *mut weft_layout_t,
    servers: *mut u32,
    servers_max: usize,
) -> c_int {
    // SAFETY: passed on from the caller.
    unsafe {
        with_path("weft_get_layout", client, path, |client, path| {
            // SAFETY: the caller's promises about `out` and `servers`.
            let out = args::output(out, "out")?;
            let attr = client.resolve(path)?;
            fill_layout(client, &attr, out, servers, servers_max)
        })
    }
}

/// Fills in `out` and `servers` for `weft_get_layout` and `weft_fget_layout`.
///
/// # Safety
/// `servers` is NULL or writable for `servers_max` entries.
pub(crate) unsafe fn fill_layout(
    client: &Client,
    attr: &Attr,
    out: &mut weft_layout_t,
    servers: *mut u32,
    servers_max: usize,
) -> Outcome<c_int> {
    if servers.is_null() && servers_max > 0 {
        return Err(Failure::new(libc::EFAULT, "servers is NULL"));
    }
    match (&attr.kind, &attr.layout, &attr.dir_layout) {
        (FileKind::File, Some(layout), _) => {
            let cluster: Vec<_> = client.cluster_info().io_servers.iter().map(|s| s.id).collect();
            *out = weft_layout_t::from_layout(layout, &cluster);
            let n = layout.servers.len().min(servers_max);
            if n > 0 {
                // SAFETY: non-NULL and writable for servers_max >= n entries.
                let ids = unsafe { std::slice::from_raw_parts_mut(servers, n) };
                for (to, from) in ids.iter_mut().zip(&layout.servers) {
                    *to = from.0;
                }
            }
            Ok(layout.servers.len() as c_int)
        }
        (FileKind::Directory, _, default) => {
            *out = default
                .as_ref()
                .map(weft_layout_t::from_request)
                .unwrap_or_default();
            Ok(0)
        }
        _ => Err(Failure::invalid(format!(
            "inode {} has no layout (not a regular file or a directory)",
            attr.inode
        ))),
    }
}

/// Sets the default layout of new files created in the directory `path` (files already
/// there keep theirs), or with a NULL `layout` removes it so that the cluster's applies.
///
/// # Safety
/// `client` is NULL or a live client handle; `path` is NULL or NUL-terminated; `layout`
/// is NULL or points to a `weft_layout_t`.
#[no_mangle]
pub unsafe extern "C" fn weft_set_dir_layout(
    client: *mut weft_client_t,
    path: *const c_char,
    layout: *const weft_layout_t,
) -> c_int {
    // SAFETY: passed on from the caller.
    unsafe {
        with_path("weft_set_dir_layout", client, path, |client, path| {
            // SAFETY: the caller's promise about `layout`.
            let request = layout.as_ref().map(weft_layout_t::to_request).transpose()?;
            client.set_dir_layout(path, request)?;
            Ok(0)
        })
    }
}

/// Fills `out` with file-system statistics: namespace counts from the metadata manager
/// and space from every io server (one that does not answer is counted in
/// `io_servers_unreachable`, not an error).
///
/// # Safety
/// `client` is NULL or a live client handle; `out` is NULL or points to a
/// `weft_statfs_t`.
#[no_mangle]
pub unsafe extern "C" fn weft_statfs(client: *mut weft_client_t, out: *mut weft_statfs_t) -> c_int {
    int_call("weft_statfs", || {
        // SAFETY: the caller's promises.
        let (client, out) = unsafe { (args::shared(client, "client")?, args::output(out, "out")?) };
        *out = weft_statfs_t::from(&client.client.statfs()?);
        Ok(0)
    })
}

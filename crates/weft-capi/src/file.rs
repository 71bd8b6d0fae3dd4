//! Open files: opening and creating (with a layout), positional reads and writes,
//! sync, truncate, attributes and layout of an open file, and closing.

use crate::args;
use crate::error::{int_call, pointer_call, ssize_call, Failure, Outcome};
use crate::handles::{weft_client_t, weft_file_t};
use crate::live;
use crate::namespace::fill_layout;
use crate::types::{weft_layout_t, weft_stat_t};
use std::ffi::{c_char, c_int, c_void};
use weft_client::{CreateOptions, OpenOptions};

/// Open for reading only (the value of Linux's `O_RDONLY`).
pub const WEFT_O_RDONLY: c_int = 0;
/// Open for writing only (`O_WRONLY`).
pub const WEFT_O_WRONLY: c_int = 1;
/// Open for reading and writing (`O_RDWR`).
pub const WEFT_O_RDWR: c_int = 2;
/// Mask of the access mode: one of the three above.
pub const WEFT_O_ACCMODE: c_int = 3;
/// Create the file if it does not exist (`O_CREAT`).
pub const WEFT_O_CREAT: c_int = 0x40;
/// With `WEFT_O_CREAT`: fail with -EEXIST if the file exists (`O_EXCL`).
pub const WEFT_O_EXCL: c_int = 0x80;
/// Truncate the file to length 0; needs write access (`O_TRUNC`).
pub const WEFT_O_TRUNC: c_int = 0x200;
/// Every `weft_pwrite` appends at the end of the file as its io servers see it, whoever
/// else writes, and ignores its offset (as Linux's pwrite(2) on an `O_APPEND`
/// descriptor); needs write access (`O_APPEND`).
pub const WEFT_O_APPEND: c_int = 0x400;

const OPEN_FLAGS_KNOWN: c_int = WEFT_O_ACCMODE | WEFT_O_CREAT | WEFT_O_EXCL | WEFT_O_TRUNC | WEFT_O_APPEND;

/// Opens (with `WEFT_O_CREAT`, creates) the regular file `path` (absolute, UTF-8).
/// `flags` is one of `WEFT_O_RDONLY`, `WEFT_O_WRONLY`, `WEFT_O_RDWR`, or-ed with any of
/// `WEFT_O_CREAT`, `WEFT_O_EXCL`, `WEFT_O_TRUNC`, `WEFT_O_APPEND`; other bits are EINVAL. `mode` gives
/// the permission bits (07777, used as given: no umask) and `layout` the striping of a
/// file this call creates (NULL: the directory's default, then the cluster's); both are
/// used only when the file is created, and `layout` is EINVAL without `WEFT_O_CREAT`.
/// Returns NULL with errno set on failure (ENOENT, EEXIST, EISDIR, EACCES, EINVAL, ...;
/// a `path` ending in `/` names a directory: EISDIR, or ENOTDIR for an existing file).
/// Close with `weft_close`.
///
/// # Safety
/// `client` is NULL or a live client handle; `path` is NULL or a NUL-terminated string;
/// `layout` is NULL or points to a `weft_layout_t`.
#[no_mangle]
pub unsafe extern "C" fn weft_open(
    client: *mut weft_client_t,
    path: *const c_char,
    flags: c_int,
    mode: u32,
    layout: *const weft_layout_t,
) -> *mut weft_file_t {
    pointer_call("weft_open", || {
        // SAFETY: the caller's promises above.
        let (client, path, layout) = unsafe {
            (
                &args::shared(client, "client")?.client,
                args::string(path, "path")?,
                layout.as_ref(),
            )
        };
        let mode = args::mode(mode)?;
        if flags & !OPEN_FLAGS_KNOWN != 0 {
            return Err(Failure::invalid(format!("flags {flags:#o} has unknown bits")));
        }
        let (readable, writable) = match flags & WEFT_O_ACCMODE {
            WEFT_O_RDONLY => (true, false),
            WEFT_O_WRONLY => (false, true),
            WEFT_O_RDWR => (true, true),
            _ => return Err(Failure::invalid("flags has an invalid access mode")),
        };
        let create = flags & WEFT_O_CREAT != 0;
        let exclusive = flags & WEFT_O_EXCL != 0;
        let truncate = flags & WEFT_O_TRUNC != 0;
        if exclusive && !create {
            return Err(Failure::invalid("WEFT_O_EXCL needs WEFT_O_CREAT"));
        }
        if truncate && !writable {
            return Err(Failure::invalid("WEFT_O_TRUNC needs write access"));
        }
        let append = flags & WEFT_O_APPEND != 0;
        if append && !writable {
            return Err(Failure::invalid("WEFT_O_APPEND needs write access"));
        }
        if layout.is_some() && !create {
            return Err(Failure::invalid("a layout is used only with WEFT_O_CREAT"));
        }
        if path.len() > 1 && path.ends_with('/') {
            return Err(trailing_slash(client, path, create));
        }
        let create_options = CreateOptions {
            mode,
            layout: layout
                .map(weft_layout_t::to_request)
                .transpose()?
                .unwrap_or_default(),
            exclusive,
            truncate,
        };
        let file = if exclusive {
            // A new file: nothing to truncate.
            client.create(
                path,
                &CreateOptions {
                    truncate: false,
                    ..create_options
                },
            )?
        } else {
            client.open(
                path,
                &OpenOptions {
                    write: writable,
                    create: create.then_some(create_options),
                    truncate,
                },
            )?
        };
        Ok(live::give(weft_file_t {
            client: client.clone(),
            file,
            readable,
            writable,
            append,
        }))
    })
}

/// Why `path`, which ends in `/`, cannot be opened as a file: a trailing slash names a
/// directory (POSIX), while the path rules drop it, which made `"/x/"` with
/// `WEFT_O_CREAT` create the regular file `/x`. As Linux: EISDIR for a directory, or
/// for a name to create; ENOTDIR for an existing file.
fn trailing_slash(client: &weft_client::Client, path: &str, create: bool) -> Failure {
    match client.stat(path) {
        Ok(attr) if attr.kind == weft_client::FileKind::Directory => {
            Failure::new(libc::EISDIR, format!("{path}: is a directory"))
        }
        Ok(_) => Failure::new(
            libc::ENOTDIR,
            format!("{path}: not a directory (the name ends in /)"),
        ),
        Err(e) if create && e.code() == weft_client::ErrorCode::NotFound => Failure::new(
            libc::EISDIR,
            format!("{path}: a name ending in / names a directory, not a file to create"),
        ),
        Err(e) => Failure::from(e).context(path),
    }
}

/// Closes a file. Like close(2) this does not make data durable: call `weft_fsync`
/// first. Returns 0, -EINVAL for NULL, or -EBADF for a file already closed.
///
/// # Safety
/// `file` is NULL or a pointer from `weft_open`; no other thread is in a call on it. It
/// is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn weft_close(file: *mut weft_file_t) -> c_int {
    int_call("weft_close", || {
        let handle = args::closing(file, "file")?;
        handle.file.close()?;
        Ok(0)
    })
}

/// Reads up to `count` bytes at `offset` into `buf`; returns the number read, fewer than
/// `count` only at the end of the file (0 at or past it); the bytes of `buf` past that
/// number are left as they were, as pread(2) leaves them. Holes read as zeros. Errors:
/// -EBADF if opened `WEFT_O_WRONLY`, -EFAULT for a NULL `buf` with `count` > 0, -EINVAL
/// for a negative offset or `count` > SSIZE_MAX.
///
/// # Safety
/// `file` is NULL or a live file handle; `buf` is NULL or writable for `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn weft_pread(
    file: *mut weft_file_t,
    buf: *mut c_void,
    count: usize,
    offset: i64,
) -> libc::ssize_t {
    ssize_call("weft_pread", || {
        // SAFETY: the caller's promise.
        let handle = unsafe { args::shared(file, "file") }?;
        let (count, offset) = transfer_args(buf.is_null(), count, offset)?;
        if !handle.readable {
            return Err(Failure::new(
                libc::EBADF,
                format!("{}: not opened for reading", handle.file.path()),
            ));
        }
        if count == 0 {
            return Ok(0);
        }
        // Not zeroed first: bytes past the count returned stay as the caller left them,
        // as pread(2) leaves them. The buffer may be memory C never wrote; `read_at`
        // only writes into it (replies are received into its pieces), never reads it.
        // SAFETY: non-NULL and writable for `count` bytes (the caller's promise).
        let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), count) };
        Ok(handle.file.read_at(offset, buf)? as libc::ssize_t)
    })
}

/// Writes `count` bytes from `buf` at `offset` (at the file's end, whatever `offset`
/// says, if opened `WEFT_O_APPEND`); returns `count` (a write is never partial: it
/// succeeds whole or fails). Errors: -EBADF if opened `WEFT_O_RDONLY`,
/// -EFAULT for a NULL `buf` with `count` > 0, -EINVAL for a negative offset or
/// `count` > SSIZE_MAX, -EFBIG for a range past the largest file offset (2^62).
///
/// # Safety
/// `file` is NULL or a live file handle; `buf` is NULL or readable for `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn weft_pwrite(
    file: *mut weft_file_t,
    buf: *const c_void,
    count: usize,
    offset: i64,
) -> libc::ssize_t {
    ssize_call("weft_pwrite", || {
        // SAFETY: the caller's promise.
        let handle = unsafe { args::shared(file, "file") }?;
        let (count, offset) = transfer_args(buf.is_null(), count, offset)?;
        if !handle.writable {
            return Err(Failure::new(
                libc::EBADF,
                format!("{}: not opened for writing", handle.file.path()),
            ));
        }
        if count == 0 {
            return Ok(0);
        }
        // SAFETY: non-NULL and readable for `count` bytes (the caller's promise).
        let buf = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), count) };
        if handle.append {
            handle.file.append(buf)?;
            return Ok(count as libc::ssize_t);
        }
        Ok(handle.file.write_at(offset, buf)? as libc::ssize_t)
    })
}

fn transfer_args(buf_is_null: bool, count: usize, offset: i64) -> Outcome<(usize, u64)> {
    let count = args::count(count)?;
    let offset = args::offset(offset, "offset")?;
    if buf_is_null && count > 0 {
        return Err(Failure::new(libc::EFAULT, "buf is NULL"));
    }
    Ok((count, offset))
}

/// Makes everything written to the file so far durable on every io server: once this
/// returns 0, no server crash loses it.
///
/// # Safety
/// `file` is NULL or a live file handle.
#[no_mangle]
pub unsafe extern "C" fn weft_fsync(file: *mut weft_file_t) -> c_int {
    int_call("weft_fsync", || {
        // SAFETY: the caller's promise.
        let handle = unsafe { args::shared(file, "file") }?;
        handle.file.sync()?;
        Ok(0)
    })
}

/// Truncates or extends (with zeros) the file to `length` bytes. -EBADF if the file is
/// not open for writing, -EINVAL for a negative length.
///
/// # Safety
/// `file` is NULL or a live file handle.
#[no_mangle]
pub unsafe extern "C" fn weft_ftruncate(file: *mut weft_file_t, length: i64) -> c_int {
    int_call("weft_ftruncate", || {
        // SAFETY: the caller's promise.
        let handle = unsafe { args::shared(file, "file") }?;
        let length = args::offset(length, "length")?;
        if !handle.writable {
            return Err(Failure::new(
                libc::EBADF,
                format!("{}: not opened for writing", handle.file.path()),
            ));
        }
        handle.file.truncate(length)?;
        Ok(0)
    })
}

/// Fills `out` with the file's current attributes, its size included.
///
/// # Safety
/// `file` is NULL or a live file handle; `out` is NULL or points to a `weft_stat_t`.
#[no_mangle]
pub unsafe extern "C" fn weft_fstat(file: *mut weft_file_t, out: *mut weft_stat_t) -> c_int {
    int_call("weft_fstat", || {
        // SAFETY: the caller's promises.
        let (handle, out) = unsafe { (args::shared(file, "file")?, args::output(out, "out")?) };
        let attr = handle
            .client
            .getattr(handle.file.inode())
            .map_err(|e| Failure::from(e).context(handle.file.path()))?;
        *out = weft_stat_t::from(&attr);
        Ok(0)
    })
}

/// The open file's layout, as `weft_get_layout` gives a path's.
///
/// # Safety
/// `file` is NULL or a live file handle; `out` is NULL or points to a `weft_layout_t`;
/// `servers` is NULL or writable for `servers_max` entries.
#[no_mangle]
pub unsafe extern "C" fn weft_fget_layout(
    file: *mut weft_file_t,
    out: *mut weft_layout_t,
    servers: *mut u32,
    servers_max: usize,
) -> c_int {
    int_call("weft_fget_layout", || {
        // SAFETY: the caller's promises.
        let (handle, out) = unsafe { (args::shared(file, "file")?, args::output(out, "out")?) };
        let attr = handle.file.attr();
        // SAFETY: the caller's promise about `servers`.
        unsafe { fill_layout(&handle.client, attr, out, servers, servers_max) }
    })
}

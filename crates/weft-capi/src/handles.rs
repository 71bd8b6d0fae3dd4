//! The opaque handles C holds (a connection, an open file, an open directory), connecting
//! and disconnecting, and the library's version.
//!
//! Handles are boxed Rust values given to C as raw pointers, recorded in `crate::live`
//! until closed: a handle used after its close, or closed twice, is `EBADF`.

use crate::args;
use crate::error::{int_call, pointer_call, Failure};
use crate::live;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int};
use weft_client::{Client, DirEntry, File, InodeId};

/// A connection to a Weft cluster. Threads may share one.
#[allow(non_camel_case_types)]
pub struct weft_client_t {
    pub(crate) client: Client,
}

/// An open file. Threads may share one; writes to overlapping ranges from several
/// threads at once land in no defined order.
#[allow(non_camel_case_types)]
pub struct weft_file_t {
    /// The connection the file was opened through, for attribute calls.
    pub(crate) client: Client,
    pub(crate) file: File,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    /// Opened `WEFT_O_APPEND`: every write appends.
    pub(crate) append: bool,
}

/// An open directory being read. One thread at a time.
#[allow(non_camel_case_types)]
pub struct weft_dir_t {
    pub(crate) client: Client,
    pub(crate) path: String,
    pub(crate) inode: InodeId,
    /// Entries fetched but not yet returned.
    pub(crate) page: VecDeque<DirEntry>,
    /// The name after which the next page starts.
    pub(crate) after: weft_client::Name,
    /// Whether the manager has entries after `after`.
    pub(crate) more: bool,
}

/// Connects to a cluster: to the metadata manager at `meta_addr` ("host:port"), or with
/// NULL to the cluster found as the `weft` tool finds it ($WEFT_META, else
/// $WEFT_HOME/cluster.toml, else ~/.weft/cluster.toml), proving the cluster key found
/// as the tool finds it ($WEFT_KEY, else beside that cluster.toml). Returns NULL with
/// errno set (EHOSTDOWN when no cluster answers, EACCES when the key is refused) on
/// failure. Close with `weft_disconnect`.
///
/// # Safety
/// `meta_addr` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn weft_connect(meta_addr: *const c_char) -> *mut weft_client_t {
    pointer_call("weft_connect", || {
        let client = if meta_addr.is_null() {
            Client::from_env()?
        } else {
            // SAFETY: non-NULL and NUL-terminated (the caller's promise).
            let addr = unsafe { args::string(meta_addr, "meta_addr") }?;
            if addr.is_empty() {
                return Err(Failure::invalid("meta_addr is empty"));
            }
            Client::connect(addr)?
        };
        Ok(live::give(weft_client_t { client }))
    })
}

/// Connects as `weft_connect` does, proving the cluster key in `key_file` (the file
/// `weft up` makes in the cluster's home, or `weft key create` makes) rather than the
/// key found through $WEFT_KEY or beside cluster.toml; `meta_addr` is the metadata
/// manager's "host:port". Returns NULL with errno set on failure (EACCES: the servers
/// refuse this key, or the file is not a usable key).
///
/// # Safety
/// `meta_addr` and `key_file` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn weft_connect_key(
    meta_addr: *const c_char,
    key_file: *const c_char,
) -> *mut weft_client_t {
    pointer_call("weft_connect_key", || {
        // SAFETY: NUL-terminated (the caller's promise).
        let key_file = unsafe { args::string(key_file, "key_file") }?;
        let key = weft_client::ClusterKey::load(std::path::Path::new(key_file))
            .map_err(|e| Failure::new(libc::EACCES, e.to_string()))?;
        // SAFETY: NUL-terminated (the caller's promise).
        let addr = unsafe { args::string(meta_addr, "meta_addr") }?;
        if addr.is_empty() {
            return Err(Failure::invalid("meta_addr is empty"));
        }
        let client = Client::connect_with(addr, weft_client::ClientAuth::cluster(key))?;
        Ok(live::give(weft_client_t { client }))
    })
}

/// Closes a connection. Files and directories opened through it stay usable (they hold
/// their own reference to the connections) until they are closed. Returns 0, -EINVAL
/// for NULL, or -EBADF for a connection already closed.
///
/// # Safety
/// `client` is NULL or a pointer from `weft_connect`; no other thread is in a call on
/// it. It is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn weft_disconnect(client: *mut weft_client_t) -> c_int {
    int_call("weft_disconnect", || {
        drop(args::closing(client, "client")?);
        Ok(0)
    })
}

/// The library's version ("major.minor.patch"), a static string.
#[no_mangle]
pub extern "C" fn weft_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

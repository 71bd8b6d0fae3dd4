//! Directory iteration: entries come from the metadata manager a page at a time, in
//! name order, and are handed to C one by one.

use crate::args;
use crate::error::{int_call, pointer_call, Failure};
use crate::handles::{weft_client_t, weft_dir_t};
use crate::live;
use crate::types::weft_dirent_t;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicU32, Ordering};
use weft_client::FileKind;

/// Entries asked for per request to the metadata manager (it may send fewer).
const DIR_PAGE_ENTRIES: u32 = 1024;

/// `DIR_PAGE_ENTRIES`, unless a test asked for smaller pages.
static PAGE_ENTRIES: AtomicU32 = AtomicU32::new(DIR_PAGE_ENTRIES);

impl weft_dir_t {
    fn fetch_page(&mut self) -> Result<(), Failure> {
        let (page, more) = self
            .client
            .readdir_page(self.inode, &self.after, PAGE_ENTRIES.load(Ordering::Relaxed))
            .map_err(|e| Failure::from(e).context(&self.path))?;
        if let Some(last) = page.last() {
            self.after = last.name.clone();
        }
        // A manager that says "more" with an empty page would loop us forever.
        self.more = more && !page.is_empty();
        self.page = page.into();
        Ok(())
    }
}

/// Opens the directory `path` for `weft_readdir`; the first page of entries is read
/// here, so permission errors show now. Returns NULL with errno set on failure (ENOENT,
/// ENOTDIR, EACCES, ...). Close with `weft_closedir`.
///
/// # Safety
/// `client` is NULL or a live client handle; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn weft_opendir(client: *mut weft_client_t, path: *const c_char) -> *mut weft_dir_t {
    pointer_call("weft_opendir", || {
        // SAFETY: the caller's promises.
        let (client, path) = unsafe { (args::shared(client, "client")?, args::string(path, "path")?) };
        let attr = client.client.resolve(path)?;
        if attr.kind != FileKind::Directory {
            return Err(Failure::new(libc::ENOTDIR, format!("{path}: not a directory")));
        }
        let mut dir = weft_dir_t {
            client: client.client.clone(),
            path: path.to_owned(),
            inode: attr.inode,
            page: VecDeque::new(),
            after: weft_client::Name::default(),
            more: true,
        };
        dir.fetch_page()?;
        Ok(live::give(dir))
    })
}

/// Stores the next entry of the directory in `entry`; returns 1 when it did, 0 at the
/// end, -errno on failure. Entries come in name order, without "." and "..". Entries
/// added or removed while reading may or may not be seen; none is seen twice.
///
/// # Safety
/// `dir` is NULL or a live directory handle used by no other thread meanwhile; `entry`
/// is NULL or points to a `weft_dirent_t`.
#[no_mangle]
pub unsafe extern "C" fn weft_readdir(dir: *mut weft_dir_t, entry: *mut weft_dirent_t) -> c_int {
    int_call("weft_readdir", || {
        // SAFETY: the caller's promises.
        let (dir, entry) = unsafe { (args::handle(dir, "dir")?, args::output(entry, "entry")?) };
        if dir.page.is_empty() && dir.more {
            dir.fetch_page()?;
        }
        let Some(next) = dir.page.pop_front() else {
            return Ok(0);
        };
        *entry = weft_dirent_t::new(next.inode.0, next.kind, next.name.as_bytes())?;
        Ok(1)
    })
}

/// Sets how many entries directory handles ask for per page (for every handle of the
/// process), so that tests read directories of many pages without making thousands of
/// files. Not part of the C ABI.
#[doc(hidden)]
pub fn set_page_entries(entries: u32) {
    PAGE_ENTRIES.store(entries.clamp(1, DIR_PAGE_ENTRIES), Ordering::Relaxed);
}

/// Closes a directory handle. Returns 0, -EINVAL for NULL, or -EBADF for a handle
/// already closed.
///
/// # Safety
/// `dir` is NULL or a pointer from `weft_opendir`; no other thread is in a call on it.
/// It is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn weft_closedir(dir: *mut weft_dir_t) -> c_int {
    int_call("weft_closedir", || {
        drop(args::closing(dir, "dir")?);
        Ok(0)
    })
}

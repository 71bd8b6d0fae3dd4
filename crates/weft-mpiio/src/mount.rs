//! One path for POSIX and MPI-IO (as on Lustre): an MPI-IO name that is a path inside
//! a Weft mount (type `fuse.weft` in /proc/self/mountinfo) is served natively, exactly
//! as the same file named `weft:/...`, so libraries that also make POSIX calls on the
//! path (PnetCDF checks a file's header with open(2)) work unmodified and see the same
//! bytes through the mount.
//!
//! Finding the mounts and their clusters is `weft_interpose::mount` (shared with
//! libweft_posix.so). The process's one client serves the file when it reaches the
//! mount's metadata manager; a mount of another cluster than the environment's, or one
//! whose cluster cannot be reached, is left to the MPI library's own MPI-IO (POSIX
//! calls through the mount), with a line on stderr.

use std::ffi::{c_char, c_int, CStr};

pub use weft_interpose::mount::{
    cluster_of, connect, resolve, same_manager, weft_mountpoints, weft_mounts, MountCluster, Mounted,
    WeftMount, CLUSTER_XATTR,
};

/// Called by the C side for every name that is not `weft:`: 1 when the file is inside
/// a Weft mount whose cluster this process serves natively.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn weft_mpiio_in_mount(name: *const c_char) -> c_int {
    if name.is_null() {
        return 0;
    }
    // SAFETY: the caller's contract (MPI passes a NUL-terminated file name).
    let name = unsafe { CStr::from_ptr(name) };
    let Ok(name) = name.to_str() else {
        return 0;
    };
    std::panic::catch_unwind(|| claim(name)).unwrap_or(false) as c_int
}

/// Whether `name` is served natively (see the module documentation).
fn claim(name: &str) -> bool {
    let Some(mounted) = resolve(name) else {
        return false;
    };
    let served = cluster_of(&mounted.mountpoint)
        .and_then(|cluster| crate::cluster::client_for_mount(&cluster).map_err(|e| e.message));
    match served {
        Ok(_) => true,
        Err(why) => {
            eprintln!(
                "weft-mpiio: {name} is in the Weft mount {}, but {why}; the MPI library's own MPI-IO \
                 serves it through the mount",
                mounted.mountpoint.display()
            );
            false
        }
    }
}

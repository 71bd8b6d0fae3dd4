//! The library's part in the process's life, above the modules that do the work (which
//! call up to none of this): before a fork the buffered writes are sent and the O_PATH
//! descriptors made real ones of the mount (the child serves nothing itself); at the
//! process's exit the buffered writes are sent and the counters written
//! (`WEFT_POSIX_STATS`, see [`crate::stats`]).

use std::io::Write;

/// Before a fork, in the parent (registered with pthread_atfork by `crate::guard`).
fn before_fork() {
    // The child gets the parent's descriptors: what the parent wrote is on the io
    // servers first (the child reads through the mount).
    crate::flush::flush_all();
    // The child serves nothing itself: its descriptors (shared with the parent, offsets
    // and all) must be real ones of the mount.
    crate::upgrade::upgrade_all(false);
}

extern "C" fn at_load() {
    crate::guard::on_fork(before_fork);
}

/// Run at the library's loading, before the program's main.
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

extern "C" fn at_exit() {
    // What the process buffered and never closed goes out as it exits (a local file's
    // page cache outlives its process too).
    crate::flush::flush_all();
    let Some(path) = std::env::var_os("WEFT_POSIX_STATS") else {
        return;
    };
    crate::guard::enter(|| {
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&path) {
            // One write of the whole line: lines of processes ending together do not mix.
            let _ = f.write_all(crate::stats::line().as_bytes());
        }
    });
}

/// Run at the library's unloading (process exit, after atexit handlers).
#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;

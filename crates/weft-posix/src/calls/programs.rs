//! Programs and streams that reach the files without the library: exec, spawn,
//! system, popen (buffered writes sent and O_PATH descriptors made real first) and
//! vfork (made a fork).

use std::ffi::{c_char, c_int, c_void};

use weft_interpose::{fail, real};

macro_rules! flushing {
    ($inherited:literal, $name:ident, $sym:literal, ($($arg:ident: $ty:ty),*) -> $ret:ty, $none:expr) => {
        /// Every buffered write is sent first: what runs next (a new program, a child,
        /// stdio's internal calls) reads the files through the kernel. The O_PATH
        /// descriptors the new program gets become real ones of the mount (a spawn's
        /// file actions may dup any descriptor: there all of them).
        ///
        /// # Safety
        /// The libc function's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            crate::flush::flush_all();
            crate::upgrade::upgrade_all($inherited);
            match real!($sym, unsafe extern "C" fn($($ty),*) -> $ret) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f($($arg),*) },
                None => {
                    fail(libc::ENOSYS);
                    $none
                }
            }
        }
    };
}
type Argv = *const *const c_char;
flushing!(true, execve, "execve", (path: *const c_char, argv: Argv, envp: Argv) -> c_int, -1);
flushing!(true, execv, "execv", (path: *const c_char, argv: Argv) -> c_int, -1);
flushing!(true, execvp, "execvp", (file: *const c_char, argv: Argv) -> c_int, -1);
flushing!(true, execvpe, "execvpe", (file: *const c_char, argv: Argv, envp: Argv) -> c_int, -1);
flushing!(true, fexecve, "fexecve", (fd: c_int, argv: Argv, envp: Argv) -> c_int, -1);
flushing!(
    false,
    posix_spawn,
    "posix_spawn",
    (pid: *mut libc::pid_t, path: *const c_char, actions: *const c_void, attr: *const c_void, argv: Argv, envp: Argv) -> c_int,
    libc::ENOSYS
);
flushing!(
    false,
    posix_spawnp,
    "posix_spawnp",
    (pid: *mut libc::pid_t, file: *const c_char, actions: *const c_void, attr: *const c_void, argv: Argv, envp: Argv) -> c_int,
    libc::ENOSYS
);
flushing!(true, system, "system", (command: *const c_char) -> c_int, -1);
flushing!(true, popen, "popen", (command: *const c_char, mode: *const c_char) -> *mut libc::FILE, std::ptr::null_mut());

/// vfork, made a fork: a vfork child runs in its parent's memory (with its own copy of
/// the descriptors) until it execs, where nothing of the library can run safely, and a
/// wrapper cannot return twice on one stack as vfork does. A program using vfork as
/// POSIX allows (exec or _exit in the child) cannot tell the difference; fork's handlers
/// send the buffered writes first and turn the library off in the child.
///
/// # Safety
/// vfork(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    match real!("fork", unsafe extern "C" fn() -> libc::pid_t) {
        // SAFETY: no arguments.
        Some(f) => unsafe { f() },
        None => fail(libc::ENOSYS),
    }
}

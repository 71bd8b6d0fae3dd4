//! When the library acts at all: not in a forked child, not in a second copy of the
//! library, and not inside its own work (the native client's own system calls pass
//! straight to libc).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

thread_local! {
    /// This thread is inside the library's own work.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// 0: not decided yet; 1: active; 2: passing everything through.
static STATE: AtomicU8 = AtomicU8::new(0);
/// Set in a forked child: the parent's client is not usable there.
static FORKED: AtomicBool = AtomicBool::new(false);
/// The process the library serves. A child sharing its parent's memory (clone with
/// CLONE_VM) until it execs must not change the parent's table ([`own_process`]).
static PID: AtomicI32 = AtomicI32::new(0);

/// The symbol a second copy of the library finds to know it is not the first.
#[no_mangle]
pub static weft_posix_loaded: u8 = 1;

/// The work before a fork, given by the module that knows it ([`on_fork`]): this module
/// is below every other one and calls none of them.
static BEFORE_FORK: OnceLock<fn()> = OnceLock::new();

/// Sets what runs in the parent before every fork (`crate::lifecycle` gives it as the
/// library loads; the handler is registered with pthread_atfork when the library first
/// decides to serve, and reads it at each fork).
pub fn on_fork(prepare: fn()) {
    let _ = BEFORE_FORK.set(prepare);
}

extern "C" fn before_fork() {
    if let Some(prepare) = BEFORE_FORK.get() {
        prepare();
    }
}

extern "C" fn in_child() {
    FORKED.store(true, Ordering::SeqCst);
}

fn decide() -> bool {
    // The first copy of the library loaded is the one the dynamic linker binds every
    // call to; any other copy passes through (it would otherwise serve descriptors the
    // first one serves too).
    // SAFETY: a NUL-terminated symbol name; RTLD_DEFAULT finds the first definition.
    let first = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"weft_posix_loaded".as_ptr()) };
    // Which object each address is in: the symbol's own address would be bound to the
    // first copy in every copy (symbol interposition), a private function's is not.
    let base = |addr: *const libc::c_void| {
        // SAFETY: a zeroed Dl_info is a valid buffer; dladdr only reads the address.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let found = unsafe { libc::dladdr(addr, &mut info) } != 0;
        found.then_some(info.dli_fbase)
    };
    let mine = base(decide as *const libc::c_void);
    let active = first.is_null() || mine.is_none() || base(first) == mine;
    if active {
        // SAFETY: registers a plain function for the child side of fork.
        unsafe { libc::pthread_atfork(Some(before_fork), None, Some(in_child)) };
    }
    // SAFETY: getpid has no preconditions.
    PID.store(unsafe { libc::getpid() }, Ordering::SeqCst);
    STATE.store(if active { 1 } else { 2 }, Ordering::SeqCst);
    active
}

/// Whether the library serves anything in this process now.
pub fn active() -> bool {
    if FORKED.load(Ordering::Relaxed) {
        return false;
    }
    match STATE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => decide(),
    }
}

/// Whether this is the process the library started in: not a child made by clone with
/// CLONE_VM outside the library (vfork itself is made a fork, see `calls::programs::vfork`), which
/// shares the parent's memory and must not change its table. One system call: checked
/// where the table changes (close, close_range, dup2), not on every served call.
pub fn own_process() -> bool {
    // SAFETY: getpid has no preconditions.
    PID.load(Ordering::Relaxed) == unsafe { libc::getpid() }
}

/// Takes one of the library's locks, also when a thread panicked holding it (poisoning
/// is ignored).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `work` as the library's own: the calls it makes pass straight to libc. `None`
/// when the thread is already inside the library (a call the library made itself).
pub fn enter<T>(work: impl FnOnce() -> T) -> Option<T> {
    if BUSY.with(|b| b.replace(true)) {
        return None;
    }
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            BUSY.with(|b| b.set(false));
        }
    }
    let _leave = Leave;
    Some(work())
}

/// Runs `work` as the library's own, whether or not the thread is inside it already.
pub fn within<T>(work: impl FnOnce() -> T) -> T {
    if busy() {
        return work();
    }
    let mut work = Some(work);
    enter(|| (work.take().expect("once"))()).expect("not busy")
}

/// Whether this thread is inside the library's own work.
pub fn busy() -> bool {
    BUSY.with(|b| b.get())
}

/// Moves the library's descriptor `fd` to a number near the top of the process's limit
/// (close-on-exec), where programs choosing numbers for dup2 do not go; `fd` itself when
/// no such number is free.
pub fn move_high(fd: libc::c_int) -> libc::c_int {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit buffer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return fd;
    }
    let soft = limit.rlim_cur.min(1 << 20) as libc::c_int;
    let base = (soft - 256).max(soft / 2);
    if base <= fd {
        return fd;
    }
    let saved = weft_interpose::errno();
    // SAFETY: plain descriptor calls on our own descriptor.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, base) };
    if high < 0 {
        weft_interpose::set_errno(saved);
        return fd;
    }
    // SAFETY: as above.
    unsafe { libc::close(fd) };
    weft_interpose::set_errno(saved);
    high
}

/// Every signal blocked on this thread while it lives (the mask restored at drop). A
/// served call is several steps under the library's locks (the offset taken, data
/// moved, the offset set; a buffer changed): a signal handler entering the library in
/// between would wait forever for a lock its own thread holds, or land between the
/// steps. Blocked, the handler runs after the call, as it runs after a system call.
pub struct Quiet(libc::sigset_t);

impl Quiet {
    pub fn new() -> Quiet {
        // SAFETY: sigset_t buffers filled by sigfillset / pthread_sigmask.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            Quiet(old)
        }
    }
}

impl Default for Quiet {
    fn default() -> Quiet {
        Quiet::new()
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        // SAFETY: the mask saved at creation.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

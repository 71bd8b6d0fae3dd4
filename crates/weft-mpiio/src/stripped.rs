//! POSIX calls on the stripped names of `weft:` files: a program given `weft:/d/x.nc`
//! never reads, truncates or removes the local file `/d/x.nc`, whatever library sits
//! between it and MPI-IO.
//!
//! Libraries above MPI-IO strip a ROMIO-style prefix (`lustre:`, `ufs:`) and make their
//! own POSIX calls on the rest, which is the same file for ROMIO's prefixes. PnetCDF
//! 1.12 does: `ncmpi_create` calls `access(rest, F_OK)` on rank 0 and, under
//! NC_CLOBBER, `truncate(rest, 0)` when it exists, before `MPI_File_open`;
//! `ncmpi_open` and `ncmpi_inq_file_format` read the signature with
//! `open(rest, O_RDONLY)`, `read`, `lseek` and `close` before `MPI_File_open`. For
//! `weft:` the rest names a local file, a different one.
//!
//! So the library ties the rest of a `weft:` name to its Weft file:
//! - for the life of the process, every `weft:` argument of its command line (read by
//!   an ELF constructor, before `main`);
//! - while a `weft:` file is open through MPI-IO (`opened` / `closed`);
//! - during a call of PnetCDF's `ncmpi_create`, `ncmpi_open` and
//!   `ncmpi_inq_file_format` with a `weft:` name (those functions are interposed here,
//!   the real ones found with `dlsym(RTLD_NEXT)`).
//!
//! and interposes the libc calls such libraries make: on a tied name, `access`,
//! `stat`/`lstat`, `truncate` and `unlink`/`remove` act on the Weft file, and `open` for
//! reading gives a descriptor whose `read`, `pread`, `lseek`, `fstat` and `close` are
//! served from the Weft file (the descriptor itself is an `O_PATH` one of `/`, so
//! reading, writing or mapping it by another call fails with EBADF rather than reach a
//! local file). Anything else on a tied name (`open` for
//! writing or creating, `fopen`) is refused with ENOTSUP and a line on stderr saying to
//! use the mount path. Names not tied pass straight to libc: the check is one atomic
//! load while nothing is tied, and a comparison of the exact string otherwise.
//!
//! Self-contained (the Weft side is `crate::file::client` and `weft_path`), for reuse
//! by a full POSIX interposer.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use weft_client::{ClientError, File, OpenOptions};
use weft_proto::FileKind;

/// At most this many names are tied at once (command line, open files, calls in
/// progress); a name past it is refused a tie, with a line on stderr.
const TIES_MAX: usize = 4096;
/// At most this many descriptors served from Weft at once.
const SERVED_FDS_MAX: usize = 1024;

struct Tie {
    /// The name as a library strips it: what follows `weft:`.
    stripped: Vec<u8>,
    /// The Weft path.
    weft: String,
    /// How many holders (command line, open handles, calls) tie it.
    holds: usize,
}

static TIES: Mutex<Vec<Tie>> = Mutex::new(Vec::new());
/// Ties held: 0 lets every path call through with one load.
static TIED: AtomicUsize = AtomicUsize::new(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ties the stripped rest of `name` (a `weft:` name; others are ignored) to its Weft
/// file until `untie` of the same name.
pub fn tie(name: &str) {
    let Some(rest) = name.strip_prefix("weft:").filter(|r| !r.is_empty()) else {
        return;
    };
    let Ok(weft) = crate::file::weft_path(name) else {
        return;
    };
    let mut ties = lock(&TIES);
    if let Some(t) = ties.iter_mut().find(|t| t.stripped == rest.as_bytes()) {
        t.holds += 1;
    } else if ties.len() >= TIES_MAX {
        eprintln!(
            "weft-mpiio: {TIES_MAX} weft: names tied already; {rest} is not protected from local POSIX calls"
        );
        return;
    } else {
        ties.push(Tie {
            stripped: rest.as_bytes().to_vec(),
            weft,
            holds: 1,
        });
    }
    TIED.fetch_add(1, Ordering::SeqCst);
}

/// Drops one hold of `name`'s tie (made by `tie`).
pub fn untie(name: &str) {
    let Some(rest) = name.strip_prefix("weft:") else {
        return;
    };
    let mut ties = lock(&TIES);
    if let Some(i) = ties.iter().position(|t| t.stripped == rest.as_bytes()) {
        ties[i].holds -= 1;
        if ties[i].holds == 0 {
            ties.swap_remove(i);
        }
        TIED.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A tie for the length of a call.
struct Held(Option<String>);

impl Held {
    /// # Safety
    /// `name` is null or a C string.
    unsafe fn new(name: *const c_char) -> Held {
        // SAFETY: the caller's contract.
        let name = unsafe { c_text(name) }.filter(|n| n.starts_with("weft:"));
        if let Some(n) = name {
            tie(n);
        }
        Held(name.map(str::to_owned))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(n) = &self.0 {
            untie(n);
        }
    }
}

/// The MPI file handles open under a `weft:` name, with their names.
static OPEN: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());

/// `fh` was opened through MPI-IO as `name`: its stripped name is tied while it is open.
pub fn opened(fh: usize, name: &str) {
    if name.starts_with("weft:") {
        tie(name);
        lock(&OPEN).push((fh, name.to_owned()));
    }
}

/// `fh` is closed.
pub fn closed(fh: usize) {
    let name = {
        let mut open = lock(&OPEN);
        open.iter()
            .position(|(h, _)| *h == fh)
            .map(|i| open.swap_remove(i).1)
    };
    if let Some(n) = name {
        untie(&n);
    }
}

/// The Weft path tied to `path`, if any.
///
/// # Safety
/// `path` is null or a C string.
unsafe fn tied(path: *const c_char) -> Option<String> {
    if TIED.load(Ordering::SeqCst) == 0 || path.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    lock(&TIES)
        .iter()
        .find(|t| t.stripped == bytes)
        .map(|t| t.weft.clone())
}

/// # Safety
/// `p` is null or a C string.
unsafe fn c_text<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

use weft_interpose::{fail, real, set_errno};

/// Refuses a call on a tied name, loudly.
fn refuse(call: &str, path: &str, weft: &str) -> c_int {
    eprintln!(
        "weft-mpiio: {call} of {path} refused: {path} is weft:{path} with its prefix stripped (by a \
         library above MPI-IO), and this call cannot be served from Weft; the local file {path} is left \
         alone. Use the file's path in a Weft mount instead of weft:{path} (Weft path {weft})."
    );
    fail(libc::ENOTSUP)
}

fn client_errno(call: &str, path: &str, e: ClientError) -> c_int {
    let errno = e.errno();
    if errno != libc::ENOENT {
        eprintln!("weft-mpiio: {call}({path}) on the Weft file: {e}");
    }
    fail(errno)
}

fn client(call: &str, path: &str) -> Option<weft_client::Client> {
    match crate::file::client() {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("weft-mpiio: {call}({path}) on a weft: file's stripped name: {e}");
            set_errno(libc::EIO);
            None
        }
    }
}

fn access_weft(path: &str, weft: &str, mode: c_int) -> c_int {
    let Some(c) = client("access", path) else {
        return -1;
    };
    let attr = match c.stat(weft) {
        Ok(a) => a,
        Err(e) => return client_errno("access", path, e),
    };
    if mode == libc::F_OK {
        return 0;
    }
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let bits = if uid == 0 {
        // root: read and write always; execute when any x bit is set (or a directory).
        let x = attr.mode & 0o111 != 0 || attr.kind == FileKind::Directory;
        4 | 2 | if x { 1 } else { 0 }
    } else if attr.uid == uid {
        (attr.mode >> 6) & 7
    } else if attr.gid == gid {
        (attr.mode >> 3) & 7
    } else {
        attr.mode & 7
    };
    let want = ((mode & libc::R_OK != 0) as u32) << 2
        | ((mode & libc::W_OK != 0) as u32) << 1
        | (mode & libc::X_OK != 0) as u32;
    if bits & want == want {
        0
    } else {
        fail(libc::EACCES)
    }
}

fn truncate_weft(path: &str, weft: &str, len: i64) -> c_int {
    let Ok(len) = u64::try_from(len) else {
        return fail(libc::EINVAL);
    };
    let Some(c) = client("truncate", path) else {
        return -1;
    };
    let opened = c.open(
        weft,
        &OpenOptions {
            write: true,
            ..Default::default()
        },
    );
    let r = opened.and_then(|f| {
        f.truncate(len)?;
        f.close()
    });
    match r {
        Ok(()) => 0,
        Err(e) => client_errno("truncate", path, e),
    }
}

fn unlink_weft(call: &str, path: &str, weft: &str) -> c_int {
    let Some(c) = client(call, path) else { return -1 };
    match c.unlink(weft) {
        Ok(()) => 0,
        Err(e) => client_errno(call, path, e),
    }
}

/// A descriptor served from a Weft file.
struct Served {
    file: File,
    position: u64,
}

static SERVED: Mutex<Option<HashMap<c_int, Arc<Mutex<Served>>>>> = Mutex::new(None);
/// Descriptors served: 0 lets every descriptor call through with one load.
static SERVING: AtomicUsize = AtomicUsize::new(0);

fn served(fd: c_int) -> Option<Arc<Mutex<Served>>> {
    if SERVING.load(Ordering::SeqCst) == 0 {
        return None;
    }
    let mut table = lock(&SERVED);
    let map = table.as_mut()?;
    map.get(&fd)?;
    // Still our O_PATH descriptor? One closed by a call not interposed (glibc's own
    // close, close_range, dup2 over it) has lost its number to another file, which must
    // not be served from Weft.
    // SAFETY: F_GETFL on any descriptor number.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || flags & libc::O_PATH == 0 {
        map.remove(&fd);
        SERVING.fetch_sub(1, Ordering::SeqCst);
        return None;
    }
    map.get(&fd).cloned()
}

fn open_weft(path: &str, weft: &str, flags: c_int) -> c_int {
    let reading = flags & libc::O_ACCMODE == libc::O_RDONLY
        && flags & (libc::O_CREAT | libc::O_TRUNC | libc::O_DIRECTORY | libc::O_PATH) == 0;
    if !reading {
        return refuse("open for writing", path, weft);
    }
    if SERVING.load(Ordering::SeqCst) >= SERVED_FDS_MAX {
        eprintln!("weft-mpiio: open({path}): {SERVED_FDS_MAX} descriptors served from Weft already");
        return fail(libc::EMFILE);
    }
    let Some(c) = client("open", path) else { return -1 };
    let file = match c.open(weft, &OpenOptions::default()) {
        Ok(f) => f,
        Err(e) => return client_errno("open", path, e),
    };
    // The descriptor number: an O_PATH descriptor of "/", which every call not served
    // here refuses (EBADF) instead of reaching a local file.
    let Some(real_open) = real!("open", unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int) else {
        return fail(libc::ENOSYS);
    };
    let cloexec = flags & libc::O_CLOEXEC;
    // SAFETY: a constant C string.
    let fd = unsafe { real_open(c"/".as_ptr(), libc::O_PATH | cloexec) };
    if fd < 0 {
        return -1;
    }
    lock(&SERVED)
        .get_or_insert_with(HashMap::new)
        .insert(fd, Arc::new(Mutex::new(Served { file, position: 0 })));
    SERVING.fetch_add(1, Ordering::SeqCst);
    fd
}

fn read_served(s: &Mutex<Served>, buf: *mut c_void, count: usize, at: Option<i64>) -> isize {
    let mut s = lock(s);
    let offset = match at {
        Some(o) => match u64::try_from(o) {
            Ok(o) => o,
            Err(_) => return fail(libc::EINVAL) as isize,
        },
        None => s.position,
    };
    if count == 0 {
        return 0;
    }
    // SAFETY: the caller's buffer of `count` bytes.
    let bytes = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), count) };
    match s.file.read_at(offset, bytes) {
        Ok(n) => {
            if at.is_none() {
                s.position = offset + n as u64;
            }
            n as isize
        }
        Err(e) => {
            eprintln!("weft-mpiio: read of a weft: file's stripped name: {e}");
            fail(e.errno()) as isize
        }
    }
}

fn seek_served(s: &Mutex<Served>, offset: i64, whence: c_int) -> i64 {
    let mut s = lock(s);
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => s.position as i64,
        libc::SEEK_END => match s.file.size() {
            Ok(size) => size as i64,
            Err(e) => return fail(e.errno()) as i64,
        },
        _ => return fail(libc::EINVAL) as i64,
    };
    match base.checked_add(offset).filter(|p| *p >= 0) {
        Some(p) => {
            s.position = p as u64;
            p
        }
        None => fail(libc::EINVAL) as i64,
    }
}

/// `attr` as stat(2) reports it.
fn fill_stat(attr: &weft_proto::Attr, out: *mut libc::stat) {
    let kind = match attr.kind {
        FileKind::File => libc::S_IFREG,
        FileKind::Directory => libc::S_IFDIR,
        FileKind::Symlink => libc::S_IFLNK,
        FileKind::Fifo => libc::S_IFIFO,
        FileKind::CharDevice => libc::S_IFCHR,
        FileKind::BlockDevice => libc::S_IFBLK,
        FileKind::Socket => libc::S_IFSOCK,
    };
    // SAFETY: all-zero is a valid struct stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_ino = attr.inode.0;
    st.st_mode = kind | (attr.mode & 0o7777);
    st.st_nlink = attr.nlink.into();
    st.st_uid = attr.uid;
    st.st_gid = attr.gid;
    st.st_rdev = attr.rdev;
    st.st_size = attr.size as i64;
    st.st_blocks = attr.blocks as i64;
    st.st_blksize = attr.layout.as_ref().map_or(4096, |l| l.stripe_size_bytes as i64);
    st.st_atime = attr.atime.secs;
    st.st_atime_nsec = attr.atime.nanos.into();
    st.st_mtime = attr.mtime.secs;
    st.st_mtime_nsec = attr.mtime.nanos.into();
    st.st_ctime = attr.ctime.secs;
    st.st_ctime_nsec = attr.ctime.nanos.into();
    // SAFETY: the caller's buffer for one struct stat.
    unsafe { out.write(st) };
}

fn stat_weft(call: &str, path: &str, weft: &str, out: *mut libc::stat) -> c_int {
    let Some(c) = client(call, path) else { return -1 };
    match c.stat(weft) {
        Ok(attr) => {
            fill_stat(&attr, out);
            0
        }
        Err(e) => client_errno(call, path, e),
    }
}

fn fstat_served(s: &Mutex<Served>, out: *mut libc::stat) -> c_int {
    let s = lock(s);
    let mut attr = s.file.attr().clone();
    match s.file.size() {
        Ok(size) => attr.size = size,
        Err(e) => return fail(e.errno()),
    }
    fill_stat(&attr, out);
    0
}

// ---- The interposed libc calls. ----

/// # Safety
/// access(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: access(2)'s contract.
    if let Some(weft) = unsafe { tied(path) } {
        // SAFETY: tied paths are C strings.
        return access_weft(&unsafe { CStr::from_ptr(path) }.to_string_lossy(), &weft, mode);
    }
    match real!("access", unsafe extern "C" fn(*const c_char, c_int) -> c_int) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(path, mode) },
        None => fail(libc::ENOSYS),
    }
}

macro_rules! truncate_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// truncate(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, len: i64) -> c_int {
            // SAFETY: truncate(2)'s contract.
            if let Some(weft) = unsafe { tied(path) } {
                // SAFETY: tied paths are C strings.
                return truncate_weft(
                    &unsafe { CStr::from_ptr(path) }.to_string_lossy(),
                    &weft,
                    len,
                );
            }
            match real!($sym, unsafe extern "C" fn(*const c_char, i64) -> c_int) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(path, len) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
truncate_like!(truncate, "truncate");
truncate_like!(truncate64, "truncate64");

macro_rules! unlink_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// unlink(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char) -> c_int {
            // SAFETY: unlink(2)'s contract.
            if let Some(weft) = unsafe { tied(path) } {
                // SAFETY: tied paths are C strings.
                return unlink_weft(
                    $sym,
                    &unsafe { CStr::from_ptr(path) }.to_string_lossy(),
                    &weft,
                );
            }
            match real!($sym, unsafe extern "C" fn(*const c_char) -> c_int) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(path) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
unlink_like!(unlink, "unlink");
unlink_like!(remove, "remove");

// open(2) is variadic; Rust cannot define a variadic function, so the mode is taken as
// a third fixed argument: on x86-64 and AArch64 Linux a variadic integer argument is
// passed exactly as a fixed one (and read only with O_CREAT / O_TMPFILE, as libc does).
macro_rules! open_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// open(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
            // SAFETY: open(2)'s contract.
            if let Some(weft) = unsafe { tied(path) } {
                // SAFETY: tied paths are C strings.
                return open_weft(
                    &unsafe { CStr::from_ptr(path) }.to_string_lossy(),
                    &weft,
                    flags,
                );
            }
            match real!(
                $sym,
                unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(path, flags, mode as libc::c_uint) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
open_like!(open, "open");
open_like!(open64, "open64");

macro_rules! fopen_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// fopen(3)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
            // SAFETY: fopen(3)'s contract.
            if let Some(weft) = unsafe { tied(path) } {
                // SAFETY: tied paths are C strings.
                refuse(
                    "fopen",
                    &unsafe { CStr::from_ptr(path) }.to_string_lossy(),
                    &weft,
                );
                return std::ptr::null_mut();
            }
            match real!(
                $sym,
                unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(path, mode) },
                None => {
                    set_errno(libc::ENOSYS);
                    std::ptr::null_mut()
                }
            }
        }
    };
}
fopen_like!(fopen, "fopen");
fopen_like!(fopen64, "fopen64");

/// # Safety
/// read(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize {
    if let Some(s) = served(fd) {
        return read_served(&s, buf, count, None);
    }
    match real!("read", unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(fd, buf, count) },
        None => fail(libc::ENOSYS) as isize,
    }
}

macro_rules! pread_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// pread(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
            if let Some(s) = served(fd) {
                return read_served(&s, buf, count, Some(offset));
            }
            match real!(
                $sym,
                unsafe extern "C" fn(c_int, *mut c_void, usize, i64) -> isize
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd, buf, count, offset) },
                None => fail(libc::ENOSYS) as isize,
            }
        }
    };
}
pread_like!(pread, "pread");
pread_like!(pread64, "pread64");

macro_rules! lseek_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// lseek(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, offset: i64, whence: c_int) -> i64 {
            if let Some(s) = served(fd) {
                return seek_served(&s, offset, whence);
            }
            match real!($sym, unsafe extern "C" fn(c_int, i64, c_int) -> i64) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd, offset, whence) },
                None => fail(libc::ENOSYS) as i64,
            }
        }
    };
}
lseek_like!(lseek, "lseek");
lseek_like!(lseek64, "lseek64");

/// # Safety
/// close(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if SERVING.load(Ordering::SeqCst) != 0 {
        let gone = lock(&SERVED).as_mut().and_then(|m| m.remove(&fd));
        if gone.is_some() {
            SERVING.fetch_sub(1, Ordering::SeqCst);
        }
        // Dropped here, after the lock: a read-only handle needs no close call.
        drop(gone);
    }
    match real!("close", unsafe extern "C" fn(c_int) -> c_int) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(fd) },
        None => fail(libc::ENOSYS),
    }
}

// glibc 2.33 and later export stat, lstat and fstat (and their 64 names, the same
// struct on 64-bit Linux) as functions; programs built against an older glibc call
// __xstat and friends, which are not interposed.
macro_rules! stat_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// stat(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, out: *mut libc::stat) -> c_int {
            // SAFETY: stat(2)'s contract.
            if let Some(weft) = unsafe { tied(path) } {
                // SAFETY: tied paths are C strings.
                return stat_weft(
                    $sym,
                    &unsafe { CStr::from_ptr(path) }.to_string_lossy(),
                    &weft,
                    out,
                );
            }
            match real!(
                $sym,
                unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int
            ) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(path, out) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
stat_like!(stat, "stat");
stat_like!(stat64, "stat64");
stat_like!(lstat, "lstat");
stat_like!(lstat64, "lstat64");

macro_rules! fstat_like {
    ($name:ident, $sym:literal) => {
        /// # Safety
        /// fstat(2)'s contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, out: *mut libc::stat) -> c_int {
            if let Some(s) = served(fd) {
                return fstat_served(&s, out);
            }
            match real!($sym, unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int) {
                // SAFETY: the same arguments.
                Some(f) => unsafe { f(fd, out) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}
fstat_like!(fstat, "fstat");
fstat_like!(fstat64, "fstat64");

// ---- PnetCDF's calls that strip the prefix, interposed to tie the name meanwhile. ----

type Handle = usize;
/// PnetCDF's NC_EFILE ("Unknown error in file operation").
const NC_EFILE: c_int = -204;

fn no_pnetcdf(name: &str) -> c_int {
    eprintln!("weft-mpiio: {name}: PnetCDF's own {name} not found after libweft_mpiio (dlsym RTLD_NEXT)");
    NC_EFILE
}

/// # Safety
/// PnetCDF's contract for ncmpi_create.
#[no_mangle]
pub unsafe extern "C" fn ncmpi_create(
    comm: Handle,
    path: *const c_char,
    cmode: c_int,
    info: Handle,
    ncidp: *mut c_int,
) -> c_int {
    // SAFETY: PnetCDF's contract.
    let _held = unsafe { Held::new(path) };
    match real!(
        "ncmpi_create",
        unsafe extern "C" fn(Handle, *const c_char, c_int, Handle, *mut c_int) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(comm, path, cmode, info, ncidp) },
        None => no_pnetcdf("ncmpi_create"),
    }
}

/// # Safety
/// PnetCDF's contract for ncmpi_open.
#[no_mangle]
pub unsafe extern "C" fn ncmpi_open(
    comm: Handle,
    path: *const c_char,
    omode: c_int,
    info: Handle,
    ncidp: *mut c_int,
) -> c_int {
    // SAFETY: PnetCDF's contract.
    let _held = unsafe { Held::new(path) };
    match real!(
        "ncmpi_open",
        unsafe extern "C" fn(Handle, *const c_char, c_int, Handle, *mut c_int) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(comm, path, omode, info, ncidp) },
        None => no_pnetcdf("ncmpi_open"),
    }
}

/// # Safety
/// PnetCDF's contract for ncmpi_inq_file_format.
#[no_mangle]
pub unsafe extern "C" fn ncmpi_inq_file_format(path: *const c_char, formatp: *mut c_int) -> c_int {
    // SAFETY: PnetCDF's contract.
    let _held = unsafe { Held::new(path) };
    match real!(
        "ncmpi_inq_file_format",
        unsafe extern "C" fn(*const c_char, *mut c_int) -> c_int
    ) {
        // SAFETY: the same arguments.
        Some(f) => unsafe { f(path, formatp) },
        None => no_pnetcdf("ncmpi_inq_file_format"),
    }
}

// ---- The command line's weft: names, tied before main. ----

/// glibc calls the functions of `.init_array` with (argc, argv, envp).
extern "C" fn tie_command_line(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) {
    if argv.is_null() {
        return;
    }
    for i in 0..argc.max(0) as usize {
        // SAFETY: argv has argc entries, each a C string (or null).
        let arg = unsafe { *argv.add(i) };
        // SAFETY: as above.
        if let Some(a) = unsafe { c_text(arg) } {
            if a.starts_with("weft:") {
                tie(a);
            }
        }
    }
}

#[used]
#[link_section = ".init_array"]
static TIE_COMMAND_LINE: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = tie_command_line;

//! Taking a descriptor the kernel opened into the table (when it is a regular file of a
//! Weft mount this process's client reaches), and the data calls on served descriptors.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weft_client::{Client, ClientError};
use weft_interpose::mount::{self, WeftMount};
use weft_interpose::{fail, real, set_errno};

use crate::flush::{flush, flush_inode, settle};
use crate::guard::lock;
use crate::kernel::{cached_stat, real_fstat, real_lseek, refresh_mount};
use crate::stats;
use crate::table::{self, Entry};

/// The mounts known, and for each the client serving it (`None`: it cannot be served,
/// said once on stderr).
struct Mounts {
    read_at: Option<Instant>,
    list: Vec<(WeftMount, Option<Option<Client>>)>,
    /// The client every served mount shares (one cluster per process).
    client: Option<Client>,
}

static MOUNTS: Mutex<Mounts> = Mutex::new(Mounts {
    read_at: None,
    list: Vec::new(),
    client: None,
});

/// Files opened read-only are served natively from this size on (smaller ones are read
/// through the mount in one request).
pub const READ_ADOPT_MIN: u64 = 1 << 20;

/// How often an unknown FUSE device makes the library read mountinfo again.
const REREAD: Duration = Duration::from_secs(1);

/// The client serving the Weft mount of device `dev`, if it is one and can be served.
fn client_of(dev: u64) -> Option<Client> {
    let mut m = lock(&MOUNTS);
    let known = m.list.iter().any(|(w, _)| w.dev == dev);
    if !known && m.read_at.is_none_or(|t| t.elapsed() >= REREAD) {
        let fresh = crate::guard::within(mount::weft_mounts);
        m.read_at = Some(Instant::now());
        let old = std::mem::take(&mut m.list);
        m.list = fresh
            .into_iter()
            .map(|w| {
                let served = old.iter().find(|(o, _)| *o == w).and_then(|(_, c)| c.clone());
                (w, served)
            })
            .collect();
    }
    let i = m.list.iter().position(|(w, _)| w.dev == dev)?;
    if m.list[i].1.is_none() {
        let existing = m.client.clone();
        let mountpoint = m.list[i].0.mountpoint.clone();
        let made = mount::cluster_of(&mountpoint).and_then(|c| mount::client_for(&c, existing));
        let served = match made {
            Ok(client) => {
                m.client = Some(client.clone());
                Some(client)
            }
            Err(why) => {
                eprintln!(
                    "weft-posix: the Weft mount {} is used through the kernel (no native access): {why}",
                    mountpoint.display()
                );
                None
            }
        };
        m.list[i].1 = Some(served);
    }
    m.list[i].1.clone().flatten()
}

/// The first Weft mount this process serves (for `weft:` names).
pub fn served_mountpoint() -> Option<std::path::PathBuf> {
    let mounts = {
        let mut m = lock(&MOUNTS);
        if m.list.is_empty() && m.read_at.is_none_or(|t| t.elapsed() >= REREAD) {
            m.read_at = Some(Instant::now());
            m.list = crate::guard::within(mount::weft_mounts)
                .into_iter()
                .map(|w| (w, None))
                .collect();
        }
        m.list.iter().map(|(w, _)| w.clone()).collect::<Vec<_>>()
    };
    mounts
        .into_iter()
        .find(|w| client_of(w.dev).is_some())
        .map(|w| w.mountpoint)
}

/// The kernel just opened `fd` with `flags`: serve it natively when it is a regular
/// file of a Weft mount. Errors leave it to the kernel (never fail the open).
pub fn adopt(fd: c_int, flags: c_int) {
    if fd < 0 || flags & libc::O_PATH != 0 || !crate::guard::active() {
        return;
    }
    let _quiet = crate::guard::Quiet::new();
    crate::guard::enter(|| {
        // The attributes the kernel has cached from the open itself (no GETATTR round
        // trip to the mount's daemon): device, inode and type never change, and the
        // size only chooses whether a read-only file is served.
        let Some((client, st)) = weft_file(fd) else { return };
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        // A small file opened for reading costs the mount one read request; opening it
        // natively too would cost more than it saves.
        if !writable && (st.st_size as u64) < READ_ADOPT_MIN {
            return;
        }
        if let Some(entry) = open_native(&client, &st, flags, false, None) {
            if table::insert(fd, Arc::new(entry)) {
                stats::add(&stats::OPENS, 1);
            }
        }
    });
}

/// `fd`'s client and attributes when it is a regular file of a served Weft mount (this
/// process's buffered writes to it sent first, the attributes then read again).
fn weft_file(fd: c_int) -> Option<(Client, libc::stat)> {
    let mut st = cached_stat(fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    // FUSE mounts have anonymous devices (major 0): nothing else is looked up.
    if libc::major(st.st_dev) != 0 {
        return None;
    }
    let client = client_of(st.st_dev)?;
    // This process's buffered writes to the file go out before it is read through
    // this new descriptor (the mount's or the library's).
    if crate::behind::any() && flush_inode(st.st_ino).is_ok_and(|sent| sent) {
        refresh_mount(fd);
        if real_fstat(fd, &mut st) != 0 {
            return None;
        }
    }
    Some((client, st))
}

/// Longest `user.weft.handoff` value taken (a file's attributes with its layout and a
/// capability, a few hundred bytes, and a small file's bytes): the kernel's limit for
/// an extended attribute.
const HANDOFF_BYTES_MAX: usize = 64 << 10;

/// The mount's `user.weft.handoff` of the file open as `fd` (asked through
/// /proc/self/fd, so it is of the very inode the descriptor holds): the kernel checks the
/// process's read permission of the file first; `None` when refused or not a Weft file.
fn handoff(fd: c_int) -> Option<Vec<u8>> {
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).ok()?;
    let mut value = vec![0u8; HANDOFF_BYTES_MAX];
    // SAFETY: a C string, and a buffer of the length passed.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getxattr,
            path.as_ptr(),
            c"user.weft.handoff".as_ptr(),
            value.as_mut_ptr(),
            value.len(),
        )
    };
    let n = usize::try_from(n).ok().filter(|&n| n > 0)?;
    value.truncate(n);
    Some(value)
}

/// The file `st` names opened natively as an entry (`path`: its descriptor is an O_PATH
/// one), from the mount's `handoff` of it if there is one; `None` (said on stderr) when
/// the client cannot open it.
fn open_native(
    client: &Client,
    st: &libc::stat,
    flags: c_int,
    path: bool,
    handoff: Option<&[u8]>,
) -> Option<Entry> {
    let access = flags & libc::O_ACCMODE;
    let writable = access != libc::O_RDONLY;
    let opened = match handoff.map(|h| client.open_handoff(h, &format!("inode {}", st.st_ino), writable)) {
        Some(Ok(file)) if file.inode().0 == st.st_ino => {
            stats::add(&stats::HANDOFFS, 1);
            Ok(file)
        }
        // The mount's inode numbers are Weft's.
        _ => client
            .getattr_sized(weft_client::InodeId(st.st_ino), None)
            .and_then(|attr| client.open_attr(attr, writable)),
    };
    match opened {
        Ok(file) => Some(Entry {
            file,
            readable: access != libc::O_WRONLY,
            writable,
            append: AtomicBool::new(flags & libc::O_APPEND != 0),
            sync: flags & (libc::O_SYNC | libc::O_DSYNC) != 0,
            wrote: AtomicBool::new(false),
            path: AtomicBool::new(path),
            flags: AtomicI32::new(crate::upgrade::status_flags(flags)),
            offset: Mutex::new(0),
            ahead: crate::ahead::Ahead::default(),
            behind: Mutex::new(crate::behind::Behind::default()),
        }),
        Err(e) => {
            stats::add(&stats::ERRORS, 1);
            eprintln!("weft-posix: inode {} left to the mount: {e}", st.st_ino);
            None
        }
    }
}

/// O_PATH opens: 0 not decided yet, 1 on (`WEFT_POSIX_PATH_OPEN=1`), 2 off. Off by
/// default: a program that uses io_uring, libaio or system calls without libc on such
/// a descriptor gets EBADF (the library never sees those calls), and small files gain
/// nothing yet (the client's own open is their cost).
static PATH_OPEN: AtomicU8 = AtomicU8::new(0);

fn path_open_on() -> bool {
    match PATH_OPEN.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let off = std::env::var_os("WEFT_POSIX_PATH_OPEN").is_none_or(|v| v != "1");
            PATH_OPEN.store(if off { 2 } else { 1 }, Ordering::Relaxed);
            !off
        }
    }
}

/// Whether `path` may name a file of a served mount: a relative name when any Weft
/// mount is known, an absolute one below one of them.
fn maybe_weft(path: &[u8]) -> bool {
    let mut m = lock(&MOUNTS);
    if m.read_at.is_none() {
        // The first open: the mounts are listed (their clients made at the first file
        // served, as for a real open).
        m.read_at = Some(Instant::now());
        m.list = crate::guard::within(mount::weft_mounts)
            .into_iter()
            .map(|w| (w, None))
            .collect();
    }
    if m.list.is_empty() {
        return false;
    }
    if path.first() != Some(&b'/') {
        return true;
    }
    m.list.iter().any(|(w, served)| {
        let point = w.mountpoint.as_os_str().as_encoded_bytes();
        !matches!(served, Some(None))
            && path.starts_with(point)
            && (path.len() == point.len() || path[point.len()] == b'/' || point == b"/")
    })
}

/// Opens `path` (relative to `dir`) with O_PATH and serves it when it is a regular file
/// of a served mount and `flags` neither create nor truncate it (see `crate::upgrade`).
/// `Some(fd)`: the answer to give the program (-1 with errno when the name does not
/// lead to a file); `None`: open it for real.
///
/// # Safety
/// `path` is null or a C string, as open requires.
pub unsafe fn open_path(dir: c_int, path: *const libc::c_char, flags: c_int) -> Option<c_int> {
    const REAL_ONLY: c_int =
        libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_PATH | libc::O_TMPFILE | libc::O_DIRECTORY;
    if flags & REAL_ONLY != 0 || path.is_null() || !crate::guard::active() || crate::guard::busy() {
        return None;
    }
    if !path_open_on() {
        return None;
    }
    // SAFETY: the caller passes a C string, as open requires.
    let name = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
    if !maybe_weft(name) {
        return None;
    }
    let _quiet = crate::guard::Quiet::new();
    crate::guard::enter(|| {
        let openat = real!(
            "openat",
            unsafe extern "C" fn(c_int, *const libc::c_char, c_int, ...) -> c_int
        )?;
        let probe_flags = libc::O_PATH | (flags & (libc::O_CLOEXEC | libc::O_NOFOLLOW));
        // SAFETY: the program's name and directory, as it passed them.
        let fd = unsafe { openat(dir, path, probe_flags, 0) };
        if fd < 0 {
            // Without O_CREAT a real open fails the same way on a name that leads
            // nowhere; any other failure is the real open's to report.
            let e = weft_interpose::errno();
            return (e == libc::ENOENT || e == libc::ENOTDIR).then_some(-1);
        }
        let drop_probe = || {
            let saved = weft_interpose::errno();
            if let Some(close) = real!("close", unsafe extern "C" fn(c_int) -> c_int) {
                // SAFETY: our own probe descriptor.
                unsafe { close(fd) };
            }
            set_errno(saved);
            None
        };
        let Some((client, st)) = weft_file(fd) else {
            return drop_probe();
        };
        // An O_PATH open checks no permission on the file itself: the access the
        // program asks for is checked as the real open would (the mount uses
        // default_permissions: the kernel decides from the attributes it holds).
        let want = match flags & libc::O_ACCMODE {
            libc::O_RDONLY => libc::R_OK,
            libc::O_WRONLY => libc::W_OK,
            _ => libc::R_OK | libc::W_OK,
        };
        // SAFETY: the empty name with AT_EMPTY_PATH names the probe itself.
        let allowed = unsafe {
            libc::syscall(
                libc::SYS_faccessat2,
                fd,
                c"".as_ptr(),
                want,
                libc::AT_EMPTY_PATH | libc::AT_EACCESS,
            )
        };
        if allowed != 0 {
            return drop_probe();
        }
        // What the mount holds of the file, checked as its open would (close-to-open),
        // with a read capability: no request of the library's own before the read.
        let handed = handoff(fd);
        // Without it, a small file opened for reading is read through the mount (one
        // request), as for a real open: a native open and read cost more round trips
        // than the mount's open, read, flush and release together.
        if handed.is_none()
            && flags & libc::O_ACCMODE == libc::O_RDONLY
            && (st.st_size as u64) < READ_ADOPT_MIN
        {
            return drop_probe();
        }
        let Some(entry) = open_native(&client, &st, flags, true, handed.as_deref()) else {
            return drop_probe();
        };
        if !table::insert(fd, Arc::new(entry)) {
            return drop_probe();
        }
        stats::add(&stats::OPENS, 1);
        stats::add(&stats::PATH_OPENS, 1);
        Some(fd)
    })
    .flatten()
}

/// The offset of a read or write at the descriptor's offset: the entry's own while its
/// descriptor is an O_PATH one, else the kernel's (-1 with errno on failure).
fn tell(fd: c_int, e: &Entry, held: &i64) -> i64 {
    if e.path.load(Ordering::SeqCst) {
        *held
    } else {
        real_lseek(fd, 0, libc::SEEK_CUR)
    }
}

/// Moves the descriptor's offset to `to` (false: failed, errno set).
fn seek_to(fd: c_int, e: &Entry, held: &mut i64, to: i64) -> bool {
    if e.path.load(Ordering::SeqCst) {
        *held = to;
        true
    } else {
        real_lseek(fd, to, libc::SEEK_SET) >= 0
    }
}

fn client_fail(e: &ClientError) -> isize {
    stats::add(&stats::ERRORS, 1);
    fail(e.errno()) as isize
}

/// Reads into `buf` at `at`, or at the kernel's offset (moved past what was read).
pub fn read(fd: c_int, e: &Entry, buf: &mut [u8], at: Option<i64>) -> isize {
    if !e.readable {
        return fail(libc::EBADF) as isize;
    }
    // A process reads its own writes, through any of its descriptors.
    if let Err(errno) = flush_inode(e.file.inode().0) {
        return fail(errno) as isize;
    }
    let mut held = None;
    let offset = match at {
        Some(o) if o < 0 => return fail(libc::EINVAL) as isize,
        Some(o) => o,
        None => {
            let g = held.insert(lock(&e.offset));
            let o = tell(fd, e, g);
            if o < 0 {
                return -1;
            }
            o
        }
    };
    if buf.is_empty() {
        return 0;
    }
    let got = crate::guard::enter(|| e.ahead.read(&e.file, offset as u64, buf)).expect("not busy");
    match got {
        Ok(n) => {
            if let Some(g) = held.as_mut() {
                if !seek_to(fd, e, g, offset + n as i64) {
                    return -1;
                }
            }
            stats::add(&stats::READS, 1);
            stats::add(&stats::READ_BYTES, n as u64);
            n as isize
        }
        Err(err) => client_fail(&err),
    }
}

/// Writes `buf` at `at` (pwrite), at the end (O_APPEND), or at the kernel's offset.
pub fn write(fd: c_int, e: &Entry, buf: &[u8], at: Option<i64>) -> isize {
    if !e.writable {
        return fail(libc::EBADF) as isize;
    }
    if let Some(o) = at {
        if o < 0 {
            return fail(libc::EINVAL) as isize;
        }
    }
    let append = e.append.load(Ordering::SeqCst);
    // Linux's pwrite on an O_APPEND descriptor appends too.
    let mut held = (at.is_none() || append).then(|| lock(&e.offset));
    if buf.is_empty() {
        return 0;
    }
    e.wrote.store(true, Ordering::SeqCst);
    crate::ahead::wrote();
    if !append && !e.sync && buf.len() <= crate::behind::PIECE_MAX {
        if let Some(n) = buffered(fd, e, buf, at, held.as_deref_mut()) {
            return n;
        }
    } else if let Err(errno) = flush(e) {
        // The buffered bytes are older than this write: they go first.
        return fail(errno) as isize;
    }
    let done = crate::guard::enter(|| {
        let end = if append {
            let at = e.file.append(buf)?;
            at + buf.len() as u64
        } else {
            let offset = match (at, held.as_deref()) {
                (Some(o), _) => o,
                (None, Some(g)) => {
                    let o = tell(fd, e, g);
                    if o < 0 {
                        return Ok(None);
                    }
                    o
                }
                (None, None) => return Ok(None),
            } as u64;
            e.file.write_at(offset, buf)?;
            offset + buf.len() as u64
        };
        if e.sync {
            e.file.sync()?;
        }
        Ok(Some(end))
    })
    .expect("not busy");
    match done {
        Ok(Some(end)) => {
            if let (None, Some(g)) = (at, held.as_mut()) {
                if !seek_to(fd, e, g, end as i64) {
                    return -1;
                }
            }
            stats::add(&stats::WRITES, 1);
            stats::add(&stats::WRITTEN_BYTES, buf.len() as u64);
            buf.len() as isize
        }
        Ok(None) => -1,
        Err(err) => client_fail(&err),
    }
}

/// A small write kept in the description's buffer (at `at`, or at the kernel's offset,
/// moved past it). `None`: the buffer cannot take it (full after sending, the process
/// bound reached): the caller sends it itself.
fn buffered(fd: c_int, e: &Entry, buf: &[u8], at: Option<i64>, held: Option<&mut i64>) -> Option<isize> {
    let offset = match (at, held.as_deref()) {
        (Some(o), _) => o,
        (None, Some(g)) => {
            let o = tell(fd, e, g);
            if o < 0 {
                return Some(-1);
            }
            o
        }
        (None, None) => return Some(fail(libc::EINVAL) as isize),
    } as u64;
    let mut b = lock(&e.behind);
    if let Some(errno) = b.failed {
        return Some(fail(errno) as isize);
    }
    if b.full_for(buf.len()) {
        if let Err(errno) = crate::guard::within(|| b.send(&e.file)) {
            return Some(fail(errno) as isize);
        }
        if b.full_for(buf.len()) {
            return None;
        }
    }
    b.put(offset, buf);
    drop(b);
    if let (None, Some(g)) = (at, held) {
        if !seek_to(fd, e, g, offset as i64 + buf.len() as i64) {
            return Some(-1);
        }
    }
    stats::add(&stats::WRITES, 1);
    stats::add(&stats::WRITTEN_BYTES, buf.len() as u64);
    Some(buf.len() as isize)
}

/// The file's size as the io servers see it (this process's buffered writes sent first).
pub fn size(e: &Entry) -> Result<u64, c_int> {
    flush_inode(e.file.inode().0)?;
    crate::guard::enter(|| e.file.size())
        .expect("not busy")
        .map_err(|err| {
            stats::add(&stats::ERRORS, 1);
            err.errno()
        })
}

/// lseek: the kernel keeps the offset; only SEEK_END after the library's own writes
/// needs the io servers' size (the mount's may be old).
pub fn lseek(fd: c_int, e: &Entry, offset: i64, whence: c_int) -> i64 {
    if e.path.load(Ordering::SeqCst) {
        if whence == libc::SEEK_DATA || whence == libc::SEEK_HOLE {
            // The mount answers these: the descriptor becomes a real one first.
            if let Err(errno) = crate::upgrade::upgrade(e) {
                return fail(errno) as i64;
            }
        } else if let Some(r) = path_lseek(e, offset, whence) {
            return r;
        }
    }
    // SEEK_DATA and SEEK_HOLE ask the mount, which asks the io servers.
    if (whence == libc::SEEK_DATA || whence == libc::SEEK_HOLE)
        && flush_inode(e.file.inode().0).is_ok_and(|s| s)
    {
        refresh_mount(fd);
    }
    if whence != libc::SEEK_END || !e.wrote.load(Ordering::SeqCst) {
        return real_lseek(fd, offset, whence);
    }
    let _held = lock(&e.offset);
    match size(e) {
        Ok(size) => match (size as i64).checked_add(offset).filter(|p| *p >= 0) {
            Some(p) => real_lseek(fd, p, libc::SEEK_SET),
            None => fail(libc::EINVAL) as i64,
        },
        Err(errno) => fail(errno) as i64,
    }
}

/// lseek on an O_PATH description: the entry's offset (`None`: it was upgraded
/// meanwhile, the kernel has the offset).
fn path_lseek(e: &Entry, offset: i64, whence: c_int) -> Option<i64> {
    let mut held = lock(&e.offset);
    if !e.path.load(Ordering::SeqCst) {
        return None;
    }
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => *held,
        libc::SEEK_END => match size(e) {
            Ok(size) => size as i64,
            Err(errno) => return Some(fail(errno) as i64),
        },
        _ => return Some(fail(libc::EINVAL) as i64),
    };
    Some(match base.checked_add(offset).filter(|p| *p >= 0) {
        Some(p) => {
            *held = p;
            p
        }
        None => fail(libc::EINVAL) as i64,
    })
}

/// fstat: the kernel's answer, with the io servers' size once the library wrote.
pub fn fstat(fd: c_int, e: &Entry, out: &mut libc::stat) -> c_int {
    if real_fstat(fd, out) != 0 {
        return -1;
    }
    if e.wrote.load(Ordering::SeqCst) {
        match size(e) {
            Ok(size) => {
                out.st_size = size as i64;
                out.st_blocks = out.st_blocks.max((size as i64 + 511) / 512);
            }
            Err(errno) => return fail(errno),
        }
    }
    0
}

/// A stat answer of the kernel for a file of a mount: the io servers' size when the
/// library wrote the file through a descriptor still open.
pub fn patch_stat(out: &mut libc::stat) {
    if libc::major(out.st_dev) != 0 || out.st_mode & libc::S_IFMT != libc::S_IFREG {
        return;
    }
    if let Some(e) = table::written(out.st_ino) {
        if let Ok(size) = size(&e) {
            out.st_size = size as i64;
        }
    }
}

/// The same for statx.
pub fn patch_statx(out: &mut libc::statx) {
    if out.stx_dev_major != 0 || u32::from(out.stx_mode) & libc::S_IFMT != libc::S_IFREG {
        return;
    }
    if let Some(e) = table::written(out.stx_ino) {
        if let Ok(size) = size(&e) {
            out.stx_size = size;
        }
    }
}

pub fn fsync(fd: c_int, e: &Entry) -> c_int {
    // fsync is of the file: what other descriptions of it in this process buffered too.
    if let Err(errno) = flush_inode(e.file.inode().0) {
        return fail(errno);
    }
    if let Err(errno) = settle(e) {
        return fail(errno);
    }
    if e.wrote.load(Ordering::SeqCst) {
        refresh_mount(fd);
    }
    match crate::guard::enter(|| e.file.sync()).expect("not busy") {
        Ok(()) => 0,
        Err(err) => client_fail(&err) as c_int,
    }
}

/// ftruncate through the mount (its daemon keeps what it knows of the file's end, which
/// a truncate it did not see would leave too large), then the native handle's idea of
/// the size is read again (reads past the new end must find the end).
pub fn ftruncate(fd: c_int, e: &Entry, len: i64) -> c_int {
    if let Err(errno) = crate::upgrade::upgrade(e) {
        return fail(errno);
    }
    let _held = lock(&e.offset);
    // Buffered bytes are older than the truncate: sent first, or they would land after.
    if let Err(errno) = flush_inode(e.file.inode().0) {
        return fail(errno);
    }
    let r = match real!("ftruncate64", unsafe extern "C" fn(c_int, i64) -> c_int) {
        // SAFETY: plain values.
        Some(f) => unsafe { f(fd, len) },
        None => fail(libc::ENOSYS),
    };
    if r == 0 {
        e.wrote.store(true, Ordering::SeqCst);
        crate::ahead::wrote();
        if let Err(errno) = size(e) {
            return fail(errno);
        }
    }
    r
}

//! The shared-memory transport for clients on a server's machine.
//!
//! Over a Unix-socket connection the client creates a memfd, seals it against
//! shrinking and growing, maps it, and passes it to the server with the `ShmAttach`
//! frame (SCM_RIGHTS). From then on a request with bulk data travels as a `ShmCall`:
//! the socket carries only the small message naming a region of the segment, and the
//! server writes to and reads from its objects straight from and into that region
//! (pwrite/pread on the mapping; no buffer in between).
//!
//! Invariants:
//! - Memory is bounded per connection: one segment of at most `SEGMENT_BYTES_MAX`
//!   (`WEFT_SHM_BYTES`, default `SEGMENT_BYTES_DEFAULT`), mapped once by each side.
//! - Nothing outlives the connection: a memfd has no name and vanishes with its last
//!   descriptor and mapping. Each side drops its mapping when the connection ends
//!   (the server when the connection closes and its last request is done, the client
//!   when the connection breaks and its last call let go), so a side killed with
//!   SIGKILL leaves no segment behind in the survivor.
//! - A hostile client cannot crash the server or reach its memory: the server maps a
//!   descriptor only if it is a tmpfs memfd of the announced size sealed against
//!   shrinking (truncation under a mapping is what raises SIGBUS), and every region a
//!   request names is checked against the segment's bounds before it is touched. The
//!   bytes themselves may change under the server while it looks at them: it only
//!   copies them (to a file or a reply), never decides anything on them.
//! - A call whose region cannot be had (segment full, payload larger than the
//!   segment) goes over the socket as before; a client that cannot create, map or
//!   attach a segment uses the socket alone.
//!
//! Here: the transport's choice, mappings, regions, client segments and a server
//! connection's segment; `pool.rs` the read pool, `fds.rs` passing descriptors.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use weft_proto::{ErrorCode, WireError};

mod fds;
mod pool;

pub use fds::{recv_with_fds, send_with_fd};
pub(crate) use pool::count_pool_placed;
pub use pool::{pool_placed_bytes, Pool, PoolHold, PoolSlot};

/// Default size of a client's segment on one connection: room for the client's four
/// 4 MiB requests in flight per server.
pub const SEGMENT_BYTES_DEFAULT: u64 = 16 << 20;
/// Largest segment a server maps for one connection.
pub const SEGMENT_BYTES_MAX: u64 = 256 << 20;
/// Payloads smaller than this ride in the frame: a region costs more than it saves.
pub const SHM_PAYLOAD_MIN: u64 = 16 * 1024;
/// Regions are handed out in units of this many bytes.
const UNIT: u64 = 4096;
/// `statfs` type of tmpfs/shmem, where ordinary memfds live (hugetlbfs ones could
/// fault with SIGBUS when huge pages run out).
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Which transport a client uses to reach an io server on its machine
/// (`WEFT_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Shared memory over the Unix socket where it can be had, else the socket alone,
    /// else TCP (unset).
    Auto,
    /// Shared memory over the Unix socket; a connection that cannot have a segment
    /// fails with the reason.
    Shm,
    /// The Unix socket without a segment.
    Unix,
    /// TCP, even to a server on this machine.
    Tcp,
}

impl Transport {
    /// `WEFT_TRANSPORT`: `shm`, `unix` or `tcp`; unset or anything else is `Auto`.
    pub fn from_env() -> Transport {
        match std::env::var("WEFT_TRANSPORT").as_deref() {
            Ok("shm") => Transport::Shm,
            Ok("unix") => Transport::Unix,
            Ok("tcp") => Transport::Tcp,
            _ => Transport::Auto,
        }
    }
}

/// The segment size a client asks for: `WEFT_SHM_BYTES`, else the default.
pub fn segment_bytes_from_env() -> u64 {
    std::env::var("WEFT_SHM_BYTES")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(SEGMENT_BYTES_DEFAULT)
}

/// Pages of a mapping whose page-table entries are populated together (see
/// [`Region::populate`]).
const PAGE: usize = 4096;

/// A memfd mapped shared, read-write; unmapped and closed when dropped.
pub struct Mapping {
    base: *mut u8,
    len: usize,
    /// Always `Some` until dropped (taken then, to be closed with the unmapping).
    fd: Option<OwnedFd>,
    /// One bit per page of this side's mapping: set once the page's entry was
    /// populated (`Region::populate`), so each page is populated once, not per call.
    populated: Box<[AtomicU64]>,
}

// SAFETY: the mapping is plain memory valid for its whole life; every access goes
// through raw-pointer copies bounded by `len`, from whichever thread.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

/// Mappings from this size up are unmapped and closed by the reaper thread.
const REAP_BYTES_MIN: usize = 1 << 20;

/// Unmapping a segment whose peer is gone frees its pages (16 MiB zeroed shmem by
/// default), which took milliseconds and 13% of an io server's time in a benchmark of
/// short-lived writers, on its event loop thread, where every other connection waited.
/// One thread per process does it instead; a mapping handed to it is no longer used by
/// anyone. What waits there is memory already counted while it was mapped.
fn reap(base: usize, len: usize, fd: OwnedFd) {
    type Reaped = (usize, usize, OwnedFd);
    static REAPER: std::sync::OnceLock<Option<Mutex<std::sync::mpsc::Sender<Reaped>>>> =
        std::sync::OnceLock::new();
    let unmap = |(base, len, fd): Reaped| {
        // SAFETY: `base`/`len` are a mapping made in `Mapping::map` that nobody uses.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
        drop(fd);
    };
    let reaper = REAPER.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel::<Reaped>();
        std::thread::Builder::new()
            .name("weft-shm-reaper".into())
            .spawn(move || receiver.into_iter().for_each(unmap))
            .ok()
            .map(|_| Mutex::new(sender))
    });
    let item = (base, len, fd);
    match reaper {
        Some(sender) => {
            if let Err(returned) = sender.lock().unwrap().send(item) {
                unmap(returned.0);
            }
        }
        None => unmap(item),
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let fd = self
            .fd
            .take()
            .expect("a mapping holds its descriptor until dropped");
        if self.len >= REAP_BYTES_MIN {
            reap(self.base as usize, self.len, fd);
        } else {
            // SAFETY: `base`/`len` are the mapping made in `map`; nobody uses it any
            // more (whoever could holds an `Arc` to this).
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapping({} bytes, fd {})", self.len, self.fd())
    }
}

fn last_error(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl Mapping {
    /// A new sealed memfd of `bytes` bytes, mapped (the client's side).
    pub fn create(bytes: u64) -> io::Result<Mapping> {
        Mapping::create_named(bytes, c"weft-shm")
    }

    fn create_named(bytes: u64, name: &std::ffi::CStr) -> io::Result<Mapping> {
        if bytes == 0 || bytes > SEGMENT_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("segment of {bytes} bytes (1 to {SEGMENT_BYTES_MAX})"),
            ));
        }
        // SAFETY: a NUL-terminated name and flags; the result is checked.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(last_error("memfd_create"));
        }
        // SAFETY: `raw` is a descriptor we just created and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain calls on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), bytes as libc::off_t) } != 0 {
            return Err(last_error("ftruncate of the segment"));
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(last_error("sealing the segment"));
        }
        Mapping::map(fd, bytes as usize)
    }

    /// Maps a descriptor a peer passed, if it is a tmpfs memfd of exactly `bytes`
    /// (at most `max`) bytes sealed against shrinking (the server's side). The error
    /// says what is wrong with it.
    pub fn adopt(fd: OwnedFd, bytes: u64, max: u64) -> Result<Mapping, String> {
        if bytes == 0 || bytes > max {
            return Err(format!(
                "a shared segment of {bytes} bytes is refused (this server maps 1 to {max})"
            ));
        }
        let raw = fd.as_raw_fd();
        // Seals first: F_GET_SEALS is answered by the kernel alone and fails on anything
        // but shmem and hugetlbfs files, so no filesystem a client controls (a FUSE
        // file's getattr could stall this thread) is asked anything.
        // SAFETY: F_GET_SEALS only reads the descriptor's seals.
        let seals = unsafe { libc::fcntl(raw, libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err("the shared segment is not a memfd sealed against shrinking (F_SEAL_SHRINK)".into());
        }
        // SAFETY: `fs` is valid for fstatfs to fill.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstatfs(raw, &mut fs) } != 0 || fs.f_type as i64 != TMPFS_MAGIC {
            return Err("the shared segment is not an ordinary memfd (tmpfs)".into());
        }
        // SAFETY: `st` is valid for fstat to fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(raw, &mut st) } != 0 {
            return Err(format!(
                "cannot stat the shared segment: {}",
                io::Error::last_os_error()
            ));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err("the shared segment is not a memory file".into());
        }
        // Sealed: the size read now can no longer go down.
        if st.st_size as u64 != bytes {
            return Err(format!(
                "the shared segment has {} bytes, not the {bytes} announced",
                st.st_size
            ));
        }
        Mapping::map(fd, bytes as usize).map_err(|e| format!("cannot map the shared segment: {e}"))
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of our descriptor; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(last_error("mmap of the segment"));
        }
        let pages = len.div_ceil(PAGE);
        Ok(Mapping {
            base: base.cast(),
            len,
            fd: Some(fd),
            populated: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    pub fn len(&self) -> u64 {
        self.len as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, |fd| fd.as_raw_fd())
    }

    /// Populates this side's page-table entries for the pages of `[offset, offset +
    /// len)` (within bounds) not populated before, one `madvise` per run of them
    /// (`MADV_POPULATE_WRITE` when the server is about to write there, else
    /// `_READ`). Why: a fresh mapping has no entries, and the kernel copies from a
    /// source buffer into a *new* page-cache folio with page faults disabled; the first
    /// unmapped source page makes the copy short, and ext4 then zeroes the new folio,
    /// throws the copy away, halves its chunk (smaller folios for the rest of that
    /// write) and faults the page in: most of a fresh file's write went there. Pages
    /// populated once stay so (the segment is shmem, never reclaimed without swap; if
    /// it were, the copy would only be slower, never wrong). A kernel without
    /// `MADV_POPULATE_*` (before 5.14) refuses it, and the copy takes its faults.
    fn populate(&self, offset: usize, len: usize, write: bool) {
        if len == 0 || offset >= self.len {
            return;
        }
        let first = offset / PAGE;
        let end = (offset + len).min(self.len).div_ceil(PAGE);
        let is_set =
            |page: usize| self.populated[page / 64].load(Ordering::Relaxed) & (1 << (page % 64)) != 0;
        let mut page = first;
        while page < end {
            if is_set(page) {
                page += 1;
                continue;
            }
            let run_start = page;
            while page < end && !is_set(page) {
                page += 1;
            }
            let start = run_start * PAGE;
            let bytes = (page * PAGE).min(self.len) - start;
            let advice = if write {
                libc::MADV_POPULATE_WRITE
            } else {
                libc::MADV_POPULATE_READ
            };
            // SAFETY: a page-aligned range within our mapping; populating changes no
            // byte of it.
            let done = unsafe { libc::madvise(self.base.add(start).cast(), bytes, advice) } == 0;
            if done {
                for p in run_start..page {
                    self.populated[p / 64].fetch_or(1 << (p % 64), Ordering::Relaxed);
                }
            }
        }
    }

    /// Pages of this mapping populated so far (tests).
    pub fn pages_populated(&self) -> usize {
        self.populated
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }

    /// `[offset, offset + len)` if it lies within the mapping.
    fn check(&self, offset: u64, len: u64) -> Option<(usize, usize)> {
        let end = offset.checked_add(len)?;
        (end <= self.len as u64).then_some((offset as usize, len as usize))
    }
}

/// A region of a mapping that one call uses, checked against its bounds.
#[derive(Clone)]
pub struct Region {
    map: Arc<Mapping>,
    offset: usize,
    len: usize,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Region({}+{})", self.offset, self.len)
    }
}

impl Region {
    /// The region `[offset, offset + len)` of `map`, or an error naming the bounds.
    pub fn new(map: Arc<Mapping>, offset: u64, len: u64) -> Result<Region, WireError> {
        match map.check(offset, len) {
            Some((offset, len)) => Ok(Region { map, offset, len }),
            None => Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "shared-memory region {offset}+{len} lies outside the connection's {}-byte segment",
                    map.len
                ),
            )),
        }
    }

    pub fn offset(&self) -> u64 {
        self.offset as u64
    }

    pub fn len(&self) -> u64 {
        self.len as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn ptr(&self, at: usize) -> *mut u8 {
        debug_assert!(at <= self.len);
        // SAFETY: within the mapping (checked in `new`, and `at <= len`).
        unsafe { self.map.base.add(self.offset + at) }
    }

    /// Populates this side's page-table entries for the first `n` bytes (once per
    /// page; see `Mapping::populate`): before handing them to a kernel copy that takes
    /// no page faults (pwrite into new page-cache pages), or, with `write`, before a
    /// read fills them.
    pub fn populate(&self, n: u64, write: bool) {
        self.map.populate(self.offset, (n as usize).min(self.len), write);
    }

    /// The first `n` bytes as a slice, for data that is only copied (to a file or a
    /// buffer). The peer may change them meanwhile; that changes only what is copied.
    pub fn bytes(&self, n: u64) -> &[u8] {
        let n = (n as usize).min(self.len);
        // SAFETY: mapped and within bounds for as long as `self` (holding the mapping)
        // lives; the memory is plain bytes, valid whatever the peer writes to it.
        unsafe { std::slice::from_raw_parts(self.ptr(0), n) }
    }

    /// Copies `src` in at `at`; false if it does not fit.
    pub fn write_at(&self, at: u64, src: &[u8]) -> bool {
        let Some(end) = at.checked_add(src.len() as u64) else {
            return false;
        };
        if end > self.len as u64 {
            return false;
        }
        // SAFETY: bounds checked above; `src` is our memory, not the mapping.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr(at as usize), src.len()) };
        true
    }

    /// Copies `dst.len()` bytes out from `at`; false if the region is shorter.
    pub fn read_at(&self, at: u64, dst: &mut [u8]) -> bool {
        let Some(end) = at.checked_add(dst.len() as u64) else {
            return false;
        };
        if end > self.len as u64 {
            return false;
        }
        // SAFETY: bounds checked above.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr(at as usize), dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Copies out into `parts` (address, length), in order, from the region's start.
    ///
    /// # Safety
    /// Every part must be valid for writes of its length and not aliased meanwhile.
    pub unsafe fn read_into_parts(&self, parts: &[(*mut u8, usize)]) -> bool {
        let total: usize = parts.iter().map(|p| p.1).sum();
        if total > self.len {
            return false;
        }
        let mut at = 0;
        for &(dst, len) in parts {
            // SAFETY: the source is within bounds (total checked); the caller vouches
            // for the destination.
            unsafe { std::ptr::copy_nonoverlapping(self.ptr(at), dst, len) };
            at += len;
        }
        true
    }

    /// Fills the region from its start with `runs` of `file` (offset, length), bytes
    /// past the file's end as zeros: the server's read, straight into shared memory.
    pub fn fill_from_file(&self, file: &std::fs::File, runs: &[(u64, u64)]) -> io::Result<u64> {
        fill_regions(file, runs, std::slice::from_ref(self))
    }

    /// Copies `src` into `regions`, one after another; false (nothing copied) unless
    /// they hold exactly `src.len()` bytes.
    pub fn scatter(regions: &[Region], src: &[u8]) -> bool {
        if regions.iter().map(|r| r.len as u64).sum::<u64>() != src.len() as u64 {
            return false;
        }
        let mut at = 0;
        for region in regions {
            region.write_at(0, &src[at..at + region.len]);
            at += region.len;
        }
        true
    }
}

/// Fills `regions` one after another with `runs` of `file` (offset, length), bytes
/// past the file's end as zeros; the runs may hold fewer bytes than the regions, never
/// more (an error before anything is read). Returns the bytes placed.
pub fn fill_regions(file: &std::fs::File, runs: &[(u64, u64)], regions: &[Region]) -> io::Result<u64> {
    let total: u64 = runs.iter().map(|r| r.1).sum();
    if total > regions.iter().map(|r| r.len as u64).sum::<u64>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "reply larger than its shared-memory region",
        ));
    }
    // Where the next byte goes: region `k`, `at` bytes into it.
    let (mut k, mut at) = (0usize, 0usize);
    for &(offset, len) in runs {
        let mut done = 0u64;
        while done < len {
            while regions[k].len == at {
                k += 1;
                at = 0;
            }
            let region = &regions[k];
            let want = (len - done).min((region.len - at) as u64).min(1 << 30) as usize;
            // SAFETY: `at + want <= region.len` (bounded above), within the mapping.
            let n = unsafe {
                libc::pread(
                    file.as_raw_fd(),
                    region.ptr(at).cast(),
                    want,
                    (offset + done) as libc::off_t,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                // Past the end: the rest of the run reads as zeros.
                // SAFETY: within bounds as above.
                unsafe { std::ptr::write_bytes(region.ptr(at), 0, want) };
                done += want as u64;
                at += want;
                continue;
            }
            done += n as u64;
            at += n as usize;
        }
    }
    Ok(total)
}

/// A client's segment and which of its bytes calls hold.
pub struct ClientSegment {
    map: Arc<Mapping>,
    /// Free runs `(offset, len)` in units, sorted by offset and never adjacent.
    free: Mutex<Vec<(u64, u64)>>,
}

impl ClientSegment {
    pub fn new(map: Mapping) -> Arc<ClientSegment> {
        let units = map.len() / UNIT;
        Arc::new(ClientSegment {
            map: Arc::new(map),
            free: Mutex::new(vec![(0, units)]),
        })
    }

    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    /// A region of at least `bytes` bytes, if one is free now (first fit).
    pub fn lease(self: &Arc<ClientSegment>, bytes: u64) -> Option<Lease> {
        let units = bytes.div_ceil(UNIT).max(1);
        let mut free = self.free.lock().unwrap();
        let k = free.iter().position(|r| r.1 >= units)?;
        let start = free[k].0;
        if free[k].1 == units {
            free.remove(k);
        } else {
            free[k].0 += units;
            free[k].1 -= units;
        }
        drop(free);
        let region = Region::new(self.map.clone(), start * UNIT, units * UNIT).ok()?;
        Some(Lease {
            segment: self.clone(),
            region,
        })
    }

    fn give_back(&self, offset: u64, len: u64) {
        let (start, units) = (offset / UNIT, len / UNIT);
        let mut free = self.free.lock().unwrap();
        let k = free.partition_point(|r| r.0 < start);
        free.insert(k, (start, units));
        // Merge with the next, then the previous.
        if k + 1 < free.len() && free[k].0 + free[k].1 == free[k + 1].0 {
            free[k].1 += free[k + 1].1;
            free.remove(k + 1);
        }
        if k > 0 && free[k - 1].0 + free[k - 1].1 == free[k].0 {
            free[k - 1].1 += free[k].1;
            free.remove(k);
        }
    }

    /// Bytes free now (for tests).
    pub fn free_bytes(&self) -> u64 {
        self.free.lock().unwrap().iter().map(|r| r.1 * UNIT).sum()
    }
}

/// A region held by one call until its answer came (or the connection ended); the
/// server may write into it until then, so it is not handed out again before.
pub struct Lease {
    segment: Arc<ClientSegment>,
    region: Region,
}

impl Lease {
    pub fn region(&self) -> &Region {
        &self.region
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.segment.give_back(self.region.offset(), self.region.len());
    }
}

/// A server connection's shared-memory state: a descriptor passed and not yet
/// attached, and the attached segment.
#[derive(Default)]
pub struct ConnShm {
    passed: Mutex<Option<OwnedFd>>,
    segment: Mutex<Option<Arc<Mapping>>>,
    /// The client process's read pool (`ShmAttachPool`).
    pool: Mutex<Option<Arc<Mapping>>>,
}

impl ConnShm {
    /// Keeps the last descriptor passed (at most one: an earlier one is closed).
    pub fn passed(&self, fd: OwnedFd) {
        *self.passed.lock().unwrap() = Some(fd);
    }

    /// Attaches the passed descriptor as the connection's segment of `bytes` bytes.
    pub fn attach(&self, bytes: u64, max: u64) -> Result<(), WireError> {
        let refuse = |m: String| WireError::new(ErrorCode::InvalidArgument, m);
        let mut segment = self.segment.lock().unwrap();
        if segment.is_some() {
            return Err(refuse("this connection has a shared segment already".into()));
        }
        let Some(fd) = self.passed.lock().unwrap().take() else {
            return Err(refuse(
                "ShmAttach came without a descriptor (pass the memfd with SCM_RIGHTS on the Unix socket)"
                    .into(),
            ));
        };
        *segment = Some(Arc::new(Mapping::adopt(fd, bytes, max).map_err(refuse)?));
        Ok(())
    }

    pub fn segment(&self) -> Option<Arc<Mapping>> {
        self.segment.lock().unwrap().clone()
    }

    /// Attaches the passed descriptor as the client's read pool of `bytes` bytes, with
    /// the checks of `attach`.
    pub fn attach_pool(&self, bytes: u64, max: u64) -> Result<(), WireError> {
        let refuse = |m: String| WireError::new(ErrorCode::InvalidArgument, m);
        let mut pool = self.pool.lock().unwrap();
        if pool.is_some() {
            return Err(refuse("this connection has a read pool already".into()));
        }
        let Some(fd) = self.passed.lock().unwrap().take() else {
            return Err(refuse(
                "ShmAttachPool came without a descriptor (pass the memfd with SCM_RIGHTS on the Unix socket)"
                    .into(),
            ));
        };
        *pool = Some(Arc::new(Mapping::adopt(fd, bytes, max).map_err(refuse)?));
        Ok(())
    }

    pub fn pool(&self) -> Option<Arc<Mapping>> {
        self.pool.lock().unwrap().clone()
    }
}

#[cfg(test)]
mod tests;

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

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use weft_proto::{ErrorCode, WireError};

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

/// Bytes this process (a server) placed straight into clients' read pools
/// (`ShmScatter`), for its metrics and for tests that must see the pool path taken.
static POOL_PLACED_BYTES: AtomicU64 = AtomicU64::new(0);

pub fn pool_placed_bytes() -> u64 {
    POOL_PLACED_BYTES.load(Ordering::Relaxed)
}

pub(crate) fn count_pool_placed(bytes: u64) {
    POOL_PLACED_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// A client process's read pool: one sealed memfd of `slots` buffers of `slot_bytes`,
/// attached to every connection of the process that has a shared segment
/// (`ShmAttachPool`), so that a read whose reply goes into a buffer of the pool is
/// placed there by the server itself (`ShmScatter`) and copied by nobody in this
/// process. Made once per process by whoever wants its reads placed (the mount: one
/// buffer per FUSE worker), before the connections it should serve are made.
///
/// A buffer is leased by one reader at a time (`PoolSlot`) and not handed out again
/// while a call that names it may still be written by a server (`PoolHold`): a call
/// given up on holds it until its answer comes; a call whose connection broke first
/// leaves the buffer retired for good (the server may still be writing into it, and
/// nothing tells when it stops), which only shrinks the pool.
pub struct Pool {
    map: Arc<Mapping>,
    slot_bytes: usize,
    state: Mutex<PoolState>,
}

struct PoolState {
    /// Slots free now, the most recently used last (handed out first: its pages are
    /// populated in both processes' page tables).
    free: Vec<usize>,
    leased: Vec<bool>,
    /// Calls in flight that name bytes of the slot.
    holds: Vec<u32>,
    retired: Vec<bool>,
}

impl PoolState {
    fn release_if_idle(&mut self, slot: usize) {
        if !self.leased[slot] && self.holds[slot] == 0 && !self.retired[slot] {
            self.free.push(slot);
        }
    }
}

static POOL: std::sync::OnceLock<Option<Arc<Pool>>> = std::sync::OnceLock::new();

impl Pool {
    /// Makes this process's pool of `slots` buffers of `slot_bytes` (rounded up to
    /// pages) once; later calls get the same pool (or `None` again). `None` where the
    /// transport is forced to the socket or TCP (`WEFT_TRANSPORT=unix|tcp`), the pool
    /// would pass `SEGMENT_BYTES_MAX`, or the memfd cannot be made (the reason is
    /// printed; reads then take the usual path).
    pub fn install(slots: usize, slot_bytes: usize) -> Option<Arc<Pool>> {
        POOL.get_or_init(|| {
            if matches!(Transport::from_env(), Transport::Unix | Transport::Tcp) || slots == 0 {
                return None;
            }
            match Pool::new(slots, slot_bytes) {
                Ok(pool) => Some(pool),
                Err(e) => {
                    eprintln!(
                        "weft: no read pool ({slots} x {slot_bytes} bytes): {e}; reads are copied as before"
                    );
                    None
                }
            }
        })
        .clone()
    }

    fn new(slots: usize, slot_bytes: usize) -> io::Result<Arc<Pool>> {
        let slot_bytes = slot_bytes.max(1).next_multiple_of(PAGE);
        let bytes = (slots as u64).saturating_mul(slot_bytes as u64);
        let map = Mapping::create_named(bytes, c"weft-shm-pool")?;
        Ok(Arc::new(Pool {
            map: Arc::new(map),
            slot_bytes,
            state: Mutex::new(PoolState {
                free: (0..slots).rev().collect(),
                leased: vec![false; slots],
                holds: vec![0; slots],
                retired: vec![false; slots],
            }),
        }))
    }

    /// The process's pool, if one was made.
    pub fn get() -> Option<Arc<Pool>> {
        POOL.get().cloned().flatten()
    }

    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// A free buffer, if there is one now.
    pub fn lease(self: &Arc<Pool>) -> Option<PoolSlot> {
        let mut state = self.state.lock().unwrap();
        let slot = state.free.pop()?;
        state.leased[slot] = true;
        drop(state);
        // This process's page-table entries for the buffer, once (a fresh mapping
        // would take a fault per page in the reply's pinning).
        self.map.populate(slot * self.slot_bytes, self.slot_bytes, true);
        Some(PoolSlot {
            pool: self.clone(),
            slot,
        })
    }

    /// Buffers free now, and retired (tests).
    pub fn counts(&self) -> (usize, usize) {
        let state = self.state.lock().unwrap();
        (state.free.len(), state.retired.iter().filter(|r| **r).count())
    }

    /// The pool offsets of `parts` (address, length; empty ones left out) if every one
    /// lies within the pool, else `None`.
    pub fn pieces_of(&self, parts: &[(*mut u8, usize)]) -> Option<Vec<(u64, u64)>> {
        let base = self.map.base as usize;
        let end = base + self.map.len;
        parts
            .iter()
            .filter(|p| p.1 > 0)
            .map(|&(ptr, len)| {
                let at = ptr as usize;
                (at >= base && at.checked_add(len)? <= end).then(|| ((at - base) as u64, len as u64))
            })
            .collect::<Option<Vec<_>>>()
            .filter(|pieces| !pieces.is_empty())
    }

    /// Holds the buffers `pieces` lie in until the returned hold is dropped (or
    /// retired): they are not handed out again meanwhile.
    pub fn hold(self: &Arc<Pool>, pieces: &[(u64, u64)]) -> PoolHold {
        let mut slots: Vec<usize> = Vec::new();
        for &(offset, len) in pieces {
            let first = offset as usize / self.slot_bytes;
            let last = (offset + len - 1) as usize / self.slot_bytes;
            slots.extend(first..=last);
        }
        slots.sort_unstable();
        slots.dedup();
        let mut state = self.state.lock().unwrap();
        for &slot in &slots {
            state.holds[slot] += 1;
        }
        PoolHold {
            pool: self.clone(),
            slots,
            retire: false,
        }
    }
}

/// One buffer of the pool, leased by one reader.
pub struct PoolSlot {
    pool: Arc<Pool>,
    slot: usize,
}

impl PoolSlot {
    /// The buffer (`slot_bytes`; whatever an earlier lease left there until written).
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the slot lies within the mapping, and only this lease reaches it
        // (servers write into it only for calls this lease's holder made).
        unsafe {
            std::slice::from_raw_parts_mut(
                self.pool.map.base.add(self.slot * self.pool.slot_bytes),
                self.pool.slot_bytes,
            )
        }
    }
}

impl Drop for PoolSlot {
    fn drop(&mut self) {
        let mut state = self.pool.state.lock().unwrap();
        state.leased[self.slot] = false;
        state.release_if_idle(self.slot);
    }
}

/// The pool buffers a `ShmScatter` in flight names (see `Pool::hold`).
pub struct PoolHold {
    pool: Arc<Pool>,
    slots: Vec<usize>,
    retire: bool,
}

impl PoolHold {
    /// The call's connection broke before its answer came: a server may still write
    /// into these buffers, so they are never handed out again.
    pub fn retire(mut self) {
        self.retire = true;
    }
}

impl Drop for PoolHold {
    fn drop(&mut self) {
        let mut state = self.pool.state.lock().unwrap();
        for &slot in &self.slots {
            state.holds[slot] -= 1;
            if self.retire {
                state.retired[slot] = true;
            }
            state.release_if_idle(slot);
        }
    }
}

/// Writes all of `bytes` to a Unix socket, the first byte carrying `fd` (SCM_RIGHTS).
pub fn send_with_fd(socket: RawFd, bytes: &[u8], fd: RawFd) -> io::Result<()> {
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; every pointer in it refers to live locals.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer has room for one header with one descriptor.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
    }
    let sent = loop {
        // SAFETY: `msg` is fully set up above.
        let n = unsafe { libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut rest = &bytes[sent..];
    while !rest.is_empty() {
        // SAFETY: plain send of our bytes.
        let n = unsafe { libc::send(socket, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        rest = &rest[n as usize..];
    }
    Ok(())
}

/// Most descriptors taken from one read; more are closed by the kernel.
const FDS_PER_READ: usize = 4;

/// Reads from a Unix socket like `read`, also taking descriptors passed with the
/// bytes (close-on-exec); they are handed to `keep`.
pub fn recv_with_fds(socket: RawFd, buf: &mut [u8], mut keep: impl FnMut(OwnedFd)) -> io::Result<usize> {
    let space = unsafe { libc::CMSG_SPACE((FDS_PER_READ * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut control = [0u64; 16];
    debug_assert!(space <= std::mem::size_of_val(&control));
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; its pointers refer to live locals.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the buffers described by `msg` are valid for the kernel to fill.
    let n = unsafe { libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if msg.msg_controllen > 0 {
        // SAFETY: walking the control messages the kernel wrote, within `msg`.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg);
                    let bytes = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                    for k in 0..bytes / std::mem::size_of::<RawFd>() {
                        let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(k));
                        keep(OwnedFd::from_raw_fd(fd));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
    }
    Ok(n as usize)
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
mod tests {
    use super::*;
    use std::io::{Seek, Write};

    fn memfd(seals: i32, size: u64) -> OwnedFd {
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        assert!(raw >= 0);
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        assert_eq!(unsafe { libc::ftruncate(raw, size as libc::off_t) }, 0);
        if seals != 0 {
            assert_eq!(unsafe { libc::fcntl(raw, libc::F_ADD_SEALS, seals) }, 0);
        }
        fd
    }

    /// Whether this process's page-table entry for the page at `addr` is present
    /// (bit 63 of /proc/self/pagemap, readable by any process for itself).
    fn page_present(addr: *const u8) -> bool {
        use std::os::unix::fs::FileExt;
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut entry = [0u8; 8];
        pagemap
            .read_exact_at(&mut entry, (addr as u64 / PAGE as u64) * 8)
            .unwrap();
        u64::from_le_bytes(entry) >> 63 == 1
    }

    #[test]
    fn a_dropped_segment_is_unmapped_and_closed_off_the_dropping_thread() {
        let maps_hold = |base: usize| {
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            maps.lines().any(|l| l.starts_with(&format!("{base:x}-")))
        };
        // The descriptor still names a segment (not closed, or reused by another).
        let fd_is_segment = |fd: RawFd| {
            std::fs::read_link(format!("/proc/self/fd/{fd}"))
                .map(|t| t.to_string_lossy().contains("weft-shm"))
                .unwrap_or(false)
        };
        let big = Mapping::create(4 << 20).unwrap();
        let (base, fd) = (big.base as usize, big.fd());
        assert!(maps_hold(base) && fd_is_segment(fd));
        drop(big);
        let started = std::time::Instant::now();
        while maps_hold(base) || fd_is_segment(fd) {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "the reaper never unmapped/closed the segment"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let threads: Vec<String> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .collect();
        assert!(
            threads.iter().any(|t| t.trim() == "weft-shm-reaper"),
            "no reaper thread: {threads:?}"
        );
        // A small mapping goes at once, on the dropping thread.
        let small = Mapping::create(64 << 10).unwrap();
        let base = small.base as usize;
        drop(small);
        assert!(!maps_hold(base), "a small mapping outlived its drop");
    }

    #[test]
    fn a_region_is_populated_in_the_servers_mapping_once_and_only_where_it_lies() {
        let client = Mapping::create(1 << 20).unwrap();
        let dup = unsafe { libc::dup(client.fd()) };
        let server = Arc::new(
            Mapping::adopt(unsafe { OwnedFd::from_raw_fd(dup) }, 1 << 20, SEGMENT_BYTES_MAX).unwrap(),
        );
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let writer = Region::new(Arc::new(client), 12_345, 10_000).unwrap();
        assert!(writer.write_at(0, &data));

        let region = Region::new(server.clone(), 12_345, 10_000).unwrap();
        // The server never touched its mapping: no entry yet for the region's pages.
        let first_page = unsafe { server.base.add(3 * PAGE) };
        assert!(
            !page_present(first_page),
            "the fresh mapping already has an entry"
        );
        assert_eq!(server.pages_populated(), 0);

        region.populate(10_000, false);
        // Bytes 12,345..22,345 lie in pages 3, 4 and 5.
        assert_eq!(server.pages_populated(), 3);
        for page in 3..6 {
            assert!(
                page_present(unsafe { server.base.add(page * PAGE) }),
                "page {page} not populated"
            );
        }
        assert!(
            !page_present(unsafe { server.base.add(6 * PAGE) }),
            "page 6 was populated too"
        );
        assert_eq!(region.bytes(10_000), &data[..], "populating changed the bytes");

        // Populated pages are not asked for again; a longer `n` is clipped to the region.
        region.populate(10_000, false);
        region.populate(u64::MAX, true);
        assert_eq!(server.pages_populated(), 3);
        // A region at the segment's end, for writing into.
        let last = Region::new(server.clone(), (1 << 20) - 100, 100).unwrap();
        last.populate(100, true);
        assert_eq!(server.pages_populated(), 4);
        assert!(page_present(unsafe { server.base.add((1 << 20) - PAGE) }));
    }

    #[test]
    fn the_server_maps_only_sealed_memfds_of_the_announced_size() {
        let ok = memfd(libc::F_SEAL_SHRINK, 1 << 20);
        assert!(Mapping::adopt(ok, 1 << 20, SEGMENT_BYTES_MAX).is_ok());
        let unsealed = memfd(0, 1 << 20);
        let e = Mapping::adopt(unsealed, 1 << 20, SEGMENT_BYTES_MAX).unwrap_err();
        assert!(e.contains("F_SEAL_SHRINK"), "{e}");
        let short = memfd(libc::F_SEAL_SHRINK, 4096);
        let e = Mapping::adopt(short, 1 << 20, SEGMENT_BYTES_MAX).unwrap_err();
        assert!(e.contains("not the 1048576 announced"), "{e}");
        let big = memfd(libc::F_SEAL_SHRINK, 1 << 20);
        assert!(Mapping::adopt(big, 1 << 20, 4096)
            .unwrap_err()
            .contains("refused"));
        // A regular file cannot be sealed: refused.
        let file = tempfile::tempfile().unwrap();
        file.set_len(4096).unwrap();
        let e = Mapping::adopt(file.into(), 4096, SEGMENT_BYTES_MAX).unwrap_err();
        assert!(e.contains("memfd") || e.contains("sealed"), "{e}");
        // Nor is a pipe.
        let mut fds = [0; 2];
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        assert!(Mapping::adopt(r, 4096, SEGMENT_BYTES_MAX).is_err());
        drop(w);
        // A sealed segment cannot be truncated under the mapping.
        let m = Mapping::create(1 << 16).unwrap();
        assert_ne!(unsafe { libc::ftruncate(m.fd(), 0) }, 0);
    }

    #[test]
    fn regions_outside_the_segment_are_refused() {
        let map = Arc::new(Mapping::create(1 << 16).unwrap());
        assert!(Region::new(map.clone(), 0, 1 << 16).is_ok());
        assert!(Region::new(map.clone(), 1, 1 << 16).is_err());
        assert!(Region::new(map.clone(), u64::MAX, 2).is_err());
        assert!(Region::new(map.clone(), 1 << 16, 0).is_ok());
        let r = Region::new(map, 100, 10).unwrap();
        assert!(r.write_at(0, &[1; 10]));
        assert!(!r.write_at(1, &[1; 10]));
        assert!(!r.write_at(u64::MAX, &[1]));
        let mut out = [0u8; 11];
        assert!(!r.read_at(0, &mut out));
        assert!(r.read_at(0, &mut out[..10]));
        assert_eq!(out[..10], [1; 10]);
    }

    #[test]
    fn reads_from_a_file_fill_holes_and_the_tail_with_zeros() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"abcdef").unwrap();
        file.rewind().unwrap();
        let map = Arc::new(Mapping::create(1 << 16).unwrap());
        let r = Region::new(map, 4096, 16).unwrap();
        assert!(r.write_at(0, &[9; 16]));
        assert_eq!(r.fill_from_file(&file, &[(4, 4), (0, 2)]).unwrap(), 6);
        assert_eq!(&r.bytes(16)[..6], b"ef\0\0ab");
        assert!(r.fill_from_file(&file, &[(0, 17)]).is_err());
    }

    #[test]
    fn pool_buffers_held_by_calls_are_not_handed_out_again() {
        let pool = Pool::new(3, 10_000).unwrap();
        assert_eq!(pool.slot_bytes(), 12_288);
        let mut a = pool.lease().unwrap();
        let b = pool.lease().unwrap();
        let c = pool.lease().unwrap();
        assert!(pool.lease().is_none(), "more leases than buffers");
        assert_eq!(a.bytes().len(), 12_288);
        // Parts inside the pool map to its offsets; one outside, or none, to nothing.
        let base = a.bytes().as_mut_ptr();
        let at = base as usize - pool.mapping().base as usize;
        let parts = [(unsafe { base.add(100) }, 50), (base, 10), (base, 0)];
        assert_eq!(
            pool.pieces_of(&parts),
            Some(vec![(at as u64 + 100, 50), (at as u64, 10)])
        );
        let mut outside = [0u8; 16];
        assert_eq!(pool.pieces_of(&[(base, 10), (outside.as_mut_ptr(), 16)]), None);
        let end = unsafe { pool.mapping().base.add(pool.mapping().len - 10) };
        assert_eq!(pool.pieces_of(&[(end, 11)]), None, "a part past the pool's end");
        assert_eq!(pool.pieces_of(&[(base, 0)]), None);
        // A call naming buffer a (and, across the boundary, the next) holds both.
        let pieces = [(at as u64 + 12_000, 1_000)];
        let hold = pool.hold(&pieces);
        drop(a);
        drop(b);
        assert_eq!(pool.counts(), (0, 0), "a held buffer came back");
        drop(hold);
        assert_eq!(pool.counts().0, 2);
        // The last returned is handed out first (its pages are populated).
        let again = pool.lease().unwrap();
        drop(again);
        // A hold retired (its connection broke before the answer) keeps its buffers out.
        let c_at = {
            let mut c = c;
            let at = c.bytes().as_mut_ptr() as usize - pool.mapping().base as usize;
            pool.hold(&[(at as u64, 1)]).retire();
            at
        };
        assert_eq!(pool.counts(), (2, 1), "buffer at {c_at} was not retired");
        let x = pool.lease().unwrap();
        let y = pool.lease().unwrap();
        assert!(pool.lease().is_none(), "a retired buffer was handed out");
        drop((x, y));
        assert_eq!(pool.counts(), (2, 1));
    }

    #[test]
    fn reads_from_a_file_scatter_across_regions() {
        let mut file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8 + 1).collect();
        file.write_all(&data).unwrap();
        file.rewind().unwrap();
        let map = Arc::new(Mapping::create(1 << 16).unwrap());
        let whole = Region::new(map.clone(), 0, 1 << 16).unwrap();
        assert!(whole.write_at(0, &[0xee; 1 << 16]));
        let regions = [
            Region::new(map.clone(), 40_000, 3).unwrap(),
            Region::new(map.clone(), 100, 5_000).unwrap(),
            Region::new(map.clone(), 20_000, 7_000).unwrap(),
        ];
        // Runs: 2,000 bytes from 8,000 (the last 2,000 of the file and nothing past
        // it), then 4,000 past the end (zeros), then 5,000 from 1.
        let runs = [(8_000, 2_003), (50_000, 5_000), (1, 4_997)];
        assert_eq!(fill_regions(&file, &runs, &regions).unwrap(), 12_000);
        let mut placed = Vec::new();
        for r in &regions {
            placed.extend_from_slice(r.bytes(r.len()));
        }
        let mut expected = data[8_000..].to_vec();
        expected.extend(std::iter::repeat_n(0u8, 5_003));
        expected.extend_from_slice(&data[1..4_998]);
        // The regions hold 3 bytes more than the runs: left as they were.
        assert!(placed[..12_000] == expected[..], "scattered bytes differ");
        assert_eq!(placed[12_000..], [0xee; 3]);
        // Nothing outside the regions was touched.
        let all = whole.bytes(1 << 16);
        assert!(all[..100].iter().all(|&b| b == 0xee));
        assert!(all[5_100..20_000].iter().all(|&b| b == 0xee));
        assert!(all[27_000..40_000].iter().all(|&b| b == 0xee));
        assert!(all[40_003..].iter().all(|&b| b == 0xee));
        // More bytes than the regions hold: refused before any is read.
        assert!(fill_regions(&file, &[(0, 12_004)], &regions).is_err());
        // A copy scatters only when the lengths match.
        assert!(!Region::scatter(&regions, &[1; 12_000]));
        assert!(Region::scatter(&regions, &[7; 12_003]));
        assert!(regions.iter().all(|r| r.bytes(r.len()).iter().all(|&b| b == 7)));
    }

    #[test]
    fn leases_come_back_and_merge() {
        let seg = ClientSegment::new(Mapping::create(64 * UNIT).unwrap());
        let a = seg.lease(10 * UNIT).unwrap();
        let b = seg.lease(1).unwrap();
        let c = seg.lease(53 * UNIT).unwrap();
        assert!(seg.lease(1).is_none());
        assert_eq!((a.region().offset(), b.region().offset()), (0, 10 * UNIT));
        drop(b);
        assert!(seg.lease(2 * UNIT).is_none());
        drop(a);
        assert!(seg.lease(11 * UNIT).is_some());
        drop(c);
        assert_eq!(seg.free_bytes(), 64 * UNIT);
        assert!(seg.lease(64 * UNIT).is_some());
    }

    #[test]
    fn descriptors_pass_over_a_unix_socket() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let m = Mapping::create(1 << 16).unwrap();
        send_with_fd(a.as_raw_fd(), b"hello", m.fd()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        let n = recv_with_fds(b.as_raw_fd(), &mut buf, |fd| got.push(fd)).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(got.len(), 1);
        let peer = Mapping::adopt(got.pop().unwrap(), 1 << 16, SEGMENT_BYTES_MAX).unwrap();
        let (mr, pr) = (
            Region::new(Arc::new(m), 0, 8).unwrap(),
            Region::new(Arc::new(peer), 0, 8).unwrap(),
        );
        assert!(mr.write_at(0, b"shared!!"));
        assert_eq!(pr.bytes(8), b"shared!!");
    }
}

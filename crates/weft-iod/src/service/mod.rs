//! Request handling for the io role: reads and writes of request descriptors as one
//! stream in file order, sync, extents, truncate, object create/remove, statfs. Here:
//! the service and its calls; `pieces.rs` finds this server's share of a request,
//! `handler.rs` dispatches requests from the event loops, `inline.rs` checks whether a
//! small one would wait for the disk.

use crate::append::AppendLocks;
use crate::extent_lock::ExtentLocks;
use crate::objects::{io_error, ObjectStore};
use crate::sieve::{self, LocalPiece, ViewWindow, WriteLocks, SIEVE_SPAN_BYTES_MAX};
use crate::views::ViewRegistry;
use std::path::Path;
use std::sync::Arc;
use weft_layout::view::View;
use weft_layout::{InodeId, Layout};
use weft_proto::frame::DATA_BYTES_MAX;
use weft_proto::msg::{Request, Response, ViewId, PIECES_PER_REQUEST_MAX};
use weft_proto::{ErrorCode, IoStatfs, ObjStamped, Range, Striping, WireError};
use weft_rpc::ConnectionId;

mod handler;
mod inline;
mod migrate;
mod pieces;
mod rebuild;

pub use handler::INLINE_BYTES_MAX;
use pieces::{check_payload, range_pieces, view_windows};
pub use pieces::{ranges_stream_len, view_slices};

pub struct IoService {
    /// How errors name this server ("io server 3"), so that a full disk is traced to
    /// its server, not only to an inode.
    name: String,
    objects: ObjectStore,
    views: Arc<ViewRegistry>,
    locks: WriteLocks,
    append_locks: AppendLocks,
    extent_locks: ExtentLocks,
    /// A test hook (`stall_write_once`): none unless weftd was asked for it.
    stall: Option<WriteStall>,
    /// The data directory's file system refused a non-blocking buffered write
    /// (`RWF_NOWAIT`; ext4 does): the loop writes small writes as before.
    nowait_writes_unsupported: std::sync::atomic::AtomicBool,
    /// The stamps of objects' chunks, for rebuilds (`crate::rebuild`).
    stamps: crate::rebuild::Stamps,
    /// Objects frozen or fenced by migrations (`crate::migrate`).
    migrations: crate::migrate::Migrations,
}

/// The test hook of `IoService::stall_write_once`.
struct WriteStall {
    offset: u64,
    pause: std::time::Duration,
    fired: std::sync::atomic::AtomicBool,
}

impl WriteStall {
    /// Whether a write of `ranges` is the one to hold (if the hook has not fired yet).
    fn due(&self, ranges: &[Range]) -> bool {
        ranges.first().is_some_and(|r| r.offset == self.offset)
            && !self.fired.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Longest stall `stall_write_once` takes.
pub const WRITE_STALL_MAX: std::time::Duration = std::time::Duration::from_secs(600);

/// Most buffers one `preadv` of `read_into_parts` fills (the kernel's IOV_MAX).
const PREADV_PARTS_MAX: usize = 1024;

impl IoService {
    pub fn open(data_dir: &Path) -> std::io::Result<IoService> {
        Ok(IoService {
            name: "io server".to_owned(),
            objects: ObjectStore::open(data_dir)?,
            views: Arc::default(),
            locks: WriteLocks::new(),
            append_locks: AppendLocks::default(),
            extent_locks: ExtentLocks::default(),
            stall: None,
            nowait_writes_unsupported: std::sync::atomic::AtomicBool::new(false),
            stamps: Default::default(),
            migrations: crate::migrate::Migrations::open(data_dir)?,
        })
    }

    /// A test hook: the first `Write` whose first range starts at file offset `offset`
    /// sleeps `pause` (at most `WRITE_STALL_MAX`) after it began and before it writes a
    /// byte, as a write stuck in the kernel would; later writes are not held. Says so
    /// on stderr when it fires and when it goes on, so that a test knows the write
    /// began and whether it is still held.
    pub fn stall_write_once(mut self, offset: u64, pause: std::time::Duration) -> IoService {
        self.stall = Some(WriteStall {
            offset,
            pause: pause.min(WRITE_STALL_MAX),
            fired: std::sync::atomic::AtomicBool::new(false),
        });
        self
    }

    /// Names this server in the errors of its disk ("io server 3").
    pub fn named(mut self, name: impl Into<String>) -> IoService {
        self.name = name.into();
        self
    }

    /// An error of this server's disk, saying which server it is.
    fn name_disk_error(&self, e: WireError) -> WireError {
        match e.code {
            ErrorCode::NoSpace | ErrorCode::Io => {
                WireError::new(e.code, format!("{}: {}", self.name, e.message))
            }
            _ => e,
        }
    }

    /// The extent locks' counts, for the metrics and `LockStats`.
    pub fn lock_stats(&self) -> weft_proto::msg::LockStats {
        self.extent_locks.stats()
    }

    /// Views registered over all open connections.
    pub fn views_registered(&self) -> usize {
        self.views.count()
    }

    pub fn objects(&self) -> &ObjectStore {
        &self.objects
    }

    /// The views registered with this server, for a cache role in the same process.
    pub fn views(&self) -> Arc<ViewRegistry> {
        self.views.clone()
    }

    /// Writes `data`, this server's pieces of `ranges` in file order, to the object of
    /// `inode` (a colocated cache manager writes back through this, with no socket).
    pub fn write(
        &self,
        inode: InodeId,
        striping: Striping,
        ranges: &[Range],
        data: &[u8],
    ) -> Result<Response, WireError> {
        self.write_unnamed(inode, striping, ranges, data)
            .map_err(|e| self.name_disk_error(e))
    }

    fn write_unnamed(
        &self,
        inode: InodeId,
        striping: Striping,
        ranges: &[Range],
        data: &[u8],
    ) -> Result<Response, WireError> {
        self.objects.check_writable(data.len() as u64)?;
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let expected = ranges_stream_len(&layout, index, ranges)?;
        check_payload(data.len(), expected, "ranges")?;
        let file = self.objects.get(inode)?;
        if let Some(stall) = &self.stall {
            if stall.due(ranges) && !stall.fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
                eprintln!(
                    "weftd: test hook: the write of inode {inode} at {} stalls for {} ms",
                    stall.offset,
                    stall.pause.as_millis()
                );
                std::thread::sleep(stall.pause);
                eprintln!("weftd: test hook: the stalled write of inode {inode} goes on");
            }
        }
        let pieces = range_pieces(&layout, index, ranges);
        sieve::write_pieces(
            &file,
            inode,
            self.locks.of(inode),
            pieces,
            data,
            PIECES_PER_REQUEST_MAX,
        )?;
        Ok(Response::Bytes(expected))
    }

    /// Reads this server's pieces of `ranges`, in file order; holes and bytes past the
    /// object's end read as zeros.
    pub fn read(
        &self,
        inode: InodeId,
        striping: Striping,
        ranges: &[Range],
    ) -> Result<(Response, Vec<u8>), WireError> {
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let total = ranges_stream_len(&layout, index, ranges)?;
        let file = self.objects.get(inode)?;
        let mut data = vec![0u8; total as usize];
        let pieces = range_pieces(&layout, index, ranges);
        sieve::read_pieces(&file, inode, pieces, &mut data, PIECES_PER_REQUEST_MAX)?;
        Ok((Response::Bytes(total), data))
    }

    /// Asks the kernel to start reading this server's bytes of `ranges` into the page
    /// cache (`POSIX_FADV_WILLNEED`, adjacent pieces merged), without waiting: a cache
    /// manager's read-ahead of the blocks a read is likely to ask for next. A missing
    /// object is no error (nothing to read ahead).
    pub fn will_need(&self, inode: InodeId, striping: Striping, ranges: &[Range]) {
        use std::os::fd::AsRawFd;
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let Ok(file) = self.objects.get(inode) else { return };
        let mut span: Option<(u64, u64)> = None;
        let advise = |(at, len): (u64, u64)| {
            // SAFETY: a plain advice call on an open descriptor; it reads no memory of ours.
            unsafe {
                libc::posix_fadvise(file.as_raw_fd(), at as i64, len as i64, libc::POSIX_FADV_WILLNEED)
            };
        };
        for piece in range_pieces(&layout, index, ranges) {
            span = match span {
                Some((at, len)) if at + len == piece.local_offset => Some((at, len + piece.len)),
                Some(done) => {
                    advise(done);
                    Some((piece.local_offset, piece.len))
                }
                None => Some((piece.local_offset, piece.len)),
            };
        }
        if let Some(done) = span {
            advise(done);
        }
    }

    /// `read` into the caller's `out`, which must be exactly this server's stream of
    /// `ranges` (a cache manager fetching into its own buffer: no reply buffer, no copy).
    pub fn read_into(
        &self,
        inode: InodeId,
        striping: Striping,
        ranges: &[Range],
        out: &mut [u8],
    ) -> Result<(), WireError> {
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let total = ranges_stream_len(&layout, index, ranges)?;
        check_payload(out.len(), total, "ranges")?;
        let file = self.objects.get(inode)?;
        // Every byte of `out` is read, or zeroed past the object's end, by
        // `read_pieces`: no zero-fill first (a cache manager's fetch reads every block
        // through here).
        let pieces = range_pieces(&layout, index, ranges);
        sieve::read_pieces(&file, inode, pieces, out, PIECES_PER_REQUEST_MAX)
    }

    /// `read_into` of several ranges, each into its own buffer (`outs[i]` exactly this
    /// server's bytes of `ranges[i]`: a cache manager's block buffers): pieces that
    /// follow each other in the object are read by one `preadv`, so consecutive
    /// blocks read as one request though each lands in its own buffer.
    pub fn read_into_parts(
        &self,
        inode: InodeId,
        striping: Striping,
        ranges: &[Range],
        outs: &mut [&mut [u8]],
    ) -> Result<(), WireError> {
        let layout = striping.layout();
        let index = striping.server_index as usize;
        if ranges.len() != outs.len() {
            return Err(WireError::new(ErrorCode::InvalidArgument, "one buffer per range"));
        }
        for (range, out) in ranges.iter().zip(outs.iter()) {
            let expected = ranges_stream_len(&layout, index, std::slice::from_ref(range))?;
            check_payload(out.len(), expected, "range")?;
        }
        let file = self.objects.get(inode)?;
        // (object offset, buffer) per piece, in order; runs of adjacent ones together.
        let mut run: Vec<&mut [u8]> = Vec::new();
        let mut run_at = 0u64;
        let mut run_end = 0u64;
        for (range, out) in ranges.iter().zip(outs.iter_mut()) {
            let mut rest: &mut [u8] = out;
            for piece in range_pieces(&layout, index, std::slice::from_ref(range)) {
                let (this, next) = std::mem::take(&mut rest).split_at_mut(piece.len as usize);
                rest = next;
                if this.is_empty() {
                    continue;
                }
                if run.is_empty() || piece.local_offset != run_end || run.len() >= PREADV_PARTS_MAX {
                    sieve::read_vectored_full_at(&file, &mut run, run_at)
                        .map_err(|e| io_error(e, inode, "read"))?;
                    run.clear();
                    run_at = piece.local_offset;
                }
                run_end = piece.local_offset + piece.len;
                run.push(this);
            }
        }
        sieve::read_vectored_full_at(&file, &mut run, run_at).map_err(|e| io_error(e, inode, "read"))
    }

    #[allow(clippy::too_many_arguments)]
    fn write_view(
        &self,
        connection: ConnectionId,
        inode: InodeId,
        striping: Striping,
        view: ViewId,
        view_offset: u64,
        len: u64,
        data: &[u8],
    ) -> Result<Response, WireError> {
        self.objects.check_writable(data.len() as u64)?;
        let view = self.views.get(connection, view)?;
        let layout = striping.layout();
        let (expected, windows) =
            view_windows(&view, view_offset, len, &layout, striping.server_index as usize)?;
        // Checked before anything is written, so a mismatched write changes nothing.
        check_payload(data.len(), expected, "view interval")?;
        let file = self.objects.get(inode)?;
        sieve::write_view(&file, inode, self.locks.of(inode), &view, windows, data)?;
        Ok(Response::Bytes(expected))
    }

    fn read_view(
        &self,
        connection: ConnectionId,
        inode: InodeId,
        striping: Striping,
        view: ViewId,
        view_offset: u64,
        len: u64,
    ) -> Result<(Response, Vec<u8>), WireError> {
        let view = self.views.get(connection, view)?;
        let layout = striping.layout();
        let (total, windows) =
            view_windows(&view, view_offset, len, &layout, striping.server_index as usize)?;
        let file = self.objects.get(inode)?;
        let mut data = vec![0u8; total as usize];
        sieve::read_view(&file, inode, &view, windows, &mut data)?;
        Ok((Response::Bytes(total), data))
    }

    fn extents(&self, items: &[(InodeId, Striping)]) -> Result<Response, WireError> {
        let mut ends = Vec::with_capacity(items.len());
        for (inode, striping) in items {
            let end = match std::fs::metadata(self.objects.path_of(*inode)) {
                Ok(m) => striping
                    .layout()
                    .logical_end_from_local(striping.server_index as usize, m.len()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => u64::MAX,
                Err(e) => return Err(io_error(e, *inode, "stat")),
            };
            ends.push(end);
        }
        Ok(Response::Extents(ends))
    }

    /// The logical end and the bytes allocated on disk of each object.
    fn obj_stat(&self, items: &[(InodeId, Striping)]) -> Result<Response, WireError> {
        use std::os::unix::fs::MetadataExt;
        let mut stats = Vec::with_capacity(items.len());
        for (inode, striping) in items {
            let stat = match std::fs::metadata(self.objects.path_of(*inode)) {
                Ok(m) => (
                    striping
                        .layout()
                        .logical_end_from_local(striping.server_index as usize, m.len()),
                    m.blocks().saturating_mul(512),
                ),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (u64::MAX, 0),
                Err(e) => return Err(io_error(e, *inode, "stat")),
            };
            stats.push(stat);
        }
        Ok(Response::ObjStats(stats))
    }

    /// `obj_stat` with each object's change stamp (`ObjStamped`): its ctime, unless
    /// that is less than `ObjStamped::SETTLE_NS` before now (then `UNSETTLED`).
    fn obj_stamp(&self, items: &[(InodeId, Striping)]) -> Result<Response, WireError> {
        use std::os::unix::fs::MetadataExt;
        let mut stamps = Vec::with_capacity(items.len());
        for (inode, striping) in items {
            let stamped = match std::fs::metadata(self.objects.path_of(*inode)) {
                Ok(m) => {
                    // Read after the stat: a change between the two only makes the
                    // stamp look older than it is to the settle check, never newer.
                    let now = unix_now_ns();
                    let ctime = (m.ctime().max(0) as u64)
                        .saturating_mul(1_000_000_000)
                        .saturating_add(m.ctime_nsec().max(0) as u64);
                    let settled = now
                        .checked_sub(ctime)
                        .is_some_and(|age| age >= ObjStamped::SETTLE_NS);
                    ObjStamped {
                        end: striping
                            .layout()
                            .logical_end_from_local(striping.server_index as usize, m.len()),
                        allocated: m.blocks().saturating_mul(512),
                        // ABSENT and UNSETTLED are never a real ctime (1970, 2554).
                        stamp: if settled {
                            ctime.clamp(ObjStamped::ABSENT + 1, ObjStamped::UNSETTLED - 1)
                        } else {
                            ObjStamped::UNSETTLED
                        },
                        mtime: weft_proto::Timespec {
                            secs: m.mtime(),
                            nanos: m.mtime_nsec().clamp(0, 999_999_999) as u32,
                        },
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => ObjStamped {
                    end: u64::MAX,
                    allocated: 0,
                    stamp: ObjStamped::ABSENT,
                    mtime: weft_proto::Timespec::default(),
                },
                Err(e) => return Err(io_error(e, *inode, "stat")),
            };
            stamps.push(stamped);
        }
        Ok(Response::ObjStamps(stamps))
    }

    /// fallocate(2) of this server's part of `[offset, offset + len)`: one local run,
    /// since a server's stripes of a file range sit back to back in its object.
    fn allocate(
        &self,
        inode: InodeId,
        striping: Striping,
        (offset, len): (u64, u64),
        mode: u32,
    ) -> Result<Response, WireError> {
        use std::os::fd::AsRawFd;
        if mode & libc::FALLOC_FL_PUNCH_HOLE as u32 != 0 {
            self.objects.check_not_failed()?;
        } else {
            self.objects.check_writable(len)?;
        }
        let supported = [
            0,
            libc::FALLOC_FL_KEEP_SIZE as u32,
            (libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE) as u32,
            libc::FALLOC_FL_ZERO_RANGE as u32,
            (libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_ZERO_RANGE) as u32,
        ];
        if !supported.contains(&mode) {
            return Err(WireError::new(
                ErrorCode::Unsupported,
                format!(
                    "fallocate mode {mode:#x}: only 0, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE and ZERO_RANGE (with or without KEEP_SIZE) are supported"
                ),
            ));
        }
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let start = layout.local_size_for(index, offset);
        let end = layout.local_size_for(index, offset + len);
        if end == start {
            return Ok(Response::Done);
        }
        let file = self.objects.get(inode)?;
        // Alone, as truncate: a punched hole must not be undone by a sieve write-back.
        let _alone = self.locks.of(inode).write().unwrap_or_else(|p| p.into_inner());
        let fallocate = |mode: i32| {
            // SAFETY: a valid descriptor; the range was checked against overflow at decode.
            let rc = unsafe {
                libc::fallocate(
                    file.as_raw_fd(),
                    mode,
                    start as libc::off_t,
                    (end - start) as libc::off_t,
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        let done = match fallocate(mode as i32) {
            // Zeroing where the objects' file system cannot (tmpfs): a hole, then the
            // allocation (and, without KEEP_SIZE, the growth) the zeroed range has.
            Err(e)
                if e.raw_os_error() == Some(libc::EOPNOTSUPP)
                    && mode & libc::FALLOC_FL_ZERO_RANGE as u32 != 0 =>
            {
                fallocate(libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE)
                    .and_then(|()| fallocate(mode as i32 & libc::FALLOC_FL_KEEP_SIZE))
            }
            other => other,
        };
        done.map_err(|e| io_error(e, inode, "fallocate"))?;
        Ok(Response::Done)
    }

    /// Sets the object's local size for a file of `size` bytes (`Request::Truncate`);
    /// also called directly by a colocated cache manager truncating a cached file.
    pub fn truncate(&self, inode: InodeId, striping: Striping, size: u64) -> Result<Response, WireError> {
        // Truncating is a way to free space: never refused for the reserve.
        self.objects.check_not_failed()?;
        weft_layout::stripe::check_range(size, 0)
            .map_err(|e| WireError::new(ErrorCode::InvalidArgument, e.to_string()))?;
        let local = striping
            .layout()
            .local_size_for(striping.server_index as usize, size);
        let file = self.objects.get(inode)?;
        // Alone, so that no sieve span writes back bytes from before the truncate.
        let _alone = self.locks.of(inode).write().unwrap_or_else(|p| p.into_inner());
        if local == 0 {
            // A big object is replaced, its blocks freed in the background.
            self.objects.empty(inode, &file)?;
        } else {
            file.set_len(local).map_err(|e| io_error(e, inode, "truncate"))?;
        }
        Ok(Response::Done)
    }

    fn statfs(&self) -> Result<Response, WireError> {
        let mut s = IoStatfs::default();
        let fail = |e: std::io::Error| WireError::new(ErrorCode::Io, format!("statfs: {e}"));
        for shard in std::fs::read_dir(self.objects.root()).map_err(fail)? {
            for entry in std::fs::read_dir(shard.map_err(fail)?.path()).map_err(fail)? {
                if let Ok(m) = entry.map_err(fail)?.metadata() {
                    s.objects += 1;
                    s.bytes_stored += m.len();
                }
            }
        }
        if let Ok(fs) = crate::objects::file_system_stats(self.objects.root()) {
            s.bytes_free = fs.avail;
            s.bytes_unused = fs.free;
            s.bytes_total = fs.total;
            s.file_system = fs.identity;
        }
        Ok(Response::IoStatfs(s))
    }
}

/// Wall-clock time in nanoseconds since 1970 (0 before it).
fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64)
}

#[cfg(test)]
mod tests;

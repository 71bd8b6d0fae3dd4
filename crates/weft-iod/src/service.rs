//! Request handling for the io role: reads and writes of request descriptors as one
//! stream in file order, sync, extents, truncate, object create/remove, statfs.

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

/// This server's pieces of `ranges`, in request (stream) order.
fn range_pieces<'a>(
    layout: &'a Layout,
    server_index: usize,
    ranges: &'a [Range],
) -> impl Iterator<Item = LocalPiece> + 'a {
    ranges
        .iter()
        .flat_map(move |range| {
            // Ranges were checked against overflow when decoded.
            layout
                .pieces_on(server_index, range.offset, range.len)
                .expect("range checked at decode")
        })
        .map(|piece| LocalPiece {
            local_offset: piece.local_offset,
            len: piece.len,
        })
}

/// Server `server_index`'s share of view bytes `[view_offset, view_offset + len)` of
/// `layout`: its stream length, refused past a frame's data limit before any piece is
/// walked, and its slices (one per stripe). Shared by the io and cache roles.
pub fn view_slices<'a>(
    view: &'a View,
    view_offset: u64,
    len: u64,
    layout: &'a Layout,
    server_index: usize,
) -> Result<(u64, weft_layout::view::StripeSlices<'a>), WireError> {
    let slices = view
        .slices_on(view_offset, len, layout, server_index)
        .map_err(|e| {
            WireError::new(
                ErrorCode::InvalidArgument,
                format!("view interval at {view_offset} with length {len}: {e}"),
            )
        })?;
    let mut total = 0u64;
    for slice in slices.clone() {
        total += slice.len;
        if total > DATA_BYTES_MAX {
            return Err(sieve::too_large());
        }
    }
    Ok((total, slices))
}

/// This server's share of view bytes `[view_offset, view_offset + len)`: its stream
/// length, and the stream as windows (see `sieve::ViewWindow`), one stripe slice cut
/// to at most `SIEVE_SPAN_BYTES_MAX` of the file at a time. Found from the view and the
/// striping alone.
fn view_windows<'a>(
    view: &'a View,
    view_offset: u64,
    len: u64,
    layout: &'a Layout,
    server_index: usize,
) -> Result<(u64, impl Iterator<Item = ViewWindow> + 'a), WireError> {
    let (total, slices) = view_slices(view, view_offset, len, layout, server_index)?;
    let windows = slices.flat_map(move |slice| {
        let end = slice.view_offset + slice.len;
        let mut start = slice.view_offset;
        std::iter::from_fn(move || {
            if start >= end {
                return None;
            }
            let first = view.view_to_file(start).expect("interval checked");
            let stop = view
                .file_to_view(first + SIEVE_SPAN_BYTES_MAX)
                .clamp(start + 1, end);
            let window = ViewWindow {
                view_offset: start,
                len: stop - start,
                stripe_file_offset: slice.stripe_file_offset,
                stripe_local_offset: slice.stripe_local_offset,
            };
            start = stop;
            Some(window)
        })
    });
    Ok((total, windows))
}

/// Bytes of `ranges` held by this server, refusing totals that cannot travel in a frame
/// before any piece is walked.
/// Most buffers one `preadv` of `read_into_parts` fills (the kernel's IOV_MAX).
const PREADV_PARTS_MAX: usize = 1024;

fn check_payload(carried: usize, expected: u64, what: &str) -> Result<(), WireError> {
    if carried as u64 == expected {
        Ok(())
    } else {
        Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("write carries {carried} bytes but its {what} covers {expected} bytes on this server"),
        ))
    }
}

/// Bytes of `ranges` on server `server_index` of `layout`, refused past a frame's data
/// limit. Shared by the io and cache roles.
pub fn ranges_stream_len(layout: &Layout, server_index: usize, ranges: &[Range]) -> Result<u64, WireError> {
    let total = ranges
        .iter()
        .map(|r| layout.bytes_on(server_index, r.offset, r.len))
        .fold(0u64, u64::saturating_add);
    if total > DATA_BYTES_MAX {
        return Err(sieve::too_large());
    }
    Ok(total)
}

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

/// Largest read or write an event loop runs itself (`Handler::runs_inline`).
pub const INLINE_BYTES_MAX: u64 = 64 * 1024;

impl weft_rpc::Handler for IoService {
    /// Plain reads go out by sendfile: the kernel moves the object's bytes from the page
    /// cache into the socket, with no buffer to zero and no copy through this process.
    fn reply_from_file(
        &self,
        _connection: ConnectionId,
        request: &Request,
    ) -> Option<Result<(Response, weft_rpc::FileReply), WireError>> {
        let Request::Read {
            inode,
            striping,
            ranges,
        } = request
        else {
            return None;
        };
        Some((|| {
            let layout = striping.layout();
            let index = striping.server_index as usize;
            let total = ranges_stream_len(&layout, index, ranges)?;
            let file = self.objects.get(*inode)?;
            let mut runs: Vec<(u64, u64)> = Vec::new();
            for piece in range_pieces(&layout, index, ranges) {
                match runs.last_mut() {
                    Some(run) if run.0 + run.1 == piece.local_offset => run.1 += piece.len,
                    _ => runs.push((piece.local_offset, piece.len)),
                }
            }
            Ok((Response::Bytes(total), weft_rpc::FileReply { file, runs }))
        })())
    }

    fn handle(
        &self,
        connection: ConnectionId,
        request: Request,
        data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        self.handle_unnamed(connection, request, &data)
            .map_err(|e| self.name_disk_error(e))
    }

    /// Writes whose data lies in a client's shared segment (`weft_rpc::shm`) go from
    /// there to the object, with no copy in between.
    fn handle_borrowed(
        &self,
        connection: ConnectionId,
        request: Request,
        data: &[u8],
    ) -> Result<(Response, Vec<u8>), WireError> {
        self.handle_unnamed(connection, request, data)
            .map_err(|e| self.name_disk_error(e))
    }

    fn reply_bytes_hint(&self, request: &Request) -> u64 {
        match request {
            // Plain reads are answered from the object file (`reply_from_file`): the
            // reply holds no memory, however slowly its reader takes it.
            Request::Read { .. } => 0,
            // This server's share is not known before the pieces are walked; it is at
            // most the interval and at most one frame.
            Request::ReadView { len, .. } => (*len).min(DATA_BYTES_MAX),
            _ => 0,
        }
    }

    /// A read or write of one range of at most `INLINE_BYTES_MAX` is a pread or
    /// pwrite of the page cache (no fsync; a write takes its object's lock shared, held
    /// exclusively only by a sieving write's short read-modify-write): run by the event
    /// loop that read it rather than handed to a worker.
    fn runs_inline(&self, request: &Request) -> bool {
        match request {
            Request::Read { ranges, .. } | Request::Write { ranges, .. } => {
                matches!(ranges.as_slice(), [range] if range.len <= INLINE_BYTES_MAX)
            }
            _ => false,
        }
    }

    /// A small read or write on the event loop, with `RWF_NOWAIT`: a read that would
    /// wait for the disk (not all in the page cache), or a write the kernel would
    /// block (writeback throttling, a lock of the file), or a write whose object lock
    /// a sieving write holds, goes to a worker instead, so that it stalls no other
    /// connection of the loop. A read that would not wait is left to the loop's usual
    /// path (`NotTried`). Where the file system takes no non-blocking buffered
    /// writes (`EOPNOTSUPP`, ext4), small writes are written by the loop as before.
    fn try_inline(&self, _connection: ConnectionId, request: &Request, data: &[u8]) -> weft_rpc::Inline {
        use weft_rpc::Inline;
        let result = match request {
            // A read whose bytes are all in the page cache is served as usual (sendfile,
            // or a copy into the shared segment): it will not wait.
            Request::Read {
                inode,
                striping,
                ranges,
            } if ranges.len() == 1 => match self.read_would_wait(*inode, striping, ranges[0]) {
                false => return Inline::NotTried,
                true => Ok(None),
            },
            Request::Write {
                inode,
                striping,
                ranges,
            } if ranges.len() == 1 => self.write_nowait(*inode, striping, ranges, data),
            _ => return Inline::NotTried,
        };
        match result {
            Ok(Some(reply)) => Inline::Done(Ok(reply)),
            Ok(None) => {
                crate::counters::COUNTERS.inline_to_worker();
                Inline::WouldBlock
            }
            Err(e) => Inline::Done(Err(self.name_disk_error(e))),
        }
    }

    /// Writes, view writes, truncates and allocations change this server's object of
    /// the file: their runs of it in object (local) offsets, so that only requests
    /// touching the same bytes here are ordered. A server's part of one file range is
    /// one run of its object (its stripes of the range sit back to back).
    fn changes(&self, connection: ConnectionId, request: &Request) -> Option<weft_rpc::Changes> {
        let local = |striping: &Striping, offset: u64| {
            striping
                .layout()
                .local_size_for(striping.server_index as usize, offset)
        };
        let (inode, runs) = match request {
            Request::Write {
                inode,
                striping,
                ranges,
            } => {
                let layout = striping.layout();
                let index = striping.server_index as usize;
                // Ranges were checked against overflow when decoded.
                let runs = ranges
                    .iter()
                    .map(|r| {
                        (
                            layout.local_size_for(index, r.offset),
                            layout.local_size_for(index, r.offset + r.len),
                        )
                    })
                    .collect();
                (*inode, runs)
            }
            Request::WriteView {
                inode,
                striping,
                view,
                view_offset,
                len,
            } => (
                *inode,
                self.view_runs(connection, striping, *view, *view_offset, *len)?,
            ),
            // Everything from the new end on: the bytes cut, or the zeros added.
            Request::Truncate {
                inode,
                striping,
                size,
            } => (*inode, vec![(local(striping, *size), u64::MAX)]),
            Request::Allocate {
                inode,
                striping,
                offset,
                len,
                ..
            } => (
                *inode,
                vec![(
                    local(striping, *offset),
                    local(striping, offset.saturating_add(*len)),
                )],
            ),
            _ => return None,
        };
        Some(weft_rpc::Changes::new(inode.0, runs))
    }

    fn connection_closed(&self, connection: ConnectionId) {
        self.views.close(connection);
        self.append_locks.connection_closed(connection);
        self.extent_locks.connection_closed(connection);
    }
}

/// `preadv2`/`pwritev2` with `RWF_NOWAIT` on one buffer.
fn nowait(
    file: &std::fs::File,
    buf: *mut u8,
    len: usize,
    offset: u64,
    write: bool,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let iov = libc::iovec {
        iov_base: buf.cast(),
        iov_len: len,
    };
    // SAFETY: one iovec over a buffer the caller holds (read from, or written into
    // when `!write`), for the length given.
    let n = unsafe {
        if write {
            libc::pwritev2(file.as_raw_fd(), &iov, 1, offset as libc::off_t, libc::RWF_NOWAIT)
        } else {
            libc::preadv2(file.as_raw_fd(), &iov, 1, offset as libc::off_t, libc::RWF_NOWAIT)
        }
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

impl IoService {
    /// Whether a read of one range would wait for the disk: its bytes read, without
    /// waiting, into a scratch buffer of the loop's (the reply then goes out as usual,
    /// by sendfile: no memory held for it). Errors are the usual path's to report.
    fn read_would_wait(&self, inode: InodeId, striping: &Striping, range: Range) -> bool {
        thread_local! {
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let Ok(total) = ranges_stream_len(&layout, index, &[range]) else {
            return false;
        };
        if total > INLINE_BYTES_MAX {
            return false;
        }
        let Ok(file) = self.objects.get(inode) else {
            return false;
        };
        // This server's part of one range is one run of its object.
        let start = layout.local_size_for(index, range.offset);
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.resize(total as usize, 0);
            let mut done = 0usize;
            while done < scratch.len() {
                let rest = scratch.len() - done;
                match nowait(
                    &file,
                    scratch[done..].as_mut_ptr(),
                    rest,
                    start + done as u64,
                    false,
                ) {
                    // Past the object's end: a hole, nothing to wait for.
                    Ok(0) => return false,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        return e.kind() == std::io::ErrorKind::WouldBlock
                            || e.raw_os_error() == Some(libc::EOPNOTSUPP)
                    }
                }
            }
            false
        })
    }

    /// A write of one range that blocks on nothing: `None` if the kernel would have
    /// blocked it or a sieving write holds the object (the bytes written so far are
    /// written again by the worker that takes it over; the request is still this
    /// object's latest, see weft-rpc's `order`). Where the file system takes no
    /// non-blocking buffered write, a plain pwrite (under the same lock check).
    fn write_nowait(
        &self,
        inode: InodeId,
        striping: &Striping,
        ranges: &[Range],
        data: &[u8],
    ) -> Result<Option<(Response, Vec<u8>)>, WireError> {
        use std::sync::atomic::Ordering;
        if self.stall.as_ref().is_some_and(|s| s.due(ranges)) {
            // The test hook holds its write on a worker, never on the loop.
            return Ok(None);
        }
        self.objects.check_writable(data.len() as u64)?;
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let expected = ranges_stream_len(&layout, index, ranges)?;
        check_payload(data.len(), expected, "ranges")?;
        let file = self.objects.get(inode)?;
        let Ok(_shared) = self.locks.of(inode).try_read() else {
            return Ok(None);
        };
        // This server's part of one range is one run of its object.
        let start = layout.local_size_for(index, ranges[0].offset);
        let mut done = 0usize;
        while done < data.len() && !self.nowait_writes_unsupported.load(Ordering::Relaxed) {
            let rest = &data[done..];
            match nowait(
                &file,
                rest.as_ptr().cast_mut(),
                rest.len(),
                start + done as u64,
                true,
            ) {
                // Nothing written and no error: a worker finds out why.
                Ok(0) => return Ok(None),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    self.nowait_writes_unsupported.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(io_error(e, inode, "write")),
            }
        }
        // What the file system would not write without blocking: as before.
        std::os::unix::fs::FileExt::write_all_at(&*file, &data[done..], start + done as u64)
            .map_err(|e| io_error(e, inode, "write"))?;
        Ok(Some((Response::Bytes(expected), Vec::new())))
    }

    /// The object runs a view write changes: its pieces, merged, or, when they are
    /// more than `CHANGED_RUNS_MAX` runs, the one run from its first byte to its last
    /// here (walking no further, since the event loop asks). `None` for a write that
    /// will be refused (an unknown view, an interval past the limits).
    fn view_runs(
        &self,
        connection: ConnectionId,
        striping: &Striping,
        view: ViewId,
        view_offset: u64,
        len: u64,
    ) -> Option<Vec<(u64, u64)>> {
        let view = self.views.get(connection, view).ok()?;
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let (_, windows) = view_windows(&view, view_offset, len, &layout, index).ok()?;
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for window in windows {
            for piece in sieve::window_pieces(&view, &window) {
                let end = piece.local_offset + piece.len;
                if let Some(last) = runs.last_mut().filter(|l| l.1 == piece.local_offset) {
                    last.1 = end;
                } else if runs.len() == weft_rpc::server::CHANGED_RUNS_MAX {
                    let first = view.view_to_file(view_offset).ok()?;
                    let last = view.view_to_file(view_offset + len.max(1) - 1).ok()?;
                    let cover = (
                        layout.local_size_for(index, first),
                        layout.local_size_for(index, last + 1),
                    );
                    return Some(vec![cover]);
                } else {
                    runs.push((piece.local_offset, end));
                }
            }
        }
        Some(runs)
    }

    fn handle_unnamed(
        &self,
        connection: ConnectionId,
        request: Request,
        data: &[u8],
    ) -> Result<(Response, Vec<u8>), WireError> {
        let reply = match request {
            Request::Write {
                inode,
                striping,
                ranges,
            } => self.write_unnamed(inode, striping, &ranges, data)?,
            Request::Read {
                inode,
                striping,
                ranges,
            } => return self.read(inode, striping, &ranges),
            Request::Sync { inode } => {
                self.objects.sync(inode)?;
                Response::Done
            }
            Request::Extents { items } => self.extents(&items)?,
            Request::ObjStat { items } => self.obj_stat(&items)?,
            Request::ObjStamp { items } => self.obj_stamp(&items)?,
            Request::Allocate {
                inode,
                striping,
                offset,
                len,
                mode,
            } => self.allocate(inode, striping, (offset, len), mode)?,
            Request::Truncate {
                inode,
                striping,
                size,
            } => self.truncate(inode, striping, size)?,
            Request::ObjCreate { inodes } => {
                inodes.iter().try_for_each(|i| self.objects.create(*i))?;
                Response::Done
            }
            Request::ObjTimes { inodes, mtime } => {
                inodes
                    .iter()
                    .try_for_each(|i| self.objects.set_mtime(*i, mtime))?;
                Response::Done
            }
            Request::ObjPrecreate { inodes } => {
                self.objects.check_writable(0)?;
                self.objects.precreate(&inodes)?;
                Response::Done
            }
            Request::ObjRemove { inodes } => {
                inodes.iter().try_for_each(|i| self.objects.remove(*i))?;
                Response::Done
            }
            Request::IoStatfs => self.statfs()?,
            Request::RegisterView { view } => Response::View(self.views.register(connection, view)?),
            Request::ReleaseView { view } => {
                self.views.release(connection, view)?;
                Response::Done
            }
            Request::WriteView {
                inode,
                striping,
                view,
                view_offset,
                len,
            } => self.write_view(connection, inode, striping, view, view_offset, len, data)?,
            Request::ReadView {
                inode,
                striping,
                view,
                view_offset,
                len,
            } => return self.read_view(connection, inode, striping, view, view_offset, len),
            Request::AppendLock { inode } => Response::Token(self.append_locks.lock(connection, inode)?),
            Request::AppendUnlock { inode, token } => {
                self.append_locks.unlock(inode, token)?;
                Response::Done
            }
            Request::ExtentLock {
                inode,
                exclusive,
                attempt,
                ranges,
            } => Response::Token(
                self.extent_locks
                    .lock(connection, inode, exclusive, attempt, &ranges)?,
            ),
            Request::ExtentUnlock { inode, token } => {
                self.extent_locks.unlock(inode, token)?;
                Response::Done
            }
            Request::LockStats => Response::LockStats(self.extent_locks.stats()),
            other => {
                return Err(WireError::new(
                    ErrorCode::Unsupported,
                    format!(
                        "{:?} is a metadata operation; this server has the io role",
                        other.opcode()
                    ),
                ))
            }
        };
        Ok((reply, Vec::new()))
    }
}

/// Wall-clock time in nanoseconds since 1970 (0 before it).
fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;
    use weft_rpc::Handler;

    const CONNECTION: ConnectionId = ConnectionId(1);

    fn striping(index: u32) -> Striping {
        Striping {
            stripe_size_bytes: 1024,
            stripe_count: 3,
            server_index: index,
        }
    }

    #[test]
    fn a_contiguous_range_is_one_local_run_per_server() {
        let layout = striping(0).layout();
        let ranges = [Range {
            offset: 1500,
            len: 10_000,
        }];
        let mut runs = Vec::new();
        sieve::collect_runs(
            range_pieces(&layout, 1, &ranges),
            &mut runs,
            PIECES_PER_REQUEST_MAX,
        )
        .unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].local_offset, 476);
    }

    /// Change stamps: absent objects stay ABSENT, a fresh change is UNSETTLED, a settled
    /// object keeps its stamp until a same-size rewrite, after which it settles at
    /// another value.
    #[test]
    fn stamps_change_with_every_write_and_are_withheld_until_settled() {
        let dir = tempfile::tempdir().unwrap();
        let service = IoService::open(dir.path()).unwrap();
        let (inode, other) = (InodeId(5), InodeId(6));
        let stamp = |inode| {
            let items = vec![(inode, striping(0))];
            match service
                .handle(CONNECTION, Request::ObjStamp { items }, vec![])
                .unwrap()
                .0
            {
                Response::ObjStamps(s) => s[0],
                other => panic!("{other:?}"),
            }
        };
        let write = |byte: u8| {
            let write = Request::Write {
                inode,
                striping: striping(0),
                ranges: vec![Range { offset: 10, len: 100 }],
            };
            service.handle(CONNECTION, write, vec![byte; 100]).unwrap();
        };
        service
            .handle(CONNECTION, Request::ObjCreate { inodes: vec![inode] }, vec![])
            .unwrap();
        assert_eq!(stamp(other).stamp, ObjStamped::ABSENT);
        assert_eq!(stamp(other).end, u64::MAX);
        write(1);
        assert_eq!(stamp(inode).stamp, ObjStamped::UNSETTLED);
        assert_eq!(stamp(inode).end, 110);
        let settle = std::time::Duration::from_nanos(ObjStamped::SETTLE_NS + 100_000_000);
        std::thread::sleep(settle);
        let first = stamp(inode).stamp;
        assert_ne!(first, ObjStamped::UNSETTLED);
        assert_ne!(first, ObjStamped::ABSENT);
        assert_eq!(stamp(inode).stamp, first, "unchanged objects keep their stamp");
        write(2);
        assert_eq!(stamp(inode).stamp, ObjStamped::UNSETTLED);
        std::thread::sleep(settle);
        let second = stamp(inode).stamp;
        assert_ne!(second, ObjStamped::UNSETTLED);
        assert_ne!(second, first, "a same-size rewrite changes the stamp");
        assert_eq!(stamp(inode).end, 110);
    }

    #[test]
    fn writes_land_per_stripe_and_read_back_with_holes_as_zeros() {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let servers: Vec<_> = dirs.iter().map(|d| IoService::open(d.path()).unwrap()).collect();
        let inode = InodeId(77);
        let file_bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let ranges = [Range {
            offset: 100,
            len: 4000,
        }];
        for (k, service) in servers.iter().enumerate() {
            let k = k as u32;
            service
                .handle(CONNECTION, Request::ObjCreate { inodes: vec![inode] }, vec![])
                .unwrap();
            // This server's stream: its pieces of the range, in file order (naive model).
            let stream: Vec<u8> = (100..4100u64)
                .filter(|x| (x / 1024) % 3 == k as u64)
                .map(|x| file_bytes[x as usize])
                .collect();
            service
                .handle(
                    CONNECTION,
                    Request::Write {
                        inode,
                        striping: striping(k),
                        ranges: ranges.to_vec(),
                    },
                    stream,
                )
                .unwrap();
        }
        // Read the whole prefix back from each server and reassemble.
        let mut rebuilt = vec![0xAAu8; 5000];
        for (k, service) in servers.iter().enumerate() {
            let k = k as u32;
            let (_, data) = service
                .handle(
                    CONNECTION,
                    Request::Read {
                        inode,
                        striping: striping(k),
                        ranges: vec![Range { offset: 0, len: 5000 }],
                    },
                    vec![],
                )
                .unwrap();
            let mut it = data.into_iter();
            for x in (0..5000u64).filter(|x| (x / 1024) % 3 == k as u64) {
                rebuilt[x as usize] = it.next().unwrap();
            }
        }
        for x in 0..5000 {
            let expected = if (100..4100).contains(&x) {
                file_bytes[x]
            } else {
                0
            };
            assert_eq!(rebuilt[x], expected, "byte {x}");
        }
    }

    /// Precreation never takes over an object: a batch naming an existing one fails as a
    /// whole, leaves the existing object's data alone and none of the batch's new ones.
    #[test]
    fn precreate_is_exclusive_and_all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let service = IoService::open(dir.path()).unwrap();
        let precreate =
            |inodes: Vec<InodeId>| service.handle(CONNECTION, Request::ObjPrecreate { inodes }, vec![]);
        precreate(vec![InodeId(1), InodeId(2)]).unwrap();
        let write = Request::Write {
            inode: InodeId(2),
            striping: striping(0),
            ranges: vec![Range { offset: 0, len: 4 }],
        };
        service.handle(CONNECTION, write, b"data".to_vec()).unwrap();
        let error = precreate(vec![InodeId(3), InodeId(2), InodeId(4)]).unwrap_err();
        assert_eq!(error.code, ErrorCode::Exists);
        assert!(error.message.contains("inode 2"), "{}", error.message);
        assert!(
            !service.objects.path_of(InodeId(3)).exists(),
            "the batch's new object stayed"
        );
        assert!(!service.objects.path_of(InodeId(4)).exists());
        assert_eq!(
            std::fs::read(service.objects.path_of(InodeId(2))).unwrap(),
            b"data"
        );
        assert!(service.objects.path_of(InodeId(1)).exists());
    }

    #[test]
    fn io_on_a_missing_object_and_mismatched_payloads_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let service = IoService::open(dir.path()).unwrap();
        let write = |inode, data: Vec<u8>| {
            service.handle(
                CONNECTION,
                Request::Write {
                    inode,
                    striping: striping(0),
                    ranges: vec![Range { offset: 0, len: 10 }],
                },
                data,
            )
        };
        assert_eq!(write(InodeId(5), vec![1; 10]).unwrap_err().code, ErrorCode::Stale);
        service
            .handle(
                CONNECTION,
                Request::ObjCreate {
                    inodes: vec![InodeId(5)],
                },
                vec![],
            )
            .unwrap();
        assert_eq!(
            write(InodeId(5), vec![1; 9]).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        write(InodeId(5), vec![1; 10]).unwrap();
        service
            .handle(
                CONNECTION,
                Request::ObjRemove {
                    inodes: vec![InodeId(5)],
                },
                vec![],
            )
            .unwrap();
        assert_eq!(write(InodeId(5), vec![1; 10]).unwrap_err().code, ErrorCode::Stale);
        let huge = Request::Read {
            inode: InodeId(5),
            striping: striping(0),
            ranges: vec![Range {
                offset: 0,
                len: 1 << 40,
            }],
        };
        assert_eq!(
            service.handle(CONNECTION, huge, vec![]).unwrap_err().code,
            ErrorCode::TooLarge
        );
    }

    /// An object planted under a future inode number used to be kept by the create of
    /// that inode, so the new file served the planter's bytes.
    #[test]
    fn creating_an_object_that_exists_is_refused_and_leaves_it_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let service = created(&dir, InodeId(6));
        let path = service.objects().path_of(InodeId(6));
        std::fs::write(&path, b"planted").unwrap();
        let error = service
            .handle(
                CONNECTION,
                Request::ObjCreate {
                    inodes: vec![InodeId(6)],
                },
                vec![],
            )
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::Exists);
        assert!(error.message.contains("object exists"), "{}", error.message);
        assert_eq!(std::fs::read(&path).unwrap(), b"planted");
    }

    #[test]
    fn truncate_and_extents_agree_with_the_striping_math() {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let servers: Vec<_> = dirs.iter().map(|d| IoService::open(d.path()).unwrap()).collect();
        let inode = InodeId(9);
        let size = 2 * 3 * 1024 + 1500; // two full rows, then 1024 on server 0 and 476 on server 1
        let mut ends = Vec::new();
        for (k, service) in servers.iter().enumerate() {
            let k = k as u32;
            service
                .handle(CONNECTION, Request::ObjCreate { inodes: vec![inode] }, vec![])
                .unwrap();
            service
                .handle(
                    CONNECTION,
                    Request::Truncate {
                        inode,
                        striping: striping(k),
                        size,
                    },
                    vec![],
                )
                .unwrap();
            let (r, _) = service
                .handle(
                    CONNECTION,
                    Request::Extents {
                        items: vec![(inode, striping(k))],
                    },
                    vec![],
                )
                .unwrap();
            let Response::Extents(e) = r else { panic!() };
            ends.push(e[0]);
        }
        assert_eq!(ends.iter().max().copied(), Some(size));
        let local_len = |k: usize| {
            std::fs::metadata(servers[k].objects().path_of(inode))
                .unwrap()
                .len()
        };
        assert_eq!(
            [local_len(0), local_len(1), local_len(2)],
            [3 * 1024, 2 * 1024 + 476, 2 * 1024]
        );
    }

    /// What the server orders writes by: this server's runs of the object, exact for
    /// ranges and for views of few runs, so that interleaved disjoint writes of several
    /// processes never wait for each other.
    #[test]
    fn changes_are_this_servers_runs_of_the_object() {
        let dir = tempfile::tempdir().unwrap();
        let inode = InodeId(3);
        let service = created(&dir, inode);
        // Server 1 of 3 (1 KiB stripes) holds [1024, 2048), [4096, 5120), ... of the
        // file: of [1500, 11500) its local bytes 476 to 4096, one run.
        let write = Request::Write {
            inode,
            striping: striping(1),
            ranges: vec![
                Range {
                    offset: 1500,
                    len: 10_000,
                },
                Range {
                    offset: 40_000,
                    len: 10,
                },
            ],
        };
        let changes = service.changes(CONNECTION, &write).unwrap();
        assert_eq!(changes.object, 3);
        assert_eq!(changes.runs, vec![(476, 4096)], "the second range is not here");
        let truncate = Request::Truncate {
            inode,
            striping: striping(1),
            size: 5000,
        };
        assert_eq!(
            service.changes(CONNECTION, &truncate).unwrap().runs,
            vec![(1928, u64::MAX)]
        );
        let read = Request::Read {
            inode,
            striping: striping(1),
            ranges: vec![Range { offset: 0, len: 10 }],
        };
        assert_eq!(service.changes(CONNECTION, &read), None);
        // Two processes' interleaved views (8 bytes every 16): disjoint runs.
        let one = Striping {
            stripe_size_bytes: 4096,
            stripe_count: 1,
            server_index: 0,
        };
        let view_write = |connection, offset| {
            let id = register(&service, connection, View::partition(offset, 8, 16).unwrap());
            let request = Request::WriteView {
                inode,
                striping: one,
                view: id,
                view_offset: 0,
                len: 8 * 100,
            };
            service.changes(connection, &request).unwrap()
        };
        let (even, odd) = (view_write(ConnectionId(20), 0), view_write(ConnectionId(21), 8));
        assert_eq!(even.runs.len(), 100);
        assert_eq!(even.runs[1], (16, 24));
        assert!(even
            .runs
            .iter()
            .all(|r| odd.runs.iter().all(|o| o.1 <= r.0 || r.1 <= o.0)));
        // Too many runs to list: the one run covering them.
        let id = register(&service, ConnectionId(20), View::partition(0, 8, 16).unwrap());
        let many = Request::WriteView {
            inode,
            striping: one,
            view: id,
            view_offset: 8,
            len: 8 * 1000,
        };
        assert_eq!(
            service.changes(ConnectionId(20), &many).unwrap().runs,
            vec![(16, 16 * 1000 + 8)]
        );
    }

    /// The event loop serves small requests only if they wait for nothing: a read of
    /// bytes not in the page cache is handed to a worker (`WouldBlock`), once cached it
    /// is left to the loop; a write is served (non-blocking where the file system can,
    /// else as before), and a write whose object a sieving write holds goes to a worker.
    #[test]
    fn inline_requests_that_would_wait_for_the_disk_go_to_a_worker() {
        use std::os::fd::AsRawFd;
        use weft_rpc::Inline;
        let dir = tempfile::tempdir().unwrap();
        let inode = InodeId(12);
        let service = created(&dir, inode);
        let one = Striping {
            stripe_size_bytes: 65536,
            stripe_count: 1,
            server_index: 0,
        };
        let size = 1u64 << 20;
        let data: Vec<u8> = (0..size).map(|x| (x % 253) as u8).collect();
        let write = |offset, len| Request::Write {
            inode,
            striping: one,
            ranges: vec![Range { offset, len }],
        };
        let read = |offset, len| Request::Read {
            inode,
            striping: one,
            ranges: vec![Range { offset, len }],
        };
        service.handle(CONNECTION, write(0, size), data.clone()).unwrap();
        service
            .handle(CONNECTION, Request::Sync { inode }, vec![])
            .unwrap();
        let object = service.objects().get(inode).unwrap();
        // SAFETY: advice on a descriptor we hold.
        let rc = unsafe { libc::posix_fadvise(object.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        let before = crate::io_counts().inline_to_worker;
        let cold = read(4 * 65536, 65536);
        match service.try_inline(CONNECTION, &cold, &[]) {
            Inline::WouldBlock => {}
            other => panic!("a read of bytes not in the page cache was not handed on: {other:?}"),
        }
        assert!(crate::io_counts().inline_to_worker > before);
        // The worker's read brings them in; then the loop serves them (its usual way).
        let (_, got) = service.handle(CONNECTION, cold.clone(), vec![]).unwrap();
        assert!(got[..] == data[4 * 65536..5 * 65536]);
        assert!(matches!(
            service.try_inline(CONNECTION, &cold, &[]),
            Inline::NotTried
        ));
        // Past the object's end there is nothing to wait for.
        service.handle(CONNECTION, read(size - 100, 100), vec![]).unwrap();
        let tail = read(size - 100, 4096);
        assert!(matches!(
            service.try_inline(CONNECTION, &tail, &[]),
            Inline::NotTried
        ));
        // A small write is served by the loop and lands.
        match service.try_inline(CONNECTION, &write(8192, 4096), &[9u8; 4096]) {
            Inline::Done(Ok((Response::Bytes(4096), _))) => {}
            other => panic!("{other:?}"),
        }
        let (_, got) = service.handle(CONNECTION, read(8190, 4100), vec![]).unwrap();
        assert_eq!(&got[..2], &data[8190..8192]);
        assert!(got[2..4098].iter().all(|b| *b == 9));
        // While a sieving write holds the object alone, a small write goes to a worker.
        let alone = service.locks.of(inode).write().unwrap();
        match service.try_inline(CONNECTION, &write(0, 10), &[1u8; 10]) {
            Inline::WouldBlock => {}
            other => panic!("{other:?}"),
        }
        drop(alone);
    }

    fn created(dir: &tempfile::TempDir, inode: InodeId) -> IoService {
        let service = IoService::open(dir.path()).unwrap();
        service
            .handle(CONNECTION, Request::ObjCreate { inodes: vec![inode] }, vec![])
            .unwrap();
        service
    }

    fn register(service: &IoService, connection: ConnectionId, view: View) -> ViewId {
        match service
            .handle(connection, Request::RegisterView { view }, vec![])
            .unwrap()
            .0
        {
            Response::View(id) => id,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn views_belong_to_their_connection_and_go_when_it_closes() {
        let dir = tempfile::tempdir().unwrap();
        let inode = InodeId(3);
        let service = created(&dir, inode);
        let (a, b) = (ConnectionId(10), ConnectionId(11));
        let view = || View::partition(0, 4, 16).unwrap();
        let _first = register(&service, a, view());
        let second = register(&service, a, view());
        let on_b = register(&service, b, view());
        assert_eq!(service.views_registered(), 3);
        let read = |connection, id| {
            service.handle(
                connection,
                Request::ReadView {
                    inode,
                    striping: striping(0),
                    view: id,
                    view_offset: 0,
                    len: 8,
                },
                vec![],
            )
        };
        assert!(read(b, on_b).is_ok());
        if second != on_b {
            assert_eq!(read(b, second).unwrap_err().code, ErrorCode::InvalidArgument);
        }
        service.connection_closed(a);
        assert_eq!(service.views_registered(), 1);
        assert_eq!(read(a, second).unwrap_err().code, ErrorCode::InvalidArgument);
        assert!(read(b, on_b).is_ok());
    }

    /// Sieved writes read the gaps between pieces and write them back: bytes there
    /// (other writers' data) must survive, and a sieved read returns exactly the pieces.
    #[test]
    fn sieved_view_writes_keep_the_bytes_between_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let inode = InodeId(4);
        let service = created(&dir, inode);
        let one = Striping {
            stripe_size_bytes: 4096,
            stripe_count: 1,
            server_index: 0,
        };
        let before: Vec<u8> = (0..300_000u32).map(|x| (x % 241) as u8).collect();
        service
            .handle(
                CONNECTION,
                Request::Write {
                    inode,
                    striping: one,
                    ranges: vec![Range {
                        offset: 0,
                        len: before.len() as u64,
                    }],
                },
                before.clone(),
            )
            .unwrap();
        // Dense windows (sieved whole by the strided walk), sparse ones (pieces merged
        // into runs and sieve spans) and lone pieces.
        for (view, count) in [
            (View::partition(3, 8, 16).unwrap(), 17_000u64),
            (View::partition(5, 10, 300).unwrap(), 900),
            (View::partition(7, 10, 5010).unwrap(), 50),
        ] {
            let id = register(&service, CONNECTION, view.clone());
            let len = count * view.filetype().size_bytes();
            let data: Vec<u8> = (0..len).map(|x| (x * 13 + 1) as u8).collect();
            let write = Request::WriteView {
                inode,
                striping: one,
                view: id,
                view_offset: 0,
                len,
            };
            assert_eq!(
                service.handle(CONNECTION, write, data.clone()).unwrap().0,
                Response::Bytes(len)
            );
            let mut expected = before.clone();
            let mut file = vec![0u8; before.len()];
            service
                .objects()
                .get(inode)
                .unwrap()
                .read_exact_at(&mut file, 0)
                .unwrap();
            for v in 0..len {
                expected[view.view_to_file(v).unwrap() as usize] = data[v as usize];
            }
            assert!(file == expected, "gap bytes changed");
            let read = Request::ReadView {
                inode,
                striping: one,
                view: id,
                view_offset: 0,
                len,
            };
            assert_eq!(service.handle(CONNECTION, read, vec![]).unwrap().1, data);
            // Put the original bytes back for the next view.
            service
                .handle(
                    CONNECTION,
                    Request::Write {
                        inode,
                        striping: one,
                        ranges: vec![Range {
                            offset: 0,
                            len: before.len() as u64,
                        }],
                    },
                    before.clone(),
                )
                .unwrap();
        }
    }
}

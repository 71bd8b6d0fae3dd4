//! Open files and the data path: a request is cut into segments of whole stripe rows,
//! each server gets its pieces of each segment as one request, and every server has a
//! window of requests in flight, all driven from the calling thread (a large call: from
//! a bounded number of threads, see `drive`).

use crate::cache_route::CacheRoute;
use crate::connection::Inner;
use crate::drive::{retry_if_revoked, Pipeline};
use crate::error::unexpected;
use crate::error::ClientError;
use crate::trace::{FileTrace, Tracer};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use weft_layout::stripe::check_range;
use weft_layout::Layout;
use weft_proto::frame::DATA_BYTES_MAX;
use weft_proto::msg::{Request, Response};
use weft_proto::{AccessPattern, Attr, ErrorCode, Range, Striping};
use weft_rpc::{Connection, PendingCall, ReplySink, SinkReply};

pub mod replica;
pub(crate) mod view_io;

/// First pause before asking again for an append lock another client holds.
const APPEND_RETRY_PAUSE_MIN: std::time::Duration = std::time::Duration::from_micros(50);
/// Longest pause between two tries for an append lock.
const APPEND_RETRY_PAUSE_MAX: std::time::Duration = std::time::Duration::from_millis(5);

/// An open Weft file. Reads and writes take `&self`, so one handle may be shared by
/// threads; concurrent writes to overlapping ranges have no defined order.
pub struct File {
    pub(crate) inner: Arc<Inner>,
    attr: Attr,
    /// The layout data requests are cut by: the file's striping over its io servers,
    /// or, for a cached file, its blocks over its cache managers.
    pub(crate) layout: Layout,
    /// Address of each server of `layout`, in layout order.
    pub(crate) addrs: Vec<String>,
    /// A cached file's managers; `None`: data goes straight to the io servers.
    pub(crate) cache: Option<CacheRoute>,
    /// Address of each io server of the file's own layout (`addrs` when uncached).
    pub(crate) io_addrs: Vec<String>,
    pub(crate) path: String,
    writable: bool,
    /// The largest size this handle knows of; reads past it ask the servers again.
    pub(crate) known_size: AtomicU64,
    /// Until when a read past `known_size` ends there without asking the io servers: a
    /// read-only handle opened from a mount's handoff (`Client::open_handoff`), whose
    /// size the mount checked at the open, for as long as the mount's kernel trusts a
    /// size it cached ([`HANDED_SIZE_TRUST`]); any other handle asks.
    pub(crate) size_trusted_until: std::sync::Mutex<Option<std::time::Instant>>,
    /// The whole file as a mount read it right after its open-time check (a small
    /// file's handoff): reads are answered from it while the size is trusted.
    pub(crate) handed_content: Option<Box<[u8]>>,
    /// The view set by `set_view` (none: the whole file), registered lazily with each
    /// server (see `view_io`).
    pub(crate) view: std::sync::Mutex<Option<Arc<view_io::FileView>>>,
    /// Where this handle's requests are recorded (`WEFT_TRACE`, or the MPI-IO layer's
    /// hint); none: not traced.
    pub(crate) trace: Option<FileTrace>,
    /// The original pattern of the collective read in progress, attached to its reads
    /// to cache managers (collective-I/O-aware caching; set by the MPI-IO layer).
    pattern: std::sync::Mutex<Option<Arc<AccessPattern>>>,
    /// The managers refused a read with a pattern (they predate it): send none again.
    patterns_refused: std::sync::atomic::AtomicBool,
    /// Whether this handle already dropped the file's setuid/setgid privileges.
    privileges_dropped: AtomicBool,
    /// Whether the handle's data goes through job-scoped delegates (`use_delegates`).
    job_delegates: bool,
    /// A replicated file's copies (`replica.rs`); `None`: a plain file.
    pub(crate) replicas: Option<replica::Replicas>,
}

const MODE_SETUID: u32 = 0o4000;
const MODE_SETGID: u32 = 0o2000;

/// One request to one server: the file range it covers.
struct Segment {
    offset: u64,
    len: u64,
}

/// A pointer to the caller's read buffer, shared by the per-server threads, which
/// hand parts of it to their connections' reader threads as reply sinks. Each
/// server's replies land only in the bytes that server holds, disjoint by striping.
#[derive(Clone, Copy)]
pub(crate) struct SharedBuffer {
    base: *mut u8,
    len: usize,
}
// SAFETY: threads write disjoint byte ranges (see above) and the scope joins them
// before the borrow of the buffer ends.
unsafe impl Send for SharedBuffer {}
unsafe impl Sync for SharedBuffer {}

impl SharedBuffer {
    pub(crate) fn new(buf: &mut [u8]) -> SharedBuffer {
        SharedBuffer {
            base: buf.as_mut_ptr(),
            len: buf.len(),
        }
    }

    pub(crate) fn put(&self, at: usize, bytes: &[u8]) {
        assert!(at + bytes.len() <= self.len);
        // SAFETY: in bounds (asserted); callers write disjoint ranges (see above).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(at), bytes.len()) };
    }

    /// The address and length of `[at, at + len)`, for a reply sink.
    pub(crate) fn part(&self, at: usize, len: usize) -> (*mut u8, usize) {
        assert!(at + len <= self.len);
        // SAFETY: in bounds (asserted).
        (unsafe { self.base.add(at) }, len)
    }
}

impl File {
    pub(crate) fn new(
        inner: Arc<Inner>,
        attr: Attr,
        path: String,
        writable: bool,
    ) -> Result<File, ClientError> {
        let file_layout = attr.layout.clone().ok_or_else(|| {
            ClientError::refused(ErrorCode::Io, format!("{path}: the manager sent no layout"))
        })?;
        let io_addrs: Vec<String> = file_layout
            .servers
            .iter()
            .map(|s| inner.io_addr(*s))
            .collect::<Result<_, _>>()?;
        let cache = match attr.cache.uses_tier() {
            true => Some(
                CacheRoute::new(&inner.cluster().cache, attr.cache, &file_layout)
                    .map_err(|e| e.context(&path))?,
            ),
            false => None,
        };
        let replicas = match cache {
            // The manager refuses cached replicated files.
            Some(_) => None,
            None => replica::Replicas::new(&file_layout, |s| inner.io_addr(s))?,
        };
        let (layout, addrs) = match &cache {
            None => (file_layout, io_addrs.clone()),
            Some(route) => (
                route.blocks.clone(),
                route
                    .blocks
                    .servers
                    .iter()
                    .map(|s| inner.cache_addr(*s).map(str::to_owned))
                    .collect::<Result<_, _>>()?,
            ),
        };
        let mut file = File {
            replicas,
            inner,
            attr,
            layout,
            addrs,
            cache,
            io_addrs,
            path,
            writable,
            known_size: AtomicU64::new(0),
            view: std::sync::Mutex::new(None),
            trace: None,
            pattern: std::sync::Mutex::new(None),
            patterns_refused: std::sync::atomic::AtomicBool::new(false),
            privileges_dropped: AtomicBool::new(false),
            job_delegates: false,
            size_trusted_until: std::sync::Mutex::new(None),
            handed_content: None,
        };
        if writable {
            if let Some(source) = file.inner.pool.capability_source() {
                source.writer_opened(file.attr.inode);
            }
        }
        if let Some(dir) = crate::trace::env_dir() {
            if let Err(e) = file.set_trace_dir(Some(dir)) {
                eprintln!(
                    "weft: WEFT_TRACE={}: {e}; {} is not traced",
                    dir.display(),
                    file.path
                );
            }
        }
        Ok(file)
    }

    /// Records this handle's requests into the process's trace in `dir` (see
    /// [`crate::trace`]); `None` stops recording them.
    pub fn set_trace_dir(&mut self, dir: Option<&std::path::Path>) -> std::io::Result<()> {
        let tracer = dir.map(Tracer::for_dir).transpose()?;
        self.set_tracer(tracer);
        Ok(())
    }

    /// Records this handle's requests with `tracer` (`None`: stops recording them).
    pub fn set_tracer(&mut self, tracer: Option<Arc<Tracer>>) {
        self.trace = tracer.map(|tracer| {
            let record = crate::trace::file_record(
                self.attr.inode.0,
                &self.path,
                self.layout(),
                &self.layout,
                self.cache.is_some(),
            );
            FileTrace::new(tracer, record)
        });
    }

    /// The trace this handle records into, if it is traced (the MPI-IO layer records
    /// its original requests and call ids through it).
    pub fn trace(&self) -> Option<&FileTrace> {
        self.trace.as_ref()
    }

    pub fn inode(&self) -> weft_layout::InodeId {
        self.attr.inode
    }

    /// The file's layout over its io servers.
    pub fn layout(&self) -> &Layout {
        self.cache
            .as_ref()
            .map_or(&self.layout, |route| &route.file_layout)
    }

    /// The layout data requests are cut by: the file's layout, or for a cached file,
    /// its blocks over its cache managers (block `x` on `servers[x mod n]`).
    pub fn data_layout(&self) -> &Layout {
        &self.layout
    }

    /// The file's caching mode as this handle uses it: `Delegated` through job-scoped
    /// delegates (`use_delegates`), else the file's own.
    pub fn cache_mode(&self) -> weft_layout::CacheMode {
        if self.job_delegates {
            weft_layout::CacheMode::Delegated
        } else {
            self.attr.cache
        }
    }

    /// Sends this handle's data through `delegates` (addresses of cache managers started
    /// for this file only: job-scoped delegates), block `x` of the file (a stripe) to
    /// `delegates[x mod n]`, instead of the io servers or the cluster's cache tier.
    /// Connections to them prove `job_key` (the job's own key, which the delegates
    /// serve; not the cluster key) and present this handle's capabilities, as to io
    /// servers. Size, sync, truncate and close reach them as a cached file's managers.
    /// Call before any I/O and before setting a view: requests already made went
    /// elsewhere.
    pub fn use_delegates(
        &mut self,
        delegates: &[String],
        job_key: &crate::ClusterKey,
    ) -> Result<(), ClientError> {
        if delegates.is_empty() {
            return Err(ClientError::refused(
                ErrorCode::InvalidArgument,
                format!("{}: no delegates given", self.path),
            ));
        }
        for addr in delegates {
            self.inner
                .pool
                .set_auth(addr, weft_rpc::ClientAuth::cluster(job_key.clone()));
        }
        if self.replicas.is_some() {
            return Err(ClientError::refused(
                ErrorCode::Unsupported,
                format!("{}: delegates do not serve replicated files yet", self.path),
            ));
        }
        let route = CacheRoute::job_delegates(delegates.len(), self.layout());
        self.layout = route.blocks.clone();
        self.addrs = delegates.to_vec();
        self.cache = Some(route);
        self.job_delegates = true;
        *self.view.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    /// `request` (a read or write of server `index` of the data layout) as sent over
    /// `connection`: itself, or for a cached file wrapped for the cache manager.
    pub(crate) fn data_request(&self, index: usize, connection: &Connection, request: Request) -> Request {
        let Some(route) = &self.cache else {
            return request;
        };
        let file = route.file(self.attr.inode, index, connection.incarnation());
        match self.pattern_for(&request) {
            Some(pattern) => Request::ViaCacheAware {
                file,
                pattern,
                request: Box::new(request),
            },
            None => Request::ViaCache {
                file,
                request: Box::new(request),
            },
        }
    }

    /// Attaches `pattern` (the processes' original requests of the collective read in
    /// progress) to this handle's reads to cache managers until it is set to `None`.
    /// Patterns larger than [`weft_proto::pattern::PATTERN_BYTES_MAX`] are not attached.
    pub fn set_access_pattern(&self, pattern: Option<Arc<AccessPattern>>) {
        let pattern = pattern.filter(|p| p.encoded_len() <= weft_proto::pattern::PATTERN_BYTES_MAX);
        *self.pattern.lock().unwrap_or_else(|e| e.into_inner()) = pattern;
    }

    fn pattern_for(&self, request: &Request) -> Option<Arc<AccessPattern>> {
        if !matches!(request, Request::Read { .. } | Request::ReadView { .. })
            || self.patterns_refused.load(Ordering::Relaxed)
        {
            return None;
        }
        self.pattern.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Runs a read; if it carried a pattern and a manager did not know the request,
    /// stops attaching patterns and runs it again without.
    pub(crate) fn read_with_pattern_fallback<T>(
        &self,
        mut read: impl FnMut() -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let attached = self.cache.is_some()
            && !self.patterns_refused.load(Ordering::Relaxed)
            && self.pattern.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        // A replicated file's read goes on on another copy when a server is down.
        let mut read = || self.with_fallback(&mut read);
        match read() {
            Err(e) if attached && matches!(e.code(), ErrorCode::Unsupported | ErrorCode::UnknownOpcode) => {
                self.patterns_refused.store(true, Ordering::Relaxed);
                read()
            }
            other => other,
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// What another process of the same job needs to open this file without asking
    /// the manager ([`crate::Client::open_handoff`]): a few hundred bytes to broadcast.
    pub fn handoff(&self) -> Vec<u8> {
        crate::handoff::Handoff::encode(&self.attr, None)
    }

    /// `handoff` with this handle's capability (read, or read and write for a writable
    /// handle; granted now if not held yet): a process of the same user that opens
    /// from it needs no capability round trip to the manager before its first read or
    /// write. Without one (capabilities off, or the grant failed: the other process
    /// then asks itself) it is `handoff`.
    pub fn handoff_with_capability(&self) -> Vec<u8> {
        let right = if self.writable {
            weft_proto::capability::rights::WRITE
        } else {
            weft_proto::capability::rights::READ
        };
        let cap = self
            .inner
            .pool
            .capability_source()
            .and_then(|source| source.capability(self.attr.inode, right).ok().flatten());
        if self.writable && cap.is_some() {
            // Other processes write with it: it is never given back (it expires).
            if let Some(source) = self.inner.pool.capability_source() {
                source.shared(self.attr.inode);
            }
        }
        let from = cap.map(|cap| (self.inner.cred.uid, cap));
        crate::handoff::Handoff::encode(&self.attr, from.as_ref())
    }

    /// What a mount hands a process of the caller's user that may read this file (the
    /// kernel checked that it may, see weft-fuse's `user.weft.handoff`), for
    /// [`crate::Client::open_handoff`]: this handle's attributes with the size it was
    /// opened with (the io servers' at the open's check, so the receiver's reads within
    /// it ask them nothing) and a read capability for this inode only, whatever the
    /// handle's own access (granted now if not held; left out when capabilities are off
    /// or the grant failed: the receiver then asks itself). `content`: the whole file,
    /// read by this handle after the check (a small file): the receiver's reads need
    /// no io server either (its length must be the size).
    pub fn handoff_opened(&self, content: Option<&[u8]>) -> Vec<u8> {
        let cap = self
            .inner
            .pool
            .capability_source()
            .and_then(|source| {
                source
                    .capability(self.attr.inode, weft_proto::capability::rights::READ)
                    .ok()
                    .flatten()
            })
            .filter(|cap| cap.inode == self.attr.inode && cap.rights == weft_proto::capability::rights::READ);
        let mut attr = self.attr.clone();
        attr.size = self.known_size.load(Ordering::SeqCst);
        let from = cap.map(|cap| (self.inner.cred.uid, cap));
        crate::handoff::Handoff::encode_opened(&attr, from.as_ref(), content)
    }

    /// Asks now for the capability this handle's writes need, if the cluster wants
    /// one and none is held; it is kept for the writes (and renewed as usual). A mount
    /// that keeps small writes until close asks in the background at the first one, so
    /// that the close need not wait for the manager before sending them. A failure is
    /// left to the write, which asks again and reports it.
    pub fn prepare_writing(&self) {
        if !self.writable {
            return;
        }
        if let Some(source) = self.inner.pool.capability_source() {
            let _ = source.capability(self.attr.inode, weft_proto::capability::rights::WRITE);
        }
    }

    /// The manager's attributes as of open (size not filled in).
    pub fn attr(&self) -> &Attr {
        &self.attr
    }

    /// The striping of server `server_index` of the data layout.
    pub(crate) fn striping(&self, server_index: usize) -> Striping {
        striping_of(&self.layout, server_index)
    }

    /// Cuts `[offset, offset + len)` at multiples of whole stripe rows so that no
    /// server's share of a segment exceeds the chunk size.
    fn segments(&self, offset: u64, len: u64) -> Vec<Segment> {
        let stripe = self.layout.stripe_size_bytes;
        let chunk = self.inner.transfer.chunk_bytes.clamp(stripe, DATA_BYTES_MAX);
        let rows = (chunk / stripe).max(1);
        let segment_bytes = rows * stripe * self.layout.servers.len() as u64;
        let mut out = Vec::new();
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let boundary = (at / segment_bytes + 1) * segment_bytes;
            let next = boundary.min(end);
            out.push(Segment {
                offset: at,
                len: next - at,
            });
            at = next;
        }
        out
    }

    /// A range past the largest file offset is `TooLarge` (EFBIG), as a local file
    /// system answers a write or truncate past its largest file.
    pub(crate) fn check(&self, offset: u64, len: usize) -> Result<(), ClientError> {
        check_range(offset, len as u64)
            .map_err(|e| ClientError::refused(ErrorCode::TooLarge, format!("{}: {e}", self.path)))
    }

    /// What `write_at(offset, buf)` with `len` bytes would check before sending: the
    /// handle is open for writing, the range ends within the largest file (else
    /// `TooLarge`), and an unprivileged writer has dropped the file's setuid/setgid
    /// privileges. For adapters that accept a write now and send it later (the FUSE
    /// mount's write-behind), so that its errors come with the write.
    pub fn check_write(&self, offset: u64, len: usize) -> Result<(), ClientError> {
        self.check_writable()?;
        self.check(offset, len)
    }

    /// Before any write: the handle must be open for writing, and a write by an
    /// unprivileged user drops the file's setuid/setgid privileges first.
    pub(crate) fn check_writable(&self) -> Result<(), ClientError> {
        if !self.writable {
            return Err(ClientError::refused(
                ErrorCode::PermissionDenied,
                format!("{}: file not opened for writing", self.path),
            ));
        }
        if self.inner.cred.uid != 0 && self.attr.mode & (MODE_SETUID | MODE_SETGID) != 0 {
            self.drop_privileges()?;
        }
        Ok(())
    }

    /// Clears the file's setuid bit, and setgid if its group may execute, as Linux does
    /// when an unprivileged process writes (once per handle). Writes through the handle
    /// do this themselves for a non-root handle; a FUSE daemon calls it when the kernel
    /// says the writer is unprivileged.
    pub fn drop_privileges(&self) -> Result<(), ClientError> {
        if self.privileges_dropped.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.inner.hold_write_grant(self.attr.inode);
        let request = Request::SetAttr {
            cred: self.inner.cred.clone(),
            inode: self.attr.inode,
            changes: weft_proto::SetAttr {
                kill_privileges: true,
                by_handle: true,
                ..Default::default()
            },
        };
        match self.inner.meta(&request).map_err(|e| e.context(&self.path))? {
            Response::Attr(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Allocates the file's space for `[offset, offset + len)` on its io servers
    /// (fallocate(2)): `mode` 0 (the file grows to cover the range if shorter),
    /// `FALLOC_FL_KEEP_SIZE`, or that with `FALLOC_FL_PUNCH_HOLE` (the range then reads
    /// as zeros and frees its blocks), or `FALLOC_FL_ZERO_RANGE` with or without
    /// `FALLOC_FL_KEEP_SIZE` (the range reads as zeros, allocated; without KEEP_SIZE
    /// the file grows to cover it). Other modes are `Unsupported`.
    pub fn allocate(&self, offset: u64, len: u64, mode: u32) -> Result<(), ClientError> {
        self.check_writable()?;
        if len == 0 {
            return Err(ClientError::InvalidArgument(format!(
                "{}: fallocate of 0 bytes",
                self.path
            )));
        }
        check_range(offset, len)
            .map_err(|e| ClientError::refused(ErrorCode::TooLarge, format!("{}: {e}", self.path)))?;
        // A hole in a cached file: its managers first write back what they hold dirty
        // (the io servers' objects then reach as far as the file does, which a hole
        // punched at its end with KEEP_SIZE must not shorten, and nothing dirty is
        // written into the hole later), and after the punch forget the hole's bytes
        // (nothing they read from the io servers before outlives it).
        let punch = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) as u32 != 0;
        if punch {
            self.to_cache_managers(|file| Request::CacheFlush { file })
                .map_err(|e| e.context(&self.path))?;
        }
        // The io servers' striping, not the data layout's (a cached file's is over its
        // cache managers: every fallocate of one was refused as EINVAL).
        self.to_io_servers(true, |k| Request::Allocate {
            inode: self.attr.inode,
            striping: self.io_striping(k),
            offset,
            len,
            mode,
        })
        .map_err(|e| e.context(&self.path))?;
        if punch {
            self.to_cache_managers(|file| Request::CachePunch { file, offset, len })
                .map_err(|e| e.context(&self.path))?;
        }
        if mode & libc::FALLOC_FL_KEEP_SIZE as u32 == 0 {
            self.known_size.fetch_max(offset + len, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Writes `buf` at `offset`; returns the number of bytes written (all of them).
    pub fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize, ClientError> {
        self.check_writable()?;
        self.check(offset, buf.len())?;
        if let Some(t) = &self.trace {
            t.sent_ranges(true, [(offset, buf.len() as u64)]);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let len = buf.len() as u64;
        let segments = self.segments(offset, len);
        let servers = self.servers_holding(offset, len);
        let inflight = self.inner.transfer.inflight_per_server;
        self.with_copies(|| {
            let connections = self.connections_of(&servers)?;
            crate::drive::drive(servers.len(), len, |i| {
                let (index, connection) = (servers[i], &connections[i]);
                let mut left = segments.iter();
                let next = move || -> Result<Option<(PendingCall<'_>, ())>, ClientError> {
                    for segment in left.by_ref() {
                        let parts: Vec<&[u8]> = self
                            .layout
                            .pieces_on(index, segment.offset, segment.len)
                            .expect("range checked")
                            .map(|piece| {
                                let at = (piece.file_offset - offset) as usize;
                                &buf[at..at + piece.len as usize]
                            })
                            .collect();
                        if parts.is_empty() {
                            continue;
                        }
                        let request = self.data_request(
                            index,
                            connection,
                            Request::Write {
                                inode: self.attr.inode,
                                striping: self.striping(index),
                                ranges: vec![Range {
                                    offset: segment.offset,
                                    len: segment.len,
                                }],
                            },
                        );
                        return Ok(Some((connection.send_parts(&request, &parts)?, ())));
                    }
                    Ok(None)
                };
                Ok(Pipeline::new(inflight, next, |call: PendingCall<'_>, ()| {
                    expect_bytes(call.wait()?.0)
                }))
            })
        })
        .map_err(|e| e.context(&self.path))?;
        self.known_size
            .fetch_max(offset + buf.len() as u64, Ordering::SeqCst);
        Ok(buf.len())
    }

    /// Appends `buf` at the end of the file as its io servers see it, whoever else
    /// appends or writes (O_APPEND): under the file's append lock (held at the server of
    /// its first stripe), the end is read from every server and the bytes written there.
    /// Concurrent appenders, in this process or any other client, never overwrite or
    /// interleave with each other. Returns the offset the bytes landed at.
    pub fn append(&self, buf: &[u8]) -> Result<u64, ClientError> {
        self.check_writable()?;
        if buf.is_empty() {
            return self.size();
        }
        let token = self.append_lock()?;
        let appended = self.size().and_then(|end| {
            self.write_at(end, buf)?;
            Ok(end)
        });
        let unlocked = self.append_unlock(token);
        let end = appended?;
        unlocked?;
        Ok(end)
    }

    /// Takes the file's append lock, trying again while another client holds it (with
    /// a growing pause, up to the client's request timeout).
    fn append_lock(&self) -> Result<u64, ClientError> {
        let request = Request::AppendLock {
            inode: self.attr.inode,
        };
        let deadline = std::time::Instant::now() + self.inner.pool.timeouts().request;
        let mut pause = APPEND_RETRY_PAUSE_MIN;
        loop {
            match self.inner.pool.call(&self.io_addrs[0], &request, &[]) {
                Ok((Response::Token(token), _)) => return Ok(token),
                Ok((other, _)) => return Err(unexpected(&other)),
                Err(e) => {
                    let e = ClientError::from(e);
                    if e.code() != ErrorCode::Busy || std::time::Instant::now() >= deadline {
                        return Err(e.context(&self.path));
                    }
                }
            }
            // A pause with some jitter, so that waiting appenders do not retry in step.
            let jitter = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos() as u64)
                % (pause.as_nanos() as u64 + 1);
            std::thread::sleep(pause / 2 + std::time::Duration::from_nanos(jitter / 2));
            pause = (pause * 2).min(APPEND_RETRY_PAUSE_MAX);
        }
    }

    fn append_unlock(&self, token: u64) -> Result<(), ClientError> {
        let request = Request::AppendUnlock {
            inode: self.attr.inode,
            token,
        };
        match self.inner.pool.call(&self.io_addrs[0], &request, &[]) {
            Ok((Response::Done, _)) => Ok(()),
            Ok((other, _)) => Err(unexpected(&other)),
            Err(e) => Err(ClientError::from(e).context(&self.path)),
        }
    }

    /// Whether `known_size` is the end of the file for reads now (see
    /// `size_trusted_until`).
    /// Takes the size this handle was opened with as the end of the file for reads,
    /// for `how_long`: a read-only handle a mount opened after checking the file, for
    /// as long as its kernel keeps that size (the kernel reads no further), until the
    /// mount says otherwise (`distrust_size`).
    pub fn trust_size_for(&self, how_long: std::time::Duration) {
        *self.size_trusted_until.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(std::time::Instant::now() + how_long);
    }

    /// Reads past the known size ask the io servers again (see `trust_size_for`).
    pub fn distrust_size(&self) {
        *self.size_trusted_until.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn size_trusted(&self) -> bool {
        self.size_trusted_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| std::time::Instant::now() < until)
    }

    /// Reads into `buf` from `offset`; returns fewer bytes than asked only at the end
    /// of the file. Holes read as zeros.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, ClientError> {
        // Nothing lies past the largest file offset: a read there is at the end of the
        // file, as on a local file system.
        let room = weft_layout::stripe::FILE_OFFSET_MAX.saturating_sub(offset);
        let len = room.min(buf.len() as u64) as usize;
        let buf = &mut buf[..len];
        self.check(offset.min(weft_layout::stripe::FILE_OFFSET_MAX), buf.len())?;
        if let Some(t) = &self.trace {
            t.sent_ranges(false, [(offset, buf.len() as u64)]);
        }
        self.read_with_pattern_fallback(|| self.read_at_checked(offset, buf))
    }

    fn read_at_checked(&self, offset: u64, buf: &mut [u8]) -> Result<usize, ClientError> {
        if let Some(content) = self.handed_content.as_deref().filter(|_| self.size_trusted()) {
            let from = content.len().min(usize::try_from(offset).unwrap_or(usize::MAX));
            let n = (content.len() - from).min(buf.len());
            buf[..n].copy_from_slice(&content[from..from + n]);
            return Ok(n);
        }
        let mut size = self.known_size.load(Ordering::SeqCst);
        if offset + buf.len() as u64 > size && !self.size_trusted() {
            size = self.size()?;
        }
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let len = (size - offset).min(buf.len() as u64);
        let segments = self.segments(offset, len);
        let shared = SharedBuffer {
            base: buf.as_mut_ptr(),
            len: len as usize,
        };
        let servers = self.servers_holding(offset, len);
        let connections = self.connections_of(&servers)?;
        let inflight = self.inner.transfer.inflight_per_server;
        crate::drive::drive(servers.len(), len, |i| {
            let (index, connection) = (servers[i], &connections[i]);
            // Replies are received straight into `buf` (a sink over this server's
            // pieces of the segment): no staging vector, no second copy.
            let sink = move |segment: &Segment| -> ReplySink {
                let parts = self
                    .layout
                    .pieces_on(index, segment.offset, segment.len)
                    .expect("range checked")
                    .map(|piece| shared.part((piece.file_offset - offset) as usize, piece.len as usize))
                    .collect();
                // SAFETY: pieces of different servers and segments are disjoint parts of
                // `buf`, which outlives every call: each is waited for or dropped
                // (dropping waits for the reader) before `drive` returns.
                unsafe { ReplySink::new(parts) }
            };
            let finish = move |call: PendingCall<'_>, segment: &Segment| -> Result<(), ClientError> {
                let expected = self.layout.bytes_on(index, segment.offset, segment.len);
                match call.wait_sink()? {
                    SinkReply::Filled(Response::Bytes(n)) if n == expected => Ok(()),
                    SinkReply::Filled(other) | SinkReply::Other(other, _)
                        if !matches!(other, Response::Bytes(_)) =>
                    {
                        Err(unexpected(&other))
                    }
                    _ => Err(ClientError::refused(
                        ErrorCode::Io,
                        format!("io server sent a read reply of the wrong length (asked {expected} bytes)"),
                    )),
                }
            };
            let mut left = segments.iter();
            let next = move || -> Result<Option<(PendingCall<'_>, &Segment)>, ClientError> {
                for segment in left.by_ref() {
                    if self.layout.bytes_on(index, segment.offset, segment.len) == 0 {
                        continue;
                    }
                    let request = self.data_request(
                        index,
                        connection,
                        Request::Read {
                            inode: self.attr.inode,
                            striping: self.striping(index),
                            ranges: vec![Range {
                                offset: segment.offset,
                                len: segment.len,
                            }],
                        },
                    );
                    return Ok(Some((
                        connection.send_into(&request, &[], sink(segment))?,
                        segment,
                    )));
                }
                Ok(None)
            };
            Ok(Pipeline::new(inflight, next, finish))
        })
        .map_err(|e| e.context(&self.path))?;
        Ok(len as usize)
    }

    /// The servers (layout indices) holding bytes of `[offset, offset + len)`.
    fn servers_holding(&self, offset: u64, len: u64) -> Vec<usize> {
        (0..self.layout.servers.len())
            .filter(|k| self.layout.bytes_on(*k, offset, len) > 0)
            .collect()
    }

    /// The connections of `servers` (layout indices), in the same order.
    pub(crate) fn connections_of(&self, servers: &[usize]) -> Result<Vec<Arc<Connection>>, ClientError> {
        servers
            .iter()
            .map(|k| self.connection_of(*k))
            .collect::<Result<_, _>>()
            .map_err(|e: ClientError| e.context(&self.path))
    }

    /// Sends one request to each of `addrs` at once (the file's io servers, or its cache
    /// managers) and returns the answers in order.
    fn to_servers(
        &self,
        addrs: &[String],
        request_for: impl Fn(usize, &Connection) -> Request,
    ) -> Result<Vec<Response>, ClientError> {
        retry_if_revoked(|| self.to_servers_once(addrs, &request_for))
    }

    fn to_servers_once(
        &self,
        addrs: &[String],
        request_for: &impl Fn(usize, &Connection) -> Request,
    ) -> Result<Vec<Response>, ClientError> {
        let connections: Vec<Arc<Connection>> = addrs
            .iter()
            .map(|a| self.inner.pool.get(a))
            .collect::<Result<_, _>>()?;
        let pending: Vec<PendingCall<'_>> = connections
            .iter()
            .enumerate()
            .map(|(k, c)| c.send(&request_for(k, c), &[]))
            .collect::<Result<_, _>>()?;
        // Every answer is waited for, even after an error: a server's refusal for want
        // of a capability must be seen (its connection then presents a fresh one when
        // the request is repeated).
        let mut out = Vec::with_capacity(pending.len());
        let mut first_error = None;
        for call in pending {
            match call.wait() {
                Ok((response, _)) => out.push(response),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e.into()),
            None => Ok(out),
        }
    }

    /// Sends one request to every io server of the file at once. A replicated file's
    /// request for slot `k` goes to every fresh copy of the slot when it `changes` the
    /// objects (truncate, sync, allocate: see `with_copies`), else to one (answers in
    /// slot order either way).
    fn to_io_servers(
        &self,
        changes: bool,
        request_for: impl Fn(usize) -> Request + Sync,
    ) -> Result<Vec<Response>, ClientError> {
        if self.replicas.is_none() {
            return self.to_servers(&self.io_addrs, |k, _| request_for(k));
        }
        let to_slots = || -> Result<Vec<Response>, ClientError> {
            let connections = (0..self.layout.servers.len())
                .map(|k| self.connection_of(k))
                .collect::<Result<Vec<_>, _>>()?;
            retry_if_revoked(|| {
                let pending: Vec<PendingCall<'_>> = connections
                    .iter()
                    .enumerate()
                    .map(|(k, c)| c.send(&request_for(k), &[]))
                    .collect::<Result<_, _>>()?;
                let mut out = Vec::with_capacity(pending.len());
                let mut first_error = None;
                for call in pending {
                    match call.wait() {
                        Ok((response, _)) => out.push(response),
                        Err(e) => {
                            first_error.get_or_insert(ClientError::from(e));
                        }
                    }
                }
                first_error.map_or(Ok(out), Err)
            })
        };
        match changes {
            true => self.with_copies(to_slots),
            false => self.with_fallback(to_slots),
        }
    }

    /// Sends one request to every cache manager of a cached file at once (nothing for
    /// an uncached one).
    fn to_cache_managers(
        &self,
        request_for: impl Fn(weft_proto::msg::CacheFile) -> Request,
    ) -> Result<Vec<Response>, ClientError> {
        let Some(route) = &self.cache else {
            return Ok(Vec::new());
        };
        self.to_servers(&self.addrs, |k, c| {
            request_for(route.file(self.attr.inode, k, c.incarnation()))
        })
    }

    /// Where this handle's data requests go, in data-layout order: the file's io
    /// servers, or its cache managers (delegates).
    pub fn data_addrs(&self) -> &[String] {
        &self.addrs
    }

    /// Makes every cache manager of this handle forget the file's blocks, dirty ones
    /// included (call after `sync`): job-scoped delegates let a closed file go so that
    /// a later open of it by anyone reads what the io servers hold.
    pub fn drop_from_cache_managers(&self) -> Result<(), ClientError> {
        self.to_cache_managers(|file| Request::CacheDrop {
            inodes: vec![file.inode],
        })
        .map_err(|e| e.context(&self.path))?;
        Ok(())
    }

    /// Each cache manager (or delegate) of this handle with its counters, in the order
    /// of the data layout (nothing for a file outside the cache tier).
    pub fn cache_manager_stats(&self) -> Result<Vec<(String, weft_proto::msg::CacheStats)>, ClientError> {
        let answers = self
            .to_cache_managers(|_| Request::CacheStats)
            .map_err(|e| e.context(&self.path))?;
        answers
            .into_iter()
            .zip(&self.addrs)
            .map(|(answer, addr)| match answer {
                Response::CacheStats(stats) => Ok((addr.clone(), stats)),
                other => Err(unexpected(&other)),
            })
            .collect()
    }

    /// The striping of io server `index` of the file's own layout.
    fn io_striping(&self, index: usize) -> Striping {
        striping_of(self.layout(), index)
    }

    /// The file's size, derived from every io server's local extent (PVFS) and, for a
    /// cached file, the end of what its cache managers hold unwritten.
    pub fn size(&self) -> Result<u64, ClientError> {
        // The cache managers first (see `Client::sizes_stamped`): a block they mark
        // clean is on the io servers already, so a write-back between the two answers
        // is counted by the second.
        let cached = self
            .to_cache_managers(|file| Request::CacheExtents {
                inodes: vec![file.inode],
            })
            .map_err(|e| e.context(&self.path))?;
        let mut size = 0;
        for answer in &cached {
            match answer {
                Response::Extents(ends) if ends.len() == 1 => size = size.max(ends[0]),
                other => return Err(unexpected(other)),
            }
        }
        let answers = self
            .to_io_servers(false, |k| Request::Extents {
                items: vec![(self.attr.inode, self.io_striping(k))],
            })
            .map_err(|e| e.context(&self.path))?;
        let mut missing = 0;
        for answer in &answers {
            match answer {
                Response::Extents(ends) if ends.len() == 1 => {
                    if ends[0] == u64::MAX {
                        missing += 1;
                    } else {
                        size = size.max(ends[0]);
                    }
                }
                other => return Err(unexpected(other)),
            }
        }
        if missing == answers.len() {
            return Err(ClientError::refused(
                ErrorCode::Stale,
                format!("{}: the file was removed", self.path),
            ));
        }
        self.known_size.store(size, Ordering::SeqCst);
        Ok(size)
    }

    /// Truncates or extends the file (ftruncate(2): the handle must be open for
    /// writing, whatever the mode says now).
    pub fn truncate(&self, size: u64) -> Result<(), ClientError> {
        if !self.writable {
            return Err(ClientError::refused(
                ErrorCode::PermissionDenied,
                format!("{}: file not opened for writing", self.path),
            ));
        }
        check_range(size, 0)
            .map_err(|e| ClientError::refused(ErrorCode::TooLarge, format!("{}: {e}", self.path)))?;
        self.inner.hold_write_grant(self.attr.inode);
        let changes = weft_proto::SetAttr {
            size: Some(size),
            by_handle: true,
            ..Default::default()
        };
        let request = Request::SetAttr {
            cred: self.inner.cred.clone(),
            inode: self.attr.inode,
            changes,
        };
        match self.inner.meta(&request).map_err(|e| e.context(&self.path))? {
            Response::Attr(_) => {}
            other => return Err(unexpected(&other)),
        }
        self.truncate_objects(size)
    }

    /// Sets every object's local size for a file of `size` bytes.
    pub(crate) fn truncate_objects(&self, size: u64) -> Result<(), ClientError> {
        check_range(size, 0)
            .map_err(|e| ClientError::refused(ErrorCode::TooLarge, format!("{}: {e}", self.path)))?;
        // Cache managers first: once they answer, nothing they hold past `size` can be
        // written back over the truncated objects. Each one also cut the objects
        // itself before fetching any of those bytes again (a concurrent read must not
        // fetch the removed bytes back); cutting them again here, after all answered,
        // removes what another manager's write-back in flight put there meanwhile.
        self.to_cache_managers(|file| Request::CacheTruncate { file, size })
            .map_err(|e| e.context(&self.path))?;
        self.to_io_servers(true, |k| Request::Truncate {
            inode: self.attr.inode,
            striping: self.io_striping(k),
            size,
        })
        .map_err(|e| e.context(&self.path))?;
        self.known_size.store(size, Ordering::SeqCst);
        Ok(())
    }

    /// Makes everything written so far durable on every server: when this returns, a
    /// server crash loses none of it. A cached file's managers write their dirty
    /// blocks back first (reporting any earlier write-back that failed). The metadata
    /// manager commits too: the file's name and attributes, and every other metadata
    /// operation acknowledged so far, are durable as well (fsync of a new file makes
    /// its name durable, unlike on some local file systems).
    pub fn sync(&self) -> Result<(), ClientError> {
        self.to_cache_managers(|file| Request::CacheFlush { file })
            .map_err(|e| e.context(&self.path))?;
        self.to_io_servers(true, |_| Request::Sync {
            inode: self.attr.inode,
        })
        .map_err(|e| e.context(&self.path))?;
        self.inner.commit_metadata().map_err(|e| e.context(&self.path))
    }

    /// Closes the handle. Like close(2), this does not make data durable: call `sync`.
    /// A cached file's managers are told, so they write its dirty blocks back soon.
    pub fn close(self) -> Result<(), ClientError> {
        if self.writable {
            self.to_cache_managers(|file| Request::CacheClose { inode: file.inode })
                .map_err(|e| e.context(&self.path))?;
        }
        Ok(())
    }
}

impl Drop for File {
    /// The last handle of this client that may write the file gives its write
    /// capabilities back (asynchronously): the manager can then vouch that nobody
    /// writes it, and opens elsewhere skip the io servers (see `Client::vouched`).
    /// Every write through this handle was answered by now (writes are synchronous).
    fn drop(&mut self) {
        if self.writable {
            if let Some(source) = self.inner.pool.capability_source() {
                if self.cache.is_some() {
                    // Cache managers and delegates write back after the close, with
                    // what they were presented: those grants expire instead.
                    source.shared(self.attr.inode);
                }
                source.writer_closed(self.attr.inode);
            }
        }
    }
}

/// How long a read-only handle opened from a mount's handoff takes the size the mount
/// checked at the open as the end of the file (the mount's default attribute timeout:
/// the kernel answers reads through the mount from a size it cached that long).
pub const HANDED_SIZE_TRUST: std::time::Duration = std::time::Duration::from_secs(1);

fn striping_of(layout: &Layout, server_index: usize) -> Striping {
    Striping {
        stripe_size_bytes: layout.stripe_size_bytes,
        stripe_count: layout.servers.len() as u32,
        server_index: server_index as u32,
    }
}

pub(crate) fn expect_bytes(response: Response) -> Result<(), ClientError> {
    match response {
        Response::Bytes(_) => Ok(()),
        other => Err(unexpected(&other)),
    }
}

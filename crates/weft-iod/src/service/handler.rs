//! `weft_rpc::Handler` for the io service: the dispatch of every request
//! (`handle_unnamed`), replies by sendfile, and which requests the event loop runs
//! itself (small ones that would not wait for the disk, see `inline.rs`).

use super::*;
use weft_proto::msg::migrate_step;

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
            self.migrations.check(request)?;
            let fenced = self.migrations.read_key(request);
            let layout = striping.layout();
            let index = striping.server_index as usize;
            let total = ranges_stream_len(&layout, index, ranges)?;
            let file = self.objects.get(*inode)?;
            self.migrations.check_again(fenced)?;
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
        if let Err(e) = self.migrations.check(request) {
            return Inline::Done(Err(e));
        }
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
    ///
    /// Each such change, on arrival, also moves the rebuild stamps of the bytes it
    /// changes (`crate::rebuild`); a `RebuildWrite` is ordered like a write but moves
    /// none.
    fn changes(&self, connection: ConnectionId, request: &Request) -> Option<weft_rpc::Changes> {
        let local = |striping: &Striping, offset: u64| {
            striping
                .layout()
                .local_size_for(striping.server_index as usize, offset)
        };
        let (inode, runs, stamped) = match request {
            // Ranges were checked against overflow when decoded.
            Request::Write {
                inode,
                striping,
                ranges,
            } => (*inode, Self::local_runs(striping, ranges), true),
            Request::RebuildWrite {
                inode,
                striping,
                ranges,
                ..
            } => (*inode, Self::local_runs(striping, ranges), false),
            // A migration's freeze, adopt and undo wait for every change of the object
            // that arrived before them, and every later one waits for them.
            Request::MigrateObject { inode, step, .. }
                if matches!(
                    *step,
                    migrate_step::FREEZE | migrate_step::ADOPT | migrate_step::UNDO
                ) =>
            {
                (*inode, vec![(0, u64::MAX)], false)
            }
            Request::WriteView {
                inode,
                striping,
                view,
                view_offset,
                len,
            } => {
                // A view write may touch many chunks: it moves the whole-object stamp.
                self.stamp_change(*inode, None);
                (
                    *inode,
                    self.view_runs(connection, striping, *view, *view_offset, *len)?,
                    false,
                )
            }
            // Everything from the new end on: the bytes cut, or the zeros added.
            Request::Truncate {
                inode,
                striping,
                size,
            } => (*inode, vec![(local(striping, *size), u64::MAX)], true),
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
                true,
            ),
            _ => return None,
        };
        if stamped {
            self.stamp_change(inode, Some(&runs));
        }
        Some(weft_rpc::Changes::new(inode.0, runs))
    }

    fn connection_closed(&self, connection: ConnectionId) {
        self.views.close(connection);
        self.append_locks.connection_closed(connection);
        self.extent_locks.connection_closed(connection);
    }
}

impl IoService {
    /// The object runs a view write changes: its pieces, merged, or, when they are
    /// more than `CHANGED_RUNS_MAX` runs, the one run from its first byte to its last
    /// here (walking no further, since the event loop asks). `None` for a write that
    /// will be refused (an unknown view, an interval past the limits).
    pub(super) fn view_runs(
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

    pub(super) fn handle_unnamed(
        &self,
        connection: ConnectionId,
        request: Request,
        data: &[u8],
    ) -> Result<(Response, Vec<u8>), WireError> {
        self.migrations.check(&request)?;
        let fenced = self.migrations.read_key(&request);
        let reply = self.dispatch(connection, request, data);
        self.migrations.check_again(fenced)?;
        reply
    }

    fn dispatch(
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
                // A migrated object's fence goes with it (not synced: a fence left by
                // a crash only refuses requests for an object that is gone), and so
                // does an old object a migration set aside and did not drop yet.
                inodes.iter().try_for_each(|i| {
                    self.objects.remove(*i)?;
                    let _ = std::fs::remove_file(self.set_aside(*i));
                    self.migrations.unfence(*i, false)
                })?;
                Response::Done
            }
            Request::ObjList { dir, after, max } => {
                crate::listing::list(self.objects.root(), dir, after, max)?
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
            Request::RebuildStamp {
                inode,
                striping,
                ranges,
                create,
            } => self.rebuild_stamp(inode, striping, &ranges, create)?,
            Request::RebuildWrite {
                inode,
                striping,
                ranges,
                stamp,
            } => self.rebuild_write(inode, striping, &ranges, stamp, data)?,
            Request::MigrateObject {
                inode,
                temp,
                striping,
                step,
            } => self.migrate_object(inode, temp, striping, step)?,
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

//! Request handling for the io role: reads and writes of request descriptors as one
//! stream in file order, sync, extents, truncate, object create/remove, statfs.

use crate::objects::{io_error, ObjectStore};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use weft_layout::{InodeId, Layout};
use weft_proto::frame::DATA_BYTES_MAX;
use weft_proto::msg::{Request, Response};
use weft_proto::{ErrorCode, IoStatfs, Range, Striping, WireError};
use weft_rpc::ConnectionId;

pub struct IoService {
    objects: ObjectStore,
}

/// A run of local bytes that is contiguous both in the request stream and in the
/// object: one pread/pwrite. A contiguous file range maps to a single such run on each
/// server, since a server's consecutive stripes are adjacent in its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LocalRun {
    local_offset: u64,
    stream_offset: u64,
    len: u64,
}

/// The runs of this server's pieces of `ranges`, in file (and stream) order.
fn local_runs(layout: &Layout, server_index: usize, ranges: &[Range]) -> Vec<LocalRun> {
    let mut runs: Vec<LocalRun> = Vec::new();
    let mut stream_offset = 0;
    for range in ranges {
        // Ranges were checked against overflow when decoded.
        let pieces = layout
            .pieces_on(server_index, range.offset, range.len)
            .expect("range checked at decode");
        for piece in pieces {
            match runs.last_mut() {
                Some(run) if run.local_offset + run.len == piece.local_offset => {
                    run.len += piece.len
                }
                _ => runs.push(LocalRun {
                    local_offset: piece.local_offset,
                    stream_offset,
                    len: piece.len,
                }),
            }
            stream_offset += piece.len;
        }
    }
    runs
}

/// Bytes of `ranges` held by this server, refusing totals that cannot travel in a frame.
fn stream_len(layout: &Layout, server_index: usize, ranges: &[Range]) -> Result<u64, WireError> {
    let total: u64 = ranges
        .iter()
        .map(|r| layout.bytes_on(server_index, r.offset, r.len))
        .sum();
    if total > DATA_BYTES_MAX {
        return Err(WireError::new(
            ErrorCode::TooLarge,
            format!(
                "request covers {total} bytes on this server; at most {DATA_BYTES_MAX} per request"
            ),
        ));
    }
    Ok(total)
}

fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            // Past the object's end: a hole, read as zeros.
            Ok(0) => {
                buf[done..].fill(0);
                return Ok(());
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl IoService {
    pub fn open(data_dir: &Path) -> std::io::Result<IoService> {
        Ok(IoService {
            objects: ObjectStore::open(data_dir)?,
        })
    }

    pub fn objects(&self) -> &ObjectStore {
        &self.objects
    }

    fn write(
        &self,
        inode: InodeId,
        striping: Striping,
        ranges: &[Range],
        data: &[u8],
    ) -> Result<Response, WireError> {
        self.objects.check_writable()?;
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let expected = stream_len(&layout, index, ranges)?;
        if expected != data.len() as u64 {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "write carries {} bytes but its ranges cover {expected} bytes on this server",
                    data.len()
                ),
            ));
        }
        let file = self.objects.get(inode)?;
        for run in local_runs(&layout, index, ranges) {
            let bytes = &data[run.stream_offset as usize..(run.stream_offset + run.len) as usize];
            file.write_all_at(bytes, run.local_offset)
                .map_err(|e| io_error(e, inode, "write"))?;
        }
        Ok(Response::Bytes(expected))
    }

    fn read(
        &self,
        inode: InodeId,
        striping: Striping,
        ranges: &[Range],
    ) -> Result<(Response, Vec<u8>), WireError> {
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let total = stream_len(&layout, index, ranges)?;
        let file = self.objects.get(inode)?;
        let mut data = vec![0u8; total as usize];
        for run in local_runs(&layout, index, ranges) {
            let buf = &mut data[run.stream_offset as usize..(run.stream_offset + run.len) as usize];
            read_full_at(&file, buf, run.local_offset).map_err(|e| io_error(e, inode, "read"))?;
        }
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

    fn truncate(
        &self,
        inode: InodeId,
        striping: Striping,
        size: u64,
    ) -> Result<Response, WireError> {
        self.objects.check_writable()?;
        weft_layout::stripe::check_range(size, 0)
            .map_err(|e| WireError::new(ErrorCode::InvalidArgument, e.to_string()))?;
        let local = striping
            .layout()
            .local_size_for(striping.server_index as usize, size);
        let file = self.objects.get(inode)?;
        file.set_len(local)
            .map_err(|e| io_error(e, inode, "truncate"))?;
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
        let root = std::ffi::CString::new(self.objects.root().as_os_str().as_encoded_bytes())
            .map_err(|e| WireError::new(ErrorCode::Io, e.to_string()))?;
        // SAFETY: statvfs fills the zeroed struct; the path is a valid C string.
        let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(root.as_ptr(), &mut v) } == 0 {
            s.bytes_free = v.f_bavail as u64 * v.f_frsize as u64;
            s.bytes_total = v.f_blocks as u64 * v.f_frsize as u64;
        }
        Ok(Response::IoStatfs(s))
    }
}

impl weft_rpc::Handler for IoService {
    fn handle(
        &self,
        _connection: ConnectionId,
        request: Request,
        data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        let reply = match request {
            Request::Write {
                inode,
                striping,
                ranges,
            } => self.write(inode, striping, &ranges, &data)?,
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
            Request::Truncate {
                inode,
                striping,
                size,
            } => self.truncate(inode, striping, size)?,
            Request::ObjCreate { inodes } => {
                inodes.iter().try_for_each(|i| self.objects.create(*i))?;
                Response::Done
            }
            Request::ObjRemove { inodes } => {
                inodes.iter().try_for_each(|i| self.objects.remove(*i))?;
                Response::Done
            }
            Request::IoStatfs => self.statfs()?,
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

    fn reply_bytes_hint(&self, request: &Request) -> u64 {
        match request {
            Request::Read {
                striping, ranges, ..
            } => {
                let layout = striping.layout();
                let index = striping.server_index as usize;
                ranges
                    .iter()
                    .map(|r| layout.bytes_on(index, r.offset, r.len))
                    .fold(0u64, u64::saturating_add)
            }
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let runs = local_runs(
            &layout,
            1,
            &[Range {
                offset: 1500,
                len: 10_000,
            }],
        );
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].local_offset, 476);
    }

    #[test]
    fn writes_land_per_stripe_and_read_back_with_holes_as_zeros() {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let servers: Vec<_> = dirs
            .iter()
            .map(|d| IoService::open(d.path()).unwrap())
            .collect();
        let inode = InodeId(77);
        let file_bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let ranges = [Range {
            offset: 100,
            len: 4000,
        }];
        for (k, service) in servers.iter().enumerate() {
            let k = k as u32;
            service
                .handle(
                    CONNECTION,
                    Request::ObjCreate {
                        inodes: vec![inode],
                    },
                    vec![],
                )
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
                        ranges: vec![Range {
                            offset: 0,
                            len: 5000,
                        }],
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
        assert_eq!(
            write(InodeId(5), vec![1; 10]).unwrap_err().code,
            ErrorCode::Stale
        );
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
        assert_eq!(
            write(InodeId(5), vec![1; 10]).unwrap_err().code,
            ErrorCode::Stale
        );
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

    #[test]
    fn truncate_and_extents_agree_with_the_striping_math() {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let servers: Vec<_> = dirs
            .iter()
            .map(|d| IoService::open(d.path()).unwrap())
            .collect();
        let inode = InodeId(9);
        let size = 2 * 3 * 1024 + 1500; // two full rows, then 1024 on server 0 and 476 on server 1
        let mut ends = Vec::new();
        for (k, service) in servers.iter().enumerate() {
            let k = k as u32;
            service
                .handle(
                    CONNECTION,
                    Request::ObjCreate {
                        inodes: vec![inode],
                    },
                    vec![],
                )
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
}

//! The io service's unit tests: objects, stamps, striped I/O, views and the inline path.

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
    // The kernel drops only clean, unlocked pages: on a loaded machine writeback or
    // a reclaim pass may still hold one, so the advice is repeated until the pages
    // read below are seen (mincore) to be out.
    let mut evicted = false;
    for _ in 0..200 {
        object.sync_data().unwrap();
        // SAFETY: advice on a descriptor we hold.
        let rc = unsafe { libc::posix_fadvise(object.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        if !resident(&object, 4 * 65536, 65536) {
            evicted = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        evicted,
        "the test's file system keeps pages in memory after POSIX_FADV_DONTNEED (tmpfs?)"
    );
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

/// Whether any page of `len` bytes at `offset` of a file is in the page cache.
fn resident(file: &std::fs::File, offset: u64, len: usize) -> bool {
    use std::os::fd::AsRawFd;
    let page = 4096usize;
    // SAFETY: a private read-only map of a descriptor we hold, unmapped below; its
    // residency vector has one byte per page.
    unsafe {
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            offset as libc::off_t,
        );
        assert_ne!(map, libc::MAP_FAILED);
        let mut vec = vec![0u8; len.div_ceil(page)];
        let rc = libc::mincore(map, len, vec.as_mut_ptr());
        libc::munmap(map, len);
        assert_eq!(rc, 0);
        vec.iter().any(|b| b & 1 != 0)
    }
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

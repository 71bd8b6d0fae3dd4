//! Mappings and their seals, regions, client segments, the read pool and descriptor
//! passing.

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
    let server =
        Arc::new(Mapping::adopt(unsafe { OwnedFd::from_raw_fd(dup) }, 1 << 20, SEGMENT_BYTES_MAX).unwrap());
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

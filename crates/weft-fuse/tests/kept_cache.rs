//! Close-to-open with the kernel's page cache kept: an open lets the kernel keep the
//! pages it cached of a file only if no client changed the file's data since the
//! previous open in this mount (`DataStamp`). Checked with changes that leave every
//! attribute the manager keeps as it was (same-size rewrites by the native client and
//! by another mount), with truncates, sparse files, and that unchanged files really are
//! served from the kept pages (mincore).

mod common;

use common::{native_write, pattern, read_all, Mount};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Duration;
use weft_client::{ObjStamped, OpenOptions};
use weft_testkit::TestCluster;

const PAGE: usize = 4096;
/// Several stripes on every server of a default layout, and a tail that is no whole page.
const FILE_BYTES: usize = (3 << 20) + 1234;

/// Long enough for the objects' change stamps to settle (`ObjStamped::SETTLE_NS`): only
/// then may an unchanged file's pages be kept, so only then does a missed change show.
fn settle() {
    std::thread::sleep(Duration::from_nanos(ObjStamped::SETTLE_NS) + Duration::from_millis(200));
}

/// Pages of `path` in the kernel's page cache, of `len` bytes from its start (mapped,
/// never touched, and asked with mincore).
fn resident_pages(path: &Path, len: usize) -> usize {
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: a fresh shared read-only mapping of an open file, unmapped below; its
    // memory is never accessed, only asked about.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(at, libc::MAP_FAILED, "mmap {}", path.display());
        let mut vec = vec![0u8; len.div_ceil(PAGE)];
        let rc = libc::mincore(at, len, vec.as_mut_ptr());
        libc::munmap(at, len);
        assert_eq!(rc, 0, "mincore {}", path.display());
        vec.iter().filter(|b| *b & 1 == 1).count()
    }
}

fn native_size(client: &weft_client::Client, path: &str) -> u64 {
    client.stat(path).unwrap().size
}

/// Reads `path` through the mount, asserting it holds exactly `expected`.
fn assert_reads(path: &Path, expected: &[u8], when: &str) {
    let got = read_all(path);
    assert_eq!(got.len(), expected.len(), "{when}: size of {}", path.display());
    if let Some(at) = got.iter().zip(expected).position(|(a, b)| a != b) {
        panic!(
            "{when}: {} differs at byte {at} (page {}): read {:#04x}, expected {:#04x}",
            path.display(),
            at / PAGE,
            got[at],
            expected[at]
        );
    }
}

/// The case: mount A reads, the native client rewrites bytes in place (same
/// size, so the manager's mtime and size stay) and closes, A reopens and must see the
/// new bytes; while nothing changes, A's re-reads come from its page cache.
#[test]
fn same_size_rewrites_by_other_clients_are_seen_and_unchanged_files_stay_cached() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    let client = cluster.client();
    let mut expected = pattern(1, FILE_BYTES);
    native_write(&client, "/f", 0, &expected);
    let path = a.join("f");
    let attr_before = client.stat("/f").unwrap();
    settle();

    // First open: the data was never seen here; second: nothing changed, pages kept.
    assert_reads(&path, &expected, "first read");
    assert_reads(&path, &expected, "re-read");
    let pages = FILE_BYTES.div_ceil(PAGE);
    assert_eq!(
        resident_pages(&path, FILE_BYTES),
        pages,
        "an unchanged file's pages are kept across opens"
    );

    // Rewrites in place by the native client: one page inside a stripe, a few bytes
    // across a stripe boundary on two servers, the last byte. Read at once (the
    // stamps have not settled) and, in round 1, after they settled (a settled stamp
    // that differs).
    for (round, offset) in [
        (0u64, 40 * PAGE as u64 + 8),
        (1, (1 << 20) - 3),
        (2, FILE_BYTES as u64 - 1),
    ] {
        let len = match round {
            0 => PAGE,
            1 => 7,
            _ => 1,
        };
        // Kept first (a settled stamp remembered, the pages cached).
        settle();
        assert_reads(&path, &expected, &format!("before native rewrite {round}"));
        assert_eq!(resident_pages(&path, FILE_BYTES), pages);
        let new = pattern(100 + round, len);
        native_write(&client, "/f", offset, &new);
        expected[offset as usize..offset as usize + len].copy_from_slice(&new);
        if round == 1 {
            settle();
        }
        assert_reads(&path, &expected, &format!("after native rewrite {round}"));
        assert_eq!(native_size(&client, "/f"), FILE_BYTES as u64);
    }
    let attr_after = client.stat("/f").unwrap();
    // Same size: only the objects' times tell of the rewrites (their mtime is the
    // file's; the stamps do not rely on it, since a coarse clock can leave it as it was).
    assert_eq!(attr_before.size, attr_after.size);
    assert!(
        attr_after.mtime > attr_before.mtime,
        "the rewrites moved the file's mtime: {:?} then {:?}",
        attr_before.mtime,
        attr_after.mtime
    );

    // Cached again; then another mount rewrites in place with pwrite and closes.
    settle();
    assert_reads(&path, &expected, "re-read before the other mount writes");
    assert_reads(&path, &expected, "re-read before the other mount writes, cached");
    assert_eq!(resident_pages(&path, FILE_BYTES), pages);
    settle();
    let new = pattern(7, 2 * PAGE);
    let offset = 2 << 20;
    {
        let f = std::fs::OpenOptions::new().write(true).open(b.join("f")).unwrap();
        f.write_all_at(&new, offset as u64).unwrap();
    }
    expected[offset..offset + new.len()].copy_from_slice(&new);
    settle();
    // The stamp moved: the open drops the kept pages before anything reads them.
    let f = std::fs::File::open(&path).unwrap();
    assert_eq!(
        resident_pages(&path, FILE_BYTES),
        0,
        "changed file's pages dropped at open"
    );
    drop(f);
    assert_reads(&path, &expected, "after the other mount's rewrite");

    // A write through this mount is a change too (its own pages are dropped and read
    // afresh, which is correct if not needed).
    {
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(b"mine", 5).unwrap();
    }
    expected[5..9].copy_from_slice(b"mine");
    assert_reads(&path, &expected, "after this mount's write");
    assert_reads(
        &b.join("f"),
        &expected,
        "the other mount after this mount's write",
    );
}

/// Truncates (by another client, down then back up to the same size: the tail must
/// read as zeros, not as kept pages) and sparse files (holes read as zeros, on servers
/// with no object at all, and past a short object).
#[test]
fn truncated_and_sparse_files_read_correctly_with_kept_pages() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let client = cluster.client();
    let mut expected = pattern(3, FILE_BYTES);
    native_write(&client, "/t", 0, &expected);
    let path = a.join("t");
    settle();
    assert_reads(&path, &expected, "first read");
    assert_reads(&path, &expected, "cached re-read");

    // Down, then up to the same size: same size as A has cached, the tail now a hole.
    let cut = (1 << 20) + 100;
    {
        let options = OpenOptions {
            write: true,
            ..Default::default()
        };
        let file = client.open("/t", &options).unwrap();
        file.truncate(cut as u64).unwrap();
        file.truncate(FILE_BYTES as u64).unwrap();
        file.close().unwrap();
    }
    expected[cut..].fill(0);
    settle();
    assert_reads(&path, &expected, "after truncate down and up");
    // Shorter by another client while A holds pages past the new end.
    assert_reads(&path, &expected, "cached again");
    settle();
    {
        let options = OpenOptions {
            write: true,
            ..Default::default()
        };
        let file = client.open("/t", &options).unwrap();
        file.truncate(5000).unwrap();
        file.close().unwrap();
    }
    expected.truncate(5000);
    assert_reads(&path, &expected, "after truncate down");

    // Sparse: a few bytes far out; the servers before it hold nothing.
    let far = (9 << 20) + 5;
    let mut sparse = vec![0u8; far + 3];
    sparse[far..].copy_from_slice(b"end");
    sparse[..2].copy_from_slice(b"hi");
    native_write(&client, "/s", far as u64, b"end");
    native_write(&client, "/s", 0, b"hi");
    let spath = a.join("s");
    assert_reads(&spath, &sparse, "sparse file");
    settle();
    assert_reads(&spath, &sparse, "sparse file once settled");
    assert_reads(&spath, &sparse, "sparse file cached");
    // A write into a hole, on a server that had no object for it before it.
    native_write(&client, "/s", (4 << 20) + 1, b"mid");
    sparse[(4 << 20) + 1..(4 << 20) + 4].copy_from_slice(b"mid");
    settle();
    assert_reads(&spath, &sparse, "after a write into the hole");

    // Through the mount: a file written sparse here reads back the same.
    let local = a.join("m");
    {
        let f = std::fs::File::create(&local).unwrap();
        f.write_all_at(b"x", 3 << 20).unwrap();
        f.write_all_at(&pattern(4, 300_000), 100).unwrap();
    }
    let mut want = vec![0u8; (3 << 20) + 1];
    want[100..300_100].copy_from_slice(&pattern(4, 300_000));
    want[3 << 20] = b'x';
    assert_reads(&local, &want, "sparse file written through the mount");
    let mut native = vec![0u8; want.len()];
    let file = client.open("/m", &OpenOptions::default()).unwrap();
    assert_eq!(file.read_at(0, &mut native).unwrap(), want.len());
    assert!(native == want, "the native client reads the mount's sparse file");
}

/// Readers opening and reading the file over and over in parallel, through two mounts,
/// while the native client rewrites it in place (same size) generation after
/// generation, sometimes pausing long enough for the stamps to settle (so that opens
/// keep pages): an open that starts after a generation was closed never reads any page
/// of an older one.
#[test]
fn concurrent_opens_never_read_pages_older_than_the_last_close() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const BYTES: usize = 256 * 1024;
    const GENERATIONS: u64 = 8;
    let cluster = TestCluster::start();
    let mounts = [Mount::new(&cluster), Mount::new(&cluster)];
    let client = cluster.client();
    let generation = |g: u64| -> Vec<u8> {
        let mut data = vec![0u8; BYTES];
        for page in data.chunks_mut(PAGE) {
            page[..8].copy_from_slice(&g.to_le_bytes());
        }
        data
    };
    native_write(&client, "/g", 0, &generation(0));
    let closed = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let opens = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for k in 0..4 {
            let (closed, done, opens) = (&closed, &done, &opens);
            let path = mounts[k % 2].join("g");
            scope.spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    let at_least = closed.load(Ordering::SeqCst);
                    let data = read_all(&path);
                    opens.fetch_add(1, Ordering::Relaxed);
                    assert_eq!(data.len(), BYTES);
                    for (p, page) in data.chunks(PAGE).enumerate() {
                        let g = u64::from_le_bytes(page[..8].try_into().unwrap());
                        assert!(
                            g >= at_least,
                            "reader {k}: page {p} of generation {g}, opened after generation {at_least} was closed"
                        );
                    }
                }
            });
        }
        for g in 1..=GENERATIONS {
            native_write(&client, "/g", 0, &generation(g));
            closed.store(g, Ordering::SeqCst);
            // Every other generation stays long enough for opens to keep its pages.
            if g % 2 == 0 {
                settle();
            } else {
                std::thread::sleep(Duration::from_millis(150));
            }
        }
        done.store(true, Ordering::SeqCst);
    });
    assert!(
        opens.load(Ordering::Relaxed) >= 4 * GENERATIONS,
        "the readers ran"
    );
}

//! Close-to-open when an open goes by the lookup that ended its own path walk (see the
//! crate's `walked` module): that lookup is checked as an open checks its names, so the
//! open makes no second check; but only the same thread's open of the same file, within
//! a few milliseconds of the lookup's answer, goes by it. A lookup made for an earlier,
//! separate call (a `stat` whose entry the kernel still holds, so the open's walk asks
//! nothing) or by another thread is never trusted: the open checks again and sees what
//! another client closed in between, whether a same-size rewrite (which changes no
//! attribute the manager keeps, only the data stamp) or a name replaced.
//!
//! Each case keeps the file's pages in mount A's page cache with a settled data stamp
//! first, so an open that wrongly went by the older lookup would let the kernel keep
//! them and read the old bytes.

mod common;

use common::{native_write, pattern, read_all, Mount};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};
use weft_client::ObjStamped;
use weft_testkit::TestCluster;

const FILE_BYTES: usize = 3 * 4096 + 100;

/// Mount A's attribute and entry timeout in the cases where a `stat`'s entry must still
/// be held by the kernel at the later open (so that the open's walk asks nothing): long
/// enough for a change by another client in between, on a loaded machine.
const HELD_MS: u64 = 4000;

/// Long enough for the objects' change stamps to settle (`ObjStamped::SETTLE_NS`).
fn settle() {
    std::thread::sleep(Duration::from_nanos(ObjStamped::SETTLE_NS) + Duration::from_millis(200));
}

fn assert_reads(path: &Path, expected: &[u8], when: &str) {
    let got = read_all(path);
    assert_eq!(got.len(), expected.len(), "{when}: size of {}", path.display());
    if let Some(at) = got.iter().zip(expected).position(|(a, b)| a != b) {
        panic!(
            "{when}: {} differs at byte {at}: read {:#04x}, expected {:#04x} (old bytes: an open went by a lookup made before the change)",
            path.display(),
            got[at],
            expected[at]
        );
    }
}

/// How another client changes `/name` in the cases below.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// The native client rewrites it in place, same size.
    Native,
    /// Mount B rewrites it in place with pwrite, same size.
    OtherMount,
    /// Mount B writes a new file and renames it over the name.
    Replaced,
}

/// Makes `/name` with `old` through the native client, has mount A read it until its
/// pages are kept with a settled stamp, then waits for A's entry of it to time out
/// (`held_ms`).
fn cached_on_a(client: &weft_client::Client, a: &Mount, name: &str, old: &[u8], held_ms: u64) {
    native_write(client, &format!("/{name}"), 0, old);
    settle();
    let path = a.join(name);
    assert_reads(&path, old, "first read");
    assert_reads(&path, old, "re-read");
    settle();
    assert_reads(&path, old, "re-read after the stamps settled");
    std::thread::sleep(Duration::from_millis(held_ms + 200));
}

fn change(client: &weft_client::Client, b: &Mount, name: &str, new: &[u8], how: Change) {
    match how {
        Change::Native => native_write(client, &format!("/{name}"), 0, new),
        Change::OtherMount => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(b.join(name))
                .unwrap();
            f.write_all_at(new, 0).unwrap();
        }
        Change::Replaced => {
            let tmp = format!("{name}.tmp");
            std::fs::write(b.join(&tmp), new).unwrap();
            std::fs::rename(b.join(&tmp), b.join(name)).unwrap();
        }
    }
}

/// A `stat` on mount A looks the name up (checked, with the data stamp of the time);
/// another client then changes the file and closes; the same thread's open a moment
/// later (its walk asks nothing: the kernel holds the `stat`'s entry) must check again
/// and read the new bytes. Fails if an open went by any earlier lookup of its thread,
/// not only the one within the window.
#[test]
fn a_lookup_for_an_earlier_stat_is_not_trusted_by_the_same_threads_open() {
    let cluster = TestCluster::start();
    let held = HELD_MS.to_string();
    let a = Mount::with_args(&cluster, &["--attr-timeout-ms", &held]);
    let b = Mount::new(&cluster);
    let client = cluster.client();
    for (round, how) in [Change::Native, Change::OtherMount, Change::Replaced]
        .into_iter()
        .enumerate()
    {
        let name = format!("f{round}");
        let old = pattern(10 * round as u64 + 1, FILE_BYTES);
        let new = pattern(10 * round as u64 + 2, FILE_BYTES);
        cached_on_a(&client, &a, &name, &old, HELD_MS);
        let path = a.join(&name);
        let stat = Instant::now();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), FILE_BYTES as u64);
        change(&client, &b, &name, &new, how);
        // Well past the window, well within the entry's timeout.
        std::thread::sleep(Duration::from_millis(50));
        assert_reads(&path, &new, &format!("{how:?}: open after a stat and the change"));
        assert!(
            stat.elapsed() < Duration::from_millis(HELD_MS),
            "{how:?}: the case took longer than the entry is held ({:?}): it tested nothing",
            stat.elapsed()
        );
    }
}

/// With the window widened to seconds (a test setting), a lookup by one thread must
/// still not serve another thread's open: thread 1 stats the file, another client
/// changes it, thread 2 opens it and must read the new bytes. Fails if an open went by
/// another thread's lookup.
#[test]
fn another_threads_lookup_is_not_trusted() {
    let cluster = TestCluster::start();
    let held = HELD_MS.to_string();
    let a = Mount::with_args(&cluster, &["--attr-timeout-ms", &held, "--walk-window-ms", &held]);
    let b = Mount::new(&cluster);
    let client = cluster.client();
    for (round, how) in [Change::Native, Change::OtherMount, Change::Replaced]
        .into_iter()
        .enumerate()
    {
        let name = format!("g{round}");
        let old = pattern(10 * round as u64 + 5, FILE_BYTES);
        let new = pattern(10 * round as u64 + 6, FILE_BYTES);
        cached_on_a(&client, &a, &name, &old, HELD_MS);
        let path = a.join(&name);
        let stat = Instant::now();
        let looked = path.clone();
        std::thread::spawn(move || std::fs::metadata(looked).unwrap().len())
            .join()
            .unwrap();
        change(&client, &b, &name, &new, how);
        let opened = path.clone();
        let got = std::thread::spawn(move || read_all(&opened)).join().unwrap();
        assert_eq!(
            got, new,
            "{how:?}: another thread's open after a stat and the change read old bytes"
        );
        assert!(
            stat.elapsed() < Duration::from_millis(HELD_MS),
            "{how:?}: the case took longer than the window ({:?}): it tested nothing",
            stat.elapsed()
        );
    }
}

/// The open of a file whose entry timed out: the walk's lookup is checked (every name,
/// the size and the data stamp) and the open goes by it, one manager request per open
/// rather than two, and still reads what other clients changed before the open:
/// same-size rewrites by the native client and by mount B, a name B replaced.
#[test]
fn an_opens_own_walk_is_checked_once_and_reads_fresh_data() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    let client = cluster.client();
    std::fs::create_dir(a.join("d")).unwrap();
    // Fewer than a directory's lookups that make the mount list it (`recent`), so every
    // lookup goes to the manager.
    const FILES: usize = 9;
    let hows = [Change::Native, Change::OtherMount, Change::Replaced];
    let mut expected = Vec::new();
    for k in 0..FILES {
        let data = pattern(100 + k as u64, FILE_BYTES);
        native_write(&client, &format!("/d/h{k}"), 0, &data);
        expected.push(data);
    }
    settle();
    for (k, data) in expected.iter().enumerate() {
        assert_reads(&a.join(&format!("d/h{k}")), data, "first read");
    }
    settle();
    for (k, data) in expected.iter().enumerate() {
        assert_reads(&a.join(&format!("d/h{k}")), data, "re-read, kept");
    }
    for (k, data) in expected.iter_mut().enumerate() {
        *data = pattern(200 + k as u64, FILE_BYTES);
        change(&client, &b, &format!("d/h{k}"), data, hows[k % hows.len()]);
    }
    // A's entries time out (1 s), and the changed stamps settle, so only a stamp
    // compared with the one remembered tells of the rewrites.
    settle();
    let (lookups, revalidates) = (
        cluster.manager_requests("lookup"),
        cluster.manager_requests("revalidate"),
    );
    for (k, data) in expected.iter().enumerate() {
        assert_reads(&a.join(&format!("d/h{k}")), data, "open after the change");
    }
    let lookups = cluster.manager_requests("lookup") - lookups;
    let revalidates = cluster.manager_requests("revalidate") - revalidates;
    // Per rewritten file one checked lookup (a revalidate) and nothing at open; a
    // replaced name fails the check (a plain lookup), and its open checks (ESTALE
    // is not involved: the kernel opens what the lookup found).
    let replaced = (0..FILES)
        .filter(|k| matches!(hows[k % hows.len()], Change::Replaced))
        .count() as f64;
    let rewritten = FILES as f64 - replaced;
    assert!(
        lookups <= replaced + 1.0,
        "{lookups} plain lookups for {FILES} opens ({replaced} names replaced)"
    );
    assert!(
        revalidates < rewritten + 2.0 * replaced + 0.5 * rewritten,
        "{revalidates} revalidates for {FILES} opens: the walks' checked lookups were not gone by"
    );
}

/// The walk's lookup checks every name on the way, not only the last: mount B renames
/// the file's directory away and makes a new one with a new file of the same name while
/// mount A still holds its entry of the directory (and none of the file). A's open then
/// looks the file up in the old directory, which still has it; that lookup must not
/// vouch for it, and the open must find the new file. Fails if an open went by a lookup
/// that checked only the file's own name.
#[test]
fn a_directory_replaced_on_the_way_is_not_gone_by() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    let client = cluster.client();
    std::fs::create_dir(a.join("dir")).unwrap();
    let old = pattern(301, FILE_BYTES);
    let new = pattern(302, FILE_BYTES);
    cached_on_a(&client, &a, "dir/f", &old, 1000);
    // A's entry of the directory is fresh again, its entry of the file is not.
    let stat = Instant::now();
    assert!(std::fs::metadata(a.join("dir")).unwrap().is_dir());
    std::fs::rename(b.join("dir"), b.join("dir.old")).unwrap();
    std::fs::create_dir(b.join("dir")).unwrap();
    std::fs::write(b.join("dir/f"), &new).unwrap();
    assert_reads(&a.join("dir/f"), &new, "open after the directory was replaced");
    assert!(
        stat.elapsed() < Duration::from_millis(800),
        "the case took longer than the directory's entry is held ({:?}): it tested nothing",
        stat.elapsed()
    );
    assert_reads(&a.join("dir.old/f"), &old, "the old file, by its new path");
}

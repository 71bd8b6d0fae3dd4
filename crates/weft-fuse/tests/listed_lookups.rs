//! Lookups answered from a recent listing of their directory (weft-fuse `recent`): a
//! run of stats after the attribute timeout costs the manager a few requests, not one
//! per file, and still never shows attributes older than the timeout, nor opens a file
//! another client removed or replaced (issue 8 item 1's guarantees).

mod common;

use common::Mount;
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::time::Duration;
use weft_client::{CreateOptions, OpenOptions, SetAttr};
use weft_testkit::TestCluster;

const FILES: usize = 300;

fn name(k: usize) -> String {
    format!("f{k:03}")
}

/// Stats every file of the directory through the mount, the way `ls`-less programs
/// (mdtest, make) do: one path at a time. Sizes and modes as seen.
fn stat_all(mount: &Mount) -> Vec<Option<(u64, u32, u64)>> {
    (0..FILES + 1)
        .map(
            |k| match std::fs::metadata(mount.join(&format!("d/{}", name(k)))) {
                Ok(m) => Some((m.len(), m.permissions().mode() & 0o7777, m.ino())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => panic!("stat {}: {e}", name(k)),
            },
        )
        .collect()
}

#[test]
fn stats_after_the_timeout_cost_few_lookups_and_never_show_more_than_the_timeout_old() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/d", 0o755).unwrap();
    let mut inodes = Vec::new();
    for k in 0..FILES {
        let file = client
            .create(&format!("/d/{}", name(k)), &CreateOptions::default())
            .unwrap();
        file.write_at(0, &vec![b'a'; k]).unwrap();
        inodes.push(file.inode().0);
    }
    let mount = Mount::new(&cluster);

    // First sight: a few names are looked up one by one, then the directory is listed.
    let before = cluster.manager_requests("lookup");
    let seen = stat_all(&mount);
    let lookups = cluster.manager_requests("lookup") - before;
    for k in 0..FILES {
        assert_eq!(seen[k], Some((k as u64, 0o644, inodes[k])), "{}", name(k));
    }
    assert_eq!(seen[FILES], None);
    assert!(
        lookups < (FILES / 3) as f64,
        "{lookups} manager lookups for {FILES} stats in one directory"
    );

    // Another client changes five names while the listing is fresh.
    let mode = |m| SetAttr {
        mode: Some(m),
        ..SetAttr::default()
    };
    client.setattr(&format!("/d/{}", name(5)), &mode(0o600)).unwrap();
    client
        .open(
            &format!("/d/{}", name(6)),
            &OpenOptions {
                write: true,
                ..OpenOptions::default()
            },
        )
        .unwrap()
        .write_at(0, &[b'b'; 1000])
        .unwrap();
    client.unlink(&format!("/d/{}", name(7))).unwrap();
    let replacement = client.create("/d/new", &CreateOptions::default()).unwrap();
    replacement.write_at(0, b"replaced").unwrap();
    client.rename("/d/new", &format!("/d/{}", name(8))).unwrap();
    client
        .create(&format!("/d/{}", name(FILES)), &CreateOptions::default())
        .unwrap();

    // Opens never see the old names, fresh listing or not; a name new since the listing is
    // found.
    assert_eq!(
        std::fs::read(mount.join(&format!("d/{}", name(8)))).unwrap(),
        b"replaced"
    );
    let gone = std::fs::read(mount.join(&format!("d/{}", name(7))));
    assert_eq!(
        gone.as_ref().map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::NotFound),
        "an open found a file removed elsewhere: {gone:?}"
    );
    assert_eq!(
        std::fs::read(mount.join(&format!("d/{}", name(9)))).unwrap(),
        vec![b'a'; 9]
    );
    assert!(mount.join(&format!("d/{}", name(FILES))).exists());

    // Once the timeout has passed, every stat shows every change, whether the kernel asks
    // the manager or a new listing answers.
    std::thread::sleep(Duration::from_millis(1100));
    for round in 0..2 {
        let seen = stat_all(&mount);
        for k in 0..FILES {
            let expected = match k {
                5 => Some((5, 0o600, inodes[5])),
                6 => Some((1000, 0o644, inodes[6])),
                7 => None,
                8 => Some((8, 0o644, replacement.inode().0)),
                _ => Some((k as u64, 0o644, inodes[k])),
            };
            assert_eq!(seen[k], expected, "round {round}: {}", name(k));
        }
        assert!(seen[FILES].is_some(), "round {round}: a new file not seen");
        std::thread::sleep(Duration::from_millis(1100));
    }

    // And so do the mount's own changes, at once.
    let own = mount.join(&format!("d/{}", name(10)));
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::write(mount.join(&format!("d/{}", name(11))), b"xyz").unwrap();
    std::fs::remove_file(mount.join(&format!("d/{}", name(12)))).unwrap();
    let seen = stat_all(&mount);
    assert_eq!(seen[10], Some((10, 0o640, inodes[10])));
    assert_eq!(seen[11], Some((3, 0o644, inodes[11])));
    assert_eq!(seen[12], None);
}

/// Reading every file of a directory one by one after the timeout (mdtest's read
/// phase: 4 processes, each opening, reading and closing its files; `cat *`, grep -r):
/// the lookups are answered from a listing, though the readers' opens and closes go on
/// while it is fetched. A close of a descriptor open only for reading changes nothing;
/// it threw away the listing being fetched all the same, so mdtest's read phase of
/// 4,000 files made 196 listings and 1,450 lookups.
#[test]
fn reading_files_one_by_one_is_answered_from_a_listing() {
    read_one_by_one(false);
}

/// The same with each file opened for reading and writing and never written, as
/// mdtest's read phase opens them: such a descriptor changed nothing either. Its open
/// and close threw the listing away (992 listing pages and 4,040 lookups in a read phase
/// of 4,000 files); then a file written through such a descriptor still shows its new
/// size at once.
#[test]
fn reading_files_opened_for_writing_one_by_one_is_answered_from_a_listing() {
    let (mount, _cluster) = read_one_by_one(true);
    let path = mount.join(&format!("d/{}", name(3)));
    let before = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // Looked up again while it is open for writing and not yet written.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), before);
    file.write_all_at(b"grown", before).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), before + 5);
    drop(file);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), before + 5);
}

/// Four readers read 2,000 files of one directory through a fresh mount, each file
/// opened for reading (and writing, if `for_writing`); the mount and its cluster.
fn read_one_by_one(for_writing: bool) -> (Mount, TestCluster) {
    const READERS: usize = 4;
    const MANY: usize = 2000;
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/d", 0o755).unwrap();
    for k in 0..MANY {
        client
            .create(&format!("/d/{}", name(k)), &CreateOptions::default())
            .unwrap()
            .write_at(0, &vec![b'r'; 1 + k % 4096])
            .unwrap();
    }
    let mount = Mount::new(&cluster);
    let (lookups, listings) = (
        cluster.manager_requests("lookup"),
        cluster.manager_requests("readdir_sized"),
    );
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for r in 0..READERS {
            let mount = &mount;
            s.spawn(move || {
                for k in (r..MANY).step_by(READERS) {
                    let mut file = std::fs::OpenOptions::new()
                        .read(true)
                        .write(for_writing)
                        .open(mount.join(&format!("d/{}", name(k))))
                        .unwrap();
                    let mut bytes = Vec::new();
                    file.read_to_end(&mut bytes).unwrap();
                    assert_eq!(bytes, vec![b'r'; 1 + k % 4096], "{}", name(k));
                }
            });
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    let lookups = cluster.manager_requests("lookup") - lookups;
    let listings = cluster.manager_requests("readdir_sized") - listings;
    // A listing is 2 pages here and serves for the attribute timeout (1 s): the reading
    // takes well under a second on a quiet machine, so a few listings at most (12
    // pages), and one more per second it took on a loaded one; the lookups are those
    // before the first listing and during each fetch. Without listings it would be
    // one lookup per file.
    let pages_allowed = 2.0 * (seconds.ceil() + 5.0);
    eprintln!(
        "{lookups} lookups, {listings} listing pages, {seconds:.2} s (opened for writing: {for_writing})"
    );
    assert!(
        lookups < (MANY / 4) as f64 && listings <= pages_allowed,
        "{lookups} manager lookups and {listings} listing pages (at most {pages_allowed} for \
         {seconds:.1} s) to read {MANY} files of one directory (opened for writing: {for_writing})"
    );
    (mount, cluster)
}

/// mdtest's stat phase right after its create phase, through one mount: the files were
/// made here (the kernel's entries of the first ones have expired), the last create a
/// moment ago. The stats are answered from a listing once many of them found no change
/// here in between; before, a directory changed here less than a second ago was never
/// listed, and mdtest's stat phase (which ends within that second at a lookup per file)
/// went name by name: 3,749 stats/s against 31,617 with mdtest -F, where the directory
/// had not been looked up before its creates.
#[test]
fn stats_right_after_creates_here_are_answered_from_a_listing() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let dir = mount.join("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("first"), b"x").unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    // A name found by the manager: the mount follows the directory from now on.
    assert!(dir.join("first").exists());
    for k in 0..FILES {
        std::fs::write(dir.join(name(k)), vec![b'c'; k]).unwrap();
    }
    // The kernel's entries of every file above expire; then one last create.
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(dir.join("last"), b"y").unwrap();
    let before = cluster.manager_requests("lookup");
    for k in 0..FILES {
        let m = std::fs::metadata(dir.join(name(k))).unwrap();
        assert_eq!(m.len(), k as u64, "{}", name(k));
    }
    let lookups = cluster.manager_requests("lookup") - before;
    assert!(
        lookups < (FILES / 2) as f64,
        "{lookups} manager lookups ({} listings) for {FILES} stats right after creating the files",
        cluster.manager_requests("readdir_sized") as u64
    );
}

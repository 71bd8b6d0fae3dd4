//! A directory of 10,000 entries: created from several connections at once, listed page
//! by page (each name exactly once, in byte order), listed by `weft ls`, removed again.

mod common;

use common::Rng;
use std::collections::BTreeSet;
use std::time::Instant;
use weft_client::{Client, CreateOptions, FileKind};
use weft_testkit::TestCluster;

const ENTRIES: usize = 10_000;
/// Every tenth entry is a directory.
const DIRECTORY_EVERY: usize = 10;
const THREADS: usize = 4;

/// Names of varying length and shape, so that byte order differs from creation order.
fn names(rng: &mut Rng) -> Vec<String> {
    let mut set = BTreeSet::new();
    while set.len() < ENTRIES {
        let len = rng.between(1, 40) as usize;
        let name: String = (0..len)
            .map(|_| {
                let alphabet = b"abcXYZ019-_.~ ";
                alphabet[rng.below(alphabet.len() as u64) as usize] as char
            })
            .collect();
        if name != "." && name != ".." {
            set.insert(name);
        }
    }
    let mut v: Vec<String> = set.into_iter().collect();
    rng.shuffle(&mut v);
    v
}

#[test]
fn directory_with_10000_entries() {
    let mut rng = Rng::new(common::seed("directory_with_10000_entries"));
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/big", 0o755).unwrap();
    let names = names(&mut rng);
    let is_dir = |k: usize| k.is_multiple_of(DIRECTORY_EVERY);

    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let names = &names;
            let meta = cluster.meta_addr();
            let auth = cluster.auth();
            scope.spawn(move || {
                let client = Client::connect_with(&meta, auth.clone()).unwrap();
                let exclusive = CreateOptions {
                    exclusive: true,
                    truncate: false,
                    ..CreateOptions::default()
                };
                for k in (t..ENTRIES).step_by(THREADS) {
                    let path = format!("/big/{}", names[k]);
                    if is_dir(k) {
                        client.mkdir(&path, 0o755)
                    } else {
                        client.create(&path, &exclusive).map(|f| f.attr().clone())
                    }
                    .unwrap_or_else(|e| panic!("creating {path:?}: {e}"));
                }
            });
        }
    });
    let elapsed = started.elapsed();
    eprintln!(
        "created {ENTRIES} entries ({} files on 4 io servers each, {} directories) from {THREADS} clients in {:.1} s ({:.0}/s)",
        ENTRIES - ENTRIES / DIRECTORY_EVERY,
        ENTRIES / DIRECTORY_EVERY,
        elapsed.as_secs_f64(),
        ENTRIES as f64 / elapsed.as_secs_f64()
    );

    let mut sorted: Vec<(String, FileKind)> = names
        .iter()
        .enumerate()
        .map(|(k, n)| {
            let kind = if is_dir(k) {
                FileKind::Directory
            } else {
                FileKind::File
            };
            (n.clone(), kind)
        })
        .collect();
    // Byte order, which is what the manager promises (not locale order).
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));

    // Small pages, so that many page boundaries are crossed.
    let dir = client.resolve("/big").unwrap();
    let mut listed = Vec::new();
    let mut after = String::new();
    let mut pages = 0;
    loop {
        let (page, more) = client.readdir_page(dir.inode, &after, 777).unwrap();
        assert!(page.len() <= 777);
        pages += 1;
        if let Some(last) = page.last() {
            after = last.name.to_string();
        }
        listed.extend(page);
        if !more {
            break;
        }
        assert!(pages < 100, "readdir does not end");
    }
    assert_eq!(pages, ENTRIES.div_ceil(777));
    let got: Vec<(String, FileKind)> = listed.iter().map(|e| (e.name.to_string(), e.kind)).collect();
    assert_eq!(got.len(), ENTRIES, "entries listed");
    for (k, (g, w)) in got.iter().zip(&sorted).enumerate() {
        assert_eq!(g, w, "entry {k} of the listing");
    }
    let inodes: BTreeSet<_> = listed.iter().map(|e| e.inode).collect();
    assert_eq!(inodes.len(), ENTRIES, "inode numbers are unique");
    // The client's own paging (largest pages) agrees.
    let all = client.readdir("/big").unwrap();
    assert_eq!(all, listed);
    let stats = client.statfs().unwrap().meta;
    assert_eq!(stats.files as usize, ENTRIES - ENTRIES / DIRECTORY_EVERY);
    assert_eq!(stats.directories as usize, ENTRIES / DIRECTORY_EVERY + 2);

    // `weft ls` prints every name, directories with a slash, in the same order.
    let started = Instant::now();
    let out = common::weft_ok(&cluster, &["ls", "/big"]);
    let ls_lines: Vec<&str> = out.lines().collect();
    assert_eq!(ls_lines.len(), ENTRIES);
    for (line, (name, kind)) in ls_lines.iter().zip(&sorted) {
        let want = match kind {
            FileKind::Directory => format!("{name}/"),
            _ => name.clone(),
        };
        assert_eq!(*line, want);
    }
    eprintln!(
        "weft ls of {ENTRIES} entries: {:.2} s",
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let names = &names;
            let meta = cluster.meta_addr();
            let auth = cluster.auth();
            scope.spawn(move || {
                let client = Client::connect_with(&meta, auth.clone()).unwrap();
                for k in (t..ENTRIES).step_by(THREADS) {
                    let path = format!("/big/{}", names[k]);
                    if is_dir(k) {
                        client.rmdir(&path)
                    } else {
                        client.unlink(&path)
                    }
                    .unwrap_or_else(|e| panic!("removing {path:?}: {e}"));
                }
            });
        }
    });
    eprintln!(
        "removed {ENTRIES} entries in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(client.readdir("/big").unwrap().is_empty());
    client.rmdir("/big").unwrap();
    let stats = client.statfs().unwrap().meta;
    assert_eq!((stats.files, stats.directories), (0, 1));
    // Every removed file's objects are purged from the io servers, and after a manager restart
    // (which hands the manager's unused precreated objects to the purger) nothing is left.
    common::wait_orphans_purged(&client);
    cluster.kill9(0);
    cluster.restart();
    common::wait_orphans_purged(&client);
    for (server, io) in client.statfs().unwrap().servers {
        assert_eq!(io.unwrap().objects, 0, "objects left on io server {}", server.id);
    }
}

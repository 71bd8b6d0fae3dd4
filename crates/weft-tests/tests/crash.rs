//! Crash consistency: kill -9 an io daemon, and separately the metadata manager, in the
//! middle of a stream of operations; restart; everything acknowledged is there, nothing
//! is half done, and the same `Client` carries on by itself.

mod common;

use common::{pattern, wait_for, Rng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError, CreateOptions, FileKind, LayoutRequest, OpenOptions};
use weft_testkit::TestCluster;

/// Retries `op` until it succeeds, recording each failure; gives up after 60 s.
fn retry<T>(what: &str, failures: &Mutex<Vec<String>>, mut op: impl FnMut() -> Result<T, ClientError>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match op() {
            Ok(v) => return v,
            Err(e) => {
                assert!(Instant::now() < deadline, "{what} still failing after 60 s: {e}");
                failures.lock().unwrap().push(e.to_string());
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn io_server_killed_mid_writes_loses_nothing_synced() {
    let seed = common::seed("io_server_killed_mid_writes_loses_nothing_synced");
    let cluster = TestCluster::start();
    let client = cluster.client();
    let file = client
        .create(
            "/stream",
            &CreateOptions {
                layout: LayoutRequest {
                    cache: None,
                    stripe_size_bytes: Some(16 << 10),
                    stripe_count: Some(4),
                    first_server: None,
                    redundancy: None,
                },
                ..CreateOptions::default()
            },
        )
        .unwrap();
    let victim = 2;
    let victim_addr = cluster.addr(victim);
    let tag = seed;
    // Bytes acknowledged by write_at and by sync; the file is written append-only, so
    // every byte below `synced` keeps the value it had when sync returned.
    let written = AtomicU64::new(0);
    let synced = AtomicU64::new(0);
    let syncs = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let failures = Mutex::new(Vec::new());
    let (synced_at_kill, syncs_at_restart) = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut rng = Rng::new(seed);
            let mut offset = 0u64;
            let mut chunk = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let len = rng.between(1, 200_000);
                let data = pattern(tag, offset, len as usize);
                retry("write", &failures, || file.write_at(offset, &data));
                offset += len;
                written.store(offset, Ordering::SeqCst);
                chunk += 1;
                if chunk.is_multiple_of(4) {
                    retry("sync", &failures, || file.sync());
                    synced.store(offset, Ordering::SeqCst);
                    syncs.fetch_add(1, Ordering::SeqCst);
                }
            }
            retry("final sync", &failures, || file.sync());
            synced.store(offset, Ordering::SeqCst);
        });
        wait_for("2 MiB synced", Duration::from_secs(30), || {
            (synced.load(Ordering::SeqCst) >= 2 << 20).then_some(())
        });
        let synced_at_kill = synced.load(Ordering::SeqCst);
        cluster.kill9(victim);
        // The crash lands in the stream: the writer runs into it.
        wait_for(
            "the writer to hit the dead server",
            Duration::from_secs(30),
            || (failures.lock().unwrap().len() >= 3).then_some(()),
        );
        cluster.restart();
        let syncs_at_restart = syncs.load(Ordering::SeqCst);
        // The same client, without being told, reaches the restarted server.
        wait_for("syncs after the restart", Duration::from_secs(60), || {
            (syncs.load(Ordering::SeqCst) >= syncs_at_restart + 3).then_some(())
        });
        stop.store(true, Ordering::SeqCst);
        (synced_at_kill, syncs_at_restart)
    });
    let total = synced.load(Ordering::SeqCst);
    assert_eq!(written.load(Ordering::SeqCst), total);
    assert!(total > synced_at_kill);
    eprintln!(
        "{} bytes synced before the kill, {syncs_at_restart} syncs before the restart, {total} bytes in all",
        synced_at_kill
    );
    for failure in failures.lock().unwrap().iter() {
        assert!(
            failure.contains(&victim_addr),
            "a failure does not name the dead server {victim_addr}: {failure}"
        );
    }

    let reader = cluster.client();
    assert_eq!(reader.stat("/stream").unwrap().size, total);
    let back = reader.open("/stream", &OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; total as usize];
    assert_eq!(back.read_at(0, &mut buf).unwrap(), total as usize);
    if let Some(x) = (0..total as usize).find(|&x| buf[x] != common::byte_at(tag, x as u64)) {
        panic!(
            "byte {x} is wrong ({} synced before the kill)",
            if (x as u64) < synced_at_kill {
                "it was"
            } else {
                "it was not"
            }
        );
    }
}

/// The namespace of one worker, by path relative to its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File { tag: u64, len: usize },
}

type Tree = BTreeMap<String, Node>;

#[derive(Debug, Clone)]
enum Op {
    Mkdir(String),
    Create { path: String, tag: u64, len: usize },
    Rename { from: String, to: String },
    Unlink(String),
    Rmdir(String),
}

fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

fn is_within(path: &str, dir: &str) -> bool {
    path == dir || path.starts_with(&format!("{dir}/"))
}

/// What `op` does to the namespace; `content` says whether a create's data was written.
fn apply(tree: &mut Tree, op: &Op, content: bool) {
    match op {
        Op::Mkdir(p) => {
            tree.insert(p.clone(), Node::Dir);
        }
        Op::Create { path, tag, len } => {
            let len = if content { *len } else { 0 };
            tree.insert(path.clone(), Node::File { tag: *tag, len });
        }
        Op::Rename { from, to } => {
            let moved: Vec<(String, Node)> = tree
                .iter()
                .filter(|(k, _)| is_within(k, from))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (k, _) in &moved {
                tree.remove(k);
            }
            for (k, v) in moved {
                tree.insert(format!("{to}{}", &k[from.len()..]), v);
            }
        }
        Op::Unlink(p) | Op::Rmdir(p) => {
            tree.remove(p);
        }
    }
}

/// A random operation that is valid in `tree`.
fn next_op(rng: &mut Rng, tree: &Tree, worker: u64, counter: u64) -> Op {
    let dirs: Vec<&String> = tree
        .iter()
        .filter(|(_, n)| **n == Node::Dir)
        .map(|(k, _)| k)
        .collect();
    let files: Vec<&String> = tree
        .iter()
        .filter(|(_, n)| **n != Node::Dir)
        .map(|(k, _)| k)
        .collect();
    let mut any_dir = vec![String::new()];
    any_dir.extend(dirs.iter().map(|d| d.to_string()));
    let pick = |rng: &mut Rng, v: &[String]| v[rng.below(v.len() as u64) as usize].clone();
    match rng.below(10) {
        0 | 1 => return Op::Mkdir(join(&pick(rng, &any_dir), &format!("d{counter}"))),
        5 | 6 if !files.is_empty() => {
            let from = files[rng.below(files.len() as u64) as usize].clone();
            let to = if rng.below(3) == 0 && files.len() > 1 {
                // Replace another file.
                files.iter().find(|f| ***f != from).unwrap().to_string()
            } else {
                join(&pick(rng, &any_dir), &format!("r{counter}"))
            };
            return Op::Rename { from, to };
        }
        7 if !dirs.is_empty() => {
            let from = dirs[rng.below(dirs.len() as u64) as usize].clone();
            let targets: Vec<String> = any_dir.iter().filter(|d| !is_within(d, &from)).cloned().collect();
            return Op::Rename {
                to: join(&pick(rng, &targets), &format!("m{counter}")),
                from,
            };
        }
        8 if !files.is_empty() => return Op::Unlink(files[rng.below(files.len() as u64) as usize].clone()),
        9 => {
            let empty: Vec<&&String> = dirs
                .iter()
                .filter(|d| !tree.keys().any(|k| parent_of(k) == d.as_str()))
                .collect();
            if !empty.is_empty() {
                return Op::Rmdir(empty[rng.below(empty.len() as u64) as usize].to_string());
            }
        }
        _ => {}
    }
    Op::Create {
        path: join(&pick(rng, &any_dir), &format!("f{counter}")),
        tag: worker << 32 | counter,
        len: rng.below(5000) as usize,
    }
}

/// Runs `op` under `/t<worker>`; an error means it may or may not have happened.
fn run(client: &Client, root: &str, op: &Op) -> Result<(), ClientError> {
    let abs = |p: &str| format!("{root}/{p}");
    match op {
        Op::Mkdir(p) => client.mkdir(&abs(p), 0o755).map(drop),
        Op::Create { path, tag, len } => {
            let file = client.create(
                &abs(path),
                &CreateOptions {
                    exclusive: true,
                    truncate: false,
                    ..CreateOptions::default()
                },
            )?;
            // Data goes to the io servers, which stay up, but the first write asks the
            // manager for the file's write capability: a crash right after the create
            // fails the write (naming the manager), leaving the created file empty,
            // which is what a failed create may leave (`apply(.., false)`); a crash
            // between the write and the end of the sync (whose last step asks the
            // manager to commit) leaves it written (`apply(.., true)`).
            file.write_at(0, &pattern(*tag, 0, *len))?;
            file.sync()?;
            Ok(())
        }
        Op::Rename { from, to } => client.rename(&abs(from), &abs(to)).map(drop),
        Op::Unlink(p) => client.unlink(&abs(p)),
        Op::Rmdir(p) => client.rmdir(&abs(p)),
    }
}

/// What is under `root`, read back through a client, with every consistency check a
/// walk can make: each entry resolves by lookup to the inode and kind readdir gave,
/// attributes are readable, files hold their data objects.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Dir,
    File(Vec<u8>),
}

fn walk(client: &Client, root: &str, inodes: &mut BTreeSet<u64>) -> BTreeMap<String, Found> {
    let mut found = BTreeMap::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let abs = if rel.is_empty() {
            root.to_owned()
        } else {
            format!("{root}/{rel}")
        };
        let dir = client.resolve(&abs).unwrap();
        assert_eq!(dir.kind, FileKind::Directory, "{abs}");
        let entries = client.readdir(&abs).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.name.to_str().unwrap()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted, "{abs}: readdir is sorted, without duplicates");
        for e in entries {
            let child_rel = join(&rel, e.name.to_str().unwrap());
            let child_abs = format!("{root}/{child_rel}");
            let looked = client
                .lookup(dir.inode, &e.name)
                .unwrap_or_else(|err| panic!("{child_abs}: listed but not found: {err}"));
            assert_eq!((looked.inode, looked.kind), (e.inode, e.kind), "{child_abs}");
            let attr = client
                .getattr(e.inode)
                .unwrap_or_else(|err| panic!("{child_abs}: listed but has no attributes: {err}"));
            assert_eq!(attr.kind, e.kind, "{child_abs}");
            assert!(
                inodes.insert(e.inode.0),
                "{child_abs}: inode {} seen twice",
                e.inode
            );
            match e.kind {
                FileKind::Directory => {
                    found.insert(child_rel.clone(), Found::Dir);
                    stack.push(child_rel);
                }
                _ => {
                    let file = client.open(&child_abs, &OpenOptions::default()).unwrap();
                    let mut buf = vec![0u8; attr.size as usize];
                    assert_eq!(file.read_at(0, &mut buf).unwrap(), buf.len());
                    found.insert(child_rel, Found::File(buf));
                }
            }
        }
    }
    found
}

fn expected(tree: &Tree) -> BTreeMap<String, Found> {
    tree.iter()
        .map(|(k, n)| {
            let v = match n {
                Node::Dir => Found::Dir,
                Node::File { tag, len } => Found::File(pattern(*tag, 0, *len)),
            };
            (k.clone(), v)
        })
        .collect()
}

#[test]
fn meta_server_killed_mid_operations_keeps_every_acknowledged_one() {
    let seed = common::seed("meta_server_killed_mid_operations_keeps_every_acknowledged_one");
    let cluster = TestCluster::start();
    let client = cluster.client();
    const WORKERS: u64 = 3;
    for w in 0..WORKERS {
        client.mkdir(&format!("/t{w}"), 0o755).unwrap();
    }
    let done_ops = AtomicUsize::new(0);
    // Per worker: the namespace as acknowledged, and the operation that failed.
    let results: Vec<(Tree, Option<Op>, usize)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (client, done_ops) = (&client, &done_ops);
                scope.spawn(move || {
                    let mut rng = Rng::new(seed ^ (w + 1));
                    let root = format!("/t{w}");
                    let mut tree = Tree::new();
                    for counter in 0.. {
                        let op = next_op(&mut rng, &tree, w, counter);
                        match run(client, &root, &op) {
                            Ok(()) => {
                                apply(&mut tree, &op, true);
                                done_ops.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => {
                                let addr = client.meta_addr();
                                assert!(
                                    e.to_string().contains(addr),
                                    "error does not name the manager {addr}: {e}"
                                );
                                return (tree, Some(op), counter as usize);
                            }
                        }
                        assert!(counter < 100_000, "the manager was never killed");
                    }
                    unreachable!()
                })
            })
            .collect();
        wait_for("operations before the crash", Duration::from_secs(60), || {
            (done_ops.load(Ordering::SeqCst) >= 150).then_some(())
        });
        cluster.kill9(0);
        workers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    cluster.restart();

    let checker = cluster.client();
    let mut inodes = BTreeSet::new();
    let mut files = 0;
    let mut dirs = 0;
    for (w, (tree, failed, ops)) in results.iter().enumerate() {
        let root = format!("/t{w}");
        let found = walk(&checker, &root, &mut inodes);
        let before = expected(tree);
        let mut after_tree = tree.clone();
        let failed = failed.as_ref().unwrap();
        apply(&mut after_tree, failed, false);
        let after = expected(&after_tree);
        // A create whose data reached the io servers and whose sync then failed at the
        // manager (sync commits the manager's metadata too) is there with its data.
        let mut written_tree = tree.clone();
        apply(&mut written_tree, failed, true);
        let written = expected(&written_tree);
        eprintln!(
            "worker {w}: {ops} operations acknowledged, {} entries; in flight at the crash: {failed:?} ({})",
            tree.len(),
            if found == before {
                "not done"
            } else if found == after || found == written {
                "done"
            } else {
                "HALF DONE"
            }
        );
        assert!(
            found == before || found == after || found == written,
            "{root} after the crash is neither the acknowledged namespace nor that plus {failed:?}:\nfound {:#?}\nacknowledged {:#?}",
            found.keys().collect::<Vec<_>>(),
            before.keys().collect::<Vec<_>>()
        );
        files += found.values().filter(|f| **f != Found::Dir).count() as u64;
        dirs += found.values().filter(|f| **f == Found::Dir).count() as u64;
    }
    // The manager's counters agree with the namespace (root and /t<w> are directories).
    let stats = checker.statfs().unwrap();
    assert_eq!(stats.meta.files, files, "file count");
    assert_eq!(stats.meta.directories, dirs + 1 + WORKERS, "directory count");
    // Removed files' objects are purged; a create cut by the crash between creating its
    // objects and committing may leave empty ones behind (documented, one per worker).
    common::wait_orphans_purged(&checker);
    let objects: u64 = checker
        .statfs()
        .unwrap()
        .servers
        .iter()
        .map(|(_, s)| s.as_ref().unwrap().objects)
        .sum();
    assert!(
        (files * 4..=files * 4 + 4 * WORKERS).contains(&objects),
        "{objects} objects for {files} files over 4 servers"
    );

    // The client that saw the crash carries on without being rebuilt.
    client.mkdir("/after", 0o755).unwrap();
    let file = client.create("/after/f", &Default::default()).unwrap();
    file.write_at(0, b"still here").unwrap();
    file.sync().unwrap();
    let mut buf = [0u8; 10];
    checker
        .open("/after/f", &OpenOptions::default())
        .unwrap()
        .read_at(0, &mut buf)
        .unwrap();
    assert_eq!(&buf, b"still here");
}

/// Group commit under a crash: 8 clients (8 connections) create files in one directory
/// as fast as they can, so that the manager commits their creates in shared
/// transactions; kill -9 of the manager in the middle, and a restart while the clients
/// live on. Afterwards every acknowledged create is there, nothing else is there but
/// creates that failed while the manager was down, and every entry is a whole file
/// (attributes, objects, size 0).
///
/// Whatever the commit interval: with 0 every acknowledged create was durable before
/// its answer; above 0 the crash loses those not yet durable and the clients, which
/// survive it, replay them after the restart (each makes one more create after the
/// restart, so its replay is done before it is dropped). Before, the clients stopped at
/// their first error and were dropped with the manager down: a check of interval-0
/// semantics, which failed at 5 ms (a dropped client's unsynced creates die with it,
/// as on a local disk); it passes at 0 and 5 (run with each, branch `restart`).
#[test]
fn manager_killed_during_a_create_storm_from_8_clients_keeps_every_acknowledged_create() {
    const CLIENTS: usize = 8;
    let cluster = TestCluster::start();
    cluster.client().mkdir("/storm", 0o755).unwrap();
    let acknowledged = AtomicUsize::new(0);
    // Creates acknowledged after the restart, per client.
    let restarted = AtomicBool::new(false);
    let after: Vec<AtomicUsize> = (0..CLIENTS).map(|_| AtomicUsize::new(0)).collect();
    let stop = AtomicBool::new(false);
    let create = CreateOptions {
        exclusive: true,
        truncate: false,
        ..CreateOptions::default()
    };
    // Per client: the names acknowledged, and those whose create failed (the manager
    // down: refused, or no answer within the client's restart wait).
    let results: Vec<(Vec<String>, Vec<String>)> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (client, acknowledged, create) = (cluster.client(), &acknowledged, &create);
                let (restarted, after, stop) = (&restarted, &after[c], &stop);
                scope.spawn(move || {
                    let dir = client.resolve("/storm").unwrap().inode;
                    let (mut done, mut failed) = (Vec::new(), Vec::new());
                    for k in 0.. {
                        if stop.load(Ordering::SeqCst) {
                            return (done, failed);
                        }
                        let name = format!("c{c}.{k}");
                        match client.create_in(dir, &name, create) {
                            Ok(_) => {
                                done.push(name);
                                acknowledged.fetch_add(1, Ordering::SeqCst);
                                if restarted.load(Ordering::SeqCst) {
                                    after.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            Err(e) => {
                                let addr = client.meta_addr();
                                assert!(
                                    e.to_string().contains(addr),
                                    "error does not name the manager {addr}: {e}"
                                );
                                failed.push(name);
                                std::thread::sleep(Duration::from_millis(20));
                            }
                        }
                        assert!(k < 1_000_000, "the storm never ended");
                    }
                    unreachable!()
                })
            })
            .collect();
        wait_for("creates before the crash", Duration::from_secs(60), || {
            (acknowledged.load(Ordering::SeqCst) >= 600).then_some(())
        });
        cluster.kill9(0);
        cluster.restart();
        restarted.store(true, Ordering::SeqCst);
        wait_for(
            "a create of every client after the restart",
            Duration::from_secs(60),
            || after.iter().all(|n| n.load(Ordering::SeqCst) > 0).then_some(()),
        );
        stop.store(true, Ordering::SeqCst);
        clients.into_iter().map(|h| h.join().unwrap()).collect()
    });

    let checker = cluster.client();
    let entries = checker.readdir("/storm").unwrap();
    let listed: BTreeSet<String> = entries
        .iter()
        .map(|e| e.name.to_str().unwrap().to_owned())
        .collect();
    let mut acked_total = 0;
    for (c, (done, failed)) in results.iter().enumerate() {
        acked_total += done.len();
        for name in done {
            assert!(
                listed.contains(name),
                "client {c}'s acknowledged create of {name} is lost"
            );
        }
        eprintln!(
            "client {c}: {} creates acknowledged; {} failed while the manager was down, {} of them done",
            done.len(),
            failed.len(),
            failed.iter().filter(|n| listed.contains(*n)).count()
        );
    }
    let allowed: BTreeSet<&String> = results
        .iter()
        .flat_map(|(done, failed)| done.iter().chain(failed))
        .collect();
    for name in &listed {
        assert!(
            allowed.contains(name),
            "/storm/{name} was never created by anyone"
        );
    }
    assert!(acked_total >= 600);
    // No half-made entry: every one has attributes and objects, and reads as empty.
    let mut attrs = checker.getattr_many(&entries).unwrap();
    checker.fill_sizes(&mut attrs).unwrap();
    for (entry, attr) in entries.iter().zip(&attrs) {
        assert_eq!(
            (attr.inode, attr.kind, attr.size),
            (entry.inode, FileKind::File, 0),
            "/storm/{}",
            entry.name
        );
        let file = checker
            .open(&format!("/storm/{}", entry.name), &OpenOptions::default())
            .unwrap();
        assert_eq!(
            file.read_at(0, &mut [0u8; 16]).unwrap(),
            0,
            "/storm/{}",
            entry.name
        );
    }
    assert_eq!(
        checker.statfs().unwrap().meta.files as usize,
        listed.len(),
        "file count"
    );
}

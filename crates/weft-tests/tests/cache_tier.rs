//! The cache tier end to end, on real clusters with both placements: cache managers
//! in every io server (`weft up --cache colocated`, disk-directed) and separate cache
//! managers (`weft up --cache N`, two-phase): data through the tier against a local
//! reference, single-replica coherence without sync, write-back under memory pressure,
//! and what survives a cache manager or io server crash.

mod common;

use common::{expect_code, manager_stats, pattern, weft_ok, Rng};
use weft_client::{CacheMode, Client, CreateOptions, Datatype, ErrorCode, File, LayoutRequest, OpenOptions};
use weft_testkit::{ClusterOptions, TestCluster};

/// The placements every data test runs on: colocated, two separate managers (aligned
/// with four io servers under the hashed mapping too), and three (not a factor of
/// four: blocks of one manager spread over every io server).
const PLACEMENTS: [&str; 3] = ["colocated", "2", "3"];

/// Small memory, so that the tests write through eviction and write-back.
const SMALL_MEMORY: &str = "2M";

fn create(client: &Client, path: &str, stripe: u64) -> File {
    client
        .create(
            path,
            &CreateOptions {
                layout: LayoutRequest {
                    stripe_size_bytes: Some(stripe),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .unwrap()
}

fn reopen(client: &Client, path: &str) -> File {
    client
        .open(
            path,
            &OpenOptions {
                write: true,
                ..Default::default()
            },
        )
        .unwrap()
}

/// Writes `data` to `reference` at `offset`, growing it.
fn apply(reference: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if reference.len() < end {
        reference.resize(end, 0);
    }
    reference[offset as usize..end].copy_from_slice(data);
}

fn check_whole(file: &File, reference: &[u8], what: &str) {
    assert_eq!(file.size().unwrap(), reference.len() as u64, "{what}: size");
    let mut back = vec![0xEEu8; reference.len()];
    let n = file.read_at(0, &mut back).unwrap();
    assert_eq!(n, reference.len(), "{what}: read length");
    if let Some(x) = (0..reference.len()).find(|&x| back[x] != reference[x]) {
        panic!(
            "{what}: byte {x} is {} where {} was written",
            back[x], reference[x]
        );
    }
}

/// Random range, list and truncate operations through the tier, read back through
/// the same handle, a second client, and after sync a new handle, all against a local
/// reference; with 2 MiB per manager the file (up to ~6 MiB) does not fit, so blocks
/// are evicted and written back (dirty ones first) in between.
#[test]
fn ranges_and_lists_through_the_tier_match_a_reference() {
    let seed = common::seed("ranges_and_lists_through_the_tier_match_a_reference");
    for placement in PLACEMENTS {
        let cluster = TestCluster::start_with(&ClusterOptions::cached(placement, SMALL_MEMORY));
        let client = cluster.client();
        let other = cluster.client();
        let mut rng = Rng::new(seed ^ placement.len() as u64);
        let file = create(&client, "/data", 16 << 10);
        assert_eq!(
            file.cache_mode(),
            CacheMode::Cached,
            "{placement}: the cluster default"
        );
        let mut reference: Vec<u8> = Vec::new();
        for step in 0..120 {
            let what = format!("{placement} step {step}");
            match rng.below(10) {
                0..=4 => {
                    let offset = rng.below(6 << 20);
                    let len = rng.between(1, 300_000) as usize;
                    let data = rng.bytes(len);
                    file.write_at(offset, &data).unwrap();
                    apply(&mut reference, offset, &data);
                }
                5 | 6 => {
                    // A list of small scattered pieces: partial blocks, never fetched.
                    let mut ranges: Vec<(u64, u64)> = (0..rng.between(1, 40))
                        .map(|_| (rng.below(6 << 20), rng.between(1, 5000)))
                        .collect();
                    ranges.sort();
                    ranges.dedup_by(|b, a| b.0 < a.0 + a.1);
                    let total: u64 = ranges.iter().map(|r| r.1).sum();
                    let data = rng.bytes(total as usize);
                    file.write_list(&ranges, &data).unwrap();
                    let mut at = 0usize;
                    for (o, l) in &ranges {
                        apply(&mut reference, *o, &data[at..at + *l as usize]);
                        at += *l as usize;
                    }
                }
                7 => {
                    // Another client reads what this one wrote, with no sync: one
                    // replica of each block in the tier.
                    if reference.is_empty() {
                        continue;
                    }
                    let offset = rng.below(reference.len() as u64);
                    let len = rng.between(1, 200_000).min(reference.len() as u64 - offset);
                    let theirs = reopen(&other, "/data");
                    let mut back = vec![0u8; len as usize];
                    assert_eq!(theirs.read_at(offset, &mut back).unwrap(), len as usize, "{what}");
                    assert!(
                        back == reference[offset as usize..(offset + len) as usize],
                        "{what}: another client's read at {offset}+{len} differs"
                    );
                }
                8 => {
                    let size = rng.below(7 << 20);
                    file.truncate(size).unwrap();
                    reference.resize(size as usize, 0);
                }
                _ => {
                    let ranges: Vec<(u64, u64)> = (0..rng.between(1, 20))
                        .map(|_| (rng.below(reference.len().max(1) as u64), rng.between(1, 70_000)))
                        .collect();
                    let total: u64 = ranges.iter().map(|r| r.1).sum();
                    let mut back = vec![0u8; total as usize];
                    file.read_list(&ranges, &mut back).unwrap();
                    let mut at = 0usize;
                    for (o, l) in &ranges {
                        for k in 0..*l {
                            let x = (o + k) as usize;
                            let expected = reference.get(x).copied().unwrap_or(0);
                            assert_eq!(back[at], expected, "{what}: list read of byte {x}");
                            at += 1;
                        }
                    }
                }
            }
        }
        check_whole(&file, &reference, &format!("{placement}: before sync"));
        file.sync().unwrap();
        check_whole(
            &reopen(&cluster.client(), "/data"),
            &reference,
            &format!("{placement}: after sync"),
        );
        // The listing sees the size too.
        let listing = weft_ok(&cluster, &["ls", "-l", "/"]);
        assert!(
            listing.contains(&reference.len().to_string()),
            "{placement}: {listing}"
        );
    }
}

/// Four clients write disjoint interleaved views (a CYCLIC distribution of 16-byte
/// elements over 4 KiB stripes) and then each reads everyone's data, with no sync in
/// between: the tier holds one replica of each block, so all see all writes.
#[test]
fn writers_of_disjoint_views_read_each_other_without_sync() {
    let seed = common::seed("writers_of_disjoint_views_read_each_other_without_sync");
    for placement in PLACEMENTS {
        let cluster = TestCluster::start_with(&ClusterOptions::cached(placement, "8M"));
        let writers = 4u64;
        let element = 16u64;
        let per_writer = 512 * 1024u64;
        create(&cluster.client(), "/cyclic", 4096);
        let clients: Vec<Client> = (0..writers).map(|_| cluster.client()).collect();
        std::thread::scope(|scope| {
            for (rank, client) in clients.iter().enumerate() {
                scope.spawn(move || {
                    let file = reopen(client, "/cyclic");
                    file.set_partition(rank as u64 * element, element, writers * element)
                        .unwrap();
                    // Each element's bytes: the pattern at its file offset.
                    let mut data = Vec::with_capacity(per_writer as usize);
                    for k in 0..per_writer / element {
                        let at = (k * writers + rank as u64) * element;
                        data.extend(pattern(seed, at, element as usize));
                    }
                    file.write_view(0, &data).unwrap();
                });
            }
        });
        let total = per_writer * writers;
        let expected = pattern(seed, 0, total as usize);
        for client in &clients {
            let file = reopen(client, "/cyclic");
            let mut back = vec![0u8; total as usize];
            assert_eq!(file.read_at(0, &mut back).unwrap(), total as usize);
            assert!(
                back == expected,
                "{placement}: a reader saw other data than was written"
            );
        }
        // And each through its own view, element by element.
        let file = reopen(&clients[1], "/cyclic");
        let vector = Datatype::vector(
            per_writer / element,
            element,
            (writers * element) as i64,
            &Datatype::bytes(1).unwrap(),
        )
        .unwrap();
        file.set_view(element, vector).unwrap();
        let mut mine = vec![0u8; per_writer as usize];
        file.read_view(0, &mut mine).unwrap();
        for k in 0..per_writer / element {
            let at = (k * writers + 1) * element;
            assert_eq!(
                mine[(k * element) as usize..((k + 1) * element) as usize],
                expected[at as usize..(at + element) as usize],
                "{placement}: element {k}"
            );
        }
    }
}

/// What `sync` acknowledged survives `kill -9` of a cache manager; a handle that wrote
/// through the manager before it restarted gets a clear error naming the restart
/// instead of data read around the loss, and a fresh handle reads the synced data.
#[test]
fn a_cache_manager_crash_loses_nothing_synced_and_is_reported() {
    let seed = common::seed("a_cache_manager_crash_loses_nothing_synced_and_is_reported");
    for placement in ["colocated", "2"] {
        let cluster = TestCluster::start_with(&ClusterOptions::cached(placement, "16M"));
        let client = cluster.client();
        let file = create(&client, "/synced", 64 << 10);
        let synced = pattern(seed, 0, 3 << 20);
        file.write_at(0, &synced).unwrap();
        file.sync().unwrap();
        // Unsynced: may be lost with the manager, but never silently.
        file.write_at(0, &pattern(seed + 1, 0, 1 << 20)).unwrap();
        let config = cluster.config();
        let victim = config.cache_managers()[0].id;
        cluster.kill9(victim);
        cluster.restart();
        let message = expect_code(file.read_at(0, &mut vec![0u8; 3 << 20]), ErrorCode::Io);
        assert!(message.contains("restarted"), "{placement}: {message}");
        expect_code(file.sync(), ErrorCode::Io);
        // A new handle: the synced bytes everywhere, except where the unsynced write
        // reached a manager that did not crash (it may have been written back too).
        let fresh = reopen(&cluster.client(), "/synced");
        let mut back = vec![0u8; 3 << 20];
        fresh.read_at(0, &mut back).unwrap();
        let newer = pattern(seed + 1, 0, 1 << 20);
        for x in 0..back.len() {
            let ok = back[x] == synced[x] || (x < newer.len() && back[x] == newer[x]);
            assert!(
                ok,
                "{placement}: byte {x} is neither the synced nor the later value"
            );
        }
        // Beyond the unsynced write, exactly the synced data.
        assert!(
            back[1 << 20..] == synced[1 << 20..],
            "{placement}: synced data lost"
        );
    }
}

/// `weft down` is a clean stop: every cache manager writes its dirty blocks back before
/// it exits (separate managers before the io servers that take the blocks), so what was
/// written and not synced, the handle still open, is there after `weft up`. Killed by
/// SIGTERM's default action, the managers lost it (files written through a mount and
/// `weft down` at once came back empty).
#[test]
fn weft_down_writes_dirty_blocks_back_before_the_servers_exit() {
    let seed = common::seed("weft_down_writes_dirty_blocks_back_before_the_servers_exit");
    for placement in PLACEMENTS {
        let cluster = TestCluster::start_with(&ClusterOptions::cached(placement, "16M"));
        let client = cluster.client();
        let file = create(&client, "/unsynced", 64 << 10);
        let data = pattern(seed, 0, 3 << 20);
        file.write_at(0, &data).unwrap();
        // Dirty in the managers (younger than their 5 s dirty age, never closed).
        let out = cluster.weft(&["down"]);
        assert!(
            out.status.success(),
            "{placement}: weft down: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.restart();
        let fresh = reopen(&cluster.client(), "/unsynced");
        check_whole(&fresh, &data, &format!("{placement}: after weft down and up"));
        drop(file);
    }
}

/// An io server killed while blocks wait for write-back: the client's sync fails with
/// an error naming the io server, the blocks stay dirty, and once the server is back a
/// sync writes them: nothing acknowledged by either sync is lost.
#[test]
fn an_io_server_down_during_write_back_keeps_blocks_dirty_until_it_returns() {
    let seed = common::seed("an_io_server_down_during_write_back_keeps_blocks_dirty_until_it_returns");
    let cluster = TestCluster::start_with(&ClusterOptions::cached("2", "16M"));
    let client = cluster.client();
    let file = create(&client, "/wb", 64 << 10);
    let first = pattern(seed, 0, 2 << 20);
    file.write_at(0, &first).unwrap();
    file.sync().unwrap();
    let second = pattern(seed + 7, 0, 2 << 20);
    file.write_at(0, &second).unwrap();
    let io_victim = cluster.config().io_servers().next().unwrap().id;
    cluster.kill9(io_victim);
    let message = file.sync().unwrap_err().to_string();
    assert!(message.contains(&format!("io server {io_victim}")), "{message}");
    // The cached blocks still serve the newest data.
    let mut back = vec![0u8; 2 << 20];
    file.read_at(0, &mut back).unwrap();
    assert!(
        back == second,
        "the tier lost dirty blocks when a write-back failed"
    );
    // A close asks for a write-back soon; it fails in the background, and the next
    // close of the file reports it.
    let managers: Vec<u32> = cluster.config().cache_managers().iter().map(|m| m.id).collect();
    let errors = || -> u64 {
        managers
            .iter()
            .map(|&m| manager_stats(&cluster, m).write_back_errors)
            .sum()
    };
    let before = errors();
    // A background write-back (dirty age) may already have failed on a slow machine;
    // then this close reports it, naming the io server, instead of succeeding.
    if let Err(e) = reopen(&client, "/wb").close() {
        let e = e.to_string();
        assert!(e.contains(&format!("io server {io_victim}")), "{e}");
    }
    common::wait_for(
        "a background write-back to fail",
        std::time::Duration::from_secs(20),
        || (errors() > before).then_some(()),
    );
    let closed = reopen(&client, "/wb").close().unwrap_err().to_string();
    assert!(closed.contains(&format!("io server {io_victim}")), "{closed}");
    cluster.restart();
    common::wait_for("the sync to succeed", std::time::Duration::from_secs(30), || {
        file.sync().ok()
    });
    let fresh = reopen(&cluster.client(), "/wb");
    fresh.read_at(0, &mut back).unwrap();
    assert!(
        back == second,
        "data synced after the io server returned is missing"
    );
    let status = weft_ok(&cluster, &["status"]);
    assert!(status.contains("cache (arc)"), "{status}");
}

/// Creating a cached file on a cluster without a tier is refused clearly, and a
/// directory default chooses the mode of new files.
#[test]
fn caching_modes_follow_directory_defaults_and_need_a_tier() {
    let plain = TestCluster::start();
    let out = plain.weft(&["mkdir", "/d"]);
    assert!(out.status.success());
    let out = plain.weft(&["layout", "--set", "--cache", "cached", "/d"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cache"), "{out:?}");

    let cluster = TestCluster::start_with(&ClusterOptions {
        extra: ["--cache", "colocated", "--cache-default", "none"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..Default::default()
    });
    let client = cluster.client();
    weft_ok(&cluster, &["mkdir", "/hot"]);
    weft_ok(&cluster, &["layout", "--set", "--cache", "cached", "/hot"]);
    assert_eq!(create(&client, "/cold", 65536).cache_mode(), CacheMode::None);
    assert_eq!(create(&client, "/hot/f", 65536).cache_mode(), CacheMode::Cached);
    assert!(weft_ok(&cluster, &["layout", "/hot/f"]).contains("cache=cached"));
    // put/get through the tier.
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("in");
    let data = pattern(3, 0, 5 << 20);
    std::fs::write(&src, &data).unwrap();
    weft_ok(&cluster, &["put", src.to_str().unwrap(), "/hot/put"]);
    let dst = local.path().join("out");
    weft_ok(&cluster, &["get", "/hot/put", dst.to_str().unwrap()]);
    assert!(std::fs::read(&dst).unwrap() == data);
}

/// Removing a cached file with dirty blocks drops them from the managers (the manager
/// purges orphans there too), with no write-back errors and no memory left behind.
#[test]
fn removed_files_leave_the_cache() {
    let cluster = TestCluster::start_with(&ClusterOptions::cached("2", "16M"));
    let client = cluster.client();
    let file = create(&client, "/gone", 64 << 10);
    file.write_at(0, &pattern(9, 0, 4 << 20)).unwrap();
    let managers: Vec<u32> = cluster.config().cache_managers().iter().map(|m| m.id).collect();
    let dirty: u64 = managers
        .iter()
        .map(|&m| manager_stats(&cluster, m).dirty_bytes)
        .sum();
    assert_eq!(
        dirty,
        4 << 20,
        "the write is dirty in the managers before the remove"
    );
    drop(file);
    client.unlink("/gone").unwrap();
    common::wait_for(
        "the managers to drop the removed file",
        std::time::Duration::from_secs(20),
        || {
            let stats: Vec<_> = managers.iter().map(|&m| manager_stats(&cluster, m)).collect();
            stats
                .iter()
                .all(|s| s.blocks == 0 && s.dirty_bytes == 0)
                .then_some(stats)
        },
    );
    for &m in &managers {
        assert_eq!(manager_stats(&cluster, m).write_back_errors, 0);
    }
}

/// Malformed requests to a cache manager are refused with clear errors and change
/// nothing already cached: a payload that does not match its ranges, a file whose
/// layout differs from what earlier requests said, an inode that is not the cached
/// file's, an interval past the frame limit, another incarnation.
#[test]
fn bad_requests_to_a_cache_manager_are_refused_and_change_nothing() {
    use weft_proto::msg::CacheFile;
    use weft_proto::{ErrorCode as Code, Range, Request, Response, Striping};
    let cluster = TestCluster::start_with(&ClusterOptions::cached("2", "16M"));
    let client = cluster.client();
    let file = create(&client, "/victim", 4096);
    let data = pattern(4, 0, 64 << 10);
    file.write_at(0, &data).unwrap();
    let manager = cluster.config().cache_managers()[0].id;
    let timeouts = weft_rpc::Timeouts {
        connect: std::time::Duration::from_secs(5),
        request: std::time::Duration::from_secs(10),
    };
    // As a server would: this test is about bad requests, not missing capabilities.
    let c = cluster.server_connection(&cluster.addr(manager), timeouts);
    let layout = file.layout().clone();
    let cached = |layout: weft_layout::Layout, incarnation: u64| CacheFile {
        inode: file.inode(),
        layout,
        incarnation,
    };
    let blocks = Striping {
        stripe_size_bytes: 4096,
        stripe_count: 2,
        server_index: 0,
    };
    let write = |file: CacheFile, inode, ranges: Vec<Range>, payload: Vec<u8>| {
        let request = Request::ViaCache {
            file,
            request: Box::new(Request::Write {
                inode,
                striping: blocks,
                ranges,
            }),
        };
        match c.call(&request, &payload) {
            Err(weft_rpc::RpcError::Remote { error, .. }) => error,
            other => panic!("expected a refusal, got {other:?}"),
        }
    };
    let one_block = vec![Range { offset: 0, len: 4096 }];
    assert_eq!(
        write(
            cached(layout.clone(), 0),
            file.inode(),
            one_block.clone(),
            vec![1; 10]
        )
        .code,
        Code::InvalidArgument
    );
    let mut other_layout = layout.clone();
    other_layout.stripe_size_bytes *= 2;
    let e = write(
        cached(other_layout, 0),
        file.inode(),
        one_block.clone(),
        vec![1; 4096],
    );
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    let e = write(
        cached(layout.clone(), 0),
        weft_layout::InodeId(file.inode().0 + 1),
        one_block.clone(),
        vec![1; 4096],
    );
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    let e = write(
        cached(layout.clone(), 0),
        file.inode(),
        vec![Range {
            offset: 0,
            len: 1 << 40,
        }],
        vec![],
    );
    assert_eq!(e.code, Code::TooLarge, "{e}");
    let e = write(
        cached(layout.clone(), 12345),
        file.inode(),
        one_block,
        vec![1; 4096],
    );
    assert_eq!(e.code, Code::Io, "{e}");
    assert!(e.message.contains("restarted"), "{e}");
    // A flush of the file through this raw connection is fine.
    match c
        .call(
            &Request::CacheFlush {
                file: cached(layout, 0),
            },
            &[],
        )
        .unwrap()
        .0
    {
        Response::Done => {}
        other => panic!("{other:?}"),
    }
    // Nothing of the above reached the file.
    let mut back = vec![0u8; data.len()];
    file.read_at(0, &mut back).unwrap();
    assert!(back == data, "a refused request changed cached data");
}

/// Appends to a cached file from several clients at once (the append lock lives on an
/// io server, the bytes go through the cache managers): every record lands exactly
/// once, whole.
#[test]
fn concurrent_appends_to_a_cached_file_keep_every_record() {
    let cluster = TestCluster::start_with(&ClusterOptions::cached("2", "16M"));
    create(&cluster.client(), "/log", 4096);
    let writers = 3usize;
    let records = 60usize;
    let clients: Vec<Client> = (0..writers).map(|_| cluster.client()).collect();
    std::thread::scope(|scope| {
        for (w, client) in clients.iter().enumerate() {
            scope.spawn(move || {
                let file = reopen(client, "/log");
                for r in 0..records {
                    let line = format!("writer {w} record {r:04} {}\n", "x".repeat(97 * (r % 5)));
                    file.append(line.as_bytes()).unwrap();
                }
            });
        }
    });
    let file = reopen(&cluster.client(), "/log");
    let size = file.size().unwrap() as usize;
    let mut text = vec![0u8; size];
    file.read_at(0, &mut text).unwrap();
    let text = String::from_utf8(text).expect("no torn or interleaved bytes");
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), writers * records, "lost or duplicated records");
    lines.sort();
    lines.dedup();
    assert_eq!(lines.len(), writers * records, "a record appears twice");
    for w in 0..writers {
        for r in 0..records {
            let prefix = format!("writer {w} record {r:04} ");
            assert!(lines.iter().any(|l| l.starts_with(&prefix)), "missing {prefix}");
        }
    }
}

/// Readers meeting on cold blocks: four clients read a file no manager holds, at once
/// and in different orders (forward in uneven pieces, backward, scattered lists, whole).
/// Every read returns the written bytes, and each block is fetched from the io servers
/// exactly once (a read fetches the misses of many blocks together, and a block one
/// reader is fetching is waited for by the others, never fetched twice).
#[test]
fn concurrent_cold_reads_fetch_each_block_once() {
    let seed = common::seed("concurrent_cold_reads_fetch_each_block_once");
    for placement in ["colocated", "2"] {
        let cluster = TestCluster::start_with(&ClusterOptions::cached(placement, "16M"));
        let len = 4usize << 20;
        let data = pattern(seed, 0, len);
        {
            let file = create(&cluster.client(), "/cold", 16 << 10);
            file.write_at(0, &data).unwrap();
            file.sync().unwrap();
        }
        let managers: Vec<u32> = cluster.config().cache_managers().iter().map(|m| m.id).collect();
        for &m in &managers {
            cluster.kill9(m);
        }
        cluster.restart();
        std::thread::scope(|s| {
            for reader in 0..4u64 {
                let (cluster, data) = (&cluster, &data);
                s.spawn(move || {
                    let file = reopen(&cluster.client(), "/cold");
                    let mut rng = Rng::new(seed ^ reader);
                    let what = format!("{placement} reader {reader}");
                    let check = |offset: usize, back: &[u8]| {
                        assert!(
                            back == &data[offset..offset + back.len()],
                            "{what}: bytes at {offset}+{} differ",
                            back.len()
                        );
                    };
                    match reader {
                        0 => {
                            let mut at = 0usize;
                            while at < len {
                                let n = (rng.between(1, 300_000) as usize).min(len - at);
                                let mut back = vec![0u8; n];
                                assert_eq!(file.read_at(at as u64, &mut back).unwrap(), n, "{what}");
                                check(at, &back);
                                at += n;
                            }
                        }
                        1 => {
                            for chunk in (0..len / (256 << 10)).rev() {
                                let at = chunk * (256 << 10);
                                let mut back = vec![0u8; 256 << 10];
                                file.read_at(at as u64, &mut back).unwrap();
                                check(at, &back);
                            }
                        }
                        2 => {
                            let mut ranges: Vec<(u64, u64)> = (0..200)
                                .map(|_| (rng.below(len as u64 - 5000), rng.between(1, 5000)))
                                .collect();
                            ranges.sort();
                            ranges.dedup_by(|b, a| b.0 < a.0 + a.1);
                            let total: u64 = ranges.iter().map(|r| r.1).sum();
                            let mut back = vec![0u8; total as usize];
                            file.read_list(&ranges, &mut back).unwrap();
                            let mut at = 0usize;
                            for (o, l) in ranges {
                                check(o as usize, &back[at..at + l as usize]);
                                at += l as usize;
                            }
                        }
                        _ => {
                            let mut back = vec![0u8; len];
                            file.read_at(0, &mut back).unwrap();
                            check(0, &back);
                        }
                    }
                });
            }
        });
        let fetched: u64 = managers
            .iter()
            .map(|&m| manager_stats(&cluster, m).fetched_bytes)
            .sum();
        assert_eq!(
            fetched, len as u64,
            "{placement}: the managers fetched {fetched} bytes of a {len}-byte file read cold"
        );
    }
}

/// A write storm sixteen times larger than the managers' memory (four writers, each its
/// own file, with the eager write-back and the block pool at work): no manager ever
/// holds more than its bound (sampled all along, pooled block memory included), and
/// every byte reads back after sync.
#[test]
fn a_write_storm_larger_than_the_cache_stays_within_its_memory() {
    let seed = common::seed("a_write_storm_larger_than_the_cache_stays_within_its_memory");
    for placement in ["colocated", "2"] {
        let cluster = TestCluster::start_with(&ClusterOptions::cached(placement, SMALL_MEMORY));
        let managers: Vec<u32> = cluster.config().cache_managers().iter().map(|m| m.id).collect();
        let per_writer = 8usize << 20;
        let chunk = 192usize << 10;
        let done = std::sync::atomic::AtomicBool::new(false);
        let mut most = 0;
        std::thread::scope(|s| {
            let writers: Vec<_> = (0..4u64)
                .map(|w| {
                    let cluster = &cluster;
                    s.spawn(move || {
                        let file = create(&cluster.client(), &format!("/storm{w}"), 64 << 10);
                        let data = pattern(seed ^ w, 0, per_writer);
                        for at in (0..per_writer).step_by(chunk) {
                            let end = (at + chunk).min(per_writer);
                            file.write_at(at as u64, &data[at..end]).unwrap();
                        }
                        file.sync().unwrap();
                    })
                })
                .collect();
            let poller = s.spawn(|| {
                let mut seen = 0u64;
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    for &m in &managers {
                        let stats = manager_stats(&cluster, m);
                        assert!(
                            stats.cached_bytes <= stats.capacity_bytes,
                            "{placement}: manager {m} holds {} bytes, over its bound {}",
                            stats.cached_bytes,
                            stats.capacity_bytes
                        );
                        seen = seen.max(stats.cached_bytes);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                seen
            });
            for w in writers {
                w.join().unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Release);
            most = poller.join().unwrap();
        });
        assert!(most > 0, "{placement}: the poller saw the managers at work");
        for w in 0..4u64 {
            let file = reopen(&cluster.client(), &format!("/storm{w}"));
            check_whole(
                &file,
                &pattern(seed ^ w, 0, per_writer),
                &format!("{placement} storm{w}"),
            );
        }
        for &m in &managers {
            assert_eq!(manager_stats(&cluster, m).write_back_errors, 0);
        }
    }
}

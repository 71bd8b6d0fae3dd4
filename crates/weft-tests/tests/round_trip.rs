//! Random data round trips over many sizes, offsets and layouts, checked byte for byte
//! against a local reference file that received the same writes and truncates.

mod common;

use common::{io_server_ids, object_path, Rng};
use std::os::unix::fs::FileExt;
use weft_client::{Client, CreateOptions, File, LayoutRequest, OpenOptions, ServerId};
use weft_testkit::TestCluster;

/// (stripe size, stripe count, first server): power-of-two and odd stripe sizes from
/// the smallest allowed to 1 MiB, every count from 1 to all 4 servers, every start.
const LAYOUTS: [(u64, u32, u32); 8] = [
    (512, 1, 0),
    (512, 4, 3),
    (1000, 3, 1),
    (4096, 2, 2),
    (3000, 4, 0),
    (65536, 4, 1),
    (1 << 20, 3, 3),
    (1 << 20, 1, 2),
];

fn request(stripe: u64, count: u32, first: u32) -> LayoutRequest {
    LayoutRequest {
        cache: None,
        stripe_size_bytes: Some(stripe),
        stripe_count: Some(count),
        first_server: Some(first),
        redundancy: None,
    }
}

fn create(client: &Client, path: &str, layout: LayoutRequest) -> File {
    client
        .create(
            path,
            &CreateOptions {
                layout,
                ..CreateOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("create {path}: {e}"))
}

/// The layout PVFS rules give: `count` servers of the cluster starting at `first`.
fn expected_servers(all: &[ServerId], count: u32, first: u32) -> Vec<ServerId> {
    (0..count as usize)
        .map(|k| all[(first as usize + k) % all.len()])
        .collect()
}

/// Reads `[offset, offset + len)` through Weft, returning what came back.
fn weft_read(file: &File, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xEEu8; len];
    let n = file
        .read_at(offset, &mut buf)
        .unwrap_or_else(|e| panic!("read_at({offset}, {len}): {e}"));
    buf.truncate(n);
    buf
}

/// Reads the same range from the local reference file (short at its end, as pread).
fn local_read(file: &std::fs::File, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = file.read_at(&mut buf[done..], offset + done as u64).unwrap();
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    buf
}

#[track_caller]
fn assert_same(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: length differs");
    if let Some(k) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {k}: got {:#04x}, want {:#04x}",
            got[k], want[k]
        );
    }
}

#[test]
fn every_size_and_layout_round_trips() {
    let mut rng = Rng::new(common::seed("every_size_and_layout_round_trips"));
    let cluster = TestCluster::start();
    let client = cluster.client();
    let all = io_server_ids(&client);
    assert_eq!(all.len(), 4);
    for (k, &(stripe, count, first)) in LAYOUTS.iter().enumerate() {
        let row = stripe * count as u64;
        let mut sizes = vec![
            0,
            1,
            stripe - 1,
            stripe,
            stripe + 1,
            row - 1,
            row + 1,
            2 * row + 37,
        ];
        if k % 3 == 0 {
            // Several MiB: many segments and several requests in flight per server.
            sizes.push((5 << 20) + 12_345);
        }
        for (j, &size) in sizes.iter().enumerate() {
            let path = format!("/f-{k}-{j}");
            let file = create(&client, &path, request(stripe, count, first));
            assert_eq!(file.layout().stripe_size_bytes, stripe, "{path}");
            assert_eq!(
                file.layout().servers,
                expected_servers(&all, count, first),
                "{path}"
            );
            // Half the files start at an unaligned offset, leaving a hole in front.
            let offset = if j % 2 == 0 { 0 } else { rng.below(3 * stripe) };
            let data = rng.bytes(size as usize);
            assert_eq!(file.write_at(offset, &data).unwrap(), data.len());
            file.sync().unwrap();
            let end = if size == 0 { 0 } else { offset + size };
            assert_eq!(file.size().unwrap(), end, "{path} size");
            let mut want = vec![0u8; end as usize];
            if size > 0 {
                want[offset as usize..].copy_from_slice(&data);
            }
            // From a fresh handle on a fresh connection: nothing cached by the writer.
            let reader = cluster.client();
            assert_eq!(reader.stat(&path).unwrap().size, end, "{path} stat size");
            let again = reader.open(&path, &OpenOptions::default()).unwrap();
            // Asking for more than there is returns exactly the file.
            let got = weft_read(&again, 0, end as usize + 100);
            assert_same(&path, &got, &want);
            assert!(weft_read(&again, end, 10).is_empty(), "{path}: read at EOF");
        }
    }
}

#[test]
fn random_writes_and_truncates_match_a_local_reference_file() {
    let seed = common::seed("random_writes_and_truncates_match_a_local_reference_file");
    let mut rng = Rng::new(seed);
    let cluster = TestCluster::start();
    let client = cluster.client();
    let scratch = tempfile::tempdir().unwrap();
    for (k, &(stripe, count, first)) in LAYOUTS.iter().enumerate() {
        let row = stripe * count as u64;
        // Files of a few rows, at least 64 KiB and at most ~6 MiB.
        let span = (4 * row + 777).clamp(64 << 10, 6 << 20);
        let path = format!("/rand-{k}");
        let file = create(&client, &path, request(stripe, count, first));
        let local = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(scratch.path().join(format!("ref-{k}")))
            .unwrap();
        for step in 0..40 {
            let what = format!("{path} (stripe {stripe} x {count} from {first}) step {step}");
            match rng.below(10) {
                0 => {
                    let size = rng.below(span + 1);
                    file.truncate(size).unwrap();
                    local.set_len(size).unwrap();
                }
                1..=2 => {
                    // A partial read, often across the end of the file.
                    let size = local.metadata().unwrap().len();
                    let offset = rng.below(size + stripe + 1);
                    let len = rng.between(1, 3 * stripe) as usize;
                    let got = weft_read(&file, offset, len);
                    assert_same(
                        &format!("{what}: read {len} at {offset} of {size}"),
                        &got,
                        &local_read(&local, offset, len),
                    );
                }
                _ => {
                    let len = match rng.below(4) {
                        0 => rng.between(1, 16),
                        1 => rng.between(1, stripe + stripe / 2),
                        2 => rng.between(row - 1, row + 1),
                        _ => rng.between(1, 3 * row).min(span),
                    } as usize;
                    let offset = rng.below(span - len as u64 + 1);
                    let data = rng.bytes(len);
                    assert_eq!(file.write_at(offset, &data).unwrap(), len, "{what}");
                    local.write_all_at(&data, offset).unwrap();
                }
            }
        }
        file.sync().unwrap();
        let size = local.metadata().unwrap().len();
        assert_eq!(file.size().unwrap(), size, "{path}: size");
        let want = local_read(&local, 0, size as usize);
        assert_same(&path, &weft_read(&file, 0, size as usize + 1), &want);
        // Another client sees the same bytes and the same size.
        let other = cluster.client();
        assert_eq!(other.stat(&path).unwrap().size, size, "{path}: stat size");
        let reopened = other.open(&path, &OpenOptions::default()).unwrap();
        assert_same(
            &format!("{path} from another client"),
            &weft_read(&reopened, 0, size as usize),
            &want,
        );
    }
}

/// The client and the io servers share the striping code, so a bug there would still
/// round trip. This test reads the servers' object files directly and checks them
/// against the PVFS placement rule computed here: byte `x` is on server
/// `(x / stripe) mod count` at local offset `(x / stripe / count) * stripe + x mod stripe`.
#[test]
fn bytes_land_on_the_servers_and_offsets_the_layout_names() {
    let mut rng = Rng::new(common::seed(
        "bytes_land_on_the_servers_and_offsets_the_layout_names",
    ));
    let cluster = TestCluster::start();
    let client = cluster.client();
    let all = io_server_ids(&client);
    let (stripe, count, first) = (4096u64, 3u32, 2u32);
    let file = create(&client, "/placed", request(stripe, count, first));
    let size = 200_000u64;
    let data = rng.bytes(size as usize);
    // Written in uneven pieces so that no request is stripe aligned.
    let mut at = 0;
    while at < size {
        let n = rng.between(1, 20_000).min(size - at);
        file.write_at(at, &data[at as usize..(at + n) as usize]).unwrap();
        at += n;
    }
    file.sync().unwrap();
    let servers = expected_servers(&all, count, first);
    for (index, server) in servers.iter().enumerate() {
        let object = std::fs::read(object_path(&cluster, *server, file.inode()))
            .unwrap_or_else(|e| panic!("object of server {server}: {e}"));
        let want: Vec<u8> = (0..size)
            .filter(|x| (x / stripe) % count as u64 == index as u64)
            .map(|x| data[x as usize])
            .collect();
        // Dense: the object holds exactly this server's bytes, in local order.
        for (local, byte) in want.iter().enumerate() {
            let local = local as u64;
            let x = ((local / stripe) * count as u64 + index as u64) * stripe + local % stripe;
            assert_eq!(data[x as usize], *byte, "placement rule self-check");
        }
        assert_same(&format!("object on server {server}"), &object, &want);
    }
    for server in all.iter().filter(|s| !servers.contains(s)) {
        assert!(
            !object_path(&cluster, *server, file.inode()).exists(),
            "server {server} is not in the layout but holds an object"
        );
    }
}

/// Small files spread over the io servers: a file smaller than one stripe keeps all its
/// data on its first server, and with the first server always the cluster's first, every
/// such file (and every file of a one-stripe layout) filled that one server's disk while
/// the others held nothing. A layout that names no first server now gets the next in
/// turn, so files of the default layout and of one-stripe layouts start on every server
/// alike; their bytes are on that server's object, and a first server asked for is kept.
#[test]
fn small_files_spread_over_the_io_servers() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let servers = io_server_ids(&client);
    client.mkdir("/small", 0o755).unwrap();
    for (kind, count) in [("wide", None), ("one", Some(1))] {
        let mut firsts = std::collections::BTreeMap::<ServerId, usize>::new();
        for i in 0..2 * servers.len() {
            let options = CreateOptions {
                layout: LayoutRequest {
                    stripe_count: count,
                    ..LayoutRequest::default()
                },
                ..CreateOptions::default()
            };
            let file = client.create(&format!("/small/{kind}{i}"), &options).unwrap();
            file.write_at(0, b"a small file").unwrap();
            let first = file.layout().servers[0];
            let inode = file.inode();
            file.close().unwrap();
            let object = std::fs::read(object_path(&cluster, first, inode)).unwrap();
            assert_eq!(
                object, b"a small file",
                "{kind}{i}: bytes not on its first server {first}"
            );
            *firsts.entry(first).or_default() += 1;
        }
        for server in &servers {
            assert_eq!(
                firsts.get(server),
                Some(&2),
                "{kind} files' first servers: {firsts:?} (each of {servers:?} twice wanted)"
            );
        }
    }
    let pinned = CreateOptions {
        layout: LayoutRequest {
            stripe_count: Some(1),
            first_server: Some(2),
            ..LayoutRequest::default()
        },
        ..CreateOptions::default()
    };
    for i in 0..3 {
        let file = client.create(&format!("/small/pinned{i}"), &pinned).unwrap();
        assert_eq!(file.layout().servers, vec![servers[2]]);
    }
}

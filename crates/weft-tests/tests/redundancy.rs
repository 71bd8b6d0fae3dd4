//! Replicated layouts (issue 33, `replicas=N`): an io server killed with SIGKILL in the
//! middle of `weft put` and of `weft cat` of a replicas=2 file: no error reaches the
//! program, and every byte reads back right with the server still down and after it
//! returns (its piece, stale, is then left alone).

mod common;

use common::{pattern, weft_ok};
use std::process::Stdio;
use weft_client::{Datatype, OpenOptions};
use weft_testkit::TestCluster;

/// Bytes of the test files: several copy blocks, so that half of one is mid-transfer.
const FILE_BYTES: usize = 96 << 20;

fn write_local(path: &std::path::Path, tag: u64) -> Vec<u8> {
    let data = pattern(tag, 0, FILE_BYTES);
    std::fs::write(path, &data).unwrap();
    data
}

/// Runs `weft cat PATH` into a pipe, killing io server `victim` with SIGKILL once half
/// of the file has been read out: the rest is read after the kill for certain (cat
/// waits for the pipe). It must succeed; returns every byte it wrote.
fn cat_killing(cluster: &TestCluster, path: &str, len: usize, victim: u32) -> Vec<u8> {
    use std::io::Read;
    let mut child = cluster
        .command("weft")
        .args(["cat", path])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut output = child.stdout.take().unwrap();
    let mut got = vec![0u8; len / 2];
    output.read_exact(&mut got).unwrap();
    cluster.kill9(victim);
    output.read_to_end(&mut got).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "weft cat with io server {victim} killed halfway failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    got
}

fn same_bytes(path: &std::path::Path, want: &[u8], what: &str) {
    let got = std::fs::read(path).unwrap();
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(at) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: first wrong byte at offset {at}");
    }
}

#[test]
fn put_and_get_go_on_through_a_killed_io_server() {
    let cluster = TestCluster::start();
    let dir = tempfile::Builder::new().prefix("redund-").tempdir().unwrap();
    weft_ok(&cluster, &["mkdir", "/r"]);
    let shown = weft_ok(&cluster, &["layout", "--set", "--redundancy", "replicas=2", "/r"]);
    assert!(shown.contains("redundancy=replicas=2"), "{shown}");

    // Killed in the middle of a put: server 1 holds slot 0's primary copy.
    let source = dir.path().join("source");
    let data = write_local(&source, 33);
    common::put_killing(&cluster, "/r/put", &data, 1);
    let layout = weft_ok(&cluster, &["layout", "/r/put"]);
    assert!(
        layout.contains("1(stale)"),
        "server 1 is not recorded stale:\n{layout}"
    );
    let back = dir.path().join("back");
    weft_ok(&cluster, &["get", "/r/put", back.to_str().unwrap()]);
    same_bytes(&back, &data, "read back with server 1 down");

    // The server returns: its piece is stale, never read; the bytes are still right.
    cluster.restart();
    std::fs::remove_file(&back).unwrap();
    weft_ok(&cluster, &["get", "/r/put", back.to_str().unwrap()]);
    same_bytes(&back, &data, "read back after server 1 returned");

    // Killed in the middle of a get: a fresh file, every server up; server 2 holds slot
    // 1's primary copy, which the get reads from until it dies.
    let data = write_local(&source, 34);
    weft_ok(&cluster, &["put", source.to_str().unwrap(), "/r/get"]);
    let layout = weft_ok(&cluster, &["layout", "/r/get"]);
    assert!(!layout.contains("stale"), "{layout}");
    std::fs::remove_file(&back).unwrap();
    let got = cat_killing(&cluster, "/r/get", data.len(), 2);
    assert_eq!(got.len(), data.len(), "cat through server 2's kill: length");
    assert!(got == data, "cat through server 2's kill: bytes differ");
    // A read does not make a piece stale.
    let layout = weft_ok(&cluster, &["layout", "/r/get"]);
    assert!(!layout.contains("stale"), "{layout}");
    cluster.restart();
    weft_ok(&cluster, &["get", "/r/get", back.to_str().unwrap()]);
    same_bytes(&back, &data, "read back after server 2 returned");
}

/// The native API on a replicas=2 file with one server of each slot down at a time:
/// contiguous, list and view I/O write and read back through the copies; writes mark
/// the dead server's piece stale at the manager, and a later open sees it.
#[test]
fn list_and_view_io_work_on_a_degraded_replicated_file() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let options = weft_testkit::replicated(4096, 2);
    let file = client.create("/v", &options).unwrap();
    let layout = file.layout().clone();
    assert_eq!(layout.replica_count(), 2);
    assert_eq!(layout.width(), 2, "4 io servers, 2 copies: 2 slots");
    let mut all = layout.all_servers();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 4, "every piece on its own server: {layout:?}");

    let data = pattern(7, 0, 1 << 20);
    file.write_at(0, &data).unwrap();
    // Slot 0's primary dies; writes of every kind go on.
    let victim = layout.servers[0];
    cluster.kill9(victim.0);
    let ranges = [(4096u64, 100u64), (20_000, 9000), (1 << 19, 4096)];
    let list_bytes: Vec<u8> = ranges
        .iter()
        .flat_map(|&(o, l)| pattern(8, o, l as usize))
        .collect();
    file.write_list(&ranges, &list_bytes).unwrap();
    let mut expect = data.clone();
    for &(o, l) in &ranges {
        expect[o as usize..(o + l) as usize].copy_from_slice(&pattern(8, o, l as usize));
    }
    // A vector view: 1000 bytes of every 3000, from file offset 600 000.
    let filetype = Datatype::vector(30, 1000, 3000, &Datatype::bytes(1).unwrap()).unwrap();
    file.set_view(600_000, filetype).unwrap();
    let view_bytes = pattern(9, 0, 30_000);
    file.write_view(0, &view_bytes).unwrap();
    for i in 0..30 {
        let at = 600_000 + i * 3000;
        expect[at..at + 1000].copy_from_slice(&view_bytes[i * 1000..(i + 1) * 1000]);
    }
    let mut back = vec![0u8; 30_000];
    assert_eq!(file.read_view(0, &mut back).unwrap(), 30_000);
    assert!(back == view_bytes, "view read back wrong");
    file.clear_view();
    file.sync().unwrap();
    let mut whole = vec![0u8; expect.len()];
    assert_eq!(file.read_at(0, &mut whole).unwrap(), expect.len());
    assert!(
        whole == expect,
        "contiguous read back wrong with server {victim} down"
    );
    let mut listed = vec![0u8; list_bytes.len()];
    file.read_list(&ranges, &mut listed).unwrap();
    assert!(listed == list_bytes, "list read back wrong");

    let reopened = client.open("/v", &OpenOptions::default()).unwrap();
    assert_eq!(reopened.layout().replication.stale, vec![victim]);
    cluster.restart();
    let writing = OpenOptions {
        write: true,
        ..Default::default()
    };
    let reopened = client.open("/v", &writing).unwrap();
    let mut whole = vec![0u8; expect.len()];
    assert_eq!(reopened.read_at(0, &mut whole).unwrap(), expect.len());
    assert!(
        whole == expect,
        "read back wrong after server {victim} returned (stale piece read?)"
    );

    // The other slot's primary dies too: each slot has one fresh copy left (its
    // second), and writes still go on (the default minimum for 2 copies is 1).
    let second = layout.servers[1];
    cluster.kill9(second.0);
    let more = pattern(10, 0, 64 << 10);
    reopened.write_at(0, &more).unwrap();
    expect[..more.len()].copy_from_slice(&more);
    let mut whole = vec![0u8; expect.len()];
    assert_eq!(reopened.read_at(0, &mut whole).unwrap(), expect.len());
    assert!(
        whole == expect,
        "read back wrong with servers {victim} and {second} down"
    );
    let mut stale = client.resolve("/v").unwrap().layout.unwrap().replication.stale;
    stale.sort();
    assert_eq!(stale, vec![victim, second]);
}

/// A handle opened before one of the file's servers went down and was marked stale by
/// another client's write never reads that server's old bytes once it is back: the
/// new connection to it makes the handle read the stale marks afresh. Before, the
/// handle kept its open-time stale set and read the returned server's piece (the bytes
/// from before the other client's write).
#[test]
fn an_open_handle_never_reads_a_piece_marked_stale_while_it_was_open() {
    let cluster = TestCluster::start();
    let writer = cluster.client();
    let options = weft_testkit::replicated(65_536, 2);
    let old = pattern(11, 0, 1 << 20);
    let file = writer.create("/h", &options).unwrap();
    file.write_at(0, &old).unwrap();
    file.sync().unwrap();
    let victim = file.layout().servers[0];
    file.close().unwrap();

    // The reader's handle, open all along, has read the file once.
    let reader = cluster.client();
    let handle = reader.open("/h", &OpenOptions::default()).unwrap();
    let mut got = vec![0u8; old.len()];
    assert_eq!(handle.read_at(0, &mut got).unwrap(), old.len());
    assert!(got == old);

    // Slot 0's primary dies; another client rewrites the file (marking it stale); it
    // comes back with its old bytes.
    cluster.kill9(victim.0);
    let new = pattern(12, 0, 1 << 20);
    let file = writer
        .open(
            "/h",
            &OpenOptions {
                write: true,
                ..OpenOptions::default()
            },
        )
        .unwrap();
    file.write_at(0, &new).unwrap();
    file.close().unwrap();
    let layout = weft_ok(&cluster, &["layout", "/h"]);
    assert!(layout.contains(&format!("{}(stale)", victim.0)), "{layout}");
    cluster.restart();

    for round in 0..3 {
        assert_eq!(handle.read_at(0, &mut got).unwrap(), new.len());
        if let Some(at) = got.iter().zip(&new).position(|(a, b)| a != b) {
            panic!(
                "round {round}: the open handle read other bytes at offset {at} (stripe slot {}): {}",
                (at / 65_536) % 2,
                if got[at..at + 16] == old[at..at + 16] {
                    "the old ones"
                } else {
                    "neither old nor new"
                }
            );
        }
    }
}

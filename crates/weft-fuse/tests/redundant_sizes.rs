//! Sizes of replicated files (issue 33) come from fresh copies only. A piece marked
//! stale missed writes while its server was down; when that server returns, its object
//! is short of them. A stat that asked it for the slot's size (the primary, copy 0, as
//! for a plain file) got the old, smaller size, and the mount's kernel, which never
//! reads past the size it was told, handed programs a file cut short: wrong bytes, with
//! no error.

mod common;

use common::{pattern, Mount};

use weft_testkit::TestCluster;

const HALF: usize = 1 << 20;

#[test]
fn a_replicated_file_whose_primary_missed_writes_shows_its_whole_size_and_bytes() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let options = weft_testkit::replicated(65_536, 2);
    client.mkdir("/r", 0o755).unwrap();
    let file = client.create("/r/f", &options).unwrap();
    let layout = file.layout().clone();
    let first = pattern(1, HALF);
    file.write_at(0, &first).unwrap();
    file.sync().unwrap();
    // Every slot's primary goes down; the second half is written to the copies only,
    // and the primaries are marked stale.
    for server in &layout.servers {
        cluster.kill9(server.0);
    }
    let second = pattern(2, HALF);
    file.write_at(HALF as u64, &second).unwrap();
    file.close().unwrap();
    let mut expected = first;
    expected.extend_from_slice(&second);

    // With the primaries still down, and after they returned with their old objects.
    for round in ["primaries down", "primaries back, stale"] {
        let reader = cluster.client();
        let attr = reader.stat("/r/f").unwrap();
        assert_eq!(attr.size, expected.len() as u64, "{round}: native stat");
        let mount = Mount::new(&cluster);
        let path = mount.join("r/f");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            expected.len() as u64,
            "{round}: size through the mount"
        );
        let got = std::fs::read(&path).unwrap();
        assert_eq!(got.len(), expected.len(), "{round}: bytes read through the mount");
        assert!(got == expected, "{round}: wrong bytes through the mount");
        drop(mount);
        if round == "primaries down" {
            cluster.restart();
        }
    }
    let shown = reader_layout(&cluster);
    assert!(
        shown.contains("stale"),
        "the primaries are no longer marked stale:\n{shown}"
    );
}

fn reader_layout(cluster: &TestCluster) -> String {
    let out = cluster.weft(&["layout", "/r/f"]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

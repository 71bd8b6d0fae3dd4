//! Cached files through the mount: what the native client writes is what the mount
//! reads and the other way round, with no sync in between (one replica of each block
//! in the cache tier), and the mount shows the file's caching mode.

mod common;

use common::{sh, Mount};
use weft_client::{CacheMode, OpenOptions};
use weft_testkit::{ClusterOptions, TestCluster};

#[test]
fn the_mount_and_the_native_client_see_each_others_writes_without_sync() {
    for placement in ["colocated", "2"] {
        let cluster = TestCluster::start_with(&ClusterOptions::cached(placement, "16M"));
        let mount = Mount::new(&cluster);
        let client = cluster.client();
        let file = client.create("/shared.dat", &Default::default()).unwrap();
        assert_eq!(file.cache_mode(), CacheMode::Cached);
        let first = common::pattern(1, 3_000_001);
        file.write_at(0, &first).unwrap();
        // The mount reads the native client's unsynced bytes (and size).
        let path = mount.join("shared.dat");
        assert!(
            std::fs::read(&path).unwrap() == first,
            "{placement}: the mount did not read the native client's writes"
        );
        assert!(sh(
            mount.path(),
            "getfattr --only-values -n user.weft.layout shared.dat"
        )
        .contains("cache=cached"));
        // The mount writes in the middle, off block boundaries; the native client reads
        // it through a handle it opened before.
        let patch = common::pattern(2, 200_003);
        let source = mount.scratch().join("patch");
        std::fs::write(&source, &patch).unwrap();
        sh(
            mount.path(),
            &format!(
                "dd if={} of=shared.dat bs=65536 seek=1234567 oflag=seek_bytes conv=notrunc status=none",
                source.display()
            ),
        );
        let mut expected = first.clone();
        expected[1_234_567..1_234_567 + patch.len()].copy_from_slice(&patch);
        let mut back = vec![0u8; expected.len()];
        assert_eq!(file.read_at(0, &mut back).unwrap(), expected.len());
        assert!(
            back == expected,
            "{placement}: the native client missed the mount's write"
        );
        // A new handle after the mount's close sees it too, as does the CLI.
        let reopened = client.open("/shared.dat", &OpenOptions::default()).unwrap();
        assert_eq!(reopened.size().unwrap(), expected.len() as u64);
        let out = mount.scratch().join("got");
        let got = cluster.weft(&["get", "/shared.dat", out.to_str().unwrap()]);
        assert!(got.status.success(), "{got:?}");
        assert!(std::fs::read(&out).unwrap() == expected);
    }
}

/// fallocate of a cached file through the mount: a hole punched in data the cache
/// managers still hold dirty, one of them up to the file's end, reads as zeros through
/// the mount and the native client and leaves the size alone, as does a zeroed range
/// (FALLOC_FL_ZERO_RANGE); mode 0 grows the file, KEEP_SIZE does not. Every fallocate of a cached file was refused with EINVAL (its io
/// servers were sent the striping over its cache managers), which fsx found; a punch
/// that went through would have left the managers' dirty bytes to be read back over
/// the hole, and cut the size back to what the io servers held.
#[test]
fn fallocate_and_holes_punched_in_a_cached_file() {
    let cluster = TestCluster::start_with(&ClusterOptions::cached("2", "16M"));
    let mount = Mount::new(&cluster);
    let client = cluster.client();
    let mut expected = common::pattern(3, 1_000_000);
    std::fs::write(mount.join("c.dat"), &expected).unwrap();
    sh(
        mount.path(),
        "fallocate -p -o 100000 -l 300000 c.dat && fallocate -p -o 900000 -l 100000 c.dat \
         && fallocate -z -o 500000 -l 100000 c.dat",
    );
    expected[100_000..400_000].fill(0);
    expected[500_000..600_000].fill(0);
    expected[900_000..].fill(0);
    let native = |expected: &[u8], what: &str| {
        let file = client.open("/c.dat", &OpenOptions::default()).unwrap();
        assert_eq!(file.size().unwrap(), expected.len() as u64, "{what}: native size");
        let mut back = vec![1u8; expected.len()];
        assert_eq!(file.read_at(0, &mut back).unwrap(), expected.len());
        assert!(back == expected, "{what}: the native client read other bytes");
    };
    assert!(
        std::fs::read(mount.join("c.dat")).unwrap() == expected,
        "the mount read other bytes than the punched file's"
    );
    native(&expected, "punched");
    sh(
        mount.path(),
        "fallocate -l 2000000 c.dat && fallocate -n -o 3000000 -l 100000 c.dat",
    );
    expected.resize(2_000_000, 0);
    assert_eq!(std::fs::metadata(mount.join("c.dat")).unwrap().len(), 2_000_000);
    assert!(std::fs::read(mount.join("c.dat")).unwrap() == expected);
    native(&expected, "allocated");
}

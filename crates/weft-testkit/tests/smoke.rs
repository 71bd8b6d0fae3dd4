//! The harness itself: a cluster starts, serves a round trip, and is gone after drop.

use weft_testkit::TestCluster;

#[test]
fn a_cluster_starts_serves_and_stops() {
    let pids;
    {
        let cluster = TestCluster::start();
        let client = cluster.client();
        let file = client.create("/hello", &Default::default()).unwrap();
        file.write_at(0, b"hello, weft").unwrap();
        let mut back = vec![0u8; 64];
        let n = file.read_at(0, &mut back).unwrap();
        assert_eq!(&back[..n], b"hello, weft");
        pids = (0..=4)
            .map(|id| cluster.pid(id).expect("server running"))
            .collect::<Vec<_>>();
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    for pid in pids {
        // SAFETY: signal 0 only checks existence.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.contains(") Z"))
                .unwrap_or(true);
        assert!(!alive, "server pid {pid} outlived its TestCluster");
    }
}

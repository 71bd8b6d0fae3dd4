//! Clients on the servers' machine move data over the io servers' Unix sockets, and
//! fall back to TCP when a socket is missing.

use std::collections::HashSet;
use weft_client::{Client, CreateOptions};
use weft_testkit::TestCluster;

/// Inodes of this process's open sockets that are Unix-domain sockets.
fn unix_socket_fds() -> usize {
    let unix: HashSet<String> = std::fs::read_to_string("/proc/net/unix")
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(6).map(str::to_owned))
        .collect();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy().into_owned();
            t.strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .map(str::to_owned)
        })
        .filter(|inode| unix.contains(inode))
        .count()
}

fn round_trip(client: &Client, path: &str) {
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let file = client.create(path, &CreateOptions::default()).unwrap();
    file.write_at(0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "data read back differs");
}

#[test]
fn local_clients_use_the_sockets_and_fall_back_to_tcp_without_them() {
    let cluster = TestCluster::start();
    let config = cluster.config();
    let sockets: Vec<_> = config
        .io_servers()
        .map(|s| s.socket.clone().expect("weft up gives io servers a socket"))
        .collect();
    assert_eq!(sockets.len(), 4);

    let before = unix_socket_fds();
    let client = cluster.client();
    round_trip(&client, "/over-unix");
    let with_sockets = unix_socket_fds();
    assert!(
        with_sockets >= before + 4,
        "expected a Unix connection per io server: {before} -> {with_sockets}"
    );

    // Without the socket files, a new client goes over TCP and still works.
    for s in &sockets {
        std::fs::remove_file(s).unwrap();
    }
    let tcp_client = cluster.client();
    round_trip(&tcp_client, "/over-tcp");
    assert_eq!(
        unix_socket_fds(),
        with_sockets,
        "a client without sockets opened Unix connections"
    );

    // A path that exists but is no socket is no obstacle either.
    for s in &sockets {
        std::fs::write(s, b"not a socket").unwrap();
    }
    round_trip(&cluster.client(), "/not-a-socket");
}

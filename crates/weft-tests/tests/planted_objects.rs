//! Objects planted on the io servers under inode numbers not yet handed out are never
//! a new file's content. Inode numbers are sequential, so a raw client holding the
//! cluster key can guess the next ones; io servers used to keep an object that already
//! existed when asked to create it, and a file created later by someone else came up
//! holding the planter's bytes (issue 12). Now creation is exclusive and the manager
//! replaces what it finds, saying so in its log.

use std::time::Duration;
use weft_client::{CreateOptions, InodeId, LayoutRequest};
use weft_proto::msg::Request;
use weft_proto::{Range, Striping};
use weft_rpc::Timeouts;
use weft_testkit::{ClusterOptions, TestCluster};

/// More than the manager's pool holds (128 per refill), so that creates run through
/// the rest of the pool and into numbers planted ahead of it.
const PLANTED: u64 = 400;
const PLANTED_BYTES: u64 = 16 * 1024;
/// Creates tried before the test gives up finding a planted number handed out.
const CREATES_MAX: u64 = 1000;

#[test]
fn objects_planted_for_future_inodes_are_never_served_as_a_new_files_content() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 3,
        ..Default::default()
    });
    let client = cluster.client();
    // O_CREAT|O_EXCL without O_TRUNC, as open(2) and the mount create files: nothing
    // truncates the objects the manager hands out.
    let wide = CreateOptions {
        layout: LayoutRequest {
            stripe_count: Some(3),
            ..Default::default()
        },
        exclusive: true,
        truncate: false,
        ..Default::default()
    };
    let seed = client.create("/seed", &wide).unwrap();
    let next = seed.inode().0 + 1;
    let layout = seed.layout().clone();

    // The planter: a raw client with the key, writing 16 KiB of 0xEE into objects for
    // the next 400 inode numbers on every io server.
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        request: Duration::from_secs(20),
    };
    for (index, server) in layout.servers.iter().enumerate() {
        // Holding the key, the planter can make itself a server capability (see the
        // docs/src/security.md: capabilities protect files from clients that are not key holders'
        // equals only through the manager); planting must fail even so.
        let planter = cluster.server_connection(&cluster.addr(server.0), timeouts);
        for inode in (next..next + PLANTED).map(InodeId) {
            planter
                .call(&Request::ObjCreate { inodes: vec![inode] }, &[])
                .unwrap();
            let striping = Striping {
                stripe_size_bytes: layout.stripe_size_bytes,
                stripe_count: layout.servers.len() as u32,
                server_index: index as u32,
            };
            // The whole first PLANTED_BYTES of the file, as this server holds it.
            let local = striping.layout().bytes_on(index, 0, PLANTED_BYTES);
            planter
                .call(
                    &Request::Write {
                        inode,
                        striping,
                        ranges: vec![Range {
                            offset: 0,
                            len: PLANTED_BYTES,
                        }],
                    },
                    &vec![0xEE; local as usize],
                )
                .unwrap();
        }
    }

    // Files created now get the planted numbers, and none of the planted bytes.
    let mut hit = 0;
    for k in 0..CREATES_MAX {
        if hit >= 10 {
            break;
        }
        let path = format!("/victim-{k}");
        let file = client.create(&path, &wide).unwrap();
        if (next..next + PLANTED).contains(&file.inode().0) {
            hit += 1;
        }
        assert_eq!(
            file.size().unwrap(),
            0,
            "{path} (inode {}) is not empty",
            file.inode()
        );
        let mut buf = vec![0u8; PLANTED_BYTES as usize];
        assert_eq!(file.read_at(0, &mut buf).unwrap(), 0, "{path} read planted bytes");
        // A short write reads back alone: no planted bytes after it.
        file.write_at(0, b"mine").unwrap();
        let n = file.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"mine", "{path}");
        drop(file);
        let reopened = client.open(&path, &Default::default()).unwrap();
        assert_eq!(reopened.size().unwrap(), 4, "{path}");
    }
    // The manager said what it found: a create met a planted object (and made its
    // own), or a pool refill did (its whole batch went to the purger, so no create got
    // a planted number). Either way the planted numbers were reached: the test planted
    // the right ones.
    let log = std::fs::read_to_string(cluster.home().join("logs/server-0.log")).unwrap();
    assert!(log.contains("planted by a peer with the cluster key"), "{log}");
    eprintln!("{hit} creates got planted numbers");
}

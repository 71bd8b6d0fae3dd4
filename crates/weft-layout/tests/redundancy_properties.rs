//! Property tests of replicated layouts' piece placement (issue 33): every copy of
//! every slot on a distinct io server of the cluster, each copy a plain striping of the
//! same geometry, the piece map (`piece_of`, `slot_servers`) its own inverse.

use proptest::prelude::*;
use weft_layout::redundancy::REPLICAS_MAX;
use weft_layout::{Layout, LayoutError, LayoutRequest, Redundancy, ServerId};

fn cluster(n: usize) -> Vec<ServerId> {
    // Ids not equal to indices, as in a cluster whose meta server is id 0.
    (0..n).map(|i| ServerId(10 + 3 * i as u32)).collect()
}

proptest! {
    #[test]
    fn pieces_are_on_distinct_servers_and_the_map_round_trips(
        n in 1usize..40,
        replicas in 1u8..=REPLICAS_MAX,
        count in 0u32..12,
        first in 0u32..40,
        stripe in prop_oneof![Just(512u64), Just(4096), Just(65536)],
    ) {
        let servers = cluster(n);
        let request = LayoutRequest {
            stripe_size_bytes: Some(stripe),
            stripe_count: Some(count),
            first_server: Some(first),
            redundancy: Some(Redundancy::Replicas(replicas)),
            ..Default::default()
        };
        let copies = replicas as usize;
        match Layout::resolve(&request, &LayoutRequest::default(), &servers) {
            Ok(layout) => {
                layout.validate().unwrap();
                prop_assert_eq!(layout.replica_count(), copies);
                prop_assert_eq!(layout.redundancy(), Redundancy::Replicas(replicas));
                let width = layout.width();
                prop_assert!(width >= 1);
                if count == 0 {
                    prop_assert_eq!(width, (n / copies).max(1));
                } else {
                    prop_assert_eq!(width, count as usize);
                }
                let all = layout.all_servers();
                prop_assert_eq!(all.len(), width * copies);
                let mut distinct = all.clone();
                distinct.sort();
                distinct.dedup();
                prop_assert_eq!(distinct.len(), all.len(), "a server holds two pieces");
                prop_assert!(all.iter().all(|s| servers.contains(s)));
                for slot in 0..width {
                    let slot_servers = layout.slot_servers(slot);
                    prop_assert_eq!(slot_servers[0], layout.servers[slot]);
                    for (copy, server) in slot_servers.iter().enumerate() {
                        prop_assert_eq!(layout.replica_server(copy, slot), *server);
                        prop_assert_eq!(layout.piece_of(*server), Some((slot, copy)));
                    }
                }
                // A server of the cluster outside the layout holds no piece.
                for s in servers.iter().filter(|s| !all.contains(s)) {
                    prop_assert_eq!(layout.piece_of(*s), None);
                }
                // Copy r is the plain layout starting r * width servers further on.
                for copy in 1..copies {
                    let plain = Layout::resolve(
                        &LayoutRequest {
                            stripe_size_bytes: Some(stripe),
                            stripe_count: Some(width as u32),
                            first_server: Some(((first as usize + copy * width) % n) as u32),
                            ..Default::default()
                        },
                        &LayoutRequest::default(),
                        &servers,
                    )
                    .unwrap();
                    let copy_servers: Vec<ServerId> =
                        (0..width).map(|k| layout.replica_server(copy, k)).collect();
                    prop_assert_eq!(copy_servers, plain.servers);
                }
            }
            Err(LayoutError::NotEnoughServersForReplicas { wanted, available, .. }) => {
                prop_assert!(wanted > available);
                prop_assert_eq!(available, n);
            }
            Err(LayoutError::NotEnoughServers { .. }) => prop_assert!(count as usize > n),
            Err(LayoutError::FirstServer { .. }) => prop_assert!(first as usize >= n),
            Err(other) => prop_assert!(false, "unexpected refusal {other}"),
        }
    }
}

#[test]
fn redundancy_names_parse_and_print_back() {
    for (text, want) in [
        ("plain", Redundancy::Replicas(1)),
        ("none", Redundancy::Replicas(1)),
        ("replicas=2", Redundancy::Replicas(2)),
        ("replicas=8", Redundancy::Replicas(8)),
    ] {
        let parsed: Redundancy = text.parse().unwrap();
        assert_eq!(parsed, want, "{text}");
        assert_eq!(parsed.to_string().parse::<Redundancy>().unwrap(), want);
    }
    for bad in ["replicas=0", "replicas=9", "replicas=x", "ec=4+2", "mirror", ""] {
        let error = bad.parse::<Redundancy>().unwrap_err();
        assert!(!error.is_empty(), "{bad}");
    }
    assert!("ec=4+2"
        .parse::<Redundancy>()
        .unwrap_err()
        .contains("not built yet"));
}

#[test]
fn a_layout_with_a_server_twice_or_a_foreign_stale_piece_is_refused() {
    let mut layout = Layout::resolve(
        &LayoutRequest {
            stripe_count: Some(2),
            redundancy: Some(Redundancy::Replicas(2)),
            ..Default::default()
        },
        &LayoutRequest::default(),
        &cluster(4),
    )
    .unwrap();
    layout.validate().unwrap();
    let mut twice = layout.clone();
    twice.replication.copies[0] = twice.servers[1];
    assert!(matches!(twice.validate(), Err(LayoutError::DuplicateServer(_))));
    let mut ragged = layout.clone();
    ragged.replication.copies.pop();
    assert!(matches!(ragged.validate(), Err(LayoutError::Replicas(_))));
    layout.replication.stale.push(ServerId(999));
    assert!(matches!(layout.validate(), Err(LayoutError::StaleServer(_))));
}

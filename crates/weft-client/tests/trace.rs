//! Trace capture in the native client: a traced file handle records each request it
//! sends (contiguous, list and view I/O) with the file's layout, reads back exactly
//! through weft-trace's reader, and stops at its size limit with a note.

use std::sync::Arc;

use weft_client::trace::Tracer;
use weft_client::Datatype;
use weft_testkit::TestCluster;
use weft_trace::format::{Reader, Record, Shape, Side, TargetKind};
use weft_trace::runs::Run;

fn records(path: &std::path::Path) -> Vec<Record> {
    let bytes = std::fs::read(path).unwrap();
    Reader::new(&bytes)
        .unwrap()
        .map(|r| r.unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

#[test]
fn a_traced_handle_records_what_it_sends() {
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let client = cluster.client();
    let mut file = client.create("/traced", &Default::default()).unwrap();
    let tracer = Tracer::for_dir(dir.path()).unwrap();
    file.set_tracer(Some(tracer.clone()));
    file.write_at(0, &vec![7u8; 300_000]).unwrap();
    let ranges: Vec<(u64, u64)> = (0..100).map(|i| (1000 + i * 2000, 500)).collect();
    let mut buf = vec![0u8; 50_000];
    file.read_list(&ranges, &mut buf).unwrap();
    file.set_view(
        64,
        Datatype::vector(10, 1, 4, &Datatype::bytes(100).unwrap()).unwrap(),
    )
    .unwrap();
    let mut buf = vec![0u8; 1000];
    file.read_view(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 7));
    let inode = file.inode().0;
    drop(file);
    let got = records(tracer.path());
    let Record::File(f) = &got[0] else {
        panic!("{got:?}")
    };
    assert_eq!((f.inode, f.path.as_str(), f.stripe_count), (inode, "/traced", 4));
    assert_eq!(f.target_kind, TargetKind::IoServers);
    let requests: Vec<_> = got
        .iter()
        .filter_map(|r| match r {
            Record::Request(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), 3);
    assert!(requests
        .iter()
        .all(|r| r.flags.side() == Side::Sent && r.call.is_none()));
    assert!(requests[0].flags.write() && !requests[1].flags.write());
    assert_eq!(
        requests[0].shape,
        Shape::Runs(vec![Run::new(0, 300_000, 0, 1).unwrap()])
    );
    // The list's 100 ranges fold into one run.
    assert_eq!(
        requests[1].shape,
        Shape::Runs(vec![Run::new(1000, 500, 2000, 100).unwrap()])
    );
    let Shape::View {
        view,
        view_offset: 0,
        len: 1000,
    } = requests[2].shape
    else {
        panic!("{:?}", requests[2])
    };
    let recorded = got.iter().find_map(|r| match r {
        Record::View { view: v, decoded, .. } if *v == view => Some(decoded.clone()),
        _ => None,
    });
    assert_eq!(recorded.unwrap().displacement(), 64);
    assert!(requests.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
}

#[test]
fn a_full_trace_says_so_and_records_nothing_more() {
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let mut file = cluster.client().create("/full", &Default::default()).unwrap();
    let tracer = Tracer::for_dir_with_limit(dir.path(), 600).unwrap();
    file.set_tracer(Some(Arc::clone(&tracer)));
    for i in 0..200u64 {
        file.write_at(i * 10, b"0123456789").unwrap();
    }
    drop(file);
    let bytes = std::fs::read(tracer.path()).unwrap();
    assert!(bytes.len() <= 600 + 200, "{} bytes", bytes.len());
    let got = records(tracer.path());
    let Some(Record::Note(note)) = got.last() else {
        panic!("no note at the end: {got:?}")
    };
    assert!(note.contains("size limit"), "{note}");
    let requests = got.iter().filter(|r| matches!(r, Record::Request(_))).count();
    assert!(requests > 10 && requests < 200, "{requests}");
    assert_eq!(tracer.dropped() as usize, 200 - requests);
}

// Regression: a view of more blocks than the wire form takes (HDF5 point selections,
// weft-layout's TREE_BLOCKS_MAX) could not be a trace record: its encoding passed the
// trace's view limit and the encoder panicked. Its original requests are file runs.
#[test]
fn an_original_request_through_a_view_without_wire_form_is_recorded_as_runs() {
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let client = cluster.client();
    let mut file = client.create("/points", &Default::default()).unwrap();
    let tracer = Tracer::for_dir(dir.path()).unwrap();
    file.set_tracer(Some(tracer.clone()));
    let n = 1usize << 20;
    let disps: Vec<i64> = (0..n as i64).map(|k| 2 * k).collect();
    let points = Datatype::hindexed(&vec![1; n], &disps, &Datatype::bytes(1).unwrap()).unwrap();
    assert!(!points.fits_wire());
    let view = weft_client::View::new(0, points).unwrap();
    file.trace().unwrap().original(0, true, &view, 0, n as u64);
    drop(file);
    let got = records(tracer.path());
    let originals: Vec<_> = got
        .iter()
        .filter_map(|r| match r {
            Record::Request(r) if r.flags.side() == Side::Original => Some(r.shape.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        originals,
        vec![Shape::Runs(vec![Run::new(0, 1, 2, n as u64).unwrap()])]
    );
    assert!(!got.iter().any(|r| matches!(r, Record::View { .. })));
}

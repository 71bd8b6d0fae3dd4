//! Pack/unpack and piece-iteration benchmark of the view engine. Prints a table; with
//! a path argument also writes the figures there as JSON.
//!
//! Pack and unpack move 64 MiB of strided pieces (stride twice the piece) and are
//! compared with a plain memcpy of the same bytes measured in the same run. Iteration
//! walks a CYCLIC(8) x CYCLIC(8) darray over a 256 MiB matrix on a 2 x 2 process grid.
//! Server iteration (`pieces_on`) is compared with filtering every view piece.
//!
//! Run: `cargo run --release -p weft-layout --example pack_bench [figures.json]`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_layout::view::{pack, unpack, Datatype, Distribution, Order, View};
use weft_layout::{Layout, ServerId};

const MOVED_BYTES: usize = 64 << 20;
const REPETITIONS: usize = 7;
const GIB: f64 = (1u64 << 30) as f64;

/// Best of `REPETITIONS` runs: the least disturbed by the other jobs on the machine.
fn best(mut run: impl FnMut()) -> Duration {
    (0..REPETITIONS)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed()
        })
        .min()
        .expect("at least one repetition")
}

fn timed(run: impl FnOnce()) -> Duration {
    let start = Instant::now();
    run();
    start.elapsed()
}

fn gib_per_second(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / GIB / time.as_secs_f64()
}

struct PackFigures {
    piece_bytes: u64,
    pack: f64,
    unpack: f64,
    memcpy: f64,
}

fn measure_pack(piece_bytes: u64) -> PackFigures {
    let count = MOVED_BYTES as u64 / piece_bytes;
    let stride = 2 * piece_bytes as i64;
    let piece = Datatype::bytes(piece_bytes).expect("piece");
    let strided: Arc<Datatype> = Datatype::hvector(count, 1, stride, &piece).expect("strided type");
    let mut memory: Vec<u8> = (0..2 * MOVED_BYTES).map(|i| (i * 7) as u8).collect();
    let mut packed = vec![0u8; MOVED_BYTES];
    let mut copy = vec![0u8; MOVED_BYTES];

    // Pack, unpack and memcpy alternate in every round, so that load from other jobs on
    // the machine falls on all three alike; the best round of each counts.
    let mut pack_time = Duration::MAX;
    let mut unpack_time = Duration::MAX;
    let mut memcpy_time = Duration::MAX;
    for _ in 0..REPETITIONS {
        pack_time = pack_time.min(timed(|| {
            pack(&strided, 1, black_box(&memory), 0, &mut packed).expect("pack");
            black_box(&packed);
        }));
        unpack_time = unpack_time.min(timed(|| {
            unpack(&strided, 1, black_box(&packed), 0, &mut memory).expect("unpack");
            black_box(&memory);
        }));
        memcpy_time = memcpy_time.min(timed(|| {
            copy.copy_from_slice(black_box(&packed));
            black_box(&copy);
        }));
    }
    // The packed stream must be the pieces in order: check one piece in the middle.
    let middle = (count / 2) as usize;
    let expected = &memory[middle * stride as usize..][..piece_bytes as usize];
    assert_eq!(
        &packed[middle * piece_bytes as usize..][..piece_bytes as usize],
        expected
    );
    PackFigures {
        piece_bytes,
        pack: gib_per_second(MOVED_BYTES, pack_time),
        unpack: gib_per_second(MOVED_BYTES, unpack_time),
        memcpy: gib_per_second(MOVED_BYTES, memcpy_time),
    }
}

struct IterationFigures {
    element_bytes: u64,
    pieces: u64,
    bytes: u64,
    view_seconds: f64,
    server_pieces: u64,
    server_seconds: f64,
}

/// One full pass over rank 0's share of a CYCLIC(8) x CYCLIC(8) darray filling 256 MiB,
/// then the same rank's pieces on server 0 of four 64 KiB-striped servers.
fn measure_iteration(element_bytes: u64) -> IterationFigures {
    let side = (((256u64 << 20) / element_bytes) as f64).sqrt() as u64;
    let element = Datatype::bytes(element_bytes).expect("element");
    let cyclic = [Distribution::Cyclic(Some(8)); 2];
    let t = Datatype::darray(4, 0, &[side, side], &cyclic, &[2, 2], Order::C, &element).expect("darray");
    let bytes = t.size_bytes();
    let view = View::new(0, t).expect("view");
    let mut pieces = 0;
    let view_time = best(|| {
        let (count, total) = view
            .pieces(0, bytes)
            .expect("pieces")
            .fold((0u64, 0u64), |(count, total), p| (count + 1, total + p.len));
        assert_eq!(total, bytes);
        pieces = count;
    });
    let layout = Layout {
        stripe_size_bytes: 64 << 10,
        servers: (0..4).map(ServerId).collect(),
    };
    let mut server_pieces = 0;
    let server_time = best(|| {
        server_pieces =
            view.pieces_on(0, bytes, &layout, 0)
                .expect("server pieces")
                .fold(0u64, |count, p| {
                    black_box(p.len);
                    count + 1
                });
    });
    IterationFigures {
        element_bytes,
        pieces,
        bytes,
        view_seconds: view_time.as_secs_f64(),
        server_pieces,
        server_seconds: server_time.as_secs_f64(),
    }
}

/// Server 0's pieces of a view interval two ways: `pieces_on` (row jumps and re-seeks)
/// and the plain reference, every view piece split by stripes and filtered.
struct ServerFigures {
    case: &'static str,
    pieces: u64,
    pieces_on_seconds: f64,
    filter_seconds: f64,
}

fn measure_server(case: &'static str, view: &View, len: u64, layout: &Layout) -> ServerFigures {
    let mut pieces = 0;
    let pieces_on_time = best(|| {
        pieces = view
            .pieces_on(0, len, layout, 0)
            .expect("server pieces")
            .fold(0u64, |count, p| {
                black_box(p.len);
                count + 1
            });
    });
    let mut filtered = 0;
    let filter_time = best(|| {
        filtered = 0;
        for piece in view.pieces(0, len).expect("pieces") {
            for stripe_piece in layout.pieces(piece.file_offset, piece.len).expect("stripes") {
                if stripe_piece.server_index == 0 {
                    black_box(stripe_piece.local_offset);
                    filtered += 1;
                }
            }
        }
    });
    assert_eq!(pieces, filtered, "{case}: both ways find the same pieces");
    ServerFigures {
        case,
        pieces,
        pieces_on_seconds: pieces_on_time.as_secs_f64(),
        filter_seconds: filter_time.as_secs_f64(),
    }
}

fn server_cases() -> Vec<ServerFigures> {
    let striped = |stripe_size_bytes: u64, count: u32| Layout {
        stripe_size_bytes,
        servers: (0..count).map(ServerId).collect(),
    };
    let small = View::partition(0, 64, 256).expect("partition");
    let large = View::partition(0, 1 << 20, 4 << 20).expect("partition");
    let cyclic = [Distribution::Cyclic(Some(8)); 2];
    let element = Datatype::bytes(1).expect("element");
    let darray =
        Datatype::darray(4, 0, &[16384, 16384], &cyclic, &[2, 2], Order::C, &element).expect("darray");
    let darray_bytes = darray.size_bytes();
    let darray = View::new(0, darray).expect("view");
    vec![
        measure_server(
            "64 B every 256 B, 64 KiB x 8",
            &small,
            64 << 20,
            &striped(64 << 10, 8),
        ),
        measure_server(
            "1 MiB every 4 MiB, 64 KiB x 16",
            &large,
            1 << 30,
            &striped(64 << 10, 16),
        ),
        measure_server(
            "CYCLIC(8)^2 darray, 64 KiB x 4",
            &darray,
            darray_bytes,
            &striped(64 << 10, 4),
        ),
    ]
}

fn main() {
    let json_path = std::env::args().nth(1);
    println!("pack/unpack of 64 MiB in strided pieces (stride = 2 x piece), best of {REPETITIONS}");
    println!(
        "{:>12} {:>12} {:>14} {:>14} {:>10} {:>12}",
        "piece bytes", "pack GiB/s", "unpack GiB/s", "memcpy GiB/s", "pack/mem", "unpack/mem"
    );
    let mut pack_rows = Vec::new();
    for piece_bytes in [8, 32, 256] {
        let f = measure_pack(piece_bytes);
        println!(
            "{:>12} {:>12.2} {:>14.2} {:>14.2} {:>10.2} {:>12.2}",
            f.piece_bytes,
            f.pack,
            f.unpack,
            f.memcpy,
            f.pack / f.memcpy,
            f.unpack / f.memcpy
        );
        pack_rows.push(f);
    }
    println!();
    println!("piece iteration, rank 0 of a CYCLIC(8) x CYCLIC(8) darray over 256 MiB (2 x 2 grid)");
    println!(
        "{:>14} {:>12} {:>12} {:>10} {:>14} {:>14} {:>10}",
        "element bytes", "pieces", "data MiB", "pass s", "Mpieces/s", "server0 pieces", "server0 s"
    );
    let mut iteration_rows = Vec::new();
    for element_bytes in [1, 8] {
        let f = measure_iteration(element_bytes);
        println!(
            "{:>14} {:>12} {:>12} {:>10.3} {:>14.1} {:>14} {:>10.3}",
            f.element_bytes,
            f.pieces,
            f.bytes >> 20,
            f.view_seconds,
            f.pieces as f64 / f.view_seconds / 1e6,
            f.server_pieces,
            f.server_seconds
        );
        iteration_rows.push(f);
    }
    println!();
    println!("server 0's pieces: pieces_on against splitting and filtering every view piece");
    println!(
        "{:>34} {:>12} {:>14} {:>12} {:>8}",
        "view, stripes x servers", "pieces", "pieces_on s", "filter s", "speedup"
    );
    let server_rows = server_cases();
    for f in &server_rows {
        println!(
            "{:>34} {:>12} {:>14.4} {:>12.4} {:>8.1}",
            f.case,
            f.pieces,
            f.pieces_on_seconds,
            f.filter_seconds,
            f.filter_seconds / f.pieces_on_seconds
        );
    }
    if let Some(path) = json_path {
        let pack_json: Vec<String> = pack_rows
            .iter()
            .map(|f| {
                format!(
                    "{{\"piece_bytes\":{},\"pack_gib_s\":{:.3},\"unpack_gib_s\":{:.3},\"memcpy_gib_s\":{:.3}}}",
                    f.piece_bytes, f.pack, f.unpack, f.memcpy
                )
            })
            .collect();
        let iteration_json: Vec<String> = iteration_rows
            .iter()
            .map(|f| {
                format!(
                    "{{\"element_bytes\":{},\"pieces\":{},\"bytes\":{},\"pass_s\":{:.4},\"server_pieces\":{},\"server_pass_s\":{:.4}}}",
                    f.element_bytes, f.pieces, f.bytes, f.view_seconds, f.server_pieces, f.server_seconds
                )
            })
            .collect();
        let server_json: Vec<String> = server_rows
            .iter()
            .map(|f| {
                format!(
                    "{{\"case\":\"{}\",\"pieces\":{},\"pieces_on_s\":{:.5},\"filter_s\":{:.5}}}",
                    f.case, f.pieces, f.pieces_on_seconds, f.filter_seconds
                )
            })
            .collect();
        let json = format!(
            "{{\"pack\":[{}],\"iteration\":[{}],\"server\":[{}]}}\n",
            pack_json.join(","),
            iteration_json.join(","),
            server_json.join(",")
        );
        std::fs::write(&path, json).expect("writing the JSON figures");
        println!("\nfigures written to {path}");
    }
}

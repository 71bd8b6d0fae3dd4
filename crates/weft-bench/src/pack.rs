//! `weft bench pack`: the view engine's pack/unpack and piece iteration, no I/O.
//! Pack and unpack move 64 MiB of strided pieces (stride twice the piece) and are
//! compared with memcpy of the same bytes between the same (pre-touched) buffers, the
//! four alternated round by round (medians, min and max); iteration walks a
//! CYCLIC(8) x CYCLIC(8) darray over a 256 MiB matrix on a 2 x 2 process grid; server
//! iteration (`pieces_on`) is compared with splitting and filtering every view piece.

use crate::plot::{Figure, Panel, XAxis};
use crate::report::{command_line, svg_next_to, target_lines, write_results, Goal, Spread, Table};
use anyhow::{ensure, Result};
use clap::Args;
use serde::Serialize;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use weft_layout::view::{pack, unpack, Datatype, Distribution, Order, View};
use weft_layout::{Layout, ServerId};

pub const LONG_ABOUT: &str = "Pack/unpack and piece iteration of the view engine, without I/O. \
Pack and unpack move 64 MiB of strided pieces of 8, 32 and 256 bytes (stride = 2 x piece) between \
memory and a contiguous buffer, against memcpy of the same bytes between the same buffers (into the \
packed buffer for pack, into memory for unpack), all four alternated round by round, the order \
rotating (median, min and max of the rounds). Piece iteration walks rank 0's share of a CYCLIC(8) x CYCLIC(8) darray over a \
256 MiB matrix (2 x 2 grid); server iteration finds server 0's pieces with pieces_on and, as the \
reference, by splitting and filtering every view piece.\n\nTarget: pack and unpack of 32-byte pieces \
at least 0.3x memcpy. Writes JSON to --json and a plot next to it (.svg). Example:\n  weft bench pack";

const MOVED_BYTES: usize = 64 << 20;
const GIB: f64 = (1u64 << 30) as f64;
pub const REPETITIONS_MAX: u32 = 1000;

#[derive(Args, Debug, Clone)]
pub struct PackArgs {
    /// Rounds of every measurement, alternated: pack/unpack and their memcpy baselines
    /// report median, min and max; piece iteration the best round.
    #[arg(long, default_value_t = 7, value_name = "N")]
    pub repetitions: u32,
    /// Where to write the JSON results (the directory is created); the SVG plot goes
    /// next to it (.svg for .json).
    #[arg(long, default_value = "bench-results/pack.json", value_name = "FILE")]
    pub json: PathBuf,
}

fn timed(run: impl FnOnce()) -> Duration {
    let start = Instant::now();
    run();
    start.elapsed()
}

fn best(repetitions: u32, mut run: impl FnMut()) -> Duration {
    (0..repetitions)
        .map(|_| timed(&mut run))
        .min()
        .expect("at least one repetition")
}

fn gib_per_second(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / GIB / time.as_secs_f64()
}

#[derive(Debug, Serialize)]
struct PackFigures {
    piece_bytes: u64,
    /// Medians over the rounds.
    pack_gib_s: f64,
    unpack_gib_s: f64,
    /// memcpy of the same bytes between the same buffers: `pack`'s baseline writes the
    /// packed buffer, `unpack`'s writes the memory buffer.
    pack_memcpy_gib_s: f64,
    unpack_memcpy_gib_s: f64,
    pack_vs_memcpy: f64,
    unpack_vs_memcpy: f64,
    /// GiB/s of every round: min, median, max.
    pack_spread: Spread,
    unpack_spread: Spread,
    pack_memcpy_spread: Spread,
    unpack_memcpy_spread: Spread,
}

/// What one round of `measure_pack` times.
#[derive(Clone, Copy)]
enum Move {
    Pack,
    Unpack,
    /// memcpy of `MOVED_BYTES` from the memory buffer into the packed buffer.
    MemcpyLikePack,
    /// memcpy of `MOVED_BYTES` from the packed buffer into the memory buffer.
    MemcpyLikeUnpack,
}

fn measure_pack(piece_bytes: u64, repetitions: u32) -> Result<PackFigures> {
    let count = MOVED_BYTES as u64 / piece_bytes;
    let stride = 2 * piece_bytes as i64;
    let strided = Datatype::hvector(count, 1, stride, &Datatype::bytes(piece_bytes)?)?;
    // Every buffer written before any timing, so that no measurement pays for first
    // touches of fresh pages (a baseline copying into fresh pages measured page faults).
    let mut memory: Vec<u8> = (0..2 * MOVED_BYTES).map(|i| (i * 7) as u8).collect();
    let mut packed = vec![1u8; MOVED_BYTES];
    // The four alternate round by round, each round starting one further along, so that
    // load from other jobs falls on all alike; medians count, min and max are kept.
    let moves = [
        Move::Pack,
        Move::Unpack,
        Move::MemcpyLikePack,
        Move::MemcpyLikeUnpack,
    ];
    let runs = crate::report::alternated(&moves, repetitions, |_, m| {
        Ok(timed(|| match m {
            Move::Pack => {
                pack(&strided, 1, black_box(&memory), 0, &mut packed).expect("pack");
                black_box(&packed);
            }
            Move::Unpack => {
                unpack(&strided, 1, black_box(&packed), 0, &mut memory).expect("unpack");
                black_box(&memory);
            }
            Move::MemcpyLikePack => {
                packed.copy_from_slice(black_box(&memory[..MOVED_BYTES]));
                black_box(&packed);
            }
            Move::MemcpyLikeUnpack => {
                memory[..MOVED_BYTES].copy_from_slice(black_box(&packed));
                black_box(&memory);
            }
        }))
    })?;
    // The packed stream must be the pieces in order: pack once more (the copies changed
    // both buffers) and check one piece in the middle.
    pack(&strided, 1, &memory, 0, &mut packed)?;
    let middle = (count / 2) as usize;
    let expected = &memory[middle * stride as usize..][..piece_bytes as usize];
    ensure!(
        &packed[middle * piece_bytes as usize..][..piece_bytes as usize] == expected,
        "pack produced the wrong bytes"
    );
    let spread = |times: &[Duration]| {
        Spread::of(
            &times
                .iter()
                .map(|&t| gib_per_second(MOVED_BYTES, t))
                .collect::<Vec<_>>(),
        )
    };
    let [p, u, mp, mu] = [0, 1, 2, 3].map(|i| spread(&runs[i]));
    Ok(PackFigures {
        piece_bytes,
        pack_gib_s: p.median,
        unpack_gib_s: u.median,
        pack_memcpy_gib_s: mp.median,
        unpack_memcpy_gib_s: mu.median,
        pack_vs_memcpy: p.median / mp.median,
        unpack_vs_memcpy: u.median / mu.median,
        pack_spread: p,
        unpack_spread: u,
        pack_memcpy_spread: mp,
        unpack_memcpy_spread: mu,
    })
}

#[derive(Debug, Serialize)]
struct IterationFigures {
    element_bytes: u64,
    pieces: u64,
    bytes: u64,
    pass_s: f64,
    server_pieces: u64,
    server_pass_s: f64,
}

fn four_servers() -> Layout {
    Layout {
        stripe_size_bytes: 64 << 10,
        servers: (0..4).map(ServerId).collect(),
        replication: Default::default(),
    }
}

/// One full pass over rank 0's share of a CYCLIC(8) x CYCLIC(8) darray filling 256 MiB,
/// then the same rank's pieces on server 0 of four 64 KiB-striped servers.
fn measure_iteration(element_bytes: u64, repetitions: u32) -> Result<IterationFigures> {
    let side = (((256u64 << 20) / element_bytes) as f64).sqrt() as u64;
    let element = Datatype::bytes(element_bytes)?;
    let cyclic = [Distribution::Cyclic(Some(8)); 2];
    let t = Datatype::darray(4, 0, &[side, side], &cyclic, &[2, 2], Order::C, &element)?;
    let bytes = t.size_bytes();
    let view = View::new(0, t)?;
    let mut pieces = 0;
    let pass = best(repetitions, || {
        let (count, total) = view
            .pieces(0, bytes)
            .expect("pieces")
            .fold((0u64, 0u64), |(count, total), p| (count + 1, total + p.len));
        assert_eq!(total, bytes);
        pieces = count;
    });
    let layout = four_servers();
    let mut server_pieces = 0;
    let server_pass = best(repetitions, || {
        server_pieces =
            view.pieces_on(0, bytes, &layout, 0)
                .expect("server pieces")
                .fold(0u64, |count, p| {
                    black_box(p.len);
                    count + 1
                });
    });
    Ok(IterationFigures {
        element_bytes,
        pieces,
        bytes,
        pass_s: pass.as_secs_f64(),
        server_pieces,
        server_pass_s: server_pass.as_secs_f64(),
    })
}

#[derive(Debug, Serialize)]
struct ServerFigures {
    case: &'static str,
    pieces: u64,
    pieces_on_s: f64,
    filter_s: f64,
}

/// Server 0's pieces of a view interval two ways: `pieces_on` (row jumps and re-seeks)
/// and the plain reference, every view piece split by stripes and filtered.
fn measure_server(
    case: &'static str,
    view: &View,
    len: u64,
    layout: &Layout,
    repetitions: u32,
) -> Result<ServerFigures> {
    let (mut pieces, mut filtered) = (0, 0);
    // The two ways alternate round by round; the best round of each counts.
    let runs = crate::report::alternated(&[true, false], repetitions, |_, &on| {
        Ok(timed(|| {
            if on {
                pieces = view
                    .pieces_on(0, len, layout, 0)
                    .expect("server pieces")
                    .fold(0u64, |count, p| {
                        black_box(p.len);
                        count + 1
                    });
                return;
            }
            filtered = 0;
            for piece in view.pieces(0, len).expect("pieces") {
                for stripe_piece in layout.pieces(piece.file_offset, piece.len).expect("stripes") {
                    if stripe_piece.server_index == 0 {
                        black_box(stripe_piece.local_offset);
                        filtered += 1;
                    }
                }
            }
        }))
    })?;
    let best_of = |i: usize| runs[i].iter().min().copied().expect("a round");
    let (pieces_on_time, filter_time) = (best_of(0), best_of(1));
    ensure!(pieces == filtered, "{case}: both ways must find the same pieces");
    Ok(ServerFigures {
        case,
        pieces,
        pieces_on_s: pieces_on_time.as_secs_f64(),
        filter_s: filter_time.as_secs_f64(),
    })
}

#[derive(Debug, Serialize)]
struct Results {
    benchmark: &'static str,
    command_line: String,
    repetitions: u32,
    moved_bytes: usize,
    pack: Vec<PackFigures>,
    iteration: Vec<IterationFigures>,
    server: Vec<ServerFigures>,
    goals: Vec<Goal>,
}

/// Runs the benchmark: prints the tables on stdout, JSON to --json, the
/// plot next to it.
pub fn run(args: &PackArgs) -> Result<()> {
    let repetitions = args.repetitions;
    ensure!(
        (1..=REPETITIONS_MAX).contains(&repetitions),
        "--repetitions must be 1 to {REPETITIONS_MAX}"
    );
    let pack_rows = [8, 32, 256]
        .into_iter()
        .map(|piece| measure_pack(piece, repetitions))
        .collect::<Result<Vec<_>>>()?;
    println!(
        "pack/unpack of 64 MiB in strided pieces (stride = 2 x piece) against memcpy of the same \
         bytes between the same buffers; GiB/s median (min-max) of {repetitions} alternated rounds"
    );
    let mut table = Table::new(&[
        "piece bytes",
        "pack GiB/s",
        "memcpy GiB/s",
        "pack/memcpy",
        "unpack GiB/s",
        "memcpy GiB/s",
        "unpack/memcpy",
    ]);
    for f in &pack_rows {
        table.row(vec![
            f.piece_bytes.to_string(),
            f.pack_spread.cell(2),
            f.pack_memcpy_spread.cell(2),
            format!("{:.2}", f.pack_vs_memcpy),
            f.unpack_spread.cell(2),
            f.unpack_memcpy_spread.cell(2),
            format!("{:.2}", f.unpack_vs_memcpy),
        ]);
    }
    println!("{}", table.render());

    let iteration_rows = [1, 8]
        .into_iter()
        .map(|element| measure_iteration(element, repetitions))
        .collect::<Result<Vec<_>>>()?;
    println!("piece iteration, rank 0 of a CYCLIC(8) x CYCLIC(8) darray over 256 MiB (2 x 2 grid)");
    let mut table = Table::new(&[
        "element bytes",
        "pieces",
        "data MiB",
        "pass s",
        "Mpieces/s",
        "server0 pieces",
        "server0 s",
    ]);
    for f in &iteration_rows {
        table.row(vec![
            f.element_bytes.to_string(),
            f.pieces.to_string(),
            (f.bytes >> 20).to_string(),
            format!("{:.3}", f.pass_s),
            format!("{:.1}", f.pieces as f64 / f.pass_s / 1e6),
            f.server_pieces.to_string(),
            format!("{:.3}", f.server_pass_s),
        ]);
    }
    println!("{}", table.render());

    let striped = |stripe_size_bytes: u64, count: u32| Layout {
        stripe_size_bytes,
        servers: (0..count).map(ServerId).collect(),
        replication: Default::default(),
    };
    let darray = Datatype::darray(
        4,
        0,
        &[16384, 16384],
        &[Distribution::Cyclic(Some(8)); 2],
        &[2, 2],
        Order::C,
        &Datatype::bytes(1)?,
    )?;
    let darray_bytes = darray.size_bytes();
    let server_rows = vec![
        measure_server(
            "64 B every 256 B, 64 KiB x 8",
            &View::partition(0, 64, 256)?,
            64 << 20,
            &striped(64 << 10, 8),
            repetitions,
        )?,
        measure_server(
            "1 MiB every 4 MiB, 64 KiB x 16",
            &View::partition(0, 1 << 20, 4 << 20)?,
            1 << 30,
            &striped(64 << 10, 16),
            repetitions,
        )?,
        measure_server(
            "CYCLIC(8)^2 darray, 64 KiB x 4",
            &View::new(0, darray)?,
            darray_bytes,
            &four_servers(),
            repetitions,
        )?,
    ];
    println!("server 0's pieces: pieces_on against splitting and filtering every view piece");
    let mut table = Table::new(&[
        "view, stripes x servers",
        "pieces",
        "pieces_on s",
        "filter s",
        "speedup",
    ]);
    for f in &server_rows {
        table.row(vec![
            f.case.into(),
            f.pieces.to_string(),
            format!("{:.4}", f.pieces_on_s),
            format!("{:.4}", f.filter_s),
            format!("{:.1}", f.filter_s / f.pieces_on_s),
        ]);
    }
    println!("{}", table.render());

    let at_32 = pack_rows
        .iter()
        .find(|f| f.piece_bytes == 32)
        .expect("32-byte row");
    let goals = vec![
        Goal::new(
            "pack of 32-byte pieces",
            "memcpy of the same bytes",
            0.3,
            at_32.pack_vs_memcpy,
        ),
        Goal::new(
            "unpack of 32-byte pieces",
            "memcpy of the same bytes",
            0.3,
            at_32.unpack_vs_memcpy,
        ),
    ];
    print!("{}", target_lines(&goals));
    let results = Results {
        benchmark: "pack",
        command_line: command_line(),
        repetitions,
        moved_bytes: MOVED_BYTES,
        pack: pack_rows,
        iteration: iteration_rows,
        server: server_rows,
        goals,
    };
    let figure = figure(&results);
    write_results(&args.json, &svg_next_to(&args.json), &results, &figure)?;
    Ok(())
}

/// Pack and unpack GiB/s against the piece size with memcpy (the baseline), and the
/// two ways of finding a server's pieces per case.
fn figure(results: &Results) -> Figure {
    let mut moves = Panel::lines(
        "pack and unpack (GiB/s)",
        "piece size (bytes)",
        "GiB/s",
        XAxis::Log2,
    );
    for f in &results.pack {
        let x = f.piece_bytes as f64;
        moves.point("pack", x, f.pack_gib_s);
        moves.point("unpack", x, f.unpack_gib_s);
        moves.point("memcpy like pack (baseline)", x, f.pack_memcpy_gib_s);
        moves.point("memcpy like unpack (baseline)", x, f.unpack_memcpy_gib_s);
    }
    let mut server = Panel::bars("a server's pieces (ms)", "case", "ms", Vec::new());
    for f in &results.server {
        server.bar("pieces_on", f.case, f.pieces_on_s * 1e3);
        server.bar("split and filter (reference)", f.case, f.filter_s * 1e3);
    }
    Figure {
        title: format!(
            "weft bench pack: {} MiB moved, medians of {} rounds",
            results.moved_bytes >> 20,
            results.repetitions
        ),
        panels: vec![moves, server],
    }
}

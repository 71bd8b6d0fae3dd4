//! Traces of the benchmark workloads generated without running them, for any number
//! of processes: the patterns of `weft bench cio`'s MPI programs (the same parameters
//! give the same original requests), and their aggregation modelled on weft-mpiio's
//! `two_phase` method, the one the programs run with.
//!
//! 1. A workload is a list of collective read calls; each call gives every rank its
//!    file ranges (in file order).
//! 2. Aggregation (ROMIO's even file domains): the calls' region `[min start, max end)`
//!    is cut into one domain of `ceil(region / aggregators)` bytes per aggregator;
//!    each aggregator walks its domain's requested bytes in windows of
//!    `cb_buffer_size` bytes, one per round, and reads each window's data extent (its
//!    first requested byte to its last, holes included).
//! 3. Times: call `k` starts at `k` seconds; rank `r`'s original request at `+r` ns;
//!    round `m` of aggregator `a` at `+P + m*P + a` ns. Each process gets its own trace
//!    (its original requests, and its sent ones if it aggregates).

use crate::format::{
    encode_header, CallId, Encoder, FileRecord, Flags, Header, Record, RequestRecord, Shape, TargetKind,
};
use crate::runs;

/// The inode of the synthetic traces' one file.
pub const INODE: u64 = 1;
/// Most calls and ranks a generator accepts (bounds the trace it makes).
pub const PROCS_MAX: u32 = 4096;
pub const PASSES_MAX: u32 = 1000;

/// MPI-Tile-IO: a 2D dataset of `elem` -byte elements cut into a grid of tiles, one per
/// process, each `tile_x` x `tile_y` elements, neighbours overlapping by `overlap_x` and
/// `overlap_y` elements; every process reads its tile collectively, `passes` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    pub tile_x: u64,
    pub tile_y: u64,
    pub overlap_x: u64,
    pub overlap_y: u64,
    pub elem_bytes: u64,
    pub passes: u32,
}

impl Default for Tile {
    /// The seed's setup: 1024 x 1024 tiles of 8-byte elements overlapping by 128
    /// elements each way; 4 passes.
    fn default() -> Self {
        Tile {
            tile_x: 1024,
            tile_y: 1024,
            overlap_x: 128,
            overlap_y: 128,
            elem_bytes: 8,
            passes: 4,
        }
    }
}

/// The process grid for `procs` processes: the factorisation nearest to square,
/// wider than tall (MPI_Dims_create's answer for two dimensions).
pub fn grid(procs: u32) -> (u64, u64) {
    let p = u64::from(procs.max(1));
    let mut y = (p as f64).sqrt() as u64;
    while y > 1 && !p.is_multiple_of(y) {
        y -= 1;
    }
    (p / y.max(1), y.max(1))
}

impl Tile {
    /// Dataset width and height in elements for `procs` processes.
    pub fn dims(&self, procs: u32) -> (u64, u64) {
        let (gx, gy) = grid(procs);
        (
            gx * (self.tile_x - self.overlap_x) + self.overlap_x,
            gy * (self.tile_y - self.overlap_y) + self.overlap_y,
        )
    }

    pub fn file_bytes(&self, procs: u32) -> u64 {
        let (w, h) = self.dims(procs);
        w * h * self.elem_bytes
    }

    /// The rows of rank `rank`'s tile, as (file offset, length).
    pub fn ranges(&self, procs: u32, rank: u32) -> Vec<(u64, u64)> {
        let (gx, _) = grid(procs);
        let (w, _) = self.dims(procs);
        let (cx, cy) = (u64::from(rank) % gx, u64::from(rank) / gx);
        let (x0, y0) = (
            cx * (self.tile_x - self.overlap_x),
            cy * (self.tile_y - self.overlap_y),
        );
        (0..self.tile_y)
            .map(|row| {
                (
                    ((y0 + row) * w + x0) * self.elem_bytes,
                    self.tile_x * self.elem_bytes,
                )
            })
            .collect()
    }

    fn check(&self) -> Result<(), String> {
        if self.tile_x == 0 || self.tile_y == 0 || self.elem_bytes == 0 {
            return Err("tile sizes and element size must be at least 1".into());
        }
        if self.overlap_x >= self.tile_x || self.overlap_y >= self.tile_y {
            return Err("the overlap must be smaller than the tile".into());
        }
        Ok(())
    }
}

/// IOR-like reads: a file of `segments` segments, each one `block`-byte block per
/// process (IOR's layout); every process reads its block in `transfer`-byte collective
/// calls, segment by segment (segmented), then the whole file again in an interleaved
/// order, transfer `t` of every process side by side (strided); `iterations` times,
/// every other iteration shifted by one rank (IOR's -C: each process rereads its
/// neighbour's data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ior {
    pub block_bytes: u64,
    pub transfer_bytes: u64,
    pub segments: u64,
    pub iterations: u32,
}

impl Default for Ior {
    /// The seed's 8 MiB transfers; 4 segments of 8 MiB blocks; 3 iterations.
    fn default() -> Self {
        Ior {
            block_bytes: 8 << 20,
            transfer_bytes: 8 << 20,
            segments: 4,
            iterations: 3,
        }
    }
}

impl Ior {
    pub fn file_bytes(&self, procs: u32) -> u64 {
        self.segments * u64::from(procs) * self.block_bytes
    }

    fn check(&self) -> Result<(), String> {
        if self.segments == 0 {
            return Err("segments must be at least 1".into());
        }
        check_transfers(self.block_bytes, self.transfer_bytes)
    }

    /// Every collective call: per rank, its one range.
    pub fn calls(&self, procs: u32) -> Vec<Vec<Vec<(u64, u64)>>> {
        let p = u64::from(procs);
        let per_block = self.block_bytes / self.transfer_bytes;
        let mut calls = Vec::new();
        for i in 0..u64::from(self.iterations) {
            let shift = i % 2;
            // Segmented: segment s, transfer t of each rank's block.
            for s in 0..self.segments {
                for t in 0..per_block {
                    calls.push(
                        (0..p)
                            .map(|r| {
                                let owner = (r + shift) % p;
                                vec![(
                                    (s * p + owner) * self.block_bytes + t * self.transfer_bytes,
                                    self.transfer_bytes,
                                )]
                            })
                            .collect(),
                    );
                }
            }
            // Strided: the file as transfers dealt round robin to the ranks.
            let transfers = self.file_bytes(procs) / self.transfer_bytes;
            for round in 0..transfers.div_ceil(p) {
                calls.push(
                    (0..p)
                        .map(|r| {
                            let k = round * p + (r + shift) % p;
                            if k < transfers {
                                vec![(k * self.transfer_bytes, self.transfer_bytes)]
                            } else {
                                vec![]
                            }
                        })
                        .collect(),
                );
            }
        }
        calls
    }
}

/// mpi-io-test-like rereads (PVFS's mpi-io-test): each process reads its own
/// contiguous `block`-byte part of the file collectively, in `transfer`-byte calls,
/// and rereads the whole file `iterations` times, the second half of the iterations
/// shifted by half the processes (another process's data, as a restart would read it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpiIoTest {
    pub block_bytes: u64,
    pub transfer_bytes: u64,
    pub iterations: u32,
}

impl Default for MpiIoTest {
    /// mpi-io-test's 16 MiB blocks; 4 MiB per call; 4 reads.
    fn default() -> Self {
        MpiIoTest {
            block_bytes: 16 << 20,
            transfer_bytes: 4 << 20,
            iterations: 4,
        }
    }
}

impl MpiIoTest {
    pub fn file_bytes(&self, procs: u32) -> u64 {
        u64::from(procs) * self.block_bytes
    }

    fn check(&self) -> Result<(), String> {
        check_transfers(self.block_bytes, self.transfer_bytes)
    }

    pub fn calls(&self, procs: u32) -> Vec<Vec<Vec<(u64, u64)>>> {
        let p = u64::from(procs);
        let per_block = self.block_bytes / self.transfer_bytes;
        let mut calls = Vec::new();
        for i in 0..u64::from(self.iterations) {
            let shift = if i >= u64::from(self.iterations).div_ceil(2) {
                p / 2
            } else {
                0
            };
            for t in 0..per_block {
                calls.push(
                    (0..p)
                        .map(|r| {
                            let owner = (r + shift) % p;
                            vec![(
                                owner * self.block_bytes + t * self.transfer_bytes,
                                self.transfer_bytes,
                            )]
                        })
                        .collect(),
                );
            }
        }
        calls
    }
}

/// A block read in whole transfers.
fn check_transfers(block_bytes: u64, transfer_bytes: u64) -> Result<(), String> {
    if block_bytes == 0 || transfer_bytes == 0 {
        return Err("block and transfer must be at least 1".into());
    }
    if !block_bytes.is_multiple_of(transfer_bytes) {
        return Err("the block must be a whole number of transfers".into());
    }
    Ok(())
}

/// A workload to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Tile(Tile),
    Ior(Ior),
    MpiIoTest(MpiIoTest),
}

impl Workload {
    /// The workload of this name (`tile`, `ior`, `mpiio-test`) with its defaults.
    pub fn named(name: &str) -> Option<Workload> {
        match name {
            "tile" => Some(Workload::Tile(Tile::default())),
            "ior" => Some(Workload::Ior(Ior::default())),
            "mpiio-test" => Some(Workload::MpiIoTest(MpiIoTest::default())),
            _ => None,
        }
    }

    /// The same workload with `passes` passes (tile) or iterations.
    pub fn with_passes(self, passes: u32) -> Workload {
        match self {
            Workload::Tile(t) => Workload::Tile(Tile { passes, ..t }),
            Workload::Ior(w) => Workload::Ior(Ior {
                iterations: passes,
                ..w
            }),
            Workload::MpiIoTest(w) => Workload::MpiIoTest(MpiIoTest {
                iterations: passes,
                ..w
            }),
        }
    }

    /// The arguments of `cio_workloads.c` (weft-bench) that run this workload.
    pub fn program_args(&self) -> Vec<String> {
        let v: Vec<u64> = match self {
            Workload::Tile(t) => vec![t.tile_x, t.tile_y, t.overlap_x, t.overlap_y, u64::from(t.passes)],
            Workload::Ior(w) => vec![
                w.block_bytes,
                w.transfer_bytes,
                w.segments,
                u64::from(w.iterations),
            ],
            Workload::MpiIoTest(w) => vec![w.block_bytes, w.transfer_bytes, u64::from(w.iterations)],
        };
        std::iter::once(format!("--{}", self.name()))
            .chain(v.into_iter().map(|x| x.to_string()))
            .collect()
    }

    pub fn name(&self) -> &'static str {
        match self {
            Workload::Tile(_) => "tile",
            Workload::Ior(_) => "ior",
            Workload::MpiIoTest(_) => "mpiio-test",
        }
    }

    pub fn file_bytes(&self, procs: u32) -> u64 {
        match self {
            Workload::Tile(t) => t.file_bytes(procs),
            Workload::Ior(w) => w.file_bytes(procs),
            Workload::MpiIoTest(w) => w.file_bytes(procs),
        }
    }

    /// Every collective read call: per rank, its ranges in file order.
    pub fn calls(&self, procs: u32) -> Vec<Vec<Vec<(u64, u64)>>> {
        match self {
            Workload::Tile(t) => {
                let one: Vec<Vec<(u64, u64)>> = (0..procs).map(|r| t.ranges(procs, r)).collect();
                (0..t.passes).map(|_| one.clone()).collect()
            }
            Workload::Ior(w) => w.calls(procs),
            Workload::MpiIoTest(w) => w.calls(procs),
        }
    }

    fn check(&self, procs: u32) -> Result<(), String> {
        if !(1..=PROCS_MAX).contains(&procs) {
            return Err(format!("processes must be in 1..={PROCS_MAX}"));
        }
        match self {
            Workload::Tile(t) if t.passes > PASSES_MAX => Err(format!("at most {PASSES_MAX} passes")),
            Workload::Tile(t) => t.check(),
            Workload::Ior(w) if w.iterations > PASSES_MAX => Err(format!("at most {PASSES_MAX} iterations")),
            Workload::Ior(w) => w.check(),
            Workload::MpiIoTest(w) if w.iterations > PASSES_MAX => {
                Err(format!("at most {PASSES_MAX} iterations"))
            }
            Workload::MpiIoTest(w) => w.check(),
        }
    }
}

/// How the synthetic run aggregates and where its file lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    pub procs: u32,
    /// Aggregators, spread over the ranks as weft-mpiio does (`cb_nodes`).
    pub aggregators: u32,
    pub cb_buffer_bytes: u64,
    pub stripe_size_bytes: u64,
    pub stripe_count: u32,
}

impl Setup {
    /// `procs` processes, all aggregating, 16 MiB collective buffers (weft-mpiio's
    /// defaults), 64 KiB stripes over 4 io servers (the cluster's default).
    pub fn new(procs: u32) -> Self {
        Setup {
            procs,
            aggregators: procs,
            cb_buffer_bytes: 16 << 20,
            stripe_size_bytes: 65536,
            stripe_count: 4,
        }
    }
}

/// The requests each aggregator sends for one call: `(aggregator index, range)` in
/// round order (round by round, aggregator by aggregator).
pub fn two_phase(
    requests: &[Vec<(u64, u64)>],
    aggregators: u32,
    cb_buffer_bytes: u64,
) -> Vec<(u32, (u64, u64))> {
    let mut all: Vec<(u64, u64)> = requests.iter().flatten().filter(|r| r.1 > 0).copied().collect();
    let (Some(lo), Some(hi)) = (all.iter().map(|r| r.0).min(), all.iter().map(|r| r.0 + r.1).max()) else {
        return Vec::new();
    };
    // The union of all requests, merged.
    all.sort_unstable();
    let mut covered: Vec<(u64, u64)> = Vec::new();
    for (start, len) in all {
        let end = start + len;
        match covered.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => covered.push((start, end)),
        }
    }
    let n = u64::from(aggregators.max(1));
    let fd = (hi - lo).div_ceil(n).max(1);
    let window = cb_buffer_bytes.max(1);
    // Per aggregator, its windows' data extents.
    // Empty windows are rounds too (the engine runs them), so rounds line up.
    let mut per: Vec<Vec<Option<(u64, u64)>>> = Vec::new();
    for a in 0..n {
        let (d0, d1) = ((lo + a * fd).min(hi), (lo + (a + 1) * fd).min(hi));
        let mine: Vec<(u64, u64)> = covered
            .iter()
            .filter(|c| c.0 < d1 && c.1 > d0)
            .map(|c| (c.0.max(d0), c.1.min(d1)))
            .collect();
        let mut extents = Vec::new();
        if let (Some(first), Some(last)) = (mine.first(), mine.last()) {
            let mut w0 = first.0;
            while w0 < last.1 {
                let w1 = (w0 + window).min(last.1);
                let inside: Vec<&(u64, u64)> = mine.iter().filter(|c| c.0 < w1 && c.1 > w0).collect();
                extents.push(match (inside.first(), inside.last()) {
                    (Some(f), Some(l)) => {
                        let (s, e) = (f.0.max(w0), l.1.min(w1));
                        Some((s, e - s))
                    }
                    _ => None,
                });
                w0 = w1;
            }
        }
        per.push(extents);
    }
    let rounds = per.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::new();
    for m in 0..rounds {
        for (a, extents) in per.iter().enumerate() {
            if let Some(Some(e)) = extents.get(m) {
                out.push((a as u32, *e));
            }
        }
    }
    out
}

/// The rank of aggregator `index` of `count` spread over `procs` ranks (weft-mpiio's
/// `spread`).
fn aggregator_rank(index: u32, count: u32, procs: u32) -> u32 {
    (u64::from(index) * u64::from(procs) / u64::from(count.max(1))) as u32
}

/// One trace per process: `(file name, encoded trace)`.
pub fn generate(workload: &Workload, setup: &Setup) -> Result<Vec<(String, Vec<u8>)>, String> {
    workload.check(setup.procs)?;
    if setup.aggregators == 0 || setup.aggregators > setup.procs {
        return Err("aggregators must be in 1..=processes".into());
    }
    if setup.stripe_size_bytes == 0 || setup.stripe_count == 0 {
        return Err("stripe size and count must be at least 1".into());
    }
    let procs = setup.procs;
    let mut traces: Vec<(Header, Encoder, Vec<u8>)> = (0..procs)
        .map(|r| {
            let h = Header {
                rank: Some(r),
                pid: r,
                host: format!("synthetic-{}", workload.name()),
                start_unix_ns: 0,
            };
            let mut bytes = encode_header(&h);
            let mut e = Encoder::new(&h);
            e.record(
                &Record::File(FileRecord {
                    inode: INODE,
                    path: format!("/synthetic/{}", workload.name()),
                    stripe_size_bytes: setup.stripe_size_bytes,
                    stripe_count: setup.stripe_count,
                    target_kind: TargetKind::IoServers,
                    target_unit_bytes: setup.stripe_size_bytes,
                    target_count: setup.stripe_count,
                }),
                &mut bytes,
            );
            (h, e, bytes)
        })
        .collect();
    let p = u64::from(procs);
    for (k, requests) in workload.calls(procs).iter().enumerate() {
        let base = k as u64 * 1_000_000_000;
        let call = Some(CallId {
            handle: 1,
            seq: k as u64,
        });
        for (r, ranges) in requests.iter().enumerate() {
            let (_, e, bytes) = &mut traces[r];
            e.request(
                &RequestRecord {
                    time_ns: base + r as u64,
                    flags: Flags(Flags::COLLECTIVE),
                    inode: INODE,
                    rank: Some(r as u32),
                    call,
                    shape: Shape::Runs(runs::fold(ranges.iter().copied())),
                },
                bytes,
            );
        }
        for (i, (a, range)) in two_phase(requests, setup.aggregators, setup.cb_buffer_bytes)
            .into_iter()
            .enumerate()
        {
            let rank = aggregator_rank(a, setup.aggregators, procs) as usize;
            let (_, e, bytes) = &mut traces[rank];
            e.request(
                &RequestRecord {
                    time_ns: base + p + i as u64,
                    flags: Flags(Flags::COLLECTIVE | Flags::SENT),
                    inode: INODE,
                    rank: None,
                    call,
                    shape: Shape::Runs(runs::fold([range])),
                },
                bytes,
            );
        }
    }
    Ok(traces
        .into_iter()
        .map(|(h, _, bytes)| {
            (
                format!("rank-{:05}.{}.wtrace", h.rank.unwrap_or(0), workload.name()),
                bytes,
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refs::{build, RefKind, RefOptions};

    #[test]
    fn grids_and_tiles() {
        assert_eq!(grid(4), (2, 2));
        assert_eq!(grid(32), (8, 4));
        assert_eq!(grid(6), (3, 2));
        assert_eq!(grid(7), (7, 1));
        let t = Tile::default();
        assert_eq!(t.dims(4), (1920, 1920));
        let r3 = t.ranges(4, 3);
        assert_eq!(r3.len(), 1024);
        // Rank 3 is the bottom-right tile: row 896, column 896.
        assert_eq!(r3[0], ((896 * 1920 + 896) * 8, 8192));
        assert_eq!(r3[1].0 - r3[0].0, 1920 * 8);
    }

    #[test]
    fn two_phase_reads_each_windows_extent_once() {
        // Two ranks with a hole between them, two aggregators, 100-byte windows.
        let requests = vec![vec![(0, 50)], vec![(300, 100)]];
        let sent = two_phase(&requests, 2, 100);
        // Region [0, 400): domains [0, 200) and [200, 400).
        assert_eq!(sent, vec![(0, (0, 50)), (1, (300, 100))]);
        // One aggregator: its window [0, 100) holds 0..50, [100, 200) nothing (skipped
        // as empty extent), ... ; extent-wise: [0,50), then [300,400).
        let sent = two_phase(&requests, 1, 100);
        assert_eq!(sent, vec![(0, (0, 50)), (0, (300, 100))]);
        // Windows of 1000 bytes read the hole too.
        let sent = two_phase(&requests, 1, 1000);
        assert_eq!(sent, vec![(0, (0, 400))]);
        assert!(two_phase(&[vec![], vec![]], 2, 100).is_empty());
    }

    /// The generated traces decode and give the streams the workload implies: every
    /// rank's tile referenced each pass, and the aggregated stream the dataset once
    /// per pass.
    #[test]
    fn tile_traces_give_both_streams() {
        let tile = Tile {
            tile_x: 64,
            tile_y: 64,
            overlap_x: 16,
            overlap_y: 16,
            elem_bytes: 8,
            passes: 2,
        };
        let setup = Setup {
            stripe_size_bytes: 4096,
            cb_buffer_bytes: 8192,
            ..Setup::new(4)
        };
        let traces = generate(&Workload::Tile(tile), &setup).unwrap();
        assert_eq!(traces.len(), 4);
        let inputs: Vec<(String, &[u8])> = traces.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
        let refs = build(&inputs, &RefOptions::default()).unwrap();
        let file = tile.file_bytes(4);
        assert_eq!(file, 112 * 112 * 8);
        let blocks = file.div_ceil(4096);
        assert_eq!(refs.touched_blocks, blocks);
        // Aggregated: each pass reads the whole dataset in windows; a block split
        // between two domains or windows is referenced by each.
        let sent = two_phase(&Workload::Tile(tile).calls(4)[0], 4, 8192);
        assert_eq!(sent.iter().map(|s| s.1 .1).sum::<u64>(), file);
        let spanned: u64 = sent
            .iter()
            .map(|(_, (o, l))| (o + l - 1) / 4096 - o / 4096 + 1)
            .sum();
        assert_eq!(refs.aggregated.len() as u64, 2 * spanned);
        assert!(spanned > blocks);
        assert!(refs.aggregated.iter().all(|r| r.kind == RefKind::Asked));
        // Original: every tile's blocks, each pass; the overlaps make it more than the
        // dataset's blocks.
        let tile_blocks: u64 = (0..4)
            .map(|r| {
                let mut b: Vec<u64> = tile
                    .ranges(4, r)
                    .iter()
                    .flat_map(|&(o, l)| (o / 4096)..=((o + l - 1) / 4096))
                    .collect();
                b.dedup();
                b.len() as u64
            })
            .sum();
        assert_eq!(refs.original.len() as u64, 2 * tile_blocks);
        assert!(tile_blocks > blocks);
    }

    #[test]
    fn ior_and_mpiio_test_calls_cover_the_file() {
        let ior = Ior {
            block_bytes: 4096,
            transfer_bytes: 1024,
            segments: 2,
            iterations: 2,
        };
        let calls = ior.calls(4);
        // Per iteration: 2 segments x 4 transfers, then 32 transfers / 4 ranks.
        assert_eq!(calls.len(), 2 * (8 + 8));
        let mut bytes: Vec<(u64, u64)> = calls[..16].iter().flatten().flatten().copied().collect();
        bytes.sort_unstable();
        bytes.dedup();
        assert_eq!(bytes.iter().map(|r| r.1).sum::<u64>(), ior.file_bytes(4));
        let t = MpiIoTest {
            block_bytes: 4096,
            transfer_bytes: 1024,
            iterations: 4,
        };
        let calls = t.calls(4);
        assert_eq!(calls.len(), 16);
        // The second half of the iterations reads the data of rank r + 2.
        assert_eq!(calls[8][0], vec![(2 * 4096, 1024)]);
        assert_eq!(calls[0][0], vec![(0, 1024)]);
        assert!(generate(&Workload::MpiIoTest(t), &Setup::new(0)).is_err());
        let bad = MpiIoTest {
            transfer_bytes: 1000,
            ..t
        };
        assert!(generate(&Workload::MpiIoTest(bad), &Setup::new(4)).is_err());
    }
}

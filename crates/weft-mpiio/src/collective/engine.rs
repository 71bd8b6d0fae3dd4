//! The exchange engine shared by the two-phase family (ROMIO's ADIOI_Calc_my_req,
//! ADIOI_Calc_others_req and Exch_and_write / Read_and_exch, rewritten):
//!
//! 1. every rank cuts its pieces at the partition's owner boundaries and sends each
//!    aggregator the (offset, length) list of the pieces it owns (Alltoall of counts,
//!    Alltoallv of lists);
//! 2. each aggregator asks the partition for its windows over the extent of what it
//!    received, and plans every round: which bytes of each rank land where in the
//!    window buffer;
//! 3. rounds, as many as the busiest aggregator has windows: aggregators tell every
//!    rank how many bytes they exchange in each round (one Alltoallv for up to 64
//!    rounds: `RoundCounts`), the data moves (Alltoallv), and the aggregator writes
//!    its window (reading it first where the received data leaves holes:
//!    read-modify-write) or, for reads, reads it before: with large pieces straight
//!    into the send buffer and its own pieces into its own data ([`read`]).
//!
//! A rank consumes its stream for each aggregator in file order, so a count per round
//! is all it needs to know. The I/O of a window needs no MPI: the pipelined executor
//! runs it on a helper thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use weft_client::File;

use super::{Context, Request};
use crate::error::{ErrorClass, MpiioError, Result};
use crate::hints::{Hints, Switch};
use crate::mpi::{Comm, Op};

/// The file ranges one aggregator handles in one round, in increasing order; the window
/// buffer is their concatenation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub ranges: Vec<(u64, u64)>,
}

impl Window {
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.1).sum()
    }
}

/// A file-domain partition: who aggregates each byte and in which windows.
pub trait Domains: Sync {
    /// The aggregator (index into the context's aggregator list) owning file offset `x`,
    /// and the end of the run of bytes from `x` with that owner.
    fn owner(&self, x: u64) -> (usize, u64);
    /// The windows, in order, in which `aggregator` handles its bytes within `[lo, hi)`.
    /// Together they cover every byte of `[lo, hi)` the aggregator owns.
    fn windows(&self, aggregator: usize, lo: u64, hi: u64) -> Vec<Window>;
}

/// How a window's I/O is scheduled against the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Executor {
    /// Exchange, then I/O, round after round (ROMIO).
    Sequential,
    /// The I/O of windows on a helper thread, up to `depth` windows queued.
    Pipelined { depth: usize },
}

/// Most bytes one rank may exchange in one round (MPI counts are ints).
const ROUND_BYTES_MAX: u64 = i32::MAX as u64;

/// A rank's stream towards one aggregator: (offset in the rank's data, length) runs,
/// consumed in order by a count per round.
#[derive(Debug, Default)]
struct Stream {
    runs: Vec<(u64, u64)>,
    index: usize,
    within: u64,
}

impl Stream {
    /// Calls `visit(data_offset, len)` for the next `n` bytes.
    fn take(&mut self, mut n: u64, mut visit: impl FnMut(u64, u64)) -> Result<()> {
        while n > 0 {
            let Some(&(at, len)) = self.runs.get(self.index) else {
                return Err(MpiioError::new(
                    ErrorClass::Intern,
                    "collective exchange asked for more bytes than the request holds",
                ));
            };
            let step = (len - self.within).min(n);
            visit(at + self.within, step);
            self.within += step;
            n -= step;
            if self.within == len {
                self.index += 1;
                self.within = 0;
            }
        }
        Ok(())
    }
}

/// One aggregator's plan for one round: for each rank, where its bytes go in the window
/// buffer ((window position, length) in the rank's stream order).
#[derive(Debug, Default)]
pub struct RoundPlan {
    pub window: Option<Window>,
    pub per_rank: Vec<Vec<(u64, u64)>>,
}

impl RoundPlan {
    fn bytes_for(&self, rank: usize) -> u64 {
        self.per_rank.get(rank).map_or(0, |v| v.iter().map(|p| p.1).sum())
    }

    /// The merged (window position, length) intervals that receive data.
    fn covered(&self) -> Vec<(u64, u64)> {
        let mut all: Vec<(u64, u64)> = self.per_rank.iter().flatten().copied().collect();
        all.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (at, len) in all {
            match merged.last_mut() {
                Some(last) if at <= last.0 + last.1 => {
                    last.1 = last.1.max(at + len - last.0);
                }
                _ => merged.push((at, len)),
            }
        }
        merged
    }
}

/// What the setup phase yields on every rank.
struct Setup {
    /// This rank's stream towards each aggregator index.
    streams: Vec<Stream>,
    /// If this rank aggregates: its round plans.
    plans: Vec<RoundPlan>,
    rounds: usize,
    /// Aggregator index of each rank, if any.
    aggregator_of_rank: Vec<Option<usize>>,
    /// A local failure to plan: this rank still takes part in every round.
    error: Option<MpiioError>,
}

fn setup(ctx: &Context<'_>, request: &Request, domains: &dyn Domains) -> Result<Setup> {
    let comm = ctx.comm;
    let size = comm.size();
    let naggs = ctx.aggregators.len();
    let mut aggregator_of_rank = vec![None; size];
    for (i, &r) in ctx.aggregators.iter().enumerate() {
        aggregator_of_rank[r] = Some(i);
    }
    // 1. My pieces cut at owner boundaries.
    let mut my_lists: Vec<Vec<i64>> = vec![Vec::new(); naggs];
    let mut streams: Vec<Stream> = (0..naggs).map(|_| Stream::default()).collect();
    let mut data_at = 0u64;
    for &(offset, len) in request.pieces() {
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let (a, owner_end) = domains.owner(at);
            let step = owner_end.min(end) - at;
            my_lists[a].extend_from_slice(&[at as i64, step as i64]);
            streams[a].runs.push((data_at, step));
            data_at += step;
            at += step;
        }
    }
    // Counts of i64 values to each rank, then the lists.
    let mut send_counts = vec![0i64; size];
    for (a, list) in my_lists.iter().enumerate() {
        send_counts[ctx.aggregators[a]] = list.len() as i64;
    }
    let recv_counts = comm.alltoall(&send_counts)?;
    let mut send = Vec::new();
    let (mut scounts, mut sdispls) = (vec![0i32; size], vec![0i32; size]);
    for r in 0..size {
        sdispls[r] = to_i32(send.len() as u64)?;
        if let Some(a) = aggregator_of_rank[r] {
            for v in &my_lists[a] {
                send.extend_from_slice(&v.to_ne_bytes());
            }
        }
        scounts[r] = to_i32(send.len() as u64)? - sdispls[r];
    }
    let (mut rcounts, mut rdispls) = (vec![0i32; size], vec![0i32; size]);
    let mut total = 0u64;
    for r in 0..size {
        rdispls[r] = to_i32(total)?;
        rcounts[r] = to_i32(recv_counts[r] as u64 * 8)?;
        total += rcounts[r] as u64;
    }
    let mut recv = vec![0u8; total as usize];
    comm.alltoallv(&send, &scounts, &sdispls, &mut recv, &rcounts, &rdispls)?;
    drop(send);

    // 2. Plans, if I aggregate.
    let me = comm.rank();
    let mut plans = Vec::new();
    let mut error = None;
    if let Some(a) = aggregator_of_rank[me] {
        let others: Vec<Vec<(u64, u64)>> = (0..size)
            .map(|r| {
                let bytes = &recv[rdispls[r] as usize..][..rcounts[r] as usize];
                bytes
                    .chunks_exact(16)
                    .map(|c| {
                        let off = i64::from_ne_bytes(c[..8].try_into().unwrap()) as u64;
                        let len = i64::from_ne_bytes(c[8..].try_into().unwrap()) as u64;
                        (off, len)
                    })
                    .collect()
            })
            .collect();
        let lo = others.iter().filter_map(|v| v.first().map(|p| p.0)).min();
        let hi = others.iter().filter_map(|v| v.last().map(|p| p.0 + p.1)).max();
        if let (Some(lo), Some(hi)) = (lo, hi) {
            let windows = domains.windows(a, lo, hi);
            match plan_rounds(&others, windows) {
                Ok(p) => plans = p,
                Err(e) => error = Some(e),
            }
        }
    }
    let rounds = comm.allreduce_one(plans.len() as i64, Op::Max)? as usize;
    Ok(Setup {
        streams,
        plans,
        rounds,
        aggregator_of_rank,
        error,
    })
}

/// Walks every rank's pieces (sorted, all owned by this aggregator) through the
/// windows, splitting pieces at range ends.
fn plan_rounds(others: &[Vec<(u64, u64)>], windows: Vec<Window>) -> Result<Vec<RoundPlan>> {
    let size = others.len();
    let mut cursor = vec![(0usize, 0u64); size];
    let mut plans = Vec::with_capacity(windows.len());
    for window in windows {
        if window.bytes() > ROUND_BYTES_MAX {
            return Err(MpiioError::new(
                ErrorClass::Arg,
                "cb_buffer_size above 2 GiB is not supported",
            ));
        }
        let mut per_rank = vec![Vec::new(); size];
        let mut base = 0u64;
        for &(start, len) in &window.ranges {
            let end = start + len;
            for r in 0..size {
                let (ref mut index, ref mut within) = cursor[r];
                while let Some(&(off, plen)) = others[r].get(*index) {
                    let at = off + *within;
                    if at >= end {
                        break;
                    }
                    debug_assert!(at >= start, "piece before its window");
                    let step = (plen - *within).min(end - at);
                    let list: &mut Vec<(u64, u64)> = &mut per_rank[r];
                    match list.last_mut() {
                        Some(last) if last.0 + last.1 == base + (at - start) => last.1 += step,
                        _ => list.push((base + (at - start), step)),
                    }
                    *within += step;
                    if *within == plen {
                        *index += 1;
                        *within = 0;
                    }
                }
            }
            base += len;
        }
        plans.push(RoundPlan {
            window: Some(window),
            per_rank,
        });
    }
    for (r, &(index, _)) in cursor.iter().enumerate() {
        if index != others[r].len() {
            return Err(MpiioError::new(
                ErrorClass::Intern,
                "collective plan left pieces outside every window",
            ));
        }
    }
    Ok(plans)
}

fn to_i32(v: u64) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        MpiioError::new(
            ErrorClass::Arg,
            "one collective round moves more than 2 GiB to or from one rank: lower cb_buffer_size",
        )
    })
}

/// The counts and displacements of one Alltoallv from per-rank byte counts.
fn layout_of(counts: &[u64]) -> Result<(Vec<i32>, Vec<i32>, usize)> {
    let mut c = Vec::with_capacity(counts.len());
    let mut d = Vec::with_capacity(counts.len());
    let mut total = 0u64;
    for &n in counts {
        d.push(to_i32(total)?);
        c.push(to_i32(n)?);
        total += n;
    }
    to_i32(total)?;
    Ok((c, d, total as usize))
}

/// Takes the next `counts[r]` bytes of this rank's stream towards each aggregator rank
/// `r`, as (rank, runs of the rank's data), in rank order; adjacent runs merged.
fn take_spans(s: &mut Setup, counts: &[u64], errors: &mut FirstError) -> Vec<(usize, Vec<(u64, u64)>)> {
    let mut out = Vec::new();
    for (r, &n) in counts.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let a = s.aggregator_of_rank[r].expect("only aggregators exchange data");
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let result = s.streams[a].take(n, |at, len| match runs.last_mut() {
            Some(last) if last.0 + last.1 == at => last.1 += len,
            _ => runs.push((at, len)),
        });
        errors.keep(result);
        out.push((r, runs));
    }
    out
}

/// Where one side of an exchange takes its bytes from (or puts them): straight in the
/// rank's data when each peer's bytes are one run and the runs lie in rank order,
/// else a packed buffer.
enum SendPlan {
    Direct {
        base: usize,
        end: usize,
        displs: Vec<i32>,
    },
    Copy {
        displs: Vec<i32>,
        total: usize,
    },
}

impl SendPlan {
    fn new(counts: &[u64], spans: &[(usize, Vec<(u64, u64)>)]) -> Result<SendPlan> {
        let direct = spans
            .iter()
            .all(|(r, runs)| runs.len() == 1 && runs[0].1 == counts[*r])
            && spans.windows(2).all(|w| w[0].1[0].0 + w[0].1[0].1 <= w[1].1[0].0);
        if direct && !spans.is_empty() {
            let base = spans[0].1[0].0;
            let last = &spans[spans.len() - 1].1[0];
            let end = last.0 + last.1;
            if end - base <= ROUND_BYTES_MAX {
                let mut displs = vec![0i32; counts.len()];
                for (r, runs) in spans {
                    displs[*r] = (runs[0].0 - base) as i32;
                }
                return Ok(SendPlan::Direct {
                    base: base as usize,
                    end: end as usize,
                    displs,
                });
            }
        }
        let (_, displs, total) = layout_of(counts)?;
        Ok(SendPlan::Copy { displs, total })
    }
}

/// A window's write work, independent of MPI: the received bytes and where they go.
pub struct WriteJob {
    pub window: Window,
    pub received: Vec<u8>,
    /// (window position, position in `received`, length)
    pub placements: Vec<(u64, u64, u64)>,
    pub covered: Vec<(u64, u64)>,
}

/// Most requests one window has in flight at once (a stripe-aligned window is many
/// separate ranges).
const RANGES_INFLIGHT_MAX: usize = 8;

/// Runs `io(file_offset, slice)` for `items` ((file offset, buffer position, length),
/// disjoint in the buffer), up to [`RANGES_INFLIGHT_MAX`] at once.
fn for_each_range(
    buffer: &mut [u8],
    items: &mut [(u64, u64, u64)],
    io: impl Fn(u64, &mut [u8]) -> Result<()> + Sync,
) -> Result<()> {
    items.sort_unstable_by_key(|i| i.1);
    let mut slices = Vec::with_capacity(items.len());
    let mut rest = buffer;
    let mut consumed = 0u64;
    for &(offset, at, len) in items.iter() {
        let tail = std::mem::take(&mut rest).split_at_mut((at - consumed) as usize).1;
        let (mine, tail) = tail.split_at_mut(len as usize);
        slices.push((offset, mine));
        rest = tail;
        consumed = at + len;
    }
    if slices.len() <= 1 {
        return slices.into_iter().try_for_each(|(offset, s)| io(offset, s));
    }
    let threads = RANGES_INFLIGHT_MAX.min(slices.len());
    let mut groups: Vec<Vec<(u64, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, s) in slices.into_iter().enumerate() {
        groups[i % threads].push(s);
    }
    let io = &io;
    std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .map(|group| scope.spawn(move || group.into_iter().try_for_each(|(offset, s)| io(offset, s))))
            .collect();
        let mut first = Ok(());
        for h in handles {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(MpiioError::new(ErrorClass::Intern, "an I/O thread panicked")));
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// Reads `slice` from `offset`, zero-filling past the end of file; lowers `eof` to it.
fn read_range(file: &File, offset: u64, slice: &mut [u8], eof: &AtomicU64) -> Result<()> {
    let n = file.read_at(offset, slice)?;
    if n < slice.len() {
        slice[n..].fill(0);
        eof.fetch_min(offset + n as u64, Ordering::SeqCst);
    }
    Ok(())
}

/// The part of one range of a window that receives data.
struct DataExtent {
    file_offset: u64,
    /// Window position and length.
    at: u64,
    len: u64,
    /// The (start, end) window positions that receive data; more than one means holes.
    runs: Vec<(u64, u64)>,
}

/// The data extent of each range of `window` that receives data.
fn data_extents(window: &Window, covered: &[(u64, u64)]) -> Vec<DataExtent> {
    let mut out = Vec::new();
    let mut base = 0u64;
    for &(start, len) in &window.ranges {
        let end = base + len;
        let inside: Vec<(u64, u64)> = covered
            .iter()
            .filter(|c| c.0 < end && c.0 + c.1 > base)
            .map(|&(at, n)| (at.max(base), (at + n).min(end)))
            .collect();
        if let (Some(first), Some(last)) = (inside.first(), inside.last()) {
            let (dmin, dmax) = (first.0, last.1);
            out.push(DataExtent {
                file_offset: start + (dmin - base),
                at: dmin,
                len: dmax - dmin,
                runs: inside,
            });
        }
        base = end;
    }
    out
}

/// Writes a window: read-modify-write of each range's data extent where the received
/// data leaves holes (unless romio_ds_write is disabled: then each run is written on
/// its own), as ROMIO does.
pub fn write_window(file: &File, hints: &Hints, job: &WriteJob, buffer: &mut Vec<u8>) -> Result<()> {
    let total = job.window.bytes() as usize;
    if buffer.len() < total {
        buffer.resize(total, 0);
    }
    let mut holes_to_read = Vec::new();
    let mut writes = Vec::new();
    for extent in data_extents(&job.window, &job.covered) {
        let DataExtent {
            file_offset,
            at,
            len,
            runs: inside,
        } = extent;
        let holes = inside.len() > 1;
        if holes && hints.romio_ds_write == Switch::Disable {
            for &(a, b) in &inside {
                writes.push((file_offset + (a - at), a, b - a));
            }
        } else {
            if holes {
                holes_to_read.push((file_offset, at, len));
            }
            writes.push((file_offset, at, len));
        }
    }
    let eof = AtomicU64::new(u64::MAX);
    for_each_range(buffer, &mut holes_to_read, |offset, slice| {
        read_range(file, offset, slice, &eof)
    })?;
    for &(at, from, len) in &job.placements {
        buffer[at as usize..(at + len) as usize]
            .copy_from_slice(&job.received[from as usize..(from + len) as usize]);
    }
    writes.sort_unstable_by_key(|w| w.1);
    let adjacent = writes.windows(2).all(|w| w[0].1 + w[0].2 == w[1].1);
    if writes.len() > 1 && adjacent {
        // The ranges' bytes lie back to back in the buffer: one list write (each
        // server gets its ranges as one stream).
        let ranges: Vec<(u64, u64)> = writes.iter().map(|w| (w.0, w.2)).collect();
        let (first, last) = (writes[0], writes[writes.len() - 1]);
        file.write_list(&ranges, &buffer[first.1 as usize..(last.1 + last.2) as usize])?;
        return Ok(());
    }
    for_each_range(buffer, &mut writes, |offset, slice| {
        file.write_at(offset, slice)?;
        Ok(())
    })
}

/// Reads a window's data extents into `buffer`; returns the end of file if a read came
/// up short (bytes past it are zero).
pub fn read_window(file: &File, plan: &RoundPlan, buffer: &mut Vec<u8>) -> Result<u64> {
    let Some(window) = &plan.window else {
        return Ok(u64::MAX);
    };
    let total = window.bytes() as usize;
    if buffer.len() < total {
        buffer.resize(total, 0);
    }
    let mut reads: Vec<(u64, u64, u64)> = data_extents(window, &plan.covered())
        .into_iter()
        .map(|e| (e.file_offset, e.at, e.len))
        .collect();
    reads.sort_unstable_by_key(|r| r.1);
    let adjacent = reads.windows(2).all(|w| w[0].1 + w[0].2 == w[1].1);
    if reads.len() > 1 && adjacent {
        // Back to back in the buffer: one list read (each server streams its ranges).
        // It reads zeros past the end of file, so the size says where that is.
        let ranges: Vec<(u64, u64)> = reads.iter().map(|r| (r.0, r.2)).collect();
        let (first, last) = (reads[0], reads[reads.len() - 1]);
        file.read_list(&ranges, &mut buffer[first.1 as usize..(last.1 + last.2) as usize])?;
        let end = ranges.iter().map(|r| r.0 + r.1).max().unwrap_or(0);
        let size = file.size()?;
        return Ok(if size < end { size } else { u64::MAX });
    }
    let eof = AtomicU64::new(u64::MAX);
    for_each_range(buffer, &mut reads, |offset, slice| {
        read_range(file, offset, slice, &eof)
    })?;
    Ok(eof.into_inner())
}

/// The first error of a round, kept so that the exchange goes on (every rank must take
/// part in every round) and reported at the end.
#[derive(Default)]
struct FirstError(Option<MpiioError>);

impl FirstError {
    fn keep<T>(&mut self, r: Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.0.get_or_insert(e);
                None
            }
        }
    }
}

/// [`write()`] over the requests' region as `domains` partitions it; nothing to write
/// when every request is empty (no region, so no `domains`).
pub fn write_region<D: Domains>(
    ctx: &Context<'_>,
    request: &Request,
    data: &[u8],
    domains: Option<D>,
    executor: Executor,
) -> Result<()> {
    match domains {
        Some(d) => write(ctx, request, data, &d, executor),
        None => Ok(()),
    }
}

/// [`read`] over the requests' region as `domains` partitions it; when every request
/// is empty (no region, so no `domains`) nothing is read and no read came up short.
pub fn read_region<D: Domains>(
    ctx: &Context<'_>,
    request: &Request,
    data: &mut [u8],
    domains: Option<D>,
    executor: Executor,
) -> Result<u64> {
    match domains {
        Some(d) => read(ctx, request, data, &d, executor),
        None => Ok(u64::MAX),
    }
}

/// Collective write of `data` (the request's stream).
pub fn write(
    ctx: &Context<'_>,
    request: &Request,
    data: &[u8],
    domains: &dyn Domains,
    executor: Executor,
) -> Result<()> {
    let mut s = setup(ctx, request, domains)?;
    let comm = ctx.comm;
    let size = comm.size();
    let mut errors = FirstError(s.error.take());
    let depth = match executor {
        Executor::Sequential => 0,
        Executor::Pipelined { depth } => depth.max(1),
    };
    std::thread::scope(|scope| -> Result<()> {
        // The pipelined executor's I/O thread: takes jobs, writes them, hands back
        // the received buffers for reuse.
        let (job_tx, job_rx) = std::sync::mpsc::sync_channel::<WriteJob>(depth);
        let (spare_tx, spare_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let io_thread = (depth > 0).then(|| {
            let file = ctx.file;
            let hints = ctx.hints;
            scope.spawn(move || -> Result<()> {
                let mut buffer = Vec::new();
                let mut first = None;
                for job in job_rx {
                    if first.is_none() {
                        if let Err(e) = write_window(file, hints, &job, &mut buffer) {
                            first = Some(e);
                        }
                    }
                    let _ = spare_tx.send(job.received);
                }
                first.map_or(Ok(()), Err)
            })
        });
        let mut window_buffer = Vec::new();
        let mut spare_local: Option<Vec<u8>> = None;
        let plans = std::mem::take(&mut s.plans);
        let mut counts = RoundCounts::default();
        for m in 0..s.rounds {
            let plan = plans.get(m);
            let want: Vec<i64> = (0..size)
                .map(|r| plan.map_or(0, |p| p.bytes_for(r)) as i64)
                .collect();
            // What each aggregator asks of me, as spans of my data.
            let send_counts: Vec<u64> = counts.of_round(comm, &s, &plans, m)?.to_vec();
            let spans = take_spans(&mut s, &send_counts, &mut errors);
            let send_plan = SendPlan::new(&send_counts, &spans)?;
            let copied;
            let (send, sdispls): (&[u8], Vec<i32>) = match send_plan {
                // Every destination's bytes are one run of my data: send from it.
                SendPlan::Direct { base, end, displs } => (&data[base..end], displs),
                SendPlan::Copy { displs, total } => {
                    let mut buffer = Vec::with_capacity(total);
                    for (_, list) in &spans {
                        for &(at, len) in list {
                            buffer.extend_from_slice(&data[at as usize..(at + len) as usize]);
                        }
                    }
                    buffer.resize(total, 0);
                    copied = buffer;
                    (&copied, displs)
                }
            };
            let scounts: Vec<i32> = send_counts.iter().map(|&n| n as i32).collect();
            let recv_counts: Vec<u64> = want.iter().map(|&n| n as u64).collect();
            let (rcounts, rdispls, rtotal) = layout_of(&recv_counts)?;
            let mut received = spare_rx
                .try_recv()
                .ok()
                .or_else(|| spare_local.take())
                .unwrap_or_default();
            received.resize(rtotal, 0);
            comm.alltoallv(send, &scounts, &sdispls, &mut received, &rcounts, &rdispls)?;
            let Some(plan) = plan else { continue };
            let Some(window) = plan.window.clone() else {
                continue;
            };
            let mut placements = Vec::new();
            for (r, list) in plan.per_rank.iter().enumerate() {
                let mut from = rdispls[r] as u64;
                for &(at, len) in list {
                    placements.push((at, from, len));
                    from += len;
                }
            }
            let job = WriteJob {
                window,
                received,
                placements,
                covered: plan.covered(),
            };
            if depth > 0 {
                if job_tx.send(job).is_err() {
                    // The I/O thread died: keep exchanging (other ranks wait for this
                    // one), report at the end.
                    errors.keep::<()>(Err(MpiioError::new(
                        ErrorClass::Intern,
                        "the I/O thread stopped early",
                    )));
                }
            } else {
                if errors.0.is_none() {
                    let r = write_window(ctx.file, ctx.hints, &job, &mut window_buffer);
                    errors.keep(r);
                }
                spare_local = Some(job.received);
            }
        }
        drop(job_tx);
        if let Some(t) = io_thread {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(MpiioError::new(ErrorClass::Intern, "the I/O thread panicked")));
            errors.keep(r);
        }
        Ok(())
    })?;
    errors.0.map_or(Ok(()), Err)
}

/// Rounds whose byte counts one exchange tells every rank: the counts of a round are
/// known to its aggregator from the plan, so they go out in batches rather than in an
/// Alltoall per round (a collective per round costs a scheduling of every process).
const COUNT_ROUNDS_PER_EXCHANGE: usize = 64;

/// The bytes each aggregator moves with this rank, round by round, learnt a batch of
/// rounds at a time.
#[derive(Default)]
struct RoundCounts {
    /// First round held.
    first: usize,
    /// Rounds held.
    held: usize,
    /// `[round - first][rank]`: bytes rank (an aggregator) moves with this rank.
    counts: Vec<u64>,
}

impl RoundCounts {
    /// Bytes each rank moves with this one in round `m`; the first round of a batch
    /// exchanges the batch (every rank calls this for every round, in order).
    fn of_round(&mut self, comm: &Comm, s: &Setup, plans: &[RoundPlan], m: usize) -> Result<&[u64]> {
        let size = comm.size();
        if m >= self.first + self.held {
            let batch = COUNT_ROUNDS_PER_EXCHANGE.min(s.rounds - m);
            let aggregating = s.aggregator_of_rank[comm.rank()].is_some();
            let mut send = Vec::new();
            let (mut scounts, mut sdispls) = (vec![0i32; size], vec![0i32; size]);
            for r in 0..size {
                sdispls[r] = to_i32(send.len() as u64)?;
                if aggregating {
                    for k in m..m + batch {
                        let n = plans.get(k).map_or(0, |p| p.bytes_for(r)) as i64;
                        send.extend_from_slice(&n.to_ne_bytes());
                    }
                }
                scounts[r] = to_i32(send.len() as u64)? - sdispls[r];
            }
            let from: Vec<u64> = (0..size)
                .map(|r| {
                    if s.aggregator_of_rank[r].is_some() {
                        batch as u64 * 8
                    } else {
                        0
                    }
                })
                .collect();
            let (rcounts, rdispls, rtotal) = layout_of(&from)?;
            let mut recv = vec![0u8; rtotal];
            comm.alltoallv(&send, &scounts, &sdispls, &mut recv, &rcounts, &rdispls)?;
            self.counts.clear();
            self.counts.resize(batch * size, 0);
            for r in 0..size {
                let mine = &recv[rdispls[r] as usize..][..rcounts[r] as usize];
                for (k, v) in mine.chunks_exact(8).enumerate() {
                    self.counts[k * size + r] = i64::from_ne_bytes(v.try_into().unwrap()) as u64;
                }
            }
            self.first = m;
            self.held = batch;
        }
        Ok(&self.counts[(m - self.first) * size..][..size])
    }
}

/// Average bytes per piece from which an aggregator reads each rank's pieces straight
/// into the exchange's send buffer (and its own into its own data) instead of reading
/// the window and packing it: no window buffer and no copy, for a few more requests.
const DIRECT_PIECE_BYTES_MIN: u64 = 32 << 10;

/// Whether `plan`'s pieces average [`DIRECT_PIECE_BYTES_MIN`] or more.
fn pieces_are_large(plan: &RoundPlan) -> bool {
    let pieces: usize = plan.per_rank.iter().map(Vec::len).sum();
    let bytes: u64 = plan.per_rank.iter().flatten().map(|p| p.1).sum();
    pieces > 0 && bytes / pieces as u64 >= DIRECT_PIECE_BYTES_MIN
}

/// The file segments of window positions `[at, at + len)`: (file offset, length).
fn window_segments(window: &Window, mut at: u64, mut len: u64, out: &mut impl FnMut(u64, u64)) {
    let mut base = 0u64;
    for &(start, n) in &window.ranges {
        if len == 0 {
            return;
        }
        if at < base + n {
            let step = (base + n - at).min(len);
            out(start + (at - base), step);
            at += step;
            len -= step;
        }
        base += n;
    }
}

/// Reads `plan`'s pieces straight where they go: each other rank's into `send` at its
/// displacement (rank order, its stream order), this rank's own into `data` along the
/// runs `own` of its stream (with `me` out of range, every rank's go into `send`).
/// Returns the end of file if a read came up short.
fn read_pieces_direct(
    file: &File,
    plan: &RoundPlan,
    me: usize,
    send: &mut [u8],
    sdispls: &[i32],
    data: &mut [u8],
    own: &[(u64, u64)],
) -> Result<u64> {
    let Some(window) = &plan.window else {
        return Ok(u64::MAX);
    };
    let eof = AtomicU64::new(u64::MAX);
    let mut items: Vec<(u64, u64, u64)> = Vec::new();
    for (r, list) in plan.per_rank.iter().enumerate() {
        if r == me {
            continue;
        }
        let mut pos = sdispls[r] as u64;
        for &(at, len) in list {
            window_segments(window, at, len, &mut |offset, n| {
                items.push((offset, pos, n));
                pos += n;
            });
        }
    }
    for_each_range(send, &mut items, |offset, slice| {
        read_range(file, offset, slice, &eof)
    })?;
    // My own bytes: file segments in stream order, laid along my data runs.
    let mut mine: Vec<(u64, u64, u64)> = Vec::new();
    let mut runs = own.iter().copied();
    let mut run = runs.next();
    for &(at, len) in plan.per_rank.get(me).map_or(&[][..], |v| &v[..]) {
        window_segments(window, at, len, &mut |mut offset, mut n| {
            while n > 0 {
                let Some((data_at, left)) = run.as_mut() else {
                    return;
                };
                let step = n.min(*left);
                mine.push((offset, *data_at, step));
                *data_at += step;
                *left -= step;
                offset += step;
                n -= step;
                if *left == 0 {
                    run = runs.next();
                }
            }
        });
    }
    for_each_range(data, &mut mine, |offset, slice| {
        read_range(file, offset, slice, &eof)
    })?;
    Ok(eof.into_inner())
}

/// One round's exchange of a read on this rank: sends `send` as `(counts,
/// displacements)` say and receives `take[r]` bytes from each rank r into its data,
/// straight when each aggregator's bytes are one run of it (else through `received`).
#[allow(clippy::too_many_arguments)]
fn exchange_read_round(
    comm: &Comm,
    s: &mut Setup,
    errors: &mut FirstError,
    data: &mut [u8],
    send: &[u8],
    (scounts, sdispls): (&[i32], &[i32]),
    take: &[u64],
    received: &mut Vec<u8>,
) -> Result<()> {
    let rcounts: Vec<i32> = take.iter().map(|&n| to_i32(n)).collect::<Result<_>>()?;
    let spans = take_spans(s, take, errors);
    match SendPlan::new(take, &spans)? {
        // Every aggregator's bytes are one run of my data: receive into it.
        SendPlan::Direct { base, end, displs } => {
            comm.alltoallv(send, scounts, sdispls, &mut data[base..end], &rcounts, &displs)?;
        }
        SendPlan::Copy { displs, total } => {
            if received.len() < total {
                received.resize(total, 0);
            }
            comm.alltoallv(send, scounts, sdispls, &mut received[..total], &rcounts, &displs)?;
            let mut from = 0usize;
            for (_, list) in &spans {
                for &(at, len) in list {
                    data[at as usize..(at + len) as usize]
                        .copy_from_slice(&received[from..from + len as usize]);
                    from += len as usize;
                }
            }
        }
    }
    Ok(())
}

/// Collective read into `data` (the request's stream); returns the agreed end of file
/// (u64::MAX when no read came up short).
///
/// Each round: the aggregator reads its window, gives every rank its bytes (Alltoallv)
/// and every rank receives straight into its data when each aggregator's bytes are one
/// run of it. With the sequential executor and pieces of `DIRECT_PIECE_BYTES_MIN` or
/// more, the aggregator reads each rank's pieces straight into the send buffer and its
/// own straight into its data (no window buffer, no packing, no exchange with itself);
/// with the pipelined executor its I/O thread reads every rank's large pieces straight
/// into the send buffer's layout, a round ahead. Buffers live across rounds; the
/// rounds' counts come in batches (`RoundCounts`).
pub fn read(
    ctx: &Context<'_>,
    request: &Request,
    data: &mut [u8],
    domains: &dyn Domains,
    executor: Executor,
) -> Result<u64> {
    let mut s = setup(ctx, request, domains)?;
    let comm = ctx.comm;
    let size = comm.size();
    let me = comm.rank();
    let mut errors = FirstError(s.error.take());
    let mut eof = u64::MAX;
    let depth = match executor {
        Executor::Sequential => 0,
        Executor::Pipelined { depth } => depth.max(1),
    };
    let plans = Arc::new(std::mem::take(&mut s.plans));
    let mut counts = RoundCounts::default();
    std::thread::scope(|scope| -> Result<()> {
        // The pipelined executor's I/O thread reads windows ahead, up to `depth`.
        // (end of file or error, buffer, whether the buffer is the send buffer already)
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<(Result<u64>, Vec<u8>, bool)>(depth);
        let (spare_tx, spare_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let io_thread = (depth > 0 && !plans.is_empty()).then(|| {
            let file = ctx.file;
            let plans = plans.clone();
            scope.spawn(move || {
                for plan in plans.iter() {
                    let mut buffer = spare_rx.try_recv().unwrap_or_default();
                    // Large pieces are read straight into the send buffer's layout
                    // (every rank's, this one's too): no window and no packing.
                    let give: Vec<u64> = (0..size).map(|r| plan.bytes_for(r)).collect();
                    let (r, packed) = match layout_of(&give) {
                        Ok((_, sdispls, total)) if pieces_are_large(plan) => {
                            if buffer.len() < total {
                                buffer.resize(total, 0);
                            }
                            let r = read_pieces_direct(
                                file,
                                plan,
                                usize::MAX,
                                &mut buffer[..total],
                                &sdispls,
                                &mut [],
                                &[],
                            );
                            (r, true)
                        }
                        _ => (read_window(file, plan, &mut buffer), false),
                    };
                    if ready_tx.send((r, buffer, packed)).is_err() {
                        break;
                    }
                }
            })
        });
        // Kept across rounds (grown, never shrunk): no allocation and no page faults
        // per round.
        let mut window_buffer = Vec::new();
        let mut send: Vec<u8> = Vec::new();
        let mut received: Vec<u8> = Vec::new();
        for m in 0..s.rounds {
            let plan = plans.get(m);
            let recv_counts: Vec<u64> = counts.of_round(comm, &s, &plans, m)?.to_vec();
            let direct = depth == 0 && plan.is_some_and(pieces_are_large);
            let mut give: Vec<u64> = (0..size).map(|r| plan.map_or(0, |p| p.bytes_for(r))).collect();
            let mut take = recv_counts.clone();
            if direct {
                // My own bytes never enter the exchange.
                give[me] = 0;
                take[me] = 0;
            }
            let (scounts, sdispls, stotal) = layout_of(&give)?;
            if send.len() < stotal {
                send.resize(stotal, 0);
            }
            if direct {
                let plan = plan.expect("direct rounds have a plan");
                let a = s.aggregator_of_rank[me].expect("a rank with a plan aggregates");
                let mut own: Vec<(u64, u64)> = Vec::new();
                let result = s.streams[a].take(recv_counts[me], |at, len| own.push((at, len)));
                errors.keep(result);
                if errors.0.is_none() {
                    let r = read_pieces_direct(ctx.file, plan, me, &mut send[..stotal], &sdispls, data, &own);
                    if let Some(e) = errors.keep(r) {
                        eof = eof.min(e);
                    }
                }
            } else if let Some(plan) = plan {
                let (r, b, packed) = if depth > 0 {
                    // A dead I/O thread must not make this rank leave the exchange:
                    // carry on with zeros and report the error at the end.
                    ready_rx.recv().unwrap_or_else(|_| {
                        let bytes = plan.window.as_ref().map_or(0, Window::bytes) as usize;
                        (
                            Err(MpiioError::new(
                                ErrorClass::Intern,
                                "the I/O thread stopped early",
                            )),
                            vec![0; bytes],
                            false,
                        )
                    })
                } else {
                    let mut b = std::mem::take(&mut window_buffer);
                    let r = if errors.0.is_none() {
                        read_window(ctx.file, plan, &mut b)
                    } else {
                        Ok(u64::MAX)
                    };
                    (r, b, false)
                };
                if let Some(e) = errors.keep(r) {
                    eof = eof.min(e);
                }
                if packed {
                    // The I/O thread laid the bytes out as the exchange sends them.
                    exchange_read_round(
                        comm,
                        &mut s,
                        &mut errors,
                        data,
                        &b[..stotal],
                        (&scounts, &sdispls),
                        &take,
                        &mut received,
                    )?;
                    let _ = spare_tx.send(b);
                    continue;
                }
                let mut at = 0usize;
                for list in &plan.per_rank {
                    for &(from, len) in list {
                        let len = len as usize;
                        send[at..at + len].copy_from_slice(&b[from as usize..][..len]);
                        at += len;
                    }
                }
                if depth > 0 {
                    let _ = spare_tx.send(b);
                } else {
                    window_buffer = b;
                }
            }
            exchange_read_round(
                comm,
                &mut s,
                &mut errors,
                data,
                &send[..stotal],
                (&scounts, &sdispls),
                &take,
                &mut received,
            )?;
        }
        if let Some(t) = io_thread {
            if t.join().is_err() {
                errors.keep::<()>(Err(MpiioError::new(
                    ErrorClass::Intern,
                    "the I/O thread panicked",
                )));
            }
        }
        Ok(())
    })?;
    let eof = comm.allreduce_one(eof.min(i64::MAX as u64) as i64, Op::Min)? as u64;
    errors.0.map_or(Ok(eof), Err)
}

/// Agrees on an error among all ranks of `comm`: every rank gets the largest error
/// class any rank had (its own message if it failed, else a note naming the class).
pub fn agree<T>(comm: &Comm, local: Result<T>) -> Result<T> {
    let mine = local.as_ref().err().map_or(0, |e| e.class as i64);
    let worst = comm.allreduce_one(mine, Op::Max)?;
    settle(local, worst)
}

/// The agreed outcome of `local` when `worst` is the largest error class of all ranks
/// (0: none failed): a rank that failed with that class keeps its own error and
/// message, every other rank gets the class.
pub fn settle<T>(local: Result<T>, worst: i64) -> Result<T> {
    if worst == 0 {
        return local;
    }
    match local {
        Err(e) if e.class as i64 == worst => Err(e),
        _ => Err(MpiioError::new(
            ErrorClass::from_code(worst as i32).unwrap_or(ErrorClass::Other),
            "the collective call failed on another rank",
        )),
    }
}

#[cfg(test)]
mod tests;

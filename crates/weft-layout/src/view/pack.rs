//! Pack and unpack between a contiguous buffer and the data bytes of a memory-side
//! datatype (which may be non-monotonic: bytes come in type order). One recursive walk
//! serves both directions; regular strides reach the visitor as a single "strided" call
//! whose inner loop copies fixed-size blocks, so small pieces cost little more than
//! their bytes. Bounds are checked once, up front, from the type's true bounds.

use super::datatype::{Datatype, Kind, Vector};
use super::ViewError;

/// Copies bytes `[stream_offset, stream_offset + packed.len())` of the data stream of
/// `count` consecutive copies of `datatype` (copy `i` at `i * extent` from
/// `memory[0]`) into `packed`. The buffer must hold every data byte of the `count`
/// copies.
pub fn pack(
    datatype: &Datatype,
    count: u64,
    memory: &[u8],
    stream_offset: u64,
    packed: &mut [u8],
) -> Result<(), ViewError> {
    check_memory(datatype, count, memory.len(), stream_offset, packed.len() as u64)?;
    if packed.is_empty() {
        return Ok(());
    }
    let mut gather = Gather {
        memory,
        packed,
        cursor: 0,
    };
    walk_copies(
        datatype,
        0,
        datatype.extent(),
        stream_offset,
        gather.packed.len() as u64,
        &mut gather,
    );
    debug_assert_eq!(gather.cursor, gather.packed.len());
    Ok(())
}

/// The inverse of [`pack`]: scatters `packed` into the data bytes
/// `[stream_offset, stream_offset + packed.len())` of `count` copies of `datatype` in
/// `memory`.
pub fn unpack(
    datatype: &Datatype,
    count: u64,
    packed: &[u8],
    stream_offset: u64,
    memory: &mut [u8],
) -> Result<(), ViewError> {
    check_memory(datatype, count, memory.len(), stream_offset, packed.len() as u64)?;
    if packed.is_empty() {
        return Ok(());
    }
    let mut scatter = Scatter {
        memory,
        packed,
        cursor: 0,
    };
    walk_copies(
        datatype,
        0,
        datatype.extent(),
        stream_offset,
        packed.len() as u64,
        &mut scatter,
    );
    debug_assert_eq!(scatter.cursor, packed.len());
    Ok(())
}

/// Copies data bytes `[skip, skip + packed.len())` of consecutive copies of `datatype`
/// into `packed`, copy `c` at `base + c * stride` in `memory`: pack with the copies
/// placed anywhere (a window of a file, for `View::gather_window`). The caller checked
/// that every byte visited lies inside `memory`.
pub(super) fn gather_at(
    datatype: &Datatype,
    base: i64,
    stride: i64,
    skip: u64,
    memory: &[u8],
    packed: &mut [u8],
) {
    if packed.is_empty() {
        return;
    }
    let take = packed.len() as u64;
    let mut gather = Gather {
        memory,
        packed,
        cursor: 0,
    };
    walk_copies(datatype, base, stride, skip, take, &mut gather);
    debug_assert_eq!(gather.cursor, gather.packed.len());
}

/// The inverse of [`gather_at`].
pub(super) fn scatter_at(
    datatype: &Datatype,
    base: i64,
    stride: i64,
    skip: u64,
    packed: &[u8],
    memory: &mut [u8],
) {
    if packed.is_empty() {
        return;
    }
    let mut scatter = Scatter {
        memory,
        packed,
        cursor: 0,
    };
    walk_copies(datatype, base, stride, skip, packed.len() as u64, &mut scatter);
    debug_assert_eq!(scatter.cursor, packed.len());
}

impl Datatype {
    /// Calls `visit(offset, len)` for the runs of data bytes of `count` consecutive
    /// copies of this type (copy `i` at `i * extent`), in type order. Neighbouring runs
    /// may touch; nothing is allocated.
    pub fn for_each_run(&self, count: u64, visit: impl FnMut(i64, u64)) {
        let total = u128::from(count) * u128::from(self.size_bytes());
        if total == 0 {
            return;
        }
        let mut visitor = Runs(visit);
        let take = u64::try_from(total).unwrap_or(u64::MAX);
        walk_copies(self, 0, self.extent(), 0, take, &mut visitor);
    }
}

/// Checks the stream range and that every data byte of `count` copies lies inside a
/// buffer of `buffer_len` bytes, so the walk's slice accesses can never fail.
fn check_memory(
    datatype: &Datatype,
    count: u64,
    buffer_len: usize,
    stream_offset: u64,
    len: u64,
) -> Result<(), ViewError> {
    let stream_len = u128::from(count) * u128::from(datatype.size_bytes());
    if u128::from(stream_offset) + u128::from(len) > stream_len {
        return Err(ViewError::StreamRange {
            offset: stream_offset,
            len,
            stream_len,
        });
    }
    if len == 0 {
        return Ok(());
    }
    let lowest = i128::from(datatype.true_lb());
    let highest = (i128::from(count) - 1) * i128::from(datatype.extent()) + i128::from(datatype.true_ub());
    if lowest < 0 || highest > buffer_len as i128 {
        return Err(ViewError::OutOfBounds {
            lowest,
            highest,
            buffer_len,
        });
    }
    Ok(())
}

/// Receives the runs of a walk in type order.
trait Visitor {
    fn run(&mut self, at: i64, len: u64);

    /// `count` runs of `len` bytes, the first at `at`, each `stride` after the previous.
    fn strided(&mut self, at: i64, len: u64, stride: i64, count: u64) {
        let mut position = at;
        for _ in 0..count {
            self.run(position, len);
            position += stride;
        }
    }
}

struct Runs<F>(F);

impl<F: FnMut(i64, u64)> Visitor for Runs<F> {
    fn run(&mut self, at: i64, len: u64) {
        (self.0)(at, len)
    }
}

struct Gather<'m, 'p> {
    memory: &'m [u8],
    packed: &'p mut [u8],
    cursor: usize,
}

impl Visitor for Gather<'_, '_> {
    #[inline]
    fn run(&mut self, at: i64, len: u64) {
        let (at, len) = (at as usize, len as usize);
        self.packed[self.cursor..self.cursor + len].copy_from_slice(&self.memory[at..at + len]);
        self.cursor += len;
    }

    #[inline]
    fn strided(&mut self, at: i64, len: u64, stride: i64, count: u64) {
        let bytes = (len * count) as usize;
        let out = &mut self.packed[self.cursor..self.cursor + bytes];
        self.cursor += bytes;
        let memory = self.memory;
        // Fixed sizes let the compiler turn each copy into a few register moves.
        match len {
            8 => gather_fixed::<8>(memory, out, at, stride),
            16 => gather_fixed::<16>(memory, out, at, stride),
            32 => gather_fixed::<32>(memory, out, at, stride),
            64 => gather_fixed::<64>(memory, out, at, stride),
            _ => {
                let len = len as usize;
                let mut position = at;
                for chunk in out.chunks_exact_mut(len) {
                    let p = position as usize;
                    chunk.copy_from_slice(&memory[p..p + len]);
                    position += stride;
                }
            }
        }
    }
}

#[inline]
fn gather_fixed<const N: usize>(memory: &[u8], out: &mut [u8], at: i64, stride: i64) {
    let mut position = at;
    for chunk in out.chunks_exact_mut(N) {
        let p = position as usize;
        let source: &[u8; N] = memory[p..p + N].try_into().expect("slice of N bytes");
        let target: &mut [u8; N] = chunk.try_into().expect("chunk of N bytes");
        *target = *source;
        position += stride;
    }
}

struct Scatter<'m, 'p> {
    memory: &'m mut [u8],
    packed: &'p [u8],
    cursor: usize,
}

impl Visitor for Scatter<'_, '_> {
    #[inline]
    fn run(&mut self, at: i64, len: u64) {
        let (at, len) = (at as usize, len as usize);
        self.memory[at..at + len].copy_from_slice(&self.packed[self.cursor..self.cursor + len]);
        self.cursor += len;
    }

    #[inline]
    fn strided(&mut self, at: i64, len: u64, stride: i64, count: u64) {
        let bytes = (len * count) as usize;
        let input = &self.packed[self.cursor..self.cursor + bytes];
        self.cursor += bytes;
        let memory = &mut *self.memory;
        match len {
            8 => scatter_fixed::<8>(input, memory, at, stride),
            16 => scatter_fixed::<16>(input, memory, at, stride),
            32 => scatter_fixed::<32>(input, memory, at, stride),
            64 => scatter_fixed::<64>(input, memory, at, stride),
            _ => {
                let len = len as usize;
                let mut position = at;
                for chunk in input.chunks_exact(len) {
                    let p = position as usize;
                    memory[p..p + len].copy_from_slice(chunk);
                    position += stride;
                }
            }
        }
    }
}

#[inline]
fn scatter_fixed<const N: usize>(input: &[u8], memory: &mut [u8], at: i64, stride: i64) {
    let mut position = at;
    for chunk in input.chunks_exact(N) {
        let p = position as usize;
        let source: &[u8; N] = chunk.try_into().expect("chunk of N bytes");
        let target: &mut [u8; N] = (&mut memory[p..p + N]).try_into().expect("slice of N bytes");
        *target = *source;
        position += stride;
    }
}

/// Visits data bytes `[skip, skip + take)` of consecutive copies of `datatype`, copy
/// `c` at `base + c * stride`.
fn walk_copies<V: Visitor>(
    datatype: &Datatype,
    base: i64,
    stride: i64,
    skip: u64,
    take: u64,
    visitor: &mut V,
) {
    if let Some(run_displacement) = datatype.run_displacement() {
        walk_runs(
            base + run_displacement,
            datatype.size_bytes(),
            stride,
            skip,
            take,
            visitor,
        );
        return;
    }
    let size = datatype.size_bytes();
    let mut copy = skip / size;
    let mut skip = skip % size;
    let mut take = take;
    while take > 0 {
        let n = take.min(size - skip);
        walk(datatype, base + copy as i64 * stride, skip, n, visitor);
        take -= n;
        skip = 0;
        copy += 1;
    }
}

/// Visits data bytes `[skip, skip + take)` of runs of `run_len` bytes, run `c` at
/// `base + c * stride`: a partial first run, one strided call, a partial last run.
#[inline]
fn walk_runs<V: Visitor>(base: i64, run_len: u64, stride: i64, skip: u64, mut take: u64, visitor: &mut V) {
    if stride == run_len as i64 {
        visitor.run(base + skip as i64, take);
        return;
    }
    let mut copy = skip / run_len;
    let inside = skip % run_len;
    if inside > 0 || take < run_len {
        let n = take.min(run_len - inside);
        visitor.run(base + copy as i64 * stride + inside as i64, n);
        take -= n;
        copy += 1;
    }
    let full = take / run_len;
    if full > 0 {
        visitor.strided(base + copy as i64 * stride, run_len, stride, full);
        copy += full;
        take -= full * run_len;
    }
    if take > 0 {
        visitor.run(base + copy as i64 * stride, take);
    }
}

/// Visits data bytes `[skip, skip + take)` of one copy of an inner node at `origin`.
fn walk<V: Visitor>(node: &Datatype, origin: i64, skip: u64, take: u64, visitor: &mut V) {
    match &node.kind {
        Kind::Bytes { displacement } => visitor.run(origin + displacement + skip as i64, take),
        Kind::Vector(vector) => walk_vector(vector, origin, skip, take, visitor),
        Kind::Blocks(blocks) => {
            let mut number = blocks.partition_point(|b| b.data_before <= skip) - 1;
            let mut skip = skip - blocks[number].data_before;
            let mut take = take;
            while take > 0 {
                let block = &blocks[number];
                let block_bytes = block.count * block.child.size_bytes();
                let n = take.min(block_bytes - skip);
                walk_copies(
                    &block.child,
                    origin + block.displacement,
                    block.child.extent(),
                    skip,
                    n,
                    visitor,
                );
                take -= n;
                skip = 0;
                number += 1;
            }
        }
    }
}

fn walk_vector<V: Visitor>(vector: &Vector, origin: i64, mut skip: u64, mut take: u64, visitor: &mut V) {
    let child = &*vector.child;
    let size = child.size_bytes();
    let base = origin + vector.displacement;
    if let Some(run_displacement) = child.run_displacement() {
        if vector.element_stride == size as i64 {
            // Each block is one run; blocks are block_stride apart, the last may be short.
            let base = base + run_displacement;
            let block_bytes = vector.block_len * size;
            let full_blocks = vector.count / vector.block_len;
            let full_bytes = full_blocks * block_bytes;
            if skip < full_bytes {
                let n = take.min(full_bytes - skip);
                walk_runs(base, block_bytes, vector.block_stride, skip, n, visitor);
                take -= n;
                skip = 0;
            } else {
                skip -= full_bytes;
            }
            if take > 0 {
                let tail = base + full_blocks as i64 * vector.block_stride;
                visitor.run(tail + skip as i64, take);
            }
            return;
        }
    }
    let block_bytes = vector.block_len * size;
    let mut block = skip / block_bytes;
    skip %= block_bytes;
    while take > 0 {
        let copies = vector.block_len.min(vector.count - block * vector.block_len);
        let n = take.min(copies * size - skip);
        let block_base = base + block as i64 * vector.block_stride;
        walk_copies(child, block_base, vector.element_stride, skip, n, visitor);
        take -= n;
        skip = 0;
        block += 1;
    }
}

//! Independent I/O of a request (a list of file pieces): one call for a contiguous
//! request; for a noncontiguous read of small pieces, data sieving as ROMIO does (read
//! `ind_rd_buffer_size` bytes spanning many pieces and copy the pieces out) unless
//! romio_ds_read is disabled; large pieces, and the pieces of noncontiguous writes
//! (read-modify-write without locks could lose other processes' writes), go piece by
//! piece, several at once.
//! (To be replaced by Weft's list/view I/O once the client offers it.)

use weft_client::File;

use std::sync::atomic::AtomicU64;

use super::{engine, Context, Method, Request};
use crate::error::Result;
use crate::hints::{Hints, Switch};

/// Pieces at least this long (on average) are read one by one rather than sieved:
/// sieving would read the gaps between them for nothing.
const SIEVE_PIECE_BYTES_MAX: u64 = 64 << 10;

/// (file offset, data position, length) of each piece.
fn items(request: &Request) -> Vec<(u64, u64, u64)> {
    let mut at = 0u64;
    request
        .pieces
        .iter()
        .map(|&(offset, len)| {
            let item = (offset, at, len);
            at += len;
            item
        })
        .collect()
}

pub fn write(file: &File, request: &Request, data: &[u8]) -> Result<()> {
    engine::for_each_item(&items(request), |&(offset, at, len)| {
        file.write_at(offset, &data[at as usize..(at + len) as usize])?;
        Ok(())
    })
}

/// Reads the request; returns the bytes read before the end of file.
pub fn read(file: &File, hints: &Hints, request: &Request, data: &mut [u8]) -> Result<u64> {
    let pieces = &request.pieces;
    let average = request.bytes() / (pieces.len() as u64).max(1);
    let sieve = pieces.len() > 1 && hints.romio_ds_read != Switch::Disable && average < SIEVE_PIECE_BYTES_MAX;
    if !sieve {
        let eof = AtomicU64::new(u64::MAX);
        engine::for_each_range(data, &mut items(request), |offset, slice| {
            engine::read_range(file, offset, slice, &eof)
        })?;
        return Ok(request.bytes_before(eof.into_inner()));
    }
    let window_max = hints.ind_rd_buffer_size.max(1);
    let mut buffer = Vec::new();
    let mut eof = u64::MAX;
    let mut index = 0usize;
    let mut within = 0u64;
    let mut at = 0usize;
    while index < pieces.len() {
        let start = pieces[index].0 + within;
        // The window: from `start`, as far as whole pieces fit (at least part of one).
        let mut end = start;
        for &(offset, len) in &pieces[index..] {
            let piece_end = offset + len;
            if piece_end - start > window_max {
                if end == start {
                    end = start + window_max;
                }
                break;
            }
            end = piece_end;
        }
        buffer.resize((end - start) as usize, 0);
        let n = file.read_at(start, &mut buffer)?;
        buffer[n..].fill(0);
        if (n as u64) < end - start {
            eof = eof.min(start + n as u64);
        }
        while index < pieces.len() {
            let (offset, len) = pieces[index];
            let from = offset + within;
            if from >= end {
                break;
            }
            let step = (len - within).min(end - from) as usize;
            let b = (from - start) as usize;
            data[at..at + step].copy_from_slice(&buffer[b..b + step]);
            at += step;
            within += step as u64;
            if within == len {
                index += 1;
                within = 0;
            }
        }
    }
    Ok(request.bytes_before(eof))
}

/// `independent`: every rank on its own.
pub struct Independent;

impl Method for Independent {
    fn name(&self) -> &'static str {
        "independent"
    }

    fn write(&self, ctx: &Context<'_>, request: &Request, data: &[u8]) -> Result<()> {
        write(ctx.file, request, data)
    }

    fn read(&self, ctx: &Context<'_>, request: &Request, data: &mut [u8]) -> Result<u64> {
        let n = read(ctx.file, ctx.hints, request, data)?;
        // The caller counts bytes from an end of file; express `n` as one.
        Ok(if n == request.bytes() {
            u64::MAX
        } else {
            end_after(request, n)
        })
    }
}

/// The file offset just past the first `n` bytes of the request.
fn end_after(request: &Request, mut n: u64) -> u64 {
    for &(offset, len) in &request.pieces {
        if n < len {
            return offset + n;
        }
        n -= len;
    }
    u64::MAX
}

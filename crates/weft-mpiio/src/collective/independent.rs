//! Independent I/O of a request: one call for a contiguous request; for a
//! noncontiguous one, view I/O (the view is registered with each server once, and each
//! request carries only a view interval: the server gathers or scatters its own pieces),
//! or Weft's list I/O when the view could not be registered (each server gets its
//! pieces as one stream). With romio_ds_read=enable, noncontiguous reads are sieved on
//! the client instead, as ROMIO does (read `ind_rd_buffer_size` bytes spanning many
//! pieces and copy the pieces out).

use weft_client::File;

use super::{Context, Method, Request};
use crate::error::Result;
use crate::hints::{Hints, Switch};

pub fn write(file: &File, request: &Request, data: &[u8]) -> Result<()> {
    match request.extent() {
        None => {}
        Some((offset, _)) if request.is_contiguous() => {
            file.write_at(offset, data)?;
        }
        Some(_) if request.view_on_file => {
            file.write_view(request.view_offset(), data)?;
        }
        Some(_) => {
            file.write_list(request.pieces(), data)?;
        }
    }
    Ok(())
}

/// Reads the request; returns the bytes read before the end of file.
pub fn read(file: &File, hints: &Hints, request: &Request, data: &mut [u8]) -> Result<u64> {
    let Some((offset, end)) = request.extent() else {
        return Ok(0);
    };
    if request.is_contiguous() {
        let n = file.read_at(offset, data)?;
        data[n..].fill(0);
        return Ok(n as u64);
    }
    if hints.romio_ds_read != Switch::Enable {
        if request.view_on_file {
            // A view read stops at the end of the file; what is past it reads as zeros,
            // as in the other paths.
            let n = file.read_view(request.view_offset(), data)?;
            data[n..].fill(0);
            return Ok(n as u64);
        }
        // List reads give zeros past the end of file; the size says where it is.
        file.read_list(request.pieces(), data)?;
        let size = file.size()?;
        return Ok(if size >= end {
            request.bytes()
        } else {
            request.bytes_before(size)
        });
    }
    let pieces = request.pieces();
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
        Ok(request.end_after(n))
    }
}

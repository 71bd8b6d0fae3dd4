//! Which bytes of a request this server holds: ranges and view intervals turned into
//! local pieces (or windows of them), with the stream lengths checked against a
//! frame's data limit before any piece is walked.

use super::*;

/// This server's pieces of `ranges`, in request (stream) order.
pub(super) fn range_pieces<'a>(
    layout: &'a Layout,
    server_index: usize,
    ranges: &'a [Range],
) -> impl Iterator<Item = LocalPiece> + 'a {
    ranges
        .iter()
        .flat_map(move |range| {
            // Ranges were checked against overflow when decoded.
            layout
                .pieces_on(server_index, range.offset, range.len)
                .expect("range checked at decode")
        })
        .map(|piece| LocalPiece {
            local_offset: piece.local_offset,
            len: piece.len,
        })
}

/// Server `server_index`'s share of view bytes `[view_offset, view_offset + len)` of
/// `layout`: its stream length, refused past a frame's data limit before any piece is
/// walked, and its slices (one per stripe). Shared by the io and cache roles.
pub fn view_slices<'a>(
    view: &'a View,
    view_offset: u64,
    len: u64,
    layout: &'a Layout,
    server_index: usize,
) -> Result<(u64, weft_layout::view::StripeSlices<'a>), WireError> {
    let slices = view
        .slices_on(view_offset, len, layout, server_index)
        .map_err(|e| {
            WireError::new(
                ErrorCode::InvalidArgument,
                format!("view interval at {view_offset} with length {len}: {e}"),
            )
        })?;
    let mut total = 0u64;
    for slice in slices.clone() {
        total += slice.len;
        if total > DATA_BYTES_MAX {
            return Err(sieve::too_large());
        }
    }
    Ok((total, slices))
}

/// This server's share of view bytes `[view_offset, view_offset + len)`: its stream
/// length, and the stream as windows (see `sieve::ViewWindow`), one stripe slice cut
/// to at most `SIEVE_SPAN_BYTES_MAX` of the file at a time. Found from the view and the
/// striping alone.
pub(super) fn view_windows<'a>(
    view: &'a View,
    view_offset: u64,
    len: u64,
    layout: &'a Layout,
    server_index: usize,
) -> Result<(u64, impl Iterator<Item = ViewWindow> + 'a), WireError> {
    let (total, slices) = view_slices(view, view_offset, len, layout, server_index)?;
    let windows = slices.flat_map(move |slice| {
        let end = slice.view_offset + slice.len;
        let mut start = slice.view_offset;
        std::iter::from_fn(move || {
            if start >= end {
                return None;
            }
            let first = view.view_to_file(start).expect("interval checked");
            let stop = view
                .file_to_view(first + SIEVE_SPAN_BYTES_MAX)
                .clamp(start + 1, end);
            let window = ViewWindow {
                view_offset: start,
                len: stop - start,
                stripe_file_offset: slice.stripe_file_offset,
                stripe_local_offset: slice.stripe_local_offset,
            };
            start = stop;
            Some(window)
        })
    });
    Ok((total, windows))
}

pub(super) fn check_payload(carried: usize, expected: u64, what: &str) -> Result<(), WireError> {
    if carried as u64 == expected {
        Ok(())
    } else {
        Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("write carries {carried} bytes but its {what} covers {expected} bytes on this server"),
        ))
    }
}

/// Bytes of `ranges` on server `server_index` of `layout`, refused past a frame's data
/// limit. Shared by the io and cache roles.
pub fn ranges_stream_len(layout: &Layout, server_index: usize, ranges: &[Range]) -> Result<u64, WireError> {
    let total = ranges
        .iter()
        .map(|r| layout.bytes_on(server_index, r.offset, r.len))
        .fold(0u64, u64::saturating_add);
    if total > DATA_BYTES_MAX {
        return Err(sieve::too_large());
    }
    Ok(total)
}

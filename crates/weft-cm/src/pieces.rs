//! This manager's pieces of a request (ranges or a view interval), cut at block
//! boundaries and handed out a block at a time.

use crate::BlockPiece;
use weft_layout::Layout;
use weft_proto::{Range, Striping, WireError};

/// Most pieces of one block handled under one hold of its lock: bounds the memory a
/// request of very many small pieces takes, whatever its size.
pub(crate) const PIECES_PER_BATCH_MAX: usize = 1 << 16;

/// This manager's pieces of a request, as file (offset, length) in stream order, each
/// inside one block, with the stream's length.
pub(crate) struct Pieces<I> {
    pub(crate) stream_len: u64,
    pub(crate) iter: I,
}

impl<I: Iterator<Item = (u64, u64)>> Pieces<I> {
    /// Calls `each` with runs of pieces of one block (at most `PIECES_PER_BATCH_MAX` at a
    /// time), in stream order; adjacent pieces are merged.
    pub(crate) fn for_each_block(
        self,
        block_size: u64,
        mut each: impl FnMut(u64, &[BlockPiece]) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        let mut batch: Vec<BlockPiece> = Vec::new();
        let mut current = None;
        let mut stream_at = 0usize;
        for (file_offset, len) in self.iter {
            if len == 0 {
                continue;
            }
            let block = file_offset / block_size;
            if current != Some(block) || batch.len() >= PIECES_PER_BATCH_MAX {
                if let Some(b) = current {
                    each(b, &batch)?;
                }
                batch.clear();
                current = Some(block);
            }
            let piece = BlockPiece {
                offset: (file_offset % block_size) as u32,
                len: len as u32,
                stream_at,
            };
            stream_at += len as usize;
            match batch.last_mut() {
                Some(last) if last.offset + last.len == piece.offset => last.len += piece.len,
                _ => batch.push(piece),
            }
        }
        if let Some(b) = current {
            each(b, &batch)?;
        }
        debug_assert_eq!(stream_at as u64, self.stream_len);
        Ok(())
    }
}

/// `layout` is the striping's layout (blocks over managers).
pub(crate) fn range_pieces<'a>(
    layout: &'a Layout,
    striping: Striping,
    ranges: &'a [Range],
) -> Result<Pieces<impl Iterator<Item = (u64, u64)> + 'a>, WireError> {
    let index = striping.server_index as usize;
    let stream_len = weft_iod::ranges_stream_len(layout, index, ranges)?;
    let iter = ranges.iter().flat_map(move |range| {
        layout
            .pieces_on(index, range.offset, range.len)
            .expect("range checked at decode")
            .map(|p| (p.file_offset, p.len))
    });
    Ok(Pieces { stream_len, iter })
}

/// `layout` is the striping's layout (blocks over managers).
pub(crate) fn view_pieces<'a>(
    view: &'a weft_layout::view::View,
    layout: &'a Layout,
    striping: Striping,
    view_offset: u64,
    len: u64,
) -> Result<Pieces<impl Iterator<Item = (u64, u64)> + 'a>, WireError> {
    let (stream_len, slices) =
        weft_iod::view_slices(view, view_offset, len, layout, striping.server_index as usize)?;
    let iter = slices.flat_map(move |slice| {
        view.pieces(slice.view_offset, slice.len)
            .expect("slices lie inside the checked interval")
            .map(|p| (p.file_offset, p.len))
    });
    Ok(Pieces { stream_len, iter })
}

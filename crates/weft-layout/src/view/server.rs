//! The pieces of a view interval that live on one server of a striping layout: what an
//! I/O server computes from (view, interval, layout, server index) to serve its part
//! of a request without hearing about the other servers' bytes.
//!
//! Inside one view piece the walk jumps whole stripe rows to the server's next stripe.
//! Between view pieces it steps through pieces that fall on other servers, and after a
//! few in a row it re-seeks the view at the server's next stripe (file-to-view mapping,
//! O(depth * log blocks)), so many small pieces on other servers are skipped in bulk
//! while large pieces never pay for a seek.

use super::iter::{Piece, Pieces};
use super::map::View;
use super::ViewError;
use crate::stripe::Layout;

/// Consecutive view pieces missing the server before the walk re-seeks instead of
/// stepping: bounds the extra cost over plain filtering to one seek per this many
/// skipped pieces.
const MISSES_BEFORE_SEEK: u32 = 8;

/// A contiguous range of one server's part of a view interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServerPiece {
    pub file_offset: u64,
    /// Offset in the server's local object.
    pub local_offset: u64,
    pub len: u64,
    /// View offset of the piece's first byte.
    pub view_offset: u64,
}

/// The pieces of a view interval on one server, in file order; see [`View::pieces_on`].
#[derive(Debug, Clone)]
pub struct ServerPieces<'a> {
    view: &'a View,
    pieces: Pieces<'a>,
    stripe_size_bytes: u64,
    stripe_count: u64,
    server_index: u64,
    layout: &'a Layout,
    /// What is left of the view piece being split at stripe boundaries.
    current: Option<Piece>,
}

impl View {
    /// The pieces of view bytes `[view_offset, view_offset + len)` held by server
    /// `server_index` of `layout`, in file order, each within one stripe.
    pub fn pieces_on<'a>(
        &'a self,
        view_offset: u64,
        len: u64,
        layout: &'a Layout,
        server_index: usize,
    ) -> Result<ServerPieces<'a>, ViewError> {
        if server_index >= layout.stripe_count() {
            return Err(ViewError::ServerIndex {
                server_index,
                stripe_count: layout.stripe_count(),
            });
        }
        debug_assert!(layout.stripe_size_bytes > 0, "layouts are validated");
        Ok(ServerPieces {
            view: self,
            pieces: self.pieces(view_offset, len)?,
            stripe_size_bytes: layout.stripe_size_bytes,
            stripe_count: layout.stripe_count() as u64,
            server_index: server_index as u64,
            layout,
            current: None,
        })
    }
}

impl ServerPieces<'_> {
    /// First file offset at or after `offset` that lies on this server.
    #[inline]
    fn next_on_server(&self, offset: u64) -> u64 {
        let stripe = offset / self.stripe_size_bytes;
        let index = stripe % self.stripe_count;
        if index == self.server_index {
            offset
        } else {
            let ahead = (self.server_index + self.stripe_count - index) % self.stripe_count;
            (stripe + ahead) * self.stripe_size_bytes
        }
    }
}

impl Iterator for ServerPieces<'_> {
    type Item = ServerPiece;

    fn next(&mut self) -> Option<ServerPiece> {
        let mut misses = 0;
        loop {
            let piece = match self.current.take() {
                Some(piece) => piece,
                None => self.pieces.next()?,
            };
            let end = piece.file_offset + piece.len;
            let start = self.next_on_server(piece.file_offset);
            if start >= end {
                misses += 1;
                if misses >= MISSES_BEFORE_SEEK {
                    misses = 0;
                    // Nothing of ours lies in [end, start): jump straight to `start`.
                    let target = self.view.file_to_view(start).min(self.pieces.view_end());
                    if target > self.pieces.view_offset() {
                        self.pieces.seek(target);
                    }
                }
                continue;
            }
            let stripe_end = (start / self.stripe_size_bytes + 1) * self.stripe_size_bytes;
            let piece_end = stripe_end.min(end);
            let skipped = start - piece.file_offset;
            if piece_end < end {
                self.current = Some(Piece {
                    file_offset: piece_end,
                    len: end - piece_end,
                    view_offset: piece.view_offset + (piece_end - piece.file_offset),
                });
            }
            return Some(ServerPiece {
                file_offset: start,
                local_offset: self.layout.local_offset_of(start),
                len: piece_end - start,
                view_offset: piece.view_offset + skipped,
            });
        }
    }
}

impl std::iter::FusedIterator for ServerPieces<'_> {}

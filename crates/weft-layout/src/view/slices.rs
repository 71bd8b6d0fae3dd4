//! One server's share of a view interval as slices: the view bytes that fall in each
//! of the server's stripes. A view is in file order, so those bytes are consecutive in
//! the view: a client gathers or scatters a server's stream with one copy per stripe
//! instead of one per piece, and a server walks the pieces of a slice as plain view
//! pieces, without stripe arithmetic per piece.
//!
//! Each step costs two or three file-to-view mappings (O(depth * log blocks)); stripes
//! without bytes of the interval are jumped over by mapping the next view byte back to
//! its file offset, so a sparse view never visits empty stripes one by one.

use super::map::View;
use super::ViewError;
use crate::stripe::Layout;

/// View bytes `[view_offset, view_offset + len)`, all in one stripe of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StripeSlice {
    pub view_offset: u64,
    pub len: u64,
    /// File offset of the stripe's first byte.
    pub stripe_file_offset: u64,
    /// Offset of the stripe's first byte in the server's local object.
    pub stripe_local_offset: u64,
}

/// The slices of a view interval on one server, in file order; see
/// [`View::slices_on`].
#[derive(Debug, Clone)]
pub struct StripeSlices<'a> {
    view: &'a View,
    stripe_size_bytes: u64,
    stripe_count: u64,
    server_index: u64,
    /// The next stripe (a stripe number of this server) to look at.
    next_stripe: u64,
    next_view: u64,
    view_end: u64,
}

impl View {
    /// The slices of view bytes `[view_offset, view_offset + len)` held by server
    /// `server_index` of `layout`, one per stripe holding any, in file order.
    pub fn slices_on<'a>(
        &'a self,
        view_offset: u64,
        len: u64,
        layout: &'a Layout,
        server_index: usize,
    ) -> Result<StripeSlices<'a>, ViewError> {
        if server_index >= layout.stripe_count() {
            return Err(ViewError::ServerIndex {
                server_index,
                stripe_count: layout.stripe_count(),
            });
        }
        self.check_interval(view_offset, len)?;
        let mut slices = StripeSlices {
            view: self,
            stripe_size_bytes: layout.stripe_size_bytes,
            stripe_count: layout.stripe_count() as u64,
            server_index: server_index as u64,
            next_stripe: 0,
            next_view: view_offset,
            view_end: view_offset + len,
        };
        if len > 0 {
            let first = self.view_to_file(view_offset)?;
            slices.next_stripe = slices.stripe_at_or_after(first / layout.stripe_size_bytes);
        }
        Ok(slices)
    }
}

impl StripeSlices<'_> {
    /// The first stripe of this server numbered `stripe` or later.
    #[inline]
    fn stripe_at_or_after(&self, stripe: u64) -> u64 {
        let index = stripe % self.stripe_count;
        stripe + (self.server_index + self.stripe_count - index) % self.stripe_count
    }
}

impl Iterator for StripeSlices<'_> {
    type Item = StripeSlice;

    fn next(&mut self) -> Option<StripeSlice> {
        while self.next_view < self.view_end {
            let start = self.next_stripe * self.stripe_size_bytes;
            let end = start + self.stripe_size_bytes;
            let after = self.view.file_to_view(end);
            let first = self.view.file_to_view(start).max(self.next_view);
            let last = after.min(self.view_end);
            if first < last {
                self.next_view = last;
                self.next_stripe += self.stripe_count;
                let stripe_local_offset =
                    (self.next_stripe - self.stripe_count) / self.stripe_count * self.stripe_size_bytes;
                return Some(StripeSlice {
                    view_offset: first,
                    len: last - first,
                    stripe_file_offset: start,
                    stripe_local_offset,
                });
            }
            if after >= self.view_end {
                break;
            }
            // Nothing of the interval here: go to the stripe of the next view byte.
            let next_view = after.max(self.next_view);
            let file_offset = self
                .view
                .view_to_file(next_view)
                .expect("the interval was checked to map below the largest file offset");
            self.next_stripe = self.stripe_at_or_after(file_offset / self.stripe_size_bytes);
        }
        self.next_view = self.view_end;
        None
    }
}

impl std::iter::FusedIterator for StripeSlices<'_> {}

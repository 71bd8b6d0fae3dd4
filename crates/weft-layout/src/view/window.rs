//! Moving view bytes between a stream and a buffer that holds one stretch of the file
//! (an io server's sieve window): pack/unpack's walk, with its strided fast paths,
//! offset by the window's place in the file, so that a window of fine-grained pieces
//! is gathered or scattered without visiting them one by one.

use super::map::View;
use super::pack::{gather_at, scatter_at};
use super::ViewError;

impl View {
    /// File offsets of the first byte and one past the last byte of view bytes
    /// `[view_offset, view_offset + len)`; every byte of the interval lies between them.
    pub fn file_extent(&self, view_offset: u64, len: u64) -> Result<(u64, u64), ViewError> {
        if len == 0 {
            return Err(ViewError::InvalidArgument("an empty interval has no file extent"));
        }
        self.check_interval(view_offset, len)?;
        let first = self.view_to_file(view_offset)?;
        let last = self.view_to_file(view_offset + len - 1)?;
        Ok((first, last + 1))
    }

    /// Copies view bytes `[view_offset, view_offset + out.len())` out of `window`, which
    /// holds file bytes from `window_file_offset` on. Fails (without copying) unless the
    /// interval's file extent lies inside the window.
    pub fn gather_window(
        &self,
        view_offset: u64,
        window_file_offset: u64,
        window: &[u8],
        out: &mut [u8],
    ) -> Result<(), ViewError> {
        let Some(base) = self.window_base(view_offset, out.len(), window_file_offset, window.len())? else {
            return Ok(());
        };
        let filetype = self.filetype();
        gather_at(filetype, base, filetype.extent(), view_offset, window, out);
        Ok(())
    }

    /// The inverse of [`View::gather_window`]: writes `data` as view bytes from
    /// `view_offset` into `window`, leaving the window's other bytes as they were.
    pub fn scatter_window(
        &self,
        view_offset: u64,
        data: &[u8],
        window_file_offset: u64,
        window: &mut [u8],
    ) -> Result<(), ViewError> {
        let Some(base) = self.window_base(view_offset, data.len(), window_file_offset, window.len())? else {
            return Ok(());
        };
        let filetype = self.filetype();
        scatter_at(filetype, base, filetype.extent(), view_offset, data, window);
        Ok(())
    }

    /// Where tile 0 starts relative to the window, once the interval is known to lie
    /// inside it; `None` for an empty interval.
    fn window_base(
        &self,
        view_offset: u64,
        len: usize,
        window_file_offset: u64,
        window_len: usize,
    ) -> Result<Option<i64>, ViewError> {
        if len == 0 {
            return Ok(None);
        }
        let (first, end) = self.file_extent(view_offset, len as u64)?;
        if first < window_file_offset || end - window_file_offset > window_len as u64 {
            return Err(ViewError::OutOfBounds {
                lowest: i128::from(first) - i128::from(window_file_offset),
                highest: i128::from(end) - i128::from(window_file_offset),
                buffer_len: window_len,
            });
        }
        // Both below 2^62 (the interval was checked), so the difference fits.
        Ok(Some(self.displacement() as i64 - window_file_offset as i64))
    }
}

//! The file view (displacement, etype, filetype) and the individual file pointer.

use super::*;

impl MpiFile {
    pub fn set_view(
        &self,
        disp: i64,
        etype: Handle,
        filetype: Handle,
        datarep: &str,
        info: Handle,
    ) -> Result<()> {
        self.flush_behind();
        let checked = (|| -> Result<(View, u64, &'static str)> {
            let datarep = crate::datarep::check(datarep)?;
            if disp == i64::from(mpi::constant(Constant::DisplacementCurrent)) {
                return Err(MpiioError::new(
                    ErrorClass::UnsupportedOperation,
                    "MPI_DISPLACEMENT_CURRENT is only valid on a file opened with MPI_MODE_SEQUENTIAL",
                ));
            }
            let disp = u64::try_from(disp)
                .map_err(|_| MpiioError::new(ErrorClass::Arg, format!("negative displacement {disp}")))?;
            let etype_size = mpi::type_size(etype)?;
            if etype_size <= 0 {
                return Err(MpiioError::new(ErrorClass::Type, "etype of size 0"));
            }
            let read_only = self.amode & (amode::RDONLY | amode::RDWR | amode::WRONLY) == amode::RDONLY;
            check_typemap("etype", &datatype::decode(etype)?, 0, read_only)?;
            let mut tree = datatype::decode(filetype)?;
            check_typemap("filetype", &tree, disp, read_only)?;
            // A filetype whose data spans more than its extent (HDF5 builds such
            // types) is legal in MPI as long as no access reaches a second tile, since
            // that tile's data would come before the first's end. Stretching the extent
            // to the data's span changes no legal access and lets the view tile.
            if tree.true_extent() > tree.extent() {
                tree = Datatype::resized(&tree, tree.lb(), tree.true_extent())?;
            }
            if tree.size_bytes() % etype_size as u64 != 0 {
                return Err(MpiioError::new(
                    ErrorClass::Type,
                    "the filetype is not made of whole etypes",
                ));
            }
            let view = if read_only {
                View::for_reading(disp, tree)
            } else {
                View::new(disp, tree)
            }
            .map_err(view_error)?;
            Ok((view, etype_size as u64, datarep))
        })();
        let current = self.state().hints.clone();
        let hints = shared_hints(&self.comm, Some(&current), info);
        let (view, etype_size, datarep) = agree(&self.comm, checked)?;
        // Only a read-only file can have an overlapping view (the same amode on every
        // rank): other views cost no further collective call.
        let read_only = self.amode & (amode::RDONLY | amode::RDWR | amode::WRONLY) == amode::RDONLY;
        let overlapping = read_only
            && self
                .comm
                .allreduce_one(i64::from(!view.filetype().is_monotonic()), mpi::Op::Max)?
                != 0;
        let hints = agree(&self.comm, hints)?;
        let aggregators = agree(&self.comm, aggregators_of(&self.comm, &hints))?;
        let etype = mpi::type_keep(etype)?;
        let filetype = mpi::type_keep(filetype)?;
        // The handle's view from now on: registered with each server at its first use.
        // One the servers would refuse (too large) leaves the whole file as the
        // handle's view, and accesses go as offset lists.
        self.file.clear_view();
        let view_on_file = !overlapping && self.file.set_view_to(view.clone()).is_ok();
        self.external32
            .store(datarep == crate::datarep::EXTERNAL32, Ordering::Relaxed);
        let mut state = self.state();
        mpi::free_if_derived(state.etype);
        mpi::free_if_derived(state.filetype);
        *state = State {
            view,
            etype,
            filetype,
            etype_size,
            position: 0,
            view_on_file,
            overlapping,
            hints,
            aggregators,
            atomic: state.atomic,
            // Kept: a new view is often the same pattern again (HDF5 sets one per
            // dataset access), and a wrong prediction costs one call's speed only.
            history: state.history,
            // Kept: the ranks flushed their buffers above, but no rank waited for the
            // others' sends to end.
            buffered: state.buffered.clone(),
        };
        Ok(())
    }

    /// Whether the view's data representation is `external32`.
    pub fn external32(&self) -> bool {
        self.external32.load(Ordering::Relaxed)
    }

    /// (displacement, etype, filetype): new references the caller frees.
    pub fn view(&self) -> Result<(u64, Handle, Handle)> {
        let state = self.state();
        Ok((
            state.view.displacement(),
            mpi::type_keep(state.etype)?,
            mpi::type_keep(state.filetype)?,
        ))
    }

    pub fn seek(&self, offset: i64, whence: i32) -> Result<()> {
        let mut state = self.state();
        let base = match whence {
            0 => 0i128,
            1 => i128::from(state.position),
            2 => {
                self.flush_behind();
                let size = self.file.size()?.max(state.buffered.end());
                i128::from(state.view.file_to_view(size) / state.etype_size)
            }
            _ => return Err(MpiioError::new(ErrorClass::Arg, format!("bad whence {whence}"))),
        };
        let to = base + i128::from(offset);
        if to < 0 {
            return Err(MpiioError::new(
                ErrorClass::Arg,
                "seek before the start of the view",
            ));
        }
        state.position = u64::try_from(to)
            .map_err(|_| MpiioError::new(ErrorClass::Arg, "seek past the largest offset"))?;
        Ok(())
    }

    pub fn position(&self) -> u64 {
        self.state().position
    }

    pub fn byte_offset(&self, offset: i64) -> Result<u64> {
        let state = self.state();
        let offset = u64::try_from(offset)
            .map_err(|_| MpiioError::new(ErrorClass::Arg, format!("negative offset {offset}")))?;
        let view_offset = offset
            .checked_mul(state.etype_size)
            .ok_or_else(|| MpiioError::new(ErrorClass::Arg, "offset overflows"))?;
        if view_offset == 0 && state.view.filetype().size_bytes() == 0 {
            return Ok(state.view.displacement());
        }
        Ok(state.view.view_to_file(view_offset)?)
    }
}

/// Hint entries with `weft_cache` set to the file's caching mode (the hint's value
/// only applies to a file the open created).
/// A view refused as MPI forbids it (non-monotonic, before offset 0): `MPI_ERR_IO`, as
/// `check_typemap`; other view errors keep their class.
pub(super) fn view_error(e: view::ViewError) -> MpiioError {
    match e {
        view::ViewError::NotMonotonic | view::ViewError::NegativeFileOffset { .. } => {
            MpiioError::new(ErrorClass::Io, e.to_string())
        }
        other => other.into(),
    }
}

/// MPI's rules for the typemap of an etype or filetype (MPI 3.1, 13.3): displacements
/// non-negative (here: no data byte before file offset 0 once `disp` is added, which
/// accepts a negative lower bound the displacement makes up for) and monotonically
/// nondecreasing, and no overlapping data in a file opened for writing (read-only, a
/// filetype may overlap itself: see `State::overlapping`). A view breaking them fails with
/// `MPI_ERR_IO`, the class ROMIO gives (ADIO_Set_view); `MPI_ERR_TYPE` is left for
/// datatypes that are not valid at all.
pub(super) fn check_typemap(kind: &str, tree: &Arc<Datatype>, disp: u64, read_only: bool) -> Result<()> {
    if tree.size_bytes() == 0 {
        return Ok(());
    }
    if i128::from(disp) + i128::from(tree.true_lb()) < 0 {
        return Err(MpiioError::new(
            ErrorClass::Io,
            format!(
                "displacements of the {kind} must be non-negative: its first data byte is at {} \
                 (view displacement {disp})",
                tree.true_lb()
            ),
        ));
    }
    // Read-only: overlaps are legal; View::for_reading refuses decreasing runs.
    if read_only && !tree.is_monotonic() {
        return View::for_reading(disp, tree.clone())
            .map(|_| ())
            .map_err(|e| MpiioError::new(ErrorClass::Io, format!("{kind}: {e}")));
    }
    if !tree.is_monotonic() {
        return Err(MpiioError::new(
            ErrorClass::Io,
            format!(
                "displacements of the {kind} must be monotonically nondecreasing, with no \
                 overlapping data (MPI 3.1, 13.3)"
            ),
        ));
    }
    Ok(())
}

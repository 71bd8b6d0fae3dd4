//! Reads and writes: the caller's memory and the access checked and prepared, then run
//! independently or by a collective method (agreed among the ranks), and the
//! nonblocking calls' prepared requests.

use super::*;

/// A nonblocking access prepared by [`MpiFile::prepare_nonblocking`].
pub(crate) struct Prepared {
    pub(super) hints: Hints,
    /// Atomic mode when the access was started: it runs under extent locks.
    pub(super) atomic: bool,
    pub(super) route: Route,
    pub(super) write: bool,
    pub(super) access: Access,
    pub(super) memory: Memory,
}

/// What a prepared access does: a request, or a read through a view that overlaps
/// itself (the view and the start in it, bytes).
pub(super) enum Access {
    Request(Request),
    Overlapping(View, u64),
}

/// The memory side of an access: `count` copies of a datatype from a buffer.
pub(super) struct Memory {
    /// The type shifted so its data starts at 0 of `region`.
    pub(super) tree: Arc<Datatype>,
    pub(super) count: u64,
    /// Start of the bytes the copies span, and their length.
    pub(super) region: *mut u8,
    pub(super) region_len: usize,
    pub(super) contiguous: bool,
    pub(super) bytes: u64,
}

pub(super) fn memory(buf: *mut u8, count: i32, datatype: Handle) -> Result<Memory> {
    if count < 0 {
        return Err(MpiioError::new(
            ErrorClass::Count,
            format!("negative count {count}"),
        ));
    }
    let tree = datatype::decode(datatype)?;
    let count = count as u64;
    let bytes = tree
        .size_bytes()
        .checked_mul(count)
        .ok_or_else(|| MpiioError::new(ErrorClass::Count, "count times datatype size overflows"))?;
    if bytes == 0 {
        return Ok(Memory {
            tree,
            count,
            region: buf,
            region_len: 0,
            contiguous: true,
            bytes,
        });
    }
    if buf.is_null() {
        return Err(MpiioError::new(ErrorClass::Arg, "NULL buffer"));
    }
    let true_lb = tree.true_lb();
    let region_len = tree.true_extent() as u64 + (count - 1) * tree.extent() as u64;
    let contiguous = tree.is_contiguous() && (count == 1 || tree.extent() as u64 == tree.size_bytes());
    let shifted = if true_lb == 0 {
        tree
    } else {
        let moved = Datatype::hindexed_block(1, &[-true_lb], &tree)?;
        Datatype::resized(&moved, tree.lb() - true_lb, tree.extent())?
    };
    Ok(Memory {
        tree: shifted,
        count,
        region: buf.wrapping_offset(true_lb as isize),
        region_len: region_len as usize,
        contiguous,
        bytes,
    })
}

impl MpiFile {
    /// Reads or writes `count` items of `datatype` at `buf`, at view offset `offset`
    /// (etypes) or the file pointer; returns the bytes transferred.
    pub fn io(&self, flags: i32, offset: i64, buf: *mut u8, count: i32, datatype: Handle) -> Result<u64> {
        let write = flags & 1 != 0;
        let collective = flags & 2 != 0;
        let explicit = flags & 4 != 0;
        let mut state = self.state();
        if state.overlapping {
            let local = self
                .checked_access(&state, write, explicit, offset, buf, count, datatype)
                .and_then(|(view_offset, memory)| self.read_overlapping(&state.view, view_offset, &memory));
            let result = if collective {
                agree(&self.comm, local)
            } else {
                local
            };
            if let Ok(bytes) = result {
                if !explicit {
                    state.position += bytes / state.etype_size;
                }
            }
            return result;
        }
        crate::trace::begin(&self.file, collective, self.comm.rank());
        let prepared = self.prepare(&state, write, explicit, offset, buf, count, datatype);
        let result = if collective {
            let view_offset =
                if explicit { offset as u64 } else { state.position }.wrapping_mul(state.etype_size);
            self.collective_io(&mut state, write, view_offset, prepared)
        } else {
            prepared.and_then(|(request, memory)| match state.atomic {
                true => crate::atomic::locked(&self.file, write, &request, || {
                    self.independent(&state.hints, Route::Direct, write, &request, &memory)
                }),
                false => self.independent(&state.hints, Route::of(false, flags), write, &request, &memory),
            })
        };
        crate::trace::end(&self.file);
        crate::collective::pattern::detach(&self.file);
        drop(state);
        if let Ok(bytes) = result {
            if !explicit {
                let mut state = self.state();
                state.position += bytes / state.etype_size;
            }
        }
        result
    }

    /// The checks of a data access; its start in the view (bytes) and its memory.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn checked_access(
        &self,
        state: &State,
        write: bool,
        explicit: bool,
        offset: i64,
        buf: *mut u8,
        count: i32,
        datatype: Handle,
    ) -> Result<(u64, Memory)> {
        let access = self.amode & (amode::RDONLY | amode::RDWR | amode::WRONLY);
        if write && access == amode::RDONLY {
            return Err(MpiioError::new(
                ErrorClass::ReadOnly,
                format!("{}: opened read-only", self.path),
            ));
        }
        if !write && access == amode::WRONLY {
            return Err(MpiioError::new(
                ErrorClass::Access,
                format!("{}: opened write-only", self.path),
            ));
        }
        let etypes = if explicit {
            u64::try_from(offset)
                .map_err(|_| MpiioError::new(ErrorClass::Arg, format!("negative offset {offset}")))?
        } else {
            state.position
        };
        let memory = memory(buf, count, datatype)?;
        if memory.bytes % state.etype_size != 0 {
            return Err(MpiioError::new(
                ErrorClass::Type,
                "the access is not a whole number of etypes",
            ));
        }
        let view_offset = etypes
            .checked_mul(state.etype_size)
            .ok_or_else(|| MpiioError::new(ErrorClass::Arg, "offset overflows"))?;
        Ok((view_offset, memory))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn prepare(
        &self,
        state: &State,
        write: bool,
        explicit: bool,
        offset: i64,
        buf: *mut u8,
        count: i32,
        datatype: Handle,
    ) -> Result<(Request, Memory)> {
        let (view_offset, memory) =
            self.checked_access(state, write, explicit, offset, buf, count, datatype)?;
        crate::trace::original(
            &self.file,
            self.comm.rank(),
            write,
            &state.view,
            view_offset,
            memory.bytes,
        );
        let request = Request::new(&state.view, view_offset, memory.bytes, state.view_on_file)?;
        Ok((request, memory))
    }

    /// Reads `memory.bytes` view bytes from `view_offset` piece by piece in typemap
    /// order, for a view that overlaps itself (see `State::overlapping`); stops at the
    /// end of the file. Returns the bytes read.
    pub(super) fn read_overlapping(&self, view: &View, view_offset: u64, memory: &Memory) -> Result<u64> {
        with_data(memory, false, |data| {
            let mut done = 0usize;
            for piece in view.pieces(view_offset, data.len() as u64)? {
                let len = piece.len as usize;
                let n = self
                    .file
                    .read_at(piece.file_offset, &mut data[done..done + len])?;
                done += n;
                if n < len {
                    break;
                }
            }
            Ok(done as u64)
        })
    }

    /// A nonblocking independent access (`MPI_File_iread*`/`iwrite*`), prepared on
    /// the calling thread (datatypes decoded, arguments checked, the individual file
    /// pointer moved past the data requested, as MPI says for nonblocking calls);
    /// [`MpiFile::run_prepared`] then does its Weft I/O on any thread, without MPI.
    pub(crate) fn prepare_nonblocking(
        &self,
        flags: i32,
        offset: i64,
        buf: *mut u8,
        count: i32,
        datatype: Handle,
    ) -> Result<Prepared> {
        let write = flags & 1 != 0;
        let explicit = flags & 4 != 0;
        let mut state = self.state();
        if state.overlapping {
            let (view_offset, memory) =
                self.checked_access(&state, write, explicit, offset, buf, count, datatype)?;
            if !explicit {
                state.position += memory.bytes / state.etype_size;
            }
            return Ok(Prepared {
                hints: state.hints.clone(),
                atomic: state.atomic,
                route: Route::of(state.atomic, flags),
                write,
                access: Access::Overlapping(state.view.clone(), view_offset),
                memory,
            });
        }
        crate::trace::begin(&self.file, false, self.comm.rank());
        let prepared = self.prepare(&state, write, explicit, offset, buf, count, datatype);
        crate::trace::end(&self.file);
        let (request, memory) = prepared?;
        if !explicit {
            state.position += memory.bytes / state.etype_size;
        }
        Ok(Prepared {
            hints: state.hints.clone(),
            atomic: state.atomic,
            route: Route::of(state.atomic, flags),
            write,
            access: Access::Request(request),
            memory,
        })
    }

    /// Does the I/O of a prepared access; returns the bytes transferred.
    pub(crate) fn run_prepared(&self, p: &Prepared) -> Result<u64> {
        let request = match &p.access {
            Access::Request(request) => request,
            Access::Overlapping(view, view_offset) => {
                return self.read_overlapping(view, *view_offset, &p.memory)
            }
        };
        match p.atomic {
            true => crate::atomic::locked(&self.file, p.write, request, || {
                self.independent(&p.hints, Route::Direct, p.write, request, &p.memory)
            }),
            false => self.independent(&p.hints, p.route, p.write, request, &p.memory),
        }
    }

    /// An independent access; outside atomic mode through the write-behind buffer and
    /// read-ahead window (see `behind`).
    pub(super) fn independent(
        &self,
        hints: &Hints,
        route: Route,
        write: bool,
        request: &Request,
        memory: &Memory,
    ) -> Result<u64> {
        use crate::collective::independent;
        let route = match self.absorbed_elsewhere() {
            true if route == Route::Buffered => Route::Direct,
            _ => route,
        };
        with_data(memory, write, |data| match (route, write) {
            (Route::Direct, true) => independent::write(&self.file, request, data).map(|()| memory.bytes),
            (Route::Direct, false) => independent::read(&self.file, hints, request, data),
            (route, true) => self
                .behind()
                .write(&self.file, hints, request, data, route == Route::Buffered)
                .map(|()| memory.bytes),
            (_, false) => self.behind().read(&self.file, hints, request, data),
        })
    }

    /// Whether this file's small writes go straight through rather than into the
    /// write-behind buffer: something else absorbs them (job-scoped or persistent
    /// delegates, the cache tier: their caches are what aggregates them, and what a job
    /// that aborts has handed its bytes to), or the file is traced (a trace records the
    /// requests as the program made them, and the CIO-aware cache replays them in that
    /// order). The same on every rank.
    fn absorbed_elsewhere(&self) -> bool {
        self.file.cache_mode() != weft_client::CacheMode::None
            || self.delegates.is_some()
            || self.file.trace().is_some()
    }

    /// A collective data call: every rank's outcome agreed. `view_offset` is where this
    /// rank's request starts in its view (bytes).
    ///
    /// A write that `no_exchange` plans as `independent` goes into the write-behind
    /// buffer like an independent write (`collective_buffered`). Every other
    /// collective call first makes those bytes visible: each rank sends its buffer and,
    /// if some rank may hold bytes of a buffered collective write, they wait for each
    /// other (a barrier), so a collective read sees the collective writes before it
    /// without a sync (ROMIO allows it, and programs, ROMIO's tests among them, rely
    /// on it).
    pub(super) fn collective_io(
        &self,
        state: &mut State,
        write: bool,
        view_offset: u64,
        prepared: Result<(Request, Memory)>,
    ) -> Result<u64> {
        let plan = no_exchange::plan(&self.file, &state.hints, state.atomic, write, &state.history);
        if let Some(Plan::Method(m, why)) = &plan {
            if write && m.name() == "independent" && state.hints.write_behind && !self.absorbed_elsewhere() {
                return self.collective_buffered(state, why, prepared);
            }
        }
        // A collective call reads or writes around this process's buffer: what it
        // holds goes first (its bytes are older), and the window may go stale; other
        // ranks' buffered collective writes are sent before any rank does its I/O (the
        // full path's allgather before the I/O waits for them; a plan without one
        // waits at a barrier).
        self.flush_behind();
        let others_buffered = std::mem::take(&mut state.buffered).any();
        if let Some(plan) = plan {
            if others_buffered {
                self.comm.barrier()?;
            }
            // Nothing of the other ranks is needed before the I/O: one allgather after
            // it agrees on the outcome and collects the extents for the history.
            let extent = prepared.as_ref().ok().and_then(|(r, _)| r.extent());
            let local = prepared.and_then(|(request, memory)| match plan {
                // Atomic mode: each rank's part under its own locks (see `atomic`).
                Plan::Atomic => crate::atomic::locked(&self.file, write, &request, || {
                    self.independent(&state.hints, Route::Direct, write, &request, &memory)
                }),
                Plan::Method(method, why) => {
                    let ctx = Context {
                        comm: &self.comm,
                        file: &self.file,
                        hints: &state.hints,
                        aggregators: &[],
                        extents: &[],
                        bytes_total: 0,
                        views_registered: false,
                    };
                    self.run_method(&ctx, method, why, write, &request, &memory)
                }
            });
            let (outcome, interleaved) = no_exchange::conclude(&self.comm, local, extent)?;
            state
                .history
                .record(write, outcome.is_ok().then_some(interleaved));
            return outcome;
        }
        // The full path: one allgather agrees on the errors so far and gives every rank
        // all extents, for `auto` to choose and for the exchange methods to plan.
        let mine = match &prepared {
            Ok((request, _)) => {
                let (lo, hi) = request.extent().unwrap_or((u64::MAX, 0));
                [
                    0,
                    lo as i64,
                    hi as i64,
                    request.bytes() as i64,
                    i64::from(request.view_on_file),
                ]
            }
            Err(e) => [e.class as i64, u64::MAX as i64, 0, 0, 0],
        };
        let all = self.comm.allgather(&mine)?;
        let worst = all.chunks(5).map(|c| c[0]).max().unwrap_or(0);
        let (request, memory) = match settle(prepared, worst) {
            Ok(p) => p,
            Err(e) => {
                state.history.record(write, None);
                return Err(e);
            }
        };
        let extents: Vec<(u64, u64)> = all.chunks(5).map(|c| (c[1] as u64, c[2] as u64)).collect();
        let result = crate::collective::pattern::attach(
            &self.comm,
            &self.file,
            &state.hints,
            write,
            &state.view,
            view_offset,
            memory.bytes,
        )
        .and_then(|()| {
            let ctx = Context {
                comm: &self.comm,
                file: &self.file,
                hints: &state.hints,
                aggregators: &state.aggregators,
                extents: &extents,
                bytes_total: all.chunks(5).map(|c| c[3] as u64).sum(),
                views_registered: all.chunks(5).all(|c| c[4] == 1),
            };
            self.collective(&ctx, write, &request, &memory)
        });
        let result = agree(&self.comm, result);
        let interleaved = crate::collective::interleaved(extents.iter().copied());
        state.history.record(write, result.is_ok().then_some(interleaved));
        result
    }

    /// A collective write planned as `independent` outside atomic mode: each rank's
    /// bytes go into its write-behind buffer, as MPI's nonatomic mode allows (they need
    /// to be visible to other ranks only after sync-barrier-sync). One allgather before
    /// the I/O agrees on the errors so far and gives every rank all extents: a call
    /// that writes bytes another rank still buffers from an earlier call (`Buffered`)
    /// has every rank send its buffer and wait for the others first, and is then
    /// written straight through, so the older bytes never land over the newer ones. The
    /// error of a buffered write is reported by the next such call on every rank, or
    /// the next sync or close.
    fn collective_buffered(
        &self,
        state: &mut State,
        why: &str,
        prepared: Result<(Request, Memory)>,
    ) -> Result<u64> {
        if print_hints() && self.comm.rank() == 0 {
            eprintln!(
                "weft-mpiio: write {}: method independent, into the write-behind buffers ({why})",
                self.path
            );
        }
        crate::profile::method("independent");
        // A deferred write of this handle failed since (a buffered earlier call, say
        // past a quota): every rank reports it now rather than at sync or close, so a
        // program writing in a loop stops one buffer late, not never.
        let prepared = match (prepared, self.behind().take_failed()) {
            (Ok(_), Some(e)) => Err(e),
            (prepared, Some(e)) => {
                self.behind().defer(e);
                prepared
            }
            (prepared, None) => prepared,
        };
        let mine = match &prepared {
            Ok((request, _)) => {
                let (lo, hi) = request.extent().unwrap_or((u64::MAX, 0));
                [0, lo as i64, hi as i64]
            }
            Err(e) => [e.class as i64, u64::MAX as i64, 0],
        };
        let all = self.comm.allgather(&mine)?;
        let worst = all.chunks(3).map(|c| c[0]).max().unwrap_or(0);
        let (request, memory) = match settle(prepared, worst) {
            Ok(p) => p,
            Err(e) => {
                state.history.record(true, None);
                return Err(e);
            }
        };
        let extents: Vec<(u64, u64)> = all.chunks(3).map(|c| (c[1] as u64, c[2] as u64)).collect();
        let interleaved = crate::collective::interleaved(extents.iter().copied());
        if state.buffered.conflicts(&extents) {
            self.flush_behind();
            self.comm.barrier()?;
            state.buffered.clear();
            let result = self.independent(&state.hints, Route::Direct, true, &request, &memory);
            let result = agree(&self.comm, result);
            state.history.record(true, result.is_ok().then_some(interleaved));
            return result;
        }
        let written = self.independent(&state.hints, Route::Buffered, true, &request, &memory);
        state.buffered.add(&extents);
        state.history.record(true, Some(interleaved));
        Ok(written.unwrap_or_else(|e| {
            self.behind().defer(e);
            memory.bytes
        }))
    }

    pub(super) fn collective(
        &self,
        ctx: &Context<'_>,
        write: bool,
        request: &Request,
        memory: &Memory,
    ) -> Result<u64> {
        if let Some((method, why)) = crate::delegation::direct_method(ctx.file, ctx.hints) {
            return self.run_method(ctx, method, why, write, request, memory);
        }
        // Listing the pieces costs a pass over the view: only when `auto` needs their
        // number (a collective call: on every rank or none).
        let pieces_total = || -> Result<u64> {
            let counts = self.comm.allgather(&[request.pieces().len() as i64])?;
            Ok(counts.iter().map(|&n| n as u64).sum())
        };
        let (method, why) = auto::choose(ctx, write, pieces_total)?;
        self.run_method(ctx, method, why, write, request, memory)
    }

    /// Runs the chosen collective `method` for this rank's part.
    pub(super) fn run_method(
        &self,
        ctx: &Context<'_>,
        method: Box<dyn crate::collective::Method>,
        why: &str,
        write: bool,
        request: &Request,
        memory: &Memory,
    ) -> Result<u64> {
        if print_hints() && self.comm.rank() == 0 {
            eprintln!(
                "weft-mpiio: {} {}: method {} ({why})",
                if write { "write" } else { "read" },
                self.path,
                method.name()
            );
        }
        crate::profile::method(method.name());
        with_data(memory, write, |data| {
            if write {
                method.write(ctx, request, data)?;
                Ok(memory.bytes)
            } else {
                let eof = method.read(ctx, request, data)?;
                Ok(request.bytes_before(eof))
            }
        })
    }
}

pub(super) fn with_cache_mode(mut entries: Vec<(String, String)>, file: &File) -> Vec<(String, String)> {
    entries.retain(|(k, _)| k != "weft_cache");
    entries.push(("weft_cache".into(), file.cache_mode().name().into()));
    entries
}

/// Hint entries with `striping_unit` and `striping_factor` as the file's layout has
/// them (what was applied, whatever was asked).
pub(super) fn with_layout(mut entries: Vec<(String, String)>, file: &File) -> Vec<(String, String)> {
    entries.retain(|(k, _)| k != "striping_unit" && k != "striping_factor");
    let layout = file.layout();
    entries.push(("striping_unit".into(), layout.stripe_size_bytes.to_string()));
    entries.push(("striping_factor".into(), layout.servers.len().to_string()));
    entries
}

/// Runs `work` on the access's data stream: the user's buffer itself when the memory
/// type is contiguous, else a packed copy (packed before a write, unpacked after a
/// read, as far as the read got).
pub(super) fn with_data(
    memory: &Memory,
    write: bool,
    work: impl FnOnce(&mut [u8]) -> Result<u64>,
) -> Result<u64> {
    if memory.bytes == 0 {
        let mut empty = [0u8; 0];
        return work(&mut empty);
    }
    // SAFETY: MPI's contract: `buf` holds `count` copies of the datatype, i.e. the
    // bytes [true_lb, true_ub + (count-1)*extent) from it, which is `region`.
    let region = unsafe { std::slice::from_raw_parts_mut(memory.region, memory.region_len) };
    if memory.contiguous {
        return work(&mut region[..memory.bytes as usize]);
    }
    let mut packed = vec![0u8; memory.bytes as usize];
    if write {
        view::pack(&memory.tree, memory.count, region, 0, &mut packed)?;
        work(&mut packed)
    } else {
        let n = work(&mut packed)?;
        view::unpack(&memory.tree, memory.count, &packed[..n as usize], 0, region)?;
        Ok(n)
    }
}

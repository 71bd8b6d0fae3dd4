//! Safe wrappers over the MPI shim (`csrc/shim.c`): communicators and the collective
//! operations the layer needs, datatype introspection and info objects. Handles are
//! opaque `usize` values; nothing here knows an MPI constant.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use crate::error::{MpiioError, Result};

/// An MPI handle as the shim passes it.
pub type Handle = usize;

mod ffi {
    use super::*;
    extern "C" {
        pub fn wm_comm_rank(comm: Handle, rank: *mut c_int) -> c_int;
        pub fn wm_comm_size(comm: Handle, size: *mut c_int) -> c_int;
        pub fn wm_comm_dup(comm: Handle, out: *mut Handle) -> c_int;
        pub fn wm_comm_free(comm: Handle) -> c_int;
        pub fn wm_comm_cached_dup(comm: Handle, dup: *mut Handle, found: *mut c_int) -> c_int;
        pub fn wm_comm_keep_dup(comm: Handle, dup: Handle) -> c_int;
        pub fn wm_thread_multiple() -> c_int;
        pub fn wm_comm_group(comm: Handle, group: *mut Handle) -> c_int;
        pub fn wm_allreduce_i64(comm: Handle, values: *mut i64, n: c_int, op: c_int) -> c_int;
        pub fn wm_bcast(comm: Handle, buf: *mut c_void, len: i64, root: c_int) -> c_int;
        pub fn wm_barrier(comm: Handle) -> c_int;
        pub fn wm_wait_note_local_servers();
        pub fn wm_allgather_i64(comm: Handle, send: *const i64, n: c_int, recv: *mut i64) -> c_int;
        pub fn wm_alltoall_i64(comm: Handle, send: *const i64, recv: *mut i64) -> c_int;
        pub fn wm_alltoallv_bytes(
            comm: Handle,
            sbuf: *const c_void,
            scounts: *const c_int,
            sdispls: *const c_int,
            rbuf: *mut c_void,
            rcounts: *const c_int,
            rdispls: *const c_int,
        ) -> c_int;
        pub fn wm_processor_name(buf: *mut c_char, len: c_int) -> c_int;
        pub fn wm_type_envelope(
            t: Handle,
            ni: *mut c_int,
            na: *mut c_int,
            nd: *mut c_int,
            combiner: *mut c_int,
        ) -> c_int;
        pub fn wm_type_contents(
            t: Handle,
            ni: c_int,
            na: c_int,
            nd: c_int,
            ints: *mut c_int,
            addrs: *mut i64,
            types: *mut Handle,
        ) -> c_int;
        pub fn wm_type_free(t: Handle) -> c_int;
        pub fn wm_type_dup(t: Handle, out: *mut Handle) -> c_int;
        pub fn wm_type_size(t: Handle, size: *mut i64) -> c_int;
        pub fn wm_type_extent(t: Handle, lb: *mut i64, extent: *mut i64) -> c_int;
        pub fn wm_const(which: c_int) -> c_int;
        pub fn wm_type_byte() -> Handle;
        pub fn wm_info_null() -> Handle;
        pub fn wm_info_create(out: *mut Handle) -> c_int;
        pub fn wm_info_set(info: Handle, key: *const c_char, value: *const c_char) -> c_int;
        pub fn wm_info_nkeys(info: Handle, n: *mut c_int) -> c_int;
        pub fn wm_info_nthkey(info: Handle, n: c_int, key: *mut c_char) -> c_int;
        pub fn wm_info_get(
            info: Handle,
            key: *const c_char,
            buflen: c_int,
            value: *mut c_char,
            flag: *mut c_int,
        ) -> c_int;
    }
}

fn check(what: &str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(MpiioError::mpi(what, rc))
    }
}

/// Constants inside datatype contents (`enum wm_constant`).
#[derive(Debug, Clone, Copy)]
#[repr(i32)]
pub enum Constant {
    OrderC = 0,
    OrderFortran,
    DistributeBlock,
    DistributeCyclic,
    DistributeNone,
    DistributeDfltDarg,
    MaxInfoKey,
    MaxInfoVal,
    DisplacementCurrent,
}

pub fn constant(which: Constant) -> i32 {
    // SAFETY: no preconditions.
    unsafe { ffi::wm_const(which as c_int) }
}

/// Reduction operators of [`Comm::allreduce`].
#[derive(Debug, Clone, Copy)]
pub enum Op {
    Max = 0,
    Min = 1,
    Sum = 2,
}

/// A communicator this layer owns (a duplicate of the one the file was opened on), so
/// its collectives never match the application's messages.
#[derive(Debug)]
pub struct Comm {
    handle: Handle,
    rank: usize,
    size: usize,
    /// The duplicate kept on the application's communicator (`dup_for_file`): given
    /// back, not freed, when the file closes.
    kept: bool,
}

/// The kept duplicates ([`Comm::dup_for_file`]) by handle: whether an open file uses
/// it, and whether its communicator was freed meanwhile (it is freed at that file's
/// close).
#[derive(Default)]
struct Kept {
    in_use: bool,
    orphaned: bool,
}

static KEPT: std::sync::Mutex<Option<std::collections::HashMap<Handle, Kept>>> = std::sync::Mutex::new(None);

fn kept() -> std::sync::MutexGuard<'static, Option<std::collections::HashMap<Handle, Kept>>> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// Called by `csrc/shim.c` when a communicator holding a kept duplicate is freed.
#[no_mangle]
pub extern "C" fn weft_mpiio_cached_dup_gone(dup: Handle) {
    let free = {
        let mut all = kept();
        let map = all.get_or_insert_with(Default::default);
        match map.get_mut(&dup) {
            Some(k) if k.in_use => {
                k.orphaned = true;
                false
            }
            _ => {
                map.remove(&dup);
                true
            }
        }
    };
    if free {
        // SAFETY: the duplicate was made by `dup_for_file` and no file uses it.
        unsafe { ffi::wm_comm_free(dup) };
    }
}

impl Comm {
    /// Duplicates `comm` (collective over it).
    pub fn dup(comm: Handle) -> Result<Comm> {
        let mut handle = 0;
        let (mut rank, mut size) = (0, 0);
        // SAFETY: out-pointers to locals.
        unsafe {
            check("MPI_Comm_dup", ffi::wm_comm_dup(comm, &mut handle))?;
            check("MPI_Comm_rank", ffi::wm_comm_rank(handle, &mut rank))?;
            check("MPI_Comm_size", ffi::wm_comm_size(handle, &mut size))?;
        }
        Ok(Comm {
            handle,
            rank: rank as usize,
            size: size as usize,
            kept: false,
        })
    }

    /// The communicator of a file opened on `comm`: the duplicate kept on `comm` by an
    /// earlier open when no open file uses it now (no communication: a program that
    /// opens and closes many files pays one `MPI_Comm_dup` in all), else a fresh
    /// duplicate (collective), kept on `comm` if none was. The choice is the same on
    /// every rank: opens and closes of one communicator's files are collective and
    /// come in the same order everywhere. Under `MPI_THREAD_MULTIPLE`, where two files
    /// of one communicator may run collectives at once from different threads, every
    /// file gets its own duplicate.
    pub fn dup_for_file(comm: Handle) -> Result<Comm> {
        // SAFETY: no pointers.
        if unsafe { ffi::wm_thread_multiple() } != 0 {
            return Comm::dup(comm);
        }
        let (mut dup, mut found) = (0, 0);
        // SAFETY: out-pointers to locals.
        check("MPI_Comm_get_attr", unsafe {
            ffi::wm_comm_cached_dup(comm, &mut dup, &mut found)
        })?;
        if found != 0 {
            let free = {
                let mut all = kept();
                let k = all.get_or_insert_with(Default::default).entry(dup).or_default();
                let free = !k.in_use;
                k.in_use = true;
                free
            };
            if free {
                let mut c = Comm::of(dup)?;
                c.kept = true;
                return Ok(c);
            }
            return Comm::dup(comm);
        }
        let mut c = Comm::dup(comm)?;
        // SAFETY: a valid communicator and duplicate.
        if unsafe { ffi::wm_comm_keep_dup(comm, c.handle) } == 0 {
            kept().get_or_insert_with(Default::default).insert(
                c.handle,
                Kept {
                    in_use: true,
                    orphaned: false,
                },
            );
            c.kept = true;
        }
        Ok(c)
    }

    /// Rank and size of `handle`, without duplicating it.
    fn of(handle: Handle) -> Result<Comm> {
        let (mut rank, mut size) = (0, 0);
        // SAFETY: out-pointers to locals.
        unsafe {
            check("MPI_Comm_rank", ffi::wm_comm_rank(handle, &mut rank))?;
            check("MPI_Comm_size", ffi::wm_comm_size(handle, &mut size))?;
        }
        Ok(Comm {
            handle,
            rank: rank as usize,
            size: size as usize,
            kept: false,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn group(&self) -> Result<Handle> {
        let mut group = 0;
        // SAFETY: out-pointer to a local.
        check("MPI_Comm_group", unsafe {
            ffi::wm_comm_group(self.handle, &mut group)
        })?;
        Ok(group)
    }

    /// Element-wise reduction of `values` over all ranks, in place.
    pub fn allreduce(&self, values: &mut [i64], op: Op) -> Result<()> {
        let _span = crate::timing::span(crate::timing::Phase::Waiting);
        // SAFETY: the slice is valid for its length.
        check("MPI_Allreduce", unsafe {
            ffi::wm_allreduce_i64(
                self.handle,
                values.as_mut_ptr(),
                values.len() as c_int,
                op as c_int,
            )
        })
    }

    pub fn allreduce_one(&self, value: i64, op: Op) -> Result<i64> {
        let mut v = [value];
        self.allreduce(&mut v, op)?;
        Ok(v[0])
    }

    /// Broadcasts `buf` from `root`.
    pub fn bcast(&self, buf: &mut [u8], root: usize) -> Result<()> {
        let _span = crate::timing::span(crate::timing::Phase::Exchange);
        // SAFETY: the slice is valid for its length.
        check("MPI_Bcast", unsafe {
            ffi::wm_bcast(
                self.handle,
                buf.as_mut_ptr().cast(),
                buf.len() as i64,
                root as c_int,
            )
        })
    }

    pub fn barrier(&self) -> Result<()> {
        barrier_of(self.handle)
    }

    /// The MPI handle, for calls made outside this type (spawning delegates).
    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// `bytes` of `root` on every rank (the others pass anything): one broadcast when
    /// they fit in [`BCAST_INLINE_BYTES`] with their length, two otherwise.
    pub fn bcast_bytes(&self, bytes: Vec<u8>, root: usize) -> Result<Vec<u8>> {
        let mut first = vec![0u8; BCAST_INLINE_BYTES];
        if self.rank == root {
            first[..8].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
            let inline = bytes.len().min(BCAST_INLINE_BYTES - 8);
            first[8..8 + inline].copy_from_slice(&bytes[..inline]);
        }
        self.bcast(&mut first, root)?;
        let len = u64::from_le_bytes(first[..8].try_into().expect("8 bytes")) as usize;
        if len <= BCAST_INLINE_BYTES - 8 {
            first.truncate(8 + len);
            first.drain(..8);
            return Ok(first);
        }
        let mut rest = if self.rank == root {
            bytes[BCAST_INLINE_BYTES - 8..].to_vec()
        } else {
            vec![0u8; len - (BCAST_INLINE_BYTES - 8)]
        };
        self.bcast(&mut rest, root)?;
        let mut out = first.split_off(8);
        out.extend_from_slice(&rest);
        Ok(out)
    }

    /// `text` of `root` on every rank (the others pass anything).
    pub fn bcast_text(&self, text: String, root: usize) -> Result<String> {
        let mut bytes = text.into_bytes();
        let mut len = (bytes.len() as u64).to_ne_bytes();
        self.bcast(&mut len, root)?;
        bytes.resize(u64::from_ne_bytes(len) as usize, 0);
        self.bcast(&mut bytes, root)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Gathers `send` (the same length on every rank) from every rank, rank order.
    pub fn allgather(&self, send: &[i64]) -> Result<Vec<i64>> {
        let _span = crate::timing::span(crate::timing::Phase::Exchange);
        let mut recv = vec![0i64; send.len() * self.size];
        // SAFETY: recv holds size * n values.
        check("MPI_Allgather", unsafe {
            ffi::wm_allgather_i64(self.handle, send.as_ptr(), send.len() as c_int, recv.as_mut_ptr())
        })?;
        Ok(recv)
    }

    /// One value to every rank, one from every rank.
    pub fn alltoall(&self, send: &[i64]) -> Result<Vec<i64>> {
        let _span = crate::timing::span(crate::timing::Phase::Exchange);
        assert_eq!(send.len(), self.size);
        let mut recv = vec![0i64; self.size];
        // SAFETY: both hold `size` values.
        check("MPI_Alltoall", unsafe {
            ffi::wm_alltoall_i64(self.handle, send.as_ptr(), recv.as_mut_ptr())
        })?;
        Ok(recv)
    }

    /// Bytes to and from every rank: `send[sdispls[r]..][..scounts[r]]` goes to rank r,
    /// and what rank r sends lands at `recv[rdispls[r]..][..rcounts[r]]`.
    pub fn alltoallv(
        &self,
        send: &[u8],
        scounts: &[i32],
        sdispls: &[i32],
        recv: &mut [u8],
        rcounts: &[i32],
        rdispls: &[i32],
    ) -> Result<()> {
        let _span = crate::timing::span(crate::timing::Phase::Exchange);
        for r in 0..self.size {
            assert!(sdispls[r] as usize + scounts[r] as usize <= send.len());
            assert!(rdispls[r] as usize + rcounts[r] as usize <= recv.len());
        }
        // An empty Vec's pointer is 0x1, which Open MPI reads as MPI_IN_PLACE: give
        // MPI a real address when a side has no bytes.
        let mut dummy = [0u8; 1];
        let sbuf = if send.is_empty() {
            dummy.as_ptr()
        } else {
            send.as_ptr()
        };
        let rbuf = if recv.is_empty() {
            dummy.as_mut_ptr()
        } else {
            recv.as_mut_ptr()
        };
        // SAFETY: every count/displacement pair lies inside its buffer (asserted), and
        // empty sides point at `dummy` with zero counts.
        check("MPI_Alltoallv", unsafe {
            ffi::wm_alltoallv_bytes(
                self.handle,
                sbuf.cast(),
                scounts.as_ptr(),
                sdispls.as_ptr(),
                rbuf.cast(),
                rcounts.as_ptr(),
                rdispls.as_ptr(),
            )
        })
    }
}

/// MPI_Barrier on a communicator handle.
/// What [`Comm::bcast_bytes`] sends in its first (and usually only) broadcast.
pub const BCAST_INLINE_BYTES: usize = 4096;

pub fn barrier_of(comm: Handle) -> Result<()> {
    let _span = crate::timing::span(crate::timing::Phase::Waiting);
    // SAFETY: no pointers.
    check("MPI_Barrier", unsafe { ffi::wm_barrier(comm) })
}

impl Drop for Comm {
    fn drop(&mut self) {
        if self.kept {
            let free = {
                let mut all = kept();
                let map = all.get_or_insert_with(Default::default);
                match map.get_mut(&self.handle) {
                    Some(k) if !k.orphaned => {
                        k.in_use = false;
                        false
                    }
                    _ => {
                        map.remove(&self.handle);
                        true
                    }
                }
            };
            if free {
                // SAFETY: the kept duplicate's communicator is gone and no file uses it.
                unsafe { ffi::wm_comm_free(self.handle) };
            }
            return;
        }
        // SAFETY: the communicator was duplicated by `dup` and is freed once.
        unsafe { ffi::wm_comm_free(self.handle) };
    }
}

pub fn processor_name() -> String {
    let mut buf = [0 as c_char; 256];
    // SAFETY: the buffer holds 256 bytes and is NUL-terminated by the shim.
    unsafe {
        ffi::wm_processor_name(buf.as_mut_ptr(), buf.len() as c_int);
        CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    }
}

/// How a datatype was constructed (`enum wm_combiner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combiner {
    Named,
    Dup,
    Contiguous,
    Vector,
    Hvector,
    Indexed,
    Hindexed,
    IndexedBlock,
    HindexedBlock,
    Struct,
    Subarray,
    Darray,
    Resized,
    F90,
    Unknown,
}

/// What MPI_Type_get_envelope and MPI_Type_get_contents say of a datatype.
#[derive(Debug, Clone)]
pub struct Contents {
    pub combiner: Combiner,
    pub ints: Vec<i32>,
    pub addrs: Vec<i64>,
    pub types: Vec<Handle>,
}

pub fn type_envelope(t: Handle) -> Result<(Combiner, usize, usize, usize)> {
    let (mut ni, mut na, mut nd, mut c) = (0, 0, 0, 0);
    // SAFETY: out-pointers to locals.
    check("MPI_Type_get_envelope", unsafe {
        ffi::wm_type_envelope(t, &mut ni, &mut na, &mut nd, &mut c)
    })?;
    use Combiner::*;
    let combiner = match c {
        0 => Named,
        1 => Dup,
        2 => Contiguous,
        3 => Vector,
        4 => Hvector,
        5 => Indexed,
        6 => Hindexed,
        7 => IndexedBlock,
        8 => HindexedBlock,
        9 => Struct,
        10 => Subarray,
        11 => Darray,
        12 => Resized,
        13 => F90,
        _ => Unknown,
    };
    Ok((combiner, ni as usize, na as usize, nd as usize))
}

/// The contents of a derived datatype. The caller frees the derived types in `types`
/// (see [`free_if_derived`]).
pub fn type_contents(t: Handle) -> Result<Contents> {
    let (combiner, ni, na, nd) = type_envelope(t)?;
    let mut contents = Contents {
        combiner,
        ints: vec![0; ni],
        addrs: vec![0; na],
        types: vec![0; nd],
    };
    if matches!(combiner, Combiner::Named | Combiner::F90 | Combiner::Unknown) {
        return Ok(contents);
    }
    // SAFETY: the vectors hold the lengths the envelope gave.
    check("MPI_Type_get_contents", unsafe {
        ffi::wm_type_contents(
            t,
            ni as c_int,
            na as c_int,
            nd as c_int,
            contents.ints.as_mut_ptr(),
            contents.addrs.as_mut_ptr(),
            contents.types.as_mut_ptr(),
        )
    })?;
    Ok(contents)
}

/// Frees a type returned by MPI_Type_get_contents unless it is predefined.
pub fn free_if_derived(t: Handle) {
    if let Ok((c, ..)) = type_envelope(t) {
        if !matches!(c, Combiner::Named | Combiner::F90) {
            // SAFETY: a derived type we own a reference to.
            unsafe { ffi::wm_type_free(t) };
        }
    }
}

/// A reference to `t` the caller owns: predefined types as they are, derived types
/// duplicated.
pub fn type_keep(t: Handle) -> Result<Handle> {
    let (c, ..) = type_envelope(t)?;
    if matches!(c, Combiner::Named | Combiner::F90) {
        return Ok(t);
    }
    let mut out = 0;
    // SAFETY: out-pointer to a local.
    check("MPI_Type_dup", unsafe { ffi::wm_type_dup(t, &mut out) })?;
    Ok(out)
}

pub fn type_size(t: Handle) -> Result<i64> {
    let mut size = 0;
    // SAFETY: out-pointer to a local.
    check("MPI_Type_size_x", unsafe { ffi::wm_type_size(t, &mut size) })?;
    Ok(size)
}

/// (lb, extent)
pub fn type_extent(t: Handle) -> Result<(i64, i64)> {
    let (mut lb, mut extent) = (0, 0);
    // SAFETY: out-pointers to locals.
    check("MPI_Type_get_extent_x", unsafe {
        ffi::wm_type_extent(t, &mut lb, &mut extent)
    })?;
    Ok((lb, extent))
}

/// MPI_BYTE.
pub fn type_byte() -> Handle {
    // SAFETY: no preconditions.
    unsafe { ffi::wm_type_byte() }
}

pub fn info_null() -> Handle {
    // SAFETY: no preconditions.
    unsafe { ffi::wm_info_null() }
}

/// Every (key, value) of an info object (none for MPI_INFO_NULL).
pub fn info_entries(info: Handle) -> Result<Vec<(String, String)>> {
    if info == info_null() {
        return Ok(Vec::new());
    }
    let mut n = 0;
    // SAFETY: out-pointer to a local.
    check("MPI_Info_get_nkeys", unsafe { ffi::wm_info_nkeys(info, &mut n) })?;
    let key_max = constant(Constant::MaxInfoKey).max(255) as usize + 1;
    let val_max = constant(Constant::MaxInfoVal).max(255) as usize + 1;
    let mut out = Vec::new();
    for i in 0..n {
        let mut key = vec![0 as c_char; key_max];
        let mut value = vec![0 as c_char; val_max];
        let mut flag = 0;
        // SAFETY: buffers of MPI_MAX_INFO_KEY+1 and MPI_MAX_INFO_VAL+1 bytes.
        unsafe {
            check(
                "MPI_Info_get_nthkey",
                ffi::wm_info_nthkey(info, i, key.as_mut_ptr()),
            )?;
            check(
                "MPI_Info_get",
                ffi::wm_info_get(
                    info,
                    key.as_ptr(),
                    (val_max - 1) as c_int,
                    value.as_mut_ptr(),
                    &mut flag,
                ),
            )?;
            if flag != 0 {
                out.push((
                    CStr::from_ptr(key.as_ptr()).to_string_lossy().into_owned(),
                    CStr::from_ptr(value.as_ptr()).to_string_lossy().into_owned(),
                ));
            }
        }
    }
    Ok(out)
}

/// A new info object holding `entries`; the application frees it.
pub fn info_from(entries: &[(String, String)]) -> Result<Handle> {
    let mut info = 0;
    // SAFETY: out-pointer to a local.
    check("MPI_Info_create", unsafe { ffi::wm_info_create(&mut info) })?;
    for (k, v) in entries {
        let (k, v) = (
            CString::new(k.as_str()).unwrap_or_default(),
            CString::new(v.as_str()).unwrap_or_default(),
        );
        // SAFETY: NUL-terminated strings.
        check("MPI_Info_set", unsafe {
            ffi::wm_info_set(info, k.as_ptr(), v.as_ptr())
        })?;
    }
    Ok(info)
}

/// Tells the agreeing collectives' wait (csrc/shim.c) that Weft servers run on this
/// machine, so that under `WEFT_MPIIO_WAIT` unset they sleep while they wait instead of
/// polling: polling ranks would take the CPUs the servers need to serve the others.
pub fn note_local_servers() {
    // SAFETY: sets a flag; no arguments.
    unsafe { ffi::wm_wait_note_local_servers() }
}

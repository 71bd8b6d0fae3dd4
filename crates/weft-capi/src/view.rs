//! Views (noncontiguous access): datatypes built with MPI-like constructors or decoded
//! from their wire form, setting a file's view (or the PVFS partition), reading and
//! writing at view offsets, and memory-side datatypes for noncontiguous buffers.
//!
//! A datatype is an opaque handle (`weft_type_t`) freed with `weft_type_free`; a view
//! keeps its own reference, so a type may be freed right after `weft_set_view`.

use crate::args;
use crate::error::{int_call, pointer_call, ssize_call, Failure, Outcome};
use crate::handles::weft_file_t;
use crate::live;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use weft_client::{Datatype, Distribution, Field, Order, View};

/// Most dimensions of a subarray or darray, and most blocks or fields passed to one
/// constructor call (the view engine's own limits apply to the whole type).
pub const WEFT_TYPE_ARGS_MAX: u32 = 65536;

/// Array order of `weft_type_subarray` and `weft_type_darray`: row-major, the last
/// dimension varies fastest (MPI_ORDER_C).
pub const WEFT_ORDER_C: c_int = 0;
/// Column-major, the first dimension varies fastest (MPI_ORDER_FORTRAN).
pub const WEFT_ORDER_FORTRAN: c_int = 1;

/// `weft_type_darray` distribution: not distributed (the grid dimension must be 1).
pub const WEFT_DISTRIBUTE_NONE: c_int = 0;
/// Contiguous blocks, one per process.
pub const WEFT_DISTRIBUTE_BLOCK: c_int = 1;
/// Blocks dealt round robin (CYCLIC(k)).
pub const WEFT_DISTRIBUTE_CYCLIC: c_int = 2;
/// `weft_type_darray` block size argument: the default (ceil(gsize / psize) for BLOCK,
/// 1 for CYCLIC), as MPI_DISTRIBUTE_DFLT_DARG.
pub const WEFT_DISTRIBUTE_DFLT_DARG: i64 = -1;

/// A datatype: a typemap of data bytes at offsets, with a lower bound and an extent
/// (MPI derived datatype semantics). Immutable; threads may share one.
#[allow(non_camel_case_types)]
pub struct weft_type_t {
    pub(crate) datatype: Arc<Datatype>,
}

fn new_type(datatype: Arc<Datatype>) -> *mut weft_type_t {
    live::give(weft_type_t { datatype })
}

fn view_error(e: weft_client::ViewError) -> Failure {
    Failure::invalid(e.to_string())
}

/// A C array argument of `count` elements: NULL is EINVAL unless `count` is 0.
///
/// # Safety
/// A non-NULL `items` must be readable for `count` elements.
unsafe fn array<'a, T>(items: *const T, count: usize, what: &str) -> Outcome<&'a [T]> {
    if count > WEFT_TYPE_ARGS_MAX as usize {
        return Err(Failure::invalid(format!(
            "{count} {what} exceed the limit of {WEFT_TYPE_ARGS_MAX}"
        )));
    }
    if count == 0 {
        return Ok(&[]);
    }
    if items.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and readable for `count` elements (the caller's promise).
    Ok(unsafe { std::slice::from_raw_parts(items, count) })
}

fn order(order: c_int) -> Outcome<Order> {
    match order {
        WEFT_ORDER_C => Ok(Order::C),
        WEFT_ORDER_FORTRAN => Ok(Order::Fortran),
        other => Err(Failure::invalid(format!("unknown array order {other}"))),
    }
}

/// A type handle argument: NULL is EINVAL.
///
/// # Safety
/// `datatype` is NULL or a live type handle.
unsafe fn type_arg<'a>(datatype: *const weft_type_t, what: &str) -> Outcome<&'a Arc<Datatype>> {
    // SAFETY: the caller's promise.
    Ok(&unsafe { args::shared(datatype, what) }?.datatype)
}

/// `len` contiguous bytes: the base of every other type. Returns NULL with errno set on
/// failure (EINVAL). Free with `weft_type_free`.
#[no_mangle]
pub extern "C" fn weft_type_bytes(len: u64) -> *mut weft_type_t {
    pointer_call("weft_type_bytes", || {
        Ok(new_type(Datatype::bytes(len).map_err(view_error)?))
    })
}

/// `count` copies of `child` laid at its extent (MPI_Type_contiguous).
///
/// # Safety
/// `child` is NULL or a live type handle.
#[no_mangle]
pub unsafe extern "C" fn weft_type_contiguous(count: u64, child: *const weft_type_t) -> *mut weft_type_t {
    pointer_call("weft_type_contiguous", || {
        // SAFETY: the caller's promise about `child`.
        let child = unsafe { type_arg(child, "child") }?;
        Ok(new_type(Datatype::contiguous(count, child).map_err(view_error)?))
    })
}

/// `count` blocks of `block_len` copies of `child`, block starts `stride` child extents
/// apart (MPI_Type_vector).
///
/// # Safety
/// `child` is NULL or a live type handle.
#[no_mangle]
pub unsafe extern "C" fn weft_type_vector(
    count: u64,
    block_len: u64,
    stride: i64,
    child: *const weft_type_t,
) -> *mut weft_type_t {
    pointer_call("weft_type_vector", || {
        // SAFETY: the caller's promise about `child`.
        let child = unsafe { type_arg(child, "child") }?;
        let t = Datatype::vector(count, block_len, stride, child).map_err(view_error)?;
        Ok(new_type(t))
    })
}

/// As `weft_type_vector` with the stride in bytes (MPI_Type_create_hvector).
///
/// # Safety
/// `child` is NULL or a live type handle.
#[no_mangle]
pub unsafe extern "C" fn weft_type_hvector(
    count: u64,
    block_len: u64,
    stride_bytes: i64,
    child: *const weft_type_t,
) -> *mut weft_type_t {
    pointer_call("weft_type_hvector", || {
        // SAFETY: the caller's promise about `child`.
        let child = unsafe { type_arg(child, "child") }?;
        let t = Datatype::hvector(count, block_len, stride_bytes, child).map_err(view_error)?;
        Ok(new_type(t))
    })
}

/// `count` blocks: block `i` is `block_lens[i]` copies of `child` from byte
/// `displacements[i]` (MPI_Type_create_hindexed).
///
/// # Safety
/// `block_lens` and `displacements` are NULL or readable for `count` elements; `child`
/// is NULL or a live type handle.
#[no_mangle]
pub unsafe extern "C" fn weft_type_hindexed(
    count: usize,
    block_lens: *const u64,
    displacements: *const i64,
    child: *const weft_type_t,
) -> *mut weft_type_t {
    pointer_call("weft_type_hindexed", || {
        // SAFETY: the caller's promise about `child`.
        let child = unsafe { type_arg(child, "child") }?;
        // SAFETY: the caller's promises.
        let (lens, displacements) = unsafe {
            (
                array(block_lens, count, "block_lens")?,
                array(displacements, count, "displacements")?,
            )
        };
        let t = Datatype::hindexed(lens, displacements, child).map_err(view_error)?;
        Ok(new_type(t))
    })
}

/// `count` fields: field `i` is `block_lens[i]` copies of `types[i]` from byte
/// `displacements[i]`, in this order (MPI_Type_create_struct). A memory type may run
/// backwards; a file view's type may not.
///
/// # Safety
/// The three arrays are NULL or readable for `count` elements; every `types[i]` is a
/// live type handle.
#[no_mangle]
pub unsafe extern "C" fn weft_type_struct(
    count: usize,
    block_lens: *const u64,
    displacements: *const i64,
    types: *const *const weft_type_t,
) -> *mut weft_type_t {
    pointer_call("weft_type_struct", || {
        // SAFETY: the caller's promises.
        let (lens, displacements, types) = unsafe {
            (
                array(block_lens, count, "block_lens")?,
                array(displacements, count, "displacements")?,
                array(types, count, "types")?,
            )
        };
        let fields = (0..count)
            .map(|i| {
                Ok(Field {
                    block_len: lens[i],
                    displacement_bytes: displacements[i],
                    // SAFETY: the caller's promise about `types`.
                    datatype: unsafe { type_arg(types[i], "types[i]") }?.clone(),
                })
            })
            .collect::<Outcome<Vec<_>>>()?;
        Ok(new_type(Datatype::structure(&fields).map_err(view_error)?))
    })
}

/// The same typemap with lower bound `lb` and extent `extent` (MPI_Type_create_resized):
/// tiles of a view, or copies in memory, are then `extent` bytes apart.
///
/// # Safety
/// `child` is NULL or a live type handle.
#[no_mangle]
pub unsafe extern "C" fn weft_type_resized(
    child: *const weft_type_t,
    lb: i64,
    extent: i64,
) -> *mut weft_type_t {
    pointer_call("weft_type_resized", || {
        // SAFETY: the caller's promise about `child`.
        let child = unsafe { type_arg(child, "child") }?;
        Ok(new_type(
            Datatype::resized(child, lb, extent).map_err(view_error)?,
        ))
    })
}

/// A subarray of an `ndims`-dimensional array of `child` elements
/// (MPI_Type_create_subarray): `sizes`, `subsizes` and `starts` have `ndims` entries;
/// `order` is `WEFT_ORDER_C` or `WEFT_ORDER_FORTRAN`. Its extent is the whole array.
///
/// # Safety
/// The arrays are NULL or readable for `ndims` elements; `child` is NULL or a live type
/// handle.
#[no_mangle]
pub unsafe extern "C" fn weft_type_subarray(
    ndims: usize,
    sizes: *const u64,
    subsizes: *const u64,
    starts: *const u64,
    order: c_int,
    child: *const weft_type_t,
) -> *mut weft_type_t {
    pointer_call("weft_type_subarray", || {
        // SAFETY: the caller's promise about `child`.
        let child = unsafe { type_arg(child, "child") }?;
        // SAFETY: the caller's promises.
        let (sizes, subsizes, starts) = unsafe {
            (
                array(sizes, ndims, "sizes")?,
                array(subsizes, ndims, "subsizes")?,
                array(starts, ndims, "starts")?,
            )
        };
        let t =
            Datatype::subarray(sizes, subsizes, starts, self::order(order)?, child).map_err(view_error)?;
        Ok(new_type(t))
    })
}

/// The part of an `ndims`-dimensional array of `child` elements owned by process `rank`
/// of `size` (MPI_Type_create_darray): processes form a row-major grid of `psizes`;
/// dimension `d` is dealt by `distributions[d]` (`WEFT_DISTRIBUTE_NONE`, `_BLOCK`,
/// `_CYCLIC`) with block size `dargs[d]` (or `WEFT_DISTRIBUTE_DFLT_DARG`). Its extent is
/// the whole array. CYCLIC(k) x CYCLIC(k) over a 2-D matrix is the Clusterfile pattern.
///
/// # Safety
/// The arrays are NULL or readable for `ndims` elements; `child` is NULL or a live type
/// handle.
#[no_mangle]
pub unsafe extern "C" fn weft_type_darray(
    size: u64,
    rank: u64,
    ndims: usize,
    gsizes: *const u64,
    distributions: *const c_int,
    dargs: *const i64,
    psizes: *const u64,
    order: c_int,
    child: *const weft_type_t,
) -> *mut weft_type_t {
    pointer_call("weft_type_darray", || {
        // SAFETY: the caller's promise about `child`.
        let child = unsafe { type_arg(child, "child") }?;
        // SAFETY: the caller's promises.
        let (gsizes, distributions, dargs, psizes) = unsafe {
            (
                array(gsizes, ndims, "gsizes")?,
                array(distributions, ndims, "distributions")?,
                array(dargs, ndims, "dargs")?,
                array(psizes, ndims, "psizes")?,
            )
        };
        let dealt = distributions
            .iter()
            .zip(dargs)
            .enumerate()
            .map(|(d, (&kind, &darg))| {
                let block = match darg {
                    WEFT_DISTRIBUTE_DFLT_DARG => None,
                    k if k >= 1 => Some(k as u64),
                    k => return Err(Failure::invalid(format!("dimension {d}: block size {k}"))),
                };
                match kind {
                    WEFT_DISTRIBUTE_NONE => Ok(Distribution::None),
                    WEFT_DISTRIBUTE_BLOCK => Ok(Distribution::Block(block)),
                    WEFT_DISTRIBUTE_CYCLIC => Ok(Distribution::Cyclic(block)),
                    other => Err(Failure::invalid(format!(
                        "dimension {d}: unknown distribution {other}"
                    ))),
                }
            })
            .collect::<Outcome<Vec<_>>>()?;
        let t = Datatype::darray(size, rank, gsizes, &dealt, psizes, self::order(order)?, child)
            .map_err(view_error)?;
        Ok(new_type(t))
    })
}

/// A datatype from its wire form (as the Rust API's `Datatype::encode` writes it),
/// checked against every limit: EINVAL for malformed or too deep types.
///
/// # Safety
/// `bytes` is NULL or readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn weft_type_from_wire(bytes: *const u8, len: usize) -> *mut weft_type_t {
    pointer_call("weft_type_from_wire", || {
        // SAFETY: the caller's promise.
        let bytes = unsafe { wire(bytes, len) }?;
        Ok(new_type(Datatype::decode(bytes).map_err(view_error)?))
    })
}

/// Data bytes of one copy of the type (MPI_Type_size); 0 for NULL or a freed type.
///
/// # Safety
/// No other thread frees `datatype` during the call.
#[no_mangle]
pub unsafe extern "C" fn weft_type_size(datatype: *const weft_type_t) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { args::shared(datatype, "type") }.map_or(0, |t| t.datatype.size_bytes())
}

/// Distance between consecutive copies of the type (MPI_Type_get_extent); 0 for NULL
/// or a freed type.
///
/// # Safety
/// No other thread frees `datatype` during the call.
#[no_mangle]
pub unsafe extern "C" fn weft_type_extent(datatype: *const weft_type_t) -> i64 {
    // SAFETY: the caller's promise.
    unsafe { args::shared(datatype, "type") }.map_or(0, |t| t.datatype.extent())
}

/// Frees a type. Views set with it keep their own reference. Returns 0, -EINVAL for
/// NULL, or -EBADF for a type already freed.
///
/// # Safety
/// `datatype` is NULL or a pointer from a `weft_type_*` constructor; no other thread is
/// in a call on it. It is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn weft_type_free(datatype: *mut weft_type_t) -> c_int {
    int_call("weft_type_free", || {
        drop(args::closing(datatype, "type")?);
        Ok(0)
    })
}

/// # Safety
/// `bytes` is NULL or readable for `len` bytes.
unsafe fn wire<'a>(bytes: *const u8, len: usize) -> Outcome<&'a [u8]> {
    if bytes.is_null() {
        return Err(Failure::invalid("bytes is NULL"));
    }
    // SAFETY: non-NULL and readable for `len` bytes (the caller's promise).
    Ok(unsafe { std::slice::from_raw_parts(bytes, len) })
}

/// Sets the file's view (MPI_File_set_view with byte etypes): from now on
/// `weft_read_view`/`weft_write_view` address the data bytes of `filetype` tiled from
/// file offset `displacement`. The filetype's data must be in increasing file order,
/// with tiles not overlapping (EINVAL otherwise). NULL `filetype` goes back to the whole
/// file. The view is registered with each io server on first use, once.
///
/// # Safety
/// `file` is NULL or a live file handle; `filetype` is NULL or a live type handle.
#[no_mangle]
pub unsafe extern "C" fn weft_set_view(
    file: *mut weft_file_t,
    displacement: i64,
    filetype: *const weft_type_t,
) -> c_int {
    int_call("weft_set_view", || {
        // SAFETY: the caller's promises.
        let handle = unsafe { args::shared(file, "file") }?;
        let displacement = args::offset(displacement, "displacement")?;
        if filetype.is_null() {
            handle.file.clear_view();
        } else {
            // SAFETY: the caller's promise.
            let filetype = unsafe { type_arg(filetype, "filetype") }?;
            handle.file.set_view(displacement, filetype.clone())?;
        }
        Ok(0)
    })
}

/// Sets the file's view from its wire form (as the Rust API's `View::encode` writes it,
/// displacement included). EINVAL for malformed, too deep or invalid views.
///
/// # Safety
/// `file` is NULL or a live file handle; `bytes` is NULL or readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn weft_set_view_wire(file: *mut weft_file_t, bytes: *const u8, len: usize) -> c_int {
    int_call("weft_set_view_wire", || {
        // SAFETY: the caller's promises.
        let (handle, bytes) = unsafe { (args::shared(file, "file")?, wire(bytes, len)?) };
        let view = View::decode(bytes).map_err(view_error)?;
        handle.file.set_view_to(view)?;
        Ok(0)
    })
}

/// Sets the PVFS partition as the file's view: `gsize` bytes every `stride` bytes from
/// file offset `offset` (EINVAL if `gsize` is 0 or above `stride`).
///
/// # Safety
/// `file` is NULL or a live file handle.
#[no_mangle]
pub unsafe extern "C" fn weft_set_partition(
    file: *mut weft_file_t,
    offset: i64,
    gsize: i64,
    stride: i64,
) -> c_int {
    int_call("weft_set_partition", || {
        // SAFETY: the caller's promise.
        let handle = unsafe { args::shared(file, "file") }?;
        let offset = args::offset(offset, "offset")?;
        let gsize = args::offset(gsize, "gsize")?;
        let stride = args::offset(stride, "stride")?;
        handle.file.set_partition(offset, gsize, stride)?;
        Ok(0)
    })
}

/// Reads up to `count` view bytes from view offset `view_offset` into `buf`, in view
/// order; returns the number read, fewer than `count` only where the view runs past the
/// end of the file; the bytes of `buf` past that number are left as they were. Without
/// a view, as `weft_pread`. Errors as `weft_pread`, and
/// -EINVAL for an interval mapping past the largest file offset.
///
/// # Safety
/// `file` is NULL or a live file handle; `buf` is NULL or writable for `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn weft_read_view(
    file: *mut weft_file_t,
    buf: *mut c_void,
    count: usize,
    view_offset: i64,
) -> libc::ssize_t {
    ssize_call("weft_read_view", || {
        // SAFETY: the caller's promise.
        let handle = unsafe { args::shared(file, "file") }?;
        let (count, view_offset) = transfer(handle, buf.is_null(), count, view_offset, false)?;
        if count == 0 {
            return Ok(0);
        }
        // Not zeroed first: bytes past the count returned stay as the caller left them
        // (as `weft_pread`). `read_view` only writes into the buffer (replies land in its
        // pieces), never reads it.
        // SAFETY: non-NULL and writable for `count` bytes (the caller's promise).
        let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), count) };
        Ok(handle.file.read_view(view_offset, buf)? as libc::ssize_t)
    })
}

/// Writes `count` view bytes from `buf` (in view order) at view offset `view_offset`;
/// returns `count`. Without a view, as `weft_pwrite`.
///
/// # Safety
/// `file` is NULL or a live file handle; `buf` is NULL or readable for `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn weft_write_view(
    file: *mut weft_file_t,
    buf: *const c_void,
    count: usize,
    view_offset: i64,
) -> libc::ssize_t {
    ssize_call("weft_write_view", || {
        // SAFETY: the caller's promise.
        let handle = unsafe { args::shared(file, "file") }?;
        let (count, view_offset) = transfer(handle, buf.is_null(), count, view_offset, true)?;
        if count == 0 {
            return Ok(0);
        }
        // SAFETY: non-NULL and readable for `count` bytes (the caller's promise).
        let buf = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), count) };
        Ok(handle.file.write_view(view_offset, buf)? as libc::ssize_t)
    })
}

/// Reads `count` view bytes from view offset `view_offset` into the data bytes of
/// consecutive copies of `memtype` laid from `buf` (copy `i` at `i * extent`), in type
/// order; returns the number read (fewer only past the end of the file). `buf` must
/// hold every data byte of the `ceil(count / size)` copies used; the memory type's data
/// may not start before `buf` (EINVAL).
///
/// # Safety
/// `file` and `memtype` are NULL or live handles; `buf` is NULL or writable for the
/// span of those copies.
#[no_mangle]
pub unsafe extern "C" fn weft_read_view_typed(
    file: *mut weft_file_t,
    buf: *mut c_void,
    memtype: *const weft_type_t,
    count: usize,
    view_offset: i64,
) -> libc::ssize_t {
    ssize_call("weft_read_view_typed", || {
        // SAFETY: the caller's promises.
        let (handle, memtype) = unsafe {
            (
                args::shared(file, "file")?,
                &args::shared(memtype, "memtype")?.datatype,
            )
        };
        let (count, view_offset) = transfer(handle, buf.is_null(), count, view_offset, false)?;
        if count == 0 {
            return Ok(0);
        }
        let span = memory_span(memtype, count)?;
        // The data bytes are overwritten by what is read; the gaps are left alone, so
        // only an initialised buffer may be passed (as for any C read into a struct).
        // SAFETY: non-NULL and writable for `span` bytes (the caller's promise).
        let memory = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), span) };
        Ok(handle
            .file
            .read_view_into(view_offset, count as u64, memory, memtype)? as libc::ssize_t)
    })
}

/// Writes `count` view bytes at view offset `view_offset`, taken from the data bytes of
/// consecutive copies of `memtype` laid from `buf`, in type order; returns `count`.
///
/// # Safety
/// `file` and `memtype` are NULL or live handles; `buf` is NULL or readable for the
/// span of the copies used.
#[no_mangle]
pub unsafe extern "C" fn weft_write_view_typed(
    file: *mut weft_file_t,
    buf: *const c_void,
    memtype: *const weft_type_t,
    count: usize,
    view_offset: i64,
) -> libc::ssize_t {
    ssize_call("weft_write_view_typed", || {
        // SAFETY: the caller's promises.
        let (handle, memtype) = unsafe {
            (
                args::shared(file, "file")?,
                &args::shared(memtype, "memtype")?.datatype,
            )
        };
        let (count, view_offset) = transfer(handle, buf.is_null(), count, view_offset, true)?;
        if count == 0 {
            return Ok(0);
        }
        let span = memory_span(memtype, count)?;
        // SAFETY: non-NULL and readable for `span` bytes (the caller's promise).
        let memory = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), span) };
        Ok(handle
            .file
            .write_view_from(view_offset, count as u64, memory, memtype)? as libc::ssize_t)
    })
}

/// Checks a view transfer's arguments and the handle's access mode.
fn transfer(
    handle: &weft_file_t,
    buf_is_null: bool,
    count: usize,
    view_offset: i64,
    write: bool,
) -> Outcome<(usize, u64)> {
    let count = args::count(count)?;
    let view_offset = args::offset(view_offset, "view_offset")?;
    if buf_is_null && count > 0 {
        return Err(Failure::new(libc::EFAULT, "buf is NULL"));
    }
    let (allowed, what) = if write {
        (handle.writable, "writing")
    } else {
        (handle.readable, "reading")
    };
    if !allowed {
        return Err(Failure::new(
            libc::EBADF,
            format!("{}: not opened for {what}", handle.file.path()),
        ));
    }
    Ok((count, view_offset))
}

/// Bytes from the start of a buffer to one past the last data byte of the copies of
/// `memtype` that `count` stream bytes use.
fn memory_span(memtype: &Datatype, count: usize) -> Outcome<usize> {
    let size = memtype.size_bytes();
    if size == 0 {
        return Err(Failure::invalid("the memory type holds no data bytes"));
    }
    if memtype.true_lb() < 0 {
        return Err(Failure::invalid(format!(
            "the memory type's data starts {} bytes before buf",
            -memtype.true_lb()
        )));
    }
    let copies = (count as u64).div_ceil(size);
    let span = (i128::from(copies) - 1) * i128::from(memtype.extent()) + i128::from(memtype.true_ub());
    usize::try_from(span)
        .ok()
        .filter(|&s| s as u128 <= isize::MAX as u128)
        .ok_or_else(|| Failure::invalid("the memory type's copies span more than SSIZE_MAX bytes"))
}

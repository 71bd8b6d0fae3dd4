//! The exported `MPI_File_*` symbols: one trampoline per function of MPI 3.1, each
//! calling its C implementation `wm_File_*` in `csrc/weft_mpiio.c`; and `MPI_Finalize`,
//! which stops job-scoped delegates before the MPI library's own.
//!
//! Why trampolines: rustc links a cdylib with a version script that exports only the
//! crate's own `#[no_mangle]` items, so functions defined in C and linked in from a
//! static library stay hidden. Defining the symbols here exports them; the C side keeps
//! the real MPI signatures. Handles passed by value (`MPI_Comm`, `MPI_Datatype`,
//! `MPI_Info`, `MPI_Errhandler`, `MPI_File`) are `usize` here: a pointer in Open MPI and
//! an `int` in MPICH, both carried in one integer register (the first six arguments of
//! the x86-64 and AArch64 C conventions, and no MPI_File function has more), so the
//! value reaches C as the caller passed it.

use std::ffi::{c_char, c_int, c_void};

macro_rules! trampolines {
    ($($name:ident => $target:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty;)*) => {
        extern "C" {
            $(fn $target($($arg: $ty),*) -> $ret;)*
        }
        $(
            /// Interposed MPI-IO entry point; see the module documentation.
            ///
            /// # Safety
            /// The MPI standard's contract for this function.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                // SAFETY: the same arguments, passed on unchanged.
                unsafe { $target($($arg),*) }
            }
        )*
    };
}

type Handle = usize;
type Ptr = *mut c_void;

trampolines! {
    MPI_File_open => wm_File_open(comm: Handle, filename: *const c_char, amode: c_int, info: Handle, fh: Ptr) -> c_int;
    MPI_File_close => wm_File_close(fh: Ptr) -> c_int;
    MPI_File_delete => wm_File_delete(filename: *const c_char, info: Handle) -> c_int;
    MPI_File_c2f => wm_File_c2f(fh: Handle) -> c_int;
    MPI_File_f2c => wm_File_f2c(fint: c_int) -> Handle;
    MPI_File_call_errhandler => wm_File_call_errhandler(fh: Handle, errorcode: c_int) -> c_int;
    MPI_File_create_errhandler => wm_File_create_errhandler(function: Handle, errhandler: Ptr) -> c_int;
    MPI_File_set_errhandler => wm_File_set_errhandler(fh: Handle, errhandler: Handle) -> c_int;
    MPI_File_get_errhandler => wm_File_get_errhandler(fh: Handle, errhandler: Ptr) -> c_int;
    MPI_File_set_size => wm_File_set_size(fh: Handle, size: i64) -> c_int;
    MPI_File_preallocate => wm_File_preallocate(fh: Handle, size: i64) -> c_int;
    MPI_File_get_size => wm_File_get_size(fh: Handle, size: Ptr) -> c_int;
    MPI_File_get_group => wm_File_get_group(fh: Handle, group: Ptr) -> c_int;
    MPI_File_get_amode => wm_File_get_amode(fh: Handle, amode: Ptr) -> c_int;
    MPI_File_set_info => wm_File_set_info(fh: Handle, info: Handle) -> c_int;
    MPI_File_get_info => wm_File_get_info(fh: Handle, info_used: Ptr) -> c_int;
    MPI_File_set_atomicity => wm_File_set_atomicity(fh: Handle, flag: c_int) -> c_int;
    MPI_File_get_atomicity => wm_File_get_atomicity(fh: Handle, flag: Ptr) -> c_int;
    MPI_File_sync => wm_File_sync(fh: Handle) -> c_int;
    MPI_File_set_view => wm_File_set_view(fh: Handle, disp: i64, etype: Handle, filetype: Handle, datarep: *const c_char, info: Handle) -> c_int;
    MPI_File_get_view => wm_File_get_view(fh: Handle, disp: Ptr, etype: Ptr, filetype: Ptr, datarep: *mut c_char) -> c_int;
    MPI_File_get_type_extent => wm_File_get_type_extent(fh: Handle, datatype: Handle, extent: Ptr) -> c_int;
    MPI_File_seek => wm_File_seek(fh: Handle, offset: i64, whence: c_int) -> c_int;
    MPI_File_get_position => wm_File_get_position(fh: Handle, offset: Ptr) -> c_int;
    MPI_File_get_byte_offset => wm_File_get_byte_offset(fh: Handle, offset: i64, disp: Ptr) -> c_int;
    MPI_File_read_at => wm_File_read_at(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_read_at_all => wm_File_read_at_all(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write_at => wm_File_write_at(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write_at_all => wm_File_write_at_all(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_read => wm_File_read(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_read_all => wm_File_read_all(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write => wm_File_write(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write_all => wm_File_write_all(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_iread_at => wm_File_iread_at(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iwrite_at => wm_File_iwrite_at(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iread_at_all => wm_File_iread_at_all(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iwrite_at_all => wm_File_iwrite_at_all(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iread => wm_File_iread(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iwrite => wm_File_iwrite(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iread_all => wm_File_iread_all(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iwrite_all => wm_File_iwrite_all(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_read_shared => wm_File_read_shared(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write_shared => wm_File_write_shared(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_iread_shared => wm_File_iread_shared(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iwrite_shared => wm_File_iwrite_shared(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_read_ordered => wm_File_read_ordered(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write_ordered => wm_File_write_ordered(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_seek_shared => wm_File_seek_shared(fh: Handle, offset: i64, whence: c_int) -> c_int;
    MPI_File_get_position_shared => wm_File_get_position_shared(fh: Handle, offset: Ptr) -> c_int;
    MPI_File_read_at_all_begin => wm_File_read_at_all_begin(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_read_at_all_end => wm_File_read_at_all_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
    MPI_File_write_at_all_begin => wm_File_write_at_all_begin(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_write_at_all_end => wm_File_write_at_all_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
    MPI_File_read_all_begin => wm_File_read_all_begin(fh: Handle, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_read_all_end => wm_File_read_all_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
    MPI_File_write_all_begin => wm_File_write_all_begin(fh: Handle, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_write_all_end => wm_File_write_all_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
    MPI_File_read_ordered_begin => wm_File_read_ordered_begin(fh: Handle, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_read_ordered_end => wm_File_read_ordered_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
    MPI_File_write_ordered_begin => wm_File_write_ordered_begin(fh: Handle, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_write_ordered_end => wm_File_write_ordered_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
}

// Not MPI-IO, but job-scoped delegates must stop before the MPI library finalizes.
trampolines! {
    MPI_Finalize => wm_Finalize() -> c_int;
}

//! The exported `MPI_File_*` symbols: one trampoline per function of MPI 3.1, each
//! calling its C implementation `wm_File_*` in `csrc/weft_mpiio.c` (or
//! `csrc/requests.c`); `MPI_Finalize`, which stops job-scoped delegates before the MPI
//! library's own; and the request completion calls (`MPI_Wait`, `MPI_Test`, ...), which
//! complete the generalized requests of nonblocking calls on Weft files. Each is
//! exported under its `PMPI_` name too: Open MPI's Fortran bindings and profiling tools
//! call those, and the C side reaches the MPI library's own through `REAL()`
//! (`csrc/real.h`, dlsym(RTLD_NEXT)), never by name.
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
    ($($name:ident, $pname:ident => $target:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty;)*) => {
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

            /// The same entry point under its profiling name: Fortran bindings and
            /// profiling tools call these.
            ///
            /// # Safety
            /// The MPI standard's contract for this function.
            #[no_mangle]
            pub unsafe extern "C" fn $pname($($arg: $ty),*) -> $ret {
                // SAFETY: the same arguments, passed on unchanged.
                unsafe { $target($($arg),*) }
            }
        )*
    };
}

type Handle = usize;
type Ptr = *mut c_void;

trampolines! {
    MPI_File_open, PMPI_File_open => wm_File_open(comm: Handle, filename: *const c_char, amode: c_int, info: Handle, fh: Ptr) -> c_int;
    MPI_File_close, PMPI_File_close => wm_File_close(fh: Ptr) -> c_int;
    MPI_File_delete, PMPI_File_delete => wm_File_delete(filename: *const c_char, info: Handle) -> c_int;
    MPI_File_c2f, PMPI_File_c2f => wm_File_c2f(fh: Handle) -> c_int;
    MPI_File_f2c, PMPI_File_f2c => wm_File_f2c(fint: c_int) -> Handle;
    MPI_File_call_errhandler, PMPI_File_call_errhandler => wm_File_call_errhandler(fh: Handle, errorcode: c_int) -> c_int;
    MPI_File_create_errhandler, PMPI_File_create_errhandler => wm_File_create_errhandler(function: Handle, errhandler: Ptr) -> c_int;
    MPI_File_set_errhandler, PMPI_File_set_errhandler => wm_File_set_errhandler(fh: Handle, errhandler: Handle) -> c_int;
    MPI_File_get_errhandler, PMPI_File_get_errhandler => wm_File_get_errhandler(fh: Handle, errhandler: Ptr) -> c_int;
    MPI_File_set_size, PMPI_File_set_size => wm_File_set_size(fh: Handle, size: i64) -> c_int;
    MPI_File_preallocate, PMPI_File_preallocate => wm_File_preallocate(fh: Handle, size: i64) -> c_int;
    MPI_File_get_size, PMPI_File_get_size => wm_File_get_size(fh: Handle, size: Ptr) -> c_int;
    MPI_File_get_group, PMPI_File_get_group => wm_File_get_group(fh: Handle, group: Ptr) -> c_int;
    MPI_File_get_amode, PMPI_File_get_amode => wm_File_get_amode(fh: Handle, amode: Ptr) -> c_int;
    MPI_File_set_info, PMPI_File_set_info => wm_File_set_info(fh: Handle, info: Handle) -> c_int;
    MPI_File_get_info, PMPI_File_get_info => wm_File_get_info(fh: Handle, info_used: Ptr) -> c_int;
    MPI_File_set_atomicity, PMPI_File_set_atomicity => wm_File_set_atomicity(fh: Handle, flag: c_int) -> c_int;
    MPI_File_get_atomicity, PMPI_File_get_atomicity => wm_File_get_atomicity(fh: Handle, flag: Ptr) -> c_int;
    MPI_File_sync, PMPI_File_sync => wm_File_sync(fh: Handle) -> c_int;
    MPI_File_set_view, PMPI_File_set_view => wm_File_set_view(fh: Handle, disp: i64, etype: Handle, filetype: Handle, datarep: *const c_char, info: Handle) -> c_int;
    MPI_File_get_view, PMPI_File_get_view => wm_File_get_view(fh: Handle, disp: Ptr, etype: Ptr, filetype: Ptr, datarep: *mut c_char) -> c_int;
    MPI_File_get_type_extent, PMPI_File_get_type_extent => wm_File_get_type_extent(fh: Handle, datatype: Handle, extent: Ptr) -> c_int;
    MPI_File_seek, PMPI_File_seek => wm_File_seek(fh: Handle, offset: i64, whence: c_int) -> c_int;
    MPI_File_get_position, PMPI_File_get_position => wm_File_get_position(fh: Handle, offset: Ptr) -> c_int;
    MPI_File_get_byte_offset, PMPI_File_get_byte_offset => wm_File_get_byte_offset(fh: Handle, offset: i64, disp: Ptr) -> c_int;
    MPI_File_read_at, PMPI_File_read_at => wm_File_read_at(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_read_at_all, PMPI_File_read_at_all => wm_File_read_at_all(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write_at, PMPI_File_write_at => wm_File_write_at(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write_at_all, PMPI_File_write_at_all => wm_File_write_at_all(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_read, PMPI_File_read => wm_File_read(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_read_all, PMPI_File_read_all => wm_File_read_all(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write, PMPI_File_write => wm_File_write(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write_all, PMPI_File_write_all => wm_File_write_all(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_iread_at, PMPI_File_iread_at => wm_File_iread_at(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iwrite_at, PMPI_File_iwrite_at => wm_File_iwrite_at(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iread_at_all, PMPI_File_iread_at_all => wm_File_iread_at_all(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iwrite_at_all, PMPI_File_iwrite_at_all => wm_File_iwrite_at_all(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iread, PMPI_File_iread => wm_File_iread(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iwrite, PMPI_File_iwrite => wm_File_iwrite(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iread_all, PMPI_File_iread_all => wm_File_iread_all(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iwrite_all, PMPI_File_iwrite_all => wm_File_iwrite_all(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_read_shared, PMPI_File_read_shared => wm_File_read_shared(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write_shared, PMPI_File_write_shared => wm_File_write_shared(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_iread_shared, PMPI_File_iread_shared => wm_File_iread_shared(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_iwrite_shared, PMPI_File_iwrite_shared => wm_File_iwrite_shared(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, request: Ptr) -> c_int;
    MPI_File_read_ordered, PMPI_File_read_ordered => wm_File_read_ordered(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_write_ordered, PMPI_File_write_ordered => wm_File_write_ordered(fh: Handle, buf: Ptr, count: c_int, datatype: Handle, status: Ptr) -> c_int;
    MPI_File_seek_shared, PMPI_File_seek_shared => wm_File_seek_shared(fh: Handle, offset: i64, whence: c_int) -> c_int;
    MPI_File_get_position_shared, PMPI_File_get_position_shared => wm_File_get_position_shared(fh: Handle, offset: Ptr) -> c_int;
    MPI_File_read_at_all_begin, PMPI_File_read_at_all_begin => wm_File_read_at_all_begin(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_read_at_all_end, PMPI_File_read_at_all_end => wm_File_read_at_all_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
    MPI_File_write_at_all_begin, PMPI_File_write_at_all_begin => wm_File_write_at_all_begin(fh: Handle, offset: i64, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_write_at_all_end, PMPI_File_write_at_all_end => wm_File_write_at_all_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
    MPI_File_read_all_begin, PMPI_File_read_all_begin => wm_File_read_all_begin(fh: Handle, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_read_all_end, PMPI_File_read_all_end => wm_File_read_all_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
    MPI_File_write_all_begin, PMPI_File_write_all_begin => wm_File_write_all_begin(fh: Handle, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_write_all_end, PMPI_File_write_all_end => wm_File_write_all_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
    MPI_File_read_ordered_begin, PMPI_File_read_ordered_begin => wm_File_read_ordered_begin(fh: Handle, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_read_ordered_end, PMPI_File_read_ordered_end => wm_File_read_ordered_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
    MPI_File_write_ordered_begin, PMPI_File_write_ordered_begin => wm_File_write_ordered_begin(fh: Handle, buf: Ptr, count: c_int, datatype: Handle) -> c_int;
    MPI_File_write_ordered_end, PMPI_File_write_ordered_end => wm_File_write_ordered_end(fh: Handle, buf: Ptr, status: Ptr) -> c_int;
}

// Not MPI-IO, but job-scoped delegates must stop before the MPI library finalizes.
trampolines! {
    MPI_Finalize, PMPI_Finalize => wm_Finalize() -> c_int;
}

// Request completion: nonblocking calls on weft: files return generalized requests
// that these complete (`csrc/requests.c`, `nonblocking.rs`); every other request
// passes straight through.
trampolines! {
    MPI_Wait, PMPI_Wait => wm_Wait(request: Ptr, status: Ptr) -> c_int;
    MPI_Test, PMPI_Test => wm_Test(request: Ptr, flag: Ptr, status: Ptr) -> c_int;
    MPI_Waitall, PMPI_Waitall => wm_Waitall(count: c_int, requests: Ptr, statuses: Ptr) -> c_int;
    MPI_Testall, PMPI_Testall => wm_Testall(count: c_int, requests: Ptr, flag: Ptr, statuses: Ptr) -> c_int;
    MPI_Waitany, PMPI_Waitany => wm_Waitany(count: c_int, requests: Ptr, index: Ptr, status: Ptr) -> c_int;
    MPI_Testany, PMPI_Testany => wm_Testany(count: c_int, requests: Ptr, index: Ptr, flag: Ptr, status: Ptr) -> c_int;
    MPI_Waitsome, PMPI_Waitsome => wm_Waitsome(incount: c_int, requests: Ptr, outcount: Ptr, indices: Ptr, statuses: Ptr) -> c_int;
    MPI_Testsome, PMPI_Testsome => wm_Testsome(incount: c_int, requests: Ptr, outcount: Ptr, indices: Ptr, statuses: Ptr) -> c_int;
    MPI_Request_get_status, PMPI_Request_get_status => wm_Request_get_status(request: Handle, flag: Ptr, status: Ptr) -> c_int;
    MPI_Request_free, PMPI_Request_free => wm_Request_free(request: Ptr) -> c_int;
}

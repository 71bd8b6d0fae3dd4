/* Nonblocking, split collective and shared file pointer calls (requests.c), and the
 * Rust functions behind them (src/requests.rs). */
#ifndef WEFT_MPIIO_REQUESTS_H
#define WEFT_MPIIO_REQUESTS_H

#include <mpi.h>
#include <stdint.h>

#include "shim.h"

/* From weft_mpiio.c: the file's error handler on error `werr` (enum wm_error), and
 * the MPI class of `werr`. */
int wm_fail(MPI_File fh, int werr);
int wm_mpi_class(int werr);

/* external32 (weft_mpiio.c): when the view of fh is in "external32", x32_begin makes
 * the buffer to access instead of (buf, count, type): *tbuf, *tcount elements of *ttype
 * (the data converted for a write, room for a read); x32->tmp stays NULL otherwise, and
 * (buf, count, type) are accessed as they are. x32_end converts what a read brought
 * (`bytes` bytes) into buf and frees what x32_begin made. */
struct wm_x32 {
    void *tmp;
    MPI_Datatype ttype;
};
int wm_x32_begin(MPI_File fh, int write, const void *buf, int count, MPI_Datatype type,
                 struct wm_x32 *x32, void **tbuf, int *tcount, MPI_Datatype *ttype);
int wm_x32_end(struct wm_x32 *x32, int write, int64_t bytes, void *buf, int count,
               MPI_Datatype type);

/* The access of weft_mpiio_io (shared == 0) or weft_mpiio_shared_io (shared != 0),
 * with external32's conversion; returns enum wm_error. */
int wm_access(MPI_File fh, int shared, int flags, MPI_Offset offset, void *buf, int count,
              MPI_Datatype type, int64_t *bytes);
/* A collective call whose conversion failed (werr) on this rank: takes part through
 * part(fh, arg) with no data, so nothing hangs, and returns werr with its message. */
int wm_x32_take_part(MPI_File fh, int werr, void (*part)(MPI_File, void *), void *arg);

/* Split collective kinds (weft_mpiio_split_begin/end). */
#define WM_SPLIT_READ_AT_ALL 0
#define WM_SPLIT_WRITE_AT_ALL 1
#define WM_SPLIT_READ_ALL 2
#define WM_SPLIT_WRITE_ALL 3
#define WM_SPLIT_READ_ORDERED 4
#define WM_SPLIT_WRITE_ORDERED 5

/* weft_mpiio_shared_io flags (with WM_IO_WRITE). */
#define WM_IO_ORDERED 8

/* ---- The Rust half (src/requests.rs). Those returning int return enum wm_error. ---- */
/* Starts a nonblocking access (flags of weft_mpiio_io, and WM_IO_ORDERED / shared
 * pointer: WM_IO_SHARED); *op: the operation, owned by the caller until released. */
#define WM_IO_SHARED 16
int weft_mpiio_istart(wm_h fh, int flags, int64_t offset, void *buf, int count, wm_h type,
                      wm_h *op);
/* A finished operation (a collective call done at the call). */
wm_h weft_mpiio_op_done(wm_h fh, int werr, int64_t bytes);
int weft_mpiio_op_is_done(wm_h op);
void weft_mpiio_op_wait(wm_h op);
/* Class (enum wm_error) and bytes of a finished operation, for its status. */
int weft_mpiio_op_status(wm_h op, int64_t *bytes);
/* The operation's error (WM_OK if none), returned by the caller itself from then on:
 * its status says success. *fh: the file it was started on. */
int weft_mpiio_op_take_error(wm_h op, wm_h *fh);
void weft_mpiio_op_release(wm_h op);
void weft_mpiio_op_bind(wm_h request, wm_h op);
void weft_mpiio_op_unbind(wm_h request);
/* The operation bound to `request`, 0 if none. */
wm_h weft_mpiio_bound_op(wm_h request);
int weft_mpiio_bound_count(void);
/* Waits until some operation finishes or timeout_us passes. */
void weft_mpiio_wait_any(int timeout_us);
int weft_mpiio_split_begin(wm_h fh, int kind, int64_t offset, void *buf, int count, wm_h type);
int weft_mpiio_split_end(wm_h fh, int kind, const void *buf, int64_t *bytes);
/* read/write_shared (flags WM_IO_WRITE), read/write_ordered (| WM_IO_ORDERED). */
int weft_mpiio_shared_io(wm_h fh, int flags, void *buf, int count, wm_h type, int64_t *bytes);
int weft_mpiio_seek_shared(wm_h fh, int64_t offset, int whence);
int weft_mpiio_get_position_shared(wm_h fh, int64_t *offset);

#endif

/* The boundary between the C half of libweft_mpiio.so and its Rust half.
 *
 * MPI handles (MPI_Comm, MPI_Datatype, MPI_Info, MPI_Group, MPI_Errhandler, MPI_File)
 * cross it as wm_h: pointers in Open MPI, ints in MPICH, and a C cast converts
 * either to and from uintptr_t. Rust never sees an MPI type or constant. */
#ifndef WEFT_MPIIO_SHIM_H
#define WEFT_MPIIO_SHIM_H

#include <stdint.h>
#include <stddef.h>

typedef uintptr_t wm_h;

/* Error classes as Rust returns them; weft_mpiio.c maps them to MPI's. */
enum wm_error {
    WM_OK = 0,
    WM_ERR_ARG,
    WM_ERR_COUNT,
    WM_ERR_TYPE,
    WM_ERR_AMODE,
    WM_ERR_NO_SUCH_FILE,
    WM_ERR_FILE_EXISTS,
    WM_ERR_ACCESS,
    WM_ERR_NO_SPACE,
    WM_ERR_READ_ONLY,
    WM_ERR_IO,
    WM_ERR_UNSUPPORTED_OPERATION,
    WM_ERR_UNSUPPORTED_DATAREP,
    WM_ERR_NOT_SAME,
    WM_ERR_FILE,
    WM_ERR_BAD_FILE,
    WM_ERR_INFO_VALUE,
    WM_ERR_QUOTA,
    WM_ERR_INTERN,
    WM_ERR_OTHER,
    WM_ERR_FILE_IN_USE,
};

/* Access modes as Rust sees them. */
enum wm_amode {
    WM_MODE_RDONLY = 1,
    WM_MODE_RDWR = 2,
    WM_MODE_WRONLY = 4,
    WM_MODE_CREATE = 8,
    WM_MODE_EXCL = 16,
    WM_MODE_DELETE_ON_CLOSE = 32,
    WM_MODE_UNIQUE_OPEN = 64,
    WM_MODE_SEQUENTIAL = 128,
    WM_MODE_APPEND = 256,
};

/* Datatype combiners as Rust sees them (-1: one it does not know). */
enum wm_combiner {
    WM_COMBINER_NAMED = 0,
    WM_COMBINER_DUP,
    WM_COMBINER_CONTIGUOUS,
    WM_COMBINER_VECTOR,
    WM_COMBINER_HVECTOR,
    WM_COMBINER_INDEXED,
    WM_COMBINER_HINDEXED,
    WM_COMBINER_INDEXED_BLOCK,
    WM_COMBINER_HINDEXED_BLOCK,
    WM_COMBINER_STRUCT,
    WM_COMBINER_SUBARRAY,
    WM_COMBINER_DARRAY,
    WM_COMBINER_RESIZED,
    WM_COMBINER_F90,
};

/* Constants inside datatype contents, for wm_const. */
enum wm_constant {
    WM_ORDER_C = 0,
    WM_ORDER_FORTRAN,
    WM_DISTRIBUTE_BLOCK,
    WM_DISTRIBUTE_CYCLIC,
    WM_DISTRIBUTE_NONE,
    WM_DISTRIBUTE_DFLT_DARG,
    WM_MAX_INFO_KEY,
    WM_MAX_INFO_VAL,
    WM_DISPLACEMENT_CURRENT,
};

/* weft_mpiio_io flags. */
#define WM_IO_WRITE 1
#define WM_IO_COLLECTIVE 2
#define WM_IO_EXPLICIT_OFFSET 4

/* ---- The MPI shim: implemented in shim.c, called by Rust. Each returns an MPI
 * error code (0: success) unless said otherwise. ---- */
int wm_comm_rank(wm_h comm, int *rank);
int wm_comm_size(wm_h comm, int *size);
int wm_comm_dup(wm_h comm, wm_h *out);
int wm_comm_free(wm_h comm);
/* The duplicate of comm kept on it as an attribute (*found 0: none yet), and keeping
 * one; when comm is freed, weft_mpiio_cached_dup_gone (Rust) gets the duplicate. */
int wm_comm_cached_dup(wm_h comm, wm_h *dup, int *found);
int wm_comm_keep_dup(wm_h comm, wm_h dup);
/* 1 if MPI runs at MPI_THREAD_MULTIPLE. */
int wm_thread_multiple(void);
int wm_comm_group(wm_h comm, wm_h *group);
/* In place over n values; op 0: max, 1: min, 2: sum. */
int wm_allreduce_i64(wm_h comm, int64_t *values, int n, int op);
/* Whether the small collectives sleep while they wait (WEFT_MPIIO_WAIT; shim.c). */
int wm_wait_sleeps(void);
/* A Weft server runs on this machine: the automatic wait sleeps (shim.c). */
void wm_wait_note_local_servers(void);
int wm_bcast(wm_h comm, void *buf, int64_t len, int root);
int wm_barrier(wm_h comm);
int wm_allgather_i64(wm_h comm, const int64_t *send, int n, int64_t *recv);
int wm_alltoall_i64(wm_h comm, const int64_t *send, int64_t *recv);
int wm_alltoallv_bytes(wm_h comm, const void *sbuf, const int *scounts, const int *sdispls,
                       void *rbuf, const int *rcounts, const int *rdispls);
int wm_processor_name(char *buf, int len);
int wm_type_envelope(wm_h type, int *ni, int *na, int *nd, int *combiner);
int wm_type_contents(wm_h type, int ni, int na, int nd, int *ints, int64_t *addrs, wm_h *types);
int wm_type_free(wm_h type);
int wm_type_dup(wm_h type, wm_h *out);
int wm_type_size(wm_h type, int64_t *size);
int wm_type_extent(wm_h type, int64_t *lb, int64_t *extent);
int wm_const(int which);
wm_h wm_type_byte(void);
wm_h wm_info_null(void);
int wm_info_create(wm_h *out);
int wm_info_set(wm_h info, const char *key, const char *value);
int wm_info_nkeys(wm_h info, int *n);
int wm_info_nthkey(wm_h info, int n, char *key);
int wm_info_get(wm_h info, const char *key, int buflen, char *value, int *flag);

/* ---- Job-scoped delegates (spawn.c): spawning them, their launcher's side, and the
 * messages between the two. Each returns an MPI error code unless said otherwise. ---- */
int wm_init(void);
int wm_finalize(void);
wm_h wm_comm_world(void);
int wm_comm_get_parent(wm_h *parent, int *is_null);
int wm_comm_remote_size(wm_h comm, int *size);
/* hosts: NULL or "" for the MPI library's choice, else the "host" info value. */
int wm_comm_spawn(wm_h comm, const char *command, char **argv, int maxprocs, const char *hosts,
                  int root, wm_h *intercomm, int *errcodes);
int wm_comm_disconnect(wm_h comm);
int wm_send_bytes(wm_h comm, const void *buf, int len, int dest, int tag);
/* *flag: whether a message from source with tag waits; *len: its bytes. */
int wm_iprobe_bytes(wm_h comm, int source, int tag, int *flag, int *len);
int wm_recv_bytes(wm_h comm, void *buf, int len, int source, int tag);
/* The MPI library's text for an error code, NUL-terminated in len bytes. */
void wm_error_string(int code, char *buf, int len);

/* ---- The Rust half: called by weft_mpiio.c for files that are Weft's. They return
 * enum wm_error. ---- */
int weft_mpiio_is_ours(wm_h fh);
/* 1: `name` (not weft:) is inside a Weft mount whose cluster this process serves. */
int weft_mpiio_in_mount(const char *name);
int weft_mpiio_open(wm_h comm, const char *name, int amode, wm_h info, wm_h errhandler,
                    wm_h *fh);
int weft_mpiio_close(wm_h fh);
int weft_mpiio_delete(const char *name, wm_h info);
int weft_mpiio_sync(wm_h fh);
int weft_mpiio_get_size(wm_h fh, int64_t *size);
int weft_mpiio_set_size(wm_h fh, int64_t size);
int weft_mpiio_preallocate(wm_h fh, int64_t size);
int weft_mpiio_get_info(wm_h fh, wm_h *info);
int weft_mpiio_set_info(wm_h fh, wm_h info);
int weft_mpiio_set_atomicity(wm_h fh, int flag);
int weft_mpiio_get_atomicity(wm_h fh, int *flag);
int weft_mpiio_get_amode(wm_h fh, int *amode);
int weft_mpiio_get_group(wm_h fh, wm_h *group);
int weft_mpiio_set_view(wm_h fh, int64_t disp, wm_h etype, wm_h filetype, const char *datarep,
                        wm_h info);
int weft_mpiio_get_view(wm_h fh, int64_t *disp, wm_h *etype, wm_h *filetype, char *datarep);
int weft_mpiio_seek(wm_h fh, int64_t offset, int whence);
int weft_mpiio_get_position(wm_h fh, int64_t *offset);
int weft_mpiio_get_byte_offset(wm_h fh, int64_t offset, int64_t *disp);
int weft_mpiio_get_type_extent(wm_h fh, wm_h type, int64_t *extent);
int weft_mpiio_io(wm_h fh, int flags, int64_t offset, void *buf, int count, wm_h type,
                  int64_t *bytes);
/* 1 when the view of fh is in "external32" (the C half converts the data), else 0. */
int weft_mpiio_is_external32(wm_h fh);
/* Keeps `message` as this thread's last error, as a Rust failure's; returns `werr`. */
int weft_mpiio_fail_with(int werr, const char *message);
wm_h weft_mpiio_errhandler(wm_h fh);
/* This thread's last error message into buf (cut to len - 1 bytes, NUL-terminated);
 * returns its full length, 0 if the last call succeeded. */
size_t weft_mpiio_last_error(char *buf, size_t len);
/* The same, and forgets the message (it goes with the error code made for it). */
size_t weft_mpiio_take_last_error(char *buf, size_t len);
void weft_mpiio_set_errhandler(wm_h fh, wm_h errhandler);
int weft_mpiio_fint(wm_h fh);
wm_h weft_mpiio_from_fint(int fint);
/* Before PMPI_Finalize: stops job-scoped delegates of files still open. */
void weft_mpiio_finalize(void);

#endif

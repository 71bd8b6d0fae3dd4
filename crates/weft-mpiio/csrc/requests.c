/* Nonblocking, split collective and shared file pointer calls on Weft files, and the
 * request completion calls the library interposes (see src/nonblocking.rs for why).
 *
 * A nonblocking call on a Weft file returns a generalized request
 * (MPI_Grequest_start) bound to a Rust operation. The interposed MPI_Wait, MPI_Test,
 * ... complete (MPI_Grequest_complete) the bound requests whose operation finished,
 * waiting for them where the call blocks, then hand the call to the MPI library, which
 * then sees completed generalized requests. With no bound request outstanding they
 * pass straight through. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

#include "real.h"
#include "requests.h"
#include "shim.h"

#define OURS(fh) ((fh) != MPI_FILE_NULL && weft_mpiio_is_ours((wm_h)(fh)))
#define H(x) ((wm_h)(x))

/* ---- Generalized request callbacks ---- */

static int query_fn(void *extra, MPI_Status *status)
{
    int64_t bytes = 0;
    int e = weft_mpiio_op_status(H(extra), &bytes);
    MPI_Status_set_elements_x(status, MPI_BYTE, (MPI_Count)bytes);
    MPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    return wm_mpi_class(e);
}

static int free_fn(void *extra)
{
    weft_mpiio_op_release(H(extra));
    return MPI_SUCCESS;
}

static int cancel_fn(void *extra, int complete)
{
    /* I/O under way is not cancelled: it completes normally (MPI permits that). */
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

/* A generalized request for operation `op`: bound to it while running, completed at
 * once when it is already over (collective calls). */
static int request_for(MPI_File fh, wm_h op, int finished, MPI_Request *request)
{
    int rc = MPI_Grequest_start(query_fn, free_fn, cancel_fn, (void *)op, request);
    if (rc != MPI_SUCCESS) {
        weft_mpiio_op_wait(op);
        weft_mpiio_op_release(op);
        *request = MPI_REQUEST_NULL;
        fprintf(stderr, "weft-mpiio: MPI_Grequest_start failed for a weft: file request\n");
        return wm_fail(fh, WM_ERR_INTERN);
    }
    if (finished)
        MPI_Grequest_complete(*request);
    else
        weft_mpiio_op_bind(H(*request), op);
    return MPI_SUCCESS;
}

static int istart(MPI_File fh, int flags, MPI_Offset offset, void *buf, int count,
                  MPI_Datatype type, MPI_Request *request)
{
    if (request == NULL)
        return wm_fail(fh, WM_ERR_ARG);
    *request = MPI_REQUEST_NULL;
    if (flags & WM_IO_COLLECTIVE) {
        /* Done now: the exchange of a collective call needs MPI on this thread. */
        int64_t bytes = 0;
        int e = wm_access(fh, 0, flags, offset, buf, count, type, &bytes);
        if (e != WM_OK)
            return wm_fail(fh, e);
        return request_for(fh, weft_mpiio_op_done(H(fh), WM_OK, bytes), 1, request);
    }
    if (weft_mpiio_is_external32(H(fh))) {
        /* external32: converted and done at the call, as MPI allows a nonblocking call
         * to complete at once (the conversion needs MPI on this thread). */
        int64_t bytes = 0;
        int shared = (flags & WM_IO_SHARED) != 0;
        int e = wm_access(fh, shared, flags & ~WM_IO_SHARED, offset, buf, count, type, &bytes);
        if (e != WM_OK)
            return wm_fail(fh, e);
        return request_for(fh, weft_mpiio_op_done(H(fh), WM_OK, bytes), 1, request);
    }
    wm_h op = 0;
    int e = weft_mpiio_istart(H(fh), flags, (int64_t)offset, buf, count, H(type), &op);
    if (e != WM_OK)
        return wm_fail(fh, e);
    return request_for(fh, op, 0, request);
}

/* ---- Nonblocking calls ---- */

int wm_File_iread_at(MPI_File fh, MPI_Offset offset, void *buf, int count, MPI_Datatype datatype,
                     MPI_Request *request)
{
    if (!OURS(fh))
        return REAL(PMPI_File_iread_at)(fh, offset, buf, count, datatype, request);
    return istart(fh, WM_IO_EXPLICIT_OFFSET, offset, buf, count, datatype, request);
}

int wm_File_iwrite_at(MPI_File fh, MPI_Offset offset, const void *buf, int count,
                      MPI_Datatype datatype, MPI_Request *request)
{
    if (!OURS(fh))
        return REAL(PMPI_File_iwrite_at)(fh, offset, buf, count, datatype, request);
    return istart(fh, WM_IO_EXPLICIT_OFFSET | WM_IO_WRITE, offset, (void *)buf, count, datatype,
                  request);
}

int wm_File_iread_at_all(MPI_File fh, MPI_Offset offset, void *buf, int count,
                         MPI_Datatype datatype, MPI_Request *request)
{
    if (!OURS(fh))
        return REAL(PMPI_File_iread_at_all)(fh, offset, buf, count, datatype, request);
    return istart(fh, WM_IO_EXPLICIT_OFFSET | WM_IO_COLLECTIVE, offset, buf, count, datatype,
                  request);
}

int wm_File_iwrite_at_all(MPI_File fh, MPI_Offset offset, const void *buf, int count,
                          MPI_Datatype datatype, MPI_Request *request)
{
    if (!OURS(fh))
        return REAL(PMPI_File_iwrite_at_all)(fh, offset, buf, count, datatype, request);
    return istart(fh, WM_IO_EXPLICIT_OFFSET | WM_IO_WRITE | WM_IO_COLLECTIVE, offset, (void *)buf,
                  count, datatype, request);
}

int wm_File_iread(MPI_File fh, void *buf, int count, MPI_Datatype datatype, MPI_Request *request)
{
    if (!OURS(fh))
        return REAL(PMPI_File_iread)(fh, buf, count, datatype, request);
    return istart(fh, 0, 0, buf, count, datatype, request);
}

int wm_File_iwrite(MPI_File fh, const void *buf, int count, MPI_Datatype datatype,
                   MPI_Request *request)
{
    if (!OURS(fh))
        return REAL(PMPI_File_iwrite)(fh, buf, count, datatype, request);
    return istart(fh, WM_IO_WRITE, 0, (void *)buf, count, datatype, request);
}

int wm_File_iread_all(MPI_File fh, void *buf, int count, MPI_Datatype datatype,
                      MPI_Request *request)
{
    if (!OURS(fh))
        return REAL(PMPI_File_iread_all)(fh, buf, count, datatype, request);
    return istart(fh, WM_IO_COLLECTIVE, 0, buf, count, datatype, request);
}

int wm_File_iwrite_all(MPI_File fh, const void *buf, int count, MPI_Datatype datatype,
                       MPI_Request *request)
{
    if (!OURS(fh))
        return REAL(PMPI_File_iwrite_all)(fh, buf, count, datatype, request);
    return istart(fh, WM_IO_WRITE | WM_IO_COLLECTIVE, 0, (void *)buf, count, datatype, request);
}

int wm_File_iread_shared(MPI_File fh, void *buf, int count, MPI_Datatype datatype,
                         MPI_Request *request)
{
    if (!OURS(fh))
        return REAL(PMPI_File_iread_shared)(fh, buf, count, datatype, request);
    return istart(fh, WM_IO_SHARED, 0, buf, count, datatype, request);
}

int wm_File_iwrite_shared(MPI_File fh, const void *buf, int count, MPI_Datatype datatype,
                          MPI_Request *request)
{
    if (!OURS(fh))
        return REAL(PMPI_File_iwrite_shared)(fh, buf, count, datatype, request);
    return istart(fh, WM_IO_SHARED | WM_IO_WRITE, 0, (void *)buf, count, datatype, request);
}

/* ---- Shared file pointers ---- */

static int shared_io(MPI_File fh, int flags, void *buf, int count, MPI_Datatype type,
                     MPI_Status *status)
{
    int64_t bytes = 0;
    int e = wm_access(fh, 1, flags, 0, buf, count, type, &bytes);
    if (e == WM_OK && status != MPI_STATUS_IGNORE)
        MPI_Status_set_elements_x(status, MPI_BYTE, (MPI_Count)bytes);
    return wm_fail(fh, e);
}

int wm_File_read_shared(MPI_File fh, void *buf, int count, MPI_Datatype datatype,
                        MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read_shared)(fh, buf, count, datatype, status);
    return shared_io(fh, 0, buf, count, datatype, status);
}

int wm_File_write_shared(MPI_File fh, const void *buf, int count, MPI_Datatype datatype,
                         MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write_shared)(fh, buf, count, datatype, status);
    return shared_io(fh, WM_IO_WRITE, (void *)buf, count, datatype, status);
}

int wm_File_read_ordered(MPI_File fh, void *buf, int count, MPI_Datatype datatype,
                         MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read_ordered)(fh, buf, count, datatype, status);
    return shared_io(fh, WM_IO_ORDERED, buf, count, datatype, status);
}

int wm_File_write_ordered(MPI_File fh, const void *buf, int count, MPI_Datatype datatype,
                          MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write_ordered)(fh, buf, count, datatype, status);
    return shared_io(fh, WM_IO_ORDERED | WM_IO_WRITE, (void *)buf, count, datatype, status);
}

static int whence_to_wm(int whence)
{
    if (whence == MPI_SEEK_SET) return 0;
    if (whence == MPI_SEEK_CUR) return 1;
    if (whence == MPI_SEEK_END) return 2;
    return -1;
}

int wm_File_seek_shared(MPI_File fh, MPI_Offset offset, int whence)
{
    if (!OURS(fh))
        return REAL(PMPI_File_seek_shared)(fh, offset, whence);
    return wm_fail(fh, weft_mpiio_seek_shared(H(fh), (int64_t)offset, whence_to_wm(whence)));
}

int wm_File_get_position_shared(MPI_File fh, MPI_Offset *offset)
{
    if (!OURS(fh))
        return REAL(PMPI_File_get_position_shared)(fh, offset);
    int64_t o = 0;
    int e = weft_mpiio_get_position_shared(H(fh), &o);
    if (e == WM_OK && offset != NULL)
        *offset = (MPI_Offset)o;
    return wm_fail(fh, e);
}

/* ---- Split collectives: the work is done at _begin (as ROMIO does), _end returns
 * its status; one outstanding per file handle. ---- */

/* external32 conversions of outstanding split collectives: the converted buffer is the
 * one accessed from _begin to _end (a read's data are converted at _end). Bounded: a
 * _begin past SPLITS_X32_MAX outstanding ones fails with MPI_ERR_OTHER. */
#define SPLITS_X32_MAX 256
static struct split_x32 {
    MPI_File fh;
    const void *buf;
    int count, write;
    MPI_Datatype type; /* a duplicate, freed at _end */
    struct wm_x32 x32;
} splits_x32[SPLITS_X32_MAX];
static pthread_mutex_t splits_x32_lock = PTHREAD_MUTEX_INITIALIZER;

struct split_part {
    int kind;
    MPI_Offset offset;
};

static void split_nothing(MPI_File fh, void *arg)
{
    struct split_part *p = arg;
    int64_t bytes = 0;
    weft_mpiio_split_begin(H(fh), p->kind, (int64_t)p->offset, NULL, 0, H(MPI_BYTE));
    weft_mpiio_split_end(H(fh), p->kind, NULL, &bytes);
}

static int split_begin(MPI_File fh, int kind, MPI_Offset offset, void *buf, int count,
                       MPI_Datatype type)
{
    if (!weft_mpiio_is_external32(H(fh)))
        return wm_fail(fh, weft_mpiio_split_begin(H(fh), kind, (int64_t)offset, buf, count,
                                                  H(type)));
    int write = kind % 2 == 1;
    struct split_x32 s = {fh, buf, count, write, MPI_DATATYPE_NULL, {NULL, MPI_DATATYPE_NULL}};
    void *tbuf;
    int tcount;
    MPI_Datatype ttype;
    int xe = wm_x32_begin(fh, write, buf, count, type, &s.x32, &tbuf, &tcount, &ttype);
    if (xe == WM_OK && s.x32.tmp == NULL) /* nothing to convert */
        return wm_fail(fh, weft_mpiio_split_begin(H(fh), kind, (int64_t)offset, buf, count,
                                                  H(type)));
    if (xe == WM_OK && MPI_Type_dup(type, &s.type) != MPI_SUCCESS) {
        wm_x32_end(&s.x32, 1, 0, NULL, 0, type);
        xe = weft_mpiio_fail_with(WM_ERR_INTERN, "external32: MPI_Type_dup failed");
    }
    int slot = -1;
    if (xe == WM_OK) {
        pthread_mutex_lock(&splits_x32_lock);
        for (int i = 0; i < SPLITS_X32_MAX && slot < 0; i++)
            if (splits_x32[i].fh == MPI_FILE_NULL || splits_x32[i].fh == NULL)
                slot = i;
        if (slot >= 0)
            splits_x32[slot] = s;
        pthread_mutex_unlock(&splits_x32_lock);
        if (slot < 0) {
            wm_x32_end(&s.x32, 1, 0, NULL, 0, type);
            MPI_Type_free(&s.type);
            xe = weft_mpiio_fail_with(WM_ERR_OTHER,
                                      "external32: too many outstanding split collectives");
        }
    }
    if (xe != WM_OK) {
        struct split_part p = {kind, offset};
        return wm_fail(fh, wm_x32_take_part(fh, xe, split_nothing, &p));
    }
    int e = weft_mpiio_split_begin(H(fh), kind, (int64_t)offset, tbuf, tcount, H(ttype));
    if (e != WM_OK) {
        pthread_mutex_lock(&splits_x32_lock);
        splits_x32[slot].fh = MPI_FILE_NULL;
        pthread_mutex_unlock(&splits_x32_lock);
        wm_x32_end(&s.x32, 1, 0, NULL, 0, type);
        MPI_Type_free(&s.type);
    }
    return wm_fail(fh, e);
}

static int split_end(MPI_File fh, int kind, const void *buf, MPI_Status *status)
{
    int64_t bytes = 0;
    struct split_x32 s;
    int found = 0;
    pthread_mutex_lock(&splits_x32_lock);
    for (int i = 0; i < SPLITS_X32_MAX && !found; i++)
        if (splits_x32[i].fh == fh && splits_x32[i].buf == buf) {
            s = splits_x32[i];
            splits_x32[i].fh = MPI_FILE_NULL;
            found = 1;
        }
    pthread_mutex_unlock(&splits_x32_lock);
    int e;
    if (found) {
        e = weft_mpiio_split_end(H(fh), kind, s.x32.tmp, &bytes);
        int e2 = wm_x32_end(&s.x32, s.write, e == WM_OK ? bytes : 0, (void *)buf, s.count,
                            s.type);
        MPI_Type_free(&s.type);
        if (e == WM_OK)
            e = e2;
    } else {
        e = weft_mpiio_split_end(H(fh), kind, buf, &bytes);
    }
    if (e == WM_OK && status != MPI_STATUS_IGNORE)
        MPI_Status_set_elements_x(status, MPI_BYTE, (MPI_Count)bytes);
    return wm_fail(fh, e);
}

int wm_File_read_at_all_begin(MPI_File fh, MPI_Offset offset, void *buf, int count,
                              MPI_Datatype datatype)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read_at_all_begin)(fh, offset, buf, count, datatype);
    return split_begin(fh, WM_SPLIT_READ_AT_ALL, offset, buf, count, datatype);
}

int wm_File_read_at_all_end(MPI_File fh, void *buf, MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read_at_all_end)(fh, buf, status);
    return split_end(fh, WM_SPLIT_READ_AT_ALL, buf, status);
}

int wm_File_write_at_all_begin(MPI_File fh, MPI_Offset offset, const void *buf, int count,
                               MPI_Datatype datatype)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write_at_all_begin)(fh, offset, buf, count, datatype);
    return split_begin(fh, WM_SPLIT_WRITE_AT_ALL, offset, (void *)buf, count, datatype);
}

int wm_File_write_at_all_end(MPI_File fh, const void *buf, MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write_at_all_end)(fh, buf, status);
    return split_end(fh, WM_SPLIT_WRITE_AT_ALL, buf, status);
}

int wm_File_read_all_begin(MPI_File fh, void *buf, int count, MPI_Datatype datatype)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read_all_begin)(fh, buf, count, datatype);
    return split_begin(fh, WM_SPLIT_READ_ALL, 0, buf, count, datatype);
}

int wm_File_read_all_end(MPI_File fh, void *buf, MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read_all_end)(fh, buf, status);
    return split_end(fh, WM_SPLIT_READ_ALL, buf, status);
}

int wm_File_write_all_begin(MPI_File fh, const void *buf, int count, MPI_Datatype datatype)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write_all_begin)(fh, buf, count, datatype);
    return split_begin(fh, WM_SPLIT_WRITE_ALL, 0, (void *)buf, count, datatype);
}

int wm_File_write_all_end(MPI_File fh, const void *buf, MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write_all_end)(fh, buf, status);
    return split_end(fh, WM_SPLIT_WRITE_ALL, buf, status);
}

int wm_File_read_ordered_begin(MPI_File fh, void *buf, int count, MPI_Datatype datatype)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read_ordered_begin)(fh, buf, count, datatype);
    return split_begin(fh, WM_SPLIT_READ_ORDERED, 0, buf, count, datatype);
}

int wm_File_read_ordered_end(MPI_File fh, void *buf, MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_read_ordered_end)(fh, buf, status);
    return split_end(fh, WM_SPLIT_READ_ORDERED, buf, status);
}

int wm_File_write_ordered_begin(MPI_File fh, const void *buf, int count, MPI_Datatype datatype)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write_ordered_begin)(fh, buf, count, datatype);
    return split_begin(fh, WM_SPLIT_WRITE_ORDERED, 0, (void *)buf, count, datatype);
}

int wm_File_write_ordered_end(MPI_File fh, const void *buf, MPI_Status *status)
{
    if (!OURS(fh))
        return REAL(PMPI_File_write_ordered_end)(fh, buf, status);
    return split_end(fh, WM_SPLIT_WRITE_ORDERED, buf, status);
}

/* ---- Request completion ---- */

/* Completes request *r if it is bound to an operation that is over (waiting for it
 * when `block`). Returns the operation's error class to report (WM_OK if none, or
 * when `take_error` is 0: the request's status then carries it) and sets *fh. */
static int settle(MPI_Request *r, int block, int take_error, MPI_File *fh)
{
    if (r == NULL || *r == MPI_REQUEST_NULL)
        return WM_OK;
    wm_h op = weft_mpiio_bound_op(H(*r));
    if (op == 0)
        return WM_OK;
    if (block)
        weft_mpiio_op_wait(op);
    else if (!weft_mpiio_op_is_done(op))
        return WM_OK;
    int e = WM_OK;
    if (take_error) {
        wm_h f = 0;
        e = weft_mpiio_op_take_error(op, &f);
        *fh = (MPI_File)f;
    }
    weft_mpiio_op_unbind(H(*r));
    MPI_Grequest_complete(*r);
    return e;
}

static int any_bound(void)
{
    return weft_mpiio_bound_count() > 0;
}

/* An error of a single request's I/O goes through the file's error handler, as the
 * blocking call's would, rather than the MPI library's handler of MPI_COMM_WORLD. */
static int single_result(int rc, int e, MPI_File fh, MPI_Status *status)
{
    if (e == WM_OK)
        return rc;
    if (status != MPI_STATUS_IGNORE)
        status->MPI_ERROR = wm_mpi_class(e);
    return wm_fail(fh, e);
}

int wm_Wait(MPI_Request *request, MPI_Status *status)
{
    if (!any_bound())
        return REAL(PMPI_Wait)(request, status);
    MPI_File fh = MPI_FILE_NULL;
    int e = settle(request, 1, 1, &fh);
    int rc = REAL(PMPI_Wait)(request, status);
    return single_result(rc, e, fh, status);
}

int wm_Test(MPI_Request *request, int *flag, MPI_Status *status)
{
    if (!any_bound())
        return REAL(PMPI_Test)(request, flag, status);
    MPI_File fh = MPI_FILE_NULL;
    int e = settle(request, 0, 1, &fh);
    int rc = REAL(PMPI_Test)(request, flag, status);
    return single_result(rc, e, fh, status);
}

int wm_Request_get_status(MPI_Request request, int *flag, MPI_Status *status)
{
    if (any_bound() && request != MPI_REQUEST_NULL) {
        wm_h op = weft_mpiio_bound_op(H(request));
        if (op != 0 && !weft_mpiio_op_is_done(op)) {
            *flag = 0;
            return MPI_SUCCESS;
        }
        MPI_File fh = MPI_FILE_NULL;
        settle(&request, 0, 0, &fh);
    }
    return REAL(PMPI_Request_get_status)(request, flag, status);
}

int wm_Request_free(MPI_Request *request)
{
    if (any_bound()) {
        /* Freed unfinished: the I/O still completes (MPI says so); wait for it here so
         * that nothing is left to complete the request. */
        MPI_File fh = MPI_FILE_NULL;
        settle(request, 1, 0, &fh);
    }
    return REAL(PMPI_Request_free)(request);
}

int wm_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    if (any_bound() && requests != NULL) {
        MPI_File fh = MPI_FILE_NULL;
        for (int i = 0; i < count; i++)
            settle(&requests[i], 1, 0, &fh);
    }
    return REAL(PMPI_Waitall)(count, requests, statuses);
}

int wm_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[])
{
    if (any_bound() && requests != NULL) {
        MPI_File fh = MPI_FILE_NULL;
        for (int i = 0; i < count; i++)
            settle(&requests[i], 0, 0, &fh);
    }
    return REAL(PMPI_Testall)(count, requests, flag, statuses);
}

int wm_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status)
{
    if (any_bound() && requests != NULL) {
        MPI_File fh = MPI_FILE_NULL;
        for (int i = 0; i < count; i++)
            settle(&requests[i], 0, 0, &fh);
    }
    return REAL(PMPI_Testany)(count, requests, index, flag, status);
}

int wm_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                MPI_Status statuses[])
{
    if (any_bound() && requests != NULL) {
        MPI_File fh = MPI_FILE_NULL;
        for (int i = 0; i < incount; i++)
            settle(&requests[i], 0, 0, &fh);
    }
    return REAL(PMPI_Testsome)(incount, requests, outcount, indices, statuses);
}

/* Completes the finished bound requests among `requests`; returns how many bound ones
 * are still running. */
static int settle_finished(int count, MPI_Request requests[])
{
    int running = 0;
    MPI_File fh = MPI_FILE_NULL;
    for (int i = 0; i < count; i++) {
        settle(&requests[i], 0, 0, &fh);
        if (requests[i] != MPI_REQUEST_NULL && weft_mpiio_bound_op(H(requests[i])) != 0)
            running++;
    }
    return running;
}

/* How long a wait for any of several requests sleeps between polls of the MPI library
 * while some of them are Weft's (a Weft operation finishing ends the sleep at once). */
#define POLL_US 200

int wm_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status)
{
    if (!any_bound() || requests == NULL)
        return REAL(PMPI_Waitany)(count, requests, index, status);
    for (;;) {
        if (settle_finished(count, requests) == 0)
            return REAL(PMPI_Waitany)(count, requests, index, status);
        int flag = 0;
        int rc = REAL(PMPI_Testany)(count, requests, index, &flag, status);
        if (rc != MPI_SUCCESS || flag)
            return rc;
        weft_mpiio_wait_any(POLL_US);
    }
}

int wm_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                MPI_Status statuses[])
{
    if (!any_bound() || requests == NULL)
        return REAL(PMPI_Waitsome)(incount, requests, outcount, indices, statuses);
    for (;;) {
        if (settle_finished(incount, requests) == 0)
            return REAL(PMPI_Waitsome)(incount, requests, outcount, indices, statuses);
        int rc = REAL(PMPI_Testsome)(incount, requests, outcount, indices, statuses);
        if (rc != MPI_SUCCESS || *outcount != 0)
            return rc;
        weft_mpiio_wait_any(POLL_US);
    }
}

/* ---- For the ordered calls (src/shared.rs) ---- */

int wm_exscan_i64(wm_h comm, int64_t value, int64_t *out)
{
    int rank = 0;
    MPI_Comm_rank((MPI_Comm)comm, &rank);
    *out = 0;
    int64_t sum = 0;
    int rc = MPI_Exscan(&value, &sum, 1, MPI_INT64_T, MPI_SUM, (MPI_Comm)comm);
    /* MPI leaves rank 0's result undefined. */
    if (rc == MPI_SUCCESS && rank != 0)
        *out = sum;
    return rc;
}

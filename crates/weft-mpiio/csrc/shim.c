/* The MPI shim: the few MPI calls the Rust half needs, with handles as wm_h so that
 * Rust needs neither mpi.h nor an MPI implementation's ABI. */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim.h"

#define COMM(h) ((MPI_Comm)(h))
#define TYPE(h) ((MPI_Datatype)(h))
#define INFO(h) ((MPI_Info)(h))

int wm_comm_rank(wm_h comm, int *rank) { return MPI_Comm_rank(COMM(comm), rank); }
int wm_comm_size(wm_h comm, int *size) { return MPI_Comm_size(COMM(comm), size); }

int wm_comm_dup(wm_h comm, wm_h *out)
{
    MPI_Comm dup;
    int rc = MPI_Comm_dup(COMM(comm), &dup);
    *out = (wm_h)dup;
    return rc;
}

int wm_comm_free(wm_h comm)
{
    MPI_Comm c = COMM(comm);
    return MPI_Comm_free(&c);
}

/* The duplicates the opens of a communicator share (mpi.rs, Comm::dup_for_file): kept
 * on the communicator as an attribute, so a communicator freed and another made at the
 * same handle never finds the old one; freeing it hands the duplicate back to Rust. */
static int wm_dup_keyval = MPI_KEYVAL_INVALID;

extern void weft_mpiio_cached_dup_gone(wm_h dup);

static int wm_dup_deleted(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void)comm;
    (void)keyval;
    (void)extra;
    weft_mpiio_cached_dup_gone((wm_h)value);
    return MPI_SUCCESS;
}

int wm_comm_cached_dup(wm_h comm, wm_h *dup, int *found)
{
    int rc, flag = 0;
    void *value = NULL;
    *found = 0;
    *dup = 0;
    if (wm_dup_keyval == MPI_KEYVAL_INVALID) {
        rc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, wm_dup_deleted, &wm_dup_keyval, NULL);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    rc = MPI_Comm_get_attr(COMM(comm), wm_dup_keyval, &value, &flag);
    if (rc == MPI_SUCCESS && flag) {
        *found = 1;
        *dup = (wm_h)value;
    }
    return rc;
}

int wm_comm_keep_dup(wm_h comm, wm_h dup)
{
    return MPI_Comm_set_attr(COMM(comm), wm_dup_keyval, (void *)dup);
}

int wm_thread_multiple(void)
{
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    return provided == MPI_THREAD_MULTIPLE;
}

int wm_comm_group(wm_h comm, wm_h *group)
{
    MPI_Group g;
    int rc = MPI_Comm_group(COMM(comm), &g);
    *group = (wm_h)g;
    return rc;
}

/* How the small collectives every collective call makes (the allgather and allreduce
 * of errors and extents) wait for the other ranks. MPI implementations poll while they
 * wait; on a node with more ranks than CPUs (mpirun --oversubscribe) the polling ranks
 * take the CPUs from the ranks still doing their I/O and from the servers serving it,
 * and a call of a few hundred microseconds then waits for time slices. So there, a
 * wait polls for WAIT_SPIN_NS and then sleeps WAIT_SLEEP_NS between polls.
 * WEFT_MPIIO_WAIT: "spin" (the MPI library's own wait), "sleep" (always the above),
 * unset or anything else: "sleep" when the node's ranks of the job (Open MPI's
 * OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS) outnumber the CPUs this process
 * may run on, or when Weft servers run on this machine (the Rust half says so at
 * open: wm_wait_note_local_servers), else "spin". */
#define WAIT_SPIN_NS 50000L
#define WAIT_SLEEP_NS 20000L

static int local_ranks(void)
{
    const char *names[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && atoi(v) > 0)
            return atoi(v);
    }
    return 0;
}

static int cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return CPU_COUNT(&set);
    return 0;
}

static int local_servers;

void wm_wait_note_local_servers(void) { local_servers = 1; }

int wm_wait_sleeps(void)
{
    /* -1: not decided; 0 or 1: forced by WEFT_MPIIO_WAIT; 2: automatic, not
     * oversubscribed; 3: automatic, oversubscribed. */
    static int mode = -1;
    if (mode < 0) {
        const char *v = getenv("WEFT_MPIIO_WAIT");
        if (v && strcmp(v, "spin") == 0)
            mode = 0;
        else if (v && strcmp(v, "sleep") == 0)
            mode = 1;
        else {
            int ranks = local_ranks(), n = cpus();
            mode = ranks > 0 && n > 0 && ranks > n ? 3 : 2;
        }
    }
    if (mode < 2)
        return mode;
    return mode == 3 || local_servers;
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Completes `req`: polls for WAIT_SPIN_NS, then sleeps between polls. PMPI_Test: the
 * library's own MPI_Test completes generalized requests (requests.c). */
static int wait_gently(MPI_Request *req)
{
    int64_t start = now_ns();
    for (;;) {
        int done = 0;
        int rc = PMPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done)
            return rc;
        if (now_ns() - start > WAIT_SPIN_NS) {
            struct timespec t = {0, WAIT_SLEEP_NS};
            nanosleep(&t, NULL);
        }
    }
}

int wm_allreduce_i64(wm_h comm, int64_t *values, int n, int op)
{
    MPI_Op mop = op == 0 ? MPI_MAX : op == 1 ? MPI_MIN : MPI_SUM;
    if (!wm_wait_sleeps())
        return MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_INT64_T, mop, COMM(comm));
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, values, n, MPI_INT64_T, mop, COMM(comm), &req);
    return rc != MPI_SUCCESS ? rc : wait_gently(&req);
}

int wm_bcast(wm_h comm, void *buf, int64_t len, int root)
{
    char *p = buf;
    while (len > 0) {
        int n = len > (1 << 30) ? (1 << 30) : (int)len;
        int rc = MPI_Bcast(p, n, MPI_BYTE, root, COMM(comm));
        if (rc != MPI_SUCCESS)
            return rc;
        p += n;
        len -= n;
    }
    return MPI_SUCCESS;
}

int wm_barrier(wm_h comm) { return MPI_Barrier(COMM(comm)); }

int wm_allgather_i64(wm_h comm, const int64_t *send, int n, int64_t *recv)
{
    if (!wm_wait_sleeps())
        return MPI_Allgather(send, n, MPI_INT64_T, recv, n, MPI_INT64_T, COMM(comm));
    MPI_Request req;
    int rc = MPI_Iallgather(send, n, MPI_INT64_T, recv, n, MPI_INT64_T, COMM(comm), &req);
    return rc != MPI_SUCCESS ? rc : wait_gently(&req);
}

int wm_alltoall_i64(wm_h comm, const int64_t *send, int64_t *recv)
{
    return MPI_Alltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, COMM(comm));
}

int wm_alltoallv_bytes(wm_h comm, const void *sbuf, const int *scounts, const int *sdispls,
                       void *rbuf, const int *rcounts, const int *rdispls)
{
    return MPI_Alltoallv(sbuf, scounts, sdispls, MPI_BYTE, rbuf, rcounts, rdispls, MPI_BYTE,
                         COMM(comm));
}

int wm_processor_name(char *buf, int len)
{
    char name[MPI_MAX_PROCESSOR_NAME];
    int n = 0;
    int rc = MPI_Get_processor_name(name, &n);
    if (rc != MPI_SUCCESS || len <= 0)
        return rc;
    if (n >= len)
        n = len - 1;
    memcpy(buf, name, (size_t)n);
    buf[n] = 0;
    return rc;
}

static int combiner_of(int c)
{
    if (c == MPI_COMBINER_NAMED) return WM_COMBINER_NAMED;
    if (c == MPI_COMBINER_DUP) return WM_COMBINER_DUP;
    if (c == MPI_COMBINER_CONTIGUOUS) return WM_COMBINER_CONTIGUOUS;
    if (c == MPI_COMBINER_VECTOR) return WM_COMBINER_VECTOR;
    if (c == MPI_COMBINER_HVECTOR) return WM_COMBINER_HVECTOR;
    if (c == MPI_COMBINER_INDEXED) return WM_COMBINER_INDEXED;
    if (c == MPI_COMBINER_HINDEXED) return WM_COMBINER_HINDEXED;
    if (c == MPI_COMBINER_INDEXED_BLOCK) return WM_COMBINER_INDEXED_BLOCK;
    if (c == MPI_COMBINER_HINDEXED_BLOCK) return WM_COMBINER_HINDEXED_BLOCK;
    if (c == MPI_COMBINER_STRUCT) return WM_COMBINER_STRUCT;
    if (c == MPI_COMBINER_SUBARRAY) return WM_COMBINER_SUBARRAY;
    if (c == MPI_COMBINER_DARRAY) return WM_COMBINER_DARRAY;
    if (c == MPI_COMBINER_RESIZED) return WM_COMBINER_RESIZED;
    if (c == MPI_COMBINER_F90_REAL || c == MPI_COMBINER_F90_COMPLEX ||
        c == MPI_COMBINER_F90_INTEGER)
        return WM_COMBINER_F90;
    return -1;
}

int wm_type_envelope(wm_h type, int *ni, int *na, int *nd, int *combiner)
{
    int c = 0;
    int rc = MPI_Type_get_envelope(TYPE(type), ni, na, nd, &c);
    *combiner = combiner_of(c);
    return rc;
}

int wm_type_contents(wm_h type, int ni, int na, int nd, int *ints, int64_t *addrs, wm_h *types)
{
    /* On the heap: a type's contents can hold millions of addresses (HDF5's point
     * selections: an hindexed type with one block per point), far past a stack. */
    MPI_Aint *a = malloc(sizeof(MPI_Aint) * (size_t)(na > 0 ? na : 1));
    MPI_Datatype *t = malloc(sizeof(MPI_Datatype) * (size_t)(nd > 0 ? nd : 1));
    if (a == NULL || t == NULL) {
        free(a);
        free(t);
        return MPI_ERR_NO_MEM;
    }
    int rc = MPI_Type_get_contents(TYPE(type), ni, na, nd, ints, a, t);
    for (int i = 0; i < na; i++)
        addrs[i] = (int64_t)a[i];
    for (int i = 0; i < nd; i++)
        types[i] = (wm_h)t[i];
    free(a);
    free(t);
    return rc;
}

int wm_type_free(wm_h type)
{
    MPI_Datatype t = TYPE(type);
    return MPI_Type_free(&t);
}

int wm_type_dup(wm_h type, wm_h *out)
{
    MPI_Datatype t;
    int rc = MPI_Type_dup(TYPE(type), &t);
    *out = (wm_h)t;
    return rc;
}

int wm_type_size(wm_h type, int64_t *size)
{
    MPI_Count n = 0;
    int rc = MPI_Type_size_x(TYPE(type), &n);
    *size = (int64_t)n;
    return rc;
}

int wm_type_extent(wm_h type, int64_t *lb, int64_t *extent)
{
    MPI_Count l = 0, e = 0;
    int rc = MPI_Type_get_extent_x(TYPE(type), &l, &e);
    *lb = (int64_t)l;
    *extent = (int64_t)e;
    return rc;
}

int wm_const(int which)
{
    switch (which) {
    case WM_ORDER_C: return MPI_ORDER_C;
    case WM_ORDER_FORTRAN: return MPI_ORDER_FORTRAN;
    case WM_DISTRIBUTE_BLOCK: return MPI_DISTRIBUTE_BLOCK;
    case WM_DISTRIBUTE_CYCLIC: return MPI_DISTRIBUTE_CYCLIC;
    case WM_DISTRIBUTE_NONE: return MPI_DISTRIBUTE_NONE;
    case WM_DISTRIBUTE_DFLT_DARG: return MPI_DISTRIBUTE_DFLT_DARG;
    case WM_MAX_INFO_KEY: return MPI_MAX_INFO_KEY;
    case WM_MAX_INFO_VAL: return MPI_MAX_INFO_VAL;
    case WM_DISPLACEMENT_CURRENT: return (int)MPI_DISPLACEMENT_CURRENT;
    default: return -1;
    }
}

wm_h wm_type_byte(void) { return (wm_h)MPI_BYTE; }

wm_h wm_info_null(void) { return (wm_h)MPI_INFO_NULL; }

int wm_info_create(wm_h *out)
{
    MPI_Info info;
    int rc = MPI_Info_create(&info);
    *out = (wm_h)info;
    return rc;
}

int wm_info_set(wm_h info, const char *key, const char *value)
{
    return MPI_Info_set(INFO(info), key, value);
}

int wm_info_nkeys(wm_h info, int *n) { return MPI_Info_get_nkeys(INFO(info), n); }
int wm_info_nthkey(wm_h info, int n, char *key) { return MPI_Info_get_nthkey(INFO(info), n, key); }

int wm_info_get(wm_h info, const char *key, int buflen, char *value, int *flag)
{
    return MPI_Info_get(INFO(info), key, buflen, value, flag);
}

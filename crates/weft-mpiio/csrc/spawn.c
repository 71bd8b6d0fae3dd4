/* Job-scoped delegates: the MPI calls of starting them (MPI_Comm_spawn, in
 * libweft_mpiio.so) and of their launcher (weft-delegate, the spawned program), and the
 * messages both sides exchange over the intercommunicator. Handles as wm_h, as in
 * shim.c. Nothing here calls back into Rust, so weft-delegate links this file alone. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define COMM(h) ((MPI_Comm)(h))

int wm_init(void)
{
    int done = 0;
    MPI_Initialized(&done);
    return done ? MPI_SUCCESS : MPI_Init(NULL, NULL);
}

int wm_finalize(void) { return MPI_Finalize(); }

wm_h wm_comm_world(void) { return (wm_h)MPI_COMM_WORLD; }

int wm_comm_get_parent(wm_h *parent, int *is_null)
{
    MPI_Comm p = MPI_COMM_NULL;
    int rc = MPI_Comm_get_parent(&p);
    *parent = (wm_h)p;
    *is_null = p == MPI_COMM_NULL;
    return rc;
}

int wm_comm_remote_size(wm_h comm, int *size) { return MPI_Comm_remote_size(COMM(comm), size); }

int wm_comm_spawn(wm_h comm, const char *command, char **argv, int maxprocs, const char *hosts,
                  int root, wm_h *intercomm, int *errcodes)
{
    MPI_Comm c = COMM(comm), inter = MPI_COMM_NULL;
    /* A failed spawn is an error to report with the persistent alternative, not an
     * abort of the job: this communicator is the library's own duplicate. */
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Info info = MPI_INFO_NULL;
    if (hosts != NULL && hosts[0] != 0) {
        MPI_Info_create(&info);
        MPI_Info_set(info, "host", hosts);
    }
    int rc = MPI_Comm_spawn(command, argv, maxprocs, info, root, c, &inter, errcodes);
    if (info != MPI_INFO_NULL)
        MPI_Info_free(&info);
    *intercomm = (wm_h)inter;
    return rc;
}

int wm_comm_disconnect(wm_h comm)
{
    MPI_Comm c = COMM(comm);
    return MPI_Comm_disconnect(&c);
}

int wm_send_bytes(wm_h comm, const void *buf, int len, int dest, int tag)
{
    return MPI_Send(buf, len, MPI_BYTE, dest, tag, COMM(comm));
}

int wm_iprobe_bytes(wm_h comm, int source, int tag, int *flag, int *len)
{
    MPI_Status st;
    int rc = MPI_Iprobe(source, tag, COMM(comm), flag, &st);
    *len = 0;
    if (rc == MPI_SUCCESS && *flag)
        rc = MPI_Get_count(&st, MPI_BYTE, len);
    return rc;
}

int wm_recv_bytes(wm_h comm, void *buf, int len, int source, int tag)
{
    return MPI_Recv(buf, len, MPI_BYTE, source, tag, COMM(comm), MPI_STATUS_IGNORE);
}

void wm_error_string(int code, char *buf, int len)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (len <= 0)
        return;
    if (MPI_Error_string(code, s, &n) != MPI_SUCCESS)
        n = 0;
    if (n >= len)
        n = len - 1;
    memcpy(buf, s, (size_t)n);
    buf[n] = 0;
}

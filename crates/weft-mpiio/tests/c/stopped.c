/* MPI-IO calls while an io server has stopped answering (the test SIGSTOPs it): each
 * must give up within the client's timeout (WEFT_TIMEOUT_MS) with MPI_ERR_IO on every
 * rank, never hang.
 *
 *   stopped FILE GO
 *
 * Opens FILE (created, 1 MiB per rank written over every server), prints "opened",
 * waits until the local file GO exists (the test stops a server, then creates it), then
 * makes each call (then creates FILE-new) and prints "<call> class <class> <milliseconds> ms" on rank 0, the
 * class agreed by every rank (-1 if the ranks differ). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BYTES (1 << 20)
/* Attempts of each set-up call (open, first write) before giving up. */
#define SETUP_TRIES 5

static int rank;

static void report(const char *call, int rc, double started)
{
    int c = rc;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &c);
    int lo = c, hi = c;
    double ms = (MPI_Wtime() - started) * 1000.0, slowest = ms;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("%s class %d %.0f ms\n", call, lo == hi ? lo : -1, slowest);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 3)
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_File fh;
    MPI_Status st;
    char *buf = malloc(BYTES);
    memset(buf, 'a' + rank, BYTES);
    /* The set-up runs with every server answering, but under the test's short timeout:
     * on a loaded machine a call can take longer, so it is tried again (the same bytes)
     * and each failure is said, before the test's part begins. */
    int rc = MPI_ERR_IO;
    for (int attempt = 1; attempt <= SETUP_TRIES && rc != MPI_SUCCESS; attempt++) {
        rc = MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
        if (rc != MPI_SUCCESS && rank == 0)
            fprintf(stderr, "stopped: set-up open failed (attempt %d of %d)\n", attempt, SETUP_TRIES);
    }
    if (rc != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    MPI_Offset at = (MPI_Offset)rank * BYTES;
    rc = MPI_ERR_IO;
    for (int attempt = 1; attempt <= SETUP_TRIES && rc != MPI_SUCCESS; attempt++) {
        rc = MPI_File_write_at_all(fh, at, buf, BYTES, MPI_BYTE, &st);
        if (rc != MPI_SUCCESS && rank == 0)
            fprintf(stderr, "stopped: set-up write failed (attempt %d of %d)\n", attempt, SETUP_TRIES);
    }
    if (rc != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 4);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("MPI_ERR_IO is %d\nopened\n", MPI_ERR_IO);
        fflush(stdout);
        while (access(argv[2], F_OK) != 0)
            usleep(10000);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    double t = MPI_Wtime();
    report("write_at_all", MPI_File_write_at_all(fh, at, buf, BYTES, MPI_BYTE, &st), t);
    t = MPI_Wtime();
    report("read_at_all", MPI_File_read_at_all(fh, at, buf, BYTES, MPI_BYTE, &st), t);
    t = MPI_Wtime();
    report("write_at", MPI_File_write_at(fh, at, buf, BYTES, MPI_BYTE, &st), t);
    t = MPI_Wtime();
    report("read_at", MPI_File_read_at(fh, at, buf, BYTES, MPI_BYTE, &st), t);
    MPI_File_set_atomicity(fh, 1);
    t = MPI_Wtime();
    report("atomic write_at", MPI_File_write_at(fh, at, buf, BYTES, MPI_BYTE, &st), t);
    MPI_File_set_atomicity(fh, 0);
    MPI_Offset size = 0;
    t = MPI_Wtime();
    report("get_size", MPI_File_get_size(fh, &size), t);
    t = MPI_Wtime();
    report("set_size", MPI_File_set_size(fh, 10), t);
    t = MPI_Wtime();
    report("sync", MPI_File_sync(fh), t);
    t = MPI_Wtime();
    report("close", MPI_File_close(&fh), t);
    t = MPI_Wtime();
    rc = MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    report("open", rc, t);
    if (rc == MPI_SUCCESS)
        MPI_File_close(&fh);
    /* Creating a file creates its objects on every io server. */
    char created[4096];
    snprintf(created, sizeof created, "%s-new", argv[1]);
    t = MPI_Wtime();
    rc = MPI_File_open(MPI_COMM_WORLD, created, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    report("create", rc, t);
    if (rc == MPI_SUCCESS)
        MPI_File_close(&fh);
    free(buf);
    if (rank == 0)
        printf("done\n");
    MPI_Finalize();
    return 0;
}

/* weft bench mpiio-api: nonblocking writes overlapped with computation, and
 * write_ordered against write_at_all of the same bytes, on one file.
 *
 *   mpiio_api FILE overlap MIB_PER_RANK CHUNK_KIB REPEAT
 *     Each rank writes MIB_PER_RANK MiB of its own contiguous block in chunks: first
 *     with blocking MPI_File_write_at (I/O time), then a compute kernel alone for about
 *     that long (compute time), then both: each chunk's MPI_File_iwrite_at, the
 *     chunk's share of the computation, MPI_Wait. Prints, per repeat, the slowest
 *     rank's times:  overlap io_s X comp_s Y both_s Z
 *   mpiio_api FILE ordered KIB_PER_RANK CALLS REPEAT
 *     CALLS calls of MPI_File_write_ordered of KIB_PER_RANK KiB per rank, then the same
 *     bytes at the same offsets with MPI_File_write_at_all:
 *     ordered ordered_s X at_all_s Y */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, np;
static volatile double sink;

/* The computation: `iters` rounds of dependent floating point work. */
static void compute(long iters)
{
    double x = 1.0;
    for (long i = 0; i < iters; i++)
        x = x * 1.0000001 + 1e-9;
    sink = x;
}

static double slowest(double t)
{
    double max = 0;
    MPI_Allreduce(&t, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return max;
}

static void die(const char *what, int rc)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, text);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

#define OK(call)                                                                          \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_ != MPI_SUCCESS)                                                           \
            die(#call, rc_);                                                              \
    } while (0)

static void overlap(MPI_File fh, long mib, long chunk_kib, int repeat)
{
    long chunk = chunk_kib * 1024, total = mib * 1024 * 1024, chunks = total / chunk;
    char *buf = malloc(total);
    for (long i = 0; i < total; i++)
        buf[i] = (char)(rank * 7 + i);
    MPI_Offset base = (MPI_Offset)rank * total;
    /* Iterations per second of the kernel on this rank. */
    double t0 = MPI_Wtime();
    compute(20000000);
    double per_s = 20000000 / (MPI_Wtime() - t0);
    for (int r = 0; r < repeat; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (long k = 0; k < chunks; k++)
            OK(MPI_File_write_at(fh, base + k * chunk, buf + k * chunk, (int)chunk, MPI_BYTE,
                                 MPI_STATUS_IGNORE));
        double io = slowest(MPI_Wtime() - t0);
        long iters = (long)(io * per_s / chunks);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (long k = 0; k < chunks; k++)
            compute(iters);
        double comp = slowest(MPI_Wtime() - t0);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (long k = 0; k < chunks; k++) {
            MPI_Request req;
            OK(MPI_File_iwrite_at(fh, base + k * chunk, buf + k * chunk, (int)chunk, MPI_BYTE,
                                  &req));
            compute(iters);
            OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        }
        double both = slowest(MPI_Wtime() - t0);
        if (rank == 0)
            printf("overlap io_s %.6f comp_s %.6f both_s %.6f\n", io, comp, both);
    }
    free(buf);
}

static void ordered(MPI_File fh, long kib, int calls, int repeat)
{
    long bytes = kib * 1024;
    char *buf = malloc(bytes);
    for (long i = 0; i < bytes; i++)
        buf[i] = (char)(rank * 3 + i);
    for (int r = 0; r < repeat; r++) {
        OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int c = 0; c < calls; c++)
            OK(MPI_File_write_ordered(fh, buf, (int)bytes, MPI_BYTE, MPI_STATUS_IGNORE));
        double ord = slowest(MPI_Wtime() - t0);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (int c = 0; c < calls; c++) {
            MPI_Offset at = ((MPI_Offset)c * np + rank) * bytes;
            OK(MPI_File_write_at_all(fh, at, buf, (int)bytes, MPI_BYTE, MPI_STATUS_IGNORE));
        }
        double all = slowest(MPI_Wtime() - t0);
        if (rank == 0)
            printf("ordered ordered_s %.6f at_all_s %.6f\n", ord, all);
    }
    free(buf);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (argc != 6) {
        if (rank == 0)
            fprintf(stderr, "usage: mpiio_api FILE overlap|ordered A B REPEAT\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_File fh;
    OK(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL,
                     &fh));
    long a = atol(argv[3]), b = atol(argv[4]);
    int repeat = atoi(argv[5]);
    if (strcmp(argv[2], "overlap") == 0)
        overlap(fh, a, b, repeat);
    else
        ordered(fh, a, (int)b, repeat);
    OK(MPI_File_close(&fh));
    MPI_Finalize();
    return 0;
}

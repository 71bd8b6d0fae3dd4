/* weft bench open-close: what a cycle of MPI_File_open, one access, MPI_File_close
 * costs, as a program that opens one file per step or per variable pays it.
 *
 *   open_close PREFIX CYCLES KIB
 *     create: CYCLES times, MPI_File_open(PREFIX.i, CREATE | WRONLY), each rank writes
 *             its KIB KiB at rank * KIB KiB (MPI_File_write_at), MPI_File_close;
 *     read:   CYCLES times, open PREFIX.i RDONLY, read the rank's block back (verified
 *             after the timed loop), close;
 *     rewrite: CYCLES times, open PREFIX.i WRONLY (no create), write the block, close.
 *   Then rank 0 deletes the files (untimed). Prints the slowest rank's seconds per
 *   cycle:  cycle create_s X read_s Y rewrite_s Z */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, np;

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

static double slowest(double t)
{
    double max = 0;
    MPI_Allreduce(&t, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return max;
}

static void name_of(char *out, size_t cap, const char *prefix, long i)
{
    snprintf(out, cap, "%s.%ld", prefix, i);
}

/* Byte j of cycle i's block of `rank`. */
static char byte_of(long i, long j)
{
    return (char)(rank * 31 + i * 7 + j * 13 + (j >> 12));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (argc != 4) {
        if (rank == 0)
            fprintf(stderr, "usage: open_close PREFIX CYCLES KIB\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *prefix = argv[1];
    long cycles = atol(argv[2]), len = atol(argv[3]) * 1024;
    if (cycles < 1 || len < 1) {
        if (rank == 0)
            fprintf(stderr, "CYCLES and KIB must be positive\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char name[4096];
    char *buf = malloc(len), *got = malloc(len * cycles > 256L << 20 ? len : len * cycles);
    int keep_all = len * cycles <= 256L << 20;
    if (!buf || !got)
        die("malloc", MPI_ERR_NO_MEM);
    MPI_Offset at = (MPI_Offset)rank * len;
    MPI_File fh;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < cycles; i++) {
        for (long j = 0; j < len; j++)
            buf[j] = byte_of(i, j);
        name_of(name, sizeof name, prefix, i);
        OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh));
        OK(MPI_File_write_at(fh, at, buf, (int)len, MPI_BYTE, MPI_STATUS_IGNORE));
        OK(MPI_File_close(&fh));
    }
    double create = slowest(MPI_Wtime() - t0) / cycles;

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (long i = 0; i < cycles; i++) {
        name_of(name, sizeof name, prefix, i);
        char *into = keep_all ? got + i * len : got;
        OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
        OK(MPI_File_read_at(fh, at, into, (int)len, MPI_BYTE, MPI_STATUS_IGNORE));
        OK(MPI_File_close(&fh));
    }
    double read = slowest(MPI_Wtime() - t0) / cycles;
    long bad = 0;
    for (long i = keep_all ? 0 : cycles - 1; i < cycles; i++) {
        char *from = keep_all ? got + i * len : got;
        for (long j = 0; j < len; j++)
            if (from[j] != byte_of(i, j))
                bad++;
    }

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (long i = 0; i < cycles; i++) {
        for (long j = 0; j < len; j++)
            buf[j] = byte_of(i, j);
        name_of(name, sizeof name, prefix, i);
        OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_WRONLY, MPI_INFO_NULL, &fh));
        OK(MPI_File_write_at(fh, at, buf, (int)len, MPI_BYTE, MPI_STATUS_IGNORE));
        OK(MPI_File_close(&fh));
    }
    double rewrite = slowest(MPI_Wtime() - t0) / cycles;

    long all_bad = 0;
    MPI_Allreduce(&bad, &all_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        for (long i = 0; i < cycles; i++) {
            name_of(name, sizeof name, prefix, i);
            MPI_File_delete(name, MPI_INFO_NULL);
        }
    if (all_bad) {
        if (rank == 0)
            fprintf(stderr, "open_close: %ld bytes read back differ from those written\n", all_bad);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    if (rank == 0)
        printf("cycle create_s %.9f read_s %.9f rewrite_s %.9f\n", create, read, rewrite);
    free(buf);
    free(got);
    MPI_Finalize();
    return 0;
}

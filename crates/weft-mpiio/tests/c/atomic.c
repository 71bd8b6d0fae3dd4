/* Atomic mode (MPI_File_set_atomicity) on one noncontiguous region that every rank
 * accesses, spread over all io servers (a vector of BLOCKS blocks of BLOCK ints, every
 * other block).
 *
 *   atomic writers FILE ITERATIONS ATOMIC
 *     every rank writes the whole region with its own value (independent and
 *     collective calls alternately); after each round rank 0 reads it back: every int
 *     must hold one writer's value of that round (all of one, never a mix).
 *   atomic reader FILE ITERATIONS ATOMIC
 *     rank 0 rewrites the region ITERATIONS times with a new value each time while the
 *     other ranks read it ITERATIONS times: every read sees one whole write (or the
 *     zeros before the first), never part of one.
 *
 * ATOMIC is 1 to set atomic mode, 0 not to (to see the test catch torn data).
 * Prints "atomic OK" on rank 0 when no torn data was seen; exits 1 otherwise. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 1000
#define BLOCKS 256
#define INTS (BLOCK * BLOCKS)

static void check(int err, const char *what)
{
    if (err != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(err, msg, &len);
        fprintf(stderr, "%s: %s\n", what, msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* The first index whose value differs from buf[0], or -1. */
static int torn_at(const int *buf)
{
    for (int i = 1; i < INTS; i++)
        if (buf[i] != buf[0])
            return i;
    return -1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 5) {
        if (rank == 0)
            fprintf(stderr, "usage: atomic writers|reader FILE ITERATIONS ATOMIC\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *mode = argv[1];
    const char *path = argv[2];
    int iterations = atoi(argv[3]);
    int atomic = atoi(argv[4]);

    MPI_File fh;
    check(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh),
          "open");
    check(MPI_File_set_atomicity(fh, atomic), "set_atomicity");
    int flag = -1;
    check(MPI_File_get_atomicity(fh, &flag), "get_atomicity");
    if (flag != atomic) {
        fprintf(stderr, "rank %d: get_atomicity says %d after set_atomicity(%d)\n", rank, flag, atomic);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Datatype region;
    MPI_Type_vector(BLOCKS, BLOCK, 2 * BLOCK, MPI_INT, &region);
    MPI_Type_commit(&region);
    check(MPI_File_set_view(fh, 0, MPI_INT, region, "native", MPI_INFO_NULL), "set_view");

    int *buf = malloc(INTS * sizeof(int));
    int torn = 0;
    MPI_Status status;
    if (strcmp(mode, "writers") == 0) {
        for (int it = 0; it < iterations && !torn; it++) {
            for (int i = 0; i < INTS; i++)
                buf[i] = (it + 1) * 1000 + rank;
            MPI_Barrier(MPI_COMM_WORLD);
            if (it % 2 == 0)
                check(MPI_File_write_at(fh, 0, buf, INTS, MPI_INT, &status), "write_at");
            else
                check(MPI_File_write_at_all(fh, 0, buf, INTS, MPI_INT, &status), "write_at_all");
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == 0) {
                memset(buf, 0xff, INTS * sizeof(int));
                check(MPI_File_read_at(fh, 0, buf, INTS, MPI_INT, &status), "read_at");
                int at = torn_at(buf);
                int writer = buf[0] - (it + 1) * 1000;
                if (at >= 0 || writer < 0 || writer >= size) {
                    fprintf(stderr, "round %d: torn region: int 0 is %d, int %d is %d\n", it, buf[0],
                            at, at >= 0 ? buf[at] : buf[0]);
                    torn = 1;
                }
            }
            MPI_Bcast(&torn, 1, MPI_INT, 0, MPI_COMM_WORLD);
        }
    } else if (strcmp(mode, "reader") == 0) {
        if (rank == 0) {
            memset(buf, 0, INTS * sizeof(int));
            check(MPI_File_write_at(fh, 0, buf, INTS, MPI_INT, &status), "write_at");
        }
        MPI_Barrier(MPI_COMM_WORLD);
        for (int it = 0; it < iterations; it++) {
            if (rank == 0) {
                for (int i = 0; i < INTS; i++)
                    buf[i] = it + 1;
                check(MPI_File_write_at(fh, 0, buf, INTS, MPI_INT, &status), "write_at");
            } else {
                check(MPI_File_read_at(fh, 0, buf, INTS, MPI_INT, &status), "read_at");
                int at = torn_at(buf);
                if (at >= 0) {
                    fprintf(stderr, "rank %d read %d: saw part of a write: int 0 is %d, int %d is %d\n",
                            rank, it, buf[0], at, buf[at]);
                    torn = 1;
                    break;
                }
            }
        }
        int any;
        MPI_Allreduce(&torn, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        torn = any;
    } else {
        if (rank == 0)
            fprintf(stderr, "unknown mode %s\n", mode);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Type_free(&region);
    check(MPI_File_close(&fh), "close");
    free(buf);
    if (rank == 0 && !torn)
        printf("atomic OK\n");
    MPI_Finalize();
    return torn ? 1 : 0;
}

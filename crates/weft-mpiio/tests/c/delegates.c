/* Job-scoped delegates ending with their job, however it ends:
 *
 *   delegates FILE END [key=value ...]
 *
 * Every rank writes its 64 KiB of part A (at rank * 64 KiB) with MPI_File_write_at,
 * syncs, and writes its 64 KiB of part B (at 1 MiB + rank * 64 KiB) without syncing;
 * then the job ends by END:
 *   close     MPI_File_close, MPI_Finalize
 *   finalize  MPI_Finalize with the file still open
 *   abort     rank 0 calls MPI_Abort
 *   crash     rank 0 kills itself (SIGKILL)
 *   share     first, interleaved writers of one page with no sync: rank r writes
 *             every 8-byte piece k with k % size == r (value k * 1000 + r, one
 *             MPI_File_write_at each) at 2 MiB, then after a barrier every rank reads
 *             the page and checks every rank's pieces; then as close
 *   two       a second file, FILE-2, opened with the same hints while FILE is open,
 *             both parts written to it, closed; then as close
 * Byte x of a part is (x * 7 + part) & 0xff, x counted from the part's start. Prints
 * "ready" on rank 0 before ending; key=value pairs are hints (weft_delegates=N). */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PART_BYTES 65536
#define B_OFFSET (1 << 20)

static int rank;

static void write_part(MPI_File fh, int part)
{
    unsigned char *buf = malloc(PART_BYTES);
    long base = (long)rank * PART_BYTES;
    for (long x = 0; x < PART_BYTES; x++)
        buf[x] = (unsigned char)(((base + x) * 7 + part) & 0xff);
    MPI_Offset at = (part == 0 ? 0 : B_OFFSET) + base;
    MPI_File_write_at(fh, at, buf, PART_BYTES, MPI_BYTE, MPI_STATUS_IGNORE);
    free(buf);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: %s FILE close|finalize|abort|crash [key=value ...]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Info info;
    MPI_Info_create(&info);
    for (int i = 3; i < argc; i++) {
        char key[256];
        const char *eq = strchr(argv[i], '=');
        if (eq == NULL || eq - argv[i] >= (long)sizeof key)
            MPI_Abort(MPI_COMM_WORLD, 1);
        memcpy(key, argv[i], eq - argv[i]);
        key[eq - argv[i]] = 0;
        MPI_Info_set(info, key, eq + 1);
    }
    MPI_File fh;
    /* Any failure ends the job with the MPI library's message. */
    MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_ARE_FATAL);
    MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh);
    write_part(fh, 0);
    MPI_File_sync(fh);
    write_part(fh, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    const char *end = argv[2];
    if (strcmp(end, "share") == 0) {
        int size;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        const int pieces = PART_BYTES / 8;
        for (int k = rank; k < pieces; k += size) {
            uint64_t v = (uint64_t)k * 1000 + rank;
            MPI_File_write_at(fh, 2 * B_OFFSET + (MPI_Offset)k * 8, &v, 1, MPI_UINT64_T,
                              MPI_STATUS_IGNORE);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        uint64_t *page = malloc(PART_BYTES);
        MPI_File_read_at(fh, 2 * B_OFFSET, page, pieces, MPI_UINT64_T, MPI_STATUS_IGNORE);
        for (int k = 0; k < pieces; k++) {
            if (page[k] != (uint64_t)k * 1000 + k % size) {
                fprintf(stderr, "rank %d: piece %d is %llu, expected %llu\n", rank, k,
                        (unsigned long long)page[k], (unsigned long long)k * 1000 + k % size);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        }
        free(page);
        end = "close";
    }
    if (strcmp(end, "two") == 0) {
        char second[4096];
        snprintf(second, sizeof second, "%s-2", argv[1]);
        MPI_File fh2;
        MPI_File_open(MPI_COMM_WORLD, second, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh2);
        write_part(fh2, 0);
        write_part(fh2, 1);
        MPI_File_close(&fh2);
        end = "close";
    }
    if (rank == 0) {
        printf("ready\n");
        fflush(stdout);
    }
    if (strcmp(end, "close") == 0) {
        MPI_File_close(&fh);
    } else if (strcmp(end, "abort") == 0) {
        if (rank == 0)
            MPI_Abort(MPI_COMM_WORLD, 7);
        MPI_Barrier(MPI_COMM_WORLD);
    } else if (strcmp(end, "crash") == 0) {
        if (rank == 0)
            raise(SIGKILL);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}

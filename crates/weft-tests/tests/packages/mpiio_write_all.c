/*
 * mpiio_write_all: every rank writes its block of a shared file with one collective
 * MPI_File_write_all through a file view, then checks the file's size; the caller
 * checks the bytes (tests/packages.rs, run with LD_PRELOAD of libweft_mpiio.so).
 *
 *   mpirun -np P mpiio_write_all weft:/path BLOCK_BYTES
 *
 * Byte k of rank r's block is (r * 131 + k * 7) mod 256.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void check(int err, const char *what) {
    if (err != MPI_SUCCESS) {
        char message[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(err, message, &len);
        fprintf(stderr, "%s failed: %s\n", what, message);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc != 3) {
        fprintf(stderr, "usage: %s weft:/path BLOCK_BYTES\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int block = atoi(argv[2]);
    unsigned char *buf = malloc((size_t)block);
    if (block <= 0 || buf == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int k = 0; k < block; k++) buf[k] = (unsigned char)((rank * 131 + k * 7) % 256);

    MPI_File fh;
    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh),
          "MPI_File_open");
    check(MPI_File_set_view(fh, (MPI_Offset)rank * block, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL),
          "MPI_File_set_view");
    MPI_Status status;
    check(MPI_File_write_all(fh, buf, block, MPI_BYTE, &status), "MPI_File_write_all");
    int written = 0;
    MPI_Get_count(&status, MPI_BYTE, &written);
    if (written != block) {
        fprintf(stderr, "rank %d wrote %d bytes of %d\n", rank, written, block);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    check(MPI_File_sync(fh), "MPI_File_sync");
    MPI_Offset file_size = 0;
    check(MPI_File_get_size(fh, &file_size), "MPI_File_get_size");
    if (file_size != (MPI_Offset)size * block) {
        fprintf(stderr, "file size %lld, expected %lld\n", (long long)file_size, (long long)size * block);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    check(MPI_File_close(&fh), "MPI_File_close");
    free(buf);
    if (rank == 0) printf("mpiio_write_all: %d ranks wrote %d bytes each\n", size, block);
    MPI_Finalize();
    return 0;
}

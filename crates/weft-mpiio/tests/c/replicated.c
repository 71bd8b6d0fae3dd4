/* MPI-IO on a replicated file while an io server dies (the test kills it with SIGKILL):
 * collective writes and reads through a file view go on without an error.
 *
 *   replicated FILE write GO [key=value ...]   create FILE with the hints, write half,
 *                                              print "halfway", wait until the local
 *                                              file GO exists, write the rest, read it
 *                                              all back and check it
 *   replicated FILE verify                     read FILE back and check it
 *
 * Each rank owns blocks of BLOCK bytes, rank r the blocks b with b mod nprocs == r (a
 * vector view); file byte x holds value(x). Prints "ok" on rank 0 when every rank's
 * calls succeeded and every byte was right, else the first failure per rank. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK (64 * 1024)
#define BLOCKS_PER_STEP 8
#define STEPS 16

static int rank, nprocs;

static unsigned char value(MPI_Offset x)
{
    return (unsigned char)(x * 7 + x / 4093);
}

static MPI_Offset file_offset(MPI_Offset view_byte)
{
    MPI_Offset block = view_byte / BLOCK, within = view_byte % BLOCK;
    return (block * nprocs + rank) * BLOCK + within;
}

static int failed(const char *what, int rc)
{
    if (rc == MPI_SUCCESS)
        return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, msg);
    return 1;
}

static int check(const unsigned char *buf, MPI_Offset view_start, MPI_Offset len)
{
    for (MPI_Offset i = 0; i < len; i++) {
        MPI_Offset x = file_offset(view_start + i);
        if (buf[i] != value(x)) {
            fprintf(stderr, "rank %d: byte at file offset %lld is %d, not %d\n", rank, (long long)x, buf[i],
                    value(x));
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 3)
        MPI_Abort(MPI_COMM_WORLD, 2);
    int writing = strcmp(argv[2], "write") == 0;
    MPI_Info info;
    MPI_Info_create(&info);
    for (int i = 4; i < argc; i++) {
        char key[256];
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq - argv[i] >= (long)sizeof key)
            MPI_Abort(MPI_COMM_WORLD, 2);
        memcpy(key, argv[i], eq - argv[i]);
        key[eq - argv[i]] = 0;
        MPI_Info_set(info, key, eq + 1);
    }
    int bad = 0;
    MPI_File fh;
    int mode = writing ? MPI_MODE_CREATE | MPI_MODE_RDWR : MPI_MODE_RDONLY;
    if (failed("open", MPI_File_open(MPI_COMM_WORLD, argv[1], mode, info, &fh)))
        MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    MPI_Datatype filetype;
    MPI_Type_vector(1, BLOCK, BLOCK * nprocs, MPI_BYTE, &filetype);
    MPI_Datatype tiled;
    MPI_Type_create_resized(filetype, 0, (MPI_Aint)BLOCK * nprocs, &tiled);
    MPI_Type_commit(&tiled);
    bad |= failed("set_view", MPI_File_set_view(fh, (MPI_Offset)rank * BLOCK, MPI_BYTE, tiled, "native", info));
    const MPI_Offset step_bytes = (MPI_Offset)BLOCK * BLOCKS_PER_STEP;
    unsigned char *buf = malloc(step_bytes);
    MPI_Status st;
    if (writing) {
        for (int step = 0; step < STEPS && !bad; step++) {
            if (step == STEPS / 2) {
                MPI_Barrier(MPI_COMM_WORLD);
                if (rank == 0) {
                    printf("halfway\n");
                    fflush(stdout);
                    while (access(argv[3], F_OK) != 0)
                        usleep(10000);
                }
                MPI_Barrier(MPI_COMM_WORLD);
            }
            for (MPI_Offset i = 0; i < step_bytes; i++)
                buf[i] = value(file_offset(step * step_bytes + i));
            bad |= failed("write_at_all",
                          MPI_File_write_at_all(fh, step * step_bytes, buf, (int)step_bytes, MPI_BYTE, &st));
        }
        bad |= failed("sync", MPI_File_sync(fh));
    }
    for (int step = 0; step < STEPS && !bad; step++) {
        memset(buf, 0, step_bytes);
        bad |= failed("read_at_all", MPI_File_read_at_all(fh, step * step_bytes, buf, (int)step_bytes, MPI_BYTE, &st));
        if (!bad)
            bad |= check(buf, step * step_bytes, step_bytes);
    }
    MPI_Offset size = 0;
    bad |= failed("get_size", MPI_File_get_size(fh, &size));
    if (!bad && size != step_bytes * STEPS * nprocs) {
        fprintf(stderr, "rank %d: size %lld, not %lld\n", rank, (long long)size, (long long)(step_bytes * STEPS * nprocs));
        bad = 1;
    }
    bad |= failed("close", MPI_File_close(&fh));
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
        printf(bad ? "failed\n" : "ok\n");
        fflush(stdout);
    }
    free(buf);
    MPI_Type_free(&tiled);
    MPI_Type_free(&filetype);
    MPI_Info_free(&info);
    MPI_Finalize();
    return bad;
}

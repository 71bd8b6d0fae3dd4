/* A known MPI-IO workload for the WEFT_PROFILE test: the profile it leaves must count
 * exactly these calls and bytes.
 *
 *   profile PREFIX LOCAL_DIR [key=value ...]
 *
 * On PREFIX "a" (every rank, collectively opened): 3 MPI_File_write_at_all of 1000
 * bytes, 1 MPI_File_sync, 2 MPI_File_read_at of 500 bytes, 1 MPI_File_seek and 1
 * MPI_File_write of 100 bytes, then close. On PREFIX "b": 1 MPI_File_write_all of 64
 * bytes after an MPI_File_set_view, then close. On a local file in LOCAL_DIR (not a
 * weft: file, so not in the profile): 1 MPI_File_write_at. key=value pairs become
 * hints of both weft: files. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nprocs;

static void check(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int l = 0;
        MPI_Error_string(rc, s, &l);
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, s);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 3) {
        fprintf(stderr, "usage: profile PREFIX LOCAL_DIR [key=value ...]\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Info info;
    MPI_Info_create(&info);
    for (int i = 3; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (eq == NULL)
            continue;
        *eq = '\0';
        MPI_Info_set(info, argv[i], eq + 1);
    }
    char name[4096], buf[1000];
    memset(buf, 'a' + rank % 26, sizeof buf);
    MPI_File fh;
    MPI_Status st;
    int amode = MPI_MODE_CREATE | MPI_MODE_RDWR;

    snprintf(name, sizeof name, "%sa", argv[1]);
    check(MPI_File_open(MPI_COMM_WORLD, name, amode, info, &fh), "open a");
    for (int i = 0; i < 3; i++) {
        MPI_Offset at = ((MPI_Offset)rank * 3 + i) * 1000;
        check(MPI_File_write_at_all(fh, at, buf, 1000, MPI_BYTE, &st), "write_at_all");
    }
    check(MPI_File_sync(fh), "sync");
    for (int i = 0; i < 2; i++)
        check(MPI_File_read_at(fh, (MPI_Offset)rank * 3000 + i * 500, buf, 500, MPI_BYTE, &st),
              "read_at");
    check(MPI_File_seek(fh, (MPI_Offset)nprocs * 3000 + rank * 100, MPI_SEEK_SET), "seek");
    check(MPI_File_write(fh, buf, 100, MPI_BYTE, &st), "write");
    check(MPI_File_close(&fh), "close a");

    snprintf(name, sizeof name, "%sb", argv[1]);
    check(MPI_File_open(MPI_COMM_WORLD, name, amode, info, &fh), "open b");
    check(MPI_File_set_view(fh, (MPI_Offset)rank * 64, MPI_BYTE, MPI_BYTE, "native", info), "view");
    check(MPI_File_write_all(fh, buf, 64, MPI_BYTE, &st), "write_all");
    check(MPI_File_close(&fh), "close b");

    snprintf(name, sizeof name, "%s/local-%d", argv[2], rank);
    check(MPI_File_open(MPI_COMM_SELF, name, amode, MPI_INFO_NULL, &fh), "open local");
    check(MPI_File_write_at(fh, 0, buf, 10, MPI_BYTE, &st), "write local");
    check(MPI_File_close(&fh), "close local");

    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}

/* Hints that cannot be honoured are ignored: opens (creates) FILE with the info
 * entries given as KEY=VALUE arguments, and prints on rank 0 "open class C" (0 on
 * success) and, when it opened, "KEY=VALUE" for every entry MPI_File_get_info reports.
 *
 *   hints FILE [KEY=VALUE ...] */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 2)
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Info info;
    MPI_Info_create(&info);
    for (int i = 2; i < argc; i++) {
        char key[MPI_MAX_INFO_KEY + 1];
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq - argv[i] > MPI_MAX_INFO_KEY)
            MPI_Abort(MPI_COMM_WORLD, 2);
        memcpy(key, argv[i], eq - argv[i]);
        key[eq - argv[i]] = 0;
        MPI_Info_set(info, key, eq + 1);
    }
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh);
    int class = rc;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &class);
    if (rank == 0)
        printf("open class %d\n", class);
    if (rc == MPI_SUCCESS) {
        MPI_Info used;
        MPI_File_get_info(fh, &used);
        int n = 0;
        MPI_Info_get_nkeys(used, &n);
        for (int i = 0; i < n && rank == 0; i++) {
            char key[MPI_MAX_INFO_KEY + 1], value[MPI_MAX_INFO_VAL + 1];
            int flag = 0;
            MPI_Info_get_nthkey(used, i, key);
            MPI_Info_get(used, key, MPI_MAX_INFO_VAL, value, &flag);
            if (flag)
                printf("%s=%s\n", key, value);
        }
        MPI_Info_free(&used);
        MPI_File_close(&fh);
    }
    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}

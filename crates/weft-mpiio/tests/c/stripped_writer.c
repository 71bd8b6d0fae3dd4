/* A library that strips the prefix of a weft: name and makes its own POSIX calls on
 * the rest, as PnetCDF does, but calls that cannot be served from Weft: each must be
 * refused (ENOTSUP), never reach the local file of that name.
 *
 *   stripped_writer weft:/dir/file     (no Weft file of that name exists)
 *
 * Prints one line per call: "CALL: ERRNO-NAME" or "CALL: ok". */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *errno_name(int e)
{
    switch (e) {
    case ENOTSUP: return "ENOTSUP";
    case ENOENT: return "ENOENT";
    case EBADF: return "EBADF";
    default: return strerror(e);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc < 2 || strchr(argv[1], ':') == NULL) {
        fprintf(stderr, "usage: %s weft:/dir/file\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *rest = strchr(argv[1], ':') + 1;

    int fd = open(rest, O_WRONLY | O_TRUNC);
    printf("open for writing: %s\n", fd < 0 ? errno_name(errno) : "ok");
    if (fd >= 0)
        close(fd);
    fd = open(rest, O_RDWR | O_CREAT, 0644);
    printf("open for creating: %s\n", fd < 0 ? errno_name(errno) : "ok");
    if (fd >= 0)
        close(fd);
    FILE *f = fopen(rest, "r");
    printf("fopen: %s\n", f == NULL ? errno_name(errno) : "ok");
    if (f != NULL)
        fclose(f);
    /* Served from Weft, where no such file exists. */
    printf("access: %s\n", access(rest, F_OK) < 0 ? errno_name(errno) : "ok");
    printf("truncate: %s\n", truncate(rest, 0) < 0 ? errno_name(errno) : "ok");
    printf("unlink: %s\n", unlink(rest) < 0 ? errno_name(errno) : "ok");
    fd = open(rest, O_RDONLY);
    printf("open for reading: %s\n", fd < 0 ? errno_name(errno) : "ok");
    if (fd >= 0)
        close(fd);
    MPI_Finalize();
    return 0;
}

/* A library that strips the prefix of a weft: name and makes its own POSIX calls on
 * the rest, as PnetCDF does: calls that cannot be served from Weft must be refused
 * (ENOTSUP), the others served from the Weft file; none may reach the local file of
 * that name.
 *
 *   stripped_writer weft:/dir/file     (no Weft file of that name exists at the start)
 *
 * Prints one line per call: "CALL: ERRNO-NAME", "CALL: ok" or what it saw. */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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
    struct stat st;
    printf("stat: %s\n", stat(rest, &st) < 0 ? errno_name(errno) : "ok");
    fd = open(rest, O_RDONLY);
    printf("open for reading: %s\n", fd < 0 ? errno_name(errno) : "ok");
    if (fd >= 0)
        close(fd);

    /* The Weft file made through MPI-IO: the served calls see it. */
    MPI_File fh;
    const char text[] = "weft bytes";
    if (MPI_File_open(MPI_COMM_SELF, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS ||
        MPI_File_write_at(fh, 0, text, 10, MPI_CHAR, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
        MPI_File_close(&fh) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 2);
    printf("access: %s\n", access(rest, R_OK | W_OK) < 0 ? errno_name(errno) : "ok");
    if (stat(rest, &st) < 0)
        printf("stat: %s\n", errno_name(errno));
    else
        printf("stat: size %lld, regular %d\n", (long long)st.st_size, S_ISREG(st.st_mode));
    fd = open(rest, O_RDONLY);
    if (fd < 0) {
        printf("open for reading: %s\n", errno_name(errno));
    } else {
        char buf[64] = "";
        ssize_t n = read(fd, buf, sizeof buf);
        printf("read: %zd bytes \"%.*s\"\n", n, n > 0 ? (int)n : 0, buf);
        printf("lseek: %lld\n", (long long)lseek(fd, 5, SEEK_SET));
        n = read(fd, buf, sizeof buf);
        printf("read after lseek: \"%.*s\"\n", n > 0 ? (int)n : 0, buf);
        n = pread(fd, buf, 4, 0);
        printf("pread: \"%.*s\"\n", n > 0 ? (int)n : 0, buf);
        if (fstat(fd, &st) < 0)
            printf("fstat: %s\n", errno_name(errno));
        else
            printf("fstat: size %lld\n", (long long)st.st_size);
        printf("write: %s\n", write(fd, "x", 1) < 0 ? errno_name(errno) : "ok");
        printf("close: %s\n", close(fd) < 0 ? errno_name(errno) : "ok");
    }
    printf("truncate: %s\n", truncate(rest, 4) < 0 ? errno_name(errno) : "ok");
    printf("stat: size %lld\n", stat(rest, &st) < 0 ? -1LL : (long long)st.st_size);
    printf("unlink: %s\n", unlink(rest) < 0 ? errno_name(errno) : "ok");
    int err = MPI_File_open(MPI_COMM_SELF, argv[1], MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), class = 0;
    MPI_Error_class(err, &class);
    printf("MPI_File_open after unlink: %s\n", class == MPI_ERR_NO_SUCH_FILE ? "MPI_ERR_NO_SUCH_FILE" : "other");
    MPI_Finalize();
    return 0;
}

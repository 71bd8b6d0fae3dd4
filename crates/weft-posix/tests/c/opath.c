/* Descriptors the library opens with O_PATH (see weft-posix's upgrade.rs) behave as
 * real ones: F_GETFL reports the program's flags, fstat and /proc/self/fd name the
 * file, mmap sees the library's buffered writes, dup'd descriptors keep one offset
 * through an upgrade, poll/select/flock/locks/fchmod work, and a program exec'd without
 * the library reads and writes the descriptors it inherits at their offsets. Prints
 * what it saw; the test compares the output with a run on a local directory.
 *
 * opath DIR            the run
 * opath exec DIR       the exec (the run's files made before)
 * opath child R W B    the exec'd program (run without the library) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

/* The files are 2 MiB: files opened read-only below 1 MiB are read through the mount
 * (weft-posix's READ_ADOPT_MIN), not opened with O_PATH. */
static void put(const char *path, const char *text) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || ftruncate(fd, 2 << 20) != 0 ||
        close(fd) != 0) {
        printf("setup %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static void show(const char *path) {
    char buf[256];
    int fd = open(path, O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf);
    printf("%s holds %.*s\n", strrchr(path, '/') + 1, (int)(n > 0 ? n : 0), buf);
    if (fd >= 0)
        close(fd);
}

static int child(int r, int w, const char *b) {
    char buf[64];
    ssize_t n = read(r, buf, 10);
    printf("child read %zd [%.*s] offset %ld\n", n, (int)(n > 0 ? n : 0), buf, (long)lseek(r, 0, SEEK_CUR));
    n = write(w, "CHILD", 5);
    printf("child wrote %zd offset %ld flags %o\n", n, (long)lseek(w, 0, SEEK_CUR),
           fcntl(w, F_GETFL) & (O_ACCMODE | O_APPEND));
    show(b);
    return 0;
}

/* A program exec'd without the library gets descriptors at their offsets, one holding
 * a buffered write (no fork before: fork would upgrade them). */
static int exec_without_library(const char *self, const char *a, const char *b) {
    char buf[64];
    int r = open(a, O_RDONLY);
    ssize_t n = read(r, buf, 3);
    int w = open(b, O_WRONLY);
    lseek(w, 4, SEEK_SET);
    ssize_t wn = write(w, "PAR", 3);
    printf("parent read %zd wrote %zd\n", n, wn);
    fflush(stdout);
    char rs[16], ws[16];
    snprintf(rs, sizeof rs, "%d", r);
    snprintf(ws, sizeof ws, "%d", w);
    char *args[] = {(char *)self, "child", rs, ws, (char *)b, NULL};
    /* The environment without the library. */
    int count = 0;
    while (environ[count])
        count++;
    char **env = calloc(count + 1, sizeof *env);
    int k = 0;
    for (int i = 0; i < count; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
            env[k++] = environ[i];
    execve(self, args, env);
    printf("execve failed: %s\n", strerror(errno));
    return 1;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "child") == 0)
        return child(atoi(argv[2]), atoi(argv[3]), argv[4]);
    int exec_part = argc == 3 && strcmp(argv[1], "exec") == 0;
    if (argc != 2 && !exec_part) {
        fprintf(stderr, "usage: opath [exec] DIR\n");
        return 2;
    }
    char a[4096], b[4096], buf[64];
    snprintf(a, sizeof a, "%s/opath-a", argv[argc - 1]);
    snprintf(b, sizeof b, "%s/opath-b", argv[argc - 1]);
    if (exec_part)
        return exec_without_library(argv[0], a, b);
    put(a, "0123456789abcdefghijklmnopqrstuvwxyz");
    put(b, "bbbbbbbbbbbbbbbbbbbb");

    /* Flags, attributes, the descriptor's name. */
    int fd = open(a, O_RDWR);
    printf("getfl %o getfd %d\n", fcntl(fd, F_GETFL), fcntl(fd, F_GETFD));
    struct stat st;
    int sr = fstat(fd, &st);
    printf("fstat %d size %ld mode %o\n", sr, (long)st.st_size, st.st_mode);
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t l = readlink(link, target, sizeof target - 1);
    target[l > 0 ? l : 0] = 0;
    printf("proc names %s\n", strrchr(target, '/') ? strrchr(target, '/') + 1 : "nothing");
    int other = open(a, O_RDONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
    printf("getfl %o getfd %d\n", fcntl(other, F_GETFL), fcntl(other, F_GETFD));
    printf("setfl %d ", fcntl(other, F_SETFL, O_NOATIME));
    printf("getfl %o\n", fcntl(other, F_GETFL));
    close(other);

    /* mmap sees a write the library buffered; the descriptor reads on afterwards. */
    printf("pwrite %zd\n", pwrite(fd, "MMAP", 4, 8));
    printf("lseek %ld\n", (long)lseek(fd, 2, SEEK_SET));
    char *m = mmap(NULL, 36, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        printf("mmap failed: %s\n", strerror(errno));
    } else {
        printf("mmap sees %.14s\n", m);
        munmap(m, 36);
    }
    ssize_t n = read(fd, buf, 8);
    printf("read after mmap %zd [%.*s] getfl %o\n", n, (int)(n > 0 ? n : 0), buf, fcntl(fd, F_GETFL));
    close(fd);

    /* dup, then an upgrade (flock): the two keep one offset. */
    fd = open(a, O_RDONLY);
    int d = dup(fd);
    n = read(fd, buf, 5);
    printf("read %zd [%.*s]\n", n, (int)(n > 0 ? n : 0), buf);
    printf("flock %d\n", flock(d, LOCK_SH));
    n = read(d, buf, 5);
    printf("dup read %zd [%.*s] offsets %ld %ld\n", n, (int)(n > 0 ? n : 0), buf, (long)lseek(fd, 0, SEEK_CUR),
           (long)lseek(d, 0, SEEK_CUR));
    close(d);
    close(fd);

    /* poll and select on a file: ready. */
    fd = open(a, O_RDONLY);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int pr = poll(&p, 1, 0);
    printf("poll %d revents %x\n", pr, p.revents);
    close(fd);
    fd = open(a, O_RDONLY);
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(fd, &rs);
    struct timeval zero = {0, 0};
    printf("select %d\n", select(fd + 1, &rs, NULL, NULL, &zero));
    close(fd);

    /* A record lock and fchmod. */
    fd = open(a, O_RDWR);
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    printf("setlk %d\n", fcntl(fd, F_SETLK, &lk));
    printf("fchmod %d ", fchmod(fd, 0640));
    fstat(fd, &st);
    printf("mode %o\n", st.st_mode);
    close(fd);

    return 0;
}

/* A program mixing libc calls (which a preloaded library sees) with syscall(2) on the
 * same descriptors (which bypass the library's symbols): each must see the other's
 * effects as on a local file. Prints what it read. Usage: raw DIR */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char path[4096];
static const char *in(const char *dir, const char *name) {
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: raw DIR\n"); return 2; }
    const char *dir = argv[1];
    char buf[256];
    long n;

    /* 1. libc writes, raw reads and writes, on one descriptor. */
    int fd = open(in(dir, "mixed"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(fd, "library-1;", 10);
    n = syscall(SYS_pread64, fd, buf, sizeof buf, 0);
    printf("raw pread after libc write: %.*s\n", (int)n, buf);
    syscall(SYS_write, fd, "raw-1;", 6);
    n = pread(fd, buf, sizeof buf, 0);
    printf("libc pread after raw write: %.*s\n", (int)n, buf);
    pwrite(fd, "LIB", 3, 0);
    n = syscall(SYS_pread64, fd, buf, sizeof buf, 0);
    printf("raw pread after libc pwrite over cached bytes: %.*s\n", (int)n, buf);
    write(fd, "library-2;", 10);
    printf("raw lseek end: %ld\n", syscall(SYS_lseek, fd, 0, SEEK_END));
    struct stat st;
    syscall(SYS_fstat, fd, &st);
    printf("raw fstat size: %lld\n", (long long)st.st_size);
    syscall(SYS_ftruncate, fd, 7);
    n = pread(fd, buf, sizeof buf, 0);
    printf("libc pread after raw ftruncate: %.*s\n", (int)n, buf);
    int d = (int)syscall(SYS_dup, fd);
    write(d, "via-raw-dup;", 12);
    syscall(SYS_close, d);
    close(fd);

    /* 2. A descriptor closed by a raw close, its number reused by a new open. */
    static char big[2 << 20];
    memset(big, 'B', sizeof big);
    fd = open(in(dir, "big"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    write(fd, big, sizeof big);
    close(fd);
    fd = open(in(dir, "small"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    write(fd, "small file", 10);
    close(fd);
    int a = open(in(dir, "big"), O_RDONLY);
    syscall(SYS_close, a);
    int b = open(in(dir, "small"), O_RDONLY);
    n = read(b, buf, sizeof buf);
    printf("same number reused: %s, read: %.*s\n", a == b ? "yes" : "no", (int)n, buf);
    close(b);

    /* 3. A raw open, then libc calls on it. */
    fd = (int)syscall(SYS_openat, AT_FDCWD, in(dir, "rawopen"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(fd, "opened raw;", 11);
    syscall(SYS_pwrite64, fd, "RAW", 3, 0);
    n = pread(fd, buf, sizeof buf, 0);
    printf("raw open: %.*s\n", (int)n, buf);
    syscall(SYS_close, fd);

    fd = open(in(dir, "mixed"), O_RDONLY);
    n = read(fd, buf, sizeof buf);
    printf("mixed: %ld bytes, head %.7s, tail %.12s\n", n, buf, n >= 12 ? buf + n - 12 : "");
    close(fd);
    return 0;
}

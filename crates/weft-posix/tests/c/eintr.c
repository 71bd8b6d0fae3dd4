/* Reads and writes interrupted by a signal handler that itself writes and reads files:
 * SIGALRM every 3 ms (no SA_RESTART), the handler appending a record to a
 * log and reading the data file's head. The main loop writes and reads the data file,
 * retrying on EINTR and short counts as a careful program does. Prints a checksum of
 * the data file read back and whether the log holds exactly one whole record per
 * handler call. Usage: eintr DATA LOG */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static int data_fd, log_fd;
static volatile sig_atomic_t calls, bad;

static void on_alarm(int sig) {
    (void)sig;
    int saved = errno;
    char rec[16];
    memcpy(rec, "sig............\n", 16);
    if (write(log_fd, rec, 16) != 16) bad = 1;
    char head[8];
    if (pread(data_fd, head, sizeof head, 0) < 0) bad = 1;
    calls++;
    errno = saved;
}

static void put(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) { perror("write"); exit(1); }
        p += w; n -= (size_t)w;
    }
}

static void get(int fd, char *p, size_t n, off_t at) {
    while (n > 0) {
        ssize_t r = pread(fd, p, n, at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { perror("pread"); exit(1); }
        p += r; n -= (size_t)r; at += r;
    }
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: eintr DATA LOG\n"); return 2; }
    data_fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
    log_fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (data_fd < 0 || log_fd < 0) { perror("open"); return 1; }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 3000}, {0, 3000}};
    setitimer(ITIMER_REAL, &it, NULL);
    static char buf[65536], back[65536];
    unsigned long long sum = 0;
    for (int i = 0; i < 1500; i++) {
        size_t n = 1 + (size_t)(i * 7919) % 20000;
        for (size_t j = 0; j < n; j++) buf[j] = (char)(i + j * 31);
        put(data_fd, buf, n);
        if (i % 5 == 0) {
            off_t end = lseek(data_fd, 0, SEEK_CUR);
            get(data_fd, back, n, end - (off_t)n);
            if (memcmp(buf, back, n) != 0) { fprintf(stderr, "read back differs at %d\n", i); return 1; }
        }
    }
    /* Reads go on until the handler has run often enough (fast servers finish the
     * writes within a few timer periods). */
    while (calls < 20) get(data_fd, back, 4096, 0);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    off_t size = lseek(data_fd, 0, SEEK_END);
    for (off_t at = 0; at < size; at += sizeof back) {
        size_t n = size - at < (off_t)sizeof back ? (size_t)(size - at) : sizeof back;
        get(data_fd, back, n, at);
        for (size_t j = 0; j < n; j++) sum = sum * 1099511628211ULL + (unsigned char)back[j];
    }
    close(data_fd);
    close(log_fd);
    int lf = open(argv[2], O_RDONLY);
    off_t logsize = lseek(lf, 0, SEEK_END);
    int whole = logsize == (off_t)calls * 16 && !bad;
    char rec[16];
    for (off_t at = 0; whole && at < logsize; at += 16) {
        get(lf, rec, 16, at);
        whole = memcmp(rec, "sig............\n", 16) == 0;
    }
    close(lf);
    printf("size %lld sum %llx log %s handler-ran %s\n", (long long)size, sum,
           whole ? "whole" : "BROKEN", calls >= 20 ? "yes" : "no");
    return 0;
}

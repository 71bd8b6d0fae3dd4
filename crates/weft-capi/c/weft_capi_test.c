/*
 * weft_capi_test: exercises libweft through weft.h as a C program would, against a
 * running cluster. Exits 0 when every check holds, else 1 with a message naming the
 * failed check.
 *
 *   weft_capi_test [META_ADDR]
 *
 * Without META_ADDR it connects with weft_connect(NULL), finding the cluster through
 * $WEFT_META or $WEFT_HOME as the weft tool does. It works under /capi-<pid>, so
 * several runs can share a cluster; the cluster needs at least 3 io servers.
 */
#define _POSIX_C_SOURCE 200809L

#include "weft.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int checks;

static void fail(const char *file, int line, const char *what, long long got) {
    fprintf(stderr, "%s:%d: check failed: %s (got %lld", file, line, what, got);
    if (got < 0) {
        fprintf(stderr, ": %s", weft_strerror((int)got));
    }
    fprintf(stderr, ")\n  last error: %s\n", weft_last_error_message());
    exit(1);
}

/* CHECK(expr): expr must be true. */
#define CHECK(expr)                                                                       \
    do {                                                                                  \
        checks++;                                                                         \
        if (!(expr)) fail(__FILE__, __LINE__, #expr, 0);                                  \
    } while (0)

/* OK(call): call must return >= 0; evaluates to its value. */
#define OK(call) ok_value((long long)(call), __FILE__, __LINE__, #call)
static long long ok_value(long long got, const char *file, int line, const char *what) {
    checks++;
    if (got < 0) fail(file, line, what, got);
    return got;
}

/* ERR(call, E): call must return -E. */
#define ERR(call, E)                                                                      \
    do {                                                                                  \
        long long got_ = (long long)(call);                                               \
        checks++;                                                                         \
        if (got_ != -(E)) fail(__FILE__, __LINE__, #call " == -" #E, got_);               \
    } while (0)

/* NULL_ERRNO(call, E): a handle-returning call must return NULL with errno E. */
#define NULL_ERRNO(call, E)                                                               \
    do {                                                                                  \
        errno = 0;                                                                        \
        void *p_ = (void *)(call);                                                        \
        checks++;                                                                         \
        if (p_ != NULL || errno != (E))                                                   \
            fail(__FILE__, __LINE__, #call " is NULL with errno " #E,                     \
                 p_ != NULL ? 0 : -(long long)errno);                                     \
    } while (0)

/* The byte at file offset `at` of the test pattern: varies within and across stripes. */
static unsigned char pattern(uint64_t at) {
    return (unsigned char)((at * 2654435761u) >> 13) ^ (unsigned char)(at >> 17);
}

static void fill(unsigned char *buf, size_t len, uint64_t offset) {
    for (size_t k = 0; k < len; k++) buf[k] = pattern(offset + k);
}

/* Checks `len` bytes read from `offset`: the pattern where written, zeros in holes. */
static void verify(const unsigned char *buf, size_t len, uint64_t offset, uint64_t written_end,
                   uint64_t hole_start, uint64_t hole_end) {
    for (size_t k = 0; k < len; k++) {
        uint64_t at = offset + k;
        unsigned char want = (at >= hole_start && at < hole_end) || at >= written_end ? 0 : pattern(at);
        if (buf[k] != want) {
            fprintf(stderr, "data mismatch at file offset %llu: got %u, want %u\n", (unsigned long long)at,
                    buf[k], want);
            exit(1);
        }
    }
    checks++;
}

/* How many of the `len` bytes at `buf` are `value`. */
static size_t count_of(const unsigned char *buf, size_t len, unsigned char value) {
    size_t n = 0;
    for (size_t k = 0; k < len; k++) {
        n += buf[k] == value;
    }
    return n;
}

static char base[64];

static const char *at(const char *name) {
    static char paths[8][192];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s", base, name);
    return p;
}

static void misuse(weft_client_t *client) {
    unsigned char byte = 0;
    weft_stat_t st;
    weft_layout_t layout;
    weft_dirent_t entry;

    /* NULL handles, paths and outputs are -EINVAL (or NULL with EINVAL), never a crash. */
    ERR(weft_pread(NULL, &byte, 1, 0), EINVAL);
    ERR(weft_pwrite(NULL, &byte, 1, 0), EINVAL);
    ERR(weft_fsync(NULL), EINVAL);
    ERR(weft_ftruncate(NULL, 0), EINVAL);
    ERR(weft_fstat(NULL, &st), EINVAL);
    ERR(weft_close(NULL), EINVAL);
    ERR(weft_closedir(NULL), EINVAL);
    ERR(weft_readdir(NULL, &entry), EINVAL);
    ERR(weft_disconnect(NULL), EINVAL);
    ERR(weft_mkdir(NULL, "/x", 0755), EINVAL);
    ERR(weft_mkdir(client, NULL, 0755), EINVAL);
    ERR(weft_stat(client, base, NULL), EINVAL);
    ERR(weft_stat(client, NULL, &st), EINVAL);
    ERR(weft_rename(client, base, NULL), EINVAL);
    ERR(weft_get_layout(client, base, NULL, NULL, 0), EINVAL);
    ERR(weft_statfs(client, NULL), EINVAL);
    NULL_ERRNO(weft_open(NULL, "/x", WEFT_O_RDONLY, 0, NULL), EINVAL);
    NULL_ERRNO(weft_open(client, NULL, WEFT_O_RDONLY, 0, NULL), EINVAL);
    NULL_ERRNO(weft_opendir(client, NULL), EINVAL);

    /* Bad paths, flags, modes and layouts. */
    ERR(weft_mkdir(client, "relative/dir", 0755), EINVAL);
    ERR(weft_mkdir(client, "/a/../b", 0755), EINVAL);
    ERR(weft_mkdir(client, "/not\xff-utf8", 0755), EINVAL);
    ERR(weft_mkdir(client, at("bad-mode"), WEFT_S_IFDIR | 0755), EINVAL);
    char long_name[300];
    memset(long_name, 'n', sizeof long_name);
    long_name[0] = '/';
    long_name[sizeof long_name - 1] = '\0';
    ERR(weft_mkdir(client, long_name, 0755), ENAMETOOLONG);
    NULL_ERRNO(weft_open(client, at("f"), WEFT_O_ACCMODE, 0644, NULL), EINVAL);
    NULL_ERRNO(weft_open(client, at("f"), WEFT_O_RDWR | 0x1000000, 0644, NULL), EINVAL);
    NULL_ERRNO(weft_open(client, at("f"), WEFT_O_RDWR | WEFT_O_EXCL, 0644, NULL), EINVAL);
    NULL_ERRNO(weft_open(client, at("f"), WEFT_O_RDONLY | WEFT_O_TRUNC, 0644, NULL), EINVAL);
    memset(&layout, 0, sizeof layout);
    NULL_ERRNO(weft_open(client, at("f"), WEFT_O_RDWR, 0644, &layout), EINVAL); /* no CREAT */
    layout.fields = 0x100;
    NULL_ERRNO(weft_open(client, at("f"), WEFT_O_RDWR | WEFT_O_CREAT, 0644, &layout), EINVAL);
    layout.fields = WEFT_LAYOUT_STRIPE_SIZE;
    layout.stripe_size_bytes = 100; /* below the 512-byte minimum */
    NULL_ERRNO(weft_open(client, at("f"), WEFT_O_RDWR | WEFT_O_CREAT, 0644, &layout), EINVAL);
    layout.fields = WEFT_LAYOUT_STRIPE_COUNT;
    layout.stripe_count = 100000; /* more servers than the cluster has */
    NULL_ERRNO(weft_open(client, at("f"), WEFT_O_RDWR | WEFT_O_CREAT, 0644, &layout), EINVAL);
    ERR(weft_stat(client, at("f"), &st), ENOENT); /* none of those created it */

    /* Missing files, and the messages that explain failures. */
    NULL_ERRNO(weft_open(client, at("missing"), WEFT_O_RDONLY, 0, NULL), ENOENT);
    CHECK(strstr(weft_last_error_message(), "weft_open") != NULL);
    CHECK(strstr(weft_last_error_message(), "missing") != NULL);
    ERR(weft_stat(client, at("missing/deeper"), &st), ENOENT);
    ERR(weft_unlink(client, at("missing")), ENOENT);
    NULL_ERRNO(weft_opendir(client, at("missing")), ENOENT);
    CHECK(strcmp(weft_strerror(ENOENT), "no such file or directory") == 0);
    CHECK(strcmp(weft_strerror(-ENOENT), weft_strerror(ENOENT)) == 0);
    CHECK(strcmp(weft_strerror(99999), "unknown error") == 0);
    CHECK(weft_strerror(-EIO) != NULL && weft_strerror(-EIO)[0] != '\0');

    /* Nobody listens on port 1: connecting fails with errno set, it does not hang. */
    NULL_ERRNO(weft_connect(""), EINVAL);
    errno = 0;
    CHECK(weft_connect("127.0.0.1:1") == NULL);
    CHECK(errno != 0);
    CHECK(strstr(weft_last_error_message(), "weft_connect") != NULL);

    /* A name ending in / names a directory: no file is created or opened through it. */
    NULL_ERRNO(weft_open(client, at("slash/"), WEFT_O_RDWR | WEFT_O_CREAT, 0644, NULL), EISDIR);
    ERR(weft_stat(client, at("slash"), &st), ENOENT);
    weft_file_t *plain = weft_open(client, at("slash"), WEFT_O_RDWR | WEFT_O_CREAT, 0644, NULL);
    CHECK(plain != NULL);
    OK(weft_close(plain));
    NULL_ERRNO(weft_open(client, at("slash/"), WEFT_O_RDONLY, 0, NULL), ENOTDIR);
    NULL_ERRNO(weft_open(client, at("slash/"), WEFT_O_RDWR | WEFT_O_CREAT, 0644, NULL), ENOTDIR);
    OK(weft_unlink(client, at("slash")));
    NULL_ERRNO(weft_open(client, "/", WEFT_O_RDONLY, 0, NULL), EISDIR);

    /* A handle used after its close, or closed twice, is -EBADF (or 0 for the type
     * queries), never a crash. Nothing of the same kind is opened in between, so no new
     * handle can have taken a closed one's address. */
    weft_file_t *closed = weft_open(client, at("closed"), WEFT_O_RDWR | WEFT_O_CREAT, 0644, NULL);
    CHECK(closed != NULL);
    OK(weft_close(closed));
    ERR(weft_close(closed), EBADF);
    CHECK(strstr(weft_last_error_message(), "not an open handle") != NULL);
    ERR(weft_pwrite(closed, &byte, 1, 0), EBADF);
    ERR(weft_pread(closed, &byte, 1, 0), EBADF);
    ERR(weft_fsync(closed), EBADF);
    ERR(weft_fstat(closed, &st), EBADF);
    ERR(weft_set_partition(closed, 0, 1, 2), EBADF);
    OK(weft_unlink(client, at("closed")));
    weft_dir_t *dir = weft_opendir(client, base);
    CHECK(dir != NULL);
    OK(weft_closedir(dir));
    ERR(weft_readdir(dir, &entry), EBADF);
    ERR(weft_closedir(dir), EBADF);
    weft_type_t *type = weft_type_bytes(8);
    CHECK(type != NULL);
    OK(weft_type_free(type));
    ERR(weft_type_free(type), EBADF);
    CHECK(weft_type_size(type) == 0 && weft_type_extent(type) == 0);
    NULL_ERRNO(weft_type_contiguous(2, type), EBADF);
    weft_client_t *other = weft_connect(NULL);
    CHECK(other != NULL);
    OK(weft_disconnect(other));
    ERR(weft_disconnect(other), EBADF);
    ERR(weft_stat(other, base, &st), EBADF);
    NULL_ERRNO(weft_open(other, at("never"), WEFT_O_RDONLY, 0, NULL), EBADF);
}

#define MiB (1024u * 1024u)

static void data_path(weft_client_t *client) {
    /* A directory whose default layout new files inherit. */
    weft_layout_t dir_layout;
    memset(&dir_layout, 0, sizeof dir_layout);
    dir_layout.fields = WEFT_LAYOUT_STRIPE_SIZE | WEFT_LAYOUT_STRIPE_COUNT;
    dir_layout.stripe_size_bytes = 32768;
    dir_layout.stripe_count = 2;
    OK(weft_mkdir(client, at("striped"), 0750));
    OK(weft_set_dir_layout(client, at("striped"), &dir_layout));
    weft_layout_t got;
    CHECK(OK(weft_get_layout(client, at("striped"), &got, NULL, 0)) == 0);
    CHECK(got.fields == dir_layout.fields);
    CHECK(got.stripe_size_bytes == 32768 && got.stripe_count == 2);
    weft_file_t *inherited = weft_open(client, at("striped/inherits"), WEFT_O_WRONLY | WEFT_O_CREAT, 0600, NULL);
    CHECK(inherited != NULL);
    weft_stat_t st;
    OK(weft_fstat(inherited, &st));
    CHECK(st.stripe_size_bytes == 32768 && st.stripe_count == 2);
    CHECK(S_ISREG(st.mode) && (st.mode & 07777) == 0600);
    OK(weft_close(inherited));
    OK(weft_set_dir_layout(client, at("striped"), NULL));
    CHECK(OK(weft_get_layout(client, at("striped"), &got, NULL, 0)) == 0);
    CHECK(got.fields == 0);

    /* A file with its own layout: 16 KiB stripes over 3 servers, from the second. */
    weft_layout_t layout;
    memset(&layout, 0, sizeof layout);
    layout.fields = WEFT_LAYOUT_STRIPE_SIZE | WEFT_LAYOUT_STRIPE_COUNT | WEFT_LAYOUT_FIRST_SERVER;
    layout.stripe_size_bytes = 16384;
    layout.stripe_count = 3;
    layout.first_server = 1;
    const char *path = at("data.bin");
    weft_file_t *file = weft_open(client, path, WEFT_O_RDWR | WEFT_O_CREAT | WEFT_O_EXCL, 0640, &layout);
    if (file == NULL) fail(__FILE__, __LINE__, "creating data.bin", -(long long)errno);
    NULL_ERRNO(weft_open(client, path, WEFT_O_RDWR | WEFT_O_CREAT | WEFT_O_EXCL, 0640, &layout), EEXIST);

    /* Write 3 MiB + 1000 bytes in pieces of awkward sizes, not in order, then a piece
     * past a hole. */
    const uint64_t first_len = 3 * MiB + 1000;
    const uint64_t hole_end = 5 * MiB + 123, tail_len = 77777;
    const uint64_t end = hole_end + tail_len;
    unsigned char *buf = malloc(end);
    unsigned char *back = malloc(end);
    CHECK(buf != NULL && back != NULL);
    fill(buf, end, 0);
    const uint64_t cuts[] = {0, 1, 4096, 16383, 16385, 65536, 100001, 1 * MiB + 7, 2 * MiB, first_len};
    const int ncuts = sizeof cuts / sizeof cuts[0];
    for (int k = ncuts - 2; k >= 0; k -= 2) {
        uint64_t from = cuts[k], len = cuts[k + 1] - cuts[k];
        CHECK(OK(weft_pwrite(file, buf + from, len, (int64_t)from)) == (long long)len);
    }
    for (int k = ncuts - 3; k >= 1; k -= 2) {
        uint64_t from = cuts[k], len = cuts[k + 1] - cuts[k];
        CHECK(OK(weft_pwrite(file, buf + from, len, (int64_t)from)) == (long long)len);
    }
    CHECK(OK(weft_pwrite(file, buf + hole_end, tail_len, (int64_t)hole_end)) == (long long)tail_len);
    CHECK(OK(weft_pwrite(file, buf, 0, 0)) == 0);
    OK(weft_fsync(file));

    /* Read back whole, then at awkward offsets and lengths; past the end is short. */
    CHECK(OK(weft_pread(file, back, end, 0)) == (long long)end);
    verify(back, end, 0, end, first_len, hole_end);
    const uint64_t offsets[] = {0, 1, 16383, 16384, 49151, 1 * MiB - 3, first_len - 10, 4 * MiB, hole_end - 5};
    for (size_t k = 0; k < sizeof offsets / sizeof offsets[0]; k++) {
        uint64_t len = 50000 + k * 12345;
        uint64_t want = offsets[k] + len <= end ? len : end - offsets[k];
        CHECK(OK(weft_pread(file, back, len, (int64_t)offsets[k])) == (long long)want);
        verify(back, want, offsets[k], end, first_len, hole_end);
    }
    /* A short read leaves the bytes past its count as they were, as pread(2) does
     * (weft_pread zeroed the whole buffer first). */
    memset(back, 0xA5, 1000);
    CHECK(OK(weft_pread(file, back, 1000, (int64_t)end - 10)) == 10);
    verify(back, 10, end - 10, end, first_len, hole_end);
    CHECK(count_of(back + 10, 990, 0xA5) == 990);
    CHECK(OK(weft_pread(file, back, 1000, (int64_t)end)) == 0);
    CHECK(OK(weft_pread(file, back, 1000, (int64_t)end + 1000000)) == 0);
    CHECK(count_of(back + 10, 990, 0xA5) == 990);
    CHECK(OK(weft_pread(file, NULL, 0, 0)) == 0);

    /* Misuse of a live handle. */
    ERR(weft_pread(file, NULL, 10, 0), EFAULT);
    ERR(weft_pwrite(file, NULL, 10, 0), EFAULT);
    ERR(weft_pread(file, back, 10, -1), EINVAL);
    ERR(weft_pwrite(file, buf, 10, -1), EINVAL);
    ERR(weft_pread(file, back, (size_t)SSIZE_MAX + 1, 0), EINVAL);
    ERR(weft_pwrite(file, buf, (size_t)-1, 0), EINVAL);
    ERR(weft_pwrite(file, buf, 10, INT64_MAX - 5), EFBIG); /* past the largest offset, as pwrite(2) */
    ERR(weft_ftruncate(file, -1), EINVAL);

    /* Attributes and layout. */
    OK(weft_fstat(file, &st));
    CHECK(st.size == end);
    CHECK(S_ISREG(st.mode) && (st.mode & WEFT_S_IFMT) == WEFT_S_IFREG && (st.mode & 07777) == 0640);
    CHECK(st.nlink == 1 && st.uid == (uint32_t)geteuid());
    CHECK(st.stripe_size_bytes == 16384 && st.stripe_count == 3);
    CHECK(st.mtime.sec > 1500000000 && st.mtime.nsec < 1000000000u);
    weft_stat_t by_path;
    OK(weft_stat(client, path, &by_path));
    CHECK(by_path.inode == st.inode && by_path.size == end);

    uint32_t servers[WEFT_STRIPE_COUNT_MAX];
    memset(&got, 0xff, sizeof got);
    CHECK(OK(weft_get_layout(client, path, &got, servers, WEFT_STRIPE_COUNT_MAX)) == 3);
    CHECK(got.fields == (WEFT_LAYOUT_STRIPE_SIZE | WEFT_LAYOUT_STRIPE_COUNT | WEFT_LAYOUT_FIRST_SERVER));
    CHECK(got.stripe_size_bytes == 16384 && got.stripe_count == 3 && got.first_server == 1);
    CHECK(servers[0] != servers[1] && servers[1] != servers[2] && servers[0] != servers[2]);
    uint32_t one[1] = {0xdeadbeef};
    CHECK(OK(weft_get_layout(client, path, &got, one, 1)) == 3); /* the count, not what fit */
    CHECK(one[0] == servers[0]);
    CHECK(OK(weft_get_layout(client, path, &got, NULL, 0)) == 3);
    ERR(weft_get_layout(client, path, &got, NULL, 3), EFAULT);
    uint32_t via_handle[3];
    CHECK(OK(weft_fget_layout(file, &got, via_handle, 3)) == 3);
    CHECK(memcmp(via_handle, servers, sizeof via_handle) == 0);

    /* Truncate through the handle and by path. */
    OK(weft_ftruncate(file, 2 * MiB));
    OK(weft_fstat(file, &st));
    CHECK(st.size == 2 * MiB);
    CHECK(OK(weft_pread(file, back, end, 0)) == (long long)(2 * MiB));
    verify(back, 2 * MiB, 0, end, first_len, hole_end);
    OK(weft_close(file));
    OK(weft_truncate(client, path, 10));
    OK(weft_stat(client, path, &st));
    CHECK(st.size == 10);
    ERR(weft_truncate(client, path, -1), EINVAL);

    /* Access modes: a read-only handle cannot write, a write-only one cannot read. */
    weft_file_t *reader = weft_open(client, path, WEFT_O_RDONLY, 0, NULL);
    CHECK(reader != NULL);
    ERR(weft_pwrite(reader, buf, 1, 0), EBADF);
    ERR(weft_ftruncate(reader, 0), EBADF);
    CHECK(OK(weft_pread(reader, back, 100, 0)) == 10);
    verify(back, 10, 0, 10, 0, 0);
    OK(weft_close(reader));
    weft_file_t *writer = weft_open(client, path, WEFT_O_WRONLY | WEFT_O_TRUNC, 0, NULL);
    CHECK(writer != NULL);
    ERR(weft_pread(writer, back, 1, 0), EBADF);
    OK(weft_fstat(writer, &st));
    CHECK(st.size == 0); /* WEFT_O_TRUNC */
    CHECK(OK(weft_pwrite(writer, buf, 4096, 0)) == 4096);
    OK(weft_close(writer));

    /* chmod */
    OK(weft_chmod(client, path, 0604));
    OK(weft_stat(client, path, &st));
    CHECK((st.mode & 07777) == 0604 && S_ISREG(st.mode));
    ERR(weft_chmod(client, path, 010000), EINVAL);

    /* Directories: open one as a file, or a file as a directory. */
    NULL_ERRNO(weft_open(client, base, WEFT_O_RDONLY, 0, NULL), EISDIR);
    NULL_ERRNO(weft_opendir(client, path), ENOTDIR);
    ERR(weft_mkdir(client, at("striped"), 0755), EEXIST);
    ERR(weft_mkdir(client, at("data.bin/sub"), 0755), ENOTDIR);
    OK(weft_stat(client, at("striped"), &st));
    CHECK(S_ISDIR(st.mode) && (st.mode & 07777) == 0750 && st.stripe_count == 0);

    free(buf);
    free(back);
}

static void namespace_ops(weft_client_t *client) {
    /* Entries in name order with their kinds. (Reading a directory of several pages is
     * tested in tests/ffi.rs with small pages: thousands of creates here would be slow.) */
    OK(weft_mkdir(client, at("many"), 0755));
    char name[192];
    const int files = 60;
    for (int k = 0; k < files; k++) {
        snprintf(name, sizeof name, "%s/many/f%05d", base, k);
        weft_file_t *f = weft_open(client, name, WEFT_O_WRONLY | WEFT_O_CREAT | WEFT_O_EXCL, 0644, NULL);
        if (f == NULL) fail(__FILE__, __LINE__, name, -(long long)errno);
        OK(weft_close(f));
    }
    weft_dir_t *dir = weft_opendir(client, at("many"));
    CHECK(dir != NULL);
    weft_dirent_t entry;
    int seen = 0, r;
    while ((r = weft_readdir(dir, &entry)) == 1) {
        snprintf(name, sizeof name, "f%05d", seen);
        if (strcmp(entry.name, name) != 0 || entry.kind != WEFT_DT_REG || entry.inode == 0) {
            fprintf(stderr, "readdir entry %d: got %s kind %u\n", seen, entry.name, entry.kind);
            exit(1);
        }
        seen++;
    }
    OK(r);
    CHECK(seen == files);
    CHECK(OK(weft_readdir(dir, &entry)) == 0); /* stays at the end */
    ERR(weft_readdir(dir, NULL), EINVAL);
    OK(weft_closedir(dir));

    /* The test directory itself: names in order, with their kinds. */
    dir = weft_opendir(client, base);
    CHECK(dir != NULL);
    const char *want[] = {"data.bin", "many", "striped"};
    const unsigned kinds[] = {WEFT_DT_REG, WEFT_DT_DIR, WEFT_DT_DIR};
    for (int k = 0; k < 3; k++) {
        CHECK(OK(weft_readdir(dir, &entry)) == 1);
        CHECK(strcmp(entry.name, want[k]) == 0 && entry.kind == kinds[k]);
    }
    CHECK(OK(weft_readdir(dir, &entry)) == 0);
    OK(weft_closedir(dir));

    /* rename: the old name is gone, the new one has the same inode; replacing works. */
    weft_stat_t before, after;
    OK(weft_stat(client, at("data.bin"), &before));
    OK(weft_rename(client, at("data.bin"), at("renamed.bin")));
    ERR(weft_stat(client, at("data.bin"), &after), ENOENT);
    OK(weft_stat(client, at("renamed.bin"), &after));
    CHECK(after.inode == before.inode && after.size == before.size);
    OK(weft_rename(client, at("striped/inherits"), at("renamed.bin")));
    OK(weft_stat(client, at("renamed.bin"), &after));
    CHECK(after.inode != before.inode);
    ERR(weft_rename(client, at("missing"), at("x")), ENOENT);

    /* unlink and rmdir */
    ERR(weft_rmdir(client, at("many")), ENOTEMPTY);
    ERR(weft_unlink(client, at("many")), EISDIR);
    for (int k = 0; k < files; k++) {
        snprintf(name, sizeof name, "%s/many/f%05d", base, k);
        OK(weft_unlink(client, name));
    }
    OK(weft_rmdir(client, at("many")));
    OK(weft_rmdir(client, at("striped")));
    OK(weft_unlink(client, at("renamed.bin")));
    ERR(weft_unlink(client, at("renamed.bin")), ENOENT);

    weft_statfs_t fs;
    OK(weft_statfs(client, &fs));
    CHECK(fs.io_servers >= 3 && fs.io_servers_unreachable == 0);
    CHECK(fs.directories >= 2 && fs.bytes_total > 0 && fs.bytes_free <= fs.bytes_total);

    dir = weft_opendir(client, base);
    CHECK(dir != NULL);
    CHECK(OK(weft_readdir(dir, &entry)) == 0);
    OK(weft_closedir(dir));
    OK(weft_rmdir(client, base));
}

int main(int argc, char **argv) {
    const char *meta = argc > 1 ? argv[1] : NULL;
    CHECK(weft_version() != NULL && strchr(weft_version(), '.') != NULL);
    weft_client_t *client = weft_connect(meta);
    if (client == NULL) {
        fprintf(stderr, "weft_connect(%s) failed: %s (%s)\n", meta ? meta : "NULL", weft_strerror(errno),
                weft_last_error_message());
        return 1;
    }
    snprintf(base, sizeof base, "/capi-%ld", (long)getpid());
    OK(weft_mkdir(client, base, 0755));

    misuse(client);
    data_path(client);
    namespace_ops(client);

    OK(weft_disconnect(client));
    printf("weft_capi_test: %d checks passed (libweft %s)\n", checks, weft_version());
    return 0;
}

/*
 * weft_view_test: noncontiguous I/O through weft.h as a C program does it, against a
 * running cluster (found through $WEFT_META or $WEFT_HOME). Four handles play the four
 * processes of a 2 x 2 grid: each sets a CYCLIC(3) x CYCLIC(3) darray view on one
 * matrix and writes its elements; a contiguous read must then find the whole matrix.
 * Then a PVFS partition, typed memory and a few errors. Exits 0 when every check
 * holds, else 1 naming the failed check.
 */
#define _POSIX_C_SOURCE 200809L

#include "weft.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROWS 61
#define COLS 47
#define K 3

static int checks;

static void fail(int line, const char *what, long long got) {
    fprintf(stderr, "weft_view_test.c:%d: check failed: %s (got %lld)\n  last error: %s\n", line, what,
            got, weft_last_error_message());
    exit(1);
}

#define CHECK(expr)                                                                       \
    do {                                                                                  \
        checks++;                                                                         \
        if (!(expr)) fail(__LINE__, #expr, 0);                                            \
    } while (0)

#define EXPECT(call, value)                                                               \
    do {                                                                                  \
        long long got_ = (long long)(call);                                               \
        checks++;                                                                         \
        if (got_ != (long long)(value)) fail(__LINE__, #call " == " #value, got_);        \
    } while (0)

static unsigned char element(int i, int j) { return (unsigned char)(i * 5 + j * 11 + 3); }

int main(void) {
    weft_client_t *client = weft_connect(NULL);
    char path[64];
    unsigned char mine[ROWS * COLS], back[ROWS * COLS], whole[ROWS * COLS];
    int rank;

    CHECK(client != NULL);
    snprintf(path, sizeof path, "/view-%ld", (long)getpid());

    for (rank = 0; rank < 4; rank++) {
        const uint64_t gsizes[2] = {ROWS, COLS};
        const int distributions[2] = {WEFT_DISTRIBUTE_CYCLIC, WEFT_DISTRIBUTE_CYCLIC};
        const int64_t dargs[2] = {K, K};
        const uint64_t psizes[2] = {2, 2};
        weft_file_t *file = weft_open(client, path, WEFT_O_RDWR | WEFT_O_CREAT, 0644, NULL);
        weft_type_t *byte = weft_type_bytes(1);
        weft_type_t *darray;
        size_t n = 0;
        int i, j;

        CHECK(file != NULL && byte != NULL);
        darray = weft_type_darray(4, (uint64_t)rank, 2, gsizes, distributions, dargs, psizes,
                                  WEFT_ORDER_C, byte);
        CHECK(darray != NULL);
        EXPECT(weft_set_view(file, 0, darray), 0);
        EXPECT(weft_type_free(darray), 0);
        EXPECT(weft_type_free(byte), 0);
        for (i = 0; i < ROWS; i++) {
            for (j = 0; j < COLS; j++) {
                if ((i / K) % 2 == rank / 2 && (j / K) % 2 == rank % 2) mine[n++] = element(i, j);
            }
        }
        EXPECT(weft_write_view(file, mine, n, 0), n);
        memset(back, 0, sizeof back);
        EXPECT(weft_read_view(file, back, n, 0), n);
        CHECK(memcmp(back, mine, n) == 0);
        EXPECT(weft_close(file), 0);
    }
    {
        weft_file_t *file = weft_open(client, path, WEFT_O_RDWR, 0, NULL);
        weft_type_t *four, *spread;
        unsigned char gathered[40], data[20];
        int i, j;

        CHECK(file != NULL);
        EXPECT(weft_pread(file, whole, sizeof whole, 0), sizeof whole);
        for (i = 0; i < ROWS; i++) {
            for (j = 0; j < COLS; j++) CHECK(whole[i * COLS + j] == element(i, j));
        }
        /* The PVFS partition: 4 bytes every 16 from offset 2. */
        EXPECT(weft_set_partition(file, 2, 4, 16), 0);
        EXPECT(weft_read_view(file, data, 20, 0), 20);
        for (i = 0; i < 20; i++) CHECK(data[i] == whole[2 + (i / 4) * 16 + i % 4]);
        /* A read past the view's end is short and leaves the rest of the buffer as it
         * was, as pread(2) does (it was zeroed whole first). */
        {
            long long got;
            size_t kept = 0, k;
            memset(back, 0xA5, sizeof back);
            got = weft_read_view(file, back, sizeof back, 0);
            CHECK(got > 20 && got < (long long)sizeof back);
            for (i = 0; i < got; i++) CHECK(back[i] == whole[2 + (i / 4) * 16 + i % 4]);
            for (k = (size_t)got; k < sizeof back; k++) kept += back[k] == 0xA5;
            EXPECT(kept, sizeof back - (size_t)got);
        }
        /* Typed memory: the same 20 bytes into every other 4-byte group of a buffer. */
        four = weft_type_bytes(4);
        spread = weft_type_hvector(5, 1, 8, four);
        CHECK(four != NULL && spread != NULL);
        memset(gathered, 0, sizeof gathered);
        EXPECT(weft_read_view_typed(file, gathered, spread, 20, 0), 20);
        for (i = 0; i < 20; i++) CHECK(gathered[(i / 4) * 8 + i % 4] == data[i]);
        /* Errors are -errno, never a crash. */
        EXPECT(weft_set_partition(file, 0, 8, 4), -EINVAL);
        EXPECT(weft_set_view(NULL, 0, NULL), -EINVAL);
        EXPECT(weft_read_view(file, NULL, 4, 0), -EFAULT);
        CHECK(weft_type_from_wire((const uint8_t *)"\x01\x09", 2) == NULL && errno == EINVAL);
        weft_type_free(spread);
        weft_type_free(four);
        EXPECT(weft_close(file), 0);
    }
    EXPECT(weft_unlink(client, path), 0);
    EXPECT(weft_disconnect(client), 0);
    printf("weft_view_test: %d checks passed\n", checks);
    return 0;
}

/* Many small collective calls, as IOR's MPIIO backend makes them with -c, and the
 * patterns around them that a collective call predicted not to interleave must still
 * get right (src/collective/no_exchange.rs). Every file byte written is a function of
 * its offset and the file (value()), so a byte written at the wrong place, or not at
 * all, is caught; every section checks what its collective reads return and, on rank
 * 0, the whole file by independent reads.
 *
 *   coll_small PREFIX [key=value ...] [noerror]   (hints set at every open)
 *
 * `noerror` skips the error section: ROMIO returns at once on the rank that fails and
 * leaves the others hanging in the collective (to run the program through ROMIO).
 *
 * Files (PREFIX + name):
 *   contig   N write_at_all of PIECE bytes per rank, each rank in its own block (IOR
 *            -c -t PIECE -b N*PIECE), then N read_at_all of the next rank's block;
 *   inter    N write_at_all whose pieces interleave (piece i of rank r at (i*np+r));
 *   switch   8 calls that do not interleave, then 3 write_all through a view whose
 *            blocks interleave across ranks, read back with read_all;
 *   overlap  8 reads that do not interleave, then 4 read_at_all of one region that
 *            every rank reads, then 4 where each rank reads its own and its
 *            neighbour's block;
 *   error    8 calls that do not interleave, then one where the last rank passes a
 *            negative count: every rank must get MPI_ERR_COUNT; then the file works;
 *   ordered  N write_ordered of records of rank-dependent sizes;
 *   sparse   N write_at_all where only some ranks have data.
 * Prints "coll_small OK" on rank 0 when everything matched; exits 1 otherwise. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 24
#define PIECE 3000
#define STREAK 8

static int rank, np, failures;
static MPI_Info info;

static unsigned char value(long long offset, int salt)
{
    return (unsigned char)((offset * 131 + offset / 253 + salt * 17) % 251 + 1);
}

static void fill(unsigned char *buf, long long offset, int len, int salt)
{
    for (int i = 0; i < len; i++)
        buf[i] = value(offset + i, salt);
}

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

/* `len` bytes read from `offset` must be value(offset + i, salt). */
static void expect(const unsigned char *buf, long long offset, int len, int salt, const char *what)
{
    for (int i = 0; i < len; i++) {
        if (buf[i] != value(offset + i, salt)) {
            fprintf(stderr, "rank %d: %s: byte at file offset %lld is %d, expected %d\n", rank, what,
                    offset + i, buf[i], value(offset + i, salt));
            failures++;
            return;
        }
    }
}

static MPI_File open_file(const char *prefix, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s", prefix, name);
    /* A fresh file each run (a missing one is no error). */
    if (rank == 0)
        MPI_File_delete(path, MPI_INFO_NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File fh;
    check(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR | MPI_MODE_CREATE, info, &fh), path);
    check(MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN), "set_errhandler");
    return fh;
}

/* Rank 0 reads the whole file independently: `size` bytes, those where `written`
 * says so must be value(o, salt), the others zero. */
static void check_file(MPI_File fh, long long size, int salt, int (*written)(long long), const char *what)
{
    /* MPI's consistency rule for other processes' writes: sync, barrier, sync. */
    check(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_sync(fh), "sync");
    MPI_Offset got = 0;
    check(MPI_File_get_size(fh, &got), "get_size");
    if (got != size) {
        fprintf(stderr, "rank %d: %s: size %lld, expected %lld\n", rank, what, (long long)got, size);
        failures++;
    }
    if (rank != 0)
        return;
    unsigned char *buf = calloc(size, 1);
    MPI_Status st;
    check(MPI_File_read_at(fh, 0, buf, (int)size, MPI_BYTE, &st), "read_at");
    for (long long o = 0; o < size; o++) {
        unsigned char want = written(o) ? value(o, salt) : 0;
        if (buf[o] != want) {
            fprintf(stderr, "%s: file byte %lld is %d, expected %d\n", what, o, buf[o], want);
            failures++;
            break;
        }
    }
    free(buf);
}

static int everywhere(long long o)
{
    (void)o;
    return 1;
}

/* Calls that do not interleave: rank r writes piece i of its own block of `per`
 * pieces, at base + (r * per + i) * PIECE. */
static void streak_writes(MPI_File fh, long long base, int per, int salt)
{
    unsigned char buf[PIECE];
    MPI_Status st;
    for (int i = 0; i < per; i++) {
        long long at = base + ((long long)rank * per + i) * PIECE;
        fill(buf, at, PIECE, salt);
        check(MPI_File_write_at_all(fh, at, buf, PIECE, MPI_BYTE, &st), "streak write_at_all");
    }
}

static void contig(const char *prefix)
{
    MPI_File fh = open_file(prefix, "contig");
    streak_writes(fh, 0, N, 1);
    unsigned char buf[PIECE];
    MPI_Status st;
    int next = (rank + 1) % np;
    for (int i = 0; i < N; i++) {
        long long at = ((long long)next * N + i) * PIECE;
        memset(buf, 0, sizeof buf);
        check(MPI_File_read_at_all(fh, at, buf, PIECE, MPI_BYTE, &st), "contig read_at_all");
        int count = -1;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if (count != PIECE) {
            fprintf(stderr, "rank %d: contig read %d bytes, expected %d\n", rank, count, PIECE);
            failures++;
        }
        expect(buf, at, PIECE, 1, "contig read_at_all");
    }
    check_file(fh, (long long)np * N * PIECE, 1, everywhere, "contig");
    MPI_File_close(&fh);
}

static void inter(const char *prefix)
{
    MPI_File fh = open_file(prefix, "inter");
    int len = 1000;
    unsigned char buf[1000];
    MPI_Status st;
    for (int i = 0; i < N; i++) {
        long long at = ((long long)i * np + rank) * len;
        fill(buf, at, len, 2);
        check(MPI_File_write_at_all(fh, at, buf, len, MPI_BYTE, &st), "inter write_at_all");
    }
    for (int i = 0; i < N; i++) {
        long long at = ((long long)i * np + (rank + 1) % np) * len;
        check(MPI_File_read_at_all(fh, at, buf, len, MPI_BYTE, &st), "inter read_at_all");
        expect(buf, at, len, 2, "inter read_at_all");
    }
    check_file(fh, (long long)N * np * len, 2, everywhere, "inter");
    MPI_File_close(&fh);
}

/* switch: the region after the streak's blocks is cut into 512-byte blocks dealt
 * round robin to the ranks by a view. */
#define SW_BLOCK 512
#define SW_CALLS 3
#define SW_PER_CALL 4
static long long sw_base;
static int sw_written(long long o)
{
    return o < sw_base + (long long)np * SW_CALLS * SW_PER_CALL * SW_BLOCK;
}

static void switched(const char *prefix)
{
    MPI_File fh = open_file(prefix, "switch");
    streak_writes(fh, 0, STREAK, 3);
    sw_base = (long long)np * STREAK * PIECE;
    MPI_Datatype block, filetype;
    MPI_Type_contiguous(SW_BLOCK, MPI_BYTE, &block);
    MPI_Type_create_resized(block, 0, (MPI_Aint)SW_BLOCK * np, &filetype);
    MPI_Type_commit(&filetype);
    check(MPI_File_set_view(fh, sw_base + (long long)rank * SW_BLOCK, MPI_BYTE, filetype, "native", info),
          "set_view");
    int len = SW_PER_CALL * SW_BLOCK;
    unsigned char *buf = malloc(len);
    MPI_Status st;
    /* The file offset of byte j of call c of this rank's view. */
#define SW_AT(c, j) (sw_base + (((long long)(c) * SW_PER_CALL + (j) / SW_BLOCK) * np + rank) * SW_BLOCK + (j) % SW_BLOCK)
    for (int c = 0; c < SW_CALLS; c++) {
        for (int j = 0; j < len; j++)
            buf[j] = value(SW_AT(c, j), 3);
        check(MPI_File_write_all(fh, buf, len, MPI_BYTE, &st), "switch write_all");
    }
    check(MPI_File_seek(fh, 0, MPI_SEEK_SET), "seek");
    for (int c = 0; c < SW_CALLS; c++) {
        memset(buf, 0, len);
        check(MPI_File_read_all(fh, buf, len, MPI_BYTE, &st), "switch read_all");
        for (int j = 0; j < len; j++) {
            if (buf[j] != value(SW_AT(c, j), 3)) {
                fprintf(stderr, "rank %d: switch read_all: call %d byte %d is %d, expected %d\n", rank, c, j,
                        buf[j], value(SW_AT(c, j), 3));
                failures++;
                break;
            }
        }
    }
    free(buf);
    check(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", info), "set_view back");
    MPI_Type_free(&filetype);
    MPI_Type_free(&block);
    check_file(fh, sw_base + (long long)np * SW_CALLS * SW_PER_CALL * SW_BLOCK, 3, sw_written, "switch");
    MPI_File_close(&fh);
}

static void overlap(const char *prefix)
{
    MPI_File fh = open_file(prefix, "overlap");
    streak_writes(fh, 0, STREAK, 4);
    unsigned char buf[2 * PIECE];
    MPI_Status st;
    /* Reads that do not interleave: the streak. */
    for (int i = 0; i < STREAK; i++) {
        long long at = ((long long)rank * STREAK + i) * PIECE;
        check(MPI_File_read_at_all(fh, at, buf, PIECE, MPI_BYTE, &st), "overlap streak read");
        expect(buf, at, PIECE, 4, "overlap streak read");
    }
    /* Every rank reads the same region. */
    for (int i = 0; i < 4; i++) {
        long long at = (long long)i * PIECE + 17;
        memset(buf, 0, sizeof buf);
        check(MPI_File_read_at_all(fh, at, buf, 2 * PIECE, MPI_BYTE, &st), "overlap same region");
        expect(buf, at, 2 * PIECE, 4, "overlap same region");
    }
    /* Each rank its own piece and its neighbour's: overlapping pairs. */
    for (int i = 0; i < 4; i++) {
        long long at = ((long long)rank * STREAK + i) * PIECE + PIECE / 2;
        long long end = (long long)np * STREAK * PIECE;
        int len = at + 2 * PIECE <= end ? 2 * PIECE : (int)(end - at);
        memset(buf, 0, sizeof buf);
        check(MPI_File_read_at_all(fh, at, buf, len, MPI_BYTE, &st), "overlap neighbours");
        expect(buf, at, len, 4, "overlap neighbours");
    }
    MPI_File_close(&fh);
}

static void error(const char *prefix)
{
    MPI_File fh = open_file(prefix, "error");
    streak_writes(fh, 0, STREAK, 5);
    unsigned char buf[PIECE];
    MPI_Status st;
    long long at = ((long long)np * STREAK + rank) * PIECE;
    fill(buf, at, PIECE, 5);
    int count = rank == np - 1 ? -1 : PIECE;
    int rc = MPI_File_write_at_all(fh, at, buf, count, MPI_BYTE, &st);
    int c = rc;
    MPI_Error_class(rc, &c);
    int lo = c, hi = c;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (lo != hi || c != MPI_ERR_COUNT) {
        fprintf(stderr, "rank %d: error: class %d, expected MPI_ERR_COUNT (%d) on every rank (%d..%d)\n", rank,
                c, MPI_ERR_COUNT, lo, hi);
        failures++;
    }
    /* The file still works: every rank writes its piece of that row. */
    check(MPI_File_write_at_all(fh, at, buf, PIECE, MPI_BYTE, &st), "error write_at_all after");
    memset(buf, 0, sizeof buf);
    check(MPI_File_read_at_all(fh, at, buf, PIECE, MPI_BYTE, &st), "error read_at_all after");
    expect(buf, at, PIECE, 5, "error read_at_all after");
    check_file(fh, ((long long)np * STREAK + np) * PIECE, 5, everywhere, "error");
    MPI_File_close(&fh);
}

/* ordered: call i, rank r appends a record of 100 + 37 * r bytes. */
static int record_len(int r)
{
    return 100 + 37 * r;
}

static void ordered(const char *prefix)
{
    MPI_File fh = open_file(prefix, "ordered");
    long long row = 0;
    for (int r = 0; r < np; r++)
        row += record_len(r);
    long long before = 0;
    for (int r = 0; r < rank; r++)
        before += record_len(r);
    unsigned char buf[100 + 37 * 64];
    MPI_Status st;
    int len = record_len(rank);
    for (int i = 0; i < N; i++) {
        fill(buf, i * row + before, len, 6);
        check(MPI_File_write_ordered(fh, buf, len, MPI_BYTE, &st), "write_ordered");
    }
    check_file(fh, N * row, 6, everywhere, "ordered");
    MPI_File_close(&fh);
}

/* sparse: in call i only the ranks with (i + r) % 3 == 0 write their piece. */
static int sparse_written(long long o)
{
    long long piece = o / PIECE;
    int r = (int)(piece / N), i = (int)(piece % N);
    return (i + r) % 3 == 0;
}

static void sparse(const char *prefix)
{
    MPI_File fh = open_file(prefix, "sparse");
    unsigned char buf[PIECE];
    MPI_Status st;
    for (int i = 0; i < N; i++) {
        long long at = ((long long)rank * N + i) * PIECE;
        int len = (i + rank) % 3 == 0 ? PIECE : 0;
        fill(buf, at, PIECE, 7);
        check(MPI_File_write_at_all(fh, at, buf, len, MPI_BYTE, &st), "sparse write_at_all");
    }
    /* The last piece of the file may be a hole: the size is where the last write ended. */
    long long size = 0;
    for (int r = 0; r < np; r++)
        for (int i = 0; i < N; i++)
            if ((i + r) % 3 == 0)
                size = ((long long)r * N + i + 1) * PIECE;
    check_file(fh, size, 7, sparse_written, "sparse");
    MPI_File_close(&fh);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (argc < 2 || np > 64) {
        if (rank == 0)
            fprintf(stderr, "usage: coll_small PREFIX [key=value ...] (at most 64 processes)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Info_create(&info);
    int with_error = 1;
    for (int i = 2; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (strcmp(argv[i], "noerror") == 0)
            with_error = 0;
        if (!eq)
            continue;
        *eq = 0;
        MPI_Info_set(info, argv[i], eq + 1);
    }
    contig(argv[1]);
    inter(argv[1]);
    switched(argv[1]);
    overlap(argv[1]);
    if (with_error)
        error(argv[1]);
    ordered(argv[1]);
    sparse(argv[1]);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total == 0)
        printf("coll_small OK\n");
    MPI_Info_free(&info);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}

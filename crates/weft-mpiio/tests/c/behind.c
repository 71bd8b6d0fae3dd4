/* MPI's consistency rules with write-behind and read-ahead (on by default):
 *
 *   behind FILE visible          rank 0 writes small pieces, syncs, barrier; rank 1
 *                                reads them first without the sync (each byte old or
 *                                new, never a crash), then syncs and must see them all;
 *                                meanwhile rank 1 reads its own unsynced writes back
 *   behind FILE views            read-your-writes in one process: overlapping writes
 *                                (later bytes win) through a strided view, read back
 *                                through it, through another view and by explicit
 *                                offsets; a read-ahead window dropped by own writes
 *   behind FILE deferred GO [close]
 *                                every rank writes small pieces (buffered: each call
 *                                succeeds), prints "written", waits for the local file GO
 *                                (the test kills an io server), prints "io C" (the class
 *                                MPI_ERR_IO), then syncs (unless "close") and closes:
 *                                prints "sync class C" and "close class C" (agreed)
 *   behind FILE direct           with weft_write_behind=disable (the test sets it):
 *                                rank 0's writes seen by rank 1 after a barrier alone;
 *                                then write_shared records of every rank counted in
 *                                the size after a barrier alone
 *   behind FILE shared           the write_shared part alone (write-behind on)
 *   behind FILE crash            rank 0 writes 'S' at [0, 64 KiB), syncs, writes 'U' at
 *                                [64 KiB, 128 KiB), prints "unsynced", and is killed
 *   behind FILE unclosed         every rank writes 100 small pieces of its rank's letter
 *                                and calls MPI_Finalize with the file still open (no
 *                                sync, no close): the test reads every byte back
 *   behind FILE stream-write MIB every rank writes its block of MIB MiB (IOR-like,
 *                                100,000-byte transfers), closes
 *   behind FILE stream-read MIB  every rank reads the next rank's block in 100,000-byte
 *                                read_at calls, checking every byte
 *   behind FILE restream MIB     rank 0 writes its block, sync-barrier-sync; rank 1
 *                                reads its first half in 100,000-byte calls (windows
 *                                grown past the half); rank 0 rewrites the block,
 *                                sync-barrier-sync; rank 1 reads the second half: every
 *                                byte new
 *   behind FILE storm MIB        every rank writes MIB MiB in 1000-byte pieces and
 *                                1-byte scattered pieces, then reads everything back;
 *                                prints "peak growth KIB" (largest VmHWM growth over the
 *                                ranks during the writes) and "storm ok"
 *
 * Prints "No Errors" at the end when every check held; "FAIL ..." lines otherwise. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, nprocs, errors;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            errors++;                                                                              \
            printf("FAIL rank %d: ", rank);                                                        \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            fflush(stdout);                                                                        \
        }                                                                                          \
    } while (0)

static int class_of(int rc)
{
    int c = rc;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &c);
    return c;
}

/* Rank 0's pieces in `visible`: PIECES pieces of PIECE bytes, every other PIECE. */
#define PIECE 100
#define PIECES 200

static void visible(const char *name)
{
    MPI_File fh;
    MPI_Status st;
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    MPI_Offset own = (MPI_Offset)2 * PIECE * PIECES * (rank + 1);
    char buf[PIECE], got[PIECE];
    if (rank == 0) {
        for (int i = 0; i < PIECES; i++) {
            memset(buf, 'A' + i % 26, PIECE);
            CHECK(MPI_File_write_at(fh, (MPI_Offset)i * 2 * PIECE, buf, PIECE, MPI_BYTE, &st) == 0,
                  "write_at %d", i);
        }
    } else if (rank == 1) {
        /* Own unsynced writes read back whole, however rank 0's writes go. */
        for (int i = 0; i < PIECES; i++) {
            memset(buf, 'a' + i % 26, PIECE);
            MPI_File_write_at(fh, own + (MPI_Offset)i * PIECE, buf, PIECE, MPI_BYTE, &st);
        }
        for (int i = 0; i < PIECES; i++) {
            CHECK(MPI_File_read_at(fh, own + (MPI_Offset)i * PIECE, got, PIECE, MPI_BYTE, &st) == 0,
                  "read own %d", i);
            for (int j = 0; j < PIECE; j++)
                CHECK(got[j] == 'a' + i % 26, "own piece %d byte %d is %d", i, j, got[j]);
        }
        /* Rank 0's bytes without the sync: each old (0) or new, never anything else. */
        for (int i = 0; i < PIECES; i++) {
            memset(got, 7, PIECE);
            MPI_File_read_at(fh, (MPI_Offset)i * 2 * PIECE, got, PIECE, MPI_BYTE, &st);
            for (int j = 0; j < PIECE; j++)
                CHECK(got[j] == 0 || got[j] == 'A' + i % 26, "unsynced piece %d byte %d is %d", i, j,
                      got[j]);
        }
    }
    /* sync - barrier - sync */
    CHECK(MPI_File_sync(fh) == 0, "first sync");
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_File_sync(fh) == 0, "second sync");
    if (rank == 1) {
        for (int i = 0; i < PIECES; i++) {
            MPI_File_read_at(fh, (MPI_Offset)i * 2 * PIECE, got, PIECE, MPI_BYTE, &st);
            for (int j = 0; j < PIECE; j++)
                CHECK(got[j] == 'A' + i % 26, "synced piece %d byte %d is %d", i, j, got[j]);
        }
        /* The first half again: a read-ahead window now holds the second half. */
        for (int i = 0; i < PIECES / 2; i++)
            MPI_File_read_at(fh, (MPI_Offset)i * 2 * PIECE, got, PIECE, MPI_BYTE, &st);
    }
    /* Now rank 0 rewrites its region, sync-barrier-sync, and rank 1 carries on where
     * its strided reads stopped: they must not come from the window. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        for (int i = 0; i < PIECES; i++) {
            memset(buf, 'z', PIECE);
            MPI_File_write_at(fh, (MPI_Offset)i * 2 * PIECE, buf, PIECE, MPI_BYTE, &st);
        }
    }
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_sync(fh);
    if (rank == 1) {
        for (int k = 0; k < PIECES; k++) {
            int i = (k + PIECES / 2) % PIECES;
            MPI_File_read_at(fh, (MPI_Offset)i * 2 * PIECE, got, PIECE, MPI_BYTE, &st);
            for (int j = 0; j < PIECE; j++)
                CHECK(got[j] == 'z', "rewritten piece %d byte %d is %d", i, j, got[j]);
        }
    }
    CHECK(MPI_File_close(&fh) == 0, "close");
}

/* A view of blocks of 16 bytes every 64 bytes. */
static void views(const char *name)
{
    MPI_File fh;
    MPI_Status st;
    MPI_Comm self = MPI_COMM_SELF;
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", name, rank);
    MPI_File_open(self, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    MPI_Datatype strided;
    MPI_Type_vector(1, 16, 64, MPI_BYTE, &strided);
    MPI_Datatype tiled;
    MPI_Type_create_resized(strided, 0, 64, &tiled);
    MPI_Type_commit(&tiled);
    MPI_File_set_view(fh, 0, MPI_BYTE, tiled, "native", MPI_INFO_NULL);
    enum { N = 4096 };
    static char expect[N * 4], buf[N], got[N * 4];
    memset(expect, 0, sizeof expect);
    /* Overlapping writes through the view: [0, 1000) 'p', then [500, 1500) 'q'. */
    memset(buf, 'p', 1000);
    MPI_File_write_at(fh, 0, buf, 1000, MPI_BYTE, &st);
    memset(buf, 'q', 1000);
    MPI_File_write_at(fh, 500, buf, 1000, MPI_BYTE, &st);
    for (int v = 0; v < 1500; v++)
        expect[v / 16 * 64 + v % 16] = v < 500 ? 'p' : 'q';
    /* Back through the view, piece by small piece (sequential: read-ahead). */
    for (int v = 0; v < 1500; v += 50) {
        MPI_File_read_at(fh, v, got, 50, MPI_BYTE, &st);
        for (int j = 0; j < 50; j++)
            CHECK(got[j] == (v + j < 500 ? 'p' : 'q'), "view read at %d byte %d is %d", v, j, got[j]);
    }
    /* A write inside what the window holds, then the same reads: the new bytes. */
    memset(buf, 'r', 10);
    MPI_File_write_at(fh, 1200, buf, 10, MPI_BYTE, &st);
    for (int v = 1200; v < 1210; v++)
        expect[v / 16 * 64 + v % 16] = 'r';
    for (int v = 1150; v < 1250; v += 25) {
        MPI_File_read_at(fh, v, got, 25, MPI_BYTE, &st);
        for (int j = 0; j < 25; j++) {
            int at = v + j;
            CHECK(got[j] == expect[at / 16 * 64 + at % 16], "after rewrite: view byte %d is %d", at, got[j]);
        }
    }
    /* Another view (every byte): the whole region as the file has it. */
    MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL);
    int span = 1500 / 16 * 64 + 64;
    MPI_File_read_at(fh, 0, got, span, MPI_BYTE, &st);
    CHECK(memcmp(got, expect, span) == 0, "the bytes view differs from the strided writes");
    /* Writes through the bytes view overlapping older ones, read by explicit offsets
     * before any sync. */
    memset(buf, 's', 7);
    MPI_File_write_at(fh, 60, buf, 7, MPI_BYTE, &st);
    memset(expect + 60, 's', 7);
    MPI_File_read_at(fh, 0, got, span, MPI_BYTE, &st);
    CHECK(memcmp(got, expect, span) == 0, "read-your-writes after a write across two blocks");
    /* Back to the strided view: its bytes as written. */
    MPI_File_set_view(fh, 0, MPI_BYTE, tiled, "native", MPI_INFO_NULL);
    MPI_File_read_at(fh, 0, got, 1500, MPI_BYTE, &st);
    for (int v = 0; v < 1500; v++)
        CHECK(got[v] == expect[v / 16 * 64 + v % 16], "strided view again: byte %d is %d", v, got[v]);
    MPI_File_close(&fh);
    MPI_Type_free(&tiled);
    MPI_Type_free(&strided);
}

static void deferred(const char *name, const char *go, int close_only)
{
    MPI_File fh;
    MPI_Status st;
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    /* Small pieces spread over every server's stripes. */
    char buf[1000];
    memset(buf, 'd', sizeof buf);
    int failed = 0;
    for (int i = 0; i < 512; i++)
        failed |= MPI_File_write_at(fh, (MPI_Offset)(i * nprocs + rank) * 4096, buf, sizeof buf, MPI_BYTE,
                                    &st) != 0;
    CHECK(!failed, "a buffered write failed before the server went");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("written\n");
        fflush(stdout);
        while (access(go, F_OK) != 0)
            usleep(10000);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int c, lo, hi;
    if (rank == 0)
        printf("io %d\n", MPI_ERR_IO);
    if (!close_only) {
        c = class_of(MPI_File_sync(fh));
        lo = hi = c;
        MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0)
            printf("sync class %d\n", lo == hi ? lo : -1);
    }
    c = class_of(MPI_File_close(&fh));
    lo = hi = c;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("close class %d\n", lo == hi ? lo : -1);
    fflush(stdout);
}

static void crash(const char *name)
{
    MPI_File fh;
    MPI_Status st;
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    static char buf[1024];
    if (rank == 0) {
        memset(buf, 'S', sizeof buf);
        for (int i = 0; i < 64; i++)
            MPI_File_write_at(fh, (MPI_Offset)i * 1024, buf, 1024, MPI_BYTE, &st);
    }
    MPI_File_sync(fh);
    if (rank == 0) {
        memset(buf, 'U', sizeof buf);
        for (int i = 64; i < 128; i++)
            MPI_File_write_at(fh, (MPI_Offset)i * 1024, buf, 1024, MPI_BYTE, &st);
        printf("unsynced\n");
        fflush(stdout);
        raise(SIGKILL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Writes visible after a barrier alone: every write with weft_write_behind=disable
 * (the test sets it), and write_shared records always. */
static void direct(const char *name, int all)
{
    MPI_File fh;
    MPI_Status st;
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    char buf[PIECE], got[PIECE];
    if (all && rank == 0)
        for (int i = 0; i < PIECES; i++) {
            memset(buf, 'A' + i % 26, PIECE);
            MPI_File_write_at(fh, (MPI_Offset)i * 2 * PIECE, buf, PIECE, MPI_BYTE, &st);
        }
    MPI_Barrier(MPI_COMM_WORLD);
    if (all && rank == 1)
        for (int i = 0; i < PIECES; i++) {
            MPI_File_read_at(fh, (MPI_Offset)i * 2 * PIECE, got, PIECE, MPI_BYTE, &st);
            for (int j = 0; j < PIECE; j++)
                CHECK(got[j] == 'A' + i % 26, "direct piece %d byte %d is %d", i, j, got[j]);
        }
    MPI_Barrier(MPI_COMM_WORLD);
    /* Records through the shared file pointer, then the size after a barrier. */
    MPI_File_seek_shared(fh, 0, MPI_SEEK_END);
    MPI_Offset before;
    MPI_File_get_size(fh, &before);
    MPI_Barrier(MPI_COMM_WORLD);
    memset(buf, 'r', PIECE);
    for (int k = 0; k < 10; k++)
        MPI_File_write_shared(fh, buf, PIECE, MPI_BYTE, &st);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Offset size;
    MPI_File_get_size(fh, &size);
    CHECK(size == before + (MPI_Offset)nprocs * 10 * PIECE, "size %lld after the records, %lld before",
          (long long)size, (long long)before);
    MPI_File_close(&fh);
}

/* IOR-like blocks of 100,000-byte transfers: transfer i of rank r's block holds the
 * letter base + (7r + i) mod 26. */
#define XFER 100000

static void transfer_bytes(char *b, int owner, long i, char base)
{
    memset(b, base + (owner * 7 + i) % 26, XFER);
}

static void stream_write(const char *name, int mib)
{
    long n = (long)mib * 1048576 / XFER;
    char *buf = malloc(XFER);
    MPI_File fh;
    MPI_Status st;
    CHECK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh) == 0,
          "open");
    for (long i = 0; i < n; i++) {
        transfer_bytes(buf, rank, i, 'a');
        CHECK(MPI_File_write_at(fh, (rank * n + i) * XFER, buf, XFER, MPI_BYTE, &st) == 0, "write %ld", i);
    }
    CHECK(MPI_File_close(&fh) == 0, "close");
    free(buf);
}

/* Reads transfers [from, to) of `owner`'s block, checking every byte against `base`. */
static void read_transfers(MPI_File fh, int owner, long n, long from, long to, char base)
{
    char *buf = malloc(XFER), *want = malloc(XFER);
    MPI_Status st;
    for (long i = from; i < to; i++) {
        transfer_bytes(want, owner, i, base);
        CHECK(MPI_File_read_at(fh, (owner * n + i) * XFER, buf, XFER, MPI_BYTE, &st) == 0, "read %ld", i);
        CHECK(memcmp(buf, want, XFER) == 0, "transfer %ld of rank %d's block: byte 0 is %d, want %d", i, owner,
              buf[0], want[0]);
    }
    free(buf);
    free(want);
}

static void stream_read(const char *name, int mib)
{
    long n = (long)mib * 1048576 / XFER;
    MPI_File fh;
    CHECK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh) == 0, "open");
    read_transfers(fh, (rank + 1) % nprocs, n, 0, n, 'a');
    CHECK(MPI_File_close(&fh) == 0, "close");
}

static void restream(const char *name, int mib)
{
    long n = (long)mib * 1048576 / XFER;
    char *buf = malloc(XFER);
    MPI_File fh;
    MPI_Status st;
    CHECK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh) == 0,
          "open");
    for (int pass = 0; pass < 2; pass++) {
        char base = pass ? 'A' : 'a';
        if (rank == 0)
            for (long i = 0; i < n; i++) {
                transfer_bytes(buf, 0, i, base);
                MPI_File_write_at(fh, i * XFER, buf, XFER, MPI_BYTE, &st);
            }
        CHECK(MPI_File_sync(fh) == 0, "sync");
        MPI_Barrier(MPI_COMM_WORLD);
        CHECK(MPI_File_sync(fh) == 0, "sync");
        /* First pass: the first half, leaving windows that reach past it; second: the
         * rest, after the rewrite. */
        if (rank == 1)
            read_transfers(fh, 0, n, pass ? n / 2 : 0, pass ? n : n / 2, base);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    CHECK(MPI_File_close(&fh) == 0, "close");
    free(buf);
}

static long vm_hwm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static void storm(const char *name, int mib)
{
    MPI_File fh;
    MPI_Status st;
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    long pieces = (long)mib * 1048576 / 1000;
    char buf[1000], got[1000];
    /* Touch the stack buffers and warm the connections before the baseline. */
    memset(buf, 1, sizeof buf);
    MPI_File_write_at(fh, 0, buf, 1, MPI_BYTE, &st);
    MPI_File_sync(fh);
    long before = vm_hwm_kib();
    /* Ranks interleave piece by piece: each rank's pieces are 1000 bytes apart. */
    for (long i = 0; i < pieces; i++) {
        memset(buf, (int)((i * 7 + rank) % 251) + 1, sizeof buf);
        MPI_File_write_at(fh, (i * nprocs + rank) * 1000, buf, sizeof buf, MPI_BYTE, &st);
    }
    /* Scattered single bytes past that region: many extents of one byte. */
    MPI_Offset base = (MPI_Offset)pieces * nprocs * 1000;
    for (long i = 0; i < 40000; i++) {
        char b = (char)(i % 200 + 1);
        MPI_File_write_at(fh, base + (i * nprocs + rank) * 2, &b, 1, MPI_BYTE, &st);
    }
    long growth = vm_hwm_kib() - before, worst = growth;
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_sync(fh);
    /* Every rank reads its neighbour's pieces. */
    int other = (rank + 1) % nprocs;
    long bad = 0;
    for (long i = 0; i < pieces; i++) {
        MPI_File_read_at(fh, (i * nprocs + other) * 1000, got, sizeof got, MPI_BYTE, &st);
        for (int j = 0; j < 1000; j++)
            bad += got[j] != (char)((i * 7 + other) % 251 + 1);
    }
    for (long i = 0; i < 40000; i += 97) {
        char b;
        MPI_File_read_at(fh, base + (i * nprocs + other) * 2, &b, 1, MPI_BYTE, &st);
        bad += b != (char)(i % 200 + 1);
    }
    CHECK(bad == 0, "%ld bytes read back wrong", bad);
    if (rank == 0)
        printf("peak growth %ld\nstorm ok\n", worst);
    MPI_File_close(&fh);
}

static void unclosed(const char *path)
{
    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    char piece[100];
    memset(piece, 'a' + rank, sizeof piece);
    for (int i = 0; i < 100; i++) {
        MPI_Offset at = ((MPI_Offset)i * nprocs + rank) * (MPI_Offset)sizeof piece;
        CHECK(MPI_File_write_at(fh, at, piece, sizeof piece, MPI_CHAR, MPI_STATUS_IGNORE) ==
                  MPI_SUCCESS,
              "write_at %d", i);
    }
    /* No MPI_File_close: MPI_Finalize follows in main. */
}

/* Collective writes through the write-behind buffers (`collective_buffered`): after the
 * first calls (which gather first), each rank's 1000-byte piece per call waits in its
 * buffer. A collective read right after, without a sync, sees every rank's pieces
 * (ROMIO's collective I/O always allows it). Then rank 0 writes a small piece
 * collectively (buffered) and, in the next collective call, rank 1 writes 4 MiB over
 * it (too large to buffer: sent at once): rank 1's newer bytes must win, also after
 * rank 0's buffer is sent at close. MPI_File_get_size counts the pieces other ranks
 * still buffer. */
#define CPIECE 1000
#define CCALLS 12
static void collective(const char *name)
{
    MPI_File fh;
    MPI_Status st;
    char buf[CPIECE], got[CPIECE];
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    for (int c = 0; c < CCALLS; c++) {
        memset(buf, 'a' + (rank + c) % 26, CPIECE);
        MPI_Offset at = ((MPI_Offset)c * nprocs + rank) * CPIECE;
        CHECK(MPI_File_write_at_all(fh, at, buf, CPIECE, MPI_BYTE, &st) == 0, "write_at_all %d", c);
    }
    int other = (rank + 1) % nprocs;
    /* Twice: the second round's reads, like its writes, run without gathering first. */
    for (int round = 0; round < 2; round++) {
        for (int c = 0; round == 1 && c < CCALLS; c++) {
            memset(buf, 'A' + (rank + c) % 26, CPIECE);
            MPI_Offset at = ((MPI_Offset)c * nprocs + rank) * CPIECE;
            CHECK(MPI_File_write_at_all(fh, at, buf, CPIECE, MPI_BYTE, &st) == 0, "rewrite_at_all %d", c);
        }
        /* Rank 0 comes late to the reads: the others must not read its pieces before
         * its buffer is sent. */
        if (round == 1 && rank == 0)
            usleep(300000);
        char base = round == 0 ? 'a' : 'A';
        for (int c = 0; c < CCALLS; c++) {
            MPI_Offset at = ((MPI_Offset)c * nprocs + other) * CPIECE;
            memset(got, 0, CPIECE);
            CHECK(MPI_File_read_at_all(fh, at, got, CPIECE, MPI_BYTE, &st) == 0, "read_at_all %d", c);
            for (int j = 0; j < CPIECE; j++)
                if (got[j] != base + (other + c) % 26) {
                    CHECK(0, "round %d: rank %d's collective piece %d byte %d is %d", round, other, c, j,
                          got[j]);
                    break;
                }
        }
    }
    /* Rank 0's buffered piece far past the end: every rank's MPI_File_get_size counts it. */
    const MPI_Offset far = (MPI_Offset)64 << 20;
    memset(buf, 'F', CPIECE);
    CHECK(MPI_File_write_at_all(fh, far, buf, rank == 0 ? CPIECE : 0, MPI_BYTE, &st) == 0,
          "far write_at_all");
    MPI_Offset size = 0;
    CHECK(MPI_File_get_size(fh, &size) == 0, "get_size");
    CHECK(size == far + CPIECE, "the size after rank 0's far piece is %lld, not %lld", (long long)size,
          (long long)(far + CPIECE));
    /* A small buffered write of rank 0, then a large direct one of rank 1 over it. */
    const MPI_Offset big = 4 << 20, base = (MPI_Offset)CCALLS * nprocs * CPIECE;
    char *large = malloc(big);
    memset(buf, 'O', CPIECE);
    CHECK(MPI_File_write_at_all(fh, base + 5000, buf, rank == 0 ? CPIECE : 0, MPI_BYTE, &st) == 0,
          "small write_at_all");
    memset(large, 'N', big);
    CHECK(MPI_File_write_at_all(fh, base, large, rank == 1 ? (int)big : 0, MPI_BYTE, &st) == 0,
          "large write_at_all");
    /* Rank 1's call has returned on every rank before rank 0 closes (sends its buffer). */
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_File_close(&fh) == 0, "close");
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    memset(got, 0, CPIECE);
    MPI_File_read_at(fh, base + 5000, got, CPIECE, MPI_BYTE, &st);
    for (int j = 0; j < CPIECE; j++)
        if (got[j] != 'N') {
            CHECK(0, "byte %d of rank 0's older piece, overwritten by rank 1's later call, is %c", j,
                  got[j]);
            break;
        }
    MPI_File_close(&fh);
    free(large);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 3)
        MPI_Abort(MPI_COMM_WORLD, 2);
    const char *mode = argv[2];
    if (!strcmp(mode, "visible"))
        visible(argv[1]);
    else if (!strcmp(mode, "views"))
        views(argv[1]);
    else if (!strcmp(mode, "collective"))
        collective(argv[1]);
    else if (!strcmp(mode, "deferred") && argc >= 4)
        deferred(argv[1], argv[3], argc == 5 && !strcmp(argv[4], "close"));
    else if (!strcmp(mode, "direct"))
        direct(argv[1], 1);
    else if (!strcmp(mode, "shared"))
        direct(argv[1], 0);
    else if (!strcmp(mode, "crash"))
        crash(argv[1]);
    else if (!strcmp(mode, "unclosed"))
        unclosed(argv[1]);
    else if (!strcmp(mode, "stream-write") && argc == 4)
        stream_write(argv[1], atoi(argv[3]));
    else if (!strcmp(mode, "stream-read") && argc == 4)
        stream_read(argv[1], atoi(argv[3]));
    else if (!strcmp(mode, "restream") && argc == 4)
        restream(argv[1], atoi(argv[3]));
    else if (!strcmp(mode, "storm") && argc == 4)
        storm(argv[1], atoi(argv[3]));
    else
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Allreduce(MPI_IN_PLACE, &errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && errors == 0)
        printf("No Errors\n");
    MPI_Finalize();
    return 0;
}

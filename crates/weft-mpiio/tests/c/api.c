/* The MPI-IO calls beyond blocking individual and collective access, on files named
 * PREFIX<name>: nonblocking (iread/iwrite[_at][_all], completed by MPI_Wait, Waitall,
 * Test, Testany, Waitsome), split collectives (with their misuse errors), shared file
 * pointers (write/read_ordered, seek_shared, get_position_shared, write/read_shared,
 * iwrite_shared) and MPI_MODE_SEQUENTIAL, over contiguous and noncontiguous views and
 * memory types. The test runs it on weft: files and on local files through ROMIO and
 * compares the files byte for byte (except "append", whose record order depends on
 * timing: each record must be there exactly once) and rank 0's output lines.
 *
 *   api PREFIX [--no-icoll]
 *   api PREFIX --lost DIR
 *     The shared pointer lost with a metadata manager restart: one write_shared each,
 *     then rank 0 creates DIR/ready and waits for DIR/go (the test restarts the manager
 *     in between); the next write_shared must fail with MPI_ERR_IO on every rank.
 *   api PREFIX --ioerr DIR
 *     Background I/O failing: the same handshake (the test kills an io server in
 *     between), then iwrite_at + MPI_Wait must return MPI_ERR_IO through the file's
 *     error handler (MPI_ERRORS_RETURN), and iwrite_at + MPI_Waitall MPI_ERR_IN_STATUS
 *     with MPI_ERR_IO in the statuses; nothing aborts. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 4096   /* ints per access */
#define B 16     /* ints per block of the interleaved view */
#define NB 64    /* blocks per tile */
#define RECORD 16 /* ints per appended record */
#define APPENDS 50
#define IAPPENDS 10

static int rank, np;
static const char *prefix;
static int weft;
/* Open MPI's romio321 crashes in the nonblocking collective calls (MPI 3.1): the
 * reference run passes --no-icoll and makes the blocking ones instead (same bytes). */
static int icoll = 1;

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "rank %d: line %d: ", rank, __LINE__);                        \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                 \
        }                                                                                 \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

static MPI_File open_file(const char *name, int amode)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s", prefix, name);
    MPI_File fh;
    OK(MPI_File_open(MPI_COMM_WORLD, path, amode, MPI_INFO_NULL, &fh));
    return fh;
}

static void fill(int *buf, int n, int salt)
{
    for (int k = 0; k < n; k++)
        buf[k] = rank * 1000000 + salt * 10000 + k;
}

static void check_count(MPI_Status *st, int expected, const char *what)
{
    int count = -1;
    MPI_Get_count(st, MPI_INT, &count);
    CHECK(count == expected, "%s: count %d, expected %d", what, count, expected);
}

/* Each rank's blocks of B ints, interleaved between the ranks, NB blocks per tile. */
static MPI_Datatype interleaved(void)
{
    MPI_Datatype vec, t;
    MPI_Type_vector(NB, B, B * np, MPI_INT, &vec);
    MPI_Type_create_resized(vec, 0, (MPI_Aint)NB * B * np * sizeof(int), &t);
    MPI_Type_commit(&t);
    MPI_Type_free(&vec);
    return t;
}

static void nonblocking(void)
{
    MPI_File fh = open_file("nb", MPI_MODE_CREATE | MPI_MODE_RDWR);
    static int bufs[4][N], back[4][N], strided[2 * N];
    MPI_Request req[4];
    MPI_Status st[4];
    /* Contiguous, explicit offsets, four in flight, MPI_Waitall. */
    for (int j = 0; j < 4; j++) {
        fill(bufs[j], N, j);
        OK(MPI_File_iwrite_at(fh, (MPI_Offset)(j * np + rank) * N * sizeof(int), bufs[j], N,
                              MPI_INT, &req[j]));
    }
    OK(MPI_Waitall(4, req, st));
    for (int j = 0; j < 4; j++) {
        check_count(&st[j], N, "iwrite_at");
        CHECK(req[j] == MPI_REQUEST_NULL, "request not freed by MPI_Waitall");
    }

    /* Interleaved view, individual file pointer: two iwrites (the pointer moves at
     * the call), completed through MPI_Testany. */
    MPI_Offset base = (MPI_Offset)4 * np * N * sizeof(int);
    MPI_Datatype ft = interleaved();
    OK(MPI_File_set_view(fh, base + rank * B * sizeof(int), MPI_INT, ft, "native", MPI_INFO_NULL));
    fill(bufs[0], N, 10);
    fill(bufs[1], N, 11);
    OK(MPI_File_iwrite(fh, bufs[0], N, MPI_INT, &req[0]));
    OK(MPI_File_iwrite(fh, bufs[1], N, MPI_INT, &req[1]));
    MPI_Offset pos;
    OK(MPI_File_get_position(fh, &pos));
    CHECK(pos == 2 * N, "position %lld after two iwrites", (long long)pos);
    for (int done = 0; done < 2;) {
        int index, flag;
        MPI_Status s;
        OK(MPI_Testany(2, req, &index, &flag, &s));
        if (flag && index != MPI_UNDEFINED) {
            check_count(&s, N, "iwrite (Testany)");
            done++;
        }
    }
    /* A strided memory type, explicit offset, MPI_Test until done. */
    MPI_Datatype mem;
    MPI_Type_vector(N / 16, 16, 32, MPI_INT, &mem);
    MPI_Type_commit(&mem);
    fill(strided, 2 * N, 12);
    OK(MPI_File_iwrite_at(fh, 2 * N, strided, 1, mem, &req[0]));
    for (int flag = 0; !flag;) {
        MPI_Status s;
        OK(MPI_Test(&req[0], &flag, &s));
        if (flag)
            check_count(&s, N, "iwrite_at strided (Test)");
    }
    /* Collective nonblocking, then a blocking write beside it. */
    fill(bufs[2], N, 13);
    if (icoll)
        OK(MPI_File_iwrite_at_all(fh, 3 * N, bufs[2], N, MPI_INT, &req[0]));
    else
        OK(MPI_File_write_at_all(fh, 3 * N, bufs[2], N, MPI_INT, &st[1]));
    fill(bufs[3], N, 14);
    OK(MPI_File_write_at(fh, 4 * N, bufs[3], N, MPI_INT, &st[0]));
    if (icoll) {
        OK(MPI_Wait(&req[0], &st[1]));
        check_count(&st[1], N, "iwrite_at_all");
    }
    OK(MPI_File_seek(fh, 5 * N, MPI_SEEK_SET));
    if (icoll) {
        OK(MPI_File_iwrite_all(fh, bufs[1], N, MPI_INT, &req[0]));
        OK(MPI_Wait(&req[0], MPI_STATUS_IGNORE));
    } else {
        OK(MPI_File_write_all(fh, bufs[1], N, MPI_INT, MPI_STATUS_IGNORE));
    }
    OK(MPI_File_sync(fh));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_File_sync(fh));

    /* Read everything back: iread_at (Waitsome), iread, iread_all, iread_at_all. */
    memset(back, 0, sizeof back);
    OK(MPI_File_iread_at(fh, 0, back[0], N, MPI_INT, &req[0]));
    OK(MPI_File_iread_at(fh, N, back[1], N, MPI_INT, &req[1]));
    OK(MPI_File_iread_at(fh, 3 * N, back[2], N, MPI_INT, &req[2]));
    OK(MPI_File_iread_at(fh, 4 * N, back[3], N, MPI_INT, &req[3]));
    for (int done = 0; done < 4;) {
        int outcount, indices[4];
        OK(MPI_Waitsome(4, req, &outcount, indices, st));
        CHECK(outcount != MPI_UNDEFINED, "Waitsome: no active request left");
        for (int k = 0; k < outcount; k++)
            check_count(&st[k], N, "iread_at (Waitsome)");
        done += outcount;
    }
    fill(bufs[0], N, 10);
    CHECK(memcmp(back[0], bufs[0], sizeof bufs[0]) == 0, "iread_at data (tile 0)");
    fill(bufs[0], N, 11);
    CHECK(memcmp(back[1], bufs[0], sizeof bufs[0]) == 0, "iread_at data (tile 1)");
    CHECK(memcmp(back[2], bufs[2], sizeof bufs[2]) == 0, "iread_at data (iwrite_at_all)");
    CHECK(memcmp(back[3], bufs[3], sizeof bufs[3]) == 0, "iread_at data (write_at)");
    memset(strided, 0, sizeof strided);
    OK(MPI_File_seek(fh, 2 * N, MPI_SEEK_SET));
    OK(MPI_File_iread(fh, strided, 1, mem, &req[0]));
    OK(MPI_Wait(&req[0], &st[0]));
    check_count(&st[0], N, "iread strided");
    static int expect[2 * N];
    fill(expect, 2 * N, 12);
    for (int k = 0; k < 2 * N; k++)
        if (k % 32 < 16)
            CHECK(strided[k] == expect[k], "iread strided data at %d", k);
    OK(MPI_File_seek(fh, 5 * N, MPI_SEEK_SET));
    if (icoll) {
        OK(MPI_File_iread_all(fh, back[0], N, MPI_INT, &req[0]));
        OK(MPI_Wait(&req[0], &st[0]));
    } else {
        OK(MPI_File_read_all(fh, back[0], N, MPI_INT, &st[0]));
    }
    fill(bufs[1], N, 11);
    CHECK(memcmp(back[0], bufs[1], sizeof bufs[1]) == 0, "iread_all data");
    /* Past the end of file: a short count. */
    if (icoll) {
        OK(MPI_File_iread_at_all(fh, 6 * N - N / 2, back[0], N, MPI_INT, &req[0]));
        OK(MPI_Wait(&req[0], &st[0]));
    } else {
        OK(MPI_File_read_at_all(fh, 6 * N - N / 2, back[0], N, MPI_INT, &st[0]));
    }
    /* ROMIO's collective reads count what was asked for, not what was there. */
    if (weft)
        check_count(&st[0], N / 2, "iread_at_all at the end of file");
    CHECK(memcmp(back[0], bufs[1] + N / 2, N / 2 * sizeof(int)) == 0,
          "iread_at_all data at the end of file");
    OK(MPI_File_close(&fh));

    /* A failed nonblocking call leaves MPI_REQUEST_NULL. */
    fh = open_file("nb", MPI_MODE_RDONLY);
    MPI_Request r = (MPI_Request)0;
    CHECK(MPI_File_iwrite_at(fh, 0, bufs[0], N, MPI_INT, &r) != MPI_SUCCESS,
          "iwrite_at on a read-only file succeeded");
    if (weft)
        CHECK(r == MPI_REQUEST_NULL, "a failed iwrite_at left a request");
    OK(MPI_File_close(&fh));
    MPI_Type_free(&mem);
    MPI_Type_free(&ft);
}

static void split(void)
{
    MPI_File fh = open_file("split", MPI_MODE_CREATE | MPI_MODE_RDWR);
    static int b1[N], b2[N], b3[N], back[N];
    MPI_Status st;
    MPI_Datatype ft = interleaved();
    OK(MPI_File_set_view(fh, rank * B * sizeof(int), MPI_INT, ft, "native", MPI_INFO_NULL));
    fill(b1, N, 20);
    fill(b2, N, 21);
    OK(MPI_File_write_all_begin(fh, b1, N, MPI_INT));
    OK(MPI_File_write_all_end(fh, b1, &st));
    check_count(&st, N, "write_all_end");
    OK(MPI_File_write_at_all_begin(fh, 2 * N, b2, N, MPI_INT));
    OK(MPI_File_write_at_all_end(fh, b2, &st));
    check_count(&st, N, "write_at_all_end");
    /* Misuse: a second begin while one is outstanding; an end with none. */
    OK(MPI_File_read_at_all_begin(fh, 0, back, N, MPI_INT));
    CHECK(MPI_File_read_at_all_begin(fh, 0, back, N, MPI_INT) != MPI_SUCCESS,
          "a second split collective began");
    OK(MPI_File_read_at_all_end(fh, back, &st));
    check_count(&st, N, "read_at_all_end");
    CHECK(memcmp(back, b1, sizeof b1) == 0, "read_at_all_end data");
    CHECK(MPI_File_read_all_end(fh, back, &st) != MPI_SUCCESS, "an end without a begin");
    OK(MPI_File_seek(fh, 2 * N, MPI_SEEK_SET));
    OK(MPI_File_read_all_begin(fh, back, N, MPI_INT));
    OK(MPI_File_read_all_end(fh, back, &st));
    CHECK(memcmp(back, b2, sizeof b2) == 0, "read_all_end data");
    /* Ordered split collectives over a common view after the interleaved part. */
    OK(MPI_File_set_view(fh, (MPI_Offset)3 * N * np * sizeof(int), MPI_INT, MPI_INT, "native",
                         MPI_INFO_NULL));
    fill(b3, N, 22);
    OK(MPI_File_write_ordered_begin(fh, b3, (rank + 1) * 100, MPI_INT));
    OK(MPI_File_write_ordered_end(fh, b3, &st));
    check_count(&st, (rank + 1) * 100, "write_ordered_end");
    OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
    memset(back, 0, sizeof back);
    OK(MPI_File_read_ordered_begin(fh, back, (rank + 1) * 100, MPI_INT));
    OK(MPI_File_read_ordered_end(fh, back, &st));
    CHECK(memcmp(back, b3, (rank + 1) * 100 * sizeof(int)) == 0, "read_ordered_end data");
    OK(MPI_File_close(&fh));
    MPI_Type_free(&ft);
}

static void shared(void)
{
    /* Ordered calls over a view with holes: 2 ints of every 3, the same on every rank. */
    MPI_File fh = open_file("ordered", MPI_MODE_CREATE | MPI_MODE_RDWR);
    static int buf[N], back[N];
    MPI_Status st;
    /* Known bytes in the holes (ROMIO's data sieving leaves what it read there). */
    static char fill_bytes[64 * 1024];
    memset(fill_bytes, 0x5a, sizeof fill_bytes);
    if (rank == 0)
        OK(MPI_File_write_at(fh, 0, fill_bytes, sizeof fill_bytes, MPI_BYTE, &st));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Datatype two, ft;
    MPI_Type_contiguous(2, MPI_INT, &two);
    MPI_Type_create_resized(two, 0, 3 * sizeof(int), &ft);
    MPI_Type_commit(&ft);
    OK(MPI_File_set_view(fh, 8, MPI_INT, ft, "native", MPI_INFO_NULL));
    int mine = (rank + 1) * 100;
    fill(buf, N, 30);
    OK(MPI_File_write_ordered(fh, buf, mine, MPI_INT, &st));
    check_count(&st, mine, "write_ordered");
    MPI_Offset pos, total = 0;
    for (int r = 0; r < np; r++)
        total += (r + 1) * 100;
    OK(MPI_File_get_position_shared(fh, &pos));
    CHECK(pos == total, "shared position %lld after write_ordered, expected %lld", (long long)pos,
          (long long)total);
    /* Nobody moves the pointer before every rank looked at it. */
    MPI_Barrier(MPI_COMM_WORLD);
    fill(buf, N, 31);
    OK(MPI_File_write_ordered(fh, buf, 50, MPI_INT, &st));
    OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
    OK(MPI_File_read_ordered(fh, back, mine, MPI_INT, &st));
    fill(buf, N, 30);
    CHECK(memcmp(back, buf, mine * sizeof(int)) == 0, "read_ordered data");
    OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_END));
    OK(MPI_File_get_position_shared(fh, &pos));
    if (rank == 0)
        printf("shared position at the end: %lld\n", (long long)pos);
    OK(MPI_File_seek_shared(fh, -10, MPI_SEEK_CUR));
    OK(MPI_File_get_position_shared(fh, &pos));
    if (rank == 0)
        printf("shared position 10 before the end: %lld\n", (long long)pos);
    /* An individual read of what rank 0 wrote in the second ordered call. */
    OK(MPI_File_read_at(fh, total, back, 50, MPI_INT, &st));
    if (rank == 0) {
        fill(buf, N, 31);
        CHECK(memcmp(back, buf, 50 * sizeof(int)) == 0, "read_at after write_ordered");
    }
    OK(MPI_File_close(&fh));
    MPI_Type_free(&two);
    MPI_Type_free(&ft);

    /* Appending records with write_shared (and iwrite_shared) from every rank at once. */
    fh = open_file("append", MPI_MODE_CREATE | MPI_MODE_RDWR);
    int rec[RECORD];
    for (int k = 0; k < APPENDS; k++) {
        for (int i = 0; i < RECORD; i++)
            rec[i] = rank * 1000 + k;
        OK(MPI_File_write_shared(fh, rec, RECORD, MPI_INT, &st));
        check_count(&st, RECORD, "write_shared");
    }
    static int recs[IAPPENDS][RECORD];
    MPI_Request req[IAPPENDS];
    for (int k = 0; k < IAPPENDS; k++) {
        for (int i = 0; i < RECORD; i++)
            recs[k][i] = rank * 1000 + APPENDS + k;
        OK(MPI_File_iwrite_shared(fh, recs[k], RECORD, MPI_INT, &req[k]));
    }
    OK(MPI_Waitall(IAPPENDS, req, MPI_STATUSES_IGNORE));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Offset size;
    OK(MPI_File_get_size(fh, &size));
    CHECK(size == (MPI_Offset)np * (APPENDS + IAPPENDS) * RECORD * sizeof(int),
          "append file size %lld", (long long)size);
    /* Read every record back through the shared pointer, each rank taking some. */
    OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
    long long got = 0;
    for (;;) {
        int count;
        OK(MPI_File_read_shared(fh, rec, RECORD, MPI_INT, &st));
        MPI_Get_count(&st, MPI_INT, &count);
        if (count == 0)
            break;
        CHECK(count == RECORD, "read_shared count %d", count);
        for (int i = 1; i < RECORD; i++)
            CHECK(rec[i] == rec[0], "a torn record");
        got++;
    }
    long long all = 0;
    MPI_Allreduce(&got, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(all == (long long)np * (APPENDS + IAPPENDS), "read_shared found %lld records", all);
    OK(MPI_File_close(&fh));

    /* MPI_MODE_SEQUENTIAL: ordered writes; an individual access is refused. */
    fh = open_file("seq", MPI_MODE_CREATE | MPI_MODE_WRONLY | MPI_MODE_SEQUENTIAL);
    fill(buf, N, 40);
    OK(MPI_File_write_ordered(fh, buf, N / 4, MPI_INT, &st));
    fill(buf, N, 41);
    OK(MPI_File_write_ordered(fh, buf, N / 8, MPI_INT, &st));
    CHECK(MPI_File_write_at(fh, 0, buf, 1, MPI_INT, &st) != MPI_SUCCESS,
          "write_at under MPI_MODE_SEQUENTIAL succeeded");
    /* A view from where the shared pointer is (MPI_DISPLACEMENT_CURRENT). Contiguous:
     * ROMIO leaves garbage in the holes of a write-only file's view. */
    OK(MPI_File_set_view(fh, MPI_DISPLACEMENT_CURRENT, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    if (weft) { /* ROMIO refuses get_position_shared under MPI_MODE_SEQUENTIAL */
        OK(MPI_File_get_position_shared(fh, &pos));
        CHECK(pos == 0, "shared position %lld after set_view", (long long)pos);
    }
    fill(buf, N, 42);
    OK(MPI_File_write_ordered(fh, buf, 30 + rank * 3, MPI_INT, &st));
    check_count(&st, 30 + rank * 3, "write_ordered after MPI_DISPLACEMENT_CURRENT");
    OK(MPI_File_close(&fh));
}

/* Rank 0 creates DIR/ready and waits (at most 60 s) for DIR/go; then a barrier. */
static void handshake(const char *dir)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/ready", dir);
        fclose(fopen(path, "w"));
        snprintf(path, sizeof path, "%s/go", dir);
        for (int waited = 0;; waited++) {
            FILE *f = fopen(path, "r");
            if (f != NULL) {
                fclose(f);
                break;
            }
            CHECK(waited < 600, "no %s after 60 s", path);
            struct timespec ts = {0, 100000000};
            nanosleep(&ts, NULL);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static int error_class(int rc)
{
    int class = -1;
    MPI_Error_class(rc, &class);
    return class;
}

static void ioerr(const char *dir)
{
    /* A 1 MiB write larger than half the write-behind buffer goes to the servers in
     * the background, so its error reaches MPI_Wait (a smaller one would wait in the
     * buffer and fail at the next sync or close: tests/behind.rs). */
    char path[4096];
    snprintf(path, sizeof path, "%sioerr", prefix);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "weft_write_behind_size", "1048576");
    MPI_File fh;
    OK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh));
    MPI_Info_free(&info);
    static char buf[2][1 << 20];
    handshake(dir);
    MPI_Offset at = (MPI_Offset)rank * 2 * sizeof buf[0];
    MPI_Request req[2];
    MPI_Status st[2];
    OK(MPI_File_iwrite_at(fh, at, buf[0], sizeof buf[0], MPI_BYTE, &req[0]));
    int rc = MPI_Wait(&req[0], &st[0]);
    CHECK(error_class(rc) == MPI_ERR_IO, "MPI_Wait of a failed write: class %d", error_class(rc));
    CHECK(req[0] == MPI_REQUEST_NULL, "MPI_Wait left the request");
    OK(MPI_File_iwrite_at(fh, at, buf[0], sizeof buf[0], MPI_BYTE, &req[0]));
    OK(MPI_File_iwrite_at(fh, at + sizeof buf[0], buf[1], sizeof buf[1], MPI_BYTE, &req[1]));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Waitall(2, req, st);
    CHECK(rc == MPI_ERR_IN_STATUS, "MPI_Waitall of failed writes: %d", rc);
    for (int k = 0; k < 2; k++)
        CHECK(error_class(st[k].MPI_ERROR) == MPI_ERR_IO, "status %d: class %d", k,
              error_class(st[k].MPI_ERROR));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("ioerr: MPI_ERR_IO through MPI_Wait and MPI_Waitall\n");
    MPI_File_close(&fh);
}

static void lost(const char *dir)
{
    MPI_File fh = open_file("lost", MPI_MODE_CREATE | MPI_MODE_RDWR);
    int rec[RECORD];
    MPI_Status st;
    for (int i = 0; i < RECORD; i++)
        rec[i] = rank * 1000;
    OK(MPI_File_write_shared(fh, rec, RECORD, MPI_INT, &st));
    handshake(dir);
    for (int i = 0; i < RECORD; i++)
        rec[i] = rank * 1000 + 1;
    int rc = MPI_File_write_shared(fh, rec, RECORD, MPI_INT, &st);
    int class = -1;
    MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_IO, "write_shared after the restart: class %d, expected MPI_ERR_IO", class);
    int all_io = 0, mine = class == MPI_ERR_IO;
    MPI_Allreduce(&mine, &all_io, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0 && all_io)
        printf("lost: MPI_ERR_IO on every rank\n");
    MPI_File_close(&fh);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (argc < 2) {
        fprintf(stderr, "usage: api PREFIX\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    prefix = argv[1];
    weft = strncmp(prefix, "weft:", 5) == 0;
    icoll = !(argc > 2 && strcmp(argv[2], "--no-icoll") == 0);
    MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN);
    if (argc > 3 && strcmp(argv[2], "--lost") == 0) {
        lost(argv[3]);
        MPI_Finalize();
        return 0;
    }
    if (argc > 3 && strcmp(argv[2], "--ioerr") == 0) {
        ioerr(argv[3]);
        MPI_Finalize();
        return 0;
    }
    nonblocking();
    split();
    shared();
    if (rank == 0)
        printf("api ok\n");
    MPI_Finalize();
    return 0;
}

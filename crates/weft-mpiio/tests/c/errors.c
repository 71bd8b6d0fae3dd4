/* Error behaviour on weft: files: every rank of a collective call gets the same error
 * class, nothing hangs, and a returned code's MPI_Error_string says why.
 *
 *   errors PREFIX      (PREFIX: "weft:/dir/"; the directory exists, "missing" does not)
 *   errors PREFIX fatal  opens "missing" under MPI_ERRORS_ARE_FATAL: the job aborts,
 *                        and the library's message must say why
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nprocs, failures;

static int class_of(int rc)
{
    int c = rc;
    MPI_Error_class(rc, &c);
    return c;
}

/* Every rank got `want`, the same class. */
static void expect_same(int rc, int want, const char *what)
{
    int c = class_of(rc), lo = c, hi = c;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (lo != hi || c != want) {
        char s[MPI_MAX_ERROR_STRING];
        int l = 0;
        MPI_Error_string(rc, s, &l);
        fprintf(stderr, "rank %d: %s: class %d (%s), expected %d on every rank (range %d..%d)\n",
                rank, what, c, s, want, lo, hi);
        failures++;
    } else if (rank == 0) {
        printf("ok: %s\n", what);
    }
}

/* MPI_Error_string of `rc` is the class's text, then ": " and a reason containing
 * `needle` (any reason when it is ""), and its class is `want`. */
static void says(int rc, int want, const char *needle, const char *what)
{
    char s[MPI_MAX_ERROR_STRING], c[MPI_MAX_ERROR_STRING];
    int l = 0, cl = 0;
    MPI_Error_string(rc, s, &l);
    MPI_Error_string(want, c, &cl);
    const char *reason = s + cl;
#ifdef MPICH
    /* Under MPICH the library returns the class (docs/src/mpi-io.md): its own text, nothing more. */
    if (class_of(rc) != want || strcmp(s, c) != 0) {
        fprintf(stderr, "rank %d: %s says \"%s\", not the class's \"%s\"\n", rank, what, s, c);
        failures++;
    }
    (void)needle;
    (void)reason;
    return;
#endif
    if (class_of(rc) != want || strncmp(s, c, cl) != 0 || strncmp(reason, ": ", 2) != 0 ||
        strlen(reason) < 3 || strstr(reason, needle) == NULL) {
        fprintf(stderr, "rank %d: %s says \"%s\": not %s with a reason naming \"%s\"\n", rank,
                what, s, c, needle);
        failures++;
    } else if (rank == 0) {
        printf("ok: %s says \"%s\"\n", what, s);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2) {
        MPI_Finalize();
        return 1;
    }
    char path[4096];
    MPI_File fh;
    MPI_Status st;
    int buf[16] = {0};

    if (argc > 2 && strcmp(argv[2], "fatal") == 0) {
        snprintf(path, sizeof path, "%smissing", argv[1]);
        MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_ARE_FATAL);
        MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
        printf("fatal: the open returned\n");
        MPI_Finalize();
        return 1;
    }

    /* 1. A missing file without MPI_MODE_CREATE. */
    snprintf(path, sizeof path, "%smissing", argv[1]);
    int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    expect_same(rc, MPI_ERR_NO_SUCH_FILE, "open of a missing file without MPI_MODE_CREATE");
    if (rc == MPI_SUCCESS)
        MPI_File_close(&fh);
    /* ... and its code says why, not only the class (it said "MPI_ERR_NO_SUCH_FILE"
     * only): the class's text, then the library's message naming the file. */
    int missing_rc = rc;
    says(missing_rc, MPI_ERR_NO_SUCH_FILE, "missing", "the missing file's error code");

    /* 2. A bad access mode. */
    snprintf(path, sizeof path, "%sfile", argv[1]);
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY | MPI_MODE_CREATE, MPI_INFO_NULL, &fh);
    expect_same(rc, MPI_ERR_AMODE, "open with MPI_MODE_RDONLY | MPI_MODE_CREATE");
    says(rc, MPI_ERR_AMODE, "MPI_MODE_CREATE", "the bad access mode's error code");

    /* 3. A failure on one rank of a collective write: the last rank passes a negative
     * count; every rank must get MPI_ERR_COUNT. */
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR | MPI_MODE_CREATE, MPI_INFO_NULL, &fh);
    expect_same(rc, MPI_SUCCESS, "open with MPI_MODE_CREATE");
    if (rc != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    int count = rank == nprocs - 1 ? -1 : 16;
    rc = MPI_File_write_at_all(fh, rank * sizeof buf, buf, count, MPI_INT, &st);
    expect_same(rc, MPI_ERR_COUNT, "write_at_all with a negative count on one rank");

    /* 4. A failure on one rank of set_view: one rank asks for an unknown data
     * representation. */
    rc = MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, rank == 0 ? "no_such_rep" : "native",
                           MPI_INFO_NULL);
    expect_same(rc, MPI_ERR_UNSUPPORTED_DATAREP, "set_view with an unknown datarep on rank 0");

    /* 5. The file still works collectively afterwards. */
    for (int i = 0; i < 16; i++)
        buf[i] = rank * 100 + i;
    rc = MPI_File_write_at_all(fh, rank * sizeof buf, buf, 16, MPI_INT, &st);
    expect_same(rc, MPI_SUCCESS, "write_at_all after the failures");
    rc = MPI_File_read_at_all(fh, ((rank + 1) % nprocs) * sizeof buf, buf, 16, MPI_INT, &st);
    expect_same(rc, MPI_SUCCESS, "read_at_all after the failures");
    if (buf[3] != ((rank + 1) % nprocs) * 100 + 3) {
        fprintf(stderr, "rank %d: read back %d\n", rank, buf[3]);
        failures++;
    }

    /* 6. A failed nonblocking call says why and returns no request. */
    MPI_Request req = (MPI_Request)0;
    rc = MPI_File_iwrite_at(fh, 0, buf, -1, MPI_INT, &req);
    expect_same(rc, MPI_ERR_COUNT, "iwrite_at with a negative count");
    if (req != MPI_REQUEST_NULL) {
        fprintf(stderr, "rank %d: a failed iwrite_at left a request\n", rank);
        failures++;
    }
    rc = MPI_File_close(&fh);
    expect_same(rc, MPI_SUCCESS, "close");

    /* 7. Writing a file opened read-only. */
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    expect_same(rc, MPI_SUCCESS, "open read-only");
    rc = MPI_File_write_at(fh, 0, buf, 1, MPI_INT, &st);
    expect_same(rc, MPI_ERR_READ_ONLY, "write on a read-only file");
    says(rc, MPI_ERR_READ_ONLY, "", "the read-only write's error code");
    rc = MPI_File_write_at_all(fh, rank * sizeof buf, buf, 1, MPI_INT, &st);
    expect_same(rc, MPI_ERR_READ_ONLY, "collective write on a read-only file");
    MPI_Offset size = 0;
    MPI_File_get_size(fh, &size);
    if (size != (MPI_Offset)(nprocs * sizeof buf)) {
        fprintf(stderr, "rank %d: size %lld\n", rank, (long long)size);
        failures++;
    }
    MPI_File_close(&fh);

    /* 8. Delete, then open without create fails again. */
    if (rank == 0)
        expect_same(MPI_File_delete(path, MPI_INFO_NULL), MPI_SUCCESS, "delete (rank 0 only)");
    else
        expect_same(MPI_SUCCESS, MPI_SUCCESS, "delete (rank 0 only)");
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    expect_same(rc, MPI_ERR_NO_SUCH_FILE, "open after delete");

    /* 8b. Each code keeps its own reason: the first open's code still names its file
     * after the failures since; the class itself (what other MPI calls return) carries
     * no Weft message; and more failures than the ring of codes per class reuse codes
     * (bounded) while the latest ones each name their own file. */
    says(missing_rc, MPI_ERR_NO_SUCH_FILE, "missing", "the first code after later failures");
    {
        char s[MPI_MAX_ERROR_STRING];
        int l = 0;
        MPI_Error_string(MPI_ERR_NO_SUCH_FILE, s, &l);
        if (strstr(s, "missing") != NULL) {
            fprintf(stderr, "rank %d: the bare class says %s\n", rank, s);
            failures++;
        }
    }
    enum { MANY = 80, RING = 32 };
    int codes[MANY];
    for (int k = 0; k < MANY; k++) {
        snprintf(path, sizeof path, "%sgone-%d", argv[1], k);
        codes[k] = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    }
    int distinct = 0;
    for (int k = 0; k < MANY; k++) {
        int seen = 0;
        for (int j = 0; j < k; j++)
            seen |= codes[j] == codes[k];
        distinct += !seen;
    }
    if (distinct > RING) { /* (under MPICH: 1, the class) */
        fprintf(stderr, "rank %d: %d failures made %d error codes (more than %d)\n", rank, MANY,
                distinct, RING);
        failures++;
    }
    for (int k = MANY - RING; k < MANY; k++) {
        char name[32];
        snprintf(name, sizeof name, "gone-%d", k);
        says(codes[k], MPI_ERR_NO_SUCH_FILE, name, "one of many failures' codes");
    }
    snprintf(path, sizeof path, "%sfile", argv[1]);

    /* 9. Hints, views and file pointers. */
    MPI_Info info, used;
    MPI_Info_create(&info);
    MPI_Info_set(info, "cb_buffer_size", "1048576");
    MPI_Info_set(info, "weft_cb_method", "interleaved");
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR | MPI_MODE_CREATE, info, &fh);
    expect_same(rc, MPI_SUCCESS, "open with hints");
    MPI_File_get_info(fh, &used);
    char value[MPI_MAX_INFO_VAL + 1] = "";
    int flag = 0;
    MPI_Info_get(used, "cb_buffer_size", MPI_MAX_INFO_VAL, value, &flag);
    if (!flag || strcmp(value, "1048576") != 0) {
        fprintf(stderr, "rank %d: get_info cb_buffer_size = %s\n", rank, value);
        failures++;
    }
    MPI_Info_get(used, "weft_cb_method", MPI_MAX_INFO_VAL, value, &flag);
    if (!flag || strcmp(value, "interleaved") != 0) {
        fprintf(stderr, "rank %d: get_info weft_cb_method = %s\n", rank, value);
        failures++;
    }
    MPI_Info_free(&used);
    MPI_Info_free(&info);
    MPI_Datatype vec;
    MPI_Type_vector(4, 2, 5, MPI_INT, &vec); /* 2 ints every 5: 32 data bytes, extent 68 */
    MPI_Type_commit(&vec);
    rc = MPI_File_set_view(fh, 100, MPI_INT, vec, "native", MPI_INFO_NULL);
    expect_same(rc, MPI_SUCCESS, "set_view with a vector filetype");
    MPI_Offset disp = 0, pos = -1, byte = -1;
    MPI_Datatype e, f;
    char rep[MPI_MAX_DATAREP_STRING];
    MPI_File_get_view(fh, &disp, &e, &f, rep);
    int esize = 0;
    MPI_Type_size(e, &esize);
    if (disp != 100 || esize != 4 || strcmp(rep, "native") != 0) {
        fprintf(stderr, "rank %d: get_view %lld %d %s\n", rank, (long long)disp, esize, rep);
        failures++;
    }
    if (f != MPI_INT)
        MPI_Type_free(&f);
    MPI_File_seek(fh, 3, MPI_SEEK_SET);
    MPI_File_write(fh, buf, 2, MPI_INT, &st);
    MPI_File_get_position(fh, &pos);
    /* etype 3 is the second int of block 1: byte 100 + 20 + 4 */
    MPI_File_get_byte_offset(fh, 3, &byte);
    if (pos != 5 || byte != 124) {
        fprintf(stderr, "rank %d: position %lld byte offset %lld\n", rank, (long long)pos,
                (long long)byte);
        failures++;
    }
    MPI_Type_free(&vec);
    rc = MPI_File_close(&fh);
    expect_same(rc, MPI_SUCCESS, "close after view I/O");

    /* 10. MPI_MODE_APPEND starts every file pointer at the end of the file. */
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_WRONLY | MPI_MODE_APPEND, MPI_INFO_NULL, &fh);
    expect_same(rc, MPI_SUCCESS, "open with MPI_MODE_APPEND");
    if (rc == MPI_SUCCESS) {
        MPI_Offset size = -1;
        MPI_File_get_size(fh, &size);
        MPI_File_get_position(fh, &pos);
        if (size <= 0 || pos != size) {
            fprintf(stderr, "rank %d: MPI_MODE_APPEND position %lld, size %lld\n", rank,
                    (long long)pos, (long long)size);
            failures++;
        }
        MPI_File_close(&fh);
    }

    /* 11. Views MPI forbids (13.3: etype and filetype displacements non-negative and
     * monotonically nondecreasing, no overlaps in a file open for writing) fail with
     * MPI_ERR_IO, ROMIO's class (MPICH's test/mpi/io/tst_fileview checks it), on every
     * rank, and leave the view as it was. */
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    expect_same(rc, MPI_SUCCESS, "open for the forbidden views");
    if (rc == MPI_SUCCESS) {
        static const struct {
            int disp0, disp1, len0;
            const char *what;
        } bad[] = {
            {-2, 2, 1, "negative displacement"},
            {3, 0, 1, "decreasing displacements"},
            {0, 1, 3, "overlapping blocks"},
        };
        rc = MPI_File_set_view(fh, 8, MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
        expect_same(rc, MPI_SUCCESS, "set_view before the forbidden views");
        for (int k = 0; k < 3; k++) {
            int blen[2] = {bad[k].len0, 1}, disps[2] = {bad[k].disp0, bad[k].disp1};
            MPI_Datatype t;
            MPI_Type_indexed(2, blen, disps, MPI_INT, &t);
            MPI_Type_commit(&t);
            char what[128];
            snprintf(what, sizeof what, "set_view with an etype of %s", bad[k].what);
            rc = MPI_File_set_view(fh, 0, t, t, "native", MPI_INFO_NULL);
            expect_same(rc, MPI_ERR_IO, what);
            snprintf(what, sizeof what, "set_view with a filetype of %s", bad[k].what);
            rc = MPI_File_set_view(fh, 0, MPI_INT, t, "native", MPI_INFO_NULL);
            expect_same(rc, MPI_ERR_IO, what);
            MPI_Type_free(&t);
        }
        MPI_File_get_view(fh, &disp, &e, &f, rep);
        if (disp != 8 || e != MPI_INT || f != MPI_INT) {
            fprintf(stderr, "rank %d: the forbidden views changed the view (disp %lld)\n", rank,
                    (long long)disp);
            failures++;
        }
        MPI_File_close(&fh);
    }

    /* 12. Read-only, MPI allows a filetype whose data overlap (ROMIO serves it): the
     * overlapping ints are read again, in typemap order, through independent,
     * collective, individual-pointer and nonblocking reads; decreasing displacements
     * still fail with MPI_ERR_IO. The file holds int k at byte 4k. */
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    expect_same(rc, MPI_SUCCESS, "open to write the ints for the overlapping view");
    if (rc == MPI_SUCCESS) {
        int ints[64];
        for (int k = 0; k < 64; k++)
            ints[k] = k;
        if (rank == 0)
            MPI_File_write_at(fh, 0, ints, 64, MPI_INT, &st);
        MPI_File_close(&fh);
    }
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    expect_same(rc, MPI_SUCCESS, "open read-only for the overlapping view");
    if (rc == MPI_SUCCESS) {
        /* ints 0,1,2 then 1 again; extent 3 ints: tile t reads 3t, 3t+1, 3t+2, 3t+1 */
        int blen[2] = {3, 1}, disps[2] = {0, 1};
        MPI_Datatype t;
        MPI_Type_indexed(2, blen, disps, MPI_INT, &t);
        MPI_Type_commit(&t);
        rc = MPI_File_set_view(fh, 8, t, t, "native", MPI_INFO_NULL);
        expect_same(rc, MPI_SUCCESS, "read-only set_view with an overlapping etype and filetype");
        rc = MPI_File_set_view(fh, 8, MPI_INT, t, "native", MPI_INFO_NULL);
        expect_same(rc, MPI_SUCCESS, "read-only set_view with an overlapping filetype");
        int want[8], got[8];
        for (int k = 0; k < 8; k++) /* view ints 4..11: tiles 1 and 2, from byte 8 (int 2) */
            want[k] = 2 + 3 * (1 + k / 4) + (k % 4 == 3 ? 1 : k % 4);
        memset(got, 0, sizeof got);
        rc = MPI_File_read_at(fh, 4, got, 8, MPI_INT, &st);
        expect_same(rc, MPI_SUCCESS, "read_at through the overlapping view");
        int n = -1;
        MPI_Get_count(&st, MPI_INT, &n);
        if (memcmp(got, want, sizeof want) != 0 || n != 8) {
            fprintf(stderr, "rank %d: read_at through the overlapping view: %d %d %d %d ... (%d ints), want %d %d %d %d\n",
                    rank, got[0], got[1], got[2], got[3], n, want[0], want[1], want[2], want[3]);
            failures++;
        }
        memset(got, 0, sizeof got);
        rc = MPI_File_read_at_all(fh, 4, got, 8, MPI_INT, &st);
        expect_same(rc, MPI_SUCCESS, "read_at_all through the overlapping view");
        if (memcmp(got, want, sizeof want) != 0) {
            fprintf(stderr, "rank %d: read_at_all through the overlapping view differs\n", rank);
            failures++;
        }
        memset(got, 0, sizeof got);
        MPI_File_seek(fh, 4, MPI_SEEK_SET);
        rc = MPI_File_read_all(fh, got, 8, MPI_INT, &st);
        expect_same(rc, MPI_SUCCESS, "read_all through the overlapping view");
        MPI_File_get_position(fh, &pos);
        if (memcmp(got, want, sizeof want) != 0 || pos != 12) {
            fprintf(stderr, "rank %d: read_all through the overlapping view differs (position %lld)\n",
                    rank, (long long)pos);
            failures++;
        }
        MPI_Request req;
        memset(got, 0, sizeof got);
        rc = MPI_File_iread_at(fh, 4, got, 8, MPI_INT, &req);
        if (rc == MPI_SUCCESS)
            rc = MPI_Wait(&req, &st);
        expect_same(rc, MPI_SUCCESS, "iread_at through the overlapping view");
        if (memcmp(got, want, sizeof want) != 0) {
            fprintf(stderr, "rank %d: iread_at through the overlapping view differs\n", rank);
            failures++;
        }
        /* Past the end of the file (64 ints): a short read. */
        rc = MPI_File_read_at(fh, 100, got, 8, MPI_INT, &st);
        MPI_Get_count(&st, MPI_INT, &n);
        expect_same(rc, MPI_SUCCESS, "read_at past the end through the overlapping view");
        if (n != 0) {
            fprintf(stderr, "rank %d: read past the end gave %d ints\n", rank, n);
            failures++;
        }
        MPI_Type_free(&t);
        int dblen[2] = {1, 1}, ddisps[2] = {3, 0};
        MPI_Type_indexed(2, dblen, ddisps, MPI_INT, &t);
        MPI_Type_commit(&t);
        rc = MPI_File_set_view(fh, 0, MPI_INT, t, "native", MPI_INFO_NULL);
        expect_same(rc, MPI_ERR_IO, "read-only set_view with decreasing displacements");
        MPI_Type_free(&t);
        MPI_File_close(&fh);
    }

    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf(failures ? "errors FAILED\n" : "errors OK\n");
    MPI_Finalize();
    return failures ? 1 : 0;
}

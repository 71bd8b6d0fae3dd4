/* Data representations of MPI_File_set_view: "internal" is served (as native) and
 * MPI_File_get_view names it; an unknown name fails with MPI_ERR_UNSUPPORTED_DATAREP on
 * every rank (MPI permits it) and leaves the view as it was; "external32" is served:
 * ints written under it are big-endian in the file and read back as they were, through
 * blocking, collective, nonblocking and split collective calls, and a memory type whose
 * external32 size is not its native size (MPI_LONG in MPI's table) fails with
 * MPI_ERR_UNSUPPORTED_DATAREP on every rank without hanging. Rank 0 prints one line per
 * step; every rank checks the data it reads back.
 *
 *   datarep PREFIX     (the file is PREFIX"datarep")
 *
 * The file: three rows of each rank's 8-int blocks dealt round robin: row 0 written
 * under "internal", row 1 (negated) under "native", row 2 (+ 50000) under "external32".
 * (Under ROMIO on a local file MPI_LONG under "external32" is served: the caller compares
 * only the lines it expects and the file's bytes.) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64 /* ints per rank and call */

static int rank, nprocs, errors;

static const char *outcome(int rc)
{
    int cls = rc;
    if (rc == MPI_SUCCESS)
        return "ok";
    MPI_Error_class(rc, &cls);
    return cls == MPI_ERR_UNSUPPORTED_DATAREP ? "unsupported" : "other error";
}

/* Every rank saw the same outcome (the call is collective). */
static const char *agreed(int rc)
{
    int ok = rc == MPI_SUCCESS, all_ok, any_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&ok, &any_ok, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (all_ok != any_ok)
        return "ranks disagree";
    return outcome(rc);
}

/* Collective: every rank calls it; rank 0 prints. */
static void report(const char *what, int rc)
{
    const char *o = agreed(rc);
    if (rank == 0)
        printf("%s: %s\n", what, o);
}

static void print_view(MPI_File fh, const char *when)
{
    MPI_Offset disp;
    MPI_Datatype etype, filetype;
    char rep[MPI_MAX_DATAREP_STRING];
    memset(rep, 0, sizeof rep);
    int rc = MPI_File_get_view(fh, &disp, &etype, &filetype, rep);
    if (rank == 0)
        printf("get_view %s: %s %s disp %lld\n", when, outcome(rc), rep, (long long)disp);
    int combiner, ni, na, nd;
    MPI_Type_get_envelope(filetype, &ni, &na, &nd, &combiner);
    if (combiner != MPI_COMBINER_NAMED)
        MPI_Type_free(&filetype);
    MPI_Type_get_envelope(etype, &ni, &na, &nd, &combiner);
    if (combiner != MPI_COMBINER_NAMED)
        MPI_Type_free(&etype);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2) {
        fprintf(stderr, "usage: %s PREFIX\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    char name[4096];
    snprintf(name, sizeof name, "%sdatarep", argv[1]);
    MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN);
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "rank %d: open %s: %s\n", rank, name, outcome(rc));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Blocks of 8 ints dealt among the ranks; a tile is one row of every rank's blocks. */
    MPI_Datatype vector, filetype;
    MPI_Type_vector(N / 8, 8, 8 * nprocs, MPI_INT, &vector);
    MPI_Type_create_resized(vector, 0, (MPI_Aint)N * nprocs * sizeof(int), &filetype);
    MPI_Type_free(&vector);
    MPI_Type_commit(&filetype);
    MPI_Offset disp = (MPI_Offset)rank * 8 * sizeof(int);
    int buf[N], back[N];
    for (int i = 0; i < N; i++)
        buf[i] = rank * 100000 + i;

    rc = MPI_File_set_view(fh, disp, MPI_INT, filetype, "internal", MPI_INFO_NULL);
    report("set_view internal", rc);
    print_view(fh, "after internal");
    MPI_Status st;
    rc = MPI_File_write_all(fh, buf, N, MPI_INT, &st);
    report("write_all internal", rc);

    rc = MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "no_such_representation", MPI_INFO_NULL);
    report("set_view no_such_representation", rc);
    print_view(fh, "after no_such_representation");

    /* external32 on the same layout: row 2, big-endian in the file. */
    rc = MPI_File_set_view(fh, disp, MPI_INT, filetype, "external32", MPI_INFO_NULL);
    report("set_view external32", rc);
    print_view(fh, "after external32");
    int x32[N];
    for (int i = 0; i < N; i++)
        x32[i] = rank * 100000 + i + 50000;
    rc = MPI_File_write_at_all(fh, 2 * N, x32, N, MPI_INT, &st);
    report("write_at_all external32", rc);
    int n = -1;
    MPI_Get_count(&st, MPI_INT, &n);
    if (rc == MPI_SUCCESS && n != N && errors++ < 3)
        fprintf(stderr, "rank %d: external32 write count %d, not %d\n", rank, n, N);
    memset(back, 0, sizeof back);
    rc = MPI_File_read_at_all(fh, 2 * N, back, N, MPI_INT, &st);
    report("read_at_all external32", rc);
    for (int i = 0; i < N; i++)
        if (back[i] != x32[i] && errors++ < 3)
            fprintf(stderr, "rank %d: external32 int %d reads %d, not %d\n", rank, i, back[i],
                    x32[i]);
    MPI_Request req;
    memset(back, 0, sizeof back);
    rc = MPI_File_iread_at(fh, 2 * N + 8, back, 8, MPI_INT, &req);
    if (rc == MPI_SUCCESS)
        rc = MPI_Wait(&req, &st);
    report("iread_at external32", rc);
    for (int i = 0; i < 8; i++)
        if (back[i] != x32[8 + i] && errors++ < 3)
            fprintf(stderr, "rank %d: external32 iread int %d reads %d, not %d\n", rank, i,
                    back[i], x32[8 + i]);
    memset(back, 0, sizeof back);
    rc = MPI_File_read_at_all_begin(fh, 2 * N, back, N, MPI_INT);
    if (rc == MPI_SUCCESS)
        rc = MPI_File_read_at_all_end(fh, back, &st);
    report("read_at_all_begin/end external32", rc);
    for (int i = 0; i < N; i++)
        if (back[i] != x32[i] && errors++ < 3)
            fprintf(stderr, "rank %d: external32 split int %d reads %d, not %d\n", rank, i,
                    back[i], x32[i]);
    /* MPI_LONG: 4 bytes in MPI's external32 table, so the view's native layout cannot
     * hold it and the read fails with MPI_ERR_UNSUPPORTED_DATAREP on every rank; Open
     * MPI packs it in 8 bytes, so there it is served. Either way, as its size says. */
    MPI_Aint xsize = 0;
    MPI_Pack_external_size("external32", 1, MPI_LONG, &xsize);
    long l = 0;
    rc = MPI_File_read_at_all(fh, 2 * N, &l, 1, MPI_LONG, &st);
    int cls = rc;
    MPI_Error_class(rc, &cls);
    int as_said = xsize == (MPI_Aint)sizeof(long) ? rc == MPI_SUCCESS
                                                  : cls == MPI_ERR_UNSUPPORTED_DATAREP;
    report("read_at_all MPI_LONG external32 as its size says", as_said ? MPI_SUCCESS : MPI_ERR_OTHER);

    /* Back to native on the same layout, a second row of blocks after the first. */
    rc = MPI_File_set_view(fh, disp, MPI_INT, filetype, "native", MPI_INFO_NULL);
    report("set_view native", rc);
    print_view(fh, "after native");
    memset(back, 0, sizeof back);
    rc = MPI_File_read_at_all(fh, 0, back, N, MPI_INT, &st);
    for (int i = 0; i < N; i++)
        if (back[i] != buf[i] && errors++ < 3)
            fprintf(stderr, "rank %d: int %d reads %d, not %d\n", rank, i, back[i], buf[i]);
    for (int i = 0; i < N; i++)
        buf[i] = -(rank * 100000 + i);
    int rc2 = MPI_File_write_at_all(fh, N, buf, N, MPI_INT, &st);
    report("read native", rc);
    report("write native", rc2);
    MPI_File_close(&fh);
    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s\n", total == 0 ? "values ok" : "values WRONG");
    MPI_Type_free(&filetype);
    MPI_Finalize();
    return 0;
}

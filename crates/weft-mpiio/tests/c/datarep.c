/* Data representations of MPI_File_set_view: "internal" is served (as native) and
 * MPI_File_get_view names it; "external32" and an unknown name fail with
 * MPI_ERR_UNSUPPORTED_DATAREP on every rank (MPI permits it) and leave the view as it
 * was; the file stays usable. Rank 0 prints one line per step; every rank checks the
 * data it reads back.
 *
 *   datarep PREFIX     (the file is PREFIX"datarep")
 *
 * Under ROMIO on a local file "external32" succeeds (the caller compares only the
 * lines it expects and the file's bytes, written under "internal" and "native"). */
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

    rc = MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "external32", MPI_INFO_NULL);
    report("set_view external32", rc);
    print_view(fh, "after external32");

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

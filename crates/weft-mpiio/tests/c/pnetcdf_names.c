/* PnetCDF's file operations on one name, each checked, as PnetCDF's own tests and
 * examples use them:
 *   1. create with NC_CLOBBER (CDF-5): a 2-D double variable and a 1-D "large" int
 *      variable (LARGE values), written collectively; close;
 *   2. create with NC_NOCLOBBER over it: must fail with NC_EEXIST;
 *   3. open for writing, redef, a new dimension, variable and attribute, enddef (the
 *      header grows: the data moves), write the new variable; close;
 *   4. open read-only: three variables, every value checked;
 *   5. ncmpi_inq_file_format (rank 0): CDF-5;
 *   6. create with NC_CLOBBER (CDF-2) over it: a small file, whose size rank 0 prints
 *      ("clobbered size N": the clobber must drop the old contents, as on a local file);
 *   7. ncmpi_delete (rank 0), then ncmpi_open must fail with NC_ENOENT;
 *   8. create with NC_NOCLOBBER (the name is free again) and close: the file left.
 *
 *   pnetcdf_names PREFIX
 *
 * The name is PREFIX followed by "x.nc", built here: not a command-line argument (the
 * library ties the command line's weft: names from the start; this program checks the
 * ties made by the PnetCDF calls themselves). The file left and the lines printed
 * depend only on the number of processes, so a run on a local directory is the
 * reference. */
#include <mpi.h>
#include <pnetcdf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NY 4       /* rows per process */
#define NX 16      /* columns */
#define LARGE 65536 /* ints of the 1-D variable per process */

static int rank, nprocs, errors;

#define ERR(e)                                                                            \
    do {                                                                                  \
        int err_ = (e);                                                                   \
        if (err_ != NC_NOERR) {                                                           \
            fprintf(stderr, "rank %d: line %d: %s\n", rank, __LINE__, ncmpi_strerror(err_)); \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                 \
        }                                                                                 \
    } while (0)

/* Fails unless `got` is the error `want`. */
static void expect_err(int got, int want, const char *what)
{
    if (got != want) {
        fprintf(stderr, "rank %d: %s: got %d (%s), expected %d (%s)\n", rank, what, got,
                ncmpi_strerror(got), want, ncmpi_strerror(want));
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

static void expect(int ok, const char *what, long at)
{
    if (!ok && errors++ < 5)
        fprintf(stderr, "rank %d: %s wrong at %ld\n", rank, what, at);
}

static double dval(long y, long x) { return y * 100.0 + x / 8.0; }
static int lval(long i) { return (int)(i * 7 + 3); }
static float fval(long i) { return (float)i * 0.25f; }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2) {
        fprintf(stderr, "usage: %s PREFIX\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char path[4096];
    snprintf(path, sizeof path, "%sx.nc", argv[1]);

    int ncid, dims[3], v_dbl, v_large, v_added, nvars;
    static double dbuf[NY][NX];
    static int lbuf[LARGE];
    static float fbuf[NX];
    MPI_Offset start[2] = {(MPI_Offset)rank * NY, 0}, count[2] = {NY, NX};
    MPI_Offset lstart = (MPI_Offset)rank * LARGE, lcount = LARGE;

    /* 1. */
    ERR(ncmpi_create(MPI_COMM_WORLD, path, NC_CLOBBER | NC_64BIT_DATA, MPI_INFO_NULL, &ncid));
    ERR(ncmpi_def_dim(ncid, "y", (MPI_Offset)nprocs * NY, &dims[0]));
    ERR(ncmpi_def_dim(ncid, "x", NX, &dims[1]));
    ERR(ncmpi_def_dim(ncid, "n", (MPI_Offset)nprocs * LARGE, &dims[2]));
    ERR(ncmpi_def_var(ncid, "heat", NC_DOUBLE, 2, dims, &v_dbl));
    ERR(ncmpi_def_var(ncid, "large", NC_INT, 1, &dims[2], &v_large));
    ERR(ncmpi_enddef(ncid));
    for (int j = 0; j < NY; j++)
        for (int i = 0; i < NX; i++)
            dbuf[j][i] = dval(rank * NY + j, i);
    for (long i = 0; i < LARGE; i++)
        lbuf[i] = lval(lstart + i);
    ERR(ncmpi_put_vara_double_all(ncid, v_dbl, start, count, &dbuf[0][0]));
    ERR(ncmpi_put_vara_int_all(ncid, v_large, &lstart, &lcount, lbuf));
    ERR(ncmpi_close(ncid));

    /* 2. */
    expect_err(ncmpi_create(MPI_COMM_WORLD, path, NC_NOCLOBBER | NC_64BIT_DATA, MPI_INFO_NULL, &ncid),
               NC_EEXIST, "NC_NOCLOBBER create over an existing file");

    /* 3. */
    ERR(ncmpi_open(MPI_COMM_WORLD, path, NC_WRITE, MPI_INFO_NULL, &ncid));
    ERR(ncmpi_redef(ncid));
    ERR(ncmpi_def_dim(ncid, "w", NX, &dims[0]));
    ERR(ncmpi_def_var(ncid, "added", NC_FLOAT, 1, dims, &v_added));
    ERR(ncmpi_put_att_text(ncid, NC_GLOBAL, "history", 27, "added after a redef on Weft"));
    ERR(ncmpi_enddef(ncid));
    for (int i = 0; i < NX; i++)
        fbuf[i] = fval(i);
    MPI_Offset wstart = 0, wcount = rank == 0 ? NX : 0;
    ERR(ncmpi_put_vara_float_all(ncid, v_added, &wstart, &wcount, fbuf));
    ERR(ncmpi_close(ncid));

    /* 4. */
    ERR(ncmpi_open(MPI_COMM_WORLD, path, NC_NOWRITE, MPI_INFO_NULL, &ncid));
    ERR(ncmpi_inq_nvars(ncid, &nvars));
    expect(nvars == 3, "number of variables", nvars);
    ERR(ncmpi_inq_varid(ncid, "heat", &v_dbl));
    ERR(ncmpi_inq_varid(ncid, "large", &v_large));
    ERR(ncmpi_inq_varid(ncid, "added", &v_added));
    memset(dbuf, 0, sizeof dbuf);
    memset(lbuf, 0, sizeof lbuf);
    memset(fbuf, 0, sizeof fbuf);
    ERR(ncmpi_get_vara_double_all(ncid, v_dbl, start, count, &dbuf[0][0]));
    ERR(ncmpi_get_vara_int_all(ncid, v_large, &lstart, &lcount, lbuf));
    wcount = NX;
    ERR(ncmpi_get_vara_float_all(ncid, v_added, &wstart, &wcount, fbuf));
    for (int j = 0; j < NY; j++)
        for (int i = 0; i < NX; i++)
            expect(dbuf[j][i] == dval(rank * NY + j, i), "heat", (long)j * NX + i);
    for (long i = 0; i < LARGE; i++)
        expect(lbuf[i] == lval(lstart + i), "large", i);
    for (int i = 0; i < NX; i++)
        expect(fbuf[i] == fval(i), "added", i);
    ERR(ncmpi_close(ncid));

    /* 5. */
    if (rank == 0) {
        int format = -1;
        ERR(ncmpi_inq_file_format(path, &format));
        expect(format == NC_FORMAT_CDF5, "ncmpi_inq_file_format", format);
    }

    /* 6. */
    ERR(ncmpi_create(MPI_COMM_WORLD, path, NC_CLOBBER | NC_64BIT_OFFSET, MPI_INFO_NULL, &ncid));
    ERR(ncmpi_def_dim(ncid, "k", 4, &dims[0]));
    ERR(ncmpi_def_var(ncid, "small", NC_INT, 1, dims, &v_dbl));
    ERR(ncmpi_enddef(ncid));
    int small[4] = {1, 2, 3, 4};
    MPI_Offset kstart = 0, kcount = rank == 0 ? 4 : 0;
    ERR(ncmpi_put_vara_int_all(ncid, v_dbl, &kstart, &kcount, small));
    ERR(ncmpi_close(ncid));
    MPI_File fh;
    MPI_Offset size = -1;
    if (MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS ||
        MPI_File_get_size(fh, &size) != MPI_SUCCESS || MPI_File_close(&fh) != MPI_SUCCESS)
        expect(0, "MPI_File_get_size after the clobber", 0);
    if (rank == 0)
        printf("clobbered size %lld\n", (long long)size);

    /* 7. */
    if (rank == 0) /* independent: one process removes it, as PnetCDF's tests do */
        ERR(ncmpi_delete(path, MPI_INFO_NULL));
    MPI_Barrier(MPI_COMM_WORLD);
    expect_err(ncmpi_open(MPI_COMM_WORLD, path, NC_NOWRITE, MPI_INFO_NULL, &ncid), NC_ENOENT,
               "ncmpi_open after ncmpi_delete");

    /* 8. */
    ERR(ncmpi_create(MPI_COMM_WORLD, path, NC_NOCLOBBER, MPI_INFO_NULL, &ncid));
    ERR(ncmpi_def_dim(ncid, "k", 2, &dims[0]));
    ERR(ncmpi_def_var(ncid, "last", NC_INT, 1, dims, &v_dbl));
    ERR(ncmpi_enddef(ncid));
    ERR(ncmpi_close(ncid));

    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s\n", total == 0 ? "pnetcdf names ok" : "pnetcdf names FAILED");
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}

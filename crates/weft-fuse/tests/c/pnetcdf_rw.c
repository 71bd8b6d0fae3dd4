/* PnetCDF on one file: created and written with blocking collective puts and with
 * nonblocking iput + wait_all, then reopened (ncmpi_open checks the header with POSIX
 * calls on the path) and read back with blocking gets, nonblocking iget + wait_all and
 * independent gets of a neighbour's rows; every value is checked.
 *
 *   pnetcdf_rw PATH
 *
 * The bytes of PATH depend only on the number of processes, so the same run on a local
 * directory is the reference. */
#include <mpi.h>
#include <pnetcdf.h>
#include <stdio.h>
#include <stdlib.h>

#define NY 6  /* rows per process */
#define NX 40 /* columns */

static int rank, nprocs, errors;

#define ERR(e)                                                                            \
    do {                                                                                  \
        int err_ = (e);                                                                   \
        if (err_ != NC_NOERR) {                                                           \
            fprintf(stderr, "rank %d: line %d: %s\n", rank, __LINE__, ncmpi_strerror(err_)); \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                 \
        }                                                                                 \
    } while (0)

static int ival(int y, int x) { return y * 1000 + x; }
static double dval(int y, int x) { return y + x / 128.0; }
static float fval(int y, int x) { return (float)(y * NX + x) * 0.5f; }

static void expect(int ok, const char *what, int y, int x)
{
    if (!ok && errors++ < 5)
        fprintf(stderr, "rank %d: %s wrong at (%d, %d)\n", rank, what, y, x);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *path = argv[1];
    int ncid, dims[2], v_int, v_dbl, v_flt;
    int ibuf[NY][NX];
    double dbuf[NY][NX];
    float fbuf[NY][NX];
    MPI_Offset start[2] = {(MPI_Offset)rank * NY, 0}, count[2] = {NY, NX};
    /* The float variable is written by interleaved rows: rank r has rows r, r + P, ... */
    MPI_Offset fstart[2] = {rank, 0}, fstride[2] = {nprocs, 1};

    ERR(ncmpi_create(MPI_COMM_WORLD, path, NC_CLOBBER | NC_64BIT_DATA, MPI_INFO_NULL, &ncid));
    ERR(ncmpi_def_dim(ncid, "y", (MPI_Offset)nprocs * NY, &dims[0]));
    ERR(ncmpi_def_dim(ncid, "x", NX, &dims[1]));
    ERR(ncmpi_def_var(ncid, "counts", NC_INT, 2, dims, &v_int));
    ERR(ncmpi_def_var(ncid, "heat", NC_DOUBLE, 2, dims, &v_dbl));
    ERR(ncmpi_def_var(ncid, "strided", NC_FLOAT, 2, dims, &v_flt));
    ERR(ncmpi_put_att_text(ncid, NC_GLOBAL, "title", 12, "weft pnetcdf"));
    ERR(ncmpi_enddef(ncid));

    for (int j = 0; j < NY; j++)
        for (int i = 0; i < NX; i++) {
            ibuf[j][i] = ival(rank * NY + j, i);
            dbuf[j][i] = dval(rank * NY + j, i);
            fbuf[j][i] = fval(rank + j * nprocs, i);
        }
    /* Blocking collective put. */
    ERR(ncmpi_put_vara_int_all(ncid, v_int, start, count, &ibuf[0][0]));
    /* Nonblocking puts, completed together. */
    int req[2], st[2];
    ERR(ncmpi_iput_vara_double(ncid, v_dbl, start, count, &dbuf[0][0], &req[0]));
    ERR(ncmpi_iput_vars_float(ncid, v_flt, fstart, count, fstride, &fbuf[0][0], &req[1]));
    ERR(ncmpi_wait_all(ncid, 2, req, st));
    ERR(st[0]);
    ERR(st[1]);
    ERR(ncmpi_close(ncid));

    ERR(ncmpi_open(MPI_COMM_WORLD, path, NC_NOWRITE, MPI_INFO_NULL, &ncid));
    ERR(ncmpi_inq_varid(ncid, "counts", &v_int));
    ERR(ncmpi_inq_varid(ncid, "heat", &v_dbl));
    ERR(ncmpi_inq_varid(ncid, "strided", &v_flt));
    /* Blocking collective get of its own rows. */
    ERR(ncmpi_get_vara_int_all(ncid, v_int, start, count, &ibuf[0][0]));
    for (int j = 0; j < NY; j++)
        for (int i = 0; i < NX; i++)
            expect(ibuf[j][i] == ival(rank * NY + j, i), "counts", rank * NY + j, i);
    /* Nonblocking gets of a neighbour's rows, completed together. */
    int nb = (rank + 1) % nprocs;
    MPI_Offset nstart[2] = {(MPI_Offset)nb * NY, 0}, nfstart[2] = {nb, 0};
    ERR(ncmpi_iget_vara_double(ncid, v_dbl, nstart, count, &dbuf[0][0], &req[0]));
    ERR(ncmpi_iget_vars_float(ncid, v_flt, nfstart, count, fstride, &fbuf[0][0], &req[1]));
    ERR(ncmpi_wait_all(ncid, 2, req, st));
    for (int j = 0; j < NY; j++)
        for (int i = 0; i < NX; i++) {
            expect(dbuf[j][i] == dval(nb * NY + j, i), "heat", nb * NY + j, i);
            expect(fbuf[j][i] == fval(nb + j * nprocs, i), "strided", nb + j * nprocs, i);
        }
    /* Independent get of the neighbour's counts. */
    ERR(ncmpi_begin_indep_data(ncid));
    ERR(ncmpi_get_vara_int(ncid, v_int, nstart, count, &ibuf[0][0]));
    ERR(ncmpi_end_indep_data(ncid));
    for (int j = 0; j < NY; j++)
        for (int i = 0; i < NX; i++)
            expect(ibuf[j][i] == ival(nb * NY + j, i), "counts (independent)", nb * NY + j, i);
    ERR(ncmpi_close(ncid));

    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s\n", total == 0 ? "pnetcdf ok" : "pnetcdf FAILED");
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}

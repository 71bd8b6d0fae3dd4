/* Parallel HDF5 on a weft: file: a contiguous and a chunked 2D dataset written with
 * hyperslab selections (rows by rank for one, column blocks for the other), and a 1D
 * dataset written with a point selection of 2^20 points per rank, interleaved among
 * the ranks (HDF5 makes an MPI filetype of one block per point: 8 MiB of addresses
 * to decode, 16 times the blocks a server view takes, as in HDF5's testpar/t_bigio),
 * collectively, then read back collectively and checked.
 *
 *   hdf5_rw FILE     (FILE: "weft:/dir/x.h5" or a local path)
 */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS 64
#define COLS 48

static int rank, nprocs;

static void fail(const char *what)
{
    fprintf(stderr, "rank %d: %s failed\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

#define CHECK(x) do { if ((x) < 0) fail(#x); } while (0)

static int value(int i, int j, int set) { return set * 100000 + i * COLS + j; }

/* Rows [r0, r0 + nr) for the contiguous dataset; columns [c0, c0 + nc) for the chunked. */
static void share(int n, int *start, int *len)
{
    int base = n / nprocs, extra = n % nprocs;
    *len = base + (rank < extra);
    *start = rank * base + (rank < extra ? rank : extra);
}

static void transfer(hid_t file, const char *name, int set, int by_rows, int write)
{
    hid_t dset;
    if (write) {
        hsize_t dims[2] = {ROWS, COLS};
        hid_t space = H5Screate_simple(2, dims, NULL);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        if (!by_rows) {
            hsize_t chunk[2] = {16, 12};
            CHECK(H5Pset_chunk(dcpl, 2, chunk));
        }
        dset = H5Dcreate2(file, name, H5T_NATIVE_INT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        CHECK(dset);
        H5Pclose(dcpl);
        H5Sclose(space);
    } else {
        dset = H5Dopen2(file, name, H5P_DEFAULT);
        CHECK(dset);
    }
    int s, n;
    share(by_rows ? ROWS : COLS, &s, &n);
    hsize_t start[2] = {by_rows ? s : 0, by_rows ? 0 : s};
    hsize_t count[2] = {by_rows ? n : ROWS, by_rows ? COLS : n};
    hid_t fspace = H5Dget_space(dset);
    CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL));
    hid_t mspace = H5Screate_simple(2, count, NULL);
    int *buf = malloc(sizeof(int) * count[0] * count[1] + 1);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
    if (write) {
        for (hsize_t i = 0; i < count[0]; i++)
            for (hsize_t j = 0; j < count[1]; j++)
                buf[i * count[1] + j] = value(start[0] + i, start[1] + j, set);
        CHECK(H5Dwrite(dset, H5T_NATIVE_INT, mspace, fspace, dxpl, buf));
    } else {
        CHECK(H5Dread(dset, H5T_NATIVE_INT, mspace, fspace, dxpl, buf));
        for (hsize_t i = 0; i < count[0]; i++)
            for (hsize_t j = 0; j < count[1]; j++)
                if (buf[i * count[1] + j] != value(start[0] + i, start[1] + j, set)) {
                    fprintf(stderr, "rank %d: %s[%llu][%llu] = %d\n", rank, name,
                            (unsigned long long)(start[0] + i), (unsigned long long)(start[1] + j),
                            buf[i * count[1] + j]);
                    MPI_Abort(MPI_COMM_WORLD, 3);
                }
    }
    free(buf);
    H5Pclose(dxpl);
    H5Sclose(mspace);
    H5Sclose(fspace);
    H5Dclose(dset);
}

#define POINTS (1 << 20) /* per rank */

/* Element k * nprocs + rank of "points" is this rank's k-th point, value -(that index). */
static void points(hid_t file, int write)
{
    hsize_t total = (hsize_t)POINTS * nprocs;
    hid_t dset;
    if (write) {
        hid_t space = H5Screate_simple(1, &total, NULL);
        dset = H5Dcreate2(file, "points", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT,
                          H5P_DEFAULT);
        H5Sclose(space);
    } else {
        dset = H5Dopen2(file, "points", H5P_DEFAULT);
    }
    CHECK(dset);
    hsize_t *coords = malloc(sizeof(hsize_t) * POINTS);
    int *buf = malloc(sizeof(int) * POINTS);
    if (coords == NULL || buf == NULL)
        fail("malloc");
    for (hsize_t k = 0; k < POINTS; k++)
        coords[k] = k * nprocs + rank;
    hid_t fspace = H5Dget_space(dset);
    CHECK(H5Sselect_elements(fspace, H5S_SELECT_SET, POINTS, coords));
    hsize_t n = POINTS;
    hid_t mspace = H5Screate_simple(1, &n, NULL);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
    if (write) {
        for (hsize_t k = 0; k < POINTS; k++)
            buf[k] = -(int)coords[k];
        CHECK(H5Dwrite(dset, H5T_NATIVE_INT, mspace, fspace, dxpl, buf));
    } else {
        CHECK(H5Dread(dset, H5T_NATIVE_INT, mspace, fspace, dxpl, buf));
        for (hsize_t k = 0; k < POINTS; k++)
            if (buf[k] != -(int)coords[k]) {
                fprintf(stderr, "rank %d: points[%llu] = %d\n", rank,
                        (unsigned long long)coords[k], buf[k]);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
    }
    free(coords);
    free(buf);
    H5Pclose(dxpl);
    H5Sclose(mspace);
    H5Sclose(fspace);
    H5Dclose(dset);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2)
        fail("usage: hdf5_rw FILE");
    for (int write = 1; write >= 0; write--) {
        hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
        CHECK(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
        hid_t file = write ? H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, fapl)
                           : H5Fopen(argv[1], H5F_ACC_RDONLY, fapl);
        CHECK(file);
        transfer(file, "contiguous", 1, 1, write);
        transfer(file, "chunked", 2, 0, write);
        points(file, write);
        H5Pclose(fapl);
        CHECK(H5Fclose(file));
    }
    if (rank == 0)
        printf("hdf5 OK\n");
    MPI_Finalize();
    return 0;
}

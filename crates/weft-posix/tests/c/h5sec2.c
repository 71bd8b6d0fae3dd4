/* HDF5 through its sec2 (POSIX read/write) driver: a contiguous and a chunked,
 * extensible dataset written in scattered hyperslabs, a group and attributes, then the
 * file reopened and read back. Prints what it read; object times are off so that two
 * runs make the same file bytes. Usage: h5sec2 FILE */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>

#define N1 200000
#define R 256
#define C 256
#define CH 32

static void check(herr_t r, const char *what) {
    if (r < 0) { fprintf(stderr, "h5sec2: %s failed\n", what); exit(1); }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: h5sec2 FILE\n"); return 2; }
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    check(H5Pset_fapl_sec2(fapl), "set_fapl_sec2");
    hid_t f = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f < 0) { fprintf(stderr, "h5sec2: create failed\n"); return 1; }

    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    check(H5Pset_obj_track_times(dcpl, 0), "track_times");
    hsize_t n1 = N1;
    hid_t s1 = H5Screate_simple(1, &n1, NULL);
    hid_t d1 = H5Dcreate2(f, "line", H5T_NATIVE_INT, s1, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int *v = malloc(sizeof(int) * N1);
    for (int i = 0; i < N1; i++) v[i] = i * 7 - 3;
    check(H5Dwrite(d1, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v), "write line");

    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    check(H5Pset_obj_track_times(gcpl, 0), "group track_times");
    hid_t g = H5Gcreate2(f, "grid", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    hid_t ccpl = H5Pcreate(H5P_DATASET_CREATE);
    check(H5Pset_obj_track_times(ccpl, 0), "track_times");
    hsize_t chunk[2] = {CH, CH}, dims[2] = {R / 2, C}, maxd[2] = {H5S_UNLIMITED, C};
    check(H5Pset_chunk(ccpl, 2, chunk), "set_chunk");
    hid_t s2 = H5Screate_simple(2, dims, maxd);
    hid_t d2 = H5Dcreate2(g, "field", H5T_NATIVE_DOUBLE, s2, H5P_DEFAULT, ccpl, H5P_DEFAULT);
    hsize_t full[2] = {R, C};
    check(H5Dset_extent(d2, full), "set_extent");
    double *tile = malloc(sizeof(double) * 16 * 48);
    /* Tiles of 16 x 48 visited in a scattered order. */
    for (int k = 0; k < (R / 16) * (C / 48 + 1); k++) {
        int t = (k * 37) % ((R / 16) * (C / 48 + 1));
        hsize_t start[2] = {(hsize_t)(t / (C / 48 + 1)) * 16, (hsize_t)(t % (C / 48 + 1)) * 48};
        hsize_t count[2] = {16, start[1] + 48 > C ? C - start[1] : 48};
        for (hsize_t i = 0; i < count[0]; i++)
            for (hsize_t j = 0; j < count[1]; j++)
                tile[i * count[1] + j] = (start[0] + i) * 1000.0 + (start[1] + j) + 0.25;
        hid_t fs = H5Dget_space(d2);
        check(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL), "select");
        hid_t ms = H5Screate_simple(2, count, NULL);
        check(H5Dwrite(d2, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, tile), "write tile");
        H5Sclose(ms);
        H5Sclose(fs);
    }
    hsize_t one = 1;
    hid_t as = H5Screate_simple(1, &one, NULL);
    hid_t a = H5Acreate2(d2, "scale", H5T_NATIVE_DOUBLE, as, H5P_DEFAULT, H5P_DEFAULT);
    double scale = 0.5;
    check(H5Awrite(a, H5T_NATIVE_DOUBLE, &scale), "attribute");
    H5Aclose(a); H5Sclose(as);
    H5Dclose(d2); H5Sclose(s2); H5Gclose(g); H5Dclose(d1); H5Sclose(s1);
    check(H5Fclose(f), "close");

    f = H5Fopen(argv[1], H5F_ACC_RDONLY, fapl);
    if (f < 0) { fprintf(stderr, "h5sec2: reopen failed\n"); return 1; }
    d1 = H5Dopen2(f, "line", H5P_DEFAULT);
    int *back = calloc(N1, sizeof(int));
    check(H5Dread(d1, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back), "read line");
    long long sum1 = 0;
    for (int i = 0; i < N1; i++) {
        if (back[i] != v[i]) { fprintf(stderr, "h5sec2: line[%d] = %d\n", i, back[i]); return 1; }
        sum1 += back[i];
    }
    d2 = H5Dopen2(f, "grid/field", H5P_DEFAULT);
    double *grid = malloc(sizeof(double) * R * C);
    check(H5Dread(d2, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, grid), "read grid");
    double sum2 = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            double want = i * 1000.0 + j + 0.25;
            if (grid[i * C + j] != want) {
                fprintf(stderr, "h5sec2: grid[%d][%d] = %g\n", i, j, grid[i * C + j]);
                return 1;
            }
            sum2 += grid[i * C + j];
        }
    a = H5Aopen(d2, "scale", H5P_DEFAULT);
    check(H5Aread(a, H5T_NATIVE_DOUBLE, &scale), "read attribute");
    printf("line %lld grid %.2f scale %.2f\n", sum1, sum2, scale);
    H5Aclose(a); H5Dclose(d2); H5Dclose(d1);
    check(H5Fclose(f), "close");
    return 0;
}

/* MPI-IO access patterns for weft-mpiio's tests and benchmark. Every pattern writes a
 * file collectively through a file view, reads it back collectively and checks every
 * element; values are a function of the element's global index, so the same run on the
 * local file system (through the MPI library's own MPI-IO) must give the same bytes.
 *
 *   patterns PREFIX [--local-prefix P] [--only NAME] [--n N] [--s3d N] [--cyclic N K] [--flash B]
 *            [--timing] [--phase both|write|read] [--no-sync] [--read-method M] [--atomic]
 *            [key=value ...]
 *
 * PREFIX is prepended to each pattern's file name ("weft:/dir/" or "/tmp/dir/");
 * key=value pairs become MPI_Info hints at open; --n, --s3d, --cyclic and --flash (blocks
 * per rank) set the sizes;
 * --timing prints each pattern's collective write, sync and read times; --phase write
 * only writes (and syncs), --phase read only reads and checks what an earlier
 * --phase write left (block3d, cyclic2d, cyclic2d_bytes, s3d, flash); --no-sync skips the sync after the
 * collective write; --read-method M reads back through weft_cb_method M (set with
 * MPI_File_set_info after the write); --atomic sets atomic mode on every file opened.
 * Patterns:
 *   block3d       3D block subarray of 16-byte elements (ROMIO coll_perf)
 *   block3d_ghost the same from a memory array with ghost cells (noncontiguous memory)
 *   cyclic2d      2D CYCLIC(k) darray of 8-byte elements
 *   cyclic2d_mem  the same from every other slot of memory (vector memory type)
 *   cyclic2d_bytes the same darray of 1-byte elements
 *   overlap       overlapping tiles read collectively (rank 0 writes the matrix)
 *   s3d           a struct of four 4D arrays (S3D-IO's checkpoint)
 *   flash         FLASH-IO's checkpoint: 24 variables of 8x8x8-cell blocks, each rank's
 *                 blocks one hindexed piece per variable in the file, the cells taken
 *                 from memory with guard cells and the variables interleaved
 *   indexed       an irregular hindexed type, blocks dealt among ranks
 *   mixed         a weft: file and a local file open at once (needs --local-prefix)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nprocs;
static MPI_Info info;
static const char *prefix;
static const char *local_prefix;
static int n_block = 24;  /* block3d edge */
static int n_cyclic = 96; /* cyclic2d edge */
static int k_cyclic = 4;  /* CYCLIC(k) */
static int n_s3d = 12;    /* s3d edge */
static int n_flash = 3;   /* flash blocks per rank (rank r has n_flash + r % 3) */
static double t_write, t_sync, t_read;
static int do_write = 1, do_read = 1, do_sync = 1;
static const char *read_method;
static int atomic;

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

static void mismatch(const char *pattern, long at, uint64_t got, uint64_t want)
{
    fprintf(stderr, "rank %d: %s: element %ld is %llu, expected %llu\n", rank, pattern, at,
            (unsigned long long)got, (unsigned long long)want);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

static void open_file(const char *pre, const char *name, int amode, MPI_File *fh)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s", pre, name);
    check(MPI_File_open(MPI_COMM_WORLD, path, amode, info, fh), path);
    if (atomic)
        check(MPI_File_set_atomicity(*fh, 1), "MPI_File_set_atomicity");
}

/* Collective write then read back of count items of memtype from buf through a view.
 * With prefill > 0, rank 0 first fills that many bytes with 0xAB: bytes the pattern
 * leaves out must keep it (read-modify-write must not lose them). */
static void write_then_read(const char *name, MPI_Datatype etype, MPI_Datatype filetype,
                            void *buf, void *back, size_t buf_bytes, int count,
                            MPI_Datatype memtype, long prefill)
{
    MPI_File fh;
    MPI_Status st;
    open_file(prefix, name, do_write ? MPI_MODE_CREATE | MPI_MODE_RDWR : MPI_MODE_RDONLY, &fh);
    if (prefill > 0 && do_write) {
        if (rank == 0) {
            unsigned char *fill = malloc(prefill);
            memset(fill, 0xAB, prefill);
            check(MPI_File_write_at(fh, 0, fill, (int)prefill, MPI_BYTE, &st), "prefill");
            free(fill);
        }
        check(MPI_File_sync(fh), "sync");
        MPI_Barrier(MPI_COMM_WORLD);
        check(MPI_File_sync(fh), "sync");
    }
    check(MPI_File_set_view(fh, 0, etype, filetype, "native", info), "set_view");
    double t0;
    if (do_write) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        check(MPI_File_write_all(fh, buf, count, memtype, &st), "write_all");
        MPI_Barrier(MPI_COMM_WORLD);
        t_write = MPI_Wtime() - t0;
        t0 = MPI_Wtime();
        if (do_sync)
            check(MPI_File_sync(fh), "sync");
        MPI_Barrier(MPI_COMM_WORLD);
        t_sync = MPI_Wtime() - t0;
    }
    if (read_method != NULL) {
        MPI_Info method;
        MPI_Info_create(&method);
        MPI_Info_set(method, "weft_cb_method", read_method);
        check(MPI_File_set_info(fh, method), "set_info");
        MPI_Info_free(&method);
    }
    memset(back, 0xEE, buf_bytes);
    if (!do_read) {
        check(MPI_File_close(&fh), "close");
        return;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    check(MPI_File_read_at_all(fh, 0, back, count, memtype, &st), "read_at_all");
    MPI_Barrier(MPI_COMM_WORLD);
    t_read = MPI_Wtime() - t0;
    int got = 0;
    check(MPI_Get_count(&st, memtype, &got), "get_count");
    if (got != count) {
        fprintf(stderr, "rank %d: %s: read %d items, expected %d\n", rank, name, got, count);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    check(MPI_File_close(&fh), "close");
}

static void grid(int ndims, const int *gsizes, int *psizes, int *sub, int *start)
{
    int coords[8], r = rank;
    memset(psizes, 0, sizeof(int) * ndims);
    MPI_Dims_create(nprocs, ndims, psizes);
    for (int d = ndims - 1; d >= 0; d--) {
        coords[d] = r % psizes[d];
        r /= psizes[d];
    }
    for (int d = 0; d < ndims; d++) {
        int base = gsizes[d] / psizes[d], extra = gsizes[d] % psizes[d];
        sub[d] = base + (coords[d] < extra);
        start[d] = coords[d] * base + (coords[d] < extra ? coords[d] : extra);
    }
}

static void block3d(int ghost)
{
    const char *name = ghost ? "block3d_ghost" : "block3d";
    int n = n_block, g[3] = {n, n, n}, ps[3], sub[3], st[3];
    grid(3, g, ps, sub, st);
    MPI_Datatype elem, filetype, memtype;
    MPI_Type_contiguous(2, MPI_UINT64_T, &elem);
    MPI_Type_commit(&elem);
    MPI_Type_create_subarray(3, g, sub, st, MPI_ORDER_C, elem, &filetype);
    MPI_Type_commit(&filetype);
    int h = ghost ? 2 : 0;
    int m[3] = {sub[0] + 2 * h, sub[1] + 2 * h, sub[2] + 2 * h}, ms[3] = {h, h, h};
    MPI_Type_create_subarray(3, m, sub, ms, MPI_ORDER_C, elem, &memtype);
    MPI_Type_commit(&memtype);
    size_t cells = (size_t)m[0] * m[1] * m[2];
    uint64_t *buf = malloc(cells * 16), *back = malloc(cells * 16);
    memset(buf, 0x55, cells * 16);
    for (int i = 0; i < sub[0]; i++)
        for (int j = 0; j < sub[1]; j++)
            for (int k = 0; k < sub[2]; k++) {
                size_t l = ((size_t)(i + h) * m[1] + (j + h)) * m[2] + (k + h);
                uint64_t gi = ((uint64_t)(i + st[0]) * n + (j + st[1])) * n + (k + st[2]);
                buf[2 * l] = gi;
                buf[2 * l + 1] = gi ^ 0x5a5a5a5aULL;
            }
    write_then_read(name, elem, filetype, buf, back, cells * 16, 1, memtype, 0);
    for (size_t l = 0; l < cells * 2; l++) {
        size_t cell = l / 2;
        int k = cell % m[2], j = (cell / m[2]) % m[1], i = cell / m[2] / m[1];
        int inside = i >= h && i < h + sub[0] && j >= h && j < h + sub[1] && k >= h &&
                     k < h + sub[2];
        uint64_t want = inside ? buf[l] : 0xEEEEEEEEEEEEEEEEULL;
        if (do_read && back[l] != want)
            mismatch(name, (long)l, back[l], want);
    }
    free(buf);
    free(back);
    MPI_Type_free(&memtype);
    MPI_Type_free(&filetype);
    MPI_Type_free(&elem);
}

/* Global (row, column) of local element l of a CYCLIC(k) x CYCLIC(k) darray whose
 * local rows hold `cols` elements. */
static void cyclic_local(int k, const int *ps, const int *coords, long cols, long l, int *gi,
                         int *gj)
{
    long li = l / cols, lj = l % cols;
    *gi = (int)((li / k) * k * ps[0] + coords[0] * k + li % k);
    *gj = (int)((lj / k) * k * ps[1] + coords[1] * k + lj % k);
}

/* This rank's CYCLIC(k) x CYCLIC(k) darray of `elem` over the n_cyclic^2 matrix: the
 * filetype, the process grid and this rank's place in it, and its local columns. */
static MPI_Datatype cyclic_filetype(MPI_Datatype elem, int *ps, int *coords, long *cols)
{
    int n = n_cyclic, g[2] = {n, n};
    int distribs[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_CYCLIC}, dargs[2] = {k_cyclic, k_cyclic};
    ps[0] = ps[1] = 0;
    MPI_Dims_create(nprocs, 2, ps);
    coords[0] = rank / ps[1];
    coords[1] = rank % ps[1];
    MPI_Datatype filetype;
    MPI_Type_create_darray(nprocs, rank, 2, g, distribs, dargs, ps, MPI_ORDER_C, elem, &filetype);
    MPI_Type_commit(&filetype);
    /* Local columns: the global columns j with (j / k) % ps[1] == coords[1]. */
    *cols = 0;
    for (int j = 0; j < n; j++)
        *cols += (j / k_cyclic) % ps[1] == coords[1];
    return filetype;
}

static void cyclic2d(int memvec)
{
    const char *name = memvec ? "cyclic2d_mem" : "cyclic2d";
    int n = n_cyclic, ps[2], coords[2];
    long cols;
    MPI_Datatype filetype = cyclic_filetype(MPI_UINT64_T, ps, coords, &cols), memtype;
    int size = 0;
    MPI_Type_size(filetype, &size);
    long count = size / 8;
    int stride = memvec ? 2 : 1;
    MPI_Type_vector((int)count, 1, stride, MPI_UINT64_T, &memtype);
    MPI_Type_commit(&memtype);
    size_t slots = (size_t)count * stride;
    uint64_t *buf = malloc(slots * 8 + 8), *back = malloc(slots * 8 + 8);
    memset(buf, 0x33, slots * 8);
    for (long l = 0; l < count; l++) {
        int gi, gj;
        cyclic_local(k_cyclic, ps, coords, cols, l, &gi, &gj);
        buf[l * stride] = (uint64_t)gi * n + gj + 1000000;
    }
    write_then_read(name, MPI_UINT64_T, filetype, buf, back, slots * 8, 1, memtype, 0);
    for (size_t l = 0; l < slots; l++) {
        uint64_t want = l % stride == 0 ? buf[l] : 0xEEEEEEEEEEEEEEEEULL;
        if (do_read && back[l] != want)
            mismatch(name, (long)l, back[l], want);
    }
    free(buf);
    free(back);
    MPI_Type_free(&memtype);
    MPI_Type_free(&filetype);
}

/* The same darray of 1-byte elements (the finest pieces: k bytes). */
static void cyclic2d_bytes(void)
{
    int n = n_cyclic, ps[2], coords[2];
    long cols;
    MPI_Datatype filetype = cyclic_filetype(MPI_BYTE, ps, coords, &cols);
    int count = 0;
    MPI_Type_size(filetype, &count);
    unsigned char *buf = malloc((size_t)count + 1), *back = malloc((size_t)count + 1);
    for (long l = 0; l < count; l++) {
        int gi, gj;
        cyclic_local(k_cyclic, ps, coords, cols, l, &gi, &gj);
        buf[l] = (unsigned char)(((long)gi * n + gj) * 7 + 3);
    }
    write_then_read("cyclic2d_bytes", MPI_BYTE, filetype, buf, back, (size_t)count + 1, count,
                    MPI_BYTE, 0);
    for (long l = 0; l < count; l++)
        if (do_read && back[l] != buf[l])
            mismatch("cyclic2d_bytes", l, back[l], buf[l]);
    free(buf);
    free(back);
    MPI_Type_free(&filetype);
}

static void overlap(void)
{
    int n = n_cyclic, g[2] = {n, n}, ps[2], sub[2], st[2];
    MPI_File fh;
    MPI_Status status;
    open_file(prefix, "overlap", MPI_MODE_CREATE | MPI_MODE_RDWR, &fh);
    if (rank == 0) {
        uint64_t *all = malloc((size_t)n * n * 8);
        for (long x = 0; x < (long)n * n; x++)
            all[x] = (uint64_t)x * 3 + 7;
        check(MPI_File_write_at(fh, 0, all, n * n, MPI_UINT64_T, &status), "write_at");
        free(all);
    }
    check(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_sync(fh), "sync");
    /* Each rank's tile grown by a halo of 3 on every side: neighbours' tiles overlap. */
    grid(2, g, ps, sub, st);
    for (int d = 0; d < 2; d++) {
        int lo = st[d] - 3 < 0 ? 0 : st[d] - 3;
        int hi = st[d] + sub[d] + 3 > n ? n : st[d] + sub[d] + 3;
        st[d] = lo;
        sub[d] = hi - lo;
    }
    MPI_Datatype filetype;
    MPI_Type_create_subarray(2, g, sub, st, MPI_ORDER_C, MPI_UINT64_T, &filetype);
    MPI_Type_commit(&filetype);
    check(MPI_File_set_view(fh, 0, MPI_UINT64_T, filetype, "native", info), "set_view");
    long count = (long)sub[0] * sub[1];
    uint64_t *back = malloc(count * 8);
    double t0 = MPI_Wtime();
    check(MPI_File_read_all(fh, back, (int)count, MPI_UINT64_T, &status), "read_all");
    t_read = MPI_Wtime() - t0;
    for (long l = 0; l < count; l++) {
        long gi = st[0] + l / sub[1], gj = st[1] + l % sub[1];
        uint64_t want = (uint64_t)(gi * n + gj) * 3 + 7;
        if (back[l] != want)
            mismatch("overlap", l, back[l], want);
    }
    free(back);
    MPI_Type_free(&filetype);
    check(MPI_File_close(&fh), "close");
}

static void s3d(void)
{
    int n = n_s3d, g[3] = {n, n, n}, ps[3], sub[3], st[3];
    const int comps[4] = {3, 11, 1, 1};
    grid(3, g, ps, sub, st);
    MPI_Datatype arrays[4], filetype;
    int lens[4] = {1, 1, 1, 1};
    MPI_Aint displs[4];
    long cell = (long)n * n * n, local = (long)sub[0] * sub[1] * sub[2], total = 0, at = 0;
    for (int a = 0; a < 4; a++) {
        int gs[4] = {comps[a], n, n, n}, ss[4] = {comps[a], sub[0], sub[1], sub[2]},
            ts[4] = {0, st[0], st[1], st[2]};
        MPI_Type_create_subarray(4, gs, ss, ts, MPI_ORDER_C, MPI_UINT64_T, &arrays[a]);
        displs[a] = (MPI_Aint)at * 8;
        at += comps[a] * cell;
        total += comps[a] * local;
    }
    MPI_Type_create_struct(4, lens, displs, arrays, &filetype);
    MPI_Type_commit(&filetype);
    uint64_t *buf = malloc(total * 8), *back = malloc(total * 8);
    long l = 0;
    for (int a = 0; a < 4; a++)
        for (int c = 0; c < comps[a]; c++)
            for (int i = 0; i < sub[0]; i++)
                for (int j = 0; j < sub[1]; j++)
                    for (int k = 0; k < sub[2]; k++)
                        buf[l++] = (uint64_t)a * 1000000000ULL +
                                   (((uint64_t)c * n + i + st[0]) * n + j + st[1]) * n + k + st[2];
    write_then_read("s3d", MPI_UINT64_T, filetype, buf, back, total * 8, (int)total,
                    MPI_UINT64_T, 0);
    for (l = 0; l < total; l++)
        if (do_read && back[l] != buf[l])
            mismatch("s3d", l, back[l], buf[l]);
    free(buf);
    free(back);
    MPI_Type_free(&filetype);
    for (int a = 0; a < 4; a++)
        MPI_Type_free(&arrays[a]);
}

/* FLASH-IO: rank r holds nb = n_flash + r % 3 blocks of NXB^3 interior cells with
 * GUARD guard cells on each side, NVAR variables interleaved per cell (Fortran's
 * unk(nvar, i, j, k, block)); the file holds variable by variable all ranks' blocks in
 * rank order, so each rank's part is one hindexed piece per variable. */
#define FLASH_NVAR 24
#define FLASH_NXB 8
#define FLASH_GUARD 2
static void flash(void)
{
    const int side = FLASH_NXB + 2 * FLASH_GUARD, cells = FLASH_NXB * FLASH_NXB * FLASH_NXB;
    int nb = n_flash + rank % 3, first = 0, total = 0;
    for (int r = 0; r < nprocs; r++) {
        if (r < rank)
            first += n_flash + r % 3;
        total += n_flash + r % 3;
    }
    int lens[FLASH_NVAR];
    MPI_Aint displs[FLASH_NVAR];
    for (int v = 0; v < FLASH_NVAR; v++) {
        lens[v] = nb * cells;
        displs[v] = ((MPI_Aint)v * total + first) * cells * 8;
    }
    MPI_Datatype filetype, vars[FLASH_NVAR], memtype;
    MPI_Type_create_hindexed(FLASH_NVAR, lens, displs, MPI_DOUBLE, &filetype);
    MPI_Type_commit(&filetype);
    /* Memory: unk[nb][side][side][side][NVAR]; variable v's interior cells, block by
     * block, then the next variable. */
    int msize[5] = {nb, side, side, side, FLASH_NVAR}, sub[5] = {nb, FLASH_NXB, FLASH_NXB, FLASH_NXB, 1};
    int ones[FLASH_NVAR];
    MPI_Aint zeros[FLASH_NVAR];
    for (int v = 0; v < FLASH_NVAR; v++) {
        int start[5] = {0, FLASH_GUARD, FLASH_GUARD, FLASH_GUARD, v};
        MPI_Type_create_subarray(5, msize, sub, start, MPI_ORDER_C, MPI_DOUBLE, &vars[v]);
        ones[v] = 1;
        zeros[v] = 0;
    }
    MPI_Type_create_struct(FLASH_NVAR, ones, zeros, vars, &memtype);
    MPI_Type_commit(&memtype);
    size_t slots = (size_t)nb * side * side * side * FLASH_NVAR;
    double *buf = malloc(slots * 8), *back = malloc(slots * 8);
    for (size_t l = 0; l < slots; l++) {
        size_t v = l % FLASH_NVAR, cell = l / FLASH_NVAR;
        int x = cell % side, y = (cell / side) % side, z = (cell / side / side) % side;
        int b = (int)(cell / side / side / side);
        int inside = x >= FLASH_GUARD && x < FLASH_GUARD + FLASH_NXB && y >= FLASH_GUARD &&
                     y < FLASH_GUARD + FLASH_NXB && z >= FLASH_GUARD && z < FLASH_GUARD + FLASH_NXB;
        long at = (((long)(first + b) * FLASH_NXB + z - FLASH_GUARD) * FLASH_NXB + y - FLASH_GUARD) *
                      FLASH_NXB + x - FLASH_GUARD;
        buf[l] = inside ? (double)v * 1e9 + (double)at : -1.0;
    }
    write_then_read("flash", MPI_DOUBLE, filetype, buf, back, slots * 8, 1, memtype, 0);
    for (size_t l = 0; l < slots && do_read; l++) {
        uint64_t got, want;
        memcpy(&got, &back[l], 8);
        memcpy(&want, &buf[l], 8);
        if (buf[l] < 0)
            want = 0xEEEEEEEEEEEEEEEEULL;
        if (got != want)
            mismatch("flash", (long)l, got, want);
    }
    free(buf);
    free(back);
    MPI_Type_free(&memtype);
    for (int v = 0; v < FLASH_NVAR; v++)
        MPI_Type_free(&vars[v]);
    MPI_Type_free(&filetype);
}

static void indexed(void)
{
    const int blocks = 3000;
    int *lens = malloc(blocks * sizeof(int));
    MPI_Aint *displs = malloc(blocks * sizeof(MPI_Aint));
    int mine = 0;
    long at = 0, bytes = 0;
    for (int b = 0; b < blocks; b++) {
        int len = 1 + (b * 7919) % 37;
        if ((b * 13 + b / 5) % nprocs == rank) {
            lens[mine] = len;
            displs[mine] = at;
            mine++;
            bytes += len;
        }
        at += len + (b % 11 == 0 ? 5 : 0); /* a few gaps nobody writes */
    }
    MPI_Datatype filetype;
    MPI_Type_create_hindexed(mine, lens, displs, MPI_BYTE, &filetype);
    MPI_Type_commit(&filetype);
    unsigned char *buf = malloc(bytes + 1), *back = malloc(bytes + 1);
    long l = 0;
    for (int b = 0; b < mine; b++)
        for (int x = 0; x < lens[b]; x++)
            buf[l++] = (unsigned char)(((displs[b] + x) * 31 + 7) & 0xff);
    write_then_read("indexed", MPI_BYTE, filetype, buf, back, bytes + 1, (int)bytes, MPI_BYTE,
                    at);
    for (l = 0; l < bytes; l++)
        if (do_read && back[l] != buf[l])
            mismatch("indexed", l, back[l], buf[l]);
    free(buf);
    free(back);
    free(lens);
    free(displs);
    MPI_Type_free(&filetype);
}

static void mixed(void)
{
    if (local_prefix == NULL)
        return;
    MPI_File a, b;
    MPI_Status st;
    open_file(prefix, "mixed", MPI_MODE_CREATE | MPI_MODE_RDWR, &a);
    open_file(local_prefix, "mixed_local", MPI_MODE_CREATE | MPI_MODE_RDWR, &b);
    uint64_t v[64], w[64];
    for (int i = 0; i < 64; i++)
        v[i] = (uint64_t)rank * 1000 + i;
    check(MPI_File_write_at_all(a, rank * sizeof v, v, 64, MPI_UINT64_T, &st), "write weft");
    check(MPI_File_write_at_all(b, rank * sizeof v, v, 64, MPI_UINT64_T, &st), "write local");
    MPI_Offset sa, sb;
    check(MPI_File_sync(a), "sync");
    check(MPI_File_sync(b), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_get_size(a, &sa), "size");
    check(MPI_File_get_size(b, &sb), "size");
    if (sa != sb || sa != (MPI_Offset)(nprocs * sizeof v)) {
        fprintf(stderr, "rank %d: mixed: sizes %lld and %lld\n", rank, (long long)sa, (long long)sb);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    int peer = (rank + 1) % nprocs;
    check(MPI_File_read_at(a, peer * sizeof v, w, 64, MPI_UINT64_T, &st), "read weft");
    for (int i = 0; i < 64; i++)
        if (w[i] != (uint64_t)peer * 1000 + i)
            mismatch("mixed weft", i, w[i], (uint64_t)peer * 1000 + i);
    check(MPI_File_read_at(b, peer * sizeof v, w, 64, MPI_UINT64_T, &st), "read local");
    for (int i = 0; i < 64; i++)
        if (w[i] != (uint64_t)peer * 1000 + i)
            mismatch("mixed local", i, w[i], (uint64_t)peer * 1000 + i);
    check(MPI_File_close(&a), "close");
    check(MPI_File_close(&b), "close");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: %s PREFIX [--local-prefix P] [--only NAME] [--n N] [key=value ...]\n", argv[0]);
        MPI_Finalize();
        return 1;
    }
    MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN);
    prefix = argv[1];
    const char *only = NULL;
    int timing = 0;
    MPI_Info_create(&info);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--local-prefix") == 0 && i + 1 < argc) {
            local_prefix = argv[++i];
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            n_block = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--s3d") == 0 && i + 1 < argc) {
            n_s3d = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--flash") == 0 && i + 1 < argc) {
            n_flash = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--cyclic") == 0 && i + 2 < argc) {
            n_cyclic = atoi(argv[++i]);
            k_cyclic = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--timing") == 0) {
            timing = 1;
        } else if (strcmp(argv[i], "--phase") == 0 && i + 1 < argc) {
            const char *phase = argv[++i];
            do_write = strcmp(phase, "read") != 0;
            do_read = strcmp(phase, "write") != 0;
        } else if (strcmp(argv[i], "--no-sync") == 0) {
            do_sync = 0;
        } else if (strcmp(argv[i], "--atomic") == 0) {
            atomic = 1;
        } else if (strcmp(argv[i], "--read-method") == 0 && i + 1 < argc) {
            read_method = argv[++i];
        } else {
            char key[256];
            const char *eq = strchr(argv[i], '=');
            if (eq == NULL || eq - argv[i] >= (long)sizeof key) {
                if (rank == 0)
                    fprintf(stderr, "bad argument %s\n", argv[i]);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            memcpy(key, argv[i], eq - argv[i]);
            key[eq - argv[i]] = 0;
            MPI_Info_set(info, key, eq + 1);
        }
    }
    struct {
        const char *name;
        void (*run)(void);
    } patterns[] = {
        {"block3d", NULL}, {"block3d_ghost", NULL}, {"cyclic2d", NULL}, {"cyclic2d_mem", NULL},
        {"overlap", overlap}, {"s3d", s3d}, {"indexed", indexed}, {"mixed", mixed},
        {"cyclic2d_bytes", cyclic2d_bytes}, {"flash", flash},
    };
    for (size_t p = 0; p < sizeof patterns / sizeof patterns[0]; p++) {
        if (only != NULL && strcmp(only, patterns[p].name) != 0)
            continue;
        t_write = t_sync = t_read = 0;
        if (p == 0) block3d(0);
        else if (p == 1) block3d(1);
        else if (p == 2) cyclic2d(0);
        else if (p == 3) cyclic2d(1);
        else patterns[p].run();
        if (rank == 0 && timing)
            printf("%s write_s %.6f read_s %.6f sync_s %.6f\n", patterns[p].name, t_write, t_read,
                   t_sync);
    }
    if (rank == 0)
        printf("patterns OK\n");
    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}

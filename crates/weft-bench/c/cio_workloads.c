/* The workloads of the collective-I/O-aware caching study (`weft bench cio`): each
 * writes its file collectively (every 8-byte word holds its own index), then reads it
 * with collective calls in the workload's pattern and checks every word it read.
 * The patterns and their parameters are those of weft-trace's generators
 * (crates/weft-trace/src/synth.rs): the same arguments give the same original requests.
 *
 *   cio_workloads FILE --tile TX TY OX OY PASSES            [key=value ...]
 *   cio_workloads FILE --ior BLOCK TRANSFER SEGMENTS ITERATIONS [key=value ...]
 *   cio_workloads FILE --mpiio-test BLOCK TRANSFER ITERATIONS [key=value ...]
 *
 * tile:        MPI-Tile-IO: a 2D dataset of 8-byte elements, one TX x TY tile per
 *              process on the grid MPI_Dims_create would give (wider than tall),
 *              neighbours overlapping by OX and OY elements; each pass reads every
 *              tile collectively through a subarray view.
 * ior:         IOR's layout of SEGMENTS segments of one BLOCK per process; each
 *              iteration reads every block in TRANSFER-byte collective calls segment by
 *              segment, then the whole file with the transfers dealt round robin;
 *              odd iterations read the neighbour's data (IOR's -C).
 * mpiio-test:  PVFS's mpi-io-test: each process its BLOCK at rank * BLOCK, read in
 *              TRANSFER-byte collective calls, ITERATIONS times, the second half of the
 *              iterations shifted by half the processes.
 * key=value pairs become MPI_Info hints at open. With CIO_SKIP_WRITE=1 in the
 * environment the file is taken as written by an earlier run (the read phase alone).
 * Prints
 *   cio WORKLOAD read_s SECONDS bytes BYTES
 * on rank 0 (the read phase, every rank's bytes).
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nprocs;
/* When the read phase started (after the write and a barrier). */
static double t_read;

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

static void *alloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", rank, n);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    return p;
}

/* Checks that the n words at buf are the words of the file from word index first. */
static void verify(const uint64_t *buf, uint64_t n, uint64_t first, const char *what)
{
    for (uint64_t i = 0; i < n; i++) {
        if (buf[i] != first + i) {
            fprintf(stderr, "rank %d: %s: word %llu is %llu, expected %llu\n", rank, what,
                    (unsigned long long)(first + i), (unsigned long long)buf[i],
                    (unsigned long long)(first + i));
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }
}

/* Writes the file: each rank its contiguous share, in collective calls of at most
 * 16 MiB, every word holding its index. */
static void write_file(MPI_File fh, uint64_t bytes)
{
    const char *skip = getenv("CIO_SKIP_WRITE");
    if (skip != NULL && strcmp(skip, "1") == 0)
        return;
    const uint64_t chunk = 16 << 20;
    uint64_t words = bytes / 8;
    uint64_t share = (words + nprocs - 1) / nprocs;
    uint64_t lo = share * rank < words ? share * rank : words;
    uint64_t hi = lo + share < words ? lo + share : words;
    uint64_t rounds = (share * 8 + chunk - 1) / chunk;
    uint64_t *buf = alloc(chunk);
    for (uint64_t r = 0; r < rounds; r++) {
        uint64_t from = lo + r * (chunk / 8);
        uint64_t n = from < hi ? (hi - from < chunk / 8 ? hi - from : chunk / 8) : 0;
        for (uint64_t i = 0; i < n; i++)
            buf[i] = from + i;
        check(MPI_File_write_at_all(fh, (MPI_Offset)(from * 8), buf, (int)n, MPI_UINT64_T, MPI_STATUS_IGNORE),
              "write");
    }
    free(buf);
    check(MPI_File_sync(fh), "sync");
}

static void grid(int *gx, int *gy)
{
    int y = (int)sqrt((double)nprocs);
    while (y > 1 && nprocs % y != 0)
        y--;
    if (y < 1)
        y = 1;
    *gx = nprocs / y;
    *gy = y;
}

static uint64_t tile(MPI_File fh, MPI_Info info, int tx, int ty, int ox, int oy, int passes)
{
    int gx, gy;
    grid(&gx, &gy);
    int w = gx * (tx - ox) + ox, h = gy * (ty - oy) + oy;
    int cx = rank % gx, cy = rank / gx;
    int x0 = cx * (tx - ox), y0 = cy * (ty - oy);
    write_file(fh, (uint64_t)w * h * 8);
    int sizes[2] = {h, w}, sub[2] = {ty, tx}, starts[2] = {y0, x0};
    MPI_Datatype t;
    check(MPI_Type_create_subarray(2, sizes, sub, starts, MPI_ORDER_C, MPI_UINT64_T, &t), "subarray");
    check(MPI_Type_commit(&t), "commit");
    check(MPI_File_set_view(fh, 0, MPI_UINT64_T, t, "native", info), "set_view");
    uint64_t n = (uint64_t)tx * ty;
    uint64_t *buf = alloc(n * 8);
    MPI_Barrier(MPI_COMM_WORLD);
    t_read = MPI_Wtime();
    for (int p = 0; p < passes; p++) {
        memset(buf, 0, n * 8);
        check(MPI_File_read_at_all(fh, 0, buf, (int)n, MPI_UINT64_T, MPI_STATUS_IGNORE), "tile read");
        for (int row = 0; row < ty; row++)
            verify(buf + (uint64_t)row * tx, tx, (uint64_t)(y0 + row) * w + x0, "tile");
    }
    free(buf);
    MPI_Type_free(&t);
    return (uint64_t)passes * n * 8;
}

/* One collective read of [offset, offset + len) (len 0: take part only). */
static void read_range(MPI_File fh, uint64_t *buf, uint64_t offset, uint64_t len, const char *what)
{
    if (len > 0)
        memset(buf, 0, len);
    check(MPI_File_read_at_all(fh, (MPI_Offset)offset, buf, (int)(len / 8), MPI_UINT64_T, MPI_STATUS_IGNORE), what);
    verify(buf, len / 8, offset / 8, what);
}

static uint64_t ior(MPI_File fh, uint64_t block, uint64_t xfer, uint64_t segments, int iterations)
{
    uint64_t p = nprocs, per_block = block / xfer;
    uint64_t file = segments * p * block, transfers = file / xfer;
    write_file(fh, file);
    uint64_t *buf = alloc(xfer);
    uint64_t bytes = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    t_read = MPI_Wtime();
    for (int i = 0; i < iterations; i++) {
        uint64_t shift = i % 2, owner = (rank + shift) % p;
        for (uint64_t s = 0; s < segments; s++)
            for (uint64_t t = 0; t < per_block; t++) {
                read_range(fh, buf, (s * p + owner) * block + t * xfer, xfer, "ior segmented");
                bytes += xfer;
            }
        for (uint64_t round = 0; round < (transfers + p - 1) / p; round++) {
            uint64_t k = round * p + owner;
            read_range(fh, buf, k * xfer, k < transfers ? xfer : 0, "ior strided");
            bytes += k < transfers ? xfer : 0;
        }
    }
    free(buf);
    return bytes;
}

static uint64_t mpiio_test(MPI_File fh, uint64_t block, uint64_t xfer, int iterations)
{
    uint64_t p = nprocs, per_block = block / xfer;
    write_file(fh, p * block);
    uint64_t *buf = alloc(xfer);
    MPI_Barrier(MPI_COMM_WORLD);
    t_read = MPI_Wtime();
    for (int i = 0; i < iterations; i++) {
        uint64_t shift = i >= (iterations + 1) / 2 ? p / 2 : 0, owner = (rank + shift) % p;
        for (uint64_t t = 0; t < per_block; t++)
            read_range(fh, buf, owner * block + t * xfer, xfer, "mpi-io-test");
    }
    free(buf);
    return (uint64_t)iterations * block;
}

static uint64_t number(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *end != '\0') {
        fprintf(stderr, "bad number %s\n", s);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return v;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: %s FILE --tile|--ior|--mpiio-test PARAMS... [key=value ...]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *workload = argv[2] + 2;
    int params = strcmp(argv[2], "--tile") == 0 ? 5 : strcmp(argv[2], "--ior") == 0 ? 4
                 : strcmp(argv[2], "--mpiio-test") == 0 ? 3 : -1;
    if (params < 0 || argc < 3 + params) {
        if (rank == 0)
            fprintf(stderr, "unknown workload or missing parameters: %s\n", argv[2]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    uint64_t v[5];
    for (int i = 0; i < params; i++)
        v[i] = number(argv[3 + i]);
    MPI_Info info;
    MPI_Info_create(&info);
    for (int i = 3 + params; i < argc; i++) {
        char key[256];
        const char *eq = strchr(argv[i], '=');
        if (eq == NULL || eq - argv[i] >= (long)sizeof key) {
            if (rank == 0)
                fprintf(stderr, "bad argument %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        memcpy(key, argv[i], eq - argv[i]);
        key[eq - argv[i]] = '\0';
        MPI_Info_set(info, key, eq + 1);
    }
    MPI_File fh;
    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh), argv[1]);
    uint64_t bytes = 0; /* read by this rank */
    if (strcmp(workload, "tile") == 0) {
        if (v[2] >= v[0] || v[3] >= v[1] || v[0] * v[1] > (1u << 28)) {
            if (rank == 0)
                fprintf(stderr, "bad tile: overlap below the tile, at most 2^28 elements\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        bytes = tile(fh, info, (int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4]);
    } else if (strcmp(workload, "ior") == 0) {
        if (v[1] == 0 || v[1] % 8 || v[0] % v[1] || v[1] > (1u << 30)) {
            if (rank == 0)
                fprintf(stderr, "bad ior: transfers of whole words, at most 1 GiB, a block of whole transfers\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        bytes = ior(fh, v[0], v[1], v[2], (int)v[3]);
    } else {
        if (v[1] == 0 || v[1] % 8 || v[0] % v[1] || v[1] > (1u << 30)) {
            if (rank == 0)
                fprintf(stderr, "bad mpiio-test: transfers of whole words, at most 1 GiB, a block of whole transfers\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        bytes = mpiio_test(fh, v[0], v[1], (int)v[2]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double seconds = MPI_Wtime() - t_read;
    unsigned long long mine = bytes, total = 0;
    MPI_Reduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("cio %s read_s %.6f bytes %llu\n", workload, seconds, total);
    check(MPI_File_close(&fh), "close");
    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}

/* weft bench small-io: small and independent MPI-IO, three workloads on files named
 * PREFIX<name> (a local directory through ROMIO, or weft:/dir/):
 *
 *   small_io PREFIX N STEPS IOR_MIB DATASETS
 *
 * - btio: the pattern of NAS BT-IO's "simple" subtype, written from its description:
 *   an N^3 grid of cells of 5 doubles, block-decomposed over the ranks in 3D
 *   (MPI_Dims_create), the whole solution appended to the file every step, each rank
 *   writing its block one contiguous row (its cells along x) per MPI_File_write_at;
 *   then the file read back the same way (BT-IO's verification). Times: the write
 *   phase (the first write to the close) and the read phase (the first read to the
 *   close), the slowest rank's.
 * - ior: IOR-like, each rank its contiguous block of IOR_MIB MiB in 100,000-byte
 *   transfers, written to a fresh file (write: the first write, into pages the
 *   system must allocate), written again into the same file opened anew (rewrite),
 *   then read back by the next rank (IOR -C); independent (write_at/read_at) and
 *   collective (write_at_all/read_at_all); each phase timed from its first call to
 *   the close.
 * - h5mix: HDF5-like, DATASETS datasets, each: rank 0 writes 16 small metadata
 *   records (200-600 bytes, object header and index nodes near the file's start and
 *   after the previous dataset), then every rank its 1 MiB slice of the dataset with
 *   write_at_all; timed from the first write to the close.
 *
 * Prints one line per workload:  <name> write_s X read_s Y  (ior: also rewrite_s;
 * h5mix: write_s only). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, np;

static void die(const char *what, int rc)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, text);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS)                                                                    \
            die(#call, rc_);                                                                       \
    } while (0)

static double slowest(double t)
{
    double max = 0;
    MPI_Allreduce(&t, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return max;
}

static MPI_File open_file(const char *prefix, const char *name, int mode)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s", prefix, name);
    MPI_File fh;
    OK(MPI_File_open(MPI_COMM_WORLD, path, mode, MPI_INFO_NULL, &fh));
    return fh;
}

static void remove_file(const char *prefix, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s", prefix, name);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        MPI_File_delete(path, MPI_INFO_NULL);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void btio(const char *prefix, int n, int steps)
{
    int dims[3] = {0, 0, 0}, periods[3] = {0, 0, 0}, coords[3];
    MPI_Dims_create(np, 3, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
    MPI_Cart_coords(cart, rank, 3, coords);
    MPI_Comm_free(&cart);
    int lo[3], len[3];
    for (int d = 0; d < 3; d++) {
        lo[d] = (int)((long)n * coords[d] / dims[d]);
        len[d] = (int)((long)n * (coords[d] + 1) / dims[d]) - lo[d];
    }
    const int cell = 5 * sizeof(double);
    long row = (long)len[0] * 5;
    double *buf = malloc(row * sizeof(double));
    MPI_Status st;
    remove_file(prefix, "btio");
    MPI_File fh = open_file(prefix, "btio", MPI_MODE_CREATE | MPI_MODE_WRONLY);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int s = 0; s < steps; s++)
        for (int z = lo[2]; z < lo[2] + len[2]; z++)
            for (int y = lo[1]; y < lo[1] + len[1]; y++) {
                for (long i = 0; i < row; i++)
                    buf[i] = s + z * 1e-3 + y * 1e-6 + i * 1e-9;
                MPI_Offset at = (((MPI_Offset)s * n + z) * n * n + (MPI_Offset)y * n + lo[0]) * cell;
                OK(MPI_File_write_at(fh, at, buf, (int)row, MPI_DOUBLE, &st));
            }
    OK(MPI_File_close(&fh));
    double write_s = slowest(MPI_Wtime() - t);
    fh = open_file(prefix, "btio", MPI_MODE_RDONLY);
    MPI_Barrier(MPI_COMM_WORLD);
    long bad = 0;
    t = MPI_Wtime();
    for (int s = 0; s < steps; s++)
        for (int z = lo[2]; z < lo[2] + len[2]; z++)
            for (int y = lo[1]; y < lo[1] + len[1]; y++) {
                MPI_Offset at = (((MPI_Offset)s * n + z) * n * n + (MPI_Offset)y * n + lo[0]) * cell;
                OK(MPI_File_read_at(fh, at, buf, (int)row, MPI_DOUBLE, &st));
                bad += buf[row - 1] != s + z * 1e-3 + y * 1e-6 + (row - 1) * 1e-9;
            }
    OK(MPI_File_close(&fh));
    double read_s = slowest(MPI_Wtime() - t);
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (bad) {
        if (rank == 0)
            fprintf(stderr, "btio: %ld rows read back wrong\n", bad);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0)
        printf("btio write_s %.6f read_s %.6f\n", write_s, read_s);
    free(buf);
}

#define XFER 100000

/* Each rank's block of `transfers` transfers, each filled with its rank's and index's
 * byte. */
static void ior_write(MPI_File fh, char *buf, MPI_Offset block, long transfers, int collective)
{
    MPI_Status st;
    for (long i = 0; i < transfers; i++) {
        memset(buf, (int)(rank * 31 + i) & 0xff, XFER);
        MPI_Offset at = rank * block + i * XFER;
        if (collective)
            OK(MPI_File_write_at_all(fh, at, buf, XFER, MPI_BYTE, &st));
        else
            OK(MPI_File_write_at(fh, at, buf, XFER, MPI_BYTE, &st));
    }
}

static void ior(const char *prefix, int mib, int collective)
{
    const char *name = collective ? "ior_coll" : "ior_ind";
    long transfers = (long)mib * 1048576 / XFER;
    MPI_Offset block = (MPI_Offset)transfers * XFER;
    char *buf = malloc(XFER);
    MPI_Status st;
    remove_file(prefix, name);
    MPI_File fh = open_file(prefix, name, MPI_MODE_CREATE | MPI_MODE_WRONLY);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    ior_write(fh, buf, block, transfers, collective);
    OK(MPI_File_close(&fh));
    double write_s = slowest(MPI_Wtime() - t);
    fh = open_file(prefix, name, MPI_MODE_WRONLY);
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    ior_write(fh, buf, block, transfers, collective);
    OK(MPI_File_close(&fh));
    double rewrite_s = slowest(MPI_Wtime() - t);
    int other = (rank + 1) % np;
    fh = open_file(prefix, name, MPI_MODE_RDONLY);
    MPI_Barrier(MPI_COMM_WORLD);
    long bad = 0;
    t = MPI_Wtime();
    for (long i = 0; i < transfers; i++) {
        MPI_Offset at = other * block + i * XFER;
        if (collective)
            OK(MPI_File_read_at_all(fh, at, buf, XFER, MPI_BYTE, &st));
        else
            OK(MPI_File_read_at(fh, at, buf, XFER, MPI_BYTE, &st));
        bad += (unsigned char)buf[XFER - 1] != ((other * 31 + i) & 0xff);
    }
    OK(MPI_File_close(&fh));
    double read_s = slowest(MPI_Wtime() - t);
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (bad) {
        if (rank == 0)
            fprintf(stderr, "%s: %ld transfers read back wrong\n", name, bad);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0)
        printf("%s write_s %.6f rewrite_s %.6f read_s %.6f\n", name, write_s, rewrite_s, read_s);
    free(buf);
}

static void h5mix(const char *prefix, int datasets)
{
    const MPI_Offset slice = 1 << 20, superblock = 4096;
    char *data = malloc(slice);
    char meta[600];
    MPI_Status st;
    memset(data, 'a' + rank, slice);
    memset(meta, 'm', sizeof meta);
    remove_file(prefix, "h5mix");
    MPI_File fh = open_file(prefix, "h5mix", MPI_MODE_CREATE | MPI_MODE_WRONLY);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    MPI_Offset end = superblock;
    for (int d = 0; d < datasets; d++) {
        if (rank == 0) {
            /* Superblock and root group touched again, then the dataset's header and
             * index nodes after the previous dataset. */
            OK(MPI_File_write_at(fh, 0, meta, 96, MPI_BYTE, &st));
            OK(MPI_File_write_at(fh, 96 + 40 * (d % 64), meta, 40, MPI_BYTE, &st));
            for (int k = 0; k < 14; k++)
                OK(MPI_File_write_at(fh, end + k * 640, meta, 200 + (k * 37) % 400, MPI_BYTE, &st));
        }
        end += 14 * 640;
        OK(MPI_File_write_at_all(fh, end + rank * slice, data, (int)slice, MPI_BYTE, &st));
        end += np * slice;
    }
    OK(MPI_File_close(&fh));
    double write_s = slowest(MPI_Wtime() - t);
    if (rank == 0)
        printf("h5mix write_s %.6f\n", write_s);
    free(data);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (argc != 6) {
        if (rank == 0)
            fprintf(stderr, "usage: small_io PREFIX N STEPS IOR_MIB DATASETS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *prefix = argv[1];
    btio(prefix, atoi(argv[2]), atoi(argv[3]));
    ior(prefix, atoi(argv[4]), 0);
    ior(prefix, atoi(argv[4]), 1);
    h5mix(prefix, atoi(argv[5]));
    fflush(stdout);
    MPI_Finalize();
    return 0;
}

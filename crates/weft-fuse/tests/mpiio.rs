//! The MPI library's own MPI-IO on a file in the mount: 4 ranks (mpirun -np 4) write an
//! interleaved pattern with a strided file view and MPI_File_write_all, reopen, and read
//! it back with MPI_File_read_all, each rank checking its own and a neighbour's blocks.
//! Both Open MPI implementations run: OMPIO (fs component ufs) and ROMIO.
//!
//! What works on FUSE and why: neither needs anything beyond POSIX calls. ROMIO's
//! generic UNIX driver takes fcntl locks around read-modify-write of holes in collective
//! writes; the mount does not implement locks itself, so the kernel keeps them locally,
//! which is correct for ranks on one node sharing one mount (ranks on several nodes
//! would need locks through the cluster, which Weft's own MPI-IO layer avoids needing).

mod common;

use common::Mount;
use std::path::Path;
use std::process::Command;
use weft_testkit::TestCluster;

const RANKS: usize = 4;
/// Ints per block (4000 bytes: blocks straddle stripes and pages) and blocks per rank.
const BLOCK_INTS: usize = 1000;
const BLOCKS: usize = 64;

const PROGRAM: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define BLOCK_INTS 1000
#define BLOCKS 64

static int value(int rank, int i) { return rank * 1000003 + i; }

/* Sets a view on the blocks of `owner`: block b at ints (b * size + owner) * BLOCK_INTS. */
static int view_of(MPI_File fh, int owner, int size, MPI_Datatype filetype) {
    return MPI_File_set_view(fh, (MPI_Offset)owner * BLOCK_INTS * sizeof(int), MPI_INT, filetype,
                             "native", MPI_INFO_NULL);
}

static void check(int err, const char *what, int rank) {
    if (err != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(err, msg, &len);
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, errors = 0, count;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Datatype filetype;
    MPI_Type_vector(BLOCKS, BLOCK_INTS, BLOCK_INTS * size, MPI_INT, &filetype);
    MPI_Type_commit(&filetype);
    int n = BLOCKS * BLOCK_INTS;
    int *buf = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) buf[i] = value(rank, i);

    MPI_File fh;
    MPI_Status status;
    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh),
          "open for writing", rank);
    check(view_of(fh, rank, size, filetype), "set_view", rank);
    check(MPI_File_write_all(fh, buf, n, MPI_INT, &status), "write_all", rank);
    MPI_Get_count(&status, MPI_INT, &count);
    if (count != n) { fprintf(stderr, "rank %d: wrote %d of %d\n", rank, count, n); errors++; }
    check(MPI_File_close(&fh), "close", rank);

    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), "open for reading", rank);
    MPI_Offset file_size;
    MPI_File_get_size(fh, &file_size);
    if (file_size != (MPI_Offset)size * n * sizeof(int)) {
        fprintf(stderr, "rank %d: file size %lld\n", rank, (long long)file_size);
        errors++;
    }
    for (int pass = 0; pass < 2; pass++) {
        int owner = (rank + pass) % size; /* its own blocks, then a neighbour's */
        for (int i = 0; i < n; i++) buf[i] = -1;
        check(view_of(fh, owner, size, filetype), "set_view", rank);
        check(MPI_File_read_all(fh, buf, n, MPI_INT, &status), "read_all", rank);
        for (int i = 0; i < n; i++) {
            if (buf[i] != value(owner, i)) {
                fprintf(stderr, "rank %d: owner %d int %d is %d, not %d\n", rank, owner, i, buf[i], value(owner, i));
                errors++;
                break;
            }
        }
    }
    check(MPI_File_close(&fh), "close", rank);
    int total;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s\n", total == 0 ? "mpiio ok" : "mpiio FAILED");
    free(buf);
    MPI_Type_free(&filetype);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
"#;

fn compile(dir: &Path) -> std::path::PathBuf {
    let source = dir.join("mpiio_check.c");
    let binary = dir.join("mpiio_check");
    std::fs::write(&source, PROGRAM).unwrap();
    let out = Command::new("mpicc")
        .arg("-O2")
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("mpicc");
    assert!(
        out.status.success(),
        "mpicc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    binary
}

fn expected_file() -> Vec<u8> {
    let mut out = Vec::with_capacity(RANKS * BLOCKS * BLOCK_INTS * 4);
    for b in 0..BLOCKS {
        for rank in 0..RANKS {
            for k in 0..BLOCK_INTS {
                let i = b * BLOCK_INTS + k;
                out.extend_from_slice(&((rank * 1_000_003 + i) as i32).to_ne_bytes());
            }
        }
    }
    out
}

fn run(binary: &Path, file: &Path, io_component: &str) {
    let mut mpirun = Command::new("mpirun");
    weft_testkit::mpi::own_session_dir(&mut mpirun);
    let out = mpirun
        .args([
            "-np",
            &RANKS.to_string(),
            "--oversubscribe",
            "--mca",
            "io",
            io_component,
        ])
        // Shared-memory transport without ptrace-based single copy (refused in containers).
        .args([
            "--mca",
            "btl",
            "self,vader",
            "--mca",
            "btl_vader_single_copy_mechanism",
            "none",
        ])
        .arg(binary)
        .arg(file)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("mpirun");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("mpiio ok"),
        "mpirun with io {io_component}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mpi_io_collective_write_and_read_through_the_mount() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let binary = compile(mount.scratch());
    let expected = expected_file();
    for component in ["ompio", "romio321"] {
        let file = mount.join(&format!("{component}.dat"));
        run(&binary, &file, component);
        assert!(
            common::read_all(&file) == expected,
            "{component}: the file is not the interleaved pattern"
        );
        // The native client sees the same bytes.
        let native = cluster.client().stat(&format!("/{component}.dat")).unwrap();
        assert_eq!(native.size, expected.len() as u64);
    }
}

//! Programs nobody here wrote, with libweft_posix.so preloaded on a real mount: each
//! run gives byte-identical results to the same run in a local directory, and the
//! library's counters prove that the data went to the io servers natively (the test
//! fails if interception silently stops).

#[path = "../../weft-fuse/tests/common/mod.rs"]
mod common;
mod preload;

use common::{sh, Mount};
use preload::{compile, sh_lib, totals};
use std::path::Path;
use weft_testkit::TestCluster;

/// The work of the coreutils: cp in, cat, dd with seeks, sort, tar out and back,
/// cmp, sha256sum; the sums go to `../sums-DIR.txt` (a tar archive itself holds
/// times, and directories list in another order: its sorted listing and extracted files are compared).
const COREUTILS: &str = r#"
set -e
cp "$SRC/big.dat" big.dat
cat big.dat > cat.dat
dd if=big.dat of=dd.dat bs=64k skip=3 seek=5 count=7 status=none
dd if=big.dat of=dd.dat bs=4096 skip=1 seek=1000 count=3 conv=notrunc status=none
sort "$SRC/lines.txt" > sorted.txt
cp "$SRC/lines.txt" lines.txt
sort lines.txt -o sorted2.txt
mkdir -p t && cp big.dat lines.txt t/ && tar cf t.tar t && rm -r t && tar xf t.tar
cmp big.dat t/big.dat
tar tf t.tar | sort > tarlist.txt
cmp -l big.dat dd.dat | wc -l > cmp.txt || true
sha256sum big.dat cat.dat dd.dat sorted.txt sorted2.txt tarlist.txt t/big.dat t/lines.txt cmp.txt > ../sums-$(basename "$PWD").txt
"#;

#[test]
fn coreutils_with_the_library_match_a_local_directory() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let src = scratch.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big.dat"), common::pattern(7, 3_000_017)).unwrap();
    let lines: String = (0..20_000u64)
        .map(|i| format!("{:08x}\n", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32))
        .collect();
    std::fs::write(src.join("lines.txt"), lines).unwrap();

    let local = scratch.join("local");
    std::fs::create_dir_all(&local).unwrap();
    let mounted = mount.join("w");
    std::fs::create_dir_all(&mounted).unwrap();
    let script = format!("SRC={}\n{COREUTILS}", src.display());
    sh(&local, &script);
    let stats = scratch.join("stats");
    sh_lib(&mounted, &script, &stats);

    let expected = std::fs::read_to_string(scratch.join("sums-local.txt")).unwrap();
    let got = std::fs::read_to_string(mount.join("sums-w.txt")).unwrap();
    assert_eq!(expected, got, "the library's run differs from the local one");
    // Read back through the mount alone (no library): the same bytes.
    assert_eq!(
        std::fs::read(local.join("dd.dat")).unwrap(),
        std::fs::read(mounted.join("dd.dat")).unwrap()
    );
    let t = totals(&stats);
    eprintln!("library counters: {t:?}");
    assert!(t["opens"] >= 10, "files served natively: {t:?}");
    assert!(t["read_bytes"] >= 3 * 3_000_017, "bytes read natively: {t:?}");
    assert!(
        t["written_bytes"] >= 3 * 3_000_017,
        "bytes written natively: {t:?}"
    );
    assert_eq!(t["errors"], 0, "{t:?}");
}

/// `weft run` preloads the library (counters prove it served the copy), and a second
/// copy of the library preloaded beside the first serves nothing and breaks nothing.
#[test]
fn weft_run_serves_a_program_and_a_second_copy_of_the_library_stays_out() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let data = common::pattern(3, 2_500_000);
    std::fs::write(scratch.join("in.dat"), &data).unwrap();
    let stats = scratch.join("stats");
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .arg("run")
        .arg("--stats")
        .arg(&stats)
        .arg("cp")
        .arg(scratch.join("in.dat"))
        .arg(mount.join("copy.dat"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(mount.join("copy.dat")).unwrap(), data);
    let t = totals(&stats);
    assert!(
        t["written_bytes"] >= data.len() as u64,
        "weft run served the copy: {t:?}"
    );

    let copy = scratch.join("libweft_posix_copy.so");
    std::fs::copy(preload::library(), &copy).unwrap();
    let twice = scratch.join("stats-twice");
    let out = std::process::Command::new("cat")
        .arg(mount.join("copy.dat"))
        .env(
            "LD_PRELOAD",
            format!("{} {}", preload::library().display(), copy.display()),
        )
        .env("WEFT_POSIX_STATS", &twice)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        out.stdout, data,
        "cat with the library loaded twice read other bytes"
    );
    let lines = std::fs::read_to_string(&twice).unwrap();
    let served: Vec<&str> = lines.lines().filter(|l| !l.contains(" opens=0 ")).collect();
    assert_eq!(served.len(), 1, "exactly one copy served: {lines}");
}

/// A small C project: two units, a header, a Makefile, and the program it builds run.
const PROJECT_MAKEFILE: &str = "CFLAGS = -O2 -Wall\n\
app: main.o util.o\n\t$(CC) -o app main.o util.o\n\
main.o: main.c util.h\n\
util.o: util.c util.h\n\
out.txt: app\n\t./app 12345 > out.txt\n";
const PROJECT_HEADER: &str = "unsigned long mix(unsigned long seed, int rounds);\n";
const PROJECT_UTIL: &str = r#"#include "util.h"
unsigned long mix(unsigned long seed, int rounds) {
    for (int i = 0; i < rounds; i++) seed = seed * 6364136223846793005UL + 1442695040888963407UL;
    return seed ^ (seed >> 29);
}
"#;
const PROJECT_MAIN: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include "util.h"
static const char table[] = "a table that makes the object file a little larger";
int main(int argc, char **argv) {
    unsigned long s = argc > 1 ? strtoul(argv[1], 0, 10) : 1;
    for (int i = 0; i < 8; i++) printf("%d %lx %c\n", i, mix(s, i * 1000), table[i]);
    return 0;
}
"#;

/// gcc and make building a small C project inside the mount with the library (make,
/// cc1, as, ld and the built program all preloaded) give the same object files, program
/// and output as the same build in a local directory.
#[test]
fn gcc_builds_a_c_project_in_the_mount_as_in_a_local_directory() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let write_project = |dir: &Path| {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("Makefile"), PROJECT_MAKEFILE).unwrap();
        std::fs::write(dir.join("util.h"), PROJECT_HEADER).unwrap();
        std::fs::write(dir.join("util.c"), PROJECT_UTIL).unwrap();
        std::fs::write(dir.join("main.c"), PROJECT_MAIN).unwrap();
    };
    let local = scratch.join("local");
    let mounted = mount.join("proj");
    write_project(&local);
    write_project(&mounted);
    let build = "make -s CC=gcc out.txt && sha256sum main.o util.o app out.txt";
    let expected = sh(&local, build);
    let stats = scratch.join("stats");
    let got = sh_lib(&mounted, build, &stats);
    assert_eq!(expected, got, "the build in the mount made other files");
    assert!(got.contains("out.txt"));
    let t = totals(&stats);
    eprintln!("library counters: {t:?}");
    // make, gcc, cc1, as, collect2 and ld read small sources through the mount and
    // write with stdio or mmap (which the library leaves to the kernel): what counts
    // here is that every one of them ran with the library loaded and got it right.
    let processes = std::fs::read_to_string(&stats).unwrap().lines().count();
    assert!(
        processes >= 5,
        "programs of the build that ran with the library: {processes}"
    );
    assert_eq!(t["errors"], 0, "{t:?}");
}

/// fio's psync engine (jobs as threads: fio's default forked job processes would run
/// without the library, which a forked child leaves to the kernel): random writes with crc32c verification (fio fails on a bad
/// block), and a mixed random read/write job with unaligned sizes whose file must be
/// byte-identical to the same job's file in a local directory.
#[test]
fn fio_psync_random_reads_and_writes_verify_and_match_a_local_run() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let jobs = "set -e
fio --thread --name=v --filename=verify.dat --ioengine=psync --rw=randwrite --bs=4k --size=4m \
  --randseed=5 --verify=crc32c --verify_fatal=1 --do_verify=1 --minimal > verify.out
fio --thread --name=mix --filename=mix.dat --ioengine=psync --rw=randrw --rwmixread=40 \
  --bsrange=512-16k --bs_unaligned --size=3m --io_size=6m --randrepeat=1 --randseed=77 \
  --refill_buffers=1 --norandommap --minimal > mix.out
sha256sum mix.dat";
    let local = scratch.join("local");
    std::fs::create_dir_all(&local).unwrap();
    let mounted = mount.join("fio");
    std::fs::create_dir_all(&mounted).unwrap();
    let expected = sh(&local, jobs);
    let stats = scratch.join("stats");
    let got = sh_lib(&mounted, jobs, &stats);
    assert_eq!(
        expected, got,
        "fio's mixed job left other bytes through the library"
    );
    let t = totals(&stats);
    eprintln!("library counters: {t:?}");
    assert!(
        t["writes"] >= 1000 && t["reads"] >= 1000,
        "fio's I/O was served natively: {t:?}"
    );
    assert_eq!(t["errors"], 0, "{t:?}");
}

/// HDF5's sec2 driver (plain POSIX read/write at offsets) from a C program: chunked and
/// contiguous datasets written in scattered hyperslabs, read back; the file's bytes and
/// the program's output are those of the same run in a local directory.
#[test]
fn hdf5_sec2_files_match_a_local_run() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let program = compile(
        "mpicc",
        &scratch,
        "h5sec2",
        include_str!("c/h5sec2.c"),
        &[
            "-I/usr/include/hdf5/openmpi",
            "-L/usr/lib/x86_64-linux-gnu/hdf5/openmpi",
            "-lhdf5",
        ],
    );
    let local = scratch.join("local.h5");
    let expected = sh(&scratch, &format!("{} {}", program.display(), local.display()));
    let stats = scratch.join("stats");
    let mounted = mount.join("sec2.h5");
    let got = sh_lib(
        &scratch,
        &format!("{} {}", program.display(), mounted.display()),
        &stats,
    );
    assert_eq!(expected, got, "HDF5 read other values through the library");
    assert!(
        std::fs::read(&local).unwrap() == std::fs::read(&mounted).unwrap(),
        "the HDF5 file's bytes differ from the local run's"
    );
    let t = totals(&stats);
    eprintln!("library counters: {t:?}");
    assert!(
        t["writes"] >= 20 && t["reads"] >= 5,
        "HDF5's I/O was served natively: {t:?}"
    );
    assert_eq!(t["errors"], 0, "{t:?}");
}

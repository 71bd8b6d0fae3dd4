//! Programs nobody here wrote, with libweft_posix.so preloaded on a real mount: each
//! run gives byte-identical results to the same run in a local directory, and the
//! library's counters prove that the data went to the io servers natively (the test
//! fails if interception silently stops).

#[path = "../../weft-fuse/tests/common/mod.rs"]
mod common;
mod preload;

use common::{sh, Mount};
use preload::{sh_lib, totals};
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

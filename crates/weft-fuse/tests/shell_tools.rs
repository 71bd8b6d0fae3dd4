//! Unmodified shell tools on the mount: cp, ls -l, mv, rm -r, dd bs=1M, sha256sum, tar
//! and find do the same things in the mount and in a local directory, and what they
//! show afterwards is identical.

mod common;

use common::{sh, Mount};
use std::path::Path;
use weft_testkit::{ClusterOptions, TestCluster};

/// A source tree on local disk: files of awkward sizes around stripes (64 KiB) and FUSE
/// requests (1 MiB), an empty file, nested directories and a symbolic link.
fn make_source(root: &Path) {
    let sizes: [usize; 9] = [
        0,
        1,
        4095,
        4097,
        65_536,
        65_543,
        1 << 20,
        (1 << 20) + 3,
        5_000_017,
    ];
    for (k, size) in sizes.iter().enumerate() {
        let dir = root.join(["", "sub", "sub/deeper"][k % 3]);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("file{k}.dat")),
            common::pattern(k as u64 + 1, *size),
        )
        .unwrap();
    }
    std::fs::write(root.join("notes.txt"), b"weft\n").unwrap();
    std::os::unix::fs::symlink("sub/file1.dat", root.join("link")).unwrap();
}

/// What the tools show of a tree: find's types, modes, sizes, names and link targets,
/// sha256 of every file, and ls -l of the files (times and block totals left out: they
/// legitimately differ between the two trees).
fn view(root: &Path) -> String {
    let listing = sh(root, "find . -printf '%y %m %s %p %l\\n' | grep -v '^d' | sort");
    let dirs = sh(root, "find . -type d -printf '%m %p\\n' | sort");
    let sums = sh(root, "find . -type f -print0 | sort -z | xargs -0 -r sha256sum");
    let ls = sh(root, "ls -lnR --time-style=+ . | grep -v '^total' | grep -v '^d'");
    let big = sh(root, "find . -type f -size +1M | sort");
    format!("{listing}\n{dirs}\n{sums}\n{ls}\n{big}")
}

fn same_in_both(local: &Path, mounted: &Path, script: &str) {
    sh(local, script);
    sh(mounted, script);
    let (expected, got) = (view(local), view(mounted));
    assert_eq!(
        expected, got,
        "after `{script}` the mount differs from the local directory"
    );
}

#[test]
fn cp_ls_mv_rm_dd_and_find_match_a_local_directory() {
    shell_tools_match_a_local_directory(&TestCluster::start());
}

/// The same through the cache tier (two separate cache managers with little memory,
/// so blocks are evicted and written back while the tools run): every file is cached.
#[test]
fn shell_tools_on_cached_files_match_a_local_directory() {
    let cluster = TestCluster::start_with(&ClusterOptions::cached("2", "4M"));
    shell_tools_match_a_local_directory(&cluster);
}

fn shell_tools_match_a_local_directory(cluster: &TestCluster) {
    let mount = Mount::new(cluster);
    let source = mount.scratch().join("source");
    let local = mount.scratch().join("local");
    std::fs::create_dir_all(&local).unwrap();
    make_source(&source);
    let src = source.display();

    same_in_both(
        &local,
        mount.path(),
        &format!("cp -r {src} tree && cp -p {src}/notes.txt kept.txt"),
    );
    same_in_both(
        &local,
        mount.path(),
        &format!("dd if={src}/sub/deeper/file8.dat of=dd.bin bs=1M status=none"),
    );
    // Overwrite the middle of a file in place, not on request boundaries.
    same_in_both(
        &local,
        mount.path(),
        "dd if=tree/file6.dat of=dd.bin bs=1M seek=1 count=2 conv=notrunc status=none \
         && dd if=tree/file0.dat of=dd.bin bs=1000 seek=777 conv=notrunc status=none \
         && dd if=/dev/zero of=sparse.bin bs=1M seek=3 count=1 status=none",
    );
    same_in_both(
        &local,
        mount.path(),
        "mv tree/file0.dat tree/sub/moved.dat && mv tree/sub tree/renamed && mv kept.txt tree/renamed/",
    );
    same_in_both(
        &local,
        mount.path(),
        "chmod 600 dd.bin && chmod -R g+w tree/renamed && ln -s nowhere dangling",
    );
    same_in_both(
        &local,
        mount.path(),
        "cat tree/renamed/moved.dat tree/notes.txt > cat.out && truncate -s 70000 dd.bin",
    );
    same_in_both(&local, mount.path(), "rm -r tree/renamed && rm dangling");

    // dd's own reads through the mount: a whole-file copy back out, 1 MiB requests.
    let back = mount.scratch().join("back.bin");
    sh(
        mount.path(),
        &format!("dd if=sparse.bin of={} bs=1M status=none", back.display()),
    );
    assert!(common::read_all(&back) == common::read_all(&local.join("sparse.bin")));

    same_in_both(&local, mount.path(), "rm -r tree dd.bin sparse.bin cat.out");
    assert_eq!(sh(mount.path(), "ls -A"), "");
}

#[test]
fn tar_of_thousands_of_files_round_trips() {
    const DIRS: usize = 20;
    const FILES_PER_DIR: usize = 100;
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let local = mount.scratch().join("local");
    for d in 0..DIRS {
        let dir = local.join(format!("tree/d{d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES_PER_DIR {
            let k = d * FILES_PER_DIR + f;
            std::fs::write(
                dir.join(format!("f{f:03}.txt")),
                common::pattern(k as u64, k % 3000),
            )
            .unwrap();
        }
    }
    let scratch = mount.scratch().display().to_string();
    sh(&local, &format!("tar cf {scratch}/in.tar tree"));
    // Into the mount, and out of it again into a third place.
    sh(mount.path(), &format!("tar xf {scratch}/in.tar"));
    sh(mount.path(), &format!("tar cf {scratch}/out.tar tree"));
    std::fs::create_dir(mount.scratch().join("back")).unwrap();
    sh(
        &mount.scratch().join("back"),
        &format!("tar xf {scratch}/out.tar"),
    );

    let files = sh(mount.path(), "find tree -type f | wc -l");
    assert_eq!(files.trim(), (DIRS * FILES_PER_DIR).to_string());
    // tar's own listing (modes, owners, sizes, times to the second, names) is identical:
    // extraction through the mount kept every attribute tar sets.
    let listing = |archive: &str| {
        sh(
            mount.scratch(),
            &format!("tar tvf {archive} --full-time | sort -k6"),
        )
    };
    assert_eq!(listing("in.tar"), listing("out.tar"));
    assert_eq!(view(&local), view(mount.path()));
    sh(mount.scratch(), "diff -r local/tree back/tree");
    // find's tests run on the mount's attributes.
    assert_eq!(
        sh(&local, "find tree -name 'f09*' -size +1k | sort"),
        sh(mount.path(), "find tree -name 'f09*' -size +1k | sort")
    );
    sh(mount.path(), "rm -r tree");
    assert_eq!(sh(mount.path(), "ls -A"), "");
}

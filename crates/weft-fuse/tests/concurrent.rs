//! Concurrent access through mounts: processes writing disjoint regions of one file, two
//! mounts of one cluster (two clients), and close-to-open consistency between them.

mod common;

use common::{sh, Mount};
use std::io::Write;
use std::process::Command;
use weft_testkit::TestCluster;

/// Region boundaries that fall inside pages, stripes and FUSE requests.
const REGION_BYTES: [usize; 4] = [3_000_001, 2_500_003, 65_537, 4_000_000];

/// Writes `regions` of one file at once, one `dd` process per region, each through the
/// mount given for it; returns the expected whole file.
fn write_regions(file_in_mounts: &[std::path::PathBuf], scratch: &std::path::Path) -> Vec<u8> {
    let mut expected = Vec::new();
    let mut children = Vec::new();
    let mut offset = 0usize;
    for (k, len) in REGION_BYTES.iter().enumerate() {
        let data = common::pattern(100 + k as u64, *len);
        let source = scratch.join(format!("region{k}"));
        std::fs::write(&source, &data).unwrap();
        expected.extend_from_slice(&data);
        let target = &file_in_mounts[k % file_in_mounts.len()];
        children.push(
            Command::new("dd")
                .arg(format!("if={}", source.display()))
                .arg(format!("of={}", target.display()))
                .args(["bs=1M", "conv=notrunc", "oflag=seek_bytes", "status=none"])
                .arg(format!("seek={offset}"))
                .spawn()
                .unwrap(),
        );
        offset += len;
    }
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    expected
}

#[test]
fn processes_write_disjoint_regions_of_one_file() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let file = mount.join("shared.bin");
    std::fs::File::create(&file).unwrap();
    let expected = write_regions(std::slice::from_ref(&file), mount.scratch());
    assert_eq!(std::fs::metadata(&file).unwrap().len(), expected.len() as u64);
    assert!(
        common::read_all(&file) == expected,
        "the regions do not read back as written"
    );
    // The native client agrees.
    let native = cluster.client().stat("/shared.bin").unwrap();
    assert_eq!(native.size, expected.len() as u64);
}

#[test]
fn two_mounts_are_two_coherent_clients() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    std::fs::File::create(a.join("both.bin")).unwrap();
    let expected = write_regions(&[a.join("both.bin"), b.join("both.bin")], a.scratch());
    assert!(common::read_all(&a.join("both.bin")) == expected);
    assert!(common::read_all(&b.join("both.bin")) == expected);

    // Close-to-open: b reads (and caches) the first version; a replaces the content with
    // a longer one and closes; b's next open sees all of it, within the attribute TTL.
    std::fs::write(a.join("cto.txt"), b"version one\n").unwrap();
    assert_eq!(std::fs::read(b.join("cto.txt")).unwrap(), b"version one\n");
    assert_eq!(std::fs::metadata(b.join("cto.txt")).unwrap().len(), 12);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(a.join("cto.txt"))
        .unwrap();
    f.write_all(b"version two, longer\n").unwrap();
    drop(f);
    assert_eq!(
        std::fs::read(b.join("cto.txt")).unwrap(),
        b"version two, longer\n"
    );
    // ls -l right after close, on the writer's mount and on the other.
    let ls = |m: &Mount| {
        sh(m.path(), "ls -ln cto.txt")
            .split_whitespace()
            .nth(4)
            .unwrap()
            .to_string()
    };
    assert_eq!(ls(&a), "20");
    assert_eq!(ls(&b), "20");

    // A name made by one client appears to the other once its cached lookup expires.
    std::fs::create_dir(a.join("made-by-a")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !b.join("made-by-a").is_dir() {
        assert!(std::time::Instant::now() < deadline, "b never saw a's directory");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_stalled_server_does_not_hold_up_other_files() {
    // Two files on two different io servers; the first one's server is stopped
    // (SIGSTOP) while a reader waits on it. A mount serving one request at a time would
    // leave the second file's reader waiting too.
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let mut servers = Vec::new();
    for (k, first) in [(0, 0), (1, 1)] {
        let dir = mount.join(&format!("on{k}"));
        std::fs::create_dir(&dir).unwrap();
        sh(
            mount.path(),
            &format!("setfattr -n user.weft.layout -v 'stripe_count=1 first_server={first}' on{k}"),
        );
        std::fs::write(dir.join("data"), common::pattern(k, 2_000_000)).unwrap();
        let layout = sh(
            mount.path(),
            &format!("getfattr --only-values -n user.weft.layout on{k}/data"),
        );
        let servers_field = layout.split_whitespace().find_map(|f| f.strip_prefix("servers="));
        let server: u32 = servers_field.unwrap().parse().unwrap();
        servers.push(server);
    }
    assert_ne!(
        servers[0], servers[1],
        "the two files share a server: {servers:?}"
    );

    cluster.signal(servers[0], libc::SIGSTOP);
    let stalled_path = mount.join("on0/data");
    let stalled = std::thread::spawn(move || common::read_all(&stalled_path));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    let other = common::read_all(&mount.join("on1/data"));
    let waited = started.elapsed();
    cluster.signal(servers[0], libc::SIGCONT);
    assert!(other == common::pattern(1, 2_000_000));
    assert!(
        waited < std::time::Duration::from_secs(5),
        "reading a file on a running server took {waited:?} while another server was stopped"
    );
    assert!(stalled.join().unwrap() == common::pattern(0, 2_000_000));
}

/// rename(2) with RENAME_NOREPLACE through one mount racing an exclusive create of the
/// target through another: each round exactly one of them succeeds, never both. The
/// mount used to ask the manager whether the target existed and then rename, so a
/// file the other mount created in between was replaced, lost to its creator.
#[test]
fn a_rename_without_replacing_never_replaces_a_file_created_meanwhile() {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::sync::{Arc, Barrier};
    const ROUNDS: usize = 300;
    let cluster = TestCluster::start();
    let one = Mount::new(&cluster);
    let two = Mount::new(&cluster);
    for k in 0..ROUNDS {
        std::fs::create_dir(one.join(&format!("r{k}"))).unwrap();
        std::fs::write(one.join(&format!("r{k}/src")), b"renamed").unwrap();
    }
    let barrier = Arc::new(Barrier::new(2));
    let renamer = {
        let (barrier, root) = (barrier.clone(), one.path().to_owned());
        std::thread::spawn(move || {
            (0..ROUNDS)
                .map(|k| {
                    let path = |name: &str| {
                        CString::new(root.join(format!("r{k}/{name}")).as_os_str().as_bytes()).unwrap()
                    };
                    let (src, dst) = (path("src"), path("dst"));
                    barrier.wait();
                    // SAFETY: valid NUL-terminated paths.
                    let rc = unsafe {
                        libc::renameat2(
                            libc::AT_FDCWD,
                            src.as_ptr(),
                            libc::AT_FDCWD,
                            dst.as_ptr(),
                            libc::RENAME_NOREPLACE,
                        )
                    };
                    let error = std::io::Error::last_os_error();
                    assert!(
                        rc == 0 || error.raw_os_error() == Some(libc::EEXIST),
                        "round {k}: {error}"
                    );
                    rc == 0
                })
                .collect::<Vec<bool>>()
        })
    };
    let creator = {
        let (barrier, root) = (barrier.clone(), two.path().to_owned());
        std::thread::spawn(move || {
            (0..ROUNDS)
                .map(|k| {
                    let dst = root.join(format!("r{k}/dst"));
                    barrier.wait();
                    match std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&dst)
                    {
                        Ok(mut f) => {
                            f.write_all(b"created").unwrap();
                            true
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
                        Err(e) => panic!("round {k}: {e}"),
                    }
                })
                .collect::<Vec<bool>>()
        })
    };
    let (renamed, created) = (renamer.join().unwrap(), creator.join().unwrap());
    // Read through the native client: either mount may still hold the negative entry
    // its losing side looked up.
    let client = cluster.client();
    for k in 0..ROUNDS {
        assert!(
            renamed[k] != created[k],
            "round {k}: renamed {} created {}",
            renamed[k],
            created[k]
        );
        let expected: &[u8] = if renamed[k] { b"renamed" } else { b"created" };
        let file = client
            .open(&format!("/r{k}/dst"), &weft_client::OpenOptions::default())
            .unwrap();
        let mut got = vec![0u8; 16];
        let n = file.read_at(0, &mut got).unwrap();
        assert_eq!(&got[..n], expected, "round {k}");
    }
    let wins = renamed.iter().filter(|r| **r).count();
    eprintln!("{wins} of {ROUNDS} rounds won by the rename");
}

//! Quotas end to end on a real cluster (`claimed` identity mode, so that the test's
//! clients act as users who are not root): a user's file limit refuses creates of
//! every kind with EDQUOT and lets them again after a removal; usage follows unlink,
//! chown and chgrp and survives a manager killed and restarted; a recount from the
//! namespace agrees with a walk of it; a byte limit stops a writer once the manager
//! settled its bytes, within a bounded time, and a removal frees it again; projects are
//! inherited by what is made in a directory and limit it; only root sets quotas, and a
//! user sees only his own.

use std::time::{Duration, Instant};
use weft_client::{Client, CreateOptions, Cred, ErrorCode, FileKind, OpenOptions, SetAttr};
use weft_proto::quota::{QuotaKind, QuotaLimits, QuotaReport};
use weft_testkit::{ClusterOptions, TestCluster};

const ALICE: u32 = 5101;
const BOB: u32 = 5102;
const STAFF: u32 = 5200;
const EDQUOT: i32 = 122;
const WRITE: OpenOptions = OpenOptions {
    write: true,
    create: None,
    truncate: false,
};

fn user(root: &Client, uid: u32) -> Client {
    root.with_cred(Cred {
        uid,
        gid: STAFF,
        groups: vec![STAFF],
    })
}

fn files_hard(n: u64) -> QuotaLimits {
    QuotaLimits {
        inodes_hard: n,
        ..Default::default()
    }
}

/// Inodes owned by `uid` (or with `group`, by that gid), counted by walking the
/// namespace: what the manager's usage must agree with.
fn walk_count(root: &Client, by: impl Fn(u32, u32) -> bool) -> u64 {
    let mut count = 0;
    let mut dirs = vec!["/".to_string()];
    let top = root.stat("/").unwrap();
    if by(top.uid, top.gid) {
        count += 1;
    }
    while let Some(dir) = dirs.pop() {
        for entry in root.readdir(&dir).unwrap() {
            let path = weft_client::path::join(&dir, &entry.name.to_string());
            let attr = root.stat(&path).unwrap();
            if by(attr.uid, attr.gid) {
                count += 1;
            }
            if attr.kind == FileKind::Directory {
                dirs.push(path);
            }
        }
    }
    count
}

#[track_caller]
fn quota_exceeded<T>(result: Result<T, weft_client::ClientError>, what: &str) -> String {
    let Err(e) = result else {
        panic!("{what}: not refused");
    };
    assert_eq!(e.code(), ErrorCode::QuotaExceeded, "{what}: {e}");
    assert_eq!(e.errno(), EDQUOT, "{what}");
    e.to_string()
}

/// Polls `cond` on the quota of `kind` `id` for up to 20 s (the settler runs every
/// half second); the last report if it never held.
fn wait_for(
    root: &Client,
    kind: QuotaKind,
    id: u32,
    cond: impl Fn(&QuotaReport) -> bool,
) -> Result<QuotaReport, QuotaReport> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let report = root.quota(kind, id).unwrap();
        if cond(&report) {
            return Ok(report);
        }
        if Instant::now() > deadline {
            return Err(report);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn file_limits_refuse_creates_and_usage_follows_unlink_chown_and_restarts() {
    let cluster = TestCluster::start_with(&ClusterOptions::claimed_identity());
    let root = cluster.client();
    root.mkdir("/home", 0o755).unwrap();
    root.mkdir("/home/alice", 0o755).unwrap();
    let give = SetAttr {
        uid: Some(ALICE),
        gid: Some(STAFF),
        ..Default::default()
    };
    root.setattr("/home/alice", &give).unwrap();
    let alice = user(&root, ALICE);
    // Her directory and three files: four inodes, her hard limit.
    root.set_quota(QuotaKind::User, ALICE, files_hard(4)).unwrap();
    for i in 0..3 {
        alice
            .create(&format!("/home/alice/f{i}"), &CreateOptions::default())
            .unwrap();
    }
    assert_eq!(alice.quota(QuotaKind::User, ALICE).unwrap().usage.inodes, 4);
    let said = quota_exceeded(
        alice.create("/home/alice/f3", &CreateOptions::default()),
        "a fifth file",
    );
    assert!(said.contains("quota"), "{said}");
    quota_exceeded(alice.mkdir("/home/alice/d", 0o755), "a directory");
    quota_exceeded(alice.symlink("f0", "/home/alice/l"), "a symlink");
    assert!(
        alice.stat("/home/alice/f3").is_err(),
        "a refused create left a name"
    );
    // Bob, in the same group, is not limited by her quota.
    root.mkdir("/home/bob", 0o777).unwrap();
    let bob = user(&root, BOB);
    bob.create("/home/bob/b0", &CreateOptions::default()).unwrap();

    // A removal makes room again.
    alice.unlink("/home/alice/f2").unwrap();
    alice.mkdir("/home/alice/d", 0o755).unwrap();
    quota_exceeded(
        alice.create("/home/alice/f2", &CreateOptions::default()),
        "past the limit again",
    );

    // A chown moves the inode to the new owner; a chgrp to the new group.
    root.setattr(
        "/home/alice/f1",
        &SetAttr {
            uid: Some(BOB),
            ..Default::default()
        },
    )
    .unwrap();
    root.setattr(
        "/home/alice/f0",
        &SetAttr {
            gid: Some(BOB),
            ..Default::default()
        },
    )
    .unwrap();
    alice.create("/home/alice/f2", &CreateOptions::default()).unwrap();
    let expect = |uid: u32| walk_count(&root, |u, _| u == uid);
    let group = |gid: u32| walk_count(&root, |_, g| g == gid);
    for (kind, id, walked) in [
        (QuotaKind::User, ALICE, expect(ALICE)),
        (QuotaKind::User, BOB, expect(BOB)),
        (QuotaKind::Group, STAFF, group(STAFF)),
        (QuotaKind::Group, BOB, group(BOB)),
        (QuotaKind::User, 0, expect(0)),
    ] {
        assert_eq!(
            root.quota(kind, id).unwrap().usage.inodes,
            walked,
            "{kind:?} {id}"
        );
    }
    assert_eq!(expect(ALICE), 4);

    // The manager killed and started again: the same usage, the same limit.
    cluster.kill9(0);
    cluster.restart();
    let root = cluster.client();
    let alice = user(&root, ALICE);
    assert_eq!(root.quota(QuotaKind::User, ALICE).unwrap().usage.inodes, 4);
    assert_eq!(root.quota(QuotaKind::User, ALICE).unwrap().limits, files_hard(4));
    quota_exceeded(
        alice.create("/home/alice/f9", &CreateOptions::default()),
        "after a restart",
    );
    // A recount from the namespace agrees with the walk.
    root.quota_recount().unwrap();
    assert_eq!(
        root.quota(QuotaKind::User, ALICE).unwrap().usage.inodes,
        expect(ALICE)
    );
    assert_eq!(
        root.quota(QuotaKind::User, BOB).unwrap().usage.inodes,
        expect(BOB)
    );
    // Limits removed: she may create again.
    root.set_quota(QuotaKind::User, ALICE, QuotaLimits::default())
        .unwrap();
    alice.create("/home/alice/f9", &CreateOptions::default()).unwrap();

    // Only root sets quotas and projects; a user sees only her own.
    let e = alice
        .set_quota(QuotaKind::User, ALICE, QuotaLimits::default())
        .expect_err("a user set her own quota");
    assert_eq!(e.code(), ErrorCode::NotPermitted, "{e}");
    let e = alice.quota(QuotaKind::User, BOB).expect_err("she saw his quota");
    assert_eq!(e.code(), ErrorCode::PermissionDenied, "{e}");
    alice.quota(QuotaKind::Group, STAFF).unwrap();
    let e = alice
        .project("/home/alice", Some(3), false)
        .expect_err("she set a project");
    assert_eq!(e.code(), ErrorCode::NotPermitted, "{e}");
}

#[test]
fn byte_limits_stop_writers_once_settled_and_removals_free_them() {
    let cluster = TestCluster::start_with(&ClusterOptions::claimed_identity());
    let root = cluster.client();
    root.mkdir("/w", 0o777).unwrap();
    let alice = user(&root, ALICE);
    const MIB: u64 = 1 << 20;
    root.set_quota(
        QuotaKind::User,
        ALICE,
        QuotaLimits {
            bytes_hard: 2 * MIB,
            ..Default::default()
        },
    )
    .unwrap();
    let file = alice.create("/w/big", &CreateOptions::default()).unwrap();
    let chunk = vec![7u8; 256 << 10];
    // Writes go on until the settler charged the bytes and revoked the file's write
    // capability; each write is a round trip, so this many take far longer than the
    // settle period (a bounded loop: a limit never enforced fails the test).
    let mut written = 0u64;
    let mut refused = None;
    let started = Instant::now();
    while written < 1024 * MIB {
        match file.write_at(written, &chunk) {
            Ok(n) => written += n as u64,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
        if started.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    let e =
        refused.unwrap_or_else(|| panic!("{written} bytes written past a 2 MiB hard limit, never refused"));
    eprintln!("refused after {written} bytes in {:?}", started.elapsed());
    assert_eq!(e.code(), ErrorCode::QuotaExceeded, "{e}");
    assert_eq!(e.errno(), EDQUOT);
    let report = wait_for(&root, QuotaKind::User, ALICE, |r| r.usage.bytes >= 2 * MIB).unwrap_or_else(|r| {
        panic!("usage never reached the limit: {r:?}");
    });
    assert!(report.usage.bytes >= written.min(2 * MIB), "{report:?}");
    drop(file);
    // A new file of hers cannot be written either, however small (its create asks for
    // the write capability with it, and may be refused already).
    match alice.create("/w/small", &CreateOptions::default()) {
        Ok(other) => drop(quota_exceeded(other.write_at(0, b"x"), "a new file")),
        Err(e) => assert_eq!(e.code(), ErrorCode::QuotaExceeded, "{e}"),
    }
    // Her files are refused to root's writes too (the bytes are hers: a mount's
    // daemon asks as root for every user); root's own files are not.
    let as_root = root.open("/w/big", &WRITE).unwrap();
    quota_exceeded(as_root.write_at(0, b"by root"), "root writing her file");
    let roots = root.create("/w/roots", &CreateOptions::default()).unwrap();
    roots.write_at(0, &chunk).unwrap();
    drop((as_root, roots));

    // Removing the big file takes its bytes off at once; she writes again.
    alice.unlink("/w/big").unwrap();
    let report = root.quota(QuotaKind::User, ALICE).unwrap();
    assert!(report.usage.bytes < MIB, "{report:?}");
    let again = alice.create("/w/again", &CreateOptions::default()).unwrap();
    again.write_at(0, &chunk).unwrap();
    drop(again);
    // The bytes of what is written are charged (settled from the io servers).
    wait_for(&root, QuotaKind::User, ALICE, |r| {
        r.usage.bytes >= chunk.len() as u64
    })
    .unwrap_or_else(|r| panic!("256 KiB written, never charged: {r:?}"));
}

#[test]
fn projects_are_inherited_and_limit_what_is_made_below() {
    let cluster = TestCluster::start_with(&ClusterOptions::claimed_identity());
    let root = cluster.client();
    root.mkdir_all("/proj/sub", 0o777).unwrap();
    root.create("/proj/sub/old", &CreateOptions::default()).unwrap();
    // Project 77 on the tree: the directory, its subdirectory and the file already there.
    assert_eq!(root.project("/proj", Some(77), true).unwrap(), 77);
    assert_eq!(root.project("/proj/sub/old", None, false).unwrap(), 77);
    assert_eq!(root.quota(QuotaKind::Project, 77).unwrap().usage.inodes, 3);
    let alice = user(&root, ALICE);
    alice.create("/proj/sub/new", &CreateOptions::default()).unwrap();
    alice.mkdir("/proj/sub/d", 0o755).unwrap();
    alice
        .create("/proj/sub/d/deeper", &CreateOptions::default())
        .unwrap();
    // What is made below takes the project.
    assert_eq!(alice.project("/proj/sub/d/deeper", None, false).unwrap(), 77);
    assert_eq!(root.quota(QuotaKind::Project, 77).unwrap().usage.inodes, 6);
    // Outside the tree: no project.
    root.mkdir("/else", 0o777).unwrap();
    alice.create("/else/f", &CreateOptions::default()).unwrap();
    assert_eq!(alice.project("/else/f", None, false).unwrap(), 0);
    // The project's limit refuses her in the tree and not outside it.
    root.set_quota(QuotaKind::Project, 77, files_hard(6)).unwrap();
    quota_exceeded(
        alice.create("/proj/x", &CreateOptions::default()),
        "in the project",
    );
    alice.create("/else/g", &CreateOptions::default()).unwrap();
    // Removing one frees one.
    alice.unlink("/proj/sub/new").unwrap();
    assert_eq!(root.quota(QuotaKind::Project, 77).unwrap().usage.inodes, 5);
    alice.create("/proj/x", &CreateOptions::default()).unwrap();
    // A recount agrees.
    root.quota_recount().unwrap();
    assert_eq!(root.quota(QuotaKind::Project, 77).unwrap().usage.inodes, 6);
}

/// `munge` mode, two real users running `weft`: Alice's limits refuse her `put` with
/// "Disk quota exceeded" (exit status non-zero, nothing left under the name) and leave
/// Bob's alone; each sees his own quota and not the other's, and neither may set one.
#[test]
fn munge_users_are_held_to_their_own_quotas_through_the_cli() {
    use std::os::unix::fs::PermissionsExt;
    use weft_testkit::munge::{text, Munged, User};
    let munged = Munged::start();
    std::env::set_var("WEFT_MUNGE_SOCKET", munged.socket());
    let cluster = TestCluster::start_with(&ClusterOptions {
        extra: vec!["--identity".into(), "munge".into()],
        ..Default::default()
    });
    let root = cluster.client();
    let files = tempfile::Builder::new()
        .prefix("weft-quota-users-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(files.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = munged.socket();
    let (alice, bob) = (
        User::new(ALICE, &cluster, files.path()),
        User::new(BOB, &cluster, files.path()),
    );
    let local = files.path().join("small");
    std::fs::write(&local, b"a few bytes\n").unwrap();
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o644)).unwrap();
    for u in [&alice, &bob] {
        let dir = format!("/u{}", u.uid);
        root.mkdir(&dir, 0o755).unwrap();
        root.setattr(
            &dir,
            &SetAttr {
                uid: Some(u.uid),
                gid: Some(u.uid),
                ..Default::default()
            },
        )
        .unwrap();
    }
    // Root sets Alice's limit with the CLI: her directory and one file.
    let out = cluster.weft(&["quota", "set", "-u", &ALICE.to_string(), "-I", "2"]);
    assert!(out.status.success(), "{}", text(&out));
    let local = local.to_str().unwrap();
    for (u, name, allowed) in [
        (&alice, "a", true),
        (&alice, "b", false),
        (&bob, "a", true),
        (&bob, "b", true),
    ] {
        let remote = format!("/u{}/{name}", u.uid);
        let out = u.weft(&cluster, &socket, &["put", local, &remote]);
        assert_eq!(
            out.status.success(),
            allowed,
            "uid {} put {remote}:\n{}",
            u.uid,
            text(&out)
        );
        if !allowed {
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("quota exceeded"),
                "{}",
                text(&out)
            );
            assert!(root.stat(&remote).is_err(), "{remote} left after a refused put");
            let listed = root.readdir(&format!("/u{}", u.uid)).unwrap();
            assert_eq!(listed.len(), 1, "a refused put left something: {listed:?}");
        }
    }
    // Each sees his own quota and usage, not the other's.
    let out = alice.weft(&cluster, &socket, &["quota", "--json", "-u", &ALICE.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("\"files\":2,") && said.contains("\"files_hard\":2,"),
        "{said}"
    );
    let out = bob.weft(&cluster, &socket, &["quota", "-u", &ALICE.to_string()]);
    assert!(!out.status.success(), "Bob saw Alice's quota:\n{}", text(&out));
    let out = bob.weft(
        &cluster,
        &socket,
        &["quota", "set", "-u", &BOB.to_string(), "-I", "100"],
    );
    assert!(!out.status.success(), "Bob set his own quota:\n{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("may not"),
        "{}",
        text(&out)
    );
    // Root raises it: her put goes through.
    let out = cluster.weft(&["quota", "set", "-u", &ALICE.to_string(), "-I", "0"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = alice.weft(&cluster, &socket, &["put", local, &format!("/u{ALICE}/b")]);
    assert!(out.status.success(), "{}", text(&out));
}

/// An MPI program writing `weft:` file argv[1] 1 MiB at a time (collectively) until a
/// write fails or 1 GiB is written; prints the error class of the failure.
const WRITE_UNTIL_REFUSED_C: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nprocs;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) {
        int c; MPI_Error_class(rc, &c);
        if (rank == 0) printf("open class %d quota %d\n", c, MPI_ERR_QUOTA);
        MPI_Finalize();
        return 0;
    }
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    const int chunk = 1 << 20;
    char *buf = malloc(chunk);
    memset(buf, 'q', chunk);
    long long i;
    for (i = 0; i < 1024; i += nprocs) {
        rc = MPI_File_write_at_all(fh, (MPI_Offset)(i + rank) * chunk, buf, chunk, MPI_BYTE, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) break;
    }
    int c = 0;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &c);
    if (rank == 0) {
        char s[MPI_MAX_ERROR_STRING]; int l = 0; s[0] = 0;
        if (rc != MPI_SUCCESS) MPI_Error_string(rc, s, &l);
        printf("write class %d quota %d after %lld MiB: %s\n", c, MPI_ERR_QUOTA, i, s);
    }
    MPI_File_close(&fh);
    MPI_Finalize();
    return 0;
}
"#;

/// `owner` mode with the cluster key given to a user who is not root: his limits, set
/// by root before, refuse through the mount (EDQUOT from open(2) and write(2)) and
/// through MPI-IO (error class MPI_ERR_QUOTA), and a removal through the mount frees
/// him.
#[test]
fn the_mount_and_mpi_io_say_edquot() {
    const OWNER: u32 = 5301;
    const MIB: u64 = 1 << 20;
    let cluster = TestCluster::start();
    let root = cluster.client();
    root.mkdir("/q", 0o755).unwrap();
    root.setattr(
        "/q",
        &SetAttr {
            uid: Some(OWNER),
            gid: Some(OWNER),
            ..Default::default()
        },
    )
    .unwrap();
    root.set_quota(
        QuotaKind::User,
        OWNER,
        QuotaLimits {
            bytes_hard: 4 * MIB,
            inodes_hard: 3,
            ..Default::default()
        },
    )
    .unwrap();
    // The key to the user: from now on every request acts as him.
    let out = cluster.weft(&["down"]);
    assert!(out.status.success());
    std::os::unix::fs::chown(cluster.key_path(), Some(OWNER), Some(OWNER)).unwrap();
    cluster.restart();
    let tied = weft_testkit::TiedDir::new("weft-quota-mount-");
    let mount = weft_testkit::WeftMount::start(&cluster, &tied, "mnt");
    let q = mount.path().join("q");
    // /q and two files: his three inodes.
    std::fs::write(q.join("a"), b"a").unwrap();
    std::fs::write(q.join("b"), b"b").unwrap();
    let e = std::fs::write(q.join("c"), b"c").expect_err("a fourth inode through the mount");
    assert_eq!(e.raw_os_error(), Some(EDQUOT), "{e}");
    assert!(e.to_string().contains("quota"), "{e}");
    std::fs::remove_file(q.join("b")).unwrap();
    // Bytes: written until refused, well before 1 GiB.
    let e = {
        use std::io::Write;
        let mut f = std::fs::File::create(q.join("big")).unwrap();
        let chunk = vec![1u8; MIB as usize];
        let mut result = Ok(());
        for _ in 0..1024 {
            result = f.write_all(&chunk);
            if result.is_err() {
                break;
            }
        }
        result
            .and_then(|()| f.sync_all())
            .expect_err("1 GiB written through the mount past a 4 MiB limit")
    };
    assert_eq!(e.raw_os_error(), Some(EDQUOT), "{e}");
    std::fs::remove_file(q.join("big")).unwrap();
    drop(mount);

    // MPI-IO: the same limit, error class MPI_ERR_QUOTA on the write.
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("write_until_refused.c");
    std::fs::write(&source, WRITE_UNTIL_REFUSED_C).unwrap();
    let program = dir.path().join("write_until_refused");
    let built = std::process::Command::new(std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into()))
        .args(["-O2", "-o"])
        .arg(&program)
        .arg(&source)
        .output()
        .expect("running mpicc");
    assert!(
        built.status.success(),
        "mpicc: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut c = weft_testkit::mpi::mpirun_command(2, "180");
    c.arg("-x")
        .arg(format!("LD_PRELOAD={}", weft_testkit::mpi::library().display()));
    for (k, v) in cluster.env() {
        c.arg("-x").arg(format!("{k}={v}"));
    }
    let out = c
        .arg(&program)
        .arg("weft:/q/mpi")
        .output()
        .expect("running mpirun");
    let said = String::from_utf8_lossy(&out.stdout);
    let line = said
        .lines()
        .find(|l| l.starts_with("write class"))
        .unwrap_or_else(|| {
            panic!(
                "no result line:\n{said}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[2], words[4], "not MPI_ERR_QUOTA: {line}");
    assert!(line.to_lowercase().contains("quota"), "{line}");
}

/// The settler asks the io servers twice a second only about files whose ids have a
/// limit of bytes; the files of ids without one are settled every 5 s (their usage is
/// only counted). Before, a thousand files written in a minute by users without limits
/// had the manager stat every object of each of them twice a second.
#[test]
fn files_of_ids_without_byte_limits_are_settled_seldom_and_still_counted() {
    let cluster = TestCluster::start_with(&ClusterOptions::claimed_identity());
    let root = cluster.client();
    root.mkdir("/s", 0o777).unwrap();
    let bob = user(&root, BOB);
    let chunk = vec![3u8; 64 << 10];
    for k in 0..20 {
        let file = bob
            .create(&format!("/s/f{k}"), &CreateOptions::default())
            .unwrap();
        file.write_at(0, &chunk).unwrap();
    }
    // The write capabilities stay valid for a minute: every file is followed. Over 3 s
    // (six settle rounds) Bob's files are asked about in one round at most (two if a
    // 5 s mark falls in the window), against every round once he has a limit.
    let window = |what: &str| {
        let before = cluster.io_requests("obj_stat");
        std::thread::sleep(Duration::from_secs(3));
        let asked = cluster.io_requests("obj_stat") - before;
        eprintln!("{what}: {asked} ObjStat requests to the io servers in 3 s");
        asked
    };
    let unlimited = window("no limits");
    // His usage is counted all the same.
    wait_for(&root, QuotaKind::User, BOB, |r| {
        r.usage.bytes >= 20 * chunk.len() as u64
    })
    .unwrap_or_else(|r| panic!("1.25 MiB written without a limit, never counted: {r:?}"));
    // With a limit of bytes his files are settled every round again (enforcement).
    root.set_quota(
        QuotaKind::User,
        BOB,
        QuotaLimits {
            bytes_hard: 1 << 30,
            ..Default::default()
        },
    )
    .unwrap();
    let limited = window("a limit of bytes");
    assert!(
        limited >= 4.0,
        "only {limited} ObjStat requests in 3 s about files of a user with a limit of bytes"
    );
    assert!(
        unlimited * 2.0 <= limited,
        "the settler asked {unlimited} times in 3 s about files of a user without limits, {limited} times with one"
    );
}

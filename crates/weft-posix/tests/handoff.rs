//! The mount's `user.weft.handoff` (weft-fuse `xattr::HANDOFF_XATTR`): a file the library
//! opens with O_PATH (`WEFT_POSIX_PATH_OPEN=1`) is read natively from what the mount hands
//! over (its attributes, checked as an open checks them, and a read capability), with no
//! request of the library's own to the manager or the io servers. Checked here: small
//! files cost the cluster no more requests than the same reads through the mount alone;
//! close-to-open still holds (another client's write, closed, is seen at the next open);
//! and the handoff gives a user nothing an open through the mount would not (no handoff
//! of a file the user may not read, never write access).

#[path = "../../weft-fuse/tests/common/mod.rs"]
mod common;
mod preload;

use common::{native_write, pattern, sh_as_nobody, Mount};
use preload::{library, totals};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use weft_testkit::TestCluster;

const FILES: usize = 12;
const FILE_BYTES: usize = 4096;

/// Reads every file named on the command line (each opened, read whole, closed) and
/// prints its length and its bytes' sum; then, for each line on stdin, reads them all
/// again and prints again ("reopen" rounds).
const READER: &str = r#"
import os, sys
def once():
    out = []
    for name in sys.argv[1:]:
        fd = os.open(name, os.O_RDONLY)
        data = b""
        while True:
            piece = os.read(fd, 65536)
            if not piece:
                break
            data += piece
        os.close(fd)
        out.append(f"{len(data)}:{sum(data)}")
    print(" ".join(out), flush=True)
once()
for line in sys.stdin:
    once()
"#;

fn expected(contents: &[Vec<u8>]) -> String {
    contents
        .iter()
        .map(|c| format!("{}:{}", c.len(), c.iter().map(|&b| u64::from(b)).sum::<u64>()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn reader(dir: &Path, names: &[String], preload: bool, stats: &Path) -> Command {
    let script = dir.join("reader.py");
    std::fs::write(&script, READER).unwrap();
    let mut command = Command::new("python3");
    command.arg(&script).args(names).current_dir(dir);
    if preload {
        command
            .env("LD_PRELOAD", library())
            .env("WEFT_POSIX_PATH_OPEN", "1")
            .env("WEFT_POSIX_STATS", stats);
    }
    command
}

fn run_reader(dir: &Path, names: &[String], preload: bool, stats: &Path) -> String {
    let out = reader(dir, names, preload, stats)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "reader failed (library: {preload}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Requests the manager and the io servers served, in total (less the manager's answer
/// to a new client's connection, which the library's process makes once).
fn requests(cluster: &TestCluster) -> (f64, f64) {
    let manager = cluster.manager_requests_where(|op| op != Some("get_cluster"));
    let io: f64 = ["read", "obj_stamp", "extents", "obj_size", "present_capability"]
        .iter()
        .map(|op| {
            let n = cluster.io_requests(op);
            eprintln!("io {op}: {n}");
            n
        })
        .sum();
    (manager, io)
}

/// Small files read by a program with the library: each open is served from the mount's
/// handoff (counted), and the manager and io servers see no more requests than for the
/// same reads of the same files through the mount alone. Before the handoff the library
/// either left small files to the mount (no file served natively: `handoffs` missing) or,
/// serving them, asked the manager for the attributes, every io server for the size and
/// the manager for a capability on top of the mount's own open (3 more manager requests
/// and 4 more io requests per file).
#[test]
fn small_files_read_through_the_library_cost_the_servers_no_more_than_the_mount() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let client = cluster.client();
    let mut contents = Vec::new();
    for dir in ["by-mount", "by-library"] {
        client.mkdir(&format!("/{dir}"), 0o755).unwrap();
        for i in 0..FILES {
            let data = pattern(i as u64 + 1, FILE_BYTES - i);
            native_write(&client, &format!("/{dir}/s{i}"), 0, &data);
            if dir == "by-mount" {
                contents.push(data);
            }
        }
    }
    let stats = mount.scratch().join("stats");
    let names = |dir: &str| -> Vec<String> {
        (0..FILES)
            .map(|i| mount.join(&format!("{dir}/s{i}")).display().to_string())
            .collect()
    };
    let before = requests(&cluster);
    let by_mount = run_reader(mount.scratch(), &names("by-mount"), false, &stats);
    let middle = requests(&cluster);
    let by_library = run_reader(mount.scratch(), &names("by-library"), true, &stats);
    let after = requests(&cluster);
    assert_eq!(by_mount, expected(&contents));
    assert_eq!(by_library, expected(&contents));
    let counts = totals(&stats);
    assert_eq!(
        counts.get("handoffs").copied().unwrap_or(0),
        FILES as u64,
        "every small file opened from the mount's handoff: {counts:?}"
    );
    assert!(counts["reads"] >= FILES as u64, "read natively: {counts:?}");
    let mount_cost = (middle.0 - before.0, middle.1 - before.1);
    let library_cost = (after.0 - middle.0, after.1 - middle.1);
    eprintln!("manager, io requests: mount {mount_cost:?}, library {library_cost:?}");
    assert!(
        library_cost.0 <= mount_cost.0,
        "manager requests: library {} > mount {}",
        library_cost.0,
        mount_cost.0
    );
    assert!(
        library_cost.1 <= mount_cost.1,
        "io server requests: library {} > mount {}",
        library_cost.1,
        mount_cost.1
    );
}

/// Small files' bytes come in the handoff, and a re-open whose check finds the data as
/// it was (the same data stamp) is answered from the bytes the mount read before: a
/// round of re-reads by a library process costs the io servers no read of them, and a
/// file too large to carry is still read whole (natively). Before, every library
/// open read from the io servers (one read per file and round). Rounds repeat until one
/// reads nothing (at most `ROUNDS`: a stamp is only had a second after the data's last
/// change, so the first rounds may read again).
#[test]
fn small_files_reread_through_the_library_are_answered_from_what_the_mount_read() {
    const ROUNDS: usize = 8;
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let client = cluster.client();
    let mut contents: Vec<Vec<u8>> = (0..FILES)
        .map(|i| pattern(i as u64 + 7, FILE_BYTES + i))
        .collect();
    // Larger than a handoff carries.
    contents.push(pattern(99, 100 << 10));
    for (i, data) in contents.iter().enumerate() {
        native_write(&client, &format!("/r{i}"), 0, data);
    }
    let names: Vec<String> = (0..contents.len())
        .map(|i| mount.join(&format!("r{i}")).display().to_string())
        .collect();
    let stats = mount.scratch().join("stats");
    let mut child = reader(mount.scratch(), &names, true, &stats)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    output.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), expected(&contents), "first round");
    let mut reads = Vec::new();
    for _ in 0..ROUNDS {
        let before = cluster.io_requests("read");
        input.write_all(b"again\n").unwrap();
        input.flush().unwrap();
        line.clear();
        output.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), expected(&contents), "a later round");
        // The large file is read from the io servers each round (a few reads); the
        // small ones, read again, would add one each.
        let round = cluster.io_requests("read") - before;
        reads.push(round);
        if round < FILES as f64 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    drop(input);
    assert!(child.wait().unwrap().success());
    eprintln!("io reads per round: {reads:?}");
    assert!(
        reads.last().is_some_and(|&n| n < FILES as f64),
        "every round read the small files from the io servers again: {reads:?}"
    );
    let counts = totals(&stats);
    assert!(
        counts.get("handoffs").copied().unwrap_or(0) >= 2 * contents.len() as u64,
        "every open from the mount's handoff: {counts:?}"
    );
}

/// Close-to-open with the handoff: a library process reads files, another client (the
/// native client, then a second mount) rewrites them (one in place at the same size,
/// which changes no attribute the manager keeps, one longer) and closes; the same
/// process's next open of each reads the new bytes. Would fail if the mount's handoff
/// answered from what it held instead of checking as an open does.
#[test]
fn another_clients_closed_write_is_seen_at_the_next_library_open() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let other = Mount::new(&cluster);
    let client = cluster.client();
    let old = [pattern(1, FILE_BYTES), pattern(2, 3000)];
    native_write(&client, "/same-size", 0, &old[0]);
    native_write(&client, "/grows", 0, &old[1]);
    let names: Vec<String> = ["same-size", "grows"]
        .iter()
        .map(|n| mount.join(n).display().to_string())
        .collect();
    let stats = mount.scratch().join("stats");
    let mut child = reader(mount.scratch(), &names, true, &stats)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    output.read_line(&mut first).unwrap();
    assert_eq!(first.trim(), expected(&old), "first open");
    let mut next = |input: &mut std::process::ChildStdin| {
        input.write_all(b"again\n").unwrap();
        input.flush().unwrap();
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        line.trim().to_owned()
    };
    let new_native = [pattern(3, FILE_BYTES), pattern(4, 5000)];
    native_write(&client, "/same-size", 0, &new_native[0]);
    native_write(&client, "/grows", 0, &new_native[1]);
    assert_eq!(
        next(&mut input),
        expected(&new_native),
        "after the native client's writes"
    );
    let new_mount = [pattern(5, FILE_BYTES), pattern(6, 7000)];
    for (name, data) in ["same-size", "grows"].iter().zip(&new_mount) {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(other.join(name))
            .unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, data, 0).unwrap();
        drop(f);
    }
    assert_eq!(
        next(&mut input),
        expected(&new_mount),
        "after the other mount's writes"
    );
    drop(input);
    assert!(child.wait().unwrap().success());
    let counts = totals(&stats);
    assert!(
        counts.get("handoffs").copied().unwrap_or(0) >= 6,
        "every open from the mount's handoff: {counts:?}"
    );
}

/// The handoff as another user asks it: nobody gets none of a file it may not read (the
/// kernel refuses the attribute as it refuses the open), and its library open of that
/// file fails as the mount's does; of a file it may read, the handoff opens it for
/// reading only: a writable open from it is refused, and the file is never written.
#[test]
fn the_handoff_gives_no_user_more_than_an_open_through_the_mount() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let client = cluster.client();
    native_write(&client, "/secret", 0, b"root only");
    native_write(&client, "/public", 0, b"anyone may read");
    std::fs::set_permissions(
        mount.join("secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(
        mount.join("public"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    // Root reads both through the library first: the mount now holds their bytes
    // (small files' handoffs carry them), which must not reach nobody either.
    let stats = mount.scratch().join("stats");
    let names = [mount.join("secret"), mount.join("public")].map(|p| p.display().to_string());
    assert_eq!(
        run_reader(mount.scratch(), &names, true, &stats),
        expected(&[b"root only".to_vec(), b"anyone may read".to_vec()])
    );
    let script = mount.scratch().join("ask.py");
    std::fs::write(
        &script,
        r#"
import os, sys
for name in sys.argv[1:]:
    fd = os.open(name, os.O_PATH)
    try:
        v = os.getxattr(f"/proc/self/fd/{fd}", "user.weft.handoff")
        print(name.rsplit("/", 1)[1], "handoff", v.hex())
    except OSError as e:
        print(name.rsplit("/", 1)[1], "refused", e.errno)
    os.close(fd)
    for flags, what in ((os.O_RDONLY, "read"), (os.O_RDWR, "write")):
        try:
            fd = os.open(name, flags)
            os.close(fd)
            print(name.rsplit("/", 1)[1], what, "opened")
        except OSError as e:
            print(name.rsplit("/", 1)[1], what, "refused", e.errno)
"#,
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let lib = library();
    let out = sh_as_nobody(
        Path::new("/"),
        &format!(
            "WEFT_POSIX_PATH_OPEN=1 LD_PRELOAD={} python3 {} {} {}",
            lib.display(),
            script.display(),
            mount.join("secret").display(),
            mount.join("public").display()
        ),
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let secret_hex: String = b"root only".iter().map(|b| format!("{b:02x}")).collect();
    assert!(
        !text.contains(&secret_hex),
        "the secret's bytes reached nobody: {text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("secret refused {}", libc::EACCES), "{text}");
    assert_eq!(
        lines[1],
        format!("secret read refused {}", libc::EACCES),
        "{text}"
    );
    assert_eq!(
        lines[2],
        format!("secret write refused {}", libc::EACCES),
        "{text}"
    );
    assert_eq!(lines[4], "public read opened", "{text}");
    assert_eq!(
        lines[5],
        format!("public write refused {}", libc::EACCES),
        "{text}"
    );
    let hex = lines[3]
        .strip_prefix("public handoff ")
        .unwrap_or_else(|| panic!("{text}"));
    let handoff: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    // Nobody's handoff, used by a client of nobody's: readable, never writable.
    let nobody = client.with_cred(weft_client::Cred {
        uid: 65534,
        gid: 65534,
        groups: Vec::new(),
    });
    let err = nobody
        .open_handoff(&handoff, "/public", true)
        .err()
        .expect("a writable open from the handoff");
    assert_eq!(err.code(), weft_client::ErrorCode::PermissionDenied, "{err}");
    let read = nobody.open_handoff(&handoff, "/public", false).unwrap();
    let mut buf = vec![0u8; 64];
    let n = read.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"anyone may read");
    // Its bytes came in the handoff, read by the mount after its checks.
    let public_hex: String = b"anyone may read".iter().map(|b| format!("{b:02x}")).collect();
    assert!(hex.contains(&public_hex), "no content in the handoff: {hex}");
    assert!(
        read.write_at(0, b"X").is_err(),
        "a read-only handle from the handoff wrote"
    );
    // The attribute is the mount's to answer, never anyone's to set.
    let set = Command::new("setfattr")
        .args(["-n", "user.weft.handoff", "-v", "x"])
        .arg(mount.join("public"))
        .output()
        .unwrap();
    assert!(!set.status.success(), "setting user.weft.handoff succeeded");
    assert_eq!(std::fs::read(mount.join("public")).unwrap(), b"anyone may read");
}

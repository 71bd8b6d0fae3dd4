//! Names built from a pid, with a stale file already there: pids wrap (pid_max is
//! 32,768 here), so a file a killed earlier run left under the same pid will be met.
//! `weft get`'s temporary (`.NAME.weft-get-PID`) and a trace file
//! (`rank-RRRRR.PID.wtrace`) were opened with O_CREAT|O_TRUNC: a stale trace was
//! overwritten, and a symbolic link under get's temporary name was written through (its
//! target clobbered) and then renamed over the copy. The test learns the pid `weft get`
//! will have by starting it through `sh -c '...; exec weft'` (exec keeps the shell's
//! pid), plants the stale files, then lets it go on.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use weft_testkit::TestCluster;

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn get_and_traces_never_reuse_a_stale_file_of_the_same_pid() {
    let cluster = TestCluster::start();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let file = cluster.client().create("/data", &Default::default()).unwrap();
    file.write_at(0, &data).unwrap();
    file.sync().unwrap();
    drop(file);

    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("copy");
    std::fs::write(&local, b"the old copy").unwrap(); // replaced through a temporary
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"not weft's to write").unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();

    let mut get = Command::new("sh")
        .args(["-c", r#"echo $$; read go; exec "$0" "$@""#])
        .arg(weft_testkit::bin("weft"))
        .args(["get", "/data"])
        .arg(&local)
        .envs(cluster.env())
        .env("WEFT_TRACE", &traces)
        .env("OMPI_COMM_WORLD_RANK", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(get.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let pid: u32 = line.trim().parse().unwrap();

    // What a killed get and a killed traced run with this pid left behind: get's
    // temporary as a symbolic link (to a file that is not weft's to write), its next
    // name as a partial copy, and a trace of rank 0.
    let temporary = dir.path().join(format!(".copy.weft-get-{pid}"));
    std::os::unix::fs::symlink(&victim, &temporary).unwrap();
    let partial = dir.path().join(format!(".copy.weft-get-{pid}-1"));
    std::fs::write(&partial, b"a partial copy").unwrap();
    let stale_trace = traces.join(format!("rank-00000.{pid}.wtrace"));
    std::fs::write(&stale_trace, b"an earlier run's trace").unwrap();

    writeln!(get.stdin.take().unwrap(), "go").unwrap();
    let out = get.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "weft get: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The copy is whole and a file of its own; nothing stale was written or taken.
    let kind = std::fs::symlink_metadata(&local).unwrap().file_type();
    assert!(
        kind.is_file(),
        "{} is a {kind:?}, not a regular file",
        local.display()
    );
    assert!(read(&local) == data, "the copy differs from /data");
    assert_eq!(
        read(&victim),
        b"not weft's to write",
        "written through a stale link"
    );
    assert!(std::fs::symlink_metadata(&temporary)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(read(&partial), b"a partial copy");
    assert_eq!(
        read(&stale_trace),
        b"an earlier run's trace",
        "a stale trace overwritten"
    );
    // This run's trace is beside it, whole.
    let mut fresh: Vec<_> = std::fs::read_dir(&traces)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| *p != stale_trace)
        .collect();
    assert_eq!(fresh.len(), 1, "one new trace: {fresh:?}");
    let fresh = fresh.pop().unwrap();
    assert!(
        fresh
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("rank-00000.{pid}-")),
        "{}",
        fresh.display()
    );
    let shown = cluster
        .command("weft")
        .arg("trace")
        .arg("show")
        .arg(&fresh)
        .output()
        .unwrap();
    assert!(
        shown.status.success(),
        "the new trace does not read: {}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(!shown.stdout.is_empty());
}

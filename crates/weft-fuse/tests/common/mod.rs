//! Shared by the mount tests: a real mount of a test cluster that is always unmounted
//! (also when the test fails), and shell helpers.

#![allow(dead_code)]

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use weft_testkit::TestCluster;

/// A `weft mount --foreground` child serving a mountpoint in a temporary directory.
/// Drop unmounts (lazily if busy), waits for the daemon to end, and kills it if it
/// does not.
pub struct Mount {
    dir: tempfile::TempDir,
    path: PathBuf,
    log: PathBuf,
    child: Child,
}

impl Mount {
    pub fn new(cluster: &TestCluster) -> Mount {
        Mount::with_args(cluster, &[])
    }

    pub fn with_args(cluster: &TestCluster, args: &[&str]) -> Mount {
        Mount::with_env(cluster, args, &[])
    }

    /// A mount whose daemon also gets `env` (e.g. a short `WEFT_TIMEOUT_MS`).
    pub fn with_env(cluster: &TestCluster, args: &[&str], env: &[(&str, &str)]) -> Mount {
        let dir = tempfile::Builder::new()
            .prefix("weft-mount-")
            .tempdir()
            .expect("tempdir");
        // Other users (the permission tests run commands as nobody) must reach the mountpoint.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().join("mnt");
        std::fs::create_dir(&path).unwrap();
        let log = dir.path().join("mount.log");
        let mut command = cluster.command("weft");
        // If the test process dies without dropping the guard, the daemon gets SIGTERM,
        // which unmounts: no mount outlives its test.
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = command
            .arg("mount")
            .arg(&path)
            .arg("--foreground")
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting weft mount");
        let mut mount = Mount {
            dir,
            path,
            log,
            child,
        };
        mount.wait_mounted();
        mount
    }

    fn wait_mounted(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if weft_fuse::is_weft_mount(&self.path).unwrap() {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "weft mount exited ({status}) before mounting:\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "not mounted after 30 s:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the mount.
    pub fn join(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    /// A scratch directory beside the mountpoint (local disk, same temporary tree).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let mounted = || weft_fuse::is_weft_mount(&self.path).unwrap_or(false);
        if mounted() && weft_fuse::unmount(&self.path, false).is_err() {
            let _ = weft_fuse::unmount(&self.path, true);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
            }
        }
        // A daemon killed above leaves a dead mount behind: detach it.
        if mounted() {
            let _ = weft_fuse::unmount(&self.path, true);
        }
        if std::thread::panicking() {
            eprintln!("--- weft mount log ---\n{}", self.log_text());
        }
    }
}

/// Runs `script` with sh in `dir`; panics with its output unless it succeeds.
pub fn sh(dir: &Path, script: &str) -> String {
    let out = sh_output(dir, script);
    assert!(
        out.status.success(),
        "failed in {}: {script}\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

pub fn sh_output(dir: &Path, script: &str) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("running sh")
}

/// Runs `script` as user and group `nobody` (65534) without supplementary groups, or
/// with `groups`.
pub fn sh_as_nobody(dir: &Path, script: &str, groups: &[u32]) -> Output {
    let mut command = Command::new("setpriv");
    command.args(["--reuid=65534", "--regid=65534"]);
    if groups.is_empty() {
        command.arg("--clear-groups");
    } else {
        let list: Vec<String> = groups.iter().map(u32::to_string).collect();
        command.arg(format!("--groups={}", list.join(",")));
    }
    command
        .args(["sh", "-c", script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("running setpriv")
}

/// Deterministic bytes for test files (xorshift), so runs are reproducible.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

pub fn read_all(path: &Path) -> Vec<u8> {
    let mut f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut v = Vec::new();
    f.read_to_end(&mut v).unwrap();
    v
}

/// Writes `data` at `offset` of `path` through the native client (creating the file),
/// closed before it returns.
pub fn native_write(client: &weft_client::Client, path: &str, offset: u64, data: &[u8]) {
    let options = weft_client::OpenOptions {
        write: true,
        create: Some(Default::default()),
        ..Default::default()
    };
    let file = client.open(path, &options).unwrap();
    assert_eq!(file.write_at(offset, data).unwrap(), data.len());
    file.close().unwrap();
}

/// An extended attribute's value as one of the getxattr family reads it: `get` is
/// called with a buffer and its length and returns what the system call returned;
/// the errno on failure.
pub fn xattr_value(get: impl FnOnce(*mut libc::c_void, usize) -> isize) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; 1 << 17];
    let n = get(buf.as_mut_ptr().cast(), buf.len());
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// Runs the tests of one binary that take it one at a time. Such a test holds a file
/// open in the mount and checks what the mount has not yet done before its close; but a
/// process another test thread starts meanwhile inherits this process's descriptors
/// until its exec closes them, and each of those closes reaches the mount as a FLUSH,
/// as any close does, which sends what the mount kept early (`kept_attrs` failed 1 run
/// in ~20 so: the new file's extended attributes were asked of the manager).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

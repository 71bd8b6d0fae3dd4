//! Two real users in `munge` identity mode: a munged of the test's own (with its own
//! key, on a socket in a temporary directory) and users that run `weft` or `munge` as
//! their uid (the tests run as root, as CI does). Used by `munge.rs` and the hostile
//! client's attacks (`hostile.rs`).

use crate::TestCluster;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A munged of the test's own, on a socket in a temporary directory; stopped on drop
/// (also when the test fails).
pub struct Munged {
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Munged {
    pub fn start() -> Munged {
        let dir = tempfile::Builder::new().prefix("weft-munge-").tempdir().unwrap();
        // Others must reach the socket; munged refuses a socket directory others may write.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let key = dir.path().join("munge.key");
        let made = Command::new("mungekey")
            .arg("-c")
            .arg("-k")
            .arg(&key)
            .output()
            .expect("running mungekey (install Debian's munge package: scripts/install-deps.sh)");
        assert!(made.status.success(), "mungekey: {made:?}");
        let child = Command::new("munged")
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--socket={}", dir.path().join("socket").display()))
            .arg(format!("--pid-file={}", dir.path().join("munged.pid").display()))
            .arg(format!("--log-file={}", dir.path().join("munged.log").display()))
            .arg(format!(
                "--seed-file={}",
                dir.path().join("munged.seed").display()
            ))
            .arg("--foreground")
            .arg("--force")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting munged");
        let munged = Munged {
            child: Some(child),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !munged.socket().exists() {
            assert!(Instant::now() < deadline, "munged did not create its socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        munged
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("socket")
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }
}

impl Drop for Munged {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A user's view of the cluster: its own copy of the cluster key (holding the key is
/// membership of the cluster; MUNGE says which user).
pub struct User {
    pub uid: u32,
    pub key: PathBuf,
}

impl User {
    pub fn new(uid: u32, cluster: &TestCluster, dir: &Path) -> User {
        let key = dir.join(format!("key-{uid}"));
        std::fs::copy(cluster.key_path(), &key).unwrap();
        std::os::unix::fs::chown(&key, Some(uid), Some(uid)).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        User { uid, key }
    }

    /// Runs `weft args` as this user (uid and gid `uid`, no supplementary groups).
    pub fn weft(&self, cluster: &TestCluster, munge_socket: &Path, args: &[&str]) -> Output {
        self.run(cluster, munge_socket, crate::bin("weft").as_os_str(), args)
    }

    pub fn run(
        &self,
        cluster: &TestCluster,
        munge_socket: &Path,
        program: &std::ffi::OsStr,
        args: &[&str],
    ) -> Output {
        self.command(cluster, munge_socket, program, args)
            .output()
            .expect("running setpriv")
    }

    /// `program args` to run as this user, with the cluster's address, this user's
    /// key and the test's munged in its environment.
    pub fn command(
        &self,
        cluster: &TestCluster,
        munge_socket: &Path,
        program: &std::ffi::OsStr,
        args: &[&str],
    ) -> Command {
        let mut command = Command::new("setpriv");
        command
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.uid))
            .arg("--clear-groups")
            .arg("--")
            .arg(program)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", "/nonexistent")
            .env("WEFT_META", cluster.meta_addr())
            .env("WEFT_KEY", &self.key)
            .env("WEFT_MUNGE_SOCKET", munge_socket);
        command
    }

    /// A MUNGE credential for this user.
    pub fn credential(&self, cluster: &TestCluster, munge_socket: &Path) -> Vec<u8> {
        let socket = munge_socket.display().to_string();
        let out = self.run(
            cluster,
            munge_socket,
            "munge".as_ref(),
            &["-n", "--socket", &socket],
        );
        assert!(out.status.success(), "munge -n as uid {}: {out:?}", self.uid);
        out.stdout.trim_ascii().to_vec()
    }
}

/// A finished process's status and output, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

//! Test harness for integration tests: starts a real cluster with the `weft` binary
//! (`weft up --home <tempdir>`), hands out clients, kills and restarts servers, and
//! always stops every server it started, also when the test fails (Drop), and also when
//! the test process is killed (SIGKILL, a CI timeout): every server reads a pipe whose
//! only write end this process holds (`weft up --tie-to-stdin`) and exits at its end,
//! and a sweeper reading it too continues stopped servers and removes the home.
//! Processes a test starts itself (a weftd of its own, an mpirun job) are tied the same
//! way through [`TiedDir`].
//!
//! The binaries come from the workspace's release build (`cargo build --release
//! --workspace`, which `make test` runs first). A missing binary fails the test.
//!
//! # Code map
//!
//! Test harness: real clusters started with the `weft` binary in temporary homes (the
//! build's, or an installed one with `TestCluster::start_from`), killed/restarted on
//! demand, always stopped on drop (a test that failed first prints the last 40 lines of
//! each server's log, which go with the home). Also when the test process is killed (SIGKILL, a CI
//! timeout), where no drop runs: each cluster holds a pipe whose only write end
//! (close-on-exec) is the test process's, and starts every server with `weft up
//! --tie-to-stdin` and the read end as standard input, so each weftd runs with
//! `--exit-on-stdin-eof` and ends when the kernel closes the write end with the process
//! (`tests/killed_test.rs` SIGKILLs a helper holding a cluster and counts the weftds left).
//! A sweeper (`sh`) reading the same pipe then continues every server of the home (one
//! the test stopped with SIGSTOP reads nothing) and removes the home (weft-config's
//! `HomeTie`). Processes a test starts itself (a weftd of its own, an mpirun job:
//! weft-tests' launch.rs and hostile_peers.rs) go through `TiedDir`, the same tie on a
//! temporary directory: `TiedDir::weftd()` adds `--exit-on-stdin-eof`, `spawn` gives the
//! pipe as standard input and records the pid for the sweeper's SIGTERM (mpirun reads
//! no pipe; it forwards the SIGTERM to its ranks); killed_test.rs's second helper proves
//! it for a standalone weftd. Invariant: no weftd a TestCluster or TiedDir starts
//! outlives the test process. `mpi.rs`: what the MPI-IO tests of weft-mpiio,
//! weft-mpiio-mpich and weft-fuse share (the library of the build, Open MPI's mpirun line,
//! a file's bytes and their comparison with a reference run's).
//! `storm.rs`: the storm clients of the crash and power-loss tests (this test binary run
//! again, `WEFT_STORM_CLIENT`; creates, mkdirs, renames, unlinks, chmods and appends in
//! a directory of their own and a shared one, each with names of its own, logging every
//! operation with its answer, error, later finding and sync) and the checker: a walk that
//! checks every entry (lookup agrees with readdir, attributes, link counts, objects read
//! back) and per client a model built from its log, which a survivor's part of the
//! namespace must equal (every answered operation exactly once) and a killed client's must
//! match as a prefix no shorter than its last sync (file contents a prefix of its appends).
//! `faultfs.rs` and the `weft-faultfs` binary: the power-loss layer, a FUSE pass-through
//! (fuser) that applies changes to a backing directory at once and keeps their undo in
//! memory until they are durable in ext4's model (a file's data at that file's
//! fsync/fdatasync; namespace changes, journaled in order, at any fsync); a cut undoes the
//! rest newest first. Invariant: the storm's model and the layer's `Store` are pure enough
//! to be unit-tested without servers or FUSE (`cargo test -p weft-testkit --lib`).

pub mod faultfs;
pub mod mpi;
pub mod munge;
pub mod storm;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use weft_client::Client;
use weft_config::tie::HomeTie;
use weft_config::{ClusterConfig, CLUSTER_FILE_NAME};
use weft_rpc::{ClientAuth, ClusterKey};

/// The directory holding the workspace's binaries (`target/release`), found from the
/// running test executable (`target/release/deps/<test>`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test executable has a directory");
    let dir = if deps.ends_with("deps") {
        deps.parent().unwrap().to_path_buf()
    } else {
        deps.to_path_buf()
    };
    for name in ["weft", "weftd"] {
        assert!(
            dir.join(name).exists(),
            "{} not found: build the workspace first (`cargo build --release --workspace`, done by `make test`)",
            dir.join(name).display()
        );
    }
    dir
}

/// Path of a workspace binary.
pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// Options for `weft up`.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub io_servers: u32,
    pub stripe_size: u64,
    pub stripe_count: u32,
    /// More `weft up` arguments, e.g. `["--cache", "colocated"]`. Without
    /// `--auto-rebuild RATE` among them the cluster runs with `--auto-rebuild off`.
    pub extra: Vec<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            io_servers: 4,
            stripe_size: 64 * 1024,
            stripe_count: 0,
            extra: Vec::new(),
        }
    }
}

impl ClusterOptions {
    /// The default cluster with a cache tier: `placement` is `colocated` or a number of
    /// separate cache managers; `memory` each manager's memory (e.g. "64M").
    pub fn cached(placement: &str, memory: &str) -> ClusterOptions {
        ClusterOptions {
            extra: ["--cache", placement, "--cache-memory", memory]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ..Default::default()
        }
    }
}

impl ClusterOptions {
    /// The default cluster in `claimed` identity mode: requests act as the uid they
    /// claim, as a root mount serving several local users needs (in the default
    /// `owner` mode every request acts as the key's owner).
    pub fn claimed_identity() -> ClusterOptions {
        ClusterOptions {
            extra: vec!["--identity".into(), "claimed".into()],
            ..Default::default()
        }
    }

    /// The default cluster with `count` separate cache managers on the aligned mapping
    /// (delegates, I/O delegation) of `memory` each.
    pub fn delegates(count: &str, memory: &str) -> ClusterOptions {
        let mut options = ClusterOptions::cached(count, memory);
        options
            .extra
            .extend(["--cache-mapping".to_string(), "aligned".to_string()]);
        options
    }
}

/// A running cluster in a temporary home; stopped (and its home removed) on drop.
pub struct TestCluster {
    home: tempfile::TempDir,
    /// Where `weft` and `weftd` are: the build's, or an installation's.
    programs: PathBuf,
    /// Environment of every `weft up` (start and restart), so of every server: test
    /// hooks of weftd's that only this cluster's servers should see.
    server_env: Vec<(String, String)>,
    /// The parent-death guard (weft_config::tie): every `weft up` gets the tie's pipe as
    /// its standard input and `--tie-to-stdin`, so every server it starts exits when
    /// this process dies, however it dies; its sweeper then continues stopped servers
    /// and removes the home.
    guard: HomeTie,
}

impl TestCluster {
    pub fn start() -> TestCluster {
        TestCluster::start_with(&ClusterOptions::default())
    }

    pub fn start_with(options: &ClusterOptions) -> TestCluster {
        TestCluster::start_from(&bin_dir(), options)
    }

    /// [`TestCluster::start_with`], every server (also when restarted) with `env` in
    /// its environment: weftd's test hooks (`WEFT_CIO_RECORD`, ...) for this cluster
    /// only, where setting them in the test process would reach every cluster the
    /// other tests of the binary start meanwhile.
    pub fn start_with_env(options: &ClusterOptions, env: &[(&str, &str)]) -> TestCluster {
        TestCluster::start_in(&bin_dir(), options, env)
    }

    /// A cluster of the `weft` and `weftd` in `programs` (an installed tree's bin/, say)
    /// rather than the build's; `command` and `weft` run that `weft` too.
    pub fn start_from(programs: &Path, options: &ClusterOptions) -> TestCluster {
        TestCluster::start_in(programs, options, &[])
    }

    fn start_in(programs: &Path, options: &ClusterOptions, env: &[(&str, &str)]) -> TestCluster {
        let home = tempfile::Builder::new()
            .prefix("weft-test-")
            .tempdir()
            .expect("tempdir");
        let guard = HomeTie::new(home.path()).expect("tying the test cluster to this process");
        let cluster = TestCluster {
            home,
            programs: programs.to_path_buf(),
            server_env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            guard,
        };
        let (io, size, count) = (
            options.io_servers.to_string(),
            options.stripe_size.to_string(),
            options.stripe_count.to_string(),
        );
        let mut args = vec![
            "up",
            "--io",
            &io,
            "--stripe-size",
            &size,
            "--stripe-count",
            &count,
        ];
        args.extend(options.extra.iter().map(String::as_str));
        // The manager's rebuilder only where a test asks for it (`--auto-rebuild RATE`
        // in `extra`): the tests of stale pieces decide when a rebuild runs.
        if !options.extra.iter().any(|a| a == "--auto-rebuild") {
            args.extend(["--auto-rebuild", "off"]);
        }
        let out = cluster.weft(&args);
        assert!(
            out.status.success(),
            "weft up failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster
    }

    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// Runs the `weft` CLI against this cluster and returns its output.
    pub fn weft(&self, args: &[&str]) -> Output {
        let mut full: Vec<&str> = Vec::new();
        // Cluster-management commands take --home; the others find it via WEFT_HOME.
        let home = self.home.path().to_str().expect("utf-8 temp path");
        full.extend_from_slice(args);
        if matches!(args.first(), Some(&"up") | Some(&"down") | Some(&"status")) {
            full.extend_from_slice(&["--home", home]);
        }
        let mut command = self.command("weft");
        // `weft server add` without --addr starts a server of the cluster: tied too.
        let starts_server = args.starts_with(&["server", "add"]) && !args.contains(&"--addr");
        if args.first() == Some(&"up") || starts_server {
            full.push("--tie-to-stdin");
            command.stdin(self.guard.stdin().expect("duplicating the guard pipe"));
            command.envs(self.server_env.iter().map(|(k, v)| (k, v)));
        }
        command.args(&full).output().expect("running weft")
    }

    /// A command for one of this cluster's programs with its environment set.
    pub fn command(&self, name: &str) -> Command {
        let mut c = Command::new(self.programs.join(name));
        for (k, v) in self.env() {
            c.env(k, v);
        }
        c
    }

    /// Environment variables that point clients at this cluster.
    pub fn env(&self) -> Vec<(String, String)> {
        // WEFT_META is left unset so that clients use this home's cluster.toml. A
        // background `weft mount` logs under XDG_STATE_HOME: in the home, not in the
        // machine's /var/log/weft or the user's ~/.local/state.
        // Open MPI's session directory in the home too: tests run at once otherwise share
        // /tmp/ompi.HOST.UID, which one mpirun removes as another makes it ("mkdir ...
        // File exists": `weft bench atomic` failed so in CI), whoever starts the mpirun.
        let ompi = self.home.path().join("ompi");
        let _ = std::fs::create_dir_all(&ompi);
        let ompi = ompi.display().to_string();
        vec![
            ("WEFT_HOME".into(), self.home.path().display().to_string()),
            (
                "XDG_STATE_HOME".into(),
                self.home.path().join("state").display().to_string(),
            ),
            ("OMPI_MCA_orte_tmpdir_base".into(), ompi.clone()),
            ("PRTE_MCA_prte_tmpdir_base".into(), ompi),
        ]
    }

    pub fn config(&self) -> ClusterConfig {
        ClusterConfig::load(&self.home.path().join(CLUSTER_FILE_NAME)).expect("cluster.toml")
    }

    pub fn meta_addr(&self) -> String {
        self.config().meta().addr.clone()
    }

    /// Address of server `id`.
    pub fn addr(&self, id: u32) -> String {
        self.config()
            .server(id)
            .unwrap_or_else(|| panic!("no server {id}"))
            .addr
            .clone()
    }

    /// The cluster key's file (`weft up` made it in the home).
    pub fn key_path(&self) -> PathBuf {
        self.home.path().join(weft_config::KEY_FILE_NAME)
    }

    /// What a client of this cluster proves: its key.
    pub fn auth(&self) -> ClientAuth {
        ClientAuth::cluster(ClusterKey::load(&self.key_path()).expect("the test cluster's key"))
    }

    /// What a server presents: a capability source making the servers' own capability
    /// (from `capability.key` when the home has one, else from the cluster key), for
    /// tests that talk to io servers as a server would.
    pub fn server_capabilities(&self) -> std::sync::Arc<weft_rpc::ServerCapabilities> {
        let key = ClusterKey::load(&self.key_path()).expect("the test cluster's key");
        let signing = match ClusterKey::load(&self.home.path().join(weft_config::CAPABILITY_KEY_FILE_NAME)) {
            Ok(servers_only) => weft_rpc::CapabilityKey::new(&servers_only),
            Err(_) => weft_rpc::CapabilityKey::new(&key),
        };
        std::sync::Arc::new(weft_rpc::ServerCapabilities::new(signing))
    }

    /// A raw connection to `addr` that presents a server capability (made from the
    /// key, as every server makes its own) for the data requests it sends: for tests
    /// that talk to io servers and cache managers as a server would.
    pub fn server_connection(
        &self,
        addr: &str,
        timeouts: weft_rpc::Timeouts,
    ) -> std::sync::Arc<weft_rpc::Connection> {
        let key = ClusterKey::load(&self.key_path()).expect("the test cluster's key");
        let connection =
            weft_rpc::Connection::connect(addr, "test server", &ClientAuth::cluster(key.clone()), timeouts)
                .expect("connecting to a test server");
        // The servers' own capability key when the home has one (`weft up` makes it).
        let signing = match ClusterKey::load(&self.home.path().join(weft_config::CAPABILITY_KEY_FILE_NAME)) {
            Ok(servers_only) => weft_rpc::CapabilityKey::new(&servers_only),
            Err(_) => weft_rpc::CapabilityKey::new(&key),
        };
        connection.set_capability_source(std::sync::Arc::new(weft_rpc::ServerCapabilities::new(signing)));
        connection
    }

    pub fn client(&self) -> Client {
        Client::connect_with(&self.meta_addr(), self.auth()).expect("connecting to the test cluster")
    }

    /// The pid of server `id`, if running.
    pub fn pid(&self, id: u32) -> Option<i32> {
        let text =
            std::fs::read_to_string(self.home.path().join("run").join(format!("server-{id}.pid"))).ok()?;
        let pid: i32 = text.trim().parse().ok()?;
        // SAFETY: signal 0 only checks existence.
        (unsafe { libc::kill(pid, 0) } == 0 && !is_zombie(pid)).then_some(pid)
    }

    /// Kills server `id` with SIGKILL (a crash) and waits until it is gone.
    pub fn kill9(&self, id: u32) {
        let pid = self
            .pid(id)
            .unwrap_or_else(|| panic!("server {id} is not running"));
        // SAFETY: signalling a weftd this cluster started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.pid(id).is_some() {
            assert!(
                Instant::now() < deadline,
                "server {id} (pid {pid}) survived SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends SIGSTOP (a hung server) or SIGCONT to server `id`.
    pub fn signal(&self, id: u32, signal: i32) {
        let pid = self
            .pid(id)
            .unwrap_or_else(|| panic!("server {id} is not running"));
        // SAFETY: signalling a weftd this cluster started.
        unsafe { libc::kill(pid, signal) };
    }

    /// Requests the metadata manager has served whose operation label (`op`, snake
    /// case: "lookup", "set_attr", "grant_capability") `counted` accepts, from its
    /// metrics endpoint (none until the first such request).
    pub fn manager_requests_where(&self, counted: impl Fn(Option<&str>) -> bool) -> f64 {
        let config = self.config();
        let addr = config
            .server(0)
            .and_then(|s| s.metrics_addr.clone())
            .expect("weft up recorded no metrics address for the manager");
        let body = weft_metrics::http::get(&format!("http://{addr}/metrics"), Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("scraping the manager: {e}"));
        let text = String::from_utf8(body).expect("metrics are UTF-8");
        weft_metrics::parse::parse(&text)
            .unwrap()
            .iter()
            .filter(|s| s.name == "weft_meta_requests_total" && counted(s.label("op")))
            .map(|s| s.value)
            .sum()
    }

    /// Requests of operation `op` the metadata manager has served.
    pub fn manager_requests(&self, op: &str) -> f64 {
        self.manager_requests_where(|o| o == Some(op))
    }

    /// Requests of operation `op` (snake case: "obj_stamp", "read") all io servers have
    /// served, from their metrics endpoints.
    pub fn io_requests(&self, op: &str) -> f64 {
        let config = self.config();
        let mut addrs: Vec<String> = config
            .io_servers()
            .filter_map(|s| s.metrics_addr.clone())
            .collect();
        addrs.sort();
        addrs.dedup();
        addrs
            .iter()
            .map(|addr| {
                let body =
                    weft_metrics::http::get(&format!("http://{addr}/metrics"), Duration::from_secs(10))
                        .unwrap_or_else(|e| panic!("scraping io server {addr}: {e}"));
                let text = String::from_utf8(body).expect("metrics are UTF-8");
                weft_metrics::parse::parse(&text)
                    .unwrap()
                    .iter()
                    .filter(|s| s.name == "weft_io_requests_total" && s.label("op") == Some(op))
                    .map(|s| s.value)
                    .sum::<f64>()
            })
            .sum()
    }

    /// Starts every stopped server again at its address and with its data.
    pub fn restart(&self) {
        let out = self.weft(&["up"]);
        assert!(
            out.status.success(),
            "weft up (restart) failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn is_zombie(pid: i32) -> bool {
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true);
    // A killed process's first thread shows Z while its other threads are still ending
    // and still hold its files (a restart then found the manager's database locked):
    // it is gone once only that first thread is left.
    zombie
        && std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| tasks.count() <= 1)
            .unwrap_or(true)
}

/// Lines of each server's log a failing test prints (`TestCluster`'s drop).
const LOG_TAIL_LINES: usize = 40;

impl TestCluster {
    /// The last lines of every server's log, for a test that failed: its home (and the
    /// logs in it) goes with the cluster, and a server's view of a client's "no answer"
    /// (a slow request, a dropped connection) is only there.
    fn print_log_tails(&self) {
        let Ok(entries) = std::fs::read_dir(self.home.path().join("logs")) else {
            return;
        };
        let mut logs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        logs.sort();
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            eprintln!("--- {} (last {} lines) ---", log.display(), tail.len());
            for line in tail {
                eprintln!("{line}");
            }
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_log_tails();
        }
        // `weft up` may have failed before writing the description: nothing to stop then
        // but what the pid files name.
        let ids: Vec<u32> = match ClusterConfig::load(&self.home.path().join(CLUSTER_FILE_NAME)) {
            Ok(c) => c.servers.iter().map(|s| s.id).collect(),
            Err(_) => (0..=64).collect(),
        };
        // Resume stopped servers so that they can exit on SIGTERM.
        for &id in &ids {
            if let Some(pid) = self.pid(id) {
                // SAFETY: signalling a weftd this cluster started.
                unsafe { libc::kill(pid, libc::SIGCONT) };
            }
        }
        let _ = self.weft(&["down"]);
        // Whatever survived `weft down` is killed: no test leaves servers behind.
        for &id in &ids {
            if let Some(pid) = self.pid(id) {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        self.guard.release();
    }
}

/// A temporary directory for processes a test starts itself rather than through
/// `weft up` (a weftd of its own, an mpirun job), tied to the test process as a
/// TestCluster is (weft_config::tie): when the test process dies, however it dies, what
/// [`TiedDir::spawn`] started ends and the directory is removed. On a normal end the
/// test stops its processes itself ([`TiedDir::stop`]) and the directory goes on drop.
pub struct TiedDir {
    // Declared first, so released before the directory is removed.
    tie: HomeTie,
    dir: tempfile::TempDir,
}

impl TiedDir {
    pub fn new(prefix: &str) -> TiedDir {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .expect("tempdir");
        let tie = HomeTie::new(dir.path()).expect("tying a test directory to this process");
        TiedDir { tie, dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A `weftd` of this build that exits when the test process dies
    /// (`--exit-on-stdin-eof`; [`TiedDir::spawn`] gives it the pipe as its input).
    pub fn weftd(&self) -> Command {
        let mut c = Command::new(bin("weftd"));
        c.arg("--exit-on-stdin-eof");
        c
    }

    /// Starts `command` with the tie's pipe as its standard input (whatever `command`
    /// set) and records it, so that a killed test's sweeper ends it (SIGTERM, for a
    /// process that does not read the pipe, such as mpirun) before removing the
    /// directory.
    pub fn spawn(&self, command: &mut Command) -> std::process::Child {
        self.tie
            .spawn(command)
            .unwrap_or_else(|e| panic!("starting {:?}: {e}", command.get_program()))
    }

    /// Kills (SIGKILL) and reaps `child` of [`TiedDir::spawn`] unless it ended, and
    /// forgets it.
    pub fn stop(&self, child: &mut std::process::Child) {
        let _ = child.kill();
        let _ = child.wait();
        self.forget(child);
    }

    /// `child` of [`TiedDir::spawn`] was reaped: a later process with its pid is not
    /// the sweeper's to end.
    pub fn forget(&self, child: &std::process::Child) {
        self.tie.forget(child.id());
    }
}

/// A small seeded generator (SplitMix64) for the tests of every crate: reproducible
/// runs without a dependency; a failing test prints its seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)`; `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.next_u64() % n
    }

    /// Uniform in `[lo, hi]`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.between(1, 100) <= percent
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.fill(&mut v);
        v
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let x = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&x[..chunk.len()]);
        }
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for k in (1..items.len()).rev() {
            let j = self.below(k as u64 + 1) as usize;
            items.swap(k, j);
        }
    }
}

/// Lets this test process open as many sockets as the hard limit allows.
pub fn raise_descriptor_limit(wanted: u64) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl), 0);
        assert!(
            rl.rlim_max >= wanted,
            "this test needs {wanted} open files; the hard limit is {}",
            rl.rlim_max
        );
        rl.rlim_cur = rl.rlim_cur.max(wanted);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &rl), 0);
    }
}

/// A tmpfs of `size` mounted over a directory (what it held copied in), unmounted when
/// dropped, also when the test fails. Mounting needs root, which CI has.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn over(dir: &Path, size: &str) -> Tmpfs {
        let saved = dir.with_extension("saved");
        std::fs::rename(dir, &saved).unwrap();
        std::fs::create_dir(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mounting a tmpfs over {} failed: this test needs root",
            dir.display()
        );
        let mounted = Tmpfs(dir.to_owned());
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", saved.display()))
            .arg(dir)
            .status()
            .unwrap();
        assert!(copied.success());
        std::fs::remove_dir_all(&saved).unwrap();
        mounted
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: servers still running keep their files until they stop.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Whether something is mounted at `path` (/proc/self/mounts).
pub fn is_mounted(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let path = path.to_string_lossy();
    mounts.lines().any(|l| l.split(' ').nth(1) == Some(&*path))
}

/// A `weft mount --foreground` of a cluster at `<dir>/mnt`, started through a
/// [`TiedDir`] (so it ends with the test process); stopped with SIGTERM (which
/// unmounts) on drop, and unmounted lazily if it did not.
pub struct WeftMount<'a> {
    tied: &'a TiedDir,
    child: std::process::Child,
    path: PathBuf,
}

impl<'a> WeftMount<'a> {
    pub fn start(cluster: &TestCluster, tied: &'a TiedDir, name: &str) -> WeftMount<'a> {
        let path = tied.path().join(name);
        std::fs::create_dir(&path).unwrap();
        let mut command = cluster.command("weft");
        command
            .arg("mount")
            .arg(&path)
            .arg("--foreground")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(tied.path().join(format!("{name}.log"))).unwrap());
        let child = tied.spawn(&mut command);
        let mount = WeftMount { tied, child, path };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !is_mounted(&mount.path) {
            assert!(
                Instant::now() < deadline,
                "weft mount {} did not come up",
                mount.path.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        mount
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WeftMount<'_> {
    fn drop(&mut self) {
        // SAFETY: signalling the mount daemon this guard started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if is_mounted(&self.path) {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
        self.tied.stop(&mut self.child);
    }
}

/// Create options for a file of `copies` replicas (`replicas=N`) with stripes of
/// `stripe_size_bytes`, the rest of the layout left to the defaults.
pub fn replicated(stripe_size_bytes: u64, copies: u8) -> weft_client::CreateOptions {
    weft_client::CreateOptions {
        layout: weft_client::LayoutRequest {
            stripe_size_bytes: Some(stripe_size_bytes),
            redundancy: Some(weft_client::Redundancy::Replicas(copies)),
            ..Default::default()
        },
        ..Default::default()
    }
}

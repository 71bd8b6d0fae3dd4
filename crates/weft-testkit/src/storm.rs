//! A metadata storm and its checker, for the crash and power-loss tests (issue 30):
//! client processes doing creates, mkdirs, renames, unlinks, chmods and appends in
//! directories of their own and in a shared one, each logging every operation and what
//! became of it, and a checker that walks the namespace afterwards against every log.
//!
//! Each client owns its names: everything under `c<k>/` of the round's directory and
//! every entry `shared/c<k>.*` (with what is under it), so one client's operations never
//! touch another's and each client's part of the namespace can be judged on its own log.
//!
//! The log (one line per event, written with one write(2) each, so a client killed with
//! SIGKILL leaves whole lines):
//! - `B <seq> <op>`: operation `seq` is about to be sent;
//! - `A <seq>`: it was answered with success (acknowledged);
//! - `E <seq> <error>`: it failed (the manager died or restarted: done or not, unknown);
//! - `P <seq> 1|0`: after an `E`, once the manager answered again, the client looked:
//!   the operation was done (1) or not (0); what follows builds on that;
//! - `S <seq> <file>`: `File::sync` of file `<file>` (its id: the seq of its create)
//!   succeeded after operation `seq`: its data and every earlier operation of this
//!   client must survive anything, a power cut included;
//! - `X <seq> <error>`: that sync failed.

use crate::Rng;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError, CreateOptions, ErrorCode, FileKind, OpenOptions, SetAttr};

/// The environment variable that turns a test binary run by [`spawn_client`] into a
/// storm client: `<id>,<round root>,<log>,<stop file>,<seed>,<sync percent>,<mount>`.
pub const CLIENT_ENV: &str = "WEFT_STORM_CLIENT";

/// Bytes of one appended record: `cc:ssssssssss\n` (client, operation seq).
pub const RECORD_BYTES: usize = 14;

/// Limit on the operations of one client in one round, so that a round that never ends
/// (a stop file never written) cannot grow a log without bound.
pub const OPS_PER_CLIENT_MAX: u64 = 200_000;

/// How long a client waits for the manager to answer again after an error.
const MANAGER_BACK_WAIT: Duration = Duration::from_secs(60);

pub fn record(client: u32, seq: u64) -> Vec<u8> {
    format!("{client:02}:{seq:010}\n").into_bytes()
}

/// One client's view of its namespace, by path relative to the round's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir {
        mode: u32,
    },
    /// `id`: the seq of the create that made it; `records`: the seqs of the appends
    /// to it, in order.
    File {
        id: u64,
        mode: u32,
        records: Vec<u64>,
    },
}

pub type Tree = BTreeMap<String, Node>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Create(String),
    Mkdir(String),
    Rename(String, String),
    Unlink(String),
    Chmod(String, u32),
    Append(String),
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Create(p) => write!(f, "create {p}"),
            Op::Mkdir(p) => write!(f, "mkdir {p}"),
            Op::Rename(a, b) => write!(f, "rename {a} {b}"),
            Op::Unlink(p) => write!(f, "unlink {p}"),
            Op::Chmod(p, m) => write!(f, "chmod {p} {m:o}"),
            Op::Append(p) => write!(f, "append {p}"),
        }
    }
}

impl Op {
    fn parse(text: &str) -> Option<Op> {
        let w: Vec<&str> = text.split(' ').collect();
        Some(match (w.first()?, w.len()) {
            (&"create", 2) => Op::Create(w[1].into()),
            (&"mkdir", 2) => Op::Mkdir(w[1].into()),
            (&"rename", 3) => Op::Rename(w[1].into(), w[2].into()),
            (&"unlink", 2) => Op::Unlink(w[1].into()),
            (&"chmod", 3) => Op::Chmod(w[1].into(), u32::from_str_radix(w[2], 8).ok()?),
            (&"append", 2) => Op::Append(w[1].into()),
            _ => return None,
        })
    }
}

fn is_within(path: &str, dir: &str) -> bool {
    path == dir || path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/')
}

/// What `op` (number `seq`) does to `tree`.
pub fn apply(tree: &mut Tree, seq: u64, op: &Op) {
    match op {
        Op::Create(p) => {
            tree.insert(
                p.clone(),
                Node::File {
                    id: seq,
                    mode: 0o644,
                    records: Vec::new(),
                },
            );
        }
        Op::Mkdir(p) => {
            tree.insert(p.clone(), Node::Dir { mode: 0o755 });
        }
        Op::Rename(from, to) => {
            let moved: Vec<(String, Node)> = tree
                .iter()
                .filter(|(k, _)| is_within(k, from))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (k, _) in &moved {
                tree.remove(k);
            }
            for (k, v) in moved {
                tree.insert(format!("{to}{}", &k[from.len()..]), v);
            }
        }
        Op::Unlink(p) => {
            tree.remove(p);
        }
        Op::Chmod(p, m) => match tree.get_mut(p) {
            Some(Node::Dir { mode } | Node::File { mode, .. }) => *mode = *m,
            None => panic!("chmod of {p}, which the model does not have"),
        },
        Op::Append(p) => match tree.get_mut(p) {
            Some(Node::File { records, .. }) => records.push(seq),
            other => panic!("append to {p}, which the model has as {other:?}"),
        },
    }
}

/// A random operation of client `k` valid in `tree` (its own part of the namespace).
pub fn next_op(rng: &mut Rng, tree: &Tree, k: u32, seq: u64) -> Op {
    let dirs: Vec<&String> = tree
        .iter()
        .filter(|(_, n)| matches!(n, Node::Dir { .. }))
        .map(|(p, _)| p)
        .collect();
    let files: Vec<&String> = tree
        .iter()
        .filter(|(_, n)| matches!(n, Node::File { .. }))
        .map(|(p, _)| p)
        .collect();
    // Where a new name may go: the client's directory, the shared one (names with the
    // client's prefix) and every directory of its own.
    let mut places: Vec<(String, String)> = vec![
        (format!("c{k}"), String::new()),
        ("shared".into(), format!("c{k}.")),
    ];
    places.extend(dirs.iter().map(|d| (d.to_string(), String::new())));
    let new_name = |rng: &mut Rng, places: &[(String, String)], kind: &str| {
        let (dir, prefix) = &places[rng.below(places.len() as u64) as usize];
        format!("{dir}/{prefix}{kind}{seq}")
    };
    let pick = |rng: &mut Rng, v: &[&String]| v[rng.below(v.len() as u64) as usize].clone();
    match rng.below(100) {
        0..=9 => Op::Mkdir(new_name(rng, &places, "d")),
        10..=24 if !files.is_empty() => {
            let from = pick(rng, &files);
            let to = if rng.below(4) == 0 && files.len() > 1 {
                // Over another file of its own.
                files.iter().find(|f| ***f != from).unwrap().to_string()
            } else {
                new_name(rng, &places, "r")
            };
            Op::Rename(from, to)
        }
        25..=29 if !dirs.is_empty() => {
            let from = pick(rng, &dirs);
            let targets: Vec<(String, String)> = places
                .iter()
                .filter(|(d, _)| !is_within(d, &from))
                .cloned()
                .collect();
            Op::Rename(from, new_name(rng, &targets, "m"))
        }
        30..=39 if !files.is_empty() => Op::Unlink(pick(rng, &files)),
        40..=54 if !tree.is_empty() => {
            let all: Vec<&String> = tree.keys().collect();
            let path = pick(rng, &all);
            let choices: &[u32] = match tree[&path] {
                Node::Dir { .. } => &[0o700, 0o750, 0o755, 0o775],
                Node::File { .. } => &[0o600, 0o640, 0o644, 0o664],
            };
            let mode = match tree[&path] {
                Node::Dir { mode } | Node::File { mode, .. } => mode,
            };
            let others: Vec<u32> = choices.iter().copied().filter(|m| *m != mode).collect();
            Op::Chmod(path, others[rng.below(others.len() as u64) as usize])
        }
        55..=79 if !files.is_empty() => Op::Append(pick(rng, &files)),
        _ => Op::Create(new_name(rng, &places, "f")),
    }
}

/// A storm client's parameters (what [`CLIENT_ENV`] carries).
#[derive(Debug, Clone)]
pub struct ClientSpec {
    pub id: u32,
    /// The round's directory in the file system (`/r3`).
    pub root: String,
    pub log: PathBuf,
    /// The client stops when this file exists.
    pub stop: PathBuf,
    pub seed: u64,
    /// Percentage of creates and appends followed by a `File::sync` of the file.
    pub sync_percent: u64,
    /// Work through this Weft mount (`weft mount`'s mountpoint) with std::fs calls
    /// rather than through the native client (which still does the looking after an
    /// error, past the kernel's caches).
    pub mount: Option<PathBuf>,
}

impl ClientSpec {
    fn encode(&self) -> String {
        format!(
            "{},{},{},{},{},{},{}",
            self.id,
            self.root,
            self.log.display(),
            self.stop.display(),
            self.seed,
            self.sync_percent,
            self.mount
                .as_ref()
                .map_or(String::new(), |m| m.display().to_string())
        )
    }

    fn decode(text: &str) -> ClientSpec {
        let f: Vec<&str> = text.split(',').collect();
        assert_eq!(f.len(), 7, "{CLIENT_ENV}={text}");
        ClientSpec {
            id: f[0].parse().unwrap(),
            root: f[1].into(),
            log: f[2].into(),
            stop: f[3].into(),
            seed: f[4].parse().unwrap(),
            sync_percent: f[5].parse().unwrap(),
            mount: (!f[6].is_empty()).then(|| f[6].into()),
        }
    }
}

/// Starts a storm client: this test binary again, running test `test` (which must call
/// [`client_main_if_asked`] first), with the cluster's environment, tied to `tied`.
pub fn spawn_client(
    tied: &crate::TiedDir,
    cluster_env: &[(String, String)],
    test: &str,
    spec: &ClientSpec,
) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let mut command = std::process::Command::new(exe);
    command
        .args(["--exact", test, "--test-threads=1", "--nocapture"])
        .env(CLIENT_ENV, spec.encode())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(spec.log.with_extension("stderr")).unwrap());
    for (k, v) in cluster_env {
        command.env(k, v);
    }
    tied.spawn(&mut command)
}

/// In a test binary's storm test: if this process is a storm client, run it and return
/// true (the test body then returns at once).
pub fn client_main_if_asked() -> bool {
    let Ok(text) = std::env::var(CLIENT_ENV) else {
        return false;
    };
    let spec = ClientSpec::decode(&text);
    // Modes through a mount are the model's (0644, 0755) whatever umask the test ran with.
    // SAFETY: umask only sets this process's mask.
    unsafe { libc::umask(0) };
    let client = Client::from_env().expect("storm client: connecting through WEFT_HOME");
    run_client(&client, &spec);
    true
}

struct Log(std::fs::File);

impl Log {
    fn line(&mut self, text: String) {
        // One write per line: a SIGKILL leaves whole lines.
        self.0
            .write_all(format!("{text}\n").as_bytes())
            .expect("writing the storm log");
    }
}

fn one_line(e: &ClientError) -> String {
    e.to_string().replace('\n', " ")
}

/// The storm of one client, until the stop file appears.
pub fn run_client(client: &Client, spec: &ClientSpec) {
    let mut log = Log(std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .expect("opening the storm log"));
    let mut rng = Rng::new(spec.seed);
    let mut tree = Tree::new();
    let abs = |p: &str| format!("{}/{p}", spec.root);
    for seq in 1..=OPS_PER_CLIENT_MAX {
        if spec.stop.exists() {
            return;
        }
        let op = next_op(&mut rng, &tree, spec.id, seq);
        log.line(format!("B {seq} {op}"));
        let sync = rng.chance(spec.sync_percent);
        let done = match &spec.mount {
            None => execute(client, spec.id, seq, &op, &abs).map(|h| h.map(|f| Handle::Native(Box::new(f)))),
            Some(mount) => execute_mounted(&mount.join(spec.root.trim_start_matches('/')), spec.id, seq, &op)
                .map(|h| h.map(Handle::Mounted)),
        };
        match done {
            Ok(handle) => {
                log.line(format!("A {seq}"));
                apply(&mut tree, seq, &op);
                if let (true, Some((file, id))) = (sync, handle.map(|f| (f, file_id(&tree, &op)))) {
                    match file.sync() {
                        Ok(()) => log.line(format!("S {seq} {id}")),
                        Err(e) => log.line(format!("X {seq} {}", e.replace('\n', " "))),
                    }
                }
            }
            Err(e) => {
                log.line(format!("E {seq} {}", e.replace('\n', " ")));
                let done = probe(client, spec.id, seq, &op, &abs);
                log.line(format!("P {seq} {}", u8::from(done)));
                if done {
                    apply(&mut tree, seq, &op);
                }
            }
        }
    }
    panic!(
        "storm client {}: {OPS_PER_CLIENT_MAX} operations and no stop",
        spec.id
    );
}

fn file_id(tree: &Tree, op: &Op) -> u64 {
    let (Op::Create(p) | Op::Append(p)) = op else {
        unreachable!("only creates and appends return a handle")
    };
    match tree.get(p) {
        Some(Node::File { id, .. }) => *id,
        other => panic!("{p} after {op}: {other:?}"),
    }
}

/// An open file to sync after a create or an append.
enum Handle {
    Native(Box<weft_client::File>),
    Mounted(std::fs::File),
}

impl Handle {
    fn sync(&self) -> Result<(), String> {
        match self {
            Handle::Native(f) => f.sync().map_err(|e| e.to_string()),
            Handle::Mounted(f) => f.sync_all().map_err(|e| e.to_string()),
        }
    }
}

/// Closes `file` and reports close(2)'s error (a mount's write-behind sends kept
/// bytes at the flush of a close), which dropping a std::fs::File would ignore.
fn close(file: std::fs::File) -> std::io::Result<()> {
    use std::os::unix::io::IntoRawFd;
    // SAFETY: the descriptor is ours and closed once.
    match unsafe { libc::close(file.into_raw_fd()) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// `execute` through a mount: `root` is the round's directory in it.
fn execute_mounted(root: &Path, k: u32, seq: u64, op: &Op) -> Result<Option<std::fs::File>, String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let at = |p: &str| root.join(p);
    let err = |e: std::io::Error| format!("{op}: {e}");
    match op {
        Op::Create(p) => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(at(p))
            .map(Some)
            .map_err(err),
        Op::Mkdir(p) => std::fs::DirBuilder::new()
            .mode(0o755)
            .create(at(p))
            .map(|()| None)
            .map_err(err),
        Op::Rename(a, b) => std::fs::rename(at(a), at(b)).map(|()| None).map_err(err),
        Op::Unlink(p) => std::fs::remove_file(at(p)).map(|()| None).map_err(err),
        Op::Chmod(p, m) => std::fs::set_permissions(at(p), std::fs::Permissions::from_mode(*m))
            .map(|()| None)
            .map_err(err),
        Op::Append(p) => {
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(at(p))
                .map_err(err)?;
            file.write_all(&record(k, seq)).map_err(err)?;
            // The sync (if any) goes to a second descriptor, after this one's close
            // reported how the bytes went.
            let again = std::fs::OpenOptions::new().append(true).open(at(p)).map_err(err);
            close(file).map_err(err)?;
            again.map(Some)
        }
    }
}

/// Runs `op`; a create or an append returns its file's handle (for a sync after it).
fn execute(
    client: &Client,
    k: u32,
    seq: u64,
    op: &Op,
    abs: &dyn Fn(&str) -> String,
) -> Result<Option<weft_client::File>, String> {
    execute_native(client, k, seq, op, abs).map_err(|e| one_line(&e))
}

fn execute_native(
    client: &Client,
    k: u32,
    seq: u64,
    op: &Op,
    abs: &dyn Fn(&str) -> String,
) -> Result<Option<weft_client::File>, ClientError> {
    match op {
        Op::Create(p) => client
            .create(
                &abs(p),
                &CreateOptions {
                    mode: 0o644,
                    exclusive: true,
                    truncate: false,
                    ..CreateOptions::default()
                },
            )
            .map(Some),
        Op::Mkdir(p) => client.mkdir(&abs(p), 0o755).map(|_| None),
        Op::Rename(a, b) => client.rename(&abs(a), &abs(b)).map(|_| None),
        Op::Unlink(p) => client.unlink(&abs(p)).map(|()| None),
        Op::Chmod(p, m) => client
            .setattr(
                &abs(p),
                &SetAttr {
                    mode: Some(*m),
                    ..SetAttr::default()
                },
            )
            .map(|_| None),
        Op::Append(p) => {
            let file = client.open(
                &abs(p),
                &OpenOptions {
                    write: true,
                    ..OpenOptions::default()
                },
            )?;
            file.append(&record(k, seq))?;
            Ok(Some(file))
        }
    }
}

/// Whether `op`, which failed, was done after all: asked once the manager answers.
fn probe(client: &Client, k: u32, seq: u64, op: &Op, abs: &dyn Fn(&str) -> String) -> bool {
    let deadline = Instant::now() + MANAGER_BACK_WAIT;
    loop {
        let looked = (|| -> Result<bool, ClientError> {
            // A name that is not there (or whose directory is not) is an answer; after
            // a crash that lost operations this client counts on, that is how it ends
            // up (and the checker says what was lost).
            let absent = |e: &ClientError| {
                matches!(
                    e.code(),
                    ErrorCode::NotFound | ErrorCode::NotDirectory | ErrorCode::Stale
                )
            };
            let stat = |p: &str| match client.stat(&abs(p)) {
                Ok(attr) => Ok(Some(attr)),
                Err(e) if absent(&e) => Ok(None),
                Err(e) => Err(e),
            };
            Ok(match op {
                Op::Create(p) | Op::Mkdir(p) => stat(p)?.is_some(),
                // Nothing but this client's operation removes its names.
                Op::Rename(a, _) | Op::Unlink(a) => stat(a)?.is_none(),
                Op::Chmod(p, m) => stat(p)?.map(|a| a.mode & 0o7777) == Some(*m),
                Op::Append(p) => {
                    let content = match read_all(client, &abs(p)) {
                        Err(e) if absent(&e) => return Ok(false),
                        other => other?,
                    };
                    let mine = record(k, seq);
                    content.chunks(RECORD_BYTES).any(|r| r == mine.as_slice())
                }
            })
        })();
        match looked {
            Ok(done) => return done,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "storm client {k}: the manager did not answer again within {MANAGER_BACK_WAIT:?}: {e}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn read_all(client: &Client, path: &str) -> Result<Vec<u8>, ClientError> {
    let file = client.open(path, &OpenOptions::default())?;
    let size = file.size()?;
    let mut buf = vec![0u8; size as usize];
    let n = file.read_at(0, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// What became of one operation, from a client's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Acknowledged,
    /// Failed, then found done (`P 1`) or not done (`P 0`).
    Failed {
        done: bool,
    },
    /// No answer logged: the client died with it in flight (or before it looked).
    Unknown,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub seq: u64,
    pub op: Op,
    pub outcome: Outcome,
}

/// A client's log, parsed.
#[derive(Debug, Clone, Default)]
pub struct ClientLog {
    pub entries: Vec<Entry>,
    /// (after operation seq, file id) of every successful sync.
    pub syncs: Vec<(u64, u64)>,
    pub failed_syncs: usize,
    pub text: String,
}

impl ClientLog {
    pub fn read(path: &Path) -> ClientLog {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut log = ClientLog {
            text: text.clone(),
            ..ClientLog::default()
        };
        for line in text.lines() {
            let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
            let (seq, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            let Ok(seq) = seq.parse::<u64>() else {
                continue;
            };
            let last = log.entries.last_mut().filter(|e| e.seq == seq);
            match (tag, last) {
                ("B", _) => log.entries.push(Entry {
                    seq,
                    op: Op::parse(rest).unwrap_or_else(|| panic!("{}: bad line {line}", path.display())),
                    outcome: Outcome::Unknown,
                }),
                ("A", Some(e)) => e.outcome = Outcome::Acknowledged,
                ("P", Some(e)) => e.outcome = Outcome::Failed { done: rest == "1" },
                ("E", Some(_)) => {}
                ("S", _) => log.syncs.push((seq, rest.parse().unwrap())),
                ("X", _) => log.failed_syncs += 1,
                _ => panic!("{}: line out of order: {line}", path.display()),
            }
        }
        log
    }

    pub fn acknowledged(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.outcome == Outcome::Acknowledged)
            .count()
    }

    /// Operations with an outcome: acknowledged, or failed and then looked at.
    pub fn resolved(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.outcome != Outcome::Unknown)
            .count()
    }

    /// Operations that got an error (unacknowledged), done or not.
    pub fn failed(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| matches!(e.outcome, Outcome::Failed { .. }))
            .count()
    }

    /// The lines around the crash, for a failure message: `before` lines before the
    /// first error (or the end, for a client killed before it saw one) and `after`
    /// lines from there.
    pub fn around_crash(&self, before: usize, after: usize) -> String {
        let lines: Vec<&str> = self.text.lines().collect();
        let crash = lines
            .iter()
            .position(|l| l.starts_with("E "))
            .unwrap_or(lines.len());
        let from = crash.saturating_sub(before);
        let to = (crash + after).min(lines.len());
        format!(
            "(lines {}..{} of {}; the first error at line {})\n{}",
            from + 1,
            to,
            lines.len(),
            crash + 1,
            lines[from..to].join("\n")
        )
    }
}

/// An entry as a walk found it (paths relative to the round's directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Dir { mode: u32 },
    File { mode: u32, content: Vec<u8> },
}

/// What a model says a walk must find.
pub fn expected(tree: &Tree, client: u32) -> BTreeMap<String, Found> {
    tree.iter()
        .map(|(p, n)| {
            let found = match n {
                Node::Dir { mode } => Found::Dir { mode: *mode },
                Node::File { mode, records, .. } => Found::File {
                    mode: *mode,
                    content: records.iter().flat_map(|&s| record(client, s)).collect(),
                },
            };
            (p.clone(), found)
        })
        .collect()
}

/// Which client owns `path` (relative to the round's directory): `c<k>/...` and
/// `shared/c<k>.<name>...` are client k's; `c<k>` and `shared` themselves nobody's.
pub fn owner(path: &str) -> Option<u32> {
    let (top, rest) = path.split_once('/')?;
    if top == "shared" {
        let name = rest.split('/').next().unwrap();
        name.strip_prefix('c')?.split_once('.')?.0.parse().ok()
    } else {
        top.strip_prefix('c')?.parse().ok()
    }
}

/// Walks `root` through `client` with every consistency check a walk can make: readdir
/// is sorted without duplicates, each entry resolves by lookup to the inode and kind
/// readdir gave, its attributes are readable with the right link count (1 for a file,
/// 2 + subdirectories for a directory), no inode appears twice, every file's objects
/// read back its whole size. Returns what it found, or what was wrong.
pub fn walk(client: &Client, root: &str) -> Result<BTreeMap<String, Found>, String> {
    let mut found = BTreeMap::new();
    let mut inodes = std::collections::BTreeSet::new();
    let mut stack = vec![String::new()];
    let err = |what: String| move |e: ClientError| format!("{what}: {e}");
    while let Some(rel) = stack.pop() {
        let base = root.trim_end_matches('/');
        let abs = if rel.is_empty() {
            root.to_owned()
        } else {
            format!("{base}/{rel}")
        };
        let dir = client.resolve(&abs).map_err(err(abs.clone()))?;
        let entries = client.readdir(&abs).map_err(err(format!("readdir {abs}")))?;
        let names: Vec<String> = entries.iter().map(|e| e.name.to_string()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if names != sorted {
            return Err(format!("{abs}: readdir not sorted or with duplicates: {names:?}"));
        }
        let mut subdirectories = 0;
        for e in entries {
            let name = e.name.to_string();
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let child_abs = format!("{base}/{child_rel}");
            let looked = client
                .lookup(dir.inode, &e.name)
                .map_err(err(format!("{child_abs}: listed but not found")))?;
            if (looked.inode, looked.kind) != (e.inode, e.kind) {
                return Err(format!("{child_abs}: readdir says {e:?}, lookup {looked:?}"));
            }
            let attr = client
                .getattr(e.inode)
                .map_err(err(format!("{child_abs}: listed but has no attributes")))?;
            if !inodes.insert(e.inode.0) {
                return Err(format!("{child_abs}: inode {} seen twice", e.inode));
            }
            match e.kind {
                FileKind::Directory => {
                    subdirectories += 1;
                    found.insert(
                        child_rel.clone(),
                        Found::Dir {
                            mode: attr.mode & 0o7777,
                        },
                    );
                    stack.push(child_rel);
                }
                FileKind::File => {
                    if attr.nlink != 1 {
                        return Err(format!(
                            "{child_abs}: link count {} (no hard links are made)",
                            attr.nlink
                        ));
                    }
                    let content =
                        read_all(client, &child_abs).map_err(err(format!("reading {child_abs}")))?;
                    found.insert(
                        child_rel,
                        Found::File {
                            mode: attr.mode & 0o7777,
                            content,
                        },
                    );
                }
                other => return Err(format!("{child_abs}: a {other:?}, which no client makes")),
            }
        }
        if dir.nlink != 2 + subdirectories {
            return Err(format!(
                "{abs}: link count {} with {subdirectories} subdirectories",
                dir.nlink
            ));
        }
    }
    Ok(found)
}

/// How a client ended its round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Ran to the stop: every operation it got an answer for (or found done after an
    /// error) must be there exactly once, nothing else.
    Survived,
    /// Killed with the manager (or by a power cut): what it synced must be there; the
    /// rest may be lost from some point on, as a prefix of its log.
    Killed,
    /// Killed by a power cut that also dropped the io servers' unsynced data: as
    /// `Killed`, and a file's records past its last sync may be lost too.
    PowerCut,
}

/// Checks client `k`'s part of `found` against its log. Returns a description of what
/// is wrong (with the log's tail and the differences), or the number of operations the
/// found state holds.
pub fn check_client(
    k: u32,
    log: &ClientLog,
    fate: Fate,
    found: &BTreeMap<String, Found>,
) -> Result<usize, String> {
    let mine: BTreeMap<String, Found> = found
        .iter()
        .filter(|(p, _)| owner(p) == Some(k))
        .map(|(p, f)| (p.clone(), f.clone()))
        .collect();
    // The operations that happened for sure (acknowledged, or found done), in order,
    // then at most one whose fate is unknown (a client killed before it logged one).
    let mut done: Vec<&Entry> = Vec::new();
    let mut unknown = None;
    for e in &log.entries {
        match e.outcome {
            Outcome::Acknowledged | Outcome::Failed { done: true } => done.push(e),
            Outcome::Failed { done: false } => {}
            Outcome::Unknown => {
                if fate == Fate::Survived {
                    return Err(format!(
                        "client {k} survived but op {} has no answer in its log",
                        e.seq
                    ));
                }
                unknown = Some(e);
            }
        }
    }
    let history: Vec<&Entry> = done.iter().copied().chain(unknown).collect();
    let mut full = Tree::new();
    for e in &history {
        apply(&mut full, e.seq, &e.op);
    }
    if fate == Fate::Survived {
        let want = expected(&full, k);
        return if want == mine {
            Ok(history.len())
        } else {
            Err(explain(
                k,
                log,
                "every answered operation exactly once",
                &want,
                &mine,
            ))
        };
    }
    // Killed: the found state must be that of a prefix of the history at least as long
    // as the last sync; file contents are checked by records (data and metadata go to
    // different servers: a file may hold appends its path's prefix does not have yet
    // only if they were done, so contents are a prefix of the file's appends).
    let synced_seq = log.syncs.last().map_or(0, |s| s.0);
    let at_least = history.iter().take_while(|e| e.seq <= synced_seq).count();
    // Per file id: every append in the history, and how many a sync covered.
    let mut appends: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut tree = Tree::new();
    for e in &history {
        if let Op::Append(p) = &e.op {
            if let Some(Node::File { id, .. }) = tree.get(p) {
                appends.entry(*id).or_default().push(e.seq);
            }
        }
        apply(&mut tree, e.seq, &e.op);
    }
    let mut synced_records: BTreeMap<u64, usize> = BTreeMap::new();
    for &(after, id) in &log.syncs {
        let n = appends
            .get(&id)
            .map_or(0, |v| v.iter().take_while(|&&s| s <= after).count());
        let slot = synced_records.entry(id).or_default();
        *slot = (*slot).max(n);
    }
    let mut tree = Tree::new();
    let mut prefixes = vec![tree.clone()];
    for e in &history {
        apply(&mut tree, e.seq, &e.op);
        prefixes.push(tree.clone());
    }
    let mut closest: Option<(usize, String)> = None;
    for m in (at_least..prefixes.len()).rev() {
        match same_but_data(k, &prefixes[m], &mine, &appends, &synced_records, fate) {
            Ok(()) => return Ok(m),
            Err(why) => {
                if closest.is_none() {
                    closest = Some((m, why));
                }
            }
        }
    }
    let (m, why) = closest.unwrap_or((0, "no prefix at least as long as the last sync".into()));
    Err(format!(
        "client {k} (killed; last sync after op {synced_seq}, so at least {at_least} of its {} operations \
         must be there): the namespace is no prefix of its log; against the longest ({m} ops): {why}\n{}",
        history.len(),
        explain(k, log, "a prefix of the log", &expected(&prefixes[m], k), &mine)
    ))
}

/// `mine` has `tree`'s names, kinds and modes, and each file's content is a prefix of
/// all the appends to it, no shorter than what a sync covered (`PowerCut`) or than the
/// appends `tree` has (`Killed`: the io servers kept everything they acknowledged).
fn same_but_data(
    k: u32,
    tree: &Tree,
    mine: &BTreeMap<String, Found>,
    appends: &BTreeMap<u64, Vec<u64>>,
    synced: &BTreeMap<u64, usize>,
    fate: Fate,
) -> Result<(), String> {
    let names: Vec<&String> = tree.keys().collect();
    let found_names: Vec<&String> = mine.keys().collect();
    if names != found_names {
        return Err("other names".into());
    }
    for (p, node) in tree {
        match (node, &mine[p]) {
            (Node::Dir { mode }, Found::Dir { mode: m }) if mode == m => {}
            (Node::File { id, mode, records }, Found::File { mode: m, content }) if mode == m => {
                let all: Vec<u8> = appends
                    .get(id)
                    .map_or(Vec::new(), |v| v.iter().flat_map(|&s| record(k, s)).collect());
                let least = match fate {
                    Fate::PowerCut => synced.get(id).copied().unwrap_or(0),
                    _ => records.len(),
                } * RECORD_BYTES;
                if !all.starts_with(content) || content.len() < least {
                    return Err(format!(
                        "{p}: content {:?} is not a prefix of its appends {:?} at least {least} bytes long",
                        String::from_utf8_lossy(content),
                        String::from_utf8_lossy(&all)
                    ));
                }
            }
            (want, got) => return Err(format!("{p}: model {want:?}, found {got:?}")),
        }
    }
    Ok(())
}

fn explain(
    k: u32,
    log: &ClientLog,
    rule: &str,
    want: &BTreeMap<String, Found>,
    got: &BTreeMap<String, Found>,
) -> String {
    let mut text =
        format!("client {k}: the namespace breaks \"{rule}\"; differences (path: expected | found):\n");
    let show = |f: Option<&Found>| match f {
        None => "-".to_string(),
        Some(Found::Dir { mode }) => format!("dir {mode:o}"),
        Some(Found::File { mode, content }) => {
            format!(
                "file {mode:o} [{}]",
                String::from_utf8_lossy(content).replace('\n', " ")
            )
        }
    };
    let paths: std::collections::BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    for p in paths {
        if want.get(p) != got.get(p) {
            let _ = writeln!(text, "  {p}: {} | {}", show(want.get(p)), show(got.get(p)));
        }
    }
    let _ = write!(text, "client {k}'s log {}", log.around_crash(40, 30));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, op: Op, outcome: Outcome) -> Entry {
        Entry { seq, op, outcome }
    }

    #[test]
    fn owners() {
        assert_eq!(owner("c3/f1"), Some(3));
        assert_eq!(owner("shared/c12.d4/x"), Some(12));
        assert_eq!(owner("shared"), None);
        assert_eq!(owner("c3"), None);
        assert_eq!(owner("shared/zzz"), None);
    }

    #[test]
    fn rename_moves_a_subtree_and_not_its_namesakes() {
        let mut t = Tree::new();
        apply(&mut t, 1, &Op::Mkdir("c0/d1".into()));
        apply(&mut t, 2, &Op::Create("c0/d1/f2".into()));
        apply(&mut t, 3, &Op::Create("c0/d12".into()));
        apply(&mut t, 4, &Op::Rename("c0/d1".into(), "shared/c0.m4".into()));
        let names: Vec<&str> = t.keys().map(String::as_str).collect();
        assert_eq!(names, ["c0/d12", "shared/c0.m4", "shared/c0.m4/f2"]);
    }

    #[test]
    fn ops_print_and_parse_back() {
        for op in [
            Op::Create("c1/f1".into()),
            Op::Rename("c1/f1".into(), "shared/c1.r2".into()),
            Op::Chmod("c1/x".into(), 0o640),
            Op::Append("c1/f".into()),
        ] {
            assert_eq!(Op::parse(&op.to_string()), Some(op));
        }
    }

    fn found_of(log: &ClientLog, upto: usize) -> BTreeMap<String, Found> {
        let mut t = Tree::new();
        for e in &log.entries[..upto] {
            apply(&mut t, e.seq, &e.op);
        }
        expected(&t, 0)
    }

    fn sample() -> ClientLog {
        ClientLog {
            entries: vec![
                entry(1, Op::Create("c0/f1".into()), Outcome::Acknowledged),
                entry(2, Op::Append("c0/f1".into()), Outcome::Acknowledged),
                entry(
                    3,
                    Op::Rename("c0/f1".into(), "shared/c0.r3".into()),
                    Outcome::Acknowledged,
                ),
                entry(4, Op::Chmod("shared/c0.r3".into(), 0o600), Outcome::Acknowledged),
            ],
            syncs: vec![(2, 1)],
            ..ClientLog::default()
        }
    }

    #[test]
    fn a_survivor_must_have_everything_exactly_once() {
        let log = sample();
        assert_eq!(check_client(0, &log, Fate::Survived, &found_of(&log, 4)), Ok(4));
        let err = check_client(0, &log, Fate::Survived, &found_of(&log, 3)).unwrap_err();
        assert!(err.contains("shared/c0.r3: file 600"), "{err}");
        // An append applied twice.
        let mut twice = found_of(&log, 4);
        if let Some(Found::File { content, .. }) = twice.get_mut("shared/c0.r3") {
            let again = content.clone();
            content.extend(again);
        }
        assert!(check_client(0, &log, Fate::Survived, &twice).is_err());
    }

    #[test]
    fn a_killed_client_may_lose_what_follows_its_last_sync_only() {
        let log = sample();
        assert_eq!(check_client(0, &log, Fate::Killed, &found_of(&log, 2)), Ok(2));
        assert_eq!(check_client(0, &log, Fate::Killed, &found_of(&log, 3)), Ok(3));
        let err = check_client(0, &log, Fate::Killed, &found_of(&log, 1)).unwrap_err();
        assert!(err.contains("no prefix"), "{err}");
        // Not a prefix: the chmod without the rename before it.
        let mut skipped = found_of(&log, 2);
        skipped.insert(
            "c0/f1".into(),
            Found::File {
                mode: 0o600,
                content: record(0, 2),
            },
        );
        assert!(check_client(0, &log, Fate::Killed, &skipped).is_err());
    }

    #[test]
    fn a_power_cut_may_lose_unsynced_records_but_not_synced_ones() {
        let mut log = sample();
        log.syncs.clear();
        let mut no_data = found_of(&log, 4);
        if let Some(Found::File { content, .. }) = no_data.get_mut("shared/c0.r3") {
            content.clear();
        }
        assert!(check_client(0, &log, Fate::Killed, &no_data).is_err());
        assert_eq!(check_client(0, &log, Fate::PowerCut, &no_data), Ok(4));
        log.syncs.push((2, 1));
        assert!(check_client(0, &log, Fate::PowerCut, &no_data).is_err());
    }

    #[test]
    fn logs_parse_with_a_torn_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(
            &path,
            "B 1 create c0/f1\nA 1\nS 1 1\nB 2 mkdir c0/d2\nE 2 gone\nP 2 0\nB 3 unlink c0/f1\n",
        )
        .unwrap();
        let log = ClientLog::read(&path);
        assert_eq!(log.entries.len(), 3);
        assert_eq!(log.entries[1].outcome, Outcome::Failed { done: false });
        assert_eq!(log.entries[2].outcome, Outcome::Unknown);
        assert_eq!(log.syncs, [(1, 1)]);
    }
}

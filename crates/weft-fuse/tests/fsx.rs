//! A randomized file-operation exerciser in the manner of fsx: the same random sequence
//! of open, write, read, truncate, rename, unlink and close runs on the mount and on a
//! local directory, and after every step the two must agree (what a read returned, each
//! name's existence and size, and the whole content of the file the step touched).
//!
//! Seeded and reproducible: the seed is printed at the start and in the failure message;
//! `WEFT_FSX_SEED=<seed>` replays a run and `WEFT_FSX_OPS=<n>` changes its length.
//!
//! Files unlinked or replaced by rename while open stay usable through their open
//! descriptors (the mount keeps them under hidden names): the sequence goes on reading
//! and writing such orphans, and at the end no hidden name may be left behind.

mod common;

use common::Mount;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use weft_testkit::TestCluster;

/// Names the sequence works on: few, so that operations meet the same files often.
const NAMES: usize = 6;
/// Offsets reach past 1 MiB, across stripes (64 KiB) and FUSE requests (1 MiB).
const OFFSET_MAX: u64 = 1_300_000;
const WRITE_BYTES_MAX: u64 = 200_000;
const OPS_DEFAULT: usize = 3000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Mostly small values, sometimes up to `max`.
    fn size(&mut self, max: u64) -> u64 {
        match self.below(4) {
            0 => self.below(16),
            1 => self.below(4096 + 1),
            _ => self.below(max + 1),
        }
    }
}

/// Open descriptors of removed files kept, at most (the oldest closes first).
const ORPHANS_MAX: usize = 4;

/// One side of the comparison: a root directory, its open files by name, and open
/// descriptors of files removed since.
struct Side {
    root: PathBuf,
    open: HashMap<usize, File>,
    orphans: Vec<File>,
}

impl Side {
    fn path(&self, name: usize) -> PathBuf {
        self.root.join(format!("f{name}"))
    }

    fn handle(&mut self, name: usize) -> std::io::Result<&File> {
        if !self.open.contains_key(&name) {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(self.path(name))?;
            self.open.insert(name, f);
        }
        Ok(&self.open[&name])
    }

    /// The descriptor open on `name`, if any, now belongs to a removed file.
    fn orphan(&mut self, name: usize) {
        if let Some(f) = self.open.remove(&name) {
            if self.orphans.len() == ORPHANS_MAX {
                self.orphans.remove(0);
            }
            self.orphans.push(f);
        }
    }
}

fn read_fully(f: &File, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    let mut got = 0;
    // A read may return less than asked before the end of the file.
    loop {
        let n = f.read_at(&mut buf[got..], offset + got as u64)?;
        got += n;
        if n == 0 || got == buf.len() {
            break;
        }
    }
    buf.truncate(got);
    Ok(buf)
}

fn read_outcome(result: std::io::Result<Vec<u8>>) -> String {
    match result {
        Ok(buf) => format!("ok {} bytes, fnv {:016x}", buf.len(), fnv(&buf)),
        Err(e) => format!("error {:?}", e.raw_os_error()),
    }
}

fn outcome<T: std::fmt::Debug>(r: std::io::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("error {:?}", e.raw_os_error()),
    }
}

/// Applies step `op` to one side; returns what a caller would observe.
fn apply(side: &mut Side, op: &Op) -> String {
    match *op {
        Op::Write {
            name,
            offset,
            len,
            seed,
        } => {
            let data = common::pattern(seed, len as usize);
            outcome(side.handle(name).and_then(|f| f.write_all_at(&data, offset)))
        }
        Op::Read { name, offset, len } => {
            read_outcome(side.handle(name).and_then(|f| read_fully(f, offset, len)))
        }
        Op::Truncate { name, size } => outcome(side.handle(name).and_then(|f| f.set_len(size))),
        Op::Close { name } => {
            side.open.remove(&name);
            "ok".into()
        }
        Op::Fsync { name } => outcome(side.handle(name).and_then(|f| f.sync_all())),
        Op::Rename { from, to } => {
            let r = std::fs::rename(side.path(from), side.path(to));
            if r.is_ok() && from != to {
                side.orphan(to);
                if let Some(f) = side.open.remove(&from) {
                    side.open.insert(to, f);
                }
            }
            outcome(r)
        }
        Op::Unlink { name } => {
            let r = std::fs::remove_file(side.path(name));
            if r.is_ok() {
                side.orphan(name);
            }
            outcome(r)
        }
        Op::OrphanRead { k, offset, len } => match side.orphans.len() {
            0 => "no orphan".into(),
            n => read_outcome(read_fully(&side.orphans[k % n], offset, len)),
        },
        Op::OrphanWrite { k, offset, len, seed } => match side.orphans.len() {
            0 => "no orphan".into(),
            n => outcome(side.orphans[k % n].write_all_at(&common::pattern(seed, len as usize), offset)),
        },
        Op::OrphanClose { k } => match side.orphans.len() {
            0 => "no orphan".into(),
            n => {
                side.orphans.remove(k % n);
                "ok".into()
            }
        },
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Write {
        name: usize,
        offset: u64,
        len: u64,
        seed: u64,
    },
    Read {
        name: usize,
        offset: u64,
        len: u64,
    },
    Truncate {
        name: usize,
        size: u64,
    },
    Close {
        name: usize,
    },
    Fsync {
        name: usize,
    },
    Rename {
        from: usize,
        to: usize,
    },
    Unlink {
        name: usize,
    },
    OrphanRead {
        k: usize,
        offset: u64,
        len: u64,
    },
    OrphanWrite {
        k: usize,
        offset: u64,
        len: u64,
        seed: u64,
    },
    OrphanClose {
        k: usize,
    },
}

impl Op {
    fn random(rng: &mut Rng) -> Op {
        let name = rng.below(NAMES as u64) as usize;
        let k = rng.below(ORPHANS_MAX as u64) as usize;
        match rng.below(110) {
            100..=104 => Op::OrphanRead {
                k,
                offset: rng.size(OFFSET_MAX),
                len: rng.size(WRITE_BYTES_MAX),
            },
            105..=107 => Op::OrphanWrite {
                k,
                offset: rng.size(OFFSET_MAX),
                len: rng.size(WRITE_BYTES_MAX),
                seed: rng.next(),
            },
            108..=109 => Op::OrphanClose { k },
            0..=34 => Op::Write {
                name,
                offset: rng.size(OFFSET_MAX),
                len: rng.size(WRITE_BYTES_MAX),
                seed: rng.next(),
            },
            35..=59 => Op::Read {
                name,
                offset: rng.size(OFFSET_MAX),
                len: rng.size(WRITE_BYTES_MAX * 2),
            },
            60..=69 => Op::Truncate {
                name,
                size: rng.size(OFFSET_MAX),
            },
            70..=81 => Op::Close { name },
            82..=84 => Op::Fsync { name },
            85..=93 => Op::Rename {
                from: name,
                to: rng.below(NAMES as u64) as usize,
            },
            _ => Op::Unlink { name },
        }
    }

    /// The names whose content the step may change.
    fn touched(&self) -> Vec<usize> {
        match *self {
            Op::Write { name, .. } | Op::Truncate { name, .. } | Op::Read { name, .. } => vec![name],
            Op::Rename { from, to } => vec![from, to],
            _ => Vec::new(),
        }
    }
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// What a fresh look at `name` shows: existence, size, and (if `content`) the bytes,
/// through a new descriptor so that it also checks what the next open sees.
fn state(root: &Path, name: usize, content: bool) -> String {
    let path = root.join(format!("f{name}"));
    match std::fs::metadata(&path) {
        Err(e) => format!("f{name}: missing ({:?})", e.raw_os_error()),
        Ok(m) if !content => format!("f{name}: {} bytes", m.len()),
        Ok(m) => {
            let data = common::read_all(&path);
            format!(
                "f{name}: {} bytes, read {} fnv {:016x}",
                m.len(),
                data.len(),
                fnv(&data)
            )
        }
    }
}

#[test]
fn random_operations_match_a_local_directory() {
    let seed: u64 = std::env::var("WEFT_FSX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let ops: usize = std::env::var("WEFT_FSX_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(OPS_DEFAULT);
    eprintln!("fsx: seed {seed}, {ops} operations (replay with WEFT_FSX_SEED={seed})");

    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let local = tempfile::tempdir().unwrap();
    std::fs::create_dir(mount.join("fsx")).unwrap();
    let mut weft = Side {
        root: mount.join("fsx"),
        open: HashMap::new(),
        orphans: Vec::new(),
    };
    let mut reference = Side {
        root: local.path().to_path_buf(),
        open: HashMap::new(),
        orphans: Vec::new(),
    };
    let mut rng = Rng(seed);
    let mut history: Vec<String> = Vec::new();
    let started = std::time::Instant::now();
    let mut orphan_steps = 0;
    for step in 0..ops {
        let op = Op::random(&mut rng);
        history.push(format!("{step}: {op:?}"));
        let expected = apply(&mut reference, &op);
        let got = apply(&mut weft, &op);
        let fail = |what: &str, expected: &str, got: &str| -> ! {
            let recent = history[history.len().saturating_sub(20)..].join("\n  ");
            panic!(
                "fsx seed {seed}: step {step} {op:?}: {what} differs\n  local: {expected}\n  weft:  {got}\n\
                 last steps:\n  {recent}\nreplay with WEFT_FSX_SEED={seed} WEFT_FSX_OPS={}",
                step + 1
            )
        };
        if expected != got {
            fail("the result", &expected, &got);
        }
        if matches!(op, Op::OrphanRead { .. } | Op::OrphanWrite { .. }) && got != "no orphan" {
            orphan_steps += 1;
        }
        for name in 0..NAMES {
            let content = op.touched().contains(&name);
            let (e, g) = (
                state(&reference.root, name, content),
                state(&weft.root, name, content),
            );
            if e != g {
                fail("the file state", &e, &g);
            }
        }
    }
    weft.open.clear();
    weft.orphans.clear();
    reference.open.clear();
    reference.orphans.clear();
    for name in 0..NAMES {
        assert_eq!(state(&reference.root, name, true), state(&weft.root, name, true));
    }
    // Every removed file's hidden name went with its last descriptor.
    let names = |root: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&reference.root),
        names(&weft.root),
        "fsx seed {seed}: directory listings differ"
    );
    eprintln!(
        "fsx: {ops} operations agreed in {:.1} s ({orphan_steps} on removed open files)",
        started.elapsed().as_secs_f64()
    );
    if ops >= 1000 {
        assert!(
            orphan_steps > 0,
            "fsx seed {seed}: the sequence never used a removed open file"
        );
    }
}

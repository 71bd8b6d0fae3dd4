//! Durability: what an operation acknowledged survives reopening, an abort
//! without any shutdown, and kill -9 in the middle of a stream of creates; inode
//! numbers are never reused across any of these.
//!
//! The crash tests run this test binary again as a child process (selecting
//! `child_process_entry` and a scenario through the environment) so that the
//! store dies with its process, exactly as a crashed server would.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use weft_layout::{InodeId, LayoutRequest};
use weft_meta::CreateCheck;
use weft_proto::{ErrorCode, FileKind, MetaStatfs, SetAttr};

const SCENARIO_VARIABLE: &str = "WEFT_META_CRASH_SCENARIO";
const DIRECTORY_VARIABLE: &str = "WEFT_META_CRASH_DIR";

/// Acknowledged creates the kill -9 test waits for before killing.
const ACKS_BEFORE_KILL: usize = 300;

/// Not a test of its own: the body of the child process. Without the scenario
/// variable (a normal test run) it does nothing.
#[test]
fn child_process_entry() {
    let Ok(scenario) = std::env::var(SCENARIO_VARIABLE) else {
        return;
    };
    let dir = std::env::var(DIRECTORY_VARIABLE).expect("crash directory");
    let store = open(Path::new(&dir));
    let mut out = std::io::stdout().lock();
    // The harness has printed "test child_process_entry ... " without a newline.
    writeln!(out).unwrap();
    match scenario.as_str() {
        "abort" => {
            let r = root();
            let kept = store.mkdir(&r, InodeId::ROOT, "kept", 0o755).unwrap();
            create(&store, &r, kept.inode, "file").unwrap();
            store.symlink(&r, kept.inode, "link", "file").unwrap();
            store
                .rename(&r, (kept.inode, "file"), (kept.inode, "renamed"), None)
                .unwrap();
            let gone = create(&store, &r, InodeId::ROOT, "gone").unwrap();
            store.unlink(&r, InodeId::ROOT, "gone", None).unwrap();
            let chmod = SetAttr {
                mode: Some(0o700),
                ..Default::default()
            };
            store.setattr(&r, kept.inode, &chmod).unwrap();
            writeln!(out, "gone {}", gone.inode.0).unwrap();
            // An inode handed out by a check whose commit never happens.
            let CreateCheck::New(pending) = store
                .create_check(
                    &r,
                    InodeId::ROOT,
                    "pending",
                    0o644,
                    &LayoutRequest::default(),
                    true,
                )
                .unwrap()
            else {
                panic!("pending exists");
            };
            writeln!(out, "allocated {}", pending.inode().0).unwrap();
            out.flush().unwrap();
            // No drop, no unwinding, no clean shutdown of the database.
            std::process::abort();
        }
        "creates" => {
            for i in 0.. {
                let attr = create(&store, &root(), InodeId::ROOT, format!("f{i}")).unwrap();
                // Printed only after the commit returned: an acknowledgement.
                writeln!(out, "acked f{i} {}", attr.inode.0).unwrap();
                out.flush().unwrap();
            }
        }
        other => panic!("unknown scenario {other}"),
    }
}

fn child(scenario: &str, dir: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_entry",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(SCENARIO_VARIABLE, scenario)
        .env(DIRECTORY_VARIABLE, dir)
        // Keep the abort quiet and quick.
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The value after `key ` on the first line that starts with it.
fn reported(lines: &[String], key: &str) -> u64 {
    let prefix = format!("{key} ");
    let line = lines
        .iter()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {key} in {lines:?}"));
    line[prefix.len()..].trim().parse().unwrap()
}

#[test]
fn acknowledged_operations_survive_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let output = child("abort", dir.path()).wait_with_output().unwrap();
    assert!(!output.status.success(), "the child must die, not exit");
    let lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let gone = InodeId(reported(&lines, "gone"));
    let allocated = reported(&lines, "allocated");

    let store = open(dir.path());
    let r = root();
    let kept = store.resolve(&r, "/kept").unwrap();
    assert_eq!((kept.kind, kept.mode), (FileKind::Directory, 0o700));
    assert_eq!(store.resolve(&r, "/kept/renamed").unwrap().kind, FileKind::File);
    assert_eq!(code(store.resolve(&r, "/kept/file")), ErrorCode::NotFound);
    let link = store.resolve(&r, "/kept/link").unwrap();
    assert_eq!(store.readlink(&r, link.inode).unwrap(), "file");
    assert_eq!(code(store.resolve(&r, "/gone")), ErrorCode::NotFound);
    assert_eq!(code(store.resolve(&r, "/pending")), ErrorCode::NotFound);
    assert_eq!(
        store.orphans(10).unwrap().iter().map(|o| o.0).collect::<Vec<_>>(),
        vec![gone]
    );
    assert_eq!(
        store.statfs(&r).unwrap(),
        MetaStatfs {
            files: 2,
            directories: 2,
            orphans: 1
        }
    );
    // The number handed to the uncommitted create is never handed out again.
    let fresh = create(&store, &r, InodeId::ROOT, "fresh").unwrap();
    assert!(
        fresh.inode.0 > allocated,
        "{} reused or below {allocated}",
        fresh.inode
    );
}

#[test]
fn acknowledged_creates_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut process = child("creates", dir.path());
    let mut acked = Vec::new();
    let stdout = BufReader::new(process.stdout.take().unwrap());
    for line in stdout.lines() {
        let line = line.unwrap();
        let Some(rest) = line.strip_prefix("acked ") else {
            continue;
        };
        let (name, inode) = rest.split_once(' ').unwrap();
        acked.push((name.to_owned(), InodeId(inode.parse().unwrap())));
        if acked.len() == ACKS_BEFORE_KILL {
            // SIGKILL, in the middle of whatever create comes next.
            process.kill().unwrap();
            break;
        }
    }
    process.wait().unwrap();
    assert_eq!(acked.len(), ACKS_BEFORE_KILL, "the child stopped early");
    assert_eq!(acked[0].0, "f0", "every acknowledgement was read");

    let store = open(dir.path());
    for (name, inode) in &acked {
        let attr = store
            .lookup(&root(), InodeId::ROOT, name)
            .unwrap_or_else(|e| panic!("{name} lost: {e}"));
        assert_eq!(attr.inode, *inode, "{name}");
    }
    let files = store.statfs(&root()).unwrap().files;
    assert!(files >= ACKS_BEFORE_KILL as u64, "{files} files");
    // New numbers after the crash are above every number the child handed out.
    let highest = acked.iter().map(|(_, inode)| *inode).max().unwrap();
    let fresh = create(&store, &root(), InodeId::ROOT, "after-crash").unwrap();
    assert!(fresh.inode > highest);
}

#[test]
fn reopening_keeps_the_namespace_and_never_reuses_inode_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = BTreeSet::new();
    let mut last_session_max = InodeId(0);
    for session in 0..3 {
        let store = open(dir.path());
        // Everything from earlier sessions is still there.
        let (entries, more) = store.readdir(&root(), InodeId::ROOT, "", 0).unwrap();
        assert!(!more);
        assert_eq!(entries.len(), session * 1100);
        assert!(entries.iter().all(|e| seen.contains(&e.inode)));
        // More than one reservation block of inode numbers per session.
        for i in 0..1100 {
            let attr = create(&store, &root(), InodeId::ROOT, format!("s{session}-{i}")).unwrap();
            assert!(
                attr.inode > last_session_max,
                "{} not above earlier sessions",
                attr.inode
            );
            assert!(seen.insert(attr.inode), "{} handed out twice", attr.inode);
        }
        // A check that is never committed still consumes its number.
        let CreateCheck::New(pending) = store
            .create_check(
                &root(),
                InodeId::ROOT,
                "never",
                0o644,
                &LayoutRequest::default(),
                true,
            )
            .unwrap()
        else {
            panic!("never exists");
        };
        assert!(seen.insert(pending.inode()));
        last_session_max = *seen.iter().max().unwrap();
        // Dropped without committing `pending`; the store closes cleanly here.
    }
}

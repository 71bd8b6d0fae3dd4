//! Versions a user can see, so that mixed installations are diagnosable: `weft
//! --version` and `weftd --version` name the package version and the git revision they
//! were built from, and `weft status` shows each server's protocol version and build.

mod common;

use std::process::Command;
use weft_testkit::{bin, TestCluster};

/// What the binaries must report: the revision of this checkout as git tells it now,
/// or "unknown" outside a git checkout (a release tarball).
fn expected_build() -> String {
    let revision = Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    format!("{} (git {revision})", env!("CARGO_PKG_VERSION"))
}

fn version_line(program: &str) -> String {
    let out = Command::new(bin(program)).arg("--version").output().unwrap();
    assert!(out.status.success(), "{program} --version failed");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn both_programs_name_their_version_and_git_revision() {
    let build = expected_build();
    assert_eq!(version_line("weft"), format!("weft {build}"));
    assert_eq!(version_line("weftd"), format!("weftd {build}"));
}

#[test]
fn status_shows_each_servers_protocol_version_and_build() {
    let cluster = TestCluster::start_with(&weft_testkit::ClusterOptions {
        io_servers: 2,
        ..Default::default()
    });
    let out = cluster.weft(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // The build each server reports is the one its binary prints.
    let weftd_build = version_line("weftd")
        .strip_prefix("weftd ")
        .expect("weftd --version starts with its name")
        .to_owned();
    let rows = common::server_rows(&text);
    assert_eq!(rows.len(), 3, "{text}");
    for row in rows {
        let columns: Vec<&str> = row.split_whitespace().collect();
        // server roles address pid state proto build... stored...
        assert_eq!(columns[5], weft_proto::PROTOCOL_VERSION.to_string(), "{row}");
        assert!(
            row.contains(&weftd_build),
            "server row without its build {weftd_build}: {row}"
        );
    }
    assert!(
        text.contains(&format!("protocol {}", weft_proto::PROTOCOL_VERSION)),
        "status names this weft's protocol:\n{text}"
    );
}

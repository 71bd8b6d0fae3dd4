//! Measures how fast the store creates files with immediate durability (one
//! fsync'd transaction per commit, plus one per block of reserved inode numbers).
//!
//! `cargo run --release -p weft-meta --example create_rate -- [files] [dir]`
//! The directory defaults to a fresh one under the system temp dir; the fsync
//! cost depends on the file system it is on.

use std::time::Instant;

use weft_layout::{InodeId, LayoutRequest, ServerId};
use weft_meta::{ClusterLayout, CreateCheck, MetaStore};
use weft_proto::Cred;

fn main() {
    let mut args = std::env::args().skip(1);
    let files: usize = args.next().map_or(10_000, |a| a.parse().expect("file count"));
    let dir = args
        .next()
        .map_or_else(std::env::temp_dir, Into::into)
        .join(format!("weft-create-rate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating the database directory");
    let store = MetaStore::open(&dir.join("meta.redb"), (0, 0)).expect("opening the store");
    store
        .set_cluster(ClusterLayout {
            io_servers: (0..4).map(ServerId).collect(),
            default_layout: LayoutRequest::default(),
            cache_managers: 0,
        })
        .expect("cluster");
    let cred = Cred::root();
    let start = Instant::now();
    for i in 0..files {
        let name = format!("f{i:07}");
        let CreateCheck::New(pending) = store
            .create_check(
                &cred,
                InodeId::ROOT,
                &name,
                0o644,
                &LayoutRequest::default(),
                true,
            )
            .expect("check")
        else {
            panic!("{name} already exists");
        };
        store.create_commit(&cred, pending).expect("commit");
    }
    let elapsed = start.elapsed();
    println!(
        "files {files}  seconds {:.2}  creates_per_second {:.0}  microseconds_per_create {:.0}",
        elapsed.as_secs_f64(),
        files as f64 / elapsed.as_secs_f64(),
        elapsed.as_micros() as f64 / files as f64
    );
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
}

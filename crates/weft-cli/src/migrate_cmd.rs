//! `weft migrate`: restripes files in place (`Client::migrate_path`), keeping each
//! file's inode, attributes and extended attributes, as Lustre's `lfs migrate`.

use crate::cluster::human_bytes;
use crate::progress::Progress;
use crate::LayoutArgs;
use anyhow::Result;
use std::time::Instant;
use weft_client::{Client, FileKind, Layout};

/// Most directory levels `-r` descends.
const DEPTH_MAX: usize = 256;

#[derive(clap::Args, Debug)]
pub(crate) struct MigrateArgs {
    /// Files to migrate (with -r, directories whose files to migrate).
    #[arg(required = true)]
    pub(crate) paths: Vec<String>,
    /// Every regular file below each directory given.
    #[arg(short, long)]
    pub(crate) recursive: bool,
    #[command(flatten)]
    pub(crate) layout: LayoutArgs,
}

/// A layout as `weft migrate` reports it.
fn describe(layout: &Layout) -> String {
    let servers: Vec<String> = layout.servers.iter().map(|s| s.to_string()).collect();
    format!(
        "stripe size {}, count {} on io servers [{}], {}",
        human_bytes(layout.stripe_size_bytes),
        layout.servers.len(),
        servers.join(","),
        layout.redundancy()
    )
}

pub(crate) fn run(client: &Client, args: MigrateArgs) -> Result<()> {
    if args.layout.cache.is_some() {
        anyhow::bail!(
            "--cache: a file's caching mode does not change by migration; it is fixed when the file is made"
        );
    }
    let asked = args.layout.request();
    let mut files = Vec::new();
    for path in &args.paths {
        collect(client, path, args.recursive, 0, &mut files)?;
    }
    let started = Instant::now();
    let (mut moved, mut bytes, mut failed) = (0u64, 0u64, 0u64);
    for path in &files {
        let mut progress: Option<Progress> = None;
        let result = client.migrate_path(path, &asked, &mut |done, size| {
            progress
                .get_or_insert_with(|| Progress::new(&format!("migrate {path}"), size))
                .set(done)
        });
        if let Some(p) = progress.as_mut() {
            p.finish(0);
        }
        match result {
            Ok(m) if m.old == m.new => println!("{path}: has that layout already ({})", describe(&m.old)),
            Ok(m) => {
                moved += 1;
                bytes += m.bytes;
                println!("{path}: {} -> {}", describe(&m.old), describe(&m.new));
            }
            Err(e) => {
                failed += 1;
                eprintln!("weft: migrate {path}: {e}");
            }
        }
    }
    if files.len() > 1 {
        println!(
            "migrated {moved} of {} files: {} copied in {:.2} s",
            files.len(),
            human_bytes(bytes),
            started.elapsed().as_secs_f64()
        );
    }
    if failed > 0 {
        anyhow::bail!("{failed} files could not be migrated (each left as it was)");
    }
    Ok(())
}

/// `path` if a regular file; with `recursive`, the regular files below a directory.
fn collect(client: &Client, path: &str, recursive: bool, depth: usize, out: &mut Vec<String>) -> Result<()> {
    let attr = client.resolve(path)?;
    match attr.kind {
        FileKind::File => out.push(path.to_owned()),
        FileKind::Directory if recursive && depth < DEPTH_MAX => {
            for entry in client.readdir(path)? {
                let name = String::from_utf8_lossy(entry.name.as_bytes()).into_owned();
                if name.contains(".weft-migrate-") {
                    continue;
                }
                let child = format!("{}/{name}", path.trim_end_matches('/'));
                match entry.kind {
                    FileKind::File | FileKind::Directory => collect(client, &child, true, depth + 1, out)?,
                    _ => {}
                }
            }
        }
        FileKind::Directory if recursive => anyhow::bail!("{path}: more than {DEPTH_MAX} directory levels"),
        FileKind::Directory => anyhow::bail!("{path}: a directory (use -r to migrate the files below it)"),
        _ => anyhow::bail!("{path}: not a regular file: only files migrate"),
    }
    Ok(())
}

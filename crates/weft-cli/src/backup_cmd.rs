//! `weft backup FILE` and `weft restore FILE`: the metadata manager's namespace saved
//! while the cluster runs, and put back on a stopped manager.
//!
//! A backup file is a 64-byte header and a snapshot of the manager's redb database
//! (one committed state, `weft_meta::store`'s `snapshot_to`): the magic `WEFTBKP\0`,
//! the header's version (u32, 1), the protocol version of the manager that made it
//! (u16) and two bytes of zeros, the store format (u64), the snapshot's length (u64)
//! and its SHA-256 (32 bytes), little-endian. It is written under a temporary name
//! beside FILE, synced and renamed, so FILE is whole or absent. A restore refuses a
//! file whose header, length or checksum is wrong, one from a newer protocol or
//! another store format, and a manager that is running (its database is locked).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use weft_config::{ClusterConfig, CLUSTER_FILE_NAME};
use weft_proto::msg::{BACKUP_CHECKSUM_BYTES, BACKUP_CHUNK_BYTES_MAX};
use weft_proto::{Request, Response};
use weft_rpc::{ClientAuth, ClusterKey, Connection, Timeouts};

use crate::cluster::human_bytes;

const MAGIC: &[u8; 8] = b"WEFTBKP\0";
const HEADER_VERSION: u32 = 1;
const HEADER_BYTES: usize = 64;
/// The manager's database in its data directory (weftd's `meta.redb`).
const DATABASE_FILE: &str = "meta.redb";

#[derive(clap::Args, Debug)]
pub struct BackupArgs {
    /// Where to write the backup (replaced atomically if it exists).
    pub file: PathBuf,
    /// No progress line on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// A file `weft backup` wrote.
    pub file: PathBuf,
    /// The home whose cluster.toml names the metadata manager (default: $WEFT_HOME or
    /// ~/.weft); its manager must be stopped.
    #[arg(long, conflicts_with = "data_dir")]
    pub home: Option<PathBuf>,
    /// The stopped manager's data directory (weftd --data-dir), for a cluster
    /// described elsewhere.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// The header of a backup file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    protocol: u16,
    store_format: u64,
    bytes: u64,
    sha256: [u8; BACKUP_CHECKSUM_BYTES],
}

impl Header {
    fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&HEADER_VERSION.to_le_bytes());
        h[12..14].copy_from_slice(&self.protocol.to_le_bytes());
        h[16..24].copy_from_slice(&self.store_format.to_le_bytes());
        h[24..32].copy_from_slice(&self.bytes.to_le_bytes());
        h[32..].copy_from_slice(&self.sha256);
        h
    }

    fn decode(h: &[u8; HEADER_BYTES]) -> Result<Header> {
        if &h[..8] != MAGIC {
            bail!("not a Weft metadata backup (it does not start with the backup magic)");
        }
        let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        if version != HEADER_VERSION {
            bail!("backup header version {version}: this weft reads version {HEADER_VERSION}");
        }
        Ok(Header {
            protocol: u16::from_le_bytes(h[12..14].try_into().expect("2 bytes")),
            store_format: u64::from_le_bytes(h[16..24].try_into().expect("8 bytes")),
            bytes: u64::from_le_bytes(h[24..32].try_into().expect("8 bytes")),
            sha256: h[32..].try_into().expect("32 bytes"),
        })
    }
}

/// `weft backup FILE`.
pub fn backup(args: &BackupArgs) -> Result<()> {
    let meta = weft_config::meta_address()?;
    let key = weft_config::client_key_path()?;
    let auth =
        ClientAuth::cluster(ClusterKey::load(&key).with_context(|| format!("loading {}", key.display()))?);
    // A snapshot of a big namespace takes a while: the manager answers once it is made.
    let timeouts = Timeouts {
        connect: Duration::from_secs(10),
        request: Duration::from_secs(600),
    };
    let connection = Connection::connect(&meta, "weft backup", &auth, timeouts)
        .with_context(|| format!("connecting to the metadata manager at {meta}"))?;
    let (snapshot, header) = match connection.call(&Request::BackupBegin, &[]) {
        Ok((
            Response::BackupReady {
                snapshot,
                bytes,
                sha256,
                store_format,
                protocol,
            },
            _,
        )) => (
            snapshot,
            Header {
                protocol,
                store_format,
                bytes,
                sha256,
            },
        ),
        Ok((other, _)) => bail!("the metadata manager answered a backup with {other:?}"),
        Err(e) => bail!("the metadata manager at {meta} made no snapshot: {e}"),
    };
    let result = fetch(&connection, snapshot, &header, &args.file, args.quiet);
    // Whatever happened, the manager may drop its copy.
    let _ = connection.call(&Request::BackupEnd { snapshot }, &[]);
    result?;
    println!(
        "backup {}: {} of metadata (store format {}, protocol {}), sha256 {}",
        args.file.display(),
        human_bytes(header.bytes),
        header.store_format,
        header.protocol,
        hex(&header.sha256)
    );
    Ok(())
}

/// Reads snapshot `snapshot` into `file` (through a temporary file, renamed at the end).
fn fetch(connection: &Connection, snapshot: u64, header: &Header, file: &Path, quiet: bool) -> Result<()> {
    let name = file
        .file_name()
        .with_context(|| format!("{}: not a file name", file.display()))?;
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let temp = dir.join(format!(
        ".{}.weft-backup-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| -> Result<()> {
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .with_context(|| format!("creating {}", temp.display()))?;
        out.write_all(&header.encode())?;
        let mut hash = Sha256::new();
        let mut offset = 0u64;
        let mut last = Instant::now();
        while offset < header.bytes {
            let chunk = match connection.call(
                &Request::BackupRead {
                    snapshot,
                    offset,
                    len: BACKUP_CHUNK_BYTES_MAX as u32,
                },
                &[],
            ) {
                Ok((Response::BackupChunk(chunk), _)) => chunk,
                Ok((other, _)) => bail!("the metadata manager answered a backup read with {other:?}"),
                Err(e) => bail!("reading the snapshot at {offset}: {e}"),
            };
            if chunk.is_empty() {
                bail!(
                    "the snapshot ended at {offset} bytes; the manager announced {}",
                    header.bytes
                );
            }
            hash.update(&chunk);
            out.write_all(&chunk)?;
            offset += chunk.len() as u64;
            if !quiet && last.elapsed() >= Duration::from_millis(500) {
                last = Instant::now();
                eprint!(
                    "\rbackup: {} of {}   ",
                    human_bytes(offset),
                    human_bytes(header.bytes)
                );
            }
        }
        if !quiet && header.bytes > 0 {
            eprintln!();
        }
        let got: [u8; BACKUP_CHECKSUM_BYTES] = hash.finalize().into();
        if got != header.sha256 {
            bail!("the snapshot read does not match the manager's checksum: damaged on the way");
        }
        out.sync_all()?;
        std::fs::rename(&temp, file).with_context(|| format!("renaming to {}", file.display()))?;
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {}", dir.display()))?;
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written.with_context(|| format!("writing the backup {}", file.display()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads and checks a backup file: its header, then its snapshot against length and
/// checksum. Returns the header.
fn verify(file: &Path) -> Result<Header> {
    let mut input = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut raw = [0u8; HEADER_BYTES];
    input
        .read_exact(&mut raw)
        .map_err(|_| anyhow::anyhow!("{}: too short for a Weft metadata backup", file.display()))?;
    let header = Header::decode(&raw).with_context(|| file.display().to_string())?;
    let length = input.metadata()?.len() - HEADER_BYTES as u64;
    if length != header.bytes {
        bail!(
            "{}: the snapshot is {length} bytes, its header says {}: the file is truncated or damaged",
            file.display(),
            header.bytes
        );
    }
    let mut hash = Sha256::new();
    std::io::copy(&mut input, &mut hash)?;
    let got: [u8; BACKUP_CHECKSUM_BYTES] = hash.finalize().into();
    if got != header.sha256 {
        bail!("{}: checksum mismatch: the backup is damaged", file.display());
    }
    if header.protocol > weft_proto::PROTOCOL_VERSION {
        bail!(
            "{}: made by a manager of protocol {}, newer than this weft's {}: restore it with that version",
            file.display(),
            header.protocol,
            weft_proto::PROTOCOL_VERSION
        );
    }
    let format = weft_meta::store::store_format();
    if header.store_format != format {
        bail!(
            "{}: the snapshot is in store format {}, this weft reads format {format}",
            file.display(),
            header.store_format
        );
    }
    Ok(header)
}

/// The data directory of the manager `args` name.
fn manager_data_dir(args: &RestoreArgs) -> Result<PathBuf> {
    if let Some(dir) = &args.data_dir {
        return Ok(dir.clone());
    }
    let home = args.home.clone().unwrap_or_else(weft_config::home_dir);
    let description = home.join(CLUSTER_FILE_NAME);
    if !description.exists() {
        bail!(
            "no Weft cluster in {} (no {CLUSTER_FILE_NAME}): give --home or --data-dir",
            home.display()
        );
    }
    let config = ClusterConfig::load(&description)?;
    Ok(config.data_dir(config.meta(), &home))
}

/// `weft restore FILE`.
pub fn restore(args: &RestoreArgs) -> Result<()> {
    let header = verify(&args.file)?;
    let data = manager_data_dir(args)?;
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let db = data.join(DATABASE_FILE);
    let temp = data.join(format!("{DATABASE_FILE}.restore-{}", std::process::id()));
    let restored = (|| -> Result<weft_meta::store::SnapshotFacts> {
        let mut input = File::open(&args.file)?;
        let mut skip = [0u8; HEADER_BYTES];
        input.read_exact(&mut skip)?;
        let mut out = OpenOptions::new().write(true).create_new(true).open(&temp)?;
        std::io::copy(&mut input, &mut out)?;
        out.sync_all()?;
        drop(out);
        let facts = weft_meta::store::prepare_restore(&temp)
            .map_err(|e| anyhow::anyhow!("the snapshot is not a usable metadata store: {e}"))?;
        // A running manager holds its database locked: opening it fails.
        if db.exists() {
            weft_meta::store::prepare_restore_target(&db).map_err(|e| {
                anyhow::anyhow!(
                    "{}: {e}; stop the metadata manager (weft down, or systemctl stop) before restoring",
                    db.display()
                )
            })?;
        }
        std::fs::rename(&temp, &db)?;
        File::open(&data)?.sync_all()?;
        Ok(facts)
    })();
    if restored.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    let facts =
        restored.with_context(|| format!("restoring {} into {}", args.file.display(), db.display()))?;
    println!(
        "restored {} into {}: {} files, {} directories (protocol {} backup); start the manager, then `weft check` reports objects made after the backup as orphans",
        args.file.display(),
        db.display(),
        facts.files,
        facts.directories,
        header.protocol
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_and_a_wrong_magic_or_version_is_refused() {
        let header = Header {
            protocol: 7,
            store_format: 2,
            bytes: 12345,
            sha256: [7; BACKUP_CHECKSUM_BYTES],
        };
        let raw = header.encode();
        assert_eq!(Header::decode(&raw).unwrap(), header);
        let mut bad = raw;
        bad[0] = b'X';
        assert!(Header::decode(&bad)
            .unwrap_err()
            .to_string()
            .contains("not a Weft"));
        let mut bad = raw;
        bad[8] = 2;
        assert!(Header::decode(&bad)
            .unwrap_err()
            .to_string()
            .contains("header version"));
    }
}

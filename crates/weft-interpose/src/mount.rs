//! The Weft mounts of this process and the clusters behind them, for the libraries that
//! serve paths inside a mount natively (libweft_mpiio.so: MPI-IO on mount paths as on
//! `weft:` names; libweft_posix.so: the data calls of POSIX programs).
//!
//! A Weft mount is an entry of type `fuse.weft` in /proc/self/mountinfo. It says how to
//! reach its cluster in its read-only `user.weft.cluster` attribute (weft-fuse:
//! "meta=HOST:PORT\nkey=PATH\n"). A process serves a mount's files natively when its
//! client reaches that metadata manager (the same address, or one resolving to the same
//! socket address, [`same_manager`]): the client of the environment (WEFT_HOME /
//! WEFT_META), else, when the environment names no cluster, one [`connect`]ed with the
//! mount's address and key. Mounts of a subdirectory do not exist (a Weft mount's root
//! is the cluster's root), so the Weft path is the part of the path below the
//! mountpoint ([`resolve`]).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// The attribute weft-fuse answers on every inode of a mount.
pub const CLUSTER_XATTR: &str = "user.weft.cluster";

/// A name inside a Weft mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mounted {
    /// The path in Weft ("/dir/file").
    pub path: String,
    pub mountpoint: PathBuf,
}

/// How to reach the cluster of a mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountCluster {
    pub meta_addr: String,
    /// The key file the mount's client used (`None`: it had none).
    pub key: Option<PathBuf>,
}

/// Whether two `host:port` addresses name the same metadata manager: equal, or
/// resolving to a common socket address (`localhost:7000` and `127.0.0.1:7000`).
pub fn same_manager(a: &str, b: &str) -> bool {
    use std::net::ToSocketAddrs;
    if a == b {
        return true;
    }
    let resolve = |s: &str| -> Vec<std::net::SocketAddr> {
        s.to_socket_addrs().map(|i| i.collect()).unwrap_or_default()
    };
    let (ra, rb) = (resolve(a), resolve(b));
    ra.iter().any(|x| rb.contains(x))
}

/// A client of the mount's cluster, proving the mount's key; the error says why not.
pub fn connect(cluster: &MountCluster) -> Result<weft_client::Client, String> {
    let key_path = cluster
        .key
        .clone()
        .ok_or_else(|| "the mount names no key file and the environment no cluster".to_owned())?;
    let key = weft_rpc::ClusterKey::load(&key_path)
        .map_err(|e| format!("the mount's key {}: {e}", key_path.display()))?;
    weft_client::Client::connect_with(&cluster.meta_addr, weft_rpc::ClientAuth::cluster(key))
        .map_err(|e| format!("cannot reach the mount's cluster at {}: {e}", cluster.meta_addr))
}

/// The client that serves the mount of `cluster`: `existing` (the process's client, if
/// it has one), else the environment's (WEFT_HOME / WEFT_META), else one [`connect`]ed
/// with the mount's address and key; refused (with the reason) when that client talks
/// to another metadata manager than the mount's.
pub fn client_for(
    cluster: &MountCluster,
    existing: Option<weft_client::Client>,
) -> Result<weft_client::Client, String> {
    let client = match existing {
        Some(client) => client,
        None => match weft_client::Client::from_env() {
            Ok(client) => client,
            Err(_) => connect(cluster)?,
        },
    };
    if !same_manager(client.meta_addr(), &cluster.meta_addr) {
        return Err(format!(
            "the mount serves the cluster at {} and this process uses the one at {} (WEFT_HOME / WEFT_META)",
            cluster.meta_addr,
            client.meta_addr()
        ));
    }
    Ok(client)
}

/// The Weft path of `name` when it is inside a Weft mount.
pub fn resolve(name: &str) -> Option<Mounted> {
    if has_prefix(name) {
        return None;
    }
    let mounts = weft_mountpoints();
    if mounts.is_empty() {
        return None;
    }
    let path = real_path(&absolute(name)?);
    let mountpoint = mounts
        .into_iter()
        .filter(|m| path.starts_with(m))
        .max_by_key(|m| m.components().count())?;
    let below = path.strip_prefix(&mountpoint).ok()?;
    let mut weft = String::new();
    for c in below.components() {
        weft.push('/');
        weft.push_str(c.as_os_str().to_str()?);
    }
    if weft.is_empty() {
        weft.push('/');
    }
    Some(Mounted {
        path: weft,
        mountpoint,
    })
}

/// ROMIO's "ufs:/path" and the like name a driver, not a path: not ours.
fn has_prefix(name: &str) -> bool {
    match (name.find(':'), name.find('/')) {
        (Some(colon), Some(slash)) => colon < slash,
        (Some(_), None) => true,
        _ => false,
    }
}

/// `name` made absolute against the working directory, `.` and `..` resolved by name.
fn absolute(name: &str) -> Option<PathBuf> {
    if name.is_empty() {
        return None;
    }
    let joined = if name.starts_with('/') {
        PathBuf::from(name)
    } else {
        std::env::current_dir().ok()?.join(name)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

/// Symbolic links resolved: the file's, else its directory's (a file being created).
fn real_path(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(file)) => dir
            .canonicalize()
            .map_or_else(|_| path.to_path_buf(), |d| d.join(file)),
        _ => path.to_path_buf(),
    }
}

/// A mount of type `fuse.weft`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeftMount {
    pub mountpoint: PathBuf,
    /// Its device number (`st_dev` of every file in it).
    pub dev: u64,
}

/// The mountpoints of type `fuse.weft`.
pub fn weft_mountpoints() -> Vec<PathBuf> {
    weft_mounts().into_iter().map(|m| m.mountpoint).collect()
}

/// The mounts of type `fuse.weft`, from /proc/self/mountinfo.
pub fn weft_mounts() -> Vec<WeftMount> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|info| parse_mountinfo(&info))
        .unwrap_or_default()
}

fn parse_mountinfo(info: &str) -> Vec<WeftMount> {
    let mut out = Vec::new();
    for line in info.lines() {
        // id parent major:minor root mountpoint options [optional...] - type source super
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < 5 || dash + 1 >= fields.len() {
            continue;
        }
        if fields[dash + 1] == "fuse.weft" {
            let dev = fields[2]
                .split_once(':')
                .and_then(|(a, b)| Some(libc::makedev(a.parse().ok()?, b.parse().ok()?)))
                .unwrap_or(0);
            out.push(WeftMount {
                mountpoint: PathBuf::from(unescape(fields[4])),
                dev,
            });
        }
    }
    out
}

/// mountinfo writes space, tab, newline and backslash as octal escapes (\040).
fn unescape(field: &str) -> std::ffi::OsString {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).ok();
            if let Some(v) = digits.and_then(|d| u8::from_str_radix(d, 8).ok()) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    std::ffi::OsStr::from_bytes(&out).to_owned()
}

/// The cluster of the mount at `mountpoint`, from its `user.weft.cluster` attribute.
pub fn cluster_of(mountpoint: &Path) -> Result<MountCluster, String> {
    let path = CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| "a NUL in the mount's path".to_owned())?;
    let attr = CString::new(CLUSTER_XATTR).expect("no NUL");
    let mut buf = vec![0u8; 4096];
    // SAFETY: both names are NUL-terminated; buf has buf.len() writable bytes.
    let n = unsafe { libc::getxattr(path.as_ptr(), attr.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(format!(
            "its {CLUSTER_XATTR} attribute cannot be read ({}; a mount made by an older weft?)",
            std::io::Error::last_os_error()
        ));
    }
    buf.truncate(n as usize);
    parse_cluster(&String::from_utf8_lossy(&buf))
}

fn parse_cluster(text: &str) -> Result<MountCluster, String> {
    let mut meta = None;
    let mut key = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("meta=") {
            meta = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("key=") {
            key = (!v.is_empty()).then(|| PathBuf::from(v));
        }
    }
    match meta {
        Some(meta_addr) if !meta_addr.is_empty() => Ok(MountCluster { meta_addr, key }),
        _ => Err(format!(
            "its {CLUSTER_XATTR} attribute names no metadata manager: {text:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_of_weft_mounts_are_found_with_escapes() {
        let info = "36 35 98:0 / /mnt1 rw,noatime shared:1 - ext3 /dev/root rw\n\
                    40 35 0:39 / /tmp/a\\040b rw,nosuid - fuse.weft weft rw,user_id=0\n\
                    41 35 0:40 / /tmp/c rw - fuse.other x rw\n";
        assert_eq!(
            parse_mountinfo(info),
            vec![WeftMount {
                mountpoint: PathBuf::from("/tmp/a b"),
                dev: libc::makedev(0, 39)
            }]
        );
    }

    #[test]
    fn names_are_made_absolute_and_prefixed_names_are_not_paths() {
        assert_eq!(absolute("/a/./b/../c").unwrap(), PathBuf::from("/a/c"));
        assert!(has_prefix("ufs:/a/b"));
        assert!(has_prefix("weft:/a"));
        assert!(!has_prefix("/a/b:c"));
        assert!(!has_prefix("b"));
    }

    #[test]
    fn managers_are_the_same_by_name_or_by_address() {
        assert!(same_manager("127.0.0.1:7000", "127.0.0.1:7000"));
        assert!(same_manager("localhost:7000", "127.0.0.1:7000"));
        assert!(!same_manager("127.0.0.1:7000", "127.0.0.1:7001"));
        assert!(!same_manager("no such host:1", "127.0.0.1:1"));
    }

    #[test]
    fn the_cluster_attribute_parses_and_a_bad_one_says_why() {
        let c = parse_cluster("meta=127.0.0.1:4000\nkey=/k\n").unwrap();
        assert_eq!(c.meta_addr, "127.0.0.1:4000");
        assert_eq!(c.key, Some(PathBuf::from("/k")));
        assert_eq!(parse_cluster("meta=h:1\nkey=\n").unwrap().key, None);
        assert!(parse_cluster("key=/k")
            .unwrap_err()
            .contains("no metadata manager"));
    }
}

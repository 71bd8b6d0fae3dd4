//! The layout as an extended attribute (the OrangeFS `user.pvfs2.dist_*` idea):
//! `user.weft.layout` reads as "stripe_size=65536 stripe_count=4 servers=1,2,3,4
//! cache=none" on a file (a replicated one adds "redundancy=replicas=2 copy1=3,4" and
//! "stale=..." when pieces are stale), and on a directory as its default for new files, which
//! setfattr changes.

use weft_client::{Attr, LayoutRequest};

pub const LAYOUT_XATTR: &str = "user.weft.layout";

/// Read-only, on every inode of a mount: how to reach the cluster the mount serves,
/// "meta=HOST:PORT\nkey=PATH\n" (the key file the mount's client proved itself with;
/// empty when it had none). MPI-IO (libweft_mpiio) reads it to serve a path inside the
/// mount natively. Not listed by listxattr, so copies do not carry it along.
pub const CLUSTER_XATTR: &str = "user.weft.cluster";

/// Read-only, on every regular file of a mount, asked by libweft_posix through
/// `/proc/self/fd/N` of the descriptor it just opened: what the library needs to read the
/// file natively without asking the manager or the io servers anything
/// (`weft_client::File::handoff_opened`, for `Client::open_handoff`). Checked as an open
/// for reading is (permission, close-to-open) at each get; never listed, never set.
pub const HANDOFF_XATTR: &str = "user.weft.handoff";

/// The value of [`CLUSTER_XATTR`] for a mount of the cluster at `meta_addr`.
pub fn cluster_value(meta_addr: &str) -> Vec<u8> {
    let key = weft_config::client_key_path()
        .ok()
        .and_then(|p| p.canonicalize().ok())
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    format!("meta={meta_addr}\nkey={key}\n").into_bytes()
}

/// The attribute's value for `attr`, or `None` when it has none (a directory without a
/// default layout, a symbolic link).
pub fn format(attr: &Attr) -> Option<String> {
    if let Some(layout) = &attr.layout {
        let servers: Vec<String> = layout.servers.iter().map(|s| s.to_string()).collect();
        let mut value = format!(
            "stripe_size={} stripe_count={} servers={} cache={}",
            layout.stripe_size_bytes,
            layout.servers.len(),
            servers.join(","),
            attr.cache
        );
        // A replicated file: its redundancy, each further copy's servers (slot order)
        // and the stale pieces, if any.
        if layout.replica_count() > 1 {
            value.push_str(&format!(" redundancy={}", layout.redundancy()));
            for copy in 1..layout.replica_count() {
                let servers: Vec<String> = (0..layout.width())
                    .map(|k| layout.replica_server(copy, k).to_string())
                    .collect();
                value.push_str(&format!(" copy{copy}={}", servers.join(",")));
            }
            if !layout.replication.stale.is_empty() {
                let stale: Vec<String> = layout.replication.stale.iter().map(|s| s.to_string()).collect();
                value.push_str(&format!(" stale={}", stale.join(",")));
            }
        }
        return Some(value);
    }
    let request = attr.dir_layout?;
    let mut fields = Vec::new();
    if let Some(v) = request.stripe_size_bytes {
        fields.push(format!("stripe_size={v}"));
    }
    if let Some(v) = request.stripe_count {
        fields.push(format!("stripe_count={v}"));
    }
    if let Some(v) = request.first_server {
        fields.push(format!("first_server={v}"));
    }
    if let Some(v) = request.cache {
        fields.push(format!("cache={v}"));
    }
    if let Some(v) = request.redundancy {
        fields.push(format!("redundancy={v}"));
    }
    Some(fields.join(" "))
}

/// Parses a directory default: `key=value` fields separated by spaces or commas, keys
/// `stripe_size` (K, M, G suffixes accepted), `stripe_count` (0 = all servers) and
/// `first_server`, and `cache` (none, cached, delegated). Fields left out are inherited
/// from the cluster default.
pub fn parse(value: &str) -> Result<LayoutRequest, String> {
    let mut request = LayoutRequest::default();
    let text = value.trim_end_matches('\0');
    for field in text.split([' ', ',', '\n', '\t']).filter(|f| !f.is_empty()) {
        let Some((key, v)) = field.split_once('=') else {
            return Err(format!("{field:?} is not key=value"));
        };
        match key {
            "stripe_size" => request.stripe_size_bytes = Some(parse_size(v)?),
            "stripe_count" => request.stripe_count = Some(parse_number(v)?),
            "first_server" => request.first_server = Some(parse_number(v)?),
            "cache" => request.cache = Some(v.parse()?),
            "redundancy" => request.redundancy = Some(v.parse()?),
            "servers" => {
                return Err("servers cannot be chosen one by one: set stripe_count and first_server".into())
            }
            other => return Err(format!("unknown layout field {other:?}")),
        }
    }
    if request == LayoutRequest::default() {
        return Err(
            "no layout field given (stripe_size, stripe_count, first_server, cache, redundancy)".into(),
        );
    }
    Ok(request)
}

fn parse_number(v: &str) -> Result<u32, String> {
    v.parse().map_err(|_| format!("{v:?} is not a number"))
}

fn parse_size(v: &str) -> Result<u64, String> {
    weft_config::parse_size(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_defaults_parse_and_print_back() {
        let r = parse("stripe_size=1048576 stripe_count=2").unwrap();
        assert_eq!(r.stripe_size_bytes, Some(1 << 20));
        assert_eq!(r.stripe_count, Some(2));
        assert_eq!(r.first_server, None);
        assert_eq!(
            parse("stripe_size=1M,first_server=3").unwrap().stripe_size_bytes,
            Some(1 << 20)
        );
        assert_eq!(parse("stripe_size=64K\0").unwrap().stripe_size_bytes, Some(65536));
        assert_eq!(
            parse("redundancy=replicas=2").unwrap().redundancy,
            Some(weft_client::Redundancy::Replicas(2))
        );
        assert_eq!(
            parse("cache=cached").unwrap().cache,
            Some(weft_client::CacheMode::Cached)
        );
        for bad in [
            "",
            "stripe_size",
            "stripe_size=x",
            "colour=blue",
            "servers=1,2",
            "cache=sometimes",
            "redundancy=replicas=0",
            "redundancy=ec=4+2",
            "stripe_size=99999999999G",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}

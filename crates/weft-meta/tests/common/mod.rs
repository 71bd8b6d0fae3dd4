//! Shared fixtures for the integration tests: a store on a temporary directory
//! with a four-server cluster, credentials, and small helpers.
#![allow(dead_code)]

use std::path::Path;

use weft_layout::{InodeId, LayoutRequest, ServerId};
use weft_meta::{ClusterLayout, CreateCheck, MetaStore};
use weft_proto::{Attr, Cred, ErrorCode, WireError};

/// The io servers of the test cluster, in cluster order.
pub const IO_SERVERS: [ServerId; 4] = [ServerId(10), ServerId(11), ServerId(12), ServerId(13)];

/// Cluster default: 64 KiB stripes over 2 servers starting at the first.
pub fn cluster_default() -> LayoutRequest {
    LayoutRequest {
        cache: None,
        stripe_size_bytes: Some(65536),
        stripe_count: Some(2),
        first_server: None,
        redundancy: None,
    }
}

pub fn cluster() -> ClusterLayout {
    ClusterLayout {
        io_servers: IO_SERVERS.to_vec(),
        default_layout: cluster_default(),
        cache_managers: 0,
    }
}

pub fn open(dir: &Path) -> MetaStore {
    let store = MetaStore::open(&dir.join("meta.redb"), (0, 0)).expect("open store");
    store.set_cluster(cluster()).expect("set cluster");
    store
}

pub fn root() -> Cred {
    Cred::root()
}

/// uid 1000, primary group 100, also in group 300.
pub fn alice() -> Cred {
    Cred {
        uid: 1000,
        gid: 100,
        groups: vec![300],
    }
}

/// uid 2000, group 200 only.
pub fn bob() -> Cred {
    Cred {
        uid: 2000,
        gid: 200,
        groups: vec![],
    }
}

/// Both steps of a create (no io servers involved), expecting a new file.
pub fn create(
    store: &MetaStore,
    cred: &Cred,
    parent: InodeId,
    name: impl AsRef<[u8]>,
) -> Result<Attr, WireError> {
    create_with(store, cred, parent, name, 0o644, &LayoutRequest::default())
}

pub fn create_with(
    store: &MetaStore,
    cred: &Cred,
    parent: InodeId,
    name: impl AsRef<[u8]>,
    mode: u32,
    layout: &LayoutRequest,
) -> Result<Attr, WireError> {
    let name = name.as_ref();
    match store.create_check(cred, parent, name, mode, layout, true)? {
        CreateCheck::New(pending) => store.create_commit(cred, pending),
        CreateCheck::Existing(attr) => panic!(
            "exclusive create of {} found {attr:?}",
            String::from_utf8_lossy(name)
        ),
    }
}

/// The error code of a result that must be an error.
#[track_caller]
pub fn code<T: std::fmt::Debug>(result: Result<T, WireError>) -> ErrorCode {
    match result {
        Ok(value) => panic!("expected an error, got {value:?}"),
        Err(e) => e.code,
    }
}

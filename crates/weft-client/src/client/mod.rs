//! The client handle: cluster discovery, credentials, and what every request to the
//! manager shares (answers of the expected kind, `WithParent`, `CreateGranted`). Its
//! calls by subject: `attrs.rs` (attributes with sizes from the io servers),
//! `namespace.rs` (changing the namespace, listings, statfs), `open.rs` (create and
//! open), `locks.rs` (record locks and lock sessions) and `rebuild.rs` (copying
//! replicated files' stale pieces back from fresh copies).

use crate::connection::{client_name, meta_route, Directory, Inner, ServerAddress};
use crate::drive::TransferOptions;
use crate::error::{unexpected, ClientError};
use crate::path;
use crate::vouched::DataStamp;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use weft_layout::{InodeId, ServerId};
use weft_proto::msg::{Request, Response};
use weft_proto::{Attr, ClusterInfo, Cred, ErrorCode, FileKind};
use weft_rpc::{ClientAuth, ConnectionPool, Timeouts};

mod attrs;
mod changes;
mod locks;
mod migrate;
mod namespace;
mod open;
mod quota;
mod rebuild;
mod scrub;

pub use attrs::{PartialSizes, SizeOf};
pub use changes::{leasable, Changes};
pub use locks::LockTest;
pub use migrate::{migrate_request, Migrated, MIGRATE_CHUNK_BYTES};
pub use namespace::{FsStats, SizedListing, StatfsBlocks, STATFS_BLOCK_BYTES};
pub use open::{CreateOptions, OpenOptions};
pub use rebuild::{RebuildOptions, RebuildProgress, REBUILD_CHUNK_BYTES};
pub use scrub::{ScrubMismatch, ScrubProgress, SCRUB_CHUNK_BYTES};

/// A connection to a Weft cluster. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

/// What an operation that makes a name (`create_in_made`, `mkdir_in_made`, ...) made,
/// with the attributes of the directory the name went into.
#[derive(Debug)]
pub struct Made<T> {
    pub made: T,
    /// The directory's attributes as the manager's transaction of the operation left
    /// them (as fresh as a `getattr` sent when the operation was; a group commit may
    /// have added other clients' changes by its answer). `None` from a manager that
    /// predates `WithParent`.
    pub parent: Option<Attr>,
    /// A file this create made exclusively, with a write capability granted with it:
    /// the data stamp an open finds while no other write grant, truncate or time change
    /// followed (the manager's vouch at the grant's stamp, `CreateStamped`). Until then
    /// the file holds what this client wrote under that grant and nothing else. `None`
    /// for anything else, or from a manager that predates it.
    pub written_under: Option<DataStamp>,
}

/// The calling process's credentials.
pub fn process_cred() -> Cred {
    // SAFETY: these calls have no preconditions; getgroups writes at most `n` entries.
    unsafe {
        let mut groups = vec![0 as libc::gid_t; 64];
        let n = libc::getgroups(groups.len() as i32, groups.as_mut_ptr());
        groups.truncate(n.max(0) as usize);
        Cred {
            uid: libc::geteuid(),
            gid: libc::getegid(),
            groups,
        }
    }
}

impl Client {
    /// Connects to the metadata manager at `meta_addr` (`host:port`) and learns the
    /// cluster's io servers from it; the cluster key is found as
    /// `weft_config::client_key_path` says ($WEFT_KEY, else beside the cluster.toml).
    pub fn connect(meta_addr: &str) -> Result<Client, ClientError> {
        let path = weft_config::client_key_path()?;
        let key = weft_rpc::ClusterKey::load(&path).map_err(|e| ClientError::Config(e.to_string()))?;
        Client::connect_with(meta_addr, ClientAuth::cluster(key))
    }

    /// Connects as `connect` does, proving `auth` to every server.
    pub fn connect_with(meta_addr: &str, auth: ClientAuth) -> Result<Client, ClientError> {
        Client::connect_as(meta_addr, auth, process_cred())
    }

    /// Connects as `connect_with` does, acting as `cred` (where the cluster believes a
    /// claimed identity), capabilities included. `with_cred` instead shares this
    /// client's connections and the capabilities granted to its credential: a FUSE
    /// daemon checks each user's permission itself at open.
    pub fn connect_as(meta_addr: &str, auth: ClientAuth, cred: Cred) -> Result<Client, ClientError> {
        let pool = Arc::new(ConnectionPool::new(&client_name(), auth, Timeouts::from_env()));
        let meta_route = meta_route(&pool, meta_addr);
        pool.set_capability_source(Arc::new(weft_rpc::capability::ManagerGrants::new(
            Arc::downgrade(&pool),
            &meta_route,
            cred.clone(),
        )));
        let cluster = match pool.call(&meta_route, &Request::GetCluster, &[])?.0 {
            Response::Cluster(c) => c,
            other => return Err(unexpected(&other)),
        };
        let cache_addrs = cluster
            .cache
            .managers
            .iter()
            .map(|s| (s.id, ServerAddress::new(s)))
            .collect();
        let client = Client {
            inner: Arc::new(Inner {
                pool,
                meta_addr: meta_addr.to_owned(),
                meta_route,
                directory: Arc::new(std::sync::RwLock::new(Directory::new(cluster))),
                cache_addrs,
                cred,
                transfer: TransferOptions::default(),
                no_parent_attrs: Arc::new(AtomicBool::new(false)),
                no_create_grants: Arc::new(AtomicBool::new(false)),
                no_create_stamps: Arc::new(AtomicBool::new(false)),
                no_create_many: Arc::new(AtomicBool::new(false)),
                no_vouch: Arc::new(AtomicBool::new(false)),
                no_readable_vouch: Arc::new(AtomicBool::new(false)),
                no_sized_listing: Arc::new(AtomicBool::new(false)),
                vouched: Arc::default(),
                tracker: Arc::new(crate::connection::replay::Tracker::new()),
            }),
        };
        crate::connection::replay::watch(&client.inner);
        Ok(client)
    }

    /// Finds the cluster through $WEFT_META, else $WEFT_HOME (or ~/.weft)/cluster.toml.
    pub fn from_env() -> Result<Client, ClientError> {
        Client::connect(&weft_config::meta_address()?)
    }

    /// The same connections acting with other credentials (a FUSE daemon serving many
    /// users, or a test).
    pub fn with_cred(&self, cred: Cred) -> Client {
        self.rebuild(|inner| inner.cred = cred)
    }

    /// The same connections with other transfer settings.
    pub fn with_transfer(&self, transfer: TransferOptions) -> Client {
        self.rebuild(|inner| inner.transfer = transfer)
    }

    fn rebuild(&self, change: impl FnOnce(&mut Inner)) -> Client {
        let i = &self.inner;
        let mut inner = Inner {
            pool: i.pool.clone(),
            meta_addr: i.meta_addr.clone(),
            meta_route: i.meta_route.clone(),
            directory: i.directory.clone(),
            cache_addrs: i.cache_addrs.clone(),
            cred: i.cred.clone(),
            transfer: i.transfer,
            no_parent_attrs: i.no_parent_attrs.clone(),
            no_create_grants: i.no_create_grants.clone(),
            no_create_stamps: i.no_create_stamps.clone(),
            no_create_many: i.no_create_many.clone(),
            no_vouch: i.no_vouch.clone(),
            no_readable_vouch: i.no_readable_vouch.clone(),
            no_sized_listing: i.no_sized_listing.clone(),
            vouched: i.vouched.clone(),
            tracker: i.tracker.clone(),
        };
        change(&mut inner);
        Client {
            inner: Arc::new(inner),
        }
    }

    /// Namespace changes this client was answered for that the manager has not made
    /// durable yet: kept to replay after a manager restart (README: Durability).
    pub fn metadata_kept(&self) -> usize {
        self.inner.tracker.kept()
    }

    pub fn cred(&self) -> &Cred {
        &self.inner.cred
    }

    /// Per io server, how this client reaches it and moves bulk data: "shm", "unix"
    /// or "tcp" (connecting if not yet connected), or the error that stops it.
    pub fn io_transports(&self) -> Vec<(ServerId, Result<&'static str, ClientError>)> {
        self.inner
            .cluster()
            .io_servers
            .iter()
            .map(|s| {
                let transport = self
                    .inner
                    .io_addr(s.id)
                    .and_then(|addr| Ok(self.inner.pool.get(&addr)?.transport()));
                (s.id, transport)
            })
            .collect()
    }

    /// Whether io server `server` answers now: a connection to it is kept or can be
    /// made (a rebuild asks before copying to a server that may still be down).
    pub fn io_server_answers(&self, server: ServerId) -> bool {
        self.inner
            .io_addr(server)
            .and_then(|addr| Ok(self.inner.pool.get(&addr)?))
            .is_ok()
    }

    /// The cluster's description as this client knows it (see `refresh_cluster`).
    pub fn cluster_info(&self) -> Arc<ClusterInfo> {
        self.inner.cluster()
    }

    /// Asks the manager for the cluster's description again: io servers added since
    /// this client started (`weft server add`) are then known. A layout naming an
    /// unknown io server does this by itself.
    pub fn refresh_cluster(&self) -> Result<Arc<ClusterInfo>, ClientError> {
        self.inner.refresh_cluster()
    }

    pub fn meta_addr(&self) -> &str {
        &self.inner.meta_addr
    }

    fn cred_clone(&self) -> Cred {
        self.inner.cred.clone()
    }

    fn attr_of(&self, request: Request, what: &str) -> Result<Attr, ClientError> {
        match self.inner.meta(&request).map_err(|e| e.context(what))? {
            Response::Attr(a) => Ok(a),
            other => Err(unexpected(&other)),
        }
    }

    /// `request` (one that makes a name) answered with its directory's attributes: sent
    /// in a `WithParent`, or alone to a manager that does not know it.
    fn made_of(&self, request: Request, what: &str) -> Result<Made<Attr>, ClientError> {
        let plain = if self.inner.no_parent_attrs.load(Ordering::Relaxed) {
            request
        } else {
            let wrapped = Request::WithParent {
                request: Box::new(request),
            };
            match self.inner.meta(&wrapped) {
                Ok(Response::Made { attr, parent }) => {
                    return Ok(Made {
                        made: attr,
                        parent: Some(parent),
                        written_under: None,
                    })
                }
                Ok(other) => return Err(unexpected(&other)),
                // Refused at decode, before anything was done: the request alone.
                Err(e) if e.code() == ErrorCode::UnknownOpcode => {
                    self.inner.no_parent_attrs.store(true, Ordering::Relaxed);
                    match wrapped {
                        Request::WithParent { request } => *request,
                        other => other,
                    }
                }
                Err(e) => return Err(e.context(what)),
            }
        };
        self.attr_of(plain, what).map(|made| Made {
            made,
            parent: None,
            written_under: None,
        })
    }

    /// `attr_of`, or with `parent` `made_of`.
    fn attr_made(&self, request: Request, what: &str, parent: bool) -> Result<Made<Attr>, ClientError> {
        if parent {
            self.made_of(request, what)
        } else {
            self.attr_of(request, what).map(|made| Made {
                made,
                parent: None,
                written_under: None,
            })
        }
    }

    /// A `Create` sent as a `CreateStamped`: made, with its directory's attributes (kept
    /// if `parent`), the capability to write the new file, which this client's
    /// connections keep, so that the file's first write asks the manager for nothing,
    /// and for an exclusive create the stamp of that grant (`Made::written_under`). To
    /// a manager that predates it, a `CreateGranted` (no stamp), and to one that
    /// predates that, `attr_made`.
    fn create_granted(&self, request: Request, what: &str, parent: bool) -> Result<Made<Attr>, ClientError> {
        let exclusive = matches!(request, Request::Create { exclusive: true, .. });
        let stamped = !self.inner.no_create_stamps.load(Ordering::Relaxed);
        if self.inner.no_create_grants.load(Ordering::Relaxed) {
            return self.attr_made(request, what, parent);
        }
        let wrapped = if stamped {
            Request::CreateStamped {
                request: Box::new(request),
            }
        } else {
            Request::CreateGranted {
                request: Box::new(request),
            }
        };
        let (attr, dir, capability, stamp) = match self.inner.meta(&wrapped) {
            Ok(Response::MadeStamped {
                attr,
                parent,
                capability,
                stamp,
            }) => (attr, parent, capability, stamp),
            Ok(Response::MadeGranted {
                attr,
                parent,
                capability,
            }) => (attr, parent, capability, 0),
            Ok(other) => return Err(unexpected(&other)),
            // Refused at decode, before anything was done: the create in the older form.
            Err(e) if e.code() == ErrorCode::UnknownOpcode => {
                let flag = if stamped {
                    &self.inner.no_create_stamps
                } else {
                    &self.inner.no_create_grants
                };
                flag.store(true, Ordering::Relaxed);
                let request = match wrapped {
                    Request::CreateStamped { request } | Request::CreateGranted { request } => *request,
                    other => other,
                };
                return self.create_granted(request, what, parent);
            }
            Err(e) => return Err(e.context(what)),
        };
        let written_under = match (&capability, self.inner.pool.capability_source()) {
            (Some(cap), Some(source)) => {
                source.granted(cap);
                (exclusive && stamp != 0).then(|| DataStamp::vouched(attr.inode, stamp))
            }
            _ => None,
        };
        Ok(Made {
            made: attr,
            parent: parent.then_some(dir),
            written_under,
        })
    }

    fn done(&self, request: Request, what: &str) -> Result<(), ClientError> {
        match self.inner.meta(&request).map_err(|e| e.context(what))? {
            Response::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// The manager's attributes of a path, without the derived file size.
    pub fn resolve(&self, path: &str) -> Result<Attr, ClientError> {
        let attr = self.attr_of(self.resolve_request(path)?, path)?;
        slash_names_a_directory(path, &attr)?;
        Ok(attr)
    }

    /// The `Resolve` of `path`: the manager takes canonical paths ("/a/b/" is sent as
    /// "/a/b").
    pub(super) fn resolve_request(&self, path: &str) -> Result<Request, ClientError> {
        Ok(Request::Resolve {
            cred: self.cred_clone(),
            path: format!("/{}", path::components(path)?.join("/")),
        })
    }

    /// Makes sure the manager granted this client writing `inode` (a write capability
    /// kept, or asked for now): the open the manager checks a MUNGE-verified user's
    /// handle-based request (`SetAttr { by_handle }`: ftruncate, a write dropping
    /// setuid) against. Call it before such a request. A refusal is no error here: the
    /// request is then checked against the file's mode, as a path-based one is.
    pub fn hold_write_grant(&self, inode: InodeId) {
        self.inner.hold_write_grant(inode);
    }

    /// Waits, at most `wait`, until the write capabilities this client gave back at
    /// its last closes have reached the manager (they are sent in the background).
    /// For a short-lived process before it exits: one not sent is counted live until
    /// it expires, and the manager cannot vouch for its file until then.
    pub fn flush_releases(&self, wait: std::time::Duration) {
        if let Some(source) = self.inner.pool.capability_source() {
            source.flush_releases(wait);
        }
    }

    /// Makes every metadata operation acknowledged so far durable (sync(2), syncfs(2),
    /// fsync of a directory): see docs/src/consistency.md, Durability.
    pub fn sync_metadata(&self) -> Result<(), ClientError> {
        self.inner.commit_metadata()
    }
}

/// A name for messages (not UTF-8: replacement characters).
fn lossy(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

fn not_a_directory(path: &str) -> ClientError {
    ClientError::refused(
        ErrorCode::NotDirectory,
        format!("{path}: not a directory (a path ending with / names one)"),
    )
}

/// "/a/b/" names a directory (or a link to one), as in Linux: `attr` is what "/a/b"
/// resolved to.
pub(super) fn slash_names_a_directory(path_given: &str, attr: &Attr) -> Result<(), ClientError> {
    if path::names_a_directory(path_given) && !matches!(attr.kind, FileKind::Directory | FileKind::Symlink) {
        return Err(not_a_directory(path_given));
    }
    Ok(())
}

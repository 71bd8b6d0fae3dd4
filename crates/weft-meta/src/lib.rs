//! Weft's metadata manager as a library: the durable namespace ([`store`]) and the
//! service that answers metadata requests and keeps io-server objects in step
//! ([`service`]).
//!
//! Invariant: this crate opens no sockets; it reaches io servers only through the
//! [`service::ObjectServers`] trait.

pub mod file_locks;
pub mod handles;
pub mod lapsed;
pub mod replay;
pub mod service;
pub mod shared_pointer;
pub mod store;

pub use service::{Caller, CapabilityIssuer, MetaService, ObjectServers, PurgerHandle};
pub use store::{
    ClusterLayout, CreateCheck, Made, MetaStore, PendingCreate, StoreError, LINKS_MAX, XATTRS_PER_INODE_MAX,
    XATTR_BYTES_PER_INODE_MAX,
};

//! Weft's native client: namespace operations through the metadata manager, and file
//! reads and writes split by stripe and sent to all io servers at once, with several
//! requests in flight per server. The manager is never on the read/write path.
//!
//! Noncontiguous access: a file handle takes a view (`File::set_view`,
//! `File::set_partition`), registered once with each server, and `read_view` /
//! `write_view` then move view intervals, each server gathering or scattering its own
//! pieces; irregular accesses use offset-length lists (`write_list`, `read_list`).
//! `write_view_scheduled` / `read_view_scheduled` choose the order in which the servers
//! are visited ([`Schedule`]: all at once, in order, or Clusterfile's decentralised
//! schedule for collective I/O).
//!
//! ```no_run
//! let client = weft_client::Client::from_env()?;
//! let file = client.create("/results.dat", &weft_client::CreateOptions::default())?;
//! file.write_at(0, b"hello")?;
//! file.sync()?;
//! # Ok::<(), weft_client::ClientError>(())
//! ```

mod cache_route;
mod client;
mod drive;
mod error;
mod extent_lock;
mod file;
mod gather;
mod list_io;
pub mod path;
mod replay;
mod shared_pointer;
pub mod trace;
mod view_io;

pub use cache_route::{aligned_count, managers_of, JOB_DELEGATE_ID_BASE};
pub use client::{
    Client, CreateOptions, DataStamp, FsStats, LockTest, Made, OpenOptions, PartialSizes, SizeOf,
    StatfsBlocks, STATFS_BLOCK_BYTES,
};
pub use drive::{transfer_threads_started, THREADED_CALL_BYTES_MIN, TRANSFER_THREADS_MAX};
pub use error::ClientError;
pub use extent_lock::{ranges_per_server, ExtentLock};
pub use file::{File, TransferOptions};
pub use view_io::{Schedule, MEMORY_STAGE_BYTES_MAX};
pub use weft_layout::view::{Datatype, Distribution, Field, Order, View, ViewError};
pub use weft_layout::{CacheMapping, CacheMode, InodeId, Layout, LayoutRequest, ServerId};
pub use weft_proto::msg::LockStats;
pub use weft_proto::msg::REVALIDATE_STEPS_MAX;
pub use weft_proto::{
    Attr, Cred, DirEntry, ErrorCode, FileKind, Name, ObjStamped, PathStep, SetAttr, TimeSet, Timespec,
    XattrSet,
};
pub use weft_rpc::{ClientAuth, ClusterKey};

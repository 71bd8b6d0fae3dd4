//! Weft's native client: namespace operations through the metadata manager, and file
//! reads and writes split by stripe and sent to all io servers at once, with several
//! requests in flight per server. The manager is never on the read/write path.
//!
//! ```no_run
//! let client = weft_client::Client::from_env()?;
//! let file = client.create("/results.dat", &weft_client::CreateOptions::default())?;
//! file.write_at(0, b"hello")?;
//! file.sync()?;
//! # Ok::<(), weft_client::ClientError>(())
//! ```

mod client;
mod error;
mod file;
pub mod path;

pub use client::{Client, CreateOptions, FsStats, OpenOptions};
pub use error::ClientError;
pub use file::{File, TransferOptions};
pub use weft_layout::{InodeId, Layout, LayoutRequest, ServerId};
pub use weft_proto::{Attr, Cred, DirEntry, ErrorCode, FileKind, SetAttr, TimeSet, Timespec};

//! `set_dir_layout`: a directory's default layout for the files created in it.

use super::super::access::is_owner_or_root;
use super::super::{MetaStore, Namespace};
use weft_layout::{InodeId, LayoutRequest};
use weft_proto::{Attr, Cred, ErrorCode, WireError};

impl MetaStore {
    /// Sets (`Some`) or clears (`None`) the default layout of directory `dir`;
    /// owner or root only. The default must resolve against the cluster as it is
    /// now (fields it leaves out come from the cluster default). Files created in
    /// `dir` inherit it field by field; directories created in `dir` copy it.
    pub fn set_dir_layout(
        &self,
        cred: &Cred,
        dir: InodeId,
        layout: Option<LayoutRequest>,
    ) -> Result<Attr, WireError> {
        if let Some(request) = &layout {
            self.resolve_layout(&LayoutRequest::default(), Some(request))
                .map_err(|e| {
                    WireError::new(
                        e.code,
                        format!("default layout for directory {dir}: {}", e.message),
                    )
                })?;
        }
        self.write(|tx| {
            let mut record = tx.inode(dir)?;
            if !record.is_directory() {
                return Err(WireError::new(
                    ErrorCode::NotDirectory,
                    format!("inode {dir} is not a directory: only directories have default layouts"),
                ));
            }
            if !is_owner_or_root(cred, &record) {
                return Err(WireError::new(
                    ErrorCode::NotPermitted,
                    format!(
                        "uid {} may not set the default layout of directory {dir}: not its owner",
                        cred.uid
                    ),
                ));
            }
            record.dir_layout = layout;
            record.ctime = tx.now;
            tx.put_inode(dir, &record)?;
            Ok(record.attr(dir))
        })
    }
}

//! The io side of a rebuild (`crate::rebuild` says why): a chunk's stamp, and the
//! write of a chunk applied only while its stamp holds.

use super::*;

impl IoService {
    /// This server's runs of `ranges` in object offsets (as `Handler::changes` gives
    /// them to the ordering of requests).
    pub(super) fn local_runs(striping: &Striping, ranges: &[Range]) -> Vec<(u64, u64)> {
        let layout = striping.layout();
        let index = striping.server_index as usize;
        ranges
            .iter()
            .map(|r| {
                (
                    layout.local_size_for(index, r.offset),
                    layout.local_size_for(index, r.offset + r.len),
                )
            })
            .collect()
    }

    /// `RebuildStamp`: the stamp of `ranges` here, after making a missing object when
    /// asked (`create`: a rebuild of a server whose disk was replaced).
    pub(super) fn rebuild_stamp(
        &self,
        inode: InodeId,
        striping: Striping,
        ranges: &[Range],
        create: bool,
    ) -> Result<Response, WireError> {
        if create && self.objects.get(inode).is_err() {
            match self.objects.create(inode) {
                Ok(()) => {}
                Err(e) if e.code == ErrorCode::Exists => {}
                Err(e) => return Err(e),
            }
        }
        self.objects.get(inode)?;
        let runs = Self::local_runs(&striping, ranges);
        Ok(Response::Stamp(self.stamps.stamp(inode, &runs)))
    }

    /// `RebuildWrite`: a `Write` applied only if the stamp of its ranges is still
    /// `stamp`. The event loop ordered it after every overlapping change that arrived
    /// before it, and every later one waits for it, so the check and the write are one
    /// step for those bytes.
    pub(super) fn rebuild_write(
        &self,
        inode: InodeId,
        striping: Striping,
        ranges: &[Range],
        stamp: u64,
        data: &[u8],
    ) -> Result<Response, WireError> {
        let runs = Self::local_runs(&striping, ranges);
        let now = self.stamps.stamp(inode, &runs);
        if now != stamp {
            return Err(WireError::new(
                ErrorCode::Busy,
                format!(
                    "inode {inode}: a write arrived while the rebuild copied these bytes; copy them again"
                ),
            ));
        }
        self.write_unnamed(inode, striping, ranges, data)
    }

    /// A change of `runs` of `inode` (`None`: of the whole object) arrived.
    pub(super) fn stamp_change(&self, inode: InodeId, runs: Option<&[(u64, u64)]>) {
        self.stamps.bump(inode, runs);
    }
}

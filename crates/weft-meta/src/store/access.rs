//! Permission checks: POSIX owner/group/other mode bits against a credential.

use super::record::InodeRecord;
use weft_proto::Cred;

pub const MAY_READ: u32 = 4;
pub const MAY_WRITE: u32 = 2;
/// Execute on files, search on directories.
pub const MAY_EXECUTE: u32 = 1;

/// The sticky bit: in such a directory only the owner of an entry, the owner of
/// the directory or root may remove or rename the entry.
pub const MODE_STICKY: u32 = 0o1000;
pub const MODE_SETGID: u32 = 0o2000;
pub const MODE_SETUID: u32 = 0o4000;

pub fn is_root(cred: &Cred) -> bool {
    cred.uid == 0
}

/// Whether `cred` may do `want` (a mask of `MAY_*`) on `record`. Root may read and
/// write anything and search any directory, but executes a file only if some
/// execute bit is set (as Linux does).
pub fn permits(cred: &Cred, record: &InodeRecord, want: u32) -> bool {
    cred.permits(record.kind, record.mode, record.uid, record.gid, want)
}

pub fn is_owner_or_root(cred: &Cred, record: &InodeRecord) -> bool {
    is_root(cred) || cred.uid == record.uid
}

/// The sticky-bit rule for removing or replacing `child` from `parent`.
pub fn may_remove_from_sticky(cred: &Cred, parent: &InodeRecord, child: &InodeRecord) -> bool {
    parent.mode & MODE_STICKY == 0 || is_root(cred) || cred.uid == child.uid || cred.uid == parent.uid
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_layout::InodeId;
    use weft_proto::{FileKind, Timespec};

    fn record(kind: FileKind, mode: u32, uid: u32, gid: u32) -> InodeRecord {
        InodeRecord::new(kind, mode, (uid, gid), InodeId::ROOT, Timespec::default())
    }

    fn cred(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        Cred {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn owner_group_other_bits_are_chosen_by_identity() {
        // rw- r-- ---: owner reads and writes, group reads, others nothing.
        let file = record(FileKind::File, 0o640, 1000, 100);
        assert!(permits(&cred(1000, 5, &[]), &file, MAY_READ | MAY_WRITE));
        assert!(!permits(&cred(1000, 5, &[]), &file, MAY_EXECUTE));
        assert!(permits(&cred(2000, 100, &[]), &file, MAY_READ));
        assert!(!permits(&cred(2000, 100, &[]), &file, MAY_WRITE));
        assert!(permits(&cred(2000, 7, &[8, 100]), &file, MAY_READ));
        assert!(!permits(&cred(2000, 7, &[8]), &file, MAY_READ));
        // The owner class applies even when it grants less than the group class.
        let odd = record(FileKind::File, 0o070, 1000, 100);
        assert!(!permits(&cred(1000, 100, &[]), &odd, MAY_READ));
    }

    #[test]
    fn root_bypasses_all_but_file_execute() {
        let root = Cred::root();
        let dir = record(FileKind::Directory, 0o000, 1000, 100);
        assert!(permits(&root, &dir, MAY_READ | MAY_WRITE | MAY_EXECUTE));
        let plain = record(FileKind::File, 0o600, 1000, 100);
        assert!(permits(&root, &plain, MAY_READ | MAY_WRITE));
        assert!(!permits(&root, &plain, MAY_EXECUTE));
        let script = record(FileKind::File, 0o001, 1000, 100);
        assert!(permits(&root, &script, MAY_EXECUTE));
    }

    #[test]
    fn sticky_directories_protect_other_users_entries() {
        let tmp = record(FileKind::Directory, 0o1777, 0, 0);
        let mine = record(FileKind::File, 0o644, 1000, 100);
        assert!(may_remove_from_sticky(&cred(1000, 100, &[]), &tmp, &mine));
        assert!(!may_remove_from_sticky(&cred(2000, 100, &[]), &tmp, &mine));
        assert!(may_remove_from_sticky(&Cred::root(), &tmp, &mine));
        let plain = record(FileKind::Directory, 0o777, 0, 0);
        assert!(may_remove_from_sticky(&cred(2000, 100, &[]), &plain, &mine));
    }
}

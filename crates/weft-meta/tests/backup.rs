//! A metadata backup (`MetaStore::snapshot_to`) holds everything a restored manager
//! serves: the namespace and, with it, the quotas (limits, usage, grace periods and
//! projects). A backup without the quota tables restored a cluster with no limits and
//! every usage at zero, so users over their limits could write again.

mod common;

use common::*;
use weft_layout::InodeId;
use weft_meta::MetaStore;
use weft_proto::quota::{QuotaGrace, QuotaKind, QuotaLimits};

#[test]
fn a_backup_keeps_the_quotas_limits_usage_grace_and_projects() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let root = root();
    let alice = alice();
    let limits = QuotaLimits {
        bytes_soft: 1 << 20,
        bytes_hard: 2 << 20,
        inodes_soft: 9,
        inodes_hard: 10,
    };
    store
        .quota_set(&root, QuotaKind::User, alice.uid, limits)
        .unwrap();
    let grace = QuotaGrace {
        bytes_s: 3600,
        inodes_s: 7200,
    };
    store.quota_grace(&root, QuotaKind::User, grace).unwrap();
    let dir_attr = store.mkdir(&root, InodeId::ROOT, b"proj", 0o777).unwrap();
    store.project(&root, dir_attr.inode, Some(42), false).unwrap();
    for k in 0..3 {
        create(&store, &alice, dir_attr.inode, format!("f{k}")).unwrap();
    }
    let before = store.quota_get(&root, QuotaKind::User, alice.uid).unwrap();
    let project_before = store.quota_get(&root, QuotaKind::Project, 42).unwrap();
    assert_eq!(before.usage.inodes, 3);
    assert_eq!(project_before.usage.inodes, 4, "the directory and its 3 files");

    let snapshot = dir.path().join("backup.redb");
    store.snapshot_to(&snapshot).unwrap();
    drop(store);
    let restored = MetaStore::open(&snapshot, (0, 0)).unwrap();
    restored.set_cluster(cluster()).unwrap();
    let after = restored.quota_get(&root, QuotaKind::User, alice.uid).unwrap();
    assert_eq!(after.limits, limits, "limits lost in the backup");
    assert_eq!(after.grace, grace, "grace periods lost in the backup");
    assert_eq!(after.usage, before.usage, "usage lost in the backup");
    let project_after = restored.quota_get(&root, QuotaKind::Project, 42).unwrap();
    assert_eq!(project_after.usage, project_before.usage, "project usage lost");
    let dir_again = restored.lookup(&root, InodeId::ROOT, b"proj").unwrap();
    assert_eq!(
        restored.project(&root, dir_again.inode, None, false).unwrap(),
        42,
        "a directory's project lost in the backup"
    );
}

//! Quotas in the store: each user's, group's and project's limits and usage, the
//! grace periods, the project of each inode and the bytes each file is charged with,
//! all changed in the transactions of the operations that change them.
//!
//! Tables:
//! - `quota_limits`: (kind, id) -> encoded `QuotaLimits`;
//! - `quota_usage`: (kind, id) -> encoded `QuotaUsage` (inodes, bytes, and since when
//!   over each soft limit); a row with no usage and no limit is removed;
//! - `quota_grace`: kind -> encoded `QuotaGrace` (the default until set);
//! - `quota_projects`: inode -> project, for inodes with one (what is made in a
//!   directory takes its project, as with ext4's and XFS's inherit flag);
//! - `quota_bytes`: inode -> bytes the file is charged with, as last settled from its
//!   io servers (`settle`).
//!
//! Invariant: an id's inode count is the number of records in `inodes` it owns (by
//! uid, gid, project); its bytes, the sum of its files' `quota_bytes`. Every inode
//! record comes into `inodes` through `add_name` (new) or the root's creation, and
//! leaves through `remove_inode`: those two charge and release; a chown moves both.
//! `recount` restores the invariant from the namespace (a store made before quotas is
//! counted at its first open).

use redb::{
    ReadableDatabase, ReadableTable, ReadableTableMetadata, Table, TableDefinition, WriteTransaction,
};
use weft_layout::{InodeId, Layout};
use weft_proto::quota::{refusal, QuotaGrace, QuotaKind, QuotaLimits, QuotaReport, QuotaUsage, Resource};
use weft_proto::{Cred, ErrorCode, Wire, WireError};

use super::record::InodeRecord;
use super::{MetaStore, Namespace, StorageResult, WriteTables, INODES};

pub(super) const LIMITS: TableDefinition<(u8, u32), &[u8]> = TableDefinition::new("quota_limits");
pub(super) const USAGE: TableDefinition<(u8, u32), &[u8]> = TableDefinition::new("quota_usage");
pub(super) const GRACE: TableDefinition<u8, &[u8]> = TableDefinition::new("quota_grace");
pub(super) const PROJECTS: TableDefinition<u64, u32> = TableDefinition::new("quota_projects");
pub(super) const CHARGED: TableDefinition<u64, u64> = TableDefinition::new("quota_bytes");

/// Most inodes one `Project` change with `recursive` gives a project in its single
/// transaction; a larger tree is refused whole, with a message saying so.
pub const PROJECT_TREE_INODES_MAX: usize = 1_000_000;

/// The quota tables of a write transaction.
pub(super) struct QuotaTables<'t> {
    limits: Table<'t, (u8, u32), &'static [u8]>,
    usage: Table<'t, (u8, u32), &'static [u8]>,
    grace: Table<'t, u8, &'static [u8]>,
    projects: Table<'t, u64, u32>,
    charged: Table<'t, u64, u64>,
}

impl<'t> QuotaTables<'t> {
    pub(super) fn open(txn: &'t WriteTransaction) -> Result<Self, WireError> {
        Ok(QuotaTables {
            limits: txn.open_table(LIMITS).storage()?,
            usage: txn.open_table(USAGE).storage()?,
            grace: txn.open_table(GRACE).storage()?,
            projects: txn.open_table(PROJECTS).storage()?,
            charged: txn.open_table(CHARGED).storage()?,
        })
    }
}

/// Makes the tables at the store's open, and counts the usage of a store that has
/// none yet (one made before quotas, or new: its root).
pub(super) fn open_tables(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let empty = {
        let usage = txn.open_table(USAGE)?;
        txn.open_table(LIMITS)?;
        txn.open_table(GRACE)?;
        txn.open_table(PROJECTS)?;
        txn.open_table(CHARGED)?;
        usage.is_empty()?
    };
    if empty {
        let mut tables = QuotaTables::open(txn).map_err(|e| redb::Error::Corrupted(e.message))?;
        let inodes = txn.open_table(INODES)?;
        count(&mut tables, &inodes, now_ms()).map_err(|e| redb::Error::Corrupted(e.message))?;
    }
    Ok(())
}

/// The ids a file is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owners {
    uid: u32,
    gid: u32,
    project: u32,
}

impl Owners {
    fn each(self) -> [(QuotaKind, u32); 3] {
        [
            (QuotaKind::User, self.uid),
            (QuotaKind::Group, self.gid),
            (QuotaKind::Project, self.project),
        ]
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> WireError {
    WireError::new(
        ErrorCode::Internal,
        format!("quota {what} record is corrupt: {e}"),
    )
}

fn quota_error(kind: QuotaKind, id: u32, why: String) -> WireError {
    WireError::new(
        ErrorCode::QuotaExceeded,
        format!("disk quota exceeded: {} {id}: {why}", kind.name()),
    )
}

fn read_limits<T: ReadableTable<(u8, u32), &'static [u8]>>(
    table: &T,
    kind: QuotaKind,
    id: u32,
) -> Result<QuotaLimits, WireError> {
    match table.get((kind as u8, id)).storage()? {
        None => Ok(QuotaLimits::default()),
        Some(v) => QuotaLimits::from_bytes(v.value()).map_err(|e| corrupt("limits", e)),
    }
}

fn read_usage<T: ReadableTable<(u8, u32), &'static [u8]>>(
    table: &T,
    kind: QuotaKind,
    id: u32,
) -> Result<QuotaUsage, WireError> {
    match table.get((kind as u8, id)).storage()? {
        None => Ok(QuotaUsage::default()),
        Some(v) => QuotaUsage::from_bytes(v.value()).map_err(|e| corrupt("usage", e)),
    }
}

fn read_grace<T: ReadableTable<u8, &'static [u8]>>(
    table: &T,
    kind: QuotaKind,
) -> Result<QuotaGrace, WireError> {
    match table.get(kind as u8).storage()? {
        None => Ok(QuotaGrace::default()),
        Some(v) => QuotaGrace::from_bytes(v.value()).map_err(|e| corrupt("grace", e)),
    }
}

impl QuotaTables<'_> {
    fn project(&self, inode: InodeId) -> Result<u32, WireError> {
        Ok(self.projects.get(inode.0).storage()?.map_or(0, |v| v.value()))
    }

    fn charged(&self, inode: InodeId) -> Result<u64, WireError> {
        Ok(self.charged.get(inode.0).storage()?.map_or(0, |v| v.value()))
    }

    fn owners(&self, inode: InodeId, record: &InodeRecord) -> Result<Owners, WireError> {
        Ok(Owners {
            uid: record.uid,
            gid: record.gid,
            project: self.project(inode)?,
        })
    }

    /// Why adding `adding` of `resource` to every id of `owners` is refused, if it is.
    fn refused(&self, owners: Owners, resource: Resource, adding: u64, now: u64) -> Result<(), WireError> {
        // Root's files are never refused (as Linux lets CAP_SYS_RESOURCE pass); counted
        // all the same.
        if owners.uid == 0 {
            return Ok(());
        }
        for (kind, id) in owners.each() {
            let limits = read_limits(&self.limits, kind, id)?;
            if limits.is_none() {
                continue;
            }
            let usage = read_usage(&self.usage, kind, id)?;
            let grace = read_grace(&self.grace, kind)?;
            if let Some(why) = refusal(resource, adding, &limits, &usage, &grace, now) {
                return Err(quota_error(kind, id, why));
            }
        }
        Ok(())
    }

    /// Adds `delta` of `resource` to `kind` id `id`.
    fn add(
        &mut self,
        kind: QuotaKind,
        id: u32,
        resource: Resource,
        delta: i64,
        now: u64,
    ) -> Result<(), WireError> {
        if delta == 0 {
            return Ok(());
        }
        let limits = read_limits(&self.limits, kind, id)?;
        let mut usage = read_usage(&self.usage, kind, id)?;
        let value = match resource {
            Resource::Bytes => usage.bytes,
            Resource::Inodes => usage.inodes,
        }
        .saturating_add_signed(delta);
        usage.set(resource, value, &limits, now);
        self.put_usage(kind, id, &usage, &limits)
    }

    fn put_usage(
        &mut self,
        kind: QuotaKind,
        id: u32,
        usage: &QuotaUsage,
        limits: &QuotaLimits,
    ) -> Result<(), WireError> {
        if *usage == QuotaUsage::default() && limits.is_none() {
            self.usage.remove((kind as u8, id)).storage()?;
        } else {
            self.usage
                .insert((kind as u8, id), usage.to_bytes().as_slice())
                .storage()?;
        }
        Ok(())
    }

    /// Moves `bytes` and one inode from `from` to `to` (a chown, a project change).
    fn transfer(
        &mut self,
        kind: QuotaKind,
        from: u32,
        to: u32,
        bytes: u64,
        now: u64,
    ) -> Result<(), WireError> {
        if from == to {
            return Ok(());
        }
        let bytes = bytes.min(i64::MAX as u64) as i64;
        self.add(kind, from, Resource::Inodes, -1, now)?;
        self.add(kind, from, Resource::Bytes, -bytes, now)?;
        self.add(kind, to, Resource::Inodes, 1, now)?;
        self.add(kind, to, Resource::Bytes, bytes, now)
    }
}

/// Counts every id's usage afresh from `inodes`, the projects and the charged bytes.
fn count<T: ReadableTable<u64, &'static [u8]>>(
    tables: &mut QuotaTables<'_>,
    inodes: &T,
    now: u64,
) -> Result<u64, WireError> {
    use std::collections::BTreeMap;
    let mut counted: BTreeMap<(QuotaKind, u32), (u64, u64)> = BTreeMap::new();
    let mut scanned = 0;
    for item in inodes.iter().storage()? {
        let (key, value) = item.storage()?;
        let inode = InodeId(key.value());
        let record = InodeRecord::decode(value.value()).map_err(|e| corrupt("inode", e))?;
        let owners = tables.owners(inode, &record)?;
        let bytes = tables.charged(inode)?;
        for (kind, id) in owners.each() {
            let entry = counted.entry((kind, id)).or_default();
            entry.0 += 1;
            entry.1 = entry.1.saturating_add(bytes);
        }
        scanned += 1;
    }
    let old: Vec<(u8, u32)> = tables
        .usage
        .iter()
        .storage()?
        .map(|item| item.map(|(k, _)| k.value()))
        .collect::<Result<_, _>>()
        .storage()?;
    for key in old {
        if let Some(kind) = QuotaKind::ALL.into_iter().find(|k| *k as u8 == key.0) {
            counted.entry((kind, key.1)).or_default();
        }
    }
    for ((kind, id), (inodes, bytes)) in counted {
        let limits = read_limits(&tables.limits, kind, id)?;
        let mut usage = read_usage(&tables.usage, kind, id)?;
        usage.set(Resource::Inodes, inodes, &limits, now);
        usage.set(Resource::Bytes, bytes, &limits, now);
        tables.put_usage(kind, id, &usage, &limits)?;
    }
    Ok(scanned)
}

impl WriteTables<'_> {
    fn now_ms(&self) -> u64 {
        (self.now.secs.max(0) as u64)
            .saturating_mul(1000)
            .saturating_add(self.now.nanos as u64 / 1_000_000)
    }

    /// Refuses (before anything is written) a new inode owned by (`uid`, `gid`) in
    /// `parent` that a quota of its owner, group or the parent's project forbids.
    pub(super) fn quota_admit(&self, (uid, gid): (u32, u32), parent: InodeId) -> Result<(), WireError> {
        let owners = Owners {
            uid,
            gid,
            project: self.quota.project(parent)?,
        };
        self.quota.refused(owners, Resource::Inodes, 1, self.now_ms())
    }

    /// Charges `inode` (made in `parent`, if `new`: else nothing) to its ids, after
    /// the same check as `quota_admit`; it takes `parent`'s project.
    pub(super) fn quota_charge_new(
        &mut self,
        new: bool,
        (inode, record): (InodeId, &InodeRecord),
        parent: InodeId,
    ) -> Result<(), WireError> {
        if !new {
            return Ok(());
        }
        self.quota_admit((record.uid, record.gid), parent)?;
        let project = self.quota.project(parent)?;
        if project != 0 {
            self.quota.projects.insert(inode.0, project).storage()?;
        }
        let now = self.now_ms();
        let owners = Owners {
            uid: record.uid,
            gid: record.gid,
            project,
        };
        for (kind, id) in owners.each() {
            self.quota.add(kind, id, Resource::Inodes, 1, now)?;
        }
        Ok(())
    }

    /// `inode`'s record is about to go: its inode and bytes leave its ids' usage.
    pub(super) fn quota_release(&mut self, inode: InodeId) -> Result<(), WireError> {
        let Some(record) = self.find_inode(inode)? else {
            return Ok(());
        };
        let owners = self.quota.owners(inode, &record)?;
        let bytes = self.quota.charged(inode)?.min(i64::MAX as u64) as i64;
        let now = self.now_ms();
        for (kind, id) in owners.each() {
            self.quota.add(kind, id, Resource::Inodes, -1, now)?;
            self.quota.add(kind, id, Resource::Bytes, -bytes, now)?;
        }
        self.quota.projects.remove(inode.0).storage()?;
        self.quota.charged.remove(inode.0).storage()?;
        Ok(())
    }

    /// A chown or chgrp of `inode` from `before` to `after`: its inode and bytes move
    /// to the new owner and group (never refused: root gives files away, as Lustre lets
    /// it).
    pub(super) fn quota_chown(
        &mut self,
        inode: InodeId,
        before: &InodeRecord,
        after: &InodeRecord,
    ) -> Result<(), WireError> {
        let bytes = self.quota.charged(inode)?;
        let now = self.now_ms();
        self.quota
            .transfer(QuotaKind::User, before.uid, after.uid, bytes, now)?;
        self.quota
            .transfer(QuotaKind::Group, before.gid, after.gid, bytes, now)
    }
}

/// The entries of directory `dir`: (child, kind code).
fn children<T: ReadableTable<(u64, &'static [u8]), (u64, u8)>>(
    dirents: &T,
    dir: InodeId,
) -> Result<Vec<(InodeId, u8)>, WireError> {
    use std::ops::Bound;
    let lower = Bound::Included((dir.0, &[][..]));
    let upper = match dir.0.checked_add(1) {
        Some(next) => Bound::Excluded((next, &[][..])),
        None => Bound::Unbounded,
    };
    dirents
        .range::<(u64, &[u8])>((lower, upper))
        .storage()?
        .map(|item| item.map(|(_, v)| (InodeId(v.value().0), v.value().1)))
        .collect::<Result<_, _>>()
        .storage()
}

/// Whether `cred` may change quotas: root, or the owner of the file system's root
/// directory (in `owner` mode, the cluster key's owner).
fn may_administer<N: Namespace>(ns: &N, cred: &Cred) -> Result<bool, WireError> {
    Ok(cred.uid == 0 || ns.inode(InodeId::ROOT)?.uid == cred.uid)
}

fn not_administrator(cred: &Cred, what: &str) -> WireError {
    WireError::new(
        ErrorCode::NotPermitted,
        format!(
            "uid {} may not {what}: only root or the owner of the file system's root directory may",
            cred.uid
        ),
    )
}

impl MetaStore {
    /// `QuotaGet`: `kind` id `id`'s quota. Users see their own uid and groups and any
    /// project; root and the root directory's owner see any id.
    pub fn quota_get(&self, cred: &Cred, kind: QuotaKind, id: u32) -> Result<QuotaReport, WireError> {
        self.with_database(|db| {
            let txn = db.begin_read().storage()?;
            let inodes = txn.open_table(INODES).storage()?;
            let root_uid = match inodes.get(InodeId::ROOT.0).storage()? {
                Some(v) => {
                    InodeRecord::decode(v.value())
                        .map_err(|e| corrupt("inode", e))?
                        .uid
                }
                None => 0,
            };
            let own = match kind {
                QuotaKind::User => cred.uid == id,
                QuotaKind::Group => cred.in_group(id),
                QuotaKind::Project => true,
            };
            if !own && cred.uid != 0 && cred.uid != root_uid {
                return Err(WireError::new(
                    ErrorCode::PermissionDenied,
                    format!(
                        "uid {} may not see the quota of {} {id}: users see their own",
                        cred.uid,
                        kind.name()
                    ),
                ));
            }
            Ok(QuotaReport {
                kind,
                id,
                limits: read_limits(&txn.open_table(LIMITS).storage()?, kind, id)?,
                usage: read_usage(&txn.open_table(USAGE).storage()?, kind, id)?,
                grace: read_grace(&txn.open_table(GRACE).storage()?, kind)?,
                now_ms: now_ms(),
            })
        })
    }

    /// `QuotaSet`: sets `kind` id `id`'s limits (all 0: none); the time over a soft
    /// limit starts now if the usage is over the new one.
    pub fn quota_set(
        &self,
        cred: &Cred,
        kind: QuotaKind,
        id: u32,
        limits: QuotaLimits,
    ) -> Result<QuotaReport, WireError> {
        limits
            .check()
            .map_err(|e| WireError::new(ErrorCode::InvalidArgument, e))?;
        self.write(move |tx| {
            if !may_administer(tx, cred)? {
                return Err(not_administrator(cred, "set quotas"));
            }
            let now = tx.now_ms();
            let mut usage = read_usage(&tx.quota.usage, kind, id)?;
            if limits.is_none() {
                tx.quota.limits.remove((kind as u8, id)).storage()?;
            } else {
                tx.quota
                    .limits
                    .insert((kind as u8, id), limits.to_bytes().as_slice())
                    .storage()?;
            }
            let (bytes, inodes) = (usage.bytes, usage.inodes);
            usage.set(Resource::Bytes, bytes, &limits, now);
            usage.set(Resource::Inodes, inodes, &limits, now);
            tx.quota.put_usage(kind, id, &usage, &limits)?;
            Ok(QuotaReport {
                kind,
                id,
                limits,
                usage,
                grace: read_grace(&tx.quota.grace, kind)?,
                now_ms: now,
            })
        })
    }

    /// `QuotaGrace`: sets the grace periods of `kind`'s soft limits.
    pub fn quota_grace(
        &self,
        cred: &Cred,
        kind: QuotaKind,
        grace: QuotaGrace,
    ) -> Result<QuotaReport, WireError> {
        let max = weft_proto::quota::GRACE_MAX_S;
        if grace.bytes_s > max || grace.inodes_s > max {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("a grace period is at most {max} s (ten years)"),
            ));
        }
        self.write(move |tx| {
            if !may_administer(tx, cred)? {
                return Err(not_administrator(cred, "set grace periods"));
            }
            tx.quota
                .grace
                .insert(kind as u8, grace.to_bytes().as_slice())
                .storage()?;
            Ok(QuotaReport {
                kind,
                id: 0,
                limits: read_limits(&tx.quota.limits, kind, 0)?,
                usage: read_usage(&tx.quota.usage, kind, 0)?,
                grace,
                now_ms: tx.now_ms(),
            })
        })
    }

    /// `Project`: `inode`'s project, after giving it (and with `recursive`, every inode
    /// below a directory) project `set`, moving their usage between projects.
    pub fn project(
        &self,
        cred: &Cred,
        inode: InodeId,
        set: Option<u32>,
        recursive: bool,
    ) -> Result<u32, WireError> {
        let Some(project) = set else {
            return self.with_database(|db| {
                let txn = db.begin_read().storage()?;
                let projects = txn.open_table(PROJECTS).storage()?;
                let inodes = txn.open_table(INODES).storage()?;
                if inodes.get(inode.0).storage()?.is_none() {
                    return Err(WireError::new(
                        ErrorCode::Stale,
                        format!("inode {inode} does not exist"),
                    ));
                }
                Ok(projects.get(inode.0).storage()?.map_or(0, |v| v.value()))
            });
        };
        self.write(move |tx| {
            if !may_administer(tx, cred)? {
                return Err(not_administrator(cred, "set projects"));
            }
            let record = tx.inode(inode)?;
            let mut todo = vec![(inode, record)];
            let mut seen = std::collections::HashSet::from([inode]);
            if recursive && todo[0].1.is_directory() {
                let mut next = 0;
                while next < todo.len() {
                    let (dir, ref record) = todo[next];
                    next += 1;
                    if !record.is_directory() {
                        continue;
                    }
                    let children = children(&tx.dirents, dir)?;
                    for (child, _) in children {
                        // A file's hard links: once.
                        if seen.insert(child) {
                            todo.push((child, tx.inode(child)?));
                        }
                        if todo.len() > PROJECT_TREE_INODES_MAX {
                            return Err(WireError::new(
                                ErrorCode::TooLarge,
                                format!(
                                    "the tree under inode {inode} has more than {PROJECT_TREE_INODES_MAX} inodes: \
                                     give its subdirectories their project one at a time"
                                ),
                            ));
                        }
                    }
                }
            }
            let now = tx.now_ms();
            for (each, _) in todo {
                let old = tx.quota.project(each)?;
                if old == project {
                    continue;
                }
                let bytes = tx.quota.charged(each)?;
                tx.quota.transfer(QuotaKind::Project, old, project, bytes, now)?;
                if project == 0 {
                    tx.quota.projects.remove(each.0).storage()?;
                } else {
                    tx.quota.projects.insert(each.0, project).storage()?;
                }
            }
            Ok(project)
        })
    }

    /// `QuotaRecount`: every id's usage counted again from the namespace (inodes) and
    /// the bytes last settled per file. Returns the inodes counted.
    pub fn quota_recount(&self, cred: &Cred) -> Result<u64, WireError> {
        self.write(move |tx| {
            if !may_administer(tx, cred)? {
                return Err(not_administrator(cred, "recount quotas"));
            }
            let now = tx.now_ms();
            count(&mut tx.quota, &tx.inodes, now)
        })
    }

    /// Regular files with objects after `after`, in inode order, at most `max`: what a
    /// full settle asks the io servers about.
    pub fn quota_files(&self, after: InodeId, max: usize) -> Result<Vec<(InodeId, Layout)>, WireError> {
        self.with_database(|db| {
            let txn = db.begin_read().storage()?;
            let inodes = txn.open_table(INODES).storage()?;
            let mut out = Vec::new();
            for item in inodes.range(after.0.saturating_add(1)..).storage()? {
                let (key, value) = item.storage()?;
                let record = InodeRecord::decode(value.value()).map_err(|e| corrupt("inode", e))?;
                if let Some(layout) = record.layout {
                    out.push((InodeId(key.value()), layout));
                    if out.len() >= max {
                        break;
                    }
                }
            }
            Ok(out)
        })
    }

    /// For the settler, in one read: each of `inodes` that is still a file with a
    /// layout, with its layout and whether its owner, group or project has a limit of
    /// bytes (a file of root's is never refused: it counts as unlimited).
    pub fn quota_settle_plan(&self, inodes: &[InodeId]) -> Result<Vec<(InodeId, Layout, bool)>, WireError> {
        self.with_database(|db| {
            let txn = db.begin_read().storage()?;
            let table = txn.open_table(INODES).storage()?;
            let limits = txn.open_table(LIMITS).storage()?;
            let projects = txn.open_table(PROJECTS).storage()?;
            let mut plan = Vec::with_capacity(inodes.len());
            for &inode in inodes {
                let Some(v) = table.get(inode.0).storage()? else {
                    continue;
                };
                let record = InodeRecord::decode(v.value()).map_err(|e| corrupt("inode", e))?;
                let Some(layout) = record.layout else { continue };
                let owners = Owners {
                    uid: record.uid,
                    gid: record.gid,
                    project: projects.get(inode.0).storage()?.map_or(0, |v| v.value()),
                };
                let mut limited = false;
                if owners.uid != 0 {
                    for (kind, id) in owners.each() {
                        let l = read_limits(&limits, kind, id)?;
                        if l.bytes_soft != 0 || l.bytes_hard != 0 {
                            limited = true;
                            break;
                        }
                    }
                }
                plan.push((inode, layout, limited));
            }
            Ok(plan)
        })
    }

    /// Charges each file of `settled` with its bytes as its io servers count them now
    /// (files removed meanwhile are skipped). Returns those of them whose owner, group
    /// or project may not write any more (`quota_may_write` refuses).
    pub fn quota_settle(&self, settled: Vec<(InodeId, u64)>) -> Result<Vec<InodeId>, WireError> {
        if settled.is_empty() {
            return Ok(Vec::new());
        }
        self.write(move |tx| {
            let now = tx.now_ms();
            let mut over = Vec::new();
            for (inode, bytes) in settled {
                let Some(record) = tx.find_inode(inode)? else {
                    continue;
                };
                let old = tx.quota.charged(inode)?;
                let owners = tx.quota.owners(inode, &record)?;
                if old != bytes {
                    let delta =
                        (bytes as i128 - old as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
                    for (kind, id) in owners.each() {
                        tx.quota.add(kind, id, Resource::Bytes, delta, now)?;
                    }
                    tx.quota.charged.insert(inode.0, bytes).storage()?;
                }
                if tx.quota.refused(owners, Resource::Bytes, 0, now).is_err() {
                    over.push(inode);
                }
            }
            Ok(over)
        })
    }

    /// Whether the owner, group and project of `inode` may write more bytes (a file
    /// root owns always may): refused once one of them reached its hard limit of bytes, or stayed over its soft limit
    /// past the grace period (the manager then grants no write capability).
    pub fn quota_may_write(&self, inode: InodeId) -> Result<(), WireError> {
        self.with_database(|db| {
            let txn = db.begin_read().storage()?;
            let inodes = txn.open_table(INODES).storage()?;
            let Some(value) = inodes.get(inode.0).storage()? else {
                return Ok(());
            };
            let record = InodeRecord::decode(value.value()).map_err(|e| corrupt("inode", e))?;
            // Root's files are never refused (see `refused`).
            if record.uid == 0 {
                return Ok(());
            }
            let project = txn
                .open_table(PROJECTS)
                .storage()?
                .get(inode.0)
                .storage()?
                .map_or(0, |v| v.value());
            let (limits, usage, grace) = (
                txn.open_table(LIMITS).storage()?,
                txn.open_table(USAGE).storage()?,
                txn.open_table(GRACE).storage()?,
            );
            let owners = Owners {
                uid: record.uid,
                gid: record.gid,
                project,
            };
            let now = now_ms();
            for (kind, id) in owners.each() {
                let l = read_limits(&limits, kind, id)?;
                if l.is_none() {
                    continue;
                }
                let u = read_usage(&usage, kind, id)?;
                if let Some(why) = refusal(Resource::Bytes, 0, &l, &u, &read_grace(&grace, kind)?, now) {
                    return Err(quota_error(kind, id, why));
                }
            }
            Ok(())
        })
    }
}

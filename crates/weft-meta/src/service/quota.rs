//! Quotas at the service: the quota requests, the byte check of write grants, and the
//! settler, which keeps each file's charged bytes true to its io servers.
//!
//! How bytes are enforced (Lustre's master and slaves, made simpler): the io servers
//! refuse every write without a write capability the manager granted, and the manager
//! grants none for a file whose owner, group or project is at its hard limit of bytes
//! (or over its soft limit past the grace). The settler (a step of the purger's round,
//! every 500 ms in weftd) asks the io servers for the bytes allocated to each file a
//! write capability was granted for (until it expired; every `UNLIMITED_SETTLE_MS` only
//! for a file whose ids have no limit of bytes), charges them (`MetaStore::quota_settle`), and revokes the
//! write capabilities of files whose ids went over: their writers' next request is
//! refused, the grant they then ask for too, and the write fails with EDQUOT. An id
//! may so pass its hard limit by what its writers write in one settle period and the
//! revocation's trip to the servers (the overshoot), never more.

use super::*;
use weft_proto::Striping;

/// Files the settler follows at once; past this, the oldest grants are settled and
/// forgotten first.
pub const SETTLING_FILES_MAX: usize = 65_536;
/// Files one round of a recount asks the io servers about.
const RECOUNT_FILES_PER_ROUND: usize = 4096;
/// How long after its last write capability expired a file is settled once more.
const SETTLE_AFTER_EXPIRY_MS: u64 = 2_000;
/// How often a file being written whose owner, group and project have no limit of
/// bytes is settled (its usage is only counted, nothing to enforce): settling every
/// file of a create storm each round cost the manager a tenth of its CPU and the io
/// servers a stat of every object, twice a second, for nothing.
const UNLIMITED_SETTLE_MS: u64 = 5_000;

/// The files the settler follows.
#[derive(Debug, Default)]
pub(super) struct Settling {
    files: Mutex<BTreeMap<InodeId, Followed>>,
}

#[derive(Debug, Clone, Copy)]
struct Followed {
    /// When its last write capability expires (Unix ms).
    expiry_ms: u64,
    /// A write capability was granted since the last revocation.
    granted: bool,
    /// The bytes charged by the last settle, if any (a file whose bytes did not change
    /// is not written again).
    charged: Option<u64>,
    /// When it was last settled (Unix ms; 0: never).
    settled_ms: u64,
}

impl MetaService {
    /// The quota requests.
    pub(super) fn serve_quota(&self, request: &Request) -> Result<Response, WireError> {
        let store = &self.store;
        match request {
            Request::QuotaSet {
                cred,
                kind,
                id,
                limits,
            } => store.quota_set(cred, *kind, *id, *limits).map(Response::Quota),
            Request::QuotaGet { cred, kind, id } => store.quota_get(cred, *kind, *id).map(Response::Quota),
            Request::QuotaGrace { cred, kind, grace } => {
                store.quota_grace(cred, *kind, *grace).map(Response::Quota)
            }
            Request::Project {
                cred,
                inode,
                set,
                recursive,
            } => store
                .project(cred, *inode, *set, *recursive)
                .map(Response::ProjectId),
            Request::QuotaRecount { cred } => self.quota_recount(cred).map(|()| Response::Done),
            other => Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("{:?} is no quota request", other.opcode()),
            )),
        }
    }

    /// The byte check of a write grant on `inode`: by the file's owner, group and
    /// project, whoever asks (a mount's daemon asks as root for every user).
    pub(super) fn quota_may_grant_write(&self, inode: InodeId) -> Result<(), WireError> {
        self.store.quota_may_write(inode)
    }

    /// A write capability of `inode` valid until `expiry_ms` was granted.
    pub(super) fn quota_granted(&self, inode: InodeId, expiry_ms: u64) {
        let mut files = self.settling.files.lock().unwrap_or_else(|p| p.into_inner());
        let entry = files.entry(inode).or_insert(Followed {
            expiry_ms: 0,
            granted: true,
            charged: None,
            settled_ms: 0,
        });
        entry.expiry_ms = entry.expiry_ms.max(expiry_ms);
        entry.granted = true;
        if files.len() > SETTLING_FILES_MAX {
            // The one expiring first: settled by the next full recount at worst.
            if let Some(oldest) = files.iter().min_by_key(|(_, f)| f.expiry_ms).map(|(i, _)| *i) {
                files.remove(&oldest);
            }
        }
    }

    /// The bytes allocated to each of `files` on its io servers (every copy counted);
    /// a file whose servers did not all answer is left out (settled next time).
    fn file_bytes(&self, files: &[(InodeId, Layout)]) -> Vec<(InodeId, u64)> {
        let mut by_server: BTreeMap<ServerId, Vec<usize>> = BTreeMap::new();
        for (index, (_, layout)) in files.iter().enumerate() {
            let mut servers = layout.all_servers();
            servers.sort_unstable();
            servers.dedup();
            for server in servers {
                by_server.entry(server).or_default().push(index);
            }
        }
        let servers: Vec<ServerId> = by_server.keys().copied().collect();
        let totals: Vec<Mutex<(u64, usize)>> = files.iter().map(|_| Mutex::new((0, 0))).collect();
        let results = self.on_each_server(&servers, |server| {
            let indices = &by_server[&server];
            for batch in indices.chunks(BATCH_INODES_MAX) {
                let items: Vec<(InodeId, Striping)> = batch
                    .iter()
                    .map(|&i| {
                        let stripe = files[i].1.stripe_size_bytes;
                        (
                            files[i].0,
                            Striping {
                                stripe_size_bytes: stripe,
                                stripe_count: 1,
                                server_index: 0,
                            },
                        )
                    })
                    .collect();
                let bytes = self.objects.object_bytes(server, &items)?;
                for (&i, allocated) in batch.iter().zip(bytes) {
                    let mut total = totals[i].lock().unwrap_or_else(|p| p.into_inner());
                    total.0 = total.0.saturating_add(allocated);
                    total.1 += 1;
                }
            }
            Ok(())
        });
        for (server, result) in servers.iter().zip(results) {
            if let Err(error) = result {
                eprintln!("weftd meta: quota: asking io server {server} for the bytes of files: {error}");
            }
        }
        files
            .iter()
            .zip(totals)
            .filter_map(|((inode, layout), total)| {
                let (bytes, answered) = total.into_inner().unwrap_or_else(|p| p.into_inner());
                let mut servers = layout.all_servers();
                servers.sort_unstable();
                servers.dedup();
                (answered == servers.len()).then_some((*inode, bytes))
            })
            .collect()
    }

    /// One settle round: charges the files being written with their bytes and revokes
    /// the write capabilities of those whose ids went over. A file whose ids have a
    /// limit of bytes is settled every round; one whose ids have none every
    /// `UNLIMITED_SETTLE_MS` and once after its grants expired (its usage is counted,
    /// nothing is enforced). Returns the files settled.
    pub fn settle_quotas_once(&self) -> usize {
        let now = unix_ms();
        let followed: Vec<(InodeId, Followed)> = {
            let files = self.settling.files.lock().unwrap_or_else(|p| p.into_inner());
            files.iter().map(|(i, f)| (*i, *f)).collect()
        };
        if followed.is_empty() {
            return 0;
        }
        let inodes: Vec<InodeId> = followed.iter().map(|(i, _)| *i).collect();
        let plan = match self.store.quota_settle_plan(&inodes) {
            Ok(plan) => plan,
            Err(error) => {
                eprintln!("weftd meta: quota: reading the layouts of the files being written: {error}");
                return 0;
            }
        };
        let of: BTreeMap<InodeId, Followed> = followed.iter().copied().collect();
        let due = |inode: &InodeId, limited: bool| {
            let f = &of[inode];
            limited
                || now >= f.settled_ms.saturating_add(UNLIMITED_SETTLE_MS)
                || f.expiry_ms.saturating_add(SETTLE_AFTER_EXPIRY_MS) < now
        };
        let planned: BTreeSet<InodeId> = plan.iter().map(|(i, _, _)| *i).collect();
        let files: Vec<(InodeId, weft_layout::Layout)> = plan
            .into_iter()
            .filter(|(inode, _, limited)| due(inode, *limited))
            .map(|(inode, layout, _)| (inode, layout))
            .collect();
        let looked: BTreeSet<InodeId> = files.iter().map(|(i, _)| *i).collect();
        // Forgotten after this round may be the files looked at in it and those gone
        // (removed, or no file with a layout any more), never one skipped.
        let followed: Vec<(InodeId, Followed)> = followed
            .into_iter()
            .filter(|(inode, _)| looked.contains(inode) || !planned.contains(inode))
            .collect();
        if files.is_empty() {
            self.forget_expired(&followed, now);
            return 0;
        }
        {
            let mut following = self.settling.files.lock().unwrap_or_else(|p| p.into_inner());
            for (inode, _) in &files {
                if let Some(f) = following.get_mut(inode) {
                    f.settled_ms = now;
                }
            }
        }
        let settled = self.file_bytes(&files);
        let count = settled.len();
        // Nothing written since the last round: no transaction. Else every followed
        // file is looked at (the store writes only the changed ones), so that all the
        // files of an id that went over lose their write capabilities at once.
        let before: BTreeMap<InodeId, Option<u64>> = followed.iter().map(|(i, f)| (*i, f.charged)).collect();
        let changed: Vec<(InodeId, u64)> = settled
            .iter()
            .filter(|(inode, bytes)| before.get(inode).copied().flatten() != Some(*bytes))
            .copied()
            .collect();
        if changed.is_empty() {
            self.forget_expired(&followed, now);
            return count;
        }
        let over = match self.store.quota_settle(settled) {
            Ok(over) => over,
            Err(error) => {
                eprintln!("weftd meta: quota: charging the bytes written: {error}");
                return 0;
            }
        };
        let mut files = self.settling.files.lock().unwrap_or_else(|p| p.into_inner());
        let mut revoke = Vec::new();
        for (inode, bytes) in changed {
            if let Some(f) = files.get_mut(&inode) {
                f.charged = Some(bytes);
            }
        }
        for inode in over {
            if let Some(f) = files.get_mut(&inode) {
                if std::mem::replace(&mut f.granted, false) {
                    revoke.push(inode);
                }
            }
        }
        drop(files);
        self.forget_expired(&followed, now);
        if !revoke.is_empty() {
            if let Some(issuer) = self.capabilities.get() {
                issuer.revoke(&revoke);
            }
        }
        count
    }

    /// Files whose grants all expired a while ago have been settled one last time:
    /// the settler stops following them.
    fn forget_expired(&self, followed: &[(InodeId, Followed)], now: u64) {
        let mut files = self.settling.files.lock().unwrap_or_else(|p| p.into_inner());
        for (inode, f) in followed {
            if f.expiry_ms.saturating_add(SETTLE_AFTER_EXPIRY_MS) < now
                && files.get(inode).is_some_and(|now| now.expiry_ms == f.expiry_ms)
            {
                files.remove(inode);
            }
        }
    }

    /// `QuotaRecount`: every file's bytes settled from its io servers, then every id's
    /// usage counted again from the namespace.
    fn quota_recount(&self, cred: &Cred) -> Result<(), WireError> {
        // The permission check first, before the io servers are asked anything.
        self.store.quota_recount(cred)?;
        let mut after = InodeId(0);
        loop {
            let files = self.store.quota_files(after, RECOUNT_FILES_PER_ROUND)?;
            let Some((last, _)) = files.last() else {
                break;
            };
            after = *last;
            let settled = self.file_bytes(&files);
            self.store.quota_settle(settled)?;
        }
        self.store.quota_recount(cred).map(|_| ())
    }
}

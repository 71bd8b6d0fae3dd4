//! Background work: the purger (objects of removed files, lapsed sessions) and the
//! committer (a manager with a commit interval).

use super::*;

/// Stops the purger (or committer) thread when stopped or dropped (after its current
/// round).
pub struct PurgerHandle {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl PurgerHandle {
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // A panic in the purger was already reported by the panic hook.
            let _ = thread.join();
        }
    }
}

impl Drop for PurgerHandle {
    fn drop(&mut self) {
        self.shut_down();
    }
}

impl MetaService {
    /// One purge round: removes the objects of up to `PURGE_BATCH_INODES_MAX`
    /// orphans from their io servers (one batched request per server, servers in
    /// parallel) and forgets the orphans whose objects are gone from every
    /// server. Failures are logged; those orphans stay for a later round.
    /// Returns how many orphans were forgotten.
    pub fn purge_orphans_once(&self) -> usize {
        self.purge_round(false)
    }

    /// A purge round; `ripe_only` skips orphans the previous such round did not see.
    pub(super) fn purge_round(&self, ripe_only: bool) -> usize {
        self.settle_uncertain_creates();
        let orphans = match self.store.orphans(PURGE_BATCH_INODES_MAX) {
            Ok(orphans) => orphans,
            Err(error) => {
                eprintln!("weftd meta: purge: reading orphans: {error}");
                return 0;
            }
        };
        // Purge what the previous round saw already; the rest waits one round.
        let orphans: Vec<(InodeId, Layout)> = if !ripe_only {
            orphans
        } else {
            let mut candidates = self.purge_candidates.lock().unwrap_or_else(|p| p.into_inner());
            let seen = std::mem::take(&mut *candidates);
            let (ripe, young): (Vec<_>, Vec<_>) = orphans.into_iter().partition(|(i, _)| seen.contains(i));
            candidates.extend(young.iter().map(|(i, _)| *i));
            ripe
        };
        if orphans.is_empty() {
            return 0;
        }
        // The removals that made these orphans must be durable before their objects
        // go: a crash must never bring back a name whose objects were purged.
        if let Err(error) = self.store.commit() {
            eprintln!("weftd meta: purge: committing the removals first: {error}; will retry");
            return 0;
        }
        let inodes: Vec<InodeId> = orphans.iter().map(|(inode, _)| *inode).collect();
        let managers: Vec<ServerId> = self.cluster().cache.managers.iter().map(|m| m.id).collect();
        for (manager, result) in managers.iter().zip(self.on_each_server(&managers, |manager| {
            inodes
                .chunks(BATCH_INODES_MAX)
                .try_for_each(|batch| self.objects.drop_cached(manager, batch))
        })) {
            if let Err(error) = result {
                eprintln!("weftd meta: purge: dropping removed files from cache manager {manager}: {error}");
            }
        }
        let mut by_server: BTreeMap<ServerId, Vec<InodeId>> = BTreeMap::new();
        for (inode, layout) in &orphans {
            for server in layout.all_servers() {
                by_server.entry(server).or_default().push(*inode);
            }
        }
        let servers: Vec<ServerId> = by_server.keys().copied().collect();
        let results = self.on_each_server(&servers, |server| {
            by_server[&server]
                .chunks(BATCH_INODES_MAX)
                .try_for_each(|batch| self.objects.remove_objects(server, batch))
        });
        let mut failed = BTreeSet::new();
        for (server, result) in servers.iter().zip(results) {
            if let Err(error) = result {
                eprintln!("weftd meta: purge: removing objects from io server {server}: {error}; will retry");
                failed.insert(*server);
            }
        }
        let done: Vec<InodeId> = orphans
            .iter()
            .filter(|(_, layout)| layout.all_servers().iter().all(|s| !failed.contains(s)))
            .map(|(inode, _)| *inode)
            .collect();
        if done.is_empty() {
            return 0;
        }
        match self.store.forget_orphans(&done) {
            Ok(forgotten) => forgotten,
            Err(error) => {
                eprintln!(
                    "weftd meta: purge: forgetting {} purged orphans: {error}; will retry",
                    done.len()
                );
                0
            }
        }
    }

    /// Acknowledges operations once applied and makes them durable every `interval`
    /// in a background thread (0: every operation is durable before it is answered, no
    /// thread), until the handle is stopped or dropped, or the service is dropped.
    pub fn spawn_committer(self: &Arc<Self>, interval: Duration) -> Option<PurgerHandle> {
        self.store.set_commit_interval(interval);
        if interval.is_zero() {
            return None;
        }
        let service: Weak<MetaService> = Arc::downgrade(self);
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("weft-meta-committer".into())
            .spawn(move || loop {
                match stopped.recv_timeout(interval) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                let Some(service) = service.upgrade() else {
                    return;
                };
                if let Err(e) = service.store.commit() {
                    eprintln!("weftd meta: background commit of the metadata store: {e}; will retry");
                }
            })
            .expect("spawning the committer thread");
        Some(PurgerHandle {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where the store's commits stand, as `CommitMetadata` tells it.
    pub fn commit_info(&self) -> weft_proto::CommitInfo {
        let state = self.store.commit_state();
        weft_proto::CommitInfo {
            interval_us: state.interval.as_micros().min(u64::MAX as u128) as u64,
            seq: state.seq,
            durable_seq: state.durable_seq,
            since_durable_ms: state
                .since_durable
                .map_or(u64::MAX, |d| d.as_millis().min(u64::MAX as u128 - 1) as u64),
        }
    }

    /// Runs purge rounds every `period` in a background thread (back to back
    /// while rounds come back full) until the handle is stopped or dropped, or
    /// the service is dropped.
    pub fn spawn_purger(self: &Arc<Self>, period: Duration) -> PurgerHandle {
        let service: Weak<MetaService> = Arc::downgrade(self);
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("weft-meta-purger".into())
            .spawn(move || loop {
                match stopped.recv_timeout(period) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                let Some(service) = service.upgrade() else {
                    return;
                };
                service.release_lapsed_sessions();
                service.forget_idle_lock_sessions();
                service.settle_quotas_once();
                // A replay may yet make a file of a number a restart made an orphan.
                if service.replay_window_open() {
                    continue;
                }
                // Before the orphans: a migration's new file is purged only after
                // the undo of its switch gave its objects back.
                service.settle_switches();
                while service.purge_round(true) == PURGE_BATCH_INODES_MAX {
                    if !matches!(stopped.try_recv(), Err(TryRecvError::Empty)) {
                        return;
                    }
                }
            })
            .expect("spawning the purger thread");
        PurgerHandle {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

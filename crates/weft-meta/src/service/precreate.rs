//! Precreated objects: pools of inode numbers whose objects the io servers already
//! made, refilled in the background, so that a create costs no io-server round trip.

use super::*;

impl MetaService {
    /// Objects to precreate per refill of a pool, at most `BATCH_INODES_MAX`; 0 turns
    /// the pools off (every create makes its objects; numbers already pooled are used).
    pub fn set_precreate_batch(&self, batch: usize) {
        self.precreate_batch
            .store(batch.min(BATCH_INODES_MAX), Ordering::Relaxed);
    }

    /// A precreated inode number for a file of `layout`, refilling its server set's
    /// pool when empty (one request per server for `PRECREATE_BATCH` numbers). `None`
    /// when the set has no pool and cannot get one (`PRECREATE_POOLS_MAX`).
    pub(super) fn take_precreated(&self, layout: &Layout) -> Result<Option<InodeId>, WireError> {
        // Every server of the file, its copies' too (a replicated file's objects are
        // made on all of them).
        let mut servers = layout.all_servers();
        servers.sort_unstable();
        self.drop_pool_if_restarted(layout, &servers);
        let batch = self.batch_for(&servers);
        // `ran_dry`: the set's pool was filled before and is empty now.
        let pop = |ran_dry: &mut bool| -> Option<Option<InodeId>> {
            let mut pools = self.precreated.lock().unwrap_or_else(|p| p.into_inner());
            if !pools.contains_key(&servers) && pools.len() >= PRECREATE_POOLS_MAX {
                return Some(None);
            }
            *ran_dry = pools.contains_key(&servers);
            pools.get_mut(&servers).and_then(|pool| pool.pop()).map(Some)
        };
        let mut ran_dry = false;
        if let Some(found) = pop(&mut ran_dry) {
            if found.is_some() {
                self.refill_if_low(layout, &servers, batch);
            }
            return Ok(found);
        }
        if batch == 0 {
            return Ok(None);
        }
        if ran_dry {
            self.outran_refiller(&servers);
        }
        let batch = self.batch_for(&servers);
        let _refill = self.refilling.lock().unwrap_or_else(|p| p.into_inner());
        // Another create may have refilled it while this one waited.
        if let Some(found) = pop(&mut ran_dry) {
            return Ok(found);
        }
        let mut fresh = match self.refill(layout, &servers, batch) {
            Ok(fresh) => fresh,
            // An object already under one of the batch's fresh numbers (a bug, or planted
            // by a peer holding the cluster key): the batch went to the purger, which
            // removes that object too; this create makes its own objects instead.
            Err(error) if error.code == ErrorCode::Exists => {
                eprintln!(
                    "weftd meta: {} (a bug, or planted by a peer with the cluster key); \
                     the batch goes to the purger and this create makes its own objects",
                    error.message
                );
                return Ok(None);
            }
            Err(error) => return Err(error),
        };
        let taken = fresh.pop();
        self.precreated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(servers)
            .or_default()
            .extend(fresh);
        Ok(taken)
    }

    /// Asks the background refiller, if there is one, to refill the pool of `servers` once
    /// it holds `batch / 2` numbers or fewer (one request per set at a time).
    pub(super) fn refill_if_low(&self, layout: &Layout, servers: &[ServerId], batch: usize) {
        let left = self
            .precreated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(servers)
            .map_or(0, Vec::len);
        if batch == 0 || left > batch / 2 {
            return;
        }
        let refiller = self.refiller.lock().unwrap_or_else(|p| p.into_inner());
        let Some(refiller) = refiller.as_ref() else {
            return;
        };
        let mut asked = self.refills_asked.lock().unwrap_or_else(|p| p.into_inner());
        if asked.contains(servers) {
            return;
        }
        // A full queue (more sets running low at once than it holds): the next create
        // of that set asks again, or refills itself when the pool is empty.
        if refiller.try_send((layout.clone(), servers.to_vec())).is_ok() {
            asked.insert(servers.to_vec());
        }
    }

    /// One background refill (`spawn_refiller`): skipped if the pool was refilled
    /// meanwhile; a failure is logged (the next create that finds the pool empty
    /// refills itself and reports it).
    pub(super) fn refill_in_background(&self, layout: &Layout, servers: &[ServerId]) {
        let batch = self.batch_for(servers);
        let _refill = self.refilling.lock().unwrap_or_else(|p| p.into_inner());
        let left = self
            .precreated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(servers)
            .map_or(0, Vec::len);
        if batch > 0 && left <= batch / 2 {
            match self.refill(layout, servers, batch) {
                Ok(fresh) => self
                    .precreated
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(servers.to_vec())
                    .or_default()
                    .extend(fresh),
                // An object already under a fresh number: a bug, or planted by a peer
                // holding the cluster key. The batch went to the purger (which removes
                // that object too); creates make their own objects until a refill works.
                Err(error) if error.code == ErrorCode::Exists => eprintln!(
                    "weftd meta: refilling the pool of precreated objects on io servers {servers:?}: \
                     {} (a bug, or planted by a peer with the cluster key); the batch goes to the purger",
                    error.message
                ),
                Err(error) => eprintln!(
                    "weftd meta: refilling the pool of precreated objects on io servers {servers:?}: {error}"
                ),
            }
        }
        self.refills_asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(servers);
    }

    /// Starts the background refiller: a pool that runs down to half a batch is refilled
    /// by this thread while creates go on taking from it, as Lustre's precreate threads
    /// keep ahead of creates. Without it (tests), a create that finds the pool empty
    /// refills it. The thread ends when the service is dropped.
    pub fn spawn_refiller(self: &Arc<Self>) {
        let service: Weak<MetaService> = Arc::downgrade(self);
        let (ask, asked) = mpsc::sync_channel::<RefillAsk>(PRECREATE_POOLS_MAX);
        *self.refiller.lock().unwrap_or_else(|p| p.into_inner()) = Some(ask);
        std::thread::Builder::new()
            .name("weft-meta-refiller".into())
            .spawn(move || {
                // Ends when the service (holding the sender) is dropped.
                while let Ok((layout, servers)) = asked.recv() {
                    let Some(service) = service.upgrade() else {
                        return;
                    };
                    service.refill_in_background(&layout, &servers);
                }
            })
            .expect("spawning the precreate refiller thread");
    }

    /// Precreates `PRECREATE_BATCH` objects on every server of `servers`: the numbers
    /// are recorded in the store first (a crash then hands them to the purger at the
    /// next start), the objects made (durable) after; only then may creates use them.
    pub(super) fn refill(
        &self,
        layout: &Layout,
        servers: &[ServerId],
        batch: usize,
    ) -> Result<Vec<InodeId>, WireError> {
        // Numbers made before one of the servers restarted go first: the incarnations
        // recorded below must hold for every number in the pool.
        self.drop_pool_if_restarted(layout, servers);
        let inodes = self.store.allocate_inodes(batch)?;
        let pool_layout = pool_layout(layout, servers);
        self.store.add_precreated(&inodes, &pool_layout)?;
        let results = self.on_each_server(servers, |server| self.objects.precreate_objects(server, &inodes));
        let made = Layout {
            servers: servers
                .iter()
                .zip(&results)
                .filter(|(_, r)| r.is_ok())
                .map(|(s, _)| *s)
                .collect(),
            ..pool_layout.clone()
        };
        if let Some((server, error)) = first_failure(servers, results) {
            if let Err(e) = self.store.orphan_precreated(&inodes, &made) {
                eprintln!("weftd meta: handing {} unused precreated inodes to the purger failed (they go at the next start): {e}", inodes.len());
            }
            return Err(WireError::new(
                error.code,
                format!("precreating objects on io server {server}: {}", error.message),
            ));
        }
        let now = self.incarnations(servers);
        self.pool_incarnations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(servers.to_vec(), now);
        if let Some((_, dry)) = self
            .batch_doublings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(servers)
        {
            *dry = false;
        }
        Ok(inodes)
    }

    /// The incarnations of `servers`' processes now (`ObjectServers::incarnation`).
    fn incarnations(&self, servers: &[ServerId]) -> Vec<Option<u64>> {
        servers.iter().map(|s| self.objects.incarnation(*s)).collect()
    }

    /// Drops the pool of `servers` when one of them restarted since its numbers were
    /// precreated (another incarnation than the refill recorded): its disk may be a
    /// new, empty one without their objects (a replaced disk), and a create from the
    /// pool would name objects that are gone. The numbers go to the purger (removing a
    /// missing object is no error); the next create refills. A server that cannot be
    /// reached now leaves the pool as it is: its files' I/O fails anyway until it
    /// returns.
    fn drop_pool_if_restarted(&self, layout: &Layout, servers: &[ServerId]) {
        let Some(recorded) = self
            .pool_incarnations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(servers)
            .cloned()
        else {
            return;
        };
        let now = self.incarnations(servers);
        let restarted = recorded
            .iter()
            .zip(&now)
            .any(|(was, is)| matches!((was, is), (Some(a), Some(b)) if a != b));
        if !restarted {
            return;
        }
        let numbers = {
            let mut pools = self.precreated.lock().unwrap_or_else(|p| p.into_inner());
            self.pool_incarnations
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(servers);
            pools.remove(servers).unwrap_or_default()
        };
        if numbers.is_empty() {
            return;
        }
        eprintln!(
            "weftd meta: an io server of {servers:?} restarted since its {} precreated objects were made \
             (its disk may be a new one): they go to the purger, and the pool is made again",
            numbers.len()
        );
        if let Err(e) = self
            .store
            .orphan_precreated(&numbers, &pool_layout(layout, servers))
        {
            eprintln!(
                "weftd meta: handing {} precreated inodes to the purger failed (they go at the next start): {e}",
                numbers.len()
            );
        }
    }

    /// Numbers per refill of the pool of `servers`: `precreate_batch`, doubled each
    /// time creates of that set outran the background refiller, up to
    /// `BATCH_INODES_MAX`. A refill takes about as long for many objects as for a few
    /// (one request and one `syncfs` per server, which a busy disk makes slow: 0.05 to
    /// 6 s measured on a shared VM), so a pool that creates empty before its refill
    /// lands needs bigger refills, not more of them: with 128, 4 clients creating at 300
    /// files/s emptied the 64 numbers left when the refill was asked for before it came
    /// back, and every create of the set waited for it.
    pub(super) fn batch_for(&self, servers: &[ServerId]) -> usize {
        let batch = self.precreate_batch.load(Ordering::Relaxed);
        let doublings = self
            .batch_doublings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(servers)
            .map_or(0, |(doublings, _)| *doublings);
        // BATCH_INODES_MAX is 2^12: more doublings never matter.
        batch.saturating_mul(1 << doublings.min(12)).min(BATCH_INODES_MAX)
    }

    /// A create found the pool of `servers` empty after it had been filled: with a
    /// background refiller, creates outran it, and the set's refills double (see
    /// `batch_for`), once until a refill lands (creates finding it empty together
    /// double it once). Without a refiller (every empty pool is refilled by a create),
    /// nothing changes.
    pub(super) fn outran_refiller(&self, servers: &[ServerId]) {
        if self.refiller.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return;
        }
        let batch = self.precreate_batch.load(Ordering::Relaxed);
        if batch == 0 || self.batch_for(servers) >= BATCH_INODES_MAX {
            return;
        }
        let mut doublings = self.batch_doublings.lock().unwrap_or_else(|p| p.into_inner());
        if !doublings.contains_key(servers) && doublings.len() >= PRECREATE_POOLS_MAX {
            return;
        }
        let (count, dry) = doublings.entry(servers.to_vec()).or_insert((0, false));
        if !*dry {
            *dry = true;
            *count += 1;
        }
    }

    /// Puts a precreated number a create did not use back into its pool.
    pub(super) fn return_precreated(&self, layout: &Layout, inode: InodeId) {
        // Every server of the file, its copies' too (a replicated file's objects are
        // made on all of them).
        let mut servers = layout.all_servers();
        servers.sort_unstable();
        self.precreated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(servers)
            .or_default()
            .push(inode);
    }
}

/// The layout a pool's numbers are recorded with: `layout`'s striping on `servers`,
/// unreplicated (every server holds one object of each number).
fn pool_layout(layout: &Layout, servers: &[ServerId]) -> Layout {
    Layout {
        servers: servers.to_vec(),
        replication: Default::default(),
        ..layout.clone()
    }
}

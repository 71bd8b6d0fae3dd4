//! Creating files: the store's create, the file's objects made on its io servers
//! (or taken precreated), and undone when the create does not commit.

use super::*;
use crate::PendingCreate;
use std::collections::HashMap;

/// The first failed call, with its server.
/// What `create_or_open` did.
enum Created {
    /// Both boxed: attributes with their layouts (a replicated one's copies) are large.
    Made(Box<Made>),
    /// A non-exclusive create found a file of that name.
    Existing(Box<Attr>),
}

pub(super) fn first_failure(
    servers: &[ServerId],
    results: Vec<Result<(), WireError>>,
) -> Option<(ServerId, WireError)> {
    servers
        .iter()
        .zip(results)
        .find_map(|(server, result)| result.err().map(|e| (*server, e)))
}

impl MetaService {
    /// `create`, with the parent's attributes after it (for an existing file a
    /// non-exclusive create opens, the parent as it is then).
    pub fn create_made(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: &[u8],
        mode: u32,
        layout: &LayoutRequest,
        exclusive: bool,
    ) -> Result<Made, WireError> {
        match self.create_or_open(cred, parent, name, mode, layout, exclusive)? {
            Created::Made(made) => Ok(*made),
            Created::Existing(attr) => Ok(Made {
                attr: *attr,
                parent: self.store.getattr(cred, parent)?,
            }),
        }
    }

    /// Creates a file: check, take a precreated inode number for the layout's servers
    /// (its objects exist and are durable: no round trip to the io servers, see
    /// `take_precreated`) or, for a server set without a pool, create its objects now
    /// (in parallel threads, at most `OBJECT_CALLS_PARALLEL_MAX` at once), then commit.
    /// Objects of a create that does not commit go back to the pool, or are removed
    /// again, or left to the purger if that fails. A crash before the commit leaves
    /// precreated objects, which the next start hands to the purger, or (without a pool)
    /// empty objects with a never-reused inode number (harmless, not reclaimed).
    pub fn create(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: &[u8],
        mode: u32,
        layout: &LayoutRequest,
        exclusive: bool,
    ) -> Result<Attr, WireError> {
        match self.create_or_open(cred, parent, name, mode, layout, exclusive)? {
            Created::Made(made) => Ok(made.attr),
            Created::Existing(attr) => Ok(*attr),
        }
    }

    /// `CreateMany`: every name checked and given a precreated number (or objects made
    /// now, as `create_or_open` does), then all committed in one durable transaction
    /// (`MetaStore::create_commit_many`). A name refused on its own is answered as
    /// refused and its number or objects go back; a name asked twice is refused the
    /// second time, as a second exclusive create would be.
    pub(super) fn create_many(
        &self,
        cred: &Cred,
        parent: InodeId,
        names: Vec<Name>,
        mode: u32,
        layout: &LayoutRequest,
    ) -> Result<Response, WireError> {
        super::names_at_most(names.len(), weft_proto::msg::CREATE_MANY_MAX, "create-many")?;
        // The directory itself first: a refusal of it is the whole request's.
        self.store.create_check_dir(cred, parent)?;
        let mut pending: Vec<PendingCreate> = Vec::with_capacity(names.len());
        let mut pooled = Vec::with_capacity(names.len());
        let mut refused = Vec::new();
        let mut seen = std::collections::HashSet::with_capacity(names.len());
        // A number that will not go in: back to its pool, or its objects removed.
        let give_back = |inode: InodeId, layout: &Layout, pooled: bool| {
            if pooled {
                self.return_precreated(layout, inode);
            } else {
                self.discard_objects(inode, layout);
            }
        };
        let exists = |name: &Name, why: &str| {
            let name = String::from_utf8_lossy(name.as_bytes());
            WireError::new(ErrorCode::Exists, format!("{name:?} {why}"))
        };
        for name in names {
            if !seen.insert(name.as_bytes().to_vec()) {
                refused.push((
                    name.clone(),
                    exists(&name, "is asked for twice in one create-many"),
                ));
                continue;
            }
            let check = self
                .store
                .create_check(cred, parent, name.as_bytes(), mode, layout, true);
            let p = match check {
                Ok(CreateCheck::New(p)) => p,
                Ok(CreateCheck::Existing(_)) => {
                    refused.push((
                        name.clone(),
                        exists(&name, &format!("exists in directory {parent}")),
                    ));
                    continue;
                }
                Err(e) => {
                    refused.push((name, e));
                    continue;
                }
            };
            let (p, was_pooled) = match self.take_precreated(p.layout()) {
                Ok(Some(inode)) => (p.use_precreated(inode), true),
                Ok(None) => match self.make_objects(&p) {
                    Ok(()) => (p, false),
                    Err(e) => {
                        refused.push((name, e));
                        continue;
                    }
                },
                Err(e) => {
                    for (p, pooled) in pending.iter().zip(pooled) {
                        give_back(p.inode(), p.layout(), pooled);
                    }
                    return Err(e);
                }
            };
            pending.push(p);
            pooled.push(was_pooled);
        }
        let kept: Vec<(InodeId, Layout, bool)> = pending
            .iter()
            .zip(&pooled)
            .map(|(p, &pooled)| (p.inode(), p.layout().clone(), pooled))
            .collect();
        // Each new file's vouch, taken before its number is in the namespace (nobody
        // can hold a capability of it yet): see `learn_empty`.
        let vouches: HashMap<InodeId, u64> = match self.writers.get() {
            Some(writers) => {
                let now = unix_ms();
                pending
                    .iter()
                    .filter_map(|p| Some((p.inode(), writers.vouch(p.inode(), now)?)))
                    .collect()
            }
            None => HashMap::new(),
        };
        match self.store.create_commit_many(cred, parent, pending, refused) {
            Ok(many) => {
                self.learn_empty(&many, &vouches);
                // Numbers that did not go in (their names refused in the transaction)
                // go back.
                let made: std::collections::HashSet<InodeId> =
                    many.made.iter().map(|(_, a)| a.inode).collect();
                for (inode, layout, pooled) in kept.into_iter().filter(|(i, _, _)| !made.contains(i)) {
                    give_back(inode, &layout, pooled);
                }
                Ok(Response::MadeMany {
                    parent: many.parent,
                    made: many.made,
                    refused: many.refused,
                })
            }
            Err(error) => {
                for (inode, layout, pooled) in kept {
                    if matches!(error.code, ErrorCode::Io | ErrorCode::NoSpace) {
                        self.discard_if_uncommitted(inode, layout);
                    } else {
                        give_back(inode, &layout, pooled);
                    }
                }
                Err(error)
            }
        }
    }

    /// A file `CreateMany` made is empty (its objects are new), and stays so while the
    /// manager vouches for it at the stamp it had before the commit: its size is known
    /// without asking its io servers (`crate::sizes`), so a stat of it right after is
    /// one round trip. Only if the vouch is still that stamp after the commit (a grant
    /// in between moves it, and a write may have followed); a grant after this moves
    /// it too, so the record then answers nothing.
    fn learn_empty(&self, many: &crate::store::MadeMany, vouches: &HashMap<InodeId, u64>) {
        let Some(writers) = self.writers.get() else { return };
        let now = unix_ms();
        for (_, attr) in many.made.iter().filter(|(_, a)| !a.cache.uses_tier()) {
            let (Some(&before), Some(layout)) = (vouches.get(&attr.inode), &attr.layout) else {
                continue;
            };
            if writers.vouch(attr.inode, now) == Some(before) {
                self.sizes.learnt(
                    attr.inode,
                    crate::sizes::Measured {
                        vouch: before,
                        layout: layout.clone(),
                        size: 0,
                        blocks: 0,
                        mtime: Default::default(),
                    },
                );
            }
        }
    }

    fn create_or_open(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: &[u8],
        mode: u32,
        layout: &LayoutRequest,
        exclusive: bool,
    ) -> Result<Created, WireError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            // A replay makes the file under its first number (see `replay.rs`).
            let again = crate::store::replies::reuse_peek();
            let mut pending = match self
                .store
                .create_check(cred, parent, name, mode, layout, exclusive)?
            {
                CreateCheck::Existing(attr) => return Ok(Created::Existing(Box::new(attr))),
                CreateCheck::New(pending) => pending,
            };
            let again = again.filter(|(inode, layout)| *inode == pending.inode() && layout.is_some());
            if let Some((_, Some(layout))) = &again {
                pending = pending.use_again(layout.clone());
            }
            let taken = match again {
                Some(_) => Ok(None),
                None => self.take_precreated(pending.layout()),
            };
            let pooled = match taken {
                Ok(Some(inode)) => {
                    pending = pending.use_precreated(inode);
                    true
                }
                Ok(None) => false,
                Err(error) => {
                    return Err(WireError::new(
                        error.code,
                        format!("creating {}: {}", String::from_utf8_lossy(name), error.message),
                    ))
                }
            };
            let inode = pending.inode();
            if !pooled {
                self.make_objects(&pending)?;
            }
            let layout = pending.layout().clone();
            match self.store.create_commit_made(cred, pending) {
                Ok(made) => return Ok(Created::Made(Box::new(made))),
                Err(error) => {
                    if matches!(error.code, ErrorCode::Io | ErrorCode::NoSpace) {
                        // The commit may have reached the disk before failing: its
                        // objects go only once the store says it did not.
                        self.discard_if_uncommitted(inode, layout);
                        return Err(error);
                    }
                    if pooled {
                        // Still in the precreated table: back to the pool.
                        self.return_precreated(&layout, inode);
                    } else {
                        self.discard_objects(inode, &layout);
                    }
                    let lost_race = error.code == ErrorCode::Exists && !exclusive;
                    if !lost_race || attempt == CREATE_ATTEMPTS_MAX {
                        return Err(error);
                    }
                }
            }
        }
    }

    /// Creates `pending`'s objects on its io servers (a create without a precreated
    /// number); on failure removes what was made and says which server failed.
    fn make_objects(&self, pending: &PendingCreate) -> Result<(), WireError> {
        let inode = pending.inode();
        let name = pending.name();
        let servers = &pending.layout().all_servers();
        let created = self.on_each_server(servers, |server| self.objects.precreate_objects(server, &[inode]));
        let created = match pending.reused() {
            // A replayed create's objects are its own, maybe with data since.
            true => created
                .into_iter()
                .map(|r| {
                    r.or_else(|e| {
                        if e.code == ErrorCode::Exists {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })
                })
                .collect(),
            false => self.replace_stale_objects(inode, servers, created),
        };
        if let Some((server, error)) = first_failure(servers, created) {
            self.discard_objects(inode, pending.layout());
            // A stale object that could not be replaced is this server's fault,
            // not a name that exists: never `Exists`, which clients take for a
            // create that lost a race.
            let code = match error.code {
                ErrorCode::Exists => ErrorCode::Io,
                code => code,
            };
            return Err(WireError::new(
                code,
                format!(
                    "creating the object of {name:?} (inode {inode}) on io server {server}: {}",
                    error.message
                ),
            ));
        }
        Ok(())
    }

    /// Io servers create objects exclusively: an object already there for a freshly
    /// allocated inode number was left by a bug or planted by a peer holding the
    /// cluster key, hoping a new file would serve its bytes. Logged, removed and
    /// created again, once per server; what still fails stays in `results`.
    fn replace_stale_objects(
        &self,
        inode: InodeId,
        servers: &[ServerId],
        results: Vec<Result<(), WireError>>,
    ) -> Vec<Result<(), WireError>> {
        servers
            .iter()
            .zip(results)
            .map(|(&server, result)| match result {
                Err(error) if error.code == ErrorCode::Exists => {
                    eprintln!(
                        "weftd meta: io server {server} already held an object for new inode {inode} \
                         (a bug, or planted by a peer with the cluster key); removing it and creating it afresh"
                    );
                    self.objects
                        .remove_objects(server, &[inode])
                        .and_then(|()| self.objects.precreate_objects(server, &[inode]))
                        .map_err(|e| {
                            WireError::new(
                                e.code,
                                format!("{}; replacing it failed: {}", error.message, e.message),
                            )
                        })
                }
                other => other,
            })
            .collect()
    }

    /// After a commit of `inode` failed on a disk error: removes its objects if the
    /// store (reopened by then) does not have it, keeps them if it does, and leaves
    /// the question to the purger while the store cannot answer. No object of a
    /// failed create leaks, and no committed file loses its objects.
    fn discard_if_uncommitted(&self, inode: InodeId, layout: Layout) {
        match self.store.getattr(&Cred::root(), inode) {
            Ok(_) => eprintln!(
                "weftd meta: the failed commit of inode {inode} reached the store; keeping its objects"
            ),
            Err(e) if e.code == ErrorCode::Stale => self.discard_objects(inode, &layout),
            Err(e) => {
                eprintln!(
                    "weftd meta: cannot tell whether inode {inode} committed ({e}); the purger will ask again"
                );
                let mut uncertain = self.uncertain.lock().unwrap_or_else(|p| p.into_inner());
                if uncertain.len() < UNCERTAIN_CREATES_MAX {
                    uncertain.push((inode, layout));
                } else {
                    eprintln!(
                        "weftd meta: too many uncertain creates; the objects of inode {inode} may leak"
                    );
                }
            }
        }
    }

    /// Settles the creates `discard_if_uncommitted` could not, now that the store may
    /// answer again.
    pub(super) fn settle_uncertain_creates(&self) {
        let pending = std::mem::take(&mut *self.uncertain.lock().unwrap_or_else(|p| p.into_inner()));
        for (inode, layout) in pending {
            self.discard_if_uncommitted(inode, layout);
        }
    }

    /// Removes the objects of a create that will not commit; on failure hands
    /// them to the purger through the orphans table.
    pub(super) fn discard_objects(&self, inode: InodeId, layout: &Layout) {
        let servers = layout.all_servers();
        let removed = self.on_each_server(&servers, |server| self.objects.remove_objects(server, &[inode]));
        if let Some((server, error)) = first_failure(&servers, removed) {
            eprintln!(
                "weftd meta: removing objects of uncommitted inode {inode} from io server {server} failed ({error}); leaving them to the purger"
            );
            if let Err(error) = self.store.add_orphan(inode, layout) {
                eprintln!("weftd meta: recording uncommitted inode {inode} as an orphan failed, its objects leak: {error}");
            }
        }
    }

    /// Calls `call` for every server, in parallel when there are several: the
    /// servers are split into at most `OBJECT_CALLS_PARALLEL_MAX` chunks, the
    /// first handled on this thread, each other on a scoped thread of its own.
    /// Results are in the order of `servers`.
    pub(super) fn on_each_server(
        &self,
        servers: &[ServerId],
        call: impl Fn(ServerId) -> Result<(), WireError> + Sync,
    ) -> Vec<Result<(), WireError>> {
        if servers.len() <= 1 {
            return servers.iter().map(|&server| call(server)).collect();
        }
        let mut results = vec![Ok(()); servers.len()];
        let per_thread = servers.len().div_ceil(OBJECT_CALLS_PARALLEL_MAX);
        let run = |chunk: &[ServerId], slots: &mut [Result<(), WireError>]| {
            for (&server, slot) in chunk.iter().zip(slots) {
                *slot = call(server);
            }
        };
        std::thread::scope(|scope| {
            let mut chunks = servers.chunks(per_thread).zip(results.chunks_mut(per_thread));
            let here = chunks.next();
            for (chunk, slots) in chunks {
                let run = &run;
                scope.spawn(move || run(chunk, slots));
            }
            if let Some((chunk, slots)) = here {
                run(chunk, slots);
            }
        });
        results
    }
}

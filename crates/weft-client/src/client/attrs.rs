//! Attributes as the manager keeps them, completed with what only the io servers know:
//! sizes, blocks and data times (batched per server), the data stamps `vouched.rs` keeps.

use super::{lossy, Client};
use crate::error::{unexpected, ClientError};
use crate::vouched::DataStamp;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use weft_layout::{InodeId, ServerId};
use weft_proto::msg::{Request, Response, BATCH_INODES_MAX, LOOKUP_MANY_MAX};
use weft_proto::{Attr, DirEntry, ErrorCode, FileKind, Name, ObjStamped, PathStep, Striping};

/// What `Client::fill_sizes_partial` learnt of each file's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeOf {
    /// Every object's server answered (directories and others: nothing to ask).
    Known,
    /// Every object is gone from its server (removed meanwhile, or lost).
    Gone,
    /// A server of its objects could not be reached or failed to answer.
    Unknown,
}

/// `Client::fill_sizes_partial`'s answer: one `SizeOf` per attr, and each io server
/// that failed, once, with its error.
#[derive(Debug)]
pub struct PartialSizes {
    pub sizes: Vec<SizeOf>,
    pub failed: Vec<(ServerId, ClientError)>,
}

/// The answer to one batch's `ObjStamp` (`call`), asking with `ObjStat` instead a
/// server from before `ObjStamp` (or one whose roles do not route it): sizes without
/// stamps.
fn obj_stamps(
    batch: &[(usize, Striping)],
    attrs: &[Attr],
    connection: &weft_rpc::Connection,
    call: weft_rpc::PendingCall<'_>,
) -> Result<Vec<ObjStamped>, ClientError> {
    match call.wait() {
        Ok((Response::ObjStamps(stamped), _)) => Ok(stamped),
        Ok((Response::ObjStats(stats), _)) => Ok(unstamped(stats)),
        Err(weft_rpc::RpcError::Remote { error, .. })
            if matches!(error.code, ErrorCode::UnknownOpcode | ErrorCode::Unsupported) =>
        {
            let request = Request::ObjStat {
                items: batch.iter().map(|(k, s)| (attrs[*k].inode, *s)).collect(),
            };
            match connection.call(&request, &[])?.0 {
                Response::ObjStats(stats) => Ok(unstamped(stats)),
                _ => Err(not_a_stat()),
            }
        }
        Err(e) => Err(e.into()),
        Ok(_) => Err(not_a_stat()),
    }
}

/// One size query of `sizes_tolerant`: a file (by index), the striping of one of its
/// slots, and which of the slot's fresh copies it goes to.
type Query = (usize, Striping, usize);

/// `known` with no times of its own, for asking the io servers about its objects while
/// the manager answers: what the size query then adds is the objects' latest time only.
fn objects_only(known: &Attr) -> Attr {
    Attr {
        mtime: weft_proto::Timespec::default(),
        ctime: weft_proto::Timespec::default(),
        ..known.clone()
    }
}

/// The manager's answer `attr` completed with what the io servers said of the same
/// file's objects (`objects_only`): size, blocks, and the later of their times.
fn take_sized(attr: &mut Attr, sized: &Attr) {
    attr.size = sized.size;
    attr.blocks = sized.blocks;
    attr.mtime = attr.mtime.max(sized.mtime);
    attr.ctime = attr.ctime.max(sized.mtime);
}

fn unstamped(stats: Vec<(u64, u64)>) -> Vec<ObjStamped> {
    stats
        .into_iter()
        .map(|(end, allocated)| ObjStamped {
            end,
            allocated,
            stamp: ObjStamped::UNSETTLED,
            mtime: Default::default(),
        })
        .collect()
}

fn not_a_stat() -> ClientError {
    ClientError::refused(
        ErrorCode::Io,
        "io server answered an object stat with something else",
    )
}

/// A file none of whose io servers holds an object.
fn no_objects(inode: InodeId) -> ClientError {
    ClientError::refused(
        ErrorCode::Stale,
        format!("inode {inode} has no data objects on its io servers (removed?)"),
    )
}

impl Client {
    /// Attributes of a path; a file's size is derived from its io servers.
    pub fn stat(&self, path: &str) -> Result<Attr, ClientError> {
        // Sent as a `Vouched`: a quiet file's size may come with the manager's answer,
        // and then the io servers are not asked.
        let request = self.resolve_request(path)?;
        let attr = match self.attr_sized(request, path, None) {
            // The connection broke (a manager restarting): the plain path, whose
            // request is sent again once the manager answers.
            Err(ClientError::Transport(_)) => {
                let mut attr = self.resolve(path)?;
                self.fill_sizes(std::slice::from_mut(&mut attr))
                    .map_err(|e| e.context(path))?;
                return Ok(attr);
            }
            other => other?,
        };
        super::slash_names_a_directory(path, &attr)?;
        Ok(attr)
    }

    /// Attributes of an inode, with the derived size.
    pub fn getattr(&self, inode: InodeId) -> Result<Attr, ClientError> {
        let mut attr = self.attr_of(
            Request::GetAttr {
                cred: self.cred_clone(),
                inode,
            },
            &format!("inode {inode}"),
        )?;
        self.fill_sizes(std::slice::from_mut(&mut attr))?;
        Ok(attr)
    }

    /// Attributes of an inode with the derived size, in one round trip's wait when the
    /// caller knows the inode's layout from before (`known`: layouts never change): the
    /// io servers are asked for the size while the manager answers.
    pub fn getattr_sized(&self, inode: InodeId, known: Option<&Attr>) -> Result<Attr, ClientError> {
        let request = Request::GetAttr {
            cred: self.cred_clone(),
            inode,
        };
        self.attr_sized(request, &format!("inode {inode}"), known)
    }

    /// `lookup` with the derived size; `guess`, the attributes of the inode the name led
    /// to before, lets the size be asked while the manager looks the name up (used only
    /// if the name still leads to that inode).
    pub fn lookup_sized(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        guess: Option<&Attr>,
    ) -> Result<Attr, ClientError> {
        let name = name.as_ref();
        let request = Request::Lookup {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
        };
        self.attr_sized(request, &lossy(name), guess)
    }

    /// Sends `request` (answered with attributes) and, while it travels, fills in the size
    /// of `known`; that size is used if the answer is the same file (inode and layout),
    /// else the size is asked afresh.
    pub(super) fn attr_sized(
        &self,
        request: Request,
        what: &str,
        known: Option<&Attr>,
    ) -> Result<Attr, ClientError> {
        self.answer_sized(request, what, known, false)
            .map(|(attr, _)| attr)
    }

    /// Sends `request` (answered with one inode's attributes) and fills in a file's
    /// size, times and `DataStamp`. Sent as a `Vouched`: when the manager vouches for the
    /// file, the vouch is the file's stamp, and its size is the manager's own measure
    /// (`AttrSized`) or what this client read from the io servers under the same vouch
    /// (see `vouched`); the io servers are then not asked. Otherwise they are asked once
    /// the manager answered; against a manager that predates vouches, while its answer
    /// travels, about `known` (the file the caller expects), used if the answer is that
    /// file (inode and layout). `readable`: a regular file's read capability comes with
    /// the answer where the manager grants it (`VouchedReadable`), so that a read right
    /// after asks the manager for nothing.
    pub(super) fn answer_sized(
        &self,
        request: Request,
        what: &str,
        known: Option<&Attr>,
        readable: bool,
    ) -> Result<(Attr, Option<DataStamp>), ClientError> {
        let vouching = !self.inner.no_vouch.load(Ordering::Relaxed);
        let readable = vouching
            && readable
            && !self.inner.no_readable_vouch.load(Ordering::Relaxed)
            && self.inner.pool.capability_source().is_some();
        let sent = match (vouching, readable) {
            (true, true) => Request::VouchedReadable {
                request: Box::new(request),
            },
            (true, false) => Request::Vouched {
                request: Box::new(request),
            },
            (false, _) => request,
        };
        let meta = self.inner.meta_connection()?;
        let pending = meta.send(&sent, &[])?;
        // The io servers are asked about the guess before the manager answers only
        // when the manager cannot vouch (it predates vouches): a quiet file's size comes
        // with the vouch (the manager measured it when its last writer closed) or from
        // facts held under it, and asking anyway would cost every io server of the file
        // a request per open.
        let early = known
            .filter(|a| !vouching && a.kind == FileKind::File)
            .map(|a| self.attr_stamped(objects_only(a)));
        let answer = match pending.wait() {
            Ok((
                Response::ReadableVouched {
                    attr,
                    vouch,
                    sized,
                    capability,
                },
                data,
            )) => {
                if let (Some(cap), Some(source)) = (&capability, self.inner.pool.capability_source()) {
                    source.adopt(cap);
                }
                let response = match (sized, vouch) {
                    (true, Some(vouch)) => Response::AttrSized { attr, vouch },
                    (_, vouch) => Response::AttrVouched { attr, vouch },
                };
                Ok((response, data))
            }
            other => other,
        };
        let (mut attr, vouch) = match answer {
            // The manager knows the file's size under its vouch (it asked the io
            // servers once the last writer gave its capabilities back): what this
            // client would have read of them.
            Ok((Response::AttrSized { attr, vouch }, _)) => {
                self.inner
                    .vouched
                    .record(attr.inode, vouch, Some(crate::vouched::Facts::of(&attr)));
                self.inner.vouched.count_skip();
                let stamp = DataStamp::vouched(attr.inode, vouch);
                return Ok((attr, Some(stamp)));
            }
            Ok((Response::AttrVouched { attr, vouch }, _)) => (attr, vouch),
            Ok((Response::Attr(attr), _)) => (attr, None),
            Ok((other, _)) => return Err(unexpected(&other)),
            Err(e) => {
                let e = ClientError::from(e);
                if vouching && e.code() == ErrorCode::UnknownOpcode {
                    // A manager without `VouchedReadable` (then the checks go `Vouched`),
                    // or without vouches at all.
                    let flag = match readable {
                        true => &self.inner.no_readable_vouch,
                        false => &self.inner.no_vouch,
                    };
                    flag.store(true, Ordering::Relaxed);
                    let (Request::Vouched { request } | Request::VouchedReadable { request }) = sent else {
                        unreachable!("sent as a Vouched")
                    };
                    return self.answer_sized(*request, what, known, false);
                }
                return Err(e.context(what));
            }
        };
        if attr.kind != FileKind::File {
            return Ok((attr, None));
        }
        let tier = attr.cache.uses_tier();
        let trusted = |stamp: Option<DataStamp>| stamp.filter(|_| !tier);
        let Some(vouch) = vouch else {
            self.inner.vouched.forget(attr.inode);
            return match early {
                Some(Ok((sized, stamp))) if sized.inode == attr.inode && sized.layout == attr.layout => {
                    take_sized(&mut attr, &sized);
                    let stamp = trusted(stamp);
                    Ok((attr, stamp))
                }
                _ => self.attr_stamped(attr),
            };
        };
        // Vouched for: no writer between this answer and any later one giving the same
        // vouch, whatever the io servers' own stamps say.
        let stamp = Some(DataStamp::vouched(attr.inode, vouch));
        if let Some(facts) = self.inner.vouched.facts(attr.inode, vouch, &attr.layout) {
            facts.fill(&mut attr);
            return Ok((attr, stamp));
        }
        // Asked after the vouch was told: what the io servers say holds under it.
        let (attr, _) = self.attr_stamped(attr)?;
        self.inner
            .vouched
            .record(attr.inode, vouch, Some(crate::vouched::Facts::of(&attr)));
        Ok((attr, stamp))
    }

    /// Opens and stats this client (and every client made from it) answered without
    /// asking the io servers, on the manager's vouch that nobody wrote the file since it
    /// last asked them.
    pub fn vouched_skips(&self) -> u64 {
        self.inner.vouched.skipped()
    }

    /// Attributes of each of `names` in directory `parent`, files' sizes included, in
    /// the order given (`None`: no such name, or a file removed meanwhile): one request to
    /// the manager per `LOOKUP_MANY_MAX` names (`LookupMany`), then one to each io server
    /// involved, where a stat of each costs a lookup and a size query per name. Against a
    /// manager without `LookupMany`, the lookups one by one (pipelined).
    pub fn stat_many<N: AsRef<[u8]>>(
        &self,
        parent: InodeId,
        names: &[N],
    ) -> Result<Vec<Option<Attr>>, ClientError> {
        let mut found: Vec<Option<Attr>> = Vec::with_capacity(names.len());
        for chunk in names.chunks(LOOKUP_MANY_MAX) {
            found.extend(self.lookup_many(parent, chunk)?);
        }
        let at: Vec<usize> = (0..found.len()).filter(|k| found[*k].is_some()).collect();
        let mut attrs: Vec<Attr> = at.iter().filter_map(|k| found[*k].take()).collect();
        let gone = self.sizes(&mut attrs)?;
        for ((k, attr), gone) in at.into_iter().zip(attrs).zip(gone) {
            if !gone {
                found[k] = Some(attr);
            }
        }
        Ok(found)
    }

    /// Up to `LOOKUP_MANY_MAX` `names` in `parent`, without the sizes.
    pub(super) fn lookup_many<N: AsRef<[u8]>>(
        &self,
        parent: InodeId,
        names: &[N],
    ) -> Result<Vec<Option<Attr>>, ClientError> {
        let request = Request::LookupMany {
            cred: self.cred_clone(),
            parent,
            names: names.iter().map(|n| Name::from(n.as_ref())).collect(),
        };
        match self.inner.meta(&request) {
            Ok(Response::EntriesPlus { entries, .. }) => {
                // In the order asked, the names not found left out.
                let mut entries = entries.into_iter().peekable();
                Ok(names
                    .iter()
                    .map(|n| match entries.peek() {
                        Some((name, _)) if name.as_bytes() == n.as_ref() => entries.next().map(|(_, a)| a),
                        _ => None,
                    })
                    .collect())
            }
            Ok(other) => Err(unexpected(&other)),
            Err(e) if e.code() == ErrorCode::UnknownOpcode => {
                let meta = self.inner.meta_connection()?;
                let pending: Vec<_> = names
                    .iter()
                    .map(|n| {
                        meta.send(
                            &Request::Lookup {
                                cred: self.cred_clone(),
                                parent,
                                name: Name::from(n.as_ref()),
                            },
                            &[],
                        )
                    })
                    .collect::<Result<_, _>>()?;
                let mut out = Vec::with_capacity(names.len());
                for call in pending {
                    match call.wait().map_err(ClientError::from) {
                        Ok((Response::Attr(a), _)) => out.push(Some(a)),
                        Ok((other, _)) => return Err(unexpected(&other)),
                        Err(e) if e.code() == ErrorCode::NotFound => out.push(None),
                        Err(e) => return Err(e),
                    }
                }
                Ok(out)
            }
            Err(e) => Err(e),
        }
    }

    /// Looks a name up in a directory (without the derived size). Names are bytes, as
    /// in POSIX: `&str` and `&[u8]` both do.
    pub fn lookup(&self, parent: InodeId, name: impl AsRef<[u8]>) -> Result<Attr, ClientError> {
        let name = name.as_ref();
        self.attr_of(
            Request::Lookup {
                cred: self.cred_clone(),
                parent,
                name: Name::from(name),
            },
            &lossy(name),
        )
    }

    /// Checks that a path resolved earlier still holds step by step (each directory's
    /// entry still names the same inode) and returns the last inode's attributes with
    /// the derived size. `Stale` when another client removed, renamed or replaced a name
    /// on the way: look the path up again. `known`, the inode's attributes from before
    /// (layouts never change), lets the size be asked of the io servers while the
    /// manager checks the path: one round trip's wait rather than two.
    pub fn revalidate(&self, steps: Vec<PathStep>, known: Option<&Attr>) -> Result<Attr, ClientError> {
        self.revalidate_stamped(steps, known).map(|(attr, _)| attr)
    }

    /// `revalidate` that also tells what the file's data was (see `DataStamp`), from the
    /// same requests to the io servers. Same round trips as `revalidate`. A regular
    /// file's read capability comes with the answer where the manager grants it, so
    /// that the read an open's check is followed by asks the manager for nothing.
    pub fn revalidate_stamped(
        &self,
        steps: Vec<PathStep>,
        known: Option<&Attr>,
    ) -> Result<(Attr, Option<DataStamp>), ClientError> {
        let what = steps.last().map(|s| s.name.to_string()).unwrap_or_default();
        let last = steps.last().map(|s| s.child);
        let request = Request::Revalidate {
            cred: self.cred_clone(),
            steps,
        };
        // The path holds if answered, so a failed size is a real failure (asked once
        // more after the answer).
        self.answer_sized(request, &what, known.filter(|a| Some(a.inode) == last), true)
    }

    /// An inode's attributes with its size and `DataStamp` filled in (the rest as given).
    pub fn attr_stamped(&self, mut attr: Attr) -> Result<(Attr, Option<DataStamp>), ClientError> {
        if attr.kind != FileKind::File {
            return Ok((attr, None));
        }
        let mut stamp = [None];
        let missing = self.sizes_stamped(std::slice::from_mut(&mut attr), Some(&mut stamp))?;
        if missing[0] {
            return Err(no_objects(attr.inode));
        }
        let [stamp] = stamp;
        Ok((attr, stamp))
    }

    /// Fills in the size and allocated blocks of every regular file in `attrs`, asking    /// Fills in the size and allocated blocks of every regular file in `attrs`, asking
    /// each io server once per batch of files rather than once per file, all servers
    /// at once.
    pub fn fill_sizes(&self, attrs: &mut [Attr]) -> Result<(), ClientError> {
        let missing = self.sizes(attrs)?;
        match attrs.iter().zip(missing).find(|(_, missing)| *missing) {
            Some((attr, _)) => Err(no_objects(attr.inode)),
            None => Ok(()),
        }
    }

    /// `fill_sizes`, answering for each file whether its objects are gone from every
    /// one of its servers (removed since its attributes were read, or lost) rather
    /// than failing.
    pub fn fill_sizes_or_gone(&self, attrs: &mut [Attr]) -> Result<Vec<bool>, ClientError> {
        self.sizes(attrs)
    }

    /// `fill_sizes_or_gone` that goes on when io servers or cache managers cannot be
    /// reached: each file's size is then known, gone, or unknown (a server of its
    /// objects failed to answer, or for a file in the cache tier, a cache manager did),
    /// and each server that failed is named with its error, once. For
    /// listings, which show what they can rather than nothing (`weft ls -l`).
    pub fn fill_sizes_partial(&self, attrs: &mut [Attr]) -> Result<PartialSizes, ClientError> {
        let mut failed = Vec::new();
        let gone = self.sizes_tolerant(attrs, None, Some(&mut failed))?;
        // A cache manager that did not answer may hold any cached file's last bytes.
        let cluster = self.inner.cluster();
        let tier_down = failed
            .iter()
            .any(|(server, _)| cluster.cache.managers.iter().any(|m| m.id == *server));
        let sizes = attrs
            .iter()
            .zip(gone)
            .map(|(attr, gone)| {
                let unknown = attr.kind == FileKind::File
                    && (attr
                        .layout
                        .as_ref()
                        .is_some_and(|l| failed.iter().any(|(server, _)| l.servers.contains(server)))
                        || (tier_down && attr.cache.uses_tier()));
                match (unknown, gone) {
                    (true, _) => SizeOf::Unknown,
                    (false, true) => SizeOf::Gone,
                    (false, false) => SizeOf::Known,
                }
            })
            .collect();
        Ok(PartialSizes { sizes, failed })
    }

    pub(super) fn sizes(&self, attrs: &mut [Attr]) -> Result<Vec<bool>, ClientError> {
        self.sizes_stamped(attrs, None)
    }

    /// `sizes`; with `stamps` (one per attr), also each file's `DataStamp` (`None` for
    /// files whose stamp cannot be had).
    pub(super) fn sizes_stamped(
        &self,
        attrs: &mut [Attr],
        stamps: Option<&mut [Option<DataStamp>]>,
    ) -> Result<Vec<bool>, ClientError> {
        self.sizes_tolerant(attrs, stamps, None)
    }

    /// `sizes_stamped`; with `failed`, an io server that cannot be reached or fails to
    /// answer is put there (with its error) instead of failing the call, and its files
    /// get no stamp.
    ///
    /// A replicated file's slot is asked of its first copy not marked stale (a stale
    /// one missed writes: its object may be short of them), and when that server cannot
    /// be reached or fails, of its next fresh copy: a server down is what replication
    /// exists to hide. Only when no fresh copy of a slot answers is that a failure.
    pub(super) fn sizes_tolerant(
        &self,
        attrs: &mut [Attr],
        stamps: Option<&mut [Option<DataStamp>]>,
        mut failed: Option<&mut Vec<(ServerId, ClientError)>>,
    ) -> Result<Vec<bool>, ClientError> {
        // Per file and slot, the servers that may be asked, in order; each query names
        // (file, slot striping, which of them).
        let mut candidates: HashMap<(usize, u32), Vec<ServerId>> = HashMap::new();
        let mut queries: Vec<Query> = Vec::new();
        for (k, attr) in attrs.iter_mut().enumerate() {
            if attr.kind != FileKind::File {
                continue;
            }
            attr.size = 0;
            attr.blocks = 0;
            let Some(layout) = &attr.layout else { continue };
            for slot in 0..layout.servers.len() {
                let striping = Striping {
                    stripe_size_bytes: layout.stripe_size_bytes,
                    stripe_count: layout.servers.len() as u32,
                    server_index: slot as u32,
                };
                candidates.insert((k, slot as u32), layout.fresh_slot_servers(slot));
                queries.push((k, striping, 0));
            }
        }
        // Cache managers first, io servers after: a cache manager marks a block clean
        // only once its write-back is on the io servers, so a block is counted either
        // way. Asked the other way round, a write-back landing between the two
        // answers was in neither (a size of 0 right after `cp` of a cached file).
        self.add_cached_ends(attrs, failed.as_deref_mut())?;
        // Per file, (server index, stamp) of each object; a file with any object
        // unstamped, or answered by a copy other than its slot's primary, gets none.
        let mut objects: Vec<Option<Vec<(u32, u64)>>> = vec![Some(Vec::new()); attrs.len()];
        let mut missing = vec![0usize; attrs.len()];
        let mut asked = vec![0usize; attrs.len()];
        // Servers that failed in this call: not asked again for other slots.
        let mut down: HashMap<ServerId, ClientError> = HashMap::new();
        // Rounds: every server is asked before any answer is awaited (one round trip's
        // wait); the queries whose server failed go to their slot's next fresh copy in
        // the next round. A slot with no copy left fails: named once with `failed` (its
        // file gets no stamp: a stamp must cover every object), else the call's error.
        while !queries.is_empty() {
            let mut per_server: HashMap<ServerId, Vec<(usize, Striping, usize)>> = HashMap::new();
            let mut retry = Vec::new();
            // A query whose server failed: to the slot's next fresh copy not down, else
            // a failure.
            let mut give_up = |query: Query,
                               error: ClientError,
                               server: ServerId,
                               down: &HashMap<ServerId, ClientError>,
                               retry: &mut Vec<Query>,
                               objects: &mut [Option<Vec<(u32, u64)>>]|
             -> Result<(), ClientError> {
                let (k, striping, tried) = query;
                let copies = &candidates[&(k, striping.server_index)];
                if let Some(next) = (tried + 1..copies.len()).find(|&i| !down.contains_key(&copies[i])) {
                    retry.push((k, striping, next));
                    return Ok(());
                }
                let Some(failed) = failed.as_mut() else {
                    return Err(error);
                };
                if !failed.iter().any(|(s, _)| *s == server) {
                    failed.push((server, error));
                }
                objects[k] = None;
                Ok(())
            };
            for (k, striping, tried) in queries.drain(..) {
                let server = candidates[&(k, striping.server_index)][tried];
                match down.get(&server) {
                    Some(error) => give_up(
                        (k, striping, tried),
                        error.clone(),
                        server,
                        &down,
                        &mut retry,
                        &mut objects,
                    )?,
                    None => per_server.entry(server).or_default().push((k, striping, tried)),
                }
            }
            let mut connections = Vec::new();
            for (server, items) in per_server {
                match self
                    .inner
                    .io_addr(server)
                    .and_then(|addr| Ok(self.inner.pool.get(&addr)?))
                {
                    Ok(connection) => connections.push((server, connection, items)),
                    Err(e) => {
                        down.insert(server, e.clone());
                        for query in items {
                            give_up(query, e.clone(), server, &down, &mut retry, &mut objects)?;
                        }
                    }
                }
            }
            let mut pending = Vec::new();
            for (server, connection, items) in &connections {
                for batch in items.chunks(BATCH_INODES_MAX) {
                    let items: Vec<_> = batch.iter().map(|(k, s, _)| (attrs[*k].inode, *s)).collect();
                    // Always the stamped stat: it also carries each object's mtime.
                    let request = Request::ObjStamp { items };
                    match connection.send(&request, &[]) {
                        Ok(call) => pending.push((*server, batch, connection, call)),
                        Err(e) => {
                            let e = ClientError::from(e);
                            down.insert(*server, e.clone());
                            for query in batch {
                                give_up(*query, e.clone(), *server, &down, &mut retry, &mut objects)?;
                            }
                        }
                    }
                }
            }
            for (server, batch, connection, call) in pending {
                let plain: Vec<(usize, Striping)> = batch.iter().map(|(k, s, _)| (*k, *s)).collect();
                let answers = match obj_stamps(&plain, attrs, connection, call) {
                    Ok(answers) => answers,
                    Err(e) => {
                        down.insert(server, e.clone());
                        for query in batch {
                            give_up(*query, e.clone(), server, &down, &mut retry, &mut objects)?;
                        }
                        continue;
                    }
                };
                for ((k, striping, tried), stamped) in batch.iter().zip(answers) {
                    asked[*k] += 1;
                    let attr = &mut attrs[*k];
                    // Writes change only the objects: their latest time is the file's
                    // modification (and change) time when later than the manager's.
                    if stamped.add_to(&mut attr.size, &mut attr.blocks, &mut attr.mtime) {
                        attr.ctime = attr.ctime.max(stamped.mtime);
                    } else {
                        missing[*k] += 1;
                    }
                    let primary = attr
                        .layout
                        .as_ref()
                        .map(|l| l.servers[striping.server_index as usize]);
                    let file = &mut objects[*k];
                    match (file.as_mut(), stamped.stamp) {
                        (Some(_), ObjStamped::UNSETTLED) | (None, _) => *file = None,
                        (Some(_), _) if *tried > 0 || primary != Some(server) => *file = None,
                        (Some(list), stamp) => list.push((striping.server_index, stamp)),
                    }
                }
            }
            queries = retry;
        }
        if let Some(stamps) = stamps {
            for (k, object_stamps) in objects.into_iter().enumerate() {
                let attr = &attrs[k];
                // Data held by a cache manager changes without its objects changing.
                let trusted = attr.kind == FileKind::File && attr.layout.is_some() && !attr.cache.uses_tier();
                stamps[k] = object_stamps.filter(|_| trusted).map(|mut list| {
                    list.sort_unstable();
                    DataStamp {
                        inode: attr.inode,
                        by: crate::vouched::StampBy::Objects(
                            list.into_iter().map(|(_, stamp)| stamp).collect(),
                        ),
                    }
                });
            }
        }
        Ok((0..attrs.len())
            .map(|k| asked[k] > 0 && missing[k] == asked[k])
            .collect())
    }

    /// Cached files' sizes also count what their cache managers hold unwritten: asks
    /// every manager of the tier about all cached files of `attrs` at once.
    /// With `failed`, a cache manager that cannot be reached or fails to answer is put
    /// there (with its error) instead of failing the call (its cached files' sizes are
    /// then unknown: see `fill_sizes_partial`).
    pub(super) fn add_cached_ends(
        &self,
        attrs: &mut [Attr],
        mut failed: Option<&mut Vec<(ServerId, ClientError)>>,
    ) -> Result<(), ClientError> {
        let cached: Vec<usize> = (0..attrs.len())
            .filter(|&k| attrs[k].layout.is_some() && attrs[k].cache.uses_tier())
            .collect();
        if cached.is_empty() {
            return Ok(());
        }
        for manager in &self.inner.cluster().cache.managers {
            let asked = (|| -> Result<(), ClientError> {
                let connection = self.inner.pool.get(self.inner.cache_addr(manager.id)?)?;
                for batch in cached.chunks(BATCH_INODES_MAX) {
                    let request = Request::CacheExtents {
                        inodes: batch.iter().map(|&k| attrs[k].inode).collect(),
                    };
                    match connection.call(&request, &[])?.0 {
                        Response::Extents(ends) if ends.len() == batch.len() => {
                            for (&k, end) in batch.iter().zip(ends) {
                                attrs[k].size = attrs[k].size.max(end);
                            }
                        }
                        other => return Err(unexpected(&other)),
                    }
                }
                Ok(())
            })();
            match (asked, failed.as_deref_mut()) {
                (Ok(()), _) => {}
                (Err(e), None) => return Err(e),
                (Err(e), Some(failed)) => {
                    if !failed.iter().any(|(s, _)| *s == manager.id) {
                        failed.push((manager.id, e));
                    }
                }
            }
        }
        Ok(())
    }

    /// Attributes (with sizes) of many entries of one directory, pipelined.
    pub fn getattr_many(&self, entries: &[DirEntry]) -> Result<Vec<Attr>, ClientError> {
        let meta = self.inner.meta_connection()?;
        let mut attrs = Vec::with_capacity(entries.len());
        for chunk in entries.chunks(256) {
            let pending: Vec<_> = chunk
                .iter()
                .map(|e| {
                    meta.send(
                        &Request::GetAttr {
                            cred: self.cred_clone(),
                            inode: e.inode,
                        },
                        &[],
                    )
                })
                .collect::<Result<_, _>>()?;
            for (entry, call) in chunk.iter().zip(pending) {
                match call
                    .wait()
                    .map_err(ClientError::from)
                    .map_err(|e| e.context(&entry.name.to_string()))?
                    .0
                {
                    Response::Attr(a) => attrs.push(a),
                    other => return Err(unexpected(&other)),
                }
            }
        }
        self.fill_sizes(&mut attrs)?;
        Ok(attrs)
    }
}

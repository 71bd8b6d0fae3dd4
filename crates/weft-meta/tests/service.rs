//! `MetaService` with a fake `ObjectServers`: request mapping, create with object
//! creation and undo, races, the orphan purger, and the pool of precreated objects.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use common::*;
use weft_layout::{InodeId, LayoutRequest, ServerId};
use weft_meta::{CreateCheck, MetaService, ObjectServers};
use weft_proto::{
    Attr, ClusterInfo, Cred, ErrorCode, FileKind, IoServer, MetaStatfs, Request, Response, SetAttr, TimeSet,
    Timespec, WireError,
};

type Hook = Box<dyn FnOnce(&MetaService) + Send>;

/// In-memory io servers: which objects exist where, with injectable failures and
/// a hook that runs once inside `create_objects` (to race against the service).
#[derive(Default)]
struct FakeServers {
    objects: Mutex<BTreeMap<ServerId, BTreeSet<InodeId>>>,
    create_fails: Mutex<BTreeSet<ServerId>>,
    remove_fails: Mutex<BTreeSet<ServerId>>,
    create_calls: AtomicUsize,
    during_create: Mutex<Option<Hook>>,
    service: Mutex<Weak<MetaService>>,
    /// Every `set_mtime` call: (server, inode, time).
    times_set: Mutex<Vec<(ServerId, InodeId, Timespec)>>,
    /// Every `set_mtime_each`: whether the manager had the time already when the
    /// requests went out (the change committed before), and after `meanwhile`.
    time_sends: Mutex<Vec<(bool, bool)>>,
}

impl FakeServers {
    fn objects_on(&self, server: ServerId) -> BTreeSet<InodeId> {
        self.objects
            .lock()
            .unwrap()
            .get(&server)
            .cloned()
            .unwrap_or_default()
    }
    /// Every (server, inode) object that exists.
    fn all_objects(&self) -> BTreeSet<(ServerId, InodeId)> {
        let objects = self.objects.lock().unwrap();
        objects
            .iter()
            .flat_map(|(s, set)| set.iter().map(move |i| (*s, *i)))
            .collect()
    }
}

impl ObjectServers for FakeServers {
    fn create_objects(&self, server: ServerId, inodes: &[InodeId]) -> Result<(), WireError> {
        self.create_calls.fetch_add(1, Ordering::SeqCst);
        let hook = self.during_create.lock().unwrap().take();
        if let Some(hook) = hook {
            let service = self.service.lock().unwrap().upgrade().expect("service alive");
            hook(&service);
        }
        if self.create_fails.lock().unwrap().contains(&server) {
            return Err(WireError::new(
                ErrorCode::Unavailable,
                format!("server {server} is down"),
            ));
        }
        let mut objects = self.objects.lock().unwrap();
        let set = objects.entry(server).or_default();
        // Exclusive, as on a real io server.
        if let Some(inode) = inodes.iter().find(|i| set.contains(i)) {
            return Err(WireError::new(
                ErrorCode::Exists,
                format!("object exists: inode {inode} on server {server}"),
            ));
        }
        set.extend(inodes);
        Ok(())
    }

    fn remove_objects(&self, server: ServerId, inodes: &[InodeId]) -> Result<(), WireError> {
        if self.remove_fails.lock().unwrap().contains(&server) {
            return Err(WireError::new(
                ErrorCode::Unavailable,
                format!("server {server} is down"),
            ));
        }
        if let Some(set) = self.objects.lock().unwrap().get_mut(&server) {
            for inode in inodes {
                set.remove(inode);
            }
        }
        Ok(())
    }

    fn set_mtime(&self, server: ServerId, inodes: &[InodeId], mtime: Timespec) -> Result<(), WireError> {
        let mut times = self.times_set.lock().unwrap();
        times.extend(inodes.iter().map(|inode| (server, *inode, mtime)));
        Ok(())
    }
    /// As the network one: every request out, then `meanwhile`, then the answers.
    fn set_mtime_each(
        &self,
        servers: &[ServerId],
        inodes: &[InodeId],
        mtime: Timespec,
        meanwhile: &mut dyn FnMut(),
    ) -> Vec<Result<(), WireError>> {
        let service = self.service.lock().unwrap().upgrade().expect("service alive");
        let managed = || {
            inodes
                .iter()
                .all(|i| service.store().getattr(&root(), *i).unwrap().mtime == mtime)
        };
        let before = managed();
        let results = servers
            .iter()
            .map(|&server| self.set_mtime(server, inodes, mtime))
            .collect();
        meanwhile();
        self.time_sends.lock().unwrap().push((before, managed()));
        results
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    service: Arc<MetaService>,
    servers: Arc<FakeServers>,
}

fn fixture() -> Fixture {
    fixture_with(&IO_SERVERS)
}

fn cluster_info(io_servers: &[ServerId]) -> ClusterInfo {
    ClusterInfo {
        cache: Default::default(),
        name: "test".into(),
        io_servers: io_servers
            .iter()
            .map(|id| IoServer {
                id: *id,
                addr: format!("127.0.0.1:{}", 7000 + id.0),
                socket: None,
            })
            .collect(),
        default_layout: cluster_default(),
        // Whatever the description says, the service answers with the store's root.
        root: InodeId(0),
    }
}

fn fixture_with(io_servers: &[ServerId]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let servers = Arc::new(FakeServers::default());
    let service = Arc::new(MetaService::new(store, cluster_info(io_servers), servers.clone()).unwrap());
    // These tests follow each create's own objects; the pool has tests of its own.
    service.set_precreate_batch(0);
    *servers.service.lock().unwrap() = Arc::downgrade(&service);
    Fixture {
        _dir: dir,
        service,
        servers,
    }
}

fn create_request(
    cred: Cred,
    parent: InodeId,
    name: &str,
    layout: LayoutRequest,
    exclusive: bool,
) -> Request {
    Request::Create {
        cred,
        parent,
        name: name.into(),
        mode: 0o644,
        layout,
        exclusive,
    }
}

fn attr(response: Result<Response, WireError>) -> Attr {
    match response {
        Ok(Response::Attr(attr)) => attr,
        other => panic!("expected attributes, got {other:?}"),
    }
}

fn counts(f: &Fixture) -> MetaStatfs {
    f.service.store().statfs(&root()).unwrap()
}

#[test]
fn create_makes_one_object_on_each_server_of_the_layout() {
    let f = fixture();
    let layout = LayoutRequest {
        stripe_count: Some(3),
        first_server: Some(1),
        ..Default::default()
    };
    // Alice may not write the root: refused before any object is made.
    let refused = f
        .service
        .handle(create_request(alice(), InodeId::ROOT, "f", layout, true));
    assert_eq!(code(refused), ErrorCode::PermissionDenied);
    assert_eq!(f.servers.create_calls.load(Ordering::SeqCst), 0);
    let file = attr(
        f.service
            .handle(create_request(root(), InodeId::ROOT, "f", layout, true)),
    );
    let expected: BTreeSet<(ServerId, InodeId)> = [ServerId(11), ServerId(12), ServerId(13)]
        .into_iter()
        .map(|s| (s, file.inode))
        .collect();
    assert_eq!(f.servers.all_objects(), expected);
    assert_eq!(file.kind, FileKind::File);
    assert_eq!(
        f.service
            .store()
            .lookup(&root(), InodeId::ROOT, "f")
            .unwrap()
            .inode,
        file.inode
    );
}

#[test]
fn a_failed_object_create_is_undone_everywhere() {
    let f = fixture();
    f.servers.create_fails.lock().unwrap().insert(ServerId(12));
    let all = LayoutRequest {
        stripe_count: Some(4),
        ..Default::default()
    };
    let error = f
        .service
        .handle(create_request(root(), InodeId::ROOT, "f", all, true))
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::Unavailable);
    assert!(error.message.contains("12"), "{}", error.message);
    assert!(f.servers.all_objects().is_empty());
    assert_eq!(
        code(f.service.store().lookup(&root(), InodeId::ROOT, "f")),
        ErrorCode::NotFound
    );
    assert_eq!(
        counts(&f),
        MetaStatfs {
            files: 0,
            directories: 1,
            orphans: 0
        }
    );
}

/// Objects planted under the next inode numbers (by a bug or a peer with the key)
/// are replaced, not adopted: the new file's objects are fresh ones. Before io servers
/// created exclusively, the planted object became the new file's.
#[test]
fn planted_objects_of_a_new_inode_are_replaced() {
    let f = fixture();
    let wide = LayoutRequest {
        stripe_count: Some(IO_SERVERS.len() as u32),
        ..Default::default()
    };
    let first = attr(
        f.service
            .handle(create_request(root(), InodeId::ROOT, "first", wide, true)),
    );
    // The next numbers, planted on every server.
    let planted: Vec<InodeId> = (1..4).map(|k| InodeId(first.inode.0 + k)).collect();
    for server in IO_SERVERS {
        f.servers
            .objects
            .lock()
            .unwrap()
            .entry(server)
            .or_default()
            .extend(&planted);
    }
    let calls = f.servers.create_calls.load(Ordering::SeqCst);
    let second = attr(
        f.service
            .handle(create_request(root(), InodeId::ROOT, "second", wide, true)),
    );
    assert_eq!(
        second.inode, planted[0],
        "the allocator hands out the planted number next"
    );
    // Every server refused, then created afresh after removing the stale object.
    assert_eq!(
        f.servers.create_calls.load(Ordering::SeqCst),
        calls + 2 * IO_SERVERS.len()
    );
    for server in IO_SERVERS {
        assert!(f.servers.objects_on(server).contains(&second.inode));
    }
    // Where the stale object cannot be removed the create fails, clearly and not as a
    // taken name (clients would look the name up), and nothing of it stays.
    f.servers.remove_fails.lock().unwrap().insert(IO_SERVERS[0]);
    let failed = f
        .service
        .handle(create_request(root(), InodeId::ROOT, "third", wide, false))
        .unwrap_err();
    assert_eq!(failed.code, ErrorCode::Unavailable, "{}", failed.message);
    assert!(failed.message.contains("object exists"), "{}", failed.message);
    assert!(f.service.store().lookup(&root(), InodeId::ROOT, "third").is_err());
}

#[test]
fn objects_that_cannot_be_removed_are_left_to_the_purger() {
    let f = fixture();
    f.servers.create_fails.lock().unwrap().insert(ServerId(13));
    f.servers.remove_fails.lock().unwrap().insert(ServerId(10));
    let all = LayoutRequest {
        stripe_count: Some(4),
        ..Default::default()
    };
    assert!(f
        .service
        .handle(create_request(root(), InodeId::ROOT, "f", all, true))
        .is_err());
    // Server 10 still holds the object of a file that never existed: an orphan.
    let left = f.servers.objects_on(ServerId(10));
    assert_eq!(left.len(), 1);
    let inode = *left.iter().next().unwrap();
    let orphans = f.service.store().orphans(10).unwrap();
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0].0, inode);
    assert_eq!(
        counts(&f),
        MetaStatfs {
            files: 0,
            directories: 1,
            orphans: 1
        }
    );
    // While server 10 fails, purging keeps the orphan; once it is back, it goes.
    assert_eq!(f.service.purge_orphans_once(), 0);
    assert_eq!(f.service.store().orphans(10).unwrap().len(), 1);
    f.servers.remove_fails.lock().unwrap().clear();
    assert_eq!(f.service.purge_orphans_once(), 1);
    assert!(f.servers.all_objects().is_empty());
    assert_eq!(counts(&f).orphans, 0);
}

#[test]
fn existing_names_need_no_objects() {
    let f = fixture();
    let first = attr(f.service.handle(create_request(
        root(),
        InodeId::ROOT,
        "f",
        LayoutRequest::default(),
        true,
    )));
    let calls = f.servers.create_calls.load(Ordering::SeqCst);
    let again = attr(f.service.handle(create_request(
        alice(),
        InodeId::ROOT,
        "f",
        LayoutRequest::default(),
        false,
    )));
    assert_eq!(again.inode, first.inode);
    let exclusive = f.service.handle(create_request(
        root(),
        InodeId::ROOT,
        "f",
        LayoutRequest::default(),
        true,
    ));
    assert_eq!(code(exclusive), ErrorCode::Exists);
    assert_eq!(f.servers.create_calls.load(Ordering::SeqCst), calls);
    assert_eq!(f.servers.all_objects().len(), 2);
}

/// Creates `name` in the root through the store alone, as a competing create that
/// got there first would.
fn create_directly(service: &MetaService, name: &str) -> InodeId {
    let store = service.store();
    match store
        .create_check(
            &root(),
            InodeId::ROOT,
            name,
            0o644,
            &LayoutRequest::default(),
            true,
        )
        .unwrap()
    {
        CreateCheck::New(pending) => store.create_commit(&root(), pending).unwrap().inode,
        CreateCheck::Existing(attr) => panic!("{name} exists: {attr:?}"),
    }
}

#[test]
fn a_create_that_loses_the_race_for_its_name_cleans_up() {
    for exclusive in [false, true] {
        let f = fixture();
        let winner = Arc::new(Mutex::new(None));
        let slot = winner.clone();
        *f.servers.during_create.lock().unwrap() = Some(Box::new(move |service: &MetaService| {
            *slot.lock().unwrap() = Some(create_directly(service, "f"));
        }));
        let result = f.service.handle(create_request(
            root(),
            InodeId::ROOT,
            "f",
            LayoutRequest::default(),
            exclusive,
        ));
        let winner = winner.lock().unwrap().expect("the hook ran");
        if exclusive {
            assert_eq!(code(result), ErrorCode::Exists);
        } else {
            // Non-exclusive: the loser opens the winner's file.
            assert_eq!(attr(result).inode, winner);
        }
        // The winner made no objects (it bypassed the service); the loser removed its own.
        assert!(
            f.servers.all_objects().is_empty(),
            "exclusive {exclusive}: {:?}",
            f.servers.all_objects()
        );
        assert_eq!(
            counts(&f),
            MetaStatfs {
                files: 1,
                directories: 1,
                orphans: 0
            }
        );
    }
}

#[test]
fn a_commit_refused_after_the_objects_exist_removes_them() {
    let f = fixture();
    let d = f
        .service
        .store()
        .mkdir(&root(), InodeId::ROOT, "d", 0o777)
        .unwrap()
        .inode;
    *f.servers.during_create.lock().unwrap() = Some(Box::new(|service: &MetaService| {
        service.store().rmdir(&root(), InodeId::ROOT, "d").unwrap();
    }));
    let result = f
        .service
        .handle(create_request(alice(), d, "f", LayoutRequest::default(), false));
    assert_eq!(code(result), ErrorCode::Stale);
    assert!(f.servers.all_objects().is_empty());
}

#[test]
fn concurrent_creates_of_shared_names_leave_exactly_the_committed_objects() {
    let f = fixture();
    let threads = 6;
    let names_per_thread = 40;
    let results: Vec<Vec<(String, InodeId)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let service = &f.service;
                scope.spawn(move || {
                    (0..names_per_thread)
                        .map(|i| {
                            // Half the names are shared by all threads, half are private.
                            let name = if i % 2 == 0 {
                                format!("shared{i}")
                            } else {
                                format!("t{t}-{i}")
                            };
                            let layout = LayoutRequest {
                                stripe_count: Some(2),
                                first_server: Some(i % 4),
                                ..Default::default()
                            };
                            let a = attr(service.handle(create_request(
                                root(),
                                InodeId::ROOT,
                                &name,
                                layout,
                                false,
                            )));
                            (name, a.inode)
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Every thread saw the same inode for a shared name.
    let mut by_name: BTreeMap<String, BTreeSet<InodeId>> = BTreeMap::new();
    for (name, inode) in results.into_iter().flatten() {
        by_name.entry(name).or_default().insert(inode);
    }
    assert!(by_name.values().all(|inodes| inodes.len() == 1), "{by_name:?}");
    let expected_names = names_per_thread / 2 + threads * names_per_thread / 2;
    assert_eq!(by_name.len(), expected_names as usize);
    // Objects exist for exactly the committed files, on exactly their servers.
    let store = f.service.store();
    let mut expected = BTreeSet::new();
    for name in by_name.keys() {
        let a = store.lookup(&root(), InodeId::ROOT, name).unwrap();
        for server in a.layout.unwrap().servers {
            expected.insert((server, a.inode));
        }
    }
    assert_eq!(f.servers.all_objects(), expected);
    assert_eq!(counts(&f).files, expected_names as u64);
}

#[test]
fn metadata_requests_map_to_store_operations() {
    let f = fixture();
    let s = &f.service;
    let r = root;
    match s.handle(Request::GetCluster).unwrap() {
        Response::Cluster(c) => {
            assert_eq!(c.root, InodeId::ROOT);
            assert_eq!(
                c.io_servers.iter().map(|s| s.id).collect::<Vec<_>>(),
                IO_SERVERS.to_vec()
            );
            assert_eq!(c.default_layout, cluster_default());
        }
        other => panic!("{other:?}"),
    }
    let d = attr(s.handle(Request::Mkdir {
        cred: r(),
        parent: InodeId::ROOT,
        name: "d".into(),
        mode: 0o750,
    }));
    assert_eq!((d.kind, d.mode), (FileKind::Directory, 0o750));
    assert_eq!(
        attr(s.handle(Request::Resolve {
            cred: r(),
            path: "/d".into()
        }))
        .inode,
        d.inode
    );
    assert_eq!(
        attr(s.handle(Request::Lookup {
            cred: r(),
            parent: InodeId::ROOT,
            name: "d".into()
        }))
        .inode,
        d.inode
    );
    assert_eq!(
        attr(s.handle(Request::GetAttr {
            cred: r(),
            inode: d.inode
        }))
        .inode,
        d.inode
    );
    let changes = SetAttr {
        mode: Some(0o700),
        ..Default::default()
    };
    assert_eq!(
        attr(s.handle(Request::SetAttr {
            cred: r(),
            inode: d.inode,
            changes
        }))
        .mode,
        0o700
    );
    let wanted = LayoutRequest {
        stripe_count: Some(1),
        ..Default::default()
    };
    let with_layout = attr(s.handle(Request::SetDirLayout {
        cred: r(),
        dir: d.inode,
        layout: Some(wanted),
    }));
    assert_eq!(with_layout.dir_layout, Some(wanted));
    let file = attr(s.handle(create_request(r(), d.inode, "f", LayoutRequest::default(), true)));
    assert_eq!(file.layout.unwrap().servers.len(), 1);
    let link = attr(s.handle(Request::Symlink {
        cred: r(),
        parent: d.inode,
        name: "l".into(),
        target: "f".into(),
    }));
    assert_eq!(
        s.handle(Request::Readlink {
            cred: r(),
            inode: link.inode
        })
        .unwrap(),
        Response::Link("f".into())
    );
    match s
        .handle(Request::Readdir {
            cred: r(),
            dir: d.inode,
            after: Default::default(),
            max_entries: 1,
        })
        .unwrap()
    {
        Response::Entries { entries, more } => {
            assert_eq!(
                entries
                    .iter()
                    .map(|e| e.name.to_str().unwrap())
                    .collect::<Vec<_>>(),
                vec!["f"]
            );
            assert!(more);
        }
        other => panic!("{other:?}"),
    }
    let rename = Request::Rename {
        cred: r(),
        src_parent: d.inode,
        src_name: "f".into(),
        dst_parent: InodeId::ROOT,
        dst_name: "g".into(),
        keep: None,
    };
    match s.handle(rename).unwrap() {
        Response::Renamed { moved, kept: None } => assert_eq!(moved.kind, FileKind::File),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.handle(Request::Unlink {
            cred: r(),
            parent: InodeId::ROOT,
            name: "g".into(),
            keep: None,
        })
        .unwrap(),
        Response::Unlinked { kept: None }
    );
    assert_eq!(
        s.handle(Request::Unlink {
            cred: r(),
            parent: d.inode,
            name: "l".into(),
            keep: Some(5),
        })
        .unwrap(),
        // Only files are kept for a session; a symlink simply goes.
        Response::Unlinked { kept: None }
    );
    assert_eq!(
        s.handle(Request::Rmdir {
            cred: r(),
            parent: InodeId::ROOT,
            name: "d".into()
        })
        .unwrap(),
        Response::Done
    );
    assert_eq!(
        s.handle(Request::Statfs { cred: r() }).unwrap(),
        Response::Statfs(MetaStatfs {
            files: 0,
            directories: 1,
            orphans: 1
        })
    );
    // Errors come back as they are.
    assert_eq!(
        code(s.handle(Request::Rmdir {
            cred: r(),
            parent: InodeId::ROOT,
            name: "d".into()
        })),
        ErrorCode::NotFound
    );
}

/// A `WithParent` does what its request does and answers with the directory as the
/// operation left it: what a getattr right after says (a second directory entry, a
/// subdirectory's link, the times), for each kind of request that makes a name, and
/// for a non-exclusive create that finds the file. A refused request changes nothing.
#[test]
fn requests_with_their_directory_answer_the_directory_after_them() {
    let f = fixture();
    let s = &f.service;
    let d = attr(s.handle(Request::Mkdir {
        cred: root(),
        parent: InodeId::ROOT,
        name: "d".into(),
        mode: 0o755,
    }));
    let made = |request: Request| match s.handle(Request::WithParent {
        request: Box::new(request),
    }) {
        Ok(Response::Made { attr, parent }) => (attr, parent),
        other => panic!("expected what was made, got {other:?}"),
    };
    let getattr = |inode| attr(s.handle(Request::GetAttr { cred: root(), inode }));
    let mut last = d.clone();
    let (file, parent) = made(create_request(
        root(),
        d.inode,
        "f",
        LayoutRequest::default(),
        true,
    ));
    assert_eq!(file.kind, FileKind::File);
    let requests = vec![
        Request::Mkdir {
            cred: root(),
            parent: d.inode,
            name: "sub".into(),
            mode: 0o700,
        },
        Request::Symlink {
            cred: root(),
            parent: d.inode,
            name: "l".into(),
            target: "f".into(),
        },
        Request::Mknod {
            cred: root(),
            parent: d.inode,
            name: "p".into(),
            kind: FileKind::Fifo,
            mode: 0o600,
            rdev: 0,
        },
        Request::Link {
            cred: root(),
            inode: file.inode,
            parent: d.inode,
            name: "h".into(),
        },
        // Finds "f": the directory as it is.
        create_request(root(), d.inode, "f", LayoutRequest::default(), false),
    ];
    assert_eq!(parent, getattr(d.inode));
    assert_eq!(parent.size, 1);
    assert!(parent.mtime > last.mtime || parent.mtime == last.mtime && parent.size > last.size);
    last = parent;
    for request in requests {
        let what = format!("{:?}", request.opcode());
        let (made, parent) = made(request);
        assert_eq!(parent, getattr(d.inode), "{what}");
        assert_eq!(made, getattr(made.inode), "{what}");
        assert!(parent.size >= last.size, "{what}");
        last = parent;
    }
    assert_eq!((last.size, last.nlink), (5, 3));
    assert_eq!(getattr(file.inode).nlink, 2);
    // Refused: nothing changes.
    let error = s
        .handle(Request::WithParent {
            request: Box::new(create_request(
                root(),
                d.inode,
                "f",
                LayoutRequest::default(),
                true,
            )),
        })
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::Exists);
    assert_eq!(getattr(d.inode), last);
    // A request that makes no name (decoding lets none through; the service refuses).
    let error = s
        .handle(Request::WithParent {
            request: Box::new(Request::GetAttr {
                cred: root(),
                inode: d.inode,
            }),
        })
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidArgument);
}

#[test]
fn io_requests_are_refused() {
    let f = fixture();
    let io = [
        Request::ObjCreate {
            inodes: vec![InodeId(5)],
        },
        Request::ObjRemove { inodes: vec![] },
        Request::Sync { inode: InodeId(5) },
        Request::Extents { items: vec![] },
        Request::IoStatfs,
    ];
    for request in io {
        let error = f.service.handle(request).unwrap_err();
        assert_eq!(error.code, ErrorCode::Unsupported);
        assert!(error.message.contains("metadata server"), "{}", error.message);
    }
    assert_eq!(
        code(f.service.handle(Request::Hello { client: "c".into() })),
        ErrorCode::Unsupported
    );
    assert!(f.servers.all_objects().is_empty());
}

#[test]
fn purging_removes_objects_of_removed_files_and_retries_failures() {
    let f = fixture();
    let all = LayoutRequest {
        stripe_count: Some(4),
        ..Default::default()
    };
    let two = LayoutRequest {
        stripe_count: Some(2),
        first_server: Some(0),
        ..Default::default()
    };
    let a = attr(
        f.service
            .handle(create_request(root(), InodeId::ROOT, "a", all, true)),
    );
    let b = attr(
        f.service
            .handle(create_request(root(), InodeId::ROOT, "b", two, true)),
    );
    let c = attr(
        f.service
            .handle(create_request(root(), InodeId::ROOT, "c", two, true)),
    );
    assert_eq!(f.service.purge_orphans_once(), 0);
    f.service
        .store()
        .unlink(&root(), InodeId::ROOT, "a", None)
        .unwrap();
    f.service
        .store()
        .unlink(&root(), InodeId::ROOT, "b", None)
        .unwrap();
    let orphans: Vec<InodeId> = f
        .service
        .store()
        .orphans(10)
        .unwrap()
        .iter()
        .map(|o| o.0)
        .collect();
    assert_eq!(orphans, vec![a.inode, b.inode]);
    // Server 12 holds only a's objects: while it fails, b (on 10 and 11) still goes.
    f.servers.remove_fails.lock().unwrap().insert(ServerId(12));
    assert_eq!(f.service.purge_orphans_once(), 1);
    assert_eq!(
        f.service
            .store()
            .orphans(10)
            .unwrap()
            .iter()
            .map(|o| o.0)
            .collect::<Vec<_>>(),
        vec![a.inode]
    );
    f.servers.remove_fails.lock().unwrap().clear();
    assert_eq!(f.service.purge_orphans_once(), 1);
    assert_eq!(f.service.purge_orphans_once(), 0);
    let expected: BTreeSet<_> = [(ServerId(10), c.inode), (ServerId(11), c.inode)]
        .into_iter()
        .collect();
    assert_eq!(f.servers.all_objects(), expected);
    assert_eq!(
        counts(&f),
        MetaStatfs {
            files: 1,
            directories: 1,
            orphans: 0
        }
    );
}

#[test]
fn the_purger_thread_purges_until_stopped() {
    let f = fixture();
    for name in ["x", "y", "z"] {
        attr(f.service.handle(create_request(
            root(),
            InodeId::ROOT,
            name,
            LayoutRequest::default(),
            true,
        )));
        f.service
            .store()
            .unlink(&root(), InodeId::ROOT, name, None)
            .unwrap();
    }
    assert_eq!(counts(&f).orphans, 3);
    let purger = f.service.spawn_purger(Duration::from_millis(10));
    let deadline = Instant::now() + Duration::from_secs(20);
    while counts(&f).orphans != 0 {
        assert!(Instant::now() < deadline, "purger did not purge in time");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(f.servers.all_objects().is_empty());
    purger.stop();
    // Stopped: new orphans stay.
    attr(f.service.handle(create_request(
        root(),
        InodeId::ROOT,
        "w",
        LayoutRequest::default(),
        true,
    )));
    f.service
        .store()
        .unlink(&root(), InodeId::ROOT, "w", None)
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(counts(&f).orphans, 1);
}

#[test]
fn wide_layouts_reach_every_server_and_fail_as_a_whole() {
    // More servers than parallel calls: several servers per thread.
    let many: Vec<ServerId> = (100..137).map(ServerId).collect();
    let f = fixture_with(&many);
    let all = LayoutRequest {
        stripe_count: Some(0),
        ..Default::default()
    };
    let file = attr(
        f.service
            .handle(create_request(root(), InodeId::ROOT, "wide", all, true)),
    );
    let expected: BTreeSet<_> = many.iter().map(|s| (*s, file.inode)).collect();
    assert_eq!(f.servers.all_objects(), expected);
    // One failing server in the middle undoes the objects on all the others.
    f.servers.create_fails.lock().unwrap().insert(ServerId(120));
    let error = f
        .service
        .handle(create_request(root(), InodeId::ROOT, "wide2", all, true))
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::Unavailable);
    assert_eq!(f.servers.all_objects(), expected);
}

#[test]
fn the_cluster_description_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let servers: Arc<FakeServers> = Arc::default();
    let store = open(dir.path());
    let twice = cluster_info(&[ServerId(1), ServerId(2), ServerId(1)]);
    let error = MetaService::new(store, twice, servers.clone())
        .err()
        .expect("duplicate ids refused");
    assert_eq!(error.code, ErrorCode::InvalidArgument);
    // No io servers yet: the namespace works, file creation does not.
    let store = open(dir.path());
    let service = MetaService::new(store, cluster_info(&[]), servers.clone()).unwrap();
    service.store().mkdir(&root(), InodeId::ROOT, "d", 0o755).unwrap();
    let create = service.handle(create_request(
        root(),
        InodeId::ROOT,
        "f",
        LayoutRequest::default(),
        true,
    ));
    assert_eq!(code(create), ErrorCode::InvalidLayout);
    assert_eq!(servers.create_calls.load(Ordering::SeqCst), 0);
    // A default that cannot resolve on the servers given is refused.
    drop(service);
    let store = open(dir.path());
    let mut narrow = cluster_info(&[ServerId(1)]);
    narrow.default_layout = LayoutRequest {
        stripe_count: Some(2),
        ..Default::default()
    };
    let error = MetaService::new(store, narrow, servers)
        .err()
        .expect("impossible default refused");
    assert_eq!(error.code, ErrorCode::InvalidLayout);
}

/// The pool: one refill precreates a batch on every server of the layout's set (one
/// call per server); the creates it serves make no object calls; every file's objects
/// exist; a restart hands the unused numbers to the purger, which removes their objects.
#[test]
fn creates_take_precreated_objects_and_a_restart_purges_the_unused_ones() {
    let dir = tempfile::tempdir().unwrap();
    let servers = Arc::new(FakeServers::default());
    let service =
        Arc::new(MetaService::new(open(dir.path()), cluster_info(&IO_SERVERS), servers.clone()).unwrap());
    service.set_precreate_batch(8);
    let all = LayoutRequest {
        stripe_count: Some(4),
        ..Default::default()
    };
    let mut files = Vec::new();
    for k in 0..10 {
        let name = format!("f{k}");
        files.push(attr(service.handle(create_request(
            root(),
            InodeId::ROOT,
            &name,
            all,
            true,
        ))));
    }
    // 10 creates from batches of 8: two refills, 4 servers each.
    assert_eq!(servers.create_calls.load(Ordering::SeqCst), 2 * 4);
    for file in &files {
        let layout = file.layout.as_ref().unwrap();
        for server in &layout.servers {
            assert!(
                servers.objects_on(*server).contains(&file.inode),
                "{} on {server}",
                file.inode
            );
        }
    }
    // 16 numbers precreated on every server, 10 used, 6 waiting in the pool.
    for server in IO_SERVERS {
        assert_eq!(servers.objects_on(server).len(), 16);
    }
    assert_eq!(service.store().precreated_count().unwrap(), 6);
    // A create that loses to an existing name puts its number back: no refill.
    let error = service
        .handle(create_request(root(), InodeId::ROOT, "f0", all, true))
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::Exists);
    assert_eq!(service.store().precreated_count().unwrap(), 6);
    drop(service);

    // Restart: the pool was in memory; its numbers become orphans and are purged.
    let service =
        Arc::new(MetaService::new(open(dir.path()), cluster_info(&IO_SERVERS), servers.clone()).unwrap());
    assert_eq!(service.store().precreated_count().unwrap(), 0);
    assert_eq!(counts_of(&service).orphans, 6);
    assert_eq!(service.purge_orphans_once(), 6);
    let live: BTreeSet<InodeId> = files.iter().map(|f| f.inode).collect();
    for server in IO_SERVERS {
        assert_eq!(
            servers.objects_on(server),
            live,
            "only the files' objects stay on {server}"
        );
    }
}

/// Files of a one-stripe layout take turns over the io servers, one server set each: on
/// a cluster of 40 io servers every set gets a pool, so each refills once and its
/// creates make no object calls. With pools for 16 sets only, the files of the other
/// 24 servers had their objects made one create at a time (64 calls here, not 40).
#[test]
fn one_stripe_files_on_many_io_servers_each_take_precreated_objects() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<ServerId> = (1..=40).map(ServerId).collect();
    let servers = Arc::new(FakeServers::default());
    let service = Arc::new(MetaService::new(open(dir.path()), cluster_info(&ids), servers.clone()).unwrap());
    service.set_precreate_batch(8);
    let one = LayoutRequest {
        stripe_count: Some(1),
        ..Default::default()
    };
    let mut firsts = BTreeMap::<ServerId, usize>::new();
    for k in 0..2 * ids.len() {
        let file = attr(service.handle(create_request(root(), InodeId::ROOT, &format!("f{k}"), one, true)));
        *firsts.entry(file.layout.unwrap().servers[0]).or_default() += 1;
    }
    assert!(
        firsts.values().all(|&n| n == 2) && firsts.len() == ids.len(),
        "{firsts:?}"
    );
    assert_eq!(servers.create_calls.load(Ordering::SeqCst), ids.len());
}

/// A service with pools of `batch` numbers and the background refiller.
fn refilled_fixture(batch: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let servers = Arc::new(FakeServers::default());
    let service =
        Arc::new(MetaService::new(open(dir.path()), cluster_info(&IO_SERVERS), servers.clone()).unwrap());
    service.set_precreate_batch(batch);
    service.spawn_refiller();
    Fixture {
        _dir: dir,
        service,
        servers,
    }
}

/// Creates file `f<k>` in the root, striped over all 4 io servers (one pool).
fn create_numbered(service: &MetaService, k: usize) -> Result<Response, WireError> {
    let all = LayoutRequest {
        stripe_count: Some(4),
        ..Default::default()
    };
    service.handle(create_request(root(), InodeId::ROOT, &format!("f{k}"), all, true))
}

/// With the background refiller, a pool that runs down to half a batch is refilled
/// while it still has numbers: the creates never find it empty, and the pool holds more
/// than half a batch again without any further create.
#[test]
fn the_refiller_tops_the_pool_up_before_it_runs_dry() {
    let f = refilled_fixture(8);
    let (service, servers) = (&f.service, &f.servers);
    let create = |k: usize| attr(create_numbered(service, k));
    // The first create refills itself (the pool is empty): 8 numbers, 7 left.
    create(0);
    assert_eq!(servers.create_calls.load(Ordering::SeqCst), 4);
    // Down to 4 left (half a batch): the refiller is asked for another batch.
    for k in 1..4 {
        create(k);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // Both the pool and the servers' calls are looked at from here while the refiller
    // thread works: wait for both to show the refill.
    while service.store().precreated_count().unwrap() <= 4
        || servers.create_calls.load(Ordering::SeqCst) < 2 * 4
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the pool was not refilled in the background"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(servers.create_calls.load(Ordering::SeqCst), 2 * 4);
    assert_eq!(service.store().precreated_count().unwrap(), 12);
    // Every file made so far and every pooled number has its objects.
    for server in IO_SERVERS {
        assert_eq!(servers.objects_on(server).len(), 16);
    }
}

/// Creates that empty a pool before the background refill lands (a busy disk makes an
/// io server's precreation slow: 0.05 to 6 s measured) wait for it, every one of them;
/// the set's next refills are twice as big, so that the pool outlasts a refill.
/// Here the refiller's batches fail (server 12 refuses) until the pool runs dry.
#[test]
fn creates_that_outrun_the_refiller_make_its_batches_bigger() {
    let f = refilled_fixture(8);
    let (service, servers) = (&f.service, &f.servers);
    let create = |k: usize| create_numbered(service, k);
    // The first create fills the pool itself: 8 numbers, 7 left, on every server.
    attr(create(0));
    assert_eq!(servers.objects_on(ServerId(12)).len(), 8);
    servers.create_fails.lock().unwrap().insert(ServerId(12));
    // The refiller is asked at 4 left and fails: the pool runs dry.
    for k in 1..8 {
        attr(create(k));
    }
    let error = create(8).unwrap_err();
    assert_eq!(error.code, ErrorCode::Unavailable, "{}", error.message);
    servers.create_fails.lock().unwrap().clear();
    // One refill lands next (the create's own, or the refiller's): 16 numbers.
    attr(create(9));
    assert_eq!(
        servers.objects_on(ServerId(12)).len(),
        8 + 16,
        "the refill after the pool ran dry precreates a doubled batch"
    );
}

/// A refill that fails on one server fails the create with that server named, leaves no
/// file, and hands the batch to the purger (whose objects go from the other servers).
#[test]
fn a_failed_refill_fails_the_create_and_leaves_its_objects_to_the_purger() {
    let f = fixture();
    f.service.set_precreate_batch(4);
    f.servers.create_fails.lock().unwrap().insert(ServerId(12));
    let all = LayoutRequest {
        stripe_count: Some(4),
        ..Default::default()
    };
    let error = f
        .service
        .handle(create_request(root(), InodeId::ROOT, "f", all, true))
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::Unavailable);
    assert!(error.message.contains("12"), "{}", error.message);
    assert_eq!(
        code(f.service.store().lookup(&root(), InodeId::ROOT, "f")),
        ErrorCode::NotFound
    );
    assert_eq!(counts(&f).orphans, 4);
    // The purger removes them only where they were made: an object of such a number on
    // the server that refused was never made for the pool and stays.
    f.servers
        .objects
        .lock()
        .unwrap()
        .entry(ServerId(12))
        .or_default()
        .extend((2..10_000).map(InodeId));
    let stranger: BTreeSet<InodeId> = f.servers.objects_on(ServerId(12));
    assert_eq!(f.service.purge_orphans_once(), 4);
    assert_eq!(f.servers.objects_on(ServerId(12)), stranger);
    f.servers.objects.lock().unwrap().remove(&ServerId(12));
    assert!(f.servers.all_objects().is_empty());
    // The server is back: the next create refills and succeeds.
    f.servers.create_fails.lock().unwrap().clear();
    attr(
        f.service
            .handle(create_request(root(), InodeId::ROOT, "f", all, true)),
    );
}

fn counts_of(service: &MetaService) -> MetaStatfs {
    service.store().statfs(&root()).unwrap()
}

/// An explicit mtime is set on the file's objects too (a stat shows the latest of the
/// objects' and the manager's times), by a setattr that is permitted; one that is refused
/// leaves the objects' times alone.
#[test]
fn explicit_times_reach_the_objects_only_when_the_setattr_is_permitted() {
    let f = fixture();
    let layout = LayoutRequest {
        stripe_count: Some(3),
        first_server: Some(1),
        ..Default::default()
    };
    let file = attr(
        f.service
            .handle(create_request(root(), InodeId::ROOT, "f", layout, true)),
    );
    let setattr = |cred: Cred, changes: SetAttr| {
        f.service.handle(Request::SetAttr {
            cred,
            inode: file.inode,
            changes,
        })
    };
    let at = |secs: i64| Timespec { secs, nanos: 7 };
    let times = |changes: SetAttr| SetAttr {
        mtime: Some(TimeSet::At(at(1_000))),
        ..changes
    };
    let taken = || std::mem::take(&mut *f.servers.times_set.lock().unwrap());
    let on_the_objects = |secs: i64| -> Vec<(ServerId, InodeId, Timespec)> {
        [ServerId(11), ServerId(12), ServerId(13)]
            .into_iter()
            .map(|s| (s, file.inode, at(secs)))
            .collect()
    };

    // Root gives the file to alice (no time: no object is touched).
    attr(setattr(
        root(),
        SetAttr {
            uid: Some(alice().uid),
            ..Default::default()
        },
    ));
    assert_eq!(taken(), vec![]);

    // Root, owner and mode and time at once.
    let changed = attr(setattr(
        root(),
        times(SetAttr {
            gid: Some(alice().gid),
            mode: Some(0o640),
            ..Default::default()
        }),
    ));
    assert_eq!(changed.mtime, at(1_000));
    let mut set = taken();
    set.sort();
    assert_eq!(set, on_the_objects(1_000));

    // The owner's mode and time.
    let changed = attr(setattr(
        alice(),
        SetAttr {
            mode: Some(0o600),
            mtime: Some(TimeSet::At(at(2_000))),
            ..Default::default()
        },
    ));
    assert_eq!(changed.mtime, at(2_000));
    let mut set = taken();
    set.sort();
    assert_eq!(set, on_the_objects(2_000));

    // Root's change cannot be refused: the objects were asked while it committed;
    // the owner's only after it had.
    assert_eq!(
        std::mem::take(&mut *f.servers.time_sends.lock().unwrap()),
        vec![(false, true), (true, true)]
    );

    // Refused: bob is not the owner; the owner may not give the file away. Neither
    // reaches the objects, nor changes the manager's time.
    assert_eq!(
        code(setattr(bob(), times(SetAttr::default()))),
        ErrorCode::NotPermitted
    );
    assert_eq!(
        code(setattr(
            alice(),
            times(SetAttr {
                uid: Some(bob().uid),
                ..Default::default()
            })
        )),
        ErrorCode::NotPermitted
    );
    assert_eq!(taken(), vec![]);
    let now = f.service.store().getattr(&root(), file.inode).unwrap();
    assert_eq!(
        (now.mtime, now.mode & 0o7777, now.uid),
        (at(2_000), 0o600, alice().uid)
    );

    // "Now" is the manager's clock, which is the objects' own: nothing to set.
    attr(setattr(
        alice(),
        SetAttr {
            mtime: Some(TimeSet::Now),
            ..Default::default()
        },
    ));
    assert_eq!(taken(), vec![]);
}

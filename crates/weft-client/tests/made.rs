//! The `*_made` operations ask the manager for the directory's attributes with what
//! they make (`WithParent`); a manager from before that request answers
//! `UnknownOpcode`, and the client then sends the plain request, once per client and
//! never again. Against a scripted manager on loopback.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use weft_client::{Attr, Client, ClientAuth, ClusterKey, FileKind, InodeId, LayoutRequest};
use weft_layout::ServerId;
use weft_proto::msg::{Request, Response};
use weft_proto::{ClusterInfo, ErrorCode, Timespec, WireError};
use weft_rpc::{serve, ConnectionId, Handler, ServerIdentity, ServerLimits};

/// A manager that answers `GetCluster`, `Mkdir` and `Symlink`, and `WithParent` only
/// if `knows_with_parent`, else as a manager before it does.
struct Manager {
    knows_with_parent: bool,
    with_parent: AtomicUsize,
    plain: AtomicUsize,
    refused_once: AtomicBool,
}

fn dir(inode: u64, nlink: u32) -> Attr {
    Attr {
        inode: InodeId(inode),
        kind: FileKind::Directory,
        mode: 0o755,
        uid: 0,
        gid: 0,
        nlink,
        size: 1,
        atime: Timespec::default(),
        mtime: Timespec { secs: 7, nanos: 0 },
        ctime: Timespec { secs: 7, nanos: 0 },
        layout: None,
        cache: Default::default(),
        dir_layout: None,
        rdev: 0,
        blocks: 8,
    }
}

impl Manager {
    fn answer(&self, request: &Request) -> Result<Response, WireError> {
        match request {
            Request::Mkdir { parent, .. } => Ok(Response::Attr(dir(parent.0 + 100, 2))),
            Request::Symlink { parent, .. } => Ok(Response::Attr(Attr {
                kind: FileKind::Symlink,
                ..dir(parent.0 + 200, 1)
            })),
            other => Err(WireError::new(
                ErrorCode::Unsupported,
                format!("{:?}", other.opcode()),
            )),
        }
    }
}

impl Handler for Manager {
    fn handle(
        &self,
        _connection: ConnectionId,
        request: Request,
        _data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        let response = match request {
            Request::GetCluster => Ok(Response::Cluster(ClusterInfo {
                name: "scripted".into(),
                io_servers: Vec::new(),
                default_layout: LayoutRequest::default(),
                root: InodeId::ROOT,
                cache: Default::default(),
            })),
            // A manager of protocol version 4 (it knows `WithParent`, not the requests
            // of version 5): its decode fails before any handler runs.
            Request::Tracked { .. } | Request::Vouched { .. } => Err(WireError::new(
                ErrorCode::UnknownOpcode,
                format!("unknown opcode {}", request.opcode() as u16),
            )),
            Request::WithParent { request } => {
                self.with_parent.fetch_add(1, Ordering::SeqCst);
                if self.knows_with_parent {
                    let Response::Attr(attr) = self.answer(&request)? else {
                        unreachable!("answer gives attributes")
                    };
                    let parent = match *request {
                        Request::Mkdir { parent, .. } | Request::Symlink { parent, .. } => parent,
                        _ => unreachable!("answered above"),
                    };
                    Ok(Response::Made {
                        attr,
                        parent: dir(parent.0, 3),
                    })
                } else {
                    // What the connection layer of a manager that does not know the
                    // opcode answers (its decode fails before any handler runs).
                    self.refused_once.store(true, Ordering::SeqCst);
                    Err(WireError::new(ErrorCode::UnknownOpcode, "unknown opcode 152"))
                }
            }
            other => {
                self.plain.fetch_add(1, Ordering::SeqCst);
                self.answer(&other)
            }
        };
        response.map(|r| (r, Vec::new()))
    }
}

fn start(knows_with_parent: bool) -> (Arc<Manager>, Client) {
    let key = ClusterKey::from_bytes([0x3c; 32]);
    let manager = Arc::new(Manager {
        knows_with_parent,
        with_parent: AtomicUsize::new(0),
        plain: AtomicUsize::new(0),
        refused_once: AtomicBool::new(false),
    });
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let handle = serve(
        listener,
        manager.clone(),
        ServerIdentity {
            server_id: ServerId(0),
            roles: 1,
            build: "scripted",
            incarnation: 1,
            munge: false,
        },
        ServerLimits::default(),
        key.clone(),
    )
    .unwrap();
    let client = Client::connect_with(&handle.local_addr.to_string(), ClientAuth::cluster(key)).unwrap();
    // The server runs as long as the test: its handle is leaked with it.
    std::mem::forget(handle);
    (manager, client)
}

#[test]
fn a_manager_that_knows_it_answers_with_the_directory() {
    let (manager, client) = start(true);
    let made = client.mkdir_in_made(InodeId(9), "d", 0o755).unwrap();
    assert_eq!(made.made.inode, InodeId(109));
    assert_eq!(made.parent, Some(dir(9, 3)));
    let made = client.symlink_in_made("t", InodeId(9), "l").unwrap();
    assert_eq!(made.made.kind, FileKind::Symlink);
    assert_eq!(made.parent.map(|p| p.inode), Some(InodeId(9)));
    // The plain operations send the plain requests.
    assert_eq!(
        client.mkdir_in(InodeId(9), "e", 0o755).unwrap().inode,
        InodeId(109)
    );
    assert_eq!(manager.with_parent.load(Ordering::SeqCst), 2);
    assert_eq!(manager.plain.load(Ordering::SeqCst), 1);
}

#[test]
fn an_older_manager_gets_the_plain_request_once_it_refused_the_new_one() {
    let (manager, client) = start(false);
    let made = client.mkdir_in_made(InodeId(9), "d", 0o755).unwrap();
    assert_eq!(made.made.inode, InodeId(109));
    assert_eq!(made.parent, None);
    assert!(manager.refused_once.load(Ordering::SeqCst));
    // Never asked again, by this client or one made from it.
    let other = client.with_cred(weft_client::Cred {
        uid: 1000,
        gid: 1000,
        groups: Vec::new(),
    });
    assert_eq!(other.mkdir_in_made(InodeId(9), "e", 0o755).unwrap().parent, None);
    assert_eq!(client.symlink_in_made("t", InodeId(9), "l").unwrap().parent, None);
    assert_eq!(manager.with_parent.load(Ordering::SeqCst), 1);
    assert_eq!(manager.plain.load(Ordering::SeqCst), 3);
}

//! A verified user (`Caller::User`, munge mode) reaches an inode named by number only
//! through directories it may search: the rebuild's stale-piece requests and the
//! project query name an inode by number too, and must not let a user touch a file in
//! another user's private directory (write permission on the file itself is not
//! enough, as for a path).

mod common;

use std::sync::Arc;

use common::*;
use weft_layout::{InodeId, LayoutRequest, Redundancy, ServerId};
use weft_meta::{Caller, MetaService, ObjectServers};
use weft_proto::{ClusterInfo, Cred, ErrorCode, IoServer, Request, Response, SetAttr, WireError};

/// Io servers that hold every object asked for.
struct Servers;

impl ObjectServers for Servers {
    fn create_objects(&self, _: ServerId, _: &[InodeId]) -> Result<(), WireError> {
        Ok(())
    }
    fn remove_objects(&self, _: ServerId, _: &[InodeId]) -> Result<(), WireError> {
        Ok(())
    }
}

fn service(dir: &tempfile::TempDir) -> MetaService {
    let info = ClusterInfo {
        cache: Default::default(),
        name: "reach".into(),
        io_servers: IO_SERVERS
            .iter()
            .map(|id| IoServer {
                id: *id,
                addr: format!("127.0.0.1:{}", 7000 + id.0),
                socket: None,
            })
            .collect(),
        default_layout: cluster_default(),
        root: InodeId(0),
    };
    let service = MetaService::new(open(dir.path()), info, Arc::new(Servers)).unwrap();
    service.set_precreate_batch(0);
    service
}

fn attr_of(response: Result<Response, WireError>) -> weft_proto::Attr {
    match response {
        Ok(Response::Attr(attr)) => attr,
        other => panic!("expected attributes, got {other:?}"),
    }
}

#[test]
fn numbered_requests_of_a_verified_user_need_the_way_to_the_inode() {
    let dir = tempfile::tempdir().unwrap();
    let s = service(&dir);
    // Alice's private directory (0700) holding a replicated file anyone may write.
    let private = attr_of(s.handle(Request::Mkdir {
        cred: root(),
        parent: InodeId::ROOT,
        name: "alice".into(),
        mode: 0o700,
    }));
    let file = attr_of(s.handle(Request::Create {
        cred: root(),
        parent: private.inode,
        name: "open-to-all".into(),
        mode: 0o666,
        layout: LayoutRequest {
            redundancy: Some(Redundancy::Replicas(2)),
            ..LayoutRequest::default()
        },
        exclusive: true,
    }));
    let owned = SetAttr {
        uid: Some(alice().uid),
        gid: Some(alice().gid),
        ..Default::default()
    };
    for inode in [private.inode, file.inode] {
        attr_of(s.handle(Request::SetAttr {
            cred: root(),
            inode,
            changes: owned.clone(),
        }));
    }
    let server = file.layout.as_ref().unwrap().servers[0];
    let requests = |cred: &Cred| {
        vec![
            Request::MarkStale {
                cred: cred.clone(),
                inode: file.inode,
                server,
            },
            Request::StaleGeneration {
                cred: cred.clone(),
                inode: file.inode,
                server,
            },
            Request::ClearStale {
                cred: cred.clone(),
                inode: file.inode,
                server,
                generation: 0,
            },
            Request::Project {
                cred: cred.clone(),
                inode: file.inode,
                set: None,
                recursive: false,
            },
        ]
    };
    // Bob may write the file but not walk to it: every request is refused, and the
    // piece stays fresh.
    let bob_caller = Caller::User(bob());
    for request in requests(&bob()) {
        let what = format!("{request:?}");
        match s.handle_as(&bob_caller, request) {
            Err(e) => assert_eq!(e.code, ErrorCode::PermissionDenied, "{what}: {e:?}"),
            Ok(answer) => panic!("{what} served to Bob: {answer:?}"),
        }
    }
    let now = attr_of(s.handle(Request::GetAttr {
        cred: root(),
        inode: file.inode,
    }));
    assert!(
        now.layout.unwrap().replication.stale.is_empty(),
        "Bob marked a piece stale"
    );
    // Alice, who may walk there, is let in (the refusals above are about the way; her
    // clearing with a generation her own mark moved is refused as busy, not denied).
    let alice_caller = Caller::User(alice());
    for request in requests(&alice()) {
        let what = format!("{request:?}");
        match s.handle_as(&alice_caller, request) {
            Ok(_) => {}
            Err(e) => assert_ne!(e.code, ErrorCode::PermissionDenied, "{what}: {e:?}"),
        }
    }
    let marked = attr_of(s.handle(Request::GetAttr {
        cred: root(),
        inode: file.inode,
    }));
    assert_eq!(marked.layout.unwrap().replication.stale, vec![server]);
}

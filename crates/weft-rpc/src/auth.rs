//! Who may talk to a server: the cluster key (its file, its derived keys), the proofs
//! of the connection handshake, and the client side of that handshake.
//!
//! Every server of a cluster and every client of it hold the same 32 random bytes, the
//! cluster key, in a file readable by its owner only. A connection is served only after
//! both ends proved they hold it, without sending it (`weft_proto::handshake` has the
//! exchange): each side answers the other's fresh nonce with an HMAC-SHA256 under a key
//! derived from the cluster key, so a recorded handshake is worth nothing on another
//! connection, and a server refuses a client (and a client a server) that cannot
//! answer. The check is constant-time (`hmac`'s `verify_slice`).
//!
//! Keys for other purposes are derived from the cluster key with their own label
//! (`ClusterKey::derive`), so that a MAC made for one purpose never verifies for another.

use crate::error::RpcError;
use crate::frame_io::{read_exact_vec, read_header, write_frame, ReadFrameError};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use weft_layout::ServerId;
use weft_proto::frame::{FrameKind, PROTOCOL_VERSION};
use weft_proto::handshake::{Identity, HANDSHAKE_MESSAGE_BYTES_MAX, NONCE_BYTES, PROOF_BYTES};
use weft_proto::msg::{decode_result, Request, Response};
use weft_proto::Wire;

/// Bytes of a cluster key.
pub const KEY_BYTES: usize = 32;
/// The label of the handshake's MAC key.
const HANDSHAKE_LABEL: &str = "weft handshake v1";

type HmacSha256 = Hmac<Sha256>;

/// Why a key file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    #[error("cannot read the cluster key {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("cluster key {path} is not a Weft key: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("cluster key {path} can be read by others (mode {mode:04o}); run `chmod 600 {path}`")]
    Exposed { path: PathBuf, mode: u32 },
    #[error("cannot create the cluster key {path}: {reason}")]
    Create { path: PathBuf, reason: String },
}

/// The cluster's shared secret. Its bytes never leave this process: neither `Debug`
/// nor any wire message shows them.
#[derive(Clone)]
pub struct ClusterKey {
    secret: [u8; KEY_BYTES],
    handshake: [u8; KEY_BYTES],
}

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

impl ClusterKey {
    pub fn from_bytes(secret: [u8; KEY_BYTES]) -> ClusterKey {
        let mut key = ClusterKey {
            secret,
            handshake: [0; KEY_BYTES],
        };
        key.handshake = key.derive(HANDSHAKE_LABEL);
        key
    }

    /// A new key from the operating system's random source.
    pub fn generate() -> io::Result<ClusterKey> {
        let mut secret = [0u8; KEY_BYTES];
        getrandom::fill(&mut secret).map_err(|e| io::Error::other(format!("no random bytes: {e}")))?;
        Ok(ClusterKey::from_bytes(secret))
    }

    /// A key for one purpose, named by `label` ("weft handshake v1"; capabilities would
    /// use their own): HMAC-SHA256 of the label under the cluster key.
    pub fn derive(&self, label: &str) -> [u8; KEY_BYTES] {
        let mut mac = HmacSha256::new_from_slice(&self.secret).expect("HMAC takes keys of any length");
        mac.update(label.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Reads a key file: 64 hexadecimal digits (and a newline). A file that others
    /// than its owner may read is refused, as ssh refuses such private keys.
    pub fn load(path: &Path) -> Result<ClusterKey, KeyError> {
        use std::os::unix::fs::MetadataExt;
        let read_err = |e: io::Error| KeyError::Read {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        let mode = file.metadata().map_err(read_err)?.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Exposed {
                path: path.to_owned(),
                mode,
            });
        }
        let mut bytes = Vec::new();
        // A key file is 65 bytes; reading a little more tells a wrong file apart.
        file.take(256).read_to_end(&mut bytes).map_err(read_err)?;
        // A binary file (random bytes, another tool's key) is no key either: say what
        // a key file holds, not that the bytes are not UTF-8.
        std::str::from_utf8(&bytes)
            .ok()
            .and_then(|text| parse_hex(text.trim()))
            .map(ClusterKey::from_bytes)
            .ok_or_else(|| KeyError::Invalid {
                path: path.to_owned(),
                reason: format!(
                    "expected {} hexadecimal digits (a key file made by `weft key create FILE`)",
                    2 * KEY_BYTES
                ),
            })
    }

    /// The key in `path`, created (mode 0600, from random bytes) if there is none.
    /// Creation is atomic: a file is written under another name and linked into
    /// place, so that concurrent readers (the ranks of an MPI launch) see no key or the
    /// whole key, and of two concurrent creators one wins and both use its key.
    pub fn load_or_create(path: &Path) -> Result<(ClusterKey, bool), KeyError> {
        match ClusterKey::load(path) {
            Err(KeyError::Read { .. }) if !path.exists() => {}
            other => return other.map(|k| (k, false)),
        }
        let create_err = |e: io::Error| KeyError::Create {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let key = ClusterKey::generate().map_err(create_err)?;
        let tmp = path.with_extension(format!("key.tmp-{}", std::process::id()));
        let written = (|| {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(format!("{}\n", to_hex(&key.secret)).as_bytes())?;
            f.sync_all()?;
            std::fs::hard_link(&tmp, path)
        })();
        std::fs::remove_file(&tmp).ok();
        match written {
            Ok(()) => Ok((key, true)),
            // Someone else created it meanwhile: theirs is the key.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => ClusterKey::load(path).map(|k| (k, false)),
            Err(e) => Err(create_err(e)),
        }
    }

    /// `side`'s proof: a MAC over both nonces and the identity the client claims.
    /// The sides' labels differ, so that a client's proof can never be reflected back
    /// as a server's.
    pub fn proof(
        &self,
        side: Side,
        server_nonce: &[u8; NONCE_BYTES],
        client_nonce: &[u8; NONCE_BYTES],
        identity: &Identity,
    ) -> [u8; PROOF_BYTES] {
        self.proof_mac(side, server_nonce, client_nonce, identity)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Checks `side`'s proof in constant time.
    pub fn verify(
        &self,
        side: Side,
        server_nonce: &[u8; NONCE_BYTES],
        client_nonce: &[u8; NONCE_BYTES],
        identity: &Identity,
        proof: &[u8; PROOF_BYTES],
    ) -> bool {
        self.proof_mac(side, server_nonce, client_nonce, identity)
            .verify_slice(proof)
            .is_ok()
    }

    fn proof_mac(
        &self,
        side: Side,
        server_nonce: &[u8; NONCE_BYTES],
        client_nonce: &[u8; NONCE_BYTES],
        identity: &Identity,
    ) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.handshake).expect("HMAC takes keys of any length");
        // Fixed-length fields, then the identity's own length-prefixed encoding: no
        // two different inputs share a byte string.
        mac.update(match side {
            Side::Client => b"weft-client",
            Side::Server => b"weft-server",
        });
        mac.update(server_nonce);
        mac.update(client_nonce);
        mac.update(&identity.to_bytes());
        mac
    }
}

/// Which end of a connection a proof comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

/// Fresh random bytes for a nonce.
pub fn nonce() -> io::Result<[u8; NONCE_BYTES]> {
    let mut n = [0u8; NONCE_BYTES];
    getrandom::fill(&mut n).map_err(|e| io::Error::other(format!("no random bytes: {e}")))?;
    Ok(n)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(text: &str) -> Option<[u8; KEY_BYTES]> {
    if text.len() != 2 * KEY_BYTES || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; KEY_BYTES];
    for (k, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * k..2 * k + 2], 16).ok()?;
    }
    Some(out)
}

/// What a client proves in the handshake: that it holds the key, and who it acts for.
#[derive(Debug, Clone)]
pub struct ClientAuth {
    pub key: Arc<ClusterKey>,
    pub identity: Identity,
}

impl ClientAuth {
    /// A member of the cluster, proven by the key alone.
    pub fn cluster(key: ClusterKey) -> ClientAuth {
        ClientAuth {
            key: Arc::new(key),
            identity: Identity::Cluster,
        }
    }
}

/// The munged socket to use: `WEFT_MUNGE_SOCKET` if set, else munge's default.
pub fn munge_socket() -> Option<std::path::PathBuf> {
    std::env::var_os("WEFT_MUNGE_SOCKET")
        .filter(|s| !s.is_empty())
        .map(Into::into)
}

/// A fresh MUNGE credential for this process's uid and gid, from the `munge` command;
/// `None` when munge is missing or munged does not answer.
pub fn munge_credential() -> Option<Vec<u8>> {
    let mut command = std::process::Command::new("munge");
    command.arg("-n");
    if let Some(socket) = munge_socket() {
        command.arg("--socket").arg(socket);
    }
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    // A munged that does not answer delays the connection at most this long.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    // A credential is a few hundred bytes: the pipe held it while munge exited.
    let out = child.wait_with_output().ok()?;
    let credential = out.stdout.trim_ascii().to_vec();
    (out.status.success()
        && !credential.is_empty()
        && credential.len() <= weft_proto::handshake::CREDENTIAL_BYTES_MAX)
        .then_some(credential)
}

/// What the server told of itself at the end of a handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerHello {
    pub server_id: ServerId,
    pub roles: u32,
    pub incarnation: u64,
}

/// The client side of the handshake on a connected stream, blocking (the stream's
/// timeouts bound each wait). On success the stream is ready for requests; errors
/// name the server as `addr`.
/// `wait_ms` is the stream's read timeout, for the error that reports it.
pub fn client_handshake<S: Read + Write>(
    stream: &mut S,
    addr: &str,
    client_name: &str,
    auth: &ClientAuth,
    wait_ms: u64,
) -> Result<ServerHello, RpcError> {
    let hello = Request::Hello {
        client: client_name.to_owned(),
    };
    let (server_nonce, identity) = match exchange(stream, addr, wait_ms, 1, &hello)? {
        Response::Challenge { nonce } => (nonce, auth.identity.clone()),
        // A manager in munge mode: a client that claims no identity of its own gets a
        // fresh MUNGE credential for this connection. Without one (munged not running)
        // it carries on as a plain member; the manager then refuses its metadata
        // requests with an error that says so.
        Response::MungeChallenge { nonce } => match &auth.identity {
            Identity::Cluster => (
                nonce,
                munge_credential()
                    .map(Identity::Munge)
                    .unwrap_or(Identity::Cluster),
            ),
            claimed => (nonce, claimed.clone()),
        },
        other => return Err(unexpected(addr, &other)),
    };
    let client_nonce = nonce().map_err(|e| RpcError::Connect {
        addr: addr.to_owned(),
        reason: e.to_string(),
    })?;
    let authenticate = Request::Authenticate {
        nonce: client_nonce,
        identity: identity.clone(),
        proof: auth
            .key
            .proof(Side::Client, &server_nonce, &client_nonce, &identity),
    };
    match exchange(stream, addr, wait_ms, 2, &authenticate)? {
        Response::Hello {
            server_id,
            roles,
            incarnation,
            proof,
        } => {
            if !auth
                .key
                .verify(Side::Server, &server_nonce, &client_nonce, &identity, &proof)
            {
                return Err(RpcError::Authentication {
                    addr: addr.to_owned(),
                    reason: "the server could not prove it holds this cluster's key (another cluster at this address?)".into(),
                });
            }
            Ok(ServerHello {
                server_id,
                roles,
                incarnation,
            })
        }
        other => Err(unexpected(addr, &other)),
    }
}

/// Whether the server at `target` is running: a fresh connection's first handshake
/// step (answered by the server's event loop, whatever its workers are doing) within
/// `within`. Spends no credential (it never authenticates). Err only for no answer
/// in time or no server at all (refused); a server that answers anything, even a
/// refusal, or closes the connection, is running.
pub(crate) fn probe_alive(target: &str, addr: &str, within: std::time::Duration) -> Result<(), RpcError> {
    let dead = |reason: String| RpcError::Connect {
        addr: addr.to_owned(),
        reason,
    };
    let no_answer = RpcError::TimedOut {
        addr: addr.to_owned(),
        after_ms: within.as_millis() as u64,
    };
    let mut stream = match crate::stream::Stream::connect(target, within) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused || e.kind() == io::ErrorKind::NotFound => {
            return Err(dead(format!("nothing listens at {target} any more")))
        }
        Err(e) if e.kind() == io::ErrorKind::TimedOut || e.kind() == io::ErrorKind::WouldBlock => {
            return Err(no_answer)
        }
        // Out of descriptors, say: nothing known about the server.
        Err(_) => return Ok(()),
    };
    stream.set_read_timeout(Some(within)).ok();
    stream.set_write_timeout(Some(within)).ok();
    let hello = Request::Hello {
        client: "liveness probe".to_owned(),
    };
    let answered = match exchange(&mut stream, addr, within.as_millis() as u64, 1, &hello) {
        Err(RpcError::TimedOut { .. }) => Err(no_answer),
        _ => Ok(()),
    };
    stream.shutdown(std::net::Shutdown::Both).ok();
    answered
}

fn unexpected(addr: &str, response: &Response) -> RpcError {
    RpcError::Protocol {
        addr: addr.to_owned(),
        detail: format!("unexpected handshake reply {response:?}"),
    }
}

/// Sends one handshake request and reads its answer. A refusal (an error frame, with
/// this request's id or the connection-level id 0) becomes the error it carries.
fn exchange<S: Read + Write>(
    stream: &mut S,
    addr: &str,
    wait_ms: u64,
    id: u64,
    request: &Request,
) -> Result<Response, RpcError> {
    let lost = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => RpcError::TimedOut {
            addr: addr.to_owned(),
            after_ms: wait_ms,
        },
        _ => RpcError::Disconnected {
            addr: addr.to_owned(),
            reason: format!("during the handshake: {e}"),
        },
    };
    write_frame(
        stream,
        FrameKind::Request,
        request.opcode() as u16,
        id,
        &request.encode_body(),
        &[],
    )
    .map_err(lost)?;
    let header = match read_header(stream) {
        Ok(h) => h,
        Err(ReadFrameError::Closed) => {
            return Err(RpcError::Disconnected {
                addr: addr.to_owned(),
                reason: "the server closed the connection during the handshake".into(),
            })
        }
        Err(ReadFrameError::Io(e)) => return Err(lost(e)),
        Err(ReadFrameError::Header(e)) => {
            return Err(RpcError::Protocol {
                addr: addr.to_owned(),
                detail: format!("bad frame from server: {e}"),
            })
        }
    };
    // A server of another version refuses in its own version; only the header's
    // version is trusted then.
    if header.version != PROTOCOL_VERSION {
        return Err(RpcError::ProtocolVersion {
            addr: addr.to_owned(),
            server_version: header.version,
        });
    }
    if header.message_len > HANDSHAKE_MESSAGE_BYTES_MAX || header.data_len != 0 {
        return Err(RpcError::Protocol {
            addr: addr.to_owned(),
            detail: format!(
                "handshake reply of {} + {} bytes",
                header.message_len, header.data_len
            ),
        });
    }
    let message = read_exact_vec(stream, header.message_len as u64).map_err(lost)?;
    match decode_result(&message) {
        Ok(Ok(response)) if header.request_id == id => Ok(response),
        Ok(Ok(response)) => Err(unexpected(addr, &response)),
        Ok(Err(error)) if error.code == weft_proto::ErrorCode::PermissionDenied => {
            Err(RpcError::Authentication {
                addr: addr.to_owned(),
                reason: error.message,
            })
        }
        Ok(Err(error)) => Err(RpcError::Remote {
            addr: addr.to_owned(),
            error,
        }),
        Err(e) => Err(RpcError::Protocol {
            addr: addr.to_owned(),
            detail: format!("undecodable handshake reply: {e}"),
        }),
    }
}

/// The server side of the handshake, blocking, for simple peers that serve one
/// connection at a time (scripted servers in tests); weft's own server does the same
/// steps in its event loop. Returns the client's name and identity, or the reason the
/// client was refused (it has been told).
pub fn serve_handshake<S: Read + Write>(
    stream: &mut S,
    key: &ClusterKey,
    server: ServerHello,
) -> io::Result<(String, Identity)> {
    let refuse = |stream: &mut S, id: u64, message: &str| -> io::Error {
        let error = weft_proto::WireError::new(weft_proto::ErrorCode::PermissionDenied, message);
        let body = weft_proto::msg::encode_result(&Err(error));
        let _ = write_frame(stream, FrameKind::Response, 0, id, &body, &[]);
        io::Error::new(io::ErrorKind::PermissionDenied, message.to_owned())
    };
    let (id, client) = match read_request(stream)? {
        (id, Request::Hello { client }) => (id, client),
        (id, _) => return Err(refuse(stream, id, "authenticate first")),
    };
    let server_nonce = nonce()?;
    reply(stream, id, Response::Challenge { nonce: server_nonce })?;
    let (id, client_nonce, identity, proof) = match read_request(stream)? {
        (
            id,
            Request::Authenticate {
                nonce,
                identity,
                proof,
            },
        ) => (id, nonce, identity, proof),
        (id, _) => return Err(refuse(stream, id, "authenticate first")),
    };
    if !key.verify(Side::Client, &server_nonce, &client_nonce, &identity, &proof) {
        return Err(refuse(stream, id, "authentication failed"));
    }
    let proof = key.proof(Side::Server, &server_nonce, &client_nonce, &identity);
    reply(
        stream,
        id,
        Response::Hello {
            server_id: server.server_id,
            roles: server.roles,
            incarnation: server.incarnation,
            proof,
        },
    )?;
    Ok((client, identity))
}

fn read_request<S: Read>(stream: &mut S) -> io::Result<(u64, Request)> {
    let header = read_header(stream).map_err(|e| match e {
        ReadFrameError::Io(e) => e,
        other => io::Error::other(format!("{other:?}")),
    })?;
    let message = read_exact_vec(stream, header.message_len as u64)?;
    read_exact_vec(stream, header.data_len)?;
    let request = Request::decode(header.opcode, &message).map_err(|e| io::Error::other(e.to_string()))?;
    Ok((header.request_id, request))
}

fn reply<S: Write>(stream: &mut S, id: u64, response: Response) -> io::Result<()> {
    let opcode = match response {
        Response::Challenge { .. } | Response::MungeChallenge { .. } => weft_proto::Opcode::Hello,
        _ => weft_proto::Opcode::Authenticate,
    };
    let body = weft_proto::msg::encode_result(&Ok(response));
    write_frame(stream, FrameKind::Response, opcode as u16, id, &body, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_verify_only_for_their_key_nonces_and_side() {
        let key = ClusterKey::from_bytes([7; KEY_BYTES]);
        let other = ClusterKey::from_bytes([8; KEY_BYTES]);
        let (s, c) = ([1; NONCE_BYTES], [2; NONCE_BYTES]);
        let id = Identity::Cluster;
        let proof = key.proof(Side::Client, &s, &c, &id);
        assert!(key.verify(Side::Client, &s, &c, &id, &proof));
        assert!(!other.verify(Side::Client, &s, &c, &id, &proof));
        assert!(!key.verify(Side::Client, &[3; NONCE_BYTES], &c, &id, &proof));
        assert!(!key.verify(Side::Client, &s, &[3; NONCE_BYTES], &id, &proof));
        // A client's proof is no server's proof.
        assert!(!key.verify(Side::Server, &s, &c, &id, &proof));
        let server = key.proof(Side::Server, &s, &c, &id);
        assert!(key.verify(Side::Server, &s, &c, &id, &server));
        let mut flipped = proof;
        flipped[31] ^= 1;
        assert!(!key.verify(Side::Client, &s, &c, &id, &flipped));
        // Derived keys differ by label.
        assert_ne!(key.derive("a"), key.derive("b"));
    }

    #[test]
    fn key_files_are_created_once_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.key");
        let (key, created) = ClusterKey::load_or_create(&path).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (again, created) = ClusterKey::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(key.secret, again.secret);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
        // Readable by others: refused with the fix in the message.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = ClusterKey::load(&path).unwrap_err();
        assert!(e.to_string().contains("chmod 600"), "{e}");
        // Not a key.
        std::fs::write(&path, "not a key\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(ClusterKey::load(&path), Err(KeyError::Invalid { .. })));
        // Binary bytes (32 random bytes instead of their hex): the same clear error,
        // not the reader's "stream did not contain valid UTF-8".
        std::fs::write(&path, [0xffu8, 0xfe, 0x00, 0x80, 0x12]).unwrap();
        let e = ClusterKey::load(&path).unwrap_err();
        assert!(
            matches!(e, KeyError::Invalid { .. }) && e.to_string().contains("weft key create"),
            "{e}"
        );
        assert!(format!("{key:?}") == "ClusterKey(..)");
    }
}

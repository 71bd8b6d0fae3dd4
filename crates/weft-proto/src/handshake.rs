//! What the connection handshake carries: nonces, proofs, and the identity a client
//! claims for its connection. The proofs themselves are computed by weft-rpc (this
//! crate does no cryptography, as it does no I/O).
//!
//! The exchange (every connection, before any other request):
//! 1. client `Hello { client }`; server `Challenge { nonce: server nonce }` (or
//!    `MungeChallenge`, from a metadata manager in `munge` identity mode: the client
//!    should claim an `Identity::Munge` for the connection);
//! 2. client `Authenticate { nonce: client nonce, identity, proof }`, the proof a MAC
//!    under the cluster key over both nonces and the identity; the server checks it and
//!    answers `Hello { server_id, roles, incarnation, proof }`, its own MAC over both
//!    nonces, which the client checks in turn.

use crate::codec::{DecodeError, Reader, Wire, Writer};

/// Bytes of each side's nonce.
pub const NONCE_BYTES: usize = 32;
/// Bytes of a proof (an HMAC-SHA256 tag).
pub const PROOF_BYTES: usize = 32;
/// Largest identity credential (a MUNGE credential is a few hundred bytes).
pub const CREDENTIAL_BYTES_MAX: usize = 8192;
/// Largest message a server reads before the handshake is done: the handshake's
/// requests fit in it with room to spare, so an unauthenticated peer never makes a
/// server hold more than this per connection.
pub const HANDSHAKE_MESSAGE_BYTES_MAX: u32 = 16 * 1024;

/// Who a connection acts for, as the client claims it in the handshake; the client's
/// proof covers it, so it cannot be changed in transit.
///
/// `Cluster` is the holder of the cluster key, whose requests carry their own
/// credentials; `Munge` carries a MUNGE credential the metadata manager decodes (in
/// `munge` identity mode) to learn the connection's uid and gid. A server that does
/// not know a kind refuses the handshake with a clear error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// A member of the cluster: proven by the key alone.
    Cluster,
    /// A MUNGE credential (the text `munge -n` prints), never empty.
    Munge(Vec<u8>),
}

impl Identity {
    /// The kind's number on the wire.
    pub fn kind(&self) -> u8 {
        match self {
            Identity::Cluster => 0,
            Identity::Munge(_) => 1,
        }
    }

    /// The kind's credential bytes (empty for `Cluster`).
    pub fn credential(&self) -> &[u8] {
        match self {
            Identity::Cluster => &[],
            Identity::Munge(credential) => credential,
        }
    }
}

impl Wire for Identity {
    fn encode(&self, w: &mut Writer) {
        w.u8(self.kind());
        w.bytes(self.credential());
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let kind = r.u8()?;
        let credential = r.bytes_max(CREDENTIAL_BYTES_MAX)?;
        match kind {
            0 if credential.is_empty() => Ok(Identity::Cluster),
            0 => Err(DecodeError::Invalid {
                what: "cluster identity credential length",
                value: credential.len() as u64,
            }),
            1 if !credential.is_empty() => Ok(Identity::Munge(credential.to_vec())),
            1 => Err(DecodeError::Invalid {
                what: "munge identity credential length",
                value: 0,
            }),
            k => Err(DecodeError::Invalid {
                what: "identity kind",
                value: k as u64,
            }),
        }
    }
}

/// A fixed-length byte string (nonce or proof) read with its length prefix.
pub fn read_fixed<const N: usize>(r: &mut Reader<'_>, what: &'static str) -> Result<[u8; N], DecodeError> {
    let b = r.bytes_max(N)?;
    b.try_into().map_err(|_| DecodeError::Invalid {
        what,
        value: b.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_round_trip_and_unknown_kinds_are_refused() {
        let bytes = Identity::Cluster.to_bytes();
        assert_eq!(
            Identity::decode(&mut Reader::new(&bytes)).unwrap(),
            Identity::Cluster
        );
        let mut w = Writer::default();
        w.u8(7);
        w.bytes(b"credential");
        assert!(matches!(
            Identity::decode(&mut Reader::new(&w.bytes)),
            Err(DecodeError::Invalid {
                what: "identity kind",
                value: 7
            })
        ));
        // A cluster identity carries no credential.
        let mut w = Writer::default();
        w.u8(0);
        w.bytes(b"x");
        assert!(Identity::decode(&mut Reader::new(&w.bytes)).is_err());
        // A munge identity round-trips and must carry a credential.
        let munge = Identity::Munge(b"MUNGE:abc:".to_vec());
        assert_eq!(
            Identity::decode(&mut Reader::new(&munge.to_bytes())).unwrap(),
            munge
        );
        let mut w = Writer::default();
        w.u8(1);
        w.bytes(b"");
        assert!(Identity::decode(&mut Reader::new(&w.bytes)).is_err());
    }

    #[test]
    fn fixed_strings_must_have_their_length() {
        let mut w = Writer::default();
        w.bytes(&[1; 31]);
        assert!(read_fixed::<32>(&mut Reader::new(&w.bytes), "nonce").is_err());
        let mut w = Writer::default();
        w.bytes(&[1; 33]);
        assert!(read_fixed::<32>(&mut Reader::new(&w.bytes), "nonce").is_err());
        let mut w = Writer::default();
        w.bytes(&[1; 32]);
        assert_eq!(
            read_fixed::<32>(&mut Reader::new(&w.bytes), "nonce").unwrap(),
            [1; 32]
        );
    }
}

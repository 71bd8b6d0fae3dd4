//! The fixed-size frame header and the limits every frame is checked against.

use crate::codec::DecodeError;

/// "WEFT" in ASCII.
pub const FRAME_MAGIC: u32 = 0x5745_4654;
/// Bumped on any incompatible change; peers with another version are refused.
pub const PROTOCOL_VERSION: u16 = 8;
pub const FRAME_HEADER_BYTES: usize = 32;
/// Largest encoded message (the part between header and bulk data).
pub const MESSAGE_BYTES_MAX: u32 = 1 << 20;
/// Largest bulk payload in one frame. Larger transfers are split by the client.
pub const DATA_BYTES_MAX: u64 = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    Request = 0,
    Response = 1,
}

/// Byte layout, little endian: 0 magic u32, 4 version u16, 6 kind u8, 7 reserved,
/// 8 opcode u16, 10 reserved u16, 12 request_id u64, 20 message_len u32, 24 data_len u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub version: u16,
    pub kind: FrameKind,
    pub opcode: u16,
    pub request_id: u64,
    pub message_len: u32,
    pub data_len: u64,
}

impl FrameHeader {
    pub fn encode(&self) -> [u8; FRAME_HEADER_BYTES] {
        let mut b = [0u8; FRAME_HEADER_BYTES];
        b[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6] = self.kind as u8;
        b[8..10].copy_from_slice(&self.opcode.to_le_bytes());
        b[12..20].copy_from_slice(&self.request_id.to_le_bytes());
        b[20..24].copy_from_slice(&self.message_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.data_len.to_le_bytes());
        b
    }

    /// Decodes and checks a header. The version is returned as read, without being
    /// compared, so that a server can answer a mismatch with a clear error.
    pub fn decode(b: &[u8; FRAME_HEADER_BYTES]) -> Result<FrameHeader, DecodeError> {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
        if magic != FRAME_MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        let kind = match b[6] {
            0 => FrameKind::Request,
            1 => FrameKind::Response,
            k => return Err(DecodeError::BadKind(k)),
        };
        let message_len = u32::from_le_bytes(b[20..24].try_into().unwrap());
        let data_len = u64::from_le_bytes(b[24..32].try_into().unwrap());
        if message_len > MESSAGE_BYTES_MAX {
            return Err(DecodeError::TooLarge {
                what: "message",
                len: message_len as u64,
                max: MESSAGE_BYTES_MAX as u64,
            });
        }
        if data_len > DATA_BYTES_MAX {
            return Err(DecodeError::TooLarge {
                what: "bulk data",
                len: data_len,
                max: DATA_BYTES_MAX,
            });
        }
        Ok(FrameHeader {
            version: u16_at(4),
            kind,
            opcode: u16_at(8),
            request_id: u64::from_le_bytes(b[12..20].try_into().unwrap()),
            message_len,
            data_len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_limits_hold() {
        let h = FrameHeader {
            version: PROTOCOL_VERSION,
            kind: FrameKind::Response,
            opcode: 7,
            request_id: 0xdead_beef_0102,
            message_len: 99,
            data_len: 1 << 20,
        };
        assert_eq!(FrameHeader::decode(&h.encode()).unwrap(), h);
        let mut big = h;
        big.data_len = DATA_BYTES_MAX + 1;
        assert!(matches!(
            FrameHeader::decode(&big.encode()),
            Err(DecodeError::TooLarge { .. })
        ));
        let mut bad = h.encode();
        bad[0] ^= 1;
        assert!(matches!(FrameHeader::decode(&bad), Err(DecodeError::BadMagic(_))));
    }
}

//! Reading and writing whole frames on a byte stream.

use std::io::{self, IoSlice, Read, Write};
use weft_proto::frame::{FrameHeader, FrameKind, FRAME_HEADER_BYTES, PROTOCOL_VERSION};
use weft_proto::DecodeError;

/// Why a frame could not be read.
#[derive(Debug)]
pub enum ReadFrameError {
    /// The peer closed the connection between frames.
    Closed,
    Io(io::Error),
    Header(DecodeError),
}

/// Reads one header; a clean end of stream before its first byte is `Closed`.
pub fn read_header(stream: &mut impl Read) -> Result<FrameHeader, ReadFrameError> {
    let mut buf = [0u8; FRAME_HEADER_BYTES];
    let mut filled = 0;
    while filled < FRAME_HEADER_BYTES {
        match stream.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Err(ReadFrameError::Closed),
            Ok(0) => return Err(ReadFrameError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadFrameError::Io(e)),
        }
    }
    FrameHeader::decode(&buf).map_err(ReadFrameError::Header)
}

/// Reads exactly `len` bytes into a new vector.
pub fn read_exact_vec(stream: &mut impl Read, len: u64) -> io::Result<Vec<u8>> {
    let mut v = vec![0u8; len as usize];
    stream.read_exact(&mut v)?;
    Ok(v)
}

/// Writes a frame: header and message in one write, then the bulk data.
pub fn write_frame(
    stream: &mut impl Write,
    kind: FrameKind,
    opcode: u16,
    request_id: u64,
    message: &[u8],
    data: &[u8],
) -> io::Result<()> {
    write_frame_parts(stream, kind, opcode, request_id, message, &[data])
}

/// Writes a frame whose bulk data is the concatenation of `parts`, gathered by the
/// kernel (writev) rather than copied into one buffer first.
pub fn write_frame_parts(
    stream: &mut impl Write,
    kind: FrameKind,
    opcode: u16,
    request_id: u64,
    message: &[u8],
    parts: &[&[u8]],
) -> io::Result<()> {
    let data_len: usize = parts.iter().map(|p| p.len()).sum();
    let header = FrameHeader {
        version: PROTOCOL_VERSION,
        kind,
        opcode,
        request_id,
        message_len: message.len() as u32,
        data_len: data_len as u64,
    };
    let mut head = Vec::with_capacity(FRAME_HEADER_BYTES + message.len());
    head.extend_from_slice(&header.encode());
    head.extend_from_slice(message);
    if data_len <= 16 * 1024 {
        // Small payloads ride in the same segment as the header.
        for p in parts {
            head.extend_from_slice(p);
        }
        return stream.write_all(&head);
    }
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(parts.len() + 1);
    slices.push(IoSlice::new(&head));
    slices.extend(parts.iter().filter(|p| !p.is_empty()).map(|p| IoSlice::new(p)));
    // At most IOV_MAX slices per call; advance through the rest.
    let mut rest: &mut [IoSlice<'_>] = &mut slices;
    while !rest.is_empty() {
        let batch = rest.len().min(1024);
        match stream.write_vectored(&rest[..batch]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

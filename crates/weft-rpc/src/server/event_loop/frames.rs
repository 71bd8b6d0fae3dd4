//! Frames in and replies out: a connection's bytes fed through its read state (header,
//! message, bulk data straight into place), each complete request dispatched inline or
//! to a worker, and the frames that answer it.

use super::*;

/// Bytes a request's reply may hold in memory, charged before it runs. A shared-memory
/// call's reply goes into the client's segment, but a handler without a direct path
/// copies its data through a buffer of up to the region's size.
pub(super) fn charge_hint(handler: &dyn super::super::Handler, request: &Request) -> u64 {
    match request {
        Request::ShmCall { len, .. } => (*len).min(SEGMENT_BYTES_MAX),
        // Placed into the client's pool, or (a handler without a file path) held
        // until copied there.
        Request::ShmScatter { request, .. } => handler.reply_bytes_hint(request),
        other => handler.reply_bytes_hint(other),
    }
}

/// A frame's header and message.
pub fn frame_head(opcode: u16, request_id: u64, message: &[u8], data_len: u64) -> Vec<u8> {
    let header = FrameHeader {
        version: PROTOCOL_VERSION,
        kind: FrameKind::Response,
        opcode,
        request_id,
        message_len: message.len() as u32,
        data_len,
    };
    let mut head = Vec::with_capacity(FRAME_HEADER_BYTES + message.len());
    head.extend_from_slice(&header.encode());
    head.extend_from_slice(message);
    head
}

pub fn error_frame(opcode: u16, request_id: u64, error: WireError, charged: u64, counted: bool) -> OutFrame {
    let head = frame_head(opcode, request_id, &encode_result(&Err(error)), 0);
    OutFrame::new(head, Body::Bytes(Vec::new()), charged, counted)
}

/// Writes a connection's last frame at once, without waiting: true if all of it went
/// out (a small frame on a socket the peer reads always does).
pub(super) fn write_final(stream: &ServerStream, error: &WireError, opcode: u16, request_id: u64) -> bool {
    let head = frame_head(opcode, request_id, &encode_result(&Err(error.clone())), 0);
    stream.write_all_now(&head)
}

impl EventLoop {
    pub(super) fn read_client(&mut self, client: &mut Client) -> Option<End> {
        if !client.stash.is_empty() && client.pause.is_none() {
            let stash = std::mem::take(&mut client.stash);
            if let Err(end) = self.feed(client, &stash) {
                return Some(end);
            }
        }
        loop {
            if client.pause.is_some() {
                return None;
            }
            // Large parts are read straight into their buffers.
            let direct = match &mut client.read {
                ReadState::Data { buf, got, .. } | ReadState::Message { buf, got, .. }
                    if buf.len() - *got >= SCRATCH_BYTES =>
                {
                    Some(client.conn.read(&mut buf[*got..]))
                }
                _ => None,
            };
            let result = match direct {
                Some(r) => r.map(|n| (n, true)),
                None => client.conn.read(&mut self.scratch).map(|n| (n, false)),
            };
            match result {
                Ok((0, _)) => return Some(End::Now),
                Ok((n, direct)) => {
                    client.last_read = Instant::now();
                    if matches!(client.phase, Phase::Draining { .. }) {
                        continue;
                    }
                    let step = if direct {
                        self.advance_direct(client, n)
                    } else {
                        let bytes = std::mem::take(&mut self.scratch);
                        let step = self.feed(client, &bytes[..n]);
                        self.scratch = bytes;
                        step
                    };
                    if let Err(end) = step {
                        return Some(end);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Some(End::Now),
            }
        }
    }

    /// `n` bytes were read straight into the current part's buffer.
    pub(super) fn advance_direct(&mut self, client: &mut Client, n: usize) -> Result<(), End> {
        let complete = match &mut client.read {
            ReadState::Data { buf, got, .. } | ReadState::Message { buf, got, .. } => {
                *got += n;
                *got == buf.len()
            }
            _ => unreachable!("direct reads go to a message or data buffer"),
        };
        if complete {
            self.part_done(client)?;
        }
        Ok(())
    }

    /// Consumes `bytes` into the connection's frames; what arrives while the connection
    /// is paused is kept for later.
    pub(super) fn feed(&mut self, client: &mut Client, mut bytes: &[u8]) -> Result<(), End> {
        while !bytes.is_empty() {
            if client.pause.is_some() {
                client.stash.extend_from_slice(bytes);
                return Ok(());
            }
            let complete = match &mut client.read {
                ReadState::Header { buf, got } => {
                    if *got == 0 {
                        client.frame_deadline = Some(Instant::now() + self.shared.limits.frame_deadline);
                    }
                    let n = bytes.len().min(FRAME_HEADER_BYTES - *got);
                    buf[*got..*got + n].copy_from_slice(&bytes[..n]);
                    *got += n;
                    bytes = &bytes[n..];
                    *got == FRAME_HEADER_BYTES
                }
                ReadState::Message { buf, got, .. } | ReadState::Data { buf, got, .. } => {
                    let n = bytes.len().min(buf.len() - *got);
                    buf[*got..*got + n].copy_from_slice(&bytes[..n]);
                    *got += n;
                    bytes = &bytes[n..];
                    *got == buf.len()
                }
                ReadState::Skip { left } => {
                    let n = (bytes.len() as u64).min(*left);
                    *left -= n;
                    bytes = &bytes[n as usize..];
                    *left == 0
                }
                ReadState::AwaitMessage { .. } | ReadState::AwaitData { .. } => {
                    unreachable!("awaiting states are paused")
                }
            };
            if complete {
                self.part_done(client)?;
            }
        }
        Ok(())
    }

    /// The part being read is complete: move to the next.
    pub(super) fn part_done(&mut self, client: &mut Client) -> Result<(), End> {
        match std::mem::replace(&mut client.read, ReadState::start()) {
            ReadState::Header { buf, .. } => self.header_done(client, &buf),
            ReadState::Message {
                header, buf, charged, ..
            } => self.message_done(client, header, buf, charged),
            ReadState::Data {
                header,
                request,
                buf,
                charged,
                ..
            } => {
                self.dispatch(client, header, *request, buf, charged);
                Ok(())
            }
            ReadState::Skip { .. } => {
                client.frame_deadline = None;
                Ok(())
            }
            other => {
                client.read = other;
                Ok(())
            }
        }
    }

    pub(super) fn header_done(
        &mut self,
        client: &mut Client,
        bytes: &[u8; FRAME_HEADER_BYTES],
    ) -> Result<(), End> {
        // After a bad header the stream cannot be re-synchronised: say why, close.
        let header = FrameHeader::decode(bytes).map_err(|e| End::Tell(WireError::from(e), 0, 0))?;
        let (opcode, id) = (header.opcode, header.request_id);
        if header.version != PROTOCOL_VERSION {
            return Err(End::Tell(
                WireError::new(
                    ErrorCode::ProtocolVersion,
                    format!(
                        "client speaks Weft protocol version {}, this server speaks version {PROTOCOL_VERSION}; upgrade the older side",
                        header.version
                    ),
                ),
                opcode,
                id,
            ));
        }
        if header.kind != FrameKind::Request {
            return Err(End::Tell(
                WireError::new(ErrorCode::Malformed, "expected a request frame"),
                opcode,
                id,
            ));
        }
        if !matches!(client.phase, Phase::Open) {
            let expected = match client.phase {
                Phase::AwaitHello => Opcode::Hello,
                _ => Opcode::Authenticate,
            };
            if opcode != expected as u16
                || header.data_len != 0
                || header.message_len > HANDSHAKE_MESSAGE_BYTES_MAX
            {
                return Err(End::Tell(
                    WireError::new(
                        ErrorCode::PermissionDenied,
                        "authenticate first: a connection starts with Hello and Authenticate (a client of this cluster, with its key)",
                    ),
                    opcode,
                    id,
                ));
            }
            return self.start_message(client, header, 0);
        }
        client.read = ReadState::AwaitMessage { header };
        self.admit(client)
    }

    pub(super) fn start_message(
        &mut self,
        client: &mut Client,
        header: FrameHeader,
        charged: u64,
    ) -> Result<(), End> {
        client.read = ReadState::Message {
            header,
            buf: vec![0; header.message_len as usize],
            got: 0,
            charged,
        };
        if header.message_len == 0 {
            return self.part_done(client);
        }
        Ok(())
    }

    pub(super) fn message_done(
        &mut self,
        client: &mut Client,
        header: FrameHeader,
        message: Vec<u8>,
        charged: u64,
    ) -> Result<(), End> {
        let decoded = Request::decode(header.opcode, &message);
        drop(message);
        match client.phase {
            Phase::AwaitHello => {
                let Ok(Request::Hello { client: name }) = decoded else {
                    return Err(End::Tell(
                        malformed_handshake(decoded.err()),
                        header.opcode,
                        header.request_id,
                    ));
                };
                let server_nonce = crate::auth::nonce().map_err(|e| {
                    End::Tell(
                        WireError::new(ErrorCode::Internal, format!("no random bytes: {e}")),
                        header.opcode,
                        header.request_id,
                    )
                })?;
                let challenge = if self.shared.identity.munge {
                    Response::MungeChallenge { nonce: server_nonce }
                } else {
                    Response::Challenge { nonce: server_nonce }
                };
                self.reply(client, &header, Ok(challenge));
                client.phase = Phase::AwaitAuthenticate {
                    server_nonce,
                    client: name,
                };
                client.frame_deadline = None;
                Ok(())
            }
            Phase::AwaitAuthenticate { .. } => {
                let Ok(Request::Authenticate {
                    nonce,
                    identity,
                    proof,
                }) = decoded
                else {
                    return Err(End::Tell(
                        malformed_handshake(decoded.err()),
                        header.opcode,
                        header.request_id,
                    ));
                };
                self.authenticate(client, &header, nonce, identity, proof)
            }
            Phase::Open => {
                let request = match decoded {
                    Ok(Request::Hello { .. }) | Ok(Request::Authenticate { .. }) => Err(WireError::new(
                        ErrorCode::Malformed,
                        "this connection is authenticated already",
                    )),
                    Ok(r) => Ok(r),
                    Err(e) => Err(WireError::from(e)),
                };
                let request = match request {
                    Ok(Request::ServerInfo) => Err(None),
                    Ok(Request::ShmAttach { bytes }) => {
                        match client.conn.shm.attach(bytes, SEGMENT_BYTES_MAX) {
                            Ok(()) => Err(Some(Ok(Response::Done))),
                            Err(e) => Err(Some(Err(e))),
                        }
                    }
                    Ok(Request::ShmCall { .. }) if header.data_len > 0 => Err(Some(Err(WireError::new(
                        ErrorCode::Malformed,
                        "a shared-memory call carries its data in the segment, not the frame",
                    )))),
                    Ok(Request::ShmAttachPool { bytes }) => {
                        match client.conn.shm.attach_pool(bytes, SEGMENT_BYTES_MAX) {
                            Ok(()) => Err(Some(Ok(Response::Done))),
                            Err(e) => Err(Some(Err(e))),
                        }
                    }
                    Ok(Request::ShmScatter { .. }) if header.data_len > 0 => Err(Some(Err(WireError::new(
                        ErrorCode::Malformed,
                        "a read placed into the pool carries no data",
                    )))),
                    Ok(r) => Ok(r),
                    Err(e) => Err(Some(Err(e))),
                };
                match request {
                    Ok(request) => {
                        client.read = ReadState::AwaitData {
                            header,
                            request: Box::new(request),
                            charged,
                            slot: false,
                        };
                        self.admit(client)
                    }
                    Err(error) => {
                        // Answered here; the frame's lengths were sound, so its data
                        // is skipped and the connection goes on.
                        self.release(client.conn.peer, charged);
                        let answer = match error {
                            None => Ok(Response::ServerInfo {
                                protocol_version: PROTOCOL_VERSION,
                                build: self.shared.identity.build.to_owned(),
                            }),
                            Some(answer) => answer,
                        };
                        self.reply(client, &header, answer);
                        if header.data_len > 0 {
                            client.read = ReadState::Skip {
                                left: header.data_len,
                            };
                        } else {
                            client.frame_deadline = None;
                        }
                        Ok(())
                    }
                }
            }
            Phase::Draining { .. } => Ok(()),
        }
    }

    pub(super) fn dispatch(
        &mut self,
        client: &mut Client,
        header: FrameHeader,
        request: Request,
        data: Vec<u8>,
        charged: u64,
    ) {
        client.frame_deadline = None;
        let job = Job {
            conn: client.conn.clone(),
            request,
            data,
            opcode: header.opcode,
            request_id: header.request_id,
            charged,
            ticket: None,
            arrived: Instant::now(),
        };
        // A quick request (the handler says which) is run here, at once: handing it
        // to a worker costs more than running it.
        let inline = self.shared.handler.runs_inline(&job.request);
        super::super::dispatch(&self.shared, job, inline);
    }

    /// Answers a request from the loop itself (handshake, server info, refusals that
    /// keep the connection).
    pub(super) fn reply(&self, client: &Client, header: &FrameHeader, result: Result<Response, WireError>) {
        let head = frame_head(header.opcode, header.request_id, &encode_result(&result), 0);
        client.conn.send(
            &self.shared,
            OutFrame::new(head, Body::Bytes(Vec::new()), 0, false),
        );
    }

    pub(super) fn release(&self, peer: PeerKey, n: u64) {
        if self.shared.peers.release(peer, n) {
            self.shared.wake_all();
        }
    }

    /// Drops the frame being read: its bytes, its request slot, its wait.
    pub(super) fn drop_partial(&mut self, client: &mut Client) {
        if let Some(Pause::Budget(_)) = client.pause {
            self.stop_waiting(client);
        }
        client.pause = None;
        client.stash = Vec::new();
        client.frame_deadline = None;
        let read = std::mem::replace(&mut client.read, ReadState::start());
        self.release(client.conn.peer, read.charged());
        if let ReadState::AwaitData { slot: true, .. } | ReadState::Data { .. } = read {
            // The request never reached a worker: give its slot back.
            client.conn.abandon_slot(&self.shared);
        }
    }
}

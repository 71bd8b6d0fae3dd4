//! Who may talk: the handshake (authentication, the peer's uid on a Unix socket), the
//! admission of a request against the per-peer limits, and pausing a connection's
//! reading until it may go on.

use super::*;

pub(super) fn malformed_handshake(e: Option<weft_proto::DecodeError>) -> WireError {
    match e {
        Some(e) => {
            let mut e = WireError::from(e);
            e.message = format!("bad handshake: {}", e.message);
            e
        }
        None => WireError::new(ErrorCode::PermissionDenied, "authenticate first"),
    }
}

/// The user id of a Unix-socket peer, from the kernel.
pub(super) fn peer_uid(fd: std::os::fd::RawFd) -> Option<u32> {
    crate::stream::peer_cred(fd).map(|cred| cred.uid)
}

impl EventLoop {
    pub(super) fn authenticate(
        &mut self,
        client: &mut Client,
        header: &FrameHeader,
        client_nonce: [u8; NONCE_BYTES],
        identity: Identity,
        proof: [u8; weft_proto::handshake::PROOF_BYTES],
    ) -> Result<(), End> {
        let Phase::AwaitAuthenticate {
            server_nonce,
            client: name,
        } = std::mem::replace(&mut client.phase, Phase::Open)
        else {
            unreachable!("called in the authenticate phase");
        };
        let key = &self.shared.key;
        if !key.verify(Side::Client, &server_nonce, &client_nonce, &identity, &proof) {
            let failure = self.shared.peers.failed(client.conn.peer, Instant::now());
            let limits = &self.shared.limits;
            if failure.failures == 1 || failure.limit_now {
                let window = limits.auth_failure_window.as_secs();
                eprintln!(
                    "weftd: refused {} ({}): it does not hold this cluster's key{}",
                    describe(client),
                    name,
                    match (failure.limit_now, failure.banned_now) {
                        (true, true) => format!("; {} failures: refusing this user for {window} s", failure.failures),
                        (true, false) => format!(
                            "; {} failures within {window} s (an address is never refused for them: others may share it)",
                            failure.failures
                        ),
                        _ => String::new(),
                    }
                );
            }
            return Err(End::Tell(
                WireError::new(
                    ErrorCode::PermissionDenied,
                    "authentication failed: this client does not hold the key this server asks for (a server of the cluster: the cluster's key, set WEFT_KEY to its file; a job's delegate: that job's key, which only its processes get)",
                ),
                header.opcode,
                header.request_id,
            ));
        }
        // Only now does the connection count against its peer's cap: strangers holding
        // handshakes open never fill it.
        if let Err(reason) = self.shared.peers.established(client.conn.peer, client.conn.id.0) {
            return Err(End::Tell(
                WireError::new(ErrorCode::Busy, reason),
                header.opcode,
                header.request_id,
            ));
        }
        client.established = true;
        let server_proof = key.proof(Side::Server, &server_nonce, &client_nonce, &identity);
        let peer = Peer {
            addr: client.addr,
            uid: client.uid,
            client: name,
            identity,
        };
        // The handler hears of the connection before its first request, and only of
        // connections that proved themselves.
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.shared.handler.connection_opened(client.conn.id, &peer)
        }));
        if opened.is_err() {
            eprintln!("weftd: the handler panicked while opening {}", client.conn.id);
        }
        client.conn.state.lock().unwrap().opened = true;
        let identity = &self.shared.identity;
        self.reply(
            client,
            header,
            Ok(Response::Hello {
                server_id: identity.server_id,
                roles: identity.roles,
                incarnation: self.shared.incarnation.load(std::sync::atomic::Ordering::SeqCst),
                proof: server_proof,
            }),
        );
        client.frame_deadline = None;
        Ok(())
    }

    /// Tries to take what the paused step needs (bytes, a request slot); pauses the
    /// connection if it cannot.
    pub(super) fn admit(&mut self, client: &mut Client) -> Result<(), End> {
        let peer = client.conn.peer;
        match std::mem::replace(&mut client.read, ReadState::start()) {
            ReadState::AwaitMessage { header } => {
                let need = header.message_len as u64;
                match self.shared.peers.try_charge(peer, need, 0) {
                    Some(charged) => {
                        self.unpause(client);
                        self.start_message(client, header, charged)
                    }
                    None => {
                        client.read = ReadState::AwaitMessage { header };
                        self.pause(client, Pause::Budget(need));
                        Ok(())
                    }
                }
            }
            ReadState::AwaitData {
                header,
                request,
                charged,
                mut slot,
            } => {
                if !slot {
                    let mut state = client.conn.state.lock().unwrap();
                    if state.inflight >= self.shared.limits.requests_inflight_max {
                        state.wants_resume = true;
                        drop(state);
                        client.read = ReadState::AwaitData {
                            header,
                            request,
                            charged,
                            slot,
                        };
                        self.pause(client, Pause::Inflight);
                        return Ok(());
                    }
                    state.inflight += 1;
                    slot = true;
                }
                let need = header.data_len + charge_hint(&*self.shared.handler, &request);
                match self.shared.peers.try_charge(peer, need, charged) {
                    Some(more) => {
                        self.unpause(client);
                        client.read = ReadState::Data {
                            header,
                            request,
                            buf: vec![0; header.data_len as usize],
                            got: 0,
                            charged: charged + more,
                        };
                        if header.data_len == 0 {
                            return self.part_done(client);
                        }
                        Ok(())
                    }
                    None => {
                        client.read = ReadState::AwaitData {
                            header,
                            request,
                            charged,
                            slot,
                        };
                        self.pause(client, Pause::Budget(need));
                        Ok(())
                    }
                }
            }
            other => {
                client.read = other;
                Ok(())
            }
        }
    }

    /// Pauses the connection. A pause for bytes (`Pause::Budget`) follows a refused
    /// `try_charge`, which counted the connection as waiting already (so that a release
    /// right after the refusal wakes it); a wait for bytes it was in before ends here.
    pub(super) fn pause(&mut self, client: &mut Client, why: Pause) {
        let waited = matches!(client.pause, Some(Pause::Budget(_)));
        let waits = matches!(why, Pause::Budget(_));
        match (waited, waits) {
            // Refused anew: the new refusal's count replaces the old one; the
            // connection keeps its place among the waiting.
            (true, true) => self.shared.peers.wait_ended(),
            (true, false) => self.stop_waiting(client),
            (false, true) => self.waiting.push_back(client.conn.token),
            (false, false) => {}
        }
        client.pause = Some(why);
        client.frame_deadline = None;
    }

    pub(super) fn unpause(&mut self, client: &mut Client) {
        if let Some(Pause::Budget(_)) = client.pause {
            self.stop_waiting(client);
        }
        if client.pause.take().is_some() {
            client.frame_deadline = Some(Instant::now() + self.shared.limits.frame_deadline);
        }
    }

    pub(super) fn stop_waiting(&mut self, client: &Client) {
        self.shared.peers.wait_ended();
        self.waiting.retain(|t| *t != client.conn.token);
    }

    /// Goes on with a paused connection, if what it waits for is there now.
    pub(super) fn resume(&mut self, token: mio::Token) {
        let Some(mut client) = self.clients.remove(&token) else {
            return;
        };
        let mut end = None;
        if client.pause.is_some() {
            if let Err(e) = self.admit(&mut client) {
                end = Some(e);
            }
        }
        if end.is_none() && client.pause.is_none() {
            end = self.read_client(&mut client);
        }
        self.clients.insert(token, client);
        if let Some(end) = end {
            self.end(token, end);
        }
    }
}

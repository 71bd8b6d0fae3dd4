//! Capabilities and vouching: write and read capabilities granted with opens and
//! creates, and lookups vouched for (no write capability live since a stamp).

use super::*;

impl MetaService {
    /// Grants capabilities with `issuer` (set once; without one, `GrantCapability`
    /// answers that the cluster asks for none).
    pub fn set_capability_issuer(&self, issuer: Arc<dyn CapabilityIssuer>) {
        let now = unix_ms();
        let sample = issuer.issue(InodeId(0), 0, now);
        let lifetime = sample.expiry_ms.saturating_sub(sample.issued_ms);
        if self.capabilities.set(issuer).is_ok() {
            let _ = self.writers.set(crate::writers::Writers::new(now, lifetime));
        }
    }

    /// `Vouched`: `request`'s attributes, and for a regular file outside the cache tier
    /// (whose managers write back on their own) the manager's vouch (see `writers`);
    /// when the file's size is known under that vouch (`sizes`), the attributes carry
    /// it (`AttrSized`) and the client need not ask the io servers.
    pub(super) fn vouched(&self, cred_request: Request) -> Result<Response, WireError> {
        let store = &self.store;
        let mut attr = match cred_request {
            Request::Lookup { cred, parent, name } => store.lookup(&cred, parent, &name)?,
            Request::Revalidate { cred, steps } => store.revalidate(&cred, &steps)?,
            Request::GetAttr { cred, inode } => store.getattr(&cred, inode)?,
            Request::Resolve { cred, path } => store.resolve(&cred, &path)?,
            other => {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("{:?} is answered with no vouch", other.opcode()),
                ))
            }
        };
        let vouch = self.vouch(&attr);
        if let Some(vouch) = vouch {
            if self.size_under(&mut attr, vouch) {
                return Ok(Response::AttrSized { attr, vouch });
            }
        }
        Ok(Response::AttrVouched { attr, vouch })
    }

    /// The manager's vouch for `attr`'s file: a regular file outside the cache tier
    /// (whose managers write back on their own) with no write capability live (see
    /// `writers`).
    fn vouch(&self, attr: &Attr) -> Option<u64> {
        match self.writers.get() {
            Some(writers) if attr.kind == FileKind::File && !attr.cache.uses_tier() => {
                writers.vouch(attr.inode, unix_ms())
            }
            _ => None,
        }
    }

    /// Puts the size (blocks, modification time) the io servers told the manager under
    /// `vouch` into `attr`, if it knows one (`sizes`); if not, the file is measured in
    /// the background, for the stats and listings to come (a file last written before
    /// this manager started, say).
    fn size_under(&self, attr: &mut Attr, vouch: u64) -> bool {
        let Some(measured) = self.sizes.under(attr.inode, vouch, &attr.layout) else {
            self.sizes.want(attr.inode);
            return false;
        };
        attr.size = measured.size;
        attr.blocks = measured.blocks;
        attr.mtime = attr.mtime.max(measured.mtime);
        attr.ctime = attr.ctime.max(measured.mtime);
        true
    }

    /// `ReaddirPlus` and `ReaddirSized`: a page of entries with their attributes; for
    /// `ReaddirSized`, each regular file's size filled in where the manager knows it
    /// under its vouch.
    pub(super) fn listing_plus(&self, request: Request) -> Result<Response, WireError> {
        let (sized, cred, dir, after, max) = match request {
            Request::ReaddirPlus {
                cred,
                dir,
                after,
                max_entries,
            } => (false, cred, dir, after, max_entries),
            Request::ReaddirSized {
                cred,
                dir,
                after,
                max_entries,
            } => (true, cred, dir, after, max_entries),
            other => {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("{:?} is no listing", other.opcode()),
                ))
            }
        };
        let (mut entries, more) = self.store.readdir_plus(&cred, dir, &after, max)?;
        if !sized {
            return Ok(Response::EntriesPlus { entries, more });
        }
        let sized = entries
            .iter_mut()
            .map(|(_, attr)| self.vouch(attr).is_some_and(|vouch| self.size_under(attr, vouch)))
            .collect();
        Ok(Response::EntriesSized { entries, sized, more })
    }

    /// `VouchedReadable`: `vouched`'s answer, and for a regular file a read capability
    /// as `GrantCapability` grants it (none when refused: the caller asks at its first
    /// read, and hears why then).
    pub(super) fn vouched_readable(
        &self,
        caller: &Caller,
        mut request: Request,
    ) -> Result<Response, WireError> {
        // Every vouchable request names its caller; one that did not would get no grant.
        let Some(cred) = request.cred_mut().cloned() else {
            return self.vouched(request);
        };
        let (attr, vouch, sized) = match self.vouched(request)? {
            Response::AttrSized { attr, vouch } => (attr, Some(vouch), true),
            Response::AttrVouched { attr, vouch } => (attr, vouch, false),
            other => return Ok(other),
        };
        let capability = (attr.kind == FileKind::File)
            .then(|| self.grant(caller, &cred, attr.inode, weft_proto::capability::rights::READ))
            .and_then(Result::ok)
            .map(|(capability, _)| capability);
        Ok(Response::ReadableVouched {
            attr,
            vouch,
            sized,
            capability,
        })
    }

    /// `GrantCapability`: the permission check of an open, then a signed capability. A
    /// verified user's grant is recorded (`handles`): it is the open that the user's
    /// handle-based requests, and reads of the file once removed, are checked against.
    pub(super) fn grant_capability(
        &self,
        caller: &Caller,
        cred: &Cred,
        inode: InodeId,
        rights: u8,
    ) -> Result<Response, WireError> {
        self.grant(caller, cred, inode, rights)
            .map(|(capability, _)| Response::Capability(capability))
    }

    /// `grant_capability`'s capability, and the stamp of its grant among the write
    /// grants (`Writers::granted`; 0 for a read capability or without the table).
    fn grant(
        &self,
        caller: &Caller,
        cred: &Cred,
        inode: InodeId,
        rights: u8,
    ) -> Result<(weft_proto::capability::Capability, u64), WireError> {
        use weft_proto::capability::rights::{READ, WRITE};
        let Some(issuer) = self.capabilities.get() else {
            return Err(WireError::new(
                ErrorCode::Unsupported,
                "this cluster's io servers ask for no capabilities",
            ));
        };
        let mut want = 0;
        if rights & READ != 0 {
            want |= crate::store::MAY_READ;
        }
        if rights & WRITE != 0 {
            want |= crate::store::MAY_WRITE;
        }
        let issued = issuer.issue_time();
        let orphan_read = match caller {
            Caller::Trusted => true,
            Caller::User(user) => self.handles.holds(inode, user.uid, rights, unix_ms()),
        };
        self.store.may_access_data(cred, inode, want, orphan_read)?;
        if rights & WRITE != 0 {
            self.quota_may_grant_write(inode)?;
        }
        let capability = issuer.issue(inode, rights, issued);
        let mut stamp = 0;
        if rights & WRITE != 0 {
            self.quota_granted(inode, capability.expiry_ms);
            if let Some(writers) = self.writers.get() {
                stamp = writers.granted(inode, holder(caller), capability.expiry_ms, unix_ms());
            }
        }
        if let Caller::User(user) = caller {
            self.handles
                .record(inode, user.uid, rights, capability.expiry_ms, unix_ms());
        }
        Ok((capability, stamp))
    }

    /// `CreateGranted`: the create as a `WithParent` makes it, then the capability to
    /// read and write the file that its first write would ask for, in the same round
    /// trip. A grant refused (the cluster asks for none, the mode gives the creator no
    /// access) is no error: the file is made, and the client asks at its first write as
    /// for any open. `stamped` (`CreateStamped`): the answer also says the grant's stamp.
    pub(super) fn create_granted(
        &self,
        caller: &Caller,
        request: Request,
        stamped: bool,
    ) -> Result<Response, WireError> {
        use weft_proto::capability::rights::{READ, WRITE};
        let cred = match &request {
            Request::Create { cred, .. } => cred.clone(),
            other => {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("{:?} is no create: only a create is granted with", other.opcode()),
                ))
            }
        };
        let Made { attr, parent } = self.made(request)?;
        let (capability, stamp) = match self.grant(caller, &cred, attr.inode, READ | WRITE) {
            Ok((cap, stamp)) => (Some(cap), stamp),
            Err(_) => (None, 0),
        };
        Ok(if stamped {
            Response::MadeStamped {
                attr,
                parent,
                capability,
                stamp,
            }
        } else {
            Response::MadeGranted {
                attr,
                parent,
                capability,
            }
        })
    }
}

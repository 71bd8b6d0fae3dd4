//! Opening files: create, open by path, by a handoff from another process, or by
//! attributes, with the permission check a local open(2) makes.

use super::{lossy, Client, Made};
use crate::error::ClientError;
use crate::file::File;
use crate::handoff::{Handed, Handoff};
use crate::path;
use weft_layout::{InodeId, LayoutRequest};
use weft_proto::msg::{Request, Response};
use weft_proto::{Attr, Cred, ErrorCode, FileKind, Name};

/// How to create a file.
#[derive(Debug, Clone, Copy)]
pub struct CreateOptions {
    /// Permission bits.
    pub mode: u32,
    /// Fields left out come from the directory default, then the cluster default.
    pub layout: LayoutRequest,
    /// Fail if the file exists (O_EXCL); otherwise open it as it is.
    pub exclusive: bool,
    /// Truncate an existing file to zero length (O_TRUNC).
    pub truncate: bool,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            mode: 0o644,
            layout: LayoutRequest::default(),
            exclusive: false,
            truncate: true,
        }
    }
}

/// How to open a file.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    pub write: bool,
    /// Create the file if missing, with these options.
    pub create: Option<CreateOptions>,
    pub truncate: bool,
}

/// The mode-bit check a local open(2) would do, so that a read-only file is refused at
/// open rather than at the first write (io servers do not check permissions).
fn check_access(cred: &Cred, attr: &Attr, want: u32) -> Result<(), ClientError> {
    if cred.permits(attr.kind, attr.mode, attr.uid, attr.gid, want) {
        Ok(())
    } else {
        Err(ClientError::refused(
            ErrorCode::PermissionDenied,
            "permission denied",
        ))
    }
}

impl Client {
    /// Creates (or with `exclusive: false` opens) a file for reading and writing.
    pub fn create(&self, path: &str, options: &CreateOptions) -> Result<File, ClientError> {
        let (parent, name) = path::split(path, ErrorCode::IsDirectory)?;
        if path::names_a_directory(path) {
            return Err(ClientError::refused(
                ErrorCode::IsDirectory,
                format!("{path}: a path ending with / names a directory, not a file to create"),
            ));
        }
        let parent = self.resolve(&parent).map_err(|e| e.context(path))?;
        self.create_named(parent.inode, name.as_bytes(), options, path, false)
            .map(|made| made.made)
    }

    /// Creates (or with `exclusive: false` opens) file `name` in directory `parent`.
    pub fn create_in(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        options: &CreateOptions,
    ) -> Result<File, ClientError> {
        let name = name.as_ref();
        self.create_named(parent, name, options, &lossy(name), false)
            .map(|made| made.made)
    }

    /// `create_in`, with `parent`'s attributes after it (see [`Made`]).
    pub fn create_in_made(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        options: &CreateOptions,
    ) -> Result<Made<File>, ClientError> {
        let name = name.as_ref();
        self.create_named(parent, name, options, &lossy(name), true)
    }

    /// Creates every one of `names` in directory `parent` as exclusive creates would
    /// (O_CREAT|O_EXCL: a name that exists is refused with `Exists`), all with `mode`
    /// and `layout`: one request to the manager per `CREATE_MANY_MAX` (256) names
    /// (`CreateMany`), each committed durably before it is answered, where a create of
    /// each costs a request per file. Answers, in the order given, each file's
    /// attributes or why that name was refused; an error of the whole call (no such
    /// directory, no permission to write it, the manager unreachable) stops at the
    /// chunk it happened in, with the chunks before it made. The files are not open:
    /// a first write asks for its capability as any open does. Against a manager
    /// without `CreateMany`, the files are created one by one.
    pub fn create_many<N: AsRef<[u8]>>(
        &self,
        parent: InodeId,
        names: &[N],
        mode: u32,
        layout: LayoutRequest,
    ) -> Result<Vec<Result<Attr, ClientError>>, ClientError> {
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(weft_proto::msg::CREATE_MANY_MAX) {
            if self
                .inner
                .no_create_many
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                out.extend(self.create_one_by_one(parent, chunk, mode, layout));
                continue;
            }
            let request = Request::CreateMany {
                cred: self.cred_clone(),
                parent,
                names: chunk.iter().map(|n| Name::from(n.as_ref())).collect(),
                mode,
                layout,
            };
            match self.inner.meta(&request) {
                Ok(Response::MadeMany { made, refused, .. }) => {
                    let mut made = made.into_iter().peekable();
                    let mut refused: Vec<(Name, weft_proto::WireError)> = refused;
                    for name in chunk {
                        let name = name.as_ref();
                        match made.peek() {
                            Some((n, _)) if n.as_bytes() == name => {
                                out.push(Ok(made.next().map(|(_, a)| a).expect("peeked")));
                                continue;
                            }
                            _ => {}
                        }
                        // A name asked twice is refused once, after the first was made.
                        let why = match refused.iter().position(|(n, _)| n.as_bytes() == name) {
                            Some(k) => refused.remove(k).1,
                            None => weft_proto::WireError::new(
                                ErrorCode::Internal,
                                "the manager's create-many answer leaves this name out",
                            ),
                        };
                        out.push(Err(
                            ClientError::refused(why.code, why.message).context(&lossy(name))
                        ));
                    }
                }
                Ok(other) => return Err(super::unexpected(&other)),
                Err(e) if e.code() == ErrorCode::UnknownOpcode => {
                    self.inner
                        .no_create_many
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    out.extend(self.create_one_by_one(parent, chunk, mode, layout));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// `create_many` against a manager without `CreateMany`.
    fn create_one_by_one<N: AsRef<[u8]>>(
        &self,
        parent: InodeId,
        names: &[N],
        mode: u32,
        layout: LayoutRequest,
    ) -> Vec<Result<Attr, ClientError>> {
        let options = CreateOptions {
            mode,
            layout,
            exclusive: true,
            truncate: false,
        };
        names
            .iter()
            .map(|name| {
                let file = self.create_in(parent, name, &options)?;
                let attr = file.attr().clone();
                file.close()?;
                Ok(attr)
            })
            .collect()
    }

    pub(super) fn create_named(
        &self,
        parent: InodeId,
        name: &[u8],
        options: &CreateOptions,
        path: &str,
        with_parent: bool,
    ) -> Result<Made<File>, ClientError> {
        let request = Request::Create {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
            mode: options.mode,
            layout: options.layout,
            exclusive: options.exclusive,
        };
        let Made {
            made: attr,
            parent: parent_attr,
            written_under,
        } = self.create_granted(request, path, with_parent)?;
        if attr.kind != FileKind::File {
            return Err(ClientError::refused(
                ErrorCode::IsDirectory,
                format!("{path}: not a regular file"),
            ));
        }
        let file = File::new(self.inner.clone(), attr, path.to_owned(), true)?;
        if options.truncate {
            file.truncate(0)?;
        }
        Ok(Made {
            made: file,
            parent: parent_attr,
            // A truncate, above, is a change of the manager's: the stamp moved on.
            written_under: written_under.filter(|_| !options.truncate),
        })
    }

    /// Opens a file. Reading is always allowed by the handle; the manager checked
    /// permission for what `options` asks.
    pub fn open(&self, path: &str, options: &OpenOptions) -> Result<File, ClientError> {
        let attr = match self.resolve(path) {
            Err(e) if e.code() == ErrorCode::NotFound && options.create.is_some() => {
                let mut create = options.create.unwrap_or_default();
                create.exclusive = false;
                create.truncate = options.truncate;
                return self.create(path, &create);
            }
            other => other?,
        };
        match attr.kind {
            FileKind::File => {}
            FileKind::Directory => {
                return Err(ClientError::refused(
                    ErrorCode::IsDirectory,
                    format!("{path}: is a directory"),
                ))
            }
            FileKind::Symlink => {
                return Err(ClientError::refused(
                    ErrorCode::InvalidArgument,
                    format!("{path}: is a symbolic link"),
                ))
            }
            special => {
                // FIFOs, devices and sockets have no data in Weft: their I/O is local.
                return Err(ClientError::refused(
                    ErrorCode::Unsupported,
                    format!("{path}: is a {special:?}: only regular files are read and written through Weft"),
                ));
            }
        }
        check_access(&self.inner.cred, &attr, if options.write { 0o6 } else { 0o4 })
            .map_err(|e| e.context(path))?;
        let file = File::new(self.inner.clone(), attr, path.to_owned(), options.write)?;
        if options.truncate && options.write {
            file.truncate(0)?;
        }
        Ok(file)
    }

    /// Opens, without asking the manager, the file another process of the same job
    /// opened: `handoff` is that handle's [`File::handoff`]. The kind and this process's
    /// permission for what `write` asks are checked here, as [`Client::open`] checks
    /// them; the path walk and the create were done once, by the process that opened.
    /// A collective open (MPI-IO) costs the manager one request instead of one per
    /// process this way. A handoff from [`File::handoff_with_capability`] also spares
    /// this process the manager's capability grant, when it is the same user's; one from
    /// [`File::handoff_opened`] (a mount's `user.weft.handoff`) also the io servers'
    /// size, for reads within the size it carries.
    pub fn open_handoff(&self, handoff: &[u8], path: &str, write: bool) -> Result<File, ClientError> {
        let Handed {
            attr,
            capability,
            sized,
            content,
        } = Handoff::decode(handoff).map_err(|e| {
            ClientError::refused(
                ErrorCode::InvalidArgument,
                format!("{path}: a damaged open handoff: {e}"),
            )
        })?;
        if attr.kind != FileKind::File {
            return Err(ClientError::refused(
                ErrorCode::InvalidArgument,
                format!("{path}: the open handoff is not of a regular file"),
            ));
        }
        check_access(&self.inner.cred, &attr, if write { 0o6 } else { 0o4 }).map_err(|e| e.context(path))?;
        // The maker's capability serves this process too when it is the same user's
        // and covers the access asked for; a server that refuses it (revoked, expired)
        // makes the connection forget it and ask the manager.
        if let Some((uid, cap)) = capability {
            use weft_proto::capability::rights::{READ, WRITE};
            let wanted = if write { WRITE } else { READ };
            if uid == self.inner.cred.uid && cap.rights & wanted != 0 {
                if let Some(source) = self.inner.pool.capability_source() {
                    source.adopt(&cap);
                }
            }
        }
        let size = attr.size;
        let mut file = File::new(self.inner.clone(), attr, path.to_owned(), write)?;
        if sized {
            // The maker checked the file as an open does just now (a mount's handoff).
            file.known_size.store(size, std::sync::atomic::Ordering::SeqCst);
            if !write {
                // Reads end at that size for a while, as the mount's kernel ends them at
                // the size it cached (a read past it would ask every io server).
                *file.size_trusted_until.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(std::time::Instant::now() + crate::file::HANDED_SIZE_TRUST);
                // The whole file, read after the check: so are its bytes.
                file.handed_content = content.map(Vec::into_boxed_slice);
            }
        }
        Ok(file)
    }

    /// Opens a file known by its attributes (for adapters that track inodes).
    /// `attr.size` is taken as the size the io servers gave just now (as `getattr_sized`
    /// and `revalidate` fill it in): reads within it need not ask them again.
    pub fn open_attr(&self, attr: Attr, writable: bool) -> Result<File, ClientError> {
        let size = attr.size;
        let file = File::new(
            self.inner.clone(),
            attr.clone(),
            format!("inode {}", attr.inode),
            writable,
        )?;
        file.known_size.store(size, std::sync::atomic::Ordering::SeqCst);
        Ok(file)
    }
}

//! The bytes one process hands another so that it opens the same file without asking
//! the manager (`File::handoff`, `Client::open_handoff`).

use weft_proto::Attr;

/// What [`File::handoff`](crate::File::handoff) carries: the manager's answer to the open (its attributes,
/// layout included), versioned so that a handoff between mismatched builds fails
/// clearly. Whatever else a manager's open answer grants a handle belongs here too.
pub(crate) struct Handoff;

/// What a handoff carries.
pub(crate) struct Handed {
    pub attr: Attr,
    /// The capability of the process that made it, and its uid.
    pub capability: Option<(u32, weft_proto::Capability)>,
    /// `attr.size` is the size the io servers gave when the handoff was made, after the
    /// maker checked the file as an open checks it (a mount's handoff, `VERSION_OPENED`):
    /// reads within it need not ask them again.
    pub sized: bool,
    /// The whole file's bytes as the maker read them after that check
    /// (`VERSION_CONTENT`: a small file), for reads within the trusted time.
    pub content: Option<Vec<u8>>,
}

impl Handoff {
    /// The attributes alone.
    const VERSION: u8 = 1;
    /// The attributes' length, the attributes, then optionally the uid and capability.
    const VERSION_CAPABLE: u8 = 2;
    /// As `VERSION_CAPABLE`, and the size in the attributes is the io servers' as of
    /// the maker's open-time check (a mount's `user.weft.handoff`).
    const VERSION_OPENED: u8 = 3;
    /// The content's length and the content (the whole file, read after the maker's
    /// open-time check), then a `VERSION_OPENED` handoff without its version byte.
    const VERSION_CONTENT: u8 = 4;

    pub(crate) fn encode(attr: &Attr, capability: Option<&(u32, weft_proto::Capability)>) -> Vec<u8> {
        Handoff::encode_as(attr, capability, false)
    }

    /// `encode`, with `attr.size` vouched as the io servers' size at an open-time check,
    /// and with `content`, the whole file read after that check, if given.
    pub(crate) fn encode_opened(
        attr: &Attr,
        capability: Option<&(u32, weft_proto::Capability)>,
        content: Option<&[u8]>,
    ) -> Vec<u8> {
        let opened = Handoff::encode_as(attr, capability, true);
        let Some(content) = content else {
            return opened;
        };
        let mut out = Vec::with_capacity(opened.len() + 9 + content.len());
        out.push(Handoff::VERSION_CONTENT);
        out.extend_from_slice(&(content.len() as u64).to_le_bytes());
        out.extend_from_slice(content);
        out.extend_from_slice(&opened[1..]);
        out
    }

    fn encode_as(attr: &Attr, capability: Option<&(u32, weft_proto::Capability)>, sized: bool) -> Vec<u8> {
        use weft_proto::Wire;
        let attr = attr.to_bytes();
        let capability = match capability {
            Some(c) => Some(c),
            None if !sized => {
                let mut out = vec![Handoff::VERSION];
                out.extend_from_slice(&attr);
                return out;
            }
            None => None,
        };
        let version = if sized {
            Handoff::VERSION_OPENED
        } else {
            Handoff::VERSION_CAPABLE
        };
        let mut out = vec![version];
        out.extend_from_slice(&(attr.len() as u64).to_le_bytes());
        out.extend_from_slice(&attr);
        // An opened handoff may come without a capability (capabilities off): uid only.
        let Some((uid, cap)) = capability else {
            out.extend_from_slice(&u32::MAX.to_le_bytes());
            return out;
        };
        out.extend_from_slice(&uid.to_le_bytes());
        out.extend_from_slice(&cap.to_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Handed, String> {
        use weft_proto::Wire;
        match bytes.split_first() {
            Some((&Handoff::VERSION, rest)) => Ok(Handed {
                attr: Attr::from_bytes(rest).map_err(|e| e.to_string())?,
                capability: None,
                sized: false,
                content: None,
            }),
            Some((&Handoff::VERSION_CONTENT, rest)) => {
                let short = || "truncated".to_owned();
                let len = rest.get(..8).ok_or_else(short)?;
                let len = usize::try_from(u64::from_le_bytes(len.try_into().expect("8 bytes")))
                    .map_err(|_| short())?;
                let end = len.checked_add(8).ok_or_else(short)?;
                let content = rest.get(8..end).ok_or_else(short)?.to_vec();
                let mut opened = vec![Handoff::VERSION_OPENED];
                opened.extend_from_slice(&rest[end..]);
                let handed = Handoff::decode(&opened)?;
                if handed.attr.size != content.len() as u64 {
                    return Err(format!(
                        "its content is {} bytes, the file's size {}",
                        content.len(),
                        handed.attr.size
                    ));
                }
                Ok(Handed {
                    content: Some(content),
                    ..handed
                })
            }
            Some((&version @ (Handoff::VERSION_CAPABLE | Handoff::VERSION_OPENED), rest)) => {
                let sized = version == Handoff::VERSION_OPENED;
                let short = || "truncated".to_owned();
                let len = rest.get(..8).ok_or_else(short)?;
                let len = usize::try_from(u64::from_le_bytes(len.try_into().expect("8 bytes")))
                    .map_err(|_| short())?;
                let attr_end = len.checked_add(8).ok_or_else(short)?;
                let attr = rest.get(8..attr_end).ok_or_else(short)?;
                let attr = Attr::from_bytes(attr).map_err(|e| e.to_string())?;
                let uid = rest.get(attr_end..attr_end + 4).ok_or_else(short)?;
                let uid = u32::from_le_bytes(uid.try_into().expect("4 bytes"));
                if sized && uid == u32::MAX && rest.len() == attr_end + 4 {
                    return Ok(Handed {
                        attr,
                        capability: None,
                        sized,
                        content: None,
                    });
                }
                let cap = weft_proto::Capability::from_bytes(&rest[attr_end + 4..])
                    .map_err(|e| format!("its capability: {e}"))?;
                if cap.inode != attr.inode {
                    return Err(format!(
                        "its capability is for inode {}, the file is inode {}",
                        cap.inode, attr.inode
                    ));
                }
                Ok(Handed {
                    attr,
                    capability: Some((uid, cap)),
                    sized,
                    content: None,
                })
            }
            Some((v, _)) => Err(format!(
                "version {v}, this build reads {} to {}",
                Handoff::VERSION,
                Handoff::VERSION_CONTENT
            )),
            None => Err("empty".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_layout::{CacheMode, InodeId, Layout, ServerId};
    use weft_proto::{FileKind, Timespec};

    fn attr(size: u64) -> Attr {
        Attr {
            cache: CacheMode::None,
            inode: InodeId(7),
            kind: FileKind::File,
            mode: 0o644,
            uid: 1,
            gid: 2,
            nlink: 1,
            size,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            layout: Some(Layout {
                stripe_size_bytes: 65536,
                servers: vec![ServerId(1), ServerId(2)],
                replication: Default::default(),
            }),
            dir_layout: None,
            rdev: 0,
            blocks: 0,
        }
    }

    /// A handoff with a small file's bytes comes back with them, sized; one whose bytes
    /// are cut short, or are not as long as the size it states, is refused.
    #[test]
    fn content_travels_whole_or_is_refused() {
        let bytes = b"hello, small file".to_vec();
        let handoff = Handoff::encode_opened(&attr(bytes.len() as u64), None, Some(&bytes));
        let handed = Handoff::decode(&handoff).unwrap();
        assert!(handed.sized);
        assert_eq!(handed.content.as_deref(), Some(&bytes[..]));
        assert_eq!(handed.attr, attr(bytes.len() as u64));
        for cut in [1, 5, 9 + bytes.len() / 2, handoff.len() - 1] {
            assert!(Handoff::decode(&handoff[..cut]).is_err(), "cut at {cut}");
        }
        let wrong = Handoff::encode_opened(&attr(bytes.len() as u64 + 1), None, Some(&bytes));
        assert!(Handoff::decode(&wrong).is_err());
        // Without bytes: as before (version 3).
        let plain = Handoff::encode_opened(&attr(3), None, None);
        assert_eq!(plain[0], Handoff::VERSION_OPENED);
        assert!(Handoff::decode(&plain).unwrap().content.is_none());
    }
}

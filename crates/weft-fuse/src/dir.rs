//! Directory streams: the kernel resumes a listing at an offset, Weft at a name. An open
//! directory keeps the last page fetched from the manager, whose entries carry
//! consecutive offsets, so that the kernel's next call continues from it without a
//! round trip, and a call at an older offset walks the listing again from the start.
//! Pages come with the manager's attributes of every entry (readdir-plus), so that the
//! kernel's readdirplus needs only the io servers' sizes on top.

use weft_client::{Attr, Client, ClientError, FileKind, InodeId, Name};

/// Names asked of the manager per page. A page is held per open directory.
pub const PAGE_ENTRIES_MAX: u32 = 1024;

/// Offsets 1 and 2 are "." and ".."; the directory's entries start at 3.
const FIRST_ENTRY_OFFSET: u64 = 3;

/// One listed entry: the offset the kernel resumes *after* it, and what it is.
#[derive(Debug, Clone)]
pub struct Listed {
    pub offset: u64,
    pub name: Name,
    pub inode: InodeId,
    pub kind: FileKind,
    /// The manager's attributes when the page was fetched (sizes not filled in); none
    /// for "." and "..".
    pub attr: Option<Attr>,
}

pub struct DirStream {
    dir: InodeId,
    /// The last page, with consecutive offsets.
    page: Vec<Listed>,
    /// Whether the manager has entries after the page.
    more: bool,
}

impl DirStream {
    pub fn new(dir: InodeId) -> DirStream {
        DirStream {
            dir,
            page: Vec::new(),
            more: true,
        }
    }

    /// Up to a page of entries following `offset` (0: from the start), in order.
    /// An empty answer is the end of the directory.
    pub fn after(&mut self, client: &Client, offset: u64) -> Result<Vec<Listed>, ClientError> {
        if offset < FIRST_ENTRY_OFFSET {
            let mut out = Vec::new();
            if offset == 0 {
                out.push(self.dot(1, ".", self.dir));
            }
            if offset <= 1 {
                // The parent's number is not known here; the kernel fills in its own.
                out.push(self.dot(2, "..", self.dir));
            }
            out.extend(self.fetch(client, &Name::default(), FIRST_ENTRY_OFFSET)?);
            return Ok(out);
        }
        if let Some(k) = self.page.iter().position(|e| e.offset == offset) {
            if k + 1 < self.page.len() {
                return Ok(self.page[k + 1..].to_vec());
            }
            if !self.more {
                return Ok(Vec::new());
            }
            let name = self.page[k].name.clone();
            return self.fetch(client, &name, offset + 1);
        }
        // An offset the page no longer covers (seekdir, or a kernel retry): walk again.
        let mut page = self.fetch(client, &Name::default(), FIRST_ENTRY_OFFSET)?;
        loop {
            if let Some(k) = page.iter().position(|e| e.offset == offset) {
                return Ok(page.split_off(k + 1));
            }
            let Some(last) = page.last().cloned() else {
                return Ok(Vec::new());
            };
            if last.offset > offset || !self.more {
                return Ok(Vec::new());
            }
            page = self.fetch(client, &last.name, last.offset + 1)?;
        }
    }

    fn dot(&self, offset: u64, name: &str, inode: InodeId) -> Listed {
        Listed {
            offset,
            name: name.into(),
            inode,
            kind: FileKind::Directory,
            attr: None,
        }
    }

    /// The page of names after `after`, numbered from `first_offset`; becomes the page.
    fn fetch(
        &mut self,
        client: &Client,
        after: &Name,
        first_offset: u64,
    ) -> Result<Vec<Listed>, ClientError> {
        let (entries, more) = client.readdir_attrs_page(self.dir, after, PAGE_ENTRIES_MAX)?;
        self.more = more;
        self.page = number(entries, first_offset);
        Ok(self.page.clone())
    }
}

fn number(entries: Vec<(Name, Attr)>, first_offset: u64) -> Vec<Listed> {
    entries
        .into_iter()
        .zip(first_offset..)
        .map(|((name, attr), offset)| Listed {
            offset,
            name,
            inode: attr.inode,
            kind: attr.kind,
            attr: Some(attr),
        })
        .collect()
}

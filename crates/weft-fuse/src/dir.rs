//! Directory streams: the kernel resumes a listing at an offset, Weft at a name. An open
//! directory keeps the last page fetched from the manager, whose entries carry
//! consecutive offsets, so that the kernel's next call continues from it without a
//! round trip, and a call at an older offset walks the listing again from the start.
//! Pages come with the manager's attributes of every entry (readdir-plus), so that the
//! kernel's readdirplus needs only the io servers' sizes on top: asked once per page
//! (one request per io server for all of the page's files, `size_page`), not per
//! kernel call (a call holds some 25 entries), and only for the files whose size the
//! manager did not know (`ReaddirSized`: a file nobody wrote since the manager last
//! measured it comes sized).

use weft_client::{Attr, Client, ClientError, FileKind, InodeId, Name, SizedListing};

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
    /// The manager's attributes when the page was fetched (a file's size filled in only
    /// if `sized`); none for "." and "..".
    pub attr: Option<Attr>,
    /// The manager filled in the file's size (it knows it: no writer since its io
    /// servers told it), so the io servers are not asked for it.
    pub sized: bool,
}

/// Sized attributes of a page's entries by offset; `None`: removed since the page was read.
pub type SizedPage = std::collections::HashMap<u64, Option<Attr>>;

pub struct DirStream {
    dir: InodeId,
    /// The last page, with consecutive offsets.
    page: Vec<Listed>,
    /// Whether the manager has entries after the page.
    more: bool,
    /// The page's attributes with sizes filled in, by offset (`None`: the file's objects
    /// are gone, it was removed since the page was read), once `size_page` ran for it.
    sized: Option<SizedPage>,
}

impl DirStream {
    pub fn new(dir: InodeId) -> DirStream {
        DirStream {
            dir,
            page: Vec::new(),
            more: true,
            sized: None,
        }
    }

    /// The attributes of the page's entries with their sizes (one request per io server
    /// for the whole page, made once per page), by offset; `None` for a file removed
    /// since the page was read. Call after `after`, whose entries are on the page.
    pub fn size_page(&mut self, client: &Client) -> Result<&SizedPage, ClientError> {
        if self.sized.is_none() {
            let listed: Vec<&Listed> = self.page.iter().filter(|e| e.attr.is_some()).collect();
            let offsets: Vec<u64> = listed.iter().map(|e| e.offset).collect();
            let sized: Vec<bool> = listed.iter().map(|e| e.sized).collect();
            let mut attrs: Vec<Attr> = listed.iter().filter_map(|e| e.attr.clone()).collect();
            let gone = client.sizes_of_unsized(&mut attrs, &sized)?;
            self.sized = Some(
                offsets
                    .into_iter()
                    .zip(attrs.into_iter().zip(gone))
                    .map(|(offset, (attr, gone))| (offset, (!gone).then_some(attr)))
                    .collect(),
            );
        }
        Ok(self.sized.as_ref().expect("set above"))
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
            sized: false,
        }
    }

    /// The page of names after `after`, numbered from `first_offset`; becomes the page.
    fn fetch(
        &mut self,
        client: &Client,
        after: &Name,
        first_offset: u64,
    ) -> Result<Vec<Listed>, ClientError> {
        let listing = client.readdir_sized_page(self.dir, after, PAGE_ENTRIES_MAX)?;
        self.more = listing.more;
        self.page = number(listing, first_offset);
        self.sized = None;
        Ok(self.page.clone())
    }
}

fn number(listing: SizedListing, first_offset: u64) -> Vec<Listed> {
    listing
        .names
        .into_iter()
        .zip(listing.attrs)
        .zip(listing.sized)
        .zip(first_offset..)
        .map(|(((name, attr), sized), offset)| Listed {
            offset,
            name,
            inode: attr.inode,
            kind: attr.kind,
            attr: Some(attr),
            sized,
        })
        .collect()
}

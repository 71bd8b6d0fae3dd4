//! Readdir paging over a large directory: every name exactly once, in byte order.

mod common;

use std::collections::{BTreeSet, HashMap};

use common::*;
use weft_layout::InodeId;
use weft_proto::msg::READDIR_ENTRIES_MAX;
use weft_proto::FileKind;

const ENTRIES: usize = 10_000;

/// Names of varied length and script, so that byte order differs from
/// insertion order and from numeric order.
fn name(i: usize) -> String {
    match i % 4 {
        0 => format!("f{i}"),
        1 => format!("{}-{i}", "long".repeat(i % 13 + 1)),
        2 => format!("é{i:05}"),
        _ => format!("Z{}", ENTRIES - i),
    }
}

#[test]
fn paging_returns_every_entry_once_in_byte_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let d = store.mkdir(&root(), InodeId::ROOT, "big", 0o755).unwrap().inode;
    // A neighbour on each side in inode order, whose entries must never appear.
    store.mkdir(&root(), InodeId::ROOT, "before", 0o755).unwrap();
    for i in 0..ENTRIES {
        if i % 10 == 0 {
            store.mkdir(&root(), d, name(i), 0o755).unwrap();
        } else {
            create(&store, &root(), d, name(i)).unwrap();
        }
    }
    let after = store.mkdir(&root(), InodeId::ROOT, "after", 0o755).unwrap().inode;
    create(&store, &root(), after, "stranger").unwrap();

    let kinds: HashMap<String, FileKind> = (0..ENTRIES)
        .map(|i| {
            (
                name(i),
                if i % 10 == 0 {
                    FileKind::Directory
                } else {
                    FileKind::File
                },
            )
        })
        .collect();
    let mut expected: Vec<String> = (0..ENTRIES).map(name).collect();
    expected.sort(); // String order is byte order.
    assert_eq!(
        expected.iter().collect::<BTreeSet<_>>().len(),
        ENTRIES,
        "names are distinct"
    );

    for page_size in [1000u32, 333, 0] {
        let mut seen = Vec::new();
        let mut cursor = String::new();
        let mut pages = 0;
        loop {
            let (entries, more) = store.readdir(&root(), d, &cursor, page_size).unwrap();
            pages += 1;
            let cap = if page_size == 0 {
                READDIR_ENTRIES_MAX
            } else {
                page_size
            } as usize;
            assert!(entries.len() <= cap);
            if more {
                assert_eq!(entries.len(), cap, "only the last page may be short");
            }
            for e in &entries {
                let name = e.name.to_string();
                assert_eq!(Some(&e.kind), kinds.get(&name), "{name}");
            }
            seen.extend(entries.into_iter().map(|e| e.name.to_string()));
            if !more {
                break;
            }
            cursor = seen.last().unwrap().clone();
        }
        assert_eq!(seen, expected, "page size {page_size}");
        assert_eq!(
            pages,
            ENTRIES.div_ceil(if page_size == 0 {
                READDIR_ENTRIES_MAX as usize
            } else {
                page_size as usize
            })
        );
    }
    // More than the cap is capped.
    let (entries, more) = store.readdir(&root(), d, "", u32::MAX).unwrap();
    assert_eq!(entries.len(), READDIR_ENTRIES_MAX as usize);
    assert!(more);
    // A cursor between names starts at the next one.
    let (entries, _) = store.readdir(&root(), d, "f1", 2).unwrap();
    let next: Vec<&String> = expected.iter().filter(|n| n.as_str() > "f1").take(2).collect();
    assert_eq!(
        entries.iter().map(|e| e.name.to_string()).collect::<Vec<_>>(),
        next.into_iter().cloned().collect::<Vec<_>>()
    );
    // Past the last name: an empty final page.
    let (entries, more) = store.readdir(&root(), d, expected.last().unwrap(), 10).unwrap();
    assert!(entries.is_empty() && !more);
    let attr = store.getattr(&root(), d).unwrap();
    assert_eq!(attr.size, ENTRIES as u64);
    assert_eq!(attr.nlink, 2 + (ENTRIES / 10) as u32);
}

/// Readdir-plus pages hold the same names as readdir, each with the attributes getattr
/// gives, and page by name like readdir; entries of wide layouts stop a page at its byte
/// bound before the message limit.
#[test]
fn readdir_plus_gives_each_entry_with_its_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o755).unwrap().inode;
    for i in 0..300 {
        if i % 7 == 0 {
            store.mkdir(&root(), d, name(i), 0o700).unwrap();
        } else {
            create(&store, &root(), d, name(i)).unwrap();
        }
    }
    let mut plain = Vec::new();
    let mut after = Vec::new();
    loop {
        let (page, more) = store.readdir(&root(), d, &after, 64).unwrap();
        after = page
            .last()
            .map(|e| e.name.as_bytes().to_vec())
            .unwrap_or_default();
        plain.extend(page);
        if !more {
            break;
        }
    }
    let mut plus = Vec::new();
    let mut after = Vec::new();
    let mut pages = 0;
    loop {
        let (page, more) = store.readdir_plus(&root(), d, &after, 64).unwrap();
        assert!(page.len() <= 64);
        pages += 1;
        after = page
            .last()
            .map(|(n, _)| n.as_bytes().to_vec())
            .unwrap_or_default();
        plus.extend(page);
        if !more {
            break;
        }
    }
    assert_eq!(pages, 300usize.div_ceil(64));
    assert_eq!(plus.len(), plain.len());
    for ((name, attr), entry) in plus.iter().zip(&plain) {
        assert_eq!(
            (name, attr.inode, attr.kind),
            (&entry.name, entry.inode, entry.kind)
        );
        assert_eq!(attr, &store.getattr(&root(), entry.inode).unwrap(), "{name}");
    }
    // Without read permission on the directory: refused, as readdir.
    let private = store
        .mkdir(&root(), InodeId::ROOT, "private", 0o700)
        .unwrap()
        .inode;
    assert_eq!(
        code(store.readdir_plus(&alice(), private, b"", 0)),
        code(store.readdir(&alice(), private, b"", 0))
    );
    // A page stops at its byte bound: 1,200 entries with 255-byte names do not fit one
    // page, though they are fewer than the entry limit; paging still finds them all.
    let long = store.mkdir(&root(), InodeId::ROOT, "long", 0o755).unwrap().inode;
    for i in 0..1200 {
        create(&store, &root(), long, format!("{i:04}{}", "x".repeat(251))).unwrap();
    }
    let (first, more) = store.readdir_plus(&root(), long, b"", 0).unwrap();
    assert!(more && first.len() < 1200, "{} entries in one page", first.len());
    let (rest, more) = store
        .readdir_plus(&root(), long, first.last().unwrap().0.as_bytes(), 0)
        .unwrap();
    assert!(!more);
    assert_eq!(first.len() + rest.len(), 1200);
}

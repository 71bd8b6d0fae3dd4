//! Opens and stats that skip the io servers on the manager's vouch (issue 30 item 3):
//! writers give their write capabilities back at close, the manager vouches "no write
//! capability of this file live or issued since stamp S", and a client that read the
//! file's size and change stamps under S answers the next open or stat from them.
//! Close-to-open must hold all the same: another client (a second mount, the native
//! client) that writes and closes is seen, every byte, by the next open.

mod common;

use common::{native_write, pattern, Mount};
use std::time::{Duration, Instant};
use weft_client::{Client, CreateOptions, OpenOptions};
use weft_testkit::TestCluster;

/// Looks `name` up in `dir` until `client` answers it without the io servers (the
/// writer's capability goes back in the background), at most 10 s.
fn until_vouched(client: &Client, dir: weft_client::InodeId, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let skips = client.vouched_skips();
    while client.vouched_skips() == skips {
        client.lookup_sized(dir, name, None).unwrap();
        assert!(
            Instant::now() < deadline,
            "{name}: never vouched for (a write capability still counted live?)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_native(client: &Client, path: &str) -> Vec<u8> {
    let dir = client.resolve(path.rsplit_once('/').unwrap().0).unwrap().inode;
    let attr = client
        .lookup_sized(dir, path.rsplit_once('/').unwrap().1, None)
        .unwrap();
    let size = attr.size as usize;
    let file = client.open_attr(attr, false).unwrap();
    let mut buf = vec![0u8; size];
    let mut at = 0;
    while at < size {
        let n = file.read_at(at as u64, &mut buf[at..]).unwrap();
        assert!(n > 0, "{path}: short read at {at} of {size}");
        at += n;
    }
    file.close().unwrap();
    buf
}

/// A file written and closed by one client is then looked up and read 20 times by
/// another: after the first look, no size or stamp request reaches an io server.
/// Before this change every look asked every io server of the file ("20 stamp
/// requests for 20 looks"): the writer kept its write capability for its 60 s lifetime
/// after close, and the manager could vouch for nothing.
#[test]
fn looks_at_a_file_nobody_writes_skip_its_io_servers() {
    let cluster = TestCluster::start();
    let writer = cluster.client();
    let reader = cluster.client();
    writer.mkdir("/quiet", 0o755).unwrap();
    let data = pattern(7, 4096 * 3 + 11);
    let f = writer.create("/quiet/f", &CreateOptions::default()).unwrap();
    f.write_at(0, &data).unwrap();
    f.close().unwrap();
    let dir = reader.resolve("/quiet").unwrap().inode;
    until_vouched(&reader, dir, "f");

    let stamps = cluster.io_requests("obj_stamp");
    let skips = reader.vouched_skips();
    for look in 0..20 {
        let attr = reader.lookup_sized(dir, "f", None).unwrap();
        assert_eq!(attr.size, data.len() as u64, "look {look}");
    }
    let asked = cluster.io_requests("obj_stamp") - stamps;
    assert_eq!(
        asked, 0.0,
        "{asked} stamp requests for 20 looks at a file nobody writes"
    );
    assert_eq!(reader.vouched_skips() - skips, 20);
    assert!(read_native(&reader, "/quiet/f") == data);
}

/// Close-to-open with the io servers skipped: a reader holding vouched facts of a file
/// sees every byte and the new size at its next open once another client (native or a
/// second mount) wrote and closed it, at once, without waiting for the writer's
/// capability to go back.
#[test]
fn a_vouched_open_sees_what_another_client_wrote_and_closed() {
    let cluster = TestCluster::start();
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    let native = cluster.client();
    std::fs::create_dir(a.join("cto")).unwrap();
    let mut expected = pattern(1, 5000);
    std::fs::write(a.join("cto/f"), &expected).unwrap();
    let dir = native.resolve("/cto").unwrap().inode;
    until_vouched(&native, dir, "f");
    // Mount b reads it (and keeps the pages) until its looks skip the io servers too.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stamps = cluster.io_requests("obj_stamp");
        assert!(std::fs::read(b.join("cto/f")).unwrap() == expected);
        if cluster.io_requests("obj_stamp") == stamps {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "mount b's opens never skipped the io servers"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    for round in 0..3u64 {
        // The native client appends and closes: both mounts and the native reader see it.
        let more = pattern(10 + round, 3000 + round as usize);
        native_write(&native, "/cto/f", expected.len() as u64, &more);
        expected.extend_from_slice(&more);
        assert!(
            read_native(&native, "/cto/f") == expected,
            "round {round}: native after native"
        );
        assert!(
            std::fs::read(b.join("cto/f")).unwrap() == expected,
            "round {round}: mount b after native"
        );
        assert_eq!(
            std::fs::metadata(b.join("cto/f")).unwrap().len(),
            expected.len() as u64
        );

        // Mount a overwrites the middle and closes; b and the native client see it.
        let middle = pattern(20 + round, 1000);
        {
            use std::io::{Seek, Write};
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(a.join("cto/f"))
                .unwrap();
            f.seek(std::io::SeekFrom::Start(2000)).unwrap();
            f.write_all(&middle).unwrap();
        }
        expected[2000..3000].copy_from_slice(&middle);
        assert!(
            std::fs::read(b.join("cto/f")).unwrap() == expected,
            "round {round}: mount b after mount a"
        );
        assert!(
            read_native(&native, "/cto/f") == expected,
            "round {round}: native after mount a"
        );

        // Mount b truncates it shorter; the native client sees the new size at once.
        let short = expected.len() - 100;
        std::fs::OpenOptions::new()
            .write(true)
            .open(b.join("cto/f"))
            .unwrap()
            .set_len(short as u64)
            .unwrap();
        expected.truncate(short);
        let attr = native.lookup_sized(dir, "f", None).unwrap();
        assert_eq!(
            attr.size, short as u64,
            "round {round}: native size after b's truncate"
        );
        assert!(read_native(&native, "/cto/f") == expected);
        // Quiet again: the looks skip the io servers before the next round.
        until_vouched(&native, dir, "f");
    }
    // A writer still open keeps the vouch away: the reader asks the io servers.
    let open = native
        .open(
            "/cto/f",
            &OpenOptions {
                write: true,
                ..OpenOptions::default()
            },
        )
        .unwrap();
    open.write_at(0, b"live").unwrap();
    expected[..4].copy_from_slice(b"live");
    let other = cluster.client();
    let skips = other.vouched_skips();
    assert!(read_native(&other, "/cto/f") == expected);
    assert!(read_native(&other, "/cto/f") == expected);
    assert_eq!(
        other.vouched_skips(),
        skips,
        "vouched for while a writer was open"
    );
    drop(open);
}

/// An open through the mount of a file nobody writes is one request to the manager: the
/// manager measured the file once its writer gave its capability back, and its vouch is
/// the data stamp by which the kernel keeps the pages read at the previous open, with no
/// wait for the io servers' stamps to settle. Before, every such open asked each io
/// server of the file for its object's stamp (4 requests here), and a file changed less
/// than 1 s before could not keep its pages.
#[test]
fn a_quiet_files_open_through_the_mount_asks_only_the_manager_and_keeps_its_pages() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let writer = cluster.client();
    writer.mkdir("/quiet", 0o755).unwrap();
    let data = pattern(3, 4096 * 4 + 100);
    native_write(&writer, "/quiet/f", 0, &data);
    // A client that never read the file: its first skip is the manager's own measure.
    let probe = cluster.client();
    let dir = probe.resolve("/quiet").unwrap().inode;
    until_vouched(&probe, dir, "f");

    let path = mount.join("quiet/f");
    let (stamps, reads) = (cluster.io_requests("obj_stamp"), cluster.io_requests("read"));
    assert!(std::fs::read(&path).unwrap() == data, "first read");
    let first_reads = cluster.io_requests("read") - reads;
    assert!(
        first_reads > 0.0,
        "the first open read nothing from the io servers"
    );
    assert!(std::fs::read(&path).unwrap() == data, "second read");
    let asked = cluster.io_requests("obj_stamp") - stamps;
    assert_eq!(asked, 0.0, "{asked} stamp requests for two opens of a quiet file");
    let again = cluster.io_requests("read") - reads - first_reads;
    assert_eq!(
        again, 0.0,
        "the second open read {again} times from the io servers: its kept pages were dropped"
    );

    // Another client rewrites a page in place, same size: the next open sees it.
    let new = pattern(9, 4096);
    native_write(&writer, "/quiet/f", 4096, &new);
    let mut expected = data.clone();
    expected[4096..8192].copy_from_slice(&new);
    assert!(std::fs::read(&path).unwrap() == expected, "after the rewrite");
}

/// A file this mount made and wrote is read back from the kernel's pages at its next
/// open: the create's answer carried the stamp of its write grant (`CreateStamped`), and
/// while the manager vouches for the file at that stamp no other client wrote it, so
/// the pages of this mount's own writes are the file. Before, that first read went to
/// the io servers (the pages could not be proven current). Once another client writes
/// the file, the next open reads the new bytes; a file made for appending (written by
/// direct I/O here: the kernel holds none of its pages) reads back whole.
#[test]
fn a_file_this_mount_made_is_read_back_from_its_own_pages_until_another_client_writes_it() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let native = cluster.client();
    std::fs::create_dir(mount.join("own")).unwrap();
    // Whole pages: the kernel keeps a partly written last page not up to date.
    let data = pattern(5, 4096 * 3);
    std::fs::write(mount.join("own/f"), &data).unwrap();
    let dir = native.resolve("/own").unwrap().inode;
    until_vouched(&native, dir, "f");
    let reads = cluster.io_requests("read");
    assert!(std::fs::read(mount.join("own/f")).unwrap() == data, "read back");
    let read = cluster.io_requests("read") - reads;
    assert_eq!(
        read, 0.0,
        "reading back a file this mount wrote asked the io servers {read} times"
    );

    // Another client rewrites a page in place and sets the modification time back to
    // what the kernel saw: same size, same mtime, so only the stamp tells the kernel's
    // pages are old (the kernel drops them itself when it sees either change).
    let seen = native.stat("/own/f").unwrap().mtime;
    let new = pattern(6, 4096);
    native_write(&native, "/own/f", 4096, &new);
    native
        .setattr(
            "/own/f",
            &weft_client::SetAttr {
                mtime: Some(weft_client::TimeSet::At(seen)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(native.stat("/own/f").unwrap().mtime, seen);
    let mut expected = data.clone();
    expected[4096..8192].copy_from_slice(&new);
    assert!(
        std::fs::read(mount.join("own/f")).unwrap() == expected,
        "after another client's rewrite"
    );

    // Made for appending: written by direct I/O, its bytes come from the io servers.
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(mount.join("own/log"))
            .unwrap();
        f.write_all(&data).unwrap();
    }
    until_vouched(&native, dir, "log");
    let reads = cluster.io_requests("read");
    assert!(
        std::fs::read(mount.join("own/log")).unwrap() == data,
        "the appended file"
    );
    assert!(
        cluster.io_requests("read") > reads,
        "a file written by appends was read from pages that never held its bytes"
    );
}

/// A listing with attributes (`ls -l`, `find`, `du`; readdirplus through the mount,
/// `readdir_plus_page` natively) of files nobody writes asks the io servers nothing:
/// the manager sends the sizes it measured after their writers closed. A file open for
/// writing (its size changing under a live capability) is still asked of its io
/// servers, and every size shown is the file's.
#[test]
fn listings_of_files_nobody_writes_skip_the_io_servers() {
    let cluster = TestCluster::start();
    let native = cluster.client();
    native.mkdir("/listed", 0o755).unwrap();
    let sizes: Vec<usize> = (0..20).map(|k| 100 + 997 * k).collect();
    for (k, size) in sizes.iter().enumerate() {
        let f = native
            .create(&format!("/listed/f{k}"), &CreateOptions::default())
            .unwrap();
        f.write_at(0, &pattern(k as u64, *size)).unwrap();
        f.close().unwrap();
    }
    let dir = native.resolve("/listed").unwrap().inode;
    // The manager measures each file once its writer gave its capability back.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stamps = cluster.io_requests("obj_stamp");
        let (page, _) = native.readdir_plus_page(dir, b"", 100).unwrap();
        assert_eq!(page.len(), sizes.len());
        if cluster.io_requests("obj_stamp") == stamps {
            break;
        }
        assert!(Instant::now() < deadline, "listings never skipped the io servers");
        std::thread::sleep(Duration::from_millis(20));
    }
    let expected = |page: &[(String, u64)]| {
        let mut want: Vec<(String, u64)> = sizes
            .iter()
            .enumerate()
            .map(|(k, s)| (format!("f{k}"), *s as u64))
            .collect();
        want.sort();
        assert_eq!(page, want.as_slice());
    };
    let (page, _) = native.readdir_plus_page(dir, b"", 100).unwrap();
    expected(
        &page
            .iter()
            .map(|(n, a)| (n.to_string(), a.size))
            .collect::<Vec<_>>(),
    );

    // Through a mount that never saw them: `ls -l`.
    let mount = Mount::new(&cluster);
    let stamps = cluster.io_requests("obj_stamp");
    let mut listed: Vec<(String, u64)> = std::fs::read_dir(mount.join("listed"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), e.metadata().unwrap().len())
        })
        .collect();
    listed.sort();
    assert_eq!(
        cluster.io_requests("obj_stamp") - stamps,
        0.0,
        "ls -l asked the io servers"
    );
    expected(&listed);

    // A file being written: its size is the io servers' (asked), in both listings.
    let open = native
        .open(
            "/listed/f3",
            &OpenOptions {
                write: true,
                ..Default::default()
            },
        )
        .unwrap();
    open.write_at(sizes[3] as u64, b"0123456789").unwrap();
    let (page, _) = native.readdir_plus_page(dir, b"", 100).unwrap();
    let f3 = page.iter().find(|(n, _)| n.as_bytes() == b"f3").unwrap();
    assert_eq!(f3.1.size, sizes[3] as u64 + 10);
    let other = Mount::new(&cluster);
    let seen = std::fs::read_dir(other.join("listed"))
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.file_name() == "f3")
        .unwrap();
    assert_eq!(seen.metadata().unwrap().len(), sizes[3] as u64 + 10);
    open.close().unwrap();
}

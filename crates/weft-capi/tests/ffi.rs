//! The exported functions called as C calls them (through the rlib): misuse is an error
//! return and never a crash, handles work across threads and outlive their client,
//! directories read page by page, and a failure's message names the server.

use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr::{null, null_mut};
use weft::*;
use weft_testkit::TestCluster;

fn errno() -> c_int {
    // SAFETY: reading this thread's errno.
    unsafe { *libc::__errno_location() }
}

fn set_errno(value: c_int) {
    // SAFETY: writing this thread's errno.
    unsafe { *libc::__errno_location() = value };
}

fn last_error() -> String {
    // SAFETY: weft_last_error_message returns a NUL-terminated string.
    unsafe { CStr::from_ptr(weft_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

fn c(text: &str) -> CString {
    CString::new(text).unwrap()
}

const EINVAL: c_int = -libc::EINVAL;

/// A client connected to `cluster` through the C API.
fn connect(cluster: &TestCluster) -> *mut weft_client_t {
    let addr = c(&cluster.meta_addr());
    let key = c(cluster.key_path().to_str().unwrap());
    // SAFETY: valid strings.
    let client = unsafe { weft_connect_key(addr.as_ptr(), key.as_ptr()) };
    assert!(!client.is_null(), "weft_connect: {}", last_error());
    client
}

fn open(client: *mut weft_client_t, path: &str, flags: c_int) -> *mut weft_file_t {
    let path = c(path);
    // SAFETY: a live client and a valid string.
    let file = unsafe { weft_open(client, path.as_ptr(), flags, 0o644, null()) };
    assert!(!file.is_null(), "weft_open: {}", last_error());
    file
}

#[test]
fn null_arguments_are_einval_without_touching_a_server() {
    let mut byte = 0u8;
    let mut stat = weft_stat_t::default();
    let mut layout = weft_layout_t::default();
    let mut fs = weft_statfs_t::default();
    let path = c("/x");
    // SAFETY: every pointer is NULL or valid: the point is that NULLs are reported.
    unsafe {
        assert_eq!(weft_disconnect(null_mut()), EINVAL);
        assert_eq!(weft_close(null_mut()), EINVAL);
        assert_eq!(weft_closedir(null_mut()), EINVAL);
        assert_eq!(
            weft_pread(null_mut(), (&mut byte as *mut u8).cast(), 1, 0),
            EINVAL as isize
        );
        assert_eq!(
            weft_pwrite(null_mut(), (&byte as *const u8).cast(), 1, 0),
            EINVAL as isize
        );
        assert_eq!(weft_fsync(null_mut()), EINVAL);
        assert_eq!(weft_ftruncate(null_mut(), 0), EINVAL);
        assert_eq!(weft_fstat(null_mut(), &mut stat), EINVAL);
        assert_eq!(weft_fget_layout(null_mut(), &mut layout, null_mut(), 0), EINVAL);
        assert_eq!(weft_readdir(null_mut(), null_mut()), EINVAL);
        assert_eq!(weft_mkdir(null_mut(), path.as_ptr(), 0o755), EINVAL);
        assert_eq!(weft_rmdir(null_mut(), path.as_ptr()), EINVAL);
        assert_eq!(weft_unlink(null_mut(), path.as_ptr()), EINVAL);
        assert_eq!(weft_rename(null_mut(), path.as_ptr(), path.as_ptr()), EINVAL);
        assert_eq!(weft_chmod(null_mut(), path.as_ptr(), 0o644), EINVAL);
        assert_eq!(weft_truncate(null_mut(), path.as_ptr(), 0), EINVAL);
        assert_eq!(weft_stat(null_mut(), path.as_ptr(), &mut stat), EINVAL);
        assert_eq!(
            weft_get_layout(null_mut(), path.as_ptr(), &mut layout, null_mut(), 0),
            EINVAL
        );
        assert_eq!(weft_set_dir_layout(null_mut(), path.as_ptr(), null()), EINVAL);
        assert_eq!(weft_statfs(null_mut(), &mut fs), EINVAL);
        assert!(
            last_error().starts_with("weft_statfs: client is NULL"),
            "{}",
            last_error()
        );
        set_errno(0);
        assert!(weft_open(null_mut(), path.as_ptr(), WEFT_O_RDONLY, 0, null()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        set_errno(0);
        assert!(weft_opendir(null_mut(), path.as_ptr()).is_null());
        assert_eq!(errno(), libc::EINVAL);
    }
}

#[test]
fn connect_failures_set_errno_and_explain() {
    // SAFETY: valid strings.
    unsafe {
        set_errno(0);
        assert!(weft_connect(c"\xff\xfe".as_ptr()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(last_error().contains("not UTF-8"), "{}", last_error());
    }
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    weft_client::ClusterKey::load_or_create(&key).unwrap();
    let key = c(key.to_str().unwrap());
    // SAFETY: valid strings.
    unsafe {
        set_errno(0);
        // Nothing listens on port 1.
        assert!(weft_connect_key(c"127.0.0.1:1".as_ptr(), key.as_ptr()).is_null());
        assert_eq!(errno(), libc::EHOSTDOWN);
        assert!(last_error().contains("127.0.0.1:1"), "{}", last_error());
        // No key in the file named.
        set_errno(0);
        assert!(weft_connect_key(c"127.0.0.1:1".as_ptr(), c"/nonexistent/cluster.key".as_ptr()).is_null());
        assert_eq!(errno(), libc::EACCES);
        assert!(
            last_error().contains("/nonexistent/cluster.key"),
            "{}",
            last_error()
        );
    }
}

#[test]
fn version_is_the_crate_version() {
    // SAFETY: a static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(weft_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn misuse_of_live_handles_is_reported() {
    let cluster = TestCluster::start();
    let client = connect(&cluster);
    let file = open(client, "/f", WEFT_O_RDWR | WEFT_O_CREAT);
    let data = [7u8; 100];
    let mut back = [0u8; 100];
    let mut stat = weft_stat_t::default();
    // SAFETY: live handles; pointers NULL or valid for the counts given.
    unsafe {
        assert_eq!(weft_pwrite(file, data.as_ptr().cast(), 100, 0), 100);
        assert_eq!(weft_pread(file, null_mut(), 1, 0), -libc::EFAULT as isize);
        assert_eq!(weft_pwrite(file, null(), 1, 0), -libc::EFAULT as isize);
        assert_eq!(weft_pread(file, null_mut(), 0, 0), 0);
        let too_many = isize::MAX as usize + 1;
        assert_eq!(
            weft_pread(file, back.as_mut_ptr().cast(), too_many, 0),
            EINVAL as isize
        );
        assert_eq!(
            weft_pwrite(file, data.as_ptr().cast(), usize::MAX, 0),
            EINVAL as isize
        );
        assert_eq!(weft_pread(file, back.as_mut_ptr().cast(), 1, -5), EINVAL as isize);
        assert_eq!(
            weft_pwrite(file, data.as_ptr().cast(), 1, i64::MIN),
            EINVAL as isize
        );
        // Past the largest file offset: EFBIG, as a local file system answers.
        assert_eq!(
            weft_pwrite(file, data.as_ptr().cast(), 1, i64::MAX),
            -libc::EFBIG as isize
        );
        assert_eq!(weft_fstat(file, null_mut()), EINVAL);
        assert_eq!(weft_ftruncate(file, -1), EINVAL);
        assert_eq!(weft_close(file), 0);

        // Read-only and write-only handles refuse the other direction with EBADF.
        let reader = open(client, "/f", WEFT_O_RDONLY);
        assert_eq!(
            weft_pwrite(reader, data.as_ptr().cast(), 1, 0),
            -libc::EBADF as isize
        );
        assert!(
            last_error().contains("not opened for writing"),
            "{}",
            last_error()
        );
        assert_eq!(weft_ftruncate(reader, 0), -libc::EBADF);
        assert_eq!(weft_pread(reader, back.as_mut_ptr().cast(), 100, 0), 100);
        assert_eq!(back, data);
        assert_eq!(weft_close(reader), 0);
        let writer = open(client, "/f", WEFT_O_WRONLY);
        assert_eq!(
            weft_pread(writer, back.as_mut_ptr().cast(), 1, 0),
            -libc::EBADF as isize
        );
        assert_eq!(weft_close(writer), 0);

        // Paths that are NULL, not UTF-8, relative, or with a bad mode or flags.
        assert_eq!(weft_stat(client, null(), &mut stat), EINVAL);
        assert_eq!(weft_stat(client, c"/\xff".as_ptr(), &mut stat), EINVAL);
        assert!(last_error().contains("not UTF-8"), "{}", last_error());
        assert_eq!(weft_stat(client, c"f".as_ptr(), &mut stat), EINVAL);
        assert_eq!(weft_rename(client, c"/f".as_ptr(), null()), EINVAL);
        assert_eq!(weft_mkdir(client, c"/d".as_ptr(), 0o40755), EINVAL);
        assert_eq!(weft_chmod(client, c"/f".as_ptr(), 0o10000), EINVAL);
        for flags in [3, WEFT_O_RDWR | 0o4000000, WEFT_O_RDWR | WEFT_O_EXCL] {
            set_errno(0);
            assert!(weft_open(client, c"/g".as_ptr(), flags, 0o644, null()).is_null());
            assert_eq!(errno(), libc::EINVAL, "flags {flags:#o}");
        }
        let unknown_fields = weft_layout_t {
            fields: 0x80,
            ..Default::default()
        };
        assert!(weft_open(
            client,
            c"/g".as_ptr(),
            WEFT_O_RDWR | WEFT_O_CREAT,
            0o644,
            &unknown_fields
        )
        .is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(
            weft_set_dir_layout(client, c"/".as_ptr(), &unknown_fields),
            EINVAL
        );
        assert_eq!(weft_stat(client, c"/g".as_ptr(), &mut stat), -libc::ENOENT);

        // A directory as a file, a file as a directory.
        assert!(weft_open(client, c"/".as_ptr(), WEFT_O_RDONLY, 0, null()).is_null());
        assert_eq!(errno(), libc::EISDIR);
        assert!(weft_opendir(client, c"/f".as_ptr()).is_null());
        assert_eq!(errno(), libc::ENOTDIR);
        assert_eq!(weft_disconnect(client), 0);
    }
}

#[test]
fn directories_are_read_page_by_page() {
    let cluster = TestCluster::start();
    let client = connect(&cluster);
    let mut names: Vec<String> = (0..20).map(|k| format!("f{k:02}")).collect();
    // SAFETY: live handles and valid strings throughout.
    unsafe {
        assert_eq!(weft_mkdir(client, c"/d".as_ptr(), 0o755), 0);
        for name in &names {
            let file = open(
                client,
                &format!("/d/{name}"),
                WEFT_O_WRONLY | WEFT_O_CREAT | WEFT_O_EXCL,
            );
            assert_eq!(weft_close(file), 0);
        }
        assert_eq!(weft_mkdir(client, c"/d/sub".as_ptr(), 0o755), 0);
        names.push("sub".into());
        // Pages of 3 entries: 21 entries take 7 full pages and an empty last answer.
        weft::dir::set_page_entries(3);
        let dir = weft_opendir(client, c"/d".as_ptr());
        assert!(!dir.is_null(), "{}", last_error());
        let mut entry = std::mem::zeroed::<weft_dirent_t>();
        let mut seen = Vec::new();
        loop {
            match weft_readdir(dir, &mut entry) {
                1 => {
                    let name = CStr::from_ptr(entry.name.as_ptr() as *const c_char);
                    let name = name.to_str().unwrap().to_owned();
                    let want = if name == "sub" { WEFT_DT_DIR } else { WEFT_DT_REG };
                    assert_eq!(entry.kind, want, "{name}");
                    seen.push(name);
                }
                0 => break,
                r => panic!("weft_readdir: {r}: {}", last_error()),
            }
        }
        assert_eq!(seen, names);
        assert_eq!(weft_readdir(dir, &mut entry), 0);
        assert_eq!(weft_readdir(dir, null_mut()), EINVAL);
        assert_eq!(weft_closedir(dir), 0);
        weft::dir::set_page_entries(u32::MAX);
        assert_eq!(weft_disconnect(client), 0);
    }
}

/// `weft_stat_many` answers for many names of one directory in one manager request
/// (`lookup_many`; a `weft_stat` of each is a resolve per name), sizes included; a name
/// not there is zeroed and not counted; bad arguments are EINVAL.
#[test]
fn many_names_are_stat_in_one_manager_request() {
    let cluster = TestCluster::start();
    let client = connect(&cluster);
    // SAFETY: live handles, valid strings and buffers of the sizes given.
    unsafe {
        assert_eq!(weft_mkdir(client, c"/many".as_ptr(), 0o755), 0);
        for k in 0..30usize {
            let file = open(
                client,
                &format!("/many/f{k}"),
                WEFT_O_WRONLY | WEFT_O_CREAT | WEFT_O_EXCL,
            );
            let data = vec![7u8; k * 100];
            assert_eq!(
                weft_pwrite(file, data.as_ptr().cast(), data.len(), 0),
                data.len() as isize
            );
            assert_eq!(weft_close(file), 0);
        }
        let mut names: Vec<CString> = (0..30).map(|k| c(&format!("f{k}"))).collect();
        names.insert(5, c("missing"));
        let pointers: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let mut out = vec![weft_stat_t::default(); pointers.len()];
        let lookups = cluster.manager_requests("lookup") + cluster.manager_requests("resolve");
        let batches = cluster.manager_requests("lookup_many");
        let found = weft_stat_many(
            client,
            c"/many".as_ptr(),
            pointers.as_ptr(),
            pointers.len(),
            out.as_mut_ptr(),
        );
        assert_eq!(found, 30, "{}", last_error());
        assert_eq!(cluster.manager_requests("lookup_many") - batches, 1.0);
        let per_name = cluster.manager_requests("lookup") + cluster.manager_requests("resolve") - lookups;
        assert!(per_name <= 1.0, "{per_name} lookups besides the one lookup-many");
        for (i, st) in out.iter().enumerate() {
            match i.cmp(&5) {
                std::cmp::Ordering::Equal => assert_eq!(st.mode, 0, "the missing name is zeroed"),
                std::cmp::Ordering::Less => assert_eq!(st.size, (i * 100) as u64, "f{i}"),
                std::cmp::Ordering::Greater => assert_eq!(st.size, ((i - 1) * 100) as u64, "f{}", i - 1),
            }
        }
        assert_eq!(
            weft_stat_many(client, c"/many".as_ptr(), null(), 1, out.as_mut_ptr()),
            EINVAL
        );
        let slash = [c"a/b".as_ptr()];
        assert_eq!(
            weft_stat_many(client, c"/many".as_ptr(), slash.as_ptr(), 1, out.as_mut_ptr()),
            EINVAL
        );
        assert_eq!(
            weft_stat_many(
                client,
                c"/many".as_ptr(),
                pointers.as_ptr(),
                WEFT_STAT_MANY_MAX + 1,
                out.as_mut_ptr()
            ),
            EINVAL
        );
        assert_eq!(
            weft_stat_many(
                client,
                c"/many/f1".as_ptr(),
                pointers.as_ptr(),
                1,
                out.as_mut_ptr()
            ),
            -libc::ENOTDIR
        );
        assert_eq!(weft_disconnect(client), 0);
    }
}

/// `weft_create_many` makes many files of one directory in one manager request
/// (`create_many`; a `weft_open` with O_CREAT of each is a create per file), each with
/// the mode given; a name that exists or is given twice gets EEXIST in `errors` and is
/// not counted; bad arguments are EINVAL, a file for `dir` ENOTDIR.
#[test]
fn many_files_are_created_in_one_manager_request() {
    let cluster = TestCluster::start();
    let client = connect(&cluster);
    // SAFETY: live handles, valid strings and buffers of the sizes given.
    unsafe {
        assert_eq!(weft_mkdir(client, c"/made".as_ptr(), 0o755), 0);
        let file = open(client, "/made/taken", WEFT_O_WRONLY | WEFT_O_CREAT | WEFT_O_EXCL);
        assert_eq!(weft_close(file), 0);
        let mut names: Vec<CString> = (0..40).map(|k| c(&format!("n{k}"))).collect();
        names.insert(3, c("taken"));
        names.insert(7, c("n2"));
        let pointers: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let mut errors = vec![-1; pointers.len()];
        let creates = cluster.manager_requests("create");
        let batches = cluster.manager_requests("create_many");
        let made = weft_create_many(
            client,
            c"/made".as_ptr(),
            pointers.as_ptr(),
            pointers.len(),
            0o600,
            errors.as_mut_ptr(),
        );
        assert_eq!(made, 40, "{}", last_error());
        assert_eq!(cluster.manager_requests("create_many") - batches, 1.0);
        assert_eq!(cluster.manager_requests("create") - creates, 0.0);
        for (i, e) in errors.iter().enumerate() {
            match i {
                3 | 7 => assert_eq!(*e, libc::EEXIST, "{:?}", names[i]),
                _ => assert_eq!(*e, 0, "{:?}", names[i]),
            }
        }
        let mut st = weft_stat_t::default();
        assert_eq!(weft_stat(client, c"/made/n39".as_ptr(), &mut st), 0);
        assert_eq!(st.mode & 0o7777, 0o600);
        assert_eq!(st.size, 0);
        let mut errors1 = [0];
        assert_eq!(
            weft_create_many(client, c"/made".as_ptr(), null(), 1, 0o600, errors1.as_mut_ptr()),
            EINVAL
        );
        let slash = [c"a/b".as_ptr()];
        assert_eq!(
            weft_create_many(
                client,
                c"/made".as_ptr(),
                slash.as_ptr(),
                1,
                0o600,
                errors1.as_mut_ptr()
            ),
            EINVAL
        );
        assert_eq!(
            weft_create_many(client, c"/made".as_ptr(), slash.as_ptr(), 1, 0o600, null_mut()),
            EINVAL
        );
        assert_eq!(
            weft_create_many(
                client,
                c"/made".as_ptr(),
                pointers.as_ptr(),
                WEFT_CREATE_MANY_MAX + 1,
                0o600,
                errors.as_mut_ptr()
            ),
            EINVAL
        );
        assert_eq!(
            weft_create_many(
                client,
                c"/made".as_ptr(),
                pointers.as_ptr(),
                1,
                0o170_000,
                errors.as_mut_ptr()
            ),
            EINVAL
        );
        assert_eq!(
            weft_create_many(
                client,
                c"/made/n1".as_ptr(),
                pointers.as_ptr(),
                1,
                0o600,
                errors.as_mut_ptr()
            ),
            -libc::ENOTDIR
        );
        assert_eq!(weft_disconnect(client), 0);
    }
}

#[test]
fn file_handles_are_shared_by_threads_and_outlive_their_client() {
    let cluster = TestCluster::start();
    let client = connect(&cluster);
    let file = open(client, "/shared", WEFT_O_RDWR | WEFT_O_CREAT);
    // Raw pointers are not Send; the handle is documented as shareable, which is what
    // this test checks.
    let handle = file as usize;
    const PART: usize = 300_000;
    let threads: Vec<_> = (0..4u8)
        .map(|k| {
            std::thread::spawn(move || {
                let data = vec![k + 1; PART];
                let at = (k as usize * PART) as i64;
                // SAFETY: a live handle; `data` is valid for PART bytes.
                let n = unsafe { weft_pwrite(handle as *mut weft_file_t, data.as_ptr().cast(), PART, at) };
                assert_eq!(n, PART as isize, "{}", last_error());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // SAFETY: live handles until closed; buffers valid for their lengths.
    unsafe {
        assert_eq!(weft_disconnect(client), 0);
        let mut back = vec![0u8; 4 * PART + 10];
        assert_eq!(
            weft_pread(file, back.as_mut_ptr().cast(), back.len(), 0),
            (4 * PART) as isize
        );
        for (k, chunk) in back[..4 * PART].chunks(PART).enumerate() {
            assert!(chunk.iter().all(|b| *b == k as u8 + 1), "part {k}");
        }
        let mut stat = weft_stat_t::default();
        assert_eq!(weft_fstat(file, &mut stat), 0);
        assert_eq!(stat.size, 4 * PART as u64);
        assert_eq!(stat.mode, WEFT_S_IFREG | 0o644);
        assert_eq!(weft_fsync(file), 0);
        assert_eq!(weft_close(file), 0);
    }
}

#[test]
fn a_lost_server_is_an_error_that_names_it() {
    let cluster = TestCluster::start();
    let client = connect(&cluster);
    let file = open(client, "/f", WEFT_O_RDWR | WEFT_O_CREAT);
    let data = vec![1u8; 1 << 20];
    let mut layout = weft_layout_t::default();
    let mut servers = [0u32; WEFT_STRIPE_COUNT_MAX as usize];
    // SAFETY: live handles; buffers valid for their lengths.
    unsafe {
        assert_eq!(
            weft_pwrite(file, data.as_ptr().cast(), data.len(), 0),
            data.len() as isize
        );
        let count = weft_fget_layout(file, &mut layout, servers.as_mut_ptr(), servers.len());
        assert!(count >= 2, "{count}: {}", last_error());
        let victim = servers[0];
        let addr = cluster.addr(victim);
        cluster.kill9(victim);
        let mut back = vec![0u8; data.len()];
        let r = weft_pread(file, back.as_mut_ptr().cast(), back.len(), 0);
        assert!(
            r == -libc::EHOSTDOWN as isize || r == -libc::ETIMEDOUT as isize,
            "{r}: {}",
            last_error()
        );
        assert!(last_error().starts_with("weft_pread: "), "{}", last_error());
        assert!(
            last_error().contains(&addr),
            "{} does not name {addr}",
            last_error()
        );
        assert_eq!(weft_close(file), 0);
        assert_eq!(weft_disconnect(client), 0);
    }
}

#[test]
fn append_handles_write_at_the_end_whoever_wrote_last() {
    let cluster = TestCluster::start();
    let client = connect(&cluster);
    let first = open(client, "/log", WEFT_O_WRONLY | WEFT_O_CREAT | WEFT_O_APPEND);
    let second = open(client, "/log", WEFT_O_RDWR | WEFT_O_APPEND);
    // Offsets are ignored on append handles, as pwrite(2) ignores them on O_APPEND.
    for (k, file) in [first, second, first, second].into_iter().enumerate() {
        let line = format!("line {k}\n");
        // SAFETY: a live handle and a readable buffer.
        let n = unsafe { weft_pwrite(file, line.as_ptr().cast(), line.len(), 0) };
        assert_eq!(n, line.len() as isize, "{}", last_error());
    }
    // Appending through a read-only handle is refused at open.
    let path = c("/log");
    // SAFETY: a live client and a valid string.
    let refused = unsafe { weft_open(client, path.as_ptr(), WEFT_O_RDONLY | WEFT_O_APPEND, 0, null()) };
    assert!(refused.is_null());
    assert_eq!(errno(), libc::EINVAL);
    let mut buf = [0u8; 64];
    // SAFETY: a live handle and a writable buffer.
    let n = unsafe { weft_pread(second, buf.as_mut_ptr().cast(), buf.len(), 0) };
    assert_eq!(&buf[..n as usize], b"line 0\nline 1\nline 2\nline 3\n");
    // SAFETY: live handles, closed once.
    unsafe {
        assert_eq!(weft_close(first), 0);
        assert_eq!(weft_close(second), 0);
        assert_eq!(weft_disconnect(client), 0);
    }
}

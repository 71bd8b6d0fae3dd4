//! The view functions of the C ABI, called as C calls them (through the rlib), against
//! a real cluster: darray, partition and wire-form views write what a contiguous read
//! then finds, typed memory moves the right bytes, and misuse is an errno, never a
//! crash. Also runs the C program c/weft_view_test.c (built by `make build`).

use std::ffi::{c_int, CStr, CString};
use std::ptr::{null, null_mut};
use weft::*;
use weft_testkit::TestCluster;

fn last_error() -> String {
    // SAFETY: weft_last_error_message returns a NUL-terminated string.
    unsafe { CStr::from_ptr(weft_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

fn errno() -> c_int {
    // SAFETY: reading this thread's errno.
    unsafe { *libc::__errno_location() }
}

struct Session {
    client: *mut weft_client_t,
}

impl Session {
    fn new(cluster: &TestCluster) -> Session {
        let addr = CString::new(cluster.meta_addr()).unwrap();
        let key = CString::new(cluster.key_path().to_str().unwrap()).unwrap();
        // SAFETY: valid strings.
        let client = unsafe { weft_connect_key(addr.as_ptr(), key.as_ptr()) };
        assert!(!client.is_null(), "{}", last_error());
        Session { client }
    }

    fn open(&self, path: &str, flags: c_int) -> *mut weft_file_t {
        let path = CString::new(path).unwrap();
        // SAFETY: a live client and a valid string.
        let file = unsafe { weft_open(self.client, path.as_ptr(), flags, 0o644, null()) };
        assert!(!file.is_null(), "{}", last_error());
        file
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: the live client of this session.
        unsafe { weft_disconnect(self.client) };
    }
}

fn checked<T>(handle: *mut T) -> *mut T {
    assert!(!handle.is_null(), "{}", last_error());
    handle
}

#[test]
fn darray_views_from_four_handles_fill_the_matrix() {
    let cluster = TestCluster::start();
    let session = Session::new(&cluster);
    let (rows, cols, k) = (200u64, 130u64, 4i64);
    let element = |i: u64, j: u64| (i * 7 + j * 3 + 1) as u8;
    // SAFETY: every handle is live until freed or closed below; buffers are sized.
    unsafe {
        let byte = checked(weft_type_bytes(1));
        for rank in 0..4u64 {
            let file = session.open("/matrix", WEFT_O_RDWR | WEFT_O_CREAT);
            let darray = checked(weft_type_darray(
                4,
                rank,
                2,
                [rows, cols].as_ptr(),
                [WEFT_DISTRIBUTE_CYCLIC; 2].as_ptr(),
                [k, k].as_ptr(),
                [2, 2].as_ptr(),
                WEFT_ORDER_C,
                byte,
            ));
            assert_eq!(weft_set_view(file, 0, darray), 0, "{}", last_error());
            // The view keeps its own reference: the type may go now.
            assert_eq!(weft_type_free(darray), 0);
            let (pr, pc) = (rank / 2, rank % 2);
            let mine: Vec<u8> = (0..rows)
                .filter(|i| (i / k as u64) % 2 == pr)
                .flat_map(|i| {
                    (0..cols)
                        .filter(move |j| (j / k as u64) % 2 == pc)
                        .map(move |j| element(i, j))
                })
                .collect();
            let n = weft_write_view(file, mine.as_ptr().cast(), mine.len(), 0);
            assert_eq!(n, mine.len() as isize, "{}", last_error());
            let mut back = vec![0u8; mine.len()];
            let n = weft_read_view(file, back.as_mut_ptr().cast(), back.len(), 0);
            assert_eq!(n, mine.len() as isize, "{}", last_error());
            assert!(back == mine, "rank {rank}");
            assert_eq!(weft_close(file), 0);
        }
        weft_type_free(byte);
        let file = session.open("/matrix", WEFT_O_RDONLY);
        let mut whole = vec![0u8; (rows * cols) as usize];
        assert_eq!(
            weft_pread(file, whole.as_mut_ptr().cast(), whole.len(), 0),
            whole.len() as isize
        );
        for i in 0..rows {
            for j in 0..cols {
                assert_eq!(whole[(i * cols + j) as usize], element(i, j), "({i}, {j})");
            }
        }
        weft_close(file);
    }
}

#[test]
fn partitions_wire_views_and_typed_memory() {
    let cluster = TestCluster::start();
    let session = Session::new(&cluster);
    // SAFETY: live handles and sized buffers throughout.
    unsafe {
        let file = session.open("/p", WEFT_O_RDWR | WEFT_O_CREAT);
        // Partition: 10 bytes every 30 from offset 5.
        assert_eq!(weft_set_partition(file, 5, 10, 30), 0, "{}", last_error());
        let data: Vec<u8> = (1..=100u8).collect();
        assert_eq!(weft_write_view(file, data.as_ptr().cast(), 100, 0), 100);
        // Back to the whole file: the partition's bytes are where they should be.
        assert_eq!(weft_set_view(file, 0, null()), 0);
        let mut whole = vec![0u8; 300];
        assert_eq!(weft_pread(file, whole.as_mut_ptr().cast(), 300, 0), 285);
        for (v, byte) in data.iter().enumerate() {
            let offset = 5 + (v / 10) * 30 + v % 10;
            assert_eq!(whole[offset], *byte, "view byte {v}");
        }
        // The same view in its wire form reads the same bytes.
        let wire = weft_client::View::partition(5, 10, 30).unwrap().encode();
        assert_eq!(
            weft_set_view_wire(file, wire.as_ptr(), wire.len()),
            0,
            "{}",
            last_error()
        );
        let mut back = vec![0u8; 100];
        assert_eq!(weft_read_view(file, back.as_mut_ptr().cast(), 100, 0), 100);
        assert_eq!(back, data);
        // Reading past the end of the file is short.
        assert_eq!(weft_read_view(file, back.as_mut_ptr().cast(), 100, 50), 50);

        // Typed memory: every other 5-byte group of a buffer (hvector, stride 10).
        let five = checked(weft_type_bytes(5));
        let every_other = checked(weft_type_hvector(10, 1, 10, five));
        let mut spread = vec![0xEEu8; 95];
        assert_eq!(
            weft_read_view_typed(file, spread.as_mut_ptr().cast(), every_other, 50, 0),
            50,
            "{}",
            last_error()
        );
        for g in 0..10 {
            assert_eq!(&spread[g * 10..g * 10 + 5], &data[g * 5..g * 5 + 5], "group {g}");
            if g < 9 {
                assert!(spread[g * 10 + 5..g * 10 + 10].iter().all(|&b| b == 0xEE));
            }
        }
        let backwards = [9u8, 9, 9, 9, 9, 0, 0, 0, 0, 0];
        assert_eq!(
            weft_write_view_typed(file, backwards.as_ptr().cast(), five, 5, 0),
            5
        );
        assert_eq!(weft_read_view(file, back.as_mut_ptr().cast(), 5, 0), 5);
        assert_eq!(&back[..5], &[9; 5]);

        // A struct type whose fields run backwards in memory is a fine memory type but
        // not a view: EINVAL with the reason.
        let fields = [five as *const weft_type_t, five];
        let st = checked(weft_type_struct(
            2,
            [1u64, 1].as_ptr(),
            [20i64, 0].as_ptr(),
            fields.as_ptr(),
        ));
        assert_eq!(weft_type_size(st), 10);
        assert_eq!(weft_set_view(file, 0, st), -libc::EINVAL);
        assert!(last_error().contains("monoton"), "{}", last_error());
        weft_type_free(st);
        weft_type_free(every_other);
        weft_type_free(five);
        weft_close(file);
    }
}

#[test]
fn misuse_is_an_errno_never_a_crash() {
    let cluster = TestCluster::start();
    let session = Session::new(&cluster);
    let einval = -libc::EINVAL;
    // SAFETY: every pointer is NULL or valid: the point is that misuse is reported.
    unsafe {
        assert!(weft_type_contiguous(3, null()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(weft_type_hindexed(2, null(), null(), null()).is_null());
        let byte = checked(weft_type_bytes(1));
        assert!(weft_type_subarray(
            2,
            [4u64, 4].as_ptr(),
            [5u64, 1].as_ptr(),
            [0u64, 0].as_ptr(),
            WEFT_ORDER_C,
            byte
        )
        .is_null());
        assert!(last_error().contains("dimension 0"), "{}", last_error());
        assert!(weft_type_subarray(1, [4u64].as_ptr(), [2u64].as_ptr(), [0u64].as_ptr(), 7, byte).is_null());
        assert!(weft_type_darray(
            4,
            9,
            1,
            [8u64].as_ptr(),
            [WEFT_DISTRIBUTE_CYCLIC].as_ptr(),
            [2i64].as_ptr(),
            [4u64].as_ptr(),
            WEFT_ORDER_C,
            byte
        )
        .is_null());
        assert!(weft_type_darray(
            4,
            0,
            1,
            [8u64].as_ptr(),
            [9].as_ptr(),
            [2i64].as_ptr(),
            [4u64].as_ptr(),
            WEFT_ORDER_C,
            byte
        )
        .is_null());
        // Wire forms: garbage and a tree deeper than the limit.
        assert!(weft_type_from_wire([1u8, 9, 9].as_ptr(), 3).is_null());
        assert_eq!(errno(), libc::EINVAL);
        let mut deep = byte as *const weft_type_t;
        let mut made = Vec::new();
        for level in 0..20 {
            let t = weft_type_hvector(2, 1, 1i64 << (2 * level + 2), deep);
            if t.is_null() {
                break;
            }
            made.push(t);
            deep = t;
        }
        assert!(last_error().contains("depth"), "{}", last_error());
        assert!(made.len() < 20);
        for t in made {
            weft_type_free(t);
        }
        assert_eq!(weft_type_free(null_mut()), einval);
        assert_eq!(weft_type_size(null()), 0);

        let file = session.open("/m", WEFT_O_RDWR | WEFT_O_CREAT);
        assert_eq!(weft_set_view(null_mut(), 0, byte), einval);
        assert_eq!(weft_set_view(file, -1, byte), einval);
        assert_eq!(weft_set_partition(file, 0, 0, 8), einval);
        assert_eq!(weft_set_partition(file, 0, 9, 8), einval);
        assert_eq!(weft_set_view_wire(file, null(), 0), einval);
        assert_eq!(weft_set_view_wire(file, [0u8; 4].as_ptr(), 4), einval);
        assert_eq!(weft_read_view(file, null_mut(), 4, 0), -(libc::EFAULT as isize));
        assert_eq!(
            weft_write_view(file, [0u8; 4].as_ptr().cast(), 4, -3),
            einval as isize
        );
        // An interval mapping past the largest file offset.
        assert_eq!(weft_set_partition(file, 0, 1, 1 << 40), 0);
        assert_eq!(
            weft_write_view(file, [0u8; 4].as_ptr().cast(), 4, 1 << 22),
            einval as isize
        );
        assert!(last_error().contains("2^62"), "{}", last_error());
        // A memory type whose data starts before the buffer.
        let before = checked(weft_type_hindexed(1, [1u64].as_ptr(), [-4i64].as_ptr(), byte));
        assert_eq!(
            weft_write_view_typed(file, [0u8; 4].as_ptr().cast(), before, 1, 0),
            einval as isize
        );
        weft_type_free(before);
        weft_close(file);
        let read_only = session.open("/m", WEFT_O_RDONLY);
        assert_eq!(
            weft_write_view(read_only, [0u8; 4].as_ptr().cast(), 4, 0),
            -(libc::EBADF as isize)
        );
        weft_close(read_only);
        weft_type_free(byte);
    }
}

#[test]
fn the_c_view_program_passes() {
    let program = weft_testkit::bin_dir().join("c").join("weft_view_test");
    assert!(
        program.exists(),
        "{} not found: the C test programs are built by `make build`",
        program.display()
    );
    let cluster = TestCluster::start();
    let mut command = std::process::Command::new(&program);
    command.env_remove("WEFT_META");
    for (k, v) in cluster.env() {
        command.env(k, v);
    }
    let out = command.output().expect("running weft_view_test");
    assert!(
        out.status.success(),
        "weft_view_test failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

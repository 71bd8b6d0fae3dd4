//! View I/O end to end against real servers: writes through random views (vector,
//! subarray, indexed, struct, resized, nested), darray CYCLIC and partition views,
//! from contiguous and noncontiguous memory, read back through other views and
//! contiguously, all checked against a reference file built byte by byte from a naive
//! typemap model. Chunks are made tiny so that requests split pieces and several are
//! in flight per server.

mod common;

use common::{build, memory_spec, model, monotonic_spec, Model, Reference, Rng, Spec};
use std::sync::{Arc, Barrier};
use weft_client::{Client, Datatype, Distribution, ErrorCode, File, Order, TransferOptions, View};
use weft_testkit::{ClusterOptions, TestCluster};

/// Small stripes: a view interval of a few KiB already spans every server.
fn cluster() -> TestCluster {
    TestCluster::start_with(&ClusterOptions {
        io_servers: 4,
        stripe_size: 4096,
        stripe_count: 0,
        ..Default::default()
    })
}

/// Requests of at most 3000 bytes per server, three in flight.
fn small_chunks(client: &Client) -> Client {
    client.with_transfer(TransferOptions {
        chunk_bytes: 3000,
        inflight_per_server: 3,
    })
}

/// Keeps the test's files small.
const FILE_BYTES_MAX: u64 = 400 << 10;

struct RandomView {
    spec: Spec,
    model: Model,
    displacement: u64,
}

impl RandomView {
    fn new(rng: &mut Rng) -> RandomView {
        loop {
            let spec = monotonic_spec(rng, 3);
            let m = model(&spec);
            let displacement = rng.between(0, 5000);
            let view = View::new(displacement, build(&spec));
            // The engine and the model agree on which filetypes are valid.
            assert_eq!(view.is_ok(), m.valid_filetype(), "{spec:?}: {view:?}");
            if view.is_ok() {
                return RandomView {
                    spec,
                    model: m,
                    displacement,
                };
            }
        }
    }

    fn set_on(&self, file: &File) {
        file.set_view(self.displacement, build(&self.spec)).unwrap();
    }

    fn file_offset(&self, v: u64) -> u64 {
        self.model.file_offset(self.displacement, v)
    }

    /// A random interval whose bytes all lie below `FILE_BYTES_MAX`.
    fn interval(&self, rng: &mut Rng) -> (u64, u64) {
        let size = self.model.data.len() as u64;
        let start = rng.between(0, 3 * size);
        let mut len = rng.between(1, 30_000);
        while len > 1 && self.file_offset(start + len - 1) >= FILE_BYTES_MAX {
            len /= 2;
        }
        assert!(self.file_offset(start + len - 1) < FILE_BYTES_MAX);
        (start, len)
    }
}

/// What a read of view bytes `[start, start + len)` must return: the bytes before the
/// first one at or past the end of the file.
fn expected_read(view: &RandomView, reference: &Reference, start: u64, len: u64) -> Vec<u8> {
    (start..start + len)
        .map(|v| view.file_offset(v))
        .take_while(|&offset| offset < reference.size)
        .map(|offset| reference.get(offset))
        .collect()
}

#[test]
fn random_views_write_and_read_back_through_other_views_and_contiguously() {
    // WEFT_TEST_SEED=n explores other cases; failures print the seed.
    let seed = std::env::var("WEFT_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7eef_0003);
    let mut rng = Rng::new(seed);
    let cluster = cluster();
    let client = small_chunks(&cluster.client());
    let file = client.create("/views", &Default::default()).unwrap();
    let mut reference = Reference::new();
    for round in 0..24 {
        let context = format!("seed {seed:#x} round {round}");
        // Write through a random view, from contiguous or noncontiguous memory.
        let writer = RandomView::new(&mut rng);
        writer.set_on(&file);
        let (start, len) = writer.interval(&mut rng);
        let data = rng.bytes(len as usize);
        if round % 3 == 1 {
            let memory_type = memory_spec(&mut rng);
            let m = model(&memory_type);
            let copies = len.div_ceil(m.data.len() as u64);
            let highest = (copies as i64 - 1) * m.extent() + m.data.iter().max().unwrap() + 1;
            let mut memory = rng.bytes(highest as usize);
            for (s, byte) in data.iter().enumerate() {
                memory[m.memory_offset(s as u64)] = *byte;
            }
            let written = file
                .write_view_from(start, len, &memory, &build(&memory_type))
                .unwrap_or_else(|e| panic!("{context}: {e}\n{:?}\n{memory_type:?}", writer.spec));
            assert_eq!(written as u64, len, "{context}");
        } else {
            assert_eq!(file.write_view(start, &data).unwrap(), data.len(), "{context}");
        }
        for (v, byte) in data.iter().enumerate() {
            reference.put(writer.file_offset(start + v as u64), *byte);
        }
        // The writer's own view reads its bytes back.
        let mut back = vec![0u8; len as usize];
        assert_eq!(file.read_view(start, &mut back).unwrap(), len as usize);
        assert!(
            back == data,
            "{context}: read back through the writing view differs"
        );

        // Another random view reads, into contiguous or noncontiguous memory.
        let reader = RandomView::new(&mut rng);
        reader.set_on(&file);
        let (start, len) = reader.interval(&mut rng);
        let expected = expected_read(&reader, &reference, start, len);
        if round % 2 == 0 {
            let mut got = vec![0xEEu8; len as usize];
            let n = file.read_view(start, &mut got).unwrap();
            assert_eq!(n, expected.len(), "{context}: short read count");
            assert!(got[..n] == expected[..], "{context}: {:?}", reader.spec);
        } else {
            let memory_type = memory_spec(&mut rng);
            let m = model(&memory_type);
            let built = build(&memory_type);
            assert_eq!(
                (m.lb, m.extent(), m.data.len() as u64),
                (built.lb(), built.extent(), built.size_bytes()),
                "{context}: model and engine disagree on the memory type {memory_type:?}"
            );
            let copies = len.div_ceil(m.data.len() as u64);
            let highest = (copies as i64 - 1) * m.extent() + m.data.iter().max().unwrap() + 1;
            let mut memory = vec![0xEEu8; highest as usize];
            let n = file
                .read_view_into(start, len, &mut memory, &build(&memory_type))
                .unwrap();
            assert_eq!(n, expected.len(), "{context}: short read count");
            let mut plain = vec![0u8; len as usize];
            let n = file.read_view(start, &mut plain).unwrap();
            assert!(plain[..n] == expected[..], "{context}: plain read differs");
            for (s, byte) in expected.iter().enumerate() {
                assert_eq!(
                    memory[m.memory_offset(s as u64)],
                    *byte,
                    "{context}: stream byte {s} of {memory_type:?}"
                );
            }
        }

        if round % 4 == 3 {
            // The whole file, contiguously.
            file.clear_view();
            let mut whole = vec![0u8; reference.size as usize + 100];
            let n = file.read_at(0, &mut whole).unwrap();
            assert_eq!(n as u64, reference.size, "{context}");
            assert!(
                whole[..n] == reference.bytes[..n],
                "{context}: contiguous read differs"
            );
        }
    }
}

/// An element value both sides compute: byte `b` of element (i, j).
fn element_byte(i: u64, j: u64, b: u64) -> u8 {
    (i.wrapping_mul(31) ^ j.wrapping_mul(17) ^ b.wrapping_mul(101) ^ (i * j % 13)) as u8
}

/// `p = grid * grid` clients with separate connections write their CYCLIC(k) x CYCLIC(k)
/// darray views of one matrix at once, then each reads its view back; the whole file
/// must be the matrix. The local order of a process's elements is modelled
/// independently of the engine: rows it owns ascending, within them columns it owns.
fn darray_round(cluster: &TestCluster, path: &str, rows: u64, cols: u64, k: u64, element: u64, order: Order) {
    let grid = 2u64;
    let setup = cluster.client();
    setup.create(path, &Default::default()).unwrap();
    let barrier = Arc::new(Barrier::new((grid * grid) as usize));
    std::thread::scope(|scope| {
        for rank in 0..grid * grid {
            let barrier = barrier.clone();
            scope.spawn(move || {
                let client = small_chunks(&cluster.client());
                let file = client
                    .open(
                        path,
                        &weft_client::OpenOptions {
                            write: true,
                            ..Default::default()
                        },
                    )
                    .unwrap();
                let filetype = Datatype::darray(
                    grid * grid,
                    rank,
                    &[rows, cols],
                    &[Distribution::Cyclic(Some(k)); 2],
                    &[grid, grid],
                    order,
                    &Datatype::bytes(element).unwrap(),
                )
                .unwrap();
                file.set_view(0, filetype).unwrap();
                let (my_row, my_col) = (rank / grid, rank % grid);
                let mine = |index: u64, coordinate: u64| (index / k) % grid == coordinate;
                let mut data = Vec::new();
                let outer = if order == Order::C { rows } else { cols };
                let inner = if order == Order::C { cols } else { rows };
                for a in 0..outer {
                    for b in 0..inner {
                        let (i, j) = if order == Order::C { (a, b) } else { (b, a) };
                        if mine(i, my_row) && mine(j, my_col) {
                            data.extend((0..element).map(|e| element_byte(i, j, e)));
                        }
                    }
                }
                barrier.wait();
                assert_eq!(file.write_view(0, &data).unwrap(), data.len());
                barrier.wait();
                let mut back = vec![0u8; data.len()];
                assert_eq!(file.read_view(0, &mut back).unwrap(), data.len());
                assert!(back == data, "rank {rank} reads back something else");
            });
        }
    });
    let file = setup.open(path, &Default::default()).unwrap();
    let total = rows * cols * element;
    let mut whole = vec![0u8; total as usize + 10];
    assert_eq!(file.read_at(0, &mut whole).unwrap() as u64, total);
    for i in 0..rows {
        for j in 0..cols {
            let linear = if order == Order::C {
                i * cols + j
            } else {
                j * rows + i
            };
            for e in 0..element {
                assert_eq!(
                    whole[(linear * element + e) as usize],
                    element_byte(i, j, e),
                    "{path}: element ({i}, {j}) byte {e}"
                );
            }
        }
    }
}

#[test]
fn clients_write_disjoint_darray_views_of_one_file_concurrently() {
    let cluster = cluster();
    darray_round(&cluster, "/matrix-c", 301, 263, 3, 1, Order::C);
    darray_round(&cluster, "/matrix-f", 97, 130, 8, 4, Order::Fortran);
}

#[test]
fn clients_write_interleaved_partitions_concurrently() {
    let cluster = cluster();
    let setup = cluster.client();
    let file = setup.create("/partitions", &Default::default()).unwrap();
    let (gsize, clients, blocks) = (1000u64, 3u64, 70u64);
    std::thread::scope(|scope| {
        for c in 0..clients {
            let cluster = &cluster;
            scope.spawn(move || {
                let client = small_chunks(&cluster.client());
                let file = client
                    .open(
                        "/partitions",
                        &weft_client::OpenOptions {
                            write: true,
                            ..Default::default()
                        },
                    )
                    .unwrap();
                file.set_partition(c * gsize, gsize, clients * gsize).unwrap();
                let data: Vec<u8> = (0..gsize * blocks).map(|x| (x * 7 + c * 50) as u8).collect();
                assert_eq!(file.write_view(0, &data).unwrap(), data.len());
            });
        }
    });
    let mut whole = vec![0u8; (gsize * clients * blocks) as usize];
    assert_eq!(file.read_at(0, &mut whole).unwrap(), whole.len());
    for (offset, byte) in whole.iter().enumerate() {
        let offset = offset as u64;
        let (block, within) = (offset / gsize, offset % gsize);
        let c = block % clients;
        let x = (block / clients) * gsize + within;
        assert_eq!(*byte, (x * 7 + c * 50) as u8, "file byte {offset}");
    }
    // A dense partition (gsize == stride) is plain contiguous I/O from its offset.
    file.set_partition(5, 4096, 4096).unwrap();
    let mut some = vec![0u8; 10_000];
    assert_eq!(file.read_view(0, &mut some).unwrap(), some.len());
    assert!(some[..] == whole[5..10_005]);
}

#[test]
fn memory_types_move_bytes_without_losing_any_and_contiguous_ones_are_taken_in_place() {
    let cluster = cluster();
    let client = small_chunks(&cluster.client());
    let file = client.create("/memory", &Default::default()).unwrap();
    // File view: 100 bytes every 300 from offset 17.
    file.set_partition(17, 100, 300).unwrap();
    // Memory: a contiguous run that starts 40 bytes into the buffer (true lb 40).
    let shifted = Datatype::structure(&[weft_client::Field {
        block_len: 1,
        displacement_bytes: 40,
        datatype: Datatype::bytes(5000).unwrap(),
    }])
    .unwrap();
    let memory: Vec<u8> = (0..5040u32).map(|x| (x % 253) as u8).collect();
    assert_eq!(file.write_view_from(0, 5000, &memory, &shifted).unwrap(), 5000);
    let mut back = vec![0u8; 5000];
    assert_eq!(file.read_view(0, &mut back).unwrap(), 5000);
    assert!(back[..] == memory[40..]);
    // A buffer too small for the memory type is refused before anything moves.
    let e = file
        .write_view_from(0, 5000, &memory[..5039], &shifted)
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    // Every third 4-byte group of memory (a strided memory type), bigger than one
    // staging round would be without the stage limit.
    let strided = Datatype::hvector(3000, 1, 12, &Datatype::bytes(4).unwrap()).unwrap();
    let mut spread = vec![0u8; 3000 * 12];
    assert_eq!(
        file.read_view_into(0, 12_000, &mut spread, &strided).unwrap(),
        5000
    );
    for g in 0..1250 {
        assert!(spread[g * 12..g * 12 + 4] == back[g * 4..g * 4 + 4], "group {g}");
        assert!(spread[g * 12 + 4..g * 12 + 12].iter().all(|&b| b == 0));
    }
}

#[test]
fn views_are_released_when_replaced_and_registered_again_after_a_server_restart() {
    let cluster = cluster();
    let client = cluster.client();
    let file = client.create("/again", &Default::default()).unwrap();
    // More views than one connection may hold at once (64): each replaced view must be
    // released on its servers, or registration would fail along the way.
    for n in 0..80u64 {
        file.set_partition(n, 7 + n % 5, 50).unwrap();
        file.write_view(0, &[n as u8; 64]).unwrap();
    }
    // Views of dropped handles are released too.
    for n in 0..80u64 {
        let handle = client
            .open(
                "/again",
                &weft_client::OpenOptions {
                    write: true,
                    ..Default::default()
                },
            )
            .unwrap();
        handle.set_partition(n, 3, 40).unwrap();
        handle.write_view(0, &[1; 30]).unwrap();
    }
    file.set_partition(0, 100, 1000).unwrap();
    let data: Vec<u8> = (0..4000u32).map(|x| x as u8).collect();
    file.write_view(0, &data).unwrap();
    // Restart an io server: its connection is replaced and the view registered again,
    // without the caller noticing.
    cluster.kill9(2);
    cluster.restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut back = vec![0u8; 4000];
    loop {
        match file.read_view(0, &mut back) {
            Ok(n) => {
                assert_eq!(n, 4000);
                break;
            }
            // The first call may still find the dead connection.
            Err(e) if e.code() == ErrorCode::Unavailable && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(back == data);
    file.write_view(4000, &data).unwrap();
    file.read_view(4000, &mut back).unwrap();
    assert!(back == data);
}

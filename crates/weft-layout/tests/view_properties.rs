//! Property tests of the view engine against a naive model that materialises typemaps
//! byte by byte, straight from the MPI definitions (typemap entries plus lb/ub markers),
//! for small random datatype trees, random stripe layouts and random intervals.

use std::sync::Arc;

use proptest::collection::vec;
use proptest::prelude::*;
use weft_layout::view::{
    pack, unpack, Datatype, Distribution, Field, Order, Piece, ServerPiece, View, ViewError,
};
use weft_layout::{Layout, ServerId};

/// A datatype as the user wrote it: what both the code and the model are built from.
#[derive(Debug, Clone)]
enum Spec {
    Bytes(u64),
    Contiguous(u64, Box<Spec>),
    Vector(u64, u64, i64, Box<Spec>),
    Hvector(u64, u64, i64, Box<Spec>),
    Indexed(Vec<(u64, i64)>, Box<Spec>),
    Hindexed(Vec<(u64, i64)>, Box<Spec>),
    IndexedBlock(u64, Vec<i64>, Box<Spec>),
    HindexedBlock(u64, Vec<i64>, Box<Spec>),
    Struct(Vec<(u64, i64, Spec)>),
    Resized(Box<Spec>, i64, i64),
    Subarray {
        sizes: Vec<u64>,
        subsizes: Vec<u64>,
        starts: Vec<u64>,
        order: Order,
        child: Box<Spec>,
    },
    Darray {
        rank: u64,
        gsizes: Vec<u64>,
        distributions: Vec<Distribution>,
        psizes: Vec<u64>,
        order: Order,
        child: Box<Spec>,
    },
}

/// An MPI typemap: data byte offsets in type order, and the extreme lb/ub markers
/// (only the lowest lb marker and highest ub marker matter for the bounds).
#[derive(Debug, Clone, Default)]
struct Model {
    data: Vec<i64>,
    lb_marker: Option<i64>,
    ub_marker: Option<i64>,
}

impl Model {
    fn lb(&self) -> i64 {
        self.lb_marker
            .unwrap_or_else(|| self.data.iter().copied().min().unwrap_or(0))
    }

    fn ub(&self) -> i64 {
        self.ub_marker
            .unwrap_or_else(|| self.data.iter().map(|d| d + 1).max().unwrap_or(0))
    }

    fn extent(&self) -> i64 {
        self.ub() - self.lb()
    }

    /// Appends a copy of `other` displaced by `by` (data and markers).
    fn append(&mut self, other: &Model, by: i64) {
        self.data.extend(other.data.iter().map(|d| d + by));
        if let Some(lb) = other.lb_marker {
            self.lb_marker = Some(self.lb_marker.map_or(lb + by, |m| m.min(lb + by)));
        }
        if let Some(ub) = other.ub_marker {
            self.ub_marker = Some(self.ub_marker.map_or(ub + by, |m| m.max(ub + by)));
        }
    }

    fn resized(mut self, lb: i64, extent: i64) -> Model {
        self.lb_marker = Some(lb);
        self.ub_marker = Some(lb + extent);
        self
    }

    fn monotonic(&self) -> bool {
        self.data.windows(2).all(|w| w[0] < w[1])
    }
}

fn model(spec: &Spec) -> Model {
    let mut out = Model::default();
    match spec {
        Spec::Bytes(n) => out.data = (0..*n as i64).collect(),
        Spec::Contiguous(count, child) => {
            let c = model(child);
            for i in 0..*count as i64 {
                out.append(&c, i * c.extent());
            }
        }
        Spec::Vector(count, block_len, stride, child) => {
            let c = model(child);
            for i in 0..*count as i64 {
                for j in 0..*block_len as i64 {
                    out.append(&c, (i * stride + j) * c.extent());
                }
            }
        }
        Spec::Hvector(count, block_len, stride, child) => {
            let c = model(child);
            for i in 0..*count as i64 {
                for j in 0..*block_len as i64 {
                    out.append(&c, i * stride + j * c.extent());
                }
            }
        }
        Spec::Indexed(blocks, child) => {
            let c = model(child);
            for &(len, displacement) in blocks {
                for j in 0..len as i64 {
                    out.append(&c, (displacement + j) * c.extent());
                }
            }
        }
        Spec::Hindexed(blocks, child) => {
            let c = model(child);
            for &(len, displacement) in blocks {
                for j in 0..len as i64 {
                    out.append(&c, displacement + j * c.extent());
                }
            }
        }
        Spec::IndexedBlock(len, displacements, child) => {
            let c = model(child);
            for &displacement in displacements {
                for j in 0..*len as i64 {
                    out.append(&c, (displacement + j) * c.extent());
                }
            }
        }
        Spec::HindexedBlock(len, displacements, child) => {
            let c = model(child);
            for &displacement in displacements {
                for j in 0..*len as i64 {
                    out.append(&c, displacement + j * c.extent());
                }
            }
        }
        Spec::Struct(fields) => {
            for (len, displacement, child) in fields {
                let c = model(child);
                for j in 0..*len as i64 {
                    out.append(&c, displacement + j * c.extent());
                }
            }
        }
        Spec::Resized(child, lb, extent) => return model(child).resized(*lb, *extent),
        Spec::Subarray {
            sizes,
            subsizes,
            starts,
            order,
            child,
        } => {
            let c = model(child);
            let ranges: Vec<Vec<u64>> = subsizes
                .iter()
                .zip(starts)
                .map(|(&sub, &start)| (start..start + sub).collect())
                .collect();
            for index in tuples(&ranges, *order) {
                out.append(&c, linear(&index, sizes, *order) * c.extent());
            }
            let total: u64 = sizes.iter().product();
            return out.resized(0, total as i64 * c.extent());
        }
        Spec::Darray {
            rank,
            gsizes,
            distributions,
            psizes,
            order,
            child,
        } => {
            let c = model(child);
            // Row-major process coordinates.
            let mut coordinates = vec![0u64; gsizes.len()];
            let mut rest = *rank;
            for d in (0..gsizes.len()).rev() {
                coordinates[d] = rest % psizes[d];
                rest /= psizes[d];
            }
            // Per dimension, the global indices this process owns: index i belongs to
            // grid coordinate (i / block) % psize.
            let owned: Vec<Vec<u64>> = (0..gsizes.len())
                .map(|d| {
                    let (g, p) = (gsizes[d], psizes[d]);
                    let block = match distributions[d] {
                        Distribution::None => g,
                        Distribution::Block(None) => g.div_ceil(p),
                        Distribution::Block(Some(b)) | Distribution::Cyclic(Some(b)) => b,
                        Distribution::Cyclic(None) => 1,
                    };
                    (0..g).filter(|i| (i / block) % p == coordinates[d]).collect()
                })
                .collect();
            for index in tuples(&owned, *order) {
                out.append(&c, linear(&index, gsizes, *order) * c.extent());
            }
            let total: u64 = gsizes.iter().product();
            return out.resized(0, total as i64 * c.extent());
        }
    }
    out
}

/// All index tuples of the Cartesian product, the fastest dimension last for C order
/// and first for Fortran order.
fn tuples(ranges: &[Vec<u64>], order: Order) -> Vec<Vec<u64>> {
    let dims: Vec<usize> = match order {
        Order::C => (0..ranges.len()).collect(),
        Order::Fortran => (0..ranges.len()).rev().collect(),
    };
    let mut out = vec![vec![0u64; ranges.len()]];
    for &d in &dims {
        let mut next = Vec::new();
        for prefix in &out {
            for &i in &ranges[d] {
                let mut t = prefix.clone();
                t[d] = i;
                next.push(t);
            }
        }
        out = next;
    }
    out
}

fn linear(index: &[u64], sizes: &[u64], order: Order) -> i64 {
    let mut value = 0u64;
    match order {
        Order::C => {
            for d in 0..sizes.len() {
                value = value * sizes[d] + index[d];
            }
        }
        Order::Fortran => {
            for d in (0..sizes.len()).rev() {
                value = value * sizes[d] + index[d];
            }
        }
    }
    value as i64
}

fn build(spec: &Spec) -> Arc<Datatype> {
    let built = match spec {
        Spec::Bytes(n) => Datatype::bytes(*n),
        Spec::Contiguous(count, child) => Datatype::contiguous(*count, &build(child)),
        Spec::Vector(count, len, stride, child) => Datatype::vector(*count, *len, *stride, &build(child)),
        Spec::Hvector(count, len, stride, child) => Datatype::hvector(*count, *len, *stride, &build(child)),
        Spec::Indexed(blocks, child) => {
            let (lens, displacements): (Vec<u64>, Vec<i64>) = blocks.iter().copied().unzip();
            Datatype::indexed(&lens, &displacements, &build(child))
        }
        Spec::Hindexed(blocks, child) => {
            let (lens, displacements): (Vec<u64>, Vec<i64>) = blocks.iter().copied().unzip();
            Datatype::hindexed(&lens, &displacements, &build(child))
        }
        Spec::IndexedBlock(len, displacements, child) => {
            Datatype::indexed_block(*len, displacements, &build(child))
        }
        Spec::HindexedBlock(len, displacements, child) => {
            Datatype::hindexed_block(*len, displacements, &build(child))
        }
        Spec::Struct(fields) => Datatype::structure(
            &fields
                .iter()
                .map(|(len, displacement, child)| Field {
                    block_len: *len,
                    displacement_bytes: *displacement,
                    datatype: build(child),
                })
                .collect::<Vec<_>>(),
        ),
        Spec::Resized(child, lb, extent) => Datatype::resized(&build(child), *lb, *extent),
        Spec::Subarray {
            sizes,
            subsizes,
            starts,
            order,
            child,
        } => Datatype::subarray(sizes, subsizes, starts, *order, &build(child)),
        Spec::Darray {
            rank,
            gsizes,
            distributions,
            psizes,
            order,
            child,
        } => Datatype::darray(
            psizes.iter().product(),
            *rank,
            gsizes,
            distributions,
            psizes,
            *order,
            &build(child),
        ),
    };
    built.unwrap_or_else(|error| panic!("building {spec:?}: {error}"))
}

/// Random small trees. `forward` biases towards file-view material: nonnegative strides
/// and displacements in increasing order.
fn spec(forward: bool) -> impl Strategy<Value = Spec> {
    // Sizes 8, 16 and 32 reach the fixed-size copy loops of pack.
    let leaf = prop_oneof![
        12 => (1u64..6).prop_map(Spec::Bytes),
        3 => prop_oneof![Just(8u64), Just(16), Just(32)].prop_map(Spec::Bytes),
        1 => Just(Spec::Bytes(0)),
    ];
    let low = if forward { 0 } else { -12 };
    leaf.prop_recursive(4, 24, 4, move |inner| {
        let displacements = move |n: usize| {
            vec(low..24i64, 1..n).prop_map(move |mut d| {
                if forward {
                    // Increments make increasing, mostly spread-out displacements.
                    let mut at = 0;
                    for x in d.iter_mut() {
                        at += *x;
                        *x = at;
                    }
                }
                d
            })
        };
        prop_oneof![
            (count(), inner.clone()).prop_map(|(c, t)| Spec::Contiguous(c, Box::new(t))),
            (count(), count(), low / 4..5, inner.clone()).prop_map(|(c, b, s, t)| Spec::Vector(
                c,
                b,
                s,
                Box::new(t)
            )),
            (count(), count(), low..40, inner.clone()).prop_map(|(c, b, s, t)| Spec::Hvector(
                c,
                b,
                s,
                Box::new(t)
            )),
            (vec(count(), 1..4), displacements(4), inner.clone()).prop_map(|(lens, d, t)| {
                let blocks = lens.into_iter().zip(d.into_iter().map(|x| x / 4)).collect();
                Spec::Indexed(blocks, Box::new(t))
            }),
            (vec(count(), 1..4), displacements(4), inner.clone())
                .prop_map(|(lens, d, t)| Spec::Hindexed(lens.into_iter().zip(d).collect(), Box::new(t))),
            (count(), displacements(4), inner.clone()).prop_map(|(len, d, t)| {
                Spec::IndexedBlock(len, d.into_iter().map(|x| x / 4).collect(), Box::new(t))
            }),
            (count(), displacements(4), inner.clone()).prop_map(|(len, d, t)| Spec::HindexedBlock(
                len,
                d,
                Box::new(t)
            )),
            (
                vec((count(), inner.clone()), 1..4),
                displacements(4).prop_map(|mut d| {
                    d.resize(4, 7);
                    d
                })
            )
                .prop_map(|(fields, d)| {
                    Spec::Struct(
                        fields
                            .into_iter()
                            .zip(d)
                            .map(|((len, t), d)| (len, d * 2, t))
                            .collect(),
                    )
                }),
            (inner.clone(), -8i64..8, 0i64..48).prop_map(|(t, lb, extent)| Spec::Resized(
                Box::new(t),
                lb,
                extent
            )),
            subarray(inner.clone()),
            darray(inner.clone(), 6),
        ]
    })
}

/// Mostly 1 to 4, sometimes 0 (an empty part), so that most trees hold data.
fn count() -> impl Strategy<Value = u64> + Clone {
    prop_oneof![10 => 1u64..5, 1 => Just(0u64)]
}

fn subarray(inner: BoxedStrategy<Spec>) -> impl Strategy<Value = Spec> {
    (
        vec((1u64..6, any::<u64>(), any::<u64>()), 1..4),
        any::<bool>(),
        inner,
    )
        .prop_map(|(dims, fortran, child)| {
            let sizes: Vec<u64> = dims.iter().map(|d| d.0).collect();
            // Mostly nonempty subsizes, sometimes 0.
            let subsizes: Vec<u64> = dims
                .iter()
                .map(|d| if d.1 % 16 == 0 { 0 } else { 1 + d.1 % d.0 })
                .collect();
            let starts = dims
                .iter()
                .zip(&subsizes)
                .map(|(d, sub)| d.2 % (d.0 - sub + 1))
                .collect();
            Spec::Subarray {
                sizes,
                subsizes,
                starts,
                order: if fortran { Order::Fortran } else { Order::C },
                child: Box::new(child),
            }
        })
}

fn darray(inner: BoxedStrategy<Spec>, gsize_max: u64) -> impl Strategy<Value = Spec> {
    (
        vec((1..gsize_max + 1, 1u64..4, 0u8..5, 0u64..3), 1..3),
        any::<u64>(),
        any::<bool>(),
        inner,
    )
        .prop_map(|(dims, seed, fortran, child)| {
            let mut gsizes = Vec::new();
            let mut psizes = Vec::new();
            let mut distributions = Vec::new();
            for (g, p, kind, extra) in dims {
                let (p, distribution) = match kind {
                    0 => (1, Distribution::None),
                    1 => (p, Distribution::Block(None)),
                    2 => (p, Distribution::Block(Some(g.div_ceil(p) + extra))),
                    3 => (p, Distribution::Cyclic(None)),
                    _ => (p, Distribution::Cyclic(Some(1 + extra))),
                };
                gsizes.push(g);
                psizes.push(p);
                distributions.push(distribution);
            }
            let processes: u64 = psizes.iter().product();
            Spec::Darray {
                rank: seed % processes,
                gsizes,
                distributions,
                psizes,
                order: if fortran { Order::Fortran } else { Order::C },
                child: Box::new(child),
            }
        })
}

/// Specs whose model stays small enough to materialise quickly.
fn small(forward: bool) -> impl Strategy<Value = (Spec, Model)> {
    spec(forward)
        .prop_map(|s| {
            let m = model(&s);
            (s, m)
        })
        .prop_filter("typemap too large", |(_, m)| m.data.len() <= 2048)
}

fn layout(stripe_size_bytes: u64, count: u32) -> Layout {
    Layout {
        stripe_size_bytes,
        servers: (0..count).map(ServerId).collect(),
        replication: Default::default(),
    }
}

/// File offset of view byte `j` in the model.
fn model_file_offset(m: &Model, displacement: u64, j: u64) -> i64 {
    let size = m.data.len() as u64;
    displacement as i64 + (j / size) as i64 * m.extent() + m.data[(j % size) as usize]
}

/// Regular shapes over elements of 1 to 64 bytes: the strided fast paths of pack and
/// the block tails of CYCLIC distributions, at sizes the general generator rarely makes.
fn regular() -> impl Strategy<Value = (Spec, Model)> {
    let element = prop_oneof![
        Just(1u64),
        Just(2),
        Just(4),
        Just(8),
        Just(16),
        Just(32),
        Just(64)
    ]
    .prop_map(Spec::Bytes)
    .boxed();
    let gappy = (element.clone(), 0i64..24)
        .prop_map(|(e, gap)| {
            let Spec::Bytes(n) = e else { unreachable!() };
            Spec::Resized(Box::new(e), 0, n as i64 + gap)
        })
        .boxed();
    let element_or_gappy = prop_oneof![3 => element.clone(), 1 => gappy].boxed();
    prop_oneof![
        (1u64..40, 1u64..4, 0i64..200, element_or_gappy.clone()).prop_map(|(c, b, s, t)| Spec::Hvector(
            c,
            b,
            s,
            Box::new(t)
        )),
        darray(element_or_gappy.clone(), 20),
        subarray(element_or_gappy.clone()),
        (vec((1u64..4, 0i64..8), 1..6), element_or_gappy.clone()).prop_map(|(blocks, t)| {
            let mut at = 0;
            let blocks = blocks
                .into_iter()
                .map(|(len, gap)| {
                    let block = (len, at + gap);
                    at += gap + len as i64;
                    block
                })
                .collect();
            Spec::Indexed(blocks, Box::new(t))
        }),
        // Two levels of distribution, as in a matrix of records.
        (darray(element.clone(), 12), 1u64..5).prop_map(|(t, c)| Spec::Contiguous(c, Box::new(t))),
    ]
    .prop_map(|s| {
        let m = model(&s);
        (s, m)
    })
    .prop_filter("typemap too large", |(_, m)| m.data.len() <= 4096)
}

#[derive(Debug, Clone)]
struct ViewCase {
    displacement: u64,
    view_offset: u64,
    len: u64,
    stripe_size_bytes: u64,
    stripe_count: u32,
    probes: Vec<u64>,
}

fn view_case() -> impl Strategy<Value = ViewCase> {
    (
        0u64..3000,
        0u64..2000,
        0u64..3000,
        512u64..2048,
        1u32..5,
        vec(any::<u64>(), 16),
    )
        .prop_map(
            |(displacement, view_offset, len, stripe_size_bytes, stripe_count, probes)| ViewCase {
                displacement,
                view_offset,
                len,
                stripe_size_bytes,
                stripe_count,
                probes,
            },
        )
}

#[derive(Debug, Clone)]
struct PackCase {
    count: u64,
    range: (u64, u64),
    slack: usize,
    seed: u64,
}

fn pack_case() -> impl Strategy<Value = PackCase> {
    (1u64..4, (any::<u64>(), any::<u64>()), 0usize..8, any::<u64>()).prop_map(
        |(count, range, slack, seed)| PackCase {
            count,
            range,
            slack,
            seed,
        },
    )
}

/// Bounds, typemap order, monotonicity and the wire round trip of any type.
fn check_datatype(spec: &Spec, m: &Model) -> Result<(), TestCaseError> {
    let t = build(spec);
    prop_assert_eq!(t.size_bytes(), m.data.len() as u64);
    prop_assert_eq!(t.lb(), m.lb());
    prop_assert_eq!(t.extent(), m.extent());
    let (true_lb, true_ub) = match (m.data.iter().min(), m.data.iter().max()) {
        (Some(&low), Some(&high)) => (low, high + 1),
        _ => (0, 0),
    };
    prop_assert_eq!(t.true_lb(), true_lb);
    prop_assert_eq!(t.true_ub(), true_ub);
    prop_assert_eq!(t.is_monotonic(), m.monotonic());
    let mut bytes = Vec::new();
    t.for_each_run(2, |offset, len| bytes.extend(offset..offset + len as i64));
    let mut expected = m.data.clone();
    expected.extend(m.data.iter().map(|d| d + m.extent()));
    prop_assert_eq!(bytes, expected);
    let decoded = Datatype::decode(&t.encode()).unwrap();
    prop_assert_eq!(&*decoded, &*t);
    Ok(())
}

/// Offsets map both ways, pieces come in file order and merged, per-server pieces
/// partition the view exactly, and views survive the wire.
fn check_view(spec: &Spec, m: &Model, case: &ViewCase) -> Result<(), TestCaseError> {
    let ViewCase {
        displacement,
        view_offset,
        len,
        stripe_size_bytes,
        stripe_count,
        ref probes,
    } = *case;
    let t = build(spec);
    let size = m.data.len() as u64;
    let valid = size == 0
        || (m.monotonic()
            && m.data[m.data.len() - 1] + 1 - m.data[0] <= m.extent()
            && displacement as i64 + m.data[0] >= 0);
    let view = View::new(displacement, t.clone());
    prop_assert_eq!(view.is_ok(), valid, "{:?}", view);
    let Ok(view) = view else { return Ok(()) };
    prop_assert_eq!(View::decode(&view.encode()).unwrap(), view.clone());
    if size == 0 {
        let expected = if len == 0 {
            None
        } else {
            Some(ViewError::EmptyView)
        };
        prop_assert_eq!(view.pieces(view_offset, len).err(), expected);
        return Ok(());
    }
    let end = view_offset + len;
    let known = end + 2 * size;
    let offsets: Vec<i64> = (0..known)
        .map(|j| model_file_offset(m, displacement, j))
        .collect();

    // view -> file, and file -> view at random probes below the last known offset.
    for j in view_offset..end {
        prop_assert_eq!(view.view_to_file(j).unwrap() as i64, offsets[j as usize]);
    }
    let last = offsets[known as usize - 1];
    for probe in probes
        .iter()
        .map(|p| p % (last as u64 + 1))
        .chain([0, offsets[0] as u64, last as u64])
    {
        let expected = offsets.partition_point(|&o| o < probe as i64) as u64;
        prop_assert_eq!(view.file_to_view(probe), expected, "file offset {}", probe);
    }

    // Pieces: exactly the model bytes, maximal runs.
    let pieces: Vec<Piece> = view.pieces(view_offset, len).unwrap().collect();
    let mut at = view_offset;
    for (index, piece) in pieces.iter().enumerate() {
        prop_assert!(piece.len > 0);
        prop_assert_eq!(piece.view_offset, at);
        for k in 0..piece.len {
            prop_assert_eq!(piece.file_offset as i64 + k as i64, offsets[(at + k) as usize]);
        }
        if let Some(next) = pieces.get(index + 1) {
            prop_assert!(
                next.file_offset > piece.file_offset + piece.len,
                "unmerged pieces"
            );
        }
        at += piece.len;
    }
    prop_assert_eq!(at, end);

    // Per-server pieces against the model's byte map grouped by stripe.
    let layout = layout(stripe_size_bytes, stripe_count);
    for server in 0..stripe_count as usize {
        let mut expected: Vec<ServerPiece> = Vec::new();
        for j in view_offset..end {
            let f = offsets[j as usize] as u64;
            let stripe = f / stripe_size_bytes;
            if stripe % stripe_count as u64 != server as u64 {
                continue;
            }
            if let Some(last) = expected.last_mut() {
                // Same stripe: not at the stripe's first byte.
                if last.file_offset + last.len == f && f != stripe * stripe_size_bytes {
                    last.len += 1;
                    continue;
                }
            }
            expected.push(ServerPiece {
                file_offset: f,
                local_offset: stripe / stripe_count as u64 * stripe_size_bytes + f % stripe_size_bytes,
                len: 1,
                view_offset: j,
            });
        }
        let mine: Vec<ServerPiece> = view
            .pieces_on(view_offset, len, &layout, server)
            .unwrap()
            .collect();
        prop_assert_eq!(mine, expected, "server {}", server);
    }
    Ok(())
}

/// Pack gathers exactly the model's bytes in type order, unpack scatters them back.
fn check_pack(spec: &Spec, m: &Model, case: &PackCase) -> Result<(), TestCaseError> {
    let PackCase {
        count,
        range,
        slack,
        seed,
    } = *case;
    let t = build(spec);
    // Shift the type so that its lowest byte is at 0 or above.
    let shift = -m.data.iter().copied().min().unwrap_or(0).min(0);
    let shifted = Datatype::structure(&[Field {
        block_len: 1,
        displacement_bytes: shift,
        datatype: t,
    }])
    .unwrap();
    let extent = m.extent();
    let stream: Vec<i64> = (0..count as i64)
        .flat_map(|i| m.data.iter().map(move |d| d + shift + i * extent))
        .collect();
    let highest = stream.iter().copied().max().map_or(0, |h| h as usize + 1);
    let memory: Vec<u8> = (0..highest + slack)
        .map(|i| (seed.wrapping_mul(i as u64 + 1).wrapping_add(i as u64) >> 7) as u8)
        .collect();
    let total = stream.len() as u64;
    let start = if total == 0 { 0 } else { range.0 % (total + 1) };
    let take = if total == start {
        0
    } else {
        range.1 % (total - start + 1)
    };
    let mut packed = vec![0u8; take as usize];
    pack(&shifted, count, &memory, start, &mut packed).unwrap();
    let expected: Vec<u8> = stream[start as usize..(start + take) as usize]
        .iter()
        .map(|&o| memory[o as usize])
        .collect();
    prop_assert_eq!(&packed, &expected);

    // Unpack into a different buffer: later writes to the same byte win, as in type order.
    let mut target: Vec<u8> = memory.iter().map(|b| b ^ 0x5a).collect();
    let mut expected_target = target.clone();
    for (k, &o) in stream[start as usize..(start + take) as usize].iter().enumerate() {
        expected_target[o as usize] = packed[k];
    }
    unpack(&shifted, count, &packed, start, &mut target).unwrap();
    prop_assert_eq!(&target, &expected_target);

    // A buffer one byte short is refused before anything is copied.
    if take > 0 && highest > 0 {
        let error = pack(&shifted, count, &memory[..highest - 1], start, &mut packed);
        prop_assert!(matches!(error, Err(ViewError::OutOfBounds { .. })), "{:?}", error);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn datatypes_match_the_model((spec, m) in small(false)) {
        check_datatype(&spec, &m)?;
    }

    #[test]
    fn regular_datatypes_match_the_model((spec, m) in regular()) {
        check_datatype(&spec, &m)?;
    }

    #[test]
    fn views_match_the_model((spec, m) in small(true), case in view_case()) {
        check_view(&spec, &m, &case)?;
    }

    #[test]
    fn regular_views_match_the_model((spec, m) in regular(), case in view_case()) {
        check_view(&spec, &m, &case)?;
    }

    #[test]
    fn pack_and_unpack_match_the_model((spec, m) in small(false), case in pack_case()) {
        check_pack(&spec, &m, &case)?;
    }

    #[test]
    fn regular_pack_and_unpack_match_the_model((spec, m) in regular(), case in pack_case()) {
        check_pack(&spec, &m, &case)?;
    }
}

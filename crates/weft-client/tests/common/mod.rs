//! Shared by the view and list I/O tests: a seeded generator, datatype specs with a
//! naive typemap model (every data byte's offset, listed, straight from the MPI
//! definitions), and a reference file that view writes are applied to byte by byte.
#![allow(dead_code)]

use std::sync::Arc;
use weft_client::{Datatype, Field, Order};

#[allow(unused_imports)] // not every test uses it
pub use weft_testkit::Rng;

/// A datatype as a user writes it; both the engine type and the model come from it.
#[derive(Debug, Clone)]
pub enum Spec {
    Bytes(u64),
    /// count, block_len, stride in bytes.
    Hvector(u64, u64, i64, Box<Spec>),
    /// (block_len, displacement in bytes) per block.
    Hindexed(Vec<(u64, i64)>, Box<Spec>),
    /// (block_len, displacement in bytes, type) per field.
    Struct(Vec<(u64, i64, Spec)>),
    Resized(Box<Spec>, i64, i64),
    /// 2-D C-order subarray: sizes, subsizes, starts.
    Subarray([u64; 2], [u64; 2], [u64; 2], Box<Spec>),
}

/// A typemap: data byte offsets in type order, lower bound and upper bound, and
/// whether the bounds are explicit (MPI's sticky lb/ub markers, set by resized).
#[derive(Debug, Clone)]
pub struct Model {
    pub data: Vec<i64>,
    pub lb: i64,
    pub ub: i64,
    pub explicit: bool,
    /// Bounds from children without markers, kept while building.
    natural: Option<(i64, i64)>,
    marked: Option<(i64, i64)>,
}

impl Model {
    pub fn extent(&self) -> i64 {
        self.ub - self.lb
    }

    /// Appends a copy of `child` at `at`. If any copy carries markers, only markers
    /// count for the bounds (MPI).
    fn copies(&mut self, child: &Model, at: i64) {
        self.data.extend(child.data.iter().map(|d| d + at));
        let slot = if child.explicit {
            &mut self.marked
        } else {
            &mut self.natural
        };
        let (lb, ub) = (at + child.lb, at + child.ub);
        *slot = Some(match *slot {
            Some((l, u)) => (l.min(lb), u.max(ub)),
            None => (lb, ub),
        });
        let ((lb, ub), explicit) = match (self.marked, self.natural) {
            (Some(bounds), _) => (bounds, true),
            (None, Some(bounds)) => (bounds, false),
            (None, None) => ((0, 0), false),
        };
        (self.lb, self.ub, self.explicit) = (lb, ub, explicit);
    }

    fn empty() -> Model {
        Model {
            data: Vec::new(),
            lb: 0,
            ub: 0,
            explicit: false,
            natural: None,
            marked: None,
        }
    }

    fn with_bounds(mut self, lb: i64, ub: i64) -> Model {
        (self.lb, self.ub, self.explicit) = (lb, ub, true);
        self.natural = None;
        self.marked = Some((lb, ub));
        self
    }

    /// MPI's rules for a filetype: strictly increasing data, tiles not overlapping.
    pub fn valid_filetype(&self) -> bool {
        let low = self.data.iter().copied().min().unwrap_or(0);
        let high = self.data.iter().map(|d| d + 1).max().unwrap_or(0);
        !self.data.is_empty() && self.data.windows(2).all(|w| w[0] < w[1]) && high - low <= self.extent()
    }

    /// File offset of view byte `v` of this filetype tiled from `displacement`.
    pub fn file_offset(&self, displacement: u64, v: u64) -> u64 {
        let size = self.data.len() as u64;
        let at = displacement as i64 + (v / size) as i64 * self.extent() + self.data[(v % size) as usize];
        u64::try_from(at).expect("view byte before file offset 0")
    }

    /// Offset in memory of stream byte `s` of consecutive copies of this type.
    pub fn memory_offset(&self, s: u64) -> usize {
        let size = self.data.len() as u64;
        ((s / size) as i64 * self.extent() + self.data[(s % size) as usize]) as usize
    }
}

pub fn model(spec: &Spec) -> Model {
    match spec {
        Spec::Bytes(n) => {
            let mut out = Model::empty();
            out.data = (0..*n as i64).collect();
            (out.lb, out.ub) = (0, *n as i64);
            out.natural = Some((out.lb, out.ub));
            out
        }
        Spec::Hvector(count, block_len, stride, child) => {
            let c = model(child);
            let mut out = Model::empty();
            for i in 0..*count as i64 {
                for j in 0..*block_len as i64 {
                    out.copies(&c, i * stride + j * c.extent());
                }
            }
            out
        }
        Spec::Hindexed(blocks, child) => {
            let c = model(child);
            let mut out = Model::empty();
            for &(len, displacement) in blocks {
                for j in 0..len as i64 {
                    out.copies(&c, displacement + j * c.extent());
                }
            }
            out
        }
        Spec::Struct(fields) => {
            let mut out = Model::empty();
            for (len, displacement, field) in fields {
                let c = model(field);
                for j in 0..*len as i64 {
                    out.copies(&c, displacement + j * c.extent());
                }
            }
            out
        }
        Spec::Resized(child, lb, extent) => model(child).with_bounds(*lb, lb + extent),
        Spec::Subarray(sizes, subsizes, starts, child) => {
            let c = model(child);
            let mut out = Model::empty();
            for r in starts[0]..starts[0] + subsizes[0] {
                for col in starts[1]..starts[1] + subsizes[1] {
                    out.copies(&c, (r * sizes[1] + col) as i64 * c.extent());
                }
            }
            out.with_bounds(0, (sizes[0] * sizes[1]) as i64 * c.extent())
        }
    }
}

pub fn build(spec: &Spec) -> Arc<Datatype> {
    match spec {
        Spec::Bytes(n) => Datatype::bytes(*n).unwrap(),
        Spec::Hvector(count, block_len, stride, child) => {
            Datatype::hvector(*count, *block_len, *stride, &build(child)).unwrap()
        }
        Spec::Hindexed(blocks, child) => {
            let lens: Vec<u64> = blocks.iter().map(|b| b.0).collect();
            let displacements: Vec<i64> = blocks.iter().map(|b| b.1).collect();
            Datatype::hindexed(&lens, &displacements, &build(child)).unwrap()
        }
        Spec::Struct(fields) => {
            let fields: Vec<Field> = fields
                .iter()
                .map(|(len, displacement, spec)| Field {
                    block_len: *len,
                    displacement_bytes: *displacement,
                    datatype: build(spec),
                })
                .collect();
            Datatype::structure(&fields).unwrap()
        }
        Spec::Resized(child, lb, extent) => Datatype::resized(&build(child), *lb, *extent).unwrap(),
        Spec::Subarray(sizes, subsizes, starts, child) => {
            Datatype::subarray(sizes, subsizes, starts, Order::C, &build(child)).unwrap()
        }
    }
}

/// A random datatype whose data bytes are in increasing order (a filetype candidate),
/// small enough to model byte by byte, nested up to `depth` levels.
pub fn monotonic_spec(rng: &mut Rng, depth: u32) -> Spec {
    if depth == 0 || rng.chance(25) {
        return Spec::Bytes(rng.between(1, 24));
    }
    let child = monotonic_spec(rng, depth - 1);
    let c = model(&child);
    let span = c.data.iter().map(|d| d + 1).max().unwrap() - c.data.iter().copied().min().unwrap();
    let extent = c.extent().max(span);
    match rng.between(0, 4) {
        0 => {
            let block_len = rng.between(1, 3);
            let gap = rng.between(0, 40) as i64;
            let stride = block_len as i64 * extent + gap;
            Spec::Hvector(rng.between(1, 6), block_len, stride, Box::new(child))
        }
        1 => {
            let mut at = rng.between(0, 30) as i64;
            let blocks = (0..rng.between(1, 5))
                .map(|_| {
                    let len = rng.between(1, 3);
                    let block = (len, at);
                    at += len as i64 * extent + rng.between(0, 50) as i64;
                    block
                })
                .collect();
            Spec::Hindexed(blocks, Box::new(child))
        }
        2 => {
            // Fields of plain bytes and of the child, each after the previous one.
            let mut end = 0i64;
            let mut fields = Vec::new();
            for k in 0..rng.between(2, 3) {
                let spec = if k % 2 == 0 {
                    child.clone()
                } else {
                    Spec::Bytes(rng.between(1, 9))
                };
                let m = model(&spec);
                let low = m.data.iter().copied().min().unwrap();
                let high = m.data.iter().copied().max().unwrap();
                let len = rng.between(1, 2);
                let at = end + rng.between(0, 20) as i64 - low;
                fields.push((len, at, spec));
                end = at + (len as i64 - 1) * m.extent() + high + 1;
            }
            Spec::Struct(fields)
        }
        3 => {
            // Resized with room between tiles.
            let lb = c.lb.min(0);
            Spec::Resized(
                Box::new(child),
                lb,
                extent + rng.between(0, 64) as i64 + (c.lb - lb),
            )
        }
        _ => {
            let sizes = [rng.between(1, 8), rng.between(1, 12)];
            let subsizes = [rng.between(1, sizes[0]), rng.between(1, sizes[1])];
            let starts = [
                rng.between(0, sizes[0] - subsizes[0]),
                rng.between(0, sizes[1] - subsizes[1]),
            ];
            let element = Spec::Bytes(rng.between(1, 6));
            Spec::Subarray(sizes, subsizes, starts, Box::new(element))
        }
    }
}

/// A random memory type: any order of data bytes (struct fields may run backwards),
/// resized where needed so that consecutive copies never share a byte (unpacking
/// into overlapping copies has no single answer).
pub fn memory_spec(rng: &mut Rng) -> Spec {
    let child = monotonic_spec(rng, 2);
    let spec = match rng.between(0, 2) {
        0 => child,
        1 => {
            // The child first in type order but after two runs of bytes in memory.
            let n = rng.between(1, 5);
            let at = 2 * n as i64 + rng.between(0, 16) as i64;
            Spec::Struct(vec![(1, at, child), (2, 0, Spec::Bytes(n))])
        }
        _ => Spec::Hvector(
            rng.between(2, 4),
            1,
            rng.between(30, 90) as i64,
            Box::new(Spec::Bytes(rng.between(1, 12))),
        ),
    };
    let m = model(&spec);
    let high = m.data.iter().map(|d| d + 1).max().unwrap();
    let low = m.data.iter().copied().min().unwrap();
    if m.lb <= low && m.extent() >= high - m.lb {
        spec
    } else {
        Spec::Resized(Box::new(spec), 0, high)
    }
}

/// A file as a byte vector: what a sequence of view writes must leave behind.
pub struct Reference {
    pub bytes: Vec<u8>,
    /// One past the highest byte written (the file's size).
    pub size: u64,
}

impl Reference {
    pub fn new() -> Reference {
        Reference {
            bytes: Vec::new(),
            size: 0,
        }
    }

    pub fn put(&mut self, offset: u64, byte: u8) {
        let at = offset as usize;
        if self.bytes.len() <= at {
            self.bytes.resize(at + 1, 0);
        }
        self.bytes[at] = byte;
        self.size = self.size.max(offset + 1);
    }

    pub fn get(&self, offset: u64) -> u8 {
        self.bytes.get(offset as usize).copied().unwrap_or(0)
    }
}

//! The binary wire form of datatypes and views: how a client registers a view with
//! the servers once (Clusterfile "view I/O"). Decoding takes untrusted bytes: it never
//! panics, allocates at most in proportion to its input, and rebuilds every node through
//! the checking constructors, so a decoded type obeys every limit a built one does.
//!
//! Layout (integers are LEB128 varints, signed ones zigzag-encoded):
//! ```text
//! datatype := version:u8 body
//! view     := version:u8 displacement body
//! body     := node_count node*          (the root is the last node)
//! node     := tag:u8 fields [lb extent]  (lb and extent present iff tag & 0x80)
//!   tag 0  bytes:  size displacement
//!   tag 1  vector: count block_len element_stride block_stride displacement child
//!   tag 2  blocks: block_count (displacement count child)*
//! ```
//! A child is the index of an earlier node, so shared subtrees are sent once and the
//! graph is acyclic by construction.

use std::collections::HashMap;
use std::sync::Arc;

use super::datatype::{Datatype, Kind};
use super::map::View;
use super::{ViewError, BLOCKS_PER_NODE_MAX, BLOCKS_TOTAL_MAX, WIRE_NODES_MAX};

/// Version byte leading every encoded datatype and view.
pub const WIRE_VERSION: u8 = 1;

const TAG_BYTES: u8 = 0;
const TAG_VECTOR: u8 = 1;
const TAG_BLOCKS: u8 = 2;
const TAG_EXPLICIT_BOUNDS: u8 = 0x80;
/// The smallest encoding of one block (three one-byte varints): bounds how many blocks
/// the remaining input can hold before anything is allocated for them.
const BLOCK_BYTES_MIN: usize = 3;

impl Datatype {
    /// The wire form of this type.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![WIRE_VERSION];
        encode_body(self, &mut out);
        out
    }

    /// Rebuilds a type from its wire form, checking every limit.
    pub fn decode(bytes: &[u8]) -> Result<Arc<Datatype>, ViewError> {
        let mut reader = Reader { bytes, position: 0 };
        reader.version()?;
        let root = decode_body(&mut reader)?;
        reader.finish()?;
        Ok(root)
    }
}

impl View {
    /// The wire form of this view. Servers refuse the form of a filetype over the wire
    /// limits: check [`Datatype::fits_wire`] first.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![WIRE_VERSION];
        put_unsigned(&mut out, self.displacement());
        encode_body(self.filetype(), &mut out);
        out
    }

    /// Rebuilds a view from its wire form, checking every limit and the filetype rules.
    pub fn decode(bytes: &[u8]) -> Result<View, ViewError> {
        let mut reader = Reader { bytes, position: 0 };
        reader.version()?;
        let displacement = reader.unsigned()?;
        let filetype = decode_body(&mut reader)?;
        reader.finish()?;
        View::new(displacement, filetype)
    }
}

fn encode_body(root: &Datatype, out: &mut Vec<u8>) {
    let mut encoder = Encoder {
        indices: HashMap::new(),
        body: Vec::new(),
    };
    encoder.node(root);
    put_unsigned(out, encoder.indices.len() as u64);
    out.extend_from_slice(&encoder.body);
}

struct Encoder {
    indices: HashMap<*const Datatype, u64>,
    body: Vec<u8>,
}

impl Encoder {
    /// Writes `node` after its children (once per distinct node) and returns its index.
    fn node(&mut self, node: &Datatype) -> u64 {
        let key = node as *const Datatype;
        if let Some(&index) = self.indices.get(&key) {
            return index;
        }
        let explicit = if node.has_explicit_bounds() {
            TAG_EXPLICIT_BOUNDS
        } else {
            0
        };
        match &node.kind {
            Kind::Bytes { displacement } => {
                self.body.push(TAG_BYTES | explicit);
                put_unsigned(&mut self.body, node.size_bytes());
                put_signed(&mut self.body, *displacement);
            }
            Kind::Vector(vector) => {
                let child = self.node(&vector.child);
                self.body.push(TAG_VECTOR | explicit);
                put_unsigned(&mut self.body, vector.count);
                put_unsigned(&mut self.body, vector.block_len);
                put_signed(&mut self.body, vector.element_stride);
                put_signed(&mut self.body, vector.block_stride);
                put_signed(&mut self.body, vector.displacement);
                put_unsigned(&mut self.body, child);
            }
            Kind::Blocks(blocks) => {
                let children: Vec<u64> = blocks.iter().map(|b| self.node(&b.child)).collect();
                self.body.push(TAG_BLOCKS | explicit);
                put_unsigned(&mut self.body, blocks.len() as u64);
                for (block, child) in blocks.iter().zip(children) {
                    put_signed(&mut self.body, block.displacement);
                    put_unsigned(&mut self.body, block.count);
                    put_unsigned(&mut self.body, child);
                }
            }
        }
        if node.has_explicit_bounds() {
            put_signed(&mut self.body, node.lb());
            put_signed(&mut self.body, node.extent());
        }
        let index = self.indices.len() as u64;
        self.indices.insert(key, index);
        index
    }
}

fn decode_body(reader: &mut Reader<'_>) -> Result<Arc<Datatype>, ViewError> {
    let node_count = reader.unsigned()?;
    if node_count == 0 {
        return Err(ViewError::Decode("no nodes"));
    }
    if node_count > WIRE_NODES_MAX as u64 || node_count > reader.remaining() as u64 {
        return Err(ViewError::Decode("node count exceeds the limit or the input"));
    }
    let mut nodes: Vec<Arc<Datatype>> = Vec::with_capacity(node_count as usize);
    let mut blocks_seen = 0u64;
    for _ in 0..node_count {
        let tag = reader.byte()?;
        let node = match tag & !TAG_EXPLICIT_BOUNDS {
            TAG_BYTES => {
                let size = reader.unsigned()?;
                let displacement = reader.signed()?;
                Datatype::run(size, displacement)?
            }
            TAG_VECTOR => {
                let count = reader.unsigned()?;
                let block_len = reader.unsigned()?;
                let element_stride = reader.signed()?;
                let block_stride = reader.signed()?;
                let displacement = reader.signed()?;
                let child = child_at(&nodes, reader.unsigned()?)?;
                blocks_seen += 1;
                Datatype::vector_node(
                    count,
                    block_len,
                    element_stride,
                    block_stride,
                    displacement,
                    &child,
                )?
            }
            TAG_BLOCKS => {
                let block_count = reader.unsigned()?;
                if block_count > BLOCKS_PER_NODE_MAX as u64 {
                    return Err(ViewError::TooManyBlocks {
                        count: block_count,
                        limit: BLOCKS_PER_NODE_MAX as u64,
                    });
                }
                blocks_seen += block_count;
                if blocks_seen > BLOCKS_TOTAL_MAX {
                    return Err(ViewError::TooManyBlocksTotal {
                        count: blocks_seen,
                        limit: BLOCKS_TOTAL_MAX,
                    });
                }
                if block_count as usize > reader.remaining() / BLOCK_BYTES_MIN {
                    return Err(ViewError::Decode("block count exceeds the input"));
                }
                let mut blocks = Vec::with_capacity(block_count as usize);
                for _ in 0..block_count {
                    let displacement = reader.signed()?;
                    let count = reader.unsigned()?;
                    let child = child_at(&nodes, reader.unsigned()?)?;
                    blocks.push((displacement, count, child));
                }
                Datatype::blocks_node(&blocks)?
            }
            _ => return Err(ViewError::Decode("unknown node tag")),
        };
        let node = if tag & TAG_EXPLICIT_BOUNDS != 0 {
            let lb = reader.signed()?;
            let extent = reader.signed()?;
            Datatype::resized(&node, lb, extent)?
        } else {
            node
        };
        nodes.push(node);
    }
    Ok(nodes.pop().expect("node count is at least one"))
}

fn child_at(nodes: &[Arc<Datatype>], index: u64) -> Result<Arc<Datatype>, ViewError> {
    usize::try_from(index)
        .ok()
        .and_then(|i| nodes.get(i))
        .cloned()
        .ok_or(ViewError::Decode("child index does not name an earlier node"))
}

fn put_unsigned(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_signed(out: &mut Vec<u8>, value: i64) {
    put_unsigned(out, ((value << 1) ^ (value >> 63)) as u64);
}

struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    fn byte(&mut self) -> Result<u8, ViewError> {
        let byte = *self
            .bytes
            .get(self.position)
            .ok_or(ViewError::Decode("input ends early"))?;
        self.position += 1;
        Ok(byte)
    }

    fn version(&mut self) -> Result<(), ViewError> {
        if self.byte()? != WIRE_VERSION {
            return Err(ViewError::Decode("unknown version"));
        }
        Ok(())
    }

    fn unsigned(&mut self) -> Result<u64, ViewError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(ViewError::Decode("varint overflows 64 bits"));
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ViewError::Decode("varint longer than 10 bytes"))
    }

    fn signed(&mut self) -> Result<i64, ViewError> {
        let raw = self.unsigned()?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    fn finish(&self) -> Result<(), ViewError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(ViewError::Decode("trailing bytes after the root node"))
        }
    }
}

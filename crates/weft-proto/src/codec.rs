//! A small bounded binary codec: little-endian integers, length-prefixed strings,
//! byte strings and sequences, each length checked against what is left and a limit.

/// Longest string accepted anywhere in a message (paths are the longest strings).
pub const STRING_BYTES_MAX: usize = 4096;
/// Most elements accepted in any sequence within one message.
pub const SEQUENCE_LEN_MAX: usize = 65_536;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("bad frame magic {0:#010x}: peer does not speak the Weft protocol")]
    BadMagic(u32),
    #[error("bad frame kind {0}")]
    BadKind(u8),
    #[error("{what} of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { what: &'static str, len: u64, max: u64 },
    #[error("message truncated: needed {needed} more bytes while reading {what}")]
    Truncated { what: &'static str, needed: usize },
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    #[error("invalid {what}: {value}")]
    Invalid { what: &'static str, value: u64 },
    #[error("string is not UTF-8")]
    NotUtf8,
    #[error("unknown opcode {0}")]
    UnknownOpcode(u16),
    #[error("view: {0}")]
    View(String),
}

/// Appends encoded values to a byte vector.
#[derive(Default, Debug)]
pub struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }
    pub fn bool(&mut self, v: bool) {
        self.bytes.push(v as u8);
    }
    pub fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.bytes.extend_from_slice(v);
    }
    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    pub fn seq<T: Wire>(&mut self, items: &[T]) {
        self.u32(items.len() as u32);
        for item in items {
            item.encode(self);
        }
    }
    pub fn opt<T: Wire>(&mut self, v: &Option<T>) {
        match v {
            None => self.u8(0),
            Some(x) => {
                self.u8(1);
                x.encode(self);
            }
        }
    }
}

/// Reads encoded values from a byte slice, never past its end.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated {
                what,
                needed: n - self.rest.len(),
            });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// Everything not read yet, consumed: for a message nested in another, which is
    /// decoded (and checked for trailing bytes) on its own.
    pub fn take_rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    /// Fails if any bytes are left: a message must be consumed exactly.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing(self.rest.len()))
        }
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1, "u8")?[0])
    }
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(DecodeError::Invalid {
                what: "bool",
                value: v as u64,
            }),
        }
    }
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take(2, "u16")?.try_into().unwrap()))
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4, "u32")?.try_into().unwrap()))
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8, "u64")?.try_into().unwrap()))
    }
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.take(8, "i64")?.try_into().unwrap()))
    }
    /// A length-prefixed byte string of at most `max` bytes.
    pub fn bytes_max(&mut self, max: usize) -> Result<&'a [u8], DecodeError> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(DecodeError::TooLarge {
                what: "byte string",
                len: len as u64,
                max: max as u64,
            });
        }
        self.take(len, "byte string")
    }
    pub fn string(&mut self) -> Result<String, DecodeError> {
        let b = self.bytes_max(STRING_BYTES_MAX)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| DecodeError::NotUtf8)
    }
    pub fn seq<T: Wire>(&mut self) -> Result<Vec<T>, DecodeError> {
        let len = self.u32()? as usize;
        if len > SEQUENCE_LEN_MAX {
            return Err(DecodeError::TooLarge {
                what: "sequence",
                len: len as u64,
                max: SEQUENCE_LEN_MAX as u64,
            });
        }
        // Each element takes at least one byte: cap the allocation by what is left.
        let mut items = Vec::with_capacity(len.min(self.rest.len()));
        for _ in 0..len {
            items.push(T::decode(self)?);
        }
        Ok(items)
    }
    pub fn opt<T: Wire>(&mut self) -> Result<Option<T>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(T::decode(self)?)),
            v => Err(DecodeError::Invalid {
                what: "option tag",
                value: v as u64,
            }),
        }
    }
}

/// A value with a wire encoding.
pub trait Wire: Sized {
    fn encode(&self, w: &mut Writer);
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError>;

    fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        self.encode(&mut w);
        w.bytes
    }

    /// Decodes a whole buffer: trailing bytes are an error.
    fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let v = Self::decode(&mut r)?;
        r.finish()?;
        Ok(v)
    }
}

macro_rules! wire_int {
    ($($t:ident),*) => {$(
        impl Wire for $t {
            fn encode(&self, w: &mut Writer) { w.$t(*self) }
            fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> { r.$t() }
        }
    )*};
}
wire_int!(u8, u16, u32, u64, i64, bool);

impl Wire for String {
    fn encode(&self, w: &mut Writer) {
        w.str(self)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.string()
    }
}

impl<A: Wire, B: Wire> Wire for (A, B) {
    fn encode(&self, w: &mut Writer) {
        self.0.encode(w);
        self.1.encode(w);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok((A::decode(r)?, B::decode(r)?))
    }
}

/// A sequence: a `u32` count, then the elements (at most `SEQUENCE_LEN_MAX`).
impl<T: Wire> Wire for Vec<T> {
    fn encode(&self, w: &mut Writer) {
        w.seq(self)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.seq()
    }
}

/// A `u8` tag, 0 for `None` or 1 followed by the value.
impl<T: Wire> Wire for Option<T> {
    fn encode(&self, w: &mut Writer) {
        w.opt(self)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.opt()
    }
}

impl<T: Wire> Wire for Box<T> {
    fn encode(&self, w: &mut Writer) {
        (**self).encode(w)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        T::decode(r).map(Box::new)
    }
}

impl<T: Wire> Wire for std::sync::Arc<T> {
    fn encode(&self, w: &mut Writer) {
        (**self).encode(w)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        T::decode(r).map(std::sync::Arc::new)
    }
}

/// `items`, if there are at most `max` of them (`#[wire(max = .., what = ..)]`).
pub fn bounded<T>(items: Vec<T>, max: usize, what: &'static str) -> Result<Vec<T>, DecodeError> {
    if items.len() > max {
        Err(DecodeError::TooLarge {
            what,
            len: items.len() as u64,
            max: max as u64,
        })
    } else {
        Ok(items)
    }
}

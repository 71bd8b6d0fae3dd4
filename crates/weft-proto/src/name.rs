//! Byte strings for what POSIX keeps as bytes: directory-entry names and symlink targets.
//! They need not be UTF-8; the manager refuses only what no name may hold ('/' and NUL
//! in names, NUL in targets) and what is too long.

use crate::codec::STRING_BYTES_MAX;
use weft_wire_derive::Wire;

/// A name (or a symlink's target) as bytes. Shown lossily as UTF-8.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Wire)]
pub struct Name(#[wire(bytes_max = STRING_BYTES_MAX)] Vec<u8>);

impl Name {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Name {
        Name(bytes.into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// The name as text, if it is UTF-8.
    pub fn to_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl AsRef<[u8]> for Name {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Like a string's Debug, with bytes that are not UTF-8 escaped.
        write!(f, "\"{}\"", self.0.escape_ascii())
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name(s.as_bytes().to_vec())
    }
}

impl From<String> for Name {
    fn from(s: String) -> Name {
        Name(s.into_bytes())
    }
}

impl From<&[u8]> for Name {
    fn from(b: &[u8]) -> Name {
        Name(b.to_vec())
    }
}

impl From<Vec<u8>> for Name {
    fn from(b: Vec<u8>) -> Name {
        Name(b)
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Wire;

    #[test]
    fn names_are_bytes_on_the_wire_and_shown_lossily() {
        let latin1 = Name::new(b"caf\xe9".to_vec());
        assert_eq!(latin1.to_str(), None);
        assert_eq!(format!("{latin1}"), "caf\u{fffd}");
        assert_eq!(format!("{latin1:?}"), "\"caf\\xe9\"");
        assert_eq!(Name::from_bytes(&latin1.to_bytes()).unwrap(), latin1);
        // UTF-8 names travel exactly as strings always did.
        assert_eq!(Name::from("é").to_bytes(), "é".to_string().to_bytes());
        assert_eq!(Name::from("x"), "x");
    }
}

//! Validation of names, paths and symlink targets, with errors that name the offender.
//! Names and targets are byte strings (POSIX): anything but '/' and NUL in a name, anything
//! but NUL in a target.

use weft_proto::{ErrorCode, WireError};

/// Longest name of one directory entry (bytes), as in POSIX `NAME_MAX`.
pub const NAME_BYTES_MAX: usize = 255;
/// Longest absolute path accepted by `resolve` and longest symlink target (bytes), as
/// in POSIX `PATH_MAX`.
pub const PATH_BYTES_MAX: usize = 4096;

/// Checks one directory-entry name: 1..=255 bytes, no '/', no NUL, not "." or "..".
pub fn check_name(name: &[u8]) -> Result<(), WireError> {
    if name.is_empty() {
        return Err(WireError::new(ErrorCode::InvalidArgument, "empty name"));
    }
    if name == b"." || name == b".." {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("name {} is reserved", quoted(name)),
        ));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(WireError::new(
            ErrorCode::NameTooLong,
            format!(
                "name {}... is {} bytes, longer than {NAME_BYTES_MAX}",
                quoted(&name[..40]),
                name.len()
            ),
        ));
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("name {} contains '/' or NUL", quoted(name)),
        ));
    }
    Ok(())
}

/// A name for messages: quoted, with bytes that are not printable ASCII escaped.
pub fn quoted(name: &[u8]) -> String {
    format!("\"{}\"", name.escape_ascii())
}

/// Splits an absolute path into its names, checking each. "/" has none.
pub fn split_path(path: &str) -> Result<Vec<&str>, WireError> {
    if path.len() > PATH_BYTES_MAX {
        return Err(WireError::new(
            ErrorCode::NameTooLong,
            format!(
                "path {:?}... is {} bytes, longer than {PATH_BYTES_MAX}",
                truncated(path),
                path.len()
            ),
        ));
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("path {path:?} is not absolute"),
        ));
    };
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    // Clients normalise paths; anything left that is not a plain name is refused
    // rather than guessed at (a trailing slash is an empty last component).
    rest.split('/')
        .map(|name| {
            check_name(name.as_bytes())
                .map(|()| name)
                .map_err(|e| WireError::new(e.code, format!("path {path:?}: {}", e.message)))
        })
        .collect()
}

/// Checks a symlink target: 1..=4096 bytes without NUL. Its content is otherwise
/// free, as in POSIX.
pub fn check_target(target: &[u8]) -> Result<(), WireError> {
    if target.is_empty() {
        return Err(WireError::new(ErrorCode::InvalidArgument, "empty symlink target"));
    }
    if target.len() > PATH_BYTES_MAX {
        return Err(WireError::new(
            ErrorCode::NameTooLong,
            format!(
                "symlink target is {} bytes, longer than {PATH_BYTES_MAX}",
                target.len()
            ),
        ));
    }
    if target.contains(&0) {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            "symlink target contains NUL",
        ));
    }
    Ok(())
}

/// The first 40 bytes of `s` (on a character boundary), for error messages.
fn truncated(s: &str) -> &str {
    let mut end = s.len().min(40);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<impl Sized, WireError>) -> ErrorCode {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.code,
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name(b"a").is_ok());
        assert!(check_name("x".repeat(255).as_bytes()).is_ok());
        assert!(check_name(b"...").is_ok());
        // Names are bytes: not UTF-8 is fine.
        assert!(check_name(b"caf\xe9 \xff\x01").is_ok());
        assert_eq!(code(check_name(b"")), ErrorCode::InvalidArgument);
        assert_eq!(code(check_name(b".")), ErrorCode::InvalidArgument);
        assert_eq!(code(check_name(b"..")), ErrorCode::InvalidArgument);
        assert_eq!(code(check_name(b"a/b")), ErrorCode::InvalidArgument);
        assert_eq!(code(check_name(b"a\0b")), ErrorCode::InvalidArgument);
        assert_eq!(
            code(check_name("x".repeat(256).as_bytes())),
            ErrorCode::NameTooLong
        );
        // 128 two-byte characters are 256 bytes: the limit is in bytes.
        assert_eq!(
            code(check_name("é".repeat(128).as_bytes())),
            ErrorCode::NameTooLong
        );
        assert_eq!(quoted(b"a\xe9\n"), "\"a\\xe9\\n\"");
    }

    #[test]
    fn paths_are_split_and_checked() {
        assert_eq!(split_path("/").unwrap(), Vec::<&str>::new());
        assert_eq!(split_path("/a/bc/d").unwrap(), vec!["a", "bc", "d"]);
        assert_eq!(code(split_path("")), ErrorCode::InvalidArgument);
        assert_eq!(code(split_path("a/b")), ErrorCode::InvalidArgument);
        assert_eq!(code(split_path("//a")), ErrorCode::InvalidArgument);
        assert_eq!(code(split_path("/a//b")), ErrorCode::InvalidArgument);
        assert_eq!(code(split_path("/a/")), ErrorCode::InvalidArgument);
        assert_eq!(code(split_path("/a/./b")), ErrorCode::InvalidArgument);
        assert_eq!(code(split_path("/a/../b")), ErrorCode::InvalidArgument);
        assert_eq!(code(split_path("/a\0")), ErrorCode::InvalidArgument);
        let long_name = format!("/{}", "y".repeat(256));
        assert_eq!(code(split_path(&long_name)), ErrorCode::NameTooLong);
        // 2049 components of "a/" make a 4098-byte path.
        let long_path = "/a".repeat(2049);
        assert_eq!(code(split_path(&long_path)), ErrorCode::NameTooLong);
        let message = split_path("/ok/../x").unwrap_err().message;
        assert!(message.contains("/ok/../x"), "{message}");
    }

    #[test]
    fn targets_are_checked() {
        assert!(check_target(b"../anything/at all").is_ok());
        assert!(check_target(b"\xff/\xfe").is_ok());
        assert_eq!(code(check_target(b"")), ErrorCode::InvalidArgument);
        assert_eq!(code(check_target(b"a\0")), ErrorCode::InvalidArgument);
        assert_eq!(
            code(check_target("t".repeat(4097).as_bytes())),
            ErrorCode::NameTooLong
        );
    }
}

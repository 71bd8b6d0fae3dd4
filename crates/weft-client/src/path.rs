//! Path syntax checks done before anything is sent: absolute, no "." or "..", no empty
//! components, names of at most 255 bytes.

use crate::ClientError;

pub const NAME_BYTES_MAX: usize = 255;
pub const PATH_BYTES_MAX: usize = 4096;

/// Checks an absolute Weft path and returns its components.
pub fn components(path: &str) -> Result<Vec<&str>, ClientError> {
    let bad = |why: &str| {
        Err(ClientError::InvalidArgument(format!(
            "invalid path {path:?}: {why}"
        )))
    };
    if let Some(rest) = path.strip_prefix("weft:") {
        // The MPI-IO layer's names reach this API (and the weft tool) as they are typed.
        return bad(&format!(
            "the weft: prefix names a file for MPI-IO only; here give the path itself ({rest:?})"
        ));
    }
    if !path.starts_with('/') {
        return bad("paths must be absolute (start with /)");
    }
    if path.len() > PATH_BYTES_MAX {
        // ENAMETOOLONG, as the manager answers for the same path.
        return Err(ClientError::refused(
            weft_proto::ErrorCode::NameTooLong,
            format!("invalid path: {} bytes, longer than {PATH_BYTES_MAX}", path.len()),
        ));
    }
    if path.contains('\0') {
        return bad("contains a NUL byte");
    }
    if path == "/" {
        return Ok(Vec::new());
    }
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    let mut out = Vec::new();
    for name in trimmed[1..].split('/') {
        match name {
            "" => return bad("empty component (//)"),
            "." | ".." => return bad("\".\" and \"..\" are not allowed"),
            n if n.len() > NAME_BYTES_MAX => {
                return Err(ClientError::refused(
                    weft_proto::ErrorCode::NameTooLong,
                    format!("invalid path {path:?}: a name is longer than 255 bytes"),
                ))
            }
            n => out.push(n),
        }
    }
    Ok(out)
}

/// Splits a path into its parent and final name ("/a/b" -> ("/a", "b")). The root has
/// neither: an operation on it is refused with `if_root`, the error Linux gives for the
/// same call on "/" (rmdir and rename EBUSY, unlink and create EISDIR, mkdir EEXIST).
pub fn split(path: &str, if_root: weft_proto::ErrorCode) -> Result<(String, &str), ClientError> {
    let parts = components(path)?;
    let Some((name, parents)) = parts.split_last() else {
        return Err(ClientError::refused(
            if_root,
            "the root directory \"/\" cannot be created, removed, renamed or replaced",
        ));
    };
    Ok((format!("/{}", parents.join("/")), name))
}

/// Whether `path` ends with a "/" after a name ("/a/b/"), which names a directory: a
/// call on it finds a file ENOTDIR and does not create one (EISDIR), as in Linux.
pub fn names_a_directory(path: &str) -> bool {
    path.len() > 1 && path.ends_with('/')
}

/// Joins a directory path and a name.
pub fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_paths_are_refused_before_sending() {
        assert_eq!(components("/a/b/").unwrap(), vec!["a", "b"]);
        assert!(components("/").unwrap().is_empty());
        for bad in ["a/b", "/a//b", "/a/../b", "/./a", "", "/a\0b"] {
            assert!(components(bad).is_err(), "{bad:?}");
        }
        let long = format!("/{}", "x".repeat(256));
        assert_eq!(
            components(&long).unwrap_err().code(),
            weft_proto::ErrorCode::NameTooLong
        );
        // Regression: a path over PATH_MAX made of valid names was InvalidArgument here
        // while the manager answers NameTooLong for it (found by weft-tests bad_input).
        let deep = format!("/{}", vec!["d".repeat(200); 21].join("/"));
        assert_eq!(
            components(&deep).unwrap_err().code(),
            weft_proto::ErrorCode::NameTooLong
        );
        let prefixed = components("weft:/out.h5").unwrap_err().to_string();
        assert!(
            prefixed.contains("MPI-IO only") && prefixed.contains("\"/out.h5\""),
            "{prefixed}"
        );
        use weft_proto::ErrorCode::{Busy, Exists};
        assert_eq!(split("/a/b", Busy).unwrap(), ("/a".to_string(), "b"));
        assert_eq!(split("/b", Busy).unwrap(), ("/".to_string(), "b"));
        assert_eq!(split("/", Busy).unwrap_err().code(), Busy);
        assert_eq!(split("/", Exists).unwrap_err().code(), Exists);
    }
}

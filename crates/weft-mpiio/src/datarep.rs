//! Data representations of `MPI_File_set_view` on Weft files. `native` (the bytes as
//! in memory) and `internal` are served; `internal` is the implementation's own choice
//! (MPI 3.1, 13.5.1), and on Weft it is the native representation, as in ROMIO. Any
//! other, `external32` and representations registered with `MPI_Register_datarep`
//! included, fails with `MPI_ERR_UNSUPPORTED_DATAREP` (MPI permits that) on every rank
//! and leaves the view as it was. `MPI_File_get_view` names the representation in use,
//! `native`, after `internal` as well (as ROMIO does).

use crate::error::{ErrorClass, MpiioError, Result};

/// The representations served.
const SERVED: [&str; 2] = ["native", "internal"];

/// The served representation named `datarep` (case-insensitively, as ROMIO), or why not.
pub fn check(datarep: &str) -> Result<&'static str> {
    SERVED
        .iter()
        .find(|served| served.eq_ignore_ascii_case(datarep))
        .copied()
        .ok_or_else(|| {
            MpiioError::new(
                ErrorClass::UnsupportedDatarep,
                format!(
                    "data representation {datarep:?} is not supported on Weft files: \"native\" and \
                     \"internal\" (the same bytes) are; convert the data to native before writing"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_and_internal_are_served_and_the_rest_fail_with_unsupported_datarep() {
        assert_eq!(check("native").unwrap(), "native");
        assert_eq!(check("NATIVE").unwrap(), "native");
        assert_eq!(check("internal").unwrap(), "internal");
        for rep in ["external32", "external", "", "my_rep"] {
            let e = check(rep).unwrap_err();
            assert_eq!(e.class, ErrorClass::UnsupportedDatarep, "{rep}");
            assert!(e.message.contains(&format!("{rep:?}")), "{}", e.message);
        }
    }
}

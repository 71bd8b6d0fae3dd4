//! Data representations of `MPI_File_set_view` on Weft files. `native` (the bytes as
//! in memory), `internal` and `external32` are served; `internal` is the
//! implementation's own choice (MPI 3.1, 13.5.1), and on Weft it is the native
//! representation, as in ROMIO (`MPI_File_get_view` then names `native`, as ROMIO
//! does). Under `external32` the C half (`csrc/weft_mpiio.c`, `x32_*`) converts the
//! data with MPI's own `MPI_Pack_external`/`MPI_Unpack_external` and accesses the
//! converted bytes through the view, as ROMIO does: the file layout of the view stays the
//! native one, so memory datatypes whose external32 size differs from their native size
//! (`MPI_LONG`, `long double`, ...) fail with `MPI_ERR_UNSUPPORTED_DATAREP`. Any other
//! name, representations registered with `MPI_Register_datarep` included, fails with
//! `MPI_ERR_UNSUPPORTED_DATAREP` (MPI permits that) on every rank and leaves the view as
//! it was.

use crate::error::{ErrorClass, MpiioError, Result};

/// MPI's portable representation.
pub const EXTERNAL32: &str = "external32";

/// The representations served.
const SERVED: [&str; 3] = ["native", "internal", EXTERNAL32];

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
                    "data representation {datarep:?} is not supported on Weft files: \"native\", \
                     \"internal\" (the same bytes) and \"external32\" are"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_internal_and_external32_are_served_and_the_rest_fail_with_unsupported_datarep() {
        assert_eq!(check("native").unwrap(), "native");
        assert_eq!(check("NATIVE").unwrap(), "native");
        assert_eq!(check("internal").unwrap(), "internal");
        assert_eq!(check("EXTERNAL32").unwrap(), EXTERNAL32);
        for rep in ["external", "", "my_rep"] {
            let e = check(rep).unwrap_err();
            assert_eq!(e.class, ErrorClass::UnsupportedDatarep, "{rep}");
            assert!(e.message.contains(&format!("{rep:?}")), "{}", e.message);
        }
    }
}

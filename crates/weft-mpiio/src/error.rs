//! Errors at the MPI boundary: an MPI error class (as `csrc/shim.h` numbers them) and
//! a message. Weft client errors map onto classes here.

use weft_client::{ClientError, ErrorCode};

/// Declares `ErrorClass` and the list `from_code` searches from one list of names, so
/// that a class added to the enum cannot be missing from `from_code`.
macro_rules! error_classes {
    ($first:ident, $($class:ident),+ $(,)?) => {
        /// MPI error classes, numbered as `enum wm_error` in `csrc/shim.h`; the C side
        /// maps them to the MPI library's values.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        #[repr(i32)]
        pub enum ErrorClass {
            $first = 1,
            $($class),+
        }

        impl ErrorClass {
            const ALL: &'static [ErrorClass] = &[ErrorClass::$first, $(ErrorClass::$class),+];
        }
    };
}

error_classes!(
    Arg,
    Count,
    Type,
    Amode,
    NoSuchFile,
    FileExists,
    Access,
    NoSpace,
    ReadOnly,
    Io,
    UnsupportedOperation,
    UnsupportedDatarep,
    NotSame,
    File,
    BadFile,
    InfoValue,
    Quota,
    Intern,
    Other,
    FileInUse,
);

impl ErrorClass {
    pub fn from_code(code: i32) -> Option<ErrorClass> {
        ErrorClass::ALL.iter().copied().find(|c| *c as i32 == code)
    }
}

/// An error class with the message that explains it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct MpiioError {
    pub class: ErrorClass,
    pub message: String,
}

impl MpiioError {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> MpiioError {
        MpiioError {
            class,
            message: message.into(),
        }
    }

    /// A failed call into the MPI library (through the shim).
    pub fn mpi(what: &str, code: i32) -> MpiioError {
        MpiioError::new(ErrorClass::Intern, format!("{what} failed with MPI error {code}"))
    }
}

impl From<ClientError> for MpiioError {
    fn from(e: ClientError) -> Self {
        let class = match e.code() {
            ErrorCode::NotFound => ErrorClass::NoSuchFile,
            ErrorCode::Exists => ErrorClass::FileExists,
            ErrorCode::PermissionDenied | ErrorCode::NotPermitted => ErrorClass::Access,
            ErrorCode::NoSpace => ErrorClass::NoSpace,
            ErrorCode::QuotaExceeded => ErrorClass::Quota,
            ErrorCode::InvalidArgument | ErrorCode::InvalidLayout => ErrorClass::Arg,
            ErrorCode::IsDirectory | ErrorCode::NotDirectory | ErrorCode::NameTooLong => ErrorClass::BadFile,
            ErrorCode::Busy => ErrorClass::FileInUse,
            _ => ErrorClass::Io,
        };
        MpiioError::new(class, e.to_string())
    }
}

impl From<weft_layout::view::ViewError> for MpiioError {
    fn from(e: weft_layout::view::ViewError) -> Self {
        MpiioError::new(ErrorClass::Type, e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, MpiioError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_of_shim_h_names_its_class_and_no_other_code_does() {
        // enum wm_error numbers its classes 1 to 20 in declaration order.
        for code in 1..=20 {
            let class = ErrorClass::from_code(code).expect("a class for every code");
            assert_eq!(class as i32, code);
        }
        assert_eq!(ErrorClass::from_code(1), Some(ErrorClass::Arg));
        assert_eq!(ErrorClass::from_code(20), Some(ErrorClass::FileInUse));
        assert_eq!(ErrorClass::from_code(0), None);
        assert_eq!(ErrorClass::from_code(21), None);
    }
}

fn verbose() -> bool {
    std::env::var("WEFT_MPIIO_VERBOSE").is_ok_and(|v| v == "1")
}

thread_local! {
    /// The message of this thread's last failed call, for the error code the C half
    /// returns for it and MPI_ERRORS_ARE_FATAL's report (`weft_mpiio_take_last_error`);
    /// cleared by every call that succeeds and by that taking.
    static LAST_ERROR: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Most of a message kept for the fatal report (a message can name many servers).
const LAST_ERROR_MAX: usize = 4096;

/// Reports an error on stderr when WEFT_MPIIO_VERBOSE=1 (MPI returns only a class),
/// and keeps its message for a fatal error handler.
pub fn report(error: &MpiioError) {
    if verbose() {
        eprintln!("weft-mpiio: {} ({:?})", error.message, error.class);
    }
    LAST_ERROR.with(|last| {
        let mut last = last.borrow_mut();
        last.clear();
        let mut end = error.message.len().min(LAST_ERROR_MAX);
        while !error.message.is_char_boundary(end) {
            end -= 1;
        }
        last.push_str(&error.message[..end]);
    });
}

/// Forgets this thread's last error (a call succeeded).
pub fn forget_error() {
    LAST_ERROR.with(|last| last.borrow_mut().clear());
}

/// This thread's last error message ("" if the last call succeeded).
pub fn last_error() -> String {
    LAST_ERROR.with(|last| last.borrow().clone())
}

/// This thread's last error message, forgotten here: the C half moves it into the error
/// code it returns for that failure (`weft_mpiio_take_last_error`), so that no later
/// error is given it.
pub fn take_error() -> String {
    LAST_ERROR.with(|last| std::mem::take(&mut *last.borrow_mut()))
}

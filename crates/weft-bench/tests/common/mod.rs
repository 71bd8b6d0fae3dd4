//! Helpers shared by the integration tests.

pub mod svg_check;

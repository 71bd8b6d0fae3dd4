//! Holds no code: Weft's end-to-end tests live in `tests/`, each against real servers.

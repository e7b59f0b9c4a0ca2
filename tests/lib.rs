//! Integration tests live in `tests/*.rs` beside this file.

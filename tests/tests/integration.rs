//! Every integration test of this crate, in one test binary: one build and link in release
//! instead of one per file (each repeats the dependencies' generic code). Each module is one
//! former test file; `cargo nextest` still runs every test in its own process.

mod late_ledger_writes;
mod module_imports;
mod negative_controls;
mod simulate;

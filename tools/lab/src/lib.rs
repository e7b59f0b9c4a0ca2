//! `leasehold-lab`'s library: everything `leasehold` runs, plus the development tools that do
//! not ship in the production binary: the deterministic simulator, the demo, the local dev stack
//! (`dev`), the chaos harness, the benchmarks and the strict mock upstream. The demo, the dev
//! stack and chaos start their services as processes of this same binary.
#![allow(clippy::disallowed_methods)] // a development tool: it measures real time on purpose (clippy.toml)

pub mod bench;
pub mod chaos;
pub mod demo;
pub mod dev;
pub mod simulate;

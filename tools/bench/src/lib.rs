//! Benchmarks live in `benches/`; run them with `scripts/bench-bucket`.
#![allow(clippy::disallowed_methods)] // a development tool: it measures real time on purpose (clippy.toml)

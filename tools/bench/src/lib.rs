//! Benchmarks live in `benches/`; run them with `scripts/bench-bucket`.

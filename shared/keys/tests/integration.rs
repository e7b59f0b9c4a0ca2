//! The per-key limiter's tests, in one binary.

mod keys_props;
mod keys_shards;
mod keys_table;
mod keys_tiers_doc;
mod wire;

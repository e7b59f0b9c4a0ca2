//! The Envoy rules' tests, in one binary.

mod peer_fixtures;
mod peer_lookups;
mod shipped_rlqs;

//! The wire's speed code, apart from the messages it reads and writes: a DC manager of 1,000
//! limits writes 100,000 pod leases and reads as many report items a second at 100 pods, where
//! serde's machinery was a large share of its time. Each reader and writer here is checked
//! against serde's own output or reading (property tests beside each).
//!
//! * `lease_json.rs`: a pod lease written without serde, byte for byte as serde writes it.
//! * `report_json.rs`: a pod's report batch read without serde, as serde would read it.
//! * `json_str.rs`: JSON strings, plain ids copied without per-byte escaping.
//! * `swar.rs`: the eight-bytes-at-a-time scans the three use.

pub(super) mod json_str;
mod lease_json;
pub(super) mod report_json;
mod swar;

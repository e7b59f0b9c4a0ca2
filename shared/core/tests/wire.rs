//! One round trip per wire message; malformed, unknown-version and oversized input are errors.

use leasehold_core::dc_manager::{FailRule, PodRules, SplitMode};
use leasehold_core::quota::Quota;
use leasehold_core::wire::*;
use proptest::prelude::*;

fn v(e: u64, s: u64) -> LeaseVersion {
    LeaseVersion::new(e, s)
}

fn dc_lease() -> DcLease {
    DcLease {
        v: 1,
        limit: "partner-api".into(),
        dc: "bkk".into(),
        holder: "bkk-mgr-7f3a".into(),
        version: v(3, 42),
        lease_id: "coord-a-3-42".into(),
        quota: Quota::per_s(807, 40),
        floor: Quota::per_s(50, 0),
        ttl_ms: 10_000,
        basis_seq: 991,
        predecessor: None,
    }
}

fn roundtrip<T: WireMessage + PartialEq + std::fmt::Debug>(m: T) {
    let bytes = encode(&m);
    assert_eq!(decode::<T>(&bytes).unwrap(), m);
}

#[test]
fn dc_lease_roundtrip() {
    roundtrip(dc_lease());
}

#[test]
fn pod_lease_roundtrip() {
    roundtrip(PodLease {
        v: 1,
        limit: "partner-api".into(),
        dc: "bkk".into(),
        pod: "bkk-pod-3".into(),
        incarnation: 0x5eed,
        issuer: "bkk-mgr-7f3a".into(),
        version: v(1, 17),
        lease_id: "bkk-mgr-7f3a-1-17".into(),
        quota: Quota::per_s(200, 5),
        ttl_ms: 5_000,
        basis_seq: 12,
        limit_removed: true,
        continues: None,
    });
}

#[test]
fn pod_report_roundtrip() {
    roundtrip(PodReport {
        v: 1,
        limit: "partner-api".into(),
        dc: "bkk".into(),
        pod: "bkk-pod-3".into(),
        incarnation: 0x5eed,
        seq: 12,
        interval_ms: 250,
        offered: 60,
        admitted: 50,
        rejected: 7,
        queued: 3,
        errors: 1,
        upstream_429: 4,
        healthy: true,
        draining: false,
        weight: 1.5,
        lease_in_use: Some(v(1, 16)),
        periods: 1,
        held: None,
    });
}

#[test]
fn dc_report_roundtrip() {
    roundtrip(DcReport {
        v: 1,
        limit: "partner-api".into(),
        dc: "europe".into(),
        holder: "eu-mgr-1".into(),
        term: 4,
        seq: 5,
        demand: Quota::per_s(650, 0),
        pods_healthy: 4,
        lease_in_use: None,
        floor_in_use: Some(Quota::per_s(50, 0)),
        floor_version: Some(LeaseVersion::new(4, 2)),
        upstream_calls: 180,
        upstream_429: 9,
        counts_predecessor: false,
    });
}

#[test]
fn reports_and_records_without_the_floor_fields_still_decode() {
    let report = br#"{"v":1,"limit":"l","dc":"bkk","holder":"m","seq":1,"demand":{"rate_milli_per_s":1,"burst_milli":0},"pods_healthy":1,"lease_in_use":null}"#;
    let r = decode::<DcReport>(report).unwrap();
    assert_eq!((r.floor_in_use, r.floor_version), (None, None));
    assert_eq!((r.upstream_calls, r.upstream_429), (0, 0), "older managers: no upstream counts");
    let record = br#"{"v":1,"limit":"l","epoch":3,"writer":"c","leases":[],"floors":{"bkk":{"rate_milli_per_s":50000,"burst_milli":0}}}"#;
    let rec = decode::<LedgerRecord>(record).unwrap();
    assert_eq!(rec.floor_of("bkk"), Some((Quota::per_s(50, 0), v(3, 0))), "version (epoch, 0) when missing");
    assert_eq!(rec.floor_reserved("bkk"), Some(Quota::per_s(50, 0)), "reserved = named when missing");
    assert_eq!(rec.floor_of("eu"), None);
    assert_eq!(rec.adaptive_rate_milli_per_s, None, "older writers: the configured R");
}

#[test]
fn lease_return_and_ack_roundtrip() {
    roundtrip(LeaseReturn {
        v: 1,
        limit: "l".into(),
        dc: "bkk".into(),
        holder: "p1".into(),
        incarnation: 9,
        last_version: Some(v(1, 3)),
    });
    roundtrip(ReturnAck { v: 1, limit: "l".into(), dc: "bkk".into(), holder: "p1".into(), incarnation: 9 });
}

#[test]
fn ledger_record_roundtrip() {
    roundtrip(LedgerRecord {
        v: 1,
        limit: "partner-api".into(),
        epoch: 3,
        writer: "coord-a".into(),
        leases: vec![dc_lease()],
        floors: [("bkk".to_string(), Quota::per_s(50, 1))].into(),
        floor_versions: [("bkk".to_string(), v(3, 7))].into(),
        floors_reserved: [("bkk".to_string(), Quota::per_s(80, 1))].into(),
        capacity: Some(Quota::per_s(1_000, 20)),
        inherited_below: [("bkk-mgr-e2".to_string(), v(3, 5))].into(),
        lost_floors: [("eu".to_string(), Quota::per_s(300, 0))].into(),
        lost_wait_dc_ttl_ms: Some(10_000),
        dc_holders: [("bkk".to_string(), DcHolder { holder: "bkk-mgr-e2".into(), term: 4, predecessor: None })].into(),
        counted_under: [("bkk-mgr-e1".to_string(), "bkk-mgr-e2".to_string())].into(),
        adaptive_rate_milli_per_s: Some(570_000),
        expiry: Some(leasehold_core::expiry::ExpiryPolicy::default()),
        pod_rules: PodRules {
            split: Some(SplitMode::Demand),
            fail_mode: Some(FailRule::BestEffort { emergency: [("bkk".to_string(), Quota::per_s(20, 5))].into() }),
        },
    });
}

#[test]
fn malformed_input_is_an_error() {
    assert!(matches!(decode::<DcLease>(b"{not json"), Err(WireError::Malformed(_))));
    assert!(matches!(decode::<DcLease>(b"[]"), Err(WireError::Malformed(_))));
    assert!(matches!(decode::<DcLease>(br#"{"v":1,"limit":"x"}"#), Err(WireError::Malformed(_))));
    assert_eq!(decode::<DcLease>(br#"{"limit":"x"}"#), Err(WireError::MissingVersion));
}

#[test]
fn unknown_version_is_an_error() {
    let mut j: serde_json::Value = serde_json::from_slice(&encode(&dc_lease())).unwrap();
    j["v"] = 2.into();
    let bytes = serde_json::to_vec(&j).unwrap();
    assert_eq!(decode::<DcLease>(&bytes), Err(WireError::UnsupportedVersion { found: 2, speaks: 1 }));
    j["v"] = "one".into();
    let bytes = serde_json::to_vec(&j).unwrap();
    assert!(matches!(decode::<DcLease>(&bytes), Err(WireError::Invalid { field: "v", .. })));
}

#[test]
fn oversized_input_is_refused_unread() {
    let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
    assert_eq!(
        decode::<DcLease>(&big),
        Err(WireError::Oversized { len: MAX_MESSAGE_BYTES + 1, max: MAX_MESSAGE_BYTES })
    );
}

#[test]
fn out_of_range_fields_are_refused() {
    let mut l = dc_lease();
    l.dc = "bkk.>".into();
    assert!(matches!(decode::<DcLease>(&encode(&l)), Err(WireError::Invalid { field: "dc", .. })));
    let mut l = dc_lease();
    l.ttl_ms = 0;
    assert!(matches!(decode::<DcLease>(&encode(&l)), Err(WireError::Invalid { field: "ttl_ms", .. })));
    let mut l = dc_lease();
    l.quota = Quota::new(u64::MAX, 0);
    assert!(matches!(decode::<DcLease>(&encode(&l)), Err(WireError::Invalid { field: "quota", .. })));
    let r = br#"{"v":1,"limit":"l","dc":"d","pod":"p","incarnation":1,"seq":1,"interval_ms":250,"offered":99999999999999,"admitted":0,"rejected":0,"queued":0,"errors":0,"healthy":true,"draining":false,"weight":1.0,"lease_in_use":null}"#;
    assert!(matches!(decode::<PodReport>(r), Err(WireError::Invalid { field: "offered", .. })));
}

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode::<DcLease>(&bytes);
        let _ = decode::<PodReport>(&bytes);
        let _ = decode::<LedgerRecord>(&bytes);
    }

    #[test]
    fn decoding_mutated_valid_messages_never_panics(pos in 0usize..400, byte in any::<u8>()) {
        let mut bytes = encode(&dc_lease());
        let i = pos % bytes.len();
        bytes[i] = byte;
        let _ = decode::<DcLease>(&bytes);
    }
}

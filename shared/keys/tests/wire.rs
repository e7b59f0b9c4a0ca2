//! One round trip per per-key message; messages of earlier builds without a version.

use leasehold_core::wire::{decode, encode, WireError, WireMessage, MAX_MESSAGE_BYTES};
use leasehold_per_key::wire::*;

fn roundtrip<T: WireMessage + PartialEq + std::fmt::Debug>(m: T) {
    let bytes = encode(&m);
    assert_eq!(decode_keys_message::<T>(&bytes, MAX_MESSAGE_BYTES).unwrap(), m);
    assert_eq!(decode::<T>(&bytes).unwrap(), m, "this build writes \"v\"");
}

fn admission(key: &str, at_ms: u64) -> Admission {
    Admission(key.into(), at_ms, 1, Some("free".into()))
}

#[test]
fn every_per_key_message_round_trips_with_its_version() {
    roundtrip(KeyCheck::new("alice", 3, Some("pro".into())));
    roundtrip(KeyCheck { read: true, ..KeyCheck::new("alice", 1, None) });
    roundtrip(KeyAnswer {
        v: 1,
        allowed: false,
        key: "alice".into(),
        tier: "free".into(),
        limit: 20,
        window_ms: 60_000,
        remaining: 0,
        reset_ms: 41_234,
        retry_after_ms: Some(41_234),
        count: None,
    });
    roundtrip(KeyRefusal { v: 1, error: "shard 3 is moving to a new owner; retry".into(), status: 503 });
    roundtrip(ShardRecord::owned_by(Some("keys-3f2a".into()), 3_000));
    roundtrip(ShardRecord::owned_by(None, 3_000));
    roundtrip(MemberRecord { v: 1, http: "127.0.0.1:8090".into(), ttl_ms: Some(3_000) });
    roundtrip(AdmissionBatch { v: 1, admissions: vec![admission("alice", 1_764_457_200_123)] });
}

#[test]
fn messages_of_earlier_builds_without_a_version_are_read_as_version_1() {
    let check: KeyCheck = decode_keys_message(br#"{"key":"alice"}"#, MAX_MESSAGE_BYTES).unwrap();
    assert_eq!(check, KeyCheck::new("alice", 1, None));
    let record: ShardRecord = decode_keys_message(br#"{"owner":"keys-1"}"#, MAX_MESSAGE_BYTES).unwrap();
    // Without the writer's TTL, too (a reader then counts the longest it accepts).
    assert_eq!(record, ShardRecord { v: 1, owner: Some("keys-1".into()), ttl_ms: None });
    let member: MemberRecord = decode_keys_message(br#"{"v":1,"http":"h:1"}"#, MAX_MESSAGE_BYTES).unwrap();
    assert_eq!(member.ttl_ms, None);
    let batch = AdmissionBatch::parse(br#"[["alice",1764457200123,1,"free"],["bob",1764457200124,2,null]]"#).unwrap();
    assert_eq!(
        batch.admissions,
        vec![admission("alice", 1_764_457_200_123), Admission("bob".into(), 1_764_457_200_124, 2, None)]
    );
}

#[test]
fn unknown_versions_bad_keys_and_oversized_input_are_refused() {
    let newer = decode_keys_message::<KeyCheck>(br#"{"v":2,"key":"alice"}"#, MAX_MESSAGE_BYTES);
    assert_eq!(newer, Err(WireError::UnsupportedVersion { found: 2, speaks: 1 }));
    for key in ["", "a\u{7}b", &"k".repeat(257)] {
        let body = encode(&KeyCheck::new(key, 1, None));
        assert!(
            matches!(decode_keys_message::<KeyCheck>(&body, 4_096), Err(WireError::Invalid { field: "key", .. })),
            "{key:?}"
        );
    }
    let big = vec![b' '; 4_097];
    assert!(matches!(decode_keys_message::<KeyCheck>(&big, 4_096), Err(WireError::Oversized { .. })));
    assert!(matches!(
        AdmissionBatch::parse(b"{\"v\":1,\"admissions\":[[\"\",1,1,null]]}"),
        Err(WireError::Invalid { .. })
    ));
}

#[test]
fn a_flush_of_any_size_is_cut_into_batches_each_below_the_limit_and_in_order() {
    let longest = "k".repeat(256);
    let admissions: Vec<Admission> = (0..5_000)
        .map(|i| Admission(longest.clone(), u64::MAX - i, u64::MAX, Some("\"".repeat(64 + i as usize % 7))))
        .collect();
    let batches = AdmissionBatch::chunks(&admissions);
    assert!(batches.len() > 1);
    for b in &batches {
        let bytes = encode(b);
        assert!(bytes.len() <= MAX_ADMISSION_BATCH_BYTES, "{} bytes", bytes.len());
        assert_eq!(AdmissionBatch::parse(&bytes).unwrap(), *b);
    }
    let rejoined: Vec<Admission> = batches.into_iter().flat_map(|b| b.admissions).collect();
    assert_eq!(rejoined, admissions);
}

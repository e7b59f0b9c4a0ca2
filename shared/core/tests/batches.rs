//! Protocol v2 batches: what a receiver refuses, and how senders split a batch so that every
//! piece fits the server's `max_payload` and never names a limit twice.

use leasehold_core::quota::Quota;
use leasehold_core::wire::{
    batches, decode, encode, encode_batches, DcReport, DcReports, LedgerFence, LedgerRecord, PodReport, PodReports,
    WireError, MAX_BATCH_ITEMS,
};

fn report(limit: &str, pod: &str, incarnation: u64) -> PodReport {
    PodReport {
        v: 1,
        limit: limit.into(),
        dc: "bkk".into(),
        pod: pod.into(),
        incarnation,
        seq: 1,
        interval_ms: 250,
        offered: 10,
        admitted: 10,
        rejected: 0,
        queued: 0,
        errors: 0,
        upstream_429: 0,
        healthy: true,
        draining: false,
        weight: 1.0,
        lease_in_use: None,
        periods: 1,
        held: None,
    }
}

fn names(n: usize) -> Vec<String> {
    // Long names, as real deployments use: ~60 bytes each.
    (0..n).map(|i| format!("tenant-{i:05}-partner-api-search-and-recommendations-eu")).collect()
}

#[test]
fn a_batch_round_trips_at_version_2() {
    let b = PodReports::new("bkk", "p1", vec![report("a", "p1", 7), report("b", "p1", 7)]);
    let bytes = encode(&b);
    assert!(String::from_utf8_lossy(&bytes).starts_with(r#"{"v":2,"dc":"bkk","pod":"p1","reports":[{"v":1,"#));
    assert_eq!(decode::<PodReports>(&bytes), Ok(b));
}

#[test]
fn a_batch_is_refused_whole_for_any_bad_item() {
    let refused = |items: Vec<PodReport>| decode::<PodReports>(&encode(&PodReports::new("bkk", "p1", items)));
    // An item naming another pod than the envelope (and so than the subject).
    assert!(matches!(refused(vec![report("a", "p1", 7), report("b", "ghost", 7)]), Err(WireError::Invalid { .. })));
    // A limit twice.
    assert!(matches!(refused(vec![report("a", "p1", 7), report("a", "p1", 8)]), Err(WireError::Invalid { .. })));
    // An item of another schema version.
    let newer = PodReport { v: 7, ..report("a", "p1", 7) };
    assert!(matches!(refused(vec![newer]), Err(WireError::Invalid { .. })));
    // More items than any pod serves.
    let many: Vec<PodReport> = (0..=MAX_BATCH_ITEMS).map(|i| report(&format!("l{i}"), "p1", 7)).collect();
    assert!(matches!(refused(many), Err(WireError::Invalid { .. })));
    // A v1 message where a batch is expected.
    let single = encode(&report("a", "p1", 7));
    assert!(matches!(decode::<PodReports>(&single), Err(WireError::UnsupportedVersion { found: 1, speaks: 2 })));
}

/// Under a server's 64 KiB `max_payload`, 1,000 limits' reports go as a few batches that each
/// fit, every item exactly once; under the default 1 MiB, as one.
#[test]
fn batches_fit_the_server_s_max_payload() {
    let items: Vec<PodReport> = names(1_000).iter().map(|l| report(l, "bkk-pod-0001", u64::MAX)).collect();
    for (max_payload, expected_batches) in [(64 * 1024, 5..=8), (1024 * 1024, 1..=1)] {
        let cut = batches(&items, max_payload);
        assert!(expected_batches.contains(&cut.len()), "{} batches under {max_payload}", cut.len());
        let mut seen = 0;
        for b in &cut {
            let bytes = encode(&PodReports::new("bkk", "bkk-pod-0001", b.clone()));
            assert!(bytes.len() <= max_payload, "a batch of {} bytes under {max_payload}", bytes.len());
            decode::<PodReports>(&bytes).expect("every batch reads back");
            seen += b.len();
        }
        assert_eq!(seen, items.len());
    }
}

/// Two holders of one limit at one pod (a restarted process whose predecessor is still counted):
/// their items go into different batches, so no batch names the limit twice.
#[test]
fn a_second_item_of_a_limit_goes_into_another_batch() {
    let items = vec![report("a", "p1", 1), report("b", "p1", 1), report("a", "p1", 2)];
    let cut = batches(&items, 1024 * 1024);
    assert_eq!(cut.len(), 2);
    for b in &cut {
        decode::<PodReports>(&encode(&PodReports::new("bkk", "p1", b.clone()))).expect("no limit twice");
    }
    assert!(batches::<PodReport>(&[], 1024).is_empty());
}

/// Encoding each item once cuts exactly as `batches` does, and each payload is byte for byte
/// what `encode` writes for the batch (pod batches and the DC manager's, ids needing escapes).
#[test]
fn encoded_batches_are_the_batches_encode_writes() {
    let mut items: Vec<PodReport> = names(1_000).iter().map(|l| report(l, "bkk-\"pod\"-1", u64::MAX)).collect();
    items.push(report("l0007", "bkk-\"pod\"-1", 2)); // a second holder of a limit
    for max_payload in [64 * 1024, 1024 * 1024] {
        let cut = batches(&items, max_payload);
        let encoded = encode_batches(&items, max_payload);
        assert_eq!(encoded.len(), cut.len(), "under {max_payload}");
        for ((payload, indices), batch) in encoded.iter().zip(&cut) {
            let chosen: Vec<PodReport> = indices.iter().map(|&i| items[i].clone()).collect();
            assert_eq!(&chosen, batch);
            assert_eq!(payload, &encode(&PodReports::new("bkk", "bkk-\"pod\"-1", batch.clone())));
        }
    }
    let dc_reports: Vec<DcReport> = names(3)
        .iter()
        .map(|l| DcReport {
            v: 1,
            limit: l.clone(),
            dc: "bkk".into(),
            holder: "bkk-mgr-1".into(),
            term: 4,
            seq: 9,
            demand: Quota::per_s(10, 0),
            pods_healthy: 2,
            lease_in_use: None,
            floor_in_use: None,
            floor_version: None,
            upstream_calls: 0,
            upstream_429: 0,
            counts_predecessor: false,
        })
        .collect();
    let encoded = encode_batches(&dc_reports, 1024 * 1024);
    assert_eq!(encoded.len(), 1);
    assert_eq!(encoded[0].0, encode(&DcReports::new("bkk", dc_reports)));
    assert!(encode_batches::<PodReport>(&[], 1024).is_empty());
}

/// Found by review: ids may hold `"` and `\`, each written as two bytes, so the envelope of two
/// 128-byte ids is larger than the 512 bytes once kept for it: two items that filled the rest of
/// a `max_payload` exactly went over it.
#[test]
fn a_batch_fits_max_payload_even_when_its_ids_need_escapes() {
    let (dc, pod) = ("\\".repeat(128), "\"".repeat(128));
    let mut items: Vec<PodReport> = ["l1", "l2"].iter().map(|l| report(l, &pod, u64::MAX)).collect();
    items.iter_mut().for_each(|r| r.dc = dc.clone());
    let item_bytes = serde_json::to_vec(&items[0]).unwrap().len();
    // Room for both items after 512 bytes of envelope, to the byte.
    let max_payload = 512 + 2 * (item_bytes + 1);
    let encoded = encode_batches(&items, max_payload);
    for (payload, _) in &encoded {
        assert!(payload.len() <= max_payload, "a batch of {} bytes under {max_payload}", payload.len());
    }
}

/// The fence lists every limit: with 1,000 limits in 3 DCs it is far above 64 KiB and must
/// still read back (an unreadable fence stops every takeover).
#[test]
fn the_fence_of_a_thousand_limits_reads_back() {
    let mut fence = LedgerFence::raised(None, 7, 10_000);
    for name in names(1_000) {
        let mut rec = LedgerRecord::empty(&name, 7, "coord");
        for dc in ["bkk", "europe", "us-east"] {
            rec.floors.insert(dc.into(), Quota::per_s(50, 5));
        }
        fence = fence.covering(&rec).expect("a new limit raises the fence");
    }
    let bytes = encode(&fence);
    assert!(bytes.len() > 64 * 1024, "only {} bytes", bytes.len());
    assert_eq!(LedgerFence::parse(&bytes), Ok(fence));
}

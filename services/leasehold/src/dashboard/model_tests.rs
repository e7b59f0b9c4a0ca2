use super::*;
use leasehold_core::wire::{DcLease, DcReport, LeaseVersion, PodLease, PodReport};

const SHOWN: Shown = Shown { limits_max: 50, pods_per_dc_max: 100 };

fn q(rate_per_s: u64, burst: u64) -> Quota {
    Quota::new(rate_per_s * 1_000, burst * 1_000)
}

fn dc_lease(dc: &str, holder: &str, seq: u64, quota: Quota) -> DcLease {
    serde_json::from_value(serde_json::json!({
        "v": 1, "limit": "api", "dc": dc, "holder": holder, "version": {"epoch": 1, "seq": seq},
        "lease_id": format!("{dc}-{seq}"), "quota": quota, "floor": Quota::ZERO, "ttl_ms": 10_000, "basis_seq": 0
    }))
    .expect("a DC lease")
}

fn record(epoch: u64, writer: &str, leases: Vec<DcLease>) -> LedgerRecord {
    let mut r = LedgerRecord::empty("api", epoch, writer);
    r.leases = leases;
    r.capacity = Some(q(1_000, 100));
    r.floors.insert("bkk".into(), q(50, 0));
    r.floors.insert("eu".into(), q(50, 0));
    r
}

fn group(records: Vec<LedgerRecord>) -> Option<LedgerGroup> {
    Some(LedgerGroup::new(3, records))
}

fn pod_report(dc: &str, pod: &str, admitted: u64) -> PodReports {
    let r: PodReport = serde_json::from_value(serde_json::json!({
        "v": 1, "limit": "api", "dc": dc, "pod": pod, "incarnation": 1, "seq": 1, "interval_ms": 500,
        "offered": admitted * 2, "admitted": admitted, "rejected": admitted, "queued": 0, "errors": 0,
        "healthy": true, "draining": false, "weight": 1.0, "lease_in_use": null
    }))
    .expect("a pod report");
    PodReports::new(dc, pod, vec![r])
}

fn pod_lease(dc: &str, pod: &str, rate_per_s: u64) -> PodLeases {
    let l: PodLease = serde_json::from_value(serde_json::json!({
        "v": 1, "limit": "api", "dc": dc, "pod": pod, "incarnation": 1, "issuer": "m", "version": {"epoch": 1, "seq": 4},
        "lease_id": "x", "quota": q(rate_per_s, 1), "ttl_ms": 2_000, "basis_seq": 1
    }))
    .expect("a pod lease");
    PodLeases::new(dc, pod, vec![l])
}

#[test]
fn a_dc_is_allocated_its_newest_lease_plus_its_floor_and_the_sum_counts_each_holders_largest() {
    let mut v = View::new(10);
    let leases = vec![
        dc_lease("bkk", "m1", 1, q(600, 40)),
        dc_lease("bkk", "m1", 2, q(300, 20)),
        dc_lease("eu", "m2", 1, q(200, 30)),
    ];
    v.on_ledger_group(3, group(vec![record(1, "c", leases)]), 0);
    let s = v.snapshot(0, SHOWN);
    let card = &s.limits[0];
    let bkk = card.dcs.iter().find(|d| d.dc == "bkk").expect("bkk");
    assert_eq!(bkk.allocated_per_s, 350.0, "the newest lease (300/s) and the floor (50/s)");
    // m1 may still spend its older, larger lease: 600 + 200 + floors 100.
    assert_eq!(card.outstanding_rate_per_s, Some(900.0));
    assert_eq!(card.outstanding_burst, Some(70.0));
    assert_eq!(card.rate_per_s, Some(1_000.0));
}

#[test]
fn a_reserved_floor_larger_than_the_one_named_is_counted() {
    let mut r = record(1, "c", Vec::new());
    r.floors_reserved.insert("bkk".into(), q(80, 0));
    assert_eq!(on_record(&r).rate_per_s(), 130.0, "80 reserved for bkk and 50 named for eu");
}

#[test]
fn history_samples_demand_allocation_and_fresh_use_and_stays_bounded() {
    let mut v = View::new(3);
    v.on_ledger_group(3, group(vec![record(1, "c", vec![dc_lease("bkk", "m1", 1, q(400, 10))])]), 0);
    let report = DcReport::new("api", "bkk", "m1", 1, 1, q(420, 0));
    v.on_dc_reports(&DcReports::new("bkk", vec![report]), 0);
    v.on_pod_reports(&pod_report("bkk", "p1", 100), 0);
    v.on_pod_reports(&pod_report("bkk", "p2", 50), 0);
    v.tick(1_000);
    let first = v.snapshot(1_000, SHOWN).limits[0].dcs[0].history.clone();
    assert_eq!(first, vec![Sample { at_ms: 1_000, demand_per_s: 420.0, allocated_per_s: 450.0, used_per_s: 300.0 }]);
    // p2 goes on reporting; p1's report grows stale and stops counting.
    v.on_pod_reports(&pod_report("bkk", "p2", 50), 3_500);
    for t in [4_000, 5_000, 7_000] {
        v.tick(t);
    }
    let h = v.snapshot(7_000, SHOWN).limits[0].dcs[0].history.clone();
    assert_eq!(h.len(), 3, "bounded to 3 samples");
    assert_eq!(h.iter().map(|s| s.at_ms).collect::<Vec<_>>(), vec![4_000, 5_000, 7_000]);
    assert_eq!(h[0].used_per_s, 100.0, "only p2's fresh report");
    assert_eq!(h[2].used_per_s, 0.0, "no report is fresh 3.5 s later");
}

#[test]
fn takeovers_fence_raises_and_new_writers_are_events_first_sights_of_a_leader_are_not_takeovers() {
    let mut v = View::new(3);
    v.on_leader_key("coordinator", Some(b"coord-a"), 0);
    v.on_leader_key("dc.bkk", Some(b"bkk-a"), 0);
    v.on_leader_key("ledger-fence", Some(br#"{"v":1,"epoch":4}"#), 0);
    v.on_ledger_group(3, group(vec![record(4, "coord-a", Vec::new())]), 0);
    assert!(v.snapshot(0, SHOWN).events.iter().all(|e| !e.text.contains("takeover")));
    v.on_leader_key("coordinator", Some(b"coord-b"), 10);
    v.on_leader_key("ledger-fence", Some(br#"{"v":1,"epoch":5}"#), 11);
    v.on_ledger_group(3, group(vec![record(5, "coord-b", Vec::new())]), 12);
    v.on_leader_key("dc.bkk", None, 13);
    let s = v.snapshot(20, SHOWN);
    let texts: Vec<&str> = s.events.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(texts[0], "DC bkk manager: bkk-a stepped down; no leader");
    assert_eq!(texts[1], "limit api: ledger written by coord-b at epoch 5 (was coord-a at epoch 4)");
    assert_eq!(texts[2], "ledger fence raised to epoch 5 (a new coordinator term)");
    assert_eq!(texts[3], "coordinator takeover: coord-b leads (was coord-a)");
    assert_eq!((s.coordinator_leader.as_deref(), s.fence_epoch), (Some("coord-b"), Some(5)));
    assert!(s.dc_leaders.is_empty());
}

#[test]
fn a_record_gone_from_its_group_leaves_the_view() {
    let mut v = View::new(3);
    let mut other = record(1, "c", Vec::new());
    other.limit = "other".into();
    v.on_ledger_group(3, group(vec![record(1, "c", Vec::new()), other.clone()]), 0);
    v.on_ledger_group(3, group(vec![other]), 5);
    let s = v.snapshot(5, SHOWN);
    assert_eq!(s.limits.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(), vec!["other"]);
    assert_eq!(s.events[0].text, "limit api: its ledger record was removed");
    v.on_ledger_group(3, None, 6);
    assert!(v.snapshot(6, SHOWN).limits.is_empty(), "the group's key deleted");
}

#[test]
fn pods_show_seconds_since_renewal_stalest_first_bounded_and_are_forgotten_when_silent() {
    let mut v = View::new(3);
    v.on_pod_leases(&pod_lease("bkk", "p1", 100), 0);
    v.on_pod_leases(&pod_lease("bkk", "p2", 100), 2_000);
    v.on_pod_leases(&pod_lease("bkk", "p3", 100), 2_500);
    v.on_pod_leases(&pod_lease("eu", "e1", 70), 2_500);
    let s = v.snapshot(3_000, Shown { limits_max: 50, pods_per_dc_max: 2 });
    let bkk = &s.pods["bkk"];
    assert_eq!(bkk.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), vec!["p1", "p2"], "stalest first, 2 shown");
    assert_eq!(bkk[0].limits[0].since_renewal_s, Some(3.0));
    assert_eq!(bkk[0].limits[0].rate_per_s, Some(100.0));
    assert_eq!(s.pods_total["bkk"], 3);
    assert_eq!(s.pods["eu"][0].limits[0].version.as_deref(), Some(&*LeaseVersion::new(1, 4).to_string()));
    v.tick(FORGET_POD_AFTER_MS + 1_000);
    let s = v.snapshot(FORGET_POD_AFTER_MS + 1_000, SHOWN);
    assert_eq!(s.pods_total.get("bkk"), Some(&2), "p1 silent for 30 s is forgotten");
}

#[test]
fn at_most_limits_shown_are_drawn_and_the_total_is_told() {
    let mut v = View::new(3);
    let records = (0..5)
        .map(|i| {
            let mut r = record(1, "c", Vec::new());
            r.limit = format!("l{i}");
            r
        })
        .collect();
    v.on_ledger_group(3, group(records), 0);
    let s = v.snapshot(0, Shown { limits_max: 2, pods_per_dc_max: 1 });
    assert_eq!((s.limits.len(), s.limits_total), (2, 5));
    assert_eq!(s.limits[0].name, "l0");
}

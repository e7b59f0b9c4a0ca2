//! Tests of `tools/lab/src/demo/lowering.rs`.

use leasehold_lab::demo::limits::{Lowering, PutRun};
use leasehold_lab::demo::load::Bins;
use leasehold_lab::demo::lowering::*;
use leasehold_lab::demo::observe::UpstreamStats;

#[test]
fn admissions_fit_the_new_rate_from_the_first_span_under_its_bound() {
    // 612/s with B = 20: 3 s may admit (612·3.13 + 20)/3 ≈ 645 per second.
    let bound = window_bound(612.0, 20.0);
    assert!((645.0..646.0).contains(&bound), "{bound}");
    let admitted = [850, 850, 850, 840, 700, 640, 610, 612, 600, 611];
    // From 2: 850/840/700 (797), 840/700/640 (727), 700/640/610 (650): not yet; 640/610/612 fits.
    assert_eq!(first_span_within(&admitted, 2, bound), Some(5));
    assert_eq!(first_span_within(&admitted, 0, 500.0), None, "never that low");
    assert_eq!(first_span_within(&admitted, 9, bound), None, "too few seconds left for a span");
}

#[test]
fn the_report_measures_the_drop_and_counts_429s_from_the_put() {
    let plan = Lowering::partner();
    let mut bins = Bins::new(2, 30);
    for s in 0..30 {
        let total = if s < 12 { 860 } else { 600 };
        bins.admitted[s] = vec![total / 2, total / 2];
    }
    let put = PutRun { exit_code: Some(0), took_ms: 40, printed: vec!["written".into()] };
    let ran = Ran {
        put_at_s: Some(9.3),
        put: Some(put),
        applied_seen_at_s: Some(9.5),
        pods_leased_before_per_s: Some(880.0),
        pods_leased_at_new_rate_at_s: Some(10.4),
        rejected_at_put: Some(2),
        upstream_lowered_at_s: Some(21.0),
        error: None,
    };
    let up = UpstreamStats { rejected: 2, max_window_since_change: 640, ..UpstreamStats::default() };
    let r = Report::new(&plan, ran, &bins, &up, 30);
    assert_eq!(r.admitted_at_new_rate_at_s, Some(12));
    assert_eq!(r.admissions_dropped_after_s, Some(2.7));
    assert_eq!((r.admitted_before_per_s, r.admitted_after_per_s), (Some(860.0), Some(600.0)));
    assert_eq!(r.upstream_rejections_since_put, Some(0), "the 2 before the put are not the change's");
    assert_eq!(r.max_window_since_upstream_lowered, Some(640));
    assert!(r.ok());
    let failed = Ran { put: Some(PutRun { exit_code: Some(1), took_ms: 5, printed: vec![] }), ..Ran::default() };
    assert!(!Report::new(&plan, failed, &bins, &up, 30).ok());
}

//! A DC manager that dropped a report batch unread (its inbound queue too full or too old) keeps
//! the pods it last heard before then in its splits for `heartbeat_timeout_after_drops_ms`, and
//! one reading its reports late counts silence only up to what it has read, through the core's
//! tick: the DC report still counts such a pod (the coordinator moves no
//! budget away) and the renewal still leases it. Found by `bench control-plane` at 100 pods × 1,000 limits × 2 DCs, where
//! pods taken for gone moved budgets between DCs and every move re-split every pod.

use leasehold_core::dc_manager::{DcManagerConfig, DcOutput};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcReport, LeaseVersion};

use crate::support;
use support::scripted::{report_seq_of, ScriptedDc};
use support::{MS, S};

fn dc_report(out: &[DcOutput]) -> &DcReport {
    out.iter()
        .find_map(|o| match o {
            DcOutput::Report(r) => Some(r),
            _ => None,
        })
        .expect("a tick reports")
}

fn leased_to(out: &[DcOutput], pod: &str) -> bool {
    out.iter().any(|o| matches!(o, DcOutput::PodLease(l) if l.pod == pod && l.quota.rate_milli_per_s > 0))
}

/// What the driver tells the core before its tick at 2.5 s.
enum Noted {
    Nothing,
    /// A batch dropped at 1.4 s.
    Drop,
    /// Read only up to 1.5 s.
    ReadThrough,
}

/// Two pods heard at 10 ms; from then on only `p1` is heard (every 500 ms). Returns the DC
/// report's `pods_healthy` and whether `p0` was leased at the tick at 2.5 s.
fn tick_after_silence(noted: Noted) -> (u32, bool) {
    let cfg = DcManagerConfig::new("api", "bkk", "bkk-mgr");
    let mut dc = ScriptedDc::new(cfg, Quota::ZERO, 0, 1, (5, 5));
    let basis = report_seq_of(&dc.core.tick(0)).expect("a tick reports");
    dc.dc_lease(Quota::per_s(100, 10), 30_000, LeaseVersion::new(1, 1), basis, 0).expect("the DC lease applies");
    dc.report("p0", 10 * MS, true, false);
    dc.report("p1", 10 * MS, true, false);
    for t in [500 * MS, S, 3 * S / 2, 2 * S] {
        dc.report("p1", t, true, true);
    }
    match noted {
        Noted::Nothing => {}
        Noted::Drop => dc.core.note_reports_dropped(1_400 * MS),
        Noted::ReadThrough => dc.core.note_reports_read_through(3 * S / 2),
    }
    let out = dc.core.tick(5 * S / 2);
    (dc_report(&out).pods_healthy, leased_to(&out, "p0"))
}

#[test]
fn a_pod_whose_batch_the_manager_dropped_stays_in_the_split_and_the_dc_report() {
    assert_eq!(tick_after_silence(Noted::Nothing), (1, false), "silent 2.49 s, nothing dropped: out of the split");
    assert_eq!(tick_after_silence(Noted::Drop), (2, true), "its batch dropped: counted and leased at the renewal");
}

/// A manager reading its reports 1 s late (dropping none) counts a pod's silence up to what it
/// has read: 1.49 s by 1.5 s, within the timeout.
#[test]
fn a_pod_the_manager_may_not_have_read_yet_stays_in_the_split_and_the_dc_report() {
    assert_eq!(tick_after_silence(Noted::ReadThrough), (2, true), "silent 1.49 s of what was read: counted and leased");
}

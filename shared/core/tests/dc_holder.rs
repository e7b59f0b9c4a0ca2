//! The coordinator sends a DC's leases to its newest DC-manager term: a delayed report from an
//! earlier term never turns the DC's holder back to a replica that is gone, across coordinator
//! takeovers too (docs/FINDINGS.md#f7; waste, never excess).

use leasehold_core::quota::Quota;

use crate::support::{MS, S};

/// A delayed report from a previous DC-manager term must not turn the DC's
/// holder back to a manager that is gone (its next lease would be wasted for a whole TTL).
#[test]
fn a_delayed_report_from_an_earlier_manager_term_does_not_change_the_dcs_holder() {
    use leasehold_core::coordinator::{CoordinatorCore, LimitConfig, Stored};
    use leasehold_core::wire::DcReport;
    let cfg = LimitConfig::new("api", Quota::per_s(1_000, 20), &[("bkk", Quota::ZERO)]);
    let mut c = CoordinatorCore::resume(cfg, "c", 1, Stored::Fresh, 0);
    let report = |holder: &str, term, seq| DcReport {
        pods_healthy: 2,
        ..DcReport::new("api", "bkk", holder, term, seq, Quota::per_s(500, 0))
    };
    c.on_dc_report(&report("bkk-mgr-e9", 9, 1), 0);
    c.on_dc_report(&report("bkk-mgr-e4", 4, 77), MS);
    assert_eq!(c.dcs()["bkk"].holder.as_deref(), Some("bkk-mgr-e9"));
    let leases = c.tick(2 * MS);
    assert!(leases.iter().all(|l| l.holder == "bkk-mgr-e9"), "{leases:?}");

    // Across a coordinator takeover too (FINDINGS F7): the new leader knows the
    // holder's term from the record, and the holder of a DC with leases from two replicas is the
    // newest's, not the one whose name sorts last.
    c.on_dc_report(&report("bkk-mgr-e10", 10, 1), 3 * MS);
    let leases = c.tick(2 * S);
    assert!(leases.iter().all(|l| l.holder == "bkk-mgr-e10"), "{leases:?}");
    let record = c.record();
    let cfg = LimitConfig::new("api", Quota::per_s(1_000, 20), &[("bkk", Quota::ZERO)]);
    let mut next = CoordinatorCore::resume(cfg, "c2", 2, Stored::Record(&record), 3 * S);
    assert_eq!(next.dcs()["bkk"].holder.as_deref(), Some("bkk-mgr-e10"));
    next.on_dc_report(&report("bkk-mgr-e9", 9, 2), 3 * S + MS);
    assert_eq!(next.dcs()["bkk"].holder.as_deref(), Some("bkk-mgr-e10"), "a delayed report of term 9 was accepted");
    // A record of an older writer (no `dc_holders`): the newest lease's holder.
    let older = leasehold_core::wire::LedgerRecord { dc_holders: Default::default(), ..record };
    let cfg = LimitConfig::new("api", Quota::per_s(1_000, 20), &[("bkk", Quota::ZERO)]);
    let next = CoordinatorCore::resume(cfg, "c3", 3, Stored::Record(&older), 3 * S);
    assert_eq!(next.dcs()["bkk"].holder.as_deref(), Some("bkk-mgr-e10"));
}

//! The DC manager's pod messages: reports (demand and heartbeats, and the lease each holder
//! uses) and returns (graceful drains).

use super::{DcManagerCore, DcOutput, HolderKey, ReportOutcome, SplitMode};
use crate::sorted_map::PlaceHint;
use crate::wire::{LeaseReturn, PodReport, ReturnAck, SCHEMA_VERSION};

thread_local! {
    /// The holder key a report is looked up by, reused from report to report.
    static REPORT_KEY: std::cell::Cell<HolderKey> = std::cell::Cell::new(HolderKey::default());
}

impl DcManagerCore {
    /// A pod's demand report / heartbeat.
    pub fn on_pod_report(&mut self, r: &PodReport, now_ns: u64) -> Vec<DcOutput> {
        self.on_pod_report_at(&mut PlaceHint::default(), r, now_ns)
    }

    /// [`on_pod_report`](Self::on_pod_report), looking for the holder's view first at
    /// `*view_place` and setting it to where the view is: a driver that keeps it per pod and
    /// report item spares a hashed lookup per item (a tenth of a DC manager's time at 1,000
    /// limits × 100 pods). A wrong place only costs that lookup.
    pub fn on_pod_report_at(&mut self, view_place: &mut PlaceHint, r: &PodReport, now_ns: u64) -> Vec<DcOutput> {
        // (The names as the leases carry them, inline in the core: the config's are a cold heap
        // block by the time a report comes.)
        // (An empty pod id names the predecessor's entry in the books: `HolderKey::predecessor`.)
        if self.lease_names.dc != r.dc.as_str() || self.lease_names.limit != r.limit.as_str() || r.pod.is_empty() {
            self.counters.reports_foreign += 1;
            return Vec::new();
        }
        // The key into a buffer kept for it: no allocation, a pod id longer than the 24 bytes
        // kept inline included (a Kubernetes pod's name often is). Scratch, not state: it is
        // the thread's, not the core's.
        REPORT_KEY.with(|key| {
            let mut holder = key.take();
            holder.set(&r.pod, r.incarnation);
            let out = self.on_holder_report(&holder, view_place, r, now_ns);
            key.replace(holder);
            out
        })
    }

    /// [`on_pod_report`](Self::on_pod_report) of a report of this DC and limit, from `holder`.
    fn on_holder_report(
        &mut self,
        holder: &HolderKey,
        view_place: &mut PlaceHint,
        r: &PodReport,
        now_ns: u64,
    ) -> Vec<DcOutput> {
        let ledger = &self.ledger;
        let closed = || ledger.is_closed(holder);
        let outcome = self.pods.observe_unless_closed(holder, view_place, r, &self.cfg, now_ns, closed);
        let (share_changed, sent_a_lease, to_confirm) = match outcome {
            ReportOutcome::Accepted { share_changed, sent_a_lease, to_confirm } => {
                (share_changed, sent_a_lease, to_confirm)
            }
            ReportOutcome::Stale | ReportOutcome::Closed => {
                self.counters.reports_stale += 1;
                return Vec::new();
            }
            ReportOutcome::TooManyPods => {
                self.counters.reports_over_capacity += 1;
                return Vec::new();
            }
        };
        // A continuation confirmed is counted as the pod's own lease (`succession.rs`).
        if let Some(v) = r.lease_in_use {
            self.settle_continuation(view_place.0, holder, v, now_ns);
        }
        // A version confirmed before is not asked again: its older leases already end by then,
        // and no older one is granted after it. Unknown versions (a forged or pre-restart ack)
        // change nothing, and are asked again if named again (a version may be issued later).
        if let Some(v) = to_confirm {
            let release_at = self.cfg.expiry.released_until_ns(now_ns);
            match self.pods.views.get_index_mut(view_place.0) {
                Some(view) => {
                    if self.ledger.confirm_in_use_at(&mut view.ledger_place, holder, v, release_at).is_err() {
                        view.confirmed = None;
                    }
                }
                // (Not reached: the place is the view's, just found.)
                None => _ = self.ledger.confirm_in_use(holder, v, release_at),
            }
        }
        // A brand-new pod (never sent a lease by this core) needs a split to get a lease. A
        // holder already sent one gets it at the next renewal if it lapsed: a report it sent
        // before the lease came, read late by a busy manager, must not run a split of its own.
        // Any other report may let a pod grow (fast rebalance) only if the last pass left one
        // below its target (its confirmation frees room), or it changes the targets: this pod's
        // share (health, weight, back from silence) or, with a `demand` split, its demand. A pod
        // falling silent frees its share at the next renewal. Both wait for the gap (see
        // `event_pass_gap_ms`).
        let mut out = match self.continuation_for(view_place.0, now_ns) {
            Some(Some(continuation)) => vec![continuation],
            _ => Vec::new(),
        };
        if !sent_a_lease && r.lease_in_use.is_none() {
            self.passes.join_waiting = true;
        } else if self.passes.shortfall || share_changed || self.cfg.split == SplitMode::Demand {
            self.passes.growth_waiting = true;
        }
        out.extend(self.waiting_pass_unless_recent(now_ns));
        out
    }

    /// A pod returns its lease for good (graceful drain). Idempotent; always acknowledged.
    pub fn on_lease_return(&mut self, r: &LeaseReturn, now_ns: u64) -> Vec<DcOutput> {
        if r.dc != self.cfg.dc || r.limit != self.cfg.limit || r.holder.is_empty() {
            self.counters.reports_foreign += 1;
            return Vec::new();
        }
        self.counters.returns += 1;
        let holder = HolderKey::new(&r.holder, r.incarnation);
        let ack = DcOutput::ReturnAck(ReturnAck {
            v: SCHEMA_VERSION,
            limit: self.cfg.limit.clone(),
            dc: self.cfg.dc.clone(),
            holder: r.holder.clone(),
            incarnation: r.incarnation,
        });
        if !self.pods.views.contains_key(&holder) && !self.ledger.knows(&holder) {
            // Nothing of it to free and no share to take back. No closed marker either: the
            // incarnation is the pod's to choose, so markers for holders never seen would grow
            // without bound. A report it sent before, read late, may make it a view and a lease
            // it will not use: counted until it expires, so waste, never excess.
            self.counters.returns_of_unknown_holders += 1;
            return vec![ack];
        }
        let release_at = self.cfg.expiry.released_until_ns(now_ns);
        if self.ledger.closed_markers() < self.cfg.max_pods || self.ledger.is_closed(&holder) {
            let forget = self.cfg.expiry.issuer_live_until_ns(now_ns, self.cfg.pod_ttl_ms * 4);
            self.ledger.close(&holder, release_at, forget);
        } else {
            // As many markers as views may be kept: a pod making and returning holder after
            // holder must not grow the books. Its leases end all the same; a report of it read
            // late is a new holder's (waste, never excess).
            self.ledger.release(&holder, release_at);
            self.counters.returns_without_marker += 1;
        }
        self.pods.views.remove(&holder);
        // Its share is free at once; the others grow into it with the next split, which waits
        // for the gap as a join does (a drain of many pods costs O(pods) per gap).
        self.passes.growth_waiting = true;
        let mut out = self.waiting_pass_unless_recent(now_ns);
        out.push(ack);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dc_manager::pods::tests::report;
    use crate::dc_manager::DcManagerConfig;

    /// The place a driver keeps per report item: looked at first, corrected when the views
    /// moved, and never the cause of a report landing on another pod's view.
    #[test]
    fn a_report_finds_its_view_from_a_kept_place_or_without_one() {
        let mut core = DcManagerCore::new(DcManagerConfig::new("l", "bkk", "m"), 0);
        let from = |pod: &str, seq| {
            let mut r = report(seq, 250, 0, 0, 1);
            r.pod = pod.into();
            r
        };
        let last_seq =
            |core: &DcManagerCore, pod: &str| core.pods().find(|(k, _)| k.pod() == pod).map(|(_, v)| v.last_seq);
        let mut p1_place = PlaceHint::NOWHERE;
        core.on_pod_report_at(&mut p1_place, &from("p1", 1), 0);
        assert_eq!(p1_place.0, 0, "the new view's place");
        core.on_pod_report(&from("p0", 1), 0);
        core.on_pod_report_at(&mut p1_place, &from("p1", 2), 0);
        assert_eq!((last_seq(&core, "p1"), last_seq(&core, "p0")), (Some(2), Some(1)), "not p0's, now at place 0");
        assert_eq!(p1_place.0, 1, "corrected");
        let mut wrong = PlaceHint(0);
        core.on_pod_report_at(&mut wrong, &from("p1", 3), 0);
        assert_eq!((last_seq(&core, "p1"), last_seq(&core, "p0"), wrong.0), (Some(3), Some(1), 1));
    }
}

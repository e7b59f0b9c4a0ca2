//! A term that has not read its limit's ledger record directly.
//!
//! A DC manager's floor comes from the coordinator's record, and the coordinator stops
//! reserving an older, larger floor once the DC's manager confirms it uses the newer one
//! (`DcReport.floor_in_use`, `floor_version`). A standby's ledger watch may lag behind its
//! leader's: if the standby takes over while it cannot read the ledger (its DC cut off from the
//! hub), the floor its watch delivered may be older and larger than the one its predecessor
//! confirmed, and the difference may already be another DC's. So a term that could not read the
//! record directly when it began uses **no floor and no emergency allowance** until it has:
//! floors offered meanwhile ([`DcManagerCore::on_floor`]) are ignored; a DC lease addressed to
//! this term still counts (and so does the floor it carries: the coordinator issued it after
//! hearing this term, so that floor is at least as new as any its predecessor confirmed).
//!
//! Unless the DC itself vouches for a floor. Every term writes the floor it is about to confirm
//! (with its version) into the DC's `FloorConfirmations` (its own JetStream, reachable during the
//! cut) **before** its report confirms it: a report never confirms a version beyond what is
//! written ([`DcManagerCore::cap_floor_confirmation`]). The coordinator releases a DC's floor
//! only once a newer one is confirmed, which would have been written first; so it still reserves
//! at least the floor written last, and a successor cut off from the ledger may run on that one
//! ([`DcManagerCore::on_vouched_floor`]), still strict (no emergency allowance: its removal and
//! pod rules came from its watch).

use super::{DcManagerCore, DcOutput, Pass};
use crate::quota::Quota;
use crate::wire::LeaseVersion;

impl DcManagerCore {
    /// The term could not read the ledger record directly: use no floor and no emergency
    /// allowance until [`on_ledger_read`](Self::on_ledger_read).
    pub fn await_ledger_read(&mut self) {
        self.ledger_unread = !self.cfg.bugs.term_uses_watched_floor();
    }

    /// Whether the term still waits for its first direct read of the ledger.
    pub fn awaits_ledger_read(&self) -> bool {
        self.ledger_unread
    }

    /// The newest floor version the driver has written to the DC's `FloorConfirmations` (`None`:
    /// none): reports confirm no newer one. Drivers that keep no confirmations never call it.
    pub fn cap_floor_confirmation(&mut self, persisted: Option<LeaseVersion>) {
        self.floors.confirm_cap = Some(persisted);
    }

    /// The floor (and version) this term would confirm but may not yet: the driver writes it to
    /// the DC's `FloorConfirmations`, then raises the cap.
    pub fn floor_to_persist(&self) -> Option<(Quota, LeaseVersion)> {
        let cap = self.floors.confirm_cap?;
        self.floors.version.filter(|v| cap.is_none_or(|c| *v > c)).map(|v| (self.floors.amount, v))
    }

    /// A term awaiting its first direct read runs on the floor its DC's `FloorConfirmations`
    /// name for the limit (the last any term of the DC wrote before confirming it): the
    /// coordinator still reserves at least that much. It stays strict until it reads the ledger.
    pub fn on_vouched_floor(&mut self, floor: Quota, version: LeaseVersion, now_ns: u64) -> Vec<DcOutput> {
        if !self.take_floor(floor, version) {
            return Vec::new();
        }
        self.pass(now_ns, Pass::Full)
    }

    /// What the next report confirms: the floor version in use, capped by what is persisted.
    pub(super) fn confirmable_floor_version(&self) -> Option<LeaseVersion> {
        match self.floors.confirm_cap {
            Some(cap) if !self.cfg.bugs.floor_confirmed_unpersisted() => self.floors.version.min(cap),
            _ => self.floors.version,
        }
    }

    /// The term has read its limit's record directly: `floor` is the DC's floor it names (with
    /// its version), if any. From now on floors and the emergency allowance are used as usual.
    pub fn on_ledger_read(&mut self, floor: Option<(Quota, LeaseVersion)>, now_ns: u64) -> Vec<DcOutput> {
        let was_unread = std::mem::replace(&mut self.ledger_unread, false);
        let took = floor.is_some_and(|(f, v)| self.take_floor(f, v));
        if took || was_unread {
            return self.pass(now_ns, Pass::Full);
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use crate::bugs::KnownBugs;
    use crate::dc_manager::{DcManagerConfig, DcManagerCore, FailMode};
    use crate::quota::Quota;
    use crate::wire::LeaseVersion;

    const S: u64 = 1_000_000_000;

    fn core(bugs: KnownBugs) -> DcManagerCore {
        let mut cfg = DcManagerConfig::new("api", "bkk", "bkk-m2-e9");
        cfg.fail_mode = FailMode::BestEffort { emergency: Quota::per_s(5, 1) };
        cfg.bugs = bugs;
        DcManagerCore::new(cfg, 0)
    }

    fn version(seq: u64) -> LeaseVersion {
        LeaseVersion { epoch: 3, seq }
    }

    #[test]
    fn a_term_that_has_not_read_the_ledger_uses_no_floor_and_no_emergency_allowance() {
        let mut c = core(KnownBugs::default());
        c.await_ledger_read();
        // A floor its watch delivered (perhaps older than one its predecessor confirmed).
        let stale = Quota::per_s(50, 5);
        c.on_floor(stale, version(1), 0);
        let after_quiet = 60 * S;
        assert_eq!(c.budget(after_quiet), (Quota::ZERO, None), "no floor, no emergency allowance while unread");
        // The direct read names a newer, smaller floor: that one is used, never the stale one.
        let read = Quota::per_s(20, 2);
        c.on_ledger_read(Some((read, version(2))), after_quiet);
        assert_eq!(c.budget(after_quiet), (read.saturating_add(Quota::per_s(5, 1)), None));
        // The stale one arriving again is older: ignored.
        c.on_floor(stale, version(1), after_quiet);
        assert_eq!(c.budget(after_quiet).0, read.saturating_add(Quota::per_s(5, 1)));
    }

    #[test]
    fn a_term_that_read_the_ledger_at_its_start_takes_floors_as_they_come() {
        let mut c = core(KnownBugs::default());
        c.on_floor(Quota::per_s(20, 2), version(1), 0);
        assert_eq!(c.budget(60 * S).0, Quota::per_s(25, 3));
        assert!(!c.awaits_ledger_read());
    }

    #[test]
    fn a_report_confirms_no_floor_beyond_what_is_persisted() {
        let mut c = core(KnownBugs::default());
        c.cap_floor_confirmation(Some(version(1)));
        c.on_floor(Quota::per_s(20, 2), version(2), 0);
        assert_eq!(c.floor_to_persist(), Some((Quota::per_s(20, 2), version(2))));
        assert_eq!(c.confirmable_floor_version(), Some(version(1)), "capped until persisted");
        c.cap_floor_confirmation(Some(version(2)));
        assert_eq!((c.floor_to_persist(), c.confirmable_floor_version()), (None, Some(version(2))));
        // A driver that keeps no confirmations: no cap.
        let mut free = core(KnownBugs::default());
        free.on_floor(Quota::per_s(20, 2), version(2), 0);
        assert_eq!((free.floor_to_persist(), free.confirmable_floor_version()), (None, Some(version(2))));
        // The known bug: confirmed though not persisted.
        let mut bug = core(KnownBugs { floor_confirmed_unpersisted: true, ..KnownBugs::default() });
        bug.cap_floor_confirmation(Some(version(1)));
        bug.on_floor(Quota::per_s(20, 2), version(2), 0);
        assert_eq!(bug.confirmable_floor_version(), Some(version(2)));
    }

    #[test]
    fn a_term_cut_off_from_the_ledger_runs_strict_on_the_floor_its_dc_vouches_for() {
        let mut c = core(KnownBugs::default());
        c.await_ledger_read();
        // Its watch delivered an older, larger floor: ignored.
        c.on_floor(Quota::per_s(50, 5), version(1), 0);
        // The DC's confirmations name the floor its predecessor confirmed last.
        c.on_vouched_floor(Quota::per_s(20, 2), version(4), 0);
        assert_eq!(c.budget(60 * S), (Quota::per_s(20, 2), None), "that floor, and no emergency allowance");
        assert!(c.awaits_ledger_read());
    }

    #[test]
    fn with_the_known_bug_an_unread_term_uses_its_watched_floor() {
        let mut c = core(KnownBugs { term_uses_watched_floor: true, ..KnownBugs::default() });
        c.await_ledger_read();
        c.on_floor(Quota::per_s(50, 5), version(1), 0);
        assert_eq!(c.budget(60 * S).0, Quota::per_s(55, 6));
    }
}

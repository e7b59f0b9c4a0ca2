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

use super::{DcManagerCore, DcOutput, Pass};
use crate::quota::Quota;
use crate::wire::LeaseVersion;

impl DcManagerCore {
    /// The term could not read the ledger record directly: use no floor and no emergency
    /// allowance until [`on_ledger_read`](Self::on_ledger_read).
    pub fn await_ledger_read(&mut self) {
        self.ledger_unread = !self.cfg.bugs.term_uses_watched_floor;
    }

    /// Whether the term still waits for its first direct read of the ledger.
    pub fn awaits_ledger_read(&self) -> bool {
        self.ledger_unread
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
    fn with_the_known_bug_an_unread_term_uses_its_watched_floor() {
        let mut c = core(KnownBugs { term_uses_watched_floor: true, ..KnownBugs::default() });
        c.await_ledger_read();
        c.on_floor(Quota::per_s(50, 5), version(1), 0);
        assert_eq!(c.budget(60 * S).0, Quota::per_s(55, 6));
    }
}

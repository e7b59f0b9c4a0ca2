//! How the term follows the coordinator's ledger: each group the watch delivers, and in it each
//! limit's record (its rules, its floor, the newest DC lease addressed to this term).

use super::Manager;
use leasehold_core::subjects;
use leasehold_core::wire::LedgerRecord;
use tracing::{debug, warn};

impl Manager {
    /// A new value of ledger key `key` (at `revision`): each record of the group it holds.
    pub async fn on_ledger_value(&mut self, key: &str, payload: &[u8], revision: u64) {
        if subjects::ledger_group_of_key(key).is_none() {
            // A record of a version that kept one key per limit: nothing reads it.
            return debug!(key, "a ledger key that is not a group; ignored");
        }
        match leasehold_nats::ledger::decode_group(key, payload) {
            Ok(group) => {
                for rec in group.records {
                    self.on_record(rec, revision).await;
                }
            }
            Err(e) => {
                warn!(cause = %e, "ledger group ignored");
                self.status.messages_malformed += 1;
            }
        }
    }

    /// A new value of a limit's ledger record (at `revision` of its group): apply the newest
    /// DC lease addressed to this term.
    pub(super) async fn on_record(&mut self, rec: LedgerRecord, revision: u64) {
        if self.serves(&rec.limit) && !self.recorded.contains(&rec.limit) {
            self.recorded.insert(rec.limit.clone());
        }
        if !self.concerns(&rec) {
            return; // a limit this DC has no part in
        }
        self.remember_record(&rec, revision);
        if !self.fresh() {
            return;
        }
        let limit = rec.limit.clone();
        self.ensure_core(&limit).await;
        let now = self.now_ns();
        let floor = self.cached_floor(&limit);
        let Some(lt) = self.term.as_mut().and_then(|t| t.limits.get_mut(&limit)) else { return };
        self.record_rules.apply(&mut lt.core, &self.settings.manager);
        // Only the floor the coordinator's durable record names (none if it names none), and
        // never one older than the term already uses (nor one before the term read the ledger).
        let out = floor.map(|(f, v)| lt.core.on_floor(f, v, now)).unwrap_or_default();
        self.outbox.push(out);
        let Some(term) = self.term.as_mut() else { return };
        let instance = term.instance.clone();
        let Some(lt) = term.limits.get_mut(&limit) else { return };
        let Some(lease) = rec.leases.iter().filter(|l| l.holder == instance).max_by_key(|l| l.version) else { return };
        match lt.core.on_dc_lease(lease, now) {
            Ok(out) => {
                let m = &self.settings.manager;
                if lease.ttl_ms < m.pod_ttl_ms + 2 * m.renew_interval_ms && !self.short_dc_ttl_warned {
                    self.short_dc_ttl_warned = true;
                    warn!(
                        limit,
                        dc_ttl_ms = lease.ttl_ms,
                        "DC leases shorter than pod_ttl_ms + 2 x renew_interval_ms cut pod leases to fit: \
                         they may run out before a standby continues them, and a manager failover \
                         then costs the DC its share for up to pod_ttl_ms (raise the coordinator's dc_ttl_ms)"
                    );
                }
                lt.last_dc_lease_at_ns = Some(self.clock.now_ns());
                self.status.dc_leases_applied += 1;
                self.outbox.push(out);
            }
            // The watch re-delivers the whole record: an already-applied lease is normal.
            Err(leasehold_core::lease_intake::LeaseRejection::NotNewer { .. }) => {}
            Err(e) => {
                self.status.dc_leases_refused += 1;
                warn!(limit, cause = %e, "DC lease refused");
            }
        }
    }
}

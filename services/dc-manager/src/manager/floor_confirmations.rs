//! The DC's `FloorConfirmations` (key `floors.<dc>` in the DC's own leader bucket): each term
//! writes, by compare-and-set, the floor it is about to confirm to the coordinator before its
//! reports confirm it (`DcManagerCore::cap_floor_confirmation`), so that a successor that takes
//! over while cut off from the ledger runs on a floor the coordinator still reserves
//! (`DcManagerCore::on_vouched_floor`).

use super::Manager;
use leasehold_core::dc_manager::{DcManagerCore, DcOutput};
use leasehold_core::subjects;
use leasehold_core::wire::{decode, encode, ConfirmedFloor, FloorConfirmations, LeaseVersion};
use leasehold_nats::kv::{compare_and_set, read, CasOutcome};
use std::time::Duration;
use tracing::warn;

/// How long a read or write of the DC's confirmations may take (its own JetStream: fast).
const CONFIRMATIONS_TIMEOUT: Duration = Duration::from_millis(500);

/// The confirmations as this term last read or wrote them: the key's revision (`None`: the key
/// does not exist yet) and its value.
pub(crate) type Confirmed = (Option<u64>, FloorConfirmations);

impl Manager {
    fn floors_key(&self) -> String {
        subjects::dc_floors_key(self.dc()).expect("validated")
    }

    /// Read the DC's confirmations now (`None`: could not, or they are unreadable).
    async fn read_confirmations(&mut self) -> Option<Confirmed> {
        let key = self.floors_key();
        let read = tokio::time::timeout(CONFIRMATIONS_TIMEOUT, read(&self.leaders, &key)).await;
        match read {
            Ok(Ok(None)) => Some((None, FloorConfirmations::default())),
            Ok(Ok(Some((revision, bytes)))) => match decode::<FloorConfirmations>(&bytes) {
                Ok(c) => Some((Some(revision), c)),
                Err(e) => {
                    warn!(key, cause = %e, "the DC's floor confirmations are unreadable: no floor is confirmed");
                    None
                }
            },
            _ => None,
        }
    }

    /// A new term takes the DC's confirmations over: it reads them and writes them back unchanged
    /// by compare-and-set on the revision it read, so that a write its predecessor sent before
    /// its term lapsed (on that same revision) can no longer land after this read: the floor this
    /// term may run on is then the newest any term confirmed. `None` if that did not succeed
    /// (twice): the term then vouches for no floor and confirms nothing until a later tick reads
    /// them again.
    pub(super) async fn take_confirmations(&mut self) -> Option<Confirmed> {
        let key = self.floors_key();
        for _ in 0..2 {
            let (revision, current) = self.read_confirmations().await?;
            let write = compare_and_set(&self.leaders, &key, encode(&current).into(), revision);
            match tokio::time::timeout(CONFIRMATIONS_TIMEOUT, write).await {
                Ok(Ok(CasOutcome::Written { revision })) => return Some((Some(revision), current)),
                // Someone wrote since the read (a predecessor's late write): read it again.
                Ok(Ok(CasOutcome::Conflict)) => continue,
                outcome => {
                    warn!(key, ?outcome, "could not take the DC's floor confirmations over");
                    return None;
                }
            }
        }
        None
    }

    /// `limit`'s floor as the DC's confirmations name it (none while unknown).
    fn written_floor(&self, limit: &str) -> Option<ConfirmedFloor> {
        let (_, c) = self.term.as_ref()?.confirmed.as_ref()?;
        c.floors.get(limit).copied()
    }

    /// What `limit`'s reports may confirm: the version written (nothing while unknown).
    pub(super) fn persisted_floor(&self, limit: &str) -> Option<LeaseVersion> {
        self.written_floor(limit).map(|c| c.version)
    }

    /// Before the cores' periodic step: write every floor version a core is about to confirm,
    /// then let the cores confirm it. On a conflict or an unknown outcome, read again next tick
    /// (until then nothing new is confirmed: waste, never excess).
    pub(super) async fn persist_floor_confirmations(&mut self) {
        let Some(term) = self.term.as_ref() else { return };
        if term.confirmed.is_none() {
            let read = self.take_confirmations().await;
            if let Some(t) = self.term.as_mut() {
                t.confirmed = read;
            }
            self.cap_cores();
        }
        let Some(term) = self.term.as_ref() else { return };
        let wanted: Vec<(String, ConfirmedFloor)> = term
            .limits
            .iter()
            .filter_map(|(limit, lt)| {
                lt.core.floor_to_persist().map(|(floor, version)| (limit.clone(), ConfirmedFloor { floor, version }))
            })
            .collect();
        // Most ticks have nothing new to write: copy the confirmations only when one does.
        let Some((revision, current)) = term.confirmed.as_ref().filter(|_| !wanted.is_empty()) else { return };
        let (revision, mut next) = (*revision, current.clone());
        for (limit, taken) in &wanted {
            next.raise(limit, *taken);
        }
        let key = self.floors_key();
        let write = compare_and_set(&self.leaders, &key, encode(&next).into(), revision);
        let written = match tokio::time::timeout(CONFIRMATIONS_TIMEOUT, write).await {
            Ok(Ok(CasOutcome::Written { revision })) => Some((Some(revision), next)),
            outcome => {
                warn!(key, ?outcome, "could not write the DC's floor confirmations: reading them again");
                None
            }
        };
        if let Some(t) = self.term.as_mut() {
            t.confirmed = written;
        }
        self.cap_cores();
    }

    /// Cap every core's confirmations at what is written.
    fn cap_cores(&mut self) {
        let caps: Vec<(String, Option<LeaseVersion>)> = match self.term.as_ref() {
            Some(t) => t.limits.keys().map(|l| (l.clone(), self.persisted_floor(l))).collect(),
            None => return,
        };
        for (limit, cap) in caps {
            if let Some(lt) = self.term.as_mut().and_then(|t| t.limits.get_mut(&limit)) {
                lt.core.cap_floor_confirmation(cap);
            }
        }
    }

    /// A new core of this term: capped at what is written, and, if the term has not read the
    /// ledger yet, waiting for a read, on the floor the DC's confirmations name for the limit if
    /// any: then what it says, else `None`.
    pub(super) fn prepare_core(&self, limit: &str, core: &mut DcManagerCore, now_ns: u64) -> Option<Vec<DcOutput>> {
        core.cap_floor_confirmation(self.persisted_floor(limit));
        if self.term_has_read() {
            return None;
        }
        core.await_ledger_read();
        self.written_floor(limit).map(|c| core.on_vouched_floor(c.floor, c.version, now_ns))
    }
}

//! Drives a [`Leadership`] state machine against its key in JetStream KV: performs the one read
//! or compare-and-set it asks for and feeds the answer back. Every service with standbys uses it.

use crate::kv::{compare_and_set, read, CasOutcome};
use async_nats::jetstream::kv::Store;
use bytes::Bytes;
use leasehold_core::dc_manager::TermRecords;
use leasehold_core::leadership::{KeyState, LeaderRequest, Leadership, LeadershipConfig, Transition, WriteOutcome};

/// What a service's leader key holds and how its answers reach the [`Leadership`]: the holder's
/// id alone ([`HolderId`], the coordinator's), or a DC manager's term record ([`TermRecords`]).
pub trait KeyValue {
    /// The value a write sent at `now_ns` puts in the key.
    fn value(&self, leadership: &Leadership, now_ns: u64) -> Bytes;
    /// A read answered with the key's revision and value (`None`: absent).
    fn on_read(&mut self, leadership: &mut Leadership, entry: Option<(u64, &[u8])>, now_ns: u64) -> Option<Transition>;
    fn on_write(&mut self, leadership: &mut Leadership, outcome: WriteOutcome, now_ns: u64) -> Option<Transition>;
    fn abandon(&mut self, leadership: &mut Leadership, now_ns: u64) -> Option<Transition>;
}

/// A key whose value is its holder's id.
pub struct HolderId;

impl KeyValue for HolderId {
    fn value(&self, leadership: &Leadership, _now_ns: u64) -> Bytes {
        Bytes::from(leadership.id().to_owned())
    }

    fn on_read(&mut self, leadership: &mut Leadership, entry: Option<(u64, &[u8])>, now_ns: u64) -> Option<Transition> {
        let state = match entry {
            None => KeyState::Absent,
            Some((revision, value)) => KeyState::Held { revision, holder: String::from_utf8_lossy(value).into_owned() },
        };
        leadership.on_read(state, now_ns)
    }

    fn on_write(&mut self, leadership: &mut Leadership, outcome: WriteOutcome, now_ns: u64) -> Option<Transition> {
        leadership.on_write(outcome, now_ns)
    }

    fn abandon(&mut self, leadership: &mut Leadership, now_ns: u64) -> Option<Transition> {
        leadership.abandon(now_ns)
    }
}

impl KeyValue for TermRecords {
    fn value(&self, leadership: &Leadership, now_ns: u64) -> Bytes {
        Bytes::from(TermRecords::value(self, leadership.id(), now_ns))
    }

    fn on_read(&mut self, leadership: &mut Leadership, entry: Option<(u64, &[u8])>, now_ns: u64) -> Option<Transition> {
        TermRecords::on_read(self, leadership, entry, now_ns)
    }

    fn on_write(&mut self, leadership: &mut Leadership, outcome: WriteOutcome, now_ns: u64) -> Option<Transition> {
        TermRecords::on_write(self, leadership, outcome, now_ns)
    }

    fn abandon(&mut self, leadership: &mut Leadership, now_ns: u64) -> Option<Transition> {
        TermRecords::abandon(self, leadership, now_ns)
    }
}

/// The leadership settings of a service whose leader key has a `ttl_ms` TTL: a follower starts
/// its wait again after no answer for longer than the TTL plus one request's timeout
/// ([`crate::connect::CONTROL_TIMEOUT`]), so one lost read never does.
pub fn config(ttl_ms: u64) -> LeadershipConfig {
    let timeout_ms = crate::connect::CONTROL_TIMEOUT.as_millis() as u64;
    LeadershipConfig { sight_gap_ms: ttl_ms.saturating_add(timeout_ms), ..LeadershipConfig::new(ttl_ms) }
}

/// One step: ask the state machine what to do at `now()`, do it, feed back the answer (timed by
/// `now()` again when it arrives). Returns the transition, if the term began or ended.
/// `reached_ns` becomes `now()` whenever the key answered (a read, or a write whose outcome is
/// known): how fresh this replica's view is, for `/readyz`.
pub async fn step(
    leadership: &mut Leadership,
    key_value: &mut impl KeyValue,
    store: &Store,
    key: &str,
    now: impl Fn() -> u64,
    reached_ns: &mut Option<u64>,
) -> Option<Transition> {
    match leadership.poll(now())? {
        LeaderRequest::Read => match read(store, key).await {
            Ok(entry) => {
                *reached_ns = Some(now());
                key_value.on_read(leadership, entry.as_ref().map(|(r, v)| (*r, v.as_ref())), now())
            }
            Err(_) => key_value.abandon(leadership, now()),
        },
        LeaderRequest::Write { expected_revision } => {
            let value = key_value.value(leadership, now());
            let outcome = match compare_and_set(store, key, value, expected_revision).await {
                Ok(CasOutcome::Written { revision }) => WriteOutcome::Written { revision },
                Ok(CasOutcome::Conflict) => WriteOutcome::Conflict,
                Ok(CasOutcome::Unknown) | Err(_) => WriteOutcome::Unknown,
            };
            if outcome != WriteOutcome::Unknown {
                *reached_ns = Some(now());
            }
            key_value.on_write(leadership, outcome, now())
        }
    }
}

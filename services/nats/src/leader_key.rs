//! Drives a [`Leadership`] state machine against its key in JetStream KV: performs the one read
//! or compare-and-set it asks for and feeds the answer back. Every service with standbys uses it.

use crate::kv::{compare_and_set, read, CasOutcome};
use async_nats::jetstream::kv::Store;
use bytes::Bytes;
use leasehold_shared::leadership::{KeyState, LeaderRequest, Leadership, LeadershipConfig, Transition, WriteOutcome};

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
    store: &Store,
    key: &str,
    now: impl Fn() -> u64,
    reached_ns: &mut Option<u64>,
) -> Option<Transition> {
    match leadership.poll(now())? {
        LeaderRequest::Read => match read(store, key).await {
            Ok(entry) => {
                *reached_ns = Some(now());
                let state = match entry {
                    None => KeyState::Absent,
                    Some((revision, value)) => {
                        KeyState::Held { revision, holder: String::from_utf8_lossy(&value).into_owned() }
                    }
                };
                leadership.on_read(state, now())
            }
            Err(_) => leadership.abandon(now()),
        },
        LeaderRequest::Write { expected_revision } => {
            let value = Bytes::from(leadership.id().to_owned());
            let outcome = match compare_and_set(store, key, value, expected_revision).await {
                Ok(CasOutcome::Written { revision }) => WriteOutcome::Written { revision },
                Ok(CasOutcome::Conflict) => WriteOutcome::Conflict,
                Ok(CasOutcome::Unknown) | Err(_) => WriteOutcome::Unknown,
            };
            if outcome != WriteOutcome::Unknown {
                *reached_ns = Some(now());
            }
            leadership.on_write(outcome, now())
        }
    }
}

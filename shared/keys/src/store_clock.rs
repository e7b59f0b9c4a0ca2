//! Where a new owner places the admissions it replays: by when the stream stored them, converted
//! to its own clock, never by the clock of the owner that made them.
//!
//! Each admission carries its owner's wall-clock time, and owners' clocks disagree: a new owner
//! whose clock is Δ ahead of the previous owner's would see replayed admissions leave the window
//! Δ early (up to twice the limit in one window). The stream's server, though, stamps every
//! message it stores. Before replaying a shard, the new owner appends a *marker* to the shard's
//! subject and reads its own clock right after the acknowledgement (`local_after_ms`); the
//! marker was stored (at `marker_stored_ns`, server clock) before that reading. An admission
//! happened before the batch that carries it was stored (`stored_ns`), so on the new owner's
//! clock it happened no later than `local_after_ms − (marker_stored_ns − stored_ns)`. Placing it
//! there ([`StoreClock::local_ms`], rounded up) is never earlier than the truth, whatever the
//! previous owner's clock said: the error is waste (the flush interval plus a round trip, only
//! after a hand-over), never excess.
//!
//! Assumption: the stamps of one shard's batches and of its marker come from clocks that agree
//! (one stream leader, or leaders whose wall clocks agree within the bound the deployment keeps)
//! and do not step forward between the batch and the marker. A difference of `D` between them can
//! let admissions leave the window `D` early; nothing else about clocks matters.

/// The stream's clock, converted to this owner's (milliseconds since the epoch on its clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreClock {
    marker_stored_ns: i128,
    local_after_ms: u64,
}

const NS_PER_MS: i128 = 1_000_000;

impl StoreClock {
    /// `marker_stored_ns`: the marker's store time (server clock, ns since the epoch);
    /// `local_after_ms`: this owner's clock read after the marker's acknowledgement arrived.
    pub fn new(marker_stored_ns: i128, local_after_ms: u64) -> Self {
        StoreClock { marker_stored_ns, local_after_ms }
    }

    /// A message stored at `stored_ns` (server clock), on this owner's clock: no earlier than
    /// any instant before the store, on this owner's clock. The reading `local_after_ms` is a
    /// floor of the owner's clock, hence the extra millisecond; the result is rounded up.
    ///
    /// Everything replayed was stored before the marker (by stream sequence), so it happened
    /// before the owner's reading: a stamp later than the marker's (a stream leader whose clock
    /// is behind, a clock stepped back) is placed at the reading, not after it.
    pub fn local_ms(&self, stored_ns: i128) -> u64 {
        let before_marker_ns = (self.marker_stored_ns - stored_ns).max(0);
        let upper_ns = (self.local_after_ms as i128 + 1) * NS_PER_MS - before_marker_ns;
        let ms = upper_ns.div_euclid(NS_PER_MS) + i128::from(upper_ns.rem_euclid(NS_PER_MS) != 0);
        ms.clamp(0, u64::MAX as i128) as u64
    }

    /// How far ahead (negative: behind) the clock of the owner that wrote `at_ms` into a batch
    /// stored at `stored_ns` appears to be, compared with this owner's: a lower bound of the true
    /// offset, short by at most the time the admission waited to be stored and a round trip.
    pub fn apparent_offset_ms(&self, at_ms: u64, stored_ns: i128) -> i64 {
        (at_ms as i128 - self.local_ms(stored_ns) as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_batch_stored_just_before_the_marker_lands_just_after_the_owners_reading() {
        // The server's clock says nothing about ours: here it is 10^6 s behind.
        let (marker_ns, ours_ms) = (764_457_200_000_500_000, 1_764_457_200_000);
        let clock = StoreClock::new(marker_ns, ours_ms);
        // Stored 3.2 ms before the marker.
        assert_eq!(clock.local_ms(marker_ns - 3_200_000), ours_ms + 1 - 3);
        assert_eq!(clock.local_ms(marker_ns), ours_ms + 1);
        // Written by an owner whose clock said 5 s earlier: it appears 5 s behind.
        assert_eq!(clock.apparent_offset_ms(ours_ms + 1 - 5_000, marker_ns), -5_000);
    }

    #[test]
    fn a_batch_stamped_after_the_marker_is_placed_no_later_than_the_owners_reading() {
        // A stream leader change to a server whose clock is 30 s behind, or a clock stepped back:
        // the batch (stored before the marker, by sequence) carries a later stamp. Everything
        // before the marker happened before the owner's reading, so it lands there at the latest
        // (a later placement would drag the owner's clock forward for every key).
        let (marker_ns, ours_ms) = (1_764_457_200_000_000_000, 1_764_457_200_000);
        let clock = StoreClock::new(marker_ns, ours_ms);
        assert_eq!(clock.local_ms(marker_ns + 30_000_000_000), ours_ms + 1);
    }

    proptest! {
        /// True time `t` (ns), one server clock, an owner's clock: an admission at `t_a`, its batch
        /// stored `store_delay` later, the marker stored after it, its ack back `ack_delay` after
        /// that. The placement is never before the admission on the owner's clock, and late by at
        /// most the two delays plus rounding.
        #[test]
        fn a_placed_admission_is_never_earlier_than_it_happened_on_the_owners_clock(
            t_a in 0_i128..1_000_000_000_000,
            store_delay in prop_oneof![Just(0_i128), 0_i128..1_000_000, 0_i128..2_000_000_000],
            marker_after in prop_oneof![Just(0_i128), 0_i128..1_000_000, 0_i128..100_000_000_000],
            ack_delay in prop_oneof![Just(0_i128), 0_i128..1_000_000, 0_i128..2_000_000_000],
            server_offset in -10_000_000_000_000_i128..10_000_000_000_000,
            owner_offset in 0_i128..10_000_000_000_000_000,
        ) {
            let stored = t_a + store_delay;
            let marker = stored + marker_after;
            let ack_seen = marker + ack_delay;
            let local_after_ms = ((ack_seen + owner_offset) / NS_PER_MS) as u64;
            let clock = StoreClock::new(marker + server_offset, local_after_ms);
            let placed_ns = clock.local_ms(stored + server_offset) as i128 * NS_PER_MS;
            let truth_ns = t_a + owner_offset;
            prop_assert!(placed_ns >= truth_ns, "placed {placed_ns} before {truth_ns}");
            prop_assert!(placed_ns <= truth_ns + store_delay + ack_delay + 2 * NS_PER_MS);
        }
    }
}

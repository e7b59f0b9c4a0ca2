//! Percentiles, one definition for every tool (the simulator's summary and the lab's benchmarks):
//! the **nearest rank**: the `q` quantile of `n` samples is the smallest recorded value with at
//! least `⌈q·n⌉` samples (at least one) at or below it. Kept in an [`hdrhistogram`].
//!
//! Values are whole units that the caller chooses and names (`latency_us`, `rebalance_ms`): scale
//! a float to an integer unit before recording it. Every value below 2^18 (262 144) units is kept
//! exactly; a larger one is reported as the highest value of its bucket, within 0.001 %.

use hdrhistogram::Histogram;

/// Decimal digits kept exactly: 5, hdrhistogram's most (single-unit resolution up to 2^18).
const SIGNIFICANT_DIGITS: u8 = 5;

/// Recorded samples in one caller-named unit.
#[derive(Clone, Debug)]
pub struct Percentiles {
    histogram: Histogram<u64>,
}

impl Default for Percentiles {
    fn default() -> Self {
        Percentiles::new()
    }
}

impl Percentiles {
    pub fn new() -> Self {
        // An auto-resizing histogram: no highest value to guess.
        let histogram =
            Histogram::new(SIGNIFICANT_DIGITS).expect("5 significant digits is within hdrhistogram's range");
        Percentiles { histogram }
    }

    pub fn record(&mut self, value: u64) {
        // The histogram grows to fit (`saturating_record` would clamp to its current top instead);
        // only a value beyond the largest it can ever track (about 2^62) is clamped.
        if self.histogram.record(value).is_err() {
            self.histogram.saturating_record(value);
        }
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The nearest-rank `quantile` (within 0..=1); `None` when nothing was recorded.
    pub fn at(&self, quantile: f64) -> Option<u64> {
        (!self.histogram.is_empty()).then(|| self.histogram.value_at_quantile(quantile))
    }

    /// The largest recorded value; `None` when nothing was recorded.
    pub fn max(&self) -> Option<u64> {
        (!self.histogram.is_empty()).then(|| self.histogram.max())
    }
}

impl FromIterator<u64> for Percentiles {
    fn from_iter<I: IntoIterator<Item = u64>>(values: I) -> Self {
        let mut p = Percentiles::new();
        values.into_iter().for_each(|v| p.record(v));
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition written out on a sorted slice, as the independent oracle.
    fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    #[test]
    fn nearest_rank_exactly_for_values_below_the_exact_range() {
        let values: Vec<u64> = (0..1_000).map(|i| (i * 7_919) % 262_143).collect();
        let mut sorted = values.clone();
        sorted.sort_unstable();
        let p: Percentiles = values.into_iter().collect();
        assert_eq!(p.count(), 1_000);
        for q in [0.0, 0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(p.at(q), Some(nearest_rank(&sorted, q)), "q = {q}");
        }
        assert_eq!(p.max(), sorted.last().copied());
    }

    #[test]
    fn small_samples_follow_the_rank_not_interpolation() {
        let p: Percentiles = [10, 20, 30, 40].into_iter().collect();
        assert_eq!(p.at(0.5), Some(20), "⌈0.5·4⌉ = 2nd value");
        assert_eq!(p.at(0.51), Some(30));
        assert_eq!(p.at(0.99), Some(40));
    }

    #[test]
    fn large_values_stay_within_the_stated_precision() {
        let p: Percentiles = [2_000_000, 3_000_000, 5_000_000_000].into_iter().collect();
        let p50 = p.at(0.5).unwrap();
        assert!((3_000_000..=3_000_030).contains(&p50), "⌈0.5·3⌉ = 2nd value, within 0.001 %: {p50}");
        let max = p.max().unwrap();
        assert!((5_000_000_000..=5_000_050_000).contains(&max), "{max}");
    }

    #[test]
    fn nothing_recorded_has_no_percentiles() {
        let p = Percentiles::new();
        assert_eq!((p.at(0.5), p.max(), p.count()), (None, None, 0));
    }
}

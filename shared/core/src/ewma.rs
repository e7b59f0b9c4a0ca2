//! Demand smoothing: an exponentially weighted moving average.
//!
//! `α` applies per *sample*: one demand report, or the `periods` reports a quiet limit's report
//! stands for (`shared/core/src/quiet_reports.rs`, [`Ewma::update_times`]). With the default report
//! period of 250 ms and α = 0.3, a step in demand is 90% absorbed after ⌈ln 0.1 / ln 0.7⌉ = 7
//! samples ≈ 1.75 s.

/// An exponentially weighted moving average of non-negative samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Ewma {
    alpha: f64,
    value: Option<f64>,
}

/// Default `α`.
pub const DEFAULT_ALPHA: f64 = 0.3;

impl Ewma {
    /// `alpha` is clamped into (0, 1].
    pub fn new(alpha: f64) -> Self {
        let alpha = if alpha.is_finite() { alpha.clamp(1e-6, 1.0) } else { DEFAULT_ALPHA };
        Ewma { alpha, value: None }
    }

    /// Feed one sample; the first sample initialises the average.
    pub fn update(&mut self, sample: f64) -> f64 {
        let sample = if sample.is_finite() { sample.max(0.0) } else { 0.0 };
        let next = match self.value {
            None => sample,
            Some(v) => v + self.alpha * (sample - v),
        };
        self.value = Some(next);
        next
    }

    /// Feed a sample that stands for `times` samples of the same value (at least one): as
    /// `times` calls of [`Ewma::update`], in one step.
    pub fn update_times(&mut self, sample: f64, times: u64) -> f64 {
        if times <= 1 || self.value.is_none() {
            return self.update(sample);
        }
        let sample = if sample.is_finite() { sample.max(0.0) } else { 0.0 };
        let v = self.value.unwrap_or(sample);
        let kept = (1.0 - self.alpha).powi(times.min(i32::MAX as u64) as i32);
        let next = sample + kept * (v - sample);
        self.value = Some(next);
        next
    }

    /// The average (0 before the first sample).
    pub fn value(&self) -> f64 {
        self.value.unwrap_or(0.0)
    }

    /// Its `α`, as clamped.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }
}

impl Default for Ewma {
    fn default() -> Self {
        Ewma::new(DEFAULT_ALPHA)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_response_matches_alpha() {
        let mut e = Ewma::new(0.3);
        e.update(0.0);
        let mut n = 0;
        while e.update(100.0) < 90.0 {
            n += 1;
        }
        assert_eq!(n + 1, 7);
    }

    #[test]
    fn a_sample_standing_for_four_moves_the_average_as_four_samples_do() {
        let (mut once, mut four) = (Ewma::new(0.3), Ewma::new(0.3));
        once.update(0.0);
        four.update(0.0);
        for _ in 0..4 {
            four.update(100.0);
        }
        assert!((once.update_times(100.0, 4) - four.value()).abs() < 1e-9);
        assert_eq!(Ewma::new(0.3).update_times(40.0, 4), 40.0, "the first sample initialises");
        let mut one = Ewma::new(0.3);
        one.update(10.0);
        let mut same = one.clone();
        assert_eq!(one.update_times(50.0, 1), same.update(50.0), "one is exactly update");
        assert!(one.update_times(f64::NAN, 3).is_finite());
    }

    #[test]
    fn garbage_samples_do_not_poison_the_average() {
        let mut e = Ewma::new(0.5);
        e.update(10.0);
        e.update(f64::NAN);
        e.update(-50.0);
        assert!(e.value().is_finite() && e.value() >= 0.0);
    }
}

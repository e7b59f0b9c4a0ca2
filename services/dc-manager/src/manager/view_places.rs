//! Per pod, where each item of its last report batch found its holder's view in its limit's core
//! ([`DcManagerCore::on_pod_report_at`](leasehold_core::dc_manager::DcManagerCore::on_pod_report_at)),
//! by the item's position in the batch: a pod sends its limits in the same order each time, so
//! the place found last time is where to look first. A place is only a hint (a wrong one costs the
//! hashed lookup it spares), so nothing here needs to be exact: a pod not heard from for a minute
//! is forgotten.

use leasehold_core::sorted_map::PlaceHint;

/// A pod unheard this long loses its places (so pods that came and went don't keep memory).
const FORGET_AFTER_NS: u64 = 60_000_000_000;

#[derive(Default)]
struct PodPlaces {
    places: Vec<PlaceHint>,
    last_used_ns: u64,
}

#[derive(Default)]
pub(crate) struct ViewPlaces {
    by_pod: std::collections::HashMap<String, PodPlaces, foldhash::fast::FixedState>,
    /// When pods unheard for [`FORGET_AFTER_NS`] were last forgotten.
    swept_ns: u64,
}

impl ViewPlaces {
    /// The places of `pod`'s last batch, one per item of a batch of `items` (nowhere for items
    /// past the last batch's): give them back with [`put`](Self::put).
    pub(crate) fn take(&mut self, pod: &str, items: usize) -> Vec<PlaceHint> {
        let mut places = self.by_pod.get_mut(pod).map(|p| std::mem::take(&mut p.places)).unwrap_or_default();
        places.resize(items, PlaceHint::NOWHERE);
        places
    }

    /// `pod`'s places as its batch left them, at `now_ns`.
    pub(crate) fn put(&mut self, pod: &str, places: Vec<PlaceHint>, now_ns: u64) {
        match self.by_pod.get_mut(pod) {
            Some(p) => *p = PodPlaces { places, last_used_ns: now_ns },
            None => {
                self.by_pod.insert(pod.to_owned(), PodPlaces { places, last_used_ns: now_ns });
            }
        }
    }

    /// Forget pods unheard for a minute (looked at once a minute).
    pub(crate) fn forget_unheard(&mut self, now_ns: u64) {
        if now_ns.saturating_sub(self.swept_ns) < FORGET_AFTER_NS {
            return;
        }
        self.swept_ns = now_ns;
        self.by_pod.retain(|_, p| now_ns.saturating_sub(p.last_used_ns) < FORGET_AFTER_NS);
    }

    #[cfg(test)]
    fn pods(&self) -> usize {
        self.by_pod.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_places_come_back_as_its_batch_left_them_and_go_after_a_minute_unheard() {
        let mut v = ViewPlaces::default();
        let at = |places: Vec<PlaceHint>| places.iter().map(|p| p.0).collect::<Vec<_>>();
        let nowhere = PlaceHint::NOWHERE.0;
        assert_eq!(at(v.take("p1", 2)), [nowhere; 2], "a pod never heard: nowhere");
        v.put("p1", vec![PlaceHint(4), PlaceHint(7)], 1_000);
        assert_eq!(at(v.take("p1", 3)), [4, 7, nowhere], "a longer batch");
        v.put("p1", vec![PlaceHint(5)], 2_000);
        assert_eq!(at(v.take("p1", 1)), [5], "a shorter one");
        v.put("p1", vec![PlaceHint(5)], 2_000);
        v.put("p2", vec![PlaceHint(1)], FORGET_AFTER_NS + 5_000);
        v.forget_unheard(FORGET_AFTER_NS + 1_999);
        assert_eq!(v.pods(), 2, "p1 heard 1 ns less than a minute ago");
        v.forget_unheard(FORGET_AFTER_NS + 2_000);
        assert_eq!(v.pods(), 2, "looked at once a minute");
        v.forget_unheard(2 * FORGET_AFTER_NS + 1_999);
        assert_eq!(v.pods(), 1, "p1 unheard for a minute is gone");
        assert_eq!(at(v.take("p1", 1)), [nowhere]);
    }
}

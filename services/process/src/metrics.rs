//! `GET /metrics` for every service: a [`prometheus_client`] registry, encoded in the Prometheus
//! text format 0.0.4 (`text/plain; version=0.0.4`), which every Prometheus-compatible scraper
//! reads. Counters carry their `_total` in `# HELP`/`# TYPE` as in the samples, and there is no
//! OpenMetrics `# EOF` line.
//!
//! Services whose numbers live in a status snapshot (a `watch` channel) read it at scrape time
//! through [`collector`]; counted events use the crate's own `Counter`s, registered as usual.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    prometheus_text, DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::Arc;

/// No labels (a series of its own).
pub const NO_LABELS: [(&str, &str); 0] = [];

/// The series of one scrape, written from a snapshot of a service's state.
pub struct Scrape<'a> {
    encoder: DescriptorEncoder<'a>,
}

impl Scrape<'_> {
    /// A gauge with one series per row.
    pub fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue + Clone>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, V)>,
    ) -> fmt::Result {
        self.family(name, help, MetricType::Gauge, rows, |v| ConstGauge::new(v))
    }

    pub fn gauge<L: EncodeLabelSet, V: EncodeGaugeValue + Clone>(
        &mut self,
        name: &str,
        help: &str,
        labels: L,
        value: V,
    ) -> fmt::Result {
        self.gauges(name, help, [(labels, value)])
    }

    /// A counter, named as exposed (`…_total`: the encoder adds the suffix itself, so it is
    /// taken off here).
    pub fn counter<L: EncodeLabelSet, V: EncodeCounterValue + Clone>(
        &mut self,
        name: &str,
        help: &str,
        labels: L,
        value: V,
    ) -> fmt::Result {
        self.counters(name, help, [(labels, value)])
    }

    /// A counter with one series per row (named as [`Scrape::counter`]).
    pub fn counters<L: EncodeLabelSet, V: EncodeCounterValue + Clone>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, V)>,
    ) -> fmt::Result {
        debug_assert!(name.ends_with("_total"), "counter {name} must end with _total");
        let base = name.strip_suffix("_total").unwrap_or(name);
        self.family(base, help, MetricType::Counter, rows, |v| ConstCounter::new(v))
    }

    fn family<L: EncodeLabelSet, V, M: EncodeMetric>(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        rows: impl IntoIterator<Item = (L, V)>,
        metric: impl Fn(V) -> M,
    ) -> fmt::Result {
        let mut family = self.encoder.encode_descriptor(name, help, None, kind)?;
        for (labels, value) in rows {
            metric(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

struct SnapshotCollector<F>(F);

impl<F> fmt::Debug for SnapshotCollector<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SnapshotCollector")
    }
}

impl<F: Fn(&mut Scrape) -> fmt::Result + Send + Sync + 'static> Collector for SnapshotCollector<F> {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        (self.0)(&mut Scrape { encoder })
    }
}

/// A collector that writes its series at every scrape (register it with
/// `Registry::register_collector`).
pub fn collector(write: impl Fn(&mut Scrape) -> fmt::Result + Send + Sync + 'static) -> Box<dyn Collector> {
    Box::new(SnapshotCollector(write))
}

/// A registry holding only `write`'s series.
pub fn registry(write: impl Fn(&mut Scrape) -> fmt::Result + Send + Sync + 'static) -> Registry {
    let mut r = Registry::default();
    r.register_collector(collector(write));
    r
}

/// The registry in the Prometheus text format.
pub fn render(registry: &Registry) -> Result<String, fmt::Error> {
    let mut body = String::new();
    prometheus_text::encode(&mut body, registry)?;
    Ok(body)
}

/// The `GET /metrics` route serving `registry`.
pub fn endpoint<S: Clone + Send + Sync + 'static>(registry: Registry) -> MethodRouter<S> {
    let registry = Arc::new(registry);
    get(move || {
        let registry = Arc::clone(&registry);
        async move { respond(&registry) }
    })
}

fn respond(registry: &Registry) -> Response {
    match render(registry) {
        Ok(body) => ([(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)], body).into_response(),
        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_come_out_under_the_names_given_with_labels_escaped() {
        let r = registry(|m| {
            m.gauge("x_rate_per_s", "A rate.", [("limit", "a\"b")], 2.5)?;
            m.gauges("x_leases", "Leases.", [([("limit", "a")], 1u64), ([("limit", "b")], 2)])?;
            m.counter("x_events_total", "Events.", NO_LABELS, 7u64)
        });
        let body = render(&r).unwrap();
        assert_eq!(
            body,
            "# HELP x_rate_per_s A rate.\n# TYPE x_rate_per_s gauge\nx_rate_per_s{limit=\"a\\\"b\"} 2.5\n\
             # HELP x_leases Leases.\n# TYPE x_leases gauge\nx_leases{limit=\"a\"} 1\nx_leases{limit=\"b\"} 2\n\
             # HELP x_events_total Events.\n# TYPE x_events_total counter\nx_events_total 7\n"
        );
    }
}

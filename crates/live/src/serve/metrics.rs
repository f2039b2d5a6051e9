//! The router's own `/metrics`, written by `prometheus-client` (names, types, label
//! escaping and the text format are its job): per endpoint, the counts the router keeps
//! under its lock, read once per scrape; the decision-time histogram, observed as
//! decisions happen.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;

use super::kv_index::KvCounts;
use prometheus_client::registry::Registry;

use super::scaling::ScalerFigures;
use super::state::{State, Upstream};

/// Upper bounds of the decision-time buckets, seconds: 10 µs to 10 ms.
const DECISION_BUCKETS_S: [f64; 10] = [
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
];

/// The decision-time histogram, shared by every request task.
pub(super) fn decision_histogram() -> Histogram {
    Histogram::new(DECISION_BUCKETS_S)
}

/// A per-endpoint metric: its name (counters without `_total`, which the encoder adds),
/// help text, whether it is a counter, and its value for one endpoint.
type PerEndpoint = (&'static str, &'static str, bool, fn(&Upstream) -> u64);

const PER_ENDPOINT: [PerEndpoint; 7] = [
    (
        "routerlab_requests",
        "requests proxied to the endpoint",
        true,
        |u| u.requests,
    ),
    (
        "routerlab_errors",
        "failed or refused upstream requests",
        true,
        |u| u.errors,
    ),
    (
        "routerlab_retries",
        "requests moved to another endpoint after a failure",
        true,
        |u| u.retries,
    ),
    (
        "routerlab_unavailable",
        "decisions in which the detector flagged the endpoint",
        true,
        |u| u.unavailable,
    ),
    (
        "routerlab_inflight_requests",
        "requests routed there and not finished",
        false,
        |u| u.inflight,
    ),
    (
        "routerlab_endpoint_up",
        "1 while the endpoint is in the fleet",
        false,
        |u| u64::from(u.index.is_some()),
    ),
    (
        "routerlab_lora_running_adapters",
        "adapters the endpoint's running requests use, as its last scrape said",
        false,
        |u| {
            u.scraped
                .lora
                .as_ref()
                .map_or(0, |l| l.running.len() as u64)
        },
    ),
];

/// The counts of one moment, as a collector the registry encodes.
#[derive(Debug)]
struct Counts {
    /// Per endpoint: its name and the value of each of [`PER_ENDPOINT`].
    endpoints: Vec<(String, [u64; PER_ENDPOINT.len()])>,
    matcher: String,
    plugin_errors: u64,
    /// With the plugins in a host: its crashes, missed deadlines and restarts.
    host: Option<[u64; 3]>,
    /// With `--kv-events`: each followed endpoint's counts.
    kv: Vec<(String, KvCounts)>,
}

/// A KV-event counter: its name (without `_total`), help, and its value.
type KvCounter = (&'static str, &'static str, fn(&KvCounts) -> u64);

/// The KV-event counters, per followed endpoint.
const KV_COUNTERS: [KvCounter; 6] = [
    (
        "routerlab_kv_event_batches",
        "KV event batches applied to the endpoint's index",
        |c| c.batches,
    ),
    (
        "routerlab_kv_event_gaps",
        "gaps in the endpoint's KV event sequence numbers",
        |c| c.gaps,
    ),
    (
        "routerlab_kv_event_resyncs",
        "gaps recovered through the endpoint's replay socket",
        |c| c.resynced,
    ),
    (
        "routerlab_kv_event_index_resets",
        "times the endpoint's index started over (a gap not recovered, a restart)",
        |c| c.lost,
    ),
    (
        "routerlab_kv_event_undecodable",
        "KV event batches that did not decode",
        |c| c.undecodable,
    ),
    (
        "routerlab_kv_event_reconnects",
        "times the connection to the endpoint's publisher was made afresh (an oversized message ends it)",
        |c| c.reconnects,
    ),
];

impl Collector for Counts {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (i, (name, help, counter, _)) in PER_ENDPOINT.iter().enumerate() {
            let kind = if *counter {
                ConstCounter::new(0u64).metric_type()
            } else {
                ConstGauge::new(0i64).metric_type()
            };
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            for (endpoint, values) in &self.endpoints {
                let labels = [("endpoint", endpoint.as_str())];
                let metric = family.encode_family(&labels)?;
                if *counter {
                    ConstCounter::new(values[i]).encode(metric)?;
                } else {
                    ConstGauge::new(i64::try_from(values[i]).unwrap_or(i64::MAX)).encode(metric)?;
                }
            }
        }
        if !self.kv.is_empty() {
            for (name, help, value) in KV_COUNTERS {
                let kind = ConstCounter::new(0u64).metric_type();
                let mut family = encoder.encode_descriptor(name, help, None, kind)?;
                for (endpoint, counts) in &self.kv {
                    let labels = [("endpoint", endpoint.as_str())];
                    let metric = family.encode_family(&labels)?;
                    ConstCounter::new(value(counts)).encode(metric)?;
                }
            }
        }
        let errors = ConstCounter::new(self.plugin_errors);
        let mut family = encoder.encode_descriptor(
            "routerlab_plugin_errors",
            "plugin calls that failed",
            None,
            errors.metric_type(),
        )?;
        errors.encode(family.encode_family(&[("matcher", self.matcher.as_str())])?)?;
        if let Some(host) = self.host {
            for (value, (name, help)) in host.into_iter().zip([
                (
                    "routerlab_plugin_host_crashes",
                    "plugin hosts that died (or broke the channel) during a call",
                ),
                (
                    "routerlab_plugin_host_missed_deadlines",
                    "plugin hosts killed for not answering a call within --plugin-timeout-ms",
                ),
                (
                    "routerlab_plugin_host_restarts",
                    "plugin hosts started after the first",
                ),
            ]) {
                let counter = ConstCounter::new(value);
                let family = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
                counter.encode(family)?;
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for ScalerFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScalerFigures")
            .field("name", &self.name)
            .field("desired", &self.desired)
            .field("ticks", &self.ticks)
            .finish()
    }
}

impl Collector for ScalerFigures {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let labels = [("scaler", self.name.as_str())];
        // Before the first tick the scaler has wanted nothing yet: no sample.
        if let Some(desired) = self.desired {
            let gauge = ConstGauge::new(i64::from(desired));
            let mut family = encoder.encode_descriptor(
                "routerlab_scaler_desired_endpoints",
                "the endpoints the scaler wants, as of its last tick",
                None,
                gauge.metric_type(),
            )?;
            gauge.encode(family.encode_family(&labels)?)?;
        }
        let ticks = ConstCounter::new(self.ticks);
        let mut family = encoder.encode_descriptor(
            "routerlab_scaler_ticks",
            "times the scaler was asked",
            None,
            ticks.metric_type(),
        )?;
        ticks.encode(family.encode_family(&labels)?)?;
        Ok(())
    }
}

/// The text of `/metrics`: `state`'s counts, `decisions`, the scaler's figures and, when
/// the replica shares its state, how many peers it shares with.
pub(super) fn text(
    state: &State,
    matcher: &str,
    decisions: &Histogram,
    scaler: Option<ScalerFigures>,
    sync_peers: Option<u64>,
) -> String {
    let counts = Counts {
        endpoints: state
            .upstreams
            .iter()
            .map(|u| {
                (
                    u.name.clone(),
                    PER_ENDPOINT.map(|(_, _, _, value)| value(u)),
                )
            })
            .collect(),
        matcher: matcher.to_owned(),
        plugin_errors: state.plugin_errors + state.late_failures(),
        host: state
            .host_counts()
            .map(|h| [h.crashes, h.missed_deadlines, h.restarts]),
        kv: state.kv_counts(),
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(counts));
    if let Some(scaler) = scaler {
        registry.register_collector(Box::new(scaler));
    }
    if let Some(peers) = sync_peers {
        let gauge: prometheus_client::metrics::gauge::Gauge = Default::default();
        gauge.set(i64::try_from(peers).unwrap_or(i64::MAX));
        registry.register(
            "routerlab_sync_peers",
            "the other router replicas this one shares its state with",
            gauge,
        );
    }
    registry.register(
        "routerlab_decision_seconds",
        "time the detector and matcher took",
        decisions.clone(),
    );
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::FirstAvailable;
    use routerlab_host::{EndpointTable, in_process};
    use routerlab_route::{Router, WhenUnavailable};

    use super::*;
    use crate::serve::health::HealthRule;

    #[test]
    fn every_series_is_written_and_labels_are_escaped() {
        let matcher = in_process::matcher::<FirstAvailable>("first", "").unwrap();
        let table = EndpointTable::new(["a:1", "b:2"]);
        let Ok(router) = Router::new(matcher, None, table, WhenUnavailable::Reject) else {
            panic!("a router")
        };
        let mut state = State::new(
            crate::serve::Plugins::in_process(router, std::time::Duration::from_secs(10))
                .expect("a plugins thread"),
            None,
            16,
            HealthRule {
                fails: 1,
                passes: 1,
            },
        );
        state.upstreams[1].requests = 7;
        state.plugin_errors = 2;
        let decisions = decision_histogram();
        decisions.observe(20e-6);
        decisions.observe(1.0);
        let scaler = ScalerFigures {
            name: "hpa".into(),
            desired: Some(3),
            ticks: 2,
        };
        let text = text(
            &state,
            "/lib/my \"odd\"\\policy.so#p",
            &decisions,
            Some(scaler),
            Some(1),
        );
        for line in [
            "routerlab_requests_total{endpoint=\"b:2\"} 7",
            "routerlab_requests_total{endpoint=\"a:1\"} 0",
            "routerlab_endpoint_up{endpoint=\"a:1\"} 1",
            "routerlab_inflight_requests{endpoint=\"b:2\"} 0",
            "routerlab_plugin_errors_total{matcher=\"/lib/my \\\"odd\\\"\\\\policy.so#p\"} 2",
            "routerlab_decision_seconds_bucket{le=\"0.000025\"} 1",
            "routerlab_decision_seconds_bucket{le=\"+Inf\"} 2",
            "routerlab_decision_seconds_count 2",
            "# TYPE routerlab_retries counter",
            "routerlab_scaler_desired_endpoints{scaler=\"hpa\"} 3",
            "routerlab_scaler_ticks_total{scaler=\"hpa\"} 2",
            "routerlab_sync_peers 1",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
    }
}

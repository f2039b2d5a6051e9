//! `routerlab engine`'s `/metrics`: the engine's figures of one moment under vLLM's names,
//! as `prometheus-client` encodes them, and the LoRA adapters' info series.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::Shared;

/// The engine's figures of one moment, under vLLM's names (and the older name of the KV
/// usage gauge, which some routers still read), as `prometheus-client` encodes them.
#[derive(Debug)]
pub(super) struct Figures {
    model: String,
    /// (name, help, value) of each gauge.
    gauges: [(&'static str, &'static str, f64); 4],
    /// (name without `_total`, help, value) of each counter.
    counters: [(&'static str, &'static str, u64); 7],
    /// vLLM's `lora_requests_info` labels (slots, running and waiting adapters' names,
    /// comma-separated) and its value, the time now (Unix seconds); with LoRA slots.
    lora: Option<([(&'static str, String); 3], f64)>,
}

impl Collector for Figures {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let labels = [("model_name", self.model.as_str())];
        for (name, help, value) in self.gauges {
            let gauge = ConstGauge::new(value);
            let mut family = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(family.encode_family(&labels)?)?;
        }
        for (name, help, value) in self.counters {
            let counter = ConstCounter::new(value);
            let mut family = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(family.encode_family(&labels)?)?;
        }
        if let Some((labels, now)) = &self.lora {
            let gauge = ConstGauge::new(*now);
            let help = "Running stats on lora requests.";
            let name = "vllm:lora_requests_info";
            let mut family = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(family.encode_family(labels)?)?;
        }
        Ok(())
    }
}

/// The text of the engine's `/metrics`.
pub(super) fn metrics_text(shared: &Shared) -> String {
    let g = &shared.gauges;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let total = load(&g.kv_total).max(1);
    let usage = load(&g.kv_used) as f64 / total as f64;
    let figures = Figures {
        model: shared.settings.model.clone(),
        gauges: [
            (
                "vllm:num_requests_running",
                "requests running",
                load(&g.running) as f64,
            ),
            (
                "vllm:num_requests_waiting",
                "requests waiting",
                load(&g.waiting) as f64,
            ),
            ("vllm:kv_cache_usage_perc", "KV-cache usage, 0 to 1", usage),
            (
                "vllm:gpu_cache_usage_perc",
                "KV-cache usage, 0 to 1 (older name)",
                usage,
            ),
        ],
        counters: [
            (
                "vllm:request_success",
                "requests finished",
                load(&g.requests),
            ),
            (
                "vllm:prompt_tokens",
                "prompt tokens processed",
                load(&g.prompt_tokens),
            ),
            (
                "vllm:generation_tokens",
                "tokens generated",
                load(&g.generation_tokens),
            ),
            (
                "routerlab:cancelled_streams",
                "streams whose reader went away",
                load(&g.cancelled),
            ),
            (
                "routerlab:remote_decodes",
                "prefills handed on to a decode engine",
                load(&g.remote_decodes),
            ),
            (
                "routerlab:remote_prefills",
                "requests taken in with their KV computed elsewhere",
                load(&g.remote_prefills),
            ),
            (
                "routerlab:kv_event_batches_dropped",
                "KV event batches dropped because the send queue was full",
                shared
                    .settings
                    .kv_events
                    .as_ref()
                    .map_or(0, |p| p.dropped()),
            ),
        ],
        lora: lora_info(shared),
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(figures));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

/// The labels and value of `vllm:lora_requests_info`, as vLLM sets them after each step
/// (its label order; no value is a count: routers read the labels of the latest series).
pub(super) fn lora_info(shared: &Shared) -> Option<([(&'static str, String); 3], f64)> {
    let slots = shared.settings.config.lora.as_ref()?.slots;
    let (running, waiting) = shared.gauges.lora.lock().map(|l| l.clone()).ok()?;
    let adapters = shared.adapters.lock().ok()?;
    let names = |ids: &[u32]| {
        let names: Vec<&str> = ids.iter().filter_map(|&id| adapters.name(id)).collect();
        names.join(",")
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    Some((
        [
            ("max_lora", slots.to_string()),
            ("waiting_lora_adapters", names(&waiting)),
            ("running_lora_adapters", names(&running)),
        ],
        now,
    ))
}

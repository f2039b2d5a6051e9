//! `serve`'s settings from the same description a replay reads: every key `serve` can
//! honour, with the replay's meaning, and the rest refused by name rather than ignored.

use std::time::Duration;

use routerlab_engine::EngineConfig;
use serde::{Deserialize, Serialize};
use serde_yaml::Mapping;

use crate::ExperimentError;
use crate::file::Experiment;
use crate::fleet::fleet;
use crate::resolve::{Given, base_engine, given_endpoints, model_engine, plugin_config};

/// The keys `serve` honours; any other given is refused.
pub const SERVE_KEYS: &[&str] = &[
    "version",
    "matcher",
    "matcher_config",
    "router_config",
    "detector",
    "detector_config",
    "seed",
    "block_size",
    "endpoints",
    "prefill_endpoints",
    "decode_endpoints",
    "plugin_timeout_ms",
    "metrics_interval_ms",
    "engine",
    "model_config",
    "kv_cache_dtype",
    "gpu",
    "tensor_parallel_size",
    "expert_parallel_size",
    "gpu_memory_utilization",
    "scaler",
    "scaler_config",
    "scale_interval_s",
    "min_endpoints",
    "max_gpus",
    "replica_sync",
    "sync_scope",
    "sync_interval_ms",
    "sync_ttl_ms",
];

/// Keys that describe the traffic a replay offers and how it is measured, not the router:
/// live, the clients bring the traffic. `serve` takes a file that sets them (a replay's, or
/// `recommend`'s winner) and says on stderr it does not use them
/// ([`Experiment::traffic_keys`]); the fleet keys it cannot honour are refused.
pub const TRAFFIC_KEYS: &[&str] = &[
    "trace",
    "trace_format",
    "warm_up",
    "timing",
    "speedup",
    "rate",
    "concurrency",
    "respect_parents",
    "think_time_s",
    "output_tokens",
    "slo_ttft_ms",
    "slo_tpot_ms",
    "format",
    "skip_invalid",
    "max_line_bytes",
    "requests_out",
    "trace_block_size",
    "startup_s",
];

/// How often `serve` scrapes the engines' metrics unless told.
pub const DEFAULT_SCRAPE_INTERVAL_MS: f64 = 500.0;

/// What `serve` routes with, resolved: one document, also what a plugin host is sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Serving {
    /// Matcher name or `PATH[#NAME]`.
    pub matcher: String,
    /// Its config (without the seed).
    pub matcher_config: Mapping,
    /// Detector, if any.
    pub detector: Option<String>,
    /// Its config (without the seed).
    pub detector_config: Mapping,
    /// Seed given to the plugins.
    pub seed: u64,
    /// Block size of a prompt's hash chain, bytes.
    pub block_size: u32,
    /// The engines, as named (checked as addresses by the caller).
    pub endpoints: Vec<String>,
    /// How many of the first prefill (a disaggregated fleet); 0 = aggregated.
    pub prefill: usize,
    /// The deadline of one plugin call.
    pub plugin_timeout: Duration,
    /// How often the engines' statuses are refreshed (scraped).
    pub metrics_interval: Duration,
    /// The engine model whose forecasts answer a simulating matcher's `predict`: the
    /// replay's first engine, from the same keys.
    pub engine: EngineConfig,
    /// The scaler whose desired endpoint count `serve` publishes, if any.
    pub scaler: Option<crate::ScalerSpec>,
    /// How this replica shares its state with its peers (none unless asked).
    #[serde(default)]
    pub sync: routerlab_route::ReplicaSync,
}

impl Experiment {
    /// How the KV cache of the engines is sized when `gpu` and `model_config` size it (the
    /// blocks and each term), for the command to show; `None` when they do not.
    pub fn kv_explained(&self) -> Result<Option<String>, ExperimentError> {
        let model = model_engine(self)?;
        if self
            .engine
            .as_ref()
            .is_some_and(|e| e.num_gpu_blocks.is_some())
        {
            return Ok(None);
        }
        let engine = base_engine(self, &model)?;
        Ok(model.kv_blocks(&engine)?.map(|(blocks, how)| {
            format!(
                "KV cache: {blocks} blocks of {} tokens an engine ({how})",
                engine.engine_block_size
            )
        }))
    }

    /// One engine from the engine keys (`engine`, `model_config`, `kv_cache_dtype`, `gpu`), as
    /// the replay's first: what `routerlab engine` simulates and `serve` forecasts with.
    pub fn engine_model(&self) -> Result<EngineConfig, ExperimentError> {
        let engine = base_engine(self, &model_engine(self)?)?;
        engine
            .validate()
            .map_err(|e| ExperimentError::invalid(format!("--engine-config: {e}")))?;
        Ok(engine)
    }

    /// The traffic keys (`TRAFFIC_KEYS`) this description sets, which `serve` leaves to
    /// its clients.
    pub fn traffic_keys(&self) -> Vec<&str> {
        self.given_keys()
            .filter(|k| TRAFFIC_KEYS.contains(k))
            .collect()
    }

    /// `serve`'s settings: a key given that `serve` cannot honour is an error naming it
    /// (the traffic keys, `TRAFFIC_KEYS`, excepted).
    pub fn serving(&self) -> Result<Serving, ExperimentError> {
        if let Some(key) = self
            .given_keys()
            .find(|k| !SERVE_KEYS.contains(k) && !TRAFFIC_KEYS.contains(k))
        {
            return Err(ExperimentError::invalid(format!(
                "`{key}` is a replay setting that serve cannot honour: remove it from the experiment file (serve reads {})",
                SERVE_KEYS[1..].join(", ")
            )));
        }
        let (matcher, matcher_config) = crate::import::matcher_of(self)?;
        if self.endpoints.is_none() && self.prefill_endpoints.is_none() {
            return Err(ExperimentError::invalid(
                "serve needs its engines: --endpoints host:port,... (or --prefill-endpoints with --decode-endpoints)",
            ));
        }
        let (endpoints, prefill) = fleet(self)?;
        // Engines are addresses: the fleet's names come from `endpoints`, or from the two
        // pools' lists. A pool may be a count only to split the named `endpoints` (the
        // first N prefill, as replay splits them).
        let named = |key: &str, value: &Option<_>| {
            matches!(
                value.as_ref().map(|v| given_endpoints(v, key)),
                Some(Ok(Given::Names(_)))
            )
        };
        let endpoints_named = named("endpoints", &self.endpoints);
        for (key, value) in [
            ("endpoints", &self.endpoints),
            ("prefill_endpoints", &self.prefill_endpoints),
            ("decode_endpoints", &self.decode_endpoints),
        ] {
            if let Some(Ok(Given::Count(n))) = value.as_ref().map(|v| given_endpoints(v, key))
                && (key == "endpoints" || !endpoints_named)
            {
                return Err(ExperimentError::invalid(format!(
                    "serve routes to engines by address: give host:port names, not a count ({n})"
                )));
            }
        }
        let block_size = self
            .block_size
            .unwrap_or(routerlab_trace::reader::DEFAULT_BLOCK_SIZE);
        if block_size == 0 {
            return Err(ExperimentError::invalid("--block-size must be at least 1"));
        }
        let plugin_timeout_ms = self
            .plugin_timeout_ms
            .unwrap_or(crate::DEFAULT_PLUGIN_TIMEOUT_MS);
        if plugin_timeout_ms == 0 {
            return Err(ExperimentError::invalid(
                "--plugin-timeout-ms must be at least 1 in serve: a request may not wait for a plugin for ever",
            ));
        }
        let interval = self
            .metrics_interval_ms
            .unwrap_or(DEFAULT_SCRAPE_INTERVAL_MS);
        if !(interval.is_finite() && (1.0..=86_400_000.0).contains(&interval)) {
            return Err(ExperimentError::invalid(
                "--metrics-interval-ms must be from 1 to 86400000 in serve (the router's own in-flight counts are always current)",
            ));
        }
        let engine = self.engine_model()?;
        let scaler = crate::scaling::spec(self, endpoints.len())?;
        if scaler.is_some() && prefill.is_some() {
            return Err(ExperimentError::invalid(
                "--scaler: a disaggregated fleet's pools cannot be scaled yet (scale an aggregated fleet)",
            ));
        }
        // Live, the peers are the other replicas: at least one, as the caller checks.
        let sync = crate::replica_sync::resolve(self, 2)?;
        if sync.is_on() && prefill.is_some() {
            return Err(ExperimentError::invalid(
                "--replica-sync: replicas of a disaggregated fleet's router cannot share state yet",
            ));
        }
        Ok(Serving {
            matcher,
            matcher_config,
            detector: self.detector.clone(),
            detector_config: plugin_config(self.detector_config.clone(), "detector")?,
            seed: self.seed.unwrap_or(0),
            block_size,
            endpoints,
            prefill: prefill.unwrap_or(0),
            plugin_timeout: Duration::from_millis(plugin_timeout_ms),
            metrics_interval: Duration::from_secs_f64(interval / 1e3),
            engine,
            scaler,
            sync,
        })
    }
}

impl Serving {
    /// The scenario of these plugins over these endpoints, a request nothing can take
    /// refused: what builds `serve`'s routers, in the router or in a plugin host.
    pub fn scenario(&self) -> routerlab_sim::scenario::Scenario {
        routerlab_sim::scenario::Scenario {
            matcher: self.matcher.clone(),
            matcher_config: self.matcher_config.clone(),
            detector: self.detector.clone(),
            detector_config: self.detector_config.clone(),
            seed: self.seed,
            endpoints: self.endpoints.clone(),
            when_unavailable: routerlab_sim::WhenUnavailable::Reject,
            pools: (self.prefill > 0).then_some(routerlab_route::Pools {
                prefill: self.prefill,
                decision: routerlab_route::PdDecision::Always,
            }),
            ..routerlab_sim::scenario::Scenario::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::file::{Layers, parse_mapping};
    use crate::resolve::resolve;

    fn experiment(yaml: &str) -> crate::Experiment {
        Layers::new()
            .over(parse_mapping(yaml).unwrap())
            .experiment()
            .unwrap()
    }

    /// The engine a simulating matcher's `predict` is answered from is the replay's.
    #[test]
    fn serve_gets_the_replays_engine_from_the_same_keys() {
        let e = experiment(
            "{matcher: sim-latency, endpoints: 'a:1,b:2', timing: trace, trace: t, engine: {preset: dynamo, max_num_seqs: 7, num_gpu_blocks: 321}}",
        );
        let replayed = resolve(&e).unwrap().scenario.timed.unwrap().engines[0].clone();
        let served = e.clone();
        let serving = served.serving().unwrap();
        assert_eq!(serving.engine, replayed);
        assert_eq!(serving.engine.max_num_seqs, 7);
        assert_eq!(serving.endpoints, ["a:1", "b:2"]);
    }

    #[test]
    fn a_key_serve_cannot_honour_is_refused_by_name() {
        let err = experiment("{matcher: lcp, endpoints: 'a:1', rate: 3, cache_blocks: 9}")
            .serving()
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("`cache_blocks` is a replay setting that serve cannot honour"),
            "{err}"
        );
        // The traffic is the clients': named, not refused.
        let file = experiment("{matcher: lcp, endpoints: 'a:1', rate: 3, slo_ttft_ms: 9}");
        assert_eq!(file.traffic_keys(), ["rate", "slo_ttft_ms"]);
        assert!(file.serving().is_ok());
        let err = experiment("{matcher: lcp, endpoints: 4}")
            .serving()
            .unwrap_err()
            .to_string();
        assert!(err.contains("give host:port names, not a count"), "{err}");
    }

    #[test]
    fn a_split_fleet_takes_names_for_both_pools() {
        let s = experiment("{matcher: lcp, prefill_endpoints: 'p:1', decode_endpoints: 'd:1,d:2'}")
            .serving()
            .unwrap();
        assert_eq!((s.endpoints.len(), s.prefill), (3, 1));
        // Or a count that splits the named engines, as replay splits them.
        let s = experiment("{matcher: lcp, endpoints: 'p:1,d:1,d:2', prefill_endpoints: 1}")
            .serving()
            .unwrap();
        assert_eq!(
            (s.endpoints, s.prefill),
            (vec!["p:1".to_owned(), "d:1".into(), "d:2".into()], 1)
        );
        let err = experiment("{matcher: lcp, prefill_endpoints: 1, decode_endpoints: 2}")
            .serving()
            .unwrap_err()
            .to_string();
        assert!(err.contains("give host:port names, not a count"), "{err}");
    }
}

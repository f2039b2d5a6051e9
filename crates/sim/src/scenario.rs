//! A [`Scenario`] owns a run: which plugins, which trace read how, which fleet, which
//! replay. It is the one place routers, workloads and engines are assembled, so `replay`,
//! `compare`, `sweep`, `snapshot`, `calibrate`, `serve`, the plugin authors' snapshot helper
//! and the benches all build the same run from the same defaults.
//!
//! The command line only turns flags and the experiment file into a `Scenario`; a program
//! or a test starts from [`Scenario::new`] (or [`Default`]) and sets what it varies:
//!
//! ```no_run
//! # fn main() -> Result<(), routerlab_sim::SimError> {
//! use routerlab_host::SearchPath;
//! use routerlab_sim::observer::NoObserver;
//! use routerlab_sim::scenario::Scenario;
//!
//! let scenario = Scenario::new("lcp", "traces/chat.jsonl").endpoints(4).seed(7);
//! let mut replicas = scenario.routers(&SearchPath::from_env())?;
//! let report = scenario.replay(&mut replicas, &mut NoObserver)?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use routerlab_core::Role;
use routerlab_engine::EngineConfig;
use routerlab_host::{
    DetectorInstance, EndpointTable, MatcherInstance, SearchPath, load_detector, load_matcher,
};
use routerlab_report::Report;
use routerlab_report::run::{PluginRun, PoolsRun, ReplicasRun, RunInfo, TimedRun};
use routerlab_route::{Pools, ReplicaAssign, Replicas, Router, WhenUnavailable};
use routerlab_trace::TraceSource;
use routerlab_trace::{TraceOptions, TraceReader, Workload};
use serde_yaml::{Mapping, Value};

use crate::SimError;
use crate::observer::Observer;
use crate::timed::{
    TimedSettings, replay_timed, replay_timed_streamed, replay_timed_warm, streams,
};
use crate::timefree;

/// Endpoints of a fleet by default.
pub const DEFAULT_ENDPOINTS: usize = 10;

/// The names `localhost:8000`, `localhost:8001`, ... of a fleet of `n` endpoints given by
/// count.
pub fn default_endpoints(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("localhost:{}", 8000 + i)).collect()
}

/// A warm-up trace and how to read it.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmUp {
    /// Its file (or the measured run its text was made from).
    pub trace: PathBuf,
    /// How to read it.
    pub options: TraceOptions,
    /// Made in memory from a measured run, as [`Scenario::trace_text`].
    pub text: Option<std::sync::Arc<[u8]>>,
}

/// The trace at `path`, or the Mooncake-form `text` made from it in memory when given.
fn open(path: &Path, text: Option<&[u8]>, options: &TraceOptions) -> Result<TraceReader, SimError> {
    Ok(match text {
        Some(text) => TraceReader::in_memory(
            path,
            routerlab_trace::TraceFormat::Mooncake,
            text.to_vec(),
            options.clone(),
        ),
        None => TraceReader::open(path, options.clone())?,
    })
}

/// One run, fully resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Matcher name or `PATH[#NAME]`.
    pub matcher: String,
    /// The matcher's config as given (without the seed unless the user set one).
    pub matcher_config: Mapping,
    /// Detector, if any.
    pub detector: Option<String>,
    /// The detector's config as given.
    pub detector_config: Mapping,
    /// The seed: the plugins' `seed` key unless their config sets one (replica `r` gets
    /// `seed + r`), and the arrival process's.
    pub seed: u64,
    /// Trace file.
    pub trace: PathBuf,
    /// How to read it.
    pub trace_options: TraceOptions,
    /// The trace made in memory from the measured run at `trace` (Mooncake's form, read
    /// as `trace_options` say); `None` reads `trace` itself.
    pub trace_text: Option<std::sync::Arc<[u8]>>,
    /// Traces replayed first, in turn, unmeasured, to warm the engines' caches and the
    /// routers (timed replays; [`crate::timed::replay_timed_warm`]).
    pub warm_up: Vec<WarmUp>,
    /// Endpoint names.
    pub endpoints: Vec<String>,
    /// Time-free prefix-cache capacity per endpoint; `None` = unbounded.
    pub cache_blocks: Option<u64>,
    /// When nothing is available.
    pub when_unavailable: WhenUnavailable,
    /// Router replicas (1 = one router).
    pub router_replicas: usize,
    /// How the balancer spreads requests over them.
    pub replica_assign: ReplicaAssign,
    /// How they share their state (timed replays).
    pub replica_sync: routerlab_route::ReplicaSync,
    /// Present for the timed replay.
    pub timed: Option<TimedSettings>,
    /// The fleet split into a prefill pool (its first endpoints) and a decode pool; `None`
    /// = aggregated.
    pub pools: Option<Pools>,
    /// The scaler plugin and its config, for a timed replay whose fleet it sizes
    /// (`timed.scaling` says how); `None` = a fixed fleet.
    pub scaler: Option<(String, Mapping)>,
}

impl Default for Scenario {
    /// No matcher or trace yet; 10 endpoints, the default trace options, seed 0, one router
    /// by round robin, time-free, rejecting what finds no endpoint.
    fn default() -> Scenario {
        Scenario {
            matcher: String::new(),
            matcher_config: Mapping::new(),
            detector: None,
            detector_config: Mapping::new(),
            seed: 0,
            trace: PathBuf::new(),
            trace_options: TraceOptions::default(),
            trace_text: None,
            warm_up: Vec::new(),
            endpoints: default_endpoints(DEFAULT_ENDPOINTS),
            cache_blocks: None,
            when_unavailable: WhenUnavailable::Reject,
            router_replicas: 1,
            replica_assign: ReplicaAssign::RoundRobin,
            replica_sync: routerlab_route::ReplicaSync::none(),
            timed: None,
            pools: None,
            scaler: None,
        }
    }
}

impl Scenario {
    /// `matcher` over `trace`, with the defaults.
    pub fn new(matcher: impl Into<String>, trace: impl Into<PathBuf>) -> Scenario {
        Scenario {
            matcher: matcher.into(),
            trace: trace.into(),
            ..Scenario::default()
        }
    }

    /// With `n` endpoints named `localhost:8000`, ...
    pub fn endpoints(mut self, n: usize) -> Scenario {
        self.endpoints = default_endpoints(n);
        self
    }

    /// With the matcher config `text` (YAML or JSON mapping, may be empty).
    pub fn matcher_config(mut self, text: &str) -> Result<Scenario, SimError> {
        self.matcher_config = config_mapping(text, "matcher")?;
        Ok(self)
    }

    /// With the detector `name` and its config `text`.
    pub fn detector(mut self, name: impl Into<String>, text: &str) -> Result<Scenario, SimError> {
        self.detector = Some(name.into());
        self.detector_config = config_mapping(text, "detector")?;
        Ok(self)
    }

    /// With the seed.
    pub fn seed(mut self, seed: u64) -> Scenario {
        self.seed = seed;
        self
    }

    /// With the trace read by `options`.
    pub fn trace_options(mut self, options: TraceOptions) -> Scenario {
        self.trace_options = options;
        self
    }

    /// Timed, with `settings`; requests that find no endpoint then wait at the router
    /// (the timed replay's default) unless [`Scenario::when_unavailable`] says otherwise.
    pub fn timed(mut self, settings: TimedSettings) -> Scenario {
        self.timed = Some(settings);
        self.when_unavailable = WhenUnavailable::Queue;
        self
    }

    /// Timed at the trace's own times on the `dynamo` engine preset, one engine per
    /// endpoint: what a calibration or a snapshot replays.
    pub fn timed_at_trace_times(self) -> Scenario {
        let engines = vec![EngineConfig::dynamo(); self.endpoints.len()];
        self.timed(TimedSettings::at_trace_times(engines))
    }

    /// With `policy` when nothing is available.
    pub fn when_unavailable(mut self, policy: WhenUnavailable) -> Scenario {
        self.when_unavailable = policy;
        self
    }

    /// The config texts of replica `r`'s matcher and detector: each as given, with
    /// `seed: seed + r` added unless it sets a seed, as independently started replicas
    /// draw different random numbers.
    pub fn plugin_configs(&self, r: usize) -> (String, String) {
        let seed = self.seed.wrapping_add(r as u64);
        (
            with_seed(&self.matcher_config, seed),
            with_seed(&self.detector_config, seed),
        )
    }

    /// The run's router replicas, each with plugin instances of its own loaded from
    /// `search` (see [`Scenario::plugin_configs`] for their seeds).
    pub fn routers(&self, search: &SearchPath) -> Result<Replicas, SimError> {
        let replicas =
            self.routers_with(|matcher, detector| self.load(search, matcher, detector))?;
        Ok(match &self.scaler {
            Some((name, config)) => {
                let config = with_seed(config, self.seed);
                let scaler =
                    routerlab_host::load_scaler(name, &config, search).map_err(SimError::Load)?;
                replicas.with_scaler(scaler)
            }
            None => replicas,
        })
    }

    /// One router (replica 0's plugins) loaded from `search`: what `serve` deploys.
    pub fn router(&self, search: &SearchPath) -> Result<Router, SimError> {
        let (matcher_config, detector_config) = self.plugin_configs(0);
        let (matcher, detector) = self.load(search, &matcher_config, &detector_config)?;
        self.router_of(matcher, detector)
    }

    /// The prefill and the decode pool's routers of a disaggregated fleet (replica 0's
    /// plugins, each pool its own instances): what `serve` deploys in front of a P/D fleet.
    pub fn pool_routers(&self, search: &SearchPath) -> Result<(Router, Router), SimError> {
        if self.pools.is_none() {
            return Err(SimError::Input(
                "the run has no prefill and decode pools".into(),
            ));
        }
        let one = Scenario {
            router_replicas: 1,
            ..self.clone()
        };
        let replicas = one.routers(search)?;
        Ok(replicas
            .into_pool_routers()
            .expect("a disaggregated scenario's routers"))
    }

    /// The matcher and the detector (if any), created from `search` with these configs.
    fn load(
        &self,
        search: &SearchPath,
        matcher_config: &str,
        detector_config: &str,
    ) -> Result<(MatcherInstance, Option<DetectorInstance>), SimError> {
        let matcher =
            load_matcher(&self.matcher, matcher_config, search).map_err(SimError::Load)?;
        let detector = match &self.detector {
            Some(name) => {
                Some(load_detector(name, detector_config, search).map_err(SimError::Load)?)
            }
            None => None,
        };
        Ok((matcher, detector))
    }

    /// The run's router replicas, with the plugin instances `make` creates from each
    /// replica's (matcher, detector) config texts: a test's in-process plugins, say.
    pub fn routers_with(
        &self,
        mut make: impl FnMut(
            &str,
            &str,
        ) -> Result<(MatcherInstance, Option<DetectorInstance>), SimError>,
    ) -> Result<Replicas, SimError> {
        if self.matcher.is_empty() {
            return Err(SimError::Input("the run has no matcher".into()));
        }
        let mut routers = Vec::with_capacity(self.router_replicas);
        for r in 0..self.router_replicas.max(1) {
            let (matcher_config, detector_config) = self.plugin_configs(r);
            let (matcher, detector) = make(&matcher_config, &detector_config)?;
            routers.push(self.router_of(matcher, detector)?);
        }
        let replicas =
            Replicas::new(routers, self.replica_assign, self.seed)?.with_sync(self.replica_sync);
        let Some(pools) = self.pools else {
            return Ok(replicas);
        };
        if pools.prefill == 0 || pools.prefill >= self.endpoints.len() {
            return Err(SimError::Input(format!(
                "a disaggregated fleet of {} endpoints needs 1 to {} prefill endpoints, not {}",
                self.endpoints.len(),
                self.endpoints.len().saturating_sub(1),
                pools.prefill
            )));
        }
        // Each pool has plugin instances of its own: a policy's state (a turn, an index of
        // what it sent where) is about the endpoints it chooses among.
        let mut decode = Vec::with_capacity(replicas.len());
        for r in 0..replicas.len() {
            let (matcher_config, detector_config) = self.plugin_configs(r);
            let (matcher, detector) = make(&matcher_config, &detector_config)?;
            decode.push(self.router_of(matcher, detector)?);
        }
        Ok(replicas.disaggregated(decode, pools)?)
    }

    /// One router over this fleet from given plugin instances (what `serve` deploys).
    pub fn router_of(
        &self,
        matcher: MatcherInstance,
        detector: Option<DetectorInstance>,
    ) -> Result<Router, SimError> {
        let mut table = EndpointTable::new(self.endpoints.iter().cloned());
        if let Some(split) = self.pools {
            for pos in 0..table.len() {
                table.set_role(
                    pos,
                    if pos < split.prefill {
                        Role::Prefill
                    } else {
                        Role::Decode
                    },
                );
            }
        }
        Ok(Router::new(
            matcher,
            detector,
            table,
            self.when_unavailable,
        )?)
    }

    /// Opens the trace: the file, or the trace made from it in memory.
    pub fn reader(&self) -> Result<TraceReader, SimError> {
        open(&self.trace, self.trace_text.as_deref(), &self.trace_options)
    }

    /// The timed replay of the loaded `workload` (from [`Scenario::workload`]), after the
    /// warm-up trace when there is one.
    pub fn replay_loaded(
        &self,
        workload: &Workload,
        replicas: &mut Replicas,
        observer: &mut dyn Observer,
    ) -> Result<Report, SimError> {
        let Some(timed) = &self.timed else {
            return Err(SimError::Input("a loaded replay is a timed one".into()));
        };
        if self.warm_up.is_empty() {
            return replay_timed(workload, replicas, timed, observer);
        }
        let mut warm_ups = Vec::with_capacity(self.warm_up.len());
        for warm in &self.warm_up {
            let reader = open(&warm.trace, warm.text.as_deref(), &warm.options)?;
            warm_ups.push(self.workload(reader)?);
        }
        replay_timed_warm(&warm_ups, workload, replicas, timed, observer)
    }

    /// Loads the whole trace for a timed replay, with the chains its engines need.
    pub fn workload(&self, reader: TraceReader) -> Result<Workload, SimError> {
        let sizes = self
            .timed
            .as_ref()
            .map(TimedSettings::engine_block_sizes)
            .unwrap_or_default();
        Ok(Workload::load(reader, &sizes)?)
    }

    /// Runs the whole replay through `replicas` (from [`Scenario::routers`]), telling
    /// `observer` each request; the report carries its `run` block.
    pub fn replay(
        &self,
        replicas: &mut Replicas,
        observer: &mut dyn Observer,
    ) -> Result<Report, SimError> {
        let mut reader = self.reader()?;
        let block_size = reader.block_size();
        let sync = replicas.sync();
        if sync.is_on() && self.timed.is_none() {
            return Err(SimError::Input(
                "router replicas share state only in the timed replay (--timing trace)".into(),
            ));
        }
        let (mut report, skipped, source) = match &self.timed {
            None => {
                let report = timefree::replay(&mut reader, replicas, self.cache_blocks, observer)?;
                (report, reader.skipped().clone(), reader.source())
            }
            // Read as it goes, unless an agentic trace's requests may wait for later ones.
            Some(timed) if streams(reader.format()) && self.warm_up.is_empty() => {
                let reopen = || self.reader();
                let (report, read) =
                    replay_timed_streamed(reader, &reopen, replicas, timed, observer)?;
                (report, read.skipped, read.source)
            }
            Some(_) => {
                let workload = self.workload(reader)?;
                let report = self.replay_loaded(&workload, replicas, observer)?;
                (report, workload.skipped.clone(), workload.source.clone())
            }
        };
        report.run = Some(self.run_info(source, block_size, &skipped));
        Ok(report)
    }

    /// The report's `run` block: what produced it.
    pub fn run_info(
        &self,
        source: TraceSource,
        block_size: u32,
        skipped: &BTreeMap<&'static str, u64>,
    ) -> RunInfo {
        let (matcher_config, detector_config) = self.plugin_configs(0);
        RunInfo {
            tool_version: env!("CARGO_PKG_VERSION").to_owned(),
            matcher: PluginRun {
                name: self.matcher.clone(),
                config: matcher_config,
            },
            detector: self.detector.as_ref().map(|name| PluginRun {
                name: name.clone(),
                config: detector_config,
            }),
            seed: self.seed,
            trace: recorded::trace(source, skipped),
            block_size,
            endpoints: self.endpoints.clone(),
            cache_blocks: self.cache_blocks,
            when_unavailable: recorded::unavailable(self.when_unavailable),
            router_replicas: (self.router_replicas > 1).then_some(ReplicasRun {
                count: self.router_replicas as u64,
                assign: recorded::assign(self.replica_assign),
            }),
            timed: self.timed.as_ref().map(|t| TimedRun {
                arrivals: recorded::arrivals(&t.arrivals),
                respect_parents: t.respect_parents,
                think_time_ns: t.think_time_ns,
                metrics_interval_ns: t.metrics_interval_ns,
                default_output_tokens: t.default_output_tokens,
                engines: t.engines.iter().map(recorded::engine).collect(),
                kv_transfer: self.pools.map(|_| recorded::kv_transfer(&t.kv_transfer)),
                kv_event_lag_ms: (t.kv_event_lag_ns > 0).then(|| t.kv_event_lag_ns as f64 / 1e6),
                router_hop_ms: (t.router_hop_ns > 0).then(|| t.router_hop_ns as f64 / 1e6),
                router_decision_ms: (t.router_decision_ns > 0)
                    .then(|| t.router_decision_ns as f64 / 1e6),
            }),
            pools: self.pools.map(|p| PoolsRun {
                prefill_endpoints: p.prefill as u64,
                decode_endpoints: (self.endpoints.len() - p.prefill) as u64,
                decision: p.decision.name(),
            }),
        }
    }
}

/// A plugin config text as a mapping; `which` (`matcher`, `detector`) names it in errors.
pub fn config_mapping(text: &str, which: &str) -> Result<Mapping, SimError> {
    if text.trim().is_empty() {
        return Ok(Mapping::new());
    }
    routerlab_core::config::check_nesting(text)
        .map_err(|e| SimError::Input(format!("the {which} config: {e}")))?;
    match serde_yaml::from_str::<Value>(text) {
        Ok(Value::Null) => Ok(Mapping::new()),
        Ok(Value::Mapping(map)) => Ok(map),
        Ok(_) => Err(SimError::Input(format!(
            "the {which} config must be a mapping of keys"
        ))),
        Err(e) => Err(SimError::Input(format!(
            "the {which} config is not valid YAML or JSON: {e}"
        ))),
    }
}

/// `config` as text, with `seed: seed` added unless it has a `seed` key.
pub fn with_seed(config: &Mapping, seed: u64) -> String {
    let mut map = config.clone();
    let key = Value::String("seed".into());
    if !map.contains_key(&key) {
        map.insert(key, Value::Number(seed.into()));
    }
    serde_yaml::to_string(&map).expect("a mapping of YAML values serialises")
}

/// The library's settings as the report records them (its own types; see
/// `routerlab_report::run`). Each library type is taken apart whole, so a field or variant
/// added to one is a compile error here until the report says how to record it. Public for
/// the other writers of run blocks (`drive`'s `measured`).
pub mod recorded {
    use std::collections::BTreeMap;

    use routerlab_engine::{EngineConfig, HostTier, KvTransfer, StepTime};
    use routerlab_report::run::{
        ArrivalsRun, AssignRun, EngineRun, HostTierRun, KvTransferRun, LoraRun, StepTimeRun,
        TraceRun, UnavailableRun,
    };
    use routerlab_route::{ReplicaAssign, WhenUnavailable};
    use routerlab_trace::TraceSource;
    use routerlab_trace::arrivals::Arrivals;

    /// The trace a run read, with the lines it skipped by reason.
    pub fn trace(source: TraceSource, skipped: &BTreeMap<&'static str, u64>) -> TraceRun {
        let TraceSource {
            path,
            format,
            bytes,
            content_hash,
        } = source;
        TraceRun {
            path,
            format: format.to_string(),
            bytes,
            content_hash,
            skipped: skipped.iter().map(|(r, n)| ((*r).to_owned(), *n)).collect(),
        }
    }

    pub(super) fn unavailable(policy: WhenUnavailable) -> UnavailableRun {
        match policy {
            WhenUnavailable::Queue => UnavailableRun::Queue,
            WhenUnavailable::Reject => UnavailableRun::Reject,
            WhenUnavailable::FailOpen => UnavailableRun::FailOpen,
        }
    }

    pub(super) fn assign(rule: ReplicaAssign) -> AssignRun {
        match rule {
            ReplicaAssign::RoundRobin => AssignRun::RoundRobin,
            ReplicaAssign::Random => AssignRun::Random,
            ReplicaAssign::Session => AssignRun::Session,
        }
    }

    /// How requests arrived.
    pub fn arrivals(process: &Arrivals) -> ArrivalsRun {
        match *process {
            Arrivals::Trace { speedup } => ArrivalsRun::Trace { speedup },
            Arrivals::Poisson { rate } => ArrivalsRun::Poisson { rate },
            Arrivals::Closed { concurrency } => ArrivalsRun::Closed { concurrency },
        }
    }

    pub(super) fn kv_transfer(transfer: &KvTransfer) -> KvTransferRun {
        let KvTransfer {
            kv_bytes_per_token,
            bandwidth_gbps,
            latency_ms,
            mode,
        } = transfer;
        KvTransferRun {
            kv_bytes_per_token: *kv_bytes_per_token,
            bandwidth_gbps: *bandwidth_gbps,
            latency_ms: *latency_ms,
            mode: mode.name().to_owned(),
        }
    }

    pub(super) fn engine(config: &EngineConfig) -> EngineRun {
        let EngineConfig {
            num_gpu_blocks,
            engine_block_size,
            max_num_seqs,
            max_num_batched_tokens,
            step_time,
            kv_bytes_per_token,
            host_tier,
            shared_tier,
            scheduler,
            prefix_caching,
            max_paddings,
            lora,
            speculative,
            async_scheduling,
        } = config;
        let tier = |tier: HostTier| {
            let HostTier {
                blocks,
                d2h_gbps,
                h2d_gbps,
                latency_ms,
                blocking,
            } = tier;
            HostTierRun {
                blocks,
                d2h_gbps,
                h2d_gbps,
                latency_ms,
                blocking,
            }
        };
        EngineRun {
            kv_bytes_per_token: *kv_bytes_per_token,
            host_tier: host_tier.map(tier),
            shared_tier: shared_tier.map(tier),
            scheduler: (!scheduler.is_v1()).then(|| "v0".to_owned()),
            prefix_caching: (!*prefix_caching).then_some(false),
            async_scheduling: async_scheduling.then_some(true),
            max_paddings: *max_paddings,
            lora: lora.map(|l| LoraRun {
                slots: l.slots,
                load_ms: l.load_ms,
                step_overhead: l.step_overhead,
            }),
            speculative: speculative
                .as_ref()
                .map(|s| routerlab_report::run::SpeculativeRun {
                    method: s.method.name().to_owned(),
                    num_tokens: s.num_tokens,
                    acceptance: s.acceptance.clone(),
                    draft_cost: s.draft_cost(),
                    tokens_per_step: s.tokens_per_step(),
                }),
            num_gpu_blocks: *num_gpu_blocks,
            engine_block_size: *engine_block_size,
            max_num_seqs: *max_num_seqs,
            max_num_batched_tokens: *max_num_batched_tokens,
            step_time: match step_time {
                StepTime::Roofline(r) => StepTimeRun::Roofline {
                    gpu: r.gpu.name.clone(),
                    params: r.shape.total_params,
                    tensor_parallel: r.tensor_parallel,
                    expert_parallel: r.expert_parallel,
                    weight_bits: r.shape.weight_bits,
                    kv_bytes: r.kv_bytes,
                    compute_efficiency: r.efficiency.compute,
                    memory_efficiency: r.efficiency.memory,
                    overhead_ms: r.efficiency.overhead_ms,
                    link: r.gpu.link.name().into(),
                    collective_step_us: r.efficiency.collective_step_us,
                    interconnect_efficiency: r.efficiency.interconnect,
                },
                &StepTime::Polynomial { prefill, decode } => {
                    StepTimeRun::Polynomial { prefill, decode }
                }
                &StepTime::Linear {
                    overhead_ms,
                    prefill_ms_per_token,
                    decode_ms,
                } => StepTimeRun::Linear {
                    overhead_ms,
                    prefill_ms_per_token,
                    decode_ms,
                },
                &StepTime::Batched {
                    overhead_ms,
                    prefill_ms_per_token,
                    decode_ms_per_seq,
                    context_ms_per_ktoken,
                    experts,
                } => StepTimeRun::Batched {
                    overhead_ms,
                    prefill_ms_per_token,
                    decode_ms_per_seq,
                    context_ms_per_ktoken,
                    experts: experts.map(|e| routerlab_report::run::ExpertsRun {
                        count: e.count,
                        per_token: e.per_token,
                        ms: e.ms,
                    }),
                },
            },
        }
    }

    #[cfg(test)]
    mod tests {
        use routerlab_engine::{EngineConfig, StepTime};
        use routerlab_route::{ReplicaAssign, WhenUnavailable};
        use routerlab_trace::arrivals::Arrivals;
        use serde::Serialize;

        fn json(value: &impl Serialize) -> String {
            serde_json::to_string(value).unwrap()
        }

        /// The report records a setting exactly as the library (and the experiment file)
        /// spells it: the same keys, tags and values.
        #[test]
        fn recorded_settings_serialise_as_the_library_types_do() {
            let models = [
                EngineConfig::dynamo().step_time,
                StepTime::Linear {
                    overhead_ms: 1.0,
                    prefill_ms_per_token: 0.5,
                    decode_ms: 2.0,
                },
                StepTime::Batched {
                    overhead_ms: 1.0,
                    prefill_ms_per_token: 0.5,
                    decode_ms_per_seq: 0.25,
                    context_ms_per_ktoken: 0.125,
                    experts: None,
                },
                StepTime::Batched {
                    overhead_ms: 1.0,
                    prefill_ms_per_token: 0.5,
                    decode_ms_per_seq: 0.25,
                    context_ms_per_ktoken: 0.125,
                    experts: Some(routerlab_engine::Experts {
                        count: 128,
                        per_token: 8,
                        ms: 0.01,
                    }),
                },
            ];
            for step_time in models {
                let config = EngineConfig {
                    step_time,
                    ..EngineConfig::dynamo()
                };
                assert_eq!(json(&super::engine(&config)), json(&config));
            }
            for process in [
                Arrivals::Trace { speedup: 2.0 },
                Arrivals::Poisson { rate: 5.0 },
                Arrivals::Closed { concurrency: 3 },
            ] {
                assert_eq!(json(&super::arrivals(&process)), json(&process));
            }
            for policy in [
                WhenUnavailable::Queue,
                WhenUnavailable::Reject,
                WhenUnavailable::FailOpen,
            ] {
                assert_eq!(json(&super::unavailable(policy)), json(&policy));
            }
            for rule in [
                ReplicaAssign::RoundRobin,
                ReplicaAssign::Random,
                ReplicaAssign::Session,
            ] {
                assert_eq!(json(&super::assign(rule)), json(&rule));
            }
        }
    }
}

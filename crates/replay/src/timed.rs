//! The timed replay: requests arrive on a logical clock, wait, run on an engine model, and
//! finish; the report adds latency percentiles to the time-free statistics.
//!
//! The time-free replay cannot tell good routers from bad ones: with no clock and infinite
//! caches, sending everything to one endpoint looks ideal. Here that endpoint's queue grows
//! while the others idle, and the latencies say so.
//!
//! It is a discrete-event simulation. Events are arrivals, the ends of engine steps, and
//! metric refreshes, processed in time order (ties in file order). At an arrival the
//! detector and the matcher see the endpoints' statuses (live, or a snapshot refreshed every
//! `metrics_interval`; the router's own in-flight prompt tokens are always current), and
//! the request joins the chosen engine's queue. When a request finishes, the matcher's
//! `on_complete` is called. When no endpoint is available, the request waits at the router
//! (default) until a completion or refresh frees one, or is rejected, or is routed anyway.
//!
//! All requests are loaded first (parent links may delay a request past later ones), so
//! memory here grows with the trace.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::Write;

use hdrhistogram::Histogram;
use routerlab_core::hash::{chain, hash64};
use routerlab_core::{SeededRng, Unit};
use routerlab_host::{DetectorInstance, EndpointLoad, EndpointTable, MatcherInstance, RequestData};
use serde::{Deserialize, Serialize};

use crate::engine::{Engine, EngineConfig, EngineStatus, Sequence};
use crate::replay::{ReplayError, prompt_tokens};
use crate::report::{Report, StatsBuilder, round6};
use crate::trace::{TraceFormat, TraceReader, TraceRequest};

/// Where arrival times come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Arrivals {
    /// The trace's timestamps, divided by `speedup`.
    Trace {
        /// Time compression (2 = twice as fast).
        speedup: f64,
    },
    /// Poisson arrivals at `rate` requests per second, seeded, in file order.
    Poisson {
        /// Requests per second.
        rate: f64,
    },
    /// Closed loop: `concurrency` requests outstanding; each completion sends the next.
    Closed {
        /// Requests in flight.
        concurrency: usize,
    },
}

/// What happens to a request when no endpoint is available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum WhenUnavailable {
    /// Wait at the router until an endpoint is available.
    Queue,
    /// Count it as rejected.
    Reject,
    /// Route it anyway, the matcher seeing every endpoint as available.
    FailOpen,
}

/// Settings of a timed replay.
#[derive(Debug, Clone)]
pub struct TimedSettings {
    /// Endpoint names.
    pub endpoints: Vec<String>,
    /// One engine per endpoint.
    pub engines: Vec<EngineConfig>,
    /// Arrival process.
    pub arrivals: Arrivals,
    /// A request is not sent before its parent finished plus `think_time_ns`.
    pub respect_parents: bool,
    /// Pause between a parent's finish and its child's arrival.
    pub think_time_ns: u64,
    /// Status refresh period for plugins; 0 = live.
    pub metrics_interval_ns: u64,
    /// Policy when nothing is available.
    pub when_unavailable: WhenUnavailable,
    /// Output length when the trace has none.
    pub default_output_tokens: u64,
    /// Seed of the arrival process.
    pub seed: u64,
}

/// Percentiles of one latency, in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// Tokens per second over the makespan.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Throughput {
    /// Prompt tokens of finished requests per second.
    pub input_tokens_per_s: f64,
    /// Generated tokens per second.
    pub output_tokens_per_s: f64,
}

/// One endpoint's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EndpointTimed {
    /// Endpoint name.
    pub name: String,
    /// Requests it finished.
    pub requests: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Largest KV usage (fraction of blocks held).
    pub peak_kv_usage: f64,
    /// Time-weighted mean KV usage.
    pub mean_kv_usage: f64,
    /// Cached blocks evicted.
    pub evictions: u64,
    /// Sequences preempted and recomputed.
    pub preemptions: u64,
}

/// The timed part of the report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimedReport {
    /// Arrival to first token.
    pub ttft: Latency,
    /// Time per output token after the first.
    pub tpot: Latency,
    /// Arrival to last token.
    pub e2e: Latency,
    /// Arrival to first scheduled on an engine (router queue included).
    pub queue: Latency,
    /// Token throughput.
    pub throughput: Throughput,
    /// First arrival to last finish, seconds.
    pub makespan_s: f64,
    /// Prompt tokens reused from engine prefix caches / prompt tokens (after eviction).
    pub hit_ratio: f64,
    /// Requests that waited at the router because nothing was available.
    pub router_queued: u64,
    /// Requests rejected because prompt plus output exceed their engine's whole KV cache.
    pub too_long: u64,
    /// Per endpoint, in endpoint order.
    pub per_endpoint: Vec<EndpointTimed>,
}

/// A request held for the whole replay.
struct Held {
    line: usize,
    prompt: Vec<u8>,
    blocks: Vec<u64>,
    block_ids: Vec<u32>,
    prompt_len: u64,
    prompt_tokens: u32,
    output_tokens: u32,
    session: u64,
    parent: Option<usize>,
    /// Engine-block hashes, one list per distinct engine block size (see `block_classes`).
    engine_hashes: Vec<Vec<u64>>,
    base_arrival_ns: u64,
    arrival_ns: u64,
    endpoint: Option<usize>,
    constrained: bool,
    queued_at_router: bool,
    finish_ns: Option<u64>,
    children: Vec<usize>,
}

/// Events are ordered by time, then by when they were scheduled (so simultaneous arrivals
/// keep file order); the derived order of the variants themselves is never used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Metrics snapshot refresh.
    Refresh,
    /// The end of an engine's step, with the step's generation.
    Step(usize, u64),
    /// A request arrives at the router.
    Arrival(usize),
}

/// One line of `--requests-out`.
#[derive(Serialize)]
struct RequestLine {
    id: u64,
    line: usize,
    arrival_s: f64,
    endpoint: Option<String>,
    prompt_tokens: u32,
    hit_tokens: u32,
    queue_ms: f64,
    ttft_ms: f64,
    finish_s: f64,
}

/// The plugins a replay routes with.
struct Plugins<'p> {
    matcher: &'p mut MatcherInstance,
    detector: Option<&'p mut DetectorInstance>,
}

struct Sim<'a> {
    settings: &'a TimedSettings,
    /// For each endpoint, which of a request's engine-hash lists (by block size) it uses.
    class_of: Vec<usize>,
    unit: Unit,
    block_size: u32,
    held: Vec<Held>,
    engines: Vec<Engine>,
    step_generation: Vec<u64>,
    snapshot: Vec<EngineStatus>,
    inflight_tokens: Vec<u64>,
    table: EndpointTable,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    order: u64,
    router_queue: VecDeque<usize>,
    router_queued: u64,
    too_long: u64,
    unavailable: Vec<bool>,
    stats: StatsBuilder,
    ttft: Histogram<u64>,
    tpot: Histogram<u64>,
    e2e: Histogram<u64>,
    queue: Histogram<u64>,
    sums: [u128; 4],
    counts: [u64; 4],
    per_endpoint: Vec<(u64, u64)>,
    prompt_tokens_done: u128,
    hit_tokens_done: u128,
    output_tokens_done: u128,
    first_arrival: Option<u64>,
    last_finish: u64,
    next_closed: usize,
    records: Option<Vec<RequestLine>>,
}

/// Engine-block hashes of a request for engine blocks of `engine_block` tokens. Only full
/// blocks are hashed. Mooncake ids (one per `trace_block` tokens, each naming the whole
/// prefix) are expanded: engine block `j` is named by the id of the trace block holding its
/// last token, mixed with `j`. Text uses 4 bytes a token; token ids are hashed directly.
fn engine_hashes(
    format: TraceFormat,
    request: &TraceRequest,
    trace_block: u32,
    prompt_tokens: u32,
    engine_block: u32,
) -> Vec<u64> {
    let full = (prompt_tokens / engine_block) as usize;
    match format {
        TraceFormat::Mooncake => (0..full)
            .map(|j| {
                let last_token = (j as u64 + 1) * u64::from(engine_block) - 1;
                let id = request.blocks[(last_token / u64::from(trace_block)) as usize];
                hash64(&id.to_le_bytes(), j as u64 + 1)
            })
            .collect(),
        TraceFormat::Chat => {
            let bytes_per_block = engine_block as usize * 4;
            let mut previous = 0;
            request
                .prompt
                .chunks_exact(bytes_per_block)
                .take(full)
                .map(|b| {
                    previous = chain(previous, b);
                    previous
                })
                .collect()
        }
        TraceFormat::TokenIds => {
            let mut previous = 0;
            request
                .token_ids
                .chunks_exact(engine_block as usize)
                .take(full)
                .map(|ids| {
                    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
                    previous = chain(previous, &bytes);
                    previous
                })
                .collect()
        }
    }
}

fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 1 << 42, 3).expect("valid histogram bounds")
}

fn latency(h: &Histogram<u64>, sum_us: u128, count: u64) -> Latency {
    if count == 0 {
        return Latency {
            mean: 0.0,
            p50: 0.0,
            p90: 0.0,
            p99: 0.0,
            max: 0.0,
        };
    }
    let ms = |us: u64| round6(us as f64 / 1000.0);
    Latency {
        mean: round6(sum_us as f64 / count as f64 / 1000.0),
        p50: ms(h.value_at_quantile(0.5)),
        p90: ms(h.value_at_quantile(0.9)),
        p99: ms(h.value_at_quantile(0.99)),
        max: ms(h.max()),
    }
}

/// Runs a timed replay; with `requests_out`, writes one JSON line per request.
pub fn replay_timed(
    reader: &mut TraceReader,
    matcher: &mut MatcherInstance,
    detector: Option<&mut DetectorInstance>,
    settings: &TimedSettings,
    requests_out: Option<&mut dyn Write>,
) -> Result<Report, ReplayError> {
    let n = settings.endpoints.len();
    assert_eq!(settings.engines.len(), n, "one engine per endpoint");
    let format = reader.format();
    let unit = reader.unit();
    let block_size = reader.block_size();
    let mut block_classes: Vec<u32> = settings
        .engines
        .iter()
        .map(|e| e.engine_block_size)
        .collect();
    block_classes.sort_unstable();
    block_classes.dedup();
    let class_of: Vec<usize> = settings
        .engines
        .iter()
        .map(|e| {
            block_classes
                .binary_search(&e.engine_block_size)
                .expect("listed")
        })
        .collect();

    // Load every request.
    let mut held = Vec::new();
    let mut request = TraceRequest::default();
    let mut rng = SeededRng::new(settings.seed);
    let mut poisson_clock = 0.0f64;
    while reader.next_into(&mut request)? {
        let prompt_tokens =
            u32::try_from(prompt_tokens(unit, request.prompt_len).max(1)).unwrap_or(u32::MAX);
        let base = match &settings.arrivals {
            Arrivals::Trace { speedup } => {
                let Some(ns) = request.arrival_ns else {
                    return Err(ReplayError::Timing(format!(
                        "line {}: the trace has no arrival times; pass --rate R (Poisson) or --concurrency N (closed loop)",
                        request.line
                    )));
                };
                (ns as f64 / speedup).round() as u64
            }
            Arrivals::Poisson { rate } => {
                poisson_clock += -(1.0 - rng.unit_f64()).ln() / rate;
                (poisson_clock * 1e9).round() as u64
            }
            Arrivals::Closed { .. } => 0,
        };
        let engine_hashes = block_classes
            .iter()
            .map(|eb| engine_hashes(format, &request, block_size, prompt_tokens, *eb))
            .collect();
        let output = request
            .output_tokens
            .unwrap_or(settings.default_output_tokens)
            .max(1);
        held.push(Held {
            line: request.line,
            prompt: std::mem::take(&mut request.prompt),
            blocks: request.blocks.clone(),
            block_ids: request.block_ids.clone(),
            prompt_len: request.prompt_len,
            prompt_tokens,
            output_tokens: u32::try_from(output).unwrap_or(u32::MAX),
            session: request.session,
            parent: request.parent_seq.map(|p| p as usize - 1),
            engine_hashes,
            base_arrival_ns: base,
            arrival_ns: base,
            endpoint: None,
            constrained: false,
            queued_at_router: false,
            finish_ns: None,
            children: Vec::new(),
        });
    }

    let mut sim = Sim {
        settings,
        class_of,
        unit,
        block_size,
        engines: settings.engines.iter().cloned().map(Engine::new).collect(),
        step_generation: vec![0; n],
        snapshot: vec![EngineStatus::default(); n],
        inflight_tokens: vec![0; n],
        table: EndpointTable::new(settings.endpoints.iter().cloned()),
        events: BinaryHeap::new(),
        order: 0,
        router_queue: VecDeque::new(),
        router_queued: 0,
        too_long: 0,
        unavailable: vec![false; n],
        stats: StatsBuilder::new(n, Unit::Tokens),
        ttft: latency_histogram(),
        tpot: latency_histogram(),
        e2e: latency_histogram(),
        queue: latency_histogram(),
        sums: [0; 4],
        counts: [0; 4],
        per_endpoint: vec![(0, 0); n],
        prompt_tokens_done: 0,
        hit_tokens_done: 0,
        output_tokens_done: 0,
        first_arrival: None,
        last_finish: 0,
        next_closed: 0,
        records: requests_out.is_some().then(Vec::new),
        held,
    };
    sim.run(&mut Plugins { matcher, detector })?;
    let report = sim.report();
    if let (Some(out), Some(records)) = (requests_out, sim.records.take()) {
        for record in records {
            serde_json::to_writer(&mut *out, &record)
                .and_then(|()| out.write_all(b"\n").map_err(serde_json::Error::io))
                .map_err(|e| ReplayError::Timing(format!("cannot write --requests-out: {e}")))?;
        }
    }
    Ok(report)
}

impl Sim<'_> {
    fn push(&mut self, time: u64, event: Event) {
        self.order += 1;
        self.events.push(Reverse((time, self.order, event)));
    }

    fn data(&self, index: usize) -> RequestData<'_> {
        let h = &self.held[index];
        RequestData {
            id: index as u64 + 1,
            arrival_ns: h.arrival_ns,
            prompt: &h.prompt,
            block_hashes: &h.blocks,
            block_ids: Some(&h.block_ids),
            block_size: self.block_size,
            unit: self.unit,
            prompt_len: h.prompt_len,
            output_tokens: Some(u64::from(h.output_tokens)),
            session_id: h.session,
            parent_id: h.parent.map_or(0, |p| p as u64 + 1),
        }
    }

    fn run(&mut self, plugins: &mut Plugins<'_>) -> Result<(), ReplayError> {
        plugins
            .matcher
            .add_endpoints(&self.table)
            .map_err(|source| ReplayError::Plugin {
                location: "start".into(),
                source,
            })?;
        // Schedule the first arrivals.
        match self.settings.arrivals {
            Arrivals::Closed { concurrency } => {
                for _ in 0..concurrency.min(self.held.len()) {
                    self.release_next_closed(0);
                }
            }
            _ => {
                for index in 0..self.held.len() {
                    match self.held[index].parent {
                        Some(parent) if self.settings.respect_parents => {
                            self.held[parent].children.push(index)
                        }
                        _ => {
                            let at = self.held[index].base_arrival_ns;
                            self.push(at, Event::Arrival(index));
                        }
                    }
                }
            }
        }
        if self.settings.metrics_interval_ns > 0 {
            self.push(0, Event::Refresh);
        }
        while let Some(Reverse((now, _, event))) = self.events.pop() {
            match event {
                Event::Refresh => {
                    let fresh: Vec<EngineStatus> =
                        self.engines.iter().map(Engine::status).collect();
                    let changed = fresh != self.snapshot;
                    self.snapshot = fresh;
                    self.drain_router_queue(now, plugins)?;
                    // Keep refreshing while something is left to happen, or while a refresh
                    // can still change what the router sees.
                    if !self.events.is_empty() || (changed && !self.router_queue.is_empty()) {
                        self.push(now + self.settings.metrics_interval_ns, Event::Refresh);
                    }
                }
                Event::Arrival(index) => {
                    self.held[index].arrival_ns = now;
                    self.first_arrival.get_or_insert(now);
                    let (prompt, output) = (
                        self.held[index].prompt_tokens,
                        self.held[index].output_tokens,
                    );
                    if !self.engines.iter().any(|e| e.can_ever_fit(prompt, output)) {
                        // Longer than any engine's whole KV cache: it could only wait forever.
                        self.too_long += 1;
                        self.reject(index, now);
                    } else if !self.router_queue.is_empty() {
                        self.enter_router_queue(index);
                    } else {
                        self.route(index, now, plugins)?;
                    }
                }
                Event::Step(pos, generation) => {
                    if generation != self.step_generation[pos] {
                        continue;
                    }
                    let finished = self.engines[pos].finish_step(now);
                    if let Some(end) = self.engines[pos].step_end() {
                        self.step_generation[pos] += 1;
                        let generation = self.step_generation[pos];
                        self.push(end, Event::Step(pos, generation));
                    }
                    for sequence in finished {
                        self.complete(sequence, pos, now, plugins.matcher)?;
                    }
                    self.drain_router_queue(now, plugins)?;
                }
            }
        }
        // Nothing is left to happen, so nothing can free an endpoint for whatever still
        // waits at the router (its detector never clears): reject it rather than hang.
        while let Some(index) = self.router_queue.pop_front() {
            self.reject(index, self.last_finish);
        }
        Ok(())
    }

    fn enter_router_queue(&mut self, index: usize) {
        if !self.held[index].queued_at_router {
            self.held[index].queued_at_router = true;
            self.router_queued += 1;
        }
        self.router_queue.push_back(index);
    }

    fn drain_router_queue(
        &mut self,
        now: u64,
        plugins: &mut Plugins<'_>,
    ) -> Result<(), ReplayError> {
        while let Some(index) = self.router_queue.pop_front() {
            if !self.try_route(index, now, plugins)? {
                self.router_queue.push_front(index);
                break;
            }
        }
        Ok(())
    }

    /// Routes an arriving request, or queues or rejects it.
    fn route(
        &mut self,
        index: usize,
        now: u64,
        plugins: &mut Plugins<'_>,
    ) -> Result<(), ReplayError> {
        if !self.try_route(index, now, plugins)? {
            match self.settings.when_unavailable {
                WhenUnavailable::Queue => self.enter_router_queue(index),
                WhenUnavailable::Reject | WhenUnavailable::FailOpen => self.reject(index, now),
            }
        }
        Ok(())
    }

    /// One routing decision; `false` when no endpoint could take the request.
    fn try_route(
        &mut self,
        index: usize,
        now: u64,
        plugins: &mut Plugins<'_>,
    ) -> Result<bool, ReplayError> {
        let live = self.settings.metrics_interval_ns == 0;
        for pos in 0..self.engines.len() {
            let status = if live {
                self.engines[pos].status()
            } else {
                self.snapshot[pos]
            };
            self.table.set_load(
                pos,
                EndpointLoad {
                    running: status.running,
                    waiting: status.waiting,
                    kv_blocks_used: status.kv_blocks_used,
                    kv_blocks_total: status.kv_blocks_total,
                    inflight_prompt_tokens: self.inflight_tokens[pos],
                },
            );
        }
        let location = format!("request {} (line {})", index + 1, self.held[index].line);
        let plugin_error = |source| ReplayError::Plugin {
            location: location.clone(),
            source,
        };
        let mut flags = std::mem::take(&mut self.unavailable);
        match plugins.detector.as_deref_mut() {
            Some(detector) => detector
                .detect(&self.table, &mut flags)
                .map_err(plugin_error)?,
            None => flags.fill(false),
        }
        let constrained = flags.contains(&true);
        if flags.iter().all(|f| *f) && self.settings.when_unavailable == WhenUnavailable::FailOpen {
            flags.fill(false);
        }
        let mut chosen = if flags.iter().all(|f| *f) {
            None
        } else {
            let data = self.data(index);
            plugins
                .matcher
                .match_request(&data, &self.table, &flags)
                .map_err(plugin_error)?
        };
        let fail_open = self.settings.when_unavailable == WhenUnavailable::FailOpen;
        if chosen.is_none() && fail_open && flags.contains(&true) {
            // Nothing among the available endpoints: fail open lets the matcher choose
            // among all of them.
            flags.fill(false);
            let data = self.data(index);
            chosen = plugins
                .matcher
                .match_request(&data, &self.table, &flags)
                .map_err(plugin_error)?;
        }
        self.unavailable = flags;
        self.held[index].constrained = constrained;
        let Some(pos) = chosen else { return Ok(false) };
        let held = &self.held[index];
        if !self.engines[pos].can_ever_fit(held.prompt_tokens, held.output_tokens) {
            // The matcher chose an engine too small for it (possible in mixed fleets).
            self.too_long += 1;
            self.reject(index, now);
            return Ok(true);
        }
        let data = self.data(index);
        plugins
            .matcher
            .update(&data, &self.table, pos)
            .map_err(plugin_error)?;
        let held = &mut self.held[index];
        held.endpoint = Some(pos);
        self.inflight_tokens[pos] += u64::from(held.prompt_tokens);
        let hashes = std::mem::take(&mut held.engine_hashes[self.class_of[pos]]);
        let sequence = Sequence::new(index, held.prompt_tokens, held.output_tokens, hashes);
        if let Some(end) = self.engines[pos].enqueue(sequence, now) {
            self.step_generation[pos] += 1;
            let generation = self.step_generation[pos];
            self.push(end, Event::Step(pos, generation));
        }
        Ok(true)
    }

    fn reject(&mut self, index: usize, now: u64) {
        let held = &self.held[index];
        self.stats.reject(held.constrained, held.parent.is_some());
        self.held[index].finish_ns = Some(now);
        self.after_done(index, now);
    }

    fn complete(
        &mut self,
        sequence: Sequence,
        pos: usize,
        now: u64,
        matcher: &mut MatcherInstance,
    ) -> Result<(), ReplayError> {
        let index = sequence.request;
        let data = self.data(index);
        let endpoint_index = self.table.index(pos);
        matcher
            .on_complete(&data, endpoint_index)
            .map_err(|source| ReplayError::Plugin {
                location: format!("request {} (line {})", index + 1, self.held[index].line),
                source,
            })?;
        let held = &self.held[index];
        let arrival = held.arrival_ns;
        let hit = sequence.hit_tokens.unwrap_or(0);
        let first_token = sequence.first_token_ns.unwrap_or(now);
        let scheduled = sequence.first_scheduled_ns.unwrap_or(now);
        let us = |ns: u64| ns / 1000;
        let samples = [
            Some(us(first_token - arrival)),
            (held.output_tokens > 1)
                .then(|| us((now - first_token) / u64::from(held.output_tokens - 1))),
            Some(us(now - arrival)),
            Some(us(scheduled - arrival)),
        ];
        for (slot, sample) in samples.into_iter().enumerate() {
            if let Some(value) = sample {
                let histogram = match slot {
                    0 => &mut self.ttft,
                    1 => &mut self.tpot,
                    2 => &mut self.e2e,
                    _ => &mut self.queue,
                };
                histogram.saturating_record(value);
                self.sums[slot] += u128::from(value);
                self.counts[slot] += 1;
            }
        }
        let same_as_parent = held.parent.map(|p| self.held[p].endpoint == Some(pos));
        self.stats.route(
            pos,
            u64::from(held.prompt_tokens),
            u64::from(hit),
            held.constrained,
            same_as_parent,
        );
        self.per_endpoint[pos].0 += 1;
        self.per_endpoint[pos].1 += u64::from(held.prompt_tokens);
        self.prompt_tokens_done += u128::from(held.prompt_tokens);
        self.hit_tokens_done += u128::from(hit);
        self.output_tokens_done += u128::from(held.output_tokens);
        self.inflight_tokens[pos] -= u64::from(held.prompt_tokens);
        self.last_finish = self.last_finish.max(now);
        if let Some(records) = &mut self.records {
            records.push(RequestLine {
                id: index as u64 + 1,
                line: held.line,
                arrival_s: round6(arrival as f64 / 1e9),
                endpoint: Some(self.settings.endpoints[pos].clone()),
                prompt_tokens: held.prompt_tokens,
                hit_tokens: hit,
                queue_ms: round6((scheduled - arrival) as f64 / 1e6),
                ttft_ms: round6((first_token - arrival) as f64 / 1e6),
                finish_s: round6(now as f64 / 1e9),
            });
        }
        self.held[index].finish_ns = Some(now);
        self.after_done(index, now);
        Ok(())
    }

    /// A request is done (finished or rejected): release its children, or the next one.
    fn after_done(&mut self, index: usize, now: u64) {
        if let Arrivals::Closed { .. } = self.settings.arrivals {
            self.release_next_closed(now);
            return;
        }
        let children = std::mem::take(&mut self.held[index].children);
        for child in children {
            let at = self.held[child]
                .base_arrival_ns
                .max(now + self.settings.think_time_ns);
            self.push(at, Event::Arrival(child));
        }
    }

    fn release_next_closed(&mut self, now: u64) {
        if self.next_closed < self.held.len() {
            let index = self.next_closed;
            self.next_closed += 1;
            self.push(now, Event::Arrival(index));
        }
    }

    fn report(&mut self) -> Report {
        let stats = std::mem::replace(&mut self.stats, StatsBuilder::new(0, Unit::Tokens));
        let mut report = stats.finish();
        let start = self.first_arrival.unwrap_or(0);
        let makespan_ns = self.last_finish.saturating_sub(start);
        let seconds = makespan_ns as f64 / 1e9;
        let per_second = |tokens: u128| {
            if seconds > 0.0 {
                round6(tokens as f64 / seconds)
            } else {
                0.0
            }
        };
        let end = self.last_finish;
        report.timed = Some(TimedReport {
            ttft: latency(&self.ttft, self.sums[0], self.counts[0]),
            tpot: latency(&self.tpot, self.sums[1], self.counts[1]),
            e2e: latency(&self.e2e, self.sums[2], self.counts[2]),
            queue: latency(&self.queue, self.sums[3], self.counts[3]),
            throughput: Throughput {
                input_tokens_per_s: per_second(self.prompt_tokens_done),
                output_tokens_per_s: per_second(self.output_tokens_done),
            },
            makespan_s: round6(seconds),
            hit_ratio: if self.prompt_tokens_done == 0 {
                0.0
            } else {
                round6(self.hit_tokens_done as f64 / self.prompt_tokens_done as f64)
            },
            router_queued: self.router_queued,
            too_long: self.too_long,
            per_endpoint: self
                .engines
                .iter()
                .enumerate()
                .map(|(pos, engine)| EndpointTimed {
                    name: self.settings.endpoints[pos].clone(),
                    requests: self.per_endpoint[pos].0,
                    prompt_tokens: self.per_endpoint[pos].1,
                    peak_kv_usage: round6(engine.peak_usage),
                    mean_kv_usage: round6(engine.mean_usage(end)),
                    evictions: engine.evictions(),
                    preemptions: engine.preemptions,
                })
                .collect(),
        });
        report
    }
}

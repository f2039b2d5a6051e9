//! `routerlab engine`: an OpenAI-compatible engine without a GPU. It runs the replay's
//! engine model (prefix cache, queue, chunked prefill, step time) against the wall clock,
//! streams each request's tokens at the model's pace, and reports vLLM's metric names, so
//! a router (ours or anyone's) can be tested at scale on one machine.
//!
//! One task owns the model; HTTP handlers hand it requests over a channel and receive
//! their tokens over another. Model time is wall time since start × `speedup`. Within a
//! run of identical decode steps the model plans as one, the task still wakes at every
//! step and sends each running request its token, so streams are paced step by step.
//! `instant` skips the model: every request is answered at once (router overhead
//! benchmarks measure the router, not the engine).
//!
//! With a [`Role`] it is one pool's engine of a disaggregated fleet, in vLLM's
//! disaggregated-serving protocol: a prefill engine answers a request whose
//! `kv_transfer_params` say `do_remote_decode` with one token and the parameters a decode
//! engine pulls the KV with (`do_remote_prefill`, `remote_engine_id`, `remote_block_ids`,
//! `remote_request_id`, `remote_host`, `remote_port`, `tp_size`, as vLLM's NIXL connector
//! returns them); a decode engine takes a request that carries them with its prompt's KV
//! present (the engine model's moved-in sequence: blocks held, no prefill time). Requests
//! without them are served whole by either.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use routerlab_engine::{Engine, EngineConfig, Sequence};
use routerlab_trace::blocks::text_engine_chain;
use tokio::sync::mpsc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::LiveError;
use crate::http::{self, Body, ChannelBody};
use crate::openai::{self, Api};

/// An engine's pool in a disaggregated fleet: the ABI's role (`Aggregated` serves whole
/// requests and ignores `kv_transfer_params`; `Prefill` prefills what asks for a remote
/// decode and says where to pull its KV from; `Decode` takes in the KV of what was
/// prefilled remotely; any other value serves as `Aggregated`).
pub use routerlab_core::Role;

/// How a simulated engine runs.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Its pool.
    pub role: Role,
    /// The model of the engine.
    pub config: EngineConfig,
    /// Model time per wall time (2 = twice as fast as the model says).
    pub speedup: f64,
    /// Answer every request at once, without the model.
    pub instant: bool,
    /// The model name it serves (`/v1/models`, metric labels).
    pub model: String,
    /// Output tokens when a request gives no `max_tokens`.
    pub default_max_tokens: u32,
    /// Where its KV events go, if they are published.
    pub kv_events: Option<Arc<crate::kv_events::Publisher>>,
}

/// What the model tells a request's stream.
#[derive(Debug)]
enum Tokens {
    /// `n` more tokens.
    More(u32),
    /// All generated; this many prompt tokens came from the prefix cache.
    Done { cached: u32 },
    /// It can never run here (longer than the whole KV cache).
    Refused(String),
}

/// A request handed to the model.
struct Submit {
    prompt_tokens: u32,
    output_tokens: u32,
    chain: Vec<u64>,
    /// Its KV was computed by a prefill engine.
    moved_in: bool,
    /// The LoRA adapter its `model` names (0: the base model).
    adapter: u32,
    tokens: mpsc::UnboundedSender<Tokens>,
}

/// Figures `/metrics` reports, updated by the model task after every event.
#[derive(Default)]
struct Gauges {
    running: AtomicU64,
    waiting: AtomicU64,
    kv_used: AtomicU64,
    kv_total: AtomicU64,
    requests: AtomicU64,
    /// Streams whose reader went away before the end (the client, or a router that
    /// cancelled its upstream request).
    cancelled: AtomicU64,
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    /// Prefills handed on to a decode engine (prefill role).
    remote_decodes: AtomicU64,
    /// Requests taken in with their KV computed elsewhere (decode role).
    remote_prefills: AtomicU64,
    /// The adapters of the running and of the waiting requests (with LoRA slots).
    lora: std::sync::Mutex<(Vec<u32>, Vec<u32>)>,
}

struct Shared {
    settings: EngineSettings,
    /// Where it listens: what a decode engine is told to pull KV from.
    address: std::net::SocketAddr,
    submit: mpsc::UnboundedSender<Submit>,
    gauges: Gauges,
    next_id: AtomicU64,
    /// The LoRA adapters requests have named, by `model` (with the config's `lora` slots).
    adapters: std::sync::Mutex<routerlab_trace::adapters::Adapters>,
}

/// Whether `config` can be a live engine's: valid, and without a tier only a fleet in one
/// process can share.
pub fn check_config(config: &routerlab_engine::EngineConfig) -> Result<(), LiveError> {
    config.validate().map_err(LiveError::Settings)?;
    if config.shared_tier.is_some() {
        return Err(LiveError::Settings(
            "engine `shared_tier` is a store the fleet's engines share, which only the timed replay models (one `routerlab engine` process is one engine; give it a `host_tier`)"
                .into(),
        ));
    }
    Ok(())
}

/// Runs a simulated engine on `listener` (bound already) until the process ends.
pub async fn run_on(
    listener: std::net::TcpListener,
    settings: EngineSettings,
) -> Result<(), LiveError> {
    check_config(&settings.config)?;
    if !(settings.speedup.is_finite() && settings.speedup > 0.0) {
        return Err(LiveError::Settings(format!(
            "the model time per wall time (speedup) must be a positive number, not {}",
            settings.speedup
        )));
    }
    let address = listener.local_addr().map_err(LiveError::Listen)?;
    let listener = http::from_std(listener)?;
    let (submit, requests) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        settings,
        address,
        submit,
        gauges: Gauges::default(),
        next_id: AtomicU64::new(1),
        adapters: Default::default(),
    });
    shared.gauges.kv_total.store(
        u64::from(shared.settings.config.num_gpu_blocks),
        Ordering::Relaxed,
    );
    tokio::spawn(model_task(shared.clone(), requests));
    http::serve(listener, http::HEADER_READ_TIMEOUT, move |request| {
        let shared = shared.clone();
        async move { handle(shared, request).await }
    })
    .await;
    Ok(())
}

async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_owned();
    match (request.method(), path.as_str()) {
        (&Method::GET, "/health") => http::json(StatusCode::OK, &serde_json::json!({})),
        (&Method::GET, "/v1/models") => http::json(
            StatusCode::OK,
            &serde_json::json!({"object": "list", "data": [
                {"id": shared.settings.model, "object": "model", "owned_by": "routerlab"}]}),
        ),
        (&Method::GET, "/metrics") => http::openmetrics(metrics_text(&shared)),
        (&Method::POST, _) => match Api::of_path(&path) {
            Some(api) => complete(shared, api, request).await,
            None => http::error(StatusCode::NOT_FOUND, &format!("no endpoint {path}")),
        },
        _ => http::error(StatusCode::NOT_FOUND, &format!("no endpoint {path}")),
    }
}

/// The engine's figures of one moment, under vLLM's names (and the older name of the KV
/// usage gauge, which some routers still read), as `prometheus-client` encodes them.
#[derive(Debug)]
struct Figures {
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
fn metrics_text(shared: &Shared) -> String {
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
fn lora_info(shared: &Shared) -> Option<([(&'static str, String); 3], f64)> {
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

async fn complete(shared: Arc<Shared>, api: Api, request: Request<Incoming>) -> Response<Body> {
    let body = match http::read_body(request).await {
        Ok(body) => body,
        Err(response) => return *response,
    };
    let inference = match openai::parse(api, &body) {
        Ok(inference) => inference,
        Err(message) => return http::error(StatusCode::BAD_REQUEST, &message),
    };
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    // With LoRA slots, a `model` other than the one served names an adapter (as vLLM
    // serves its `--lora-modules` by name), and the answer names it back.
    let lora = shared.settings.config.lora.is_some();
    let adapter = if lora && !inference.model.is_empty() && inference.model != shared.settings.model
    {
        let long = inference.model.len() > routerlab_trace::adapters::MAX_ADAPTER_NAME;
        let named = (!long)
            .then(|| {
                shared
                    .adapters
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .number(&inference.model)
            })
            .flatten();
        match named {
            Some(n) => n,
            None => {
                return http::error(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "model `{}`: this engine serves at most {} adapters, named in at most {} bytes",
                        inference.model.chars().take(64).collect::<String>(),
                        routerlab_trace::adapters::MAX_ADAPTERS,
                        routerlab_trace::adapters::MAX_ADAPTER_NAME
                    ),
                );
            }
        }
    } else {
        0
    };
    let model = if adapter == 0 {
        shared.settings.model.clone()
    } else {
        inference.model.clone()
    };
    let prompt_tokens =
        u32::try_from(routerlab_core::Unit::Bytes.tokens(inference.prompt.len() as u64))
            .unwrap_or(u32::MAX);
    let leg = match disaggregated_leg(shared.settings.role, inference.kv_transfer_params.as_ref()) {
        Ok(leg) => leg,
        Err(message) => return http::error(StatusCode::BAD_REQUEST, &message),
    };
    // A remote decode's prefill samples one token, whatever was asked.
    let output_tokens = match leg {
        Leg::PrefillForRemote => 1,
        _ => inference
            .max_tokens
            .unwrap_or(shared.settings.default_max_tokens)
            .max(1),
    };
    let g = &shared.gauges;
    match leg {
        Leg::PrefillForRemote => g.remote_decodes.fetch_add(1, Ordering::Relaxed),
        Leg::MovedIn => g.remote_prefills.fetch_add(1, Ordering::Relaxed),
        Leg::Whole => 0,
    };
    let handoff = (leg == Leg::PrefillForRemote).then(|| {
        handoff_params(
            &shared,
            id,
            prompt_tokens.div_ceil(shared.settings.config.engine_block_size),
        )
    });
    g.prompt_tokens
        .fetch_add(u64::from(prompt_tokens), Ordering::Relaxed);
    if shared.settings.instant {
        g.requests.fetch_add(1, Ordering::Relaxed);
        g.generation_tokens
            .fetch_add(u64::from(output_tokens), Ordering::Relaxed);
        let text = openai::filler(output_tokens);
        let usage = openai::usage(u64::from(prompt_tokens), 0, u64::from(output_tokens));
        return if inference.stream {
            let events = openai::event(api, id, &model, &text, Some(&usage)) + openai::DONE;
            sse(http::full(events))
        } else {
            http::json(
                StatusCode::OK,
                &with_handoff(openai::response(api, id, &model, &text, usage), handoff),
            )
        };
    }
    let (tokens, mut stream) = mpsc::unbounded_channel();
    let chain = text_engine_chain(&inference.prompt, shared.settings.config.engine_block_size);
    let submitted = shared.submit.send(Submit {
        prompt_tokens,
        output_tokens,
        chain,
        moved_in: leg == Leg::MovedIn,
        adapter,
        tokens,
    });
    if submitted.is_err() {
        return http::error(StatusCode::SERVICE_UNAVAILABLE, "the engine model stopped");
    }
    if inference.stream {
        // The first message decides the status: a refusal is an error response, not an
        // empty stream.
        let first = stream.recv().await;
        if let Some(Tokens::Refused(message)) = &first {
            return http::error(StatusCode::BAD_REQUEST, message);
        }
        let (tx, body) = ChannelBody::channel(16);
        let counter = shared.clone();
        tokio::spawn(async move {
            let mut next = first;
            let mut generated = 0u32;
            while let Some(message) = next {
                let chunk = match message {
                    Tokens::More(n) => {
                        generated += n;
                        openai::event(api, id, &model, &openai::filler(n), None)
                    }
                    Tokens::Done { cached } => {
                        let usage = openai::usage(
                            u64::from(prompt_tokens),
                            u64::from(cached),
                            u64::from(generated),
                        );
                        openai::event(api, id, &model, "", Some(&usage)) + openai::DONE
                    }
                    Tokens::Refused(_) => break,
                };
                // A reader that went away drops the body: stop sending.
                if tx.send(Bytes::from(chunk)).await.is_err() {
                    counter.gauges.cancelled.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                next = stream.recv().await;
            }
        });
        return sse(body);
    }
    let (mut generated, mut cached_tokens) = (0u32, 0u32);
    while let Some(message) = stream.recv().await {
        match message {
            Tokens::More(n) => generated += n,
            Tokens::Done { cached } => {
                cached_tokens = cached;
                break;
            }
            Tokens::Refused(message) => return http::error(StatusCode::BAD_REQUEST, &message),
        }
    }
    let usage = openai::usage(
        u64::from(prompt_tokens),
        u64::from(cached_tokens),
        u64::from(generated),
    );
    let text = openai::filler(generated);
    http::json(
        StatusCode::OK,
        &with_handoff(openai::response(api, id, &model, &text, usage), handoff),
    )
}

/// Which leg of a disaggregated request a request is, to an engine of `role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leg {
    /// Served whole (no `kv_transfer_params`, or an aggregated engine).
    Whole,
    /// A prefill engine's: one token, its KV kept for a decode engine.
    PrefillForRemote,
    /// A decode engine's: the KV comes from the prefill engine named.
    MovedIn,
}

/// The leg `params` ask for of an engine of `role`, or why they are malformed.
fn disaggregated_leg(role: Role, params: Option<&serde_json::Value>) -> Result<Leg, String> {
    let Some(params) = params else {
        return Ok(Leg::Whole);
    };
    let Some(params) = params.as_object() else {
        return Err("`kv_transfer_params` must be an object".into());
    };
    let flag = |key: &str| params.get(key).and_then(serde_json::Value::as_bool) == Some(true);
    match role {
        Role::Prefill if flag("do_remote_decode") => Ok(Leg::PrefillForRemote),
        Role::Decode if flag("do_remote_prefill") => {
            for (key, ok) in [
                (
                    "remote_engine_id",
                    params
                        .get("remote_engine_id")
                        .is_some_and(|v| v.is_string()),
                ),
                (
                    "remote_host",
                    params.get("remote_host").is_some_and(|v| v.is_string()),
                ),
                (
                    "remote_port",
                    params.get("remote_port").is_some_and(|v| v.is_u64()),
                ),
            ] {
                if !ok {
                    return Err(format!(
                        "`kv_transfer_params` asks for a remote prefill but has no valid `{key}`"
                    ));
                }
            }
            Ok(Leg::MovedIn)
        }
        _ => Ok(Leg::Whole),
    }
}

/// What a prefill engine answers a decode engine's pull with: where the KV is.
fn handoff_params(shared: &Shared, id: u64, blocks: u32) -> serde_json::Value {
    serde_json::json!({
        "do_remote_prefill": true,
        "do_remote_decode": false,
        "remote_block_ids": (0..blocks).collect::<Vec<u32>>(),
        "remote_engine_id": format!("routerlab-engine-{}", shared.address),
        "remote_request_id": format!("cmpl-{id}"),
        "remote_host": shared.address.ip().to_string(),
        "remote_port": shared.address.port(),
        "tp_size": 1,
    })
}

/// `response` with the prefill's `kv_transfer_params`, when it has them.
fn with_handoff(
    mut response: serde_json::Value,
    handoff: Option<serde_json::Value>,
) -> serde_json::Value {
    if let (Some(params), Some(object)) = (handoff, response.as_object_mut()) {
        object.insert("kv_transfer_params".into(), params);
    }
    response
}

fn sse(body: Body) -> Response<Body> {
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .expect("a valid response")
}

/// A request inside the model: where its tokens go and how many it was sent.
struct Active {
    tokens: mpsc::UnboundedSender<Tokens>,
    sent: u32,
}

/// Owns the engine model: admits requests, steps it at the wall-clock times it says, and
/// sends each request its tokens.
async fn model_task(shared: Arc<Shared>, mut requests: mpsc::UnboundedReceiver<Submit>) {
    let origin = Instant::now();
    let speedup = shared.settings.speedup;
    let model_now = || (origin.elapsed().as_nanos() as f64 * speedup) as u64;
    let wall_at = |model_ns: u64| origin + Duration::from_nanos((model_ns as f64 / speedup) as u64);
    let mut model = Model {
        engine: Engine::new(shared.settings.config.clone()),
        active: HashMap::new(),
        next_handle: 0,
        shared: shared.clone(),
    };
    let publisher = shared.settings.kv_events.clone();
    if publisher.is_some() {
        model.engine.record_kv_events();
    }
    loop {
        let wake = next_boundary(&model.engine, model_now());
        let sleep = wake.map(|at| tokio::time::sleep_until(wall_at(at).into()));
        tokio::select! {
            submit = requests.recv() => {
                let Some(submit) = submit else { return };
                // Whatever was due happens first, so the model's time only moves forward.
                let now = model_now();
                model.advance(now);
                model.admit(submit, now);
            }
            () = async { sleep.expect("a boundary").await }, if sleep.is_some() => {
                model.advance(model_now());
            }
        }
        if let Some(publisher) = &publisher {
            let mut events = Vec::new();
            model.engine.take_kv_events(&mut events);
            if !events.is_empty() {
                publisher.publish(events);
            }
        }
        let status = model.engine.status();
        let g = &shared.gauges;
        g.running.store(status.running, Ordering::Relaxed);
        g.waiting.store(status.waiting, Ordering::Relaxed);
        g.kv_used.store(status.kv_blocks_used, Ordering::Relaxed);
        if let Some(adapters) = model.engine.lora_adapters()
            && let Ok(mut lora) = g.lora.lock()
        {
            *lora = adapters;
        }
    }
}

/// The engine model and the requests inside it.
struct Model {
    engine: Engine,
    active: HashMap<usize, Active>,
    next_handle: usize,
    shared: Arc<Shared>,
}

impl Model {
    /// Takes a request in at model time `now`, or refuses one that can never fit.
    fn admit(&mut self, submit: Submit, now: u64) {
        if !self
            .engine
            .can_ever_fit(submit.prompt_tokens, submit.output_tokens)
        {
            let _ = submit.tokens.send(Tokens::Refused(format!(
                "{} prompt and {} output tokens exceed this engine's whole KV cache",
                submit.prompt_tokens, submit.output_tokens
            )));
            return;
        }
        let handle = self.next_handle;
        self.next_handle += 1;
        self.active.insert(
            handle,
            Active {
                tokens: submit.tokens,
                sent: 0,
            },
        );
        let sequence = if submit.moved_in {
            Sequence::transferred(
                handle,
                submit.prompt_tokens,
                submit.output_tokens,
                submit.chain,
            )
        } else {
            Sequence::new(
                handle,
                submit.prompt_tokens,
                submit.output_tokens,
                submit.chain,
            )
        };
        let sequence = sequence.with_adapter(submit.adapter);
        self.engine.enqueue(sequence, now);
    }

    /// Runs the model up to `now`: every step that ended by then, in order, and within a
    /// run of identical decode steps the tokens of the steps done so far.
    fn advance(&mut self, now: u64) {
        while let Some(end) = self.engine.step_end()
            && end <= now
        {
            for finished in self.engine.finish_step(end) {
                if let Some(mut request) = self.active.remove(&finished.request) {
                    send_up_to(
                        &mut request,
                        finished.generated,
                        &self.shared.gauges.generation_tokens,
                    );
                    let cached = finished.hit_tokens.unwrap_or(0);
                    let _ = request.tokens.send(Tokens::Done { cached });
                    self.shared.gauges.requests.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.send_progress(0);
        }
        if let Some((start, step, steps)) = self.engine.step_in_flight()
            && steps > 1
        {
            // Each running request has one more token per step since the run began.
            let done = (now.saturating_sub(start) / step.max(1)).min(steps - 1);
            self.send_progress(done as u32);
        }
    }

    /// Sends each running request its tokens, `extra` steps past what the model recorded.
    fn send_progress(&mut self, extra: u32) {
        for sequence in self.engine.running() {
            if let Some(request) = self.active.get_mut(&sequence.request) {
                send_up_to(
                    request,
                    sequence.generated + extra,
                    &self.shared.gauges.generation_tokens,
                );
            }
        }
    }
}

/// Sends `request` the tokens it has not been sent of its first `generated`, counting them
/// in `counter` (`vllm:generation_tokens_total`) as they go out.
fn send_up_to(request: &mut Active, generated: u32, counter: &AtomicU64) {
    if generated > request.sent {
        let more = generated - request.sent;
        let _ = request.tokens.send(Tokens::More(more));
        counter.fetch_add(u64::from(more), Ordering::Relaxed);
        request.sent = generated;
    }
}

/// The next step boundary after `now`: the next single step's end inside a run of
/// identical steps, or the end of the step in flight.
fn next_boundary(engine: &Engine, now: u64) -> Option<u64> {
    let (start, step, steps) = engine.step_in_flight()?;
    let end = start + step * steps;
    if steps > 1 && step > 0 {
        let next = start + (now.saturating_sub(start) / step + 1) * step;
        if next < end {
            return Some(next);
        }
    }
    Some(end)
}

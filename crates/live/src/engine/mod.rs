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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use routerlab_engine::EngineConfig;
use routerlab_trace::blocks::text_engine_chain;
use tokio::sync::mpsc;

use crate::LiveError;
use crate::http::{self, Body, ChannelBody};
use crate::openai::{self, Api};

mod metrics;
mod model;
mod pd;

use metrics::metrics_text;
use model::model_task;
use pd::{Leg, disaggregated_leg, handoff_params, with_handoff};

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

fn sse(body: Body) -> Response<Body> {
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .expect("a valid response")
}

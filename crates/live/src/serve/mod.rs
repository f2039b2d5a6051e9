//! `routerlab serve`: the same plugins, in front of real engines.
//!
//! Each request becomes exactly the request a replay builds from a chat trace line: the
//! prompt (chat `messages` flattened as the chat format documents), its chain of
//! `block_size`-byte block hashes, a session (from the `x-session-id` header, else the
//! OpenAI `user` field; a request continues the previous one of its session), and its
//! arrival time. The detector sees the endpoints' statuses, the matcher picks, the request
//! is proxied, and the matcher learns the pick once the engine answered; the first body
//! bytes are its first token, the end of the body its completion. Statuses come from the
//! engines' Prometheus metrics, scraped every `metrics_interval`, plus the router's own
//! in-flight counts, always current. An endpoint whose scrapes fail `health.fails` times in
//! a row leaves the fleet (`remove_endpoints`) and comes back (`add_endpoints`) after
//! `health.passes` good ones ([`health`]).
//!
//! The plugins are called under one lock (tokio's, so a task waiting for it holds no
//! runtime thread), so calls on an instance stay serialised as the ABI requires; the
//! proxying itself runs outside it, concurrently. What the lock guards is `state` (no I/O,
//! unit-tested); `/metrics` is `metrics`. The plugins run on a thread of their own in this
//! process (`plugin_thread`) or, with [`Plugins::Isolated`], in a plugin host process
//! ([`crate::plugin_host`]) that a crash or a missed deadline only restarts: either way a
//! call waits at most its deadline, so no request waits without limit.

pub mod addresses;
mod decision_log;
pub mod health;
pub mod kv_index;
mod lora;
mod metrics;
mod mirror;
mod pd;
mod peers;
mod plugin_thread;
mod plugins;
mod routed;
mod scaling;
mod state;
#[cfg(test)]
mod tests;
mod tracked;

pub use decision_log::DecisionLogSettings;
pub use peers::PeerSettings;
pub use scaling::ServeScaling;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prometheus_client::metrics::histogram::Histogram;

use crate::LiveError;
use crate::http::{self, Body, BoxError};
use crate::openai::{self, Api};
use health::HealthRule;
pub use plugins::Plugins;
use routed::{Refusal, Routed};
use state::State;
use tracked::Tracked;

/// The header a client names its session with (else the body's `user`).
pub const SESSION_HEADER: &str = "x-session-id";
/// The header that marks a request as its session's last (`true` or `false`): the client
/// ends the session once it completes (ABI 1.6 `ends_session`, vllm-router's
/// `/finish_session`).
pub const SESSION_END_HEADER: &str = "x-session-end";
/// How long `/health` and `/metrics` wait for the plugins' lock before answering without it.
const STATUS_WAIT: Duration = Duration::from_millis(200);

/// The most bytes of a whole (non-streamed) answer the router holds before passing it on.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// The longest prompt `serve --tokenizer` tokenizes, bytes (about 250,000 tokens): a
/// tokenization holds about a hundred times its prompt's size while it runs. A longer one
/// is answered 413.
pub const MAX_TOKENIZED_PROMPT_BYTES: usize = 1 << 20;

/// Prompts tokenized at once; the others wait their turn, so tokenizing holds at most
/// this many times [`MAX_TOKENIZED_PROMPT_BYTES`]'s working memory.
pub const TOKENIZING_AT_ONCE: usize = 2;

/// The header the router adds to each response: the endpoint that served it (in a
/// disaggregated fleet, the decode endpoint).
pub const ENDPOINT_HEADER: &str = "x-routerlab-endpoint";

/// The header the router adds to each response of a disaggregated fleet: the endpoint that
/// prefilled it.
pub const PREFILL_ENDPOINT_HEADER: &str = "x-routerlab-prefill-endpoint";

/// What to do when a plugin call fails (an error, or a panic the SDK caught).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnPluginError {
    /// Answer 503 naming the plugin and its message.
    Reject,
    /// Route the request round robin over the healthy endpoints.
    RoundRobin,
}

/// How the router runs.
pub struct ServeSettings {
    /// The engines, `host:port` each (plain HTTP).
    pub endpoints: Vec<String>,
    /// Block size of the prompt's hash chain, bytes (as `replay --block-size`).
    pub block_size: u32,
    /// How often the engines' metrics are scraped (and their health checked).
    pub metrics_interval: Duration,
    /// How long one scrape may take, answer and body.
    pub scrape_timeout: Duration,
    /// When a failing engine leaves the fleet and when it comes back.
    pub health: HealthRule,
    /// Further endpoints to try when one fails before answering (refused, reset or closed
    /// the connection); a request whose answer had begun is never retried.
    pub retries: u32,
    /// How long an engine may take to answer a request's headers.
    pub upstream_timeout: Duration,
    /// What a failing plugin call does to the request.
    pub on_plugin_error: OnPluginError,
    /// A fleet split into pools: its first `prefill_endpoints` of `endpoints` prefill and
    /// hand the KV on, the rest decode (vLLM's disaggregated-serving proxy protocol); 0 =
    /// aggregated.
    pub prefill_endpoints: usize,
    /// The engines whose KV events are followed (`cached_prefix` answered from them).
    pub kv_events: Vec<kv_index::KvSubscription>,
    /// How a prompt becomes those engines' block keys when they are vLLM's
    /// (`--tokenizer`); `None`: `routerlab engine`'s text chain.
    pub kv_keys: Option<Arc<crate::vllm_keys::VllmKeys>>,
    /// The engine model whose forecasts answer a simulating matcher's `predict` (ABI 1.4),
    /// run over the router's mirror of each engine (`serve --engine-config`).
    pub engine_model: routerlab_engine::EngineConfig,
    /// The models the engines serve as their base (`serve --base-model`): a request whose
    /// `model` is another names a LoRA adapter (ABI 1.5); empty, adapters are not followed.
    pub base_models: Vec<String>,
    /// Where each routed request's decision and measurements go (`--decision-log`).
    pub decision_log: Option<DecisionLogSettings>,
    /// The other router replicas this one shares its state with (`--replica-sync`).
    pub peers: Option<PeerSettings>,
}

struct Shared {
    settings: ServeSettings,
    /// The last `/metrics` text, answered while a plugin call holds the state.
    last_metrics: Mutex<String>,
    state: tokio::sync::Mutex<State>,
    client: Client<HttpConnector, http_body_util::Full<Bytes>>,
    started: Instant,
    matcher: String,
    decisions: Histogram,
    /// Turns at the tokenizer ([`TOKENIZING_AT_ONCE`]).
    tokenizing: tokio::sync::Semaphore,
    /// The scaler, when one runs.
    scaling: Option<std::sync::Mutex<scaling::Scaling>>,
    /// Told at the first request: the scaler's clock starts.
    first_request: Arc<tokio::sync::Notify>,
    /// The decision log, when one is written.
    decision_log: Option<std::sync::Mutex<decision_log::DecisionLog>>,
    /// The peer replicas and what waits to be sent them, when state is shared.
    peers: Option<std::sync::Mutex<peers::Outbox>>,
}

impl Shared {
    /// The state's lock.
    async fn lock(&self) -> tokio::sync::MutexGuard<'_, State> {
        self.state.lock().await
    }

    /// The lock if it is free now.
    fn try_state(&self) -> Option<tokio::sync::MutexGuard<'_, State>> {
        self.state.try_lock().ok()
    }

    /// The lock if it can be had within `wait`: `/health` and `/metrics` answer even while
    /// a plugin call holds it (for at most its deadline).
    async fn lock_within(&self, wait: Duration) -> Option<tokio::sync::MutexGuard<'_, State>> {
        tokio::time::timeout(wait, self.lock()).await.ok()
    }

    /// The endpoint `routed` goes to: the plugins' decision the first time, then (after the
    /// endpoints `tried` failed before answering) the next healthy one of its phase's pool.
    async fn pick(&self, routed: &Routed, tried: &[usize]) -> Result<usize, Refusal> {
        let mut state = self.lock().await;
        if tried.is_empty() {
            if let Some(scaling) = &self.scaling {
                let prompt = routerlab_trace::blocks::prompt_tokens(
                    routerlab_core::Unit::Bytes,
                    routed.prompt.len() as u64,
                );
                let first = (scaling.lock())
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .arrived(prompt, routed.output_tokens);
                if first {
                    self.first_request.notify_one();
                }
            }
            let seen = self.decision_log.as_ref().map(|_| state.candidates());
            let started = Instant::now();
            let pick = state.decide(routed, self.now_ns(), self.settings.on_plugin_error);
            self.decisions.observe(started.elapsed().as_secs_f64());
            if let (Some(log), Some(seen), Ok(upstream)) = (&self.decision_log, seen, &pick) {
                // `random` picks uniformly among the endpoints it may choose.
                let propensity =
                    (self.matcher == "random").then(|| 1.0 / state.last_choices.max(1) as f64);
                let name = state.upstreams[*upstream].name.clone();
                log.lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .decided(routed, self.settings.block_size, seen, &name, propensity);
            }
            return pick;
        }
        state.next_untried(tried, routed.phase).ok_or_else(|| {
            Refusal(
                502,
                format!(
                    "no {}endpoint took the request: {} failed",
                    if routed.phase == routerlab_core::Phase::Prefill {
                        "prefill "
                    } else {
                        ""
                    },
                    names(&state, tried)
                ),
            )
        })
    }

    /// Posts `body` (JSON) to `path` of engine `name`, passing the client's `authorization`
    /// on; `Err` when it has not answered within the upstream timeout.
    async fn post(
        &self,
        name: &str,
        path: &str,
        authorization: Option<&hyper::header::HeaderValue>,
        body: Bytes,
    ) -> Result<
        Result<Response<Incoming>, hyper_util::client::legacy::Error>,
        tokio::time::error::Elapsed,
    > {
        let mut outgoing = Request::post(format!("http://{name}{path}"))
            .header("content-type", "application/json");
        if let Some(auth) = authorization {
            outgoing = outgoing.header("authorization", auth);
        }
        let outgoing = outgoing
            .body(http_body_util::Full::new(body))
            .expect("a valid request");
        tokio::time::timeout(
            self.settings.upstream_timeout,
            self.client.request(outgoing),
        )
        .await
    }

    /// Runs `f` on the decision log, when one is written.
    fn log(&self, f: impl FnOnce(&mut decision_log::DecisionLog)) {
        if let Some(log) = &self.decision_log {
            f(&mut log.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        }
    }

    /// Nanoseconds since the router started: the arrival and decision times plugins see.
    fn now_ns(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Runs the router on `listener` (bound already) until the process ends; with
/// `decode_plugins`, the decode pool's plugins of a disaggregated fleet (and `plugins` the
/// prefill pool's); with `scaling`, a scaler whose desired count it publishes.
pub async fn run_on(
    listener: std::net::TcpListener,
    settings: ServeSettings,
    plugins: Plugins,
    decode_plugins: Option<Plugins>,
    scaling: Option<ServeScaling>,
) -> Result<(), LiveError> {
    if settings.endpoints.is_empty() {
        return Err(LiveError::Settings(
            "serve needs at least one endpoint (--endpoints host:port,...)".into(),
        ));
    }
    let split = settings.prefill_endpoints;
    if decode_plugins.is_some() != (split > 0) || split >= settings.endpoints.len() {
        return Err(LiveError::Settings(format!(
            "a disaggregated fleet needs prefill and decode endpoints and a decode pool's plugins ({split} prefill of {} endpoints)",
            settings.endpoints.len()
        )));
    }
    let me = (listener.local_addr())
        .map_err(|e| LiveError::Settings(format!("the listening socket: {e}")))?
        .to_string();
    let listener = http::from_std(listener)?;
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new()).build(connector);
    let matcher = plugins.matcher_name().to_owned();
    let mut state = State::new(
        plugins,
        decode_plugins.map(|decode| (decode, split)),
        settings.block_size,
        settings.health,
    );
    state.set_engine_model(settings.engine_model.clone());
    state.set_base_models(settings.base_models.clone());
    if !settings.kv_events.is_empty() {
        state.set_kv_index(kv_index::KvIndex::start(
            &settings.kv_events,
            settings.kv_keys.clone(),
        )?);
    }
    let scaling = scaling.map(scaling::Scaling::new);
    let decision_log = match settings.decision_log.clone() {
        Some(log) => Some(std::sync::Mutex::new(
            decision_log::DecisionLog::open(log, &matcher).map_err(LiveError::Settings)?,
        )),
        None => None,
    };
    let first_request = Arc::new(tokio::sync::Notify::new());
    let shared = Arc::new(Shared {
        scaling: scaling.map(std::sync::Mutex::new),
        first_request: first_request.clone(),
        decision_log,
        peers: (settings.peers.clone()).map(|p| std::sync::Mutex::new(peers::Outbox::new(p, me))),
        settings,
        state: tokio::sync::Mutex::new(state),
        client,
        started: Instant::now(),
        matcher,
        decisions: metrics::decision_histogram(),
        last_metrics: Mutex::new(String::new()),
        tokenizing: tokio::sync::Semaphore::new(TOKENIZING_AT_ONCE),
    });
    tokio::spawn(health::scrape_loop(shared.clone()));
    tokio::spawn(scaling::tick_loop(shared.clone(), first_request));
    tokio::spawn(peers::run(shared.clone()));
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
        (&Method::POST, peers::SYNC_PATH) => peers::receive(shared, request).await,
        (&Method::GET, "/health") => match shared.lock_within(STATUS_WAIT).await {
            Some(state) if let Some(stuck) = state.plugins_stuck() => {
                http::error(StatusCode::SERVICE_UNAVAILABLE, &stuck)
            }
            Some(state) => {
                let healthy = state.healthy();
                let status = if healthy {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                http::json(status, &serde_json::json!({"healthy_endpoints": healthy}))
            }
            None => http::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the router's plugins have not answered: a plugin call is stuck",
            ),
        },
        (&Method::GET, "/metrics") => {
            let fresh = shared.lock_within(STATUS_WAIT).await.map(|state| {
                let scaler = (shared.scaling.as_ref()).map(|s| {
                    s.lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .figures()
                });
                let peers = (shared.peers.as_ref()).map(peers::count);
                metrics::text(&state, &shared.matcher, &shared.decisions, scaler, peers)
            });
            let mut last = shared
                .last_metrics
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match fresh {
                Some(text) => {
                    last.clone_from(&text);
                    http::openmetrics(text)
                }
                // A plugin call holds the state: the figures of the last scrape, as they were.
                None => http::openmetrics(last.clone()),
            }
        }
        (&Method::GET, "/v1/models") => models(shared, request).await,
        (&Method::POST, _) => match Api::of_path(&path) {
            Some(api) => route(shared, api, request).await,
            None => http::error(StatusCode::NOT_FOUND, &format!("no endpoint {path}")),
        },
        _ => http::error(StatusCode::NOT_FOUND, &format!("no endpoint {path}")),
    }
}

/// `/v1/models`: what the first healthy engine serves.
async fn models(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    let name = {
        let state = shared.lock().await;
        state
            .upstreams
            .iter()
            .find(|u| u.index.is_some())
            .map(|u| u.name.clone())
    };
    let Some(name) = name else {
        return http::error(StatusCode::SERVICE_UNAVAILABLE, "no healthy endpoint");
    };
    let mut upstream = Request::get(format!("http://{name}/v1/models"));
    if let Some(auth) = request.headers().get("authorization") {
        upstream = upstream.header("authorization", auth);
    }
    let upstream = upstream
        .body(http_body_util::Full::new(Bytes::new()))
        .expect("a valid request");
    match shared.client.request(upstream).await {
        Ok(response) => response.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed()),
        Err(e) => http::error(StatusCode::BAD_GATEWAY, &format!("{name}: {e}")),
    }
}

/// Decides, proxies, and hands back the engine's answer as it streams.
async fn route(shared: Arc<Shared>, api: Api, request: Request<Incoming>) -> Response<Body> {
    let session_key = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let ends_session = match request
        .headers()
        .get(SESSION_END_HEADER)
        .map(|v| v.to_str())
    {
        None => false,
        Some(Ok(v)) if v.eq_ignore_ascii_case("true") || v == "1" => true,
        Some(Ok(v)) if v.eq_ignore_ascii_case("false") || v == "0" => false,
        Some(_) => {
            return http::error(
                StatusCode::BAD_REQUEST,
                &format!("{SESSION_END_HEADER}: give true or false"),
            );
        }
    };
    let authorization = request.headers().get("authorization").cloned();
    let body = match http::read_body(request).await {
        Ok(body) => body,
        Err(response) => return *response,
    };
    let inference = match openai::parse(api, &body) {
        Ok(inference) => inference,
        Err(message) => return http::error(StatusCode::BAD_REQUEST, &message),
    };
    // Tokenizing a long prompt takes milliseconds: on a blocking thread, before the lock.
    let tokens = match shared.settings.kv_keys.clone() {
        Some(keys) => {
            if inference.prompt.len() > MAX_TOKENIZED_PROMPT_BYTES {
                return http::error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!(
                        "the prompt has {} bytes, more than the {MAX_TOKENIZED_PROMPT_BYTES} serve tokenizes (--tokenizer)",
                        inference.prompt.len()
                    ),
                );
            }
            let Ok(_turn) = shared.tokenizing.acquire().await else {
                return http::error(StatusCode::SERVICE_UNAVAILABLE, "serve is stopping");
            };
            let prompt = String::from_utf8_lossy(&inference.prompt).into_owned();
            tokio::task::spawn_blocking(move || keys.tokenize(&prompt).ok())
                .await
                .ok()
                .flatten()
                .map(Arc::new)
        }
        None => None,
    };
    let (mut routed, disaggregated) = {
        let mut state = shared.lock().await;
        let adapter = match state.adapter(&inference.model) {
            Ok(adapter) => adapter,
            Err(Refusal(status, message)) => {
                let status = StatusCode::from_u16(status).expect("a refusal's status is valid");
                return http::error(status, &message);
            }
        };
        let mut routed = state.admit(
            inference.prompt,
            session_key.or(inference.user),
            inference.max_tokens.map(u64::from),
            shared.now_ns(),
        );
        routed.adapter = adapter;
        routed.ends_session = ends_session;
        (routed, state.disaggregated())
    };
    routed.tokens = tokens;
    let path = match api {
        Api::Completions => "/v1/completions",
        Api::Chat => "/v1/chat/completions",
    };
    if !disaggregated {
        return proxy(shared, routed, path, body, authorization, None).await;
    }
    let upstream = pd::Upstream {
        shared: &shared,
        path,
        authorization: authorization.as_ref(),
    };
    match upstream.prefill(routed, &body).await {
        Ok((routed, decode_body, prefilled_at)) => {
            proxy(
                shared.clone(),
                routed,
                path,
                decode_body,
                authorization,
                Some(prefilled_at),
            )
            .await
        }
        Err(response) => *response,
    }
}

/// Decides (for `routed.phase`), sends `body` to the endpoint chosen (others, when it fails
/// before answering) and hands back its answer as it streams; `prefilled_at` names the
/// prefill endpoint of a disaggregated request in the answer's headers.
async fn proxy(
    shared: Arc<Shared>,
    routed: Routed,
    path: &str,
    body: Bytes,
    authorization: Option<hyper::header::HeaderValue>,
    prefilled_at: Option<String>,
) -> Response<Body> {
    let mut tried: Vec<usize> = Vec::new();
    loop {
        let pick = shared.pick(&routed, &tried).await;
        let upstream = match pick {
            Ok(upstream) => upstream,
            Err(Refusal(status, message)) => {
                let status = StatusCode::from_u16(status).expect("a refusal's status is valid");
                return http::error(status, &message);
            }
        };
        let name = shared.lock().await.send(upstream, &routed);
        shared.log(|log| log.sent(routed.seq, &name));
        let sent = shared
            .post(&name, path, authorization.as_ref(), body.clone())
            .await;
        match sent {
            Ok(Ok(response)) => {
                let status = response.status();
                let mut learned = None;
                {
                    let mut state = shared.lock().await;
                    if status.is_success() {
                        learned = state.learn(&routed, upstream, shared.now_ns());
                    } else {
                        state.upstreams[upstream].errors += 1;
                        if status.is_server_error() {
                            state.answered(upstream, false, shared.now_ns());
                        }
                    }
                }
                if learned.is_some() {
                    let block_size = shared.settings.block_size;
                    let change = peers::change(peers::Kind::Routed, &routed, &name, block_size);
                    peers::share(&shared, change).await;
                }
                let (mut parts, incoming) = response.into_parts();
                parts.headers.insert(
                    ENDPOINT_HEADER,
                    name.parse().expect("an endpoint name is a header value"),
                );
                if let Some(prefill) = &prefilled_at {
                    parts.headers.insert(
                        PREFILL_ENDPOINT_HEADER,
                        prefill.parse().expect("an endpoint name is a header value"),
                    );
                }
                let streamed = parts
                    .headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|t| t.starts_with("text/event-stream"));
                let tracked = Tracked {
                    inner: incoming,
                    shared: shared.clone(),
                    routed: Some(routed),
                    upstream,
                    first_seen: false,
                    success: status.is_success(),
                    learned,
                    ended: None,
                    deferred: false,
                    first_ns: None,
                    events: 0,
                    status: status.as_u16(),
                    endpoint: name.clone(),
                };
                if streamed {
                    // Events pass through as they come; a stream broken off ends early
                    // (its status is long sent) and counts against the engine.
                    return Response::from_parts(parts, tracked.boxed());
                }
                // A whole answer is read whole first, so one the engine breaks off is a
                // 502, not a 200 with half a body.
                let limited = http_body_util::Limited::new(tracked, MAX_ANSWER_BYTES);
                return match limited.collect().await {
                    Ok(collected) => Response::from_parts(parts, http::full(collected.to_bytes())),
                    Err(e) => {
                        shared.lock().await.upstreams[upstream].errors += 1;
                        http::error(
                            StatusCode::BAD_GATEWAY,
                            &format!("{name}: the answer broke off: {e}"),
                        )
                    }
                };
            }
            Ok(Err(e)) => {
                // Refused, reset or closed before any response: the engine produced nothing
                // the client has seen, so the request can go elsewhere.
                let mut state = shared.lock().await;
                state.release(upstream, &routed);
                state.upstreams[upstream].errors += 1;
                state.upstreams[upstream].retries += 1;
                tried.push(upstream);
                if tried.len() > shared.settings.retries as usize {
                    shared.log(|log| log.done(routed.seq, "refused", None, shared.now_ns(), None));
                    return http::error(
                        StatusCode::BAD_GATEWAY,
                        &format!("{name}: {e}; the retries are spent"),
                    );
                }
            }
            Err(_) => {
                let mut state = shared.lock().await;
                state.release(upstream, &routed);
                state.upstreams[upstream].errors += 1;
                shared.log(|log| log.done(routed.seq, "timeout", None, shared.now_ns(), None));
                return http::error(
                    StatusCode::GATEWAY_TIMEOUT,
                    &format!(
                        "{name} did not answer within {} s",
                        shared.settings.upstream_timeout.as_secs_f64()
                    ),
                );
            }
        }
    }
}

fn names(state: &State, upstreams: &[usize]) -> String {
    upstreams
        .iter()
        .map(|u| state.upstreams[*u].name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

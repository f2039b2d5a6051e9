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
//! in-flight counts, always current. An endpoint whose scrape fails leaves the fleet
//! (`remove_endpoints`) and comes back (`add_endpoints`) when a scrape succeeds again.
//!
//! The plugins are called under one lock, so calls on an instance stay serialised as the
//! ABI requires; the proxying itself runs outside it, concurrently.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use routerlab_core::Unit;
use routerlab_core::hash::BlockInterner;
use routerlab_host::{EndpointLoad, RequestData};
use routerlab_route::Router;
use routerlab_trace::blocks::hash_text_blocks;

use crate::LiveError;
use crate::http::{self, Body, BoxError};
use crate::openai::{self, Api};
use crate::prom::{self, Scraped};

/// The header a client names its session with (else the body's `user`).
pub const SESSION_HEADER: &str = "x-session-id";
/// The header the router adds to each response: the endpoint that served it.
pub const ENDPOINT_HEADER: &str = "x-routerlab-endpoint";

/// KV usage arrives as a fraction; plugins see it as this many blocks out of the total.
const LIVE_KV_BLOCKS: u64 = 10_000;

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
    /// Further endpoints to try when one fails before answering (refused, reset or closed
    /// the connection); a request whose answer had begun is never retried.
    pub retries: u32,
    /// How long an engine may take to answer a request's headers.
    pub upstream_timeout: Duration,
    /// What a failing plugin call does to the request.
    pub on_plugin_error: OnPluginError,
}

/// One engine, as the router keeps it.
struct Upstream {
    name: String,
    /// Its stable index while it is in the fleet.
    index: Option<u32>,
    scraped: Scraped,
    inflight: u64,
    inflight_tokens: u64,
    requests: u64,
    errors: u64,
    retries: u64,
    unavailable: u64,
}

/// Everything the plugins' lock guards.
struct State {
    router: Router,
    upstreams: Vec<Upstream>,
    interner: BlockInterner,
    /// Session key -> (session number, last request of it).
    sessions: HashMap<String, (u64, u64)>,
    next_seq: u64,
    turn: usize,
    /// Decision latency histogram: counts per bucket of [`DECISION_BUCKETS_US`], then +Inf.
    decision_us: Vec<u64>,
    decision_sum_us: f64,
    plugin_errors: u64,
}

const DECISION_BUCKETS_US: [f64; 10] = [
    10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
];

struct Shared {
    settings: ServeSettings,
    state: Mutex<State>,
    client: Client<HttpConnector, http_body_util::Full<Bytes>>,
    started: Instant,
    matcher: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug in this module (plugin panics are caught
        // at the ABI boundary); the state it guards stays usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A request as the plugins see it, owned for the length of the proxying.
struct Routed {
    seq: u64,
    arrival_ns: u64,
    prompt: Vec<u8>,
    hashes: Vec<u64>,
    ids: Vec<u32>,
    output_tokens: Option<u64>,
    session: u64,
    parent: u64,
}

impl Routed {
    fn data(&self, block_size: u32, now_ns: u64) -> RequestData<'_> {
        RequestData {
            id: self.seq,
            arrival_ns: self.arrival_ns,
            prompt: &self.prompt,
            block_hashes: &self.hashes,
            block_ids: Some(&self.ids),
            block_size,
            unit: Unit::Bytes,
            prompt_len: self.prompt.len() as u64,
            output_tokens: self.output_tokens,
            session_id: self.session,
            parent_id: self.parent,
            now_ns,
            cached_prefix: None,
        }
    }
}

/// Runs the router on `listener` (bound already) until the process ends.
pub async fn run_on(
    listener: std::net::TcpListener,
    settings: ServeSettings,
    router: Router,
) -> Result<(), LiveError> {
    if settings.endpoints.is_empty() {
        return Err(LiveError::Settings(
            "serve needs at least one endpoint (--endpoints host:port,...)".into(),
        ));
    }
    let table = router.table();
    let upstreams = (0..table.len())
        .map(|pos| Upstream {
            name: table.name(pos).to_owned(),
            index: Some(table.index(pos)),
            scraped: Scraped::default(),
            inflight: 0,
            inflight_tokens: 0,
            requests: 0,
            errors: 0,
            retries: 0,
            unavailable: 0,
        })
        .collect();
    let listener = http::from_std(listener)?;
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new()).build(connector);
    let matcher = router.matcher_name().to_owned();
    let shared = Arc::new(Shared {
        settings,
        state: Mutex::new(State {
            router,
            upstreams,
            interner: BlockInterner::default(),
            sessions: HashMap::new(),
            next_seq: 1,
            turn: 0,
            decision_us: vec![0; DECISION_BUCKETS_US.len() + 1],
            decision_sum_us: 0.0,
            plugin_errors: 0,
        }),
        client,
        started: Instant::now(),
        matcher,
    });
    tokio::spawn(scrape_loop(shared.clone()));
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
        (&Method::GET, "/health") => {
            let healthy = shared.lock().upstreams.iter().any(|u| u.index.is_some());
            let status = if healthy {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            http::json(status, &serde_json::json!({"healthy_endpoints": healthy}))
        }
        (&Method::GET, "/metrics") => http::prometheus(metrics_text(&shared)),
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
        let state = shared.lock();
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
    let authorization = request.headers().get("authorization").cloned();
    let body = match http::read_body(request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let inference = match openai::parse(api, &body) {
        Ok(inference) => inference,
        Err(message) => return http::error(StatusCode::BAD_REQUEST, &message),
    };
    let block_size = shared.settings.block_size;
    let routed = {
        let mut state = shared.lock();
        let seq = state.next_seq;
        state.next_seq += 1;
        let (session, parent) = match session_key.or(inference.user.clone()) {
            Some(key) => {
                let fresh = state.sessions.len() as u64 + 1;
                let entry = state.sessions.entry(key).or_insert((fresh, 0));
                let parent = entry.1;
                entry.1 = seq;
                (entry.0, parent)
            }
            None => (0, 0),
        };
        let mut hashes = Vec::new();
        hash_text_blocks(&inference.prompt, block_size as usize, &mut hashes);
        let mut ids = Vec::new();
        state.interner.intern_all(&hashes, &mut ids);
        Routed {
            seq,
            arrival_ns: shared.started.elapsed().as_nanos() as u64,
            prompt: inference.prompt,
            hashes,
            ids,
            output_tokens: inference.max_tokens.map(u64::from),
            session,
            parent,
        }
    };
    let path = match api {
        Api::Completions => "/v1/completions",
        Api::Chat => "/v1/chat/completions",
    };
    let mut tried: Vec<usize> = Vec::new();
    loop {
        let pick = {
            let mut state = shared.lock();
            if tried.is_empty() {
                decide(&shared, &mut state, &routed)
            } else {
                next_untried(&mut state, &tried).ok_or_else(|| {
                    Refusal(
                        StatusCode::BAD_GATEWAY,
                        format!(
                            "no endpoint took the request: {} failed",
                            names(&state, &tried)
                        ),
                    )
                })
            }
        };
        let upstream = match pick {
            Ok(upstream) => upstream,
            Err(Refusal(status, message)) => return http::error(status, &message),
        };
        let name = {
            let mut state = shared.lock();
            let tokens = routed.prompt.len().div_ceil(4) as u64;
            let u = &mut state.upstreams[upstream];
            u.inflight += 1;
            u.inflight_tokens += tokens;
            u.requests += 1;
            u.name.clone()
        };
        let mut outgoing = Request::post(format!("http://{name}{path}"))
            .header("content-type", "application/json");
        if let Some(auth) = &authorization {
            outgoing = outgoing.header("authorization", auth);
        }
        let outgoing = outgoing
            .body(http_body_util::Full::new(body.clone()))
            .expect("a valid request");
        let sent = tokio::time::timeout(
            shared.settings.upstream_timeout,
            shared.client.request(outgoing),
        )
        .await;
        match sent {
            Ok(Ok(response)) => {
                let status = response.status();
                {
                    let mut state = shared.lock();
                    if status.is_success() {
                        learn(&shared, &mut state, &routed, upstream);
                    } else {
                        state.upstreams[upstream].errors += 1;
                    }
                }
                let (mut parts, incoming) = response.into_parts();
                parts.headers.insert(
                    ENDPOINT_HEADER,
                    name.parse().expect("an endpoint name is a header value"),
                );
                let tracked = Tracked {
                    inner: incoming,
                    shared: shared.clone(),
                    routed: Some(routed),
                    upstream,
                    first_seen: false,
                    learned: status.is_success(),
                };
                return Response::from_parts(parts, tracked.boxed());
            }
            Ok(Err(e)) => {
                // Refused, reset or closed before any response: the engine produced nothing
                // the client has seen, so the request can go elsewhere.
                let mut state = shared.lock();
                release(&mut state, upstream, &routed);
                state.upstreams[upstream].errors += 1;
                state.upstreams[upstream].retries += 1;
                tried.push(upstream);
                if tried.len() > shared.settings.retries as usize {
                    return http::error(
                        StatusCode::BAD_GATEWAY,
                        &format!("{name}: {e}; the retries are spent"),
                    );
                }
            }
            Err(_) => {
                let mut state = shared.lock();
                release(&mut state, upstream, &routed);
                state.upstreams[upstream].errors += 1;
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

/// The detector and the matcher decide; a failing plugin is answered by
/// `--on-plugin-error`. Returns the upstream chosen.
fn decide(shared: &Shared, state: &mut State, routed: &Routed) -> Result<usize, Refusal> {
    let now = shared.started.elapsed().as_nanos() as u64;
    refresh_loads(state);
    let started = Instant::now();
    let decision = state
        .router
        .decide(&routed.data(shared.settings.block_size, now), false);
    let us = started.elapsed().as_secs_f64() * 1e6;
    let bucket = DECISION_BUCKETS_US
        .iter()
        .position(|b| us <= *b)
        .unwrap_or(DECISION_BUCKETS_US.len());
    state.decision_us[bucket] += 1;
    state.decision_sum_us += us;
    match decision {
        Ok(decision) => {
            let flags = state.router.unavailable().to_vec();
            for (pos, flagged) in flags.iter().enumerate() {
                if *flagged && let Some(u) = upstream_at(state, pos) {
                    state.upstreams[u].unavailable += 1;
                }
            }
            match decision.endpoint.and_then(|pos| upstream_at(state, pos)) {
                Some(upstream) => Ok(upstream),
                None => Err(Refusal(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no endpoint is available for this request (the detector flagged them all)"
                        .into(),
                )),
            }
        }
        Err(e) => {
            state.plugin_errors += 1;
            match shared.settings.on_plugin_error {
                OnPluginError::Reject => Err(Refusal(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("routing failed: {e}"),
                )),
                OnPluginError::RoundRobin => next_untried(state, &[]).ok_or_else(|| {
                    Refusal(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "no healthy endpoint".into(),
                    )
                }),
            }
        }
    }
}

/// Why a request gets no endpoint: the status and message of its error response.
struct Refusal(StatusCode, String);

/// The next healthy endpoint, round robin, that is not in `tried`.
fn next_untried(state: &mut State, tried: &[usize]) -> Option<usize> {
    let n = state.upstreams.len();
    for step in 0..n {
        let u = (state.turn + step) % n;
        if state.upstreams[u].index.is_some() && !tried.contains(&u) {
            state.turn = u + 1;
            return Some(u);
        }
    }
    None
}

/// The upstream at list position `pos` of the router's table.
fn upstream_at(state: &State, pos: usize) -> Option<usize> {
    let index = state.router.table().index(pos);
    state.upstreams.iter().position(|u| u.index == Some(index))
}

/// The list position of `upstream` in the router's table, while it is in the fleet.
fn position_of(state: &State, upstream: usize) -> Option<usize> {
    let index = state.upstreams[upstream].index?;
    state.router.table().position(index)
}

/// Puts every endpoint's current figures in the table the plugins read.
fn refresh_loads(state: &mut State) {
    for u in 0..state.upstreams.len() {
        let Some(pos) = position_of(state, u) else {
            continue;
        };
        let upstream = &state.upstreams[u];
        let load = EndpointLoad {
            running: upstream.scraped.running,
            waiting: upstream.scraped.waiting,
            kv_blocks_used: (upstream.scraped.kv_usage * LIVE_KV_BLOCKS as f64).round() as u64,
            kv_blocks_total: LIVE_KV_BLOCKS,
            inflight_prompt_tokens: upstream.inflight_tokens,
            inflight_requests: upstream.inflight,
            kv_block_tokens: 0,
        };
        state.router.table_mut().set_load(pos, load);
    }
}

/// The engine took the request: the matcher learns where it went.
fn learn(shared: &Shared, state: &mut State, routed: &Routed, upstream: usize) {
    let Some(pos) = position_of(state, upstream) else {
        return;
    };
    let now = shared.started.elapsed().as_nanos() as u64;
    if state
        .router
        .learn(&routed.data(shared.settings.block_size, now), pos)
        .is_err()
    {
        state.plugin_errors += 1;
    }
}

/// The request no longer occupies `upstream`.
fn release(state: &mut State, upstream: usize, routed: &Routed) {
    let u = &mut state.upstreams[upstream];
    u.inflight = u.inflight.saturating_sub(1);
    u.inflight_tokens = u
        .inflight_tokens
        .saturating_sub(routed.prompt.len().div_ceil(4) as u64);
}

/// The engine's response body, passed through as it arrives; its first bytes are the
/// request's first token, its end (or the client going away, which drops it and so
/// cancels the upstream request) the request's completion.
struct Tracked {
    inner: Incoming,
    shared: Arc<Shared>,
    routed: Option<Routed>,
    upstream: usize,
    first_seen: bool,
    /// Whether the matcher learned the pick (the engine answered with success).
    learned: bool,
}

impl Tracked {
    fn finish(&mut self) {
        let Some(routed) = self.routed.take() else {
            return;
        };
        let mut state = self.shared.lock();
        release(&mut state, self.upstream, &routed);
        if self.learned
            && let Some(pos) = position_of(&state, self.upstream)
        {
            let now = self.shared.started.elapsed().as_nanos() as u64;
            let data = routed.data(self.shared.settings.block_size, now);
            if state.router.complete(&data, pos).is_err() {
                state.plugin_errors += 1;
            }
        }
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) if frame.is_data() && !this.first_seen => {
                this.first_seen = true;
                if this.learned
                    && let Some(routed) = &this.routed
                {
                    let mut state = this.shared.lock();
                    if let Some(pos) = position_of(&state, this.upstream) {
                        let now = this.shared.started.elapsed().as_nanos() as u64;
                        let data = routed.data(this.shared.settings.block_size, now);
                        if state.router.first_token(&data, pos).is_err() {
                            state.plugin_errors += 1;
                        }
                    }
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.finish(),
            _ => {}
        }
        polled.map(|frame| frame.map(|r| r.map_err(|e| Box::new(e) as BoxError)))
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Scrapes every engine's metrics each interval; an engine whose scrape fails leaves the
/// fleet, and rejoins when one succeeds.
async fn scrape_loop(shared: Arc<Shared>) {
    let mut ticker = tokio::time::interval(shared.settings.metrics_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let names: Vec<String> = shared
            .lock()
            .upstreams
            .iter()
            .map(|u| u.name.clone())
            .collect();
        for (u, name) in names.into_iter().enumerate() {
            let scraped = scrape(&shared, &name).await;
            let mut state = shared.lock();
            match scraped {
                Some(scraped) => {
                    state.upstreams[u].scraped = scraped;
                    if state.upstreams[u].index.is_none() {
                        match state.router.add_endpoint(name.clone()) {
                            Ok(index) => state.upstreams[u].index = Some(index),
                            Err(_) => state.plugin_errors += 1,
                        }
                    }
                }
                None => {
                    if let Some(index) = state.upstreams[u].index.take()
                        && state.router.remove_endpoint(index).is_err()
                    {
                        state.plugin_errors += 1;
                    }
                }
            }
        }
    }
}

/// One engine's gauges, or `None` when it did not answer in time.
async fn scrape(shared: &Shared, name: &str) -> Option<Scraped> {
    let request = Request::get(format!("http://{name}/metrics"))
        .body(http_body_util::Full::new(Bytes::new()))
        .ok()?;
    let wait = shared.settings.metrics_interval.max(Duration::from_secs(1));
    let response = tokio::time::timeout(wait, shared.client.request(request))
        .await
        .ok()?
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body = tokio::time::timeout(wait, response.into_body().collect())
        .await
        .ok()?
        .ok()?
        .to_bytes();
    Some(prom::parse(&String::from_utf8_lossy(&body)))
}

/// A per-endpoint metric: its name, its help text, and its value for one endpoint.
type PerEndpoint = (&'static str, &'static str, fn(&Upstream) -> u64);

/// The router's own Prometheus metrics.
fn metrics_text(shared: &Shared) -> String {
    let state = shared.lock();
    let mut out = String::new();
    let matcher = &shared.matcher;
    let per_endpoint: [PerEndpoint; 6] = [
        (
            "routerlab_requests_total",
            "requests proxied to the endpoint",
            |u| u.requests,
        ),
        (
            "routerlab_errors_total",
            "failed or refused upstream requests",
            |u| u.errors,
        ),
        (
            "routerlab_retries_total",
            "requests moved to another endpoint after a failure",
            |u| u.retries,
        ),
        (
            "routerlab_unavailable_total",
            "decisions in which the detector flagged the endpoint",
            |u| u.unavailable,
        ),
        (
            "routerlab_inflight_requests",
            "requests routed there and not finished",
            |u| u.inflight,
        ),
        (
            "routerlab_endpoint_up",
            "1 while the endpoint is in the fleet",
            |u| u64::from(u.index.is_some()),
        ),
    ];
    for (name, help, value) in per_endpoint {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for u in &state.upstreams {
            out.push_str(&format!("{name}{{endpoint=\"{}\"}} {}\n", u.name, value(u)));
        }
    }
    out.push_str("# HELP routerlab_plugin_errors_total plugin calls that failed\n");
    out.push_str("# TYPE routerlab_plugin_errors_total counter\n");
    out.push_str(&format!(
        "routerlab_plugin_errors_total{{matcher=\"{matcher}\"}} {}\n",
        state.plugin_errors
    ));
    out.push_str("# HELP routerlab_decision_seconds time the detector and matcher took\n");
    out.push_str("# TYPE routerlab_decision_seconds histogram\n");
    let mut cumulative = 0;
    for (i, count) in state.decision_us.iter().enumerate() {
        cumulative += count;
        let le = DECISION_BUCKETS_US
            .get(i)
            .map_or("+Inf".to_owned(), |us| (us / 1e6).to_string());
        out.push_str(&format!(
            "routerlab_decision_seconds_bucket{{le=\"{le}\"}} {cumulative}\n"
        ));
    }
    out.push_str(&format!(
        "routerlab_decision_seconds_sum {}\nrouterlab_decision_seconds_count {cumulative}\n",
        state.decision_sum_us / 1e6
    ));
    out
}

//! `routerlab drive`: a trace's requests, sent to any OpenAI-compatible URL at their times,
//! measured as a client sees them, and reported in the replay's schema so that a live run
//! and a simulated one can be put side by side (`compare --from`).
//!
//! Chat traces send their prompts (messages flattened as the chat format documents).
//! Traces without text (Mooncake, token ids) send one deterministic text block per block
//! id, of `block_bytes` bytes, so requests that share a prefix in the trace share it on the
//! wire; a router hashing blocks of that size sees the trace's own prefix structure.
//! Requests stream (`stream: true`) unless asked not to, so the first token can be timed,
//! with `max_tokens` the trace's output length. An agentic trace's requests go as the
//! timed replay sends them: each once its dependencies have fired (another request sent,
//! or answered) plus their delays, and not before its own time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use routerlab_core::{SeededRng, Unit};
use routerlab_report::Report;
use routerlab_report::agentic::{AgenticReport, distribution};
use routerlab_report::stats::{Finished, LatencyStat, StatsBuilder, TimedTally};
use routerlab_trace::Workload;
use routerlab_trace::arrivals::{ArrivalError, Arrivals};
use tokio::sync::{Semaphore, watch};

use crate::LiveError;
use crate::serve::{ENDPOINT_HEADER, PREFILL_ENDPOINT_HEADER, SESSION_END_HEADER, SESSION_HEADER};

/// How to drive.
#[derive(Debug, Clone)]
pub struct DriveSettings {
    /// Base URL, e.g. `http://127.0.0.1:8080` (plain HTTP).
    pub url: String,
    /// When requests go out: the replay's own arrival process.
    pub arrivals: Arrivals,
    /// Seed of a Poisson draw.
    pub seed: u64,
    /// Bytes of text per block id (traces without text).
    pub block_bytes: usize,
    /// `max_tokens` when the trace gives no output length.
    pub default_max_tokens: u64,
    /// The `model` field sent for a request that names no LoRA adapter (one that does is
    /// sent with `model` the adapter's name, as vLLM serves adapters).
    pub model: String,
    /// Give up on a request after this long.
    pub timeout: Duration,
    /// Ask for server-sent events (the first token can be timed); without, TTFT is the
    /// whole answer's time.
    pub stream: bool,
}

/// What one request did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Request id (1-based position in the trace).
    pub id: u64,
    /// The endpoint that served it (the router's `x-routerlab-endpoint`), if said.
    pub endpoint: Option<String>,
    /// The endpoint that prefilled it, in a disaggregated fleet (the router's
    /// `x-routerlab-prefill-endpoint`), if said.
    pub prefill_endpoint: Option<String>,
    /// Failure, if it failed.
    pub error: Option<String>,
    /// Sent, since the run began.
    pub sent: Duration,
    /// Sent to first token.
    pub ttft: Duration,
    /// Sent to last byte.
    pub e2e: Duration,
    /// Prompt tokens (the engine's `usage`, else bytes / 4).
    pub prompt_tokens: u64,
    /// Of those, served from the engine's prefix cache, when the engine says.
    pub cached_tokens: Option<u64>,
    /// Tokens generated.
    pub output_tokens: u64,
}

/// The prompt sent for request `index` of `workload`.
pub fn prompt_of(workload: &Workload, index: usize, block_bytes: usize) -> Vec<u8> {
    let request = &workload.requests[index];
    if !request.prompt.is_empty() {
        return request.prompt.clone();
    }
    let mut text = Vec::with_capacity(request.blocks.len() * block_bytes);
    for id in &request.blocks {
        text.extend_from_slice(&block_text(*id, block_bytes));
    }
    text
}

/// The text standing for block id `id`: `block_bytes` letters, the same for the same id.
fn block_text(id: u64, block_bytes: usize) -> Vec<u8> {
    let mut rng = SeededRng::new(id);
    (0..block_bytes)
        .map(|i| {
            if i % 6 == 5 {
                b' '
            } else {
                b'a' + rng.below(26) as u8
            }
        })
        .collect()
}

/// Sends every request of `workload` and returns what each did, in trace order.
pub async fn drive(
    workload: Arc<Workload>,
    settings: DriveSettings,
) -> Result<Vec<Outcome>, LiveError> {
    if !settings.url.starts_with("http://") {
        return Err(LiveError::Settings(format!(
            "--url {}: only plain http:// URLs are supported",
            settings.url
        )));
    }
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new()).build(connector);
    let started = Instant::now();
    let n = workload.requests.len();
    let send_times: Vec<Option<Duration>> = match settings
        .arrivals
        .schedule(&workload.requests, settings.seed)
    {
        Ok(Some(times)) => times
            .into_iter()
            .map(|ns| Some(Duration::from_nanos(ns)))
            .collect(),
        Ok(None) => vec![None; n],
        Err(ArrivalError::NoArrivalTimes { .. }) => {
            return Err(LiveError::Trace(
                "the trace has no arrival times: use --rate or --concurrency".into(),
            ));
        }
        Err(e) => return Err(LiveError::Trace(e.to_string())),
    };
    let limit = settings
        .arrivals
        .concurrency()
        .map_or(Semaphore::MAX_PERMITS, |c| c.max(1));
    let permits = Arc::new(Semaphore::new(limit));
    let agentic = workload.requests.iter().any(|r| r.play != 0);
    if agentic {
        let Arrivals::Trace { speedup } = settings.arrivals else {
            return Err(LiveError::Settings(
                "an agentic trace's requests go when their dependencies allow, at its own times: --rate and --concurrency do not apply".into(),
            ));
        };
        return drive_graph(workload, settings, client, started, &send_times, speedup).await;
    }
    let settings = Arc::new(settings);
    let mut tasks = Vec::with_capacity(n);
    for (index, at) in send_times.into_iter().enumerate() {
        if let Some(at) = at {
            tokio::time::sleep_until((started + at).into()).await;
        }
        let permit = permits.clone().acquire_owned().await.expect("never closed");
        let (client, workload, settings) = (client.clone(), workload.clone(), settings.clone());
        tasks.push(tokio::spawn(async move {
            let outcome = send_one(&client, &workload, index, &settings, started, |_| ()).await;
            drop(permit);
            outcome
        }));
    }
    collect(tasks).await
}

/// What each request task did, in trace order.
async fn collect(tasks: Vec<tokio::task::JoinHandle<Outcome>>) -> Result<Vec<Outcome>, LiveError> {
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(
            task.await
                .map_err(|e| LiveError::Run(format!("a request task failed: {e}")))?,
        );
    }
    Ok(outcomes)
}

/// One watch per request and trigger: when it was sent, and when it was answered.
type Signals = Vec<[watch::Sender<Option<Instant>>; 2]>;

/// Drives an agentic workload: every request a task that waits for its dependencies.
async fn drive_graph(
    workload: Arc<Workload>,
    settings: DriveSettings,
    client: Client<HttpConnector, http_body_util::Full<Bytes>>,
    started: Instant,
    send_times: &[Option<Duration>],
    speedup: f64,
) -> Result<Vec<Outcome>, LiveError> {
    use routerlab_trace::dependency::Trigger;
    let n = workload.requests.len();
    let signals: Arc<Signals> = Arc::new(
        (0..n)
            .map(|_| [watch::channel(None).0, watch::channel(None).0])
            .collect(),
    );
    let settings = Arc::new(settings);
    let mut tasks = Vec::with_capacity(n);
    for (index, at) in send_times.iter().enumerate() {
        let not_before = started + at.unwrap_or_default();
        let (client, workload, settings, signals) = (
            client.clone(),
            workload.clone(),
            settings.clone(),
            signals.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut ready = not_before;
            for dep in &workload.requests[index].dependencies {
                let which = usize::from(dep.trigger == Trigger::Completion);
                let mut rx = signals[dep.on][which].subscribe();
                let fired = *rx
                    .wait_for(Option::is_some)
                    .await
                    .expect("the sender lives as long as the run");
                let delay = Duration::from_secs_f64(dep.delay_ns as f64 / 1e9 / speedup);
                ready = ready.max(fired.expect("waited for it") + delay);
            }
            tokio::time::sleep_until(ready.into()).await;
            // Both signals are the outcome's own clock readings, so a dependent's delay
            // counts from exactly the `sent_ms` and `sent_ms + e2e_ms` it reports (a
            // failed request is answered when it failed).
            let on_sent = |at: Instant| {
                signals[index][0].send_replace(Some(at));
            };
            let outcome = send_one(&client, &workload, index, &settings, started, on_sent).await;
            let answered = match outcome.error {
                None => started + outcome.sent + outcome.e2e,
                Some(_) => Instant::now(),
            };
            signals[index][1].send_replace(Some(answered));
            outcome
        }));
    }
    collect(tasks).await
}

async fn send_one(
    client: &Client<HttpConnector, http_body_util::Full<Bytes>>,
    workload: &Workload,
    index: usize,
    settings: &DriveSettings,
    started: Instant,
    on_sent: impl FnOnce(Instant),
) -> Outcome {
    let request = &workload.requests[index];
    let prompt = prompt_of(workload, index, settings.block_bytes);
    let max_tokens = request
        .output_tokens
        .unwrap_or(settings.default_max_tokens)
        .max(1);
    let model = workload
        .adapters
        .name(request.adapter)
        .unwrap_or(&settings.model);
    let body = serde_json::json!({
        "model": model,
        "prompt": String::from_utf8_lossy(&prompt),
        "max_tokens": max_tokens,
        "stream": settings.stream,
    });
    let mut outgoing = Request::post(format!(
        "{}/v1/completions",
        settings.url.trim_end_matches('/')
    ))
    .header("content-type", "application/json");
    if request.session != 0 {
        outgoing = outgoing.header(SESSION_HEADER, request.session.to_string());
    }
    if request.session_end {
        outgoing = outgoing.header(SESSION_END_HEADER, "true");
    }
    let outgoing = outgoing
        .body(http_body_util::Full::new(Bytes::from(body.to_string())))
        .expect("a valid request");
    let t0 = Instant::now();
    let sent = t0.duration_since(started);
    on_sent(t0);
    let mut outcome = Outcome {
        id: index as u64 + 1,
        endpoint: None,
        prefill_endpoint: None,
        error: None,
        sent,
        ttft: Duration::ZERO,
        e2e: Duration::ZERO,
        prompt_tokens: Unit::Bytes.tokens(prompt.len() as u64),
        cached_tokens: None,
        output_tokens: 0,
    };
    let exchange = async {
        let response = client
            .request(outgoing)
            .await
            .map_err(|e| format!("sending: {e}"))?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        outcome.endpoint = header(ENDPOINT_HEADER);
        outcome.prefill_endpoint = header(PREFILL_ENDPOINT_HEADER);
        let status = response.status();
        let mut body = response.into_body();
        let mut text = Vec::new();
        let mut first = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("reading: {e}"))?;
            if let Some(data) = frame.data_ref() {
                first.get_or_insert_with(|| t0.elapsed());
                text.extend_from_slice(data);
            }
        }
        if !status.is_success() {
            return Err(format!(
                "{status}: {}",
                String::from_utf8_lossy(&text).trim()
            ));
        }
        outcome.e2e = t0.elapsed();
        if settings.stream {
            outcome.ttft = first.unwrap_or(outcome.e2e);
            read_events(&text, &mut outcome);
        } else {
            outcome.ttft = outcome.e2e;
            if let Ok(whole) = serde_json::from_slice::<serde_json::Value>(&text) {
                read_usage(&whole, &mut outcome);
            }
        }
        Ok(())
    };
    match tokio::time::timeout(settings.timeout, exchange).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => outcome.error = Some(e),
        Err(_) => {
            outcome.error = Some(format!(
                "no answer within {} s",
                settings.timeout.as_secs_f64()
            ))
        }
    }
    outcome
}

/// Reads the token counts of a response's (or a last event's) `usage`, if it has one.
fn read_usage(response: &serde_json::Value, outcome: &mut Outcome) {
    let Some(usage) = response.get("usage").filter(|u| !u.is_null()) else {
        return;
    };
    if let Some(p) = usage["prompt_tokens"].as_u64() {
        outcome.prompt_tokens = p;
    }
    if let Some(c) = usage["completion_tokens"].as_u64() {
        outcome.output_tokens = c;
    }
    outcome.cached_tokens = usage["prompt_tokens_details"]["cached_tokens"].as_u64();
}

/// Counts generated tokens and reads `usage` from a server-sent event stream.
fn read_events(text: &[u8], outcome: &mut Outcome) {
    let mut chunks = 0;
    for line in String::from_utf8_lossy(text).lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let Ok(event) = serde_json::from_str::<serde_json::Value>(data) else {
            continue;
        };
        read_usage(&event, outcome);
        if event["choices"][0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
        {
            chunks += 1;
        }
    }
    if outcome.output_tokens == 0 {
        outcome.output_tokens = chunks;
    }
}

/// The report of a driven run, in the replay's schema: requests per endpoint (as the
/// router's header named them, in name order, so two runs list them alike), the engines' reported cached
/// tokens as the hit ratio (0 when they report none), and the latencies measured at the
/// client; a follow-up (a request with a parent in `workload`) counts as kept with its
/// parent when both went to the same endpoint. What a client cannot see is left out: no
/// decision quality, no queue time.
pub fn report(
    workload: &Workload,
    outcomes: &[Outcome],
    slo: Option<routerlab_report::Slo>,
) -> (Report, Vec<String>) {
    let mut endpoints: Vec<String> = Vec::new();
    let mut position: HashMap<String, usize> = HashMap::new();
    for o in outcomes.iter().filter(|o| o.error.is_none()) {
        let name = o.endpoint.clone().unwrap_or_else(|| "direct".to_owned());
        if position.insert(name.clone(), 0).is_none() {
            endpoints.push(name);
        }
    }
    endpoints.sort();
    for (at, name) in endpoints.iter().enumerate() {
        position.insert(name.clone(), at);
    }
    let mut stats = StatsBuilder::new(endpoints.len().max(1), Unit::Tokens);
    let mut latency = TimedTally::with_slo(slo);
    for (index, o) in outcomes.iter().enumerate() {
        let parent = workload.requests.get(index).and_then(|r| r.parent);
        if o.error.is_some() {
            stats.reject(false, parent.is_some());
            continue;
        }
        let name = o.endpoint.clone().unwrap_or_else(|| "direct".to_owned());
        let hit = o.cached_tokens.unwrap_or(0).min(o.prompt_tokens);
        let same_as_parent = parent.map(|p| outcomes[p].endpoint == o.endpoint);
        stats.route(position[&name], o.prompt_tokens, hit, false, same_as_parent);
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let sent = ns(o.sent);
        let first_token = sent.saturating_add(ns(o.ttft));
        latency.arrived(sent);
        latency.finished(Finished {
            arrival_ns: sent,
            // A client cannot see when an engine first scheduled the request.
            scheduled_ns: None,
            first_token_ns: first_token,
            finish_ns: sent.saturating_add(ns(o.e2e)).max(first_token),
            output_tokens: o.output_tokens,
            prompt_tokens: o.prompt_tokens,
            hit_tokens: hit,
        });
    }
    let mut report = stats.finish();
    // Decision quality needs what every engine held at each decision: not seen here.
    report.quality = None;
    report.timed = Some(latency.report());
    if let Some(timed) = &mut report.timed {
        timed.agentic = agentic_report(workload, outcomes);
    }
    (report, endpoints)
}

/// An agentic workload's plays and sessions as the client saw them: a play from its first
/// request sent to its last answered, a session's hit ratio from the engines' reported
/// cached tokens; where its turns were routed against the caches is not visible.
fn agentic_report(workload: &Workload, outcomes: &[Outcome]) -> Option<AgenticReport> {
    if workload.requests.iter().all(|r| r.play == 0) {
        return None;
    }
    let mut plays: HashMap<u64, (Duration, Duration, bool)> = HashMap::new();
    let mut sessions: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    let mut follow_ups = 0;
    for (request, o) in workload.requests.iter().zip(outcomes) {
        let play = plays
            .entry(request.play)
            .or_insert((Duration::MAX, Duration::ZERO, true));
        play.0 = play.0.min(o.sent);
        play.1 = play.1.max(o.sent + o.e2e);
        play.2 &= o.error.is_none();
        follow_ups += u64::from(!seen.insert(request.session));
        if o.error.is_none() {
            let session = sessions.entry(request.session).or_default();
            session.0 += o.prompt_tokens;
            session.1 += o.cached_tokens.unwrap_or(0).min(o.prompt_tokens);
        }
    }
    let mut play_ms = LatencyStat::default();
    let mut finished = 0;
    let mut keys: Vec<u64> = plays.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        let (start, end, ok) = plays[&key];
        if ok {
            finished += 1;
            play_ms.record(u64::try_from((end - start).as_micros()).unwrap_or(u64::MAX));
        }
    }
    let mut shares: Vec<f64> = sessions
        .values()
        .filter(|(prompt, _)| *prompt > 0)
        .map(|(prompt, hit)| *hit as f64 / *prompt as f64)
        .collect();
    shares.sort_by(f64::total_cmp);
    Some(AgenticReport {
        plays: finished,
        play_ms: play_ms.summary(),
        sessions: shares.len() as u64,
        session_hit_ratio: distribution(&shares),
        follow_up_turns: follow_ups,
        on_cached_context: None,
        on_cached_context_share: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_id_is_always_the_same_text_and_ids_differ() {
        assert_eq!(block_text(7, 64), block_text(7, 64));
        assert_ne!(block_text(7, 64), block_text(8, 64));
        assert_eq!(block_text(7, 2048).len(), 2048);
    }
}

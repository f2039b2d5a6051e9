//! The timed replay in process: small traces written by the test, Rust matchers driven
//! through the real export shims (`routerlab_host::in_process`), no built library.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_host::in_process;
use routerlab_report::Report;

use crate::SimError;
use crate::observer::NoObserver;
use crate::scenario::Scenario;
use crate::test_plugins::{First, Turns};

/// `First`, counting the completions and first tokens the replay reports to it.
struct Counting;

static COMPLETED: AtomicU64 = AtomicU64::new(0);
static FIRST_TOKENS: AtomicU64 = AtomicU64::new(0);

impl Matcher for Counting {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(Counting)
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        First.match_request(request, endpoints)
    }
    fn on_first_token(&mut self, _r: &Request<'_>, _e: EndpointId) -> Result<(), String> {
        FIRST_TOKENS.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn on_complete(&mut self, _r: &Request<'_>, _e: EndpointId) -> Result<(), String> {
        COMPLETED.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Fails on the third request it sees.
struct FailsThird {
    seen: u64,
}

impl Matcher for FailsThird {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(FailsThird { seen: 0 })
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        self.seen += 1;
        if self.seen == 3 {
            return Err("no third".into());
        }
        First.match_request(request, endpoints)
    }
}

/// A Mooncake trace of `n` requests, `gap_ms` apart, of four 512-token blocks each: all
/// four shared when `shared`, otherwise distinct per request.
fn trace(name: &str, n: u64, gap_ms: u64, shared: bool) -> PathBuf {
    let mut text = String::new();
    for i in 0..n {
        let base = if shared { 0 } else { i * 10 };
        text.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": 2048, \"output_length\": 32, \"hash_ids\": [{}, {}, {}, {}]}}\n",
            i * gap_ms,
            base + 1,
            base + 2,
            base + 3,
            base + 4
        ));
    }
    let path = std::env::temp_dir().join(format!(
        "routerlab-sim-timed-{name}-{}.jsonl",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("scratch trace");
    path
}

fn replay<M: Matcher>(scenario: &Scenario, name: &str) -> Result<Report, SimError> {
    let mut replicas = scenario.routers_with(|config, _| {
        let matcher = in_process::matcher::<M>(name, config).map_err(SimError::Load)?;
        Ok((matcher, None))
    })?;
    scenario.replay(&mut replicas, &mut NoObserver)
}

fn timed(trace: PathBuf, endpoints: usize) -> Scenario {
    Scenario::new("in-process", trace)
        .endpoints(endpoints)
        .timed_at_trace_times()
}

fn requests_per_endpoint(report: &Report) -> Vec<u64> {
    let timed = report.timed.as_ref().expect("a timed report");
    timed.per_endpoint.iter().map(|e| e.requests).collect()
}

#[test]
fn a_sticky_matcher_keeps_the_shared_prefix_a_spreading_one_splits_it() {
    // One second apart: each request has finished before the next arrives, so what an
    // engine holds is exactly what was sent to it before.
    let scenario = timed(trace("sticky", 8, 1000, true), 2);
    let sticky = replay::<First>(&scenario, "first").unwrap();
    let spread = replay::<Turns>(&scenario, "turns").unwrap();
    assert_eq!(requests_per_endpoint(&sticky), [8, 0]);
    assert_eq!(requests_per_endpoint(&spread), [4, 4]);
    // Sticky: only the first request misses. Spread: the first on each engine misses.
    let (sticky_hits, spread_hits) = (
        sticky.timed.as_ref().unwrap().hit_ratio,
        spread.timed.as_ref().unwrap().hit_ratio,
    );
    assert!(sticky_hits > spread_hits, "{sticky_hits} vs {spread_hits}");
    assert!(
        spread_hits > 0.0,
        "each engine reuses its own earlier requests"
    );
    assert_eq!(sticky.requests, 8);
    assert_eq!(sticky.rejected, 0);
}

#[test]
fn a_burst_on_one_engine_waits_longer_than_a_burst_spread_over_two() {
    let scenario = timed(trace("burst", 16, 0, false), 2);
    let one = replay::<First>(&scenario, "first").unwrap();
    let two = replay::<Turns>(&scenario, "turns").unwrap();
    let ttft = |r: &Report| r.timed.as_ref().unwrap().ttft.as_ref().unwrap().mean;
    assert!(ttft(&one) > ttft(&two), "{} vs {}", ttft(&one), ttft(&two));
    assert_eq!(requests_per_endpoint(&one), [16, 0]);
}

#[test]
fn every_request_reports_its_first_token_and_completion_to_the_matcher() {
    let scenario = timed(trace("callbacks", 12, 50, true), 3);
    let report = replay::<Counting>(&scenario, "counting").unwrap();
    assert_eq!(report.requests, 12);
    assert_eq!(FIRST_TOKENS.load(Ordering::Relaxed), 12);
    assert_eq!(COMPLETED.load(Ordering::Relaxed), 12);
}

#[test]
fn a_plugin_error_stops_the_run_naming_the_request_and_line() {
    let scenario = timed(trace("fails", 5, 10, true), 2);
    let err = replay::<FailsThird>(&scenario, "fails-third").unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, SimError::Plugin { .. }), "{text}");
    assert!(text.starts_with("request 3 (line 3): "), "{text}");
    assert!(text.contains("no third"), "{text}");
}

#[test]
fn the_same_scenario_gives_the_same_report() {
    let scenario = timed(trace("determinism", 20, 7, false), 3);
    let a = serde_json::to_string(&replay::<Turns>(&scenario, "turns").unwrap()).unwrap();
    let b = serde_json::to_string(&replay::<Turns>(&scenario, "turns").unwrap()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_workload_loaded_for_other_engines_is_refused_before_the_run() {
    let scenario = timed(trace("sizes", 3, 10, true), 2);
    let reader = scenario.reader().unwrap();
    let workload = routerlab_trace::Workload::load(reader, &[16]).unwrap();
    let mut replicas = scenario
        .routers_with(|config, _| {
            Ok((
                in_process::matcher::<First>("first", config).map_err(SimError::Load)?,
                None,
            ))
        })
        .unwrap();
    let settings = scenario.timed.as_ref().unwrap();
    let err = crate::timed::replay_timed(&workload, &mut replicas, settings, &mut NoObserver)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("without chains for engine blocks of 64 tokens"),
        "{err}"
    );
}

/// The first request to endpoint 0; then the endpoint whose cache (as the precise index
/// says) holds the longest prefix, ties and misses to the last one.
struct Longest;

impl Matcher for Longest {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(Longest)
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        if request.id() == 1 {
            return Ok(Some(EndpointId(0)));
        }
        let best = endpoints
            .available()
            .map(|e| (request.cached_prefix(e.id()).unwrap_or(0), e.id().get()))
            .max();
        Ok(best.map(|(_, id)| EndpointId(id)))
    }
}

#[test]
fn a_lagged_kv_event_index_misses_a_store_made_just_before_the_decision() {
    // Three requests of the same 2,048 tokens at 0, 500 and 5,000 ms on two `dynamo`
    // engines. The first, on endpoint 0, prefills in one step of P(2048) = 4.21e-7 × 2048²
    // + 0.01518 × 2048 + 16.5 = 49.354 ms: its blocks are stored at 49.354 ms.
    let run = |lag_ms: u64| {
        let path = trace(&format!("lag-{lag_ms}"), 3, 0, true);
        let text = std::fs::read_to_string(&path).unwrap();
        let times = ["0", "500", "5000"];
        let text: String = text
            .lines()
            .zip(times)
            .map(|(line, t)| {
                line.replacen("\"timestamp\": 0", &format!("\"timestamp\": {t}"), 1) + "\n"
            })
            .collect();
        std::fs::write(&path, text).unwrap();
        let engines = vec![routerlab_engine::EngineConfig::dynamo(); 2];
        let scenario = Scenario::new("in-process", path)
            .endpoints(2)
            .timed(super::TimedSettings {
                kv_event_lag_ns: lag_ms * 1_000_000,
                router_hop_ns: 0,
                router_decision_ns: 0,
                ..super::TimedSettings::at_trace_times(engines)
            });
        requests_per_endpoint(&replay::<Longest>(&scenario, "longest").unwrap())
    };
    // Seen at once, or 450 ms late (at 499.354 ms, before the second request): it follows
    // the first, and so does the third.
    assert_eq!(run(0), [3, 0]);
    assert_eq!(run(450), [3, 0]);
    // 451 ms late (500.354 ms): the second sees no cache and goes to endpoint 1; by 5 s
    // both stores are seen, the tie goes to endpoint 1 too.
    assert_eq!(run(451), [1, 2]);
}

/// The first request to the last endpoint, every other to endpoint 0.
struct LastThenFirst;

impl Matcher for LastThenFirst {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(LastThenFirst)
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        _endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        Ok(Some(EndpointId(if request.id() == 1 { 2 } else { 0 })))
    }
}

#[test]
fn a_decision_is_judged_against_engines_of_every_block_size() {
    // Three requests of the same 2,048 tokens (four 512-token trace blocks), a second
    // apart, on engines of 16-, 16- and 64-token blocks. The first goes to the 64-token
    // engine, which then holds all four; the second to an empty 16-token engine, while the
    // other 16-token engine is empty too: its best was the 64-token engine's four blocks,
    // found only if that engine is asked for its own block of the chain. The third goes
    // where the second did, which now holds all four: the best.
    let mut engines = vec![routerlab_engine::EngineConfig::dynamo(); 3];
    for (engine, block) in engines.iter_mut().zip([16, 16, 64]) {
        engine.engine_block_size = block;
    }
    let scenario = Scenario::new("in-process", trace("judge", 3, 1000, true))
        .endpoints(3)
        .timed(super::TimedSettings::at_trace_times(engines));
    let report = replay::<LastThenFirst>(&scenario, "last-then-first").unwrap();
    assert_eq!(requests_per_endpoint(&report), [2, 0, 1]);
    let quality = report.quality.expect("judged decisions");
    assert_eq!(quality.best_hit_blocks, 4 + 4);
    assert_eq!(quality.achieved_hit_blocks, 4);
    assert!((quality.kv_optimal_share - 2.0 / 3.0).abs() < 1e-6);
}

//! `serve`'s routing and health rules in process: the router's state with Rust plugins
//! driven through the real export shims (`routerlab_host::in_process`), no sockets.

use std::cell::Cell;

use routerlab_core::{Detector, EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_host::{EndpointTable, in_process};
use routerlab_route::{Router, WhenUnavailable};

use super::OnPluginError;
use super::health::HealthRule;
use super::plugins::Plugins;
use super::routed::Refusal;
use super::state::State;
use crate::prom::Scraped;

/// The endpoint with the fewest prompt tokens in flight (ties: the first), as the router's
/// own counts say; counts what it is told of the fleet.
struct FewestTokens;

// Per plugins' thread: each state's plugins run on a thread of their own (read through
// `Plugins::on_their_thread`), and tests run side by side.
thread_local! {
    static ADDED: Cell<u64> = const { Cell::new(0) };
    static REMOVED: Cell<u64> = const { Cell::new(0) };
}

impl Matcher for FewestTokens {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(FewestTokens)
    }
    fn match_request(
        &mut self,
        _request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        Ok(endpoints
            .available()
            .min_by_key(|e| e.inflight_prompt_tokens())
            .map(|e| e.id()))
    }
    fn add_endpoints(&mut self, endpoints: &Endpoints<'_>) -> Result<(), String> {
        ADDED.set(ADDED.get() + endpoints.len() as u64);
        Ok(())
    }
    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        REMOVED.set(REMOVED.get() + ids.len() as u64);
        Ok(())
    }
}

/// Fails every decision.
struct Broken;

impl Matcher for Broken {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(Broken)
    }
    fn match_request(
        &mut self,
        _request: &Request<'_>,
        _endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        Err("broken on purpose".into())
    }
}

/// Flags every endpoint whose scraped KV usage is at least a half.
struct HalfFull;

impl Detector for HalfFull {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(HalfFull)
    }
    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        for (pos, flag) in unavailable.iter_mut().enumerate() {
            *flag = endpoints.get(pos).kv_usage() >= 0.5;
        }
        Ok(())
    }
}

/// The endpoint forecast to give the first token soonest (ties: the first); no forecast,
/// no endpoint.
struct Soonest;

impl Matcher for Soonest {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(Soonest)
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        Ok(endpoints
            .available()
            .filter_map(|e| Some((request.predict(e.id())?.ttft_ns, e.id())))
            .min_by_key(|(ttft, id)| (*ttft, id.0))
            .map(|(_, id)| id))
    }
}

/// The endpoint running most of the request's adapter, then the one with the fewest active
/// adapters, then the first; for a request without an adapter (or where no endpoint says
/// what it holds), none. Fails on an adapter whose name does not match its number.
struct Holder;

impl Matcher for Holder {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(Holder)
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let Some((id, name)) = request.adapter() else {
            return Ok(None);
        };
        let expected: &[u8] = match id {
            1 => b"sql",
            2 => b"chat",
            _ => b"",
        };
        if name != expected {
            return Err(format!("adapter {id} is {name:?}"));
        }
        Ok(endpoints
            .available()
            .filter_map(|e| {
                let state = request.adapter_state(e.id())?;
                let active = e.lora().map_or(u32::MAX, |l| l.active);
                Some((
                    (state.running, std::cmp::Reverse((active, e.id().0))),
                    e.id(),
                ))
            })
            .max_by_key(|(key, _)| *key)
            .map(|(_, id)| id))
    }
}

const RULE: HealthRule = HealthRule {
    fails: 2,
    passes: 2,
};

fn state<M: Matcher>(name: &str, detector: bool) -> State {
    let matcher = in_process::matcher::<M>(name, "").unwrap();
    let detector = detector.then(|| in_process::detector::<HalfFull>("half-full", "").unwrap());
    let table = EndpointTable::new(["a:1", "b:1", "c:1"]);
    let Ok(router) = Router::new(matcher, detector, table, WhenUnavailable::Reject) else {
        panic!("a router over three endpoints")
    };
    State::new(
        Plugins::in_process(router, std::time::Duration::from_secs(10)).expect("a plugins thread"),
        None,
        16,
        RULE,
    )
}

/// A scrape that says the engine has `slots` LoRA slots and runs the adapters `running`.
fn lora(slots: u32, running: &[&str]) -> Option<Scraped> {
    Some(Scraped {
        lora: Some(crate::prom::LoraInfo {
            slots,
            running: running.iter().map(|n| n.to_string()).collect(),
            waiting: vec![],
        }),
        ..Scraped::default()
    })
}

fn usage(kv_usage: f64) -> Option<Scraped> {
    Some(Scraped {
        kv_usage,
        ..Scraped::default()
    })
}

#[test]
fn sessions_are_numbered_in_order_and_a_request_continues_its_session() {
    let mut s = state::<FewestTokens>("fewest-tokens", false);
    let first = s.admit(b"hello".to_vec(), Some("alice".into()), None, 10);
    let other = s.admit(b"hi".to_vec(), Some("bob".into()), Some(4), 20);
    let again = s.admit(b"hello again".to_vec(), Some("alice".into()), None, 30);
    let alone = s.admit(b"x".to_vec(), None, None, 40);
    assert_eq!((first.seq, first.session, first.parent), (1, 1, 0));
    assert_eq!((other.seq, other.session, other.parent), (2, 2, 0));
    assert_eq!((again.seq, again.session, again.parent), (3, 1, 1));
    assert_eq!((alone.seq, alone.session, alone.parent), (4, 0, 0));
    // Prompts are hashed in 16-byte blocks (the last one partial), as a replay hashes a
    // chat line; equal prefixes share their blocks' ids, a partial block is its own.
    let long = s.admit(vec![b'a'; 40], None, None, 50);
    let longer = s.admit(vec![b'a'; 70], None, None, 60);
    assert_eq!(long.hashes.len(), 3);
    assert_eq!(longer.hashes.len(), 5);
    assert_eq!(long.ids[..2], longer.ids[..2]);
    assert_ne!(long.ids[2], longer.ids[2]);
}

#[test]
fn the_matcher_sees_the_routers_own_in_flight_tokens() {
    let mut s = state::<FewestTokens>("fewest-tokens", false);
    let r1 = s.admit(vec![b'x'; 400], None, None, 0);
    let u1 = s.decide(&r1, 0, OnPluginError::Reject).unwrap();
    assert_eq!(s.send(u1, &r1), "a:1");
    let r2 = s.admit(vec![b'y'; 40], None, None, 1);
    let u2 = s.decide(&r2, 1, OnPluginError::Reject).unwrap();
    assert_eq!(u2, 1, "a has 100 tokens in flight, b none");
    assert_eq!(s.upstreams[0].inflight_tokens, 100);
    let learned = s.learn(&r1, u1, 1);
    assert_eq!(learned, Some(0), "the matcher learned it, in process");
    s.complete(&r1, u1, learned, 2);
    assert_eq!(
        (s.upstreams[0].inflight, s.upstreams[0].inflight_tokens),
        (0, 0)
    );
    assert_eq!(s.decide(&r2, 3, OnPluginError::Reject).unwrap(), 0);
}

#[test]
fn detector_verdicts_are_counted_and_a_fully_flagged_fleet_refuses() {
    let mut s = state::<FewestTokens>("fewest-tokens", true);
    s.scraped(0, usage(0.9), 0);
    let r = s.admit(b"hello".to_vec(), None, None, 0);
    assert_eq!(s.decide(&r, 0, OnPluginError::Reject).unwrap(), 1);
    assert_eq!(s.upstreams[0].unavailable, 1);
    s.scraped(1, usage(0.5), 0);
    s.scraped(2, usage(0.7), 0);
    let Err(Refusal(status, message)) = s.decide(&r, 1, OnPluginError::Reject) else {
        panic!("everything is flagged")
    };
    assert_eq!(status, 503);
    assert!(message.contains("flagged them all"), "{message}");
    assert_eq!(
        s.upstreams
            .iter()
            .map(|u| u.unavailable)
            .collect::<Vec<_>>(),
        [2, 1, 1]
    );
}

#[test]
fn a_failing_plugin_is_refused_or_routed_round_robin_as_told() {
    let mut s = state::<Broken>("broken", false);
    let r = s.admit(b"hello".to_vec(), None, None, 0);
    let Err(Refusal(status, message)) = s.decide(&r, 0, OnPluginError::Reject) else {
        panic!("a failing matcher must not route")
    };
    assert_eq!(status, 503);
    assert!(message.contains("broken on purpose"), "{message}");
    let turns: Vec<usize> = (0..4)
        .map(|t| s.decide(&r, t, OnPluginError::RoundRobin).unwrap())
        .collect();
    assert_eq!(turns, [0, 1, 2, 0]);
    assert_eq!(s.plugin_errors, 5);
}

#[test]
fn an_engine_leaves_only_after_failures_in_a_row_and_returns_after_passes() {
    let mut s = state::<FewestTokens>("fewest-tokens", false);
    let counts = |s: &State| s.plugins.on_their_thread(|| (ADDED.get(), REMOVED.get()));
    let (added, removed) = counts(&s);
    // One lost scrape: still in the fleet, the matcher told nothing.
    s.scraped(1, None, 0);
    s.scraped(1, usage(0.1), 0);
    s.scraped(1, None, 0);
    assert!(s.upstreams[1].index.is_some());
    assert_eq!(s.plugins.fleet_len(), 3);
    // Two in a row: out.
    s.scraped(1, None, 0);
    assert_eq!(s.upstreams[1].index, None);
    assert_eq!(s.plugins.fleet_len(), 2);
    assert_eq!(counts(&s).1, removed + 1);
    let r = s.admit(b"hello".to_vec(), None, None, 0);
    for t in 0..6 {
        let u = s.decide(&r, t, OnPluginError::Reject).unwrap();
        assert_ne!(u, 1, "an engine out of the fleet is never picked");
        s.send(u, &r);
        assert_ne!(s.next_untried(&[], routerlab_core::Phase::Whole), Some(1));
    }
    // One good scrape is not enough to come back; two are.
    s.scraped(1, usage(0.1), 0);
    assert_eq!(s.upstreams[1].index, None);
    s.scraped(1, usage(0.1), 0);
    assert_eq!(
        s.upstreams[1].index,
        Some(routerlab_route::EndpointIndex(3)),
        "back with a new stable index"
    );
    assert_eq!(counts(&s).0, added + 1);
    assert!(s.healthy());
}

#[test]
fn the_session_map_is_bounded_and_keys_of_any_length_cost_the_same() {
    use super::state::MAX_SESSIONS;
    let mut s = state::<FewestTokens>("fewest-tokens", false);
    // A megabyte-long key is a session like any other.
    let long = "k".repeat(1 << 20);
    let first = s.admit(b"x".to_vec(), Some(long.clone()), None, 0);
    let again = s.admit(b"x".to_vec(), Some(long.clone()), None, 1);
    assert_eq!(
        (first.session, again.session, again.parent),
        (1, 1, first.seq)
    );
    // Past the bound the least recently seen session is forgotten.
    for i in 0..MAX_SESSIONS + 10 {
        s.admit(b"x".to_vec(), Some(format!("user-{i}")), None, 2);
    }
    assert_eq!(s.sessions_len(), MAX_SESSIONS);
    let back = s.admit(b"x".to_vec(), Some(long), None, 3);
    assert_eq!(back.parent, 0, "forgotten: it starts again");
    assert!(back.session > MAX_SESSIONS as u64, "with a new number");
    let recent = format!("user-{}", MAX_SESSIONS + 9);
    let continued = s.admit(b"x".to_vec(), Some(recent), None, 4);
    assert_ne!(continued.parent, 0, "a recent session continues");
}

#[test]
fn a_refusal_says_whether_nothing_is_healthy_or_everything_is_flagged() {
    let mut s = state::<FewestTokens>("fewest-tokens", false);
    for u in 0..3 {
        s.scraped(u, None, 0);
        s.scraped(u, None, 0);
    }
    assert!(!s.healthy());
    let r = s.admit(b"hello".to_vec(), None, None, 0);
    let Err(Refusal(status, message)) = s.decide(&r, 0, OnPluginError::Reject) else {
        panic!("nothing is in the fleet")
    };
    assert_eq!(status, 503);
    assert!(message.contains("no endpoint is healthy"), "{message}");
}

#[test]
fn failed_answers_take_an_engine_out_until_the_cooldown_has_passed() {
    use super::state::ANSWER_COOLDOWN_NS;
    let mut s = state::<FewestTokens>("fewest-tokens", false);
    s.answered(2, false, 1_000);
    s.answered(2, true, 2_000);
    s.answered(2, false, 3_000);
    assert!(s.upstreams[2].index.is_some(), "a success broke the run");
    s.answered(2, false, 4_000);
    assert_eq!(s.upstreams[2].index, None, "two in a row: out");
    // Its scrapes are fine, but not for long enough yet.
    s.scraped(2, usage(0.1), 4_000 + ANSWER_COOLDOWN_NS - 1);
    assert_eq!(s.upstreams[2].index, None);
    s.scraped(2, usage(0.1), 4_000 + ANSWER_COOLDOWN_NS);
    assert!(s.upstreams[2].index.is_some(), "back after the cooldown");
}

#[test]
fn forecasts_follow_what_the_router_sent_each_engine_until_it_finishes() {
    let mut s = state::<Soonest>("soonest", false);
    // 4,000 bytes: 1,000 prompt tokens, a 4-step prefill at the preset's budget.
    let long = s.admit(vec![b'x'; 4000], None, Some(100), 0);
    assert_eq!(
        s.decide(&long, 0, OnPluginError::Reject),
        Ok(0),
        "all idle: the first"
    );
    s.send(0, &long);
    let next = s.admit(vec![b'y'; 400], None, None, 1);
    assert_eq!(
        s.decide(&next, 1, OnPluginError::Reject),
        Ok(1),
        "a is busy"
    );
    s.send(1, &next);
    let third = s.admit(vec![b'z'; 400], None, None, 2);
    assert_eq!(s.decide(&third, 2, OnPluginError::Reject), Ok(2), "so is b");
    // Their first tokens came and the long one finished: a is the soonest again.
    let learned = s.learn(&long, 0, 3);
    s.first_token(&long, 0, learned, 3);
    s.first_token(&next, 1, None, 3);
    s.complete(&long, 0, learned, 4);
    let fourth = s.admit(vec![b'w'; 400], None, None, 5);
    assert_eq!(s.decide(&fourth, 5, OnPluginError::Reject), Ok(0));
}

#[test]
fn a_request_naming_an_adapter_goes_where_the_scrapes_and_the_books_say_it_runs() {
    let mut s = state::<Holder>("holder", false);
    s.set_base_models(vec!["base".into()]);
    let lora = |running: &[&str]| lora(2, running);
    // `a` runs `sql` (another router's requests), `b` runs nothing, `c` says nothing.
    s.scraped(0, lora(&["sql"]), 0);
    s.scraped(1, lora(&[]), 0);
    s.scraped(2, usage(0.0), 0);
    let ask = |s: &mut State, model: &str, at: u64| {
        let mut routed = s.admit(b"hello".to_vec(), None, None, at);
        routed.adapter = s.adapter(model).unwrap();
        let decided = s.decide(&routed, at, OnPluginError::Reject);
        (routed, decided)
    };
    let (_, sql) = ask(&mut s, "sql", 1);
    assert_eq!(sql, Ok(0), "the scrape says `a` runs it");
    let (chat, to) = ask(&mut s, "chat", 2);
    assert_eq!(to, Ok(1), "no one runs it: the fewest active adapters");
    s.send(1, &chat);
    s.first_token(&chat, 1, None, 3);
    // Its next request follows it to `b` though no scrape has said so yet.
    s.scraped(0, lora(&["sql", "chat"]), 4);
    let (_, again) = ask(&mut s, "chat", 5);
    assert_eq!(again, Ok(1), "`b` runs it by the router's own books");
    s.release(1, &chat);
    let (_, later) = ask(&mut s, "chat", 6);
    assert_eq!(later, Ok(0), "finished on `b`; the scrape says `a` runs it");
    let (_, base) = ask(&mut s, "base", 7);
    assert!(
        matches!(&base, Err(Refusal(503, m)) if m.contains("chose no endpoint")),
        "the base model names no adapter: {base:?}"
    );
    assert_eq!(
        s.plugin_errors, 0,
        "every adapter's name matched its number"
    );
}

#[test]
fn a_forecast_adds_the_load_of_an_adapter_the_engine_is_not_running() {
    let mut s = state::<Soonest>("soonest", false);
    s.set_base_models(vec!["base".into()]);
    let mut config = routerlab_engine::Preset::Dynamo.config();
    config.lora = Some(routerlab_engine::LoraConfig {
        slots: 4,
        load_ms: 100.0,
        step_overhead: 0.0,
    });
    s.set_engine_model(config);
    let lora = |running: &[&str]| lora(4, running);
    s.scraped(0, lora(&[]), 0);
    s.scraped(1, lora(&["sql"]), 0);
    s.scraped(2, lora(&[]), 0);
    let mut routed = s.admit(b"hello".to_vec(), None, None, 1);
    routed.adapter = s.adapter("sql").unwrap();
    assert_eq!(
        s.decide(&routed, 1, OnPluginError::Reject),
        Ok(1),
        "elsewhere sql loads first"
    );
    let base = s.admit(b"hello".to_vec(), None, None, 2);
    assert_eq!(
        s.decide(&base, 2, OnPluginError::Reject),
        Ok(0),
        "the base model loads nothing: a tie, the first"
    );
}

//! What the plugins' lock guards: the plugins (in process or in a host), the engines as the
//! router keeps them, the session numbering and block interning that make each request a
//! replay's request. No I/O and no clock here (times are arguments), so every rule of
//! `serve` short of the network is tested in process, with Rust plugins driven through the
//! real shims.

use routerlab_core::hash::{BlockInterner, hash64};
use routerlab_core::{Phase, Role, Unit};
use routerlab_host::{EndpointLoad, RequestData};
use routerlab_policy_kit::LruMap;
use routerlab_route::EndpointIndex;
use routerlab_trace::blocks::{hash_text_blocks, prompt_tokens};
use routerlab_trace::decision_log::LIVE_KV_BLOCKS;

use super::OnPluginError;
use super::health::{Health, HealthRule};
use super::lora::{Held, LoraNames};
use super::mirror::Mirror;
use super::plugins::{HostCounts, Notice, Plugins};
use super::routed::{Refusal, Routed};
use crate::prom::Scraped;

/// Sessions `serve` remembers at once; the least recently seen is forgotten past it (it
/// continues as a new session if it comes back). Keys are kept as a 64-bit hash, so a key
/// of any length costs the same few bytes: under 8 MiB for the whole map (a 32-byte slot and
/// an index entry each, with the growth room of their tables).
pub const MAX_SESSIONS: usize = 65_536;

/// How long an engine that its answers took out stays out before a good scrape may bring
/// it back: its metrics said it was fine all along, so they alone cannot clear it sooner.
pub const ANSWER_COOLDOWN_NS: u64 = 10_000_000_000;

/// Seed of the session-key hash (any fixed value; it only has to be the same all run).
const SESSION_KEY_SEED: u64 = 0x5345_5353_494f_4e53;

/// One engine, as the router keeps it.
pub(super) struct Upstream {
    pub(super) name: String,
    /// Its pool (aggregated unless the fleet is split into prefill and decode pools).
    pub(super) role: Role,
    /// Its stable index while it is in the fleet.
    pub(super) index: Option<EndpointIndex>,
    /// Its scrapes' standing.
    pub(super) health: Health,
    /// Its answers' standing (5xx and broken bodies count against it).
    pub(super) answers: Health,
    /// When its answers took it out, ns (another chance [`ANSWER_COOLDOWN_NS`] later, if
    /// its scrapes are good then).
    out_since_ns: u64,
    pub(super) scraped: Scraped,
    pub(super) inflight: u64,
    pub(super) inflight_tokens: u64,
    pub(super) requests: u64,
    pub(super) errors: u64,
    pub(super) retries: u64,
    pub(super) unavailable: u64,
}

/// The plugins and the router's books.
pub(super) struct State {
    /// The whole fleet's plugins, or the prefill pool's when it is split.
    pub(super) plugins: Plugins,
    /// The decode pool's plugins (instances of their own), when the fleet is split.
    pub(super) decode: Option<Plugins>,
    pub(super) upstreams: Vec<Upstream>,
    pub(super) block_size: u32,
    health: HealthRule,
    pub(super) interner: BlockInterner,
    /// Hash of a session key -> (session number, last request of it), least recently used
    /// first out past [`MAX_SESSIONS`].
    sessions: LruMap<(u64, u64)>,
    /// Session numbers given so far.
    last_session: u64,
    next_seq: u64,
    turn: usize,
    pub(super) plugin_errors: u64,
    /// What the engines hold, from their KV events (`serve --kv-events`).
    kv_index: Option<std::sync::Arc<super::kv_index::KvIndex>>,
    /// What each engine is doing, as the forecasts of `predict` need it.
    mirror: Mirror,
    /// The base models, and the adapters requests named.
    lora: LoraNames,
    /// Endpoints the matcher could choose among at the last decision.
    pub(super) last_choices: usize,
    /// What the peer replicas have in flight, when they share it (`--replica-sync`).
    pub(super) peers: super::peers::PeerBooks,
}

impl State {
    /// Books for the plugins' endpoints, all in the fleet to begin with; with `decode`,
    /// the fleet is split, its first `prefill` endpoints the prefill pool.
    pub(super) fn new(
        plugins: Plugins,
        decode: Option<(Plugins, usize)>,
        block_size: u32,
        health: HealthRule,
    ) -> State {
        let prefill = decode.as_ref().map(|(_, prefill)| *prefill);
        let upstreams = plugins
            .endpoints()
            .into_iter()
            .enumerate()
            .map(|(u, (name, index))| Upstream {
                name,
                role: match prefill {
                    None => Role::Aggregated,
                    Some(p) if u < p => Role::Prefill,
                    Some(_) => Role::Decode,
                },
                index: Some(index),
                health: Health::default(),
                answers: Health::default(),
                out_since_ns: 0,
                scraped: Scraped::default(),
                inflight: 0,
                inflight_tokens: 0,
                requests: 0,
                errors: 0,
                retries: 0,
                unavailable: 0,
            })
            .collect::<Vec<_>>();
        let mirror = Mirror::new(routerlab_engine::Preset::Dynamo.config(), upstreams.len());
        State {
            plugins,
            decode: decode.map(|(plugins, _)| plugins),
            upstreams,
            block_size,
            health,
            interner: BlockInterner::default(),
            sessions: LruMap::default(),
            last_session: 0,
            next_seq: 1,
            turn: 0,
            plugin_errors: 0,
            kv_index: None,
            mirror,
            lora: LoraNames::default(),
            last_choices: 0,
            peers: super::peers::PeerBooks::default(),
        }
    }

    /// From now on, a request whose `model` is none of `base` names a LoRA adapter.
    pub(super) fn set_base_models(&mut self, base: Vec<String>) {
        self.lora = LoraNames::new(base);
    }

    /// The LoRA adapter a request whose `model` is `model` asks for, numbered and named.
    pub(super) fn adapter(&mut self, model: &str) -> Result<Option<(u32, Box<str>)>, Refusal> {
        let (mirror, upstreams) = (&self.mirror, self.upstreams.len());
        let in_flight = || {
            (0..upstreams)
                .flat_map(|u| mirror.adapters(u).map(|(id, _)| id))
                .collect()
        };
        let id = self.lora.number(model, in_flight)?;
        Ok((id != 0).then(|| (id, model.into())))
    }

    /// What upstream `u` holds of adapters, when its scrape says.
    fn held(&self, u: usize) -> Option<Held<'_>> {
        held(&self.upstreams[u], &self.mirror, &self.lora, u)
    }

    /// Forecasts `predict` with the engine model of `config` from now on (the `dynamo`
    /// preset until then).
    pub(super) fn set_engine_model(&mut self, config: routerlab_engine::EngineConfig) {
        self.mirror = Mirror::new(config, self.upstreams.len());
    }

    /// Answers the plugins' `cached_prefix` from `index` from now on.
    pub(super) fn set_kv_index(&mut self, index: std::sync::Arc<super::kv_index::KvIndex>) {
        self.kv_index = Some(index);
    }

    /// Each followed endpoint's KV-event counts (none without `--kv-events`).
    pub(super) fn kv_counts(&self) -> Vec<(String, super::kv_index::KvCounts)> {
        let Some(index) = &self.kv_index else {
            return Vec::new();
        };
        index
            .endpoints()
            .enumerate()
            .map(|(slot, name)| (name.to_owned(), index.counts(slot)))
            .collect()
    }

    /// The KV index, and (stable index, slot) of each endpoint in the fleet it follows.
    fn kv_lookup(
        &self,
    ) -> (
        Option<std::sync::Arc<super::kv_index::KvIndex>>,
        Vec<(u32, usize)>,
    ) {
        let Some(index) = &self.kv_index else {
            return (None, Vec::new());
        };
        let slots = self
            .upstreams
            .iter()
            .filter_map(|u| Some((u.index?.0, index.slot_of(&u.name)?)))
            .collect();
        (Some(index.clone()), slots)
    }

    /// Sessions remembered now.
    #[cfg(test)]
    pub(super) fn sessions_len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether any endpoint is in the fleet.
    pub(super) fn healthy(&self) -> bool {
        self.upstreams.iter().any(|u| u.index.is_some())
    }

    /// The next request, numbered and hashed as a replay numbers and hashes a chat line:
    /// a session key seen before continues that session (its previous request is the
    /// parent); a new one gets the next session number.
    pub(super) fn admit(
        &mut self,
        prompt: Vec<u8>,
        session_key: Option<String>,
        output_tokens: Option<u64>,
        arrival_ns: u64,
    ) -> Routed {
        let seq = self.next_seq;
        self.next_seq += 1;
        let (session, parent) = match session_key {
            Some(key) => {
                let last_session = &mut self.last_session;
                let entry = self.sessions.touch_or_insert_with(
                    hash64(key.as_bytes(), SESSION_KEY_SEED),
                    || {
                        *last_session += 1;
                        (*last_session, 0)
                    },
                );
                let parent = entry.1;
                entry.1 = seq;
                let session = entry.0;
                if self.sessions.len() > MAX_SESSIONS {
                    self.sessions.pop_oldest();
                }
                (session, parent)
            }
            None => (0, 0),
        };
        let mut hashes = Vec::new();
        hash_text_blocks(&prompt, self.block_size as usize, &mut hashes);
        let mut ids = Vec::new();
        self.interner.intern_all(&hashes, &mut ids);
        Routed {
            seq,
            arrival_ns,
            prompt,
            tokens: None,
            hashes,
            ids,
            output_tokens,
            session,
            parent,
            phase: Phase::Whole,
            adapter: None,
            ends_session: false,
        }
    }

    /// Whether the fleet is split into a prefill and a decode pool.
    pub(super) fn disaggregated(&self) -> bool {
        self.decode.is_some()
    }

    /// The plugins that route `phase`.
    pub(super) fn plugins_for(&mut self, phase: Phase) -> &mut Plugins {
        pools(&mut self.plugins, &mut self.decode, phase)
    }

    /// Whether upstream `u` serves `phase`.
    fn serves(&self, u: usize, phase: Phase) -> bool {
        match (phase, self.upstreams[u].role) {
            (Phase::Prefill, role) => role == Role::Prefill,
            (Phase::Decode, role) => role == Role::Decode,
            _ => true,
        }
    }

    /// The detector and the matcher decide; a failing plugin is answered by
    /// `on_plugin_error`. Returns the upstream chosen.
    pub(super) fn decide(
        &mut self,
        routed: &Routed,
        now_ns: u64,
        on_plugin_error: OnPluginError,
    ) -> Result<usize, Refusal> {
        self.sync();
        let loads = self.loads();
        let data = routed.data(self.block_size, now_ns);
        let (kv, slots) = self.kv_lookup();
        let adapters: Vec<Option<Held<'_>>> = match routed.adapter {
            Some(_) => (self.upstreams.iter().enumerate())
                .map(|(u, upstream)| held(upstream, &self.mirror, &self.lora, u))
                .collect(),
            None => Vec::new(),
        };
        let (mirror, upstreams) = (&self.mirror, &self.upstreams);
        let (plugins, decode) = (&mut self.plugins, &mut self.decode);
        let prompt = routed.tokens();
        let decided = super::kv_index::lend(kv.as_deref(), slots, routed, data, |data| {
            // The engine model's forecast on each endpoint, from the mirror of its state.
            let cached = data.cached_prefix;
            let predict = |index: u32| {
                let u = upstreams
                    .iter()
                    .position(|u| u.index == Some(EndpointIndex(index)))?;
                let held = cached
                    .and_then(|cached| cached(index))
                    .map_or(0, |units| prompt_tokens(Unit::Bytes, units));
                let kv_usage = upstreams[u].scraped.kv_usage;
                let mut forecast = mirror.predict(u, prompt, held, kv_usage, now_ns);
                // An adapter the engine is not running loads first, as far as its scrape
                // and the router's books say.
                if let (Some((_, name)), Some(Some(engine))) = (&routed.adapter, adapters.get(u))
                    && engine.state(name).resident == 0
                {
                    forecast.ttft_ns = forecast.ttft_ns.saturating_add(mirror.adapter_load_ns());
                }
                Some(forecast)
            };
            // What each endpoint holds of the request's adapter.
            let adapter_state = |index: u32| {
                let (_, name) = routed.adapter.as_ref()?;
                let u = upstreams
                    .iter()
                    .position(|u| u.index == Some(EndpointIndex(index)))?;
                Some(adapters.get(u)?.as_ref()?.state(name))
            };
            let data = RequestData {
                predict: Some(&predict),
                lora: data.lora.map(|lora| routerlab_host::Lora {
                    state: Some(&adapter_state),
                    ..lora
                }),
                ..*data
            };
            pools(plugins, decode, routed.phase).decide(&data, loads)
        });
        match decided {
            Ok(decided) => {
                self.last_choices = (0..self.upstreams.len())
                    .filter(|&u| self.upstreams[u].index.is_some() && self.serves(u, routed.phase))
                    .count()
                    .saturating_sub(decided.flagged.len());
                for index in decided.flagged {
                    if let Some(u) = self.upstream_of(index) {
                        self.upstreams[u].unavailable += 1;
                    }
                }
                match decided.endpoint.and_then(|index| self.upstream_of(index)) {
                    Some(upstream) => Ok(upstream),
                    None if !self.healthy() => Err(Refusal(
                        503,
                        "no endpoint is healthy: every engine failed its health checks".into(),
                    )),
                    None if !(0..self.upstreams.len()).any(|u| {
                        self.upstreams[u].index.is_some() && self.serves(u, routed.phase)
                    }) =>
                    {
                        Err(Refusal(
                            503,
                            format!(
                                "no {} endpoint is healthy: every one failed its health checks",
                                if routed.phase == Phase::Prefill {
                                    "prefill"
                                } else {
                                    "decode"
                                }
                            ),
                        ))
                    }
                    None if decided.constrained => Err(Refusal(
                        503,
                        "no endpoint is available for this request (the detector flagged them all)"
                            .into(),
                    )),
                    None => Err(Refusal(
                        503,
                        "the matcher chose no endpoint for this request".into(),
                    )),
                }
            }
            Err(e) => {
                self.plugin_errors += 1;
                match on_plugin_error {
                    OnPluginError::Reject => Err(Refusal(503, format!("routing failed: {e}"))),
                    OnPluginError::RoundRobin => self
                        .next_untried(&[], routed.phase)
                        .ok_or_else(|| Refusal(503, "no healthy endpoint".into())),
                }
            }
        }
    }

    /// The next healthy endpoint serving `phase`, round robin, that is not in `tried`.
    pub(super) fn next_untried(&mut self, tried: &[usize], phase: Phase) -> Option<usize> {
        let n = self.upstreams.len();
        for step in 0..n {
            let u = (self.turn + step) % n;
            if self.upstreams[u].index.is_some() && !tried.contains(&u) && self.serves(u, phase) {
                self.turn = u + 1;
                return Some(u);
            }
        }
        None
    }

    /// `routed` is being sent to `upstream`: it counts as in flight there. Returns the
    /// upstream's name.
    pub(super) fn send(&mut self, upstream: usize, routed: &Routed) -> String {
        let held = match &self.kv_index {
            Some(index) => index
                .slot_of(&self.upstreams[upstream].name)
                .map_or(0, |slot| super::kv_index::held_units(index, slot, routed)),
            None => 0,
        };
        self.mirror.sent(
            upstream,
            routed.seq,
            routed.tokens(),
            prompt_tokens(Unit::Bytes, held),
            routed.output_tokens,
            routed.adapter_id(),
        );
        let u = &mut self.upstreams[upstream];
        u.inflight += 1;
        u.inflight_tokens += routed.tokens();
        u.requests += 1;
        u.name.clone()
    }

    /// The request no longer occupies `upstream`.
    pub(super) fn release(&mut self, upstream: usize, routed: &Routed) {
        self.release_seq(upstream, routed.seq, routed.tokens());
    }

    /// [`State::release`] of the request `seq` of `tokens` prompt tokens.
    pub(super) fn release_seq(&mut self, upstream: usize, seq: u64, tokens: u64) {
        self.mirror.left(upstream, seq);
        let u = &mut self.upstreams[upstream];
        u.inflight = u.inflight.saturating_sub(1);
        u.inflight_tokens = u.inflight_tokens.saturating_sub(tokens);
    }

    /// The engine took the request: the matcher learns where it went. Returns which
    /// plugins learned it (see [`Plugins::generation`]), `None` when none did.
    pub(super) fn learn(&mut self, routed: &Routed, upstream: usize, now_ns: u64) -> Option<u64> {
        self.sync();
        let index = self.upstreams[upstream].index?;
        let data = routed.data(self.block_size, now_ns);
        let (kv, slots) = self.kv_lookup();
        let learned = super::kv_index::lend(kv.as_deref(), slots, routed, data, |data| {
            let plugins = self.plugins_for(routed.phase);
            plugins
                .notify(Notice::Learn, data, index)
                .map(|()| plugins.generation())
        });
        match learned {
            Ok(generation) => Some(generation),
            Err(_) => {
                self.plugin_errors += 1;
                None
            }
        }
    }

    /// The request's first token came from `upstream` (`learned`: what [`State::learn`]
    /// returned).
    pub(super) fn first_token(
        &mut self,
        routed: &Routed,
        upstream: usize,
        learned: Option<u64>,
        now_ns: u64,
    ) {
        self.mirror.first_token(upstream, routed.seq, now_ns);
        if let Some(index) = self.learned_at(upstream, learned, routed.phase) {
            let data = routed.data(self.block_size, now_ns);
            let (kv, slots) = self.kv_lookup();
            let told = super::kv_index::lend(kv.as_deref(), slots, routed, data, |data| {
                self.plugins_for(routed.phase)
                    .notify(Notice::FirstToken, data, index)
            });
            if told.is_err() {
                self.plugin_errors += 1;
            }
        }
    }

    /// The request finished on `upstream` (`learned`: what [`State::learn`] returned).
    pub(super) fn complete(
        &mut self,
        routed: &Routed,
        upstream: usize,
        learned: Option<u64>,
        now_ns: u64,
    ) {
        self.release(upstream, routed);
        if let Some(index) = self.learned_at(upstream, learned, routed.phase) {
            let data = routed.data(self.block_size, now_ns);
            let (kv, slots) = self.kv_lookup();
            let told = super::kv_index::lend(kv.as_deref(), slots, routed, data, |data| {
                self.plugins_for(routed.phase)
                    .notify(Notice::Complete, data, index)
            });
            if told.is_err() {
                self.plugin_errors += 1;
            }
        }
    }

    /// `upstream`'s index, when the plugins that answer now learned the request there and
    /// it is still in the fleet.
    fn learned_at(
        &mut self,
        upstream: usize,
        learned: Option<u64>,
        phase: Phase,
    ) -> Option<EndpointIndex> {
        if learned? != self.plugins_for(phase).generation() {
            return None;
        }
        self.upstreams[upstream].index
    }

    /// The outcome of one scrape of `upstream` (`None`: it failed). Health changes only
    /// after the rule's run of failures or successes; then the matcher is told
    /// (`remove_endpoints` / `add_endpoints`).
    pub(super) fn scraped(&mut self, upstream: usize, scraped: Option<Scraped>, now_ns: u64) {
        let ok = scraped.is_some();
        let rule = self.health;
        let u = &mut self.upstreams[upstream];
        if let Some(scraped) = scraped {
            u.scraped = scraped;
        }
        u.health.observe(ok, rule);
        if ok && !u.answers.up() && now_ns.saturating_sub(u.out_since_ns) >= ANSWER_COOLDOWN_NS {
            u.answers = Health::default();
        }
        self.apply_standing(upstream);
    }

    /// How an answer from `upstream` went at `now_ns`: `false` for a 5xx or a body that
    /// broke off.
    pub(super) fn answered(&mut self, upstream: usize, ok: bool, now_ns: u64) {
        let rule = self.health;
        let u = &mut self.upstreams[upstream];
        if u.answers.observe(ok, rule) == Some(false) {
            u.out_since_ns = now_ns;
        }
        self.apply_standing(upstream);
    }

    /// Puts `upstream` in the fleet or takes it out, as its scrapes and answers say, and
    /// tells the matcher when that changes anything.
    fn apply_standing(&mut self, upstream: usize) {
        self.sync();
        let u = &self.upstreams[upstream];
        let up = u.health.up() && u.answers.up();
        match (up, u.index) {
            (true, None) => {
                let (name, role) = (u.name.clone(), u.role);
                // Both pools' routers keep the whole fleet's table, changed alike, so the
                // index one gives is the other's too.
                match self.plugins.add_endpoint(&name, role) {
                    Ok(index) => self.upstreams[upstream].index = Some(index),
                    Err(_) => self.plugin_errors += 1,
                }
                if let Some(decode) = &mut self.decode
                    && decode.add_endpoint(&name, role).is_err()
                {
                    self.plugin_errors += 1;
                }
            }
            (false, Some(index)) => {
                self.upstreams[upstream].index = None;
                if self.plugins.remove_endpoint(index).is_err() {
                    self.plugin_errors += 1;
                }
                if let Some(decode) = &mut self.decode
                    && decode.remove_endpoint(index).is_err()
                {
                    self.plugin_errors += 1;
                }
            }
            _ => {}
        }
    }

    /// The upstream with stable index `index`.
    fn upstream_of(&self, index: EndpointIndex) -> Option<usize> {
        self.upstreams.iter().position(|u| u.index == Some(index))
    }

    /// A restarted plugin host starts with the whole starting fleet: each upstream takes the
    /// index the new host gave it, and the host is told which of them are out.
    fn sync(&mut self) {
        let Some(fresh) = self.plugins.restarted() else {
            return;
        };
        for u in 0..self.upstreams.len() {
            let index = fresh
                .iter()
                .find(|(name, _)| *name == self.upstreams[u].name)
                .map(|(_, index)| *index);
            if self.upstreams[u].index.is_some() {
                self.upstreams[u].index = index;
            } else if let Some(index) = index
                && self.plugins.remove_endpoint(index).is_err()
            {
                self.plugin_errors += 1;
            }
        }
    }

    /// The plugin host's failures (`None` in process).
    /// What is stuck, when a plugin call is past its deadline and has not returned.
    pub(super) fn plugins_stuck(&self) -> Option<String> {
        self.plugins
            .stuck()
            .or_else(|| self.decode.as_ref().and_then(Plugins::stuck))
    }

    pub(super) fn host_counts(&self) -> Option<HostCounts> {
        self.plugins.host_counts()
    }

    /// Notices to the plugins, sent without waiting, that failed (every pool's).
    pub(super) fn late_failures(&self) -> u64 {
        self.plugins.late_failures() + self.decode.as_ref().map_or(0, Plugins::late_failures)
    }

    /// Every endpoint in the fleet as the decision log records it.
    /// (`inflight` as the plugins see it: the peers' too, when replicas share).
    pub(super) fn candidates(&self) -> Vec<routerlab_trace::decision_log::Candidate> {
        (self.upstreams.iter().enumerate())
            .filter(|(_, u)| u.index.is_some())
            .map(|(i, u)| routerlab_trace::decision_log::Candidate {
                endpoint: u.name.clone(),
                running: u.scraped.running,
                waiting: u.scraped.waiting,
                kv_usage: u.scraped.kv_usage,
                inflight: u.inflight + self.peers.at(i).0,
            })
            .collect()
    }

    /// Every endpoint in the fleet with its current figures, for the plugins to read.
    pub(super) fn loads(&self) -> Vec<(EndpointIndex, EndpointLoad)> {
        self.upstreams
            .iter()
            .enumerate()
            .filter_map(|(u, upstream)| {
                let index = upstream.index?;
                let peers = self.peers.at(u);
                let load = EndpointLoad {
                    running: upstream.scraped.running,
                    waiting: upstream.scraped.waiting,
                    kv_blocks_used: (upstream.scraped.kv_usage * LIVE_KV_BLOCKS as f64).round()
                        as u64,
                    kv_blocks_total: LIVE_KV_BLOCKS,
                    inflight_prompt_tokens: upstream.inflight_tokens + peers.1,
                    inflight_requests: upstream.inflight + peers.0,
                    kv_block_tokens: 0,
                    lora: self.held(u).map(|held| held.slots()).unwrap_or_default(),
                };
                Some((index, load))
            })
            .collect()
    }
}

/// What `upstream` (number `u`) holds of adapters, when its scrape says.
fn held<'a>(
    upstream: &'a Upstream,
    mirror: &'a Mirror,
    names: &'a LoraNames,
    u: usize,
) -> Option<Held<'a>> {
    let scraped = upstream.scraped.lora.as_ref()?;
    let sent = (mirror.adapters(u))
        .filter_map(|(id, decoding)| Some((names.name(id)?, decoding)))
        .collect();
    Some(Held { scraped, sent })
}

/// The plugins of `decode` when it routes a decode leg of a split fleet, else `plugins`.
fn pools<'a>(
    plugins: &'a mut Plugins,
    decode: &'a mut Option<Plugins>,
    phase: Phase,
) -> &'a mut Plugins {
    match (phase, decode) {
        (Phase::Decode, Some(decode)) => decode,
        _ => plugins,
    }
}

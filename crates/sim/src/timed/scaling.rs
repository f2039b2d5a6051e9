//! A fleet whose size a scaler plugin sets (ABI 1.7): on each tick the scaler sees the
//! serving endpoints and the last interval's traffic and answers a desired count; endpoints
//! start after a start-up delay with empty caches and join the routers (`add_endpoints`),
//! and leave by draining: no new requests, what runs finishes, then `remove_endpoints`.
//!
//! The engines are slots, one per endpoint the GPU ceiling allows (in each pool of a
//! disaggregated fleet: its prefill slots first, then its decode slots), made at the start;
//! an endpoint that is not running holds no GPU, and the pools share the ceiling. Routers
//! list only the endpoints serving or draining, so a list position and an engine slot
//! differ: `Sim::listed` maps one to the other.

use routerlab_core::Role;
use routerlab_host::{EndpointTable, PoolObservation};
use routerlab_report::{PoolPoint, ScalingEvent, ScalingPoint, ScalingReport, round6};
use routerlab_route::{EndpointIndex, Replicas};

use super::Sim;
use super::events::Event;
use crate::SimError;

/// How a timed replay's fleet is scaled (the scaler itself is the routers':
/// [`Replicas::with_scaler`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalingSettings {
    /// How often the scaler is asked, ns (above 0).
    pub interval_ns: u64,
    /// How long a started endpoint takes to serve, ns.
    pub startup_ns: u64,
    /// Endpoints serving at the start (at least `min_endpoints`, at most the ceiling), in
    /// all.
    pub initial: u32,
    /// The fewest endpoints kept (at least 1), in each pool.
    pub min_endpoints: u32,
    /// GPUs one endpoint takes (its tensor-parallel size).
    pub gpus_per_endpoint: u32,
    /// A disaggregated fleet: its prefill slots (the first of the engines), and how many
    /// of them serve at the start (the rest of `initial` are the first decode slots);
    /// `None` for an aggregated fleet.
    pub prefill: Option<(u32, u32)>,
    /// The most endpoints the pools may hold together (the GPU ceiling over
    /// `gpus_per_endpoint`).
    pub max_endpoints: u32,
}

/// Where one endpoint slot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Off,
    Starting { ready_at: u64, started: u64 },
    Ready { started: u64 },
    Draining,
}

/// The scaled fleet's state and its record.
pub(super) struct Autoscale {
    settings: ScalingSettings,
    scaler: String,
    slots: Vec<SlotState>,
    /// Each slot's pool.
    roles: Vec<Role>,
    /// The pools, in the order the scaler sees them.
    pools: Vec<Role>,
    /// The last tick's time.
    last_tick: u64,
    /// The interval's traffic: arrivals and their prompt and output tokens.
    arrivals: u64,
    arrival_prompt: u64,
    arrival_output: u64,
    /// The interval's finished requests: count, TTFT and TPOT sums, prompt and hit tokens.
    finished: u64,
    ttft_ns: u128,
    tpot_ms: f64,
    prompt: u64,
    hit: u64,
    /// GPU-nanoseconds held, and endpoint-nanoseconds, since `held_since`.
    gpu_ns: u128,
    endpoint_ns: u128,
    held_since: Option<u64>,
    peak: u32,
    waited: u64,
    /// Per pool, what the scaler last wanted.
    desired: Vec<u32>,
    timeline: Vec<ScalingPoint>,
    events: Vec<ScalingEvent>,
}

impl Autoscale {
    /// `slots` endpoint slots, those `settings` says serving from the start.
    pub(super) fn new(settings: ScalingSettings, scaler: String, slots: usize) -> Autoscale {
        let initial = settings.initial as usize;
        let (roles, serving, pools): (Vec<Role>, Vec<bool>, Vec<Role>) = match settings.prefill {
            None => (
                vec![Role::Aggregated; slots],
                (0..slots).map(|s| s < initial).collect(),
                vec![Role::Aggregated],
            ),
            Some((prefill_slots, prefill_initial)) => {
                let (p, pi) = (prefill_slots as usize, prefill_initial as usize);
                let decode_initial = initial - pi;
                (
                    (0..slots)
                        .map(|s| if s < p { Role::Prefill } else { Role::Decode })
                        .collect(),
                    (0..slots)
                        .map(|s| {
                            if s < p {
                                s < pi
                            } else {
                                s - p < decode_initial
                            }
                        })
                        .collect(),
                    vec![Role::Prefill, Role::Decode],
                )
            }
        };
        let desired = pools
            .iter()
            .map(|&role| {
                let serving_in = |r: Role| {
                    roles
                        .iter()
                        .zip(&serving)
                        .filter(|(x, s)| **x == r && **s)
                        .count()
                };
                serving_in(role) as u32
            })
            .collect();
        Autoscale {
            settings,
            scaler,
            slots: serving
                .iter()
                .map(|&on| match on {
                    true => SlotState::Ready { started: 0 },
                    false => SlotState::Off,
                })
                .collect(),
            roles,
            pools,
            last_tick: 0,
            arrivals: 0,
            arrival_prompt: 0,
            arrival_output: 0,
            finished: 0,
            ttft_ns: 0,
            tpot_ms: 0.0,
            prompt: 0,
            hit: 0,
            gpu_ns: 0,
            endpoint_ns: 0,
            held_since: None,
            peak: settings.initial,
            waited: 0,
            desired,
            timeline: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Slots of `pool` (every pool: `None`) in a state `f` accepts.
    fn count(&self, pool: Option<Role>, f: impl Fn(&SlotState) -> bool) -> u32 {
        (self.slots.iter().zip(&self.roles))
            .filter(|(s, r)| pool.is_none_or(|p| p == **r) && f(s))
            .count() as u32
    }
    fn ready(&self, pool: Option<Role>) -> u32 {
        self.count(pool, |s| matches!(s, SlotState::Ready { .. }))
    }
    fn starting(&self, pool: Option<Role>) -> u32 {
        self.count(pool, |s| matches!(s, SlotState::Starting { .. }))
    }
    fn draining(&self, pool: Option<Role>) -> u32 {
        self.count(pool, |s| matches!(s, SlotState::Draining))
    }
    fn held(&self) -> u32 {
        self.count(None, |s| !matches!(s, SlotState::Off))
    }

    /// Whether slot `slot` is draining.
    pub(super) fn is_draining(&self, slot: usize) -> bool {
        self.slots[slot] == SlotState::Draining
    }

    /// A request arrived at `now` with these sizes.
    pub(super) fn arrived(&mut self, now: u64, prompt: u32, output: u32) {
        self.advance(now);
        self.arrivals += 1;
        self.arrival_prompt += u64::from(prompt);
        self.arrival_output += u64::from(output);
        if self.starting(None) > 0 {
            self.waited += 1;
        }
    }

    /// A request finished: its TTFT, time per output token, prompt and cached tokens.
    pub(super) fn finished(&mut self, ttft_ns: u64, tpot_ms: f64, prompt: u32, hit: u32) {
        self.finished += 1;
        self.ttft_ns += u128::from(ttft_ns);
        self.tpot_ms += tpot_ms;
        self.prompt += u64::from(prompt);
        self.hit += u64::from(hit);
    }

    /// Counts the GPUs held up to `now`.
    fn advance(&mut self, now: u64) {
        let since = *self.held_since.get_or_insert(now);
        let span = u128::from(now.saturating_sub(since));
        let held = u128::from(self.held());
        self.endpoint_ns += held * span;
        self.gpu_ns += held * u128::from(self.settings.gpus_per_endpoint) * span;
        self.held_since = Some(now.max(since));
    }

    fn point(&mut self, now: u64, origin: u64) {
        self.peak = self.peak.max(self.held());
        let pools = match self.settings.prefill {
            None => Vec::new(),
            Some(_) => (self.pools.iter().zip(&self.desired))
                .map(|(&role, &desired)| PoolPoint {
                    pool: pool_name(role).to_owned(),
                    desired,
                    ready: self.ready(Some(role)),
                    starting: self.starting(Some(role)),
                    draining: self.draining(Some(role)),
                })
                .collect(),
        };
        let point = ScalingPoint {
            t_s: round6((now - origin) as f64 / 1e9),
            desired: self.desired.iter().sum(),
            ready: self.ready(None),
            starting: self.starting(None),
            draining: self.draining(None),
            pools,
        };
        // A point only when something changed since the last.
        let same = |last: &ScalingPoint| {
            (
                last.desired,
                last.ready,
                last.starting,
                last.draining,
                &last.pools,
            ) == (
                point.desired,
                point.ready,
                point.starting,
                point.draining,
                &point.pools,
            )
        };
        match self.timeline.last_mut() {
            Some(last) if same(last) => {}
            // Several changes at one instant are one point: the state after them all.
            Some(last) if last.t_s == point.t_s => *last = point,
            _ => self.timeline.push(point),
        }
    }

    fn event(&mut self, now: u64, origin: u64, endpoint: &str, what: &str) {
        self.events.push(ScalingEvent {
            t_s: round6((now - origin) as f64 / 1e9),
            endpoint: endpoint.to_owned(),
            what: what.to_owned(),
        });
    }

    /// The report, the GPUs counted from `origin` (the run's start) up to its end: `end`
    /// (the last finish), or the last change to the fleet after it.
    pub(super) fn report(mut self, origin: u64, end: u64) -> ScalingReport {
        let end = end.max(origin).max(self.held_since.unwrap_or(origin));
        self.advance(end);
        let span = end.saturating_sub(origin);
        let mean_endpoints = match span {
            0 => f64::from(self.settings.initial),
            span => self.endpoint_ns as f64 / span as f64,
        };
        ScalingReport {
            scaler: self.scaler,
            interval_s: round6(self.settings.interval_ns as f64 / 1e9),
            startup_s: round6(self.settings.startup_ns as f64 / 1e9),
            gpus_per_endpoint: self.settings.gpus_per_endpoint,
            max_endpoints: self.settings.max_endpoints,
            gpu_hours: round6(self.gpu_ns as f64 / 3.6e12),
            mean_endpoints: round6(mean_endpoints),
            peak_endpoints: self.peak,
            waited_for_capacity: self.waited,
            timeline: self.timeline,
            events: self.events,
        }
    }
}

/// A pool's name in the report.
fn pool_name(role: Role) -> &'static str {
    match role {
        Role::Prefill => "prefill",
        Role::Decode => "decode",
        _ => "aggregated",
    }
}

impl Sim<'_> {
    /// Takes the slots not serving at the start out of every router, and schedules the
    /// first tick.
    pub(super) fn start_scaling(&mut self, replicas: &mut Replicas) -> Result<(), SimError> {
        let Some(auto) = &self.autoscale else {
            return Ok(());
        };
        let interval = auto.settings.interval_ns;
        let off: Vec<usize> = (0..auto.slots.len())
            .filter(|&slot| auto.slots[slot] == SlotState::Off)
            .collect();
        for slot in off {
            let index = EndpointIndex(self.stable[slot].expect("listed at the start"));
            for router in replicas.all_routers_mut() {
                router.remove_endpoint(index).map_err(SimError::scaler)?;
            }
            self.unlist(slot);
        }
        let origin = self.origin_ns;
        let auto = self.autoscale.as_mut().expect("checked above");
        auto.held_since = Some(origin);
        auto.point(origin, origin);
        auto.last_tick = origin;
        self.events.push(origin + interval, Event::Tick);
        Ok(())
    }

    /// The serving endpoints of `pool`, as their engines report them now (in-flight counts
    /// summed over the router replicas).
    fn serving_table(&self, pool: Role) -> EndpointTable {
        let auto = self.autoscale.as_ref().expect("a scaled run");
        let serving: Vec<usize> = (0..auto.slots.len())
            .filter(|&s| auto.roles[s] == pool && matches!(auto.slots[s], SlotState::Ready { .. }))
            .collect();
        let mut table = EndpointTable::new(serving.iter().map(|&s| self.names[s].clone()));
        for (pos, &slot) in serving.iter().enumerate() {
            let mut load = self.fleet.load(slot, true, 0);
            load.inflight_requests = (self.fleet.inflight_requests.iter()).map(|r| r[slot]).sum();
            load.inflight_prompt_tokens =
                (self.fleet.inflight_tokens.iter()).map(|r| r[slot]).sum();
            table.set_load(pos, load);
        }
        for pos in 0..table.len() {
            table.set_role(pos, pool);
        }
        table
    }

    /// The scaler's tick at `now`: it answers, the pools follow.
    pub(super) fn tick(&mut self, now: u64, replicas: &mut Replicas) -> Result<(), SimError> {
        let Some(auto) = &mut self.autoscale else {
            return Ok(());
        };
        auto.advance(now);
        let interval = now - auto.last_tick;
        auto.last_tick = now;
        let pools = auto.pools.clone();
        let tables: Vec<EndpointTable> = pools.iter().map(|&p| self.serving_table(p)).collect();
        let auto = self.autoscale.as_ref().expect("checked above");
        let mean = |sum: f64, n: u64| if n == 0 { 0.0 } else { sum / n as f64 };
        let at_router = self
            .router_queues
            .iter()
            .map(|q| q.len() as u64)
            .sum::<u64>();
        let at_decode = (self.pd.as_ref()).map_or(0, |pd| {
            pd.decode_queues.iter().map(|q| q.len() as u64).sum()
        });
        let observations: Vec<PoolObservation<'_>> = (pools.iter().zip(&tables))
            .map(|(&role, table)| PoolObservation {
                role,
                ready: auto.ready(Some(role)),
                starting: auto.starting(Some(role)),
                draining: auto.draining(Some(role)),
                min_endpoints: auto.settings.min_endpoints,
                max_endpoints: auto.settings.max_endpoints,
                gpus_per_endpoint: auto.settings.gpus_per_endpoint,
                waiting_at_router: if role == Role::Decode {
                    at_decode
                } else {
                    at_router
                },
                arrivals: auto.arrivals,
                finished: auto.finished,
                prompt_tokens_mean: mean(auto.arrival_prompt as f64, auto.arrivals),
                output_tokens_mean: mean(auto.arrival_output as f64, auto.arrivals),
                ttft_mean_ms: mean(auto.ttft_ns as f64 / 1e6, auto.finished),
                tpot_mean_ms: mean(auto.tpot_ms, auto.finished),
                hit_ratio: mean(auto.hit as f64, auto.prompt),
                slo_attainment: self.stats.latency.slo_attainment(),
                endpoints: table,
            })
            .collect();
        let scaler = replicas.scaler_mut().expect("a scaled run has a scaler");
        let answer = scaler
            .scale(now, interval, &observations)
            .map_err(SimError::scaler)?;
        drop(observations);
        let auto = self.autoscale.as_mut().expect("checked above");
        (auto.arrivals, auto.arrival_prompt, auto.arrival_output) = (0, 0, 0);
        (
            auto.finished,
            auto.ttft_ns,
            auto.tpot_ms,
            auto.prompt,
            auto.hit,
        ) = (0, 0, 0.0, 0, 0);
        // Each pool within its floor and the ceiling the pools share: the ones that shrink
        // first, so the GPUs they give up are there for the ones that grow.
        let min = auto.settings.min_endpoints;
        let mut order: Vec<usize> = (0..pools.len()).collect();
        let current =
            |auto: &Autoscale, p: usize| auto.ready(Some(pools[p])) + auto.starting(Some(pools[p]));
        order.sort_by_key(|&p| answer[p] >= current(auto, p));
        for p in order {
            let auto = self.autoscale.as_mut().expect("checked above");
            // What the other pools hold, and this one's draining endpoints, stay held.
            let draining = auto.draining(Some(pools[p]));
            let others = auto.held() - current(auto, p) - draining;
            let room = (auto.settings.max_endpoints).saturating_sub(others + draining);
            let desired = answer[p].max(min).min(room);
            auto.desired[p] = desired;
            self.resize(pools[p], desired, now, replicas)?;
        }
        let auto = self.autoscale.as_mut().expect("checked above");
        auto.point(now, self.origin_ns);
        let more = self.events.has_work()
            || self.pending.is_some()
            || self.router_queues.iter().any(|q| !q.is_empty());
        if more {
            self.events
                .push(now + auto.settings.interval_ns, Event::Tick);
        }
        Ok(())
    }

    /// Starts or drains endpoints of `pool` until `desired` are serving or starting.
    fn resize(
        &mut self,
        pool: Role,
        desired: u32,
        now: u64,
        replicas: &mut Replicas,
    ) -> Result<(), SimError> {
        let origin = self.origin_ns;
        let auto = self.autoscale.as_mut().expect("a scaled run");
        let mut current = auto.ready(Some(pool)) + auto.starting(Some(pool));
        while current < desired {
            let Some(slot) = (0..auto.slots.len())
                .find(|&s| auto.roles[s] == pool && auto.slots[s] == SlotState::Off)
            else {
                break;
            };
            let ready_at = now + auto.settings.startup_ns;
            auto.slots[slot] = SlotState::Starting {
                ready_at,
                started: now,
            };
            auto.event(now, origin, &self.names[slot], "start");
            self.events.push(ready_at, Event::Ready(slot));
            current += 1;
        }
        while current > desired {
            let auto = self.autoscale.as_mut().expect("a scaled run");
            // The newest first, as a ReplicaSet picks pods to delete: one not serving yet
            // before one that serves.
            let newest = |want_starting: bool| {
                (auto.slots.iter().zip(&auto.roles).enumerate())
                    .filter(|(_, (_, role))| **role == pool)
                    .filter_map(|(slot, (s, _))| match (s, want_starting) {
                        (SlotState::Starting { started, .. }, true) => Some((*started, slot)),
                        (SlotState::Ready { started }, false) => Some((*started, slot)),
                        _ => None,
                    })
                    .max()
                    .map(|(_, slot)| slot)
            };
            let (starting, serving) = (newest(true), newest(false));
            if let Some(slot) = starting {
                auto.slots[slot] = SlotState::Off;
                auto.event(now, origin, &self.names[slot], "cancel");
            } else if let Some(slot) = serving {
                auto.slots[slot] = SlotState::Draining;
                auto.event(now, origin, &self.names[slot], "drain");
                let index = EndpointIndex(self.stable[slot].expect("a serving endpoint is listed"));
                for router in replicas.all_routers_mut() {
                    router.retire(index);
                }
                self.stop_if_drained(slot, now, replicas)?;
            } else {
                break;
            }
            current -= 1;
        }
        Ok(())
    }

    /// A started endpoint's delay is over at `now`: with an empty cache, it joins every
    /// router (a pool's endpoint is a candidate of its pool's routers only); what waited at
    /// the routers may go.
    pub(super) fn endpoint_ready(
        &mut self,
        slot: usize,
        now: u64,
        replicas: &mut Replicas,
    ) -> Result<(), SimError> {
        let Some(auto) = &mut self.autoscale else {
            return Ok(());
        };
        // Cancelled, or a stale event of an earlier start.
        let SlotState::Starting { ready_at, started } = auto.slots[slot] else {
            return Ok(());
        };
        if ready_at != now {
            return Ok(());
        }
        auto.advance(now);
        auto.slots[slot] = SlotState::Ready { started };
        auto.event(now, self.origin_ns, &self.names[slot], "ready");
        auto.point(now, self.origin_ns);
        let role = auto.roles[slot];
        self.fleet.engines[slot].cold_start();
        let mut index = None;
        for router in replicas.all_routers_mut() {
            let got = router
                .add_endpoint_as(self.names[slot].clone(), role)
                .map_err(SimError::scaler)?;
            debug_assert!(index.is_none_or(|i| i == got), "routers list alike");
            index = Some(got);
        }
        let index = index.expect("at least one router").0;
        self.list(slot, index);
        for r in 0..replicas.len() {
            self.drain_decode_queue(now, replicas, r)?;
            self.drain_router_queue(now, replicas, r)?;
        }
        Ok(())
    }

    /// Removes draining slot `slot` from the routers once nothing runs on it.
    pub(super) fn stop_if_drained(
        &mut self,
        slot: usize,
        now: u64,
        replicas: &mut Replicas,
    ) -> Result<(), SimError> {
        let Some(auto) = &mut self.autoscale else {
            return Ok(());
        };
        let inflight: u64 = self.fleet.inflight_requests.iter().map(|r| r[slot]).sum();
        if !auto.is_draining(slot) || inflight > 0 || !self.fleet.engines[slot].is_idle() {
            return Ok(());
        }
        auto.advance(now);
        auto.slots[slot] = SlotState::Off;
        auto.event(now, self.origin_ns, &self.names[slot], "stop");
        auto.point(now, self.origin_ns);
        let index = EndpointIndex(self.stable[slot].expect("a draining endpoint is listed"));
        for router in replicas.all_routers_mut() {
            router.remove_endpoint(index).map_err(SimError::scaler)?;
        }
        self.unlist(slot);
        Ok(())
    }

    /// Slot `slot` joined the routers' lists at their end, with stable index `index`.
    fn list(&mut self, slot: usize, index: u32) {
        self.listed.push(slot);
        self.pos_of[slot] = Some(self.listed.len() - 1);
        self.stable[slot] = Some(index);
        if self.position_of.len() <= index as usize {
            self.position_of.resize(index as usize + 1, None);
        }
        self.position_of[index as usize] = Some(slot);
    }

    /// Slot `slot` left the routers' lists: the positions after it move up.
    fn unlist(&mut self, slot: usize) {
        if let Some(pos) = self.pos_of[slot].take() {
            self.listed.remove(pos);
            for &later in &self.listed[pos..] {
                self.pos_of[later] = self.pos_of[later].map(|p| p - 1);
            }
        }
        if let Some(index) = self.stable[slot].take() {
            self.position_of[index as usize] = None;
        }
    }
}

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
//! The run reads its requests from a [`Workload`] loaded once, which many runs share
//! ([`replay_timed`]), or from the trace as it goes ([`replay_timed_streamed`]: requests
//! enter as their arrival comes near and leave when done, so memory follows what is in
//! flight), and keeps its own state beside them: arrival times, where each request went,
//! the engines (`Fleet`), the event queue, the statistics. Both give the same report.

use std::collections::VecDeque;
use std::sync::OnceLock;

use routerlab_core::Unit;
use routerlab_engine::Sequence;
use routerlab_host::RequestData;
use routerlab_report::stats::{Finished, Tally, TimedTally};
use routerlab_report::{Report, round6};
use routerlab_route::sync::Change;
use routerlab_route::{
    Decision, ListPos, Placement, Replicas, RequestSeq, Router, WhenUnavailable,
};
use routerlab_trace::{Workload, arrivals::ArrivalError, sharing::Sharing};

use crate::SimError;
use crate::error::request_location;
use crate::observer::{Observer, RequestRecord};
pub use routerlab_trace::arrivals::{Arrivals, CLOCK_RANGE, MAX_CLOCK_NS};

mod agentic;
mod disagg;
mod events;
mod feed;
mod fleet;
mod lagged;
mod report;
mod scaling;
mod settings;
mod sharing;
mod streamed;
mod synced;
mod tally;
#[cfg(test)]
mod tests;
mod view;
mod warm;

use disagg::PdRun;
use events::{Event, Events};
use feed::Feed;
use fleet::Fleet;
pub use scaling::ScalingSettings;
pub use settings::TimedSettings;
use settings::validate;
pub use streamed::{StreamedTrace, replay_timed_streamed, streams};
use tally::{EndpointTally, SpreadTally, TiersTally, TimedStats};
pub use warm::replay_timed_warm;

/// What one request of the workload did in this run.
#[derive(Debug, Default)]
struct RequestState {
    arrival_ns: u64,
    /// With a routing hop: when it was sent, the hop still ahead of it.
    sent_ns: Option<u64>,
    output_tokens: u32,
    /// The router replica the balancer gave it to.
    replica: usize,
    endpoint: Option<usize>,
    constrained: bool,
    queued_at_router: bool,
}

struct Sim<'a> {
    settings: &'a TimedSettings,
    /// The requests: the workload, or the trace as it is read.
    feed: Feed<'a>,
    observer: &'a mut dyn Observer,
    /// Arrival times before parents and closed loops move them (loaded).
    base_arrival: Vec<u64>,
    /// Per request: what it did, for the requests read so far.
    requests: Vec<RequestState>,
    /// Per request (with `respect_parents`): the requests waiting for it to finish.
    children: Vec<Vec<usize>>,
    /// Streamed, per request (with `respect_parents`): when it finished and its children's
    /// place in the order of scheduling (0: not yet), for children read after.
    parent_done: Vec<(u64, u64)>,
    /// Streamed: the next request read, not yet sent, and when it is to be.
    pending: Option<(usize, u64)>,
    fleet: Fleet,
    events: Events,
    /// Per replica: requests waiting at it for an available endpoint.
    router_queues: Vec<VecDeque<usize>>,
    /// First request of each request's parent chain, 1-based (for the balancer).
    conversation_of: Vec<u64>,
    stats: TimedStats,
    next_closed: usize,
    /// Stable endpoint index -> engine slot, while the endpoint is listed.
    position_of: Vec<Option<usize>>,
    /// The routers' list positions -> engine slots (the same in every router: they add and
    /// remove alike). The identity unless the fleet is scaled.
    listed: Vec<usize>,
    /// Engine slot -> its list position, while listed.
    pos_of: Vec<Option<usize>>,
    /// Engine slot -> its stable index, while listed.
    stable: Vec<Option<u32>>,
    /// Engine slot -> its endpoint's name.
    names: Vec<String>,
    /// The scaled fleet, when a scaler sizes it.
    autoscale: Option<scaling::Autoscale>,
    /// Scratch: requests whose first token an engine step produced.
    first_tokens: Vec<usize>,
    /// Requests finished or rejected, for the observer's progress.
    done: u64,
    /// The pools' state, when the fleet is disaggregated.
    pd: Option<PdRun>,
    /// An agentic trace's dependency graph and tally.
    agentic: Option<agentic::Agentic>,
    /// Scratch: requests an agentic dependency released, with their times.
    released: Vec<(u64, usize)>,
    /// Scratch: the list positions the judge looks at twice (`judge`).
    rivals: Vec<usize>,
    /// The routers' KV-event index, when it sees the engines late.
    lagged: Option<lagged::Lagged>,
    /// The trace's blocks more than one request has, once known ([`Sim::shared_blocks`]).
    sharing: Option<&'a OnceLock<Sharing>>,
    /// The request being routed and its shared lead, if known (`Sim::note_sharing`).
    sharing_of: (usize, Option<usize>),
    /// The clock's origin: what came before (a warm-up) is not this run's.
    origin_ns: u64,
}

/// Runs a timed replay of `workload` through the router `replicas`; `observer` sees each
/// finished request. The workload must have been loaded with
/// [`TimedSettings::engine_block_sizes`] ([`crate::scenario::Scenario::workload`] does);
/// one that was not is refused with an error before anything runs.
pub fn replay_timed(
    workload: &Workload,
    replicas: &mut Replicas,
    settings: &TimedSettings,
    observer: &mut dyn Observer,
) -> Result<Report, SimError> {
    let sharing = sharing::of_workload(workload);
    let mut sim = loaded(workload, &sharing, replicas, settings, observer, 0)?;
    sim.run(replicas)?;
    Ok(routerlab_report::checked(sim.report()))
}

/// A run of the loaded `workload` (`sharing` its [`sharing::of_workload`]), its clock's
/// origin at `origin` ns (its arrivals after it), not started.
fn loaded<'a>(
    workload: &'a Workload,
    sharing: &'a OnceLock<Sharing>,
    replicas: &mut Replicas,
    settings: &'a TimedSettings,
    observer: &'a mut dyn Observer,
    origin: u64,
) -> Result<Sim<'a>, SimError> {
    validate(replicas, settings)?;
    // Engine chains are derived when the trace is loaded (`Scenario::workload` loads the sizes
    // its engines need); a workload loaded for other engines is refused, not failed mid-run.
    if let Some(missing) = settings
        .engine_block_sizes()
        .into_iter()
        .find(|size| workload.engine_block_sizes.binary_search(size).is_err())
    {
        return Err(SimError::Input(format!(
            "the workload was loaded without chains for engine blocks of {missing} tokens \
             (load it with the run's TimedSettings::engine_block_sizes)"
        )));
    }
    let scheduled = settings
        .arrivals
        .schedule(&workload.requests, settings.seed)
        .map_err(|e| arrival_error(&workload.source.path, e))?;
    // A closed loop's requests are released as earlier ones finish, from time 0.
    let mut base_arrival = scheduled.unwrap_or_else(|| vec![0; workload.requests.len()]);
    base_arrival
        .iter_mut()
        .for_each(|t| *t = t.saturating_add(origin));
    // An agentic trace's requests go when their dependencies allow, on the trace's clock.
    let agentic = match settings.arrivals {
        Arrivals::Trace { speedup } => agentic::Agentic::of(workload, &base_arrival, speedup),
        _ if workload.requests.iter().any(|r| r.play != 0) => {
            return Err(SimError::Input(
                "an agentic trace's requests go when their dependencies allow, at its own times: a rate or concurrency does not apply".into(),
            ));
        }
        _ => None,
    };
    let mut sim = Sim::new(Feed::loaded(workload), replicas, settings, observer);
    sim.sharing = Some(sharing);
    sim.requests = (workload.requests.iter())
        .zip(&base_arrival)
        .map(|(request, &base)| sim.state_of(request, base))
        .collect();
    for (index, request) in workload.requests.iter().enumerate() {
        // Parents come before their children in a workload.
        let root = request
            .parent
            .map_or(RequestSeq::of_index(index).0, |p| sim.conversation_of[p]);
        sim.conversation_of.push(root);
    }
    if settings.respect_parents {
        sim.children = vec![Vec::new(); workload.requests.len()];
    }
    if let Some(pd) = &mut sim.pd {
        pd.requests = vec![Default::default(); workload.requests.len()];
    }
    sim.base_arrival = base_arrival;
    sim.agentic = agentic;
    sim.origin_ns = origin;
    Ok(sim)
}

/// The one message for a schedule that cannot be worked out.
fn arrival_error(path: &std::path::Path, error: ArrivalError) -> SimError {
    match error {
        ArrivalError::NoArrivalTimes { line } => SimError::NoArrivalTimes {
            path: path.to_owned(),
            line,
        },
        other => SimError::Input(other.to_string()),
    }
}

impl<'a> Sim<'a> {
    /// A run of `feed` with nothing read or scheduled yet.
    fn new(
        feed: Feed<'a>,
        replicas: &Replicas,
        settings: &'a TimedSettings,
        observer: &'a mut dyn Observer,
    ) -> Sim<'a> {
        let router = replicas.router(0);
        let n = router.table().len();
        let mut sim = Sim {
            settings,
            feed,
            observer,
            base_arrival: Vec::new(),
            requests: Vec::new(),
            children: Vec::new(),
            parent_done: Vec::new(),
            pending: None,
            fleet: Fleet::new(&settings.engines, replicas.len()),
            events: Events::default(),
            router_queues: vec![VecDeque::new(); replicas.len()],
            conversation_of: Vec::new(),
            stats: TimedStats {
                base: Tally::new(replicas.len(), n, Unit::Tokens),
                latency: TimedTally::with_slo(settings.slo),
                per_endpoint: vec![EndpointTally::default(); n],
                router_queued: 0,
                too_long: 0,
                spread: SpreadTally::default(),
                tiers: settings
                    .engines
                    .iter()
                    .any(|e| e.host_tier.is_some() || e.shared_tier.is_some())
                    .then(TiersTally::default),
            },
            next_closed: 0,
            position_of: {
                let table = router.table();
                let mut position_of = vec![None; n];
                for pos in 0..n {
                    if let Some(slot) = position_of.get_mut(table.index(pos) as usize) {
                        *slot = Some(pos);
                    }
                }
                position_of
            },
            listed: (0..n).collect(),
            pos_of: (0..n).map(Some).collect(),
            stable: (0..n).map(|pos| Some(router.table().index(pos))).collect(),
            names: (0..n)
                .map(|pos| router.table().name(pos).to_owned())
                .collect(),
            autoscale: settings.scaling.map(|scaling| {
                let name = replicas.scaler_name().unwrap_or_default().to_owned();
                scaling::Autoscale::new(scaling, name, n)
            }),
            first_tokens: Vec::new(),
            done: 0,
            pd: (replicas.pools())
                .map(|pools| PdRun::new(pools, settings.kv_transfer, replicas.len())),
            agentic: None,
            released: Vec::new(),
            rivals: Vec::new(),
            lagged: None,
            sharing: None,
            sharing_of: (usize::MAX, None),
            origin_ns: 0,
        };
        if settings.kv_event_lag_ns > 0 {
            let lag = settings.kv_event_lag_ns;
            sim.lagged = Some(lagged::Lagged::new(lag, &mut sim.fleet.engines));
        }
        sim
    }

    /// A request's state before it arrives: sent at `base`, with its output length.
    fn state_of(&self, request: &routerlab_trace::WorkloadRequest, base: u64) -> RequestState {
        let output = request
            .output_tokens
            .unwrap_or(self.settings.default_output_tokens)
            .max(1);
        RequestState {
            arrival_ns: base,
            output_tokens: u32::try_from(output).unwrap_or(u32::MAX),
            ..RequestState::default()
        }
    }
}

impl Sim<'_> {
    fn plugin_error(&self, index: usize) -> impl FnOnce(routerlab_host::PluginError) -> SimError {
        // Worked out only on an error: a plugin call's result passes through here each time.
        let line = self.feed.request(index).line;
        move |source| SimError::plugin(request_location(RequestSeq::of_index(index), line), source)
    }

    fn run(&mut self, replicas: &mut Replicas) -> Result<(), SimError> {
        // Schedule the first arrivals.
        match self.settings.arrivals {
            Arrivals::Closed { concurrency } => {
                for _ in 0..concurrency {
                    self.release_next_closed(self.origin_ns)?;
                }
            }
            _ => {
                // Streamed, arrivals are scheduled as their time comes near (`admit`).
                for index in 0..self.base_arrival.len() {
                    match self.feed.request(index).parent {
                        Some(parent) if self.settings.respect_parents => {
                            self.children[parent].push(index)
                        }
                        // A request that depends on others goes when they allow.
                        _ if self.agentic.as_ref().is_some_and(|a| !a.is_root(index)) => {}
                        _ => self
                            .events
                            .push(self.base_arrival[index], Event::Arrival(index)),
                    }
                }
            }
        }
        // Each replica scrapes the engines on its own schedule, at evenly staggered phases.
        let interval = self.settings.metrics_interval_ns;
        if interval > 0 {
            let count = replicas.len() as u64;
            for r in 0..replicas.len() {
                let phase = (u128::from(interval) * r as u128 / u128::from(count)) as u64;
                self.events.push(self.origin_ns + phase, Event::Refresh(r));
            }
        }
        self.start_scaling(replicas)?;
        self.start_sync(replicas);
        loop {
            self.admit()?;
            let Some((now, event)) = self.events.pop() else {
                break;
            };
            if now > MAX_CLOCK_NS {
                return Err(SimError::Input(format!(
                    "the simulated time passed {CLOCK_RANGE}: an engine's steps, or its KV tier loads and stores, take too long for this workload"
                )));
            }
            self.sync_until(now, replicas)?;
            if let Some(lagged) = &mut self.lagged {
                lagged.advance(now);
            }
            let engines = &self.fleet.engines;
            self.stats
                .spread
                .advance(now, engines.iter().map(|e| e.running().len() as u64));
            match event {
                Event::Handoff(index) => self.handoff(index, now),
                Event::Tick => self.tick(now, replicas)?,
                Event::Ready(slot) => self.endpoint_ready(slot, now, replicas)?,
                Event::Start(pos) => self.fleet.start(pos, now, &mut self.events),
                Event::Refresh(r) => {
                    let changed = self.fleet.refresh(r);
                    self.drain_decode_queue(now, replicas, r)?;
                    self.drain_router_queue(now, replicas, r)?;
                    // Keep refreshing while something is left to happen, or while a refresh
                    // can still change what the replica sees.
                    let waiting = !self.router_queues[r].is_empty()
                        || self
                            .pd
                            .as_ref()
                            .is_some_and(|pd| !pd.decode_queues[r].is_empty());
                    let more = self.events.has_work() || self.pending.is_some();
                    if more || (changed && waiting) {
                        let next = now + self.settings.metrics_interval_ns;
                        self.events.push(next, Event::Refresh(r));
                    }
                }
                Event::Arrival(index) => {
                    let hop = self.settings.hop_ns(self.pd.is_some());
                    if hop > 0 && self.requests[index].sent_ns.is_none() {
                        // Sent now: it reaches the router after the hop.
                        self.requests[index].sent_ns = Some(now);
                        self.stats.latency.arrived(now);
                        if let Some(graph) = &mut self.agentic {
                            graph.dispatched(self.feed.workload(), index, now, &mut self.released);
                            self.release(now);
                        }
                        self.events.push(now + hop, Event::Arrival(index));
                        continue;
                    }
                    let r = replicas.place(Placement {
                        session: self.feed.request(index).session,
                        conversation: self.conversation_of[index],
                    });
                    self.requests[index].replica = r;
                    if let Some(auto) = &mut self.autoscale {
                        let prompt = self.feed.request(index).prompt_tokens;
                        auto.arrived(now, prompt, self.requests[index].output_tokens);
                    }
                    if let Some(sent) = self.requests[index].sent_ns {
                        self.requests[index].arrival_ns = sent;
                    } else {
                        self.requests[index].arrival_ns = now;
                        self.stats.latency.arrived(now);
                        if let Some(graph) = &mut self.agentic {
                            graph.dispatched(self.feed.workload(), index, now, &mut self.released);
                            self.release(now);
                        }
                    }
                    let prompt = self.feed.request(index).prompt_tokens;
                    let output = self.requests[index].output_tokens;
                    if !self
                        .fleet
                        .engines
                        .iter()
                        .any(|e| e.can_ever_fit(prompt, output))
                    {
                        // Longer than any engine's whole KV cache: it could only wait forever.
                        self.stats.too_long += 1;
                        self.reject(index, now)?;
                    } else if !self.router_queues[r].is_empty() {
                        self.enter_router_queue(index);
                    } else if !self.try_route(index, now, replicas)? {
                        match replicas.router(r).when_unavailable() {
                            WhenUnavailable::Queue => self.enter_router_queue(index),
                            WhenUnavailable::Reject | WhenUnavailable::FailOpen => {
                                self.reject(index, now)?
                            }
                        }
                    }
                }
                Event::Step(pos, generation) => {
                    if generation != self.fleet.generation[pos] {
                        continue;
                    }
                    for pos in self.fleet.finish_steps(pos, now, &mut self.events) {
                        self.stepped(pos, now, replicas)?;
                    }
                    for r in 0..replicas.len() {
                        self.drain_decode_queue(now, replicas, r)?;
                        self.drain_router_queue(now, replicas, r)?;
                    }
                }
            }
            // What the engines stored and removed now, for a router that sees it late.
            if let Some(lagged) = &mut self.lagged {
                for (pos, engine) in self.fleet.engines.iter_mut().enumerate() {
                    lagged.record(pos, now, engine);
                }
            }
        }
        // Nothing is left to happen, so nothing can free an endpoint for whatever still
        // waits at a router (its detector never clears): reject it rather than hang.
        for r in 0..self.router_queues.len() {
            while let Some(index) = self.router_queues[r].pop_front() {
                self.reject(index, self.stats.latency.end_ns())?;
            }
        }
        Ok(())
    }

    /// What engine `pos`'s step just ended gave: first tokens, then finished requests.
    fn stepped(&mut self, pos: usize, now: u64, replicas: &mut Replicas) -> Result<(), SimError> {
        let finished = std::mem::take(&mut self.fleet.finished[pos]);
        let mut first_tokens = std::mem::take(&mut self.first_tokens);
        self.fleet.engines[pos].take_first_tokens(&mut first_tokens);
        let listed = self.pos_of[pos].expect("an engine at work is listed");
        for index in first_tokens.drain(..) {
            let r = self.requests[index].replica;
            replicas
                .router_for(r, listed)
                .first_token(&self.data(index, now, None), ListPos(listed))
                .map_err(self.plugin_error(index))?;
            self.synced(Change::FirstToken, index, r, pos, now);
        }
        self.first_tokens = first_tokens;
        for sequence in finished {
            if self.is_prefill_pos(pos) {
                self.prefill_done(sequence, pos, now, replicas)?;
            } else {
                self.complete(sequence, pos, now, replicas)?;
            }
        }
        if self.autoscale.as_ref().is_some_and(|a| a.is_draining(pos)) {
            self.stop_if_drained(pos, now, replicas)?;
        }
        Ok(())
    }

    fn enter_router_queue(&mut self, index: usize) {
        if !self.requests[index].queued_at_router {
            self.requests[index].queued_at_router = true;
            self.stats.router_queued += 1;
        }
        self.router_queues[self.requests[index].replica].push_back(index);
    }

    /// Routes what waits at replica `r`, in order, until one request cannot go.
    fn drain_router_queue(
        &mut self,
        now: u64,
        replicas: &mut Replicas,
        r: usize,
    ) -> Result<(), SimError> {
        while let Some(index) = self.router_queues[r].pop_front() {
            if !self.try_route(index, now, replicas)? {
                self.router_queues[r].push_front(index);
                break;
            }
        }
        Ok(())
    }

    /// One routing decision, by the replica the request was given to; `false` when no
    /// endpoint could take the request.
    fn try_route(
        &mut self,
        index: usize,
        now: u64,
        replicas: &mut Replicas,
    ) -> Result<bool, SimError> {
        if self.pd.is_some() {
            return self.try_route_pd(index, now, replicas);
        }
        let r = self.requests[index].replica;
        self.sync_deciding(r);
        let router = replicas.router_mut(r);
        let prompt_tokens = self.feed.request(index).prompt_tokens;
        let output_tokens = self.requests[index].output_tokens;
        let decision = self.decide_with(router, index, now)?;
        self.requests[index].constrained = decision.constrained;
        let Some(ListPos(listed)) = decision.endpoint else {
            return Ok(false);
        };
        let pos = self.listed[listed];
        if !self.fleet.engines[pos].can_ever_fit(prompt_tokens, output_tokens) {
            // The matcher chose an engine too small for it (possible in mixed fleets).
            self.stats.too_long += 1;
            self.reject(index, now)?;
            return Ok(true);
        }
        if !decision.learned {
            router
                .learn(&self.data(index, now, None), ListPos(listed))
                .map_err(self.plugin_error(index))?;
        }
        self.judge(index, pos, &decision, router.unavailable());
        self.requests[index].endpoint = Some(pos);
        self.fleet.inflight_tokens[r][pos] += u64::from(prompt_tokens);
        self.fleet.inflight_requests[r][pos] += 1;
        self.synced(Change::Routed, index, r, pos, now);
        let engine_block = self.settings.engines[pos].engine_block_size;
        // The engine keeps the chain; the request is not asked about again.
        let chain = self.feed.take_chain(index, engine_block);
        let adapter = self.feed.request(index).adapter;
        let sequence =
            Sequence::new(index, prompt_tokens, output_tokens, chain).with_adapter(adapter);
        let sequence = self.told_sharing(index, engine_block, sequence);
        self.fleet.submit(pos, sequence, now, &mut self.events);
        Ok(true)
    }

    /// Replica `requests[index].replica`'s `router` decides where request `index` goes
    /// at `now`: the endpoints' loads as that replica sees them, what each engine holds
    /// (`cached_prefix`, `cached_tiers`). When every engine can hold the request, no pick
    /// is turned down after, so the matcher learns it in the same call.
    fn decide_with(
        &self,
        router: &mut Router,
        index: usize,
        now: u64,
    ) -> Result<Decision, SimError> {
        let r = self.requests[index].replica;
        let live = self.settings.metrics_interval_ns == 0;
        for (listed, &pos) in self.listed.iter().enumerate() {
            router
                .table_mut()
                .set_load(listed, self.fleet.load(pos, live, r));
        }
        let prompt_tokens = self.feed.request(index).prompt_tokens;
        let output_tokens = self.requests[index].output_tokens;
        let sure = self.fleet.fits_everywhere(prompt_tokens, output_tokens);
        let ask = |endpoint: u32| self.cached_prefix(index, endpoint);
        let tiers = |endpoint: u32| self.cached_tiers(index, endpoint);
        let predict = |endpoint: u32| self.predict(index, endpoint, now);
        let adapters = |endpoint: u32| self.adapter_state(index, endpoint);
        let mut data = RequestData {
            cached_tiers: Some(&tiers),
            predict: Some(&predict),
            ..self.data(index, now, Some(&ask))
        };
        if let Some(lora) = &mut data.lora
            && self.settings.engines.iter().any(|e| e.lora.is_some())
        {
            lora.state = Some(&adapters);
        }
        router.decide(&data, sure).map_err(self.plugin_error(index))
    }

    fn reject(&mut self, index: usize, now: u64) -> Result<(), SimError> {
        let has_parent = self.feed.request(index).parent.is_some();
        let state = &self.requests[index];
        let constrained = state.constrained;
        self.stats
            .base
            .each(state.replica, |s| s.reject(constrained, has_parent));
        self.after_done(index, now)
    }

    fn complete(
        &mut self,
        mut sequence: Sequence,
        pos: usize,
        now: u64,
        replicas: &mut Replicas,
    ) -> Result<(), SimError> {
        let index = sequence.request;
        let r = self.requests[index].replica;
        let listed = self.pos_of[pos].expect("an engine at work is listed");
        replicas
            .router_for(r, listed)
            .complete(&self.data(index, now, None), ListPos(listed))
            .map_err(self.plugin_error(index))?;
        if let Some(tiers) = &mut self.stats.tiers {
            tiers.add(&sequence);
        }
        // A disaggregated request counts where its prompt was computed, from its prefill.
        let (computed_at, hit, scheduled) = match self.pd.is_some() {
            true => {
                let (at, hit) = self.pd_finished(index, &sequence, pos);
                let pd = self.pd.as_ref().expect("a disaggregated run");
                let scheduled = match pd.requests[index].local {
                    true => sequence.first_scheduled_ns.unwrap_or(now),
                    false => pd.requests[index].prefill_scheduled_ns,
                };
                (at, hit, scheduled)
            }
            false => (
                pos,
                sequence.hit_tokens.unwrap_or(0),
                sequence.first_scheduled_ns.unwrap_or(now),
            ),
        };
        let request = self.feed.request(index);
        let state = &self.requests[index];
        let arrival = state.arrival_ns;
        let first_token = sequence.first_token_ns.unwrap_or(now);
        let stats = &mut self.stats;
        let same_as_parent = request
            .parent
            .map(|p| self.requests[p].endpoint == Some(pos));
        let prompt_tokens = request.prompt_tokens;
        stats.base.each(r, |s| {
            s.route(
                computed_at,
                u64::from(prompt_tokens),
                u64::from(hit),
                state.constrained,
                same_as_parent,
            )
        });
        let tally = &mut stats.per_endpoint[pos];
        tally.requests += 1;
        tally.prompt_tokens += u64::from(prompt_tokens);
        if let Some(auto) = &mut self.autoscale {
            let tpot_ms = match state.output_tokens {
                0 | 1 => 0.0,
                n => (now - first_token) as f64 / 1e6 / f64::from(n - 1),
            };
            auto.finished(first_token - arrival, tpot_ms, prompt_tokens, hit);
        }
        stats.latency.finished(Finished {
            arrival_ns: arrival,
            scheduled_ns: Some(scheduled),
            first_token_ns: first_token,
            finish_ns: now,
            output_tokens: u64::from(state.output_tokens),
            prompt_tokens: u64::from(prompt_tokens),
            hit_tokens: u64::from(hit),
        });
        self.fleet.inflight_tokens[r][pos] -= u64::from(prompt_tokens);
        self.fleet.inflight_requests[r][pos] -= 1;
        if let Some(graph) = &mut self.agentic {
            graph.finished(
                self.feed.workload(),
                index,
                prompt_tokens.into(),
                hit.into(),
            );
        }
        debug_assert!(
            arrival <= scheduled && scheduled <= first_token && first_token <= now,
            "request {index}: arrival {arrival} <= scheduled {scheduled} <= first token {first_token} <= finish {now}"
        );
        if self.observer.wants_finished() {
            self.observer.finished(&RequestRecord {
                id: RequestSeq::of_index(index).0,
                line: request.line,
                arrival_s: round6((arrival - self.origin_ns) as f64 / 1e9),
                endpoint: Some(self.names[pos].clone()),
                prefill_endpoint: (computed_at != pos).then(|| self.names[computed_at].clone()),
                replica: (replicas.len() > 1).then_some(r as u32),
                prompt_tokens,
                hit_tokens: hit,
                queue_ms: round6((scheduled - arrival) as f64 / 1e6),
                ttft_ms: round6((first_token - arrival) as f64 / 1e6),
                finish_s: round6((now - self.origin_ns) as f64 / 1e9),
            })?;
        }
        self.synced(Change::Finished, index, r, pos, now);
        self.feed
            .recycle_chain(std::mem::take(&mut sequence.hashes));
        self.after_done(index, now)
    }

    /// A request is done (finished or rejected): release its children, or the next one.
    fn after_done(&mut self, index: usize, now: u64) -> Result<(), SimError> {
        self.feed.done(index);
        self.done += 1;
        if self.done.is_multiple_of(crate::observer::PROGRESS_EVERY) {
            self.observer.progress(self.done);
        }
        if let Arrivals::Closed { .. } = self.settings.arrivals {
            return self.release_next_closed(now);
        }
        if let Some(graph) = &mut self.agentic {
            graph.done(self.feed.workload(), index, now, &mut self.released);
            self.release(now);
        }
        if self.settings.respect_parents {
            // Its children go at one place in the order of scheduling, in file order among
            // themselves: the place is kept for those still to be read (streamed).
            let order = self.events.reserve();
            if let Some(done) = self.parent_done.get_mut(index) {
                *done = (now, order);
            }
            for child in std::mem::take(&mut self.children[index]) {
                self.release_child(child, now, order);
            }
        }
        Ok(())
    }

    /// Schedules `child`, whose parent finished at `done`, at the place `order` in the
    /// order of scheduling: not before its own time, nor before the parent's finish plus
    /// the think time.
    fn release_child(&mut self, child: usize, done: u64, order: u64) {
        // Not arrived yet, its arrival time is still its time in the schedule.
        let at = self.requests[child]
            .arrival_ns
            .max(done + self.settings.think_time_ns);
        self.events.push_ordered(at, order, Event::Arrival(child));
    }

    /// Schedules the requests an agentic dependency released (never before `now`).
    fn release(&mut self, now: u64) {
        for (at, index) in self.released.drain(..) {
            self.events.push(at.max(now), Event::Arrival(index));
        }
    }

    fn release_next_closed(&mut self, now: u64) -> Result<(), SimError> {
        if let Some((index, _)) = self.next_request()? {
            self.events.push(now, Event::Arrival(index));
        }
        Ok(())
    }
}

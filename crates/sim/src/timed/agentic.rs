//! An agentic trace in the timed replay: when each request may go (its dependencies), and
//! what its plays and sessions did.
//!
//! As NVIDIA Dynamo's replay drives such a trace (`aisimulate-core`'s agentic driver): a
//! request without dependencies goes at its `not_before_ms`; one with dependencies goes
//! once every one has fired (`dispatch`: the other request was sent to the router;
//! `completion`: it finished or was rejected), at the latest of each firing plus its
//! `delay_ms` and its own `not_before_ms`. Times and delays are divided by `--speedup`.

use routerlab_report::agentic::{AgenticReport, distribution};
use routerlab_report::stats::{LatencyStat, ratio};
use routerlab_trace::Workload;
use routerlab_trace::dependency::Trigger;

/// The dependency graph and its tally.
pub(super) struct Agentic {
    /// Per request: (dependent, delay ns) to fire when it is sent, and when it is done.
    on_dispatch: Vec<Vec<(usize, u64)>>,
    on_completion: Vec<Vec<(usize, u64)>>,
    /// Per request: dependencies not fired yet, and the earliest it may go.
    remaining: Vec<u32>,
    ready_ns: Vec<u64>,
    /// Per play (by number): first request sent, last done, requests not done yet.
    play_start: Vec<u64>,
    play_end: Vec<u64>,
    play_left: Vec<u32>,
    /// Per session (by number): prompt tokens and reused ones; whether a turn has gone.
    session_prompt: Vec<u64>,
    session_hit: Vec<u64>,
    session_started: Vec<bool>,
    /// Per request: whether it is a later turn of its session.
    follow_up: Vec<bool>,
    follow_ups: u64,
    on_context: u64,
}

impl Agentic {
    /// The graph of `workload`, with `base_arrival` (each request's `not_before`, on the
    /// run's clock) and delays divided by `speedup`; `None` for a trace without plays.
    pub(super) fn of(workload: &Workload, base_arrival: &[u64], speedup: f64) -> Option<Agentic> {
        if workload.requests.iter().all(|r| r.play == 0) {
            return None;
        }
        let n = workload.requests.len();
        let plays = workload.requests.iter().map(|r| r.play).max().unwrap_or(0) as usize + 1;
        let sessions = workload
            .requests
            .iter()
            .map(|r| r.session)
            .max()
            .unwrap_or(0) as usize
            + 1;
        let mut graph = Agentic {
            on_dispatch: vec![Vec::new(); n],
            on_completion: vec![Vec::new(); n],
            remaining: vec![0; n],
            ready_ns: base_arrival.to_vec(),
            play_start: vec![u64::MAX; plays],
            play_end: vec![0; plays],
            play_left: vec![0; plays],
            session_prompt: vec![0; sessions],
            session_hit: vec![0; sessions],
            session_started: vec![false; sessions],
            follow_up: vec![false; n],
            follow_ups: 0,
            on_context: 0,
        };
        for (index, request) in workload.requests.iter().enumerate() {
            graph.play_left[request.play as usize] += 1;
            graph.remaining[index] = request.dependencies.len() as u32;
            for dep in &request.dependencies {
                let delay = (dep.delay_ns as f64 / speedup).round() as u64;
                let list = match dep.trigger {
                    Trigger::Dispatch => &mut graph.on_dispatch[dep.on],
                    Trigger::Completion => &mut graph.on_completion[dep.on],
                };
                list.push((index, delay));
            }
        }
        Some(graph)
    }

    /// Whether request `index` goes at its own time (it depends on nothing).
    pub(super) fn is_root(&self, index: usize) -> bool {
        self.remaining[index] == 0
    }

    /// Request `index` was sent at `now`: the requests that may go because of it, with
    /// their times, into `out`.
    pub(super) fn dispatched(
        &mut self,
        workload: &Workload,
        index: usize,
        now: u64,
        out: &mut Vec<(u64, usize)>,
    ) {
        let request = &workload.requests[index];
        let play = request.play as usize;
        self.play_start[play] = self.play_start[play].min(now);
        let session = request.session as usize;
        self.follow_up[index] = std::mem::replace(&mut self.session_started[session], true);
        let edges = std::mem::take(&mut self.on_dispatch[index]);
        self.fire(&edges, now, out);
    }

    /// Request `index` was routed to an endpoint that held the longest cached prefix of it
    /// of any it could go to (and some of it), or not.
    pub(super) fn routed(&mut self, index: usize, on_context: bool) {
        if self.follow_up[index] {
            self.follow_ups += 1;
            self.on_context += u64::from(on_context);
        }
    }

    /// Request `index` finished with `hit` of its `prompt` tokens reused.
    pub(super) fn finished(&mut self, workload: &Workload, index: usize, prompt: u64, hit: u64) {
        let session = workload.requests[index].session as usize;
        self.session_prompt[session] += prompt;
        self.session_hit[session] += hit;
    }

    /// Request `index` is done at `now` (finished or rejected): the requests that may go
    /// because of it into `out`.
    pub(super) fn done(
        &mut self,
        workload: &Workload,
        index: usize,
        now: u64,
        out: &mut Vec<(u64, usize)>,
    ) {
        let play = workload.requests[index].play as usize;
        self.play_end[play] = self.play_end[play].max(now);
        self.play_left[play] -= 1;
        let edges = std::mem::take(&mut self.on_completion[index]);
        self.fire(&edges, now, out);
    }

    fn fire(&mut self, edges: &[(usize, u64)], now: u64, out: &mut Vec<(u64, usize)>) {
        for &(target, delay) in edges {
            self.ready_ns[target] = self.ready_ns[target].max(now.saturating_add(delay));
            self.remaining[target] -= 1;
            if self.remaining[target] == 0 {
                out.push((self.ready_ns[target], target));
            }
        }
    }

    /// The report block.
    pub(super) fn report(&self) -> AgenticReport {
        let mut play_ms = LatencyStat::default();
        let mut plays = 0;
        for play in 1..self.play_left.len() {
            if self.play_left[play] == 0 && self.play_start[play] != u64::MAX {
                plays += 1;
                play_ms.record((self.play_end[play] - self.play_start[play]) / 1000);
            }
        }
        let mut shares: Vec<f64> = (1..self.session_prompt.len())
            .filter(|s| self.session_prompt[*s] > 0)
            .map(|s| self.session_hit[s] as f64 / self.session_prompt[s] as f64)
            .collect();
        shares.sort_by(f64::total_cmp);
        AgenticReport {
            plays,
            play_ms: play_ms.summary(),
            sessions: shares.len() as u64,
            session_hit_ratio: distribution(&shares),
            follow_up_turns: self.follow_ups,
            on_cached_context: Some(self.on_context),
            on_cached_context_share: Some(ratio(self.on_context, self.follow_ups)),
        }
    }
}

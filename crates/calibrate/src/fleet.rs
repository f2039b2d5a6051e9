//! The engines a measured run was served by, as the fit replays them.

use routerlab_engine::EngineConfig;
use routerlab_host::SearchPath;
use routerlab_sim::observer::Recorder;
use routerlab_sim::scenario::Scenario;
use routerlab_sim::timed::{TimedSettings, replay_timed};
use routerlab_sim::{Replicas, WhenUnavailable};
use routerlab_trace::Workload;

use crate::{CalibrateError, Samples};

/// The engines a measured run was served by: one, or vLLM's data-parallel ranks, each an
/// engine of the same config with requests balanced to the one with the fewest in flight
/// (as vLLM's own balancer does, which weighs waiting and running requests).
pub struct ServingFleet {
    scenario: Scenario,
    search: SearchPath,
    replicas: Replicas,
    engines: usize,
    matcher: String,
}

impl ServingFleet {
    /// A fleet of `engines` engines (1 to 1,024) behind the matcher `router` (least in
    /// flight when `None` and there are several).
    pub fn new(engines: u32, router: Option<&str>) -> Result<ServingFleet, CalibrateError> {
        if !(1..=1024).contains(&engines) {
            return Err(CalibrateError::input(
                "--data-parallel-size must be from 1 to 1024",
            ));
        }
        let engines = engines as usize;
        let scenario = Scenario {
            // One engine: any matcher sends everything to it, round robin is the plainest.
            matcher: router
                .unwrap_or(if engines == 1 {
                    "round-robin"
                } else {
                    "least-inflight"
                })
                .into(),
            endpoints: (0..engines).map(|i| format!("engine-{i}")).collect(),
            when_unavailable: WhenUnavailable::Queue,
            ..Scenario::default()
        };
        let search = SearchPath::from_env();
        let replicas = scenario.routers(&search)?;
        Ok(ServingFleet {
            matcher: scenario.matcher.clone(),
            scenario,
            search,
            replicas,
            engines,
        })
    }

    /// Engines in the fleet.
    pub fn engines(&self) -> usize {
        self.engines
    }

    /// The matcher that spreads requests over the engines.
    pub fn matcher(&self) -> &str {
        &self.matcher
    }

    /// Seeds the routers of the replays after this with `seed` (the matcher's `seed`
    /// key): a random matcher spreads the same requests differently under each (0 until
    /// set).
    pub fn set_seed(&mut self, seed: u64) {
        self.scenario.seed = seed;
    }

    /// Replays `workload` on the fleet, every engine `engine`, and returns what its
    /// requests took. Each replay starts from routers as new (a policy's state, such as
    /// where its round robin stands, is not carried from one replay to the next), so the
    /// same engine always gives the same answer.
    pub fn simulate(&mut self, workload: &Workload, engine: &EngineConfig) -> Option<Samples> {
        self.replicas = self.scenario.routers(&self.search).ok()?;
        let settings = TimedSettings::at_trace_times(vec![engine.clone(); self.engines]);
        let mut recorder = Recorder::default();
        let report = replay_timed(workload, &mut self.replicas, &settings, &mut recorder).ok()?;
        if recorder.records.len() != workload.requests.len() {
            // Some request could not run on this engine: not a candidate.
            return None;
        }
        let n = workload.requests.len();
        let mut samples = Samples {
            ttft_ms: vec![0.0; n],
            tpot_ms: vec![None; n],
            makespan_s: report.timed?.makespan_s,
            e2e_ms: vec![0.0; n],
        };
        // Records come in the order requests finished: put them back in the workload's.
        for record in &recorder.records {
            let index = record.id as usize - 1;
            samples.ttft_ms[index] = record.ttft_ms;
            samples.e2e_ms[index] = (record.finish_s - record.arrival_s) * 1e3;
            let output = workload.requests[index]
                .output_tokens
                .unwrap_or(settings.default_output_tokens);
            if output > 1 {
                let decode_ms = (record.finish_s - record.arrival_s) * 1e3 - record.ttft_ms;
                samples.tpot_ms[index] = Some(decode_ms / (output - 1) as f64);
            }
        }
        Some(samples)
    }
}

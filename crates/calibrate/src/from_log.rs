//! An engine model fitted on `serve`'s decision log: the logged traffic (its block chains,
//! arrivals and output lengths) replayed through the logged policy over as many engines as
//! the log names, the step time fitted until the replay's latencies are the log's. What
//! `replay --from-log` replays another policy with.

use std::path::Path;

use routerlab_engine::{EngineConfig, Scheduler};

use crate::formats::{RunFileFormat, decision_log};
use crate::load::{Layout, RunSettings, load, own_workload};
use crate::{CalibrateError, KvSearch, ServingFleet, fit};

/// An engine fitted on a decision log, and the fleet the log describes.
#[derive(Debug, Clone)]
pub struct LogFit {
    /// The engine, its step time fitted.
    pub engine: EngineConfig,
    /// The endpoints the log names, in the order it first names them.
    pub endpoints: Vec<String>,
    /// The policy that routed the logged traffic.
    pub policy: String,
    /// What the fit says of itself: the measured and fitted latencies, one line each.
    pub summary: String,
}

/// Fits an engine on the decision log at `path`: `max_num_seqs` and
/// `max_num_batched_tokens` are the engines' (a log does not record them), `seed` and
/// `budget` the fit's.
pub fn fit_log(
    path: &Path,
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    seed: u64,
    budget: usize,
) -> Result<LogFit, CalibrateError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CalibrateError::input(format!("{}: cannot read: {e}", path.display())))?;
    let records = decision_log::records(&text)
        .map_err(|e| CalibrateError::input(format!("{}:{e}", path.display())))?;
    let Some(first) = records.first() else {
        return Err(CalibrateError::input(format!(
            "{}: the decision log has no request",
            path.display()
        )));
    };
    let policy = first.policy.clone();
    let mut endpoints: Vec<String> = Vec::new();
    for record in &records {
        for name in (record.candidates.iter().map(|c| &c.endpoint)).chain([&record.endpoint]) {
            if !endpoints.contains(name) {
                endpoints.push(name.clone());
            }
        }
    }
    let settings = RunSettings {
        layout: Layout::File(RunFileFormat::DecisionLog),
        max_num_seqs: Some(max_num_seqs),
        max_num_batched_tokens: Some(max_num_batched_tokens),
        data_parallel_size: Some(endpoints.len() as u32),
        ..RunSettings::default()
    };
    let loaded = load(path, &settings)?.remove(0);
    let mut run = loaded.measured;
    run.max_num_seqs = max_num_seqs;
    run.max_num_batched_tokens = max_num_batched_tokens;
    let (blocks, block_size, _) = settings.kv_capacity(&run)?;
    let workload = own_workload(&loaded.label, &run, block_size)?;
    let mut fleet = ServingFleet::new(endpoints.len() as u32, Some(&policy))?;
    let base = EngineConfig {
        num_gpu_blocks: blocks,
        engine_block_size: block_size,
        max_num_seqs,
        max_num_batched_tokens,
        step_time: settings.step_time_guess(&run, Scheduler::V1)?,
        kv_bytes_per_token: None,
        host_tier: None,
        shared_tier: None,
        scheduler: Scheduler::V1,
        prefix_caching: true,
        max_paddings: None,
        lora: None,
        speculative: None,
        async_scheduling: false,
    };
    let measured = run.samples();
    let fitted = fit(&base, &measured, seed, budget, KvSearch::Fixed, |engine| {
        fleet.simulate(&workload, engine)
    })
    .ok_or_else(|| {
        CalibrateError::input(format!(
            "{}: the engine model could not replay the logged traffic",
            path.display()
        ))
    })?;
    let (m, s) = (measured.figures(), fitted.samples.figures());
    let summary = format!(
        "engine fitted on the log ({} requests through `{policy}` over {} endpoints, {} replays): TTFT p50 {:.2} ms measured, {:.2} fitted; TPOT p50 {:.2} ms measured, {:.2} fitted",
        run.requests.len(),
        endpoints.len(),
        fitted.evaluations,
        m.ttft_p50,
        s.ttft_p50,
        m.tpot_p50,
        s.tpot_p50,
    );
    Ok(LogFit {
        engine: fitted.engine,
        endpoints,
        policy,
        summary,
    })
}

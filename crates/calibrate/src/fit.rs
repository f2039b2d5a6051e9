//! The search that fits a step-time model's terms to what a measured run took: a batched
//! model's costs, or what a GPU achieves of its limits in the analytical roofline (a
//! profile of that GPU that carries to other models and sizes).

use routerlab_core::SeededRng;
use routerlab_engine::{EngineConfig, Experts, StepTime};

use crate::measured::Samples;

/// The terms of a batched model (four, and the cost of an expert when it has experts), as
/// a vector the search moves in log space (with the KV blocks after them when searched).
fn terms(model: &StepTime) -> Vec<f64> {
    match model {
        StepTime::Batched {
            overhead_ms,
            prefill_ms_per_token,
            decode_ms_per_seq,
            context_ms_per_ktoken,
            experts,
        } => {
            let mut terms = vec![
                *overhead_ms,
                *prefill_ms_per_token,
                *decode_ms_per_seq,
                *context_ms_per_ktoken,
            ];
            terms.extend(experts.map(|e| e.ms));
            terms
        }
        StepTime::Roofline(r) => vec![
            r.efficiency.compute,
            r.efficiency.memory,
            r.efficiency.overhead_ms,
        ],
        _ => vec![1.0, 0.05, 0.1, 0.01],
    }
}

/// The model of `terms`: a roofline's efficiencies (achieved compute and memory fractions,
/// the step's overhead) over `base`'s, else the batched terms with `shape`'s experts (count
/// and per token) when it has a fifth.
fn model(terms: &[f64], shape: Option<Experts>, base: &StepTime) -> StepTime {
    if let StepTime::Roofline(r) = base {
        let mut r = r.clone();
        r.efficiency.compute = terms[0];
        r.efficiency.memory = terms[1];
        r.efficiency.overhead_ms = terms[2];
        return StepTime::Roofline(r);
    }
    StepTime::Batched {
        overhead_ms: terms[0],
        prefill_ms_per_token: terms[1],
        decode_ms_per_seq: terms[2],
        context_ms_per_ktoken: terms[3],
        experts: shape
            .zip(terms.get(4))
            .map(|(e, ms)| Experts { ms: *ms, ..e }),
    }
}

/// Whether and how far the fit searches the KV cache's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvSearch {
    /// As given.
    Fixed,
    /// Any size: nothing says what the cache held.
    Free,
    /// Within a band around a size the model's arithmetic derived.
    Within {
        /// The fewest blocks.
        lo: u32,
        /// The most blocks.
        hi: u32,
    },
}

impl KvSearch {
    /// Within `band` (a fraction, 0.2 = ±20%) of `blocks`.
    pub fn around(blocks: u32, band: f64) -> KvSearch {
        let at = |f: f64| {
            (f64::from(blocks) * f)
                .round()
                .clamp(1.0, f64::from(1u32 << 24)) as u32
        };
        KvSearch::Within {
            lo: at(1.0 - band),
            hi: at(1.0 + band),
        }
    }

    /// The blocks the search may take, when it searches.
    fn range(self) -> Option<(u32, u32)> {
        match self {
            KvSearch::Fixed => None,
            KvSearch::Free => Some((1, 1 << 24)),
            KvSearch::Within { lo, hi } => Some((lo, hi)),
        }
    }
}

/// The result of a fit.
#[derive(Debug, Clone)]
pub struct Fit {
    /// The engine, its step time fitted.
    pub engine: EngineConfig,
    /// What the requests took with it.
    pub samples: Samples,
    /// Replays run.
    pub evaluations: usize,
    /// How far the fitted replay is from the measured run ([`Samples::distance`]).
    pub distance: f64,
}

/// Fits the batched model's terms: from `base` (the engine's other settings, its step time
/// the starting point), `simulate` replays the workload with a candidate engine and returns
/// what its requests took (`None` when the candidate cannot run it). A seeded random
/// search around the start picks where to begin; then Nelder-Mead in log space (the terms
/// trade off against each other along narrow valleys, which coordinate steps crawl
/// along), restarted from its best point while the budget of `budget` replays lasts.
/// With `kv_search`, the KV cache's size is searched too, from `base`'s, for a run that
/// does not record it (a smaller cache makes a loaded run queue and preempt sooner),
/// within its band when it has one.
pub fn fit(
    base: &EngineConfig,
    measured: &Samples,
    seed: u64,
    budget: usize,
    kv_search: KvSearch,
    mut simulate: impl FnMut(&EngineConfig) -> Option<Samples>,
) -> Option<Fit> {
    let shape = match &base.step_time {
        StepTime::Batched { experts, .. } => *experts,
        _ => None,
    };
    // The point's engine: its terms, and its cache when that is searched (the last value).
    let engine_at = |x: &[f64]| -> EngineConfig {
        let values: Vec<f64> = x.iter().map(|v| v.exp()).collect();
        let mut engine = EngineConfig {
            step_time: model(&values, shape, &base.step_time),
            ..base.clone()
        };
        if let (Some((lo, hi)), Some(blocks)) = (kv_search.range(), values.last()) {
            engine.num_gpu_blocks = blocks.round().clamp(f64::from(lo), f64::from(hi)) as u32;
        }
        engine
    };
    let evaluations = std::cell::Cell::new(0usize);
    let mut best: Option<(f64, Vec<f64>, Samples)> = None;
    // The distance of log-space point `x`, remembering the best seen.
    let mut evaluate = |x: &[f64], best: &mut Option<(f64, Vec<f64>, Samples)>| -> f64 {
        evaluations.set(evaluations.get() + 1);
        let engine = engine_at(x);
        if engine.validate().is_err() {
            return f64::INFINITY;
        }
        let Some(samples) = simulate(&engine) else {
            return f64::INFINITY;
        };
        let d = samples.distance(measured);
        if best.as_ref().is_none_or(|(b, _, _)| d < *b) {
            *best = Some((d, x.to_vec(), samples));
        }
        d
    };
    let mut start = terms(&base.step_time);
    if kv_search != KvSearch::Fixed {
        start.push(f64::from(base.num_gpu_blocks));
    }
    let start: Vec<f64> = start.iter().map(|t| t.max(1e-9).ln()).collect();
    let dims = start.len();
    if !evaluate(&start, &mut best).is_finite() {
        return None;
    }
    let mut rng = SeededRng::new(seed);
    for _ in 0..budget / 5 {
        let Some((_, from, _)) = &best else { break };
        let mut candidate = from.clone();
        for value in &mut candidate {
            *value += (4f64).ln() * (2.0 * rng.unit_f64() - 1.0);
        }
        evaluate(&candidate, &mut best);
    }
    let mut spread = 2f64.ln();
    while evaluations.get() + dims + 1 < budget && spread > 1e-3 {
        let from = best.as_ref().map(|(_, x, _)| x.clone())?;
        let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(dims + 1);
        let value = evaluate(&from, &mut best);
        simplex.push((from.clone(), value));
        for i in 0..dims {
            let mut vertex = from.clone();
            vertex[i] += spread;
            let value = evaluate(&vertex, &mut best);
            simplex.push((vertex, value));
        }
        let mut moves = 0;
        while evaluations.get() < budget && moves < 200 {
            moves += 1;
            simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
            let size = simplex[1..]
                .iter()
                .flat_map(|(v, _)| v.iter().zip(&simplex[0].0).map(|(a, b)| (a - b).abs()))
                .fold(0.0, f64::max);
            if size < 1e-3 {
                break;
            }
            let mut centroid = vec![0.0; dims];
            for (vertex, _) in &simplex[..dims] {
                for (c, v) in centroid.iter_mut().zip(vertex) {
                    *c += v / dims as f64;
                }
            }
            let worst = simplex[dims].clone();
            let along = |t: f64| -> Vec<f64> {
                (0..dims)
                    .map(|i| centroid[i] + t * (worst.0[i] - centroid[i]))
                    .collect()
            };
            let reflected = along(-1.0);
            let fr = evaluate(&reflected, &mut best);
            if fr < simplex[0].1 {
                let expanded = along(-2.0);
                let fe = evaluate(&expanded, &mut best);
                simplex[dims] = if fe < fr {
                    (expanded, fe)
                } else {
                    (reflected, fr)
                };
            } else if fr < simplex[dims - 1].1 {
                simplex[dims] = (reflected, fr);
            } else {
                let contracted = if fr < worst.1 {
                    along(-0.5)
                } else {
                    along(0.5)
                };
                let fc = evaluate(&contracted, &mut best);
                if fc < worst.1.min(fr) {
                    simplex[dims] = (contracted, fc);
                } else {
                    let anchor = simplex[0].0.clone();
                    for (vertex, value) in simplex.iter_mut().skip(1) {
                        for (v, a) in vertex.iter_mut().zip(&anchor) {
                            *v = a + 0.5 * (*v - a);
                        }
                        *value = evaluate(vertex, &mut best);
                    }
                }
            }
        }
        spread /= 4.0;
    }
    let (distance, x, samples) = best?;
    Some(Fit {
        engine: engine_at(&x),
        samples,
        evaluations: evaluations.get(),
        distance,
    })
}

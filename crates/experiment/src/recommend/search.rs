//! How `recommend` searches: what it asks for (the objective), how it draws candidates
//! (random, or the Tree-structured Parzen Estimator of the `tpe` crate), and successive
//! halving over growing prefixes of the trace.
//!
//! TPE models, per parameter, where the good trials fell against the rest and draws where
//! that ratio is highest; it needs no gradient and handles choices and ranges alike, which
//! is what a fleet's space is (a policy, a count, a GPU, a weight). The `tpe` crate is a
//! small, maintained implementation (the author of Optuna's Rust ports) depending only on
//! `rand`; a Gaussian process would need a linear-algebra stack for no gain on spaces of a
//! handful of mostly categorical parameters.

use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};

use super::space::{Domain, Pick, Space};

/// What the search optimises.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// Meet SLO attainment of at least this fraction at the least cost.
    LeastCost(f64),
    /// The most requests meeting the SLO per second per GPU.
    GoodputPerGpu,
    /// The front of cost against the metric: no candidate on it is beaten on both.
    Pareto(Metric),
    /// The lowest value of the metric (the highest, for attainment) within the budget.
    Lowest(Metric),
}

/// A figure of a run that a front may be drawn against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// SLO attainment (higher is better).
    Attainment,
    /// TTFT, mean, ms.
    TtftMean,
    /// TTFT, 50th percentile, ms.
    TtftP50,
    /// TTFT, 90th percentile, ms.
    TtftP90,
    /// TTFT, 99th percentile, ms.
    TtftP99,
    /// End-to-end latency, 90th percentile, ms.
    E2eP90,
}

impl Metric {
    /// Its name in the recommend file and the table.
    pub fn parse(name: &str) -> Option<Metric> {
        Some(match name {
            "attainment" => Metric::Attainment,
            "ttft_mean_ms" => Metric::TtftMean,
            "ttft_p50_ms" => Metric::TtftP50,
            "ttft_p90_ms" => Metric::TtftP90,
            "ttft_p99_ms" => Metric::TtftP99,
            "e2e_p90_ms" => Metric::E2eP90,
            _ => return None,
        })
    }

    /// Its name in the recommend file.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Attainment => "attainment",
            Metric::TtftMean => "ttft_mean_ms",
            Metric::TtftP50 => "ttft_p50_ms",
            Metric::TtftP90 => "ttft_p90_ms",
            Metric::TtftP99 => "ttft_p99_ms",
            Metric::E2eP90 => "e2e_p90_ms",
        }
    }

    /// Its name on a plot's axis.
    pub fn title(self) -> &'static str {
        match self {
            Metric::Attainment => "SLO attainment",
            Metric::TtftMean => "TTFT mean (ms)",
            Metric::TtftP50 => "TTFT p50 (ms)",
            Metric::TtftP90 => "TTFT p90 (ms)",
            Metric::TtftP99 => "TTFT p99 (ms)",
            Metric::E2eP90 => "E2E p90 (ms)",
        }
    }

    /// Its value as the run measured it; `None` when the run has none.
    pub fn value(self, m: &Measured) -> Option<f64> {
        self.lower_better(m)
            .map(|v| if self == Metric::Attainment { -v } else { v })
    }

    /// Its value, lower better (attainment negated); `None` when the run has none.
    fn lower_better(self, m: &Measured) -> Option<f64> {
        match self {
            Metric::Attainment => m.attainment.map(|a| -a),
            Metric::TtftMean => m.ttft_mean_ms,
            Metric::TtftP50 => m.ttft_ms.map(|t| t[0]),
            Metric::TtftP90 => m.ttft_ms.map(|t| t[1]),
            Metric::TtftP99 => m.ttft_ms.map(|t| t[2]),
            Metric::E2eP90 => m.e2e_p90_ms,
        }
    }
}

/// What a trial's run gave, as the objective reads it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Measured {
    /// GPUs the fleet takes.
    pub gpus: u64,
    /// Its price an hour (the GPUs when no prices are given).
    pub cost: f64,
    /// SLO attainment (`None` without targets).
    pub attainment: Option<f64>,
    /// TTFT p50, p90, p99 in ms (`None` when no request finished).
    pub ttft_ms: Option<[f64; 3]>,
    /// TTFT mean in ms.
    pub ttft_mean_ms: Option<f64>,
    /// E2E p90 in ms.
    pub e2e_p90_ms: Option<f64>,
    /// Requests meeting the SLO (every finished one without targets) per second of the
    /// run, per GPU.
    pub goodput_per_gpu: f64,
}

/// The score of every fleet that misses the SLO starts here, above any price.
const MISSES: f64 = 1e15;

impl Goal {
    /// One number per trial, lower better: what halving keeps and TPE learns from.
    pub fn score(&self, m: &Measured, max_cost: f64) -> f64 {
        let attainment = m.attainment.unwrap_or(0.0);
        match *self {
            // A fleet that misses ranks after every one that meets, by how far it misses
            // (only the order of scores matters, to halving and to TPE alike).
            Goal::LeastCost(target) if attainment + 1e-12 < target => {
                MISSES + (target - attainment) * MISSES
            }
            // Of two fleets that cost the same, the one that attains more (a tenth of a
            // percent of cost at most, so never over a cheaper fleet's price step).
            Goal::LeastCost(_) => m.cost * (1.0 + 0.001 * (1.0 - attainment)),
            Goal::GoodputPerGpu => -m.goodput_per_gpu,
            Goal::Lowest(metric) => metric.lower_better(m).unwrap_or(MISSES),
            // Scalarised for the sampler only: the front itself is ranked by dominance.
            Goal::Pareto(metric) => {
                let value = metric.lower_better(m).unwrap_or(f64::MAX / 4.0);
                let scaled = match metric {
                    Metric::Attainment => value,
                    _ => (value / 1000.0).ln_1p(),
                };
                m.cost / max_cost.max(f64::MIN_POSITIVE) + scaled
            }
        }
    }

    /// Whether `a` is on the front against `others` (none is at least as good on both and
    /// better on one).
    pub fn on_front(metric: Metric, a: &Measured, others: &[&Measured]) -> bool {
        let Some(av) = metric.lower_better(a) else {
            return false;
        };
        !others.iter().any(|b| {
            metric
                .lower_better(b)
                .is_some_and(|bv| (b.cost <= a.cost && bv <= av) && (b.cost < a.cost || bv < av))
        })
    }
}

/// Uniform draws TPE starts from, as the crate advises (and Optuna does by default).
pub const STARTUP: usize = 10;

/// Draws candidates.
pub enum Sampler {
    /// Each parameter uniformly.
    Random(StdRng),
    /// TPE, one estimator per parameter (the crate's own per-parameter design), after
    /// [`STARTUP`] uniform draws (how many it has made so far).
    Tpe(StdRng, Vec<tpe::TpeOptimizer>, usize),
    /// Every point of a finite space in turn (the grid a sweep would run).
    Grid(std::vec::IntoIter<Vec<Option<Pick>>>),
}

impl Sampler {
    /// A sampler over `space` seeded with `seed`.
    pub fn new(kind: &str, space: &Space, seed: u64) -> Result<Sampler, String> {
        let rng = StdRng::seed_from_u64(seed);
        match kind {
            "random" => Ok(Sampler::Random(rng)),
            "tpe" => {
                let mut optimizers = Vec::with_capacity(space.params.len());
                for param in &space.params {
                    let range = match param.domain {
                        Domain::Int(lo, hi) => tpe::range(lo as f64, hi as f64 + 1.0),
                        Domain::Float(lo, hi) => tpe::range(lo, hi),
                        Domain::Choice(n) => tpe::categorical_range(n),
                    }
                    .map_err(|e| format!("search `{}`: {e}", param.path))?;
                    let estimator = match param.domain {
                        Domain::Choice(_) => tpe::histogram_estimator(),
                        _ => tpe::parzen_estimator(),
                    };
                    optimizers.push(tpe::TpeOptimizer::new(estimator, range));
                }
                Ok(Sampler::Tpe(rng, optimizers, 0))
            }
            "grid" => space
                .points(1_000_000)
                .map(|p| Sampler::Grid(p.into_iter()))
                .ok_or_else(|| {
                    "--sampler grid: the space has a `float` range or over 1,000,000 points"
                        .to_owned()
                }),
            other => Err(format!("--sampler {other}: expected tpe, random or grid")),
        }
    }

    /// One candidate: a pick for each parameter that exists under the earlier picks.
    /// A grid that has given every point gives `None`.
    pub fn ask(&mut self, space: &Space) -> Option<Vec<Option<Pick>>> {
        self.draw(space, false)
    }

    /// A candidate drawn uniformly whatever the sampler (a grid gives its next point): what
    /// a converged model-based sampler falls back on when it keeps proposing points tried.
    pub fn explore(&mut self, space: &Space) -> Option<Vec<Option<Pick>>> {
        self.draw(space, true)
    }

    fn draw(&mut self, space: &Space, uniformly: bool) -> Option<Vec<Option<Pick>>> {
        if let Sampler::Grid(points) = self {
            return points.next();
        }
        let startup = uniformly
            || match self {
                Sampler::Tpe(_, _, asked) => {
                    *asked += 1;
                    *asked <= STARTUP
                }
                // Random draws are all uniform.
                _ => true,
            };
        let mut picks: Vec<Option<Pick>> = Vec::with_capacity(space.params.len());
        for (index, param) in space.params.iter().enumerate() {
            if !space.active(index, &picks) {
                picks.push(None);
                continue;
            }
            let unit = match self {
                Sampler::Tpe(rng, optimizers, _) if !startup => optimizers[index]
                    .ask(rng)
                    .expect("the crate's estimators cannot fail to sample"),
                Sampler::Random(rng) | Sampler::Tpe(rng, _, _) => uniform(rng, &param.domain),
                Sampler::Grid(_) => unreachable!("returned above"),
            };
            picks.push(Some(snap(&param.domain, unit)));
        }
        Some(picks)
    }

    /// Tells the sampler how a candidate did (`score`, lower better).
    pub fn tell(&mut self, space: &Space, picks: &[Option<Pick>], score: f64) {
        let Sampler::Tpe(_, optimizers, _) = self else {
            return;
        };
        if !score.is_finite() {
            return;
        }
        for ((pick, optimizer), param) in picks.iter().zip(optimizers).zip(&space.params) {
            let value = match (pick, &param.domain) {
                // The middle of the integer's unit interval, within the range told.
                (Some(Pick::Int(i)), _) => *i as f64 + 0.5,
                (Some(Pick::Float(x)), _) => *x,
                (Some(Pick::Choice(c)), _) => *c as f64 + 0.5,
                // Not in this candidate: the crate's way to say so, so that its split into
                // better and worse still counts the candidate.
                (None, _) => f64::NAN,
            };
            // A value outside the range cannot come from `ask`.
            let _ = optimizer.tell(value, score);
        }
    }
}

/// A number drawn uniformly over a domain (a choice's alternatives as unit intervals).
fn uniform(rng: &mut StdRng, domain: &Domain) -> f64 {
    match *domain {
        Domain::Int(lo, hi) => lo as f64 + rng.random::<f64>() * ((hi - lo) as f64 + 1.0),
        Domain::Float(lo, hi) => lo + rng.random::<f64>() * (hi - lo),
        Domain::Choice(n) => rng.random::<f64>() * n as f64,
    }
}

/// A sampler's number in a domain as the parameter's value.
fn snap(domain: &Domain, x: f64) -> Pick {
    match *domain {
        Domain::Int(lo, hi) => Pick::Int((x.floor() as i64).clamp(lo, hi)),
        // A thousandth of the range is as fine as a fleet's knob needs, and keeps names short.
        Domain::Float(lo, hi) => {
            let step = (hi - lo) / 1000.0;
            let snapped = lo + ((x - lo) / step).round() * step;
            // To nine decimals, so 0.954 is not 0.9540000000000001 in a name.
            Pick::Float(((snapped * 1e9).round() / 1e9).clamp(lo, hi))
        }
        Domain::Choice(n) => Pick::Choice((x.floor().max(0.0) as usize).min(n - 1)),
    }
}

/// Successive halving's rungs for `trials` candidates: (share of the trace, candidates run
/// there), cheapest first; the last rung is the whole trace. `levels` 1 is no halving.
pub fn rungs(trials: usize, eta: usize, levels: u32) -> Vec<(f64, usize)> {
    let eta = eta.max(2);
    (0..levels.max(1))
        .map(|level| {
            let from_top = levels.max(1) - 1 - level;
            let share = 1.0 / (eta as f64).powi(from_top as i32);
            let kept = trials.div_ceil(eta.pow(level)).max(1);
            (share, kept)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(cost: f64, attainment: f64, ttft: f64) -> Measured {
        Measured {
            gpus: cost as u64,
            cost,
            attainment: Some(attainment),
            ttft_ms: Some([ttft, ttft, ttft]),
            ttft_mean_ms: Some(ttft),
            e2e_p90_ms: Some(ttft),
            goodput_per_gpu: attainment / cost,
        }
    }

    #[test]
    fn least_cost_ranks_every_fleet_that_meets_before_any_that_misses() {
        let goal = Goal::LeastCost(0.9);
        let cheap_miss = goal.score(&m(1.0, 0.5, 1.0), 8.0);
        let dear_meet = goal.score(&m(8.0, 0.95, 1.0), 8.0);
        let cheap_meet = goal.score(&m(2.0, 0.9, 1.0), 8.0);
        assert!(cheap_meet < dear_meet && dear_meet < cheap_miss);
        assert!(goal.score(&m(1.0, 0.8, 1.0), 8.0) < cheap_miss);
    }

    #[test]
    fn the_front_keeps_what_nothing_beats_on_both() {
        let (a, b, c) = (m(1.0, 0.5, 900.0), m(2.0, 0.9, 300.0), m(2.0, 0.8, 400.0));
        assert!(Goal::on_front(Metric::TtftP90, &a, &[&b, &c]));
        assert!(Goal::on_front(Metric::TtftP90, &b, &[&a, &c]));
        assert!(!Goal::on_front(Metric::TtftP90, &c, &[&a, &b]));
        assert!(!Goal::on_front(Metric::Attainment, &c, &[&a, &b]));
    }

    #[test]
    fn rungs_grow_the_trace_as_they_thin_the_candidates() {
        assert_eq!(rungs(27, 3, 3), [(1.0 / 9.0, 27), (1.0 / 3.0, 9), (1.0, 3)]);
        assert_eq!(rungs(10, 3, 1), [(1.0, 10)]);
        assert_eq!(rungs(2, 3, 3), [(1.0 / 9.0, 2), (1.0 / 3.0, 1), (1.0, 1)]);
    }

    #[test]
    fn both_samplers_stay_in_the_space_and_repeat_under_one_seed() {
        let space = Space::new(
            serde_yaml::from_str("e: {int: [1, 3]}\nw: {float: [0.5, 1.5]}\np: {choice: [a, b]}")
                .unwrap(),
        )
        .unwrap();
        for kind in ["random", "tpe"] {
            let draw = |seed| {
                let mut s = Sampler::new(kind, &space, seed).unwrap();
                (0..40)
                    .map(|i| {
                        let picks = s.ask(&space).unwrap();
                        s.tell(&space, &picks, f64::from(i % 7));
                        picks
                    })
                    .collect::<Vec<_>>()
            };
            let picks = draw(1);
            assert_eq!(picks, draw(1), "{kind}");
            assert_ne!(picks, draw(2), "{kind}");
            for p in &picks {
                assert!(matches!(p[0], Some(Pick::Int(1..=3))), "{kind}: {p:?}");
                assert!(matches!(p[1], Some(Pick::Float(x)) if (0.5..=1.5).contains(&x)));
                assert!(matches!(p[2], Some(Pick::Choice(0 | 1))));
            }
            let ints: std::collections::BTreeSet<_> =
                picks.iter().map(|p| format!("{:?}", p[0])).collect();
            assert_eq!(ints.len(), 3, "{kind} reaches every integer");
        }
    }
}

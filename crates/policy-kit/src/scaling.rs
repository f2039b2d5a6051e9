//! What a Kubernetes HorizontalPodAutoscaler does with a recommendation before it scales:
//! the tolerance, the stabilisation windows and the rate limits of `behavior`, with the
//! defaults the autoscaling/v2 API documents. Scalers that answer as an HPA would (the
//! `hpa` rule, KEDA's, which feeds an HPA) share it.
//!
//! Read from Kubernetes v1.31 `pkg/controller/podautoscaler/horizontal.go`
//! (`stabilizeRecommendationWithBehaviors`, `convertDesiredReplicasWithBehaviorRate`,
//! `calculateScaleUpLimitWithScalingRules`, `calculateScaleDownLimitWithBehaviors`) and
//! `replica_calculator.go` (the tolerance, unready pods counted as idle on a scale-up).

use routerlab_core::{PluginConfig, Pool, Tick};

use crate::duration::seconds_ns;

/// The HPA's `behavior` and tolerance, read from a plugin's config.
#[derive(Debug, Clone)]
pub struct Behavior {
    /// No change while the usage ratio is within `1 ± tolerance` (the controller's
    /// `--horizontal-pod-autoscaler-tolerance`, 0.1).
    pub tolerance: f64,
    /// Scale-up: the lowest recommendation of this window is taken (default 0 s).
    pub up_window_ns: u64,
    /// Scale-down: the highest recommendation of this window is taken (default 300 s).
    pub down_window_ns: u64,
    /// Scale-up may add this share of the replicas at the period's start (default 100 %)...
    pub up_percent: f64,
    /// ...or this many replicas (default 4), whichever allows more, per period.
    pub up_pods: u32,
    /// The period of the scale-up policies (default 15 s).
    pub up_period_ns: u64,
    /// Scale-down may remove this share per period (default 100 %).
    pub down_percent: f64,
    /// The period of the scale-down policy (default 15 s).
    pub down_period_ns: u64,
}

impl Behavior {
    /// Reads the keys `tolerance`, `scale_up_stabilization_s`, `scale_down_stabilization_s`,
    /// `scale_up_percent`, `scale_up_pods`, `scale_up_period_s`, `scale_down_percent` and
    /// `scale_down_period_s`, each with the HPA's default.
    pub fn from_config(config: &mut PluginConfig) -> Result<Behavior, String> {
        let tolerance = config.f64("tolerance", 0.1)?;
        if !(0.0..1.0).contains(&tolerance) {
            return Err(format!(
                "config key `tolerance`: must be in [0, 1), not {tolerance}"
            ));
        }
        let percent = |config: &mut PluginConfig, key: &'static str| -> Result<f64, String> {
            let p = config.f64(key, 100.0)?;
            if !(p.is_finite() && p > 0.0 && p <= 1000.0) {
                return Err(format!(
                    "config key `{key}`: must be above 0 and at most 1000, not {p}"
                ));
            }
            Ok(p)
        };
        let up_window_ns = seconds_ns(config, "scale_up_stabilization_s", 0.0, true)?;
        let down_window_ns = seconds_ns(config, "scale_down_stabilization_s", 300.0, true)?;
        let up_percent = percent(config, "scale_up_percent")?;
        let up_pods = config.u64("scale_up_pods", 4)?;
        let up_pods = u32::try_from(up_pods)
            .map_err(|_| format!("config key `scale_up_pods`: {up_pods} is too many"))?;
        let up_period_ns = seconds_ns(config, "scale_up_period_s", 15.0, false)?;
        let down_percent = percent(config, "scale_down_percent")?.min(100.0);
        let down_period_ns = seconds_ns(config, "scale_down_period_s", 15.0, false)?;
        Ok(Behavior {
            tolerance,
            up_window_ns,
            down_window_ns,
            up_percent,
            up_pods,
            up_period_ns,
            down_percent,
            down_period_ns,
        })
    }
}

/// The HPA's memory: past recommendations and past scaling events.
#[derive(Debug, Clone)]
pub struct Hpa {
    behavior: Behavior,
    /// (time, recommendation), oldest first.
    recommendations: Vec<(u64, u32)>,
    /// (time, replicas added (> 0) or removed (< 0)), oldest first.
    events: Vec<(u64, i64)>,
}

impl Hpa {
    /// An HPA with no history.
    pub fn new(behavior: Behavior) -> Hpa {
        Hpa {
            behavior,
            recommendations: Vec::new(),
            events: Vec::new(),
        }
    }

    /// The behaviour it applies.
    pub fn behavior(&self) -> &Behavior {
        &self.behavior
    }

    /// The replicas a usage ratio asks for, as `replica_calculator.go` works it out:
    /// `current` unchanged within the tolerance, else `ceil(ratio × ready)`. On a scale-up
    /// with `starting` replicas not ready yet, they count as idle: the ratio is taken again
    /// over `ready + starting` and, within the tolerance or below 1, nothing changes.
    /// `total` is the metric summed over the ready replicas, `target` its per-replica goal.
    pub fn recommend(&self, total: f64, target: f64, ready: u32, starting: u32) -> Option<u32> {
        let current = ready.saturating_add(starting);
        if ready == 0 || target.is_nan() || target <= 0.0 || !total.is_finite() {
            return None;
        }
        let tolerance = self.behavior.tolerance;
        let ratio = total / (f64::from(ready) * target);
        if (ratio - 1.0).abs() <= tolerance {
            return Some(current);
        }
        let mut desired = ceil_u32(ratio * f64::from(ready));
        if starting > 0 && ratio > 1.0 {
            let again = total / (f64::from(current) * target);
            if again <= 1.0 + tolerance {
                return Some(current);
            }
            desired = ceil_u32(again * f64::from(current));
        }
        Some(desired)
    }

    /// The replicas an external metric with an average-value target asks for (what KEDA
    /// feeds an HPA): `current` within the tolerance of `total / (target × current)`, else
    /// `ceil(total / target)`.
    pub fn recommend_average(&self, total: f64, target: f64, current: u32) -> Option<u32> {
        if current == 0 || target.is_nan() || target <= 0.0 || !total.is_finite() {
            return None;
        }
        let ratio = total / (target * f64::from(current));
        if (ratio - 1.0).abs() <= self.behavior.tolerance {
            return Some(current);
        }
        Some(ceil_u32(total / target))
    }

    /// What the HPA scales to at `now` from `current` replicas on `recommendation`:
    /// stabilised over the windows, limited by the rate policies, kept within
    /// `min..=max`; the change is remembered as an event.
    pub fn decide(
        &mut self,
        now: u64,
        current: u32,
        recommendation: u32,
        min: u32,
        max: u32,
    ) -> u32 {
        let b = &self.behavior;
        // Stabilisation: the lowest of the up window, the highest of the down window.
        let (mut up, mut down) = (recommendation, recommendation);
        for &(at, rec) in &self.recommendations {
            if now.saturating_sub(at) < b.up_window_ns {
                up = up.min(rec);
            }
            if now.saturating_sub(at) < b.down_window_ns {
                down = down.max(rec);
            }
        }
        let mut stabilised = current;
        if stabilised < up {
            stabilised = up;
        }
        if stabilised > down {
            stabilised = down;
        }
        self.recommendations.push((now, recommendation));
        let keep = b.up_window_ns.max(b.down_window_ns);
        self.recommendations
            .retain(|&(at, _)| now.saturating_sub(at) < keep);
        // Rate limits, from the replicas at the start of each policy's period.
        let mut desired = stabilised;
        if desired > current {
            let added: i64 = self.changes_within(now, b.up_period_ns, true);
            let start = (i64::from(current) - added).max(0) as f64;
            let by_percent = (start * (1.0 + b.up_percent / 100.0)).ceil();
            let by_pods = start + f64::from(b.up_pods);
            let limit = by_percent.max(by_pods).min(f64::from(u32::MAX)) as u32;
            desired = desired.min(limit);
        } else if desired < current {
            let removed: i64 = -self.changes_within(now, b.down_period_ns, false);
            let start = (i64::from(current) + removed) as f64;
            // Truncated, as the controller converts it.
            let limit = (start * (1.0 - b.down_percent / 100.0)).max(0.0) as u32;
            desired = desired.max(limit);
        }
        let desired = desired.clamp(min.min(max), max);
        if desired != current {
            self.events
                .push((now, i64::from(desired) - i64::from(current)));
        }
        let longest = b.up_period_ns.max(b.down_period_ns);
        self.events
            .retain(|&(at, _)| now.saturating_sub(at) < longest);
        desired
    }

    /// Replicas added (`up`) or removed (as a negative sum) by the events within `period`.
    fn changes_within(&self, now: u64, period: u64, up: bool) -> i64 {
        self.events
            .iter()
            .filter(|&&(at, change)| now.saturating_sub(at) < period && (change > 0) == up)
            .map(|&(_, change)| change)
            .sum()
    }
}

/// `ceil(x)` as a replica count: at least 0, at most `u32::MAX`.
fn ceil_u32(x: f64) -> u32 {
    x.ceil().clamp(0.0, f64::from(u32::MAX)) as u32
}

/// One [`Hpa`] per pool of a scaler's ticks, each made when its pool first appears.
#[derive(Debug, Clone)]
pub struct HpaPools {
    behavior: Behavior,
    pools: Vec<Hpa>,
}

impl HpaPools {
    /// No pool seen yet.
    pub fn new(behavior: Behavior) -> HpaPools {
        HpaPools {
            behavior,
            pools: Vec::new(),
        }
    }

    /// Each pool's HPA scales it to what `recommend` (given that HPA and the pool) asks
    /// for, into `desired`; `None` leaves the pool as it is.
    pub fn scale(
        &mut self,
        tick: &Tick<'_>,
        desired: &mut [u32],
        mut recommend: impl FnMut(&Hpa, &Pool<'_>) -> Option<u32>,
    ) {
        while self.pools.len() < tick.pools.len() {
            self.pools.push(Hpa::new(self.behavior.clone()));
        }
        for ((hpa, pool), desired) in self.pools.iter_mut().zip(&tick.pools).zip(desired) {
            let Some(recommendation) = recommend(hpa, pool) else {
                continue;
            };
            *desired = hpa.decide(
                tick.now_ns,
                pool.current(),
                recommendation,
                pool.min_endpoints,
                pool.max_endpoints,
            );
        }
    }
}

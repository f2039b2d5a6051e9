//! `serve --scaler`: the scaler a replay sizes its fleet with, run live. `serve` cannot
//! start engines, so it publishes the count the scaler wants (`/metrics`:
//! `routerlab_scaler_desired_endpoints`, what a Kubernetes external metric or KEDA reads)
//! and logs each change on stderr.
//!
//! Its clock starts at the first request, as a replay's at the trace's start: ticks fall
//! every `interval` after it, each showing the scaler the endpoints in the fleet with their
//! loads and the requests that arrived since the last tick. Finishes and latencies are not
//! counted live: those figures are 0. The call runs off the runtime's workers with the
//! plugins' deadline; a scaler that misses it is dropped, and the count it last wanted stays
//! published.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use routerlab_core::Role;
use routerlab_host::{EndpointTable, PoolObservation, ScalerInstance};
use tokio::time::Instant;

use super::Shared;

/// A scaler for `serve`, loaded, and how it is run.
pub struct ServeScaling {
    /// The plugin.
    pub scaler: ScalerInstance,
    /// Time between ticks.
    pub interval: Duration,
    /// The fewest endpoints the count may ask for.
    pub min_endpoints: u32,
    /// The most (the GPU ceiling over `gpus_per_endpoint`).
    pub max_endpoints: u32,
    /// GPUs one endpoint takes.
    pub gpus_per_endpoint: u32,
    /// How long one call may take.
    pub deadline: Duration,
}

/// The scaler's state between ticks.
pub(super) struct Scaling {
    name: String,
    interval: Duration,
    min_endpoints: u32,
    max_endpoints: u32,
    gpus_per_endpoint: u32,
    deadline: Duration,
    /// `None` once a call missed its deadline (its thread still holds it).
    scaler: Option<ScalerInstance>,
    /// The first request's arrival: the clock's origin.
    origin: Option<Instant>,
    arrivals: u64,
    prompt_tokens: u64,
    output_tokens: u64,
    with_output: u64,
    desired: Option<u32>,
    ticks: u64,
}

/// What `/metrics` says of the scaler.
pub(super) struct ScalerFigures {
    pub(super) name: String,
    pub(super) desired: Option<u32>,
    pub(super) ticks: u64,
}

impl Scaling {
    pub(super) fn new(settings: ServeScaling) -> Scaling {
        Scaling {
            name: settings.scaler.name().to_owned(),
            interval: settings.interval,
            min_endpoints: settings.min_endpoints,
            max_endpoints: settings.max_endpoints,
            gpus_per_endpoint: settings.gpus_per_endpoint,
            deadline: settings.deadline,
            scaler: Some(settings.scaler),
            origin: None,
            arrivals: 0,
            prompt_tokens: 0,
            output_tokens: 0,
            with_output: 0,
            desired: None,
            ticks: 0,
        }
    }

    /// A request arrived: `true` when it is the first (the clock starts).
    pub(super) fn arrived(&mut self, prompt_tokens: u64, output_tokens: Option<u64>) -> bool {
        self.arrivals += 1;
        self.prompt_tokens += prompt_tokens;
        if let Some(output) = output_tokens {
            self.output_tokens += output;
            self.with_output += 1;
        }
        if self.origin.is_none() {
            self.origin = Some(Instant::now());
            return true;
        }
        false
    }

    pub(super) fn figures(&self) -> ScalerFigures {
        ScalerFigures {
            name: self.name.clone(),
            desired: self.desired,
            ticks: self.ticks,
        }
    }
}

fn lock(scaling: &Mutex<Scaling>) -> std::sync::MutexGuard<'_, Scaling> {
    scaling
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Ticks from the first request on, until the scaler is dropped.
pub(super) async fn tick_loop(shared: Arc<Shared>, started: Arc<tokio::sync::Notify>) {
    let Some(scaling) = &shared.scaling else {
        return;
    };
    started.notified().await;
    let (origin, interval) = {
        let s = lock(scaling);
        (s.origin.unwrap_or_else(Instant::now), s.interval)
    };
    for k in 1u32.. {
        tokio::time::sleep_until(origin + interval.saturating_mul(k)).await;
        let at = interval.saturating_mul(k);
        if !tick(&shared, scaling, at).await {
            return;
        }
    }
}

/// One tick, `at` after the first request: `false` once the scaler is gone.
async fn tick(shared: &Shared, scaling: &Mutex<Scaling>, at: Duration) -> bool {
    // The endpoints in the fleet, as the plugins see them now.
    let (names, loads): (Vec<String>, Vec<_>) = {
        let state = shared.lock().await;
        let loads = state.loads();
        loads
            .into_iter()
            .filter_map(|(index, load)| {
                let upstream = state.upstreams.iter().find(|u| u.index == Some(index))?;
                Some((upstream.name.clone(), load))
            })
            .unzip()
    };
    let mut table = EndpointTable::new(names);
    for (pos, load) in loads.into_iter().enumerate() {
        table.set_load(pos, load);
    }
    let (mut scaler, figures) = {
        let mut s = lock(scaling);
        let Some(scaler) = s.scaler.take() else {
            return false;
        };
        let mean = |sum: u64, n: u64| if n == 0 { 0.0 } else { sum as f64 / n as f64 };
        let figures = (
            s.arrivals,
            mean(s.prompt_tokens, s.arrivals),
            mean(s.output_tokens, s.with_output),
            s.min_endpoints,
            s.max_endpoints,
            s.gpus_per_endpoint,
            s.interval,
            s.deadline,
        );
        (s.arrivals, s.prompt_tokens, s.output_tokens, s.with_output) = (0, 0, 0, 0);
        (scaler, figures)
    };
    let (arrivals, prompt_mean, output_mean, min, max, gpus, interval, deadline) = figures;
    let ready = table.len() as u32;
    let now_ns = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
    let interval_ns = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    let call = tokio::task::spawn_blocking(move || {
        let pool = PoolObservation {
            role: Role::Aggregated,
            ready,
            starting: 0,
            draining: 0,
            min_endpoints: min,
            max_endpoints: max,
            gpus_per_endpoint: gpus,
            waiting_at_router: 0,
            arrivals,
            finished: 0,
            prompt_tokens_mean: prompt_mean,
            output_tokens_mean: output_mean,
            ttft_mean_ms: 0.0,
            tpot_mean_ms: 0.0,
            hit_ratio: 0.0,
            slo_attainment: None,
            endpoints: &table,
        };
        let answer = scaler.scale(now_ns, interval_ns, &[pool]);
        (scaler, answer)
    });
    let answered = tokio::time::timeout(deadline, call).await;
    let mut s = lock(scaling);
    s.ticks += 1;
    match answered {
        Ok(Ok((scaler, Ok(answer)))) => {
            s.scaler = Some(scaler);
            let desired = answer[0].clamp(min.min(max), max);
            if s.desired != Some(desired) {
                eprintln!(
                    "scaler {}: at {:.3} s desired {desired} endpoints ({ready} in the fleet, {arrivals} requests in the last {:.3} s)",
                    s.name,
                    at.as_secs_f64(),
                    interval.as_secs_f64()
                );
            }
            s.desired = Some(desired);
            true
        }
        Ok(Ok((scaler, Err(e)))) => {
            s.scaler = Some(scaler);
            eprintln!("scaler {}: at {:.3} s: {e}", s.name, at.as_secs_f64());
            true
        }
        Ok(Err(_)) | Err(_) => {
            eprintln!(
                "scaler {}: no answer within {} ms at {:.3} s; it is dropped and the desired count stays where it was",
                s.name,
                deadline.as_millis(),
                at.as_secs_f64()
            );
            false
        }
    }
}

//! The scaler kind (ABI 1.7): on each tick a scaler sees every pool of the fleet and answers
//! how many endpoints each should have. The views here are what a Rust scaler reads.

use crate::PluginConfig;
use crate::abi::{
    RL_POOL_STATE_SIZE_V1_7, RL_ROLE_AGGREGATED, RL_ROLE_DECODE, RL_ROLE_PREFILL,
    RL_SCALER_TICK_SIZE_V1_7, RlPoolState, RlScalerTick,
};
use crate::sdk::{Endpoints, Role};

/// A scaler plugin: on each tick, the desired endpoint count of each pool. The host
/// serialises calls on one instance, starts and drains endpoints to follow the answer, and
/// keeps it within each pool's bounds.
pub trait Scaler: Send + Sized + 'static {
    /// Builds an instance; as [`Matcher::create`](crate::Matcher::create), unread keys are
    /// rejected after it returns.
    fn create(name: &str, config: &mut PluginConfig) -> Result<Self, String>;

    /// Writes the desired endpoint count of pool `i` into `desired[i]`, which holds its
    /// current count (`ready + starting`) on entry.
    fn scale(&mut self, tick: &Tick<'_>, desired: &mut [u32]) -> Result<(), String>;
}

/// One tick: the time, and every pool.
#[derive(Clone)]
pub struct Tick<'a> {
    /// Time of the tick in logical nanoseconds since the start of the trace.
    pub now_ns: u64,
    /// Nanoseconds since the previous tick: the interval the pools' figures cover.
    pub interval_ns: u64,
    /// The pools: one for an aggregated fleet, prefill then decode for a disaggregated one.
    pub pools: Vec<Pool<'a>>,
}

/// One pool as a scaler sees it (the fields of [`RlPoolState`]).
#[derive(Clone)]
pub struct Pool<'a> {
    /// The endpoints' role.
    pub role: Role,
    /// Endpoints serving now.
    pub ready: u32,
    /// Endpoints started, not serving yet.
    pub starting: u32,
    /// Endpoints finishing what they run before they go.
    pub draining: u32,
    /// The fewest endpoints the host keeps.
    pub min_endpoints: u32,
    /// The most endpoints the host may run.
    pub max_endpoints: u32,
    /// GPUs one endpoint takes.
    pub gpus_per_endpoint: u32,
    /// Requests waiting at the router for this pool now.
    pub waiting_at_router: u64,
    /// Requests that arrived during the interval.
    pub arrivals: u64,
    /// Requests that finished during the interval.
    pub finished: u64,
    /// Mean prompt tokens of the interval's arrivals.
    pub prompt_tokens_mean: f64,
    /// Mean output tokens of the interval's arrivals.
    pub output_tokens_mean: f64,
    /// Mean TTFT (ms) of the interval's finished requests.
    pub ttft_mean_ms: f64,
    /// Mean time per output token (ms) of the interval's finished requests.
    pub tpot_mean_ms: f64,
    /// Cached prompt tokens over prompt tokens of the interval's finished requests.
    pub hit_ratio: f64,
    /// Share of the run's finished requests that met its SLO, `None` without an SLO or
    /// before anything finished.
    pub slo_attainment: Option<f64>,
    /// The serving endpoints and their loads.
    pub endpoints: Endpoints<'a>,
}

impl Pool<'_> {
    /// Endpoints counted as the pool's size: serving or starting.
    pub fn current(&self) -> u32 {
        self.ready.saturating_add(self.starting)
    }

    /// Requests per second that arrived during an interval of `interval_ns`.
    pub fn arrival_rate(&self, interval_ns: u64) -> f64 {
        if interval_ns == 0 {
            return 0.0;
        }
        self.arrivals as f64 * 1e9 / interval_ns as f64
    }
}

impl<'a> Tick<'a> {
    /// Reads the host's tick.
    ///
    /// # Safety
    /// `raw` must point at a readable tick of at least its `struct_size`, whose pools are
    /// `pool_count` readable states `pool_stride` bytes apart, each with a valid endpoint
    /// list, all valid for `'a`.
    pub(crate) unsafe fn read(raw: *const RlScalerTick) -> Result<Tick<'a>, String> {
        if raw.is_null() {
            return Err("scale: tick is null".into());
        }
        // SAFETY: non-null; `struct_size` is the first field.
        let size = unsafe { std::ptr::addr_of!((*raw).struct_size).read_unaligned() };
        if size < RL_SCALER_TICK_SIZE_V1_7 {
            return Err(format!(
                "scale: tick struct_size {size} is below the 1.7 size"
            ));
        }
        // SAFETY: the declared size covers the whole 1.7 struct.
        let tick = unsafe { raw.read_unaligned() };
        if tick.pool_count > 0 {
            if tick.pools.is_null() {
                return Err("scale: pools are null".into());
            }
            if tick.pool_stride < u64::from(RL_POOL_STATE_SIZE_V1_7) {
                return Err(format!(
                    "scale: pool stride {} is below the 1.7 size",
                    tick.pool_stride
                ));
            }
        }
        let mut pools = Vec::with_capacity(tick.pool_count.min(16) as usize);
        for i in 0..tick.pool_count {
            // SAFETY: the caller guarantees `pool_count` states `pool_stride` bytes apart;
            // the stride covers the 1.7 struct, all of it integers, floats and pointers.
            let state: RlPoolState = unsafe {
                tick.pools
                    .cast::<u8>()
                    .add((i * tick.pool_stride) as usize)
                    .cast::<RlPoolState>()
                    .read_unaligned()
            };
            let list = state.endpoints;
            if list.len > 0
                && (list.items.is_null()
                    || list.stride < u64::from(crate::abi::RL_ENDPOINT_STATUS_SIZE_V1_0))
            {
                return Err(format!(
                    "scale: pool {i}'s endpoint list is null or its stride too small"
                ));
            }
            let role = match state.role {
                RL_ROLE_AGGREGATED => Role::Aggregated,
                RL_ROLE_PREFILL => Role::Prefill,
                RL_ROLE_DECODE => Role::Decode,
                other => return Err(format!("scale: pool {i} has the unknown role {other}")),
            };
            pools.push(Pool {
                role,
                ready: state.ready,
                starting: state.starting,
                draining: state.draining,
                min_endpoints: state.min_endpoints,
                max_endpoints: state.max_endpoints,
                gpus_per_endpoint: state.gpus_per_endpoint,
                waiting_at_router: state.waiting_at_router,
                arrivals: state.arrivals,
                finished: state.finished,
                prompt_tokens_mean: state.prompt_tokens_mean,
                output_tokens_mean: state.output_tokens_mean,
                ttft_mean_ms: state.ttft_mean_ms,
                tpot_mean_ms: state.tpot_mean_ms,
                hit_ratio: state.hit_ratio,
                slo_attainment: (state.slo_attainment >= 0.0).then_some(state.slo_attainment),
                // SAFETY: checked above; the caller guarantees the list for `'a`.
                endpoints: unsafe { Endpoints::from_raw(list, &[]) },
            });
        }
        Ok(Tick {
            now_ns: tick.now_ns,
            interval_ns: tick.interval_ns,
            pools,
        })
    }
}

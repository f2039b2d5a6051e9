//! A live scaler instance (ABI 1.7): the host's view of one pool in, desired counts out.

use routerlab_core::Role;
use routerlab_core::abi::{RlPoolState, RlScalerTick, RlScalerVtable};

use super::{Create, EndpointTable, Handle};
use crate::PluginError;
use crate::loader::{Library, PluginInfo, Vtable};

/// One pool as the host observed it over the last interval: what a scaler is shown.
#[derive(Debug, Clone, Copy)]
pub struct PoolObservation<'a> {
    /// The pool's endpoints' role.
    pub role: Role,
    /// Endpoints serving now.
    pub ready: u32,
    /// Endpoints started, not serving yet.
    pub starting: u32,
    /// Endpoints draining.
    pub draining: u32,
    /// The fewest endpoints kept.
    pub min_endpoints: u32,
    /// The most endpoints allowed (the GPU ceiling over `gpus_per_endpoint`).
    pub max_endpoints: u32,
    /// GPUs one endpoint takes.
    pub gpus_per_endpoint: u32,
    /// Requests waiting at the router for the pool now.
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
    /// Cached over prompt tokens of the interval's finished requests.
    pub hit_ratio: f64,
    /// Share of the run's finished requests that met its SLO, if it has one.
    pub slo_attainment: Option<f64>,
    /// The serving endpoints with their loads.
    pub endpoints: &'a EndpointTable,
}

/// A live scaler instance.
pub struct ScalerInstance {
    handle: Handle,
    vtable: RlScalerVtable,
}

impl ScalerInstance {
    pub(crate) fn create(
        library: &'static Library,
        plugin: &'static PluginInfo,
        config: &str,
    ) -> Result<ScalerInstance, PluginError> {
        let Vtable::Scaler(vtable) = plugin.vtable else {
            unreachable!("kind checked by Library::plugin");
        };
        let Some(destroy) = vtable.destroy else {
            unreachable!("required slots checked by the loader");
        };
        let create = Create::of(vtable.create, vtable.create_with);
        let handle = Handle::create(library, plugin, create, destroy, config)?;
        Ok(ScalerInstance { handle, vtable })
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// The desired endpoint count of each of `pools` at `now_ns`, `interval_ns` after the
    /// previous tick, as the plugin answers it (not yet kept within the pools' bounds).
    pub fn scale(
        &mut self,
        now_ns: u64,
        interval_ns: u64,
        pools: &[PoolObservation<'_>],
    ) -> Result<Vec<u32>, PluginError> {
        let f = self.vtable.scale.expect("checked by the loader");
        let states: Vec<RlPoolState> = pools
            .iter()
            .map(|pool| RlPoolState {
                struct_size: size_of::<RlPoolState>() as u32,
                role: pool.role.raw(),
                ready: pool.ready,
                starting: pool.starting,
                draining: pool.draining,
                min_endpoints: pool.min_endpoints,
                max_endpoints: pool.max_endpoints,
                gpus_per_endpoint: pool.gpus_per_endpoint,
                waiting_at_router: pool.waiting_at_router,
                arrivals: pool.arrivals,
                finished: pool.finished,
                prompt_tokens_mean: pool.prompt_tokens_mean,
                output_tokens_mean: pool.output_tokens_mean,
                ttft_mean_ms: pool.ttft_mean_ms,
                tpot_mean_ms: pool.tpot_mean_ms,
                hit_ratio: pool.hit_ratio,
                slo_attainment: pool.slo_attainment.unwrap_or(-1.0),
                endpoints: pool.endpoints.raw_list(),
            })
            .collect();
        let tick = RlScalerTick {
            struct_size: size_of::<RlScalerTick>() as u32,
            _reserved: 0,
            now_ns,
            interval_ns,
            pools: states.as_ptr(),
            pool_count: states.len() as u64,
            pool_stride: size_of::<RlPoolState>() as u64,
        };
        let mut desired: Vec<u32> = pools.iter().map(|p| p.ready + p.starting).collect();
        let out = desired.as_mut_ptr();
        // SAFETY: `tick` points at `states`, whose lists borrow the pools' tables, and `out`
        // holds one writable u32 per pool, all alive for the call; the instance is live.
        self.handle.call("scale", &[], |inst, err| unsafe {
            f(inst, &tick, out, err)
        })?;
        Ok(desired)
    }
}

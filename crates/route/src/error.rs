//! Why a router or a set of replicas could not be built.

use routerlab_host::PluginError;

use crate::{MAX_ENDPOINTS, MAX_REPLICAS};

/// Why a router could not be assembled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError {
    /// A fleet of no endpoints, or of more than [`MAX_ENDPOINTS`].
    #[error("a fleet has 1 to {MAX_ENDPOINTS} endpoints, found {0}")]
    Endpoints(usize),
    /// No replicas, or more than [`MAX_REPLICAS`].
    #[error("a run has 1 to {MAX_REPLICAS} router replicas, found {0}")]
    Replicas(usize),
    /// Replicas that do not share the endpoints and the unavailable policy.
    #[error("router replicas must route to the same endpoints with the same unavailable policy")]
    MismatchedReplicas,
    /// A disaggregated fleet's pool without endpoints.
    #[error("a disaggregated fleet needs at least one {0} endpoint")]
    EmptyPool(&'static str),
    /// The matcher failed when it was told the endpoints.
    #[error("start: {0}")]
    Start(PluginError),
}

//! routerlab-route: the routing decision, as replays simulate it and `serve` deploys it.
//!
//! A [`Router`] is one router replica: the matcher and detector (plugin handles from
//! `routerlab-host`), the endpoint table they read, and what to do when nothing is
//! available; [`Router::decide`] is the one routing rule every driver uses. [`Replicas`] is
//! several routers behind a load balancer. Statistics about the decisions are the report
//! crate's; this crate only decides.

mod error;
pub mod ids;
pub mod pd;
pub mod replicas;
pub mod router;
pub mod sync;

pub use error::RouteError;
pub use ids::{EndpointIndex, ListPos, RequestSeq};
pub use pd::{PdDecision, Pools};
pub use replicas::{MAX_REPLICAS, Placement, ReplicaAssign, Replicas};
pub use router::{Decision, MAX_ENDPOINTS, Pool, Router, WhenUnavailable};
pub use sync::{ReplicaSync, SyncScope, SyncStats, SyncStrategy, Syncer};

//! Router replicas: several [`Router`]s behind a load balancer, each seeing only the
//! requests the balancer gives it.
//!
//! Production routers run as replicas, and a replica knows only what passed through it:
//! its matcher learns (`update`, `on_complete`) only its own picks, its in-flight counts
//! are its own, and with a metrics interval it scrapes the engines on its own schedule. A
//! policy that looks perfect as one router can lose most of its prefix hits, or chase
//! noise with its imbalance thresholds, once split. What the engines themselves hold (the
//! cached prefix a plugin may ask for) is the same for every replica: it is the engines'.
//!
//! One replica is exactly the single router of the drivers: no balancer, no extra
//! statistics, the same report.

use routerlab_core::SeededRng;
use routerlab_core::hash::hash64;
use serde::{Deserialize, Serialize};

use crate::RouteError;
use routerlab_core::{Phase, Role};

use crate::pd::Pools;
use crate::router::{Pool, Router};

/// The most replicas one run may simulate.
pub const MAX_REPLICAS: usize = 1024;

/// How the load balancer in front of the replicas spreads requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaAssign {
    /// In turn, in arrival order (an L4 balancer's round robin).
    #[default]
    RoundRobin,
    /// Uniformly at random, seeded.
    Random,
    /// Sticky: every request of a session goes to one replica (a hash of the session).
    /// A request without a session follows its conversation (the first request of its
    /// parent chain); one with neither is placed by a hash of its own id.
    Session,
}

impl ReplicaAssign {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ReplicaAssign::RoundRobin => "round-robin",
            ReplicaAssign::Random => "random",
            ReplicaAssign::Session => "session",
        }
    }
}

/// What the balancer knows of a request when it places it.
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    /// Session number, 0 = none.
    pub session: u64,
    /// Id (1-based position) of the first request of its parent chain; its own id when
    /// it has no parent.
    pub conversation: u64,
}

/// The routers and the balancer in front of them.
pub struct Replicas {
    /// Per replica, its router: of the whole fleet, or of the prefill pool when
    /// disaggregated.
    routers: Vec<Router>,
    /// Per replica, its decode pool's router, when disaggregated (else empty).
    decode: Vec<Router>,
    /// The split, when disaggregated.
    pools: Option<Pools>,
    assign: ReplicaAssign,
    rng: SeededRng,
    turn: usize,
    /// What sizes the fleet, when it is not fixed.
    scaler: Option<routerlab_host::ScalerInstance>,
    /// How the replicas share their state.
    sync: crate::ReplicaSync,
}

impl From<Router> for Replicas {
    /// One router, alone: what every driver did before replicas.
    fn from(router: Router) -> Replicas {
        Replicas {
            routers: vec![router],
            decode: Vec::new(),
            pools: None,
            assign: ReplicaAssign::RoundRobin,
            rng: SeededRng::new(0),
            turn: 0,
            scaler: None,
            sync: crate::ReplicaSync::none(),
        }
    }
}

impl Replicas {
    /// `routers` (1 to [`MAX_REPLICAS`], each with its own plugin instances over the same
    /// endpoints) behind a balancer that places requests by `assign`; `seed` drives the
    /// `random` balancer.
    pub fn new(
        routers: Vec<Router>,
        assign: ReplicaAssign,
        seed: u64,
    ) -> Result<Replicas, RouteError> {
        let Some(first) = routers.first() else {
            return Err(RouteError::Replicas(0));
        };
        if routers.len() > MAX_REPLICAS {
            return Err(RouteError::Replicas(routers.len()));
        }
        fn names(r: &Router) -> Vec<&str> {
            (0..r.table().len()).map(|p| r.table().name(p)).collect()
        }
        if routers
            .iter()
            .any(|r| names(r) != names(first) || r.when_unavailable() != first.when_unavailable())
        {
            return Err(RouteError::MismatchedReplicas);
        }
        Ok(Replicas {
            routers,
            decode: Vec::new(),
            pools: None,
            assign,
            // Its own stream: the balancer must not echo the arrival process's draws.
            rng: SeededRng::new(seed ^ 0x5245_504c_4943_4153),
            turn: 0,
            scaler: None,
            sync: crate::ReplicaSync::none(),
        })
    }

    /// The fleet's size follows `scaler` (a timed replay, or `serve`).
    pub fn with_scaler(mut self, scaler: routerlab_host::ScalerInstance) -> Replicas {
        self.scaler = Some(scaler);
        self
    }

    /// The replicas share their state as `sync` says (a timed replay, or `serve`).
    pub fn with_sync(mut self, sync: crate::ReplicaSync) -> Replicas {
        self.sync = sync;
        self
    }

    /// How the replicas share their state.
    pub fn sync(&self) -> &crate::ReplicaSync {
        &self.sync
    }

    /// Every router: each replica's (of the prefill pool when disaggregated), then each
    /// replica's decode-pool router.
    pub fn all_routers_mut(&mut self) -> impl Iterator<Item = &mut Router> {
        self.routers.iter_mut().chain(self.decode.iter_mut())
    }

    /// The scaler's plugin name, when the fleet has one.
    pub fn scaler_name(&self) -> Option<&str> {
        self.scaler.as_ref().map(|s| s.name())
    }

    /// The scaler, when the fleet has one.
    pub fn scaler_mut(&mut self) -> Option<&mut routerlab_host::ScalerInstance> {
        self.scaler.as_mut()
    }

    /// A disaggregated fleet split as `pools` says: `self`'s routers (made the prefill
    /// pool's) and, per replica, a router of the decode pool with plugin instances of its
    /// own. Every router's table must carry the endpoints' roles.
    pub fn disaggregated(
        mut self,
        decode: Vec<Router>,
        pools: Pools,
    ) -> Result<Replicas, RouteError> {
        if decode.len() != self.routers.len() {
            return Err(RouteError::MismatchedReplicas);
        }
        let (prefill, decode_pool) = (
            Pool {
                phase: Phase::Prefill,
                role: Role::Prefill,
            },
            Pool {
                phase: Phase::Decode,
                role: Role::Decode,
            },
        );
        for router in &mut self.routers {
            router.restrict_to(prefill)?;
        }
        self.decode = decode;
        for router in &mut self.decode {
            router.restrict_to(decode_pool)?;
        }
        self.pools = Some(pools);
        Ok(self)
    }

    /// Replica 0's prefill and decode routers, when the fleet is disaggregated (what a live
    /// router deploys); `None` otherwise.
    pub fn into_pool_routers(mut self) -> Option<(Router, Router)> {
        self.pools?;
        let prefill = self.routers.swap_remove(0);
        let decode = self.decode.swap_remove(0);
        Some((prefill, decode))
    }

    /// Whether the fleet is split into prefill and decode pools.
    pub fn is_disaggregated(&self) -> bool {
        self.pools.is_some()
    }

    /// The split into pools, when there is one.
    pub fn pools(&self) -> Option<Pools> {
        self.pools
    }

    /// Replica `r`'s decode-pool router (disaggregated fleets only).
    ///
    /// # Panics
    /// When the fleet is not disaggregated.
    pub fn decode_router_mut(&mut self, r: usize) -> &mut Router {
        &mut self.decode[r]
    }

    /// Replica `r`'s router for list position `pos`: its decode router when `pos` is in
    /// the decode pool of a disaggregated fleet, else its router.
    pub fn router_for(&mut self, r: usize, pos: usize) -> &mut Router {
        match self.decode.get_mut(r) {
            Some(decode) if decode.in_pool(crate::ListPos(pos)) => decode,
            _ => &mut self.routers[r],
        }
    }

    /// Number of replicas.
    pub fn len(&self) -> usize {
        self.routers.len()
    }

    /// Never: a run has at least one replica.
    pub fn is_empty(&self) -> bool {
        self.routers.is_empty()
    }

    /// The balancer's rule.
    pub fn assign(&self) -> ReplicaAssign {
        self.assign
    }

    /// Replica `r`.
    pub fn router(&self, r: usize) -> &Router {
        &self.routers[r]
    }

    /// Replica `r`, to route through.
    pub fn router_mut(&mut self, r: usize) -> &mut Router {
        &mut self.routers[r]
    }

    /// Every replica.
    pub fn routers_mut(&mut self) -> &mut [Router] {
        &mut self.routers
    }

    /// The replica the balancer gives the next request to (requests come in arrival order).
    pub fn place(&mut self, request: Placement) -> usize {
        let n = self.routers.len();
        if n == 1 {
            return 0;
        }
        match self.assign {
            ReplicaAssign::RoundRobin => {
                let r = self.turn;
                self.turn = (self.turn + 1) % n;
                r
            }
            ReplicaAssign::Random => self.rng.below(n as u64) as usize,
            ReplicaAssign::Session => {
                // Sessions and conversations are numbered apart: keep their keys apart.
                let (tag, id) = match request.session {
                    0 => (b'c', request.conversation),
                    session => (b's', session),
                };
                let mut key = [tag; 9];
                key[1..].copy_from_slice(&id.to_le_bytes());
                (hash64(&key, 0) % n as u64) as usize
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use routerlab_host::{EndpointTable, in_process};

    use super::*;
    use crate::WhenUnavailable;
    use crate::router::tests::First;

    fn router(names: &[&str], when: WhenUnavailable) -> Router {
        let matcher = in_process::matcher::<First>("first", "").unwrap();
        let table = EndpointTable::new(names.iter().copied());
        let Ok(router) = Router::new(matcher, None, table, when) else {
            panic!("a router")
        };
        router
    }

    fn replicas(n: usize, assign: ReplicaAssign, seed: u64) -> Replicas {
        let routers = (0..n)
            .map(|_| router(&["a", "b"], WhenUnavailable::Reject))
            .collect();
        let Ok(replicas) = Replicas::new(routers, assign, seed) else {
            panic!("replicas")
        };
        replicas
    }

    fn alone(conversation: u64) -> Placement {
        Placement {
            session: 0,
            conversation,
        }
    }

    #[test]
    fn round_robin_takes_turns_in_arrival_order() {
        let mut r = replicas(3, ReplicaAssign::RoundRobin, 0);
        let picks: Vec<usize> = (1..=7).map(|i| r.place(alone(i))).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn session_keeps_a_session_and_else_a_conversation_on_one_replica() {
        let mut r = replicas(4, ReplicaAssign::Session, 0);
        let in_session = |s| Placement {
            session: s,
            conversation: s * 100,
        };
        for s in 1..20 {
            let first = r.place(in_session(s));
            assert!((0..5).all(|_| r.place(in_session(s)) == first));
        }
        for c in 1..20 {
            let first = r.place(alone(c));
            assert_eq!(r.place(alone(c)), first);
        }
        let spread: std::collections::BTreeSet<usize> =
            (1..40).map(|s| r.place(in_session(s))).collect();
        assert!(spread.len() > 1, "sessions are spread over replicas");
    }

    #[test]
    fn random_is_seeded_and_in_range() {
        let draw = |seed| {
            let mut r = replicas(5, ReplicaAssign::Random, seed);
            (1..50).map(|i| r.place(alone(i))).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!(draw(7).iter().all(|p| *p < 5));
    }

    #[test]
    fn one_replica_is_always_the_router_and_mismatched_replicas_are_refused() {
        let mut one = replicas(1, ReplicaAssign::Random, 3);
        assert!((1..20).all(|i| one.place(alone(i)) == 0));
        let Err(err) = Replicas::new(Vec::new(), ReplicaAssign::RoundRobin, 0) else {
            panic!("no replicas")
        };
        assert_eq!(
            err.to_string(),
            "a run has 1 to 1024 router replicas, found 0"
        );
        let mixed = vec![
            router(&["a", "b"], WhenUnavailable::Reject),
            router(&["a", "c"], WhenUnavailable::Reject),
        ];
        let Err(err) = Replicas::new(mixed, ReplicaAssign::RoundRobin, 0) else {
            panic!("different fleets")
        };
        assert!(matches!(err, RouteError::MismatchedReplicas), "{err}");
    }
}

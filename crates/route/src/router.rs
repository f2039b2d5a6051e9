//! One router replica: the matcher, the detector, the endpoint table they read, and what to
//! do when nothing is available. Both replay drivers (time-free and timed) and `serve` route through
//! [`Router::decide`], so the routing rule is written once; the drivers only keep books
//! around it. Several replicas are several `Router`s.

use routerlab_host::{DetectorInstance, EndpointTable, MatcherInstance, PluginError, RequestData};
use serde::{Deserialize, Serialize};

use crate::RouteError;
use crate::ids::{EndpointIndex, ListPos};

/// The most endpoints one fleet may have: per-request records keep an endpoint in 16 bits.
pub const MAX_ENDPOINTS: usize = 4096;

/// What happens to a request when no endpoint is available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WhenUnavailable {
    /// Wait at the router until an endpoint is available (timed replay; the time-free
    /// replay has no later moment and rejects).
    Queue,
    /// Count it as rejected.
    Reject,
    /// Route it anyway, the matcher seeing every endpoint as available.
    FailOpen,
}

/// The outcome of one routing decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// List position of the chosen endpoint; `None` when nothing could take the request.
    pub endpoint: Option<ListPos>,
    /// Whether at least one endpoint was flagged unavailable.
    pub constrained: bool,
    /// Whether the matcher already learned the pick (it was asked to, see
    /// [`Router::decide`]).
    pub learned: bool,
    /// Whether the pick was made among every endpoint (fail-open) rather than among those
    /// the detector left available.
    pub opened: bool,
}

impl Decision {
    /// Whether the matcher was allowed to pick list position `pos` (`flags`: the router's
    /// [`Router::unavailable`] after this decision).
    pub fn allowed(&self, flags: &[bool], pos: ListPos) -> bool {
        self.opened || !flags[pos.0]
    }
}

/// One router replica.
pub struct Router {
    matcher: MatcherInstance,
    detector: Option<DetectorInstance>,
    table: EndpointTable,
    when_unavailable: WhenUnavailable,
    /// The detector's flags for the current decision (and the endpoints outside its pool).
    unavailable: Vec<bool>,
    /// What the matcher sees when it may choose anything: all false, or, for a router of
    /// one pool, true outside it.
    none_unavailable: Vec<bool>,
    /// The pool this router routes to, when it routes one phase of a disaggregated fleet.
    pool: Option<Pool>,
}

/// The pool a router of a disaggregated fleet routes to: which endpoints, for which phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    /// The phase its requests carry.
    pub phase: routerlab_core::Phase,
    /// The role of its endpoints; every other endpoint is never a candidate.
    pub role: routerlab_core::Role,
}

impl Router {
    /// A router over `table`'s endpoints (1 to [`MAX_ENDPOINTS`]); announces them to the
    /// matcher.
    pub fn new(
        mut matcher: MatcherInstance,
        detector: Option<DetectorInstance>,
        table: EndpointTable,
        when_unavailable: WhenUnavailable,
    ) -> Result<Router, RouteError> {
        let n = table.len();
        if n == 0 || n > MAX_ENDPOINTS {
            return Err(RouteError::Endpoints(n));
        }
        matcher.add_endpoints(&table).map_err(RouteError::Start)?;
        Ok(Router {
            matcher,
            detector,
            table,
            when_unavailable,
            unavailable: vec![false; n],
            none_unavailable: vec![false; n],
            pool: None,
        })
    }

    /// Makes this router one pool's: it is asked only for requests of `pool.phase`, and
    /// only the endpoints whose role (in the table) is `pool.role` are candidates; the
    /// matcher and the detector still see every endpoint, the others flagged unavailable.
    /// A pool with no endpoint is refused.
    pub fn restrict_to(&mut self, pool: Pool) -> Result<(), RouteError> {
        let outside: Vec<bool> = (0..self.table.len())
            .map(|pos| self.table.role(pos) != pool.role)
            .collect();
        if outside.iter().all(|o| *o) {
            return Err(RouteError::EmptyPool(match pool.role {
                routerlab_core::Role::Prefill => "prefill",
                routerlab_core::Role::Decode => "decode",
                _ => "pool",
            }));
        }
        self.none_unavailable = outside;
        self.pool = Some(pool);
        Ok(())
    }

    /// The pool it routes to, if it routes one.
    pub fn pool(&self) -> Option<Pool> {
        self.pool
    }

    /// Whether list position `pos` may ever be chosen by this router.
    pub fn in_pool(&self, pos: ListPos) -> bool {
        !self.none_unavailable[pos.0]
    }

    /// The matcher's name.
    pub fn matcher_name(&self) -> &str {
        self.matcher.name()
    }

    /// The endpoint table, whose loads the driver keeps current.
    pub fn table(&self) -> &EndpointTable {
        &self.table
    }

    /// The endpoint table, to update loads before a decision.
    pub fn table_mut(&mut self) -> &mut EndpointTable {
        &mut self.table
    }

    /// The detector's flags of the last decision, by list position.
    pub fn unavailable(&self) -> &[bool] {
        &self.unavailable
    }

    /// The policy when nothing is available.
    pub fn when_unavailable(&self) -> WhenUnavailable {
        self.when_unavailable
    }

    /// Decides where `request` goes: the detector flags overloaded endpoints, the matcher
    /// picks among the rest. With `FailOpen`, a request finds an endpoint whenever there is
    /// one: when everything is flagged, or the matcher finds nothing among the available
    /// endpoints, the matcher chooses among all of them.
    ///
    /// With `learn`, the matcher also learns its pick (`update`), in one crossing when the
    /// plugin offers it; a driver that may still turn the pick down passes `false` and
    /// calls [`Router::learn`] itself.
    pub fn decide(
        &mut self,
        request: &RequestData<'_>,
        learn: bool,
    ) -> Result<Decision, PluginError> {
        match self.detector.as_mut() {
            Some(detector) => detector.detect(&self.table, &mut self.unavailable)?,
            None => self.unavailable.fill(false),
        }
        // Outside its pool nothing is ever a candidate; only flags inside it constrain.
        let mut constrained = false;
        for (flag, outside) in self.unavailable.iter_mut().zip(&self.none_unavailable) {
            constrained |= *flag && !*outside;
            *flag |= *outside;
        }
        let everything_down = self.unavailable.iter().all(|u| *u);
        let fail_open = self.when_unavailable == WhenUnavailable::FailOpen;
        let flags = if everything_down && fail_open {
            &self.none_unavailable
        } else {
            &self.unavailable
        };
        let matcher = &mut self.matcher;
        let mut pick = |flags: &[bool]| {
            if learn {
                matcher.match_and_update(request, &self.table, flags)
            } else {
                matcher.match_request(request, &self.table, flags)
            }
        };
        let mut opened = everything_down && fail_open;
        let mut endpoint = if everything_down && !fail_open {
            None
        } else {
            pick(flags)?.map(ListPos)
        };
        if endpoint.is_none() && fail_open && constrained && !everything_down {
            opened = true;
            endpoint = pick(&self.none_unavailable)?.map(ListPos);
        }
        Ok(Decision {
            endpoint,
            constrained,
            learned: learn && endpoint.is_some(),
            opened,
        })
    }

    /// Takes the endpoint with stable index `index` out of the fleet (a live endpoint that
    /// failed its health check): the matcher is told, and it is never offered again.
    pub fn remove_endpoint(&mut self, index: EndpointIndex) -> Result<(), PluginError> {
        if let Some(pos) = self.table.position(index.0) {
            self.table.remove(index.0);
            self.unavailable.remove(pos);
            self.none_unavailable.remove(pos);
            self.matcher.remove_endpoints(&[index.0])?;
        }
        Ok(())
    }

    /// Stops offering the endpoint with stable index `index` (one draining before it goes):
    /// it stays listed, so the matcher still hears of its requests finishing, but it is
    /// never a candidate again. [`Router::remove_endpoint`] takes it out once it is empty.
    pub fn retire(&mut self, index: EndpointIndex) {
        if let Some(pos) = self.table.position(index.0) {
            self.none_unavailable[pos] = true;
        }
    }

    /// Adds an endpoint named `name` (one that came back): it gets a new stable index, which
    /// is returned, and the matcher is told.
    pub fn add_endpoint(&mut self, name: String) -> Result<EndpointIndex, PluginError> {
        self.add_endpoint_as(name, routerlab_core::Role::Aggregated)
    }

    /// As [`Router::add_endpoint`], an endpoint of the pool `role` (a candidate of this
    /// router only if it routes to that pool, or to the whole fleet).
    pub fn add_endpoint_as(
        &mut self,
        name: String,
        role: routerlab_core::Role,
    ) -> Result<EndpointIndex, PluginError> {
        let index = self.table.push(name);
        let pos = self.table.len() - 1;
        self.table.set_role(pos, role);
        self.unavailable.push(false);
        self.none_unavailable
            .push(self.pool.is_some_and(|pool| pool.role != role));
        self.matcher.add_endpoint_at(&self.table, pos)?;
        Ok(EndpointIndex(index))
    }

    /// The stable index of the endpoint at list position `pos`.
    pub fn index_of(&self, pos: ListPos) -> EndpointIndex {
        EndpointIndex(self.table.index(pos.0))
    }

    /// The list position of the endpoint with stable index `index`, while it is in the fleet.
    pub fn position_of(&self, index: EndpointIndex) -> Option<ListPos> {
        self.table.position(index.0).map(ListPos)
    }

    /// Tells the matcher `request` went to list position `pos`.
    pub fn learn(&mut self, request: &RequestData<'_>, pos: ListPos) -> Result<(), PluginError> {
        self.matcher.update(request, &self.table, pos.0)
    }

    /// Tells the matcher `request` produced its first token at list position `pos`.
    pub fn first_token(
        &mut self,
        request: &RequestData<'_>,
        pos: ListPos,
    ) -> Result<(), PluginError> {
        let index = self.table.index(pos.0);
        self.matcher.on_first_token(request, index)
    }

    /// Tells the matcher `request` finished at list position `pos`.
    pub fn complete(&mut self, request: &RequestData<'_>, pos: ListPos) -> Result<(), PluginError> {
        let index = self.table.index(pos.0);
        self.matcher.on_complete(request, index)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use routerlab_core::{Detector, EndpointId, Endpoints, Matcher, PluginConfig, Request, Unit};
    use routerlab_host::in_process;

    use super::*;

    /// The first endpoint it may pick; counts what it learns.
    pub(crate) struct First;

    static LEARNED: AtomicU64 = AtomicU64::new(0);

    impl Matcher for First {
        fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
            Ok(First)
        }
        fn match_request(
            &mut self,
            _request: &Request<'_>,
            endpoints: &Endpoints<'_>,
        ) -> Result<Option<EndpointId>, String> {
            Ok(endpoints.available().next().map(|e| e.id()))
        }
        fn update(&mut self, _request: &Request<'_>, _endpoint: EndpointId) -> Result<(), String> {
            LEARNED.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    /// Picks nothing while anything is flagged.
    struct Choosy;

    impl Matcher for Choosy {
        fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
            Ok(Choosy)
        }
        fn match_request(
            &mut self,
            _request: &Request<'_>,
            endpoints: &Endpoints<'_>,
        ) -> Result<Option<EndpointId>, String> {
            if endpoints.available().count() < endpoints.len() {
                return Ok(None);
            }
            Ok(endpoints.available().next().map(|e| e.id()))
        }
    }

    /// Flags the first `count` endpoints (config key `count`).
    struct FlagFirst {
        count: usize,
    }

    impl Detector for FlagFirst {
        fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
            Ok(FlagFirst {
                count: config.u64("count", 1)? as usize,
            })
        }
        fn detect(&mut self, _e: &Endpoints<'_>, unavailable: &mut [bool]) -> Result<(), String> {
            for (pos, flag) in unavailable.iter_mut().enumerate() {
                *flag = pos < self.count;
            }
            Ok(())
        }
    }

    fn request() -> RequestData<'static> {
        RequestData {
            id: 1,
            arrival_ns: 0,
            prompt: b"hello",
            block_hashes: &[],
            block_ids: None,
            block_size: 128,
            unit: Unit::Bytes,
            prompt_len: 5,
            output_tokens: None,
            session_id: 0,
            parent_id: 0,
            ends_session: false,
            now_ns: 0,
            cached_prefix: None,
            phase: routerlab_core::Phase::Whole,
            cached_tiers: None,
            predict: None,
            lora: None,
        }
    }

    fn router<M: Matcher>(flagged: Option<usize>, when: WhenUnavailable) -> Router {
        let matcher = in_process::matcher::<M>("m", "").unwrap();
        let detector = flagged.map(|n| {
            in_process::detector::<FlagFirst>("flag-first", &format!("count: {n}")).unwrap()
        });
        let table = EndpointTable::new(["a", "b", "c"]);
        let Ok(router) = Router::new(matcher, detector, table, when) else {
            panic!("a router over three endpoints")
        };
        router
    }

    #[test]
    fn the_matcher_picks_among_what_the_detector_left() {
        let mut r = router::<First>(Some(1), WhenUnavailable::Reject);
        let d = r.decide(&request(), false).unwrap();
        assert_eq!(d.endpoint, Some(ListPos(1)));
        assert!(d.constrained && !d.opened && !d.learned);
        assert_eq!(r.unavailable(), [true, false, false]);
        assert!(d.allowed(r.unavailable(), ListPos(1)) && !d.allowed(r.unavailable(), ListPos(0)));
    }

    #[test]
    fn everything_flagged_rejects_or_opens_as_told() {
        let mut reject = router::<First>(Some(3), WhenUnavailable::Reject);
        let d = reject.decide(&request(), true).unwrap();
        assert_eq!(
            (d.endpoint, d.constrained, d.opened, d.learned),
            (None, true, false, false)
        );
        let mut open = router::<First>(Some(3), WhenUnavailable::FailOpen);
        let d = open.decide(&request(), false).unwrap();
        assert_eq!((d.endpoint, d.opened), (Some(ListPos(0)), true));
        assert!(
            d.allowed(open.unavailable(), ListPos(0)),
            "opened: every endpoint is allowed"
        );
    }

    #[test]
    fn fail_open_asks_again_among_all_when_the_matcher_finds_nothing() {
        let mut open = router::<Choosy>(Some(1), WhenUnavailable::FailOpen);
        let d = open.decide(&request(), false).unwrap();
        assert_eq!((d.endpoint, d.opened), (Some(ListPos(0)), true));
        let mut reject = router::<Choosy>(Some(1), WhenUnavailable::Reject);
        assert_eq!(reject.decide(&request(), false).unwrap().endpoint, None);
        let mut free = router::<Choosy>(None, WhenUnavailable::Reject);
        let d = free.decide(&request(), false).unwrap();
        assert_eq!((d.endpoint, d.constrained), (Some(ListPos(0)), false));
    }

    #[test]
    fn learning_in_the_decision_tells_the_matcher_once() {
        let mut r = router::<First>(None, WhenUnavailable::Reject);
        let before = LEARNED.load(Ordering::Relaxed);
        let d = r.decide(&request(), true).unwrap();
        assert!(d.learned);
        assert_eq!(LEARNED.load(Ordering::Relaxed), before + 1);
    }

    #[test]
    fn an_endpoint_taken_out_is_never_offered_and_one_added_gets_a_new_index() {
        let mut r = router::<First>(None, WhenUnavailable::Reject);
        r.remove_endpoint(EndpointIndex(0)).unwrap();
        assert_eq!(r.table().len(), 2);
        let pos = r.decide(&request(), false).unwrap().endpoint.unwrap();
        assert_eq!(r.table().name(pos.0), "b");
        let index = r.add_endpoint("a".into()).unwrap();
        assert_eq!(index, EndpointIndex(3), "stable indices are never reused");
        assert_eq!(r.position_of(index), Some(ListPos(2)));
        assert_eq!(r.index_of(ListPos(0)), EndpointIndex(1));
        assert_eq!(r.unavailable().len(), 3);
        assert_eq!(r.table().index(r.table().len() - 1), 3);
    }

    #[test]
    fn a_fleet_of_no_endpoints_is_refused() {
        let matcher = in_process::matcher::<First>("m", "").unwrap();
        let table = EndpointTable::new(Vec::<String>::new());
        let Err(err) = Router::new(matcher, None, table, WhenUnavailable::Reject) else {
            panic!("no endpoints must be refused")
        };
        assert_eq!(err.to_string(), "a fleet has 1 to 4096 endpoints, found 0");
    }
}

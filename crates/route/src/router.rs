//! One router replica: the matcher, the detector, the endpoint table they read, and what to
//! do when nothing is available. Both replay drivers (time-free and timed) and `serve` route through
//! [`Router::decide`], so the routing rule is written once; the drivers only keep books
//! around it. Several replicas are several `Router`s.

use routerlab_host::{DetectorInstance, EndpointTable, MatcherInstance, PluginError, RequestData};
use serde::{Deserialize, Serialize};

use crate::RouteError;

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
    pub endpoint: Option<usize>,
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
    pub fn allowed(&self, flags: &[bool], pos: usize) -> bool {
        self.opened || !flags[pos]
    }
}

/// One router replica.
pub struct Router {
    matcher: MatcherInstance,
    detector: Option<DetectorInstance>,
    table: EndpointTable,
    when_unavailable: WhenUnavailable,
    /// The detector's flags for the current decision.
    unavailable: Vec<bool>,
    /// All false: what the matcher sees when it may choose anything.
    none_unavailable: Vec<bool>,
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
        })
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
        let constrained = self.unavailable.contains(&true);
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
            pick(flags)?
        };
        if endpoint.is_none() && fail_open && constrained && !everything_down {
            opened = true;
            endpoint = pick(&self.none_unavailable)?;
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
    pub fn remove_endpoint(&mut self, index: u32) -> Result<(), PluginError> {
        if self.table.remove(index) {
            self.unavailable.pop();
            self.none_unavailable.pop();
            self.matcher.remove_endpoints(&[index])?;
        }
        Ok(())
    }

    /// Adds an endpoint named `name` (one that came back): it gets a new stable index, which
    /// is returned, and the matcher is told.
    pub fn add_endpoint(&mut self, name: String) -> Result<u32, PluginError> {
        let index = self.table.push(name);
        self.unavailable.push(false);
        self.none_unavailable.push(false);
        let pos = self.table.len() - 1;
        self.matcher.add_endpoint_at(&self.table, pos)?;
        Ok(index)
    }

    /// Tells the matcher `request` went to list position `pos`.
    pub fn learn(&mut self, request: &RequestData<'_>, pos: usize) -> Result<(), PluginError> {
        self.matcher.update(request, &self.table, pos)
    }

    /// Tells the matcher `request` produced its first token at list position `pos`.
    pub fn first_token(
        &mut self,
        request: &RequestData<'_>,
        pos: usize,
    ) -> Result<(), PluginError> {
        let index = self.table.index(pos);
        self.matcher.on_first_token(request, index)
    }

    /// Tells the matcher `request` finished at list position `pos`.
    pub fn complete(&mut self, request: &RequestData<'_>, pos: usize) -> Result<(), PluginError> {
        let index = self.table.index(pos);
        self.matcher.on_complete(request, index)
    }
}

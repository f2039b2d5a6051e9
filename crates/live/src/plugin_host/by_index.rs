//! A `Router` asked in stable endpoint indices, the words `serve` uses for its plugins: the
//! one implementation behind both the in-process plugins and the plugin host's loop.

use routerlab_host::{EndpointLoad, PluginError, RequestData};
use routerlab_route::{EndpointIndex, Router};

/// What a matcher is told of a request after the decision.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Notice {
    /// The engine took it (`update`).
    Learn,
    /// Its first token came (`on_first_token`).
    FirstToken,
    /// It finished (`on_complete`).
    Complete,
}

impl Notice {
    /// The plugin call it is, in messages.
    pub(crate) fn call(self) -> &'static str {
        match self {
            Notice::Learn => "update",
            Notice::FirstToken => "on_first_token",
            Notice::Complete => "on_complete",
        }
    }
}

/// A decision, in stable indices.
pub(crate) struct Decided {
    pub(crate) endpoint: Option<EndpointIndex>,
    pub(crate) constrained: bool,
    pub(crate) flagged: Vec<EndpointIndex>,
}

/// Sets the endpoints' loads (an index no longer in the fleet is passed over), then
/// detects and matches; the matcher does not learn the pick.
pub(crate) fn decide(
    router: &mut Router,
    request: &RequestData<'_>,
    loads: impl IntoIterator<Item = (EndpointIndex, EndpointLoad)>,
) -> Result<Decided, PluginError> {
    for (index, load) in loads {
        if let Some(pos) = router.position_of(index) {
            router.table_mut().set_load(pos.0, load);
        }
    }
    let decision = router.decide(request, false)?;
    let flagged = router
        .unavailable()
        .iter()
        .enumerate()
        .filter(|(_, flagged)| **flagged)
        .map(|(pos, _)| EndpointIndex(router.table().index(pos)))
        .collect();
    Ok(Decided {
        endpoint: decision.endpoint.map(|pos| router.index_of(pos)),
        constrained: decision.constrained,
        flagged,
    })
}

/// Tells the matcher what became of `request` at `at`; `Ok(false)` when `at` is no longer
/// in the fleet (nothing is called).
pub(crate) fn notify(
    router: &mut Router,
    notice: Notice,
    request: &RequestData<'_>,
    at: EndpointIndex,
) -> Result<bool, PluginError> {
    let Some(pos) = router.position_of(at) else {
        return Ok(false);
    };
    match notice {
        Notice::Learn => router.learn(request, pos),
        Notice::FirstToken => router.first_token(request, pos),
        Notice::Complete => router.complete(request, pos),
    }
    .map(|()| true)
}

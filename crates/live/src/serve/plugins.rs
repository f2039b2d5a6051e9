//! Where `serve`'s plugins run: in this process (a `Router`), or in a plugin host process
//! ([`crate::plugin_host`]). Both are asked the same things in the same words, endpoints
//! named by their stable index, so the state above does not care which it has.

use routerlab_core::abi::RlPrediction;
use routerlab_host::{EndpointLoad, RequestData};
use routerlab_route::{EndpointIndex, Router};

use super::plugin_thread::PluginThread;
use crate::LiveError;
use crate::plugin_host::by_index;
pub(super) use crate::plugin_host::by_index::{Decided, Notice};
use crate::plugin_host::wire::{AdapterState, Call, Load, Reply, WireAdapter, WireRequest};
use crate::plugin_host::{Host, HostFailure};

/// The plugins, in process or in a host.
pub enum Plugins {
    /// On a thread of their own in this process ([`Plugins::in_process`]): a missed
    /// deadline fails the call and, until it returns, every call; a crashing plugin ends
    /// `serve`.
    InProcess(InProcess),
    /// Called over a channel: a crash or a missed deadline restarts the host.
    Isolated(Box<Host>),
}

/// In-process plugins: their thread, and the fleet as they were last told of it.
pub struct InProcess {
    thread: PluginThread,
    endpoints: Vec<(String, u32)>,
}

impl Plugins {
    /// `router`'s plugins on a thread of their own, each call waited for at most
    /// `deadline`.
    pub fn in_process(router: Router, deadline: std::time::Duration) -> Result<Plugins, LiveError> {
        let table = router.table();
        let endpoints = (0..table.len())
            .map(|pos| (table.name(pos).to_owned(), table.index(pos)))
            .collect();
        let thread = PluginThread::start(router, deadline)
            .map_err(|e| LiveError::Run(format!("cannot start the plugins' thread: {e}")))?;
        Ok(Plugins::InProcess(InProcess { thread, endpoints }))
    }

    /// The call the plugins are stuck in past their deadline, in process, if they are.
    pub(super) fn stuck(&self) -> Option<String> {
        match self {
            Plugins::InProcess(p) => p.thread.stuck().map(|call| {
                format!(
                    "a plugin call is stuck: `{}` has not returned from `{call}`",
                    p.thread.matcher_name()
                )
            }),
            Plugins::Isolated(_) => None,
        }
    }
}

/// What the plugin host's failures have been, for `/metrics`.
pub(super) struct HostCounts {
    pub(super) crashes: u64,
    pub(super) missed_deadlines: u64,
    pub(super) restarts: u64,
}

impl Plugins {
    /// The matcher's name.
    pub(super) fn matcher_name(&self) -> &str {
        match self {
            Plugins::InProcess(p) => p.thread.matcher_name(),
            Plugins::Isolated(host) => host.matcher(),
        }
    }

    /// The endpoints with the stable indices the plugins gave them.
    pub(super) fn endpoints(&self) -> Vec<(String, EndpointIndex)> {
        match self {
            Plugins::InProcess(p) => p
                .endpoints
                .iter()
                .map(|(name, index)| (name.clone(), EndpointIndex(*index)))
                .collect(),
            Plugins::Isolated(host) => host
                .endpoints()
                .iter()
                .map(|(name, index)| (name.clone(), EndpointIndex(*index)))
                .collect(),
        }
    }

    /// Which plugin instances answer now: a request learned by one set is not reported
    /// complete to another.
    pub(super) fn generation(&self) -> u64 {
        match self {
            Plugins::InProcess(_) => 0,
            Plugins::Isolated(host) => host.generation(),
        }
    }

    /// When a restarted plugin host has come up since the last look: the endpoints it
    /// starts with (the whole starting fleet).
    pub(super) fn restarted(&mut self) -> Option<Vec<(String, EndpointIndex)>> {
        match self {
            Plugins::InProcess(_) => None,
            Plugins::Isolated(host) => host.restarted().map(|endpoints| {
                endpoints
                    .into_iter()
                    .map(|(name, index)| (name, EndpointIndex(index)))
                    .collect()
            }),
        }
    }

    /// Notices sent without waiting that failed so far, in process or in a host.
    pub(super) fn late_failures(&self) -> u64 {
        match self {
            Plugins::InProcess(p) => p.thread.late_failures(),
            Plugins::Isolated(host) => host.late_failures,
        }
    }

    /// The plugin host's failures so far (`None` in process).
    pub(super) fn host_counts(&self) -> Option<HostCounts> {
        match self {
            Plugins::InProcess(_) => None,
            Plugins::Isolated(host) => Some(HostCounts {
                crashes: host.crashes,
                missed_deadlines: host.missed_deadlines,
                restarts: host.restarts,
            }),
        }
    }

    /// Sets the endpoints' loads, then detects and matches (the matcher does not learn).
    pub(super) fn decide(
        &mut self,
        request: &RequestData<'_>,
        loads: Vec<(EndpointIndex, EndpointLoad)>,
    ) -> Result<Decided, String> {
        match self {
            Plugins::InProcess(p) => {
                let owned = Owned::of(request, &p.endpoints);
                p.thread
                    .call("decide", move |router| {
                        owned.lend(|data| by_index::decide(router, data, loads))
                    })?
                    .map_err(|e| e.to_string())
            }
            Plugins::Isolated(host) => {
                let call = Call::Decide {
                    request: wire_request(request, host.endpoints()),
                    loads: loads
                        .into_iter()
                        .map(|(i, load)| (i.0, Load(load)))
                        .collect(),
                };
                match host.call(&call) {
                    Ok(Reply::Decided {
                        endpoint,
                        constrained,
                        flagged,
                    }) => Ok(Decided {
                        endpoint: endpoint.map(EndpointIndex),
                        constrained,
                        flagged: flagged.into_iter().map(EndpointIndex).collect(),
                    }),
                    other => Err(unexpected(other)),
                }
            }
        }
    }

    /// Tells the matcher what became of `request` at `at`: `update`, `on_first_token` or
    /// `on_complete`, sent without waiting (in process: [`PluginThread::send`]; in a host:
    /// [`Host::send`]); a failure is counted later ([`Plugins::late_failures`]). Nothing
    /// for an endpoint no longer in the fleet.
    pub(super) fn notify(
        &mut self,
        notice: Notice,
        request: &RequestData<'_>,
        at: EndpointIndex,
    ) -> Result<(), String> {
        match self {
            Plugins::InProcess(p) => {
                let owned = Owned::of(request, &p.endpoints);
                p.thread.send(notice.call(), move |router| {
                    owned
                        .lend(|data| by_index::notify(router, notice, data, at))
                        .map(|_| ())
                })
            }
            Plugins::Isolated(host) => {
                let (request, index) = (wire_request(request, host.endpoints()), at.0);
                let call = match notice {
                    Notice::Learn => Call::Learn { request, index },
                    Notice::FirstToken => Call::FirstToken { request, index },
                    Notice::Complete => Call::Complete { request, index },
                };
                host.send(&call).map_err(|e| e.to_string())
            }
        }
    }

    /// An endpoint of pool `role` joins the fleet; returns the stable index it got.
    pub(super) fn add_endpoint(
        &mut self,
        name: &str,
        role: routerlab_core::Role,
    ) -> Result<EndpointIndex, String> {
        match self {
            Plugins::InProcess(p) => {
                let owned = name.to_owned();
                let index = p
                    .thread
                    .call("add_endpoints", move |router| {
                        router.add_endpoint_as(owned, role)
                    })?
                    .map_err(|e| e.to_string())?;
                p.endpoints.push((name.to_owned(), index.0));
                Ok(index)
            }
            Plugins::Isolated(host) => match host.call(&Call::Add {
                name: name.to_owned(),
            }) {
                Ok(Reply::Added { index }) => Ok(EndpointIndex(index)),
                other => Err(unexpected(other)),
            },
        }
    }

    /// An endpoint leaves the fleet.
    pub(super) fn remove_endpoint(&mut self, index: EndpointIndex) -> Result<(), String> {
        match self {
            Plugins::InProcess(p) => {
                p.thread
                    .call("remove_endpoints", move |router| {
                        router.remove_endpoint(index)
                    })?
                    .map_err(|e| e.to_string())?;
                p.endpoints.retain(|(_, i)| *i != index.0);
                Ok(())
            }
            Plugins::Isolated(host) => done(host.call(&Call::Remove { index: index.0 })),
        }
    }

    /// `f`'s answer, run on the in-process plugins' thread (tests: what a plugin kept in
    /// thread-local state).
    #[cfg(test)]
    pub(super) fn on_their_thread<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        match self {
            Plugins::InProcess(p) => p.thread.call("test", move |_| f()).expect("an answer"),
            Plugins::Isolated(_) => unreachable!("tests run plugins in process"),
        }
    }

    /// Endpoints in the fleet as the plugins see it (tests).
    #[cfg(test)]
    pub(super) fn fleet_len(&self) -> usize {
        match self {
            Plugins::InProcess(p) => p.endpoints.len(),
            Plugins::Isolated(host) => host.endpoints().len(),
        }
    }
}

/// A request as the plugins' thread takes it: owned, with what its callbacks would
/// answer asked of every endpoint before the call (as for a plugin host), forecasts too.
struct Owned {
    request: WireRequest,
    forecasts: Option<Vec<(u32, RlPrediction)>>,
}

impl Owned {
    fn of(r: &RequestData<'_>, endpoints: &[(String, u32)]) -> Owned {
        let forecasts = r.predict.map(|predict| {
            endpoints
                .iter()
                .filter_map(|(_, index)| predict(*index).map(|p| (*index, p)))
                .collect()
        });
        Owned {
            request: wire_request(r, endpoints),
            forecasts,
        }
    }

    /// Calls `f` with the request, its callbacks answered from what was asked before.
    fn lend<R>(&self, f: impl FnOnce(&RequestData<'_>) -> R) -> R {
        self.request.lend(self.forecasts.as_deref(), f)
    }
}

/// `r` for the channel: its `cached_prefix` and `adapter_state` asked of each of
/// `endpoints` (name, index).
fn wire_request(r: &RequestData<'_>, endpoints: &[(String, u32)]) -> WireRequest {
    let cached = r.cached_prefix.map(|lookup| {
        endpoints
            .iter()
            .filter_map(|(_, index)| lookup(*index).map(|units| (*index, units)))
            .collect()
    });
    let adapter = r.lora.map(|lora| WireAdapter {
        id: lora.id,
        name: lora.name.to_vec(),
        states: lora.state.map(|ask| {
            endpoints
                .iter()
                .filter_map(|(_, index)| ask(*index).map(|state| (*index, AdapterState(state))))
                .collect()
        }),
    });
    WireRequest {
        id: r.id,
        arrival_ns: r.arrival_ns,
        prompt: r.prompt.to_vec(),
        block_hashes: r.block_hashes.to_vec(),
        block_ids: r.block_ids.map(<[u32]>::to_vec),
        block_size: r.block_size,
        tokens: r.unit == routerlab_core::Unit::Tokens,
        prompt_len: r.prompt_len,
        output_tokens: r.output_tokens,
        session_id: r.session_id,
        parent_id: r.parent_id,
        ends_session: r.ends_session,
        now_ns: r.now_ns,
        phase: r.phase.raw(),
        cached,
        adapter,
    }
}

fn done(reply: Result<Reply, HostFailure>) -> Result<(), String> {
    match reply {
        Ok(Reply::Done) => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// Any answer but the one expected: the plugin's failure or the host's (a reply out of
/// turn is the host's failure: [`Host::call`] kills it).
fn unexpected(reply: Result<Reply, HostFailure>) -> String {
    match reply {
        Ok(Reply::Failed { message }) => message,
        Ok(other) => format!("the plugin host answered out of turn: {other:?}"),
        Err(failure) => failure.to_string(),
    }
}

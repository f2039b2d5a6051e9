//! Where `serve`'s plugins run: in this process (a `Router`), or in a plugin host process
//! ([`crate::plugin_host`]). Both are asked the same things in the same words, endpoints
//! named by their stable index, so the state above does not care which it has.

use routerlab_host::{EndpointLoad, RequestData};
use routerlab_route::{EndpointIndex, Router};

use crate::plugin_host::by_index;
pub(super) use crate::plugin_host::by_index::{Decided, Notice};
use crate::plugin_host::wire::{AdapterState, Call, Load, Reply, WireAdapter, WireRequest};
use crate::plugin_host::{Host, HostFailure};

/// The plugins, in process or in a host.
pub enum Plugins {
    /// Called directly: fastest; a crashing plugin ends `serve`.
    InProcess(Box<Router>),
    /// Called over a channel: a crash or a missed deadline restarts the host.
    Isolated(Box<Host>),
}

/// What the plugin host's failures have been, for `/metrics`.
pub(super) struct HostCounts {
    /// Failures the plugins reported for calls sent without waiting.
    pub(super) late_failures: u64,
    pub(super) crashes: u64,
    pub(super) missed_deadlines: u64,
    pub(super) restarts: u64,
}

impl Plugins {
    /// The matcher's name.
    pub(super) fn matcher_name(&self) -> &str {
        match self {
            Plugins::InProcess(router) => router.matcher_name(),
            Plugins::Isolated(host) => host.matcher(),
        }
    }

    /// The endpoints with the stable indices the plugins gave them.
    pub(super) fn endpoints(&self) -> Vec<(String, EndpointIndex)> {
        match self {
            Plugins::InProcess(router) => {
                let table = router.table();
                (0..table.len())
                    .map(|pos| (table.name(pos).to_owned(), EndpointIndex(table.index(pos))))
                    .collect()
            }
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

    /// The plugin host's failures so far (`None` in process).
    pub(super) fn host_counts(&self) -> Option<HostCounts> {
        match self {
            Plugins::InProcess(_) => None,
            Plugins::Isolated(host) => Some(HostCounts {
                late_failures: host.late_failures,
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
            Plugins::InProcess(router) => {
                by_index::decide(router, request, loads).map_err(|e| e.to_string())
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
    /// `on_complete` (in a host: sent without waiting, see [`Host::send`]). Nothing for an
    /// endpoint no longer in the fleet.
    pub(super) fn notify(
        &mut self,
        notice: Notice,
        request: &RequestData<'_>,
        at: EndpointIndex,
    ) -> Result<(), String> {
        match self {
            Plugins::InProcess(router) => by_index::notify(router, notice, request, at)
                .map(|_| ())
                .map_err(|e| e.to_string()),
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
            Plugins::InProcess(router) => router
                .add_endpoint_as(name.to_owned(), role)
                .map_err(|e| e.to_string()),
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
            Plugins::InProcess(router) => router.remove_endpoint(index).map_err(|e| e.to_string()),
            Plugins::Isolated(host) => done(host.call(&Call::Remove { index: index.0 })),
        }
    }

    /// Endpoints in the fleet as the plugins see it (tests).
    #[cfg(test)]
    pub(super) fn fleet_len(&self) -> usize {
        match self {
            Plugins::InProcess(router) => router.table().len(),
            Plugins::Isolated(host) => host.endpoints().len(),
        }
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

//! `dynamo-lora-hrw`: NVIDIA Dynamo's load-aware LoRA placement with its default sticky,
//! slot-aware rendezvous (highest random weight, HRW) allocator, as its design note
//! describes it (`docs/fern/pages/blog/2026/load-aware-lora-routing.mdx`: `LoraController`,
//! `LoraRoutingTable`, `LoraFilter`). Arrivals per adapter are counted in buckets of one
//! controller interval over a sliding window (`interval_s` 3 s × 30 = 90 s). At the first
//! request of each interval, each adapter seen in the window of completed intervals gets a replica count from its share of the
//! window's arrivals times the fleet's LoRA slots (each endpoint's `lora()` total, 1 an
//! endpoint without), at least 1 and at most the endpoints; busiest adapter first, the
//! replicas are the adapter's highest-ranked endpoints by HRW (`hash(adapter, endpoint)`),
//! the previous set's members kept first (sticky), an endpoint that already has as many
//! adapters planned as it has slots passed over while another has room; a shrinking set
//! waits `cooldown_ticks` (3) intervals first.
//! A request for an adapter goes to its set (an adapter not placed yet: its one pin, the
//! top-ranked endpoint that holds it or has a slot free of running adapters): of the members available, those where the adapter is resident
//! (`adapter_state`) if any, then the fewest requests in flight (Dynamo's downstream
//! router; KV-aware there), ties to the first. The base model goes to the fewest in
//! flight.
//!
//! What the lab does not model: the exponential smoothing over the window (a plain sum
//! here), the largest-remainder normalisation when the counts exceed the slot budget
//! (each count is rounded up and capped), the min-cost-flow allocator, and workers that
//! report an adapter available without holding it.
//!
//! Config keys: `interval_s` (3), `cooldown_ticks` (3), `seed` (unused).

use std::collections::BTreeMap;

use routerlab_core::hash::hash64;
use routerlab_core::{EndpointId, EndpointStatus, Endpoints, Matcher, PluginConfig, Request};
use routerlab_policy_kit::inflight;

/// Buckets in the sliding window (Dynamo: a 30-times window multiplier).
const BUCKETS: usize = 30;

/// Adapters tracked at once; past it the one seen least recently is forgotten.
const MAX_ADAPTERS: usize = 65_536;

/// One adapter's demand and placement.
#[derive(Debug, Clone, Default)]
struct Placed {
    name: Vec<u8>,
    /// Arrivals per interval, ring-indexed by interval number.
    buckets: [u64; BUCKETS],
    /// The interval number of the newest bucket written.
    newest: u64,
    /// Its endpoints, by stable index, best ranked first.
    replicas: Vec<u32>,
    /// Intervals in a row the wanted count was below `replicas.len()`.
    shrinking: u32,
}

impl Placed {
    /// Arrivals in the window of the intervals before `now` (the one under way is not
    /// complete yet).
    fn demand(&self, now: u64) -> u64 {
        let kept = |i: &u64| *i <= self.newest && self.newest - i < BUCKETS as u64;
        (1..=BUCKETS as u64)
            .filter_map(|back| now.checked_sub(back))
            .filter(kept)
            .map(|i| self.buckets[(i % BUCKETS as u64) as usize])
            .sum()
    }

    fn record(&mut self, interval: u64) {
        if interval > self.newest {
            for i in (self.newest + 1)..=interval.min(self.newest + BUCKETS as u64) {
                self.buckets[(i % BUCKETS as u64) as usize] = 0;
            }
            self.newest = interval;
        }
        self.buckets[(interval % BUCKETS as u64) as usize] += 1;
    }
}

/// The placement controller and its filter.
pub struct DynamoLoraHrw {
    interval_ns: u64,
    cooldown: u32,
    /// By adapter id.
    adapters: BTreeMap<u64, Placed>,
    /// The interval of the last placement.
    placed_at: Option<u64>,
}

/// An endpoint's HRW weight for an adapter.
fn weight(adapter: &[u8], endpoint: &str) -> u64 {
    let mut key = Vec::with_capacity(adapter.len() + endpoint.len() + 1);
    key.extend_from_slice(adapter);
    key.push(0);
    key.extend_from_slice(endpoint.as_bytes());
    hash64(&key, 0x4852_5721)
}

impl DynamoLoraHrw {
    /// Recomputes every adapter's replica set at interval `now` over `endpoints`, the
    /// busiest adapters first, each endpoint taking at most its slots' worth of adapters
    /// while any other has room.
    fn place(&mut self, now: u64, endpoints: &Endpoints<'_>) {
        let fleet: Vec<EndpointStatus<'_>> = endpoints.iter().collect();
        if fleet.is_empty() {
            return;
        }
        let capacity = |e: &EndpointStatus<'_>| e.lora().map_or(u32::MAX, |s| s.total.max(1));
        let slots: u64 = fleet
            .iter()
            .map(|e| e.lora().map_or(1, |s| u64::from(s.total.max(1))))
            .sum();
        // Adapters not seen for a whole window are forgotten.
        self.adapters.retain(|_, p| p.newest + BUCKETS as u64 > now);
        let total: u64 = self.adapters.values().map(|p| p.demand(now)).sum();
        let mut order: Vec<(u64, u64)> = self
            .adapters
            .iter()
            .map(|(id, p)| (p.demand(now), *id))
            .collect();
        order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        // Adapters planned on each endpoint so far, by list position.
        let mut planned = vec![0u32; fleet.len()];
        for (demand, id) in order {
            let placed = self.adapters.get_mut(&id).expect("listed");
            if demand == 0 {
                // Gone from the window: back to its single pin.
                placed.replicas.clear();
                continue;
            }
            // Its share of the window's arrivals times the slots, rounded up.
            let share = (u128::from(demand) * u128::from(slots)).div_ceil(u128::from(total.max(1)));
            let wanted = usize::try_from(share)
                .unwrap_or(usize::MAX)
                .clamp(1, fleet.len());
            let keep = if wanted < placed.replicas.len() {
                placed.shrinking += 1;
                if placed.shrinking < self.cooldown {
                    placed.replicas.len()
                } else {
                    placed.shrinking = 0;
                    wanted
                }
            } else {
                placed.shrinking = 0;
                wanted
            };
            // (weight, stable index, list position), best first.
            let mut ranked: Vec<(u64, u32, usize)> = fleet
                .iter()
                .enumerate()
                .map(|(pos, e)| (weight(&placed.name, e.name()), e.id().0, pos))
                .collect();
            ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let room = |pos: usize, planned: &[u32]| planned[pos] < capacity(&fleet[pos]);
            let mut next: Vec<u32> = Vec::with_capacity(keep);
            // Sticky: previous members with room first, then the best ranked with room,
            // then (over the slot budget) the best ranked.
            for pass in 0..3 {
                for &(_, id, pos) in &ranked {
                    if next.len() >= keep {
                        break;
                    }
                    let take = match pass {
                        0 => placed.replicas.contains(&id) && room(pos, &planned),
                        1 => room(pos, &planned),
                        _ => true,
                    };
                    if take && !next.contains(&id) {
                        next.push(id);
                        planned[pos] += 1;
                    }
                }
            }
            placed.replicas = next;
        }
        self.placed_at = Some(now);
    }
}

impl Matcher for DynamoLoraHrw {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let _ = config.seed()?;
        let interval_s = config.f64("interval_s", 3.0)?;
        if !(interval_s.is_finite() && interval_s > 0.0 && interval_s <= 86_400.0) {
            return Err(format!(
                "config: interval_s must be above 0 and at most 86400, not {interval_s}"
            ));
        }
        let cooldown = config.u64("cooldown_ticks", 3)?;
        let cooldown = u32::try_from(cooldown)
            .map_err(|_| format!("config: cooldown_ticks must fit in 32 bits, not {cooldown}"))?;
        Ok(DynamoLoraHrw {
            interval_ns: (interval_s * 1e9) as u64,
            cooldown,
            adapters: BTreeMap::new(),
            placed_at: None,
        })
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let least_loaded = |ids: &mut dyn Iterator<Item = EndpointStatus<'_>>| {
            ids.min_by_key(|e| (inflight(e), e.id().0)).map(|e| e.id())
        };
        let Some((adapter, name)) = request.adapter() else {
            return Ok(least_loaded(&mut endpoints.available()));
        };
        let interval = request.now_ns() / self.interval_ns;
        if !self.adapters.contains_key(&adapter) && self.adapters.len() >= MAX_ADAPTERS {
            let oldest = self
                .adapters
                .iter()
                .min_by_key(|(_, p)| p.newest)
                .map(|(a, _)| *a);
            if let Some(oldest) = oldest {
                self.adapters.remove(&oldest);
            }
        }
        let placed = self.adapters.entry(adapter).or_insert_with(|| Placed {
            name: name.to_vec(),
            newest: interval,
            ..Placed::default()
        });
        placed.record(interval);
        if self.placed_at.is_none_or(|at| interval > at) {
            self.place(interval, endpoints);
        }
        let placed = &self.adapters[&adapter];
        let resident = |e: &EndpointStatus<'_>| {
            request
                .adapter_state(e.id())
                .is_some_and(|s| s.resident == 1)
        };
        // Not placed yet: its one pin, the top-ranked endpoint that holds it or has room
        // for it (else the top-ranked).
        let pin;
        let set: &[u32] = if placed.replicas.is_empty() {
            let room =
                |e: &EndpointStatus<'_>| resident(e) || e.lora().is_none_or(|s| s.active < s.total);
            let rank = |e: &EndpointStatus<'_>| {
                (
                    room(e),
                    weight(&placed.name, e.name()),
                    std::cmp::Reverse(e.id().0),
                )
            };
            pin = endpoints
                .iter()
                .max_by_key(rank)
                .map(|e| vec![e.id().0])
                .unwrap_or_default();
            &pin
        } else {
            &placed.replicas
        };
        let members = || endpoints.available().filter(|e| set.contains(&e.id().0));
        let chosen = least_loaded(&mut members().filter(resident))
            .or_else(|| least_loaded(&mut members()))
            // Every member unavailable: the least loaded of the rest.
            .or_else(|| least_loaded(&mut endpoints.available()));
        Ok(chosen)
    }
}

routerlab_core::export_plugins! {
    matcher DynamoLoraHrw {
        name: "dynamo-lora-hrw",
        description: "NVIDIA Dynamo load-aware LoRA placement: demand-sized sticky HRW replica sets, then the least loaded of them",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::LoraSlots;
    use routerlab_core::abi::RlAdapterState;
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    const S: u64 = 1_000_000_000;

    fn ask(m: &mut DynamoLoraHrw, fleet: &EndpointsBuilder, adapter: u64, at_s: u64) -> u32 {
        let request = RequestBuilder::new(1)
            .adapter(adapter, &format!("adapter-{adapter}"))
            .now_ns(at_s * S);
        let chosen = m.match_request(&request.view(), &fleet.view()).unwrap();
        chosen.expect("an endpoint").0
    }

    #[test]
    fn a_new_adapter_is_pinned_to_its_top_ranked_endpoint_and_demand_sizes_the_sets() {
        let mut m: DynamoLoraHrw = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(4);
        ask(&mut m, &fleet, 1, 0);
        // Adapter 2 arrives after this interval's placement: its one HRW pin.
        let top = (0..4u32)
            .max_by_key(|i| {
                (
                    weight(b"adapter-2", &format!("localhost:{}", 8000 + i)),
                    u32::MAX - i,
                )
            })
            .unwrap();
        assert_eq!(ask(&mut m, &fleet, 2, 1), top);
        // Then adapter 1 takes nine tenths of the traffic: 4 slots, so ceil(3.6) = 4
        // replicas for it and ceil(0.4) = 1 for adapter 2, which keeps its endpoint.
        for t in 3..60 {
            for _ in 0..9 {
                ask(&mut m, &fleet, 1, t);
            }
            ask(&mut m, &fleet, 2, t);
        }
        ask(&mut m, &fleet, 1, 63);
        assert_eq!(m.adapters[&1].replicas.len(), 4);
        assert_eq!(m.adapters[&2].replicas, [top], "sticky, and one replica");
    }

    #[test]
    fn members_where_the_adapter_is_resident_go_first_then_the_least_loaded() {
        let mut m: DynamoLoraHrw = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(3)
            .inflight_requests(0, 5)
            .inflight_requests(1, 1)
            .inflight_requests(2, 3);
        for t in 0..40 {
            ask(&mut m, &fleet, 7, t);
        }
        assert_eq!(
            m.adapters[&7].replicas.len(),
            3,
            "the only adapter: every endpoint"
        );
        let resident_on_0 = RequestBuilder::new(2)
            .adapter(7, "adapter-7")
            .now_ns(41 * S)
            .adapter_state(
                0,
                RlAdapterState {
                    resident: 1,
                    ..Default::default()
                },
            )
            .adapter_state(1, RlAdapterState::default())
            .adapter_state(2, RlAdapterState::default());
        let chosen = m.match_request(&resident_on_0.view(), &fleet.view());
        assert_eq!(
            chosen,
            Ok(Some(EndpointId(0))),
            "resident beats less loaded"
        );
        assert_eq!(ask(&mut m, &fleet, 7, 42), 1, "no state: the least loaded");
        let base = RequestBuilder::new(3).now_ns(43 * S);
        assert_eq!(
            m.match_request(&base.view(), &fleet.view()),
            Ok(Some(EndpointId(1)))
        );
    }

    #[test]
    fn an_endpoint_takes_no_more_adapters_than_its_slots_while_others_have_room() {
        let one = LoraSlots {
            used: 0,
            total: 1,
            active: 0,
            waiting: 0,
        };
        let fleet = EndpointsBuilder::new(3)
            .lora(0, one)
            .lora(1, one)
            .lora(2, one);
        let mut m: DynamoLoraHrw = create_matcher("").unwrap();
        // Three adapters of equal demand, one slot an endpoint: one endpoint each, once
        // the first one's whole-fleet set has shrunk (3 intervals of cooldown).
        for t in 0..30 {
            for adapter in 1..=3 {
                ask(&mut m, &fleet, adapter, t);
            }
        }
        let mut homes: Vec<u32> = (1..=3).map(|a| m.adapters[&a].replicas[0]).collect();
        assert!((1..=3).all(|a| m.adapters[&a].replicas.len() == 1));
        homes.sort_unstable();
        assert_eq!(homes, [0, 1, 2], "one adapter a slot");
        assert!(create_matcher::<DynamoLoraHrw>("interval_s: 0").is_err());
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::DynamoLoraHrw>(
            "dynamo-lora-hrw",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}

//! Test plugins that the built-ins cannot stand in for: two that panic on purpose (so the
//! host's tests can prove a panic is caught at the boundary, reported with its payload, and
//! poisons the instance), one that depends on `on_complete` (so the timed replay's tests
//! can prove it is called), one that checks the ABI 1.2 signals against its own books
//! and fails the run on the first disagreement, one that checks its router replica
//! scrapes the engines on its own schedule, one that never returns from `match`, one that
//! starts a child process, and one whose memory grows on every `match`.

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};

/// Panics in `create`.
pub struct PanicOnCreate;

impl Matcher for PanicOnCreate {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        panic!("fixture: boom in create");
    }
    fn match_request(
        &mut self,
        _: &Request<'_>,
        _: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        Ok(None)
    }
}

/// Panics in `match` on the request with id 2, and answers normally before that.
pub struct PanicOnMatch;

impl Matcher for PanicOnMatch {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(PanicOnMatch)
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        if request.id() == 2 {
            panic!("fixture: boom in match for request {}", request.id());
        }
        Ok(endpoints.available().next().map(|e| e.id()))
    }
}

/// Never returns from `match` for requests whose id is `hang_from` or later (config key,
/// default 1): the host's deadline must end the run (or keep `serve` answering) without it.
pub struct HangOnMatch {
    hang_from: u64,
}

impl Matcher for HangOnMatch {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        Ok(HangOnMatch {
            hang_from: config.u64("hang_from", 1)?,
        })
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        while request.id() >= self.hang_from {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        Ok(endpoints.available().next().map(|e| e.id()))
    }
}

/// Sends each request to the endpoint with the fewest requests outstanding, counting them
/// itself: +1 on `update`, −1 on `on_complete`. Fails if a completion does not match.
#[derive(Default)]
pub struct LeastOutstanding {
    outstanding: std::collections::BTreeMap<EndpointId, u64>,
}

impl Matcher for LeastOutstanding {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(LeastOutstanding::default())
    }
    fn add_endpoints(&mut self, endpoints: &Endpoints<'_>) -> Result<(), String> {
        for endpoint in endpoints.iter() {
            self.outstanding.insert(endpoint.id(), 0);
        }
        Ok(())
    }
    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        for id in ids {
            self.outstanding.remove(id);
        }
        Ok(())
    }
    fn match_request(
        &mut self,
        _: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let best = endpoints
            .available()
            .min_by_key(|e| (self.outstanding.get(&e.id()).copied(), e.id()));
        Ok(best.map(|e| e.id()))
    }
    fn update(&mut self, _request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        *self.outstanding.entry(endpoint).or_default() += 1;
        Ok(())
    }
    fn on_complete(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let count = self.outstanding.entry(endpoint).or_default();
        if *count == 0 {
            return Err(format!(
                "completion of request {} on endpoint {endpoint} with none outstanding",
                request.id()
            ));
        }
        *count -= 1;
        Ok(())
    }
}

/// Checks what an ABI 1.2 host says against what the plugin can work out itself, and
/// fails on the first disagreement: `now_ns` is never before the arrival; each routed
/// request gets exactly one first token, after `update` and before `on_complete`;
/// `inflight_requests` equals its own count of routed, unfinished requests; and, with
/// `unbounded_cache: true` (the time-free replay's default model), `cached_prefix` equals
/// the leading blocks it has itself sent each endpoint; every endpoint's `kv_block_tokens`
/// is the config's `kv_block_tokens` (default 0, the time-free value). Routes round-robin.
#[derive(Default)]
pub struct Contract {
    check_cache: bool,
    block_tokens: u64,
    turn: usize,
    /// Per endpoint id: routed and unfinished requests.
    inflight: std::collections::BTreeMap<EndpointId, u64>,
    /// Per endpoint id: block ids sent there.
    sent: std::collections::BTreeMap<EndpointId, std::collections::BTreeSet<u32>>,
    /// Requests routed whose first token has not come.
    awaiting_first: std::collections::BTreeSet<u64>,
    /// Requests whose first token came and that have not finished.
    first_seen: std::collections::BTreeSet<u64>,
}

impl Matcher for Contract {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let check_cache = config.u64("unbounded_cache", 0)? == 1;
        let block_tokens = config.u64("kv_block_tokens", 0)?;
        Ok(Contract {
            check_cache,
            block_tokens,
            ..Contract::default()
        })
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let id = request.id();
        if request.now_ns() < request.arrival_ns() {
            return Err(format!("request {id}: decided before it arrived"));
        }
        for endpoint in endpoints.iter() {
            let own = self.inflight.get(&endpoint.id()).copied().unwrap_or(0);
            if endpoint.inflight_requests() != Some(own) {
                return Err(format!(
                    "request {id}: endpoint {} in flight {:?}, expected {own}",
                    endpoint.id(),
                    endpoint.inflight_requests()
                ));
            }
            if endpoint.kv_block_tokens() != Some(self.block_tokens) {
                return Err(format!(
                    "request {id}: endpoint {} has KV blocks of {:?} tokens, expected {}",
                    endpoint.id(),
                    endpoint.kv_block_tokens(),
                    self.block_tokens
                ));
            }
            let cached = request.cached_prefix(endpoint.id());
            let Some(cached) = cached.filter(|c| *c <= request.prompt_len()) else {
                return Err(format!("request {id}: cached prefix {cached:?}"));
            };
            if self.check_cache {
                let ids = request.block_ids().unwrap_or(&[]);
                let sent = self.sent.get(&endpoint.id());
                let blocks = ids
                    .iter()
                    .take_while(|b| sent.is_some_and(|s| s.contains(b)))
                    .count() as u64;
                let expected = (blocks * u64::from(request.block_size())).min(request.prompt_len());
                if cached != expected {
                    return Err(format!(
                        "request {id}: endpoint {} holds {cached}, expected {expected}",
                        endpoint.id()
                    ));
                }
            }
        }
        let available: Vec<EndpointId> = endpoints.available().map(|e| e.id()).collect();
        if available.is_empty() {
            return Ok(None);
        }
        self.turn += 1;
        Ok(Some(available[self.turn % available.len()]))
    }
    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        *self.inflight.entry(endpoint).or_default() += 1;
        let sent = self.sent.entry(endpoint).or_default();
        sent.extend(request.block_ids().unwrap_or(&[]).iter().copied());
        self.awaiting_first.insert(request.id());
        Ok(())
    }
    fn on_first_token(&mut self, request: &Request<'_>, _: EndpointId) -> Result<(), String> {
        if !self.awaiting_first.remove(&request.id()) {
            return Err(format!(
                "request {}: first token twice or unrouted",
                request.id()
            ));
        }
        self.first_seen.insert(request.id());
        Ok(())
    }
    fn on_complete(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        if !self.first_seen.remove(&request.id()) {
            return Err(format!(
                "request {}: finished without a first token",
                request.id()
            ));
        }
        *self.inflight.entry(endpoint).or_default() -= 1;
        Ok(())
    }
}

/// Checks that its router replica sees engine statuses refreshed on that replica's own
/// schedule: with the run's seed 0, replica r gets seed r, and of `replicas` replicas
/// scraping every `interval_ms`, replica r scrapes at r · interval / replicas + k ·
/// interval. Between two of its decisions at t1 <= t2 the statuses it sees may change only
/// if one of its scrape times lies in [t1, t2]. Routes round-robin.
pub struct ScrapePhase {
    phase_ns: u64,
    interval_ns: u64,
    turn: u64,
    /// The last decision's time and the statuses it saw.
    last: Option<(u64, Vec<Scraped>)>,
}

/// What a scrape tells of an endpoint: running, waiting, KV blocks used.
type Scraped = (u64, u64, u64);

impl ScrapePhase {
    /// Whether one of this replica's scrape times lies in `[from, to]`.
    fn scraped_between(&self, from: u64, to: u64) -> bool {
        let k = from
            .saturating_sub(self.phase_ns)
            .div_ceil(self.interval_ns);
        self.phase_ns + k * self.interval_ns <= to
    }
}

impl Matcher for ScrapePhase {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let replica = config.seed()?;
        let replicas = config.u64("replicas", 1)?.max(1);
        let interval_ns = config.u64("interval_ms", 100)?.max(1) * 1_000_000;
        Ok(ScrapePhase {
            phase_ns: interval_ns * replica / replicas,
            interval_ns,
            turn: 0,
            last: None,
        })
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let now = request.now_ns();
        let seen: Vec<Scraped> = endpoints
            .iter()
            .map(|e| (e.running(), e.waiting(), e.kv_blocks_used()))
            .collect();
        if let Some((then, before)) = &self.last
            && *before != seen
            && !self.scraped_between(*then, now)
        {
            return Err(format!(
                "statuses changed between {then} ns and {now} ns without a scrape of this replica (phase {} ns)",
                self.phase_ns
            ));
        }
        self.last = Some((now, seen));
        let available: Vec<EndpointId> = endpoints.available().map(|e| e.id()).collect();
        self.turn += 1;
        Ok(available
            .get((self.turn % available.len().max(1) as u64) as usize)
            .copied())
    }
}

/// Starts a child process (`sleep 600`) in `create` and writes its pid to the file that
/// `ROUTERLAB_FIXTURE_PID_FILE` names: a plugin that leaves processes behind. Answers as
/// the first available endpoint.
pub struct SpawnOnCreate;

impl Matcher for SpawnOnCreate {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        let pid_file = std::env::var("ROUTERLAB_FIXTURE_PID_FILE")
            .map_err(|_| "set ROUTERLAB_FIXTURE_PID_FILE".to_owned())?;
        let child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .map_err(|e| format!("sleep: {e}"))?;
        std::fs::write(&pid_file, child.id().to_string())
            .map_err(|e| format!("{pid_file}: {e}"))?;
        Ok(SpawnOnCreate)
    }
    fn match_request(
        &mut self,
        _: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        Ok(endpoints.available().next().map(|e| e.id()))
    }
}

/// Keeps `mb` MiB more (config key, default 256), touched, on every `match`: a plugin
/// whose memory grows without bound. Answers as the first available endpoint.
pub struct GrowOnMatch {
    mb: u64,
    kept: Vec<Vec<u8>>,
}

impl Matcher for GrowOnMatch {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        Ok(GrowOnMatch {
            mb: config.u64("mb", 256)?,
            kept: Vec::new(),
        })
    }
    fn match_request(
        &mut self,
        _: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        self.kept.push(vec![1u8; (self.mb << 20) as usize]);
        Ok(endpoints.available().next().map(|e| e.id()))
    }
}

routerlab_core::export_plugins! {
    matcher PanicOnCreate { name: "panic-on-create", description: "fixture: panics in create" },
    matcher PanicOnMatch { name: "panic-on-match", description: "fixture: panics in match" },
    matcher HangOnMatch { name: "hang-on-match", description: "fixture: never returns from match" },
    matcher Contract {
        name: "contract-1-2",
        description: "fixture: fails when the host's ABI 1.2 signals disagree with its own books",
    },
    matcher LeastOutstanding {
        name: "least-outstanding",
        description: "fixture: fewest outstanding requests, tracked with update and on_complete",
    },
    matcher ScrapePhase {
        name: "scrape-phase",
        description: "fixture: fails when its replica's statuses change between its own scrapes",
    },
    matcher SpawnOnCreate {
        name: "spawn-on-create",
        description: "fixture: starts a child process in create",
    },
    matcher GrowOnMatch {
        name: "grow-on-match",
        description: "fixture: keeps more memory on every match",
    },
}

//! `routerlab serve`, `routerlab engine` and `routerlab drive`: the flags, and a runtime
//! for `routerlab-live` to run on. The HTTP work is the library's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use routerlab_host::SearchPath;
use routerlab_live::LiveError;
use routerlab_live::engine::EngineSettings;
use routerlab_live::plugin_host::{Host, HostCommand};
use routerlab_live::serve::health::HealthRule;
use routerlab_live::serve::{OnPluginError, Plugins, ServeSettings};
use routerlab_route::{PdDecision, Pools};
use routerlab_sim::WhenUnavailable;
use routerlab_sim::scenario::Scenario;

use crate::exit::Failure;
use crate::opts::TextOrValue;
use crate::spec::{engine_config, plugin_config};

/// `routerlab engine`.
#[derive(Args, Debug)]
pub struct EngineArgs {
    /// Address to listen on (port 0: any free port, printed on stderr).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// Engine settings over the `dynamo` preset, YAML (as `replay --engine-config`).
    #[arg(long, value_name = "YAML")]
    pub engine_config: Option<String>,
    /// Model time per wall time: 10 runs the model ten times faster than it says.
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub speedup: f64,
    /// Answer every request at once, without the model (for measuring a router).
    #[arg(long)]
    pub instant: bool,
    /// Model name served (`/v1/models`, metric labels).
    #[arg(long, value_name = "NAME", default_value = "routerlab-sim")]
    pub model: String,
    /// Output tokens of requests without `max_tokens` (`--max-tokens` is the old name).
    #[arg(
        long = "output-tokens",
        alias = "max-tokens",
        value_name = "N",
        default_value_t = 128
    )]
    pub output_tokens: u32,
    /// Its pool in a disaggregated fleet (vLLM's disaggregated-serving protocol): prefill
    /// (answers a request asking for a remote decode with one token and the KV's
    /// whereabouts), decode (takes a request carrying them with its KV present), or
    /// aggregated (ignores them).
    #[arg(long, value_name = "ROLE", default_value = "aggregated")]
    pub role: RoleArg,
    /// Publish the KV cache's stores and evictions as vLLM does: a ZeroMQ PUB socket bound
    /// here (`tcp://127.0.0.1:5557`; port 0: any free port, printed on stderr), vLLM's
    /// `KVEventBatch` MessagePack.
    #[arg(long, value_name = "ZMQ_URL")]
    pub kv_events: Option<String>,
    /// vLLM's replay socket for missed batches (ROUTER), bound here; needs --kv-events.
    #[arg(long, value_name = "ZMQ_URL", requires = "kv_events")]
    pub kv_events_replay: Option<String>,
}

/// `routerlab engine --role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    /// Whole requests.
    Aggregated,
    /// The prefill pool's.
    Prefill,
    /// The decode pool's.
    Decode,
}

/// What `serve` does when a plugin call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PluginErrorArg {
    /// Answer 503 naming the plugin and its message.
    Reject,
    /// Route the request round robin over the healthy endpoints.
    RoundRobin,
}

/// Where `serve` runs its plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IsolationArg {
    /// In the router's process: the fastest; a plugin that crashes ends the router.
    InProcess,
    /// In a child process (`routerlab plugin-host`): a crash or a missed deadline restarts
    /// it, and requests follow --on-plugin-error meanwhile.
    Process,
}

/// `routerlab serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port, printed on stderr). Loopback by
    /// default: the router proxies to engines, so exposing it is a choice to make.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The engines: host:port,... (plain HTTP). Requests go only to these.
    #[arg(
        long,
        value_name = "LIST",
        required_unless_present = "prefill_endpoints"
    )]
    pub endpoints: Option<String>,
    /// A disaggregated fleet's prefill engines (`engine --role prefill`, or vLLM with a KV
    /// connector): host:port,...; give with --decode-endpoints instead of --endpoints.
    /// Each request is prefilled on one and decoded on one, in vLLM's disaggregated-serving
    /// proxy protocol, each pool routed by plugin instances of its own.
    #[arg(
        long,
        value_name = "LIST",
        requires = "decode_endpoints",
        conflicts_with = "endpoints"
    )]
    pub prefill_endpoints: Option<String>,
    /// A disaggregated fleet's decode engines: host:port,...
    #[arg(
        long,
        value_name = "LIST",
        requires = "prefill_endpoints",
        conflicts_with = "endpoints"
    )]
    pub decode_endpoints: Option<String>,
    /// Matcher name or PATH[#NAME], as for replay.
    #[arg(long, value_name = "NAME")]
    pub matcher: Option<String>,
    /// Matcher config, YAML or JSON text.
    #[arg(long, value_name = "YAML")]
    pub matcher_config: Option<String>,
    /// Overload detector, as for replay.
    #[arg(long, value_name = "NAME")]
    pub detector: Option<String>,
    /// Detector config, YAML or JSON text.
    #[arg(long, value_name = "YAML")]
    pub detector_config: Option<String>,
    /// Seed given to plugins as their `seed` unless their config sets one [default: 0].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Block size of the prompt's hash chain, bytes (as replay's --block-size)
    /// [default: 128].
    #[arg(long, value_name = "BYTES")]
    pub block_size: Option<u32>,
    /// A replay experiment file: its `matcher`, `matcher_config`, `detector`,
    /// `detector_config`, `seed` and `block_size` are used (flags override); the rest of it
    /// is about replays and is ignored here.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Scrape the engines' metrics (and check their health) every MS milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub metrics_interval_ms: u64,
    /// Milliseconds one scrape may take (all engines are scraped at once).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub scrape_timeout_ms: u64,
    /// Failed scrapes in a row that take an engine out of the fleet.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub unhealthy_after: u32,
    /// Good scrapes in a row that bring it back.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub healthy_after: u32,
    /// Other endpoints to try when one fails before answering (refused, reset, closed).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub retries: u32,
    /// Seconds an engine may take to start answering.
    #[arg(long, value_name = "S", default_value_t = 600.0)]
    pub upstream_timeout_s: f64,
    /// When a plugin call fails: answer 503, or route round robin.
    #[arg(long, value_name = "ACTION", default_value = "reject")]
    pub on_plugin_error: PluginErrorArg,
    /// Where the plugins run: in-process, or process (a child process that a crashing or
    /// hung plugin only restarts).
    #[arg(long, value_name = "WHERE", default_value = "in-process")]
    pub plugin_isolation: IsolationArg,
    /// With --plugin-isolation process: milliseconds one plugin call may take before the
    /// plugin host is killed and restarted [default: 1000].
    #[arg(long, value_name = "MS")]
    pub plugin_timeout_ms: Option<u64>,
    /// Follow the engines' KV events (vLLM's, or `engine --kv-events`): ENDPOINT=ZMQ_URL,...
    /// for endpoints of the fleet; precise policies (`cached_prefix`) then see what each
    /// holds. Not with a disaggregated fleet.
    #[arg(long, value_name = "LIST", conflicts_with = "prefill_endpoints")]
    pub kv_events: Option<String>,
    /// Their replay sockets, for batches missed: ENDPOINT=ZMQ_URL,...
    #[arg(long, value_name = "LIST", requires = "kv_events")]
    pub kv_events_replay: Option<String>,
    /// The engines are vLLM: tokenize prompts with their Hugging Face `tokenizer.json` and
    /// look up vLLM's block keys of the tokens (needs --python-hash-seed).
    #[arg(
        long,
        value_name = "FILE",
        requires = "kv_events",
        requires = "python_hash_seed"
    )]
    pub tokenizer: Option<PathBuf>,
    /// The engines' PYTHONHASHSEED, which roots vLLM's block keys (with --tokenizer).
    #[arg(long, value_name = "SEED", requires = "tokenizer")]
    pub python_hash_seed: Option<String>,
    /// The engines' --prefix-caching-hash-algo: sha256, sha256_cbor, xxhash or xxhash_cbor
    /// (with --tokenizer).
    #[arg(
        long,
        value_name = "ALGO",
        default_value = "sha256",
        requires = "tokenizer"
    )]
    pub prefix_caching_hash_algo: String,
    /// Engine settings over the `dynamo` preset, YAML (as `engine --engine-config`; the
    /// config `calibrate` fits, for one): the engine model whose forecasts, over the
    /// router's mirror of each engine, answer a simulating matcher's `predict` (in process
    /// only; with --plugin-isolation process the plugins get no forecasts).
    #[arg(long, value_name = "YAML")]
    pub engine_config: Option<String>,
    /// The model the engines serve as their base, repeatable: a request whose `model` is
    /// another names a LoRA adapter, which LoRA-aware plugins then see, with what each
    /// engine holds of it (from vLLM's `vllm:lora_requests_info`). Without it, requests
    /// name no adapter.
    #[arg(long, value_name = "NAME")]
    pub base_model: Vec<String>,
}

/// `routerlab plugin-host` (hidden): the plugins of a `serve --plugin-isolation process`,
/// started by it, never by hand.
#[derive(Args, Debug)]
pub struct PluginHostArgs {
    /// The socket `serve` listens on for this host.
    #[arg(long, value_name = "PATH")]
    pub connect: PathBuf,
    /// As for serve.
    #[arg(long, value_name = "NAME")]
    pub matcher: String,
    /// As for serve.
    #[arg(long, value_name = "YAML")]
    pub matcher_config: Option<String>,
    /// As for serve.
    #[arg(long, value_name = "NAME")]
    pub detector: Option<String>,
    /// As for serve.
    #[arg(long, value_name = "YAML")]
    pub detector_config: Option<String>,
    /// As for serve.
    #[arg(long, value_name = "N")]
    pub seed: u64,
    /// As for serve (already checked by it).
    #[arg(long, value_name = "LIST")]
    pub endpoints: String,
}

/// The plugin-call deadline of `serve --plugin-isolation process` unless given.
const DEFAULT_PLUGIN_TIMEOUT_MS: u64 = 1000;

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| LiveError::Run(format!("cannot start the async runtime: {e}")).into())
}

/// Binds first (so a taken port is an error before anything else), says where, then runs.
fn bound(listen: SocketAddr, what: &str) -> Result<(std::net::TcpListener, SocketAddr), Failure> {
    let listener = std::net::TcpListener::bind(listen)
        .map_err(|e| Failure::input(format!("--listen {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::input(format!("--listen {listen}: {e}")))?;
    eprintln!("routerlab {what}: listening on http://{addr}");
    Ok((listener, addr))
}

/// `routerlab engine`.
pub fn engine(args: EngineArgs) -> Result<(), Failure> {
    let config = engine_config(args.engine_config.as_deref())?;
    routerlab_live::engine::check_config(&config).map_err(Failure::from)?;
    if !(args.speedup.is_finite() && args.speedup > 0.0) {
        return Err(Failure::input(format!(
            "--speedup must be a positive number, not {}",
            args.speedup
        )));
    }
    let (listener, _) = bound(args.listen, "engine")?;
    let kv_events = match args.kv_events {
        Some(endpoint) => {
            let settings = routerlab_live::kv_events::KvEventsSettings {
                endpoint,
                replay: args.kv_events_replay,
            };
            let publisher =
                routerlab_live::kv_events::Publisher::bind(&settings, config.engine_block_size)
                    .map_err(Failure::from)?;
            eprintln!(
                "routerlab engine: KV events on {}{}",
                publisher.endpoint(),
                publisher
                    .replay_endpoint()
                    .map(|r| format!(", replay on {r}"))
                    .unwrap_or_default()
            );
            Some(std::sync::Arc::new(publisher))
        }
        None => None,
    };
    let settings = EngineSettings {
        role: match args.role {
            RoleArg::Aggregated => routerlab_live::engine::Role::Aggregated,
            RoleArg::Prefill => routerlab_live::engine::Role::Prefill,
            RoleArg::Decode => routerlab_live::engine::Role::Decode,
        },
        config,
        speedup: args.speedup,
        instant: args.instant,
        model: args.model,
        default_max_tokens: args.output_tokens.max(1),
        kv_events,
    };
    runtime()?
        .block_on(routerlab_live::engine::run_on(listener, settings))
        .map_err(Failure::from)
}

/// `--kv-events` and `--kv-events-replay`: ENDPOINT=URL pairs, each endpoint one of the
/// fleet's, at most once, every replay one of a followed endpoint.
fn kv_subscriptions(
    events: Option<&str>,
    replays: Option<&str>,
    fleet: &[String],
) -> Result<Vec<routerlab_live::serve::kv_index::KvSubscription>, Failure> {
    let pairs = |flag: &str, text: &str| -> Result<Vec<(String, String)>, Failure> {
        let mut out: Vec<(String, String)> = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((name, url)) = item.split_once('=') else {
                return Err(Failure::input(format!(
                    "{flag}: `{item}` is not ENDPOINT=ZMQ_URL"
                )));
            };
            let name = endpoint(name.trim())
                .map_err(|why| Failure::input(format!("{flag}: `{item}`: {why}")))?;
            if !fleet.contains(&name) {
                return Err(Failure::input(format!(
                    "{flag}: `{name}` is not one of the endpoints ({})",
                    fleet.join(",")
                )));
            }
            if out.iter().any(|(n, _)| *n == name) {
                return Err(Failure::input(format!("{flag}: `{name}` is given twice")));
            }
            out.push((name, url.trim().to_owned()));
        }
        Ok(out)
    };
    let Some(events) = events else {
        return Ok(Vec::new());
    };
    let events = pairs("--kv-events", events)?;
    let replays = pairs("--kv-events-replay", replays.unwrap_or_default())?;
    if let Some((name, _)) = replays
        .iter()
        .find(|(n, _)| !events.iter().any(|(e, _)| e == n))
    {
        return Err(Failure::input(format!(
            "--kv-events-replay: `{name}` has no --kv-events"
        )));
    }
    Ok(events
        .into_iter()
        .map(|(endpoint, url)| {
            let replay = replays
                .iter()
                .find(|(n, _)| *n == endpoint)
                .map(|(_, r)| r.clone());
            routerlab_live::serve::kv_index::KvSubscription {
                endpoint,
                url,
                replay,
            }
        })
        .collect())
}

/// The engines of `--endpoints`: `host:port` each, distinct.
fn endpoints(text: &str) -> Result<Vec<String>, Failure> {
    let mut list: Vec<String> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let endpoint = endpoint(item)
            .map_err(|why| Failure::input(format!("--endpoints: `{item}`: {why}")))?;
        if list.contains(&endpoint) {
            return Err(Failure::input(format!(
                "--endpoints: `{item}` is given twice"
            )));
        }
        list.push(endpoint);
    }
    if list.is_empty() {
        return Err(Failure::input("--endpoints: give at least one host:port"));
    }
    Ok(list)
}

/// One engine's `host:port` (an optional `http://` and trailing `/` dropped), or why it
/// is none the router could ever reach: another scheme, a path, query, fragment or user,
/// spaces, a host that is no name or address, port 0.
fn endpoint(item: &str) -> Result<String, String> {
    if let Some((scheme, _)) = item.split_once("://")
        && scheme != "http"
    {
        return Err(format!(
            "only plain http:// engines can be served, not {scheme}://"
        ));
    }
    let rest = item.strip_prefix("http://").unwrap_or(item);
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#', '@']) || rest.chars().any(char::is_whitespace) {
        return Err("is not host:port (no path, query, fragment, user or spaces)".into());
    }
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err("is not host:port".into());
    };
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        }
    };
    if !host_ok {
        return Err(format!("`{host}` is not a host name or address"));
    }
    match port.parse::<u16>() {
        Ok(0) => Err("port 0 is no engine's port".into()),
        Ok(_) => Ok(rest.to_owned()),
        Err(_) => Err(format!("`{port}` is not a port (1 to 65535)")),
    }
}

/// `routerlab serve`.
pub fn serve(args: ServeArgs) -> Result<(), Failure> {
    let (endpoints, prefill) = match (
        &args.endpoints,
        &args.prefill_endpoints,
        &args.decode_endpoints,
    ) {
        (Some(list), None, None) => (endpoints(list)?, 0),
        (None, Some(prefill), Some(decode)) => {
            let (prefill, decode) = (
                endpoints(prefill).map_err(|e| {
                    Failure::input(e.to_string().replace("--endpoints", "--prefill-endpoints"))
                })?,
                endpoints(decode).map_err(|e| {
                    Failure::input(e.to_string().replace("--endpoints", "--decode-endpoints"))
                })?,
            );
            if let Some(both) = prefill.iter().find(|p| decode.contains(p)) {
                return Err(Failure::input(format!(
                    "`{both}` is in both --prefill-endpoints and --decode-endpoints"
                )));
            }
            let n = prefill.len();
            (prefill.into_iter().chain(decode).collect(), n)
        }
        _ => {
            return Err(Failure::input(
                "give --endpoints, or --prefill-endpoints with --decode-endpoints",
            ));
        }
    };
    let file = match &args.config {
        Some(path) => crate::cmd::run::load_experiment(path)?,
        None => crate::opts::ReplayOpts::default(),
    };
    let text = |t: Option<String>| t.map(TextOrValue::Text);
    let matcher_name = args.matcher.clone().or(file.matcher).ok_or_else(|| {
        Failure::input("no matcher: pass --matcher NAME (or `matcher` in --config)")
    })?;
    let seed = args.seed.or(file.seed).unwrap_or(0);
    let block_size = args
        .block_size
        .or(file.block_size)
        .unwrap_or(routerlab_trace::reader::DEFAULT_BLOCK_SIZE);
    if block_size == 0 {
        return Err(Failure::input("--block-size must be at least 1"));
    }
    let matcher_config =
        plugin_config(text(args.matcher_config).or(file.matcher_config), "matcher")?;
    let detector_config = plugin_config(
        text(args.detector_config).or(file.detector_config),
        "detector",
    )?;
    let detector_name = args.detector.clone().or(file.detector);
    if args.metrics_interval_ms == 0 {
        return Err(Failure::input(
            "--metrics-interval-ms must be at least 1 (the router's own in-flight counts are always current)",
        ));
    }
    if args.scrape_timeout_ms == 0 || args.unhealthy_after == 0 || args.healthy_after == 0 {
        return Err(Failure::input(
            "--scrape-timeout-ms, --unhealthy-after and --healthy-after must be at least 1",
        ));
    }
    if !(args.upstream_timeout_s.is_finite() && args.upstream_timeout_s > 0.0) {
        return Err(Failure::input(
            "--upstream-timeout-s must be a positive number",
        ));
    }
    if prefill > 0 && args.plugin_isolation == IsolationArg::Process {
        return Err(Failure::input(
            "--plugin-isolation process does not serve a disaggregated fleet yet: use in-process with --prefill-endpoints",
        ));
    }
    let mut decode_plugins = None;
    let plugins = match args.plugin_isolation {
        IsolationArg::InProcess => {
            if args.plugin_timeout_ms.is_some() {
                return Err(Failure::input(
                    "--plugin-timeout-ms needs --plugin-isolation process (a call in the router's own process cannot be stopped)",
                ));
            }
            let mut scenario = serve_scenario(
                matcher_name,
                matcher_config,
                detector_name,
                detector_config,
                seed,
                endpoints.clone(),
            );
            if prefill > 0 {
                scenario.pools = Some(Pools {
                    prefill,
                    decision: PdDecision::Always,
                });
                let (prefill_router, decode_router) =
                    scenario.pool_routers(&SearchPath::from_env())?;
                decode_plugins = Some(Plugins::InProcess(Box::new(decode_router)));
                Plugins::InProcess(Box::new(prefill_router))
            } else {
                Plugins::InProcess(Box::new(scenario.router(&SearchPath::from_env())?))
            }
        }
        IsolationArg::Process => {
            let ms = args.plugin_timeout_ms.unwrap_or(DEFAULT_PLUGIN_TIMEOUT_MS);
            if ms == 0 {
                return Err(Failure::input("--plugin-timeout-ms must be at least 1"));
            }
            let program = std::env::current_exe().map_err(|e| {
                Failure::input(format!(
                    "cannot find this program to start the plugin host: {e}"
                ))
            })?;
            let yaml =
                |config: &serde_yaml::Mapping| serde_yaml::to_string(config).unwrap_or_default();
            let mut host_args: Vec<std::ffi::OsString> = vec![
                "plugin-host".into(),
                "--matcher".into(),
                matcher_name.into(),
                "--matcher-config".into(),
                yaml(&matcher_config).into(),
                "--seed".into(),
                seed.to_string().into(),
                "--endpoints".into(),
                endpoints.join(",").into(),
            ];
            if let Some(detector) = detector_name {
                host_args.extend([
                    "--detector".into(),
                    detector.into(),
                    "--detector-config".into(),
                    yaml(&detector_config).into(),
                ]);
            }
            let command = HostCommand {
                program,
                args: host_args,
            };
            Plugins::Isolated(Box::new(Host::start(command, Duration::from_millis(ms))?))
        }
    };
    let kv_events = kv_subscriptions(
        args.kv_events.as_deref(),
        args.kv_events_replay.as_deref(),
        &endpoints,
    )?;
    let kv_keys = match (&args.tokenizer, &args.python_hash_seed) {
        (Some(file), Some(seed)) => {
            let algo = args
                .prefix_caching_hash_algo
                .parse()
                .map_err(|e| Failure::input(format!("--prefix-caching-hash-algo: {e}")))?;
            Some(Arc::new(routerlab_live::vllm_keys::VllmKeys::load(
                file, algo, seed,
            )?))
        }
        _ => None,
    };
    let engine_model = engine_config(args.engine_config.as_deref())?;
    let (listener, _) = bound(args.listen, "serve")?;
    let settings = ServeSettings {
        endpoints,
        block_size,
        metrics_interval: Duration::from_millis(args.metrics_interval_ms),
        scrape_timeout: Duration::from_millis(args.scrape_timeout_ms),
        health: HealthRule {
            fails: args.unhealthy_after,
            passes: args.healthy_after,
        },
        retries: args.retries,
        upstream_timeout: Duration::from_secs_f64(args.upstream_timeout_s),
        on_plugin_error: match args.on_plugin_error {
            PluginErrorArg::Reject => OnPluginError::Reject,
            PluginErrorArg::RoundRobin => OnPluginError::RoundRobin,
        },
        prefill_endpoints: prefill,
        kv_events,
        kv_keys,
        engine_model,
        base_models: args.base_model,
    };
    runtime()?
        .block_on(routerlab_live::serve::run_on(
            listener,
            settings,
            plugins,
            decode_plugins,
        ))
        .map_err(Failure::from)
}

/// What `serve` routes with: its plugins over its endpoints, a request nothing can take
/// refused.
fn serve_scenario(
    matcher: String,
    matcher_config: serde_yaml::Mapping,
    detector: Option<String>,
    detector_config: serde_yaml::Mapping,
    seed: u64,
    endpoints: Vec<String>,
) -> Scenario {
    Scenario {
        matcher,
        matcher_config,
        detector,
        detector_config,
        seed,
        endpoints,
        when_unavailable: WhenUnavailable::Reject,
        ..Scenario::default()
    }
}

/// `routerlab plugin-host`: loads the plugins as `serve` would and answers its calls.
pub fn plugin_host(args: PluginHostArgs) -> Result<(), Failure> {
    routerlab_os::process::die_with_parent();
    let text = |t: Option<String>| t.map(TextOrValue::Text);
    let scenario = serve_scenario(
        args.matcher,
        plugin_config(text(args.matcher_config), "matcher")?,
        args.detector,
        plugin_config(text(args.detector_config), "detector")?,
        args.seed,
        endpoints(&args.endpoints)?,
    );
    let router = scenario.router(&SearchPath::from_env())?;
    routerlab_live::plugin_host::run(router, &args.connect).map_err(Failure::from)
}

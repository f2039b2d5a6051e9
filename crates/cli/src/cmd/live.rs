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
use routerlab_live::serve::addresses::{self, Listed};
use routerlab_live::serve::health::HealthRule;
use routerlab_live::serve::kv_index::KvSubscription;
use routerlab_live::serve::{OnPluginError, Plugins, ServeSettings};

use routerlab_experiment::Serving;
use serde::Serialize;
use serde_yaml::{Mapping, Value};

use crate::exit::Failure;
use crate::opts::{ModelArgs, PLUGINS, PluginArgs, PolicyArgs, layer_of};

/// `routerlab engine`.
#[derive(Args, Debug)]
pub struct EngineArgs {
    /// Address to listen on (port 0: any free port, printed on stderr).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8000",
        help_heading = "Serving"
    )]
    pub listen: SocketAddr,
    /// Engine settings over the `dynamo` preset, YAML (as `replay --engine-config`).
    #[arg(long, value_name = "YAML", help_heading = "Engine model")]
    pub engine_config: Option<String>,
    /// The model and GPU the engine models (as `replay`'s).
    #[command(flatten)]
    pub engine_model: ModelArgs,
    /// Model time per wall time: 10 runs the model ten times faster than it says
    /// (`--speedup` is the old name; replay's `--speedup` compresses a trace's times).
    #[arg(
        long,
        alias = "speedup",
        value_name = "F",
        default_value_t = 1.0,
        help_heading = "Engine model"
    )]
    pub model_speedup: f64,
    /// Answer every request at once, without the model (for measuring a router).
    #[arg(long, help_heading = "Engine model")]
    pub instant: bool,
    /// Model name served (`/v1/models`, metric labels).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "routerlab-sim",
        help_heading = "Serving"
    )]
    pub model: String,
    /// Output tokens of requests without `max_tokens` (`--max-tokens` is the old name).
    #[arg(
        long = "output-tokens",
        alias = "max-tokens",
        value_name = "N",
        default_value_t = 128,
        help_heading = "Serving"
    )]
    pub output_tokens: u64,
    /// Its pool in a disaggregated fleet (vLLM's disaggregated-serving protocol): prefill
    /// (answers a request asking for a remote decode with one token and the KV's
    /// whereabouts), decode (takes a request carrying them with its KV present), or
    /// aggregated (ignores them).
    #[arg(
        long,
        value_name = "ROLE",
        default_value = "aggregated",
        help_heading = "Serving"
    )]
    pub role: RoleArg,
    /// Publish the KV cache's stores and evictions as vLLM does: a ZeroMQ PUB socket bound
    /// here (`tcp://127.0.0.1:5557`; port 0: any free port, printed on stderr), vLLM's
    /// `KVEventBatch` MessagePack (`--kv-events` is the old name; serve's `--kv-events`
    /// follows engines).
    #[arg(
        long,
        alias = "kv-events",
        value_name = "ZMQ_URL",
        help_heading = "KV events"
    )]
    pub publish_kv_events: Option<String>,
    /// vLLM's replay socket for missed batches (ROUTER), bound here; needs
    /// --publish-kv-events (`--kv-events-replay` is the old name).
    #[arg(
        long,
        alias = "kv-events-replay",
        value_name = "ZMQ_URL",
        requires = "publish_kv_events",
        help_heading = "KV events"
    )]
    pub publish_kv_events_replay: Option<String>,
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

/// `serve`'s help heading of the engines and the model of them.
const ENGINES: &str = "Engines";
/// `serve`'s help heading of scrapes, health and retries.
const HEALTH: &str = "Health and retries";
/// `serve`'s help heading of following the engines' KV events.
const KV: &str = "KV events";
/// Help heading of the decision log's flags.
const LOG: &str = "Decision log";
/// Help heading of sharing state with other replicas.
const SYNC: &str = "Replica sync";
/// `routerlab serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port, printed on stderr). Loopback by
    /// default: the router proxies to engines, so exposing it is a choice to make.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// A replay experiment file: serve honours its plugins, seed, block size, endpoints,
    /// plugin deadline, metrics interval and engine keys (flags override), names its
    /// traffic keys (trace, timing, rate, SLO, ...) as not used live, and refuses any other
    /// key by name.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The plugins, as for replay.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// How they are called, as for replay.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// The engines.
    #[command(flatten)]
    pub fleet: ServeFleetArgs,
    /// The model and GPU of the engine model a simulating policy forecasts with.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Milliseconds one scrape may take (all engines are scraped at once).
    #[arg(long, help_heading = HEALTH, value_name = "MS", default_value_t = 1000)]
    pub scrape_timeout_ms: u64,
    /// Failed scrapes in a row that take an engine out of the fleet.
    #[arg(long, help_heading = HEALTH, value_name = "N", default_value_t = 3)]
    pub unhealthy_after: u32,
    /// Good scrapes in a row that bring it back.
    #[arg(long, help_heading = HEALTH, value_name = "N", default_value_t = 2)]
    pub healthy_after: u32,
    /// Other endpoints to try when one fails before answering (refused, reset, closed).
    #[arg(long, help_heading = HEALTH, value_name = "N", default_value_t = 2)]
    pub retries: u32,
    /// Seconds an engine may take to start answering.
    #[arg(long, help_heading = HEALTH, value_name = "S", default_value_t = 600.0)]
    pub upstream_timeout_s: f64,
    /// When a plugin call fails: answer 503, or route round robin.
    #[arg(long, help_heading = PLUGINS, value_name = "ACTION", default_value = "reject")]
    pub on_plugin_error: PluginErrorArg,
    /// Where the plugins run: in-process, or process (a child process that a crashing or
    /// hung plugin only restarts).
    #[arg(long, help_heading = PLUGINS, value_name = "WHERE", default_value = "in-process")]
    pub plugin_isolation: IsolationArg,
    /// With --plugin-isolation process: the most memory (heap and anonymous maps, MiB) the
    /// plugin host may use; past it the host ends and is restarted, `serve` goes on. 0: no
    /// bound.
    #[arg(long, help_heading = PLUGINS, value_name = "MIB", default_value_t = 4096)]
    pub plugin_host_memory_mb: u64,
    /// Follow the engines' KV events (vLLM's, or `engine --kv-events`): ENDPOINT=ZMQ_URL,...
    /// for endpoints of the fleet; precise policies (`cached_prefix`) then see what each
    /// holds. Not with a disaggregated fleet.
    #[arg(long, help_heading = KV, value_name = "LIST", conflicts_with = "prefill_endpoints")]
    pub kv_events: Option<String>,
    /// Their replay sockets, for batches missed: ENDPOINT=ZMQ_URL,...
    #[arg(long, help_heading = KV, value_name = "LIST", requires = "kv_events")]
    pub kv_events_replay: Option<String>,
    /// The engines are vLLM: tokenize prompts with their Hugging Face `tokenizer.json` and
    /// look up vLLM's block keys of the tokens (needs --python-hash-seed).
    #[arg(
        long,
        help_heading = KV,
        value_name = "FILE",
        requires = "kv_events",
        requires = "python_hash_seed"
    )]
    pub tokenizer: Option<PathBuf>,
    /// The engines' PYTHONHASHSEED, which roots vLLM's block keys (with --tokenizer).
    #[arg(long, help_heading = KV, value_name = "SEED", requires = "tokenizer")]
    pub python_hash_seed: Option<String>,
    /// The engines' --prefix-caching-hash-algo: sha256, sha256_cbor, xxhash or xxhash_cbor
    /// (with --tokenizer).
    #[arg(
        long,
        help_heading = KV,
        value_name = "ALGO",
        default_value = "sha256",
        requires = "tokenizer"
    )]
    pub prefix_caching_hash_algo: String,
    /// The model the engines serve as their base, repeatable: a request whose `model` is
    /// another names a LoRA adapter, which LoRA-aware plugins then see, with what each
    /// engine holds of it (from vLLM's `vllm:lora_requests_info`). Without it, requests
    /// name no adapter.
    #[arg(long, help_heading = ENGINES, value_name = "NAME")]
    pub base_model: Vec<String>,
    /// Write a JSON line per routed request to PATH: its arrival, its prompt's block hashes
    /// (never the text), every endpoint's load as the router saw it, the endpoint chosen
    /// (and the chance it had, for `random`), and its TTFT, TPOT and E2E. PATH must not
    /// exist. `replay --from-log PATH` judges another policy on it.
    #[arg(long, help_heading = LOG, value_name = "PATH")]
    pub decision_log: Option<std::path::PathBuf>,
    /// With --decision-log: the size at which the log moves to PATH.1 and a new one starts.
    #[arg(long, help_heading = LOG, value_name = "MIB", default_value_t = 256, requires = "decision_log")]
    pub decision_log_max_mib: u64,
    /// With --decision-log: older files kept (PATH.1 … PATH.K; 0 keeps none).
    #[arg(long, help_heading = LOG, value_name = "N", default_value_t = 3, requires = "decision_log")]
    pub decision_log_keep: u32,
    /// With --decision-log: each line carries the prompt's text too (by default only its
    /// block hashes: the log may then hold what users sent).
    #[arg(long, help_heading = LOG, requires = "decision_log")]
    pub decision_log_prompts: bool,
    /// The other router replicas, host:port,... (`serve`s with --replica-sync): this one
    /// posts its changes to them; one that posts here joins them.
    #[arg(long, help_heading = SYNC, value_name = "LIST", value_delimiter = ',')]
    pub peers: Vec<String>,
}

/// The fleet `serve` routes to, and how it sees it: the same keys as a replay's.
#[derive(Args, Debug, Default, Clone, Serialize)]
#[command(next_help_heading = ENGINES)]
pub struct ServeFleetArgs {
    /// The engines: host:port,... (plain HTTP). Requests go only to these; with
    /// --prefill-endpoints N, the first N prefill.
    #[arg(long, value_name = "N|NAMES")]
    pub endpoints: Option<String>,
    /// A disaggregated fleet's prefill engines (`engine --role prefill`, or vLLM with a KV
    /// connector): host:port,... with --decode-endpoints, or N, the first N of
    /// --endpoints. Each request is prefilled on one and decoded on one, in vLLM's
    /// disaggregated-serving proxy protocol, each pool routed by plugin instances of its own.
    #[arg(long, value_name = "N|NAMES")]
    pub prefill_endpoints: Option<String>,
    /// A disaggregated fleet's decode engines: host:port,...
    #[arg(long, value_name = "N|NAMES")]
    pub decode_endpoints: Option<String>,
    /// Block size of the prompt's hash chain, bytes (as replay's) [default: 128].
    #[arg(long, value_name = "BYTES")]
    pub block_size: Option<u32>,
    /// Scrape the engines' metrics (and check their health) every MS milliseconds: the
    /// statuses plugins see [default: 500].
    #[arg(long, value_name = "MS")]
    pub metrics_interval_ms: Option<f64>,
    /// With --scaler: seconds between its ticks, from the first request [default: 15].
    #[arg(long, value_name = "S")]
    pub scale_interval_s: Option<f64>,
    /// With --scaler: the fewest endpoints it may ask for [default: 1].
    #[arg(long, value_name = "N")]
    pub min_endpoints: Option<u64>,
    /// With --scaler: the GPU ceiling; endpoints take --tensor-parallel-size GPUs each.
    #[arg(long, value_name = "N")]
    pub max_gpus: Option<u64>,
    /// How this replica shares its state with --peers: `broadcast` each change, `shared`
    /// (each change reaches the peers before the request goes on), `delta` batches or
    /// `periodic` snapshots every --sync-interval-ms, or a router's preset (`llm-d`,
    /// `dynamo`) [default: none].
    #[arg(long, value_name = "STRATEGY", help_heading = SYNC)]
    pub replica_sync: Option<routerlab_experiment::Sync>,
    /// What the sync carries: in-flight `loads`, or `decisions` too (the matcher learns
    /// its peers' picks) [default: decisions; loads for llm-d].
    #[arg(long, value_name = "WHAT", help_heading = SYNC)]
    pub sync_scope: Option<routerlab_experiment::SyncWhat>,
    /// Milliseconds between sends (delta, periodic) [default: 200].
    #[arg(long, value_name = "MS", help_heading = SYNC)]
    pub sync_interval_ms: Option<f64>,
    /// Milliseconds a peer's periodic counts last unless replaced; 0 = until replaced
    /// [default: 0; 2000 for llm-d].
    #[arg(long, value_name = "MS", help_heading = SYNC)]
    pub sync_ttl_ms: Option<f64>,
    /// Engine settings over the preset, YAML (as replay's; the config `calibrate` fits,
    /// for one): the engine model whose forecasts, over the router's mirror of each
    /// engine, answer a simulating matcher's `predict` (in process only).
    #[arg(long, value_name = "YAML")]
    #[serde(skip)]
    pub engine_config: Option<String>,
}

/// `routerlab plugin-host` (hidden): the plugins of a `serve --plugin-isolation process`,
/// started by it, never by hand.
#[derive(Args, Debug)]
pub struct PluginHostArgs {
    /// The socket `serve` listens on for this host.
    #[arg(long, value_name = "PATH")]
    pub connect: PathBuf,
    /// What serve resolved, as one YAML document (its plugins, seed and endpoints).
    #[arg(long, value_name = "YAML")]
    pub serving: String,
    /// The most memory this host may use, MiB (0: no bound).
    #[arg(long, value_name = "MIB", default_value_t = 0)]
    pub memory_mb: u64,
}

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

/// Refuses `flag` before anything starts in a build without the `kv-events` feature.
fn without_kv_events(flag: &'static str) -> Result<(), Failure> {
    if cfg!(feature = "kv-events") {
        Ok(())
    } else {
        Err(LiveError::WithoutKvEvents(flag).into())
    }
}

/// `routerlab engine`.
pub fn engine(args: EngineArgs) -> Result<(), Failure> {
    let mut layer = engine_layer(args.engine_config.as_deref())?;
    layer.extend(layer_of(&args.engine_model));
    let experiment = crate::opts::experiment(None, layer)?;
    if let Some(kv) = experiment.kv_explained()? {
        eprintln!("{kv}");
    }
    let config = experiment.engine_model()?;
    routerlab_live::engine::check_config(&config).map_err(Failure::from)?;
    if !(args.model_speedup.is_finite() && args.model_speedup > 0.0) {
        return Err(Failure::input(format!(
            "--model-speedup must be a positive number, not {}",
            args.model_speedup
        )));
    }
    if args.publish_kv_events.is_some() {
        without_kv_events("--publish-kv-events")?;
    }
    let (listener, _) = bound(args.listen, "engine")?;
    let kv_events = match args.publish_kv_events {
        Some(endpoint) => {
            let settings = routerlab_live::kv_events::KvEventsSettings {
                endpoint,
                replay: args.publish_kv_events_replay,
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
        speedup: args.model_speedup,
        instant: args.instant,
        model: args.model,
        default_max_tokens: u32::try_from(args.output_tokens.max(1)).unwrap_or(u32::MAX),
        kv_events,
    };
    runtime()?
        .block_on(routerlab_live::engine::run_on(listener, settings))
        .map_err(Failure::from)
}

/// `--kv-events` and `--kv-events-replay`, each failure named by its flag.
fn kv_subscriptions(
    events: Option<&str>,
    replays: Option<&str>,
    fleet: &[String],
) -> Result<Vec<KvSubscription>, Failure> {
    let Some(events) = events else {
        return Ok(Vec::new());
    };
    addresses::subscriptions(events, replays.unwrap_or_default(), fleet).map_err(|e| {
        let flag = match e.list {
            Listed::Events => "--kv-events",
            Listed::Replays => "--kv-events-replay",
        };
        Failure::input(format!("{flag}: {}", e.message))
    })
}

/// `--engine-config`'s text as a layer: its keys under `engine`.
fn engine_layer(text: Option<&str>) -> Result<Mapping, Failure> {
    let mut layer = Mapping::new();
    if let Some(text) = text {
        layer.insert(
            "engine".into(),
            Value::Mapping(crate::opts::engine_config(text)?),
        );
    }
    Ok(layer)
}

/// `serve`'s flags as a layer over its experiment file, resolved.
fn serving(args: &ServeArgs) -> Result<Serving, Failure> {
    let mut layer = args.policy.layer()?;
    layer.extend(layer_of(&args.plugins));
    layer.extend(layer_of(&args.fleet));
    layer.extend(engine_layer(args.fleet.engine_config.as_deref())?);
    layer.extend(layer_of(&args.model));
    let experiment = crate::opts::experiment(args.config.as_deref(), layer)?;
    let mut serving = experiment.serving()?;
    // Addresses, each named by the flag that gave it.
    let mut seen: Vec<String> = Vec::with_capacity(serving.endpoints.len());
    for (i, name) in serving.endpoints.iter().enumerate() {
        let flag = match serving.prefill {
            0 => "--endpoints",
            p if i < p && args.fleet.endpoints.is_none() => "--prefill-endpoints",
            p if i >= p && args.fleet.endpoints.is_none() => "--decode-endpoints",
            _ => "--endpoints",
        };
        let address = addresses::endpoint(name)
            .map_err(|why| Failure::input(format!("{flag}: `{name}`: {why}")))?;
        if seen.contains(&address) {
            return Err(Failure::input(format!("{flag}: `{name}` is given twice")));
        }
        seen.push(address);
    }
    serving.endpoints = seen;
    // Said once the settings are known good, so a refusal stays one line.
    let traffic = experiment.traffic_keys();
    if !traffic.is_empty() {
        eprintln!(
            "note: the experiment file's traffic settings are the clients' live, not used: {}",
            traffic.join(", ")
        );
    }
    Ok(serving)
}

/// `routerlab serve`.
pub fn serve(args: ServeArgs) -> Result<(), Failure> {
    if args.kv_events.is_some() {
        without_kv_events("--kv-events")?;
    }
    let serving = serving(&args)?;
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
    if serving.prefill > 0 && args.plugin_isolation == IsolationArg::Process {
        return Err(Failure::input(
            "--plugin-isolation process does not serve a disaggregated fleet yet: use in-process with --prefill-endpoints",
        ));
    }
    let mut decode_plugins = None;
    let plugins = match args.plugin_isolation {
        IsolationArg::InProcess => {
            let scenario = serving.scenario();
            let deadline = serving.plugin_timeout;
            if serving.prefill > 0 {
                let (prefill_router, decode_router) =
                    scenario.pool_routers(&SearchPath::from_env())?;
                decode_plugins = Some(Plugins::in_process(decode_router, deadline)?);
                Plugins::in_process(prefill_router, deadline)?
            } else {
                Plugins::in_process(scenario.router(&SearchPath::from_env())?, deadline)?
            }
        }
        IsolationArg::Process => {
            let program = std::env::current_exe().map_err(|e| {
                Failure::input(format!(
                    "cannot find this program to start the plugin host: {e}"
                ))
            })?;
            let document = serde_yaml::to_string(&serving).map_err(|e| {
                LiveError::Run(format!("cannot write the plugin host's settings: {e}"))
            })?;
            let command = HostCommand {
                program,
                args: vec![
                    "plugin-host".into(),
                    "--serving".into(),
                    document.into(),
                    "--memory-mb".into(),
                    args.plugin_host_memory_mb.to_string().into(),
                ],
            };
            Plugins::Isolated(Box::new(Host::start(command, serving.plugin_timeout)?))
        }
    };
    let kv_events = kv_subscriptions(
        args.kv_events.as_deref(),
        args.kv_events_replay.as_deref(),
        &serving.endpoints,
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
    let scaling = match &serving.scaler {
        Some(spec) => {
            let config = routerlab_sim::scenario::with_seed(&spec.config, serving.seed);
            let scaler = routerlab_host::load_scaler(&spec.name, &config, &SearchPath::from_env())
                .map_err(Failure::Plugin)?;
            Some(routerlab_live::serve::ServeScaling {
                scaler,
                interval: Duration::from_nanos(spec.settings.interval_ns),
                min_endpoints: spec.settings.min_endpoints,
                max_endpoints: spec.max_endpoints,
                gpus_per_endpoint: spec.settings.gpus_per_endpoint,
                deadline: serving.plugin_timeout,
            })
        }
        None => None,
    };
    let peers = peer_settings(&serving, &args.peers)?;
    let (listener, _) = bound(args.listen, "serve")?;
    let settings = ServeSettings {
        peers,
        endpoints: serving.endpoints,
        block_size: serving.block_size,
        metrics_interval: serving.metrics_interval,
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
        prefill_endpoints: serving.prefill,
        kv_events,
        kv_keys,
        engine_model: serving.engine,
        base_models: args.base_model,
        decision_log: args
            .decision_log
            .map(|path| routerlab_live::serve::DecisionLogSettings {
                path,
                max_bytes: args.decision_log_max_mib.saturating_mul(1 << 20).max(1),
                keep: args.decision_log_keep,
                prompts: args.decision_log_prompts,
            }),
    };
    runtime()?
        .block_on(routerlab_live::serve::run_on(
            listener,
            settings,
            plugins,
            decode_plugins,
            scaling,
        ))
        .map_err(Failure::from)
}

/// The peers this replica shares its state with, as `serving` and `--peers` say.
fn peer_settings(
    serving: &routerlab_experiment::Serving,
    peers: &[String],
) -> Result<Option<routerlab_live::serve::PeerSettings>, Failure> {
    match (serving.sync.is_on(), peers.is_empty()) {
        (false, true) => Ok(None),
        (false, false) => Err(Failure::input(
            "--peers: give a --replica-sync strategy to share state with them",
        )),
        (true, _) => {
            for peer in peers {
                if peer.parse::<SocketAddr>().is_err() {
                    return Err(Failure::input(format!(
                        "--peers: `{peer}` is not a host:port address"
                    )));
                }
            }
            Ok(Some(routerlab_live::serve::PeerSettings {
                sync: serving.sync,
                peers: peers.to_vec(),
            }))
        }
    }
}

/// `routerlab plugin-host`: loads the plugins as `serve` would and answers its calls.
pub fn plugin_host(args: PluginHostArgs) -> Result<(), Failure> {
    // This process leads its own group (serve started it so): when serve ends, the host
    // and whatever its plugins started end with it.
    routerlab_os::process::die_with_parent_and_group();
    if args.memory_mb > 0 {
        let bytes = args.memory_mb.saturating_mul(1 << 20);
        routerlab_os::process::limit_memory(bytes).map_err(|e| {
            Failure::input(format!(
                "--memory-mb {}: cannot set it: {e}",
                args.memory_mb
            ))
        })?;
    }
    let serving: Serving = serde_yaml::from_str(&args.serving).map_err(|e| {
        Failure::input(format!(
            "--serving: not serve's settings: {}",
            routerlab_experiment::one_line(&e.to_string())
        ))
    })?;
    let router = serving.scenario().router(&SearchPath::from_env())?;
    let served = routerlab_live::plugin_host::run(router, &args.connect).map_err(Failure::from);
    // The channel ended (serve went away, or a call could not be read), and the plugins
    // are dropped: the host ends, and whatever they started ends with it. Serve's end
    // reaches the host this way too, and may well before the parent-death signal does.
    if let Err(failure) = &served {
        eprintln!("error: {failure}");
    }
    routerlab_os::process::end_own_group();
    served
}

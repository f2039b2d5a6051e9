//! Snapshot testing for policy authors: a plugin crate's test replays a trace through its
//! freshly built library and hands the report to `insta::assert_yaml_snapshot!`, so a
//! change to a threshold or a tie-break shows in review as a diff of statistics.
//!
//! The same redaction `routerlab snapshot` applies is applied here (so a snapshot written
//! by either reads the same): the tool version and absolute trace paths are replaced, and
//! the timed figures are rounded to a stated number of significant digits.
//!
//! ```no_run
//! // tests/snapshot.rs of a plugin crate whose library is `librouterlab_my_policy.so`:
//! use routerlab_sim::snapshot::{SnapshotRun, plugin_library, redacted, replay_plugin};
//!
//! let library = plugin_library("routerlab_my_policy");
//! let run = SnapshotRun::new("tests/trace.jsonl");
//! let report = replay_plugin(&library, "my-policy", &run).expect("replays");
//! // insta::assert_yaml_snapshot!(redacted(&report, 3));
//! ```

use std::path::{Path, PathBuf};

use routerlab_host::{EndpointTable, load_matcher};
use routerlab_trace::{TraceOptions, TraceReader, Workload};

use crate::observer::NoObserver;
use crate::timed::{TimedSettings, replay_timed};
use crate::{Replicas, Router, WhenUnavailable, timefree};
use routerlab_engine::EngineConfig;
use routerlab_report::Report;
pub use routerlab_report::redact::{redacted, redacted_keeping_version, shown, significant};

/// A replay to snapshot: the trace and the few settings a policy test varies; the rest are
/// `routerlab replay`'s defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotRun {
    /// The trace.
    pub trace: PathBuf,
    /// Endpoints (`localhost:8000`, ...).
    pub endpoints: usize,
    /// The plugin's config text (YAML); `seed: 0` is added unless it sets one.
    pub config: String,
    /// Timed (trace arrivals, the `dynamo` engine preset) instead of time-free.
    pub timed: bool,
    /// Trace block size of Mooncake ids, tokens.
    pub trace_block_size: u32,
}

impl SnapshotRun {
    /// A time-free replay of `trace` over 10 endpoints with an empty config.
    pub fn new(trace: impl Into<PathBuf>) -> SnapshotRun {
        SnapshotRun {
            trace: trace.into(),
            endpoints: 10,
            config: String::new(),
            timed: false,
            trace_block_size: 512,
        }
    }
}

/// The library `lib{name}.so` (or `.dylib`) built beside the running test binary: what
/// `cargo test` just built from the plugin crate (its target directory, its profile).
pub fn plugin_library(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test binary>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test binary under target/<profile>/deps");
    profile_dir.join(format!(
        "{}{name}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ))
}

/// Replays `run` through the matcher `name` of `library`; the error says what failed.
pub fn replay_plugin(library: &Path, name: &str, run: &SnapshotRun) -> Result<Report, String> {
    if !library.is_file() {
        return Err(format!(
            "{}: no such library (build the plugin crate first: `cargo build`)",
            library.display()
        ));
    }
    let spec = format!("{}#{name}", library.display());
    let config = if run.config.contains("seed") {
        run.config.clone()
    } else {
        format!("{}\nseed: 0\n", run.config)
    };
    let search = routerlab_host::SearchPath::new(Vec::new());
    let matcher = load_matcher(&spec, &config, &search).map_err(|e| e.to_string())?;
    let table = EndpointTable::new((0..run.endpoints).map(|i| format!("localhost:{}", 8000 + i)));
    let when = if run.timed {
        WhenUnavailable::Queue
    } else {
        WhenUnavailable::Reject
    };
    let mut replicas =
        Replicas::from(Router::new(matcher, None, table, when).map_err(|e| e.to_string())?);
    let options = TraceOptions {
        format: None,
        block_size: 128,
        trace_block_size: run.trace_block_size,
        skip_invalid: false,
    };
    let mut reader = TraceReader::open(&run.trace, options).map_err(|e| e.to_string())?;
    if !run.timed {
        return timefree::replay(&mut reader, &mut replicas, None, &mut NoObserver)
            .map_err(|e| e.to_string());
    }
    let settings = TimedSettings::at_trace_times(vec![EngineConfig::dynamo(); run.endpoints]);
    let workload =
        Workload::load(reader, &settings.engine_block_sizes()).map_err(|e| e.to_string())?;
    replay_timed(&workload, &mut replicas, &settings, &mut NoObserver).map_err(|e| e.to_string())
}

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

use routerlab_host::SearchPath;
use routerlab_trace::TraceOptions;

use crate::observer::NoObserver;
use crate::scenario::Scenario;
use routerlab_report::Report;
pub use routerlab_report::redact::{
    plugin_shown, redacted, redacted_keeping_version, shown, significant,
};

/// A replay to snapshot: the trace and the few settings a policy test varies; the rest are
/// `routerlab replay`'s defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotRun {
    /// The trace.
    pub trace: PathBuf,
    /// Endpoints (`localhost:8000`, ...).
    pub endpoints: usize,
    /// The plugin's config text (YAML mapping); `seed: 0` is added unless it sets one.
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

/// The library `lib{name}.so` (or `.dylib`) that this very `cargo test` built: with
/// `crate-type = ["cdylib", "rlib"]`, the test links the crate's rlib, and rustc writes the
/// cdylib beside it in `target/<profile>/deps/` from the same sources in the same
/// invocation, so the library tested is the code under test. (A `cdylib` alone is not
/// built by `cargo test` at all; what `cargo build` left in `target/<profile>/` may be
/// older than the sources.) [`replay_plugin`] refuses a library it cannot vouch for.
pub fn plugin_library(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test binary>
    let deps = exe
        .parent()
        .expect("a test binary under target/<profile>/deps");
    deps.join(format!(
        "{}{name}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ))
}

/// How much older than its crate's newest rlib a library may be and still come from the
/// same build (rustc writes both in one invocation, the rlib first or last).
const SAME_BUILD_SLACK: std::time::Duration = std::time::Duration::from_secs(2);

/// Why `library` cannot be the code under test, if it cannot: missing, or older than the
/// newest rlib of its crate beside it (a library from an earlier build), or without one
/// (a crate that `cargo test` does not build a library for).
fn stale(library: &Path) -> Option<String> {
    let fix = "give the plugin crate `crate-type = [\"cdylib\", \"rlib\"]` so `cargo test` builds the library it tests";
    let shown = library.display();
    let Ok(built) = std::fs::metadata(library).and_then(|m| m.modified()) else {
        return Some(format!("{shown}: no such library ({fix})"));
    };
    let dir = library.parent()?;
    let stem = library.file_stem()?.to_str()?;
    let base = stem
        .strip_prefix(std::env::consts::DLL_PREFIX)
        .unwrap_or(stem);
    // `lib{base}.rlib` (cargo leaves the hash out of a crate that is also a cdylib), or
    // `lib{base}-{hash}.rlib`.
    let (rlib, rlib_prefix) = (format!("lib{base}.rlib"), format!("lib{base}-"));
    let newest_rlib = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            *name == rlib || (name.starts_with(&rlib_prefix) && name.ends_with(".rlib"))
        })
        .filter_map(|e| e.metadata().and_then(|m| m.modified()).ok())
        .max();
    match newest_rlib {
        None => Some(format!(
            "{shown}: the test was not built with this crate's rlib, so `cargo test` did not build this library ({fix})"
        )),
        Some(rlib) if built + SAME_BUILD_SLACK < rlib => Some(format!(
            "{shown} is older than the crate it comes from: a library from an earlier build ({fix})"
        )),
        Some(_) => None,
    }
}

/// Replays `run` through the matcher `name` of `library`; the error says what failed.
/// The run is a [`Scenario`] with `replay`'s defaults, so it is what `routerlab replay`
/// with the same settings reports.
pub fn replay_plugin(library: &Path, name: &str, run: &SnapshotRun) -> Result<Report, String> {
    if let Some(why) = stale(library) {
        return Err(why);
    }
    let scenario = Scenario::new(format!("{}#{name}", library.display()), &run.trace)
        .endpoints(run.endpoints)
        .trace_options(TraceOptions {
            trace_block_size: run.trace_block_size,
            ..TraceOptions::default()
        })
        .matcher_config(&run.config)
        .map_err(|e| e.to_string())?;
    let scenario = if run.timed {
        scenario.timed_at_trace_times()
    } else {
        scenario
    };
    // Only the library named, never one found on a search path.
    let mut replicas = scenario
        .routers(&SearchPath::new(Vec::new()))
        .map_err(|e| e.to_string())?;
    let mut report = scenario
        .replay(&mut replicas, &mut NoObserver)
        .map_err(|e| e.to_string())?;
    // As it always has, the report carries no `run` block: snapshots written before must
    // not change.
    report.run = None;
    Ok(report)
}

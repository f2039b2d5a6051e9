//! One module per subcommand, each a `run` over the library crates; plus the one way the
//! command line writes an output file (`output`).

pub mod calibrate;
pub mod compare;
pub mod drive;
pub mod gen_trace;
pub mod inspect;
pub mod live;
pub(crate) mod output;
pub mod plot;
pub mod plugins;
pub mod recommend;
pub mod replay;
pub mod run;
pub(crate) mod runs;
pub mod snapshot;
pub mod stacks;
pub mod sweep;
pub mod validate;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use routerlab_host::SearchPath;
use routerlab_sim::Replicas;

use crate::exit::Failure;
use routerlab_experiment::Run;

pub use output::{OutputFile, refuse_input_as_output, write_output};

/// The run's router replicas, loaded from the plugin search path (see
/// [`routerlab_sim::scenario::Scenario::routers`]).
pub(crate) fn build_replicas(spec: &Run) -> Result<Replicas, Failure> {
    Ok(spec.routers(&SearchPath::from_env())?)
}

/// Says once on stderr that a trace without prefix information is replayed as load-only
/// traffic, so an all-zero hit ratio is not mistaken for a policy's result.
pub fn note_load_only(path: &Path, format: routerlab_trace::TraceFormat) {
    if !format.has_prefixes() {
        eprintln!(
            "note: {} is in the {format} format, which says nothing about shared prefixes: it is replayed as load-only traffic (no block chains, every hit is zero)",
            path.display()
        );
    }
}

/// Prints `text` on stdout, all of it or a failure naming `what` was being written. A
/// reader that stopped reading (`routerlab plugins | head`: a broken pipe) is a normal end,
/// not a failure.
pub fn print_stdout(text: &str, what: &'static str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(source) => Err(Failure::Output {
            what,
            path: PathBuf::from("-"),
            source,
        }),
    }
}

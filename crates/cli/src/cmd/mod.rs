//! One module per subcommand, each a `run` over the library crates; plus the one way the
//! command line writes an output file.

pub mod calibrate;
pub mod compare;
pub mod gen_trace;
pub mod inspect;
pub mod live;
pub mod plot;
pub mod plugins;
pub mod replay;
pub mod run;
pub mod snapshot;
pub mod sweep;

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use routerlab_host::SearchPath;
use routerlab_sim::Replicas;

use crate::exit::Failure;
use crate::spec::RunSpec;

/// The run's router replicas, loaded from the plugin search path (see
/// [`routerlab_sim::scenario::Scenario::routers`]).
pub(crate) fn build_replicas(spec: &RunSpec) -> Result<Replicas, Failure> {
    Ok(spec.routers(&SearchPath::from_env())?)
}

/// Writes `bytes` to `path` whole, through a temporary file renamed into place.
pub fn write_output(path: &Path, bytes: &[u8], what: &'static str) -> Result<(), Failure> {
    let fail = |source| Failure::Output {
        what,
        path: path.to_owned(),
        source,
    };
    let file = OutputFile::create(path).map_err(fail)?;
    file.writer()
        .and_then(|mut w| w.write_all(bytes))
        .map_err(fail)?;
    file.commit().map_err(fail)
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

/// Refuses to write `output` (named by `flag`) when it is the same file as one of
/// `inputs`: same device and inode, so a symbolic or hard link to a trace is caught as
/// surely as its own name. Writing there would replace an input with a result.
pub fn refuse_input_as_output(flag: &str, output: &Path, inputs: &[&Path]) -> Result<(), Failure> {
    let Some(out) = file_identity(output) else {
        return Ok(());
    };
    for input in inputs {
        if file_identity(input) == Some(out) {
            return Err(Failure::input(format!(
                "{flag} {}: is the same file as the input {}; refusing to write over an input",
                output.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

/// (device, inode) of an existing file, following links.
#[cfg(unix)]
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Elsewhere, the canonical path stands in for the identity.
#[cfg(not(unix))]
fn file_identity(path: &Path) -> Option<PathBuf> {
    path.canonicalize().ok()
}

/// An output written beside its final name and renamed into place only once complete, so a
/// failed run leaves no half-written file and an existing file survives a failure.
pub struct OutputFile {
    target: PathBuf,
    temporary: PathBuf,
}

impl OutputFile {
    /// Creates the temporary file beside `target`.
    pub fn create(target: &Path) -> std::io::Result<OutputFile> {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temporary = target.with_file_name(format!(".{name}.{}.partial", std::process::id()));
        File::create(&temporary)?;
        Ok(OutputFile {
            target: target.to_owned(),
            temporary,
        })
    }

    /// A writer on the temporary file.
    pub fn writer(&self) -> std::io::Result<File> {
        File::options().write(true).open(&self.temporary)
    }

    /// Renames the finished file into place.
    pub fn commit(self) -> std::io::Result<()> {
        std::fs::rename(&self.temporary, &self.target)
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        // Uncommitted (an error, a panic): nothing may pass for a complete output.
        let _ = std::fs::remove_file(&self.temporary);
    }
}

//! The one way the command line writes an output file, and the rule that no output may be
//! an input.
//!
//! A regular file (or a name that does not exist yet) is written beside its final name and
//! renamed into place only once complete, so a failed run leaves no half-written file and
//! an existing file survives a failure. A symbolic link is written through: its target is
//! what gets replaced (renamed beside the target), and the link stays a link. Anything that
//! is not a regular file (a terminal or other character device, a FIFO, `/dev/stdout`, or
//! `-` for standard output) is streamed to as the run goes and never renamed over: there is
//! nothing to rename onto a device, and replacing one would break the system.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::exit::Failure;

/// Links followed at most when resolving an output (the kernel's own limit is 40).
const MAX_LINKS: usize = 40;

/// Where an output's bytes go.
enum Sink {
    /// A temporary file beside `target`, renamed onto it at commit.
    Renamed { target: PathBuf, temporary: PathBuf },
    /// Written in place: a device, a FIFO, standard output.
    Streamed { path: Option<PathBuf> },
}

/// An output being written (see the module docs for the rules).
pub struct OutputFile {
    sink: Sink,
}

impl OutputFile {
    /// Prepares the output named `target`: resolves links, decides between renaming and
    /// streaming, and for a regular file creates the temporary file beside the real one.
    pub fn create(target: &Path) -> std::io::Result<OutputFile> {
        if target == Path::new("-") {
            return Ok(OutputFile {
                sink: Sink::Streamed { path: None },
            });
        }
        // The kernel follows every link (including /proc's, as /dev/stdout's is).
        if let Ok(meta) = std::fs::metadata(target) {
            if meta.is_dir() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::IsADirectory,
                    "is a directory",
                ));
            }
            if !meta.is_file() {
                return Ok(OutputFile {
                    sink: Sink::Streamed {
                        path: Some(target.to_owned()),
                    },
                });
            }
        }
        // A regular file, or one to be created: replaced where the links lead.
        let resolved = resolve_links(target)?;
        let name = resolved
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temporary = resolved.with_file_name(format!(".{name}.{}.partial", std::process::id()));
        File::create(&temporary)?;
        Ok(OutputFile {
            sink: Sink::Renamed {
                target: resolved,
                temporary,
            },
        })
    }

    /// A writer: on the temporary file, or on the stream itself.
    pub fn writer(&self) -> std::io::Result<Box<dyn Write + Send>> {
        Ok(match &self.sink {
            Sink::Renamed { temporary, .. } => {
                Box::new(File::options().write(true).open(temporary)?)
            }
            Sink::Streamed { path: Some(path) } => {
                Box::new(File::options().write(true).open(path)?)
            }
            Sink::Streamed { path: None } => Box::new(std::io::stdout()),
        })
    }

    /// Puts the finished output in place: the rename, or nothing for a stream.
    pub fn commit(mut self) -> std::io::Result<()> {
        match std::mem::replace(&mut self.sink, Sink::Streamed { path: None }) {
            Sink::Renamed { target, temporary } => std::fs::rename(&temporary, &target)
                .inspect_err(|_| {
                    let _ = std::fs::remove_file(&temporary);
                }),
            Sink::Streamed { .. } => Ok(()),
        }
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        // Uncommitted (an error, a panic): nothing may pass for a complete output. What was
        // streamed is gone already; the run's error says it did not finish.
        if let Sink::Renamed { temporary, .. } = &self.sink {
            let _ = std::fs::remove_file(temporary);
        }
    }
}

/// The path `path` names once every symbolic link in its last component is followed (a
/// dangling link resolves to the file it would create); links in the directories above are
/// the operating system's business and stay as they are.
pub(crate) fn resolve_links(path: &Path) -> std::io::Result<PathBuf> {
    let mut current = path.to_owned();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let next = std::fs::read_link(&current)?;
                current = match current.parent() {
                    Some(dir) if next.is_relative() => dir.join(next),
                    _ => next,
                };
            }
            _ => return Ok(current),
        }
    }
    Err(std::io::Error::other(format!(
        "more than {MAX_LINKS} symbolic links"
    )))
}

/// Writes `bytes` to `path` whole (see the module docs).
pub fn write_output(path: &Path, bytes: &[u8], what: &'static str) -> Result<(), Failure> {
    let fail = |source| Failure::Output {
        what,
        path: path.to_owned(),
        source,
    };
    let file = OutputFile::create(path).map_err(fail)?;
    file.writer()
        .and_then(|mut w| w.write_all(bytes).and_then(|()| w.flush()))
        .map_err(fail)?;
    file.commit().map_err(fail)
}

/// Refuses to write `output` (named by `flag`) when it is the same file as one of `inputs`
/// or as a plugin library loaded so far: same device and inode, so a symbolic or hard link
/// to an input is caught as surely as its own name. Writing there would replace an input
/// with a result.
pub fn refuse_input_as_output(flag: &str, output: &Path, inputs: &[&Path]) -> Result<(), Failure> {
    let Some(out) = file_identity(output) else {
        return Ok(());
    };
    let libraries = routerlab_host::loaded_library_paths();
    let named = inputs.iter().map(|p| (p.to_path_buf(), "the input"));
    let loaded = libraries.into_iter().map(|p| (p, "the plugin library"));
    for (input, what) in named.chain(loaded) {
        if file_identity(&input) == Some(out) {
            return Err(Failure::input(format!(
                "{flag} {}: is the same file as {what} {}; refusing to write over an input",
                output.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

/// (device, inode) of an existing regular file, following links. Devices and FIFOs are not
/// inputs a run could lose (a trace read from a FIFO is gone once read either way).
#[cfg(unix)]
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| (m.dev(), m.ino()))
}

/// Elsewhere, the canonical path stands in for the identity.
#[cfg(not(unix))]
fn file_identity(path: &Path) -> Option<PathBuf> {
    path.canonicalize().ok().filter(|p| p.is_file())
}

//! The one way the command line writes an output file, and the rule that no output may be
//! an input.
//!
//! A regular file (or a name that does not exist yet) is written beside its final name, in
//! a temporary file created exclusively under a random name (nothing made there in advance,
//! a link least of all, is ever written through), and renamed into place only once
//! complete, so a failed run leaves no half-written file and an existing file survives a
//! failure. A symbolic link is written through: its target is
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
    /// A temporary file beside `target`, renamed onto it at commit (removed if dropped).
    Renamed {
        target: PathBuf,
        temporary: tempfile::NamedTempFile,
    },
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
        let dir = match resolved.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".partial");
        // As a plain create would make it: read and write for all, less the umask.
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let temporary = builder.tempfile_in(dir)?;
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
            Sink::Renamed { temporary, .. } => Box::new(temporary.as_file().try_clone()?),
            Sink::Streamed { path: Some(path) } => {
                Box::new(File::options().write(true).open(path)?)
            }
            Sink::Streamed { path: None } => Box::new(std::io::stdout()),
        })
    }

    /// Puts the finished output in place: the rename, or nothing for a stream.
    pub fn commit(mut self) -> std::io::Result<()> {
        match std::mem::replace(&mut self.sink, Sink::Streamed { path: None }) {
            // A failed rename drops (and so removes) the temporary.
            Sink::Renamed { target, temporary } => {
                temporary.persist(&target).map(drop).map_err(|e| e.error)
            }
            Sink::Streamed { .. } => Ok(()),
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
/// to an input is caught as surely as its own name. An input that is a directory (a
/// measured run's) makes every file in it, at any depth, an input. Writing there would
/// replace an input with a result.
pub fn refuse_input_as_output(flag: &str, output: &Path, inputs: &[&Path]) -> Result<(), Failure> {
    for dir in inputs.iter().filter(|p| p.is_dir()) {
        if inside(output, dir) {
            return Err(Failure::input(format!(
                "{flag} {}: is inside the input directory {}; refusing to write over an input",
                output.display(),
                dir.display()
            )));
        }
    }
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

/// Whether the file `output` would write (its links followed) lies under `dir`, both
/// compared by their canonical paths.
fn inside(output: &Path, dir: &Path) -> bool {
    let (Ok(dir), Ok(resolved)) = (dir.canonicalize(), resolve_links(output)) else {
        return false;
    };
    let parent = match resolved.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    parent
        .canonicalize()
        .is_ok_and(|parent| parent.starts_with(&dir))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A link made in advance where the old writer put its temporary file
    /// (`.NAME.PID.partial`, predictable) is neither written through nor renamed onto the
    /// output: the output is a regular file holding what was written, the link's target is
    /// untouched, and no temporary is left behind.
    #[test]
    fn a_link_planted_at_a_temporary_name_is_never_written_through() {
        let dir = std::env::temp_dir().join(format!("routerlab-output-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let target = dir.join("out.jsonl");
        let planted = dir.join(format!(".out.jsonl.{}.partial", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();

        write_output(&target, b"result\n", "the test output").unwrap();

        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let meta = std::fs::symlink_metadata(&target).unwrap();
        assert!(meta.file_type().is_file(), "{meta:?}");
        assert_eq!(std::fs::read(&target).unwrap(), b"result\n");
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let planted_name = planted.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(
            left,
            [planted_name, "out.jsonl".to_owned(), "victim".to_owned()]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The output is made as a plain create would make it: the umask decides, not the
    /// temporary file's private mode.
    #[test]
    fn an_output_gets_the_permissions_of_a_plain_create() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir =
            std::env::temp_dir().join(format!("routerlab-output-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("plain");
        File::create(&plain).unwrap();
        let ours = dir.join("ours");
        write_output(&ours, b"x", "the test output").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&ours), mode(&plain));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

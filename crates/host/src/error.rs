//! Every way loading or calling a plugin can fail, each as one line naming the file (or the
//! plugin) and the cause.

use std::fmt;
use std::path::PathBuf;

/// A failure to find, load, validate or call a plugin.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// No file for the name in any search directory.
    #[error("plugin `{name}` not found{}; tried: {}", did_you_mean(.nearest), list_paths(.tried))]
    NotFound {
        /// The requested name.
        name: String,
        /// Every path tried, in order.
        tried: Vec<PathBuf>,
        /// The plugins on the search path whose names are nearest to it, nearest first.
        nearest: Vec<String>,
    },
    /// The name is not `[a-z0-9-]{1,64}` and is not a path.
    #[error(
        "invalid plugin name `{name}`: use lowercase letters, digits and `-` (at most 64), or give a path"
    )]
    InvalidName {
        /// The rejected name.
        name: String,
    },
    /// A problem with a library file (it exists but cannot be used).
    #[error("{}: {cause}", file_name(.file))]
    Library {
        /// The library file.
        file: PathBuf,
        /// What is wrong with it.
        cause: LibraryFault,
    },
    /// A plugin call returned an error or broke the contract.
    #[error("plugin `{plugin}` ({}): {call}: {failure}", file_name(.file))]
    Call {
        /// Plugin name.
        plugin: String,
        /// Its library file.
        file: PathBuf,
        /// The entry point that failed (`create`, `match`, ...).
        call: &'static str,
        /// What went wrong.
        failure: CallFailure,
    },
}

/// What is wrong with a library file, in the order the loader checks.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LibraryFault {
    /// `dlopen` failed: not a shared library, wrong architecture, missing dependency.
    #[error("cannot load as a shared library: {0}")]
    Open(String),
    /// The entry symbol is absent.
    #[error("entry symbol `routerlab_plugin_entry_v1` not found (not a routerlab ABI v1 plugin)")]
    MissingEntry,
    /// The entry function returned NULL.
    #[error("entry function returned NULL: the library refused to load")]
    NullModule,
    /// The module's magic number is wrong.
    #[error("bad magic {found:#010x}, expected {expected:#010x} (not a routerlab plugin)")]
    BadMagic {
        /// What the module holds.
        found: u32,
        /// `RL_MAGIC`.
        expected: u32,
    },
    /// The module was built for another ABI major.
    #[error("ABI major {found}, host supports {supported}")]
    AbiMajor {
        /// The module's major.
        found: u32,
        /// The host's major.
        supported: u32,
    },
    /// A struct is smaller than its v1 layout.
    #[error("{what} struct_size {found} is smaller than the ABI v1 size {minimum}")]
    StructSize {
        /// Which struct.
        what: String,
        /// Its declared size.
        found: u32,
        /// The v1 size.
        minimum: usize,
    },
    /// A descriptor or vtable pointer is NULL.
    #[error("{0} is NULL")]
    NullPointer(String),
    /// A descriptor has an unknown kind.
    #[error("plugin #{index}: unknown kind {kind} (expected 1 = matcher or 2 = detector)")]
    UnknownKind {
        /// Position in the module.
        index: usize,
        /// The kind found.
        kind: u32,
    },
    /// A descriptor's name is not valid.
    #[error("plugin #{index}: invalid name {name:?} (expected [a-z0-9-]{{1,64}})")]
    BadName {
        /// Position in the module.
        index: usize,
        /// The name found (lossy).
        name: String,
    },
    /// Two descriptors of one library share a name: which one a user gets would be luck.
    #[error(
        "plugin #{index}: the name `{name}` is already used by plugin #{first} of this library"
    )]
    DuplicateName {
        /// Position of the second.
        index: usize,
        /// Position of the first.
        first: usize,
        /// The name.
        name: String,
    },
    /// A required vtable entry is NULL.
    #[error("plugin `{plugin}`: required entry `{slot}` is NULL")]
    MissingEntryPoint {
        /// Plugin name.
        plugin: String,
        /// The vtable slot.
        slot: &'static str,
    },
    /// The library has no plugin by the requested name.
    #[error("no plugin named `{wanted}` in this library (it exports: {exported})")]
    NameMismatch {
        /// The requested name.
        wanted: String,
        /// What it exports.
        exported: String,
    },
    /// The plugin is of the other kind.
    #[error("plugin `{plugin}` is a {found}, not a {wanted}")]
    WrongKind {
        /// Plugin name.
        plugin: String,
        /// Its kind.
        found: &'static str,
        /// The requested kind.
        wanted: &'static str,
    },
}

/// How a plugin call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallFailure {
    /// `create` rejected the configuration.
    Config(String),
    /// The plugin panicked; the instance is poisoned.
    Panicked(String),
    /// The instance panicked earlier.
    Poisoned(String),
    /// The plugin reported an error.
    Failed(String),
    /// The host broke the contract, according to the plugin.
    InvalidArgument(String),
    /// The plugin returned a status the ABI does not define.
    UnknownStatus(i32, String),
    /// `match` returned an index that names no endpoint.
    EndpointOutOfRange(u32),
    /// `match` returned an endpoint that was flagged unavailable.
    EndpointUnavailable(u32),
}

impl fmt::Display for CallFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallFailure::Config(m) => write!(f, "config rejected: {m}"),
            CallFailure::Panicked(m) => write!(f, "plugin panicked (instance poisoned): {m}"),
            CallFailure::Poisoned(m) => write!(f, "instance poisoned by an earlier panic: {m}"),
            CallFailure::Failed(m) => write!(f, "failed: {m}"),
            CallFailure::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            CallFailure::UnknownStatus(s, m) => write!(f, "unknown status {s}: {m}"),
            CallFailure::EndpointOutOfRange(i) => {
                write!(
                    f,
                    "returned endpoint index {i}, which is not a current endpoint"
                )
            }
            CallFailure::EndpointUnavailable(i) => {
                write!(
                    f,
                    "returned endpoint index {i}, which was flagged unavailable"
                )
            }
        }
    }
}

fn file_name(path: &std::path::Path) -> String {
    path.display().to_string()
}

fn did_you_mean(nearest: &[String]) -> String {
    match nearest {
        [] => String::new(),
        [one] => format!(" (did you mean `{one}`?)"),
        more => format!(
            " (did you mean one of {}?)",
            more.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn list_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "no search directories (set ROUTERLAB_PLUGIN_PATH)".into();
    }
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

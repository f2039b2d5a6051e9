//! routerlab-host: finds, loads, validates and calls plugins. The only crate that loads code.
//!
//! A plugin is untrusted input in the sense that matters for a tool: its file may be stale,
//! built for another ABI, or simply wrong, and its answers may be out of range. So the host
//! validates every field of a module before it calls anything (in the order entry symbol,
//! magic, ABI major, struct sizes, kind, name), reports each failure in one line naming the
//! file and the field, and checks every answer (an endpoint index that is out of range or
//! flagged unavailable is an error, never used). What it cannot defend against is a plugin
//! that crashes the process outright (that would take a separate process); the crash
//! handler of `routerlab-os` at least makes the process say which plugin, call and trace
//! line it was.
//!
//! `unsafe` is allowed in this crate, and each block says why it is sound.

#![allow(unsafe_code)]

mod callbacks;
mod discovery;
mod error;
pub mod in_process;
mod instance;
mod loader;
mod request;

pub use discovery::{PLUGIN_PATH_ENV, PluginSpec, SearchPath, is_valid_name, library_file_name};
pub use error::{CallFailure, LibraryFault, PluginError};
pub use instance::{
    DetectorInstance, EndpointLoad, EndpointTable, MatcherInstance, PoolObservation, ScalerInstance,
};
pub use loader::{Library, PluginInfo, PluginKind, load_library, loaded_library_paths};
pub use request::{AdapterState, CachedPrefix, CachedTiers, Lora, Predict, RequestData};

/// Finds and loads the plugin named by `spec` (a name or `PATH[#NAME]`), of kind `kind`.
pub fn find_plugin(
    spec: &str,
    kind: PluginKind,
    search: &SearchPath,
) -> Result<(&'static Library, &'static PluginInfo), PluginError> {
    match PluginSpec::parse(spec)? {
        PluginSpec::Name(name) => {
            let file = search.resolve(&name)?;
            let library = load_library(&file)?;
            Ok((library, library.plugin(&name, kind)?))
        }
        PluginSpec::Path { file, name } => {
            if !file.is_file() {
                return Err(PluginError::NotFound {
                    name: spec.to_owned(),
                    tried: vec![file],
                    nearest: Vec::new(),
                });
            }
            let library = load_library(&file)?;
            let plugin = match name {
                Some(name) => library.plugin(&name, kind)?,
                None => library.only_plugin(kind)?,
            };
            Ok((library, plugin))
        }
    }
}

/// Loads a matcher and creates an instance with `config` (YAML or JSON text; may be empty).
pub fn load_matcher(
    spec: &str,
    config: &str,
    search: &SearchPath,
) -> Result<MatcherInstance, PluginError> {
    let (library, plugin) = find_plugin(spec, PluginKind::Matcher, search)?;
    MatcherInstance::create(library, plugin, config)
}

/// Loads a detector and creates an instance with `config` (YAML or JSON text; may be empty).
pub fn load_detector(
    spec: &str,
    config: &str,
    search: &SearchPath,
) -> Result<DetectorInstance, PluginError> {
    let (library, plugin) = find_plugin(spec, PluginKind::Detector, search)?;
    DetectorInstance::create(library, plugin, config)
}

/// Loads a scaler (ABI 1.7) and creates an instance with `config` (YAML or JSON text; may
/// be empty).
pub fn load_scaler(
    spec: &str,
    config: &str,
    search: &SearchPath,
) -> Result<ScalerInstance, PluginError> {
    let (library, plugin) = find_plugin(spec, PluginKind::Scaler, search)?;
    ScalerInstance::create(library, plugin, config)
}

/// Every plugin library on the search path, loaded, or the error that stopped each one.
pub fn list_libraries(search: &SearchPath) -> Vec<Result<&'static Library, PluginError>> {
    search
        .candidate_files()
        .iter()
        .map(|file| load_library(file))
        .collect()
}

//! Rust plugins driven in process: a [`Matcher`] or [`Detector`] type behind the real export
//! shims and the real module checks, without a shared library or `dlopen`.
//!
//! The SDK's export macro builds a static module of descriptors whose vtables are
//! [`MatcherExport::VTABLE`] and [`DetectorExport::VTABLE`]. This module builds the same
//! module for one type at run time and hands it to the loader's own validation, so an
//! instance made here is a [`MatcherInstance`] or [`DetectorInstance`] like any other:
//! every call crosses the same `extern "C"` shims (config checking, `catch_unwind`, the
//! poison rule, `struct_size` handling) and every answer the same host checks. What it
//! skips is only the file: finding it, opening it, its entry symbol.
//!
//! That makes the router, both replay drivers and `serve`'s state testable in their own
//! crates, with a policy written inline in the test, instead of only end to end with
//! built libraries. The module for a given type and name is built once per process and
//! kept (as loaded libraries are), so repeated instances allocate nothing more.

use std::any::TypeId;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_void};
use std::path::PathBuf;
use std::sync::Mutex;

use routerlab_core::abi::{
    RL_ABI_MAJOR, RL_ABI_MINOR, RL_KIND_DETECTOR, RL_KIND_MATCHER, RL_KIND_SCALER, RL_MAGIC,
    RlDescriptorRef, RlModule, RlPluginDescriptor,
};
use routerlab_core::sdk::{Detector, DetectorExport, Matcher, MatcherExport, Scaler, ScalerExport};

use crate::loader::{Library, PluginKind, validate_module};
use crate::{DetectorInstance, MatcherInstance, PluginError, ScalerInstance};

/// Modules built so far, by plugin type and name.
static BUILT: Mutex<Option<HashMap<(TypeId, String), &'static Library>>> = Mutex::new(None);

/// A matcher of type `M`, loaded as `name` (a valid plugin name) with `config` (YAML or
/// JSON text, may be empty; `seed` is given beside the config as for any 1.2 plugin).
pub fn matcher<M: Matcher>(name: &str, config: &str) -> Result<MatcherInstance, PluginError> {
    let vtable: &'static _ = Box::leak(Box::new(MatcherExport::<M>::VTABLE));
    let library = library::<M>(name, RL_KIND_MATCHER, std::ptr::from_ref(vtable).cast())?;
    MatcherInstance::create(library, library.plugin(name, PluginKind::Matcher)?, config)
}

/// A detector of type `D`, loaded as `name` with `config`; as [`matcher`].
pub fn detector<D: Detector>(name: &str, config: &str) -> Result<DetectorInstance, PluginError> {
    let vtable: &'static _ = Box::leak(Box::new(DetectorExport::<D>::VTABLE));
    let library = library::<D>(name, RL_KIND_DETECTOR, std::ptr::from_ref(vtable).cast())?;
    DetectorInstance::create(library, library.plugin(name, PluginKind::Detector)?, config)
}

/// A scaler of type `S`, loaded as `name` with `config`; as [`matcher`].
pub fn scaler<S: Scaler>(name: &str, config: &str) -> Result<ScalerInstance, PluginError> {
    let vtable: &'static _ = Box::leak(Box::new(ScalerExport::<S>::VTABLE));
    let library = library::<S>(name, RL_KIND_SCALER, std::ptr::from_ref(vtable).cast())?;
    ScalerInstance::create(library, library.plugin(name, PluginKind::Scaler)?, config)
}

/// The one-plugin library of type `T` named `name`, built and validated on first use.
/// `vtable` is leaked by the caller; on a later call it is one small allocation that is
/// simply not used (the first module's vtable is).
fn library<T: 'static>(
    name: &str,
    kind: u32,
    vtable: *const c_void,
) -> Result<&'static Library, PluginError> {
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    let key = (TypeId::of::<T>(), name.to_owned());
    if let Some(library) = built.get(&key) {
        return Ok(library);
    }
    // A name with a NUL byte cannot be a C string; the loader's name check then refuses
    // the empty name with the usual message.
    let c_name: &'static CStr =
        Box::leak(CString::new(name).unwrap_or_default().into_boxed_c_str());
    let descriptor: &'static RlPluginDescriptor = Box::leak(Box::new(RlPluginDescriptor {
        struct_size: size_of::<RlPluginDescriptor>() as u32,
        kind,
        name: c_name.as_ptr(),
        version: c"in-process".as_ptr(),
        description: c"a Rust plugin driven in process".as_ptr(),
        vtable,
    }));
    let list: &'static [RlDescriptorRef] =
        Box::leak(vec![RlDescriptorRef(descriptor)].into_boxed_slice());
    let module: &'static RlModule = Box::leak(Box::new(RlModule {
        struct_size: size_of::<RlModule>() as u32,
        magic: RL_MAGIC,
        abi_major: RL_ABI_MAJOR,
        abi_minor: RL_ABI_MINOR,
        plugin_count: 1,
        _reserved: 0,
        plugins: list.as_ptr().cast(),
    }));
    let path = PathBuf::from(format!("<in-process {name}>"));
    // SAFETY: every pointer above is to leaked, never-freed memory of the ABI's own types
    // at their full current sizes, and the strings are NUL-terminated: what the loader
    // requires of a module.
    let library = unsafe { validate_module(&path, module) }?;
    let library: &'static Library = Box::leak(Box::new(library));
    built.insert(key, library);
    Ok(library)
}

#[cfg(test)]
mod tests {
    use routerlab_core::{EndpointId, Endpoints, PluginConfig, Request};

    use super::*;
    use crate::{EndpointTable, RequestData};

    /// The last available endpoint; panics on a prompt of exactly 13 tokens.
    struct Last {
        calls: u64,
    }

    impl Matcher for Last {
        fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
            let calls = config.u64("start", 0)?;
            Ok(Last { calls })
        }
        fn match_request(
            &mut self,
            request: &Request<'_>,
            endpoints: &Endpoints<'_>,
        ) -> Result<Option<EndpointId>, String> {
            self.calls += 1;
            if request.prompt_len() == 13 {
                panic!("thirteen, call {}", self.calls);
            }
            Ok(endpoints.available().last().map(|e| e.id()))
        }
    }

    fn request(prompt_len: u64) -> RequestData<'static> {
        RequestData {
            id: 1,
            arrival_ns: 0,
            prompt: &[],
            block_hashes: &[],
            block_ids: None,
            block_size: 1,
            unit: routerlab_core::Unit::Tokens,
            prompt_len,
            output_tokens: None,
            session_id: 0,
            parent_id: 0,
            ends_session: false,
            now_ns: 0,
            cached_prefix: None,
            phase: routerlab_core::Phase::Whole,
            cached_tiers: None,
            predict: None,
            lora: None,
        }
    }

    #[test]
    fn an_in_process_matcher_goes_through_the_shims_and_the_host_checks() {
        let table = EndpointTable::new(["a", "b", "c"]);
        let mut m = matcher::<Last>("last", "start: 5").unwrap();
        m.add_endpoints(&table).unwrap();
        assert_eq!(m.name(), "last");
        let pick = m
            .match_request(&request(4), &table, &[false, false, true])
            .unwrap();
        assert_eq!(pick, Some(1), "the last endpoint not flagged");
        // The SDK's config check runs: an unknown key is refused at create.
        let Err(err) = matcher::<Last>("last", "stat: 5") else {
            panic!("an unknown key must be refused")
        };
        let err = err.to_string();
        assert!(err.contains("stat"), "{err}");
        // A panic is caught by the shim and poisons the instance, as for a library.
        let err = m
            .match_request(&request(13), &table, &[false; 3])
            .unwrap_err()
            .to_string();
        assert!(err.contains("thirteen, call 7"), "{err}");
        let err = m
            .match_request(&request(4), &table, &[false; 3])
            .unwrap_err()
            .to_string();
        assert!(err.contains("poisoned"), "{err}");
    }

    #[test]
    fn a_bad_name_is_refused_by_the_loaders_own_check() {
        let Err(err) = matcher::<Last>("Not A Name", "") else {
            panic!("a bad name must be refused")
        };
        let err = err.to_string();
        assert!(err.contains("<in-process Not A Name>"), "{err}");
    }
}

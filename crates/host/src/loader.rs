//! Opening a library and validating its module, field by field, before anything is called.
//!
//! Libraries are **never unloaded**. Unloading a Rust `cdylib` that registered thread-local
//! destructors (std does, for `println!` among others) crashes when such a thread exits,
//! and glibc may refuse to unload it anyway; PostgreSQL and abi_stable reached the same
//! conclusion. Keeping libraries loaded also makes descriptors, vtables and names `'static`,
//! so validated function pointers can be stored without lifetimes. Each file is opened at
//! most once per process (keyed by canonical path), which also runs its entry function once.

use std::collections::HashMap;
use std::ffi::{CStr, c_char};
use std::mem::size_of;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use routerlab_core::abi::*;

use crate::discovery::is_valid_name;
use crate::{LibraryFault, PluginError};

/// Matcher, detector or scaler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PluginKind {
    /// Picks endpoints.
    Matcher,
    /// Flags unavailable endpoints.
    Detector,
    /// Sizes the fleet (ABI 1.7).
    Scaler,
}

impl PluginKind {
    /// `matcher`, `detector` or `scaler`.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Matcher => "matcher",
            PluginKind::Detector => "detector",
            PluginKind::Scaler => "scaler",
        }
    }
}

/// The validated vtable of a plugin.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Vtable {
    Matcher(RlMatcherVtable),
    Detector(RlDetectorVtable),
    Scaler(RlScalerVtable),
}

/// One plugin of a loaded library.
#[derive(Debug)]
pub struct PluginInfo {
    /// The name it is loaded by.
    pub name: String,
    /// Matcher or detector.
    pub kind: PluginKind,
    /// The plugin's own version.
    pub version: String,
    /// One line saying what it does.
    pub description: String,
    pub(crate) vtable: Vtable,
}

/// A loaded, validated library. Lives for the rest of the process.
#[derive(Debug)]
pub struct Library {
    /// The file it was loaded from, as given.
    pub path: PathBuf,
    /// ABI major of the library.
    pub abi_major: u32,
    /// ABI minor of the library.
    pub abi_minor: u32,
    /// Its plugins, in module order.
    pub plugins: Vec<PluginInfo>,
}

impl Library {
    /// The plugin called `name`, of kind `kind`.
    pub fn plugin(&self, name: &str, kind: PluginKind) -> Result<&PluginInfo, PluginError> {
        let fault = |cause| PluginError::Library {
            file: self.path.clone(),
            cause,
        };
        let Some(plugin) = self.plugins.iter().find(|p| p.name == name) else {
            return Err(fault(LibraryFault::NameMismatch {
                wanted: name.to_owned(),
                exported: self.exported_names(),
            }));
        };
        if plugin.kind != kind {
            return Err(fault(LibraryFault::WrongKind {
                plugin: name.to_owned(),
                found: plugin.kind.as_str(),
                wanted: kind.as_str(),
            }));
        }
        Ok(plugin)
    }

    /// The single plugin of kind `kind` (for a library named by path without `#NAME`).
    pub fn only_plugin(&self, kind: PluginKind) -> Result<&PluginInfo, PluginError> {
        let mut of_kind = self.plugins.iter().filter(|p| p.kind == kind);
        match (of_kind.next(), of_kind.next()) {
            (Some(plugin), None) => Ok(plugin),
            (None, _) => Err(PluginError::Library {
                file: self.path.clone(),
                cause: LibraryFault::NameMismatch {
                    wanted: format!("any {}", kind.as_str()),
                    exported: self.exported_names(),
                },
            }),
            (Some(_), Some(_)) => Err(PluginError::Library {
                file: self.path.clone(),
                cause: LibraryFault::NameMismatch {
                    wanted: format!("a single {} (use PATH#NAME)", kind.as_str()),
                    exported: self.exported_names(),
                },
            }),
        }
    }

    fn exported_names(&self) -> String {
        if self.plugins.is_empty() {
            return "nothing".into();
        }
        self.plugins
            .iter()
            .map(|p| format!("{} ({})", p.name, p.kind.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Libraries loaded so far, by canonical path. The mutex also keeps `dlopen`/`dlerror` on
/// one thread at a time (`dlerror` is not thread-safe everywhere).
static LOADED: Mutex<Option<HashMap<PathBuf, &'static Library>>> = Mutex::new(None);

/// The files of every library loaded so far (canonical paths): inputs of the run, which no
/// output may replace.
pub fn loaded_library_paths() -> Vec<PathBuf> {
    let loaded = LOADED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut paths: Vec<PathBuf> = loaded.iter().flat_map(|m| m.keys().cloned()).collect();
    paths.sort();
    paths
}

/// Loads and validates the library at `path` (once per process).
pub fn load_library(path: &Path) -> Result<&'static Library, PluginError> {
    let fault = |cause| PluginError::Library {
        file: path.to_owned(),
        cause,
    };
    let canonical = path
        .canonicalize()
        .map_err(|e| fault(LibraryFault::Open(format!("cannot read file: {e}"))))?;
    let mut loaded = LOADED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let loaded = loaded.get_or_insert_with(HashMap::new);
    if let Some(library) = loaded.get(&canonical) {
        return Ok(library);
    }
    routerlab_os::crash::loading(&canonical);
    let library = open_and_validate(path, &canonical);
    routerlab_os::crash::loaded();
    let library = library?;
    let library: &'static Library = Box::leak(Box::new(library));
    loaded.insert(canonical, library);
    Ok(library)
}

fn open_and_validate(path: &Path, canonical: &Path) -> Result<Library, PluginError> {
    let fault = |cause| PluginError::Library {
        file: path.to_owned(),
        cause,
    };
    // SAFETY: loading a library runs its initialisers. That is the point of a plugin
    // system: the user chose to trust this file. RTLD_NOW makes missing symbols fail here
    // rather than mid-replay; RTLD_LOCAL keeps one plugin's symbols from another's.
    let handle = unsafe {
        libloading::os::unix::Library::open(
            Some(canonical),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
        )
    }
    .map_err(|e| fault(LibraryFault::Open(one_line(&with_causes(&e)))))?;
    // SAFETY: the ABI fixes the entry symbol's type as `RlEntryFn`; a library that exports
    // the symbol with another type breaks the ABI it claims by using that name.
    let entry: RlEntryFn = match unsafe { handle.get::<RlEntryFn>(RL_ENTRY_SYMBOL) } {
        Ok(symbol) => *symbol,
        Err(_) => return Err(fault(LibraryFault::MissingEntry)),
    };
    // Never unloaded: see the module docs.
    std::mem::forget(handle);
    // SAFETY: calling the entry function is the ABI's first step; it takes no arguments.
    let module = unsafe { entry() };
    // SAFETY: the module pointer is what the library's entry function returned; the
    // library stays loaded, so whatever it points at lives for the process.
    unsafe { validate_module(path, module) }
}

/// Validates a module descriptor field by field and makes a [`Library`] of it. Used for
/// libraries opened from a file and for Rust plugins driven in process
/// ([`crate::in_process`]), so both pass the same checks.
///
/// # Safety
/// `module` is null or points at memory that stays valid for the rest of the process and
/// holds at least the 16-byte head every module version starts with, followed by as many
/// bytes as its `struct_size` declares; the same holds for every descriptor, string and
/// vtable it points at, as the ABI requires of a plugin.
pub(crate) unsafe fn validate_module(
    path: &Path,
    module: *const RlModule,
) -> Result<Library, PluginError> {
    let fault = |cause| PluginError::Library {
        file: path.to_owned(),
        cause,
    };
    if module.is_null() {
        return Err(fault(LibraryFault::NullModule));
    }
    // SAFETY: non-null; the magic, major and size fields lie in the first 16 bytes, present
    // in every version of the module struct; everything else is read only after the size
    // check below.
    let head = unsafe { std::ptr::read(module.cast::<[u32; 4]>()) };
    let [struct_size, magic, abi_major, abi_minor] = head;
    if magic != RL_MAGIC {
        return Err(fault(LibraryFault::BadMagic {
            found: magic,
            expected: RL_MAGIC,
        }));
    }
    if abi_major != RL_ABI_MAJOR {
        return Err(fault(LibraryFault::AbiMajor {
            found: abi_major,
            supported: RL_ABI_MAJOR,
        }));
    }
    check_size("module", struct_size, size_of::<RlModule>()).map_err(fault)?;
    // SAFETY: the module's declared size covers the whole v1 struct.
    let module = unsafe { std::ptr::read(module) };
    let mut plugins = Vec::with_capacity(module.plugin_count as usize);
    if module.plugin_count > 0 && module.plugins.is_null() {
        return Err(fault(LibraryFault::NullPointer(
            "module plugin list".into(),
        )));
    }
    for index in 0..module.plugin_count as usize {
        // SAFETY: the module promises `plugin_count` descriptor pointers at `plugins`.
        let descriptor = unsafe { *module.plugins.add(index) };
        let plugin = validate_descriptor(index, descriptor).map_err(fault)?;
        if let Some(first) = plugins
            .iter()
            .position(|p: &PluginInfo| p.name == plugin.name)
        {
            return Err(fault(LibraryFault::DuplicateName {
                index,
                first,
                name: plugin.name,
            }));
        }
        plugins.push(plugin);
    }
    Ok(Library {
        path: path.to_owned(),
        abi_major,
        abi_minor,
        plugins,
    })
}

fn validate_descriptor(
    index: usize,
    descriptor: *const RlPluginDescriptor,
) -> Result<PluginInfo, LibraryFault> {
    if descriptor.is_null() {
        return Err(LibraryFault::NullPointer(format!(
            "plugin #{index} descriptor"
        )));
    }
    // SAFETY: non-null; `struct_size` is the first field of every version.
    let declared = unsafe { std::ptr::read(descriptor.cast::<u32>()) };
    check_size(
        &format!("plugin #{index} descriptor"),
        declared,
        size_of::<RlPluginDescriptor>(),
    )?;
    // SAFETY: the declared size covers the v1 struct.
    let descriptor = unsafe { std::ptr::read(descriptor) };
    let kind = match descriptor.kind {
        RL_KIND_MATCHER => PluginKind::Matcher,
        RL_KIND_DETECTOR => PluginKind::Detector,
        RL_KIND_SCALER => PluginKind::Scaler,
        other => return Err(LibraryFault::UnknownKind { index, kind: other }),
    };
    if descriptor.name.is_null() {
        return Err(LibraryFault::NullPointer(format!("plugin #{index} name")));
    }
    // SAFETY: descriptor strings are static and NUL-terminated by the ABI.
    let name = unsafe { c_text(descriptor.name) };
    if !is_valid_name(&name) {
        return Err(LibraryFault::BadName { index, name });
    }
    if descriptor.vtable.is_null() {
        return Err(LibraryFault::NullPointer(format!("plugin `{name}` vtable")));
    }
    let missing = |slot| LibraryFault::MissingEntryPoint {
        plugin: name.clone(),
        slot,
    };
    // SAFETY: non-null; `struct_size` is the first field of both vtables.
    let vtable_size = unsafe { std::ptr::read(descriptor.vtable.cast::<u32>()) };
    let vtable = match kind {
        PluginKind::Matcher => {
            check_size(
                &format!("plugin `{name}` vtable"),
                vtable_size,
                RL_MATCHER_VTABLE_SIZE_V1_0 as usize,
            )?;
            let mut v = RlMatcherVtable {
                struct_size: 0,
                _reserved: 0,
                create: None,
                destroy: None,
                add_endpoints: None,
                remove_endpoints: None,
                match_request: None,
                update: None,
                on_complete: None,
                on_first_token: None,
                match_update: None,
                create_with: None,
            };
            // SAFETY: the plugin declares `vtable_size` readable bytes (at least the v1.0
            // vtable); only as many as both sides know are copied, and slots it did not
            // write stay NULL (unsupported).
            unsafe { copy_prefix(descriptor.vtable, &mut v, vtable_size) };
            for (slot, present) in [
                // A 1.2 plugin may provide only `create_with`.
                ("create", v.create.is_some() || v.create_with.is_some()),
                ("destroy", v.destroy.is_some()),
                ("add_endpoints", v.add_endpoints.is_some()),
                ("remove_endpoints", v.remove_endpoints.is_some()),
                ("match", v.match_request.is_some()),
                ("update", v.update.is_some()),
            ] {
                if !present {
                    return Err(missing(slot));
                }
            }
            Vtable::Matcher(v)
        }
        PluginKind::Detector => {
            check_size(
                &format!("plugin `{name}` vtable"),
                vtable_size,
                RL_DETECTOR_VTABLE_SIZE_V1_0 as usize,
            )?;
            let mut v = RlDetectorVtable {
                struct_size: 0,
                _reserved: 0,
                create: None,
                destroy: None,
                detect: None,
                create_with: None,
            };
            // SAFETY: as for the matcher vtable.
            unsafe { copy_prefix(descriptor.vtable, &mut v, vtable_size) };
            for (slot, present) in [
                ("create", v.create.is_some() || v.create_with.is_some()),
                ("destroy", v.destroy.is_some()),
                ("detect", v.detect.is_some()),
            ] {
                if !present {
                    return Err(missing(slot));
                }
            }
            Vtable::Detector(v)
        }
        PluginKind::Scaler => {
            check_size(
                &format!("plugin `{name}` vtable"),
                vtable_size,
                RL_SCALER_VTABLE_SIZE_V1_7 as usize,
            )?;
            let mut v = RlScalerVtable {
                struct_size: 0,
                _reserved: 0,
                create: None,
                destroy: None,
                create_with: None,
                scale: None,
            };
            // SAFETY: as for the matcher vtable.
            unsafe { copy_prefix(descriptor.vtable, &mut v, vtable_size) };
            for (slot, present) in [
                ("create", v.create.is_some() || v.create_with.is_some()),
                ("destroy", v.destroy.is_some()),
                ("scale", v.scale.is_some()),
            ] {
                if !present {
                    return Err(missing(slot));
                }
            }
            Vtable::Scaler(v)
        }
    };
    Ok(PluginInfo {
        // SAFETY: as for `name`; NULL reads as empty.
        version: unsafe { c_text(descriptor.version) },
        // SAFETY: as for `name`; NULL reads as empty.
        description: unsafe { c_text(descriptor.description) },
        name,
        kind,
        vtable,
    })
}

/// Copies the first `min(declared, size_of::<T>())` bytes at `from` over `to`: a struct
/// from a plugin of another minor, read no further than either side knows.
///
/// # Safety
/// `from` must point at `declared` readable bytes; `T` must be valid for any bytes (plain
/// integers and nullable function pointers), so a partial overwrite is a valid `T`.
unsafe fn copy_prefix<T>(from: *const std::ffi::c_void, to: &mut T, declared: u32) {
    let len = (declared as usize).min(size_of::<T>());
    // SAFETY: guaranteed by the caller; `to` is a distinct, writable `T`.
    unsafe { std::ptr::copy_nonoverlapping(from.cast::<u8>(), (to as *mut T).cast::<u8>(), len) };
}

fn check_size(what: &str, found: u32, minimum: usize) -> Result<(), LibraryFault> {
    if (found as usize) < minimum {
        return Err(LibraryFault::StructSize {
            what: what.to_owned(),
            found,
            minimum,
        });
    }
    Ok(())
}

/// Reads a static NUL-terminated string (lossy UTF-8; NULL is empty).
///
/// # Safety
/// `ptr` must be NULL or point at a NUL-terminated string that outlives the process.
unsafe fn c_text(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// `e` and every error it wraps: libloading's `dlopen failed` carries `dlerror()`'s text
/// (the missing dependency, the undefined symbol, the bad ELF header) as its source.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

//! From a plugin name to a file: the naming rule and the search path.
//!
//! The rule is fixed so that a third party knows what file to build: plugin `max-kv-cache`
//! lives in `librouterlab_max_kv_cache.so` on Linux and `librouterlab_max_kv_cache.dylib` on
//! macOS (`routerlab_` + the name with `-` turned into `_`, between the platform's prefix and
//! suffix; cargo names a `cdylib` the same way). Directories are searched in this order and
//! the first existing file wins:
//!
//! 1. each directory of `ROUTERLAB_PLUGIN_PATH` (the platform's path-list syntax);
//! 2. the directory of the running executable, where `cargo build` puts both the `routerlab`
//!    binary and the plugin libraries of this workspace;
//! 3. when that directory is `deps` (a test or bench binary), its parent;
//! 4. `../lib/routerlab` from the executable's directory: an installed layout
//!    (`PREFIX/bin/routerlab`, `PREFIX/lib/routerlab/*.so`, what `cargo xtask install`
//!    writes);
//! 5. the per-user directory `$XDG_DATA_HOME/routerlab/plugins` (by default
//!    `~/.local/share/routerlab/plugins`), where a user drops third-party plugins without
//!    setting anything.
//!
//! Built-in plugins come first, so a file in the user's directory cannot shadow one.
//!
//! A spec that contains a path separator, or ends in the library suffix, is a path and is
//! used as given; `PATH#NAME` picks one plugin of a library that exports several.

use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::PluginError;

/// The environment variable holding extra plugin directories.
pub const PLUGIN_PATH_ENV: &str = "ROUTERLAB_PLUGIN_PATH";

/// What a user typed to name a plugin: a name to search for, or a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSpec {
    /// A plugin name, looked up on the search path.
    Name(String),
    /// A library file, with an optional plugin name inside it.
    Path {
        /// The library file.
        file: PathBuf,
        /// The plugin within it (`PATH#NAME`), if given.
        name: Option<String>,
    },
}

impl PluginSpec {
    /// Parses a command-line spec.
    pub fn parse(spec: &str) -> Result<PluginSpec, PluginError> {
        let looks_like_path = spec.contains(std::path::MAIN_SEPARATOR)
            || spec.contains('/')
            || spec.contains(DLL_SUFFIX);
        if looks_like_path {
            let (file, name) = match spec.rsplit_once('#') {
                Some((file, name)) => (file, Some(name.to_owned())),
                None => (spec, None),
            };
            return Ok(PluginSpec::Path {
                file: PathBuf::from(file),
                name,
            });
        }
        if !is_valid_name(spec) {
            return Err(PluginError::InvalidName {
                name: spec.to_owned(),
            });
        }
        Ok(PluginSpec::Name(spec.to_owned()))
    }
}

/// Whether `name` is a valid plugin name: `[a-z0-9-]{1,64}`.
pub fn is_valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The file name that holds plugin `name` on this platform.
pub fn library_file_name(name: &str) -> String {
    format!(
        "{DLL_PREFIX}routerlab_{}{DLL_SUFFIX}",
        name.replace('-', "_")
    )
}

/// The plugin name a library file holds by the naming rule (`librouterlab_least_tokens.so`:
/// `least-tokens`), if it follows it.
fn plugin_name_of_file(file_name: &str) -> Option<String> {
    let stem = file_name
        .strip_prefix(&format!("{DLL_PREFIX}routerlab_"))?
        .strip_suffix(DLL_SUFFIX)?;
    Some(stem.replace('_', "-"))
}

/// Edit distance between two names, by characters: insertions, deletions, substitutions
/// and swaps of two neighbours (`lpc` is one edit from `lcp`).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            d[i * width + j] = if i == 0 || j == 0 {
                i + j
            } else {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                let mut best = (d[(i - 1) * width + j] + 1)
                    .min(d[i * width + j - 1] + 1)
                    .min(d[(i - 1) * width + j - 1] + cost);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    best = best.min(d[(i - 2) * width + j - 2] + 1);
                }
                best
            };
        }
    }
    d[a.len() * width + b.len()]
}

/// Whether a file name follows the plugin naming rule (so `plugins` lists it).
pub fn is_plugin_file_name(file_name: &str) -> bool {
    file_name.starts_with(&format!("{DLL_PREFIX}routerlab_")) && file_name.ends_with(DLL_SUFFIX)
}

/// The ordered list of directories searched for plugins.
#[derive(Debug, Clone, Default)]
pub struct SearchPath {
    dirs: Vec<PathBuf>,
}

impl SearchPath {
    /// The search path of this process: see the module documentation for the order.
    pub fn from_env() -> SearchPath {
        let exe = std::env::current_exe().ok();
        let user = user_plugin_dir(
            std::env::var_os("XDG_DATA_HOME").as_deref(),
            std::env::var_os("HOME").as_deref(),
        );
        SearchPath::for_process(
            std::env::var_os(PLUGIN_PATH_ENV).as_ref(),
            exe.as_deref(),
            user,
        )
    }

    /// The search path for an executable at `exe`, given the value of
    /// `ROUTERLAB_PLUGIN_PATH` and the per-user directory.
    pub fn for_process(
        plugin_path: Option<&OsString>,
        exe: Option<&Path>,
        user_dir: Option<PathBuf>,
    ) -> SearchPath {
        let mut dirs: Vec<PathBuf> = plugin_path.map(split).unwrap_or_default();
        if let Some(exe_dir) = exe.and_then(Path::parent) {
            let parent = (exe_dir.file_name() == Some("deps".as_ref()))
                .then(|| exe_dir.parent().map(Path::to_owned))
                .flatten();
            dirs.push(exe_dir.to_owned());
            dirs.extend(parent);
            dirs.push(exe_dir.join("..").join("lib").join("routerlab"));
        }
        dirs.extend(user_dir);
        SearchPath { dirs }
    }

    /// Exactly these directories, in order.
    pub fn new(dirs: Vec<PathBuf>) -> SearchPath {
        SearchPath { dirs }
    }

    /// The directories, in search order.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The first existing file for plugin `name`, or every path tried.
    pub fn resolve(&self, name: &str) -> Result<PathBuf, PluginError> {
        let file = library_file_name(name);
        let tried: Vec<PathBuf> = self.dirs.iter().map(|dir| dir.join(&file)).collect();
        match tried.iter().find(|p| p.is_file()) {
            Some(found) => Ok(found.clone()),
            None => Err(PluginError::NotFound {
                name: name.to_owned(),
                tried,
                nearest: self.nearest_names(name),
            }),
        }
    }

    /// Up to three plugin names on the search path that look like `name`: one or two
    /// edits away (a third of its length, at least one), or containing it; nearest first.
    pub fn nearest_names(&self, name: &str) -> Vec<String> {
        let allowed = (name.chars().count() / 3).clamp(1, 3);
        let mut scored: Vec<(usize, String)> = self
            .candidate_files()
            .iter()
            .filter_map(|p| p.file_name()?.to_str().and_then(plugin_name_of_file))
            .filter_map(|candidate| {
                let distance = edit_distance(name, &candidate);
                let near = distance <= allowed || (name.len() >= 3 && candidate.contains(name));
                near.then_some((distance, candidate))
            })
            .collect();
        scored.sort();
        scored.dedup();
        scored.into_iter().take(3).map(|(_, n)| n).collect()
    }

    /// Every plugin library in the search directories, first occurrence of a file name only
    /// (a later directory's copy is shadowed, exactly as `resolve` would shadow it).
    pub fn candidate_files(&self) -> Vec<PathBuf> {
        let mut seen = std::collections::BTreeSet::new();
        let mut files = Vec::new();
        for dir in &self.dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut in_dir: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(is_plugin_file_name)
                })
                .collect();
            in_dir.sort();
            for path in in_dir {
                if seen.insert(path.file_name().map(OsString::from)) {
                    files.push(path);
                }
            }
        }
        files
    }
}

/// `$XDG_DATA_HOME/routerlab/plugins`, or `$HOME/.local/share/routerlab/plugins` when
/// `XDG_DATA_HOME` is unset or empty (the XDG rule); `None` without either.
pub fn user_plugin_dir(
    xdg_data_home: Option<&std::ffi::OsStr>,
    home: Option<&std::ffi::OsStr>,
) -> Option<PathBuf> {
    let data = match xdg_data_home.filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(home.filter(|v| !v.is_empty())?).join(".local/share"),
    };
    Some(data.join("routerlab").join("plugins"))
}

fn split(value: &OsString) -> Vec<PathBuf> {
    std::env::split_paths(value)
        .filter(|p| !p.as_os_str().is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_platform_file_names() {
        let expected = format!("{DLL_PREFIX}routerlab_max_kv_cache{DLL_SUFFIX}");
        assert_eq!(library_file_name("max-kv-cache"), expected);
        assert!(is_plugin_file_name(&expected));
        assert!(!is_plugin_file_name(&format!(
            "{DLL_PREFIX}other{DLL_SUFFIX}"
        )));
    }

    #[test]
    fn specs_are_names_or_paths() {
        assert_eq!(
            PluginSpec::parse("lcp").unwrap(),
            PluginSpec::Name("lcp".into())
        );
        assert_eq!(
            PluginSpec::parse("./x/libfoo.so#bar").unwrap(),
            PluginSpec::Path {
                file: "./x/libfoo.so".into(),
                name: Some("bar".into())
            }
        );
        let err = PluginSpec::parse("Bad_Name").unwrap_err().to_string();
        assert!(err.contains("invalid plugin name `Bad_Name`"), "{err}");
    }

    #[test]
    fn the_search_order_is_env_then_the_binary_then_the_install_then_the_user() {
        let env = OsString::from("/opt/a:/opt/b");
        let search = SearchPath::for_process(
            Some(&env),
            Some(Path::new("/usr/local/bin/routerlab")),
            user_plugin_dir(None, Some("/home/u".as_ref())),
        );
        let dirs: Vec<&str> = search.dirs().iter().map(|d| d.to_str().unwrap()).collect();
        assert_eq!(
            dirs,
            [
                "/opt/a",
                "/opt/b",
                "/usr/local/bin",
                "/usr/local/bin/../lib/routerlab",
                "/home/u/.local/share/routerlab/plugins"
            ]
        );
        assert_eq!(
            user_plugin_dir(Some("/data".as_ref()), Some("/home/u".as_ref())),
            Some(PathBuf::from("/data/routerlab/plugins"))
        );
        assert_eq!(user_plugin_dir(Some("".as_ref()), None), None);
        // A test binary in target/debug/deps also searches target/debug.
        let search = SearchPath::for_process(None, Some(Path::new("/t/debug/deps/x")), None);
        assert_eq!(search.dirs()[1], Path::new("/t/debug"));
    }

    #[test]
    fn not_found_lists_every_path_tried() {
        let search = SearchPath::new(vec!["/nonexistent/a".into(), "/nonexistent/b".into()]);
        let err = search.resolve("lcp").unwrap_err().to_string();
        let file = library_file_name("lcp");
        assert_eq!(
            err,
            format!("plugin `lcp` not found; tried: /nonexistent/a/{file}, /nonexistent/b/{file}")
        );
    }
}

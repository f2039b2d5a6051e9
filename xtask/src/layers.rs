//! The workspace's layering rules, checked against what cargo itself reads.
//!
//! A scan of `[dependencies]` sections by hand misses `[target.*.dependencies]`,
//! `[dependencies.x]` tables and dev- and build-dependencies, so a rule could pass while
//! broken. `cargo metadata` resolves every table of every manifest; this module turns its
//! answer into a list of broken rules, one line each, for the tidy tests.

use std::collections::BTreeSet;
use std::path::Path;

/// The routerlab crates each library crate may depend on (directly; the closure follows).
/// A crate under `crates/` that is not listed here breaks a rule until it is given a layer.
const LAYERS: &[(&str, &[&str])] = &[
    ("crates/core", &[]),
    ("crates/os", &[]),
    ("crates/policy-kit", &["routerlab-core"]),
    ("crates/fixture-plugins", &["routerlab-core"]),
    ("crates/host", &["routerlab-core", "routerlab-os"]),
    ("crates/trace", &["routerlab-core", "routerlab-os"]),
    ("crates/engine", &["routerlab-core"]),
    ("crates/route", &["routerlab-core", "routerlab-host"]),
    // The report records runs in its own types: no library type is part of the schema.
    ("crates/report", &["routerlab-core"]),
    (
        "crates/sim",
        &[
            "routerlab-core",
            "routerlab-os",
            "routerlab-host",
            "routerlab-policy-kit",
            "routerlab-trace",
            "routerlab-engine",
            "routerlab-route",
            "routerlab-report",
        ],
    ),
    // Pictures are drawn from finished reports and records only.
    ("crates/plot", &["routerlab-report"]),
    // The deployed router: never the simulator.
    (
        "crates/live",
        &[
            "routerlab-core",
            "routerlab-os",
            "routerlab-policy-kit",
            "routerlab-host",
            "routerlab-trace",
            "routerlab-engine",
            "routerlab-route",
            "routerlab-report",
        ],
    ),
    // Measured runs and the fit: replays the fleet a run was served by, never live.
    (
        "crates/calibrate",
        &[
            "routerlab-core",
            "routerlab-host",
            "routerlab-trace",
            "routerlab-engine",
            "routerlab-sim",
        ],
    ),
    // How a run is described: over the simulator it resolves into (and the measured runs
    // a trace may name), never live.
    (
        "crates/experiment",
        &[
            "routerlab-core",
            "routerlab-host",
            "routerlab-trace",
            "routerlab-engine",
            "routerlab-route",
            "routerlab-report",
            "routerlab-sim",
            "routerlab-calibrate",
        ],
    ),
    // What the command line's tests and benches share: nothing of routerlab's.
    ("crates/testkit", &[]),
    ("crates/cli", &["*"]),
];

/// Third-party crates only one crate (or two) may use, of any dependency kind.
const OWNED: &[(&str, &[&str])] = &[
    ("libloading", &["crates/host"]),
    // The experiment crate's value enums derive `ValueEnum` behind its `clap` feature,
    // which only the command line turns on.
    ("clap", &["crates/cli", "crates/experiment"]),
    ("clap_complete", &["crates/cli"]),
    ("tokio", &["crates/live", "crates/cli"]),
    ("hyper", &["crates/live"]),
    ("hyper-util", &["crates/live"]),
    ("zmq", &["crates/live"]),
    ("rmp-serde", &["crates/live"]),
    ("postcard", &["crates/live"]),
    ("tokenizers", &["crates/live", "crates/cli"]),
];

/// A pair that must never be linked, directly or through other routerlab crates.
const NEVER: &[(&str, &str)] = &[("crates/live", "routerlab-sim")];

/// The kind of a dependency, as cargo reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `[dependencies]` (of any target).
    Normal,
    /// `[dev-dependencies]`.
    Dev,
    /// `[build-dependencies]`.
    Build,
}

/// One dependency of a workspace crate.
#[derive(Debug)]
pub struct Dep {
    /// The package name.
    pub name: String,
    /// Which table it came from.
    pub kind: Kind,
}

/// One workspace member.
#[derive(Debug)]
pub struct Crate {
    /// Its package name.
    pub name: String,
    /// Its directory relative to the workspace root, `/`-separated.
    pub dir: String,
    /// Every dependency of every kind and target.
    pub deps: Vec<Dep>,
    /// Whether its manifest says `[lints] workspace = true`.
    pub inherits_lints: bool,
}

/// The members of a workspace.
#[derive(Debug)]
pub struct Workspace {
    /// Every member.
    pub crates: Vec<Crate>,
}

impl Workspace {
    /// Runs `cargo metadata --no-deps` on `manifest` (which fetches nothing) and reads each
    /// member's manifest for its `[lints]` table, which cargo metadata does not report.
    pub fn read(manifest: &Path) -> Result<Workspace, String> {
        let meta = cargo_metadata::MetadataCommand::new()
            .manifest_path(manifest)
            .no_deps()
            .exec()
            .map_err(|e| format!("cargo metadata on {}: {e}", manifest.display()))?;
        let root = meta.workspace_root.as_std_path().to_owned();
        let mut crates = Vec::new();
        for package in meta.workspace_packages() {
            let manifest_path = package.manifest_path.as_std_path();
            let dir = manifest_path
                .parent()
                .and_then(|d| d.strip_prefix(&root).ok())
                .ok_or_else(|| format!("{} is outside the workspace", manifest_path.display()))?
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(manifest_path)
                .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
            let table: toml::Table = text
                .parse()
                .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
            let inherits_lints = table
                .get("lints")
                .and_then(|l| l.get("workspace"))
                .and_then(toml::Value::as_bool)
                == Some(true);
            let deps = package
                .dependencies
                .iter()
                .map(|d| Dep {
                    name: d.name.clone(),
                    kind: match d.kind {
                        cargo_metadata::DependencyKind::Development => Kind::Dev,
                        cargo_metadata::DependencyKind::Build => Kind::Build,
                        _ => Kind::Normal,
                    },
                })
                .collect();
            crates.push(Crate {
                name: package.name.to_string(),
                dir,
                deps,
                inherits_lints,
            });
        }
        crates.sort_by(|a, b| a.dir.cmp(&b.dir));
        Ok(Workspace { crates })
    }

    fn by_name(&self, name: &str) -> Option<&Crate> {
        self.crates.iter().find(|c| c.name == name)
    }
}

/// Every broken rule, one line each, in a fixed order; empty when the workspace holds.
pub fn violations(ws: &Workspace) -> Vec<String> {
    let mut out = Vec::new();
    for krate in &ws.crates {
        if !krate.inherits_lints {
            out.push(format!(
                "{}: must inherit the workspace lints (`[lints] workspace = true`)",
                krate.dir
            ));
        }
        for dep in &krate.deps {
            if let Some((_, owners)) = OWNED.iter().find(|(name, _)| *name == dep.name)
                && !owners.contains(&krate.dir.as_str())
            {
                out.push(format!(
                    "{}: only {} may depend on {}",
                    krate.dir,
                    owners.join(" and "),
                    dep.name
                ));
            }
        }
        if !krate.dir.starts_with("crates/") {
            continue;
        }
        let Some((_, may)) = LAYERS.iter().find(|(dir, _)| *dir == krate.dir) else {
            out.push(format!(
                "{}: has no layer in the rules (xtask/src/layers.rs, ARCHITECTURE.md)",
                krate.dir
            ));
            continue;
        };
        if may.contains(&"*") {
            continue;
        }
        for dep in krate
            .deps
            .iter()
            .filter(|d| d.name.starts_with("routerlab-"))
        {
            // Tests may load a plugin crate (built-in policies are rlibs too).
            let plugin = ws
                .by_name(&dep.name)
                .is_some_and(|c| c.dir.starts_with("plugins/"));
            let allowed = may.contains(&dep.name.as_str()) || (dep.kind == Kind::Dev && plugin);
            if !allowed {
                out.push(format!("{} must not depend on {}", krate.dir, dep.name));
            }
        }
    }
    for (dir, forbidden) in NEVER {
        let Some(krate) = ws.crates.iter().find(|c| c.dir == *dir) else {
            continue;
        };
        let reach = closure(ws, krate);
        if reach.contains(*forbidden) {
            out.push(format!(
                "{dir} must never link {forbidden}, not even indirectly"
            ));
        }
    }
    out
}

/// The routerlab crates `krate` links through normal and build dependencies.
fn closure<'a>(ws: &'a Workspace, krate: &'a Crate) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![krate];
    while let Some(c) = todo.pop() {
        for dep in c.deps.iter().filter(|d| d.kind != Kind::Dev) {
            if let Some(next) = ws.by_name(&dep.name)
                && seen.insert(next.name.as_str())
            {
                todo.push(next);
            }
        }
    }
    seen
}

//! `routerlab plugins`: what is on the search path, and what failed to load there.

use std::path::PathBuf;

use clap::Args;
use routerlab_host::{SearchPath, list_libraries};

use crate::exit::Failure;

/// `routerlab plugins`.
#[derive(Args, Debug)]
pub struct PluginsArgs {
    /// Search only these directories (repeatable) instead of the default search path.
    #[arg(long, value_name = "DIR")]
    pub path: Vec<PathBuf>,
}

/// Lists every plugin on the search path (or `--path` directories).
pub fn run(args: PluginsArgs) -> Result<(), Failure> {
    let search = if args.path.is_empty() {
        SearchPath::from_env()
    } else {
        SearchPath::new(args.path)
    };
    let mut rows = vec![[
        "NAME".to_owned(),
        "KIND".into(),
        "VERSION".into(),
        "ABI".into(),
        "FILE".into(),
    ]];
    let mut failures = 0;
    for library in list_libraries(&search) {
        match library {
            Ok(library) => {
                for plugin in &library.plugins {
                    rows.push([
                        plugin.name.clone(),
                        plugin.kind.as_str().to_owned(),
                        plugin.version.clone(),
                        format!("{}.{}", library.abi_major, library.abi_minor),
                        library.path.display().to_string(),
                    ]);
                }
            }
            Err(e) => {
                failures += 1;
                eprintln!("error: {e}");
            }
        }
    }
    if rows.len() == 1 && failures == 0 {
        let dirs: Vec<String> = search
            .dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        return Err(Failure::input(format!(
            "no plugins found in: {} (build them with `cargo build --workspace`, or set ROUTERLAB_PLUGIN_PATH)",
            dirs.join(", ")
        )));
    }
    let widths: Vec<usize> = (0..5)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut table = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        table.push_str(line.join("  ").trim_end());
        table.push('\n');
    }
    crate::cmd::print_stdout(&table, "the plugin list")?;
    if failures > 0 {
        return Err(Failure::input(format!(
            "{failures} plugin librar{} could not be loaded (see above)",
            if failures == 1 { "y" } else { "ies" }
        )));
    }
    Ok(())
}

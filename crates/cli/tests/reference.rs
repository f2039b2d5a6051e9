//! docs/reference/cli.md is every command's `--help`, rendered from the clap definitions:
//! the reference cannot drift from the flags. `cargo xtask codegen` rewrites it (it runs
//! this test with `ROUTERLAB_WRITE_REFERENCE` set).

use clap::CommandFactory as _;

/// The reference: the top-level help, then each command's long help, in the order
/// `routerlab --help` lists them.
fn reference() -> String {
    let mut root = routerlab_cli::Cli::command()
        .term_width(100)
        .bin_name("routerlab");
    root.build();
    let mut out = String::from(
        "# Command-line reference\n\n\
         Generated from the code by `cargo xtask codegen`; a test fails when it is stale. Each\n\
         section is what `routerlab COMMAND --help` prints. The guide (`docs/guide/`) explains\n\
         when to use what; [STABILITY.md](../../STABILITY.md) says which flags are stable.\n\n",
    );
    out.push_str("## routerlab\n\n```text\n");
    out.push_str(&root.render_long_help().to_string());
    out.push_str("```\n");
    for sub in root.get_subcommands_mut() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let name = sub.get_name().to_owned();
        out.push_str(&format!("\n## routerlab {name}\n\n```text\n"));
        out.push_str(&sub.render_long_help().to_string());
        out.push_str("```\n");
    }
    // Trailing spaces (clap pads some lines) would be lost by editors; drop them.
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn the_cli_reference_is_generated_from_the_flags() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference/cli.md");
    let fresh = reference();
    if std::env::var_os("ROUTERLAB_WRITE_REFERENCE").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "docs/reference/cli.md is stale: run `cargo xtask codegen` and commit it"
    );
    // Every command is there, with its flags.
    for needle in [
        "## routerlab replay",
        "## routerlab serve",
        "## routerlab calibrate",
        "--matcher <",
        "Usage: routerlab replay",
    ] {
        assert!(fresh.contains(needle), "the reference lacks {needle}");
    }
}

//! The installed layout, as `cargo xtask install --prefix DIR` writes it: the binary in
//! `DIR/bin`, the built-in plugins in `DIR/lib/routerlab`, a third-party plugin in the
//! user's plugin directory. Run from anywhere, with nothing in the environment pointing at
//! the plugins, it finds them all.

mod support;

use std::path::Path;
use std::process::Command;

use support::{project_trace, texts};

#[test]
fn an_installed_binary_finds_the_built_in_and_the_users_plugins() {
    let root = std::env::temp_dir().join(format!("routerlab-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (bin, lib) = (root.join("prefix/bin"), root.join("prefix/lib/routerlab"));
    let user = root.join("home/.local/share/routerlab/plugins");
    for dir in [&bin, &lib, &user] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let built = Path::new(env!("CARGO_BIN_EXE_routerlab"));
    let installed = bin.join(built.file_name().unwrap());
    std::fs::copy(built, &installed).unwrap();
    let third_party = format!(
        "{}routerlab_least_tokens{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    for entry in std::fs::read_dir(built.parent().unwrap()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with(&format!("{}routerlab_", std::env::consts::DLL_PREFIX))
            && name.ends_with(std::env::consts::DLL_SUFFIX)
        {
            let dir = if name == third_party { &user } else { &lib };
            std::fs::copy(&path, dir.join(&name)).unwrap();
        }
    }
    let run = |args: &[&str]| {
        Command::new(&installed)
            .args(args)
            .current_dir(&root)
            .env_remove("ROUTERLAB_PLUGIN_PATH")
            .env_remove("XDG_DATA_HOME")
            .env("HOME", root.join("home"))
            .output()
            .unwrap()
    };
    let output = run(&["plugins"]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} not listed:\n{stdout}"))
            .to_owned()
    };
    assert!(line("lcp").contains("lib/routerlab"), "{stdout}");
    assert!(
        line("least-tokens").contains(".local/share/routerlab/plugins"),
        "{stdout}"
    );
    let trace = project_trace("mooncake-small.jsonl");
    let output = run(&[
        "replay",
        "--matcher",
        "least-tokens",
        "--trace",
        &trace.to_string_lossy(),
    ]);
    assert!(output.status.success(), "{}", texts(&output).1);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn completions_are_generated_for_each_shell() {
    for (shell, marker) in [
        ("bash", "_routerlab()"),
        ("zsh", "#compdef routerlab"),
        ("fish", "complete -c routerlab"),
    ] {
        let output = support::routerlab(&["completions", shell]);
        let (stdout, stderr) = texts(&output);
        assert!(output.status.success(), "{shell}: {stderr}");
        assert!(stdout.contains(marker), "{shell}");
        assert!(
            stdout.contains("compare") && stdout.contains("inspect"),
            "{shell}"
        );
    }
}

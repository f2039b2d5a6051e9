//! A plugin author's path, from the guide alone (docs/guide/plugins.md): a crate of one's
//! own in a scratch directory outside the workspace, made of the files the guide shows
//! (`Cargo.toml`, `src/lib.rs`, `tests/snapshot.rs`) and a trace copied in. The first
//! `cargo test` has no snapshot to compare with and fails saying so; the run the guide says
//! to make stores it; `cargo test` then passes; a change to the policy fails it, with
//! `cargo test` alone: the library the test loads is the one just built.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
}

/// `cargo test` in `dir`, offline (the workspace's lock is copied in), with a target
/// directory of its own that later runs reuse; every test binary runs, even after one
/// failed (the example's unit test fails too once the policy changes). `insta_update` is
/// `INSTA_UPDATE` (`new` unless given: insta's default outside CI).
fn cargo_test(dir: &Path, target: &Path, insta_update: Option<&str>) -> Output {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(dir)
        .args(["test", "--offline", "--no-fail-fast"])
        .env("CARGO_TARGET_DIR", target)
        // insta's default outside CI: write the proposed snapshot beside the stored one.
        .env_remove("CI")
        .env("INSTA_UPDATE", insta_update.unwrap_or("new"))
        .output()
        .expect("run cargo")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn a_crate_made_from_the_guide_stores_then_checks_its_snapshot() {
    // Outside the workspace's directory (cargo would take it for a member).
    let scratch =
        std::env::temp_dir().join(format!("routerlab-plugin-author-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let krate = scratch.join("my-least-tokens");
    let example = root().join("examples/rust-plugin");
    let manifest = std::fs::read_to_string(example.join("Cargo.standalone.toml"))
        .expect("the guide's Cargo.toml");
    let checkout = root().canonicalize().expect("the checkout");
    let manifest = manifest.replace("../routerlab", &checkout.to_string_lossy());
    std::fs::create_dir_all(&krate).expect("mkdir");
    std::fs::write(krate.join("Cargo.toml"), manifest).expect("write");
    for file in ["src/lib.rs", "tests/snapshot.rs"] {
        copy(&example.join(file), &krate.join(file));
    }
    // The guide's step: a trace of your own into tests/ (here one from the checkout).
    copy(
        &root().join("traces/mooncake-small.jsonl"),
        &krate.join("tests/trace.jsonl"),
    );
    copy(&root().join("Cargo.lock"), &krate.join("Cargo.lock"));
    // Kept between runs, so only the first compiles the dependencies.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-author-target");
    let stored = krate.join("tests/snapshots/snapshot__least_tokens_on_a_small_trace.snap");

    // No snapshot yet: the test fails and proposes one.
    let first = cargo_test(&krate, &target, None);
    let said = text(&first);
    assert!(!first.status.success(), "{said}");
    assert!(said.contains("Snapshot Summary"), "{said}");
    assert!(stored.with_extension("snap.new").exists(), "{said}");
    assert!(!stored.exists());

    // The guide's command stores it.
    let store = cargo_test(&krate, &target, Some("always"));
    assert!(store.status.success(), "{}", text(&store));
    // The same policy on the same trace as the workspace's copy of the example: the same
    // report (insta's header names the test file by its path, which differs).
    let report = |path: &Path| {
        let text = std::fs::read_to_string(path).expect("a snapshot");
        text.splitn(3, "---\n")
            .nth(2)
            .expect("insta's header")
            .to_owned()
    };
    assert_eq!(
        report(&stored),
        report(&example.join("tests/snapshots/snapshot__least_tokens_on_a_small_trace.snap"))
    );

    let again = cargo_test(&krate, &target, None);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        text(&again).contains("test least_tokens_on_a_small_trace ... ok"),
        "{}",
        text(&again)
    );

    // The tie-break turned around: a different policy, so different statistics.
    let lib = krate.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).expect("lib.rs");
    assert!(
        source.contains(".min_by_key("),
        "the example changed: {source}"
    );
    std::fs::write(&lib, source.replace(".min_by_key(", ".max_by_key(")).expect("write");

    let changed = cargo_test(&krate, &target, None);
    let said = text(&changed);
    assert!(!changed.status.success(), "{said}");
    assert!(
        said.contains("test least_tokens_on_a_small_trace ... FAILED")
            && said.contains("Snapshot Summary"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

//! A plugin author's loop, as the README describes it: the example plugin as a crate of its
//! own outside the workspace (`examples/rust-plugin/Cargo.standalone.toml`, the README's
//! `Cargo.toml`), its snapshot test passing with `cargo test`; then a change to the policy,
//! `cargo test` alone again, and the snapshot test must fail: the library it loads is the
//! one just built, never the previous one.

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
/// failed (the example's unit test fails too once the policy changes).
fn cargo_test(dir: &Path, target: &Path) -> Output {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(dir)
        .args(["test", "--offline", "--no-fail-fast"])
        .env("CARGO_TARGET_DIR", target)
        // insta's default outside CI: write the proposed snapshot beside the stored one.
        .env_remove("CI")
        .env("INSTA_UPDATE", "new")
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
fn a_changed_policy_fails_its_snapshot_with_cargo_test_alone() {
    // Outside the workspace's directory (cargo would take it for a member), the trace at
    // `../../traces/chat.jsonl` from the crate, as in the workspace.
    let scratch =
        std::env::temp_dir().join(format!("routerlab-plugin-author-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let krate = scratch.join("plugins/my-least-tokens");
    let example = root().join("examples/rust-plugin");
    let manifest = std::fs::read_to_string(example.join("Cargo.standalone.toml"))
        .expect("the README's Cargo.toml");
    let checkout = root().canonicalize().expect("the checkout");
    let manifest = manifest.replace("../routerlab", &checkout.to_string_lossy());
    std::fs::create_dir_all(&krate).expect("mkdir");
    std::fs::write(krate.join("Cargo.toml"), manifest).expect("write");
    for file in [
        "src/lib.rs",
        "tests/snapshot.rs",
        "tests/snapshots/snapshot__least_tokens_on_the_chat_trace.snap",
    ] {
        copy(&example.join(file), &krate.join(file));
    }
    copy(
        &root().join("traces/chat.jsonl"),
        &scratch.join("traces/chat.jsonl"),
    );
    copy(&root().join("Cargo.lock"), &krate.join("Cargo.lock"));
    // Kept between runs, so only the first compiles the dependencies.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-author-target");

    let first = cargo_test(&krate, &target);
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        text(&first).contains("test least_tokens_on_the_chat_trace ... ok"),
        "{}",
        text(&first)
    );

    // The tie-break turned around: a different policy, so different statistics.
    let lib = krate.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).expect("lib.rs");
    assert!(
        source.contains(".min_by_key("),
        "the example changed: {source}"
    );
    std::fs::write(&lib, source.replace(".min_by_key(", ".max_by_key(")).expect("write");

    let second = cargo_test(&krate, &target);
    let said = text(&second);
    assert!(!second.status.success(), "{said}");
    assert!(
        said.contains("test least_tokens_on_the_chat_trace ... FAILED")
            && said.contains("Snapshot Summary"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

//! Shared helpers for the host's integration tests: where the built plugins are, a scratch
//! directory per test, the system C compiler, and request builders.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use routerlab_core::Unit;
use routerlab_host::{EndpointTable, RequestData, SearchPath};

/// `target/<profile>`: where `cargo build` puts the plugin libraries.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_owned()
}

/// A search path holding only this build's plugins.
pub fn built_plugins() -> SearchPath {
    let dir = build_dir();
    assert!(
        dir.join(routerlab_host::library_file_name("lcp")).is_file(),
        "plugin libraries are missing from {}: run `cargo build --workspace` before `cargo test` \
         (or run `cargo xtask ci`)",
        dir.display()
    );
    SearchPath::new(vec![dir])
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// A fresh, empty directory for one test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("routerlab-host-tests-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Compiles `source` into a shared library at `output` with the system C compiler against
/// the committed header, with extra `-D` definitions.
pub fn compile_c(source: &Path, output: &Path, defines: &[&str]) {
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&compiler);
    cmd.args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-std=c11"])
        .arg("-I")
        .arg(workspace_root().join("include"))
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg(source)
        .arg("-o")
        .arg(output);
    let result = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run C compiler `{compiler}`: {e}"));
    assert!(
        result.status.success(),
        "C compile failed: {cmd:?}\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
}

/// A request with the given id and block-hash chain (tokens, block size 16).
pub fn request(id: u64, hashes: &[u64]) -> RequestData<'_> {
    RequestData {
        id,
        arrival_ns: id * 1_000,
        prompt: b"",
        block_hashes: hashes,
        block_ids: None,
        block_size: 16,
        unit: Unit::Tokens,
        prompt_len: hashes.len() as u64 * 16,
        output_tokens: None,
        session_id: 0,
        parent_id: 0,
        ends_session: false,
        now_ns: id * 1_000,
        cached_prefix: None,
        phase: routerlab_core::Phase::Whole,
        cached_tiers: None,
        predict: None,
        lora: None,
    }
}

/// A request carrying prompt text (bytes).
pub fn text_request<'a>(id: u64, prompt: &'a [u8], hashes: &'a [u64]) -> RequestData<'a> {
    RequestData {
        prompt,
        unit: Unit::Bytes,
        prompt_len: prompt.len() as u64,
        ..request(id, hashes)
    }
}

/// `n` endpoints named like the prototype's.
pub fn endpoints(n: u16) -> EndpointTable {
    EndpointTable::new((0..n).map(|i| format!("localhost:{}", 8000 + i)))
}

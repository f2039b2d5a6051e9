//! Every way a plugin can be wrong gets a one-line error naming the file and the cause, and
//! the host survives all of them. Broken libraries are compiled from one C fixture with the
//! system compiler, each with one field broken.

mod support;

use std::path::PathBuf;

use routerlab_host::{SearchPath, library_file_name, load_matcher};
use support::*;

/// Compiles the broken fixture with `defines` as plugin `name`'s library in a fresh dir.
fn broken_library(test: &str, defines: &[&str]) -> (SearchPath, PathBuf) {
    let dir = scratch_dir(test);
    let file = dir.join(library_file_name("broken"));
    compile_c(
        &workspace_root().join("crates/host/tests/fixtures/broken.c"),
        &file,
        defines,
    );
    (SearchPath::new(vec![dir]), file)
}

fn load_error(search: &SearchPath, name: &str) -> String {
    let err = load_matcher(name, "", search)
        .err()
        .expect("loading must fail")
        .to_string();
    assert!(!err.contains('\n'), "error must be one line: {err}");
    err
}

#[test]
fn missing_file_lists_every_path_tried() {
    let a = scratch_dir("missing-a");
    let b = scratch_dir("missing-b");
    let search = SearchPath::new(vec![a.clone(), b.clone()]);
    let err = load_error(&search, "no-such-plugin");
    let file = library_file_name("no-such-plugin");
    assert_eq!(
        err,
        format!(
            "plugin `no-such-plugin` not found; tried: {}, {}",
            a.join(&file).display(),
            b.join(&file).display()
        )
    );
}

#[test]
fn a_file_that_is_not_a_shared_library() {
    let dir = scratch_dir("not-a-library");
    let file = dir.join(library_file_name("text"));
    std::fs::write(&file, "this is not an ELF file\n").unwrap();
    let err = load_error(&SearchPath::new(vec![dir]), "text");
    assert!(
        err.starts_with(&format!(
            "{}: cannot load as a shared library:",
            file.display()
        )),
        "{err}"
    );
}

#[test]
fn entry_symbol_missing() {
    let (search, file) = broken_library("no-entry", &["NO_ENTRY"]);
    assert_eq!(
        load_error(&search, "broken"),
        format!(
            "{}: entry symbol `routerlab_plugin_entry_v1` not found (not a routerlab ABI v1 plugin)",
            file.display()
        )
    );
}

#[test]
fn wrong_magic() {
    let (search, file) = broken_library("magic", &["MAGIC=0x12345678"]);
    assert_eq!(
        load_error(&search, "broken"),
        format!(
            "{}: bad magic 0x12345678, expected 0x524c4142 (not a routerlab plugin)",
            file.display()
        )
    );
}

#[test]
fn abi_major_mismatch() {
    let (search, file) = broken_library("major", &["MAJOR=2"]);
    assert_eq!(
        load_error(&search, "broken"),
        format!("{}: ABI major 2, host supports 1", file.display())
    );
}

#[test]
fn struct_size_too_small() {
    let (search, file) = broken_library("size", &["MODULE_SIZE=16"]);
    assert_eq!(
        load_error(&search, "broken"),
        format!(
            "{}: module struct_size 16 is smaller than the ABI v1 size 32",
            file.display()
        )
    );
}

#[test]
fn vtable_smaller_than_abi_one_zero() {
    let (search, file) = broken_library("vtable-size", &["VTABLE_SIZE=40"]);
    assert_eq!(
        load_error(&search, "broken"),
        format!(
            "{}: plugin `broken` vtable struct_size 40 is smaller than the ABI v1 size 64",
            file.display()
        )
    );
}

#[test]
fn neither_create_slot() {
    // A 1.2 plugin may offer `create_with` instead of `create`, but not neither.
    let (search, file) = broken_library("no-create", &["CREATE=NULL"]);
    assert_eq!(
        load_error(&search, "broken"),
        format!(
            "{}: plugin `broken`: required entry `create` is NULL",
            file.display()
        )
    );
}

#[test]
fn unknown_kind() {
    let (search, file) = broken_library("kind", &["KIND=7"]);
    assert_eq!(
        load_error(&search, "broken"),
        format!(
            "{}: plugin #0: unknown kind 7 (expected 1 = matcher or 2 = detector)",
            file.display()
        )
    );
}

#[test]
fn name_mismatch() {
    let (search, file) = broken_library("name", &["NAME=\"other-name\""]);
    assert_eq!(
        load_error(&search, "broken"),
        format!(
            "{}: no plugin named `broken` in this library (it exports: other-name (matcher))",
            file.display()
        )
    );
}

#[test]
fn invalid_descriptor_name() {
    let (search, file) = broken_library("bad-name", &["NAME=\"Bad Name\""]);
    assert_eq!(
        load_error(&search, "broken"),
        format!(
            "{}: plugin #0: invalid name \"Bad Name\" (expected [a-z0-9-]{{1,64}})",
            file.display()
        )
    );
}

#[test]
fn config_rejected_surfaces_the_plugins_message() {
    let err = load_matcher("lcp", "max_nodes: lots", &built_plugins())
        .err()
        .unwrap()
        .to_string();
    let file = build_dir().join(library_file_name("lcp"));
    assert_eq!(
        err,
        format!(
            "plugin `lcp` ({}): create: config rejected: config key `max_nodes`: expected a \
             non-negative integer, found string \"lots\"",
            file.display()
        )
    );
}

fn panicky() -> PathBuf {
    let file = build_dir().join(format!(
        "{}fixture_panicky{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    assert!(
        file.is_file(),
        "{} missing: run `cargo build --workspace`",
        file.display()
    );
    file
}

#[test]
fn panic_in_create_is_reported_and_the_host_survives() {
    let spec = format!("{}#panic-on-create", panicky().display());
    let err = load_matcher(&spec, "", &SearchPath::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.starts_with("plugin `panic-on-create` ("), "{err}");
    assert!(
        err.ends_with(
            "create: plugin panicked (instance poisoned): panicked: fixture: boom in create"
        ),
        "{err}"
    );
    // The host is still fine: load something else.
    assert!(load_matcher("lcp", "", &built_plugins()).is_ok());
}

#[test]
fn panic_in_match_poisons_the_instance() {
    let spec = format!("{}#panic-on-match", panicky().display());
    let mut matcher = load_matcher(&spec, "", &SearchPath::default()).unwrap();
    let table = endpoints(2);
    matcher.add_endpoints(&table).unwrap();
    assert_eq!(
        matcher
            .match_request(&request(1, &[1]), &table, &[false; 2])
            .unwrap(),
        Some(0)
    );
    let err = matcher
        .match_request(&request(2, &[1]), &table, &[false; 2])
        .unwrap_err()
        .to_string();
    assert!(err.ends_with("match: plugin panicked (instance poisoned): panicked: fixture: boom in match for request 2"), "{err}");
    // Poisoned: later calls fail without running the plugin, and say why.
    let err = matcher
        .match_request(&request(3, &[1]), &table, &[false; 2])
        .unwrap_err()
        .to_string();
    assert!(err.ends_with("match: instance poisoned by an earlier panic: panicked: fixture: boom in match for request 2"), "{err}");
    let err = matcher
        .update(&request(3, &[1]), &table, 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("update: instance poisoned"), "{err}");
    drop(matcher); // destroy still runs cleanly
}

#[test]
fn endpoint_index_out_of_range_is_an_error() {
    let (search, file) = broken_library("out-of-range", &["MATCH_INDEX=99"]);
    let mut matcher = load_matcher("broken", "", &search).unwrap();
    let table = endpoints(3);
    let err = matcher
        .match_request(&request(1, &[]), &table, &[false; 3])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "plugin `broken` ({}): match: returned endpoint index 99, which is not a current endpoint",
            file.display()
        )
    );
}

#[test]
fn an_unavailable_endpoint_is_never_used() {
    let (search, _) = broken_library("unavailable", &["MATCH_INDEX=0"]);
    let mut matcher = load_matcher("broken", "", &search).unwrap();
    let table = endpoints(2);
    assert_eq!(
        matcher
            .match_request(&request(1, &[]), &table, &[false, false])
            .unwrap(),
        Some(0)
    );
    let err = matcher
        .match_request(&request(2, &[]), &table, &[true, false])
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("match: returned endpoint index 0, which was flagged unavailable"),
        "{err}"
    );
}

#[test]
fn a_null_name_and_a_name_given_twice_are_refused() {
    let (search, file) = broken_library("null-name", &["NAME=0"]);
    assert_eq!(
        load_error(&search, "broken"),
        format!("{}: plugin #0 name is NULL", file.display())
    );
    let (search, file) = broken_library("twice", &["TWICE"]);
    assert_eq!(
        load_error(&search, "broken"),
        format!(
            "{}: plugin #1: the name `broken` is already used by plugin #0 of this library",
            file.display()
        )
    );
}

#[test]
fn an_error_message_past_the_cap_says_it_was_cut() {
    let (search, _) = broken_library("long-message", &["LONG_MESSAGE"]);
    let mut matcher = load_matcher("broken", "", &search).unwrap();
    let err = matcher
        .match_request(&request(1, &[]), &endpoints(2), &[false; 2])
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("x [... 4464 more bytes not shown]"),
        "{}",
        &err[err.len() - 80..]
    );
}

/// `dlerror()`'s own words reach the user: here, the dependency that cannot be found.
#[test]
fn a_missing_dependency_is_named_by_the_loader() {
    let dir = scratch_dir("missing-dependency");
    let dep_source = dir.join("dep.c");
    std::fs::write(&dep_source, "int routerlab_test_dep(void) { return 1; }\n").unwrap();
    let dep = dir.join("libroutertestdep.so");
    compile_c(&dep_source, &dep, &[]);
    let file = dir.join(library_file_name("broken"));
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let linked = std::process::Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O1", "-std=c11", "-I"])
        .arg(workspace_root().join("include"))
        .arg(workspace_root().join("crates/host/tests/fixtures/broken.c"))
        .arg("-o")
        .arg(&file)
        .args(["-Wl,--no-as-needed", "-L"])
        .arg(&dir)
        .arg("-lroutertestdep")
        .output()
        .unwrap();
    assert!(
        linked.status.success(),
        "{}",
        String::from_utf8_lossy(&linked.stderr)
    );
    std::fs::remove_file(&dep).unwrap();
    let err = load_error(&SearchPath::new(vec![dir]), "broken");
    assert!(
        err.contains("libroutertestdep.so: cannot open shared object file"),
        "{err}"
    );
}

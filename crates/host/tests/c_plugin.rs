//! The proof that a third party can drop in a plugin: the C example, compiled by the system
//! compiler against the committed header, found on `ROUTERLAB_PLUGIN_PATH`-style search
//! directories and run through the same loader as the built-ins.

mod support;

use routerlab_host::{
    EndpointLoad, PluginKind, RequestData, SearchPath, library_file_name, list_libraries,
    load_matcher,
};
use support::*;

#[test]
fn the_c_example_is_listed_and_routes() {
    let dir = scratch_dir("c-example");
    let file = dir.join(library_file_name("least-running"));
    compile_c(
        &workspace_root().join("examples/c/least_running.c"),
        &file,
        &[],
    );
    let search = SearchPath::new(vec![dir]);

    let listed = list_libraries(&search);
    assert_eq!(listed.len(), 1);
    let library = listed[0].as_ref().unwrap();
    assert_eq!(library.path, file);
    assert_eq!(library.plugins[0].name, "least-running");
    assert_eq!(library.plugins[0].kind, PluginKind::Matcher);
    assert_eq!(library.plugins[0].version, "0.1.0");

    let mut table = endpoints(3);
    let mut matcher = load_matcher("least-running", "", &search).unwrap();
    matcher.add_endpoints(&table).unwrap();
    for (pos, running) in [5, 2, 9].into_iter().enumerate() {
        table.set_load(
            pos,
            EndpointLoad {
                running,
                ..Default::default()
            },
        );
    }
    let req = request(1, &[1, 2]);
    assert_eq!(
        matcher.match_request(&req, &table, &[false; 3]).unwrap(),
        Some(1)
    );
    assert_eq!(
        matcher
            .match_request(&req, &table, &[false, true, false])
            .unwrap(),
        Some(0)
    );
    assert_eq!(
        matcher.match_request(&req, &table, &[true; 3]).unwrap(),
        None
    );
    matcher.update(&req, &table, 1).unwrap();
    matcher.on_complete(&req, 1).unwrap(); // NULL slot: a no-op
    matcher.remove_endpoints(&[2]).unwrap();

    // ABI 1.2 `create_with`: the host takes `seed` out of the text, so a plugin with no
    // settings sees an empty config and parses nothing.
    assert!(load_matcher("least-running", "seed: 0\n", &search).is_ok());
    let err = load_matcher("least-running", "seed: 0\nsome_key: 1\n", &search)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.ends_with("create: config rejected: least-running takes no config keys"),
        "{err}"
    );
}

/// ABI 1.3 from the C side: the header's `RlRequest::phase` and `RlEndpointStatus::role`
/// are where the host writes them. The example never sends a decode leg to a prefill
/// endpoint, even when the host's flags would let it; a whole request goes anywhere.
#[test]
fn the_c_example_reads_the_phase_and_the_roles() {
    let dir = scratch_dir("c-phase");
    compile_c(
        &workspace_root().join("examples/c/least_running.c"),
        &dir.join(library_file_name("least-running")),
        &[],
    );
    let search = SearchPath::new(vec![dir]);
    let mut table = endpoints(3);
    table.set_role(0, routerlab_core::Role::Prefill);
    table.set_role(1, routerlab_core::Role::Decode);
    table.set_role(2, routerlab_core::Role::Decode);
    for (pos, running) in [0, 4, 7].into_iter().enumerate() {
        table.set_load(
            pos,
            EndpointLoad {
                running,
                ..Default::default()
            },
        );
    }
    let mut matcher = load_matcher("least-running", "", &search).unwrap();
    matcher.add_endpoints(&table).unwrap();
    let pick = |matcher: &mut routerlab_host::MatcherInstance, phase| {
        let req = RequestData {
            phase,
            ..request(1, &[1, 2])
        };
        matcher.match_request(&req, &table, &[false; 3]).unwrap()
    };
    // The idle prefill endpoint wins a whole request and a prefill leg, not a decode leg.
    assert_eq!(pick(&mut matcher, routerlab_core::Phase::Whole), Some(0));
    assert_eq!(pick(&mut matcher, routerlab_core::Phase::Prefill), Some(0));
    assert_eq!(pick(&mut matcher, routerlab_core::Phase::Decode), Some(1));
}

/// A plugin built for ABI 1.1 loads and routes unchanged in a 1.2 host: created through
/// `create` with `seed` in its text, called through `match` and `update`, and never
/// through the 1.2 slots its vtable does not declare (they hold traps that fail).
#[test]
fn a_plugin_built_for_abi_one_one_loads_and_routes_unchanged() {
    let dir = scratch_dir("c-abi-1-1");
    compile_c(
        &workspace_root().join("crates/host/tests/fixtures/abi_1_1.c"),
        &dir.join(library_file_name("abi-one-one")),
        &[],
    );
    let search = SearchPath::new(vec![dir]);
    let listed = list_libraries(&search);
    let library = listed[0].as_ref().unwrap();
    assert_eq!((library.abi_major, library.abi_minor), (1, 1));
    let table = endpoints(3);
    let mut matcher = load_matcher("abi-one-one", "seed: 4\n", &search).unwrap();
    assert!(
        !matcher.has_match_update(),
        "a 1.1 vtable has no fused slot"
    );
    matcher.add_endpoints(&table).unwrap();
    let hashes = [0xAAAA, 0xBBBB];
    for (ids, expected) in [([7, 8], 1), ([9, 8], 0)] {
        let req = RequestData {
            block_ids: Some(&ids),
            ..request(1, &hashes)
        };
        let pos = matcher.match_and_update(&req, &table, &[false; 3]).unwrap();
        assert_eq!(pos, Some(expected), "{ids:?}");
        matcher.on_first_token(&req, 0).unwrap();
    }
}

/// ABI 1.1 from the C side: the header's `RlRequest` has `block_ids` where the host writes
/// them, and a plugin that checks `struct_size` sees exactly the host's ids.
#[test]
fn a_c_plugin_reads_the_hosts_block_ids() {
    let dir = scratch_dir("c-block-ids");
    compile_c(
        &workspace_root().join("crates/host/tests/fixtures/broken.c"),
        &dir.join(library_file_name("block-ids")),
        &["MATCH_FROM_BLOCK_IDS", "NAME=\"block-ids\""],
    );
    let search = SearchPath::new(vec![dir]);
    let table = endpoints(3);
    let mut matcher = load_matcher("block-ids", "", &search).unwrap();
    matcher.add_endpoints(&table).unwrap();
    let hashes = [0xAAAA, 0xBBBB, 0xCCCC];
    for (ids, expected) in [([7, 8, 9], 0), ([7, 8, 10], 1), ([7, 8, 5], 2)] {
        let req = RequestData {
            block_ids: Some(&ids),
            ..request(1, &hashes)
        };
        assert_eq!(
            matcher.match_request(&req, &table, &[false; 3]).unwrap(),
            Some(expected),
            "{ids:?}"
        );
    }
    let without = matcher
        .match_request(&request(2, &hashes), &table, &[false; 3])
        .unwrap_err()
        .to_string();
    assert!(without.ends_with("no block ids"), "{without}");
}

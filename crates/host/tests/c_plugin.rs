//! The proof that a third party can drop in a plugin: the C example, compiled by the system
//! compiler against the committed header, found on `ROUTERLAB_PLUGIN_PATH`-style search
//! directories and run through the same loader as the built-ins.

mod support;

use routerlab_host::{
    EndpointLoad, PluginKind, SearchPath, library_file_name, list_libraries, load_matcher,
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

    let err = load_matcher("least-running", "some_key: 1", &search)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.ends_with("create: config rejected: least-running takes no config keys"),
        "{err}"
    );
}

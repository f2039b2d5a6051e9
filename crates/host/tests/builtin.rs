//! The built-in plugins, loaded by name through the real loader and driven through every
//! entry point.

mod support;

use routerlab_core::SeededRng;
use routerlab_core::hash::BlockInterner;
use routerlab_host::{
    EndpointLoad, PluginKind, RequestData, SearchPath, list_libraries, load_detector, load_matcher,
};
use support::*;

#[test]
fn every_builtin_is_listed_with_kind_and_abi() {
    let libraries: Vec<_> = list_libraries(&built_plugins())
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let mut found: Vec<(String, PluginKind, u32)> = libraries
        .iter()
        .flat_map(|lib| {
            lib.plugins
                .iter()
                .map(move |p| (p.name.clone(), p.kind, lib.abi_major))
        })
        .collect();
    found.sort();
    let expected = [
        ("lcp", PluginKind::Matcher),
        ("max-kv-cache", PluginKind::Detector),
        ("num-requests", PluginKind::Detector),
        ("round-robin", PluginKind::Matcher),
        ("simhash", PluginKind::Matcher),
    ];
    for (name, kind) in expected {
        assert!(
            found.contains(&(name.to_owned(), kind, 1)),
            "{name} missing from {found:?}"
        );
    }
}

#[test]
fn default_search_path_finds_the_workspace_build() {
    // No ROUTERLAB_PLUGIN_PATH needed: the test binary's profile dir is on the default path.
    let search = SearchPath::from_env();
    assert!(search.dirs().contains(&build_dir()), "{:?}", search.dirs());
    built_plugins();
    assert!(load_matcher("lcp", "", &search).is_ok());
}

#[test]
fn lcp_keeps_a_prefix_on_its_endpoint_while_available() {
    let search = built_plugins();
    let mut table = endpoints(4);
    let mut lcp = load_matcher("lcp", "seed: 7", &search).unwrap();
    lcp.add_endpoints(&table).unwrap();
    let none = vec![false; 4];

    let first = request(1, &[10, 11, 12]);
    let home = lcp.match_request(&first, &table, &none).unwrap().unwrap();
    lcp.update(&first, &table, home).unwrap();
    // Requests sharing the prefix follow it, whatever their tails.
    for id in 2..20 {
        let hashes = [10, 11, 100 + id];
        let req = request(id, &hashes);
        assert_eq!(lcp.match_request(&req, &table, &none).unwrap(), Some(home));
        lcp.update(&req, &table, home).unwrap();
    }
    // Unavailable: never chosen.
    let mut flags = vec![false; 4];
    flags[home] = true;
    for id in 20..60 {
        let hashes = [10, 11, 12];
        let pos = lcp
            .match_request(&request(id, &hashes), &table, &flags)
            .unwrap()
            .unwrap();
        assert_ne!(pos, home);
    }
    // Removed: never chosen again, even for its own prefix.
    let removed = table.index(home);
    lcp.remove_endpoints(&[removed]).unwrap();
    assert!(table.remove(removed));
    let none = vec![false; 3];
    for id in 60..100 {
        let hashes = [10, 11, 12];
        let pos = lcp
            .match_request(&request(id, &hashes), &table, &none)
            .unwrap()
            .unwrap();
        assert_ne!(table.index(pos), removed);
    }
    // Nothing available: no endpoint, not an error.
    let hashes = [1];
    assert_eq!(
        lcp.match_request(&request(100, &hashes), &table, &[true; 3])
            .unwrap(),
        None
    );
}

#[test]
fn lcp_prefers_the_longest_available_prefix_and_is_seeded() {
    let search = built_plugins();
    let table = endpoints(3);
    let none = vec![false; 3];
    let mut lcp = load_matcher("lcp", "{seed: 1}", &search).unwrap();
    lcp.add_endpoints(&table).unwrap();
    lcp.update(&request(1, &[1, 2]), &table, 0).unwrap();
    lcp.update(&request(2, &[1, 2, 3, 4]), &table, 2).unwrap();
    assert_eq!(
        lcp.match_request(&request(3, &[1, 2, 3, 9]), &table, &none)
            .unwrap(),
        Some(2)
    );
    // With the deepest holder unavailable, the next-longest holder wins.
    assert_eq!(
        lcp.match_request(&request(4, &[1, 2, 3, 9]), &table, &[false, false, true])
            .unwrap(),
        Some(0)
    );

    let picks = |seed: u64| {
        let mut m = load_matcher("lcp", &format!("seed: {seed}"), &search).unwrap();
        m.add_endpoints(&table).unwrap();
        (0..32)
            .map(|id| {
                m.match_request(&request(id, &[id + 1000]), &table, &none)
                    .unwrap()
                    .unwrap()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(picks(5), picks(5));
    assert_ne!(picks(5), picks(6));
}

#[test]
fn lcp_max_nodes_bounds_the_trie() {
    let search = built_plugins();
    let table = endpoints(2);
    let none = vec![false; 2];
    let mut lcp = load_matcher("lcp", "max_nodes: 2", &search).unwrap();
    lcp.add_endpoints(&table).unwrap();
    lcp.update(&request(1, &[1, 2]), &table, 1).unwrap();
    lcp.update(&request(2, &[7, 8]), &table, 0).unwrap();
    // Only the two nodes of [7, 8] survive: it still pins endpoint 0, while [1, 2] was
    // pruned and no longer pins endpoint 1, so its requests spread over both endpoints.
    let mut seen_for_pruned = std::collections::BTreeSet::new();
    for id in 0..32 {
        assert_eq!(
            lcp.match_request(&request(10 + id, &[7, 8]), &table, &none)
                .unwrap(),
            Some(0)
        );
        seen_for_pruned.insert(
            lcp.match_request(&request(50 + id, &[1, 2]), &table, &none)
                .unwrap(),
        );
    }
    assert_eq!(seen_for_pruned.len(), 2, "{seen_for_pruned:?}");
}

/// `lcp` keys its trie by the host's dense block ids (ABI 1.1) and interns hashes itself
/// when a host sends none; both must route identically. The host-side ids here are offset
/// by unrelated blocks interned first, so they differ from the ids the plugin would make.
#[test]
fn lcp_routes_the_same_with_host_block_ids_as_with_hashes_alone() {
    let search = built_plugins();
    for config in ["seed: 3", "{seed: 3, max_nodes: 40}"] {
        // 70 endpoints: indices above 63 take the holder lists' slow path.
        let mut table = endpoints(70);
        let mut with_ids = load_matcher("lcp", config, &search).unwrap();
        let mut hashes_only = load_matcher("lcp", config, &search).unwrap();
        with_ids.add_endpoints(&table).unwrap();
        hashes_only.add_endpoints(&table).unwrap();
        let mut interner = BlockInterner::default();
        for junk in 0..1_000u64 {
            interner
                .intern(junk.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .unwrap();
        }
        let mut rng = SeededRng::new(11);
        let (mut chain, mut ids) = (Vec::new(), Vec::new());
        let mut decisions = 0;
        for id in 1..=3_000u64 {
            // Twelve conversations sharing four system prompts, growing a block a turn.
            let conversation = rng.below(12);
            let turns = 1 + rng.below(10);
            chain.clear();
            chain.push(1 + conversation % 4);
            chain.extend((0..turns).map(|t| 100 * (conversation + 1) + t));
            assert!(interner.intern_all(&chain, &mut ids));
            let hashes_request = request(id, &chain);
            let ids_request = RequestData {
                block_ids: Some(&ids),
                ..hashes_request
            };
            let unavailable: Vec<bool> = (0..table.len()).map(|_| rng.below(3) == 0).collect();
            let a = with_ids
                .match_request(&ids_request, &table, &unavailable)
                .unwrap();
            let b = hashes_only
                .match_request(&hashes_request, &table, &unavailable)
                .unwrap();
            assert_eq!(a, b, "{config}: request {id}");
            if let Some(pos) = a {
                with_ids.update(&ids_request, &table, pos).unwrap();
                hashes_only.update(&hashes_request, &table, pos).unwrap();
                decisions += 1;
            }
            if id == 1_500 {
                // Drop a low and a high endpoint halfway.
                let gone = [table.index(3), table.index(66)];
                for index in gone {
                    table.remove(index);
                }
                with_ids.remove_endpoints(&gone).unwrap();
                hashes_only.remove_endpoints(&gone).unwrap();
            }
        }
        assert!(decisions > 2_900, "{config}: {decisions}");
    }
}

#[test]
fn simhash_maps_similar_prompts_together_and_respects_availability() {
    let search = built_plugins();
    let mut table = endpoints(5);
    let mut sim = load_matcher("simhash", "virtual_nodes: 50", &search).unwrap();
    sim.add_endpoints(&table).unwrap();
    let none = vec![false; 5];
    let prompt = b"You are a helpful assistant. Answer briefly. What is the capital of France?";
    let home = sim
        .match_request(&text_request(1, prompt, &[]), &table, &none)
        .unwrap()
        .unwrap();
    for id in 2..10 {
        assert_eq!(
            sim.match_request(&text_request(id, prompt, &[]), &table, &none)
                .unwrap(),
            Some(home)
        );
    }
    let mut flags = vec![false; 5];
    flags[home] = true;
    let moved = sim
        .match_request(&text_request(10, prompt, &[]), &table, &flags)
        .unwrap()
        .unwrap();
    assert_ne!(moved, home);
    let removed = table.index(home);
    sim.remove_endpoints(&[removed]).unwrap();
    table.remove(removed);
    let none = vec![false; 4];
    for id in 11..40 {
        let text = format!("prompt number {id} with some words");
        let pos = sim
            .match_request(&text_request(id, text.as_bytes(), &[]), &table, &none)
            .unwrap()
            .unwrap();
        assert_ne!(table.index(pos), removed);
    }
    // Hash-only requests are placed by their first block hashes.
    let a = sim
        .match_request(&request(50, &[1, 2, 3, 4, 5]), &table, &none)
        .unwrap();
    let b = sim
        .match_request(&request(51, &[1, 2, 3, 4, 6]), &table, &none)
        .unwrap();
    assert_eq!(a, b, "same first 4 blocks, same endpoint");
}

#[test]
fn round_robin_cycles_over_available_endpoints() {
    let search = built_plugins();
    let table = endpoints(3);
    let mut rr = load_matcher("round-robin", "", &search).unwrap();
    rr.add_endpoints(&table).unwrap();
    let picks: Vec<_> = (0..6)
        .map(|id| {
            rr.match_request(&request(id, &[]), &table, &[false; 3])
                .unwrap()
                .unwrap()
        })
        .collect();
    assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
    for id in 0..6 {
        assert_ne!(
            rr.match_request(&request(id, &[]), &table, &[false, true, false])
                .unwrap(),
            Some(1)
        );
    }
    // The SDK installs every slot: the default `on_complete` is a call that does nothing.
    assert!(rr.has_on_complete());
    rr.on_complete(&request(1, &[]), 0).unwrap();
}

#[test]
fn num_requests_flags_strictly_above_the_threshold() {
    let search = built_plugins();
    let mut table = endpoints(3);
    let mut flags = Vec::new();
    let mut default = load_detector("num-requests", "", &search).unwrap();
    for (pos, running) in [400, 401, 0].into_iter().enumerate() {
        table.set_load(
            pos,
            EndpointLoad {
                running,
                ..Default::default()
            },
        );
    }
    default.detect(&table, &mut flags).unwrap();
    assert_eq!(flags, vec![false, true, false]);
    let mut strict = load_detector("num-requests", "max_running: 0", &search).unwrap();
    strict.detect(&table, &mut flags).unwrap();
    assert_eq!(flags, vec![true, true, false]);
}

#[test]
fn max_kv_cache_flags_full_caches_and_long_queues() {
    let search = built_plugins();
    let mut table = endpoints(3);
    let mut flags = Vec::new();
    let loads = [
        EndpointLoad {
            kv_blocks_used: 90,
            kv_blocks_total: 100,
            ..Default::default()
        },
        EndpointLoad {
            kv_blocks_used: 91,
            kv_blocks_total: 100,
            ..Default::default()
        },
        EndpointLoad {
            waiting: 6,
            ..Default::default()
        },
    ];
    for (pos, load) in loads.into_iter().enumerate() {
        table.set_load(pos, load);
    }
    let mut usage_only = load_detector("max-kv-cache", "", &search).unwrap();
    usage_only.detect(&table, &mut flags).unwrap();
    assert_eq!(flags, vec![false, true, false]);
    let mut with_queue =
        load_detector("max-kv-cache", "{max_usage: 0.95, max_waiting: 5}", &search).unwrap();
    with_queue.detect(&table, &mut flags).unwrap();
    assert_eq!(flags, vec![false, false, true]);
}

#[test]
fn every_builtin_rejects_unknown_config_keys_by_name() {
    let search = built_plugins();
    for name in ["lcp", "simhash", "round-robin"] {
        let err = load_matcher(name, "bogus_key: 1", &search)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(&format!("plugin `{name}`")), "{err}");
        assert!(
            err.contains("create: config rejected: unknown config key `bogus_key`"),
            "{err}"
        );
    }
    for name in ["num-requests", "max-kv-cache"] {
        let err = load_detector(name, "bogus_key: 1", &search)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("create: config rejected: unknown config key `bogus_key`"),
            "{err}"
        );
    }
    let err = load_detector("max-kv-cache", "max_usage: 2", &search)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("`max_usage`: must be within 0..=1, found 2"),
        "{err}"
    );
    let err = load_matcher("lcp", "seed: [1]", &search)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("config key `seed`: expected a non-negative integer, found a list"),
        "{err}"
    );
}

#[test]
fn kinds_are_checked() {
    let search = built_plugins();
    let err = load_detector("lcp", "", &search).err().unwrap().to_string();
    assert!(
        err.ends_with("plugin `lcp` is a matcher, not a detector"),
        "{err}"
    );
}

#[test]
fn the_hosts_forecasts_reach_sim_latency_and_a_failing_forecast_falls_back() {
    use routerlab_core::abi::RlPrediction;
    let search = built_plugins();
    let mut table = endpoints(3);
    // Without forecasts it takes the fewest prompt tokens in flight: endpoint 1.
    for (pos, tokens) in [(0, 900), (1, 100), (2, 500)] {
        table.set_load(
            pos,
            EndpointLoad {
                inflight_prompt_tokens: tokens,
                ..EndpointLoad::default()
            },
        );
    }
    let mut matcher = load_matcher("sim-latency", "", &search).unwrap();
    matcher.add_endpoints(&table).unwrap();
    let none = vec![false; 3];
    let forecast = |index: u32| {
        (index < 3).then(|| RlPrediction {
            ttft_ns: [30, 20, 10][index as usize] * 1_000_000,
            tpot_ns: 5_000_000,
        })
    };
    let data = RequestData {
        predict: Some(&forecast),
        ..request(1, &[1, 2])
    };
    assert_eq!(
        matcher.match_request(&data, &table, &none).unwrap(),
        Some(2),
        "the lowest forecast TTFT"
    );
    assert_eq!(
        matcher
            .match_request(&request(2, &[1, 2]), &table, &none)
            .unwrap(),
        Some(1),
        "no forecasts: the fewest prompt tokens in flight"
    );
    let panics = |_: u32| -> Option<RlPrediction> { panic!("the engine model failed") };
    let data = RequestData {
        predict: Some(&panics),
        ..request(3, &[1, 2])
    };
    assert_eq!(
        matcher.match_request(&data, &table, &none).unwrap(),
        Some(1),
        "a forecast that panics is no forecast, not a crash"
    );
}

#[test]
fn the_hosts_adapter_state_reaches_gie_lora_affinity_through_the_loader() {
    use routerlab_core::abi::RlAdapterState;
    use routerlab_host::Lora;
    let search = built_plugins();
    let table = endpoints(3);
    let mut matcher = load_matcher("gie-lora-affinity", "", &search).unwrap();
    matcher.add_endpoints(&table).unwrap();
    let none = vec![false; 3];
    // Only endpoint 2 runs the adapter; the others are full of other adapters.
    let state = |index: u32| {
        (index < 3).then(|| RlAdapterState {
            resident: u32::from(index == 2),
            running: u32::from(index == 2),
            active: 2,
            slots_used: 2,
            slots_total: 2,
            ..RlAdapterState::default()
        })
    };
    let data = RequestData {
        lora: Some(Lora {
            id: 1,
            name: b"sql-lora",
            state: Some(&state),
        }),
        ..request(1, &[1, 2])
    };
    assert_eq!(
        matcher.match_request(&data, &table, &none).unwrap(),
        Some(2)
    );
    // The base model: every endpoint alike, the first of the least loaded.
    assert_eq!(
        matcher
            .match_request(&request(2, &[1, 2]), &table, &none)
            .unwrap(),
        Some(0)
    );
}

#[test]
fn lora_saturation_reads_the_endpoints_lora_slots_through_the_loader() {
    use routerlab_core::LoraSlots;
    let search = built_plugins();
    let mut table = endpoints(3);
    let mut flags = Vec::new();
    let mut detector = load_detector("lora-saturation", "", &search).unwrap();
    let slots = |active, waiting| LoraSlots {
        used: active,
        total: 2,
        active,
        waiting,
    };
    for (pos, lora) in [slots(2, 1), slots(1, 4), LoraSlots::default()]
        .into_iter()
        .enumerate()
    {
        table.set_load(
            pos,
            EndpointLoad {
                lora,
                ..Default::default()
            },
        );
    }
    assert_eq!(
        table.load(0).lora,
        slots(2, 1),
        "the table keeps what it was given"
    );
    detector.detect(&table, &mut flags).unwrap();
    assert_eq!(flags, vec![true, false, false]);
}

//! A real router's configuration imported as the matcher (`--router-config`): llm-d's
//! endpoint picker configs, Dynamo's frontend flags and router block, SGLang's router and
//! vllm-router's flags, each replaying exactly as the port with the settings it names; what a port does
//! not model refused by name.

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::{project_trace, routerlab, scratch_file, texts};

fn router(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/routers")
        .join(name)
}

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--timing", "trace", "--endpoints", "4", "--seed", "3", "-q"];
    args.extend(extra);
    args
}

/// The report of `lcp`'s replay with `args` but the matcher the arguments give.
fn report(extra: &[&str]) -> Value {
    let trace = project_trace("mooncake-sessions.jsonl");
    let mut command = vec![
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "json",
    ];
    command.extend(args(extra));
    let output = routerlab(&command);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{extra:?}: {stderr}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn each_routers_config_replays_as_its_port_with_those_settings() {
    for (file, matcher, config) in [
        (
            "llm-d-estimate.yaml",
            "gie-default",
            "{prefix_weight: 2, precise_prefix_weight: 0, queue_weight: 0, kv_cache_weight: 0, load_aware_weight: 1}",
        ),
        (
            "exp-2-picker.yaml",
            "gie-default",
            "{max_prefix_blocks: 256, lru_capacity: 31250, prefix_weight: 2, precise_prefix_weight: 0, queue_weight: 0, kv_cache_weight: 0, load_aware_weight: 1}",
        ),
        (
            "dynamo-frontend.txt",
            "dynamo-kv",
            "{temperature: 0.5, host_overlap_weight: 0.5, overlap_score_weight: 2, mode: approximate, ttl_s: 60}",
        ),
        (
            "dynamo-router.yaml",
            "dynamo-kv",
            "{overlap_score_credit: 1, overlap_score_weight: 2, temperature: 0.5, host_overlap_weight: 0.5}",
        ),
        (
            "sglang-router.txt",
            "sglang-cache-aware",
            "{cache_threshold: 0.5, balance_abs_threshold: 32, balance_rel_threshold: 1.1}",
        ),
        ("vllm-router.txt", "vr-ttft-aware", "{}"),
    ] {
        let path = router(file);
        let imported = report(&["--router-config", path.to_str().unwrap()]);
        let explicit = report(&["--matcher", matcher, "--matcher-config", config]);
        assert_eq!(imported["run"]["matcher"]["name"], matcher, "{file}");
        // The statistics: the run block holds the config as written (2 or 2.0).
        let statistics = |mut report: Value| {
            report.as_object_mut().unwrap().remove("run");
            report
        };
        assert_eq!(statistics(imported), statistics(explicit), "{file}");
    }
    // A scheduling profile whose weights differ routes differently: the weights are read.
    let load_only = scratch_file(
        "import-load-only.yaml",
        &std::fs::read_to_string(router("llm-d-estimate.yaml"))
            .unwrap()
            .replace("weight: 2.0", "weight: 0.0")
            .into_bytes(),
    );
    assert_ne!(
        report(&["--router-config", load_only.to_str().unwrap()])["hit_ratio"],
        report(&[
            "--router-config",
            router("llm-d-estimate.yaml").to_str().unwrap()
        ])["hit_ratio"]
    );
}

#[test]
fn what_a_port_does_not_model_is_refused_by_name() {
    let trace = project_trace("mooncake-sessions.jsonl");
    for (name, text, expected) in [
        (
            "import-session.yaml",
            "kind: EndpointPickerConfig\nplugins: [{type: session-affinity-scorer}]\nschedulingProfiles: [{name: default, plugins: [{pluginRef: session-affinity-scorer, weight: 1}]}]\n",
            "`schedulingProfiles[0].plugins[0]`: plugin type `session-affinity-scorer` is not modelled by gie-default",
        ),
        (
            "import-pd.yaml",
            "kind: EndpointPickerConfig\nplugins: [{type: prefix-cache-scorer}]\nschedulingProfiles: [{name: prefill, plugins: []}, {name: decode, plugins: []}]\n",
            "`schedulingProfiles`: 2 profiles",
        ),
        (
            "import-queue.txt",
            "--router-mode kv --router-queue-threshold 0.5\n",
            "`--router-queue-threshold` is not modelled by dynamo-kv",
        ),
        (
            "import-policy.yaml",
            "router: {policy: least_loaded}\n",
            "`router.policy`: `least_loaded` is not a router mode",
        ),
        (
            "import-sglang.txt",
            "--policy cache_aware --eviction-interval-secs 60\n",
            "`--eviction-interval-secs` is not modelled by the SGLang and vllm-router ports",
        ),
        (
            "import-nothing.yaml",
            "a: 1\n",
            "not a router configuration",
        ),
    ] {
        let path = scratch_file(name, text.as_bytes());
        let mut command = vec!["replay", "--trace", trace.to_str().unwrap()];
        command.extend(["--router-config", path.to_str().unwrap()]);
        let output = routerlab(&command);
        assert_eq!(output.status.code(), Some(2), "{name}");
        let stderr = texts(&output).1;
        assert!(
            stderr.contains(&format!("{}: {expected}", path.display())),
            "{name}: {stderr}"
        );
    }
    // Not a configuration at all: an endless file is not read whole.
    let mut command = vec!["replay", "--trace", trace.to_str().unwrap()];
    command.extend(["--router-config", "/dev/zero"]);
    let output = routerlab(&command);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        texts(&output)
            .1
            .contains("/dev/zero: larger than 1048576 bytes"),
        "{}",
        texts(&output).1
    );
    // Both a matcher and a router's config: which one?
    let output = routerlab(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--matcher",
        "lcp",
        "--router-config",
        router("llm-d-estimate.yaml").to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(texts(&output).1.contains("give it or --matcher, not both"));
}

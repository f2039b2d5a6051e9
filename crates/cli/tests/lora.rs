//! Timed snapshots of the LoRA-aware policies on `traces/lora-mooncake.jsonl` (1,000
//! requests, each conversation asking for one of 8 adapters): 4 endpoints of the `dynamo`
//! preset with 2 adapter slots each, 50 ms a load, 5% a step per distinct adapter. A change
//! to the engine's LoRA model or to a policy that moves any figure shows here.

mod support;

use routerlab_engine::{EngineConfig, LoraConfig};
use routerlab_host::SearchPath;
use routerlab_sim::Report;
use routerlab_sim::observer::NoObserver;
use routerlab_sim::scenario::Scenario;
use routerlab_sim::timed::TimedSettings;
use support::project_trace;

fn run(matcher: &str, detector: Option<&str>) -> Report {
    let engine = EngineConfig {
        lora: Some(LoraConfig {
            slots: 2,
            load_ms: 50.0,
            step_overhead: 0.05,
        }),
        ..EngineConfig::dynamo()
    };
    let scenario = Scenario::new(matcher, project_trace("lora-mooncake.jsonl"))
        .endpoints(4)
        .matcher_config("seed: 0")
        .expect("matcher config");
    let scenario = match detector {
        Some(name) => scenario.detector(name, "").expect("detector config"),
        None => scenario,
    }
    .timed(TimedSettings::at_trace_times(vec![engine; 4]));
    let mut replicas = scenario
        .routers(&SearchPath::from_env())
        .expect("plugins load");
    let mut report = scenario
        .replay(&mut replicas, &mut NoObserver)
        .expect("replay");
    report.run = None;
    report
}

fn ttft_p50(report: &Report) -> f64 {
    let timed = report.timed.as_ref().expect("timed");
    timed.ttft.as_ref().expect("a TTFT").p50
}

#[test]
fn lora_affinity_beats_round_robin_when_slots_are_scarce() {
    let round_robin = run("round-robin", None);
    let affinity = run("gie-lora-affinity", None);
    assert!(
        ttft_p50(&affinity) < ttft_p50(&round_robin) / 2.0,
        "gie-lora-affinity TTFT p50 {} ms, round-robin {} ms",
        ttft_p50(&affinity),
        ttft_p50(&round_robin)
    );
    insta::assert_yaml_snapshot!("round-robin", round_robin);
    insta::assert_yaml_snapshot!("gie-lora-affinity", affinity);
}

#[test]
fn aibrix_and_dynamo_placement_and_the_saturation_detector() {
    let aibrix = run("aibrix-lora-affinity", None);
    assert!(ttft_p50(&aibrix) < 100.0, "{} ms", ttft_p50(&aibrix));
    insta::assert_yaml_snapshot!("aibrix-lora-affinity", aibrix);
    let hrw = run("dynamo-lora-hrw", None);
    assert!(ttft_p50(&hrw) < 100.0, "{} ms", ttft_p50(&hrw));
    insta::assert_yaml_snapshot!("dynamo-lora-hrw", hrw);
    let flagged = run("round-robin", Some("lora-saturation"));
    let constrained = flagged.constrained_decisions;
    assert!(constrained > 0, "the detector flagged saturated endpoints");
    insta::assert_yaml_snapshot!("round-robin+lora-saturation", flagged);
}

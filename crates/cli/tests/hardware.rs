//! A GPU and a model nobody measured: `--gpu`, `--model-config` and
//! `--tensor-parallel-size` make every engine's step time the roofline of the model on the
//! GPU and size its KV cache as vLLM would, wherever an engine is described (replay, the
//! experiment file, `engine`, `serve`). The numbers follow from the GPU table and the
//! model's config.json: a faster GPU and more GPUs per engine answer sooner.

mod support;

use std::process::Output;

use serde_json::Value;
use support::{fresh_path, project_trace, routerlab, scratch_file, texts};

/// A timed replay of the 300-request Mooncake sample over two engines of Qwen3-32B on
/// `gpu`, `extra` flags added; its report and stderr.
fn replay(gpu: &str, extra: &[&str]) -> (Value, String) {
    let trace = project_trace("mooncake-small.jsonl");
    let config = project_trace("models/Qwen3-32B.json");
    let mut args = vec![
        "replay",
        "--matcher",
        "round-robin",
        "--trace",
        trace.to_str().unwrap(),
        "--timing",
        "trace",
        "--endpoints",
        "2",
        "--gpu",
        gpu,
        "--model-config",
        config.to_str().unwrap(),
        "--format",
        "json",
    ];
    args.extend(extra);
    let output = routerlab(&args);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{gpu} {extra:?}: {stderr}");
    (serde_json::from_str(&stdout).unwrap(), stderr)
}

/// A timed replay as the experiment file at `path` describes it; its report and stderr.
fn replay_experiment(path: &std::path::Path) -> (Value, String) {
    let output = routerlab(&[
        "replay",
        "--config",
        path.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{}: {stderr}", path.display());
    (serde_json::from_str(&stdout).unwrap(), stderr)
}

fn ttft_p50(report: &Value) -> f64 {
    report["timed"]["ttft"]["p50"].as_f64().unwrap()
}

/// Qwen3-32B (32.8 B parameters, 64 layers of 8 KV heads of 128) at TP 4 with an fp8 cache
/// on an H100 SXM (79.6 GiB at 0.9): 15.26 GiB of weights a GPU, the four GPUs'
/// communication buffers, 2 KV heads a GPU of one byte, 64 × 2 × 2 × 128 = 32,768 bytes a
/// token, the rest in blocks of 64 tokens.
#[test]
fn the_kv_cache_is_derived_and_each_term_shown() {
    let (report, stderr) = replay(
        "H100-SXM",
        &["--tensor-parallel-size", "4", "--kv-cache-dtype", "fp8"],
    );
    assert!(
        stderr.starts_with(
            "KV cache: 27158 blocks of 64 tokens an engine (53.04 GiB for KV of H100-SXM 79.60 GiB at 0.9, less weights 15.26 GiB, an activation estimate 1.55 GiB and communication buffers 1.79 GiB; 32768 KV bytes a token per GPU)"
        ),
        "{stderr}"
    );
    let engine = &report["run"]["timed"]["engines"][0];
    assert_eq!(engine["num_gpu_blocks"], 27158, "{engine}");
    let step = &engine["step_time"];
    assert_eq!(step["model"], "roofline", "{step}");
    assert_eq!(step["gpu"], "H100-SXM", "{step}");
    assert_eq!(step["tensor_parallel"], 4, "{step}");
    // Blocks given are kept, and then nothing is derived or said.
    let (report, stderr) = replay(
        "H100-SXM",
        &[
            "--tensor-parallel-size",
            "4",
            "--engine-config",
            "{num_gpu_blocks: 1000}",
        ],
    );
    assert!(!stderr.contains("KV cache:"), "{stderr}");
    assert_eq!(report["run"]["timed"]["engines"][0]["num_gpu_blocks"], 1000);
}

/// The question the flags answer: the same traffic on other hardware. An H100 answers
/// before an A100, four GPUs an engine before two, and the same inputs give the same bytes.
#[test]
fn faster_gpus_and_more_of_them_answer_sooner() {
    let (a100, _) = replay("A100-80GB", &["--tensor-parallel-size", "2"]);
    let (h100, _) = replay("H100-SXM", &["--tensor-parallel-size", "2"]);
    let (h100_tp4, _) = replay("H100-SXM", &["--tensor-parallel-size", "4"]);
    let (a, h, h4) = (ttft_p50(&a100), ttft_p50(&h100), ttft_p50(&h100_tp4));
    assert!(h < a, "H100 {h} ms, A100 {a} ms");
    assert!(h4 < h, "TP4 {h4} ms, TP2 {h} ms");
    assert_eq!(
        replay("H100-SXM", &["--tensor-parallel-size", "4"]).0,
        h100_tp4
    );
}

/// A GPU of one's own, from a YAML file, named in the experiment file beside it. Said to
/// be on PCIe, its collectives pay PCIe's figures (the report says which), and its
/// tensor-parallel engines come out slower than the same GPU on a fabric.
#[test]
fn a_gpu_file_beside_an_experiment_file_is_read() {
    let dir = std::env::temp_dir().join(format!("routerlab-gpu-exp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let figures = "bf16_tflops: 400\nfp8_tflops: 800\nmemory_gb_s: 2000\nmemory_gib: 80\ninterconnect_gb_s: 100\n";
    std::fs::write(dir.join("mine.yaml"), format!("name: mine\n{figures}")).unwrap();
    std::fs::write(
        dir.join("mine-pcie.yaml"),
        format!("name: mine-pcie\n{figures}link: pcie\n"),
    )
    .unwrap();
    // The experiment file for GPU file `gpu`, beside it.
    let experiment = |gpu: &str| {
        let path = dir.join(format!("exp-{gpu}"));
        std::fs::write(
            &path,
            format!(
                "matcher: round-robin\ntrace: {}\ntiming: trace\nendpoints: 2\ngpu: {gpu}\nmodel_config: {}\ntensor_parallel_size: 2\n",
                project_trace("mooncake-small.jsonl").display(),
                project_trace("models/Qwen3-32B.json").display()
            ),
        )
        .unwrap();
        path
    };
    let (report, stderr) = replay_experiment(&experiment("mine.yaml"));
    assert!(
        stderr.contains("KV cache: ") && stderr.contains("of mine 80.00 GiB"),
        "{stderr}"
    );
    let step = &report["run"]["timed"]["engines"][0]["step_time"];
    assert_eq!(
        (&step["gpu"], &step["link"], &step["collective_step_us"]),
        (&"mine".into(), &"fabric".into(), &5.0.into())
    );
    let (pcie, _) = replay_experiment(&experiment("mine-pcie.yaml"));
    let step = &pcie["run"]["timed"]["engines"][0]["step_time"];
    assert_eq!(
        (
            &step["link"],
            &step["collective_step_us"],
            &step["interconnect_efficiency"]
        ),
        (&"pcie".into(), &20.0.into(), &0.25.into())
    );
    let ttft = |report: &Value| report["timed"]["ttft"]["p50"].as_f64().unwrap();
    assert!(
        ttft(&pcie) > ttft(&report),
        "{} {}",
        ttft(&pcie),
        ttft(&report)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// vLLM's V0 engine did its host work between steps (5 to 13 ms a decode step in which
/// the GPU waits, vLLM RFC #6854): on a GPU without a profile, a V0 engine's steps pay 9 ms
/// of overhead where V1's pay 1, in the replay and in `validate`. A profile's overhead is
/// kept under the scheduler it was fitted under, which `--gpu-profile-out` writes; under
/// the other, the step pays that one's.
#[test]
fn a_v0_engine_pays_its_host_loop_unless_a_profile_says() {
    let overhead =
        |report: &Value| report["run"]["timed"]["engines"][0]["step_time"]["overhead_ms"].clone();
    let v0 = [
        "--tensor-parallel-size",
        "2",
        "--engine-config",
        "{scheduler: v0}",
    ];
    assert_eq!(overhead(&replay("A100-80GB", &v0).0), 9.0);
    assert_eq!(
        overhead(&replay("A100-80GB", &["--tensor-parallel-size", "2"]).0),
        1.0
    );
    // An A100 profile: its efficiencies `{compute: 0.5, memory: 0.7, ...}`, `rest` added.
    let profile = |name: &str, rest: &str| {
        let text = format!(
            "name: A100-80GB\nbf16_tflops: 312\nfp8_tflops: 312\nmemory_gb_s: 2039\n\
             memory_gib: 80\ninterconnect_gb_s: 300\n\
             efficiency: {{compute: 0.5, memory: 0.7, collective_step_us: 5, {rest}}}\n"
        );
        let path = support::scratch_file(name, text.as_bytes());
        path.to_str().unwrap().to_owned()
    };
    let plain = profile("profiled-a100.yaml", "overhead_ms: 2.5");
    assert_eq!(overhead(&replay(&plain, &v0).0), 2.5);
    let fitted_under_v0 = profile("profiled-a100-v0.yaml", "overhead_ms: 35, scheduler: v0");
    assert_eq!(overhead(&replay(&fitted_under_v0, &v0).0), 35.0);
    let under_v1 = replay(&fitted_under_v0, &["--tensor-parallel-size", "2"]).0;
    assert_eq!(overhead(&under_v1), 1.0);
    let step = &under_v1["run"]["timed"]["engines"][0]["step_time"];
    assert_eq!(
        (&step["compute_efficiency"], &step["memory_efficiency"]),
        (&Value::from(0.5), &Value::from(0.7))
    );
    // Each endpoint's own scheduler, in an experiment file's `engines`.
    let experiment = support::scratch_file(
        "v0-and-v1.yaml",
        format!(
            "matcher: round-robin\ntrace: {}\ntiming: trace\nendpoints: 2\ngpu: A100-80GB\n\
             model_config: {}\ntensor_parallel_size: 2\nengines: [{{scheduler: v0}}, {{}}]\n",
            project_trace("mooncake-small.jsonl").display(),
            project_trace("models/Qwen3-32B.json").display()
        )
        .as_bytes(),
    );
    let report = replay_experiment(&experiment).0;
    let engines = &report["run"]["timed"]["engines"];
    assert_eq!(
        (
            &engines[0]["step_time"]["overhead_ms"],
            &engines[1]["step_time"]["overhead_ms"]
        ),
        (&Value::from(9.0), &Value::from(1.0)),
        "{engines}"
    );
    // `validate` on DistServe's run of vLLM 0.2.3 (the V0 scheduler), `extra` added.
    let run = project_trace("distserve/vllm-100-1.exp");
    let config = project_trace("models/OPT-13B.json");
    let validate = |extra: &[&str]| {
        let mut args = vec![
            "validate",
            "--gpu",
            "A100-80GB",
            "--model-config",
            config.to_str().unwrap(),
            "--scheduler",
            "v0",
            "--max-num-seqs",
            "1024",
            "--max-num-batched-tokens",
            "16384",
        ];
        args.extend(extra);
        let output = routerlab(&args);
        let (stdout, stderr) = texts(&output);
        assert!(output.status.success(), "{stderr}");
        stdout
    };
    // Its engine, zero-shot.
    let document: Value =
        serde_json::from_str(&validate(&[run.to_str().unwrap(), "--format", "json"])).unwrap();
    assert_eq!(
        document["engine"]["step_time"]["efficiency"]["overhead_ms"],
        9.0
    );
    // A profile fitted on it says so.
    let written = support::fresh_path("distserve-a100.yaml");
    validate(&[
        "--budget",
        "10",
        "--fit",
        run.to_str().unwrap(),
        "--gpu-profile-out",
        written.to_str().unwrap(),
    ]);
    let profile: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&written).unwrap()).unwrap();
    assert_eq!(profile["efficiency"]["scheduler"], "v0", "{profile:?}");
}

/// Each flag that needs another says which; an unknown GPU lists the known ones; the
/// time-free replay refuses what only the timed one reads; `engine` checks the same.
#[test]
fn flags_missing_their_partner_are_refused_by_name() {
    let trace = project_trace("mooncake-small.jsonl");
    let config = project_trace("models/Qwen3-32B.json");
    let (trace, config) = (trace.to_str().unwrap(), config.to_str().unwrap());
    let base = ["replay", "--matcher", "round-robin", "--trace", trace];
    for (extra, says) in [
        (
            &["--timing", "trace", "--gpu", "H100-SXM"][..],
            "--gpu needs --model-config",
        ),
        (
            &[
                "--timing",
                "trace",
                "--model-config",
                config,
                "--tensor-parallel-size",
                "2",
            ][..],
            "--tensor-parallel-size needs --gpu",
        ),
        (
            &[
                "--timing",
                "trace",
                "--model-config",
                config,
                "--gpu",
                "V100",
            ][..],
            "--gpu: unknown GPU `V100`: one of A100-40GB",
        ),
        (
            &[
                "--timing",
                "trace",
                "--model-config",
                config,
                "--gpu",
                "L4",
                "--tensor-parallel-size",
                "3",
            ][..],
            "8 KV heads do not split over 3 GPUs",
        ),
        (
            &["--gpu", "H100-SXM", "--model-config", config][..],
            "add --timing trace",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend(extra);
        let output = routerlab(&args);
        let (stdout, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stdout.is_empty(), "{extra:?}: {stdout}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
    }
    let output = routerlab(&[
        "engine",
        "--listen",
        "127.0.0.1:0",
        "--gpu",
        "V100",
        "--model-config",
        config,
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", texts(&output).1);
    assert!(
        texts(&output).1.contains("--gpu: unknown GPU `V100`"),
        "{}",
        texts(&output).1
    );
}

/// Speculative decoding set in the engine settings: EAGLE drafting 3 tokens accepted at
/// 0.7 each (2.533 tokens a step as the rates say) on the H100 roofline. The report says
/// what the steps yielded (a little under the mean: a request's last step yields no more
/// than it has left), and the time per output token falls.
#[test]
fn speculative_decoding_shows_its_yield_and_shortens_decoding() {
    let spec = "{speculative: {method: eagle, num_tokens: 3, acceptance: [0.7]}}";
    let (plain, _) = replay("H100-SXM", &["--tensor-parallel-size", "2"]);
    let (fast, _) = replay(
        "H100-SXM",
        &["--tensor-parallel-size", "2", "--engine-config", spec],
    );
    let run = &fast["run"]["timed"]["engines"][0]["speculative"];
    assert_eq!(run["method"], "eagle", "{run}");
    let expected = run["tokens_per_step"].as_f64().unwrap();
    assert!((expected - 2.533).abs() < 1e-9, "{expected}");
    for endpoint in fast["timed"]["per_endpoint"].as_array().unwrap() {
        let got = endpoint["tokens_per_decode_step"].as_f64().unwrap();
        assert!(got > 2.3 && got <= expected, "{got}");
    }
    assert!(plain["timed"]["per_endpoint"][0]["tokens_per_decode_step"].is_null());
    let tpot = |r: &Value| r["timed"]["tpot"]["p50"].as_f64().unwrap();
    assert!(
        tpot(&fast) < 0.6 * tpot(&plain),
        "{} vs {}",
        tpot(&fast),
        tpot(&plain)
    );
    // A bad setting is named.
    let trace = project_trace("mooncake-small.jsonl");
    let output = routerlab(&[
        "replay",
        "--matcher",
        "round-robin",
        "--trace",
        trace.to_str().unwrap(),
        "--timing",
        "trace",
        "--engine-config",
        "{speculative: {method: draft, num_tokens: 3, acceptance: [0.7]}}",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        texts(&output)
            .1
            .contains("`speculative.draft_cost` is needed with method `draft`"),
        "{}",
        texts(&output).1
    );
}

/// A timed replay of `trace` over `endpoints` engines of Qwen3-30B-A3B on RTX PRO 6000s,
/// the experts over `ep` GPUs (2: two data-parallel ranks an engine group), `extra` added.
fn moe_replay(trace: &std::path::Path, endpoints: &str, ep: &str, extra: &[&str]) -> Output {
    let config = project_trace("models/Qwen3-30B-A3B-Instruct-2507.json");
    let mut args = vec![
        "replay",
        "--matcher",
        "round-robin",
        "--endpoints",
        endpoints,
        "--trace",
        trace.to_str().unwrap(),
        "--timing",
        "trace",
        "--gpu",
        "RTX-PRO-6000",
        "--model-config",
        config.to_str().unwrap(),
        "--expert-parallel-size",
        ep,
    ];
    args.extend(extra);
    routerlab(&args)
}

/// The requests of [`moe_replay`] over two engines, from `--requests-out`.
fn moe_requests(tag: &str, trace: &std::path::Path, ep: &str) -> Vec<Value> {
    let out = fresh_path(&format!("{tag}-{ep}.jsonl"));
    let output = moe_replay(trace, "2", ep, &["--requests-out", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", texts(&output).1);
    let text = std::fs::read_to_string(&out).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A mixture of experts split over two data-parallel ranks: the ranks step together. A
/// short prompt on one rank waits for the 8,192-token prompt prefilling on the other and
/// gets its first token at the same instant; its decoding, once the other rank is idle, takes
/// as long as alone. With each rank holding every expert, the ranks step on their own. A
/// fleet that cuts a group in two is refused by name.
#[test]
fn data_parallel_ranks_of_a_mixture_of_experts_step_together() {
    let long = r#"{"timestamp": 0, "input_length": 8192, "output_length": 1, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]}"#;
    let short = r#"{"timestamp": 0, "input_length": 16, "output_length": 64, "hash_ids": [100]}"#;
    let both = scratch_file(
        "lockstep-both.jsonl",
        format!("{long}\n{short}\n").as_bytes(),
    );
    let alone = scratch_file("lockstep-alone.jsonl", format!("{short}\n").as_bytes());
    let ms = |r: &Value, key: &str| r[key].as_f64().unwrap();
    let decoding = |r: &Value| ms(r, "finish_s") * 1e3 - ms(r, "ttft_ms");

    let together = moe_requests("lockstep-both", &both, "2");
    let (a, b) = (&together[0], &together[1]);
    assert_ne!(a["endpoint"], b["endpoint"], "{together:?}");
    assert_eq!(ms(a, "ttft_ms"), ms(b, "ttft_ms"), "{together:?}");
    let solo = &moe_requests("lockstep-alone", &alone, "2")[0];
    assert!(
        ms(b, "ttft_ms") > 10.0 * ms(solo, "ttft_ms"),
        "{b} vs {solo}"
    );
    assert!((decoding(b) - decoding(solo)).abs() < 0.01, "{b} vs {solo}");

    let apart = moe_requests("lockstep-both", &both, "1");
    assert!(
        ms(&apart[1], "ttft_ms") < 0.2 * ms(&apart[0], "ttft_ms"),
        "{apart:?}"
    );

    let output = moe_replay(&both, "3", "2", &[]);
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("endpoint `localhost:8002`: its engine's experts span 2 data-parallel ranks, which step together"),
        "{stderr}"
    );
}

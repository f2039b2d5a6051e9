//! The engine model with arbitrary (validated) settings and tiny traces: every report it
//! gives keeps its invariants (percentiles in order, e2e >= ttft >= queue, counts that add
//! up), and no request finishes before it arrives (checked inside in debug builds, which
//! fuzz builds are).
#![no_main]

use std::io::Write as _;
use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use routerlab_engine::{EngineConfig, KvTransfer, Scheduler, StepTime, TransferMode};
use routerlab_host::SearchPath;
use routerlab_route::{PdDecision, Pools};
use routerlab_sim::WhenUnavailable;
use routerlab_sim::observer::NoObserver;
use routerlab_sim::scenario::Scenario;
use routerlab_sim::timed::{Arrivals, TimedSettings, replay_timed};
use routerlab_trace::{TraceFormat, TraceOptions};

/// `PATH#round-robin` of the workspace's plugin library.
static ROUND_ROBIN: OnceLock<String> = OnceLock::new();

fn byte(data: &[u8], i: usize) -> u32 {
    u32::from(data.get(i).copied().unwrap_or(0))
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 25 {
        return;
    }
    let (head, body) = data.split_at(25);
    let engine = EngineConfig {
        num_gpu_blocks: 1 + (byte(head, 0) << 8 | byte(head, 1)) % 4096,
        engine_block_size: 1 + byte(head, 2) % 64,
        max_num_seqs: 1 + byte(head, 3) % 16,
        max_num_batched_tokens: 1 + (byte(head, 4) << 8 | byte(head, 5)) % 4096,
        step_time: StepTime::Linear {
            overhead_ms: f64::from(byte(head, 6)) / 10.0,
            prefill_ms_per_token: f64::from(byte(head, 7)) / 1000.0,
            decode_ms: f64::from(byte(head, 8)) / 10.0,
        },
        kv_bytes_per_token: Some(u64::from(byte(head, 17)) * 4096),
        // Sometimes a host tier, from 1 to 256 blocks.
        host_tier: (byte(head, 17) > 0).then(|| routerlab_engine::HostTier {
            blocks: 1 + byte(head, 18),
            d2h_gbps: 10.0,
            h2d_gbps: 1.0 + f64::from(byte(head, 19)),
            latency_ms: 0.0,
            blocking: byte(head, 3) & 64 != 0,
        }),
        // Sometimes a shared tier, from 1 to 256 blocks (the engines share one store).
        shared_tier: (byte(head, 17) > 0 && byte(head, 20) > 127).then(|| {
            routerlab_engine::HostTier {
                blocks: 1 + byte(head, 21),
                d2h_gbps: 10.0,
                h2d_gbps: 1.0 + f64::from(byte(head, 22)),
                latency_ms: f64::from(byte(head, 23)) / 100.0,
                blocking: byte(head, 3) & 64 != 0,
            }
        }),
        // Sometimes vLLM V0's scheduler.
        scheduler: if byte(head, 20) % 2 == 1 {
            Scheduler::V0
        } else {
            Scheduler::V1
        },
        // Sometimes no prefix cache.
        prefix_caching: byte(head, 20) % 4 < 3,
        // Sometimes V0's padded prompt batches, 0 to 63 tokens of padding.
        max_paddings: (byte(head, 20) % 2 == 1 && byte(head, 22) > 127)
            .then(|| byte(head, 23) % 64),
        // Sometimes 1 to 3 LoRA slots, loads up to 25.5 ms, up to 25% a step an adapter.
        lora: (byte(head, 16) % 2 == 1).then(|| routerlab_engine::LoraConfig {
            slots: 1 + byte(head, 16) / 2 % 3,
            load_ms: f64::from(byte(head, 13)) / 10.0,
            step_overhead: f64::from(byte(head, 15) % 26) / 100.0,
        }),
        // Sometimes speculative decoding: 1 to 8 drafts, any acceptance.
        speculative: (byte(head, 10) % 4 == 0).then(|| routerlab_engine::Speculative {
            method: if byte(head, 11) % 2 == 0 {
                routerlab_engine::speculative::Method::Ngram
            } else {
                routerlab_engine::speculative::Method::Eagle
            },
            num_tokens: 1 + byte(head, 12) % 8,
            acceptance: vec![f64::from(byte(head, 13)) / 255.0],
            draft_cost: None,
        }),
        // Half the time async scheduling (V1's alone: a V0 engine with it is refused below).
        async_scheduling: byte(head, 3) >= 128,
    };
    if engine.validate().is_err() {
        return;
    }
    // Up to 12 requests of 5 bytes: arrival gap (ms), input length, output length, and a
    // prefix id that later requests may share.
    let mut trace = String::new();
    let mut at = 0u64;
    for chunk in body.chunks_exact(5).take(12) {
        at += u64::from(chunk[0]);
        let input = 1 + (u32::from(chunk[1]) << 4 | u32::from(chunk[2])) % 2048;
        let output = u32::from(chunk[3]) % 64;
        let blocks = input.div_ceil(16);
        let ids: Vec<String> = (0..blocks)
            .map(|b| (u32::from(chunk[4] % 4) * 1000 + b).to_string())
            .collect();
        // Half the requests name one of four adapters.
        let adapter = match chunk[3] % 8 {
            a @ 0..4 => format!("\"adapter\": \"a{a}\", "),
            _ => String::new(),
        };
        trace.push_str(&format!(
            "{{\"timestamp\": {at}, {adapter}\"input_length\": {input}, \"output_length\": {output}, \"hash_ids\": [{}]}}\n",
            ids.join(", ")
        ));
    }
    if trace.is_empty() {
        return;
    }
    let path = std::env::temp_dir().join(format!("routerlab-fuzz-engine-{}", std::process::id()));
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(trace.as_bytes()))
        .expect("scratch file");
    let endpoints = 1 + (byte(head, 9) % 3) as usize;
    let settings = TimedSettings {
        engines: vec![engine; endpoints],
        arrivals: Arrivals::Trace {
            speedup: 1.0 + f64::from(byte(head, 10)),
        },
        respect_parents: false,
        think_time_ns: 0,
        metrics_interval_ns: u64::from(byte(head, 11)) * 1_000_000,
        default_output_tokens: 16,
        seed: u64::from(byte(head, 12)),
        // Sometimes a router that sees the KV events up to 255 ms late.
        kv_event_lag_ns: u64::from(byte(head, 24)) * 1_000_000,
        router_hop_ns: 0,
        router_decision_ns: 0,
        // Sometimes SLO targets, each 0 to 255 ms or none.
        slo: (byte(head, 24) % 2 == 1).then(|| routerlab_report::Slo {
            ttft_ms: (byte(head, 18) % 2 == 0).then(|| f64::from(byte(head, 19))),
            tpot_ms: (byte(head, 19) % 4 < 2).then(|| f64::from(byte(head, 18))),
        }),
        // A disaggregated fleet's KV takes up to 25.5 ms plus its bytes at 1 GB/s.
        kv_transfer: KvTransfer {
            kv_bytes_per_token: u64::from(byte(head, 14)) * 1024,
            bandwidth_gbps: if byte(head, 14) == 0 { 0.0 } else { 1.0 },
            latency_ms: f64::from(byte(head, 15)) / 10.0,
            mode: if byte(head, 15) % 2 == 0 {
                TransferMode::FullPrompt
            } else {
                TransferMode::Missing
            },
        },
        scaling: None,
    };
    let library = ROUND_ROBIN.get_or_init(|| {
        // The built-in plugins of the workspace's debug build (`cargo build` first). Found
        // once: searching the directory for every input would dominate the run.
        let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug");
        let file = SearchPath::new(vec![plugins])
            .resolve("round-robin")
            .expect("the round-robin plugin (run `cargo build --workspace` first)");
        format!("{}#round-robin", file.display())
    });
    let when = if byte(head, 13) % 2 == 0 {
        WhenUnavailable::Queue
    } else {
        WhenUnavailable::Reject
    };
    let mut scenario = Scenario::new(library.as_str(), &path)
        .endpoints(endpoints)
        .trace_options(TraceOptions {
            format: Some(TraceFormat::Mooncake),
            trace_block_size: 16,
            ..TraceOptions::default()
        })
        .timed(settings)
        .when_unavailable(when);
    // With two or three endpoints, sometimes a prefill and a decode pool, either decision.
    let split = byte(head, 16);
    if endpoints > 1 && split % 3 != 0 {
        scenario.pools = Some(Pools {
            prefill: 1 + (split as usize / 3) % (endpoints - 1),
            decision: if split % 3 == 1 {
                PdDecision::Always
            } else {
                PdDecision::Threshold {
                    tokens: u64::from(split) * 4,
                }
            },
        });
    }
    let reader = scenario.reader().expect("a well-formed trace");
    let workload = scenario.workload(reader).expect("loads");
    let mut replicas = scenario
        .routers(&SearchPath::new(Vec::new()))
        .expect("loads");
    let settings = scenario.timed.as_ref().expect("timed");
    if let Ok(report) = replay_timed(&workload, &mut replicas, settings, &mut NoObserver) {
        let broken = report.invariant_violations();
        assert!(broken.is_empty(), "{broken:?}");
    }
});

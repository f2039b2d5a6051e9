//! The roofline step time, part by part, with the figures worked out by hand.

use super::*;
use crate::step_time::{Batch, StepTime};

/// A small dense model: 2 layers of hidden 1024, 8 heads of 128 (no grouping), a gated MLP
/// of 4096, 1,000 tokens of vocabulary, tied embeddings, bf16.
const SMALL: &str = r#"{"hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
    "head_dim": 128, "intermediate_size": 4096, "vocab_size": 1000, "torch_dtype": "bfloat16"}"#;

/// 100 TFLOP/s, 1,000 GB/s, 100 GB/s between GPUs.
fn gpu() -> Gpu {
    Gpu {
        name: "round".into(),
        bf16_tflops: 100.0,
        fp8_tflops: 200.0,
        memory_gb_s: 1000.0,
        memory_gib: 80.0,
        interconnect_gb_s: 100.0,
        link: Link::Fabric,
        source: String::new(),
        efficiency: None,
    }
}

/// Everything achieved, nothing fixed: the published limits alone.
fn ideal(config: &str, tp: u32) -> Roofline {
    Roofline {
        gpu: gpu(),
        shape: ModelShape::from_config(config).unwrap(),
        tensor_parallel: tp,
        expert_parallel: 1,
        kv_bytes: 2,
        efficiency: Efficiency {
            compute: 1.0,
            memory: 1.0,
            overhead_ms: 0.0,
            collective_step_us: 5.0,
            interconnect: 1.0,
            scheduler: None,
        },
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-9)
}

/// Per layer: attention 4 × 1024 × 1024 = 4,194,304, MLP 3 × 1024 × 4096 = 12,582,912,
/// norms 2,048: 16,779,264; two layers 33,558,528. One decoding sequence with 1,000 tokens
/// of context reads the layers' weights (67,117,056 bytes: 0.067117056 ms at 10^9 bytes a
/// ms), 1,000 tokens of KV (2 layers × 2 × 8 × 128 × 2 bytes = 8,192 a token: 0.008192
/// ms) and the output head (1,000 × 1,024 × 2 bytes: 0.002048 ms); each is memory-bound.
/// A 4,096-token prompt from nothing is compute-bound: 2 × 4,096 × 33,558,528 FLOPs
/// (2.74911461376 ms at 10^11 a ms), and 4,096 × 4,097 / 2 = 8,390,656 query–key pairs of
/// 4 × 8 × 128 FLOPs in 2 layers (0.68736253952 ms); its head is read for one sample.
#[test]
fn a_step_is_the_sum_of_its_parts_rooflines_as_computed_by_hand() {
    let model = ideal(SMALL, 1);
    assert_eq!(model.shape.layer_params, 33_558_528);
    assert_eq!(model.shape.total_params, 33_558_528 + 1_024_000 + 1024);
    assert_eq!(model.kv_bytes_per_token(), 8192);
    let decode = model.parts(&Batch {
        decode_seqs: 1,
        context_tokens: 1000,
        attention_pairs: 1000,
        ..Batch::default()
    });
    assert!(close(decode.layers_ms, 0.067_117_056), "{decode:?}");
    assert!(close(decode.attention_ms, 0.008_192), "{decode:?}");
    assert!(close(decode.head_ms, 0.002_048), "{decode:?}");
    assert_eq!((decode.experts_ms, decode.allreduce_ms), (0.0, 0.0));
    assert!(close(decode.total(), 0.077_357_056));
    let prefill = model.parts(&Batch {
        prefill_tokens: 4096,
        context_tokens: 4096,
        attention_pairs: 4096 * 4097 / 2,
        ..Batch::default()
    });
    assert!(close(prefill.layers_ms, 2.749_114_613_76), "{prefill:?}");
    assert!(close(prefill.attention_ms, 0.687_362_539_52), "{prefill:?}");
    assert!(close(prefill.head_ms, 0.002_048), "{prefill:?}");
    // Through the step-time model, in nanoseconds; the efficiencies scale the parts.
    let step = StepTime::Roofline(Box::new(model.clone()));
    assert_eq!(
        step.step_ns(&Batch {
            decode_seqs: 1,
            context_tokens: 1000,
            attention_pairs: 1000,
            ..Batch::default()
        }),
        77_357
    );
    let mut half = model;
    half.efficiency.memory = 0.5;
    half.efficiency.overhead_ms = 1.0;
    let slower = half.parts(&Batch {
        decode_seqs: 1,
        context_tokens: 1000,
        attention_pairs: 1000,
        ..Batch::default()
    });
    assert!(
        close(slower.total(), 2.0 * 0.077_357_056 + 1.0),
        "{slower:?}"
    );
}

/// Two GPUs each read half the weights and hold half the KV heads, and pay two all-reduces
/// a layer: one token's 1,024 bf16 activations, of which a ring moves 2 × (2 − 1) / 2 = 1
/// share through each link (2,048 bytes at 10^8 a ms), in 2 × (2 − 1) = 2 steps of 5 µs.
/// Over four GPUs, 1.5 shares (3,072 bytes) in 6 steps.
#[test]
fn tensor_parallel_splits_the_work_and_adds_the_all_reduces() {
    let model = ideal(SMALL, 2);
    assert_eq!(model.kv_bytes_per_token(), 4096);
    let decode = model.parts(&Batch {
        decode_seqs: 1,
        context_tokens: 1000,
        attention_pairs: 1000,
        ..Batch::default()
    });
    assert!(close(decode.layers_ms, 0.033_558_528), "{decode:?}");
    assert!(close(decode.attention_ms, 0.004_096), "{decode:?}");
    assert!(close(decode.head_ms, 0.001_024), "{decode:?}");
    assert!(
        close(decode.allreduce_ms, 4.0 * (2.048e-5 + 0.010)),
        "{decode:?}"
    );
    let four = ideal(SMALL, 4).parts(&Batch {
        decode_seqs: 1,
        ..Batch::default()
    });
    assert!(
        close(four.allreduce_ms, 4.0 * (3.072e-5 + 0.030)),
        "{four:?}"
    );
    // KV heads that do not split are refused; fewer heads than GPUs are replicated.
    let mut odd = ideal(SMALL, 3);
    assert!(
        odd.validate()
            .unwrap_err()
            .contains("8 KV heads do not split over 3")
    );
    odd.tensor_parallel = 16;
    odd.validate().unwrap();
    assert_eq!(odd.kv_bytes_per_token(), 2 * 2 * 128 * 2);
}

/// A table GPU on PCIe (the RTX PRO 6000: 64 GB/s each way) runs its collectives at the
/// PCIe figures, a quarter of the link and 20 µs a ring step: two GPUs' all-reduce of one
/// token's 2,048 bytes takes 2,048 / (1.6 × 10^7 a ms) + 2 × 0.020 ms, four a layer. A GPU
/// on a fabric (the A100) keeps the defaults; a user's GPU says which with `link`.
#[test]
fn a_gpu_on_pcie_pays_its_collectives_a_pcie_ring_steps() {
    let shape = ModelShape::from_config(SMALL).unwrap();
    let pcie = Roofline::new(
        Gpu::resolve("RTX-PRO-6000").unwrap(),
        shape.clone(),
        2,
        1,
        2,
    );
    assert_eq!(pcie.gpu.link, Link::Pcie);
    assert_eq!(
        (
            pcie.efficiency.collective_step_us,
            pcie.efficiency.interconnect
        ),
        (20.0, 0.25)
    );
    let decode = pcie.parts(&Batch {
        decode_seqs: 1,
        ..Batch::default()
    });
    assert!(
        close(decode.allreduce_ms, 4.0 * (2048.0 / 1.6e7 + 0.040)),
        "{decode:?}"
    );
    let fabric = Roofline::new(Gpu::resolve("A100-80GB").unwrap(), shape, 2, 1, 2);
    assert_eq!(fabric.efficiency, Efficiency::default());
    let v0 = Efficiency::typical(Scheduler::V0, Link::Pcie);
    assert_eq!((v0.overhead_ms, v0.collective_step_us), (9.0, 20.0));
    let mine: Gpu = serde_yaml::from_str(
        "name: mine\nbf16_tflops: 1\nfp8_tflops: 1\nmemory_gb_s: 1\nmemory_gib: 1\ninterconnect_gb_s: 32\nlink: pcie\n",
    )
    .unwrap();
    assert_eq!(mine.link, Link::Pcie);
    for link in [Link::Fabric, Link::Pcie] {
        assert_eq!(serde_yaml::to_string(&link).unwrap().trim(), link.name());
    }
}

/// 8 experts of 3 × 1024 × 512 = 1,572,864 parameters a layer, 2 routed a token, in 2
/// layers (6,291,456 bytes an expert): one token touches 8 × (1 − 6/8) = 2 of them, reading
/// 12,582,912 bytes; a thousand touch all 8 (8 × (1 − 0.75^1000) = 8 to the last digit)
/// and the step is compute-bound, 2 × 1,000 × 2 × 3,145,728 FLOPs.
#[test]
fn a_mixture_of_experts_reads_the_experts_its_tokens_touch() {
    let config = r#"{"hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
        "head_dim": 128, "intermediate_size": 4096, "moe_intermediate_size": 512,
        "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1000,
        "torch_dtype": "bfloat16"}"#;
    let model = ideal(config, 1);
    let experts = model.shape.experts.unwrap();
    assert_eq!(
        (experts.count, experts.per_token, experts.params),
        (8, 2, 1_572_864)
    );
    // The layers outside the experts: attention, the router (1024 × 8) and norms.
    assert_eq!(model.shape.layer_params, 2 * (4_194_304 + 8192 + 2048));
    let one = model.parts(&Batch {
        decode_seqs: 1,
        ..Batch::default()
    });
    assert!(close(one.experts_ms, 0.012_582_912), "{one:?}");
    let many = model.parts(&Batch {
        decode_seqs: 1000,
        ..Batch::default()
    });
    assert!(close(many.experts_ms, 0.125_829_12), "{many:?}");
    assert_eq!(many.all_to_all_ms, 0.0);
    // Split over 4 expert-parallel GPUs: a quarter each, and two all-to-alls a layer. A
    // token goes once to each other GPU holding one of its 2 experts: each of the 3 misses
    // both with (3/4)² = 0.5625, so 3 × 0.4375 = 1.3125 copies of its 1,024 bf16 values;
    // 1,000 tokens send 2,688,000 bytes (at 10^8 a ms) in 3 steps of 5 µs.
    let mut ep = model.clone();
    ep.expert_parallel = 4;
    let split = ep.parts(&Batch {
        decode_seqs: 1000,
        ..Batch::default()
    });
    assert!(close(split.experts_ms, 0.125_829_12 / 4.0), "{split:?}");
    assert!(
        close(split.all_to_all_ms, 4.0 * (0.026_88 + 0.015)),
        "{split:?}"
    );
}

fn model_file(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../../traces/models/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// The shapes of the model configs in the repository: Llama-3.1-8B's published parameter
/// count exactly, Qwen3-30B-A3B's 30.5 B (3.3 B active), DeepSeek's latent attention and a
/// hybrid's attention layers.
#[test]
fn real_configs_give_their_published_sizes() {
    let llama = ModelShape::from_config(&model_file("Llama-3.1-8B")).unwrap();
    assert_eq!(llama.total_params, 8_030_261_248);
    assert_eq!(
        (llama.kv_heads, llama.kv_elements_per_layer),
        (8, 2 * 8 * 128)
    );
    let moe = ModelShape::from_config(&model_file("Qwen3-30B-A3B-Instruct-2507")).unwrap();
    let billions = moe.total_params as f64 / 1e9;
    assert!((billions - 30.5).abs() < 0.1, "{billions}");
    let e = moe.experts.unwrap();
    let active = (moe.total_params - moe.routed_params()
        + u64::from(e.per_token) * e.params * u64::from(e.layers)) as f64
        / 1e9;
    assert!((active - 3.3).abs() < 0.1, "{active}");
    let deepseek = ModelShape::from_config(&model_file("DeepSeek-V3.2-Exp-16L64E")).unwrap();
    assert_eq!(deepseek.kv_heads, 1);
    assert_eq!(deepseek.kv_elements_per_layer, 512 + 64);
    let hybrid = ModelShape::from_config(&model_file("Qwen3.8-27B")).unwrap();
    assert!(hybrid.attention_layers < hybrid.layers, "{hybrid:?}");
    // A bad key is named.
    let err = ModelShape::from_config(r#"{"hidden_size": 0}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("hidden_size"), "{err}");
}

/// The engine config names the step time `roofline` and reads back what it wrote.
#[test]
fn a_roofline_step_time_reads_back_from_yaml() {
    let step = StepTime::Roofline(Box::new(ideal(SMALL, 2)));
    let yaml = serde_yaml::to_string(&step).unwrap();
    assert!(yaml.starts_with("model: roofline\n"), "{yaml}");
    let back: StepTime = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(back, step);
}

/// Verifying drafts: a decoding sequence's 4 tokens (1 and 3 drafts) go through the layers
/// and the head together. One sequence is memory-bound, so the drafts cost nothing more
/// there; 256 sequences are compute-bound on the layers already (2 × 256 × 33,558,528
/// FLOPs: 0.17181966336 ms at 10^11 a ms, over the 0.067117056 ms of reading the weights),
/// and their 1,024 tokens with drafts cost four times that.
#[test]
fn verifying_drafts_costs_what_the_extra_tokens_compute() {
    let model = ideal(SMALL, 1);
    let step = |seqs: u64, tokens: u64| {
        model.parts(&Batch {
            decode_seqs: seqs,
            decode_tokens: tokens,
            ..Batch::default()
        })
    };
    assert_eq!(step(1, 4).layers_ms, step(1, 1).layers_ms);
    assert!(
        close(step(256, 256).layers_ms, 0.171_819_663_36),
        "{:?}",
        step(256, 256)
    );
    assert!(
        close(step(256, 1024).layers_ms, 0.687_278_653_44),
        "{:?}",
        step(256, 1024)
    );
}

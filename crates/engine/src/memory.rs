//! How many KV blocks a vLLM engine gets on a GPU, from a model's Hugging Face
//! `config.json`, as vLLM sizes its cache at start-up.
//!
//! vLLM asks for `gpu_memory_utilization` of the GPU's memory, takes away what is not KV
//! cache (the weights, the activation peak of a profiling pass at the largest batch, and
//! memory outside PyTorch's allocator), and divides the rest into blocks:
//!
//! ```text
//! blocks = (GPU memory × utilization − non-KV memory) / (block size × KV bytes per token per GPU)
//! ```
//!
//! With tensor parallelism each GPU holds `1/tp` of the weights and of the KV heads (at
//! least one head: vLLM replicates them when there are fewer heads than GPUs), so the
//! blocks are counted on one GPU and every GPU has as many.
//!
//! The block division and the weights are vLLM's arithmetic, checked against its logs. The
//! activation peak is profiled by vLLM, not computed; here it is estimated as the batch's
//! widest tensors (`max_num_batched_tokens × (4 × hidden + 3 × intermediate / tp)` elements
//! of the model's dtype, plus `max_num_seqs` rows of float32 logits) and 0.8 GiB for CUDA
//! graphs and allocations outside PyTorch. That constant is set from the one run here that
//! records its GPU's memory and the blocks vLLM made (LLMServingSim's RTX 4090 run); no
//! other run checks it. An engine over more than one GPU also holds its communicators'
//! buffers outside PyTorch: [`COMMUNICATION_BYTES`] more on each GPU. When the run's vLLM
//! log is at hand, its `Total non KV cache memory` (or `# GPU blocks`) is the better number.
//!
//! Weights are counted as [`crate::roofline::ModelShape`] counts them (one count for both):
//! embeddings (and an untied output head), attention projections (grouped-query or latent),
//! gated or plain MLPs (OPT's `ffn_dim`), experts, shared experts and routers, at the bits
//! of the checkpoint's dtype or quantization. A latent is kept whole on every GPU; a
//! hybrid's linear layers keep no per-token cache.

use crate::model::{ModelConfigError, kv_from_model_config, language_keys, object};
use crate::roofline::ModelShape;

/// What an engine split over more than one GPU (tensor or expert parallel) holds on each
/// GPU outside PyTorch beyond what one GPU alone does: the collective libraries' buffers.
/// vLLM's memory profile of Llama-3-8B on an A100-80GB (its pull request 10511) logs
/// `non_torch_memory` 1.79 GiB at tensor parallel 1 and 3.58 GiB at 2; the difference,
/// taken as the same at any larger size (a ring or a tree talks to two neighbours).
pub const COMMUNICATION_BYTES: u64 = 179 * (1 << 30) / 100;

/// What a GPU and an engine's limits give the KV cache.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuBudget {
    /// The GPU's memory, bytes.
    pub gpu_memory_bytes: u64,
    /// The fraction vLLM may use (`--gpu-memory-utilization`, 0 to 1).
    pub utilization: f64,
    /// GPUs the model is split over (`--tensor-parallel-size`).
    pub tensor_parallel: u32,
    /// GPUs a mixture of experts' experts are split over (vLLM's expert parallelism:
    /// tensor × data parallel GPUs; 1 without it).
    pub expert_parallel: u32,
    /// Tokens of the profiling batch (`--max-num-batched-tokens`).
    pub max_num_batched_tokens: u32,
    /// Sequences of the profiling batch (`--max-num-seqs`).
    pub max_num_seqs: u32,
    /// Tokens per block.
    pub block_size: u32,
    /// The KV cache's data type (`None` or `auto`: the model's).
    pub kv_dtype: Option<String>,
    /// Non-KV memory per GPU, bytes, when known (vLLM's log); else estimated.
    pub non_kv_bytes: Option<u64>,
}

/// How the blocks were found.
#[derive(Debug, Clone, PartialEq)]
pub struct KvBudget {
    /// Weights on one GPU, bytes.
    pub weight_bytes: u64,
    /// The estimated activation peak and other non-KV memory on one GPU, bytes (zero when
    /// [`GpuBudget::non_kv_bytes`] was given).
    pub activation_bytes: u64,
    /// The communicators' buffers on one GPU, bytes: [`COMMUNICATION_BYTES`] for an engine
    /// over more than one GPU, else zero (and zero when [`GpuBudget::non_kv_bytes`] was
    /// given).
    pub communication_bytes: u64,
    /// Memory left for the KV cache on one GPU, bytes.
    pub available_bytes: u64,
    /// KV bytes of one token on one GPU.
    pub bytes_per_token: u64,
    /// Blocks of [`GpuBudget::block_size`] tokens.
    pub num_blocks: u64,
}

impl KvBudget {
    /// What was taken from the GPU's share before the KV cache, term by term, in GiB:
    /// "weights W GiB and an activation estimate A GiB", with "and communication buffers C
    /// GiB" for an engine over more than one GPU.
    pub fn deductions(&self) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let (weights, activations) = (gib(self.weight_bytes), gib(self.activation_bytes));
        if self.communication_bytes == 0 {
            format!("weights {weights:.2} GiB and an activation estimate {activations:.2} GiB")
        } else {
            format!(
                "weights {weights:.2} GiB, an activation estimate {activations:.2} GiB and communication buffers {:.2} GiB",
                gib(self.communication_bytes)
            )
        }
    }
}

/// The blocks vLLM gives a KV cache of `available_bytes`, at `bytes_per_token` and
/// `block_size` tokens a block: whole blocks, rounded down.
pub fn blocks_in(available_bytes: u64, bytes_per_token: u64, block_size: u32) -> u64 {
    available_bytes / (bytes_per_token * u64::from(block_size)).max(1)
}

/// A mixture-of-experts model's experts a layer and experts a token, from its config
/// `text`; `None` for a dense model.
pub fn experts_of(text: &str) -> Result<Option<(u32, u32)>, ModelConfigError> {
    let root = object(text)?;
    let keys = language_keys(&root);
    let Some(count) = keys.first(&["num_experts", "num_local_experts", "n_routed_experts"])? else {
        return Ok(None);
    };
    let per_token = keys.required("num_experts_per_tok")?;
    if per_token > count || count > u64::from(u32::MAX) {
        return Err(keys.field(
            "num_experts_per_tok",
            &format!("{per_token} is more than the {count} experts"),
        ));
    }
    Ok(Some((count as u32, per_token as u32)))
}

/// The KV blocks of the model config `text` on the GPU `budget` describes.
pub fn kv_budget(text: &str, budget: &GpuBudget) -> Result<KvBudget, ModelConfigError> {
    let root = object(text)?;
    let keys = language_keys(&root);
    let tp = u64::from(budget.tensor_parallel.max(1));
    let kv = kv_from_model_config(text, budget.kv_dtype.as_deref())?;
    let shape = ModelShape::from_config(text)?;
    let (params, routed, hidden) = (
        shape.total_params,
        shape.routed_params(),
        u64::from(shape.hidden),
    );
    let weight_bits = u64::from(shape.weight_bits);
    let kv_heads = u64::from(shape.kv_heads);
    if kv_heads > tp && !kv_heads.is_multiple_of(tp) {
        return Err(keys.field(
            "num_key_value_heads",
            &format!("{kv_heads} KV heads do not split over {tp} GPUs"),
        ));
    }
    // Each GPU keeps its share of the KV heads, at least one (a latent is one "head").
    let heads_per_gpu = (kv_heads / tp).max(1);
    let bytes_per_token =
        kv.kv_layers * (kv.elements_per_layer / kv_heads.max(1)) * heads_per_gpu * kv.dtype_bytes;
    // Routed experts are split over the expert-parallel GPUs, the rest over the tensor
    // parallel ones.
    let ep = u64::from(budget.expert_parallel.max(1));
    let weight_bytes = ((params - routed) / tp + routed / ep) * weight_bits / 8;
    // Activations are 16-bit under weights quantized narrower.
    let weight_dtype = weight_bits.max(16) / 8;
    let activation_bytes = match budget.non_kv_bytes {
        Some(_) => 0,
        None => {
            let inter = keys
                .first(&["ffn_dim", "intermediate_size", "moe_intermediate_size"])?
                .unwrap_or(4 * hidden);
            let tokens = u64::from(budget.max_num_batched_tokens);
            let vocab = keys.required("vocab_size")?;
            tokens * (4 * hidden + 3 * inter / tp) * weight_dtype
                + u64::from(budget.max_num_seqs) * vocab * 4
                + (4 << 30) / 5
        }
    };
    let communication_bytes = if budget.non_kv_bytes.is_none() && tp.max(ep) > 1 {
        COMMUNICATION_BYTES
    } else {
        0
    };
    let non_kv = budget
        .non_kv_bytes
        .unwrap_or(weight_bytes + activation_bytes + communication_bytes);
    let requested = (budget.gpu_memory_bytes as f64 * budget.utilization.clamp(0.0, 1.0)) as u64;
    let available_bytes = requested
        .checked_sub(non_kv)
        .ok_or(ModelConfigError::DoesNotFit {
            requested_mib: requested >> 20,
            non_kv_mib: non_kv >> 20,
        })?;
    Ok(KvBudget {
        weight_bytes,
        activation_bytes,
        communication_bytes,
        available_bytes,
        bytes_per_token,
        num_blocks: blocks_in(available_bytes, bytes_per_token, budget.block_size),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;

    fn llama() -> String {
        let path = format!(
            "{}/../../traces/models/Llama-3.1-8B.json",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(path).unwrap()
    }

    /// Qwen2.5-7B-Instruct's `config.json` (Apache-2.0), the keys the count reads.
    const QWEN25_7B: &str = r#"{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
        "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16"}"#;

    fn budget(gib: f64, tp: u32) -> GpuBudget {
        GpuBudget {
            gpu_memory_bytes: (gib * GIB) as u64,
            utilization: 0.9,
            tensor_parallel: tp,
            expert_parallel: 1,
            max_num_batched_tokens: 8192,
            max_num_seqs: 256,
            block_size: 16,
            kv_dtype: None,
            non_kv_bytes: None,
        }
    }

    /// vLLM's logs, `Model loading took W GiB`: the weights counted from the config are
    /// within 0.5% (vLLM's figure also holds small buffers, such as the rotary tables).
    #[test]
    fn weights_are_within_half_a_percent_of_what_vllm_loads() {
        for (config, logged_gib) in [(llama(), 14.99), (QWEN25_7B.to_owned(), 14.25)] {
            let counted = kv_budget(&config, &budget(80.0, 1)).unwrap().weight_bytes as f64 / GIB;
            assert!(
                (counted / logged_gib - 1.0).abs() < 0.005,
                "{counted} GiB counted, {logged_gib} logged"
            );
        }
        // Exactly the published parameter counts: 8,030,261,248 and 7,615,616,512 less the
        // latter's 129,024 attention biases, in bf16.
        assert_eq!(
            kv_budget(&llama(), &budget(80.0, 1)).unwrap().weight_bytes,
            2 * 8_030_261_248
        );
        assert_eq!(
            kv_budget(QWEN25_7B, &budget(80.0, 1)).unwrap().weight_bytes,
            2 * (7_615_616_512 - 129_024)
        );
    }

    /// vLLM's logs, `Available KV cache memory: M GiB` then `GPU KV cache size: T tokens`:
    /// the memory printed to two decimals, the tokens the blocks it makes hold.
    #[test]
    fn kv_memory_becomes_the_tokens_vllm_logs() {
        for (config, logged_gib, logged_tokens) in [
            (llama(), 19.28, 157_936u64),
            (QWEN25_7B.to_owned(), 31.92, 597_776),
            (QWEN25_7B.to_owned(), 13.1, 245_360),
        ] {
            let per_token = kv_budget(&config, &budget(80.0, 1))
                .unwrap()
                .bytes_per_token;
            let tokens = |gib: f64| blocks_in((gib * GIB) as u64, per_token, 16) * 16;
            let (low, high) = (tokens(logged_gib - 0.005), tokens(logged_gib + 0.005));
            assert!(
                (low..=high).contains(&logged_tokens),
                "{logged_tokens} tokens logged, {low}..{high} from {logged_gib} GiB"
            );
        }
    }

    #[test]
    fn tensor_parallelism_splits_weights_and_kv_heads() {
        let one = kv_budget(&llama(), &budget(80.0, 1)).unwrap();
        let two = kv_budget(&llama(), &budget(80.0, 2)).unwrap();
        assert_eq!(two.weight_bytes, one.weight_bytes / 2);
        assert_eq!(two.bytes_per_token, one.bytes_per_token / 2);
        // Eight KV heads over 16 GPUs: each keeps one, not half of one.
        let sixteen = kv_budget(&llama(), &budget(80.0, 16)).unwrap();
        assert_eq!(sixteen.bytes_per_token, one.bytes_per_token / 8);
        let three = kv_budget(&llama(), &budget(80.0, 3))
            .unwrap_err()
            .to_string();
        assert_eq!(
            three,
            "field `num_key_value_heads`: 8 KV heads do not split over 3 GPUs"
        );
        // The activation estimate and the blocks it leaves, on an 80 GiB GPU at 0.9.
        assert_eq!(
            one.available_bytes,
            (72.0 * GIB) as u64 - one.weight_bytes - one.activation_bytes
        );
        // Two GPUs hold their communicators' buffers too; one does not.
        assert_eq!(one.communication_bytes, 0);
        assert_eq!(two.communication_bytes, COMMUNICATION_BYTES);
        assert_eq!(
            two.available_bytes,
            (72.0 * GIB) as u64 - two.weight_bytes - two.activation_bytes - COMMUNICATION_BYTES
        );
        assert_eq!(one.num_blocks, one.available_bytes / (16 * 131_072));
        let given = GpuBudget {
            non_kv_bytes: Some((16.51 * GIB) as u64),
            ..budget(80.0, 1)
        };
        let given = kv_budget(&llama(), &given).unwrap();
        assert_eq!(
            given.available_bytes,
            (72.0 * GIB) as u64 - (16.51 * GIB) as u64
        );
    }

    /// Qwen3-30B-A3B (`traces/models/`): 30.5 billion parameters, 29.0 of them in 128
    /// experts a layer; with expert parallelism over two GPUs each holds half the experts.
    #[test]
    fn experts_are_counted_and_split_over_expert_parallel_gpus() {
        let path = format!(
            "{}/../../traces/models/Qwen3-30B-A3B-Instruct-2507.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let moe = std::fs::read_to_string(path).unwrap();
        assert_eq!(experts_of(&moe).unwrap(), Some((128, 8)));
        assert_eq!(experts_of(QWEN25_7B).unwrap(), None);
        let one = kv_budget(&moe, &budget(96.0, 1)).unwrap();
        assert_eq!(one.weight_bytes, 2 * 30_532_110_336);
        let split = GpuBudget {
            expert_parallel: 2,
            ..budget(96.0, 1)
        };
        let routed = 48 * 128 * 3 * 2048 * 768;
        assert_eq!(
            kv_budget(&moe, &split).unwrap().weight_bytes,
            2 * (30_532_110_336 - routed + routed / 2)
        );
        // 2 × 48 layers × 4 KV heads × 128 × 2 bytes.
        assert_eq!(one.bytes_per_token, 98_304);
    }

    /// LLMServingSim's RTX 4090 run records its GPU (25,250,627,584 bytes), its settings
    /// (0.9 of it, 2,048 batched tokens, 256 sequences) and the blocks vLLM made: 2,588.
    #[test]
    fn a_recorded_run_gets_the_blocks_vllm_made() {
        let rtx4090 = GpuBudget {
            gpu_memory_bytes: 25_250_627_584,
            max_num_batched_tokens: 2048,
            max_num_seqs: 256,
            ..budget(1.0, 1)
        };
        let blocks = kv_budget(&llama(), &rtx4090).unwrap().num_blocks;
        assert!(
            blocks.abs_diff(2588) <= 26,
            "{blocks} blocks, vLLM made 2,588"
        );
    }

    /// Latent attention keeps one latent a token a layer on every GPU; a hybrid's linear
    /// layers keep none; a 4-bit checkpoint's weights are a quarter of bf16's (packing overheads left out).
    #[test]
    fn latent_hybrid_and_quantized_models_are_counted() {
        let file = |name: &str| {
            std::fs::read_to_string(format!(
                "{}/../../traces/models/{name}.json",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap()
        };
        let deepseek = file("DeepSeek-V3.2-Exp-16L64E");
        let one = kv_budget(&deepseek, &budget(80.0, 1)).unwrap();
        let two = kv_budget(&deepseek, &budget(80.0, 2)).unwrap();
        let kv = kv_from_model_config(&deepseek, None).unwrap();
        assert_eq!(one.bytes_per_token, kv.bytes_per_token);
        assert_eq!(
            two.bytes_per_token, one.bytes_per_token,
            "the latent is not split"
        );
        assert!(two.weight_bytes < one.weight_bytes);
        let hybrid = file("Qwen3.8-27B");
        let budget_h = kv_budget(&hybrid, &budget(80.0, 1)).unwrap();
        assert_eq!(
            budget_h.bytes_per_token,
            kv_from_model_config(&hybrid, None).unwrap().bytes_per_token
        );
        let awq = QWEN25_7B.replace(
            "{\"arch",
            "{\"quantization_config\": {\"bits\": 4, \"quant_method\": \"awq\"}, \"arch",
        );
        let q = kv_budget(&awq, &budget(80.0, 1)).unwrap().weight_bytes;
        assert_eq!(
            q * 4,
            kv_budget(QWEN25_7B, &budget(80.0, 1)).unwrap().weight_bytes
        );
    }

    #[test]
    fn models_it_cannot_count_are_refused_by_field() {
        let err = |text: &str| kv_budget(text, &budget(80.0, 1)).unwrap_err().to_string();
        // Latent attention needs its head sizes; a quantization must say its bits.
        assert!(
            err(&QWEN25_7B.replace("\"vocab_size\"", "\"kv_lora_rank\": 512, \"vocab_size\""))
                .starts_with("field `qk_rope_head_dim`: missing")
        );
        assert!(
            err(&QWEN25_7B.replace("{\"arch", "{\"quantization_config\": {}, \"arch"))
                .starts_with("field `quantization_config`: quant_method `` says no bits")
        );
        assert!(
            err(&QWEN25_7B.replace("\"vocab_size\": 152064,", ""))
                .contains("`vocab_size`: missing")
        );
        let small = kv_budget(QWEN25_7B, &budget(10.0, 1))
            .unwrap_err()
            .to_string();
        assert!(small.contains("the model does not fit"), "{small}");
    }
}

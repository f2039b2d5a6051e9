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
//! other run checks it. When the run's vLLM log is at hand, its `Total non KV cache memory`
//! (or `# GPU blocks`) is the better number.
//!
//! Weights are counted for dense and mixture-of-experts decoders: embeddings (and an untied
//! output head), attention projections, gated or plain MLPs (OPT's `ffn_dim`), experts,
//! shared experts and routers. Latent attention (`kv_lora_rank`), hybrid layers
//! (`layer_types`) and quantized checkpoints (`quantization_config`) are refused rather
//! than estimated.

use serde_json::{Map, Value};

use crate::model::{ModelConfigError, dtype_bytes, kv_from_model_config};

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
    /// Memory left for the KV cache on one GPU, bytes.
    pub available_bytes: u64,
    /// KV bytes of one token on one GPU.
    pub bytes_per_token: u64,
    /// Blocks of [`GpuBudget::block_size`] tokens.
    pub num_blocks: u64,
}

/// The blocks vLLM gives a KV cache of `available_bytes`, at `bytes_per_token` and
/// `block_size` tokens a block: whole blocks, rounded down.
pub fn blocks_in(available_bytes: u64, bytes_per_token: u64, block_size: u32) -> u64 {
    available_bytes / (bytes_per_token * u64::from(block_size)).max(1)
}

struct Keys<'a> {
    keys: &'a Map<String, Value>,
    prefix: &'static str,
}

impl Keys<'_> {
    fn field(&self, name: &str, why: &str) -> ModelConfigError {
        ModelConfigError::Field {
            field: format!("{}{name}", self.prefix),
            why: why.to_owned(),
        }
    }

    fn number(&self, name: &str) -> Result<Option<u64>, ModelConfigError> {
        match self.keys.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value.as_u64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
                self.field(
                    name,
                    &format!("must be a positive whole number, not {value}"),
                )
            }),
        }
    }

    fn required(&self, name: &str) -> Result<u64, ModelConfigError> {
        self.number(name)?
            .ok_or_else(|| self.field(name, "missing"))
    }

    fn first(&self, names: &[&str]) -> Result<Option<u64>, ModelConfigError> {
        for name in names {
            if let Some(n) = self.number(name)? {
                return Ok(Some(n));
            }
        }
        Ok(None)
    }
}

/// Parameters of the model whose config is `keys` (all of them, and those in routed
/// experts), and its KV heads and head size.
fn parameters(keys: &Keys<'_>) -> Result<(u64, u64, u64, u64, u64), ModelConfigError> {
    let hidden = keys.required("hidden_size")?;
    let layers = keys.required("num_hidden_layers")?;
    let heads = keys.required("num_attention_heads")?;
    let kv_heads = keys.number("num_key_value_heads")?.unwrap_or(heads);
    let head_dim = match keys.number("head_dim")? {
        Some(d) => d,
        None => hidden / heads,
    };
    let vocab = keys.required("vocab_size")?;
    // Embeddings tie unless the config says not (Hugging Face's default).
    let tied = keys
        .keys
        .get("tie_word_embeddings")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2;
    let dense = match keys.number("ffn_dim")? {
        Some(ffn) => 2 * hidden * ffn,
        None => 3 * hidden * keys.required("intermediate_size")?,
    };
    let experts = keys.first(&["num_experts", "num_local_experts", "n_routed_experts"])?;
    let (mlp, routed) = match experts {
        None => (dense, 0),
        Some(experts) => {
            let expert = keys
                .first(&["moe_intermediate_size"])?
                .map_or(Ok(dense), |i| Ok::<u64, ModelConfigError>(3 * hidden * i))?;
            let shared = match keys.first(&["shared_expert_intermediate_size"])? {
                Some(i) => 3 * hidden * i + hidden,
                None => keys.first(&["n_shared_experts"])?.unwrap_or(0) * expert,
            };
            (
                experts * expert + shared + hidden * experts,
                experts * expert,
            )
        }
    };
    let dense_layers = keys
        .number("first_k_dense_replace")?
        .unwrap_or(0)
        .min(layers);
    let norms = 2 * hidden;
    let per_layer = |m: u64| attention + m + norms;
    let embeddings = vocab * hidden * if tied { 1 } else { 2 };
    let positions = if keys.keys.get("model_type").and_then(Value::as_str) == Some("opt") {
        (keys.number("max_position_embeddings")?.unwrap_or(2048) + 2) * hidden
    } else {
        0
    };
    let total = dense_layers * per_layer(dense)
        + (layers - dense_layers) * per_layer(mlp)
        + embeddings
        + positions
        + hidden;
    Ok((
        total,
        (layers - dense_layers) * routed,
        kv_heads,
        head_dim,
        hidden,
    ))
}

/// The config `text`'s top-level object.
fn object(text: &str) -> Result<Map<String, Value>, ModelConfigError> {
    match serde_json::from_str(text).map_err(|e| ModelConfigError::Json(e.to_string()))? {
        Value::Object(root) => Ok(root),
        _ => Err(ModelConfigError::Json(
            "the top level is not an object".into(),
        )),
    }
}

/// The language model's keys: a multimodal config's `text_config`, else the top level.
fn language_keys(root: &Map<String, Value>) -> Keys<'_> {
    match root.get("text_config") {
        Some(Value::Object(text)) => Keys {
            keys: text,
            prefix: "text_config.",
        },
        _ => Keys {
            keys: root,
            prefix: "",
        },
    }
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
    let root = &root;
    for (name, why) in [
        (
            "kv_lora_rank",
            "latent attention: its weights are not estimated; give --num-gpu-blocks",
        ),
        (
            "layer_types",
            "hybrid layers: their weights are not estimated; give --num-gpu-blocks",
        ),
    ] {
        if keys.keys.contains_key(name) {
            return Err(keys.field(name, why));
        }
    }
    if root.contains_key("quantization_config") {
        return Err(ModelConfigError::Field {
            field: "quantization_config".into(),
            why: "a quantized checkpoint: its weights are not estimated; give --num-gpu-blocks"
                .into(),
        });
    }
    let tp = u64::from(budget.tensor_parallel.max(1));
    let kv = kv_from_model_config(text, budget.kv_dtype.as_deref())?;
    let weight_dtype = match [keys.keys, root].iter().find_map(|m| {
        m.get("torch_dtype")
            .or_else(|| m.get("dtype"))
            .and_then(Value::as_str)
    }) {
        Some(name) => dtype_bytes(name)?,
        None => return Err(keys.field("torch_dtype", "missing (nor `dtype`)")),
    };
    let (params, routed, kv_heads, head_dim, hidden) = parameters(&keys)?;
    if kv_heads > tp && kv_heads % tp != 0 {
        return Err(keys.field(
            "num_key_value_heads",
            &format!("{kv_heads} KV heads do not split over {tp} GPUs"),
        ));
    }
    let heads_per_gpu = (kv_heads / tp).max(1);
    let bytes_per_token = kv.kv_layers * 2 * heads_per_gpu * head_dim * kv.dtype_bytes;
    // Routed experts are split over the expert-parallel GPUs, the rest over the tensor
    // parallel ones.
    let ep = u64::from(budget.expert_parallel.max(1));
    let weight_bytes = ((params - routed) / tp + routed / ep) * weight_dtype;
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
    let non_kv = budget
        .non_kv_bytes
        .unwrap_or(weight_bytes + activation_bytes);
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

    #[test]
    fn models_it_cannot_count_are_refused_by_field() {
        let err = |text: &str| kv_budget(text, &budget(80.0, 1)).unwrap_err().to_string();
        assert!(
            err(&QWEN25_7B.replace("\"vocab_size\"", "\"kv_lora_rank\": 512, \"vocab_size\""))
                .starts_with("field `kv_lora_rank`: latent attention")
        );
        assert!(
            err(&QWEN25_7B.replace("{\"arch", "{\"quantization_config\": {}, \"arch"))
                .starts_with("field `quantization_config`: a quantized checkpoint")
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

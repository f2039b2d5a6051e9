//! An analytical step time from a model's shape and a GPU's limits: no measured run of that
//! GPU and model needed.
//!
//! A step is the sum of its parts, each the roofline of its work: the time to do its
//! arithmetic at the GPU's achieved matrix throughput or to read its bytes at the achieved
//! memory bandwidth, whichever is longer.
//!
//! | part | arithmetic (FLOPs) | bytes read |
//! | --- | --- | --- |
//! | the layers' dense weights | `2 × N × W` | `W × weight bytes` |
//! | routed experts (MoE) | `2 × N × k × E_p × L_moe` | experts touched × `E_p × L_moe × weight bytes` |
//! | attention | `A × pairs × L_attn` | context tokens × KV bytes per token |
//! | output head | `2 × S × V × H` | `V × H × weight bytes` |
//!
//! `N` tokens go through the layers in the step (prompt tokens computed and one per decoding
//! sequence); `W` are the layers' parameters outside routed experts (attention
//! projections, dense MLP, shared experts, routers, norms); `k` of the `count` experts of a
//! layer serve each token, so a step touches `count × (1 − (1 − k/count)^N)` of them a layer
//! (routing taken as uniform); `pairs` are the query–key pairs attention computes (a prompt
//! token attends to the context before it and itself, a decoded one to the context), `A`
//! the FLOPs of one pair in one layer (`2 × heads × (qk dim + v dim)`); `S` sequences sample
//! a token from the `V × H` output head.
//!
//! Tensor parallelism over `tp` GPUs splits all of it `tp` ways (KV heads at least one a
//! GPU) and adds two all-reduces a layer of the step's activations (a ring of
//! `2 (tp − 1)` steps, each paying a fixed latency, moves `2 (tp − 1) / tp` of them through
//! each GPU's link); expert parallelism splits the routed experts over `ep` GPUs instead and
//! adds two all-to-alls a mixture layer (dispatching each token's activations to the GPUs of
//! its experts and combining them back: one copy to each other GPU holding one of its `k`
//! experts, `(ep − 1) (1 − (1 − 1/ep)^k)` on average, in `ep − 1` steps). The step adds a
//! fixed overhead (scheduling, sampling, kernel launches). What the GPU achieves of its
//! published throughput, memory bandwidth and link, and the overhead, are the
//! [`Efficiency`] a fit refines on a measured run of that GPU; the defaults are typical of
//! vLLM on a data-centre GPU, with a PCIe link's own collectives
//! ([`Efficiency::typical`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Scheduler;
use crate::hardware::{Gpu, Link};
use crate::model::{ModelConfigError, dtype_bytes, language_keys, object};

/// The routed experts of a mixture-of-experts model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpertShape {
    /// Experts a layer.
    pub count: u32,
    /// Experts each token is routed to.
    pub per_token: u32,
    /// Parameters of one expert in one layer.
    pub params: u64,
    /// Layers with routed experts.
    pub layers: u32,
}

/// What the step time needs of a model, from its Hugging Face `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelShape {
    /// Decoder layers.
    pub layers: u32,
    /// Layers that attend over a per-token KV cache (all but a hybrid's linear ones).
    pub attention_layers: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Query heads.
    pub heads: u32,
    /// KV heads (1 for latent attention's shared latent).
    pub kv_heads: u32,
    /// Vocabulary.
    pub vocab: u32,
    /// FLOPs of one query–key pair in one attention layer.
    pub pair_flops: u64,
    /// KV elements one token keeps in one attention layer, all KV heads.
    pub kv_elements_per_layer: u64,
    /// Parameters of the layers outside routed experts, every layer.
    pub layer_params: u64,
    /// Every parameter (embeddings, output head, experts).
    pub total_params: u64,
    /// The routed experts, when it has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<ExpertShape>,
    /// Bits of one weight (`torch_dtype`, or the quantization's bits).
    pub weight_bits: u32,
}

/// The layer kinds of a hybrid model's `layer_types` that keep a per-token KV cache.
const ATTENTION_LAYERS: [&str; 4] = [
    "full_attention",
    "sliding_attention",
    "chunked_attention",
    "attention",
];

impl ModelShape {
    /// The shape of the model config `text`: dense, grouped-query, mixture-of-experts
    /// (routed, shared and dense-first layers), latent attention (`kv_lora_rank`), hybrid
    /// (`layer_types`), a multimodal config's `text_config`; weights in `torch_dtype` (or
    /// `dtype`), or the bits of a `quantization_config`.
    pub fn from_config(text: &str) -> Result<ModelShape, ModelConfigError> {
        let root = object(text)?;
        let keys = language_keys(&root);
        let hidden = keys.required("hidden_size")?;
        let layers = keys.required("num_hidden_layers")?;
        let heads = keys.required("num_attention_heads")?;
        let vocab = keys.required("vocab_size")?;
        let tied = keys
            .keys
            .get("tie_word_embeddings")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        // Attention: grouped-query, or a latent shared by the heads.
        let (attention, pair_flops, kv_heads, kv_elements) = match keys.number("kv_lora_rank")? {
            Some(rank) => {
                let rope = keys.required("qk_rope_head_dim")?;
                let nope = keys.required("qk_nope_head_dim")?;
                let v = keys.number("v_head_dim")?.unwrap_or(nope);
                let q = match keys.number("q_lora_rank")? {
                    Some(q_rank) => hidden * q_rank + q_rank * heads * (nope + rope),
                    None => hidden * heads * (nope + rope),
                };
                let weights =
                    q + hidden * (rank + rope) + rank * heads * (nope + v) + heads * v * hidden;
                // Decoding attends in the latent: keys of rank + rope, values of rank.
                (weights, 2 * heads * (2 * rank + rope), 1, rank + rope)
            }
            None => {
                let kv_heads = keys.number("num_key_value_heads")?.unwrap_or(heads);
                let head_dim = keys.number("head_dim")?.unwrap_or(hidden / heads);
                if head_dim == 0 {
                    return Err(keys.field("hidden_size", "smaller than the heads"));
                }
                let weights = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim;
                (
                    weights,
                    4 * heads * head_dim,
                    kv_heads,
                    2 * kv_heads * head_dim,
                )
            }
        };
        let attention_layers = match keys.keys.get("layer_types") {
            Some(Value::Array(types)) => {
                if types.len() as u64 != layers {
                    return Err(keys.field(
                        "layer_types",
                        &format!("{} entries for {layers} layers", types.len()),
                    ));
                }
                types
                    .iter()
                    .filter(|t| t.as_str().is_some_and(|t| ATTENTION_LAYERS.contains(&t)))
                    .count() as u64
            }
            Some(other) => return Err(keys.field("layer_types", &format!("not a list: {other}"))),
            None => layers,
        };
        let gated = !matches!(
            keys.keys.get("model_type").and_then(Value::as_str),
            Some("opt" | "gpt2" | "gpt_neox" | "falcon")
        );
        let dense_mlp = match keys.number("ffn_dim")? {
            Some(ffn) => 2 * hidden * ffn,
            None => {
                let inter = keys.number("intermediate_size")?.unwrap_or(4 * hidden);
                (if gated { 3 } else { 2 }) * hidden * inter
            }
        };
        let count = keys.first(&["num_experts", "num_local_experts", "n_routed_experts"])?;
        let dense_first = keys
            .number("first_k_dense_replace")?
            .unwrap_or(0)
            .min(layers);
        let norms = 2 * hidden;
        let (moe_layer, experts) = match count {
            None => (None, None),
            Some(count) => {
                let per_token = keys.required("num_experts_per_tok")?;
                if per_token > count {
                    return Err(keys.field(
                        "num_experts_per_tok",
                        &format!("{per_token} is more than the {count} experts"),
                    ));
                }
                let expert = match keys.number("moe_intermediate_size")? {
                    Some(i) => 3 * hidden * i,
                    None => dense_mlp,
                };
                let shared = match keys.number("shared_expert_intermediate_size")? {
                    Some(i) => 3 * hidden * i + hidden,
                    None => keys.number("n_shared_experts")?.unwrap_or(0) * expert,
                };
                let moe_layers = layers - dense_first;
                (
                    Some(attention + shared + hidden * count + norms),
                    Some(ExpertShape {
                        count: count as u32,
                        per_token: per_token as u32,
                        params: expert,
                        layers: moe_layers as u32,
                    }),
                )
            }
        };
        let dense_layer = attention + dense_mlp + norms;
        let layer_params = match (moe_layer, experts) {
            (Some(moe), Some(e)) => dense_first * dense_layer + u64::from(e.layers) * moe,
            _ => layers * dense_layer,
        };
        let routed = experts.map_or(0, |e| u64::from(e.count) * e.params * u64::from(e.layers));
        let embeddings = vocab * hidden * if tied { 1 } else { 2 };
        let positions = if keys.keys.get("model_type").and_then(Value::as_str) == Some("opt") {
            (keys.number("max_position_embeddings")?.unwrap_or(2048) + 2) * hidden
        } else {
            0
        };
        let weight_bits = match root
            .get("quantization_config")
            .and_then(|q| q.get("bits").or_else(|| q.get("weight_bits")))
            .and_then(Value::as_u64)
        {
            Some(bits) if (2..=16).contains(&bits) => bits,
            Some(bits) => {
                return Err(ModelConfigError::Field {
                    field: "quantization_config.bits".into(),
                    why: format!("{bits} bits a weight is not 2 to 16"),
                });
            }
            None if root.get("quantization_config").is_some() => {
                // fp8 checkpoints (`quant_method: fp8`) say no bits.
                let method = root["quantization_config"]
                    .get("quant_method")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if method.contains("fp8") {
                    8
                } else {
                    return Err(ModelConfigError::Field {
                        field: "quantization_config".into(),
                        why: format!("quant_method `{method}` says no bits a weight"),
                    });
                }
            }
            None => match [keys.keys, &root].iter().find_map(|m| {
                m.get("torch_dtype")
                    .or_else(|| m.get("dtype"))
                    .and_then(Value::as_str)
            }) {
                Some(name) => 8 * dtype_bytes(name)?,
                None => return Err(keys.field("torch_dtype", "missing (nor `dtype`)")),
            },
        };
        let narrow = |n: u64, what: &str| -> Result<u32, ModelConfigError> {
            u32::try_from(n).map_err(|_| keys.field(what, "too large"))
        };
        Ok(ModelShape {
            layers: narrow(layers, "num_hidden_layers")?,
            attention_layers: narrow(attention_layers, "layer_types")?,
            hidden: narrow(hidden, "hidden_size")?,
            heads: narrow(heads, "num_attention_heads")?,
            kv_heads: narrow(kv_heads, "num_key_value_heads")?,
            vocab: narrow(vocab, "vocab_size")?,
            pair_flops,
            kv_elements_per_layer: kv_elements,
            layer_params,
            total_params: layer_params + routed + embeddings + positions + hidden,
            experts,
            weight_bits: weight_bits as u32,
        })
    }

    /// Parameters in routed experts.
    pub fn routed_params(&self) -> u64 {
        self.experts
            .map_or(0, |e| u64::from(e.count) * e.params * u64::from(e.layers))
    }
}

/// What a GPU achieves of its published limits, and the fixed cost of a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Efficiency {
    /// Fraction of the matrix throughput achieved (0 to 1).
    pub compute: f64,
    /// Fraction of the memory bandwidth achieved (0 to 1).
    pub memory: f64,
    /// Fixed cost of any step, ms.
    pub overhead_ms: f64,
    /// Fixed cost of each step of a collective between GPUs of an engine, µs: a ring
    /// all-reduce over `n` GPUs takes `2 (n − 1)` steps, an all-to-all `n − 1`.
    pub collective_step_us: f64,
    /// Fraction of the interconnect's bandwidth collectives achieve (0 to 1).
    #[serde(default = "half")]
    pub interconnect: f64,
    /// A profile's: the scheduler of the engine it was fitted under. Its step overhead is
    /// that engine's host loop; an engine of another scheduler pays its own typical one
    /// ([`Efficiency::under`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<Scheduler>,
}

fn half() -> f64 {
    0.5
}

impl Efficiency {
    /// What a GPU without a profile typically achieves under an engine of `scheduler`, its
    /// GPUs joined by `link`.
    ///
    /// The step's fixed overhead: [`Default`]'s under V1, whose host work overlaps the
    /// GPU's. vLLM's V0 engine did its host work between steps (scheduling, input tensors,
    /// sampling's return to the CPU, detokenizing, the server's output), and vLLM measured
    /// that as 5 to 13 ms a decode step in which the GPU waits (vLLM RFC #6854, multi-step
    /// scheduling); a step under V0 pays the middle of that range, 9 ms.
    ///
    /// The collectives: [`Default`]'s over a fabric. Over PCIe, 20 µs a ring step and a
    /// quarter of the link (16 GB/s of PCIe 5.0's 64), the figures LLMServingSim's cluster
    /// configurations give its two RTX PRO 6000s on PCIe 5.0 (`link_bw` 16, `link_latency`
    /// 20,000 ns, for ASTRA-Sim's ring; its `serving/__main__.py` notes they match NCCL's
    /// all-reduce there). A decode step's all-reduces are a megabyte or so, far from the
    /// sizes that reach half the link.
    pub fn typical(scheduler: Scheduler, link: Link) -> Efficiency {
        let collectives = match link {
            Link::Fabric => Efficiency::default(),
            Link::Pcie => Efficiency {
                collective_step_us: 20.0,
                interconnect: 0.25,
                ..Efficiency::default()
            },
        };
        Efficiency {
            overhead_ms: host_loop_ms(scheduler),
            ..collectives
        }
    }

    /// The efficiencies an engine of `scheduler` runs at on a GPU joined by `link` with
    /// `profile` (a fitted one, under it) or without (the typical ones).
    pub fn for_engine(profile: Option<Efficiency>, scheduler: Scheduler, link: Link) -> Efficiency {
        profile.map_or_else(
            || Efficiency::typical(scheduler, link),
            |p| p.under(scheduler),
        )
    }

    /// These efficiencies for an engine of `scheduler`: a profile fitted under another
    /// scheduler keeps what the GPU achieved (compute, memory, link) and takes the step
    /// overhead typical of `scheduler`, since the overhead it fitted was its engine's host
    /// loop, not the GPU's.
    pub fn under(self, scheduler: Scheduler) -> Efficiency {
        match self.scheduler {
            Some(fitted) if fitted != scheduler => Efficiency {
                overhead_ms: host_loop_ms(scheduler),
                scheduler: Some(scheduler),
                ..self
            },
            _ => self,
        }
    }
}

/// The typical fixed overhead of a step under `scheduler`, ms ([`Efficiency::typical`]).
fn host_loop_ms(scheduler: Scheduler) -> f64 {
    match scheduler {
        Scheduler::V1 => Efficiency::default().overhead_ms,
        Scheduler::V0 => 9.0,
    }
}

impl Default for Efficiency {
    /// Typical of vLLM with CUDA graphs on GPUs joined by a fabric: large matrix
    /// multiplies reach about 60% of the dense peak, weight and KV reads about 80% of the
    /// bandwidth; about a millisecond a step of scheduling, sampling and launches; NCCL's
    /// small all-reduce between two GPUs takes ~10 µs (5 µs each of its two ring steps) and
    /// its large ones reach about half the nominal link (28 to 35 GB/s of PCIe 5.0's 64 on
    /// eight or four GPUs, NVIDIA/nccl#1639; over NVLink a step's bytes take little time
    /// either way).
    fn default() -> Self {
        Efficiency {
            compute: 0.6,
            memory: 0.8,
            overhead_ms: 1.0,
            collective_step_us: 5.0,
            interconnect: 0.5,
            scheduler: None,
        }
    }
}

/// The analytical step time of one engine: a model on `tensor_parallel` GPUs of one kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Roofline {
    /// The GPU.
    pub gpu: Gpu,
    /// The model.
    pub shape: ModelShape,
    /// GPUs the model is split over.
    pub tensor_parallel: u32,
    /// GPUs the routed experts are split over (the tensor-parallel ones when 1).
    #[serde(default = "one")]
    pub expert_parallel: u32,
    /// Bytes of one KV element.
    pub kv_bytes: u32,
    /// What the GPU achieves.
    #[serde(default)]
    pub efficiency: Efficiency,
}

fn one() -> u32 {
    1
}

/// One step's work, split as the model's parts (for tests and `--explain`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Parts {
    /// Dense layers, ms.
    pub layers_ms: f64,
    /// Routed experts, ms.
    pub experts_ms: f64,
    /// Attention, ms.
    pub attention_ms: f64,
    /// Output head, ms.
    pub head_ms: f64,
    /// All-reduces between tensor-parallel GPUs, ms.
    pub allreduce_ms: f64,
    /// All-to-alls between expert-parallel GPUs, ms.
    pub all_to_all_ms: f64,
    /// The fixed overhead, ms.
    pub overhead_ms: f64,
}

impl Parts {
    /// The step, ms.
    pub fn total(&self) -> f64 {
        self.layers_ms
            + self.experts_ms
            + self.attention_ms
            + self.head_ms
            + self.allreduce_ms
            + self.all_to_all_ms
            + self.overhead_ms
    }
}

impl Roofline {
    /// The model `shape` on `tensor_parallel` (and `expert_parallel`) GPUs `gpu`, its KV
    /// elements `kv_bytes` each, at the GPU's profiled efficiencies (else the defaults).
    pub fn new(
        gpu: Gpu,
        shape: ModelShape,
        tensor_parallel: u32,
        expert_parallel: u32,
        kv_bytes: u32,
    ) -> Roofline {
        let efficiency = gpu
            .efficiency
            .unwrap_or_else(|| Efficiency::typical(Scheduler::V1, gpu.link));
        Roofline {
            gpu: Gpu {
                efficiency: None,
                ..gpu
            },
            shape,
            tensor_parallel,
            expert_parallel,
            kv_bytes,
            efficiency,
        }
    }

    /// Its GPU with the efficiencies it runs at: a profile of the GPU.
    pub fn profile(&self) -> Gpu {
        Gpu {
            efficiency: Some(self.efficiency),
            ..self.gpu.clone()
        }
    }

    /// Checks the GPU's figures, the efficiencies (0 to 1, overheads non-negative) and the
    /// split (KV heads and experts divide over the GPUs).
    pub fn validate(&self) -> Result<(), String> {
        self.gpu.validate()?;
        let e = &self.efficiency;
        for (key, value) in [
            ("compute", e.compute),
            ("memory", e.memory),
            ("interconnect", e.interconnect),
        ] {
            if !value.is_finite() || value <= 0.0 || value > 1.0 {
                return Err(format!(
                    "engine `step_time.efficiency.{key}` must be above 0 and at most 1, not {value}"
                ));
            }
        }
        for (key, value) in [
            ("overhead_ms", e.overhead_ms),
            ("collective_step_us", e.collective_step_us),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(format!(
                    "engine `step_time.efficiency.{key}` must be a finite, non-negative number, not {value}"
                ));
            }
        }
        let tp = self.tensor_parallel;
        if tp == 0 || self.expert_parallel == 0 {
            return Err(
                "engine `step_time`: tensor and expert parallel sizes must be at least 1".into(),
            );
        }
        if self.shape.experts.is_some()
            && self.expert_parallel > tp
            && !self.expert_parallel.is_multiple_of(tp)
        {
            return Err(format!(
                "engine `step_time`: {} expert-parallel GPUs are not whole data-parallel ranks of {tp} tensor-parallel GPUs",
                self.expert_parallel
            ));
        }
        if self.shape.kv_heads > tp && !self.shape.kv_heads.is_multiple_of(tp) {
            return Err(format!(
                "engine `step_time`: {} KV heads do not split over {tp} GPUs",
                self.shape.kv_heads
            ));
        }
        if !(1..=16).contains(&self.kv_bytes) || !(2..=32).contains(&self.shape.weight_bits) {
            return Err(
                "engine `step_time`: KV bytes must be 1 to 16 and weight bits 2 to 32".into(),
            );
        }
        Ok(())
    }

    /// KV bytes of one token on one GPU (every attention layer; KV heads split over the
    /// tensor-parallel GPUs, at least one each).
    pub fn kv_bytes_per_token(&self) -> u64 {
        let s = &self.shape;
        let tp = u64::from(self.tensor_parallel.max(1));
        let per_head = s.kv_elements_per_layer / u64::from(s.kv_heads.max(1));
        let heads = (u64::from(s.kv_heads) / tp).max(1);
        u64::from(s.attention_layers) * per_head * heads * u64::from(self.kv_bytes)
    }

    /// The step's parts, ms.
    pub fn parts(&self, batch: &crate::step_time::Batch) -> Parts {
        let s = &self.shape;
        let e = &self.efficiency;
        let tp = f64::from(self.tensor_parallel.max(1));
        let ep = if self.expert_parallel > 1 {
            f64::from(self.expert_parallel)
        } else {
            tp
        };
        // 8-bit weights multiply at the fp8 rate; narrower ones are widened to 16 bits.
        let tflops = if s.weight_bits == 8 {
            self.gpu.fp8_tflops
        } else {
            self.gpu.bf16_tflops
        };
        let flops_per_ms = tflops * 1e9 * e.compute;
        let bytes_per_ms = self.gpu.memory_gb_s * 1e6 * e.memory;
        let roof = |flops: f64, bytes: f64| (flops / flops_per_ms).max(bytes / bytes_per_ms);
        let decoding = batch.decode_tokens.max(batch.decode_seqs);
        let tokens = (batch.prefill_tokens + decoding) as f64;
        let wb = f64::from(s.weight_bits) / 8.0;
        let layers_ms = roof(
            2.0 * tokens * s.layer_params as f64 / tp,
            s.layer_params as f64 * wb / tp,
        );
        let experts_ms = s.experts.map_or(0.0, |x| {
            let count = f64::from(x.count.max(1));
            let miss = 1.0 - f64::from(x.per_token.min(x.count)) / count;
            let touched = count * (1.0 - miss.powf(tokens));
            let per_expert = x.params as f64 * f64::from(x.layers);
            roof(
                2.0 * tokens * f64::from(x.per_token) * per_expert / ep,
                touched * per_expert * wb / ep,
            )
        });
        let pairs = if batch.attention_pairs > 0 {
            batch.attention_pairs
        } else {
            batch.context_tokens
        } as f64;
        let attention_ms = roof(
            pairs * s.pair_flops as f64 * f64::from(s.attention_layers) / tp,
            batch.context_tokens as f64 * self.kv_bytes_per_token() as f64,
        );
        // The positions that sample: each decoding one (and each draft verified), and a
        // prompt finishing (one, at least, when the step prefills).
        let sampling = (decoding + u64::from(batch.prefill_tokens > 0)) as f64;
        let head = f64::from(s.vocab) * f64::from(s.hidden);
        let head_ms = roof(2.0 * sampling * head / tp, head * wb / tp);
        // One collective: `bytes` through each GPU's link in `steps` ring steps, ms.
        let link_per_ms = self.gpu.interconnect_gb_s * 1e6 * e.interconnect;
        let collective =
            |bytes: f64, steps: f64| bytes / link_per_ms + steps * e.collective_step_us / 1e3;
        let allreduce_ms = if self.tensor_parallel > 1 {
            let bytes = tokens * f64::from(s.hidden) * 2.0 * 2.0 * (tp - 1.0) / tp;
            2.0 * f64::from(s.layers) * collective(bytes, 2.0 * (tp - 1.0))
        } else {
            0.0
        };
        let all_to_all_ms = match s.experts {
            Some(x) if self.expert_parallel > 1 => {
                // A token goes once to each other GPU holding one of its experts.
                let miss = (1.0 - 1.0 / ep).powf(f64::from(x.per_token));
                let copies = (ep - 1.0) * (1.0 - miss);
                let bytes = tokens * copies * f64::from(s.hidden) * 2.0;
                2.0 * f64::from(x.layers) * collective(bytes, ep - 1.0)
            }
            _ => 0.0,
        };
        Parts {
            layers_ms,
            experts_ms,
            attention_ms,
            head_ms,
            allreduce_ms,
            all_to_all_ms,
            overhead_ms: e.overhead_ms,
        }
    }
}

#[cfg(test)]
mod tests;

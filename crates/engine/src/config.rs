//! One engine's settings, in one place: [`EngineConfig`] (the KV cache, the scheduler's
//! limits, the step-time model), its [`Preset`]s, the [`Overrides`] a user lays over a
//! preset (the experiment file's `engine` and `engines`, `--engine-config`), and the one
//! [`EngineConfig::validate`]. Adding a setting is a change to this file only: the
//! conversions below take every struct apart field by field, so one left out is a compile
//! error.

use serde::{Deserialize, Serialize};

use crate::host::HostTier;
use crate::lora::LoraConfig;
use crate::speculative::Speculative;
use crate::step_time::StepTime;

/// One engine's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// KV-cache blocks.
    pub num_gpu_blocks: u32,
    /// Tokens per KV block.
    pub engine_block_size: u32,
    /// Most sequences running at once.
    pub max_num_seqs: u32,
    /// Token budget of one step.
    pub max_num_batched_tokens: u32,
    /// Step-time model.
    pub step_time: StepTime,
    /// KV bytes of one token (all layers, keys and values), what sizes a host tier's loads
    /// (added in 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_bytes_per_token: Option<u64>,
    /// A host-memory tier below the GPU cache (added in 0.5; see [`crate::host`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_tier: Option<HostTier>,
    /// This engine's link to the fleet's shared tier, and the tier's capacity (added in
    /// 0.5; see [`crate::host`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_tier: Option<HostTier>,
    /// How steps are formed: vLLM V1's (the default) or V0's.
    #[serde(default, skip_serializing_if = "Scheduler::is_v1")]
    pub scheduler: Scheduler,
    /// Whether computed prompt blocks are kept for reuse by their hash (vLLM's
    /// `--enable-prefix-caching`, the default since V1; added in 0.5). Without it no request
    /// hits a cached prefix and no block is published (no KV event).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub prefix_caching: bool,
    /// vLLM V0 up to 0.3 batched prompts padded to the longest (added in 0.5): with it, a
    /// prefill step's prompts count `prompts × longest` tokens against
    /// `max_num_batched_tokens` and are computed at that size, and a prompt is not added
    /// to the step when the batch's padding would pass this many tokens (vLLM's
    /// `--max-paddings`, 256 by default). V0 only; without it, prompts batch unpadded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_paddings: Option<u32>,
    /// LoRA adapter slots (added in 0.5; see [`crate::lora`]); without, requests that name
    /// an adapter run as the base model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
    /// Speculative decoding (added in 0.6; see [`crate::speculative`]); without, one token a
    /// decode step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Speculative>,
    /// vLLM's async scheduling (added in 0.6; on by default since vLLM 0.14, pull request
    /// 27614): the scheduler plans the next step while the GPU runs this one, so a request
    /// arriving during a step joins the step after the next. V1 only.
    #[serde(default, skip_serializing_if = "is_false")]
    pub async_scheduling: bool,
}

fn yes() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// How an engine forms its steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    /// vLLM V1: running sequences first (decodes and prefill chunks), then admissions, in
    /// one mixed step; a prompt longer than the step's token budget is chunked.
    #[default]
    V1,
    /// vLLM V0's default scheduler: while requests wait and one can be admitted, a step
    /// runs only prefills (whole prompts, within the token budget); else it decodes every
    /// running sequence. No chunked prefill (a prompt longer than the whole budget, which
    /// vLLM would refuse, is chunked here rather than left waiting forever).
    V0,
}

impl Scheduler {
    /// Whether it is V1 (the default, left out of written configs).
    pub fn is_v1(&self) -> bool {
        *self == Scheduler::V1
    }
}

impl EngineConfig {
    /// NVIDIA Dynamo's mocker defaults: 16,384 blocks of 64 tokens, 256 sequences, 8,192
    /// tokens a step, the polynomial step time.
    pub fn dynamo() -> EngineConfig {
        EngineConfig {
            num_gpu_blocks: 16_384,
            engine_block_size: 64,
            max_num_seqs: 256,
            max_num_batched_tokens: 8_192,
            step_time: StepTime::Polynomial {
                prefill: [4.21e-7, 0.01518, 16.5],
                decode: [-25.74, 54.01, 5.74],
            },
            kv_bytes_per_token: None,
            host_tier: None,
            shared_tier: None,
            scheduler: Default::default(),
            prefix_caching: true,
            max_paddings: None,
            lora: None,
            speculative: None,
            async_scheduling: false,
        }
    }

    /// Checks the settings; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        for (key, value) in [
            ("num_gpu_blocks", self.num_gpu_blocks),
            ("engine_block_size", self.engine_block_size),
            ("max_num_seqs", self.max_num_seqs),
            ("max_num_batched_tokens", self.max_num_batched_tokens),
        ] {
            if value == 0 {
                return Err(format!("engine `{key}` must be at least 1"));
            }
        }
        self.step_time.validate(
            self.max_num_batched_tokens,
            self.max_num_seqs,
            u64::from(self.num_gpu_blocks) * u64::from(self.engine_block_size),
        )?;
        for (key, tier) in [
            ("host_tier", &self.host_tier),
            ("shared_tier", &self.shared_tier),
        ] {
            let Some(tier) = tier else { continue };
            tier.validate(key)?;
            if self.kv_bytes_per_token.is_none_or(|b| b == 0) {
                return Err(format!(
                    "engine `{key}` needs `kv_bytes_per_token` (the KV bytes of one token), as its loads are sized in bytes"
                ));
            }
        }
        if let Some(lora) = &self.lora {
            lora.validate()?;
        }
        if let Some(speculative) = &self.speculative {
            speculative.validate()?;
        }
        if self.max_paddings.is_some() && self.scheduler != Scheduler::V0 {
            return Err(
                "engine `max_paddings` needs `scheduler: v0` (V1 never pads a batch)".into(),
            );
        }
        if self.async_scheduling && self.scheduler != Scheduler::V1 {
            return Err(
                "engine `async_scheduling` needs `scheduler: v1` (vLLM V0 plans each step after the last)".into(),
            );
        }
        if self.kv_bytes_per_token.is_some_and(|b| b > 1 << 30) {
            return Err("engine `kv_bytes_per_token` must be at most 2^30".into());
        }
        // Every block is simulated: keep the model's memory bounded (16 M blocks is ~400 MB).
        if self.num_gpu_blocks > crate::kv::MAX_BLOCKS {
            return Err(format!(
                "engine `num_gpu_blocks` must be at most {}",
                crate::kv::MAX_BLOCKS
            ));
        }
        // Token counts are 32-bit: a cache that could hold more than 2^31 tokens could let a
        // request's length overflow them.
        if u64::from(self.num_gpu_blocks) * u64::from(self.engine_block_size) > 1 << 31 {
            return Err(
                "engine `num_gpu_blocks` × `engine_block_size` must be at most 2^31 tokens".into(),
            );
        }
        Ok(())
    }
}

/// A named starting point for an engine's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// NVIDIA Dynamo's mocker defaults (16,384 blocks of 64 tokens, 256 seqs, 8,192
    /// tokens/step, polynomial step time).
    Dynamo,
}

impl Preset {
    /// Every preset, in the order the command line lists them.
    pub const ALL: [Preset; 1] = [Preset::Dynamo];

    /// Its name on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Dynamo => "dynamo",
        }
    }

    /// The settings it stands for.
    pub fn config(self) -> EngineConfig {
        match self {
            Preset::Dynamo => EngineConfig::dynamo(),
        }
    }
}

impl std::str::FromStr for Preset {
    type Err = String;
    fn from_str(text: &str) -> Result<Preset, String> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "unknown engine preset `{text}` (presets: {})",
                    names.join(", ")
                )
            })
    }
}

/// Engine settings laid over a preset, every key optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overrides {
    /// Start from this preset instead.
    pub preset: Option<Preset>,
    /// KV-cache blocks.
    pub num_gpu_blocks: Option<u32>,
    /// Tokens per KV block.
    pub engine_block_size: Option<u32>,
    /// Running sequences at most.
    pub max_num_seqs: Option<u32>,
    /// Tokens per step at most.
    pub max_num_batched_tokens: Option<u32>,
    /// Step-time model.
    pub step_time: Option<StepTime>,
    /// KV bytes of one token.
    pub kv_bytes_per_token: Option<u64>,
    /// A host-memory tier.
    pub host_tier: Option<HostTier>,
    /// The link to the fleet's shared tier.
    pub shared_tier: Option<HostTier>,
    /// How steps are formed.
    pub scheduler: Option<Scheduler>,
    /// Whether prompt blocks are kept for reuse.
    pub prefix_caching: Option<bool>,
    /// Padded prompt batches (V0).
    pub max_paddings: Option<u32>,
    /// LoRA adapter slots.
    pub lora: Option<LoraConfig>,
    /// Speculative decoding.
    pub speculative: Option<Speculative>,
    /// vLLM's async scheduling.
    pub async_scheduling: Option<bool>,
}

impl EngineConfig {
    /// `self` with `overrides` laid over it (a `preset` key first replaces everything).
    pub fn with(mut self, overrides: &Overrides) -> EngineConfig {
        let Overrides {
            preset,
            num_gpu_blocks,
            engine_block_size,
            max_num_seqs,
            max_num_batched_tokens,
            step_time,
            kv_bytes_per_token,
            host_tier,
            shared_tier,
            scheduler,
            prefix_caching,
            max_paddings,
            lora,
            speculative,
            async_scheduling,
        } = overrides;
        if let Some(preset) = preset {
            self = preset.config();
        }
        let EngineConfig {
            num_gpu_blocks: blocks,
            engine_block_size: block_size,
            max_num_seqs: seqs,
            max_num_batched_tokens: budget,
            step_time: model,
            kv_bytes_per_token: kv_bytes,
            host_tier: host,
            shared_tier: shared,
            scheduler: steps,
            prefix_caching: caching,
            max_paddings: paddings,
            lora: adapters,
            speculative: drafts,
            async_scheduling: overlapped,
        } = &mut self;
        if let Some(v) = num_gpu_blocks {
            *blocks = *v;
        }
        if let Some(v) = engine_block_size {
            *block_size = *v;
        }
        if let Some(v) = max_num_seqs {
            *seqs = *v;
        }
        if let Some(v) = max_num_batched_tokens {
            *budget = *v;
        }
        if let Some(v) = step_time {
            *model = v.clone();
        }
        if let Some(v) = kv_bytes_per_token {
            *kv_bytes = Some(*v);
        }
        if let Some(v) = host_tier {
            *host = Some(*v);
        }
        if let Some(v) = shared_tier {
            *shared = Some(*v);
        }
        if let Some(v) = scheduler {
            *steps = *v;
        }
        if let Some(v) = prefix_caching {
            *caching = *v;
        }
        if let Some(v) = max_paddings {
            *paddings = Some(*v);
        }
        if let Some(v) = lora {
            *adapters = Some(*v);
        }
        if let Some(v) = speculative {
            *drafts = Some(v.clone());
        }
        if let Some(v) = async_scheduling {
            *overlapped = *v;
        }
        self
    }
}

impl From<&EngineConfig> for Overrides {
    /// Every setting of `config`, as overrides (no preset).
    fn from(config: &EngineConfig) -> Overrides {
        let EngineConfig {
            num_gpu_blocks,
            engine_block_size,
            max_num_seqs,
            max_num_batched_tokens,
            step_time,
            kv_bytes_per_token,
            host_tier,
            shared_tier,
            scheduler,
            prefix_caching,
            max_paddings,
            lora,
            speculative,
            async_scheduling,
        } = config;
        Overrides {
            preset: None,
            num_gpu_blocks: Some(*num_gpu_blocks),
            engine_block_size: Some(*engine_block_size),
            max_num_seqs: Some(*max_num_seqs),
            max_num_batched_tokens: Some(*max_num_batched_tokens),
            step_time: Some(step_time.clone()),
            kv_bytes_per_token: *kv_bytes_per_token,
            host_tier: *host_tier,
            shared_tier: *shared_tier,
            scheduler: Some(*scheduler),
            prefix_caching: Some(*prefix_caching),
            max_paddings: *max_paddings,
            lora: *lora,
            speculative: speculative.clone(),
            async_scheduling: Some(*async_scheduling),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_of_every_setting_rebuild_the_config_from_any_base() {
        let wanted = EngineConfig {
            num_gpu_blocks: 7,
            engine_block_size: 3,
            max_num_seqs: 2,
            max_num_batched_tokens: 99,
            step_time: StepTime::Linear {
                overhead_ms: 1.0,
                prefill_ms_per_token: 0.5,
                decode_ms: 2.0,
            },
            kv_bytes_per_token: Some(131_072),
            host_tier: Some(HostTier {
                blocks: 16,
                d2h_gbps: 10.0,
                h2d_gbps: 20.0,
                latency_ms: 0.5,
                blocking: false,
            }),
            shared_tier: Some(HostTier {
                blocks: 64,
                d2h_gbps: 5.0,
                h2d_gbps: 6.0,
                latency_ms: 2.0,
                blocking: false,
            }),
            scheduler: Scheduler::V0,
            prefix_caching: false,
            max_paddings: Some(256),
            lora: Some(LoraConfig {
                slots: 4,
                load_ms: 30.0,
                step_overhead: 0.05,
            }),
            speculative: Some(Speculative {
                method: crate::speculative::Method::Ngram,
                num_tokens: 3,
                acceptance: vec![0.6],
                draft_cost: None,
            }),
            async_scheduling: true,
        };
        assert_eq!(
            EngineConfig::dynamo().with(&Overrides::from(&wanted)),
            wanted
        );
        // No override leaves the base; a preset resets before the keys apply.
        assert_eq!(wanted.clone().with(&Overrides::default()), wanted);
        let reset = Overrides {
            preset: Some(Preset::Dynamo),
            max_num_seqs: Some(5),
            ..Overrides::default()
        };
        let expected = EngineConfig {
            max_num_seqs: 5,
            ..EngineConfig::dynamo()
        };
        assert_eq!(wanted.with(&reset), expected);
    }

    #[test]
    fn padded_prompt_batches_are_v0s_alone() {
        let padded = EngineConfig {
            max_paddings: Some(256),
            ..EngineConfig::dynamo()
        };
        assert_eq!(
            padded.validate(),
            Err("engine `max_paddings` needs `scheduler: v0` (V1 never pads a batch)".into())
        );
        let v0 = EngineConfig {
            scheduler: Scheduler::V0,
            ..padded
        };
        assert_eq!(v0.validate(), Ok(()));
    }

    #[test]
    fn presets_are_named() {
        assert_eq!("dynamo".parse::<Preset>(), Ok(Preset::Dynamo));
        assert_eq!(
            "vllm".parse::<Preset>(),
            Err("unknown engine preset `vllm` (presets: dynamo)".into())
        );
    }
}

//! One engine's settings: the KV cache, the scheduler's limits and the step-time model,
//! with NVIDIA Dynamo's mocker defaults as the preset and one `validate`.

use serde::{Deserialize, Serialize};

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
        // Every block is simulated: keep the model's memory bounded (16 M blocks is ~400 MB).
        if self.num_gpu_blocks > 1 << 24 {
            return Err("engine `num_gpu_blocks` must be at most 16777216".into());
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

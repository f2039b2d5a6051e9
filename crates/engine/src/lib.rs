//! routerlab-engine: the engine model of the timed replay and of `routerlab engine`: one inference engine per endpoint, with a paged
//! KV cache with prefix caching, a FIFO scheduler with chunked prefill, and a step-time
//! model. It runs on a logical clock (nanoseconds) and never sleeps.
//!
//! The KV cache follows vLLM's prefix caching: a full block is identified by the chained
//! hash of its prefix; a request reuses the longest run of leading blocks already cached;
//! blocks held by running requests are pinned; blocks nobody holds stay cached but free, in
//! a queue evicted oldest first. A finished request frees its blocks deepest first, so
//! within a chain the deeper blocks are evicted before the shallow ones others share.
//!
//! The scheduler follows vLLM v1: each step has a token budget (`max_num_batched_tokens`)
//! and at most `max_num_seqs` running sequences. Running sequences go first (one token
//! each when decoding, a chunk when prefilling), then waiting requests are admitted in FIFO
//! order while the budget, the sequence limit and free blocks allow (a request that does
//! not fit blocks the queue, as in vLLM). A decoding sequence that needs a new block when
//! none is free preempts the most recently admitted running sequence, which frees its
//! blocks and returns to the head of the queue to be recomputed (counted as a preemption).
//!
//! Steps in which nothing but token counts changes (only decodes, nobody finishes, nobody
//! can be admitted) are identical, so they are simulated as one "macro step" of `k` steps;
//! the blocks the sequences fill during it are reserved at its start (so reported KV usage
//! leads by at most one run's blocks), and an arrival cuts it at the next step boundary.
//!
//! [`config`] owns the settings (one declaration, the preset, one `validate`),
//! [`step_time`] the step-time models, [`kv`] the KV cache, [`host`] the host and shared
//! tiers below it, [`forecast`] the forecast a simulating router asks for, [`lora`] the LoRA adapter slots, [`model`] a model's KV bytes per token, [`hardware`] GPUs' limits, [`roofline`] the analytical step time from a model's shape and a GPU's limits, [`speculative`] speculative decoding, [`scheduler`] the engine, and
//! [`transfer`] the KV's move between the pools of a disaggregated fleet.

pub mod config;
pub mod forecast;
pub mod hardware;
pub mod host;
pub mod kv;
pub mod lora;
pub mod memory;
pub mod model;
pub mod roofline;
pub mod scheduler;
mod sequence;
pub mod speculative;
pub mod step_time;
mod tiers;
pub mod transfer;

pub use config::{EngineConfig, Overrides, Preset, Scheduler};
pub use hardware::{Gpu, Link};
pub use host::{HostCache, HostTier, SharedStore};
pub use kv::{KvCache, KvEvent};
pub use lora::{LoraConfig, LoraStatus};
pub use memory::{GpuBudget, KvBudget, experts_of, kv_budget};
pub use model::{ModelConfigError, ModelKv, kv_from_model_config, read_model_config};
pub use roofline::{Efficiency, ModelShape, Roofline};
pub use scheduler::{Engine, EngineStatus, Sequence};
pub use speculative::Speculative;
pub use step_time::{Batch, Experts, StepTime};
pub use transfer::{KvTransfer, TransferMode};

//! Prefix-block hash chains: what the host computes once per request so plugins never
//! re-hash prompts. The trace's own chain (blocks of `--block-size` bytes or
//! `--trace-block-size` tokens) feeds the plugins; the engine model needs chains in its own
//! block size, which [`engine_block_hashes`] derives from the same request.

use routerlab_core::hash::{chain, hash64};
use routerlab_core::{BYTES_PER_TOKEN, Unit};

use crate::reader::{TraceFormat, TraceRequest};

/// Cuts `prompt` into blocks of `block_size` bytes (the last may be partial) and writes the
/// chained hash of each: hash `i` covers bytes `0 .. (i + 1) * block_size`.
pub fn hash_text_blocks(prompt: &[u8], block_size: usize, out: &mut Vec<u64>) {
    out.clear();
    let mut previous = 0u64;
    for block in prompt.chunks(block_size.max(1)) {
        previous = chain(previous, block);
        out.push(previous);
    }
}

/// Engine-block hashes of a request for engine blocks of `engine_block` tokens. Only full
/// blocks are hashed. Mooncake ids (one per `trace_block` tokens, each naming the whole
/// prefix) are expanded: engine block `j` is named by the id of the trace block holding its
/// last token, mixed with `j`. Text uses 4 bytes a token; token ids are hashed directly.
pub fn engine_block_hashes(
    format: TraceFormat,
    request: &TraceRequest,
    trace_block: u32,
    prompt_tokens: u32,
    engine_block: u32,
) -> Vec<u64> {
    let parts = RequestParts {
        blocks: &request.blocks,
        prompt: &request.prompt,
        token_ids: &request.token_ids,
    };
    engine_chain_of(format, parts, trace_block, prompt_tokens, engine_block)
}

/// What [`engine_chain_of`] derives a chain from: the trace's chain, the prompt text, the
/// prompt's token ids (only a token-id trace has them).
#[derive(Debug, Clone, Copy)]
pub struct RequestParts<'a> {
    /// The trace's chain.
    pub blocks: &'a [u64],
    /// The prompt text (chat traces).
    pub prompt: &'a [u8],
    /// The prompt's token ids (token-id traces).
    pub token_ids: &'a [u32],
}

/// [`engine_block_hashes`] from a request's parts.
pub fn engine_chain_of(
    format: TraceFormat,
    request: RequestParts<'_>,
    trace_block: u32,
    prompt_tokens: u32,
    engine_block: u32,
) -> Vec<u64> {
    let full = (prompt_tokens / engine_block) as usize;
    match format {
        TraceFormat::Mooncake | TraceFormat::AgenticMooncake | TraceFormat::Weka => (0..full)
            .map(|j| {
                let last_token = (j as u64 + 1) * u64::from(engine_block) - 1;
                let id = request.blocks[(last_token / u64::from(trace_block)) as usize];
                hash64(&id.to_le_bytes(), j as u64 + 1)
            })
            .collect(),
        TraceFormat::Chat => text_engine_chain(request.prompt, engine_block)
            .into_iter()
            .take(full)
            .collect(),
        // No prefix identity: no block is ever shared.
        TraceFormat::AzureCsv | TraceFormat::BurstGpt => Vec::new(),
        TraceFormat::TokenIds => {
            let mut previous = 0;
            request
                .token_ids
                .chunks_exact(engine_block as usize)
                .take(full)
                .map(|ids| {
                    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
                    previous = chain(previous, &bytes);
                    previous
                })
                .collect()
        }
    }
}

/// Engine-block hashes of a text prompt (4 bytes a token, full blocks only): what the
/// engine model's prefix cache is keyed by, for a replayed chat request and for a prompt
/// that arrives over HTTP alike.
pub fn text_engine_chain(prompt: &[u8], engine_block: u32) -> Vec<u64> {
    let mut previous = 0;
    prompt
        .chunks_exact(engine_block.max(1) as usize * BYTES_PER_TOKEN as usize)
        .map(|b| {
            previous = chain(previous, b);
            previous
        })
        .collect()
}

/// Prompt tokens of a request: exact for token traces, bytes / 4 for text. The one estimate
/// both replays and every report use.
pub fn prompt_tokens(unit: Unit, prompt_len: u64) -> u64 {
    unit.tokens(prompt_len)
}

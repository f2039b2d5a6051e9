//! Prefix-block hash chains: what the host computes once per request so plugins never
//! re-hash prompts. The trace's own chain (blocks of `--block-size` bytes or
//! `--trace-block-size` tokens) feeds the plugins; the engine model needs chains in its own
//! block size, which [`engine_block_hashes`] derives from the same request.

use routerlab_core::hash::chain;
use routerlab_core::{BYTES_PER_TOKEN, Unit};

use crate::request::TraceRequest;
use crate::trace_format::TraceFormat;

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
    let mut chain = Vec::new();
    engine_chain_into(
        format,
        request,
        trace_block,
        prompt_tokens,
        engine_block,
        &mut chain,
    );
    chain
}

/// [`engine_chain_of`] into `chain` (emptied first), in the room it has.
pub fn engine_chain_into(
    format: TraceFormat,
    request: RequestParts<'_>,
    trace_block: u32,
    prompt_tokens: u32,
    engine_block: u32,
    chain: &mut Vec<u64>,
) {
    chain.clear();
    let full = (prompt_tokens / engine_block) as usize;
    match format {
        TraceFormat::Mooncake | TraceFormat::AgenticMooncake | TraceFormat::Weka => {
            mooncake_engine_chain_into(request.blocks, trace_block, engine_block, full, chain)
        }
        TraceFormat::Chat => chain.extend(
            text_engine_chain(request.prompt, engine_block)
                .into_iter()
                .take(full),
        ),
        // No prefix identity: no block is ever shared.
        TraceFormat::AzureCsv | TraceFormat::BurstGpt => {}
        TraceFormat::TokenIds => {
            let mut previous = 0;
            chain.extend(
                request
                    .token_ids
                    .chunks_exact(engine_block as usize)
                    .take(full)
                    .map(|ids| {
                        let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
                        previous = routerlab_core::hash::chain(previous, &bytes);
                        previous
                    }),
            )
        }
    }
}

/// Whether the engine chains of a trace of `format` are keyed by its trace blocks and their
/// places (Mooncake's ids: see [`engine_chain_of`]), so that a block of the trace
/// that no other request has at its place makes engine blocks no other request has.
pub fn keyed_by_trace_blocks(format: TraceFormat) -> bool {
    matches!(
        format,
        TraceFormat::Mooncake | TraceFormat::AgenticMooncake | TraceFormat::Weka
    )
}

/// Of a request's engine chain for `engine_block`-token blocks, how many leading blocks may
/// be in other requests' engine chains, given that no other request's trace chain has its
/// trace blocks from `shared` on (of `trace_block` tokens) at their place; `None` when
/// the trace's chains do not say ([`keyed_by_trace_blocks`]). See
/// [`crate::sharing::Sharing`].
pub fn shared_engine_blocks(
    format: TraceFormat,
    shared: usize,
    trace_block: u32,
    engine_block: u32,
) -> Option<usize> {
    // Engine block `j` is keyed by the trace block holding its last token, and by `j`: it
    // may be shared only when that trace block is one of the first `shared`, that is when
    // `(j + 1) * engine_block <= shared * trace_block`.
    keyed_by_trace_blocks(format).then(|| {
        let tokens = (shared as u64).saturating_mul(u64::from(trace_block.max(1)));
        usize::try_from(tokens / u64::from(engine_block.max(1))).unwrap_or(usize::MAX)
    })
}

/// The first `full` engine-block keys of a Mooncake request with trace chain `ids` (one
/// id per `trace_block` tokens): engine block `j` is keyed by the id of the trace block
/// holding its last token, mixed with `j`. Engine keys never leave the engine model, so
/// they need only be distinct (and spread, for the maps keyed by them): a bijective mix of
/// the id, offset by a bijective function of `j`, so two blocks share a key only by a
/// 64-bit coincidence of the mixed ids (blocks of one request never do). A long prompt has
/// hundreds of engine blocks: each id is mixed once, and the engine blocks it covers are
/// written in one run. They are appended to `chain`.
fn mooncake_engine_chain_into(
    ids: &[u64],
    trace_block: u32,
    engine_block: u32,
    full: usize,
    chain: &mut Vec<u64>,
) {
    const ODD: u64 = 0x9e37_79b9_7f4a_7c15;
    let (engine, trace) = (
        u64::from(engine_block).max(1),
        u64::from(trace_block).max(1),
    );
    let full = full as u64;
    chain.reserve(full as usize);
    // Engine blocks keyed so far: blocks `0 .. done`.
    let mut done = 0u64;
    for (at, id) in (1u64..).zip(ids) {
        if done == full {
            break;
        }
        // The engine blocks whose last token comes before this trace block's end, `at *
        // trace`: `j` with `(j + 1) * engine <= at * trace`.
        let upto = (at * trace / engine).min(full);
        if upto > done {
            let mixed = fmix64(*id);
            // Block `j`'s offset `(j + 1) × ODD`, kept by adding (a range has an exact
            // length: `extend` writes without checking the capacity).
            let mut offset = done.wrapping_mul(ODD);
            chain.extend((done..upto).map(|_| {
                offset = offset.wrapping_add(ODD);
                mixed ^ offset
            }));
            done = upto;
        }
    }
}

/// MurmurHash3's 64-bit finaliser: a bijection of `u64` that spreads every input bit.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mooncake_engine_chain(ids: &[u64], trace: u32, engine: u32, full: usize) -> Vec<u64> {
        let mut chain = Vec::new();
        mooncake_engine_chain_into(ids, trace, engine, full, &mut chain);
        chain
    }

    /// Requests whose trace chains share a lead of `r % 5` ids and then go their own ways:
    /// for every engine block size, the engine blocks past `shared_engine_blocks` of the
    /// lead are in no other request's engine chain, and the ones before it all are.
    #[test]
    fn engine_blocks_past_the_shared_ones_are_in_no_other_chain() {
        let trace = 512u32;
        let chains: Vec<Vec<u64>> = (0..40u64)
            .map(|r| {
                (0..8)
                    .map(|i| if i < r % 5 { i } else { 1_000 + r * 10 + i })
                    .collect()
            })
            .collect();
        for engine in [16u32, 64, 100, 512, 700, 1_024] {
            let full = (8 * trace / engine) as usize;
            let engine_chain = |ids: &[u64]| mooncake_engine_chain(ids, trace, engine, full);
            let all: Vec<Vec<u64>> = chains.iter().map(|ids| engine_chain(ids)).collect();
            for (r, keys) in all.iter().enumerate() {
                let lead = r % 5;
                let shared = shared_engine_blocks(TraceFormat::Mooncake, lead, trace, engine)
                    .expect("Mooncake chains say");
                let elsewhere =
                    |key: &u64| (all.iter().enumerate()).any(|(o, k)| o != r && k.contains(key));
                assert!(
                    keys[shared.min(full)..].iter().all(|k| !elsewhere(k)),
                    "engine {engine}, request {r}"
                );
                assert!(
                    keys[..shared.min(full)].iter().all(elsewhere),
                    "engine {engine}, request {r}"
                );
            }
        }
        assert_eq!(shared_engine_blocks(TraceFormat::Chat, 3, trace, 16), None);
    }

    /// Engine block `j` keyed from the trace block holding its last token, one at a time.
    fn one_by_one(ids: &[u64], trace: u64, engine: u64, full: u64) -> Vec<u64> {
        (0..full)
            .map(|j| {
                let at = ((j + 1) * engine - 1) / trace;
                fmix64(ids[at as usize]) ^ (j + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            })
            .collect()
    }

    #[test]
    fn mooncake_keys_in_runs_are_the_keys_block_by_block() {
        let ids: Vec<u64> = (0..40).map(|i| i * 7 + 3).collect();
        for trace in [1u32, 16, 64, 100, 512] {
            for engine in [1u32, 16, 32, 64, 100, 512, 1024] {
                let most = ids.len() as u64 * u64::from(trace) / u64::from(engine);
                let fulls = [0, 1, most / 2, most.saturating_sub(1), most];
                for full in fulls.into_iter().filter(|full| *full <= most) {
                    assert_eq!(
                        mooncake_engine_chain(&ids, trace, engine, full as usize),
                        one_by_one(&ids, trace.into(), engine.into(), full),
                        "trace {trace}, engine {engine}, full {full}"
                    );
                }
            }
        }
    }
}

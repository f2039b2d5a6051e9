//! A whole trace, loaded once and never changed, so that many runs (a timed replay, the
//! policies of a comparison, the replicas of a router) can share it behind an `Arc`.
//!
//! Loading reads every line through the [`TraceReader`] (same checks, same errors), keeps
//! each request with its block chain and dense ids, and derives the engine-block chains for
//! every engine block size the runs will use, so no run hashes anything. What differs per
//! run (arrival times under a seeded process, where a request went, when it finished) is
//! the run's own state, never written here.

use std::collections::BTreeMap;

use routerlab_core::Unit;

use crate::blocks::{RequestParts, engine_block_hashes, engine_chain_into, prompt_tokens};
use crate::error::TraceError;
use crate::reader::{TraceFormat, TraceReader, TraceRequest};
use crate::source::TraceSource;

/// One request of a workload.
#[derive(Debug, Clone, Default)]
pub struct WorkloadRequest {
    /// Line in the file.
    pub line: usize,
    /// Prompt text (chat traces); empty otherwise.
    pub prompt: Vec<u8>,
    /// Prefix-block hash chain, in the trace's block size.
    pub blocks: Vec<u64>,
    /// Dense ids of `blocks`.
    pub block_ids: Vec<u32>,
    /// Prompt length in the workload's unit.
    pub prompt_len: u64,
    /// Prompt tokens, at least 1 (bytes / 4 for text), capped at `u32::MAX`.
    pub prompt_tokens: u32,
    /// Output tokens, when the trace says.
    pub output_tokens: Option<u64>,
    /// Session number, 0 = none.
    pub session: u64,
    /// Position (0-based) of the request this one continues.
    pub parent: Option<usize>,
    /// Arrival time from the trace, nanoseconds.
    pub arrival_ns: Option<u64>,
    /// Engine-block chains, one per [`Workload::engine_block_sizes`] entry.
    pub engine_chains: Vec<Vec<u64>>,
    /// Agentic traces: the play (agent job) it belongs to, 1-based; 0 otherwise.
    pub play: u64,
    /// Agentic traces: what it waits for (positions in the workload, all earlier).
    pub dependencies: Vec<crate::dependency::Dependency>,
    /// The LoRA adapter it names (1-based, see [`Workload::adapters`]); 0 = none.
    pub adapter: u32,
    /// It is its session's last: the client ends the session after it.
    pub session_end: bool,
}

impl WorkloadRequest {
    /// The workload's record of the request `reader` just read into `request` (its prompt
    /// text is taken, the rest copied), in a trace of `format` whose chains have blocks of
    /// `block_size`; a token-id trace's engine chains are derived here for each of
    /// `engine_block_sizes` (ascending, no duplicates), since they cannot be later.
    pub fn of(
        request: &mut TraceRequest,
        format: TraceFormat,
        block_size: u32,
        engine_block_sizes: &[u32],
    ) -> WorkloadRequest {
        let mut kept = WorkloadRequest::default();
        kept.refill(request, format, block_size, engine_block_sizes);
        kept
    }

    /// Becomes [`WorkloadRequest::of`] `request`, in the room its lists have (its prompt
    /// text is swapped for `request`'s, which is left empty).
    pub fn refill(
        &mut self,
        request: &mut TraceRequest,
        format: TraceFormat,
        block_size: u32,
        engine_block_sizes: &[u32],
    ) {
        let unit = format.unit();
        let tokens =
            u32::try_from(prompt_tokens(unit, request.prompt_len).max(1)).unwrap_or(u32::MAX);
        // Only a token-id trace's chains cannot be derived again from what is kept.
        self.engine_chains = match format {
            TraceFormat::TokenIds => (engine_block_sizes.iter())
                .map(|size| engine_block_hashes(format, request, block_size, tokens, *size))
                .collect(),
            _ => Vec::new(),
        };
        std::mem::swap(&mut self.prompt, &mut request.prompt);
        request.prompt.clear();
        self.blocks.clear();
        self.blocks.extend_from_slice(&request.blocks);
        self.block_ids.clear();
        self.block_ids.extend_from_slice(&request.block_ids);
        self.line = request.line;
        self.prompt_len = request.prompt_len;
        self.prompt_tokens = tokens;
        self.output_tokens = request.output_tokens;
        self.session = request.session;
        self.parent = request.parent_seq.map(|p| p as usize - 1);
        self.arrival_ns = request.arrival_ns;
        self.play = request.play;
        self.dependencies.clear();
        self.adapter = request.adapter;
        self.session_end = request.session_end;
    }
}

/// A loaded trace.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The file.
    pub source: TraceSource,
    /// Unit of lengths and blocks.
    pub unit: Unit,
    /// Block size of the trace's chains, in `unit`s.
    pub block_size: u32,
    /// Engine block sizes (tokens) for which chains were derived, ascending.
    pub engine_block_sizes: Vec<u32>,
    /// The requests, in file order.
    pub requests: Vec<WorkloadRequest>,
    /// Lines skipped (with `skip_invalid`), by reason.
    pub skipped: BTreeMap<&'static str, u64>,
    /// The LoRA adapters the requests name, by number.
    pub adapters: crate::adapters::Adapters,
}

impl Workload {
    /// The first `n` requests (all of them if there are fewer), as a workload of its own:
    /// what a search replays to judge a candidate cheaply before it earns the whole trace.
    /// Every request's parent and dependencies are earlier ones, so a prefix is whole.
    pub fn head(&self, n: usize) -> Workload {
        Workload {
            source: self.source.clone(),
            unit: self.unit,
            block_size: self.block_size,
            engine_block_sizes: self.engine_block_sizes.clone(),
            requests: self.requests[..n.min(self.requests.len())].to_vec(),
            skipped: self.skipped.clone(),
            adapters: self.adapters.clone(),
        }
    }

    /// Reads the whole trace and derives engine chains for each of `engine_block_sizes`
    /// (tokens; duplicates are merged).
    pub fn load(
        mut reader: TraceReader,
        engine_block_sizes: &[u32],
    ) -> Result<Workload, TraceError> {
        let mut sizes = engine_block_sizes.to_vec();
        sizes.sort_unstable();
        sizes.dedup();
        let format = reader.format();
        let unit = reader.unit();
        let mut requests = Vec::new();
        let mut request = TraceRequest::default();
        // Agentic traces: each request's id and dependencies as written, resolved at the end.
        let (mut ids, mut raw) = (Vec::new(), Vec::new());
        while reader.next_into(&mut request)? {
            // An agentic trace's header sets its block size: read it after the first line.
            let block_size = reader.block_size();
            requests.push(WorkloadRequest::of(
                &mut request,
                format,
                block_size,
                &sizes,
            ));
            if format.is_agentic() {
                ids.push(std::mem::take(&mut request.request_id));
                raw.push(std::mem::take(&mut request.dependencies));
            }
        }
        let source = reader.source();
        if format.is_agentic() {
            let nodes: Vec<crate::graph::Node> = requests
                .iter()
                .map(|r| crate::graph::Node {
                    line: r.line,
                    play: r.play,
                })
                .collect();
            let ordered = crate::graph::resolve(&source.path, &nodes, &ids, &raw)?;
            let mut taken: Vec<Option<WorkloadRequest>> = std::mem::take(&mut requests)
                .into_iter()
                .map(Some)
                .collect();
            for (old, dependencies) in ordered {
                let mut request = taken[old].take().expect("each request once");
                request.dependencies = dependencies;
                requests.push(request);
            }
        }
        let block_size = reader.block_size();
        Ok(Workload {
            source,
            unit,
            block_size,
            engine_block_sizes: sizes,
            requests,
            skipped: reader.skipped().clone(),
            adapters: reader.adapters().clone(),
        })
    }

    /// The position of `engine_block_size` in [`Workload::engine_block_sizes`] (and in
    /// what [`Workload::engine_chains_of`] returns).
    ///
    /// # Panics
    /// When chains for that size were not asked for at load.
    pub fn engine_class(&self, engine_block_size: u32) -> usize {
        self.engine_block_sizes
            .binary_search(&engine_block_size)
            .expect("engine block size given at load")
    }

    /// The chains of request `index`, one per [`Workload::engine_block_sizes`] entry:
    /// derived from its trace chain or text each time (a token-id trace's, which cannot be,
    /// are kept from the load), so a run holds them only for the requests in flight.
    pub fn engine_chains_of(&self, index: usize) -> Vec<Vec<u64>> {
        let mut chains = Vec::new();
        self.engine_chains_into(&self.requests[index], &mut chains, &mut Vec::new());
        chains
    }

    /// As [`Workload::engine_chains_of`], of `request`, which may be held elsewhere (a
    /// streamed replay keeps only its header here, with no requests), into `chains`, in
    /// the room its lists have; a list with none takes one from `spare` first, if any.
    pub fn engine_chains_into(
        &self,
        request: &WorkloadRequest,
        chains: &mut Vec<Vec<u64>>,
        spare: &mut Vec<Vec<u64>>,
    ) {
        let format = self.source.format;
        chains.resize_with(self.engine_block_sizes.len(), Vec::new);
        let parts = RequestParts {
            blocks: &request.blocks,
            prompt: &request.prompt,
            token_ids: &[],
        };
        for (class, (chain, size)) in chains.iter_mut().zip(&self.engine_block_sizes).enumerate() {
            if chain.capacity() == 0
                && let Some(room) = spare.pop()
            {
                *chain = room;
            }
            match format {
                TraceFormat::TokenIds => {
                    chain.clear();
                    chain.extend_from_slice(&request.engine_chains[class]);
                }
                _ => engine_chain_into(
                    format,
                    parts,
                    self.block_size,
                    request.prompt_tokens,
                    *size,
                    chain,
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::TraceOptions;

    /// A request kept in the lists of one read before (longer, shorter, of another chain)
    /// is the request kept afresh, and so are its engine chains, whatever the lists held.
    #[test]
    fn a_request_refilled_in_used_lists_is_the_request_kept_afresh() {
        let traces = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces");
        // A token-id trace's chains are kept from the load: prompts of 3 to 146 tokens.
        let token_ids =
            std::env::temp_dir().join(format!("routerlab-refill-{}.jsonl", std::process::id()));
        let line = |i: u32| {
            let ids: Vec<String> = (0..3 + (i * 37) % 144)
                .map(|t| (t % 50).to_string())
                .collect();
            format!(
                "{{\"arrival_time_ns\": {i}, \"input_toks\": {}, \"output_toks\": 4, \
                 \"input_tok_ids\": [{}]}}\n",
                ids.len(),
                ids.join(", ")
            )
        };
        std::fs::write(&token_ids, (0..120).map(line).collect::<String>()).unwrap();
        for (path, expected, sizes) in [
            (
                traces.join("mooncake-conversation.jsonl"),
                TraceFormat::Mooncake,
                vec![16, 64],
            ),
            (traces.join("chat.jsonl"), TraceFormat::Chat, vec![16]),
            (token_ids.clone(), TraceFormat::TokenIds, vec![4, 16]),
        ] {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let open = || TraceReader::open(&path, TraceOptions::default()).unwrap();
            let workload = Workload::load(open(), &sizes).unwrap();
            let mut reader = open();
            let (format, block_size) = (reader.format(), reader.block_size());
            assert_eq!(format, expected, "{name}");
            let (mut request, mut kept) = (TraceRequest::default(), None::<WorkloadRequest>);
            let (mut chains, mut spare) = (Vec::new(), vec![vec![7u64; 3]]);
            let mut seen = 0;
            while reader.next_into(&mut request).unwrap() {
                // The workload's own, kept afresh as it was loaded.
                let fresh = &workload.requests[seen];
                let kept = match &mut kept {
                    Some(kept) => {
                        kept.refill(&mut request, format, block_size, &sizes);
                        kept
                    }
                    None => kept.insert(WorkloadRequest::of(
                        &mut request,
                        format,
                        block_size,
                        &sizes,
                    )),
                };
                assert_eq!(
                    format!("{kept:?}"),
                    format!("{fresh:?}"),
                    "{name} line {}",
                    fresh.line
                );
                assert!(request.prompt.is_empty(), "the prompt text is taken");
                // The lists of the chains: one taken (an engine keeps it), one left.
                if let Some(first) = chains.first_mut() {
                    spare.push(std::mem::take(first));
                }
                workload.engine_chains_into(kept, &mut chains, &mut spare);
                assert_eq!(
                    chains,
                    workload.engine_chains_of(seen),
                    "{name} line {}",
                    fresh.line
                );
                seen += 1;
            }
            assert_eq!(seen, workload.requests.len());
            assert!(seen > 100, "{name}: {seen} requests");
        }
        std::fs::remove_file(&token_ids).unwrap();
    }
}

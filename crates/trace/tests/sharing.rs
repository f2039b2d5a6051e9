//! The sharing count over a real trace (the public Mooncake conversation trace), read as
//! a timed replay's pass reads it, against an exact count of its blocks.

use std::collections::HashMap;
use std::path::Path;

use routerlab_trace::sharing::SharingCount;
use routerlab_trace::{TraceOptions, TraceReader, TraceRequest};

#[test]
fn the_conversation_traces_blocks_alone_are_found_and_none_shared_is_missed() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/mooncake-conversation.jsonl");
    let mut reader = TraceReader::open(&path, TraceOptions::default()).expect("the trace opens");
    reader.chains_only();
    let mut count = SharingCount::for_bytes(std::fs::metadata(&path).unwrap().len());
    let mut exact: HashMap<(u64, usize), u32> = HashMap::new();
    let mut chains = Vec::new();
    let mut request = TraceRequest::default();
    while reader.next_into(&mut request).expect("every line reads") {
        assert!(
            request.block_ids.is_empty(),
            "no dense ids in a chains-only read"
        );
        count.add(&request.blocks);
        for (at, id) in request.blocks.iter().enumerate() {
            *exact.entry((*id, at)).or_default() += 1;
        }
        chains.push(request.blocks.clone());
    }
    let sharing = count.done();
    let (mut blocks, mut alone, mut found_alone) = (0, 0, 0);
    for chain in &chains {
        // Exactly: one past the last block another chain has at its place.
        let truly = (chain.iter().enumerate())
            .rposition(|(at, id)| exact[&(*id, at)] > 1)
            .map_or(0, |at| at + 1);
        let found = sharing.shared_len(chain);
        assert!(
            found >= truly,
            "a shared block taken as alone: {found} < {truly}"
        );
        blocks += chain.len();
        alone += chain.len() - truly;
        found_alone += chain.len() - found;
    }
    assert_eq!(chains.len(), 12_031);
    assert_eq!(blocks, 288_500);
    // Nearly half the blocks are in one chain only. Its ids are numbered from zero, each at
    // one place: all are counted exactly, so every block alone is found.
    assert!(alone > blocks * 45 / 100, "{alone} of {blocks} alone");
    assert_eq!(found_alone, alone);
}

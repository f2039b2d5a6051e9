//! What a timed replay learns of the trace's sharing (`routerlab_trace::sharing`): the
//! blocks only one request has, which its engine need not index and the judge need not
//! look for. Hints only: the report is the same whether they come, come late or not at all.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use routerlab_engine::Sequence;
use routerlab_trace::Workload;
use routerlab_trace::sharing::{Sharing, SharingCount};

use super::Sim;

/// The sharing of a trace loaded whole, counted from its chains in memory (none when its
/// chains do not say: see `routerlab_trace::blocks::keyed_by_trace_blocks`).
pub(super) fn of_workload(workload: &Workload) -> OnceLock<Sharing> {
    let sharing = OnceLock::new();
    if routerlab_trace::blocks::keyed_by_trace_blocks(workload.source.format) {
        let blocks = workload.requests.iter().map(|r| r.blocks.len() as u64);
        let mut count = SharingCount::for_blocks(blocks.sum());
        for request in &workload.requests {
            count.add(&request.blocks);
        }
        let _ = sharing.set(count.done());
    }
    sharing
}

/// Counts the chains `reader` reads (a trace of `bytes` bytes), and sets `sharing` from
/// them at the end; gives up, setting nothing, at a line it cannot read (the replay
/// reports that line) or once `stop` is set. The filters are made here, on the counting
/// thread, which also takes their first touch of each page.
pub(super) fn count(
    mut reader: routerlab_trace::TraceReader,
    bytes: u64,
    sharing: &OnceLock<Sharing>,
    stop: &AtomicBool,
) {
    let mut count = SharingCount::for_bytes(bytes);
    reader.chains_only();
    let mut request = routerlab_trace::TraceRequest::default();
    loop {
        match reader.next_into(&mut request) {
            Ok(true) if !stop.load(Ordering::Relaxed) => count.add(&request.blocks),
            Ok(false) => break,
            _ => return,
        }
    }
    let _ = sharing.set(count.done());
}

impl Sim<'_> {
    /// Looks up, once, how many leading blocks of request `index`'s trace chain other
    /// requests' chains may have, when the trace's sharing is known (see
    /// [`Sim::shared_blocks`]). Streamed, the reading thread has most often worked it out
    /// already.
    pub(super) fn note_sharing(&mut self, index: usize) {
        if self.sharing_of.0 != index {
            let shared = self.feed.shared_len(index).or_else(|| {
                (self.sharing.and_then(OnceLock::get))
                    .map(|sharing| sharing.shared_len(&self.feed.request(index).blocks))
            });
            self.sharing_of = (index, shared);
        }
    }

    /// How many leading blocks of request `index`'s chain for `engine_block`-token blocks
    /// other requests' chains may have, as noted when it was routed (`Sim::note_sharing`).
    /// None of the blocks after them is in any engine before the request runs: the judge
    /// does not look for them ([`Sim::reach`]), and its engine does not index them (the rest
    /// only this request could look up, and it does so only when preempted, when the
    /// engine indexes them). The same report either way; fewer index entries to write and
    /// to miss the caches on.
    pub(super) fn shared_blocks(&self, index: usize, engine_block: u32) -> Option<usize> {
        let (noted, shared) = self.sharing_of;
        let shared = shared.filter(|_| noted == index)?;
        let workload = self.feed.workload();
        let format = workload.source.format;
        routerlab_trace::blocks::shared_engine_blocks(
            format,
            shared,
            workload.block_size,
            engine_block,
        )
    }

    /// `sequence`, request `index`'s for an engine of `engine_block`-token blocks, told
    /// which of its blocks other requests may have ([`Sim::shared_blocks`]).
    pub(super) fn told_sharing(
        &mut self,
        index: usize,
        engine_block: u32,
        sequence: Sequence,
    ) -> Sequence {
        self.note_sharing(index);
        match self.shared_blocks(index, engine_block) {
            Some(shared) => sequence.shared_blocks(shared),
            None => sequence,
        }
    }
}

//! The KV blocks running sequences hold, as the scheduler gives them: a run of identical
//! decode steps with its blocks reserved up front, a block more for a sequence that needs
//! it (preempting the most recently admitted when none is free), and the oldest free
//! blocks handed out.

use super::{Engine, KvCache, Sequence};

/// How many of `seq`'s prompt blocks are published once `tokens` more are computed: each
/// full block up to its last hash, with prefix caching; none more without.
pub(super) fn published_after(
    seq: &Sequence,
    tokens: u32,
    block_tokens: u32,
    prefix_caching: bool,
) -> usize {
    let full = ((seq.computed + tokens) / block_tokens) as usize;
    match prefix_caching {
        true => full.min(seq.hashes.len()).max(seq.published),
        false => seq.published,
    }
}

/// The blocks with ids among `seq`'s next ones to publish, up to `end`: the anonymous ones
/// after them only count.
pub(super) fn named_until(seq: &Sequence, end: usize) -> std::ops::Range<usize> {
    seq.published.min(seq.blocks.len())..end.min(seq.blocks.len())
}

impl Engine {
    /// Length of the decode run starting now: until the first sequence finishes, with the
    /// blocks every sequence fills during the run reserved up front (so KV usage leads by at
    /// most one run's blocks). Without enough free blocks, only until someone needs a block.
    pub(super) fn reserve_decode_run(&mut self, now_ns: u64) -> u64 {
        let block_tokens = self.config.engine_block_size;
        let until_finish = self
            .running
            .iter()
            .map(|s| s.output_tokens - s.generated)
            .min()
            .unwrap_or(1)
            .max(1);
        let extra = |seq: &Sequence| {
            ((seq.computed + until_finish).div_ceil(block_tokens) as usize)
                .saturating_sub(seq.held()) as u32
        };
        let needed: u32 = self.running.iter().map(extra).sum();
        let fenced = || self.tiers.any() && self.tiers.fence(&self.kv.oldest_free(needed)) > now_ns;
        if needed > self.kv.free() || fenced() {
            // Not enough blocks, or some a store still reads: no reservation.
            return self.decode_run();
        }
        for pos in 0..self.running.len() {
            let n = extra(&self.running[pos]);
            give(&mut self.kv, &mut self.running[pos], n);
        }
        u64::from(until_finish)
    }

    /// How long the step of `prefill` (running positions, tokens) takes to store, into
    /// the blocking tiers, the prompt blocks it completes: those `finish_step` publishes.
    pub(super) fn blocking_stores_ns(&self, prefill: &[(usize, u32)]) -> u64 {
        if !self.tiers.any() || !self.config.prefix_caching {
            return 0;
        }
        let block_tokens = self.config.engine_block_size;
        let completed = prefill.iter().flat_map(|(pos, tokens)| {
            let seq = &self.running[*pos];
            let end = published_after(seq, *tokens, block_tokens, self.config.prefix_caching);
            &seq.hashes[named_until(seq, end)]
        });
        self.tiers.blocking_store_ns(completed)
    }

    /// Identical decode steps possible from here: until someone finishes or needs a block.
    pub(super) fn decode_run(&self) -> u64 {
        let block_tokens = self.config.engine_block_size;
        self.running
            .iter()
            .map(|seq| {
                let room = seq.held() as u32 * block_tokens - seq.computed;
                let remaining = seq.output_tokens - seq.generated;
                u64::from(room.min(remaining)).max(1)
            })
            .min()
            .unwrap_or(1)
    }

    /// Gives running sequence `pos` one more block, preempting the most recently admitted
    /// sequences if needed. `Some(true)`: done; `Some(false)`: `pos` itself was preempted;
    /// `None`: impossible (nothing left to preempt).
    pub(super) fn grow(&mut self, pos: usize) -> Option<bool> {
        loop {
            if self.kv.free() > 0 {
                give(&mut self.kv, &mut self.running[pos], 1);
                return Some(true);
            }
            let victim = self.running.len() - 1;
            let mut seq = self.running.pop()?;
            // Its blocks go back once the stores reading them end (vLLM flushes them first).
            self.compute_after_ns = self.compute_after_ns.max(self.tiers.fence(&seq.blocks));
            // Back in the queue, it looks its blocks up again: all of them are indexed now,
            // the computed anonymous ones named first.
            if seq.anon_hashed > 0 {
                let named = seq.blocks.len();
                let computed = &seq.hashes[named..named + seq.anon_hashed as usize];
                self.kv.name_anon(computed, &mut seq.blocks);
            }
            let published = seq.published.min(seq.blocks.len());
            if seq.shared < published {
                self.kv.index_alone(&seq.blocks[seq.shared..published]);
            }
            seq.shared = usize::MAX;
            self.kv.release_anon(seq.anon - seq.anon_hashed, 0);
            self.kv.release(&seq.blocks);
            seq.blocks.clear();
            (seq.anon, seq.anon_hashed, seq.anon_from) = (0, 0, usize::MAX);
            seq.computed = 0;
            seq.prefill_target = 0;
            seq.published = 0;
            seq.ready_ns = 0;
            self.unpin(seq.adapter);
            self.waiting.push_front(seq);
            self.preemptions += 1;
            if victim == pos {
                return Some(false);
            }
        }
    }
}

/// Gives `seq` the `n` oldest free blocks: with ids up to its `anon_from`, anonymous from
/// there (see `KvCache::allocate_anon`).
#[inline]
pub(super) fn give(kv: &mut KvCache, seq: &mut Sequence, n: u32) {
    let named = (seq.anon_from.saturating_sub(seq.held()) as u32).min(n);
    kv.allocate_into(named, &mut seq.blocks);
    if n > named {
        kv.allocate_anon(n - named);
        seq.anon += n - named;
    }
}

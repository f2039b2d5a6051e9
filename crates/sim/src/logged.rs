//! A policy asked, decision by decision, what it would have done in the states a decision
//! log recorded (`serve --decision-log`): each endpoint's load as the live router saw it,
//! the request's block chain. The matcher then learns where the request really went, and
//! hears it finish when the log says it did, so its state follows the logged traffic, not
//! its own counterfactual choices. What `replay --from-log` weighs for its off-policy
//! estimates.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use routerlab_core::hash::BlockInterner;
use routerlab_core::{Phase, Unit};
use routerlab_host::{EndpointLoad, RequestData};
use routerlab_route::{ListPos, Router};
use routerlab_trace::decision_log::{DecisionRecord, LIVE_KV_BLOCKS};

use crate::SimError;

/// Per record of `log` (in arrival order), the list position `router` chooses in its
/// state, or `None` when it chooses nothing; the positions are `router`'s, whose endpoints
/// are named as in the log.
pub fn judge(log: &[DecisionRecord], router: &mut Router) -> Result<Vec<Option<usize>>, SimError> {
    let position = |router: &Router, name: &str| {
        (0..router.table().len()).find(|&p| router.table().name(p) == name)
    };
    let mut interner = BlockInterner::default();
    let ids: Vec<Vec<u32>> = (log.iter())
        .map(|r| {
            let mut ids = Vec::new();
            interner.intern_all(&r.blocks, &mut ids);
            ids
        })
        .collect();
    let data = |i: usize, now_ns: u64| {
        let r = &log[i];
        RequestData {
            id: r.seq,
            arrival_ns: (r.arrival_s * 1e9) as u64,
            prompt: &[],
            block_hashes: &r.blocks,
            block_ids: Some(&ids[i]),
            block_size: r.block_bytes,
            unit: Unit::Bytes,
            prompt_len: r.prompt_tokens.saturating_mul(4),
            output_tokens: r.max_tokens,
            session_id: r.session,
            parent_id: r.parent,
            ends_session: false,
            now_ns,
            cached_prefix: None,
            phase: Phase::Whole,
            cached_tiers: None,
            predict: None,
            lora: None,
        }
    };
    let fail = |i: usize| {
        let seq = log[i].seq;
        move |e: routerlab_host::PluginError| SimError::Input(format!("request {seq}: {e}"))
    };
    // Requests in flight: (finish, record).
    let mut finishing: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut chosen = Vec::with_capacity(log.len());
    for (i, record) in log.iter().enumerate() {
        let now = (record.arrival_s * 1e9) as u64;
        while let Some(&Reverse((end, j))) = finishing.peek() {
            if end > now {
                break;
            }
            finishing.pop();
            if let Some(pos) = position(router, &log[j].endpoint) {
                router
                    .complete(&data(j, end), ListPos(pos))
                    .map_err(fail(j))?;
            }
        }
        for candidate in &record.candidates {
            if let Some(pos) = position(router, &candidate.endpoint) {
                let load = EndpointLoad {
                    running: candidate.running,
                    waiting: candidate.waiting,
                    kv_blocks_used: (candidate.kv_usage * LIVE_KV_BLOCKS as f64).round() as u64,
                    kv_blocks_total: LIVE_KV_BLOCKS,
                    inflight_requests: candidate.inflight,
                    ..EndpointLoad::default()
                };
                router.table_mut().set_load(pos, load);
            }
        }
        let decision = router.decide(&data(i, now), false).map_err(fail(i))?;
        chosen.push(decision.endpoint.map(|p| p.0));
        if let Some(pos) = position(router, &record.endpoint) {
            router.learn(&data(i, now), ListPos(pos)).map_err(fail(i))?;
            let end = now + (record.e2e_ms * 1e6) as u64;
            finishing.push(Reverse((end, i)));
        }
    }
    Ok(chosen)
}

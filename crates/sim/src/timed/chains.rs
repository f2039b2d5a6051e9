//! The engine-block chains of the requests a run has in hand: derived from the workload
//! when a request first needs one (its routing, at arrival) and dropped when it is done,
//! so a long trace holds chains only for what is in flight, not for every request.

use std::cell::OnceCell;

use routerlab_trace::Workload;

/// Per request: its chains, one per engine block size, while it is in hand.
pub(super) struct Chains {
    cells: Vec<OnceCell<Box<[Vec<u64>]>>>,
}

impl Chains {
    pub(super) fn new(requests: usize) -> Chains {
        Chains {
            cells: (0..requests).map(|_| OnceCell::new()).collect(),
        }
    }

    /// Request `index`'s chain for engine blocks of `engine_block` tokens.
    pub(super) fn get(&self, workload: &Workload, index: usize, engine_block: u32) -> &[u64] {
        let chains =
            self.cells[index].get_or_init(|| workload.engine_chains_of(index).into_boxed_slice());
        &chains[workload.engine_class(engine_block)]
    }

    /// Request `index` is done: its chains go (asked again, they are derived again).
    pub(super) fn forget(&mut self, index: usize) {
        self.cells[index] = OnceCell::new();
    }
}

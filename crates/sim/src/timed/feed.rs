//! Where a timed replay's requests come from: a [`Workload`] loaded whole (which many runs
//! share), or the trace itself, read as the replay goes. A streamed request enters when the
//! clock comes near its arrival and leaves when it is done, so the replay holds the
//! requests in flight, not the trace; what a later request needs of an earlier one (its
//! parent's endpoint, its conversation) is the run's own per-request state, kept apart.
//!
//! Either way a request's engine chains are derived when it first needs one (its routing)
//! and dropped when it is done. Streamed, the lists a request was kept in are filled again
//! by a request read later, so that the loop allocates nothing for its requests once warm.

use std::cell::{Cell, OnceCell};
use std::collections::VecDeque;

use routerlab_trace::arrivals::ArrivalClock;
use routerlab_trace::{Workload, WorkloadRequest};

use crate::SimError;

use crate::read_ahead::Pull;

/// A request's engine chains, one per engine block size, once derived.
type Chains = OnceCell<Vec<Vec<u64>>>;

/// The requests of a timed replay.
pub(super) enum Feed<'a> {
    /// The whole trace, in memory.
    Loaded {
        workload: &'a Workload,
        chains: Vec<Chains>,
    },
    /// The trace, read as the replay goes.
    Streamed(Box<Stream<'a>>),
}

/// A trace being read by a timed replay.
pub(super) struct Stream<'a> {
    /// The trace's unit, block sizes, adapters and path; its `requests` stay empty.
    header: Workload,
    pull: Pull<'a>,
    /// The arrival process, `None` for a closed loop (requests go as earlier ones finish).
    clock: Option<ArrivalClock>,
    /// The requests read and not yet done, from request `first` on (`None`: done).
    window: VecDeque<Option<Box<Slot>>>,
    first: usize,
    /// The slots of requests done, to be filled again. There are never more than the
    /// requests that were in hand at once. Boxed as in `window`, where they go back.
    #[allow(clippy::vec_box)]
    spares: Vec<Box<Slot>>,
    /// Chains engines were given and are done with, to be filled again (never more than
    /// there are slots).
    spare_chains: Cell<Vec<Vec<u64>>>,
}

struct Slot {
    request: WorkloadRequest,
    chains: Chains,
    /// Lists to derive the chains in, from a request done before.
    room: Cell<Vec<Vec<u64>>>,
    /// Its chain's shared length, when the reader's thread worked it out (`Pull::shared`).
    shared: Option<usize>,
}

impl<'a> Feed<'a> {
    /// The whole `workload`.
    pub(super) fn loaded(workload: &'a Workload) -> Feed<'a> {
        Feed::Loaded {
            workload,
            chains: (0..workload.requests.len())
                .map(|_| Chains::new())
                .collect(),
        }
    }

    /// The requests `pull` reads, of the trace `header` describes (its `requests` empty),
    /// sent by `clock` (`None`: a closed loop).
    pub(super) fn streamed(
        header: Workload,
        pull: Pull<'a>,
        clock: Option<ArrivalClock>,
    ) -> Feed<'a> {
        Feed::Streamed(Box::new(Stream {
            header,
            pull,
            clock,
            window: VecDeque::new(),
            first: 0,
            spares: Vec::new(),
            spare_chains: Cell::default(),
        }))
    }

    /// The trace's unit, block sizes, adapters and path (and, loaded, its requests).
    pub(super) fn workload(&self) -> &Workload {
        match self {
            Feed::Loaded { workload, .. } => workload,
            Feed::Streamed(stream) => &stream.header,
        }
    }

    /// Request `index`, which must be in hand: loaded, or read and not yet done.
    pub(super) fn request(&self, index: usize) -> &WorkloadRequest {
        match self {
            Feed::Loaded { workload, .. } => &workload.requests[index],
            Feed::Streamed(stream) => &stream.slot(index).request,
        }
    }

    /// How many leading blocks of request `index`'s trace chain other requests' chains may
    /// have, when the reader's thread worked it out as it read it (streamed, once the
    /// trace's sharing was known); `None` otherwise.
    pub(super) fn shared_len(&self, index: usize) -> Option<usize> {
        match self {
            Feed::Loaded { .. } => None,
            Feed::Streamed(stream) => stream.slot(index).shared,
        }
    }

    /// Request `index`'s chain for engine blocks of `engine_block` tokens.
    pub(super) fn chain(&self, index: usize, engine_block: u32) -> &[u64] {
        let chains = match self {
            Feed::Loaded { workload, chains } => {
                chains[index].get_or_init(|| workload.engine_chains_of(index))
            }
            Feed::Streamed(stream) => {
                let slot = stream.slot(index);
                slot.chains.get_or_init(|| {
                    let (mut lists, mut spare) = (slot.room.take(), stream.spare_chains.take());
                    (stream.header).engine_chains_into(&slot.request, &mut lists, &mut spare);
                    stream.spare_chains.set(spare);
                    lists
                })
            }
        };
        &chains[self.workload().engine_class(engine_block)]
    }

    /// Request `index`'s chain for engine blocks of `engine_block` tokens, to keep: taken
    /// out (asked for again, the chains are derived again, the same).
    pub(super) fn take_chain(&mut self, index: usize, engine_block: u32) -> Vec<u64> {
        let class = self.workload().engine_class(engine_block);
        // Derived first, if not yet.
        let _ = self.chain(index, engine_block);
        match self {
            Feed::Loaded { chains, .. } => {
                let mut chains = chains[index].take().expect("derived above");
                std::mem::take(&mut chains[class])
            }
            Feed::Streamed(stream) => {
                let slot = stream.slot_mut(index);
                let mut chains = slot.chains.take().expect("derived above");
                let chain = std::mem::take(&mut chains[class]);
                // The other lists are filled again when the chains are derived again.
                slot.room.set(chains);
                chain
            }
        }
    }

    /// Request `index` is done: its chains go and, streamed, the request too (their lists
    /// kept to be filled again).
    pub(super) fn done(&mut self, index: usize) {
        match self {
            Feed::Loaded { chains, .. } => chains[index] = Chains::new(),
            Feed::Streamed(stream) => {
                if let Some(mut slot) = index
                    .checked_sub(stream.first)
                    .and_then(|at| stream.window.get_mut(at))
                    .and_then(Option::take)
                {
                    if let Some(chains) = slot.chains.take() {
                        slot.room.set(chains);
                    }
                    stream.spares.push(slot);
                }
                while let Some(None) = stream.window.front() {
                    stream.window.pop_front();
                    stream.first += 1;
                }
            }
        }
    }

    /// A chain [`Feed::take_chain`] gave, done with: streamed, its list is filled again,
    /// unless there are spare lists enough for every slot already (a chain that was copied,
    /// not taken, leaves its slot's list in place).
    pub(super) fn recycle_chain(&mut self, chain: Vec<u64>) {
        if let Feed::Streamed(stream) = self {
            let slots = stream.window.len() + stream.spares.len();
            let spare = stream.spare_chains.get_mut();
            if chain.capacity() > 0 && spare.len() < slots {
                spare.push(chain);
            }
        }
    }

    /// Streamed: reads the next request of the trace, and gives its position and when it
    /// is sent (0 in a closed loop); `None` at the end of the trace, or when loaded.
    pub(super) fn read(&mut self) -> Result<Option<(usize, u64)>, SimError> {
        let Feed::Streamed(stream) = self else {
            return Ok(None);
        };
        let Some((request, adapters)) = stream.pull.next()? else {
            return Ok(None);
        };
        let header = &mut stream.header;
        header.adapters.catch_up(adapters);
        let (format, block_size) = (header.source.format, header.block_size);
        let sizes = &header.engine_block_sizes;
        let mut slot = match stream.spares.pop() {
            Some(mut slot) => {
                slot.request.refill(request, format, block_size, sizes);
                slot
            }
            None => Box::new(Slot {
                request: WorkloadRequest::of(request, format, block_size, sizes),
                chains: Chains::new(),
                room: Cell::default(),
                shared: None,
            }),
        };
        slot.shared = stream.pull.shared();
        let request = &slot.request;
        let at = match &mut stream.clock {
            Some(clock) => (clock.next(request.line, request.arrival_ns))
                .map_err(|e| super::arrival_error(&header.source.path, e))?,
            None => 0,
        };
        let index = stream.first + stream.window.len();
        stream.window.push_back(Some(slot));
        Ok(Some((index, at)))
    }
}

impl Stream<'_> {
    fn slot(&self, index: usize) -> &Slot {
        (index.checked_sub(self.first))
            .and_then(|at| self.window.get(at))
            .and_then(Option::as_deref)
            .expect("a streamed request is in hand until it is done")
    }

    fn slot_mut(&mut self, index: usize) -> &mut Slot {
        (index.checked_sub(self.first))
            .and_then(|at| self.window.get_mut(at))
            .and_then(Option::as_deref_mut)
            .expect("a streamed request is in hand until it is done")
    }
}

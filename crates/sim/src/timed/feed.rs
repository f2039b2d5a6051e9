//! Where a timed replay's requests come from: a [`Workload`] loaded whole (which many runs
//! share), or the trace itself, read as the replay goes. A streamed request enters when the
//! clock comes near its arrival and leaves when it is done, so the replay holds the
//! requests in flight, not the trace; what a later request needs of an earlier one (its
//! parent's endpoint, its conversation) is the run's own per-request state, kept apart.
//!
//! Either way a request's engine chains are derived when it first needs one (its routing)
//! and dropped when it is done.

use std::cell::OnceCell;
use std::collections::VecDeque;

use routerlab_trace::arrivals::ArrivalClock;
use routerlab_trace::{Workload, WorkloadRequest};

use crate::SimError;

use crate::read_ahead::Pull;

/// A request's engine chains, one per engine block size, once derived.
type Chains = OnceCell<Box<[Vec<u64>]>>;

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
}

struct Slot {
    request: WorkloadRequest,
    chains: Chains,
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
        let (workload, cell, request) = match self {
            Feed::Loaded { workload, chains } => {
                (*workload, &chains[index], &workload.requests[index])
            }
            Feed::Streamed(stream) => {
                let slot = stream.slot(index);
                (&stream.header, &slot.chains, &slot.request)
            }
        };
        let chains = cell.get_or_init(|| workload.engine_chains_for(request).into_boxed_slice());
        &chains[workload.engine_class(engine_block)]
    }

    /// Request `index`'s chain for engine blocks of `engine_block` tokens, to keep: taken
    /// out (asked for again, the chains are derived again, the same).
    pub(super) fn take_chain(&mut self, index: usize, engine_block: u32) -> Vec<u64> {
        let class = self.workload().engine_class(engine_block);
        let cell = match self {
            Feed::Loaded { chains, .. } => chains[index].take(),
            Feed::Streamed(stream) => stream.slot_mut(index).chains.take(),
        };
        match cell {
            Some(mut chains) => std::mem::take(&mut chains[class]),
            None => self.chain(index, engine_block).to_vec(),
        }
    }

    /// Request `index` is done: its chains go and, streamed, the request too.
    pub(super) fn done(&mut self, index: usize) {
        match self {
            Feed::Loaded { chains, .. } => chains[index] = Chains::new(),
            Feed::Streamed(stream) => {
                if let Some(slot) = index
                    .checked_sub(stream.first)
                    .and_then(|at| stream.window.get_mut(at))
                {
                    *slot = None;
                }
                while let Some(None) = stream.window.front() {
                    stream.window.pop_front();
                    stream.first += 1;
                }
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
        let request = WorkloadRequest::of(
            request,
            header.source.format,
            header.block_size,
            &header.engine_block_sizes,
        );
        let at = match &mut stream.clock {
            Some(clock) => (clock.next(request.line, request.arrival_ns))
                .map_err(|e| super::arrival_error(&header.source.path, e))?,
            None => 0,
        };
        let index = stream.first + stream.window.len();
        stream.window.push_back(Some(Box::new(Slot {
            request,
            chains: Chains::new(),
            shared: stream.pull.shared(),
        })));
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

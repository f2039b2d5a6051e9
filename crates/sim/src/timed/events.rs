//! The timed replay's event queue: arrivals, step ends and metric refreshes in time
//! order, ties in the order they were scheduled.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Events are ordered by time, then by when they were scheduled (so simultaneous arrivals
/// keep file order); the derived order of the variants themselves is never used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Event {
    /// A router replica's metrics snapshot refresh.
    Refresh(usize),
    /// The end of an engine's step, with the step's generation.
    Step(usize, u64),
    /// A request arrives at the router.
    Arrival(usize),
    /// A disaggregated request's KV reaches its decode endpoint.
    Handoff(usize),
    /// An idle engine starts its step, after the requests that arrived at the same time.
    Start(usize),
    /// The scaler's tick.
    Tick,
    /// A started endpoint's start-up delay is over (its engine slot).
    Ready(usize),
}

/// The pending events, earliest first.
///
/// Metric refreshes wait in a heap of their own, at most one per replica: with several
/// replicas scraping on their own schedules they outnumber the other events, and keeping
/// them out of the main heap keeps its pushes and pops as short as with one replica. Both
/// heaps order by (time, order of scheduling), and `pop` takes the earlier head, so the
/// order of events is the same as one heap's.
#[derive(Default)]
pub(super) struct Events {
    pub(super) heap: BinaryHeap<Reverse<(u64, u64, Event)>>,
    pub(super) refreshes: BinaryHeap<Reverse<(u64, u64, usize)>>,
    pub(super) scheduled: u64,
}

/// Where the order of scheduling starts for the events of a streamed run that are not
/// arrivals: after every arrival's, which is its request's position (as when all arrivals
/// were scheduled first, in file order).
const AFTER_ARRIVALS: u64 = 1 << 62;

impl Events {
    /// The queue of a streamed run, whose arrivals are scheduled as they come near with
    /// [`Events::push_arrival`].
    pub(super) fn streamed() -> Events {
        Events {
            scheduled: AFTER_ARRIVALS,
            ..Events::default()
        }
    }

    /// Request `index` arrives at `time`, ordered among events of the same instant as if
    /// scheduled before all others, after the arrivals of earlier requests.
    pub(super) fn push_arrival(&mut self, time: u64, index: usize) {
        self.push_ordered(time, index as u64 + 1, Event::Arrival(index));
    }

    /// A place in the order of scheduling, for events pushed later with
    /// [`Events::push_ordered`] as if pushed now.
    pub(super) fn reserve(&mut self) -> u64 {
        self.scheduled += 1;
        self.scheduled
    }

    /// `event` at `time`, at the place `order` from [`Events::reserve`]: events sharing a
    /// place keep the order of the variants' fields (a request's arrivals, file order).
    pub(super) fn push_ordered(&mut self, time: u64, order: u64, event: Event) {
        debug_assert!(
            !matches!(event, Event::Refresh(_)),
            "refreshes have a heap of their own"
        );
        self.heap.push(Reverse((time, order, event)));
    }

    /// The time of the next event, if any.
    pub(super) fn next_time(&self) -> Option<u64> {
        let refresh = self.refreshes.peek().map(|Reverse((t, _, _))| *t);
        let other = self.heap.peek().map(|Reverse((t, _, _))| *t);
        refresh.into_iter().chain(other).min()
    }

    pub(super) fn push(&mut self, time: u64, event: Event) {
        self.scheduled += 1;
        match event {
            Event::Refresh(r) => self.refreshes.push(Reverse((time, self.scheduled, r))),
            _ => self.heap.push(Reverse((time, self.scheduled, event))),
        }
    }
    pub(super) fn pop(&mut self) -> Option<(u64, Event)> {
        let refresh_first = match (self.refreshes.peek(), self.heap.peek()) {
            (Some(Reverse((rt, rs, _))), Some(Reverse((t, s, _)))) => (rt, rs) < (t, s),
            (refresh, _) => refresh.is_some(),
        };
        if refresh_first {
            let Reverse((time, _, r)) = self.refreshes.pop()?;
            return Some((time, Event::Refresh(r)));
        }
        let Reverse((time, _, event)) = self.heap.pop()?;
        Some((time, event))
    }
    /// Whether anything but metric refreshes is pending: arrivals or engine steps.
    pub(super) fn has_work(&self) -> bool {
        !self.heap.is_empty()
    }
}

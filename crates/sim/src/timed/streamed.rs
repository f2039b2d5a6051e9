//! The timed replay reading the trace as it goes: requests are read a little ahead of the
//! clock, their arrivals scheduled as their time comes near, in the order they would have
//! had all scheduled at the start, so the replay is [`replay_timed`]'s of the whole trace.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use routerlab_report::Report;
use routerlab_route::{Replicas, RequestSeq};
use routerlab_trace::Workload;

use super::feed::Feed;
use super::{Arrivals, Events, Sim, TimedSettings, arrival_error, replay_timed, validate};
use crate::SimError;
use crate::observer::Observer;

/// Whether [`replay_timed_streamed`] can replay a trace of `format`: not an agentic one,
/// whose requests wait for others further down the file (its graph needs the whole trace).
pub fn streams(format: routerlab_trace::TraceFormat) -> bool {
    !format.is_agentic()
}

/// What a streamed replay read: the trace's source (path, size, hash), the lines it
/// skipped, and its block size, for the report's `run` block.
#[derive(Debug, Clone)]
pub struct StreamedTrace {
    /// The trace file.
    pub source: routerlab_trace::TraceSource,
    /// Lines skipped (with `skip_invalid`), by reason.
    pub skipped: std::collections::BTreeMap<&'static str, u64>,
    /// The block size of its chains.
    pub block_size: u32,
}

/// Runs a timed replay reading the trace as it goes, the same replay as [`replay_timed`]
/// of the trace loaded whole (the same report, byte for byte) in memory that follows the
/// requests in flight, not the trace. `reader` reads the trace; with its own times,
/// `reopen` opens it again for a first pass that checks they never go back, as reading
/// ahead by time needs (a trace whose times do, or that is not a file to read twice, a
/// pipe, is loaded whole and replayed as [`replay_timed`]).
/// With a second core the trace is parsed on it, and a Mooncake trace is read once more
/// alongside for the blocks only one request has (a hint that saves work, never changes
/// the report: see `timed/sharing.rs`). Only for what [`streams`] allows.
pub fn replay_timed_streamed(
    mut reader: routerlab_trace::TraceReader,
    reopen: &dyn Fn() -> Result<routerlab_trace::TraceReader, SimError>,
    replicas: &mut Replicas,
    settings: &TimedSettings,
    observer: &mut dyn Observer,
) -> Result<(Report, StreamedTrace), SimError> {
    validate(replicas, settings)?;
    if !streams(reader.format()) {
        return Err(SimError::Input(
            "an agentic trace's dependencies need the whole trace: replay it with replay_timed"
                .into(),
        ));
    }
    let mut sizes = settings.engine_block_sizes();
    sizes.sort_unstable();
    sizes.dedup();
    // A matcher told of a peer's change reads the request later, perhaps once it is done.
    let sync = replicas.sync();
    if sync.is_on() && sync.scope == routerlab_route::SyncScope::Decisions {
        return replay_loaded(reader, &sizes, replicas, settings, observer);
    }
    // The first pass over the times needs a file that can be read again (not a pipe).
    let times_pass = match settings.arrivals {
        Arrivals::Trace { speedup } => match std::fs::metadata(reader.source_path()) {
            Ok(meta) if meta.is_file() => Some(speedup),
            _ => return replay_loaded(reader, &sizes, replicas, settings, observer),
        },
        Arrivals::Closed { .. } | Arrivals::Poisson { .. } => None,
    };
    let header = Workload {
        source: routerlab_trace::TraceSource {
            path: reader.source_path().to_owned(),
            format: reader.format(),
            bytes: 0,
            content_hash: String::new(),
        },
        unit: reader.unit(),
        block_size: reader.block_size(),
        engine_block_sizes: sizes.clone(),
        requests: Vec::new(),
        skipped: Default::default(),
        adapters: reader.adapters().clone(),
    };
    let clock = settings.arrivals.clock(settings.seed);
    let ahead = crate::read_ahead::worth_it();
    // With a second core, the trace is also read through once more, alongside the replay,
    // for the blocks only one request has (not when it cannot be opened again).
    let counted = match routerlab_trace::blocks::keyed_by_trace_blocks(reader.format()) {
        true if ahead => reopen().ok().map(|again| {
            let bytes = std::fs::metadata(reader.source_path()).map_or(0, |m| m.len());
            (again, bytes)
        }),
        _ => None,
    };
    let sharing = OnceLock::new();
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|scope| {
        // The counting starts first: it goes on beside the pass over the times.
        if let Some((again, bytes)) = counted {
            let (sharing, stop) = (&sharing, &stop);
            scope.spawn(move || {
                super::sharing::count(again, bytes, sharing, stop);
            });
        }
        let run = || {
            // The reader starts before the pass over the times, and has the first batches
            // ready when the loop starts.
            let pull = match ahead {
                true => crate::read_ahead::Pull::ahead(scope, &mut reader, Some(&sharing), None),
                false => crate::read_ahead::Pull::here(&mut reader),
            };
            if let Some(speedup) = times_pass {
                let mut times = reopen()?;
                times.times_only();
                match in_time_order(&mut times, speedup)? {
                    Some(requests) => observer.expected(requests),
                    None => return Ok(None),
                }
            }
            let mut sim = Sim::new(
                Feed::streamed(header, pull, clock),
                replicas,
                settings,
                observer,
            );
            sim.events = Events::streamed();
            sim.sharing = Some(&sharing);
            sim.run(replicas)?;
            Ok::<_, SimError>(Some(routerlab_report::checked(sim.report())))
        };
        let report = run();
        stop.store(true, Ordering::Relaxed);
        report
    });
    let report = report?;
    // Times that go back: the trace is loaded whole and replayed as `replay_timed`, read
    // afresh (the reader may have read ahead).
    let Some(report) = report else {
        return replay_loaded(reopen()?, &sizes, replicas, settings, observer);
    };
    let read = StreamedTrace {
        source: reader.source(),
        skipped: reader.skipped().clone(),
        block_size: reader.block_size(),
    };
    Ok((report, read))
}

/// The fallback for a trace whose times go back, or that cannot be read twice at its own
/// times (a pipe): loaded whole, replayed as [`replay_timed`].
fn replay_loaded(
    reader: routerlab_trace::TraceReader,
    sizes: &[u32],
    replicas: &mut Replicas,
    settings: &TimedSettings,
    observer: &mut dyn Observer,
) -> Result<(Report, StreamedTrace), SimError> {
    let workload = Workload::load(reader, sizes)?;
    observer.expected(workload.requests.len() as u64);
    let report = replay_timed(&workload, replicas, settings, observer)?;
    let read = StreamedTrace {
        source: workload.source,
        skipped: workload.skipped,
        block_size: workload.block_size,
    };
    Ok((report, read))
}

/// Whether the trace `reader` reads sends its requests in file order at its own times
/// divided by `speedup` (no request before the one above it); a request without a time,
/// or one past the clock, fails as the replay would. `Some` with the number of requests when
/// they are in order, `None` when not.
fn in_time_order(
    reader: &mut routerlab_trace::TraceReader,
    speedup: f64,
) -> Result<Option<u64>, SimError> {
    let mut clock = Arrivals::Trace { speedup }
        .clock(0)
        .expect("the trace's times are a clock");
    let mut request = routerlab_trace::TraceRequest::default();
    let mut last = 0;
    let (mut sorted, mut requests) = (true, 0u64);
    while reader.next_into(&mut request)? {
        requests += 1;
        let at = (clock.next(request.line, request.arrival_ns))
            .map_err(|e| arrival_error(reader.source_path(), e))?;
        sorted &= at >= last;
        last = at;
    }
    Ok(sorted.then_some(requests))
}

impl Sim<'_> {
    /// The next request of the trace, read ahead (streamed) and given its state, its
    /// conversation and, disaggregated, its pools' state; or, loaded, the next in a closed
    /// loop. `None` when there is no more.
    pub(super) fn next_request(&mut self) -> Result<Option<(usize, u64)>, SimError> {
        if let Feed::Loaded { workload, .. } = &self.feed {
            let index = self.next_closed;
            return Ok((index < workload.requests.len()).then(|| {
                self.next_closed += 1;
                (index, self.base_arrival[index])
            }));
        }
        let Some((index, at)) = self.feed.read()? else {
            return Ok(None);
        };
        let request = self.feed.request(index);
        let root =
            (request.parent).map_or(RequestSeq::of_index(index).0, |p| self.conversation_of[p]);
        let state = self.state_of(request, at);
        self.requests.push(state);
        self.conversation_of.push(root);
        if let Some(pd) = &mut self.pd {
            pd.requests.push(Default::default());
        }
        if self.settings.respect_parents {
            self.children.push(Vec::new());
            self.parent_done.push((0, 0));
        }
        Ok(Some((index, at)))
    }

    /// Streamed, with arrival times: schedules the arrivals due by the next event (an
    /// arrival goes before whatever else happens at its instant, as when all were
    /// scheduled at the start), reading ahead one request past them.
    pub(super) fn admit(&mut self) -> Result<(), SimError> {
        if matches!(self.feed, Feed::Loaded { .. })
            || matches!(self.settings.arrivals, Arrivals::Closed { .. })
        {
            return Ok(());
        }
        loop {
            if self.pending.is_none() {
                self.pending = self.next_request()?;
            }
            let Some((index, at)) = self.pending else {
                return Ok(());
            };
            if self.events.next_time().is_some_and(|next| next < at) {
                return Ok(());
            }
            self.pending = None;
            // A request held for its parent waits for it, or goes now if it is done.
            let parent = self.feed.request(index).parent;
            if let Some(parent) = parent.filter(|_| self.settings.respect_parents) {
                match self.parent_done[parent] {
                    (_, 0) => self.children[parent].push(index),
                    (done, order) => self.release_child(index, done, order),
                }
                continue;
            }
            self.events.push_arrival(at, index);
        }
    }
}

//! Reading a trace on a thread of its own: parsing, block hashing and interning run ahead
//! of the routing, in batches handed over through a bounded queue, so a replay uses two
//! cores. The requests reach the caller one at a time in file order, and a read error
//! reaches it where the sequential loop would have met it (after every request before
//! it), so the decisions, and every report, are the sequential loop's. Batches go back to
//! the reader to be refilled: the queue allocates nothing once it is warm.

use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};

use routerlab_trace::adapters::Adapters;
use routerlab_trace::sharing::Sharing;
use routerlab_trace::{HashJob, TraceError, TraceReader, TraceRequest};

/// Requests in a batch: enough that the hand-over costs nothing beside a decision, few
/// enough that the reader is never far ahead (what is queued is at most
/// `QUEUED × BATCH` requests).
const BATCH: usize = 512;
/// Requests in the first batch, which the loop waits for.
const FIRST_BATCH: usize = 32;
/// Batches queued between the threads.
const QUEUED: usize = 4;

/// What the reader hands over: a batch (`len` of its buffers filled), the adapter names
/// first seen in it, and the error the read stopped at, if it did.
struct Batch {
    requests: Vec<TraceRequest>,
    /// For each request, how many leading blocks of its chain others may have, when the
    /// trace's sharing was known as it was read (see [`Pull::shared`]).
    shared: Vec<Option<usize>>,
    len: usize,
    new_adapters: Vec<String>,
    error: Option<TraceError>,
}

/// Whether a replay should read ahead: when a second core is there to run the reader.
pub(crate) fn worth_it() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// Calls `each` with every request of `reader` in file order, and the adapter names known
/// so far, reading on a second thread; stops at the first error, `each`'s or the read's.
/// Whichever thread waits for the other hashes the file meanwhile (see
/// `TraceReader::hash_elsewhere`), so the reader has that much less to do.
pub(crate) fn for_each<E: From<TraceError>>(
    reader: &mut TraceReader,
    mut each: impl FnMut(&TraceRequest, &Adapters) -> Result<(), E>,
) -> Result<(), E> {
    std::thread::scope(|scope| {
        // The reader stops when `pull` goes: an error of `each` ends it too.
        let idle = reader.hash_elsewhere();
        let mut pull = Pull::ahead(scope, reader, None, idle);
        while let Some((request, adapters)) = pull.next()? {
            each(request, adapters)?;
        }
        Ok(())
    })
}

/// The requests of a trace one at a time, in file order, for a loop that asks for them as
/// it goes (the timed replay's): read on a second thread ([`Pull::ahead`]) or in place.
pub(crate) struct Pull<'r> {
    from: Source<'r>,
    /// The adapter names of what was handed out (read ahead, the reader knows more).
    adapters: Adapters,
}

enum Source<'r> {
    Here {
        reader: &'r mut TraceReader,
        request: TraceRequest,
    },
    Ahead {
        full: Receiver<Batch>,
        empty: SyncSender<Batch>,
        batch: Option<Batch>,
        next: usize,
        /// What to do while no batch is there.
        idle: Option<HashJob>,
    },
}

impl<'r> Pull<'r> {
    /// Reads `reader` on the caller's thread.
    pub(crate) fn here(reader: &'r mut TraceReader) -> Pull<'r> {
        Pull {
            adapters: reader.adapters().clone(),
            from: Source::Here {
                reader,
                request: TraceRequest::default(),
            },
        }
    }

    /// Reads `reader` on a thread of `scope`, which ends when the `Pull` is dropped (drop
    /// it inside the scope, or the scope waits for a reader blocked on a full queue). Once
    /// `sharing` is set, that thread also works out what [`Pull::shared`] gives. Either
    /// thread steps `idle` whenever it would wait for the other: the caller's for a batch,
    /// the reader's for room in the queue.
    pub(crate) fn ahead<'scope, 'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        reader: &'env mut TraceReader,
        sharing: Option<&'env OnceLock<Sharing>>,
        idle: Option<HashJob>,
    ) -> Pull<'r> {
        let (full_tx, full_rx) = sync_channel::<Batch>(QUEUED);
        let (empty_tx, empty_rx) = sync_channel::<Batch>(QUEUED + 1);
        let adapters = reader.adapters().clone();
        let reader_idle = idle.clone();
        scope.spawn(move || {
            read(reader, sharing, reader_idle.as_ref(), full_tx, empty_rx);
        });
        Pull {
            adapters,
            from: Source::Ahead {
                full: full_rx,
                empty: empty_tx,
                batch: None,
                next: 0,
                idle,
            },
        }
    }

    /// The next request, with the adapter names known so far (its own among them); `None`
    /// at the end of the trace. A read error comes after every request before it.
    pub(crate) fn next(&mut self) -> Result<Option<(&mut TraceRequest, &Adapters)>, TraceError> {
        match &mut self.from {
            Source::Here { reader, request } => {
                if !reader.next_into(request)? {
                    return Ok(None);
                }
                self.adapters.catch_up(reader.adapters());
                Ok(Some((request, &self.adapters)))
            }
            Source::Ahead {
                full,
                empty,
                batch,
                next,
                idle,
            } => {
                while batch.as_ref().is_none_or(|b| *next == b.len) {
                    if let Some(mut done) = batch.take() {
                        if let Some(error) = done.error.take() {
                            return Err(error);
                        }
                        // The reader may have finished: a batch it will not refill is dropped.
                        let _ = empty.try_send(done);
                    }
                    // The reader hung up: the trace is over.
                    let Some(arrived) = arrival(full, idle.as_ref()) else {
                        return Ok(None);
                    };
                    for name in &arrived.new_adapters {
                        self.adapters.number(name);
                    }
                    *batch = Some(arrived);
                    *next = 0;
                }
                let batch = batch.as_mut().expect("a batch with requests left");
                *next += 1;
                Ok(Some((&mut batch.requests[*next - 1], &self.adapters)))
            }
        }
    }

    /// For the request [`Pull::next`] gave last, how many leading blocks of its chain
    /// other requests' chains may have (`Sharing::shared_len`), when the reader's thread
    /// worked it out: when the trace's sharing was known as it read the request. `None`
    /// otherwise (read here, or before the sharing was known).
    pub(crate) fn shared(&self) -> Option<usize> {
        match &self.from {
            Source::Here { .. } => None,
            Source::Ahead { batch, next, .. } => {
                let at = next.checked_sub(1)?;
                batch.as_ref()?.shared.get(at).copied().flatten()
            }
        }
    }
}

/// The next batch from `full`, `idle` stepped while there is none yet; `None` when the
/// reader hung up.
fn arrival(full: &Receiver<Batch>, idle: Option<&HashJob>) -> Option<Batch> {
    loop {
        match full.try_recv() {
            Ok(batch) => return Some(batch),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if idle.is_some_and(HashJob::step) => {}
            Err(TryRecvError::Empty) => return full.recv().ok(),
        }
    }
}

/// The reader's thread: fills batches (new, or handed back) until the trace ends, an
/// error stops it, or the other side hangs up; with each request, its chain's shared length
/// once `sharing` is known. While the queue is full it steps `idle`.
fn read(
    reader: &mut TraceReader,
    sharing: Option<&OnceLock<Sharing>>,
    idle: Option<&HashJob>,
    full: SyncSender<Batch>,
    empty: Receiver<Batch>,
) {
    let mut known = reader.adapters().len();
    // The loop waits for the first batch: a short one starts it sooner. Each after is
    // twice as long until they are full size: the reader, several times as fast as the
    // loop, stays ahead.
    let mut size = FIRST_BATCH;
    loop {
        let mut batch = match empty.try_recv() {
            Ok(batch) => batch,
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => Batch {
                requests: Vec::new(),
                shared: Vec::new(),
                len: 0,
                new_adapters: Vec::new(),
                error: None,
            },
        };
        batch.len = 0;
        batch.new_adapters.clear();
        batch.error = None;
        let mut ended = false;
        while batch.len < size {
            if batch.requests.len() == batch.len {
                batch.requests.push(TraceRequest::default());
                batch.shared.push(None);
            }
            match reader.next_into(&mut batch.requests[batch.len]) {
                Ok(true) => {
                    let known = sharing.and_then(OnceLock::get);
                    batch.shared[batch.len] =
                        known.map(|s| s.shared_len(&batch.requests[batch.len].blocks));
                    batch.len += 1;
                }
                Ok(false) => {
                    ended = true;
                    break;
                }
                Err(error) => {
                    batch.error = Some(error);
                    ended = true;
                    break;
                }
            }
        }
        let names = reader.adapters();
        for id in known..names.len() {
            // Adapters are numbered from 1: the one at position `id` is number `id + 1`.
            if let Some(name) = names.name(id as u32 + 1) {
                batch.new_adapters.push(name.to_owned());
            }
        }
        known = names.len();
        size = (size * 2).min(BATCH);
        if !hand_over(&full, batch, idle) || ended {
            return;
        }
    }
}

/// Puts `batch` on the queue, `idle` stepped while the queue is full; `false` when the
/// other side hung up.
fn hand_over(full: &SyncSender<Batch>, mut batch: Batch, idle: Option<&HashJob>) -> bool {
    loop {
        match full.try_send(batch) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(back)) if idle.is_some_and(HashJob::step) => batch = back,
            Err(TrySendError::Full(back)) => return full.send(back).is_ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file is hashed for the report whichever thread waits: the caller (a quick
    /// `each`, the reader ahead of it) or the reader (a slow one, the queue full).
    #[test]
    fn the_trace_is_hashed_whole_whichever_thread_waits() {
        let path =
            std::env::temp_dir().join(format!("routerlab-ahead-hash-{}.jsonl", std::process::id()));
        // About 6 MiB: two dozen pieces of the hash.
        let line = |i: usize| format!("{{\"prompt\": \"{i} {}\"}}\n", "y".repeat(600));
        let text: String = (0..10_000).map(line).collect();
        std::fs::write(&path, &text).unwrap();
        let expected = format!("{:016x}", routerlab_core::hash::hash64(text.as_bytes(), 0));
        for slow in [false, true] {
            let mut reader =
                TraceReader::open(&path, routerlab_trace::TraceOptions::default()).unwrap();
            let mut seen = 0;
            for_each::<TraceError>(&mut reader, |request, _| {
                seen += 1;
                assert!(
                    request
                        .prompt
                        .starts_with(format!("{} ", seen - 1).as_bytes())
                );
                if slow && seen % 500 == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Ok(())
            })
            .unwrap();
            assert_eq!(seen, 10_000);
            assert_eq!(reader.source().content_hash, expected, "slow: {slow}");
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn every_request_arrives_in_order_with_its_adapter_named() {
        let path =
            std::env::temp_dir().join(format!("routerlab-ahead-{}.jsonl", std::process::id()));
        let text: String = (0..2000)
            .map(|i| match i % 3 {
                0 => format!("{{\"prompt\": \"p{i}\"}}\n"),
                _ => format!("{{\"prompt\": \"p{i}\", \"adapter\": \"a{}\"}}\n", i / 300),
            })
            .collect();
        std::fs::write(&path, text).unwrap();
        let open = || TraceReader::open(&path, routerlab_trace::TraceOptions::default()).unwrap();
        let mut sequential = Vec::new();
        let mut reader = open();
        let mut request = TraceRequest::default();
        while reader.next_into(&mut request).unwrap() {
            let name = reader.adapters().name(request.adapter).map(str::to_owned);
            sequential.push((request.seq, request.line, request.adapter, name));
        }
        let mut ahead = Vec::new();
        for_each::<TraceError>(&mut open(), |request, adapters| {
            let name = adapters.name(request.adapter).map(str::to_owned);
            ahead.push((request.seq, request.line, request.adapter, name));
            Ok(())
        })
        .unwrap();
        // The caller stopping early stops the reader (no hang on a full queue).
        let mut seen = 0;
        #[derive(Debug, PartialEq)]
        enum Stop {
            Here,
            Read,
        }
        impl From<TraceError> for Stop {
            fn from(_: TraceError) -> Stop {
                Stop::Read
            }
        }
        let stopped = for_each::<Stop>(&mut open(), |request, _| {
            seen += 1;
            match request.seq {
                10 => Err(Stop::Here),
                _ => Ok(()),
            }
        });
        assert_eq!((stopped, seen), (Err(Stop::Here), 10));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(ahead.len(), 2000);
        assert_eq!(ahead, sequential);
        assert_eq!(ahead[1].3.as_deref(), Some("a0"));
    }

    /// Read ahead with the trace's sharing known, each request comes with its chain's
    /// shared length as `Sharing::shared_len` gives it; without, with none.
    #[test]
    fn with_the_sharing_known_each_request_comes_with_its_shared_length() {
        let path =
            std::env::temp_dir().join(format!("routerlab-shared-{}.jsonl", std::process::id()));
        // Even lines share all three blocks, odd ones only their first.
        let text: String = (0..3000)
            .map(|i| {
                let ids = match i % 2 {
                    0 => "0, 1, 2".to_owned(),
                    _ => format!("0, {}, {}", 10 + 2 * i, 11 + 2 * i),
                };
                format!(
                    "{{\"timestamp\": {i}, \"input_length\": 1536, \"output_length\": 1, \
                     \"hash_ids\": [{ids}]}}\n"
                )
            })
            .collect();
        std::fs::write(&path, text).unwrap();
        let open = || TraceReader::open(&path, routerlab_trace::TraceOptions::default()).unwrap();
        let mut count = routerlab_trace::sharing::SharingCount::for_blocks(9_000);
        let mut reader = open();
        let mut request = TraceRequest::default();
        while reader.next_into(&mut request).unwrap() {
            count.add(&request.blocks);
        }
        let sharing = OnceLock::new();
        let _ = sharing.set(count.done());
        let unknown = OnceLock::new();
        for (given, known) in [(&sharing, true), (&unknown, false)] {
            let mut reader = open();
            let lengths = std::thread::scope(|scope| {
                let mut pull = Pull::ahead(scope, &mut reader, Some(given), None);
                let mut lengths = Vec::new();
                while let Some((request, _)) = pull.next().unwrap() {
                    let expected = given.get().map(|s| s.shared_len(&request.blocks));
                    let line = request.line;
                    assert_eq!(pull.shared(), expected, "line {line}");
                    lengths.push(expected);
                }
                lengths
            });
            assert_eq!(lengths.len(), 3000);
            match known {
                true => {
                    assert_eq!(lengths[0], Some(3));
                    assert_eq!(lengths[1], Some(1));
                }
                false => assert!(lengths.iter().all(Option::is_none)),
            }
        }
        std::fs::remove_file(&path).unwrap();
    }
}

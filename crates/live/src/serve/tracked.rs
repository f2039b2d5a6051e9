//! A proxied answer's body as `serve` passes it on: its first bytes tell the matcher the
//! first token, its end (or the client leaving) the completion, without a body's poll ever
//! waiting for the state's lock in place.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use hyper::body::Incoming;

use super::Shared;
use super::routed::Routed;
use super::state::State;
use crate::http::BoxError;

/// The engine's response body, passed through as it arrives; its first bytes are the
/// request's first token, its end (or the client going away, which drops it and so
/// cancels the upstream request) the request's completion.
pub(super) struct Tracked {
    pub(super) inner: Incoming,
    pub(super) shared: Arc<Shared>,
    pub(super) routed: Option<Routed>,
    pub(super) upstream: usize,
    pub(super) first_seen: bool,
    /// Whether the engine answered with success.
    pub(super) success: bool,
    /// Which plugins learned the pick, if any did ([`State::learn`]).
    pub(super) learned: Option<u64>,
    /// How the body ended: `Some(true)` whole, `Some(false)` broken off by the engine;
    /// `None` while it runs or when the client went away first.
    pub(super) ended: Option<bool>,
    /// Whether a call for it waits for the lock in a task of its own: then its later ones
    /// do too, so that they reach the plugins in order.
    pub(super) deferred: bool,
    /// When its first bytes came, ns (for the decision log).
    pub(super) first_ns: Option<u64>,
    /// Server-sent events seen so far (`data:` lines but `[DONE]`).
    pub(super) events: u64,
    /// The engine's status.
    pub(super) status: u16,
    /// The engine's name.
    pub(super) endpoint: String,
}

/// Runs `f` on the state now if its lock is free, else in a task of its own that waits for
/// it. A body's poll or drop must not wait in place for the lock: the runtime thread would
/// be held while a plugin call holds it. Returns whether it was deferred.
pub(super) fn with_state(
    shared: &Arc<Shared>,
    now: bool,
    f: impl FnOnce(&mut State) + Send + 'static,
) -> bool {
    if now && let Some(mut state) = shared.try_state() {
        f(&mut state);
        return false;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            let shared = shared.clone();
            runtime.spawn(async move {
                let mut state = shared.lock().await;
                f(&mut state);
            });
            true
        }
        // Outside the runtime (it is shutting down): nothing else runs on it to stall.
        Err(_) => {
            f(&mut shared.state.blocking_lock());
            false
        }
    }
}

impl Tracked {
    /// The peer replicas hear of `kind` (sent from a task: a body's poll never waits).
    fn tell_peers(&self, kind: super::peers::Kind, routed: &Routed) {
        if self.shared.peers.is_none() {
            return;
        }
        let change = super::peers::change(
            kind,
            routed,
            &self.endpoint,
            self.shared.settings.block_size,
        );
        let shared = self.shared.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { super::peers::share(&shared, change).await });
        }
    }

    fn finish(&mut self) {
        let Some(routed) = self.routed.take() else {
            return;
        };
        let now = self.shared.now_ns();
        let (upstream, learned, ended, success) =
            (self.upstream, self.learned, self.ended, self.success);
        let status = match (ended, self.status) {
            (_, s) if !(200..300).contains(&s) => format!("http-{s}"),
            (Some(true), _) => "ok".to_owned(),
            (Some(false), _) => "broken".to_owned(),
            (None, _) => "left".to_owned(),
        };
        let events = (self.events > 0).then_some(self.events);
        let (seq, first) = (routed.seq, self.first_ns);
        self.shared
            .log(|log| log.done(seq, &status, first, now, events));
        with_state(&self.shared, !self.deferred, move |state| {
            state.complete(&routed, upstream, learned, now);
            // Only the engine's doing counts toward its health, not a client that left.
            // A whole body counts for the engine only when it was a success (a 5xx counted
            // against it when its status came); a broken one always counts against it.
            match ended {
                Some(false) => state.answered(upstream, false, now),
                Some(true) if success => state.answered(upstream, true, now),
                _ => {}
            }
        });
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
            && this.shared.decision_log.is_some()
        {
            this.first_ns.get_or_insert_with(|| this.shared.now_ns());
            this.events += count_events(data);
        }
        match &polled {
            Poll::Ready(Some(Ok(frame))) if frame.is_data() && !this.first_seen => {
                this.first_seen = true;
                if this.learned.is_some()
                    && let Some(routed) = &this.routed
                {
                    this.tell_peers(super::peers::Kind::FirstToken, routed);
                    let now = this.shared.now_ns();
                    let (upstream, learned) = (this.upstream, this.learned);
                    match this.shared.try_state() {
                        Some(mut state) => state.first_token(routed, upstream, learned, now),
                        None => {
                            let routed = routed.clone();
                            this.deferred = with_state(&this.shared, false, move |state| {
                                state.first_token(&routed, upstream, learned, now)
                            });
                        }
                    }
                }
            }
            Poll::Ready(None) => {
                this.ended = Some(true);
                this.finish();
            }
            Poll::Ready(Some(Err(_))) => {
                this.ended = Some(false);
                this.finish();
            }
            _ => {}
        }
        polled.map(|frame| frame.map(|r| r.map_err(|e| Box::new(e) as BoxError)))
    }
}

/// Server-sent events in `data` that carry an answer: `data:` lines, not `data: [DONE]`.
fn count_events(data: &[u8]) -> u64 {
    data.split(|b| *b == b'\n')
        .filter(|line| line.starts_with(b"data:"))
        .filter(|line| !line[5..].trim_ascii().eq(b"[DONE]"))
        .count() as u64
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.finish();
    }
}

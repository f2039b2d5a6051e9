//! The task that owns the engine model: admits requests, steps the model at the wall-clock
//! times it says, and sends each request its tokens.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use routerlab_engine::{Engine, Sequence};
use tokio::sync::mpsc;

use super::{Shared, Submit, Tokens};

/// A request inside the model: where its tokens go and how many it was sent.
pub(super) struct Active {
    tokens: mpsc::UnboundedSender<Tokens>,
    sent: u32,
}

/// Owns the engine model: admits requests, steps it at the wall-clock times it says, and
/// sends each request its tokens.
pub(super) async fn model_task(shared: Arc<Shared>, mut requests: mpsc::UnboundedReceiver<Submit>) {
    let origin = Instant::now();
    let speedup = shared.settings.speedup;
    let model_now = || (origin.elapsed().as_nanos() as f64 * speedup) as u64;
    let wall_at = |model_ns: u64| origin + Duration::from_nanos((model_ns as f64 / speedup) as u64);
    let mut model = Model {
        engine: Engine::new(shared.settings.config.clone()),
        active: HashMap::new(),
        next_handle: 0,
        shared: shared.clone(),
    };
    let publisher = shared.settings.kv_events.clone();
    if publisher.is_some() {
        model.engine.record_kv_events();
    }
    loop {
        let wake = next_boundary(&model.engine, model_now());
        let sleep = wake.map(|at| tokio::time::sleep_until(wall_at(at).into()));
        tokio::select! {
            submit = requests.recv() => {
                let Some(submit) = submit else { return };
                // Whatever was due happens first, so the model's time only moves forward.
                let now = model_now();
                model.advance(now);
                model.admit(submit, now);
            }
            () = async { sleep.expect("a boundary").await }, if sleep.is_some() => {
                model.advance(model_now());
            }
        }
        if let Some(publisher) = &publisher {
            let mut events = Vec::new();
            model.engine.take_kv_events(&mut events);
            if !events.is_empty() {
                publisher.publish(events);
            }
        }
        let status = model.engine.status();
        let g = &shared.gauges;
        g.running.store(status.running, Ordering::Relaxed);
        g.waiting.store(status.waiting, Ordering::Relaxed);
        g.kv_used.store(status.kv_blocks_used, Ordering::Relaxed);
        if let Some(adapters) = model.engine.lora_adapters()
            && let Ok(mut lora) = g.lora.lock()
        {
            *lora = adapters;
        }
    }
}

/// The engine model and the requests inside it.
pub(super) struct Model {
    engine: Engine,
    active: HashMap<usize, Active>,
    next_handle: usize,
    shared: Arc<Shared>,
}

impl Model {
    /// Takes a request in at model time `now`, or refuses one that can never fit.
    fn admit(&mut self, submit: Submit, now: u64) {
        if !self
            .engine
            .can_ever_fit(submit.prompt_tokens, submit.output_tokens)
        {
            let _ = submit.tokens.send(Tokens::Refused(format!(
                "{} prompt and {} output tokens exceed this engine's whole KV cache",
                submit.prompt_tokens, submit.output_tokens
            )));
            return;
        }
        let handle = self.next_handle;
        self.next_handle += 1;
        self.active.insert(
            handle,
            Active {
                tokens: submit.tokens,
                sent: 0,
            },
        );
        let sequence = if submit.moved_in {
            Sequence::transferred(
                handle,
                submit.prompt_tokens,
                submit.output_tokens,
                submit.chain,
            )
        } else {
            Sequence::new(
                handle,
                submit.prompt_tokens,
                submit.output_tokens,
                submit.chain,
            )
        };
        let sequence = sequence.with_adapter(submit.adapter);
        self.engine.enqueue(sequence, now);
    }

    /// Runs the model up to `now`: every step that ended by then, in order, and within a
    /// run of identical decode steps the tokens of the steps done so far.
    fn advance(&mut self, now: u64) {
        while let Some(end) = self.engine.step_end()
            && end <= now
        {
            for finished in self.engine.finish_step(end) {
                if let Some(mut request) = self.active.remove(&finished.request) {
                    send_up_to(
                        &mut request,
                        finished.generated,
                        &self.shared.gauges.generation_tokens,
                    );
                    let cached = finished.hit_tokens.unwrap_or(0);
                    let _ = request.tokens.send(Tokens::Done { cached });
                    self.shared.gauges.requests.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.send_progress(0);
        }
        if let Some((start, step, steps)) = self.engine.step_in_flight()
            && steps > 1
        {
            // Each running request has one more token per step since the run began.
            let done = (now.saturating_sub(start) / step.max(1)).min(steps - 1);
            self.send_progress(done as u32);
        }
    }

    /// Sends each running request its tokens, `extra` steps past what the model recorded.
    fn send_progress(&mut self, extra: u32) {
        for sequence in self.engine.running() {
            if let Some(request) = self.active.get_mut(&sequence.request) {
                send_up_to(
                    request,
                    sequence.generated + extra,
                    &self.shared.gauges.generation_tokens,
                );
            }
        }
    }
}

/// Sends `request` the tokens it has not been sent of its first `generated`, counting them
/// in `counter` (`vllm:generation_tokens_total`) as they go out.
pub(super) fn send_up_to(request: &mut Active, generated: u32, counter: &AtomicU64) {
    if generated > request.sent {
        let more = generated - request.sent;
        let _ = request.tokens.send(Tokens::More(more));
        counter.fetch_add(u64::from(more), Ordering::Relaxed);
        request.sent = generated;
    }
}

/// The next step boundary after `now`: the next single step's end inside a run of
/// identical steps, or the end of the step in flight.
pub(super) fn next_boundary(engine: &Engine, now: u64) -> Option<u64> {
    let (start, step, steps) = engine.step_in_flight()?;
    let end = start + step * steps;
    if steps > 1 && step > 0 {
        let next = start + (now.saturating_sub(start) / step + 1) * step;
        if next < end {
            return Some(next);
        }
    }
    Some(end)
}

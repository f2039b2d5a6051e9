//! What the per-tool readers share: a load point's requests ([`Part`]) and the checks of
//! one request's fields and numbers. A leaf: the readers import it, it imports none of them.

use crate::measured::{MAX_RUN_SPAN_S, MeasuredRequest};

/// One load point of a file: most files hold one, a GuideLLM report one per benchmark.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    /// Its requests that completed, in arrival order.
    pub requests: Vec<MeasuredRequest>,
    /// Requests the file records but the run is read without (failed, cancelled,
    /// warm-up), and why, for a note to the user; `None` when there were none.
    pub left_out: Option<String>,
    /// Requests the tool sent before the run and did not log (LMBench's warm-up, from
    /// its file), in the order sent, times from the first.
    pub warm_up: Vec<MeasuredRequest>,
}

/// A completed request from what a client recorded, in seconds on its clock: sent at
/// `start`, first token at `first`, last at `last`. The error names the field at fault by
/// its role (`start`, `first`, `last`, `input`), for the reader to name as its file does.
pub(crate) fn request(
    input: u64,
    output: u64,
    start: f64,
    first: f64,
    last: f64,
) -> Result<MeasuredRequest, (&'static str, &'static str)> {
    for (role, t) in [("start", start), ("first", first), ("last", last)] {
        if !t.is_finite() || t < 0.0 {
            return Err((role, "must be a finite, non-negative time"));
        }
    }
    if input == 0 {
        return Err(("input", "must be at least 1"));
    }
    const _: () = assert!(routerlab_trace::MAX_REQUEST_TOKENS == 1 << 24);
    if input > routerlab_trace::MAX_REQUEST_TOKENS {
        return Err(("input", "must be at most 16777216 tokens (2^24)"));
    }
    if output > routerlab_trace::MAX_REQUEST_TOKENS {
        return Err(("output", "must be at most 16777216 tokens (2^24)"));
    }
    if first < start {
        return Err(("first", "is before the request was sent"));
    }
    if last < first {
        return Err(("last", "is before the first token"));
    }
    if last - start > MAX_RUN_SPAN_S {
        return Err(("last", "more than a week after the request was sent"));
    }
    Ok(MeasuredRequest {
        input_toks: input,
        output_toks: output,
        queued_ts: start,
        scheduled_ts: start,
        first_token_ts: first,
        last_token_ts: last,
        session: None,
        blocks: None,
    })
}

/// The JSON value at `path` (object keys, `.`-separated) under `value`, if present and not
/// null.
pub(crate) fn at<'a>(value: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.')
        .try_fold(value, |v, key| v.get(key))
        .filter(|v| !v.is_null())
}

/// A whole number of tokens, or why not.
pub(crate) fn tokens(value: &serde_json::Value) -> Result<u64, &'static str> {
    match value.as_u64() {
        Some(n) => Ok(n),
        None => match value.as_f64() {
            Some(f) if f >= 0.0 && f.fract() == 0.0 && f < 9.0e15 => Ok(f as u64),
            _ => Err("must be a whole, non-negative number of tokens"),
        },
    }
}

/// A number, or why not.
pub(crate) fn number(value: &serde_json::Value) -> Result<f64, &'static str> {
    value
        .as_f64()
        .filter(|f| f.is_finite())
        .ok_or("must be a finite number")
}

//! What `vllm bench serve --save-result --save-detailed` writes: one JSON object whose
//! per-request lists run in parallel, in the order the requests were sent
//! (`vllm/benchmarks/serve.py`): `input_lens` and `output_lens` (tokens), `start_times`
//! (seconds on the client's `time.perf_counter()`), `ttfts` (seconds), `itls` (each
//! request's list of inter-token gaps, seconds) and `errors` (`""` for a request that
//! succeeded). A request's first token came at `start + ttft`, its last at `start + ttft +
//! sum(itls)`. Failed requests are left out (and counted); a result without
//! `start_times` (written by an older vLLM) cannot be replayed at its arrival times and is
//! refused.

use serde::Deserialize;

use crate::measured::{MAX_RUN_SPAN_S, MeasuredRequest, in_arrival_order};

#[derive(Deserialize)]
struct Result {
    input_lens: Option<Vec<u64>>,
    output_lens: Option<Vec<u64>>,
    ttfts: Option<Vec<f64>>,
    itls: Option<Vec<Vec<f64>>>,
    start_times: Option<Vec<f64>>,
    #[serde(default)]
    errors: Option<Vec<Option<String>>>,
}

/// Whether `text` looks like a `vllm bench serve` result: a JSON object with `input_lens`
/// and `ttfts` near its start or anywhere in its first 1 MiB.
pub fn detect(text: &str) -> bool {
    let head = &text[..text.floor_char_boundary(1 << 20)];
    text.trim_start().starts_with('{')
        && head.contains("\"input_lens\"")
        && head.contains("\"ttfts\"")
}

/// The requests that succeeded, in the order they were sent, and how many failed; errors
/// name the field (and the request's index in its lists).
pub fn parse(text: &str) -> std::result::Result<(Vec<MeasuredRequest>, usize), String> {
    let result: Result = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let missing = |field: &str| {
        format!(
            "field `{field}`: missing (write the result with `vllm bench serve --save-result --save-detailed`)"
        )
    };
    let input = result.input_lens.ok_or_else(|| missing("input_lens"))?;
    let output = result.output_lens.ok_or_else(|| missing("output_lens"))?;
    let ttfts = result.ttfts.ok_or_else(|| missing("ttfts"))?;
    let itls = result.itls.ok_or_else(|| missing("itls"))?;
    let starts = result.start_times.ok_or_else(|| {
        "field `start_times`: missing: this vLLM does not record when each request was sent, so the run cannot be replayed at its arrival times".to_owned()
    })?;
    let n = input.len();
    for (field, len) in [
        ("output_lens", output.len()),
        ("ttfts", ttfts.len()),
        ("itls", itls.len()),
        ("start_times", starts.len()),
    ] {
        if len != n {
            return Err(format!("field `{field}`: {len} entries, `input_lens` {n}"));
        }
    }
    let errors = result.errors.unwrap_or_default();
    if !errors.is_empty() && errors.len() != n {
        return Err(format!(
            "field `errors`: {} entries, `input_lens` {n}",
            errors.len()
        ));
    }
    let mut requests = Vec::with_capacity(n);
    let mut failed = 0;
    for i in 0..n {
        let at = |field: &str, why: &str| format!("field `{field}[{i}]`: {why}");
        let error = errors.get(i).and_then(Option::as_deref).unwrap_or("");
        if !error.is_empty() || output[i] == 0 {
            failed += 1;
            continue;
        }
        let (start, ttft) = (starts[i], ttfts[i]);
        if !start.is_finite() || start < 0.0 {
            return Err(at("start_times", "must be a finite, non-negative time"));
        }
        if !(0.0..=MAX_RUN_SPAN_S).contains(&ttft) {
            return Err(at(
                "ttfts",
                "must be a finite, non-negative number of seconds",
            ));
        }
        if itls[i].iter().any(|g| !g.is_finite() || *g < 0.0) {
            return Err(at("itls", "gaps must be finite and non-negative"));
        }
        if input[i] == 0 {
            return Err(at("input_lens", "must be at least 1"));
        }
        if input[i] > routerlab_trace::MAX_REQUEST_TOKENS {
            return Err(at("input_lens", "must be at most 16777216 tokens (2^24)"));
        }
        if output[i] > routerlab_trace::MAX_REQUEST_TOKENS {
            return Err(at("output_lens", "must be at most 16777216 tokens (2^24)"));
        }
        let decode: f64 = itls[i].iter().sum();
        if decode > MAX_RUN_SPAN_S {
            return Err(at("itls", "more than a week of decoding"));
        }
        requests.push(MeasuredRequest {
            input_toks: input[i],
            output_toks: output[i],
            queued_ts: start,
            scheduled_ts: start,
            first_token_ts: start + ttft,
            last_token_ts: start + ttft + decode,
            session: None,
            blocks: None,
        });
    }
    if requests.is_empty() {
        return Err(format!("no request succeeded ({failed} failed)"));
    }
    in_arrival_order(&mut requests)?;
    Ok((requests, failed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESULT: &str = r#"{"backend": "vllm", "model_id": "m", "num_prompts": 3, "request_rate": 2.0,
        "duration": 3.5, "completed": 2, "failed": 1,
        "input_lens": [100, 50, 70], "output_lens": [3, 0, 2],
        "ttfts": [0.2, 0.0, 0.1], "itls": [[0.03, 0.04], [], [0.05]],
        "start_times": [100.0, 100.4, 100.9],
        "generated_texts": ["a b c", "", "d e"], "errors": ["", "Server disconnected", ""]}"#;

    #[test]
    fn successful_requests_carry_their_send_first_and_last_token_times() {
        assert!(detect(RESULT));
        let (requests, failed) = parse(RESULT).unwrap();
        assert_eq!(failed, 1);
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].input_toks, 100);
        assert_eq!(requests[0].first_token_ts, 100.2);
        assert!((requests[0].last_token_ts - 100.27).abs() < 1e-9);
        assert_eq!(requests[1].queued_ts, 100.9);
    }

    #[test]
    fn a_result_without_per_request_times_is_refused() {
        let old = RESULT.replace(r#""start_times": [100.0, 100.4, 100.9],"#, "");
        assert!(
            parse(&old)
                .unwrap_err()
                .starts_with("field `start_times`: missing")
        );
        let short = RESULT.replace("[0.2, 0.0, 0.1]", "[0.2, 0.0]");
        assert_eq!(
            parse(&short).unwrap_err(),
            "field `ttfts`: 2 entries, `input_lens` 3"
        );
        let negative = RESULT.replace("[0.03, 0.04]", "[0.03, -1]");
        assert_eq!(
            parse(&negative).unwrap_err(),
            "field `itls[0]`: gaps must be finite and non-negative"
        );
        let summary = r#"{"input_lens_x": 1}"#;
        assert!(!detect(summary));
    }
}

//! DistServe's measured runs (`simdistserve/benchmarks/alignment/data-ground-truth/`,
//! `vllm-N-RATE.exp`): line 1 a Python literal, a list of one dict per request
//! (`prompt_len`, `output_len` tokens; `issue_time`, `first_token_time`, `complete_time`
//! seconds on the client's clock; the derived `ttft_ms`, `tpot_ms`, `latency_ms`), then a
//! brace block of the run's aggregates with unquoted keys (`num_requests: 100`, ...).
//!
//! The dicts hold only string keys and numbers, so the literal is read as JSON once its
//! quotes are; anything else in it is an error. Requests come out in issue order, their
//! queue and schedule times both the issue time (the client saw no more).

use serde::Deserialize;

use crate::measured::{MAX_RUN_SPAN_S, MeasuredRequest, in_arrival_order};

#[derive(Deserialize)]
struct Row {
    prompt_len: u64,
    output_len: u64,
    issue_time: f64,
    first_token_time: f64,
    complete_time: f64,
}

/// Whether `text` looks like a DistServe run: its first line opens a list of dicts whose
/// first key is `prompt_len`, quoted Python's way.
pub fn detect(text: &str) -> bool {
    let head: String = text
        .chars()
        .take(64)
        .filter(|c| !c.is_whitespace())
        .collect();
    head.starts_with("[{'prompt_len':")
}

/// The requests of a run's text, in issue order; errors start with the line (`1: request
/// 3: field `issue_time`: ...`), naming the request (its 1-based place in the list) and
/// the field.
pub fn parse(text: &str) -> Result<Vec<MeasuredRequest>, String> {
    let first = text.lines().next().unwrap_or_default();
    if let Some(bad) = first
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "[]{}:,.'_-+ \t".contains(*c)))
    {
        return Err(format!(
            "1: `{bad}`: not a list of dicts of numbers (DistServe's first line)"
        ));
    }
    let json = first.replace('\'', "\"");
    let rows: Vec<Row> = serde_json::from_str(&json).map_err(|e| {
        format!(
            "1: column {}: {} (DistServe's first line is a list of dicts with prompt_len, output_len, issue_time, first_token_time and complete_time)",
            e.column(),
            e
        )
    })?;
    if rows.is_empty() {
        return Err("1: no requests".into());
    }
    let mut requests = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let at = |field: &str, why: &str| format!("1: request {}: field `{field}`: {why}", i + 1);
        for (field, value) in [
            ("issue_time", row.issue_time),
            ("first_token_time", row.first_token_time),
            ("complete_time", row.complete_time),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(at(field, "must be a finite, non-negative time"));
            }
        }
        if row.prompt_len == 0 {
            return Err(at("prompt_len", "must be at least 1"));
        }
        if row.output_len == 0 {
            return Err(at("output_len", "must be at least 1"));
        }
        for (column, tokens) in [
            ("prompt_len", row.prompt_len),
            ("output_len", row.output_len),
        ] {
            if tokens > routerlab_trace::MAX_REQUEST_TOKENS {
                return Err(at(column, "must be at most 16777216 tokens (2^24)"));
            }
        }
        if row.first_token_time < row.issue_time {
            return Err(at("first_token_time", "is before `issue_time`"));
        }
        if row.complete_time < row.first_token_time {
            return Err(at("complete_time", "is before `first_token_time`"));
        }
        if row.complete_time - row.issue_time > MAX_RUN_SPAN_S {
            return Err(at("complete_time", "more than a week after `issue_time`"));
        }
        requests.push(MeasuredRequest {
            input_toks: row.prompt_len,
            output_toks: row.output_len,
            queued_ts: row.issue_time,
            scheduled_ts: row.issue_time,
            first_token_ts: row.first_token_time,
            last_token_ts: row.complete_time,
            session: None,
            blocks: None,
        });
    }
    in_arrival_order(&mut requests).map_err(|why| format!("1: {why}"))?;
    // The aggregates' count, when it is there, must be the list's.
    for (n, line) in text.lines().enumerate().skip(1) {
        if let Some(value) = line.trim().strip_prefix("num_requests:") {
            let count: usize = value
                .trim()
                .parse()
                .map_err(|_| format!("{}: field `num_requests`: not a count", n + 1))?;
            if count != requests.len() {
                return Err(format!(
                    "{}: field `num_requests`: {count}, but line 1 has {} requests",
                    n + 1,
                    requests.len()
                ));
            }
        }
    }
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "[{'prompt_len': 5, 'output_len': 2, 'issue_time': 10.5, 'first_token_time': 10.6, 'complete_time': 10.7, 'ttft_ms': 100.0, 'tpot_ms': 100.0, 'latency_ms': 200.0}, {'prompt_len': 7, 'output_len': 1, 'issue_time': 10.0, 'first_token_time': 10.25, 'complete_time': 10.25, 'ttft_ms': 250.0, 'tpot_ms': 0.0, 'latency_ms': 250.0}]\n{\n\tnum_requests: 2\n\tavg_ttft_ms: 175.0\n}";

    #[test]
    fn requests_come_in_issue_order_with_their_times() {
        assert!(detect(TWO));
        let requests = parse(TWO).unwrap();
        assert_eq!(
            requests.iter().map(|r| r.input_toks).collect::<Vec<_>>(),
            [7, 5]
        );
        assert_eq!(requests[1].first_token_ts, 10.6);
        assert_eq!(requests[1].scheduled_ts, 10.5);
        assert_eq!(requests[0].last_token_ts, 10.25);
    }

    #[test]
    fn errors_name_the_line_request_and_field() {
        let backwards = TWO.replace("'first_token_time': 10.6", "'first_token_time': 10.4");
        assert_eq!(
            parse(&backwards).unwrap_err(),
            "1: request 1: field `first_token_time`: is before `issue_time`"
        );
        let miscounted = TWO.replace("num_requests: 2", "num_requests: 3");
        assert_eq!(
            parse(&miscounted).unwrap_err(),
            "3: field `num_requests`: 3, but line 1 has 2 requests"
        );
        let missing = TWO.replace("'output_len': 2, ", "");
        assert!(
            parse(&missing)
                .unwrap_err()
                .contains("missing field `output_len`"),
            "{}",
            parse(&missing).unwrap_err()
        );
        assert!(
            parse("[{'prompt_len': None}]")
                .unwrap_err()
                .starts_with("1: column")
        );
        assert!(
            parse("[{'prompt_len': \"x\"}]")
                .unwrap_err()
                .contains("`\"`")
        );
        assert!(!detect("{\"prompt_len\": 1}"));
    }
}

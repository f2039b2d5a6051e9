//! inference-perf's per-request lifecycle metrics (`per_request_lifecycle_metrics.json`,
//! written with `report.request_lifecycle.per_request: true`): a JSON list of one object
//! per request, with `start_time` and `end_time` (seconds on the client's monotonic clock),
//! `info` and `error` (`null` when the request succeeded).
//!
//! `info` holds the token counts and the time each streamed chunk arrived. Earlier
//! releases write them flat (`input_tokens`, `output_tokens`, `output_token_times`); later
//! ones nest them (`request_metrics.text.input_tokens`, `response_metrics.output_tokens`,
//! `response_metrics.output_token_times`). Either is read. The first token came with the
//! first chunk, the last with the last. A run without streaming records no chunk times
//! and is refused.

use serde_json::Value;

use super::common::{at, number, request, tokens};
use crate::measured::{MeasuredRequest, in_arrival_order};

/// Whether `text` looks like inference-perf's per-request file: a JSON list whose first
/// object has `start_time`, `end_time` and `info`.
pub fn detect(text: &str) -> bool {
    let head = &text[..text.floor_char_boundary(1 << 16)];
    let body = head.trim_start();
    body.starts_with('[')
        && body[1..].trim_start().starts_with('{')
        && head.contains("\"start_time\"")
        && head.contains("\"end_time\"")
        && head.contains("\"info\"")
}

/// The requests that succeeded, in arrival order, and how many failed; errors name the
/// request's index and field (``field `[3].info.output_token_times`: ...``).
pub fn parse(text: &str) -> Result<(Vec<MeasuredRequest>, usize), String> {
    let rows: Value = serde_json::from_str(text).map_err(|e| format!("{}: {e}", e.line()))?;
    let rows = rows
        .as_array()
        .ok_or("the file is not a JSON list of requests")?;
    let mut requests = Vec::with_capacity(rows.len());
    let mut failed = 0;
    for (i, row) in rows.iter().enumerate() {
        let field = |path: &str, why: &str| format!("field `[{i}].{path}`: {why}");
        if at(row, "error").is_some() {
            failed += 1;
            continue;
        }
        let pick = |paths: &[&'static str]| {
            paths
                .iter()
                .find_map(|p| at(row, p).map(|v| (*p, v)))
                .ok_or_else(|| field(paths[0], "missing"))
        };
        let count = |paths: &[&'static str]| -> Result<u64, String> {
            let (path, v) = pick(paths)?;
            tokens(v).map_err(|why| field(path, why))
        };
        let input = count(&[
            "info.input_tokens",
            "info.request_metrics.text.input_tokens",
        ])?;
        let output = count(&["info.output_tokens", "info.response_metrics.output_tokens"])?;
        if output == 0 {
            failed += 1;
            continue;
        }
        let start = number(pick(&["start_time"])?.1).map_err(|why| field("start_time", why))?;
        let (times_path, times) = pick(&[
            "info.output_token_times",
            "info.response_metrics.output_token_times",
        ])?;
        let times = times
            .as_array()
            .ok_or_else(|| field(times_path, "not a list of times"))?;
        let time = |v: &Value| number(v).map_err(|why| field(times_path, why));
        let (Some(first), Some(last)) = (times.first(), times.last()) else {
            return Err(field(
                times_path,
                "empty: the run did not stream, so it records no first token",
            ));
        };
        let (first, last) = (time(first)?, time(last)?);
        let request = request(input, output, start, first, last).map_err(|(role, why)| {
            let path = match role {
                "start" => "start_time",
                "input" => "info.input_tokens",
                "output" => "info.output_tokens",
                _ => times_path,
            };
            field(path, why)
        })?;
        requests.push(request);
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

    const FLAT: &str = r#"[
      {"start_time": 100.5, "end_time": 101.0, "request": "{}", "response": "x",
       "info": {"input_tokens": 20, "output_tokens": 3, "output_token_times": [100.7, 100.8, 100.95], "extra_info": {}, "lora_adapter": null},
       "error": null},
      {"start_time": 100.0, "end_time": 100.2, "request": "{}", "response": null,
       "info": {"input_tokens": 30, "output_tokens": 0, "output_token_times": []},
       "error": {"error_type": "ClientError", "error_msg": "boom"}},
      {"start_time": 100.1, "end_time": 100.6, "request": "{}", "response": "y",
       "info": {"request_metrics": {"text": {"input_tokens": 40}}, "response_metrics": {"output_tokens": 2, "output_token_times": [100.3, 100.55]}},
       "error": null}]"#;

    #[test]
    fn both_info_shapes_are_read_and_failures_counted() {
        assert!(detect(FLAT));
        let (requests, failed) = parse(FLAT).unwrap();
        assert_eq!(failed, 1);
        assert_eq!(requests[0].input_toks, 40);
        assert_eq!(
            (requests[0].first_token_ts, requests[0].last_token_ts),
            (100.3, 100.55)
        );
        assert_eq!(requests[1].queued_ts, 100.5);
        assert_eq!(requests[1].last_token_ts, 100.95);
    }

    #[test]
    fn errors_name_the_request_and_field() {
        let unstreamed = FLAT.replace("[100.7, 100.8, 100.95]", "[]");
        assert_eq!(
            parse(&unstreamed).unwrap_err(),
            "field `[0].info.output_token_times`: empty: the run did not stream, so it records no first token"
        );
        let early = FLAT.replace("[100.3, 100.55]", "[100.0, 100.55]");
        assert_eq!(
            parse(&early).unwrap_err(),
            "field `[2].info.response_metrics.output_token_times`: is before the request was sent"
        );
        let bad = FLAT.replace(r#""input_tokens": 20"#, r#""input_tokens": -2"#);
        assert_eq!(
            parse(&bad).unwrap_err(),
            "field `[0].info.input_tokens`: must be a whole, non-negative number of tokens"
        );
        assert!(!detect("[{'prompt_len': 1}]"));
    }
}

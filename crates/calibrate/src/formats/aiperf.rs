//! AIPerf's per-request export, `profile_export.jsonl`: one JSON object per request, with
//! `metadata` (`request_start_ns` and `request_end_ns`, epoch nanoseconds;
//! `benchmark_phase`, `profiling` or `warmup`; `was_cancelled`), `metrics` (each a `{value,
//! unit}`: `input_sequence_length` and `output_sequence_length` in tokens,
//! `time_to_first_token` in `ms`) and `error` (`null` when the request succeeded).
//!
//! A request's first token came at start + TTFT, its last at `request_end_ns`. Warm-up
//! records are left out (they ran before the measured load), and so are failed and
//! cancelled requests, counted. A run profiled without `--streaming` records no TTFT and
//! is refused.

use serde_json::Value;

use super::common::{Part, at, number, request, tokens};
use crate::measured::in_arrival_order;

/// Whether `text` looks like an AIPerf export: its first non-blank line is an object with
/// `metadata` and `request_start_ns`.
pub fn detect(text: &str) -> bool {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let first = &first[..first.floor_char_boundary(1 << 16)];
    first.trim_start().starts_with('{')
        && first.contains("\"metadata\"")
        && first.contains("\"request_start_ns\"")
}

/// Seconds of a metric's `{value, unit}`.
fn seconds(metric: &Value) -> Result<f64, String> {
    let value = number(&metric["value"]).map_err(|why| format!("`value` {why}"))?;
    let scale = match metric["unit"].as_str() {
        Some("ns") => 1e-9,
        Some("us") => 1e-6,
        Some("ms") => 1e-3,
        Some("s" | "sec") => 1.0,
        other => {
            return Err(format!(
                "unit {}: not a time unit (ns, us, ms, s)",
                other.map_or("missing".to_owned(), |u| format!("`{u}`"))
            ));
        }
    };
    Ok(value * scale)
}

/// The completed requests, in arrival order; errors start with the line.
pub fn parse(text: &str) -> Result<Part, String> {
    let mut requests = Vec::new();
    let (mut failed, mut warmup) = (0usize, 0usize);
    // Epoch nanoseconds lose a quarter microsecond as f64 seconds: times are counted from a
    // day before the first request's start instead.
    let mut origin: Option<u64> = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let n = i + 1;
        let record: Value = serde_json::from_str(line).map_err(|e| format!("{n}: {e}"))?;
        let field = |path: &str, why: &str| format!("{n}: field `{path}`: {why}");
        let get = |path: &str| at(&record, path).ok_or_else(|| field(path, "missing"));
        if at(&record, "metadata.benchmark_phase").and_then(Value::as_str) == Some("warmup") {
            warmup += 1;
            continue;
        }
        let cancelled = at(&record, "metadata.was_cancelled").and_then(Value::as_bool);
        if at(&record, "error").is_some() || cancelled == Some(true) {
            failed += 1;
            continue;
        }
        let mut nanos = |path: &str| -> Result<f64, String> {
            let ns = get(path)?.as_u64().ok_or_else(|| {
                field(path, "must be a whole, non-negative number of nanoseconds")
            })?;
            let from = *origin.get_or_insert(ns.saturating_sub(86_400_000_000_000));
            Ok((i128::from(ns) - i128::from(from)) as f64 * 1e-9)
        };
        let start = nanos("metadata.request_start_ns")?;
        let end = nanos("metadata.request_end_ns")?;
        let count = |path: &str| tokens(get(path)?).map_err(|why| field(path, why));
        let input = count("metrics.input_sequence_length.value")?;
        let output = count("metrics.output_sequence_length.value")?;
        if output == 0 {
            failed += 1;
            continue;
        }
        let ttft_path = "metrics.time_to_first_token";
        let ttft = at(&record, ttft_path).ok_or_else(|| {
            field(
                ttft_path,
                "missing: the run was profiled without --streaming, so it records no first token",
            )
        })?;
        let ttft = seconds(ttft).map_err(|why| field(ttft_path, &why))?;
        let request = request(input, output, start, start + ttft, end).map_err(|(role, why)| {
            let path = match role {
                "start" => "metadata.request_start_ns",
                "first" => ttft_path,
                "last" => "metadata.request_end_ns",
                "output" => "metrics.output_sequence_length.value",
                _ => "metrics.input_sequence_length.value",
            };
            field(path, why)
        })?;
        requests.push(request);
    }
    if requests.is_empty() {
        return Err(format!(
            "1: no request completed ({failed} failed, {warmup} warm-up)"
        ));
    }
    in_arrival_order(&mut requests).map_err(|why| format!("1: {why}"))?;
    let mut left_out = Vec::new();
    if failed > 0 {
        left_out.push(format!("{failed} failed or cancelled"));
    }
    if warmup > 0 {
        left_out.push(format!("{warmup} warm-up"));
    }
    Ok(Part {
        warm_up: Vec::new(),
        requests,
        left_out: (!left_out.is_empty())
            .then(|| format!("{} requests left out", left_out.join(" and "))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(start: u64, end: u64, ttft_ms: f64, phase: &str, error: &str) -> String {
        format!(
            r#"{{"metadata": {{"session_num": 0, "request_start_ns": {start}, "request_end_ns": {end}, "worker_id": "w", "record_processor_id": "r", "benchmark_phase": "{phase}", "was_cancelled": false}}, "metrics": {{"input_sequence_length": {{"value": 550, "unit": "tokens"}}, "time_to_first_token": {{"value": {ttft_ms}, "unit": "ms"}}, "output_sequence_length": {{"value": 9, "unit": "tokens"}}}}, "error": {error}}}"#
        )
    }

    #[test]
    fn profiling_records_are_read_and_warmup_and_errors_left_out() {
        let text = [
            record(1_000_000_000, 1_400_000_000, 100.0, "warmup", "null"),
            record(3_000_000_000, 3_500_000_000, 250.0, "profiling", "null"),
            record(2_000_000_000, 2_300_000_000, 50.0, "profiling", "null"),
            record(
                2_500_000_000,
                2_500_100_000,
                1.0,
                "profiling",
                r#"{"code": 500, "type": "E", "message": "m"}"#,
            ),
        ]
        .join("\n");
        assert!(detect(&text));
        let part = parse(&text).unwrap();
        assert_eq!(part.requests.len(), 2);
        assert_eq!(part.requests[0].queued_ts, 2.0);
        assert!((part.requests[0].first_token_ts - 2.05).abs() < 1e-9);
        assert_eq!(part.requests[1].last_token_ts, 3.5);
        assert_eq!(
            part.left_out.as_deref(),
            Some("1 failed or cancelled and 1 warm-up requests left out")
        );
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let good = record(1_000_000_000, 1_400_000_000, 100.0, "profiling", "null");
        let late = record(1_000_000_000, 1_050_000_000, 100.0, "profiling", "null");
        assert_eq!(
            parse(&format!("{good}\n\n{late}")).unwrap_err(),
            "3: field `metadata.request_end_ns`: is before the first token"
        );
        let unstreamed = good.replace(
            r#""time_to_first_token": {"value": 100, "unit": "ms"}, "#,
            "",
        );
        assert!(
            parse(&unstreamed)
                .unwrap_err()
                .starts_with("1: field `metrics.time_to_first_token`: missing"),
            "{}",
            parse(&unstreamed).unwrap_err()
        );
        let minutes = good.replace(r#""unit": "ms""#, r#""unit": "min""#);
        assert_eq!(
            parse(&minutes).unwrap_err(),
            "1: field `metrics.time_to_first_token`: unit `min`: not a time unit (ns, us, ms, s)"
        );
        assert!(parse("{\"metadata\": ").unwrap_err().starts_with("1: "));
        assert!(!detect("{\"input_lens\": []}"));
    }
}

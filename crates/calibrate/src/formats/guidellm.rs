//! GuideLLM's report (`guidellm benchmark --output-path benchmarks.json`): an object whose
//! `benchmarks` list holds one benchmark per load point (a sweep has several), each with
//! `requests.successful`, `requests.errored` and `requests.incomplete`, and
//! `metrics.request_totals` (how many of each the run had; `request_totals` before 0.8).
//!
//! Per request: `prompt_tokens` and `output_tokens`, and times in epoch seconds. GuideLLM
//! 0.4 and later write `request_start_time` and `info.timings` (`first_token_iteration`,
//! `last_token_iteration`, `request_end`); earlier versions `start_time`,
//! `first_token_time`, `last_token_time` and `end_time`. Either is read. A report that
//! kept only a sample of the requests (`--sample-requests`) cannot be replayed at the
//! run's load and is refused.

use serde_json::Value;

use super::common::{Part, at, number, request, tokens};
use crate::measured::in_arrival_order;

/// Whether `text` looks like a GuideLLM report: a JSON object with `benchmarks` whose
/// requests are split into `successful` and `errored`.
pub fn detect(text: &str) -> bool {
    text.trim_start().starts_with('{')
        && text.contains("\"benchmarks\"")
        && text.contains("\"successful\"")
        && text.contains("\"errored\"")
}

/// The first of `paths` under `value` that is present, with its path.
fn first_of<'a>(value: &'a Value, paths: &[&'static str]) -> Option<(&'static str, &'a Value)> {
    paths.iter().find_map(|p| at(value, p).map(|v| (*p, v)))
}

/// One load point per benchmark, in the report's order.
pub fn parse(text: &str) -> Result<Vec<Part>, String> {
    let report: Value = serde_json::from_str(text).map_err(|e| format!("{}: {e}", e.line()))?;
    let benchmarks = report["benchmarks"]
        .as_array()
        .filter(|b| !b.is_empty())
        .ok_or("field `benchmarks`: missing or empty")?;
    let mut parts = Vec::with_capacity(benchmarks.len());
    for (b, benchmark) in benchmarks.iter().enumerate() {
        let here = format!("benchmarks[{b}]");
        let list = |status: &str| -> Result<&[Value], String> {
            match at(benchmark, &format!("requests.{status}")) {
                None => Ok(&[]),
                Some(Value::Array(list)) => Ok(list),
                Some(_) => Err(format!("field `{here}.requests.{status}`: not a list")),
            }
        };
        let successful = list("successful")?;
        let failed = list("errored")?.len() + list("incomplete")?.len();
        // GuideLLM 0.8 keeps the run's totals under `metrics`; earlier reports beside
        // the requests.
        let total = first_of(
            benchmark,
            &[
                "metrics.request_totals.successful",
                "request_totals.successful",
            ],
        )
        .and_then(|(_, v)| v.as_u64());
        if let Some(total) = total
            && total != successful.len() as u64
        {
            return Err(format!(
                "field `{here}.requests.successful`: {} requests of the run's {total}: the report keeps a sample, and a sample cannot be replayed at the run's load (run without --sample-requests; in GuideLLM 0.8, without a `sample_size` in --metrics)",
                successful.len()
            ));
        }
        let mut requests = Vec::with_capacity(successful.len());
        for (i, r) in successful.iter().enumerate() {
            let field = |path: &str, why: &str| {
                format!("field `{here}.requests.successful[{i}].{path}`: {why}")
            };
            let pick = |paths: &[&'static str]| {
                first_of(r, paths).ok_or_else(|| field(paths[0], "missing"))
            };
            let count = |name: &'static str| -> Result<u64, String> {
                let (path, v) = pick(&[name])?;
                tokens(v).map_err(|why| field(path, why))
            };
            let time = |paths: &[&'static str]| -> Result<(&'static str, f64), String> {
                let (path, v) = pick(paths)?;
                number(v).map(|t| (path, t)).map_err(|why| field(path, why))
            };
            let input = count("prompt_tokens")?;
            let output = count("output_tokens")?;
            if output == 0 {
                continue;
            }
            let start = time(&[
                "request_start_time",
                "info.timings.request_start",
                "start_time",
            ])?;
            let first = time(&["info.timings.first_token_iteration", "first_token_time"])?;
            let last = time(&[
                "info.timings.last_token_iteration",
                "last_token_time",
                "info.timings.request_end",
                "end_time",
            ])?;
            let request =
                request(input, output, start.1, first.1, last.1).map_err(|(role, why)| {
                    let path = match role {
                        "start" => start.0,
                        "first" => first.0,
                        "last" => last.0,
                        "output" => "output_tokens",
                        _ => "prompt_tokens",
                    };
                    field(path, why)
                })?;
            requests.push(request);
        }
        if requests.is_empty() {
            return Err(format!(
                "field `{here}.requests.successful`: no request completed ({failed} errored or incomplete)"
            ));
        }
        in_arrival_order(&mut requests).map_err(|why| format!("field `{here}`: {why}"))?;
        parts.push(Part {
            warm_up: Vec::new(),
            requests,
            left_out: (failed > 0)
                .then(|| format!("{failed} errored or incomplete requests left out")),
        });
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEW: &str = r#"{"benchmarks": [{"type_": "generative_benchmark",
        "request_totals": {"successful": 2, "incomplete": 0, "errored": 1, "total": 3},
        "requests": {"successful": [
          {"request_id": "a", "prompt_tokens": 100, "output_tokens": 3, "request_start_time": 10.0,
           "info": {"timings": {"request_start": 10.0, "first_token_iteration": 10.2, "last_token_iteration": 10.4, "request_end": 10.41}}},
          {"request_id": "b", "prompt_tokens": 50, "output_tokens": 2, "request_start_time": 9.5,
           "info": {"timings": {"request_start": 9.5, "first_token_iteration": 9.6, "last_token_iteration": 9.7, "request_end": 9.71}}}],
          "errored": [{"request_id": "c", "prompt_tokens": 10, "output_tokens": 0}], "incomplete": []}}]}"#;

    #[test]
    fn each_benchmark_is_a_load_point_of_its_successful_requests() {
        assert!(detect(NEW));
        let parts = parse(NEW).unwrap();
        assert_eq!(parts.len(), 1);
        let r = &parts[0].requests;
        assert_eq!(r[0].input_toks, 50);
        assert_eq!(
            (r[1].queued_ts, r[1].first_token_ts, r[1].last_token_ts),
            (10.0, 10.2, 10.4)
        );
        assert_eq!(
            parts[0].left_out.as_deref(),
            Some("1 errored or incomplete requests left out")
        );
        let old = r#"{"benchmarks": [{"requests": {"successful": [{"prompt_tokens": 7, "output_tokens": 2,
            "start_time": 1.0, "first_token_time": 1.5, "last_token_time": 1.75, "end_time": 1.8}],
            "errored": [], "incomplete": []}}, {"requests": {"successful": [{"prompt_tokens": 7,
            "output_tokens": 2, "start_time": 5.0, "first_token_time": 5.5, "end_time": 5.8}],
            "errored": [], "incomplete": []}}]}"#;
        let parts = parse(old).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].requests[0].last_token_ts, 1.75);
        assert_eq!(parts[1].requests[0].last_token_ts, 5.8);
    }

    #[test]
    fn errors_name_the_field_by_its_path() {
        let sampled = NEW.replace(r#""successful": 2,"#, r#""successful": 20,"#);
        assert!(
            parse(&sampled).unwrap_err().starts_with(
                "field `benchmarks[0].requests.successful`: 2 requests of the run's 20"
            )
        );
        let backwards = NEW.replace(
            r#""first_token_iteration": 9.6"#,
            r#""first_token_iteration": 9.4"#,
        );
        assert_eq!(
            parse(&backwards).unwrap_err(),
            "field `benchmarks[0].requests.successful[1].info.timings.first_token_iteration`: is before the request was sent"
        );
        let untimed = NEW.replace(r#""first_token_iteration": 10.2, "#, "");
        assert_eq!(
            parse(&untimed).unwrap_err(),
            "field `benchmarks[0].requests.successful[0].info.timings.first_token_iteration`: missing"
        );
        assert!(
            parse("{\"benchmarks\": []}")
                .unwrap_err()
                .contains("missing or empty")
        );
    }
}

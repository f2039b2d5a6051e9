//! fmperf's load generator (`fmperf/loadgen/run.py`): its results file is a JSON object
//! whose `results` list holds one record per streamed response, not per request: `ok`,
//! `error`, `timestamp` (epoch nanoseconds, when the response came), `duration_ms` (since
//! the previous response, or since the request was sent for the first), `exclude` (it came
//! after the run's duration and grace period), `exp_num_users` (the load point: concurrent
//! users), `worker_idx` and `request_idx` (which user's which request), `sample_idx` (the
//! request drawn from the requests file), `response_idx` and `n_tokens`.
//!
//! The prompts' lengths are not in it: they are in the requests file the run drew from
//! (`REQUESTS_FILENAME`, written by `generate-input.py`: a list of `{config: {in_tokens,
//! out_tokens, ...}, request: {prompt, ...}, expected}`), read by [`prompts`].
//!
//! A request is its records: sent at the first one's `timestamp − duration_ms`, its first
//! token at the first one's `timestamp`, its last at the last one's; its output the sum of
//! `n_tokens`. A request with a record not `ok` failed, and one with a record `exclude`
//! ran past the run (fmperf's own summary drops those records); both are left out, counted.
//! Each `exp_num_users` is a load point, fewest users first.

use std::collections::BTreeMap;

use serde_json::Value;

use super::common::{Part, request};
use crate::measured::in_arrival_order;

/// Whether `text` looks like fmperf's results: a JSON object with a `results` list of
/// records carrying `worker_idx` and `response_idx`.
pub fn detect(text: &str) -> bool {
    let head = text.trim_start();
    let head = &head[..head.floor_char_boundary(1 << 16)];
    head.starts_with('{')
        && head.contains("\"results\"")
        && head.contains("\"worker_idx\"")
        && head.contains("\"response_idx\"")
}

/// The prompt tokens of each request of fmperf's requests file, by `sample_idx`: the
/// length of `request.prompt` when it is token ids (what the vLLM target sends), else
/// `config.in_tokens`. Errors name the field's path.
pub fn prompts(text: &str) -> Result<Vec<u64>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("{}: {e}", e.line()))?;
    let cases = doc
        .as_array()
        .ok_or("field ``: must be a list of requests, as generate-input.py writes")?;
    if cases.is_empty() {
        return Err("field ``: the requests file holds no request".into());
    }
    cases
        .iter()
        .enumerate()
        .map(|(i, case)| {
            if let Some(ids) = case.pointer("/request/prompt").and_then(Value::as_array) {
                return match ids.len() {
                    0 => Err(format!("field `[{i}].request.prompt`: is empty")),
                    n => Ok(n as u64),
                };
            }
            match case.pointer("/config/in_tokens").map(super::common::tokens) {
                Some(Ok(0)) => Err(format!("field `[{i}].config.in_tokens`: must be at least 1")),
                Some(Ok(n)) => Ok(n),
                Some(Err(why)) => Err(format!("field `[{i}].config.in_tokens`: {why}")),
                None => Err(format!(
                    "field `[{i}].config.in_tokens`: missing (and `request.prompt` is not token ids)"
                )),
            }
        })
        .collect()
}

/// One streamed response, as read.
struct Response {
    index: usize,
    ok: bool,
    exclude: bool,
    timestamp_ns: u64,
    duration_ms: f64,
    sample: usize,
    response: u64,
    tokens: u64,
}

/// The load points of fmperf's results `text`, each request's prompt from `prompts` (see
/// [`prompts`]); errors name the field's path (`results[7].timestamp`).
pub fn parse(text: &str, prompts: &[u64]) -> Result<Vec<Part>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("{}: {e}", e.line()))?;
    let records = doc
        .get("results")
        .and_then(Value::as_array)
        .ok_or("field `results`: missing: not fmperf's results file")?;
    // (users, worker, request) -> its responses, in the order written.
    let mut requests: BTreeMap<(u64, u64, u64), Vec<Response>> = BTreeMap::new();
    for (index, record) in records.iter().enumerate() {
        let field = |name: &str, why: &str| format!("field `results[{index}].{name}`: {why}");
        let whole = |name: &str| -> Result<u64, String> {
            record
                .get(name)
                .and_then(Value::as_u64)
                .ok_or_else(|| field(name, "must be a whole, non-negative number"))
        };
        let flag = |name: &str| -> Result<bool, String> {
            record
                .get(name)
                .and_then(Value::as_bool)
                .ok_or_else(|| field(name, "must be true or false"))
        };
        let duration_ms = record
            .get("duration_ms")
            .and_then(Value::as_f64)
            .filter(|d| d.is_finite() && *d >= 0.0)
            .ok_or_else(|| field("duration_ms", "must be a finite, non-negative number"))?;
        let sample = whole("sample_idx")?;
        if sample >= prompts.len() as u64 {
            return Err(field(
                "sample_idx",
                &format!(
                    "{sample}, but the requests file holds {} requests (is it the file this run drew from?)",
                    prompts.len()
                ),
            ));
        }
        let key = (
            whole("exp_num_users")?,
            whole("worker_idx")?,
            whole("request_idx")?,
        );
        requests.entry(key).or_default().push(Response {
            index,
            ok: flag("ok")?,
            exclude: flag("exclude")?,
            timestamp_ns: whole("timestamp")?,
            duration_ms,
            sample: sample as usize,
            response: whole("response_idx")?,
            tokens: whole("n_tokens")?,
        });
    }
    if requests.is_empty() {
        return Err("field `results`: holds no record".into());
    }
    // Epoch nanoseconds lose a quarter microsecond as f64 seconds: times are counted from a
    // day before the first response instead.
    let origin = requests
        .values()
        .flatten()
        .map(|r| r.timestamp_ns)
        .min()
        .unwrap_or(0)
        .saturating_sub(86_400_000_000_000);
    let seconds = |ns: u64| (ns - origin) as f64 * 1e-9;
    let mut points: BTreeMap<u64, (Vec<crate::MeasuredRequest>, usize, usize)> = BTreeMap::new();
    for ((users, _, _), mut responses) in requests {
        responses.sort_by_key(|r| r.response);
        let point = points.entry(users).or_default();
        if responses.iter().any(|r| !r.ok) {
            point.1 += 1;
            continue;
        }
        if responses.iter().any(|r| r.exclude) {
            point.2 += 1;
            continue;
        }
        let (first, last) = (&responses[0], &responses[responses.len() - 1]);
        let at = |r: &Response, name: &str| format!("field `results[{}].{name}`", r.index);
        for (n, r) in responses.iter().enumerate() {
            if r.response != n as u64 {
                return Err(format!(
                    "{}: {}, but the request's responses before it number {n}",
                    at(r, "response_idx"),
                    r.response
                ));
            }
            if r.sample != first.sample {
                return Err(format!(
                    "{}: {}, but the request's first response drew {}",
                    at(r, "sample_idx"),
                    r.sample,
                    first.sample
                ));
            }
        }
        let output: u64 = responses.iter().map(|r| r.tokens).sum();
        if output == 0 {
            point.1 += 1;
            continue;
        }
        let first_s = seconds(first.timestamp_ns);
        let start = first_s - first.duration_ms / 1000.0;
        let done = request(
            prompts[first.sample],
            output,
            start,
            first_s,
            seconds(last.timestamp_ns),
        )
        .map_err(|(role, why)| match role {
            "last" => format!("{}: {why}", at(last, "timestamp")),
            "first" => format!("{}: {why}", at(first, "timestamp")),
            _ => format!("{}: {why}", at(first, "duration_ms")),
        })?;
        point.0.push(done);
    }
    points
        .into_iter()
        .map(|(users, (mut requests, failed, overran))| {
            if requests.is_empty() {
                return Err(format!(
                    "field `results`: no request completed at {users} users ({failed} failed, {overran} ran past the run)"
                ));
            }
            in_arrival_order(&mut requests).map_err(|why| format!("field `results`: {why}"))?;
            let mut left_out = Vec::new();
            if failed > 0 {
                left_out.push(format!("{failed} failed"));
            }
            if overran > 0 {
                left_out.push(format!("{overran} past the run's duration"));
            }
            Ok(Part {
                warm_up: Vec::new(),
                requests,
                left_out: (!left_out.is_empty())
                    .then(|| format!("{} requests left out", left_out.join(" and "))),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as fmperf's worker writes it.
    fn record(users: u64, request: u64, response: u64, ts_ms: u64, since_ms: f64) -> String {
        format!(
            r#"{{"response": {{"index": 0, "text": "", "logprobs": null, "finish_reason": null, "stop_reason": null}}, "ok": true, "error": "None", "timestamp": {}, "exp_num_users": {users}, "exp_duration": 60.0, "duration_ms": {since_ms}, "exclude": false, "worker_idx": 0, "request_idx": {request}, "sample_idx": {request}, "response_idx": {response}, "n_tokens": 1, "consistent": true}}"#,
            1_764_580_000_000_000_000u64 + ts_ms * 1_000_000
        )
    }

    fn results(records: &[String]) -> String {
        format!(r#"{{"results": [{}], "energy": {{}}}}"#, records.join(", "))
    }

    #[test]
    fn responses_are_joined_into_requests_per_load_point() {
        let text = results(&[
            record(1, 0, 0, 1050, 50.0),
            record(1, 0, 1, 1080, 30.0),
            record(2, 1, 0, 3040, 40.0),
            record(1, 1, 0, 2020, 20.0),
            record(1, 0, 2, 1100, 20.0),
        ]);
        assert!(detect(&text));
        let parts = parse(&text, &[200, 60]).unwrap();
        assert_eq!(parts.len(), 2, "one load point per number of users");
        let one = &parts[0].requests;
        assert_eq!(one.len(), 2);
        assert_eq!((one[0].input_toks, one[0].output_toks), (200, 3));
        assert!((one[0].first_token_ts - one[0].queued_ts - 0.050).abs() < 1e-9);
        assert!((one[0].last_token_ts - one[0].queued_ts - 0.100).abs() < 1e-9);
        assert_eq!((one[1].input_toks, one[1].output_toks), (60, 1));
        assert_eq!(parts[1].requests.len(), 1);
        assert_eq!(parts[0].left_out, None);
    }

    #[test]
    fn failed_and_late_requests_are_left_out_and_bad_fields_named() {
        let failed = record(1, 1, 0, 2020, 20.0)
            .replace(r#""ok": true"#, r#""ok": false"#)
            .replace(r#""error": "None""#, r#""error": "connection reset""#);
        let late = record(1, 2, 0, 3020, 20.0).replace(r#""exclude": false"#, r#""exclude": true"#);
        let text = results(&[record(1, 0, 0, 1050, 50.0), failed, late]);
        let parts = parse(&text, &[200, 60, 70]).unwrap();
        assert_eq!(parts[0].requests.len(), 1);
        assert_eq!(
            parts[0].left_out.as_deref(),
            Some("1 failed and 1 past the run's duration requests left out")
        );
        assert_eq!(
            parse(&text, &[200]).unwrap_err(),
            "field `results[1].sample_idx`: 1, but the requests file holds 1 requests (is it the file this run drew from?)"
        );
        let gap = results(&[record(1, 0, 0, 1050, 50.0), record(1, 0, 2, 1080, 30.0)]);
        assert_eq!(
            parse(&gap, &[200]).unwrap_err(),
            "field `results[1].response_idx`: 2, but the request's responses before it number 1"
        );
        let negative =
            record(1, 0, 0, 1050, 50.0).replace(r#""duration_ms": 50"#, r#""duration_ms": -1"#);
        assert_eq!(
            parse(&results(&[negative]), &[200]).unwrap_err(),
            "field `results[0].duration_ms`: must be a finite, non-negative number"
        );
        assert!(!detect(r#"{"input_lens": []}"#));
    }

    #[test]
    fn prompts_are_the_token_ids_sent_or_the_configured_length() {
        let text = r#"[{"config": {"in_tokens": 5, "out_tokens": 2, "is_greedy": true}, "request": {"prompt": [1, 2, 3], "max_tokens": 2}, "expected": []},
                       {"config": {"in_tokens": 40, "out_tokens": 2, "is_greedy": true}, "request": {"request": {"text": "hi"}}, "expected": []}]"#;
        assert_eq!(prompts(text).unwrap(), vec![3, 40]);
        assert_eq!(
            prompts(r#"[{"config": {}, "request": {}}]"#).unwrap_err(),
            "field `[0].config.in_tokens`: missing (and `request.prompt` is not token ids)"
        );
        assert!(prompts("{").unwrap_err().starts_with("1: "));
    }
}

//! `serve`'s decision log ([`routerlab_trace::decision_log`]): a JSON line per routed
//! request, with the prompt's block chain, read with the chains so a replay of it shares
//! prefixes as the live traffic did. Requests that did not end whole (`broken`, `left`, an
//! error status) are left out and counted.

use routerlab_trace::decision_log::DecisionRecord;

use super::common::request;
use crate::as_trace::RUN_TRACE_BLOCK_TOKENS;

/// Bytes per token of `serve`'s prompt estimate.
const BYTES_PER_TOKEN: u32 = 4;

/// Whether `text` begins with a decision-log line.
pub fn detect(text: &str) -> bool {
    text.lines().next().is_some_and(DecisionRecord::is_log_line)
}

/// The log's records, in arrival order, for what else reads them (`replay --from-log`).
pub fn records(text: &str) -> Result<Vec<DecisionRecord>, String> {
    let mut records = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: DecisionRecord = serde_json::from_str(line).map_err(|e| {
            let e = e.to_string();
            format!("{}: {}", n + 1, e.lines().next().unwrap_or(""))
        })?;
        let block_tokens = record.block_bytes / BYTES_PER_TOKEN;
        if record.block_bytes == 0
            || !record.block_bytes.is_multiple_of(BYTES_PER_TOKEN)
            || !block_tokens.is_multiple_of(RUN_TRACE_BLOCK_TOKENS)
        {
            return Err(format!(
                "{}: field `block_bytes`: {} is not a multiple of {} (blocks of whole {}-token trace blocks): log with a serve --block-size that is",
                n + 1,
                record.block_bytes,
                BYTES_PER_TOKEN * RUN_TRACE_BLOCK_TOKENS,
                RUN_TRACE_BLOCK_TOKENS
            ));
        }
        records.push(record);
    }
    records.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s).then(a.seq.cmp(&b.seq)));
    Ok(records)
}

/// The requests that ended whole, and how many did not.
pub fn parse(text: &str) -> Result<(Vec<crate::MeasuredRequest>, usize), String> {
    let mut requests = Vec::new();
    let mut failed = 0;
    for record in records(text)? {
        let (Some(ttft), true) = (record.ttft_ms, record.status == "ok") else {
            failed += 1;
            continue;
        };
        let start = record.arrival_s;
        let mut r = request(
            record.prompt_tokens.max(1),
            record.output_tokens,
            start,
            start + ttft / 1e3,
            start + record.e2e_ms / 1e3,
        )
        .map_err(|(role, problem)| format!("request {}: {role} {problem}", record.seq))?;
        r.blocks = Some((record.block_bytes / BYTES_PER_TOKEN, record.blocks));
        requests.push(r);
    }
    if requests.is_empty() {
        return Err(format!(
            "no request in the log ended whole ({failed} did not): nothing to replay or fit"
        ));
    }
    Ok((requests, failed))
}

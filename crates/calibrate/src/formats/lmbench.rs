//! LMBench's multi-round QA summary (`multi-round-qa.py --output summary.csv`, the same
//! script as vLLM production-stack's benchmark): a CSV with a header, one row per finished
//! request, grouped by user. Columns read: `prompt_tokens`, `generation_tokens` (tokens),
//! `ttft` and `generation_time` (seconds) and `launch_time` (epoch seconds), and where
//! both are present `user_id` and `question_id` (whole numbers: the conversation and its
//! round, the request's [`Session`]); others (`finish_time`, a pandas index) are ignored.
//!
//! A request's first token came at launch + TTFT, its last `generation_time` later. A row
//! with no generated tokens is a request that failed (the script writes a TTFT of 0 for
//! it) and is left out, counted.

use super::common::request;
use crate::measured::{MeasuredRequest, Session, in_arrival_order};

const COLUMNS: [&str; 5] = [
    "prompt_tokens",
    "generation_tokens",
    "ttft",
    "generation_time",
    "launch_time",
];

fn header(text: &str) -> Vec<&str> {
    text.lines()
        .next()
        .unwrap_or("")
        .split(',')
        .map(|h| h.trim().trim_matches('"'))
        .collect()
}

/// Whether `text` looks like an LMBench summary: its header names the columns read.
pub fn detect(text: &str) -> bool {
    let header = header(text);
    COLUMNS.iter().all(|c| header.contains(c))
}

/// The requests that generated tokens, in arrival order, and how many did not; errors
/// start with the line and name the column.
pub fn parse(text: &str) -> Result<(Vec<MeasuredRequest>, usize), String> {
    let names = header(text);
    let mut columns = [0usize; 5];
    for (slot, name) in columns.iter_mut().zip(COLUMNS) {
        *slot = names
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("1: no `{name}` column"))?;
    }
    let session_columns = ["user_id", "question_id"].map(|c| names.iter().position(|h| *h == c));
    let mut requests = Vec::new();
    let mut failed = 0;
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let n = i + 1;
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let cell = |c: usize| -> Result<f64, String> {
            cells
                .get(columns[c])
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{n}: field `{}`: not a non-negative number", COLUMNS[c]))
        };
        let count = |c: usize| -> Result<u64, String> {
            let v = cell(c)?;
            if v.fract() != 0.0 || v >= 9.0e15 {
                return Err(format!(
                    "{n}: field `{}`: not a whole number of tokens",
                    COLUMNS[c]
                ));
            }
            Ok(v as u64)
        };
        let (input, output) = (count(0)?, count(1)?);
        let session = match session_columns {
            [Some(user), Some(round)] => {
                let whole = |c: usize, name: &str| -> Result<u64, String> {
                    cells
                        .get(c)
                        .and_then(|v| v.parse::<f64>().ok())
                        .filter(|v| v.is_finite() && *v >= 0.0 && v.fract() == 0.0 && *v < 9.0e15)
                        .map(|v| v as u64)
                        .ok_or_else(|| {
                            format!("{n}: field `{name}`: not a whole, non-negative number")
                        })
                };
                Some(Session {
                    user: whole(user, "user_id")?,
                    round: whole(round, "question_id")?,
                })
            }
            _ => None,
        };
        let (ttft, generation, launch) = (cell(2)?, cell(3)?, cell(4)?);
        if output == 0 {
            failed += 1;
            continue;
        }
        let request = request(
            input,
            output,
            launch,
            launch + ttft,
            launch + ttft + generation,
        )
        .map(|r| MeasuredRequest { session, ..r })
        .map_err(|(role, why)| {
            let column = match role {
                "input" => "prompt_tokens",
                "output" => "generation_tokens",
                "first" => "ttft",
                "last" => "generation_time",
                _ => "launch_time",
            };
            format!("{n}: field `{column}`: {why}")
        })?;
        requests.push(request);
    }
    if requests.is_empty() {
        return Err(format!("2: no request generated tokens ({failed} did not)"));
    }
    in_arrival_order(&mut requests).map_err(|why| format!("2: {why}"))?;
    Ok((requests, failed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = "prompt_tokens,generation_tokens,ttft,generation_time,user_id,question_id,launch_time,finish_time\n\
        1200,100,0.25,2.5,1,1,1700000010.0,1700000012.76\n\
        1300,0,0.0,0.001,1,2,1700000030.0,1700000030.002\n\
        900,80,0.5,2.0,2,1,1700000005.0,1700000007.6\n";

    #[test]
    fn rows_are_read_in_launch_order_and_empty_answers_counted() {
        assert!(detect(SUMMARY));
        let (requests, failed) = parse(SUMMARY).unwrap();
        assert_eq!(failed, 1);
        assert_eq!(requests[0].input_toks, 900);
        assert_eq!(requests[0].first_token_ts, 1_700_000_005.5);
        assert_eq!(requests[0].session, Some(Session { user: 2, round: 1 }));
        assert_eq!(requests[1].last_token_ts, 1_700_000_012.75);
    }

    #[test]
    fn errors_name_the_line_and_column() {
        let bad = SUMMARY.replace("0.25,2.5", "x,2.5");
        assert_eq!(
            parse(&bad).unwrap_err(),
            "2: field `ttft`: not a non-negative number"
        );
        let half = SUMMARY.replace("900,80", "900,80.5");
        assert_eq!(
            parse(&half).unwrap_err(),
            "4: field `generation_tokens`: not a whole number of tokens"
        );
        assert!(!detect("t,prompt_throughput\n"));
        assert_eq!(
            parse("prompt_tokens,ttft\n").unwrap_err(),
            "1: no `generation_tokens` column"
        );
    }
}

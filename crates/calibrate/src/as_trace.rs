//! A measured run as a trace: the requests a benchmark tool logged, replayed like any trace
//! (`replay --trace RUN`), and whether the log falls short of what was offered.
//!
//! The trace is Mooncake's form made in memory, in blocks of [`RUN_TRACE_BLOCK_TOKENS`]:
//! each request arrives when it was sent, with its logged prompt and output lengths. A
//! run whose conversations are known (LMBench's `user_id` and `question_id`; an LMBench
//! ShareGPT CSV read with its workload file, `--lmbench-workload`) gets prefix sharing
//! under one token model: a round's prompt starts with the previous round's prompt (the
//! history it was asked after), so it shares that prompt's whole blocks, up to its own
//! length; the previous answer, the new question and everything of other users
//! are blocks of its own. Without conversations nothing is shared within a run, and a
//! prompt's blocks are named by its length and its place among the prompts of that length:
//! a benchmark that sends the same prompts at each load point of a sweep logs the same
//! blocks at each, so one point's run warms the caches for the next (`--warm-up`).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;

use crate::load::{self, Layout, LoadedRun, RunSettings};
use crate::{CalibrateError, MeasuredRequest, formats};

/// Tokens per block of a measured run's trace (vLLM's default KV block).
pub const RUN_TRACE_BLOCK_TOKENS: u32 = 16;

/// How much of a file is looked at to tell a measured run from a trace.
const HEAD_BYTES: u64 = 1 << 20;

/// A measured run read as a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct RunTrace {
    /// Mooncake-form JSON lines, in blocks of [`RUN_TRACE_BLOCK_TOKENS`].
    pub text: Vec<u8>,
    /// The run as loaded (its label, what it left out, whether it is partial).
    pub run: LoadedRun,
    /// Its warm-up (requests sent before it and not logged) in the same form, its
    /// conversations going on in the run; `None` when it had none.
    pub warm_up: Option<Vec<u8>>,
}

/// Whether `path` holds a measured run rather than a trace: a directory in LLMServingSim's
/// layout (its `requests.jsonl`), LLMServingSim's `requests.jsonl` beside its `meta.json`, or a file whose head
/// one of the benchmark tools' formats recognises. `FILE#K` picks one load point.
fn run_path(path: &Path) -> Result<Option<std::path::PathBuf>, CalibrateError> {
    let (file, _) = load::selector(path);
    let Ok(meta) = std::fs::metadata(&file) else {
        return Ok(None);
    };
    if meta.is_dir() {
        return Ok(file
            .join("requests.jsonl")
            .is_file()
            .then(|| path.to_owned()));
    }
    // A pipe or a device is read once, by the trace reader: never looked into here.
    if !meta.is_file() {
        return Ok(None);
    }
    let mut head = Vec::new();
    std::fs::File::open(&file)
        .and_then(|f| f.take(HEAD_BYTES).read_to_end(&mut head))
        .map_err(|e| CalibrateError::input(format!("{}: cannot read: {e}", file.display())))?;
    let head = String::from_utf8_lossy(&head);
    let first = head.lines().next().unwrap_or("");
    let beside_meta = file
        .parent()
        .map(|d| {
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            }
        })
        .filter(|d| d.join("meta.json").is_file());
    let llmservingsim = first.contains("\"queued_ts\"") && first.contains("\"input_toks\"");
    if let Some(dir) = beside_meta.filter(|_| llmservingsim) {
        return Ok(Some(dir.to_owned()));
    }
    Ok(formats::detect(&head).map(|_| path.to_owned()))
}

/// The measured run at `path` as a trace, or `None` when `path` is not a measured run;
/// `fmperf_requests` is fmperf's requests file, which its results need, and
/// `lmbench_workload` LMBench's ShareGPT workload file, which gives an LMBench CSV its
/// conversations, and `lmbench_warm_up` its warm-up file, sent before the run. A file of
/// several load points (a GuideLLM report) needs one picked as `FILE#K`.
pub fn run_trace(
    path: &Path,
    fmperf_requests: Option<&Path>,
    lmbench_workload: Option<&Path>,
    lmbench_warm_up: Option<&Path>,
) -> Result<Option<RunTrace>, CalibrateError> {
    let Some(run_path) = run_path(path)? else {
        return Ok(None);
    };
    let settings = RunSettings {
        layout: Layout::Auto,
        fmperf_requests: fmperf_requests.map(Path::to_owned),
        lmbench_workload: lmbench_workload.map(Path::to_owned),
        lmbench_warm_up: lmbench_warm_up.map(Path::to_owned),
        // Replaying a run needs no engine limits: the trace carries none.
        max_num_seqs: Some(0),
        max_num_batched_tokens: Some(0),
        ..RunSettings::default()
    };
    let mut runs = load::load(&run_path, &settings)?;
    if runs.len() > 1 {
        return Err(CalibrateError::input(format!(
            "{}: the file holds {} load points: replay one as FILE#K (K from 1 to {})",
            path.display(),
            runs.len(),
            runs.len()
        )));
    }
    let run = runs.remove(0);
    let (warm_up, text) = mooncake_texts(&run.warm_up, &run.measured.requests);
    Ok(Some(RunTrace {
        text,
        warm_up: (!run.warm_up.is_empty()).then_some(warm_up),
        run,
    }))
}

/// `requests` (in arrival order) as Mooncake-form lines in blocks of
/// [`RUN_TRACE_BLOCK_TOKENS`], arrivals from the first request's, conversations sharing
/// their previous round's prompt blocks (the module's token model).
pub fn mooncake_text(requests: &[MeasuredRequest]) -> Vec<u8> {
    mooncake_texts(&[], requests).1
}

/// [`mooncake_text`] of `requests` after `warm_up` (sent before them): the two texts, each
/// timed from its own first request, the run's conversations going on from the warm-up's
/// (a round 0 of theirs).
pub fn mooncake_texts(
    warm_up: &[MeasuredRequest],
    requests: &[MeasuredRequest],
) -> (Vec<u8>, Vec<u8>) {
    let block = u64::from(RUN_TRACE_BLOCK_TOKENS);
    // Each conversation's last prompt: its blocks, and how many of them are whole.
    let mut last_prompt: HashMap<u64, (Vec<u64>, u64)> = HashMap::new();
    let mut made_by: HashMap<u64, u64> = HashMap::new();
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let mut texts = [String::new(), String::new()];
    for (text, part) in texts.iter_mut().zip([warm_up, requests]) {
        let start = part
            .iter()
            .map(|r| r.queued_ts)
            .fold(f64::INFINITY, f64::min);
        for r in part {
            let ids = block_ids(r, block, &last_prompt, &mut made_by, &mut seen);
            let _ = write!(
                text,
                "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [",
                ((r.queued_ts - start) * 1e3).max(0.0),
                r.input_toks,
                r.output_toks,
            );
            for (i, id) in ids.iter().enumerate() {
                let _ = write!(text, "{}{id}", if i == 0 { "" } else { ", " });
            }
            text.push_str("]}\n");
            if let Some(session) = r.session {
                last_prompt.insert(session.user, (ids, r.input_toks / block));
            }
        }
    }
    let [warm, run] = texts;
    (warm.into_bytes(), run.into_bytes())
}

/// The trace blocks of `r`'s prompt, given each conversation's last prompt so far, the
/// blocks each conversation made, and how many prompts of each length were seen.
fn block_ids(
    r: &MeasuredRequest,
    block: u64,
    last_prompt: &HashMap<u64, (Vec<u64>, u64)>,
    made_by: &mut HashMap<u64, u64>,
    seen: &mut HashMap<u64, u64>,
) -> Vec<u64> {
    let blocks = r.input_toks.div_ceil(block);
    let mut ids: Vec<u64> = Vec::with_capacity(blocks as usize);
    if let Some((tokens, hashes)) = &r.blocks {
        // A logged chain: each logged block is its tokens' worth of trace blocks, the
        // same wherever the same prefix was logged; the rest of the prompt its own.
        let per = u64::from(*tokens) / block;
        for &hash in hashes {
            ids.extend((0..per).map(|j| content_id(hash, u64::MAX - 1, j)));
        }
        ids.truncate(blocks as usize);
        let k = seen.entry(r.input_toks).or_insert(0u64);
        *k += 1;
        let from = ids.len() as u64;
        ids.extend((from..blocks).map(|b| content_id(r.input_toks, *k, b)));
        return ids;
    }
    let Some(session) = r.session else {
        // Named by what is known of its prompt, the k-th of its length, so the same
        // prompts logged at another load point (a sweep's runs) are the same blocks.
        let k = seen.entry(r.input_toks).or_insert(0u64);
        *k += 1;
        ids.extend((0..blocks).map(|b| content_id(r.input_toks, *k, b)));
        return ids;
    };
    if let Some((previous, whole)) = last_prompt.get(&session.user) {
        // The previous prompt's whole blocks, as far as this prompt goes.
        let shared = (*whole).min(r.input_toks / block);
        ids.extend_from_slice(&previous[..shared as usize]);
    }
    // A conversation's own blocks, numbered in it: no other's, in this run or another (a
    // user id names one conversation of one run).
    let made = made_by.entry(session.user).or_insert(0u64);
    while (ids.len() as u64) < blocks {
        ids.push(content_id(session.user, u64::MAX, *made));
        *made += 1;
    }
    ids
}

/// A block id from the prompt's length, its place among the prompts of that length, and
/// the block's place in it (a conversation's: its user, `u64::MAX`, and the block's place
/// among those it made).
fn content_id(length: u64, k: u64, block: u64) -> u64 {
    let mut h = length
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(k.wrapping_mul(0xbf58_476d_1ce4_e5b9))
        .wrapping_add(block.wrapping_mul(0x94d0_49bb_1331_11eb));
    h ^= h >> 31;
    h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
    h ^= h >> 32;
    (1 << 62) | (h >> 2)
}

/// How far `requests` (in arrival order) fall short of what was offered, when the log
/// shows it: rounds missing from a conversation (LMBench logs only the requests that
/// succeeded), or gaps in a paced run's launches (at least 20 requests, nine in ten of
/// the intervals within 5% of a whole multiple of the median one).
pub fn shortfall(requests: &[MeasuredRequest]) -> Option<String> {
    let n = requests.len();
    let mut rounds: HashMap<u64, (u64, u64, u64)> = HashMap::new();
    for s in requests.iter().filter_map(|r| r.session) {
        let e = rounds.entry(s.user).or_insert((s.round, s.round, 0));
        e.0 = e.0.min(s.round);
        e.1 = e.1.max(s.round);
        e.2 += 1;
    }
    if !rounds.is_empty() {
        let first = rounds.values().map(|r| r.0).min().unwrap_or(0);
        let missing: u64 = rounds
            .values()
            .map(|&(_, last, seen)| (last - first + 1).saturating_sub(seen))
            .sum();
        return (missing > 0).then(|| {
            format!(
                "partial: {n} requests logged, at least {missing} more were offered (rounds missing from its conversations)"
            )
        });
    }
    if n < 20 {
        return None;
    }
    let mut gaps: Vec<f64> = requests
        .windows(2)
        .map(|w| w[1].queued_ts - w[0].queued_ts)
        .collect();
    let intervals = gaps.clone();
    let median = crate::quantile(&mut gaps, 0.5);
    if median <= 0.0 || !median.is_finite() {
        return None;
    }
    let mut on_grid = 0usize;
    let mut missing = 0u64;
    for gap in intervals {
        let k = (gap / median).round();
        if k >= 1.0 && (gap / median - k).abs() <= 0.05 {
            on_grid += 1;
            missing += k as u64 - 1;
        }
    }
    (on_grid * 10 >= (n - 1) * 9 && missing > 0).then(|| {
        format!(
            "partial: {n} requests logged, at least {missing} more were offered (gaps in its launches, paced every {median:.3} s)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Session;

    fn request(t: f64, input: u64, session: Option<(u64, u64)>) -> MeasuredRequest {
        MeasuredRequest {
            input_toks: input,
            output_toks: 20,
            queued_ts: t,
            scheduled_ts: t,
            first_token_ts: t + 0.1,
            last_token_ts: t + 1.0,
            session: session.map(|(user, round)| Session { user, round }),
            blocks: None,
        }
    }

    #[test]
    fn a_round_shares_its_previous_prompts_whole_blocks_and_nothing_else() {
        let text = mooncake_text(&[
            request(10.0, 40, Some((7, 1))),
            request(10.5, 20, Some((8, 1))),
            request(12.0, 70, Some((7, 2))),
        ]);
        let ids: Vec<Vec<u64>> = std::str::from_utf8(&text)
            .unwrap()
            .lines()
            .map(|l| {
                let list = l
                    .split("\"hash_ids\": [")
                    .nth(1)
                    .unwrap()
                    .trim_end_matches("]}");
                list.split(", ").map(|id| id.parse().unwrap()).collect()
            })
            .collect();
        // 40 tokens: blocks 0, 1 whole, 2 partial; user 8 its own two; round 2 of user 7
        // shares the two whole blocks of round 1 and has three of its own (70 tokens).
        assert_eq!(ids.iter().map(Vec::len).collect::<Vec<_>>(), [3, 2, 5]);
        assert_eq!(ids[2][..2], ids[0][..2]);
        let mut all: Vec<u64> = ids[0]
            .iter()
            .chain(&ids[1])
            .chain(&ids[2][2..])
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 3 + 2 + 3, "every other block its own");
        assert!(std::str::from_utf8(&text).unwrap().starts_with(
            r#"{"timestamp": 0, "input_length": 40, "output_length": 20, "hash_ids": ["#
        ));
    }

    #[test]
    fn a_prompt_without_a_conversation_is_named_by_its_length_and_place() {
        let ids = |requests: &[MeasuredRequest]| -> Vec<String> {
            String::from_utf8(mooncake_text(requests))
                .unwrap()
                .lines()
                .map(|l| l.split("hash_ids").nth(1).unwrap().to_owned())
                .collect()
        };
        let run = ids(&[
            request(0.0, 40, None),
            request(1.0, 40, None),
            request(2.0, 17, None),
        ]);
        // Two prompts of one length are two prompts; each a chain of its own.
        assert_ne!(run[0], run[1]);
        // Logged at another load point without the first: the others keep their blocks
        // but the second 40-token prompt is now the first of its length.
        let other = ids(&[request(0.0, 40, None), request(0.5, 17, None)]);
        assert_eq!(other[1], run[2]);
        assert_eq!(other[0], run[0]);
    }

    #[test]
    fn a_log_short_of_what_was_offered_is_partial() {
        // Paced every 0.5 s, requests 5 and 6 and 12 missing.
        let paced: Vec<_> = (0..30)
            .filter(|i| ![5, 6, 12].contains(i))
            .map(|i| request(f64::from(i) * 0.5, 100, None))
            .collect();
        let note = shortfall(&paced).unwrap();
        assert!(
            note.contains("27 requests logged, at least 3 more"),
            "{note}"
        );
        let whole: Vec<_> = (0..30)
            .map(|i| request(f64::from(i) * 0.5, 100, None))
            .collect();
        assert_eq!(shortfall(&whole), None);
        // Poisson-like launches say nothing.
        let mut t = 0.0;
        let irregular: Vec<_> = (0..40)
            .map(|i| {
                t += [0.1, 0.7, 0.25, 1.3, 0.05][i % 5];
                request(t, 100, None)
            })
            .collect();
        assert_eq!(shortfall(&irregular), None);
        // User 1 has rounds 1 and 3, user 2 round 1: one round missing.
        let rounds = [
            request(0.0, 10, Some((1, 1))),
            request(0.1, 10, Some((2, 1))),
            request(0.2, 10, Some((1, 3))),
        ];
        assert!(shortfall(&rounds).unwrap().contains("at least 1 more"));
    }
}

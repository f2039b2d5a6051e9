//! LMBench's ShareGPT workload file (`sharegpt/run.json`, what `sharegpt-qa.py
//! --sharegpt-file` sends): a JSON list of `{"input": TEXT, "output_length": N}`, sent in
//! order at a fixed rate. Its entries are rounds of ShareGPT conversations, one round of
//! each in turn, and a round's `input` is the previous round's with that round's recorded
//! answer and a new question after it; the CSV the run writes records none of this. Read
//! beside the run (`--lmbench-workload FILE`), it gives each logged request its
//! conversation ([`Session`]): the entry whose `input` is the longest earlier one that
//! this one continues (after a line break) is its previous round. A conversation that
//! forks (two later entries continuing one) goes on in the first; the second starts its
//! own.
//!
//! A logged request is the entry of its launch slot: the launches are paced (LMBench
//! sends entry k at k over the rate), so each launch's offset over the median interval
//! is its entry, less those that failed before the first logged one (the offset that
//! leaves no request with more tokens generated than its entry asked for; the most that
//! generated exactly as many, should several). Requests that stopped early generate fewer.
//!
//! LMBench's run script sends a warm-up file (`sharegpt/warmup.json`, the second rounds of
//! the same conversations) at the point's rate before each point and logs none of it.
//! Read beside the workload (`--lmbench-warm-up FILE`), its entries become the run's
//! warm-up requests ([`follow`]): each paced at the run's median interval, asking for its
//! `output_length`, its prompt as many tokens as the round that continues it logged for
//! each byte of input (the run's mean where that round was not logged), and the round
//! 0 of that round's conversation, so the run's rounds share its prompt.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;

use crate::measured::{MeasuredRequest, Session};

/// One entry of the workload.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    input: String,
    output_length: u64,
}

/// Each entry's previous round (its index), where it continues one.
fn previous_rounds(entries: &[&Entry]) -> Vec<Option<usize>> {
    let mut first_of: HashMap<&str, usize> = HashMap::new();
    // The lengths of the inputs so far: only a break at one of them can end an earlier
    // input, so only those prefixes are looked up.
    let mut lengths: HashSet<usize> = HashSet::new();
    let mut continued = vec![false; entries.len()];
    let mut previous = vec![None; entries.len()];
    for (j, entry) in entries.iter().enumerate() {
        let text = entry.input.as_str();
        // The ends of the earlier inputs this one may continue: just before a run of white
        // space holding a line break (the input was stripped of it), the longest first.
        let mut ends: Vec<usize> = Vec::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii_whitespace() {
                let start = i;
                while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                    i += 1;
                }
                if start > 0 && lengths.contains(&start) && bytes[start..i].contains(&b'\n') {
                    ends.push(start);
                }
            } else {
                i += 1;
            }
        }
        previous[j] = ends.iter().rev().find_map(|&end| {
            let i = *first_of.get(&text[..end])?;
            (!continued[i]).then_some(i)
        });
        if let Some(i) = previous[j] {
            continued[i] = true;
        }
        first_of.entry(text).or_insert(j);
        lengths.insert(text.len());
    }
    previous
}

/// A workload file as read.
#[derive(Debug)]
pub struct Workload {
    entries: Vec<Entry>,
}

/// The workload file `text`; an error starts with its line.
pub fn read(text: &str) -> Result<Workload, String> {
    let entries = serde_json::from_str(text).map_err(|e| {
        format!(
            "{}: column {}: not LMBench's ShareGPT workload (a list of {{\"input\", \"output_length\"}}): {e}",
            e.line(),
            e.column()
        )
    })?;
    Ok(Workload { entries })
}

/// Conversations of warm-up requests that no round of the run continues: one each, apart
/// from the run's (whose users are entry indices).
const UNCONTINUED: u64 = 1 << 40;

/// Gives each of `requests` (a run's, in arrival order) its conversation in `workload`,
/// and returns the warm-up `warm_up` sent before the run as requests (none without one);
/// an error says which request and why the run is not the workload's.
pub fn follow(
    requests: &mut [MeasuredRequest],
    workload: &Workload,
    warm_up: Option<&Workload>,
) -> Result<Vec<MeasuredRequest>, String> {
    let entries = &workload.entries;
    if requests.len() > entries.len() {
        return Err(format!(
            "the run logged {} requests, more than its {} entries: not this run's workload",
            requests.len(),
            entries.len()
        ));
    }
    let (slots, interval) = launch_slots(requests);
    let last = slots.last().copied().unwrap_or(0);
    if slots.windows(2).any(|w| w[1] <= w[0]) || last >= entries.len() {
        return Err(format!(
            "the run's launches are not paced one entry at a time over its {} entries",
            entries.len()
        ));
    }
    let fits = |offset: usize| -> (usize, usize) {
        let mut within = 0;
        let mut exact = 0;
        for (r, &slot) in requests.iter().zip(&slots) {
            let asked = entries[slot + offset].output_length;
            within += usize::from(r.output_toks <= asked);
            exact += usize::from(r.output_toks == asked);
        }
        (within, exact)
    };
    let offset = (0..entries.len() - last)
        .max_by_key(|&o| (fits(o), std::cmp::Reverse(o)))
        .unwrap_or(0);
    if let Some((k, (r, &slot))) = requests
        .iter()
        .zip(&slots)
        .enumerate()
        .find(|(_, (r, slot))| r.output_toks > entries[**slot + offset].output_length)
    {
        return Err(format!(
            "request {} generated {} tokens, more than entry {} asks for ({}): not this run's workload",
            k + 1,
            r.output_toks,
            slot + offset + 1,
            entries[slot + offset].output_length
        ));
    }
    let previous = previous_rounds(&entries.iter().collect::<Vec<_>>());
    // Each entry's conversation (its first round's index) and round, from 1.
    let mut session: Vec<Session> = Vec::with_capacity(entries.len());
    for (j, before) in previous.iter().enumerate() {
        let next = match before {
            Some(i) => Session {
                user: session[*i].user,
                round: session[*i].round + 1,
            },
            None => Session {
                user: j as u64,
                round: 1,
            },
        };
        session.push(next);
    }
    // The prompt tokens each entry's request logged, where it was logged.
    let mut logged: Vec<Option<u64>> = vec![None; entries.len()];
    for (r, &slot) in requests.iter_mut().zip(&slots) {
        r.session = Some(session[slot + offset]);
        logged[slot + offset] = Some(r.input_toks);
    }
    Ok(warm_up.map_or_else(Vec::new, |warm| {
        warm_up_requests(&warm.entries, entries, &logged, &session, interval)
    }))
}

/// The warm-up entries `warm` as requests sent before the run of `entries` (whose
/// requests logged `logged` prompt tokens and belong to `session`'s conversations), paced
/// `interval` seconds apart.
fn warm_up_requests(
    warm: &[Entry],
    entries: &[Entry],
    logged: &[Option<u64>],
    session: &[Session],
    interval: f64,
) -> Vec<MeasuredRequest> {
    // The run's rounds that continue a warm-up entry (their previous rounds among the
    // warm-up's and the run's entries together), the first of each.
    let both: Vec<&Entry> = warm.iter().chain(entries).collect();
    let mut continued_by: Vec<Option<usize>> = vec![None; warm.len()];
    for (j, before) in previous_rounds(&both)
        .into_iter()
        .enumerate()
        .skip(warm.len())
    {
        if let Some(w) = before.filter(|&w| w < warm.len()) {
            continued_by[w].get_or_insert(j - warm.len());
        }
    }
    // Tokens a byte of input: the continuing round's where it was logged, else the run's.
    let (tokens, bytes) = (logged.iter().zip(entries))
        .filter_map(|(t, e)| Some((t.as_ref()?, e.input.len() as u64)))
        .fold((0u64, 0u64), |(t, b), (n, len)| {
            (t.saturating_add(*n), b.saturating_add(len))
        });
    let mean = if bytes == 0 {
        0.0
    } else {
        tokens as f64 / bytes as f64
    };
    let interval = interval.max(0.0);
    warm.iter()
        .enumerate()
        .map(|(w, entry)| {
            let next = continued_by[w];
            let per_byte = next
                .and_then(|j| Some((logged[j]?, entries[j].input.len())))
                .filter(|&(_, len)| len > 0)
                .map_or(mean, |(t, len)| t as f64 / len as f64);
            let at = w as f64 * interval;
            MeasuredRequest {
                input_toks: ((entry.input.len() as f64 * per_byte).round() as u64).max(1),
                output_toks: entry.output_length,
                queued_ts: at,
                scheduled_ts: at,
                first_token_ts: at,
                last_token_ts: at,
                session: Some(Session {
                    user: next.map_or(UNCONTINUED + w as u64, |j| session[j].user),
                    round: 0,
                }),
                blocks: None,
            }
        })
        .collect()
}

/// Each request's launch slot from the first's: its offset over the median interval (the
/// order, when the launches have no interval), and that interval in seconds.
fn launch_slots(requests: &[MeasuredRequest]) -> (Vec<usize>, f64) {
    let mut gaps: Vec<f64> = requests
        .windows(2)
        .map(|w| w[1].queued_ts - w[0].queued_ts)
        .collect();
    let median = if gaps.is_empty() {
        0.0
    } else {
        crate::quantile(&mut gaps, 0.5)
    };
    let first = requests.first().map_or(0.0, |r| r.queued_ts);
    if median <= 0.0 || !median.is_finite() {
        return ((0..requests.len()).collect(), 0.0);
    }
    let slots = requests
        .iter()
        .map(|r| {
            let slot = ((r.queued_ts - first) / median).round();
            if (0.0..1e9).contains(&slot) {
                slot as usize
            } else {
                usize::MAX
            }
        })
        .collect();
    (slots, median)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(t: f64, output: u64) -> MeasuredRequest {
        MeasuredRequest {
            input_toks: 100,
            output_toks: output,
            queued_ts: t,
            scheduled_ts: t,
            first_token_ts: t + 0.1,
            last_token_ts: t + 1.0,
            session: None,
            blocks: None,
        }
    }

    const WORKLOAD: &str = r#"[
        {"input": "a1\nA1\na2", "output_length": 10},
        {"input": "b1\nB1\nb2", "output_length": 20},
        {"input": "a1\nA1\na2\nA2\na3", "output_length": 30},
        {"input": "b1\nB1\nb2\nB2\nb3", "output_length": 40},
        {"input": "a1\nA1\na2\nA2\na3 \n A3\na4", "output_length": 50},
        {"input": "a1\nA1\na2\nA2\na3\nother", "output_length": 60}
    ]"#;

    #[test]
    fn rounds_follow_the_inputs_they_continue_and_a_fork_starts_its_own() {
        let workload = read(WORKLOAD).unwrap();
        assert_eq!(
            previous_rounds(&workload.entries.iter().collect::<Vec<_>>()),
            [None, None, Some(0), Some(1), Some(2), None]
        );
    }

    /// A run of [`WORKLOAD`] whose second launch (entry 2) failed and whose entry 5
    /// stopped early.
    fn lost_second() -> Vec<MeasuredRequest> {
        vec![
            request(100.0, 10),
            request(102.0, 30),
            request(103.0, 40),
            request(104.0, 45),
        ]
    }

    #[test]
    fn requests_take_the_entries_of_their_launch_slots() {
        let mut requests = lost_second();
        let workload = read(WORKLOAD).unwrap();
        follow(&mut requests, &workload, None).unwrap();
        let sessions: Vec<(u64, u64)> = requests
            .iter()
            .map(|r| r.session.map(|s| (s.user, s.round)).unwrap())
            .collect();
        assert_eq!(sessions, [(0, 1), (0, 2), (1, 2), (0, 3)]);
        // The first launches failed: the offset that fits the tokens generated.
        let mut later = vec![request(50.0, 30), request(51.0, 40)];
        follow(&mut later, &workload, None).unwrap();
        assert_eq!(later[1].session, Some(Session { user: 1, round: 2 }));
    }

    #[test]
    fn the_warm_up_is_paced_as_the_run_and_its_rounds_go_on_in_the_run() {
        // The warm-up's "a1" is continued by entry 1, its "b1" by entry 2 (b's second
        // round, not logged), its "c1" by nothing.
        let mut requests = lost_second();
        let workload = read(WORKLOAD).unwrap();
        let warm = read(
            r#"[{"input": "a1", "output_length": 7}, {"input": "b1", "output_length": 8},
                {"input": "c1", "output_length": 9}]"#,
        )
        .unwrap();
        let warm_up = follow(&mut requests, &workload, Some(&warm)).unwrap();
        let seen: Vec<(u64, u64, f64, Option<Session>)> = warm_up
            .iter()
            .map(|r| (r.input_toks, r.output_toks, r.queued_ts, r.session))
            .collect();
        // a1: 2 of entry 1's 8 bytes, 100 tokens logged; b1 and c1: entry 2 was not
        // logged, so the logged requests' 400 tokens over their 8 + 14 + 14 + 23 bytes.
        let mean = (400.0 / 59.0 * 2.0_f64).round() as u64;
        assert_eq!(
            seen,
            [
                (25, 7, 0.0, Some(Session { user: 0, round: 0 })),
                (mean, 8, 1.0, Some(Session { user: 1, round: 0 })),
                (
                    mean,
                    9,
                    2.0,
                    Some(Session {
                        user: UNCONTINUED + 2,
                        round: 0
                    })
                ),
            ]
        );
        // Without a warm-up file, none.
        assert!(follow(&mut requests, &workload, None).unwrap().is_empty());
    }

    #[test]
    fn a_run_that_is_not_the_workloads_is_refused() {
        let workload = read(WORKLOAD).unwrap();
        let mut requests = vec![request(0.0, 10), request(1.0, 99)];
        assert_eq!(
            follow(&mut requests, &workload, None).unwrap_err(),
            "request 2 generated 99 tokens, more than entry 2 asks for (20): not this run's workload"
        );
        let many: Vec<MeasuredRequest> = (0..7).map(|i| request(f64::from(i), 1)).collect();
        assert!(
            follow(&mut many.clone(), &workload, None)
                .unwrap_err()
                .starts_with("the run logged 7 requests, more than its 6 entries")
        );
        let err = read(r#"[{"input": "x"}]"#).unwrap_err();
        assert!(
            err.starts_with("1: column 15: not LMBench's ShareGPT workload"),
            "{err}"
        );
    }
}

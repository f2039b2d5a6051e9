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
fn previous_rounds(entries: &[Entry]) -> Vec<Option<usize>> {
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

/// Gives each of `requests` (a run's, in arrival order) its conversation in `workload`;
/// an error says which request and why the run is not the workload's.
pub fn follow(requests: &mut [MeasuredRequest], workload: &Workload) -> Result<(), String> {
    let entries = &workload.entries;
    if requests.len() > entries.len() {
        return Err(format!(
            "the run logged {} requests, more than its {} entries: not this run's workload",
            requests.len(),
            entries.len()
        ));
    }
    let slots = launch_slots(requests);
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
    let previous = previous_rounds(entries);
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
    for (r, &slot) in requests.iter_mut().zip(&slots) {
        r.session = Some(session[slot + offset]);
    }
    Ok(())
}

/// Each request's launch slot from the first's: its offset over the median interval (the
/// order, when the launches have no interval).
fn launch_slots(requests: &[MeasuredRequest]) -> Vec<usize> {
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
        return (0..requests.len()).collect();
    }
    requests
        .iter()
        .map(|r| {
            let slot = ((r.queued_ts - first) / median).round();
            if (0.0..1e9).contains(&slot) {
                slot as usize
            } else {
                usize::MAX
            }
        })
        .collect()
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
            previous_rounds(&workload.entries),
            [None, None, Some(0), Some(1), Some(2), None]
        );
    }

    #[test]
    fn requests_take_the_entries_of_their_launch_slots() {
        // Entry 2 (the second launch) failed; entry 5 stopped early.
        let mut requests = vec![
            request(100.0, 10),
            request(102.0, 30),
            request(103.0, 40),
            request(104.0, 45),
        ];
        let workload = read(WORKLOAD).unwrap();
        follow(&mut requests, &workload).unwrap();
        let sessions: Vec<(u64, u64)> = requests
            .iter()
            .map(|r| r.session.map(|s| (s.user, s.round)).unwrap())
            .collect();
        assert_eq!(sessions, [(0, 1), (0, 2), (1, 2), (0, 3)]);
        // The first launches failed: the offset that fits the tokens generated.
        let mut later = vec![request(50.0, 30), request(51.0, 40)];
        follow(&mut later, &workload).unwrap();
        assert_eq!(later[1].session, Some(Session { user: 1, round: 2 }));
    }

    #[test]
    fn a_run_that_is_not_the_workloads_is_refused() {
        let workload = read(WORKLOAD).unwrap();
        let mut requests = vec![request(0.0, 10), request(1.0, 99)];
        assert_eq!(
            follow(&mut requests, &workload).unwrap_err(),
            "request 2 generated 99 tokens, more than entry 2 asks for (20): not this run's workload"
        );
        let many: Vec<MeasuredRequest> = (0..7).map(|i| request(f64::from(i), 1)).collect();
        assert!(
            follow(&mut many.clone(), &workload)
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

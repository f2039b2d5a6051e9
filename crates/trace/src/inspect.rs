//! What is in a trace before anything routes it: its size, conversations, arrivals,
//! lengths, and how much prefix reuse there is to win at all.
//!
//! The **prefix-reuse ceiling** is the hit ratio of one infinite cache that has seen every
//! earlier request: no router over any number of endpoints can realise more, since an
//! endpoint holds at most what was sent before. The **conversation ceiling** limits each
//! request's reuse to blocks its own conversation (session, or chain of parents) sent
//! before; the difference between the two is the reuse that only comes from sharing across
//! conversations (system prompts, documents), which is what a cache-aware router has to
//! herd together. Both are counted exactly as the time-free replay counts a hit: leading
//! blocks already cached, times the block size, at most the prompt.

use std::collections::HashSet;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::error::TraceError;
use crate::reader::{TraceReader, TraceRequest};

/// Percentiles of a length.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lengths {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Maximum.
    pub max: u64,
}

impl Lengths {
    fn of(mut values: Vec<u64>) -> Option<Lengths> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let rank =
            |q: f64| values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
        let sum: u128 = values.iter().map(|v| u128::from(*v)).sum();
        Some(Lengths {
            mean: round6(sum as f64 / values.len() as f64),
            p50: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            max: *values.last().expect("not empty"),
        })
    }
}

/// Arrival times, when the trace has them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArrivalSummary {
    /// Last arrival minus first, seconds.
    pub span_s: f64,
    /// Requests per second over the span.
    pub rate_per_s: f64,
    /// Requests arriving in each of [`HISTOGRAM_BINS`] equal slices of the span.
    pub histogram: Vec<u64>,
}

/// Slices of the span in [`ArrivalSummary::histogram`].
pub const HISTOGRAM_BINS: usize = 20;

/// What `routerlab inspect` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSummary {
    /// The trace's format.
    pub format: String,
    /// Unit of lengths: `tokens` or `bytes`.
    pub unit: String,
    /// Block size of the chains, in `unit`s.
    pub block_size: u32,
    /// Requests.
    pub requests: u64,
    /// Conversations: requests with no parent start one.
    pub conversations: u64,
    /// Requests that continue an earlier one (a parent, or an earlier turn of a session).
    pub follow_ups: u64,
    /// Arrival times; absent when the trace has none.
    pub arrivals: Option<ArrivalSummary>,
    /// Prompt lengths, in `unit`s.
    pub input: Lengths,
    /// Output tokens; absent when the trace has none.
    pub output: Option<Lengths>,
    /// Distinct prefix blocks.
    pub distinct_blocks: u64,
    /// Hit ratio of one infinite cache: the most any router can realise.
    pub reuse_ceiling: f64,
    /// The same with each request's reuse limited to its own conversation.
    pub conversation_reuse_ceiling: f64,
    /// Whether the trace says which prefixes requests share (CSV traces do not).
    pub has_prefixes: bool,
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Reads the whole trace and summarises it.
pub fn inspect(mut reader: TraceReader) -> Result<TraceSummary, TraceError> {
    let (unit, format) = (reader.unit(), reader.format());
    // An agentic trace's turns are linked by session (its parents are dependencies).
    let mut session_root: std::collections::HashMap<u64, u64> = Default::default();
    let mut request = TraceRequest::default();
    // Root (first request) of each request's conversation, by seq; index 0 unused.
    let mut root: Vec<u64> = vec![0];
    let mut seen_anywhere: HashSet<u32> = HashSet::new();
    let mut seen_in_conversation: HashSet<(u64, u32)> = HashSet::new();
    let (mut prompt_total, mut hits_any, mut hits_own) = (0u128, 0u128, 0u128);
    let (mut inputs, mut outputs, mut arrivals) = (Vec::new(), Vec::new(), Vec::new());
    let (mut follow_ups, mut all_have_arrival) = (0u64, true);
    while reader.next_into(&mut request)? {
        // Read after the first line: an agentic trace's header sets it.
        let block_size = reader.block_size();
        let conversation = match request.parent_seq {
            Some(parent) => {
                follow_ups += 1;
                root[parent as usize]
            }
            None if format.is_agentic() => {
                let first = *session_root.entry(request.session).or_insert(request.seq);
                follow_ups += u64::from(first != request.seq);
                first
            }
            None => request.seq,
        };
        root.push(conversation);
        let ids = &request.block_ids;
        let any = ids
            .iter()
            .take_while(|id| seen_anywhere.contains(id))
            .count() as u64;
        let own = ids
            .iter()
            .take_while(|id| seen_in_conversation.contains(&(conversation, **id)))
            .count() as u64;
        for id in ids {
            seen_anywhere.insert(*id);
            seen_in_conversation.insert((conversation, *id));
        }
        let hit =
            |blocks: u64| u128::from((blocks * u64::from(block_size)).min(request.prompt_len));
        hits_any += hit(any);
        hits_own += hit(own);
        prompt_total += u128::from(request.prompt_len);
        inputs.push(request.prompt_len);
        if let Some(out) = request.output_tokens {
            outputs.push(out);
        }
        match request.arrival_ns {
            Some(ns) => arrivals.push(ns),
            None => all_have_arrival = false,
        }
    }
    let requests = inputs.len() as u64;
    let ratio = |hits: u128| {
        if prompt_total == 0 {
            0.0
        } else {
            round6(hits as f64 / prompt_total as f64)
        }
    };
    let arrivals = (all_have_arrival && !arrivals.is_empty()).then(|| {
        let first = *arrivals.iter().min().expect("not empty");
        let last = *arrivals.iter().max().expect("not empty");
        let span = last - first;
        let mut histogram = vec![0u64; HISTOGRAM_BINS];
        for at in &arrivals {
            let bin = if span == 0 {
                0
            } else {
                ((u128::from(at - first) * HISTOGRAM_BINS as u128 / u128::from(span)) as usize)
                    .min(HISTOGRAM_BINS - 1)
            };
            histogram[bin] += 1;
        }
        let span_s = span as f64 / 1e9;
        ArrivalSummary {
            span_s: round6(span_s),
            rate_per_s: if span == 0 {
                0.0
            } else {
                round6(requests as f64 / span_s)
            },
            histogram,
        }
    });
    Ok(TraceSummary {
        format: format.to_string(),
        unit: unit.name().to_owned(),
        block_size: reader.block_size(),
        requests,
        conversations: requests - follow_ups,
        follow_ups,
        arrivals,
        input: Lengths::of(inputs).unwrap_or_default(),
        output: if outputs.len() as u64 == requests {
            Lengths::of(outputs)
        } else {
            None
        },
        distinct_blocks: seen_anywhere.len() as u64,
        reuse_ceiling: ratio(hits_any),
        conversation_reuse_ceiling: ratio(hits_own),
        has_prefixes: format.has_prefixes(),
    })
}

impl TraceSummary {
    /// The summary for people.
    pub fn to_human(&self) -> String {
        let mut out = String::new();
        let mut row = |label: &str, text: String| {
            let _ = writeln!(out, "{label:<24}{text}");
        };
        row(
            "requests",
            format!(
                "{} ({} trace, lengths in {}, blocks of {})",
                self.requests, self.format, self.unit, self.block_size
            ),
        );
        row(
            "conversations",
            format!(
                "{} ({} follow-up requests)",
                self.conversations, self.follow_ups
            ),
        );
        let lengths = |l: &Lengths| {
            format!(
                "mean {:.1}, p50 {}, p90 {}, p99 {}, max {}",
                l.mean, l.p50, l.p90, l.p99, l.max
            )
        };
        row(&format!("input ({})", self.unit), lengths(&self.input));
        row(
            "output (tokens)",
            self.output
                .as_ref()
                .map_or_else(|| "not in the trace for every request".to_owned(), lengths),
        );
        row("distinct blocks", self.distinct_blocks.to_string());
        if self.has_prefixes {
            row(
                "reuse ceiling",
                format!(
                    "{:.4}  one infinite cache: no router can realise more",
                    self.reuse_ceiling
                ),
            );
            row(
                "  within conversations",
                format!(
                    "{:.4}  each request reusing only its own conversation",
                    self.conversation_reuse_ceiling
                ),
            );
        } else {
            row(
                "reuse ceiling",
                format!(
                    "0  ({} traces say nothing about shared prefixes)",
                    self.format
                ),
            );
        }
        match &self.arrivals {
            Some(a) => {
                row(
                    "arrivals",
                    format!("over {:.1} s, {:.2} requests/s", a.span_s, a.rate_per_s),
                );
                let top = a.histogram.iter().copied().max().unwrap_or(1).max(1);
                let slice = a.span_s / HISTOGRAM_BINS as f64;
                for (i, n) in a.histogram.iter().enumerate() {
                    let bar = "#".repeat((n * 40).div_ceil(top) as usize);
                    let _ = writeln!(out, "  from {:>9.1} s {n:>7}  {bar}", slice * i as f64);
                }
            }
            None => row("arrivals", "no arrival times in the trace".to_owned()),
        }
        out
    }
}

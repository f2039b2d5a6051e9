//! Synthetic traces: the prototype's chat workload, and a Mooncake-format stream for
//! benchmarks. Both are fully determined by their settings and seed.
//!
//! The chat workload: each request, with probability `continue_chat_probability`, continues
//! a uniformly chosen earlier request (its whole prompt, a newline, a new user turn);
//! otherwise it starts a conversation (the fixed system prompt, a newline, a user turn). A
//! user turn is the request number followed by `tokens_typed_by_user_per_request` words.
//!
//! With `adapters` N > 0, each conversation asks for one of N LoRA adapters
//! (`adapter-1` ... `adapter-N`, Zipf-distributed: adapter k drawn with weight 1/k, as a
//! few popular adapters and a long tail), and its continuations ask for the same one.

use std::io::{self, Write};

use routerlab_core::SeededRng;
use serde::Serialize;

/// Settings of the prototype's chat workload.
#[derive(Debug, Clone)]
pub struct ChatWorkload {
    /// Number of requests.
    pub requests: u64,
    /// Probability that a request continues an earlier one.
    pub continue_chat_probability: f64,
    /// Words in each user turn after the request number.
    pub tokens_typed_by_user_per_request: u64,
    /// Seed of the generator.
    pub seed: u64,
    /// LoRA adapters the conversations ask for (0: none, the base model).
    pub adapters: u64,
}

impl Default for ChatWorkload {
    fn default() -> Self {
        ChatWorkload {
            requests: 2200,
            continue_chat_probability: 0.2,
            tokens_typed_by_user_per_request: 100,
            seed: 0,
            adapters: 0,
        }
    }
}

/// Sentences of the fixed system prompt: written for this project, repeated in numbered
/// sections until the prompt is about 8 KB.
const SYSTEM_SENTENCES: &[&str] = &[
    "You are the assistant of a small engineering team that runs a fleet of inference servers.",
    "Answer in plain language, and prefer short, exact answers to long, vague ones.",
    "When a question is about measurements, give the number, its unit and how it was obtained.",
    "If you do not know something, say so and suggest how it could be found out.",
    "Never invent command-line flags, file names or configuration keys.",
    "When you show code, show complete code that compiles, and say which version it targets.",
    "Keep a friendly tone, but do not pad answers with greetings or apologies.",
    "If a request is ambiguous, state the reading you chose before answering it.",
    "Treat every number the user gives you as data to check, not as a fact to repeat.",
    "When comparing two designs, list what each costs as well as what each gains.",
    "Explain trade-offs between cache affinity and load balance with concrete examples.",
    "Remember that an overloaded server is slower than a cold cache on an idle one.",
];

/// The fixed system prompt (about 8 KB).
pub fn system_prompt() -> String {
    let mut prompt = String::from("System instructions for the routing laboratory assistant.\n");
    let mut section = 1;
    while prompt.len() < 8 * 1024 - 200 {
        prompt.push_str(&format!("Section {section}.\n"));
        for sentence in SYSTEM_SENTENCES {
            prompt.push_str(sentence);
            prompt.push(' ');
        }
        prompt.push('\n');
        section += 1;
    }
    prompt
}

#[derive(Serialize)]
struct ChatLine<'a> {
    id: u64,
    prompt: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<u64>,
    session: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    adapter: Option<&'a str>,
}

/// Adapter names `adapter-1` ... `adapter-N`, drawn with weight 1/k.
struct AdapterDraw {
    names: Vec<String>,
    /// Cumulative weights, the last 1.
    cumulative: Vec<f64>,
}

impl AdapterDraw {
    fn new(n: u64) -> AdapterDraw {
        let weights: Vec<f64> = (1..=n).map(|k| 1.0 / k as f64).collect();
        let total: f64 = weights.iter().sum();
        let mut sum = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                sum += w / total;
                sum
            })
            .collect();
        AdapterDraw {
            names: (1..=n).map(|k| format!("adapter-{k}")).collect(),
            cumulative,
        }
    }

    /// The next adapter's position (`None` without adapters, drawing nothing then).
    fn draw(&self, rng: &mut SeededRng) -> Option<usize> {
        if self.names.is_empty() {
            return None;
        }
        let u = rng.unit_f64();
        Some(
            self.cumulative
                .partition_point(|c| *c <= u)
                .min(self.names.len() - 1),
        )
    }
}

/// The most adapters a synthetic trace may ask for.
pub const MAX_SYNTH_ADAPTERS: u64 = crate::adapters::MAX_ADAPTERS as u64;

/// Writes the chat workload as chat JSONL.
pub fn write_chat(workload: &ChatWorkload, out: &mut impl Write) -> io::Result<()> {
    let mut rng = SeededRng::new(workload.seed);
    let system = system_prompt();
    let draw = AdapterDraw::new(workload.adapters.min(MAX_SYNTH_ADAPTERS));
    // (prompt, session, adapter) of every request so far: continuations copy a whole
    // prompt.
    let mut history: Vec<(String, u64, Option<usize>)> =
        Vec::with_capacity(workload.requests as usize);
    for id in 0..workload.requests {
        let mut turn = id.to_string();
        for _ in 0..workload.tokens_typed_by_user_per_request {
            turn.push_str(" hello");
        }
        let continues = !history.is_empty() && rng.unit_f64() < workload.continue_chat_probability;
        let (prompt, parent, session, adapter) = if continues {
            let parent = rng.below(history.len() as u64);
            let (earlier, session, adapter) = &history[parent as usize];
            (
                format!("{earlier}\n{turn}"),
                Some(parent),
                *session,
                *adapter,
            )
        } else {
            (format!("{system}\n{turn}"), None, id, draw.draw(&mut rng))
        };
        serde_json::to_writer(
            &mut *out,
            &ChatLine {
                id,
                prompt: &prompt,
                parent,
                session,
                adapter: adapter.map(|a| draw.names[a].as_str()),
            },
        )?;
        out.write_all(b"\n")?;
        history.push((prompt, session, adapter));
    }
    Ok(())
}

/// Settings of the synthetic Mooncake-format stream used by benchmarks.
#[derive(Debug, Clone)]
pub struct MooncakeWorkload {
    /// Number of requests.
    pub requests: u64,
    /// Probability that a request continues a recent conversation.
    pub continue_chat_probability: f64,
    /// Seed of the generator.
    pub seed: u64,
    /// Write `session_id` (continuations share their conversation's); without it, lines
    /// have only Mooncake's four canonical fields.
    pub sessions: bool,
    /// LoRA adapters the conversations ask for (0: none, the base model).
    pub adapters: u64,
    /// Requests sent at once for each prompt (1: one): the samples of an RL rollout step
    /// or of best-of-N, the same line but for its output length.
    pub samples: u64,
    /// Prompts a second, Poisson (at the pattern's peak): 20 unless set.
    pub rate: f64,
    /// How the rate changes over the stream.
    pub pattern: RatePattern,
}

/// How a generated stream's arrival rate changes over time; arrivals stay Poisson at the
/// rate of the moment (drawn by thinning a Poisson stream at the peak rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RatePattern {
    /// The same rate throughout.
    Constant,
    /// From the rate to `to` prompts/s in a straight line over `seconds`, then `to`.
    Ramp {
        /// The rate reached.
        to: f64,
        /// Over how long.
        seconds: f64,
    },
    /// A day's swell: the rate at its peak at half of each `period_s`, at `low` of it at
    /// the start and end, along a cosine.
    Diurnal {
        /// One cycle, seconds.
        period_s: f64,
        /// The trough as a share of the peak, 0 to 1.
        low: f64,
    },
}

impl RatePattern {
    /// `constant`, `ramp:TO:SECONDS` or `diurnal:PERIOD_S:LOW`.
    pub fn parse(text: &str) -> Result<RatePattern, String> {
        let parts: Vec<&str> = text.split(':').collect();
        let num = |s: &str, what: &str| -> Result<f64, String> {
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{text}: {what} `{s}` is not a number 0 or more"))
        };
        match parts.as_slice() {
            ["constant"] => Ok(RatePattern::Constant),
            ["ramp", to, seconds] => {
                let (to, seconds) = (
                    num(to, "the rate reached")?,
                    num(seconds, "the ramp's seconds")?,
                );
                if to <= 0.0 || seconds <= 0.0 {
                    return Err(format!(
                        "{text}: the rate reached and the seconds must be above 0"
                    ));
                }
                Ok(RatePattern::Ramp { to, seconds })
            }
            ["diurnal", period, low] => {
                let (period_s, low) = (num(period, "the period")?, num(low, "the trough")?);
                if period_s <= 0.0 || low > 1.0 {
                    return Err(format!(
                        "{text}: the period must be above 0 and the trough within 0..=1"
                    ));
                }
                Ok(RatePattern::Diurnal { period_s, low })
            }
            _ => Err(format!(
                "{text}: expected constant, ramp:TO:SECONDS or diurnal:PERIOD_S:LOW"
            )),
        }
    }

    /// The rate at `t_s` seconds, for a stream whose base rate is `rate`.
    pub fn rate_at(self, rate: f64, t_s: f64) -> f64 {
        match self {
            RatePattern::Constant => rate,
            RatePattern::Ramp { to, seconds } => rate + (to - rate) * (t_s / seconds).min(1.0),
            RatePattern::Diurnal { period_s, low } => {
                let phase = (t_s / period_s).fract() * std::f64::consts::TAU;
                rate * (low + (1.0 - low) * (1.0 - phase.cos()) / 2.0)
            }
        }
    }

    /// The highest rate the pattern reaches.
    fn peak(self, rate: f64) -> f64 {
        match self {
            RatePattern::Ramp { to, .. } => rate.max(to),
            _ => rate,
        }
    }
}

/// The most samples a generated prompt may have.
pub const MAX_SYNTH_SAMPLES: u64 = 1024;

/// Tokens per hash id in the generated stream (Mooncake's block size).
pub const MOONCAKE_BLOCK: u64 = 512;

/// The next arrival after `clock_ms`: a Poisson stream at the pattern's peak, each
/// arrival kept with probability rate now / peak (a constant rate keeps every one).
fn next_arrival(rng: &mut SeededRng, mut clock_ms: f64, rate: f64, pattern: RatePattern) -> f64 {
    let peak = pattern.peak(rate);
    loop {
        clock_ms += -(1.0 - rng.unit_f64()).ln() * 1000.0 / peak;
        if pattern == RatePattern::Constant
            || rng.unit_f64() * peak < pattern.rate_at(rate, clock_ms / 1000.0)
        {
            return clock_ms;
        }
    }
}

/// Writes a Mooncake-format stream: 8 shared system prefixes of 4 blocks; conversations grow
/// by 1–2 blocks a turn up to 64 blocks; continuations pick one of the 1,024 most recent
/// conversations (and share its `session_id`), so memory stays bounded however long the
/// stream. Arrivals are Poisson at `rate` prompts/s, changing over time as `pattern` says;
/// with `samples` N, each prompt is N requests arriving together (each with an output
/// length of its own), `requests` of them in all.
pub fn write_mooncake(workload: &MooncakeWorkload, out: &mut impl Write) -> io::Result<()> {
    const RECENT: usize = 1024;
    const SYSTEMS: u64 = 8;
    const SYSTEM_BLOCKS: u64 = 4;
    let mut rng = SeededRng::new(workload.seed);
    let draw = AdapterDraw::new(workload.adapters.min(MAX_SYNTH_ADAPTERS));
    let mut next_id = SYSTEMS * SYSTEM_BLOCKS;
    // (hash ids, session, adapter) of recent conversations.
    let mut recent: Vec<(Vec<u64>, u64, Option<usize>)> = Vec::with_capacity(RECENT);
    let mut clock_ms = 0.0f64;
    let mut line = String::new();
    let samples = workload.samples.clamp(1, MAX_SYNTH_SAMPLES);
    let mut written = 0;
    for n in 0.. {
        if written >= workload.requests {
            break;
        }
        let continue_from = (!recent.is_empty()
            && rng.unit_f64() < workload.continue_chat_probability)
            .then(|| rng.below(recent.len() as u64) as usize)
            .filter(|i| recent[*i].0.len() < 62);
        let (mut ids, session, adapter) = match continue_from {
            Some(i) => recent[i].clone(),
            None => {
                let system = rng.below(SYSTEMS);
                let ids = (0..SYSTEM_BLOCKS)
                    .map(|b| system * SYSTEM_BLOCKS + b)
                    .collect();
                (ids, n, draw.draw(&mut rng))
            }
        };
        for _ in 0..1 + rng.below(2) {
            ids.push(next_id);
            next_id += 1;
        }
        let input_length = ids.len() as u64 * MOONCAKE_BLOCK - rng.below(MOONCAKE_BLOCK);
        let mut output_length = 50 + rng.below(450);
        clock_ms = next_arrival(&mut rng, clock_ms, workload.rate, workload.pattern);
        for sample in 0..samples.min(workload.requests - written) {
            if sample > 0 {
                output_length = 50 + rng.below(450);
            }
            line.clear();
            line.push_str(&format!("{{\"timestamp\": {}, ", clock_ms as u64));
            if workload.sessions {
                line.push_str(&format!("\"session_id\": {session}, "));
            }
            if let Some(a) = adapter {
                line.push_str(&format!("\"adapter\": \"{}\", ", draw.names[a]));
            }
            line.push_str(&format!(
                "\"input_length\": {input_length}, \"output_length\": {output_length}, \"hash_ids\": ["
            ));
            for (i, id) in ids.iter().enumerate() {
                if i > 0 {
                    line.push_str(", ");
                }
                line.push_str(&id.to_string());
            }
            line.push_str("]}\n");
            out.write_all(line.as_bytes())?;
            written += 1;
        }
        match continue_from {
            Some(i) => recent[i] = (ids, session, adapter),
            None if recent.len() < RECENT => recent.push((ids, session, adapter)),
            None => recent[(n % RECENT as u64) as usize] = (ids, session, adapter),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_prompt_is_about_8_kb() {
        let len = system_prompt().len();
        assert!((7 * 1024..9 * 1024).contains(&len), "{len}");
    }

    #[test]
    fn chat_workload_is_seeded_and_links_parents() {
        let small = ChatWorkload {
            requests: 50,
            ..ChatWorkload::default()
        };
        let mut a = Vec::new();
        let mut b = Vec::new();
        write_chat(&small, &mut a).unwrap();
        write_chat(&small, &mut b).unwrap();
        assert_eq!(a, b);
        let mut c = Vec::new();
        write_chat(&ChatWorkload { seed: 1, ..small }, &mut c).unwrap();
        assert_ne!(a, c);
        let lines: Vec<serde_json::Value> = String::from_utf8(a)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 50);
        for line in &lines {
            if let Some(parent) = line.get("parent") {
                let parent = &lines[parent.as_u64().unwrap() as usize];
                let prompt = line["prompt"].as_str().unwrap();
                assert!(prompt.starts_with(parent["prompt"].as_str().unwrap()));
                assert_eq!(line["session"], parent["session"]);
            }
        }
    }

    #[test]
    fn conversations_keep_their_adapter_and_popular_ones_come_first() {
        let lines = |workload: &ChatWorkload| -> Vec<serde_json::Value> {
            let mut out = Vec::new();
            write_chat(workload, &mut out).unwrap();
            String::from_utf8(out)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let base = ChatWorkload {
            requests: 400,
            tokens_typed_by_user_per_request: 2,
            ..ChatWorkload::default()
        };
        assert!(lines(&base).iter().all(|l| l.get("adapter").is_none()));
        let lora = lines(&ChatWorkload {
            adapters: 4,
            ..base
        });
        let mut counts = [0usize; 4];
        for line in &lora {
            let name = line["adapter"].as_str().expect("every request names one");
            let k: usize = name.strip_prefix("adapter-").unwrap().parse().unwrap();
            counts[k - 1] += 1;
            if let Some(parent) = line.get("parent") {
                let parent = &lora[parent.as_u64().unwrap() as usize];
                assert_eq!(line["adapter"], parent["adapter"]);
            }
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[3], "{counts:?}");
        let mut mooncake = Vec::new();
        let workload = MooncakeWorkload {
            requests: 200,
            continue_chat_probability: 0.5,
            seed: 3,
            sessions: true,
            adapters: 3,
            samples: 1,
            rate: 20.0,
            pattern: RatePattern::Constant,
        };
        write_mooncake(&workload, &mut mooncake).unwrap();
        let text = String::from_utf8(mooncake).unwrap();
        assert_eq!(
            text.lines()
                .filter(|l| l.contains("\"adapter\": \"adapter-"))
                .count(),
            200
        );
    }

    #[test]
    fn samples_of_a_prompt_arrive_together_and_differ_only_in_length() {
        let lines = |samples: u64| {
            let mut out = Vec::new();
            let workload = MooncakeWorkload {
                requests: 100,
                continue_chat_probability: 0.3,
                seed: 5,
                sessions: true,
                adapters: 0,
                samples,
                rate: 20.0,
                pattern: RatePattern::Constant,
            };
            write_mooncake(&workload, &mut out).unwrap();
            String::from_utf8(out)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .collect::<Vec<_>>()
        };
        let grouped = lines(8);
        assert_eq!(grouped.len(), 100, "--requests counts requests");
        let without_length = |l: &serde_json::Value| {
            let mut l = l.clone();
            l.as_object_mut().unwrap().remove("output_length");
            l
        };
        for group in grouped.chunks(8) {
            assert!(
                group
                    .iter()
                    .all(|l| without_length(l) == without_length(&group[0]))
            );
        }
        let lengths: std::collections::BTreeSet<u64> = grouped[..8]
            .iter()
            .map(|l| l["output_length"].as_u64().unwrap())
            .collect();
        assert!(lengths.len() > 1, "each sample has a length of its own");
        assert_ne!(grouped[8]["timestamp"], grouped[0]["timestamp"]);
        // The first line is the stream's without samples (later ones draw more lengths).
        assert_eq!(lines(1)[0], grouped[0]);
    }

    /// Arrival times (s) of a generated stream.
    fn arrivals(requests: u64, rate: f64, pattern: RatePattern) -> Vec<f64> {
        let mut out = Vec::new();
        let workload = MooncakeWorkload {
            requests,
            continue_chat_probability: 0.0,
            seed: 11,
            sessions: false,
            adapters: 0,
            samples: 1,
            rate,
            pattern,
        };
        write_mooncake(&workload, &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["timestamp"]
                    .as_f64()
                    .unwrap()
                    / 1e3
            })
            .collect()
    }

    /// Requests arrived in [from, to) seconds.
    fn count(times: &[f64], from: f64, to: f64) -> f64 {
        times.iter().filter(|t| (from..to).contains(*t)).count() as f64
    }

    #[test]
    fn a_ramp_and_a_day_bring_the_arrivals_their_rate_says() {
        // From 10 to 100 prompts/s over 100 s: in [0, 10) s the rate averages 14.5, so 145
        // arrivals are expected; in [90, 100) s, 95.5 a second: 955; then 100 a second.
        let ramp = arrivals(20_000, 10.0, RatePattern::parse("ramp:100:100").unwrap());
        for (from, to, expected) in [
            (0.0, 10.0, 145.0),
            (90.0, 100.0, 955.0),
            (110.0, 120.0, 1000.0),
        ] {
            let n = count(&ramp, from, to);
            // Poisson: within 4 standard deviations.
            assert!(
                (n - expected).abs() < 4.0 * expected.sqrt(),
                "[{from}, {to}): {n} of {expected}"
            );
        }
        // A 100-s day from 20% to 100% of 50 a second: 10 a second at 0 s, 50 at 50 s.
        let day = arrivals(20_000, 50.0, RatePattern::parse("diurnal:100:0.2").unwrap());
        let rate = |t: f64| {
            RatePattern::Diurnal {
                period_s: 100.0,
                low: 0.2,
            }
            .rate_at(50.0, t)
        };
        assert_eq!((rate(0.0), rate(50.0), rate(100.0)), (10.0, 50.0, 10.0));
        for (from, to) in [(0.0, 10.0), (45.0, 55.0), (145.0, 155.0), (195.0, 205.0)] {
            // The expected count: the rate's integral, summed over tenths of a second.
            let expected: f64 = (0..100)
                .map(|i| rate(from + (f64::from(i) + 0.5) / 10.0) / 10.0)
                .sum();
            let n = count(&day, from, to);
            assert!(
                (n - expected).abs() < 4.0 * expected.sqrt(),
                "[{from}, {to}): {n} of {expected:.0}"
            );
        }
        // A constant rate is the stream it always was.
        assert_eq!(
            arrivals(500, 20.0, RatePattern::Constant),
            arrivals(500, 20.0, RatePattern::parse("constant").unwrap())
        );
        for bad in ["ramp:0:10", "ramp:5", "diurnal:100:1.5", "wave", "ramp:x:1"] {
            assert!(RatePattern::parse(bad).is_err(), "{bad}");
        }
    }
}

//! A measured run as the fit and `validate` take it: its requests, its time series and the
//! engine limits it records, read from the layout LLMServingSim's bench examples use
//! (`requests.jsonl`, `timeseries.csv`, `meta.json`), and what its requests took
//! ([`Samples`]), compared by quantiles.

use serde::Deserialize;

use routerlab_engine::StepTime;

/// One request of a measured run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MeasuredRequest {
    /// Prompt tokens.
    pub input_toks: u64,
    /// Generated tokens.
    pub output_toks: u64,
    /// Entered the engine's queue, seconds (any origin).
    pub queued_ts: f64,
    /// First scheduled, seconds.
    pub scheduled_ts: f64,
    /// First token out, seconds.
    pub first_token_ts: f64,
    /// Last token out, seconds.
    pub last_token_ts: f64,
    /// The conversation it is a round of, where the tool records one (LMBench's
    /// `user_id`, `question_id`).
    #[serde(skip)]
    pub session: Option<Session>,
    /// Its prompt's block chain, where the log records one (`serve`'s decision log): the
    /// tokens per block and a hash per whole block.
    #[serde(skip)]
    pub blocks: Option<(u32, Vec<u64>)>,
}

/// A request's place in a conversation: the user and the round (its question).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// The conversation (LMBench's `user_id`).
    pub user: u64,
    /// The round in it (LMBench's `question_id`).
    pub round: u64,
}

/// One second of a measured run's time series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the run began.
    pub t: f64,
    /// Prompt tokens per second.
    pub prompt_throughput: f64,
    /// Generated tokens per second.
    pub gen_throughput: f64,
    /// Requests running.
    pub running: f64,
    /// KV-cache usage, 0 to 1 (the file may say percent; see [`MeasuredRun::parse`]).
    pub kv_usage: f64,
}

/// A measured run.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredRun {
    /// Its requests, in the workload's order.
    pub requests: Vec<MeasuredRequest>,
    /// Its time series.
    pub samples: Vec<Sample>,
    /// `max_num_seqs`.
    pub max_num_seqs: u32,
    /// `max_num_batched_tokens`.
    pub max_num_batched_tokens: u32,
    /// KV blocks and their tokens, when the run recorded them.
    pub kv_blocks: Option<(u32, u32)>,
    /// Engines the requests were balanced over (vLLM's `data_parallel_size`), each with
    /// these limits and this KV cache.
    pub data_parallel: u32,
    /// GPUs each engine's model was split over (`tensor_parallel_size`), when recorded.
    pub tensor_parallel: Option<u32>,
    /// Whether a mixture of experts' experts were split over the GPUs
    /// (`enable_expert_parallel`).
    pub expert_parallel: bool,
    /// One GPU's memory, bytes, when recorded (`hardware.device_total_memory_bytes`).
    pub gpu_memory_bytes: Option<u64>,
    /// Whether the engine scheduled each step while the last one ran (vLLM's async
    /// scheduling), when the run says: `engine_kwargs.async_scheduling`, else its release
    /// (`vllm_version`; on by default from 0.14).
    pub async_scheduling: Option<bool>,
}

/// Whether vLLM `version` (`0.19.0`, `0.14.1rc1`) schedules ahead by default: from 0.14
/// (the release notes; pull request 27614). `None` when it is not a version.
fn schedules_ahead(version: &str) -> Option<bool> {
    let mut parts = version.trim_start_matches('v').split('.');
    let major: u32 = parts.next()?.parse().ok()?;
    let minor = parts.next()?;
    let digits = minor
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(minor.len());
    let minor: u32 = minor[..digits].parse().ok()?;
    Some((major, minor) >= (0, 14))
}

/// What a run's requests measured, one value each, in the workload's order: the fit
/// compares these distributions (many quantiles, not a few aggregates) and the requests
/// one by one (each request's own batch and context show in its own latencies).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Samples {
    /// Time to first token of each request, ms.
    pub ttft_ms: Vec<f64>,
    /// Time per output token after the first, ms; `None` for a request of one token.
    pub tpot_ms: Vec<Option<f64>>,
    /// First arrival to last token, seconds.
    pub makespan_s: f64,
    /// Arrival to last token of each request, ms.
    pub e2e_ms: Vec<f64>,
}

/// The quantiles the fit matches, with their weights.
const QUANTILES: [(f64, f64); 6] = [
    (0.1, 1.0),
    (0.25, 1.0),
    (0.5, 1.0),
    (0.75, 1.0),
    (0.9, 1.0),
    (0.99, 0.25),
];

impl Samples {
    /// The figures reported to people.
    pub fn figures(&self) -> Figures {
        let (mut ttft, mut tpot) = (self.ttft_ms.clone(), self.tpots());
        Figures {
            ttft_p50: quantile(&mut ttft, 0.5),
            ttft_p90: quantile(&mut ttft, 0.9),
            ttft_p99: quantile(&mut ttft, 0.99),
            tpot_p50: quantile(&mut tpot, 0.5),
            tpot_p90: quantile(&mut tpot, 0.9),
            makespan_s: self.makespan_s,
        }
    }

    /// The times per output token of the requests that have one.
    fn tpots(&self) -> Vec<f64> {
        self.tpot_ms.iter().flatten().copied().collect()
    }

    /// How far `self` (simulated) is from `measured`: squared log ratios of the TTFT and
    /// TPOT quantiles (the 99th at a quarter of the weight), of the makespan at a quarter,
    /// and the mean squared log ratio of each request's own TTFT and TPOT.
    pub fn distance(&self, measured: &Samples) -> f64 {
        let term = |s: f64, m: f64| {
            if s > 0.0 && m > 0.0 {
                (s / m).ln().powi(2)
            } else if s == m {
                0.0
            } else {
                100.0
            }
        };
        let (mut a, mut b) = (self.ttft_ms.clone(), measured.ttft_ms.clone());
        let (mut c, mut d) = (self.tpots(), measured.tpots());
        let mut total = 0.25 * term(self.makespan_s, measured.makespan_s);
        for (q, weight) in QUANTILES {
            total += weight * term(quantile(&mut a, q), quantile(&mut b, q));
            total += weight * term(quantile(&mut c, q), quantile(&mut d, q));
        }
        let mut paired = 0.0;
        let mut count = 0usize;
        for (s, m) in self.ttft_ms.iter().zip(&measured.ttft_ms) {
            paired += term(*s, *m);
            count += 1;
        }
        for (s, m) in self.tpot_ms.iter().zip(&measured.tpot_ms) {
            if let (Some(s), Some(m)) = (s, m) {
                paired += term(*s, *m);
                count += 1;
            }
        }
        total + paired / count.max(1) as f64
    }
}

/// The figures a fit is judged by, in milliseconds (makespan in seconds).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Figures {
    /// TTFT percentiles.
    pub ttft_p50: f64,
    /// TTFT 90th percentile.
    pub ttft_p90: f64,
    /// TTFT 99th percentile.
    pub ttft_p99: f64,
    /// Time per output token after the first, median.
    pub tpot_p50: f64,
    /// Time per output token, 90th percentile.
    pub tpot_p90: f64,
    /// First arrival to last token, seconds.
    pub makespan_s: f64,
}

impl Figures {
    /// The rows of a comparison: name, value.
    pub fn rows(&self) -> [(&'static str, f64); 6] {
        [
            ("TTFT p50 (ms)", self.ttft_p50),
            ("TTFT p90 (ms)", self.ttft_p90),
            ("TTFT p99 (ms)", self.ttft_p99),
            ("TPOT p50 (ms)", self.tpot_p50),
            ("TPOT p90 (ms)", self.tpot_p90),
            ("makespan (s)", self.makespan_s),
        ]
    }
}

/// The `q` quantile of `values` (nearest rank; 0 when empty); sorts them.
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * q).round() as usize]
}

/// The longest a measured run may span, seconds: a week.
pub(crate) const MAX_RUN_SPAN_S: f64 = 7.0 * 24.0 * 3600.0;

/// Puts `requests` in arrival order, refusing them when they span more than a week.
pub(crate) fn in_arrival_order(requests: &mut [MeasuredRequest]) -> Result<(), &'static str> {
    let start = requests
        .iter()
        .map(|r| r.queued_ts)
        .fold(f64::INFINITY, f64::min);
    let end = requests.iter().map(|r| r.last_token_ts).fold(0.0, f64::max);
    if end - start > MAX_RUN_SPAN_S {
        return Err("the requests span more than a week");
    }
    requests.sort_by(|a, b| a.queued_ts.total_cmp(&b.queued_ts));
    Ok(())
}

/// The 1-based line of `text`'s `index`-th non-blank line.
pub(crate) fn line_of(text: &str, index: usize) -> usize {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .nth(index)
        .map_or(0, |(n, _)| n + 1)
}

/// The three files of a measured run.
const REQUESTS_FILE: &str = "requests.jsonl";
const META_FILE: &str = "meta.json";
const TIMESERIES_FILE: &str = "timeseries.csv";

/// What is wrong with a measured run's files: which file, which line, what.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct MeasuredRunError {
    /// `requests.jsonl`, `meta.json` or `timeseries.csv`.
    pub file: &'static str,
    /// The 1-based line, when one is to blame.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl MeasuredRun {
    /// Reads the three files' texts; errors name the file, line and field.
    pub fn parse(
        requests: &str,
        meta: &str,
        timeseries: &str,
    ) -> Result<MeasuredRun, MeasuredRunError> {
        let bad = |file, line, message: String| MeasuredRunError {
            file,
            line,
            message,
        };
        let mut parsed = Vec::new();
        for (i, line) in requests.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let request: MeasuredRequest = serde_json::from_str(line)
                .map_err(|e| bad(REQUESTS_FILE, Some(i + 1), e.to_string()))?;
            let times = [
                request.queued_ts,
                request.scheduled_ts,
                request.first_token_ts,
                request.last_token_ts,
            ];
            if times.iter().any(|t| !t.is_finite())
                || !(times[0] <= times[1] && times[1] <= times[2] && times[2] <= times[3])
            {
                return Err(bad(
                    REQUESTS_FILE,
                    Some(i + 1),
                    "times must be finite and in order: queued <= scheduled <= first token <= last token".into(),
                ));
            }
            for (field, tokens) in [
                ("input_toks", request.input_toks),
                ("output_toks", request.output_toks),
            ] {
                if tokens > routerlab_trace::MAX_REQUEST_TOKENS {
                    return Err(bad(
                        REQUESTS_FILE,
                        Some(i + 1),
                        format!(
                            "field `{field}`: {tokens} tokens is more than the {} a request may have",
                            routerlab_trace::MAX_REQUEST_TOKENS
                        ),
                    ));
                }
            }
            parsed.push(request);
        }
        // The run's clock: every time within a week of the earliest, so the figures drawn
        // from the span (a sample every 100 ms) stay bounded.
        let start = parsed
            .iter()
            .map(|r| r.queued_ts)
            .fold(f64::INFINITY, f64::min);
        if let Some(i) = parsed
            .iter()
            .position(|r| r.last_token_ts - start > MAX_RUN_SPAN_S)
        {
            return Err(bad(
                REQUESTS_FILE,
                Some(line_of(requests, i)),
                format!(
                    "ends {:.3e} s after the run's first request: a run spans at most {MAX_RUN_SPAN_S} s (a week)",
                    parsed[i].last_token_ts - start
                ),
            ));
        }
        if parsed.is_empty() {
            return Err(bad(REQUESTS_FILE, None, "no requests".into()));
        }
        let meta: serde_json::Value =
            serde_json::from_str(meta).map_err(|e| bad(META_FILE, None, e.to_string()))?;
        let kwargs = &meta["engine_kwargs"];
        let number = |key: &str| -> Result<u32, MeasuredRunError> {
            kwargs[key]
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .filter(|v| *v > 0)
                .ok_or_else(|| {
                    bad(
                        META_FILE,
                        None,
                        format!("`engine_kwargs.{key}` must be a positive whole number"),
                    )
                })
        };
        let max_num_seqs = number("max_num_seqs")?;
        let max_num_batched_tokens = number("max_num_batched_tokens")?;
        let kv_cache = &meta["kv_cache"];
        let blocks = ["num_gpu_blocks", "kv_blocks"].iter().find_map(|key| {
            kwargs[*key]
                .as_u64()
                .or(meta[*key].as_u64())
                .or(kv_cache[*key].as_u64())
        });
        let block_size = kwargs["block_size"]
            .as_u64()
            .or(kv_cache["block_size"].as_u64())
            .unwrap_or(16);
        let data_parallel = match &kwargs["data_parallel_size"] {
            serde_json::Value::Null => 1,
            value => value
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .filter(|v| (1..=1024).contains(v))
                .ok_or_else(|| {
                    bad(
                        META_FILE,
                        None,
                        "`engine_kwargs.data_parallel_size` must be a whole number from 1 to 1024"
                            .into(),
                    )
                })?,
        };
        let async_scheduling = match &kwargs["async_scheduling"] {
            serde_json::Value::Null => meta["vllm_version"].as_str().and_then(schedules_ahead),
            serde_json::Value::Bool(on) => Some(*on),
            _ => {
                return Err(bad(
                    META_FILE,
                    None,
                    "`engine_kwargs.async_scheduling` must be true, false or null".into(),
                ));
            }
        };
        let kv_blocks = blocks
            .and_then(|b| u32::try_from(b).ok())
            .zip(u32::try_from(block_size).ok());
        let mut samples = Vec::new();
        let mut sample_lines = Vec::new();
        let mut lines = timeseries.lines();
        let header: Vec<&str> = lines
            .next()
            .ok_or_else(|| bad(TIMESERIES_FILE, None, "empty".into()))?
            .split(',')
            .map(str::trim)
            .collect();
        let column = |name: &str| {
            header
                .iter()
                .position(|h| *h == name)
                .ok_or_else(|| bad(TIMESERIES_FILE, Some(1), format!("no `{name}` column")))
        };
        let columns = [
            column("t")?,
            column("prompt_throughput")?,
            column("gen_throughput")?,
            column("running")?,
            column("kv_cache_pct")?,
        ];
        for (i, line) in lines.enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            let mut values = [0.0; 5];
            for (value, (c, name)) in values.iter_mut().zip(columns.iter().zip([
                "t",
                "prompt_throughput",
                "gen_throughput",
                "running",
                "kv_cache_pct",
            ])) {
                *value = cells
                    .get(*c)
                    .and_then(|v| v.parse::<f64>().ok())
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| {
                        bad(
                            TIMESERIES_FILE,
                            Some(i + 2),
                            format!("field `{name}` is not a non-negative number"),
                        )
                    })?;
            }
            sample_lines.push(i + 2);
            samples.push(Sample {
                t: values[0],
                prompt_throughput: values[1],
                gen_throughput: values[2],
                running: values[3],
                kv_usage: values[4],
            });
        }
        // Percent or fraction: a series that ever passes 1 is percent, and no more than 100.
        if let Some(i) = samples.iter().position(|s| s.kv_usage > 100.0) {
            return Err(bad(
                TIMESERIES_FILE,
                Some(sample_lines[i]),
                format!(
                    "field `kv_cache_pct` is {}: KV usage is 0 to 1, or a percentage to 100",
                    samples[i].kv_usage
                ),
            ));
        }
        if samples.iter().any(|s| s.kv_usage > 1.0) {
            for s in &mut samples {
                s.kv_usage /= 100.0;
            }
        }
        Ok(MeasuredRun {
            requests: parsed,
            samples,
            max_num_seqs,
            max_num_batched_tokens,
            kv_blocks,
            data_parallel,
            tensor_parallel: kwargs["tensor_parallel_size"]
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .filter(|v| *v > 0),
            expert_parallel: kwargs["enable_expert_parallel"].as_bool() == Some(true),
            gpu_memory_bytes: meta["hardware"]["device_total_memory_bytes"].as_u64(),
            async_scheduling,
        })
    }

    /// What the measured requests took.
    pub fn samples(&self) -> Samples {
        let start = self
            .requests
            .iter()
            .map(|r| r.queued_ts)
            .fold(f64::INFINITY, f64::min);
        let end = self
            .requests
            .iter()
            .map(|r| r.last_token_ts)
            .fold(0.0, f64::max);
        Samples {
            ttft_ms: self
                .requests
                .iter()
                .map(|r| (r.first_token_ts - r.queued_ts) * 1e3)
                .collect(),
            tpot_ms: self
                .requests
                .iter()
                .map(|r| {
                    (r.output_toks > 1).then(|| {
                        (r.last_token_ts - r.first_token_ts) * 1e3 / (r.output_toks - 1) as f64
                    })
                })
                .collect(),
            makespan_s: end - start,
            e2e_ms: self
                .requests
                .iter()
                .map(|r| (r.last_token_ts - r.queued_ts) * 1e3)
                .collect(),
        }
    }

    /// The KV cache in blocks of 16 tokens: as recorded, else estimated. The estimate
    /// divides the tokens the running requests held by the KV usage the time series
    /// reports, second by second (median); when the run never reported any usage, the
    /// cache was never the limit, and one twice the largest number of tokens ever held at
    /// once stands in. The second value says how it was found.
    pub fn kv_capacity(&self) -> (u32, u32, String) {
        if let Some((blocks, block_size)) = self.kv_blocks {
            return (blocks, block_size, "from meta.json".into());
        }
        let start = self
            .requests
            .iter()
            .map(|r| r.queued_ts)
            .fold(f64::INFINITY, f64::min);
        let held_at = |t: f64| -> f64 {
            self.requests
                .iter()
                .filter(|r| r.scheduled_ts <= t && t < r.last_token_ts)
                .map(|r| {
                    let span = (r.last_token_ts - r.first_token_ts).max(1e-9);
                    let done = ((t - r.first_token_ts) / span).clamp(0.0, 1.0);
                    r.input_toks as f64 + done * r.output_toks as f64
                })
                .sum()
        };
        let mut ratios: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.kv_usage > 0.05 && s.running > 0.0)
            .map(|s| held_at(start + s.t) / s.kv_usage)
            .filter(|c| c.is_finite() && *c > 0.0)
            .collect();
        let block_size = 16u32;
        if !ratios.is_empty() {
            let tokens = quantile(&mut ratios, 0.5);
            let blocks = (tokens / f64::from(block_size))
                .ceil()
                .clamp(1.0, f64::from(1u32 << 24));
            return (
                blocks as u32,
                block_size,
                format!(
                    "estimated from the time series: tokens held by running requests / KV usage, median of {} seconds",
                    ratios.len()
                ),
            );
        }
        let peak = (0..=((self.samples().makespan_s * 10.0) as usize))
            .map(|i| held_at(start + i as f64 / 10.0))
            .fold(0.0, f64::max);
        let blocks = (2.0 * peak / f64::from(block_size))
            .ceil()
            .clamp(1.0, f64::from(1u32 << 24));
        (
            blocks as u32,
            block_size,
            "the time series never reports KV usage, so the cache never limited the run: twice the most tokens ever held at once".into(),
        )
    }

    /// A first guess from aggregates: the decode step from seconds of steady decoding
    /// (the most sequences running, little prefill), the prompt cost from requests that did
    /// not wait.
    pub fn initial_guess(&self) -> StepTime {
        let steady = self
            .samples
            .iter()
            .filter(|s| s.running > 0.0 && s.gen_throughput > 0.0)
            .max_by(|a, b| {
                (a.running - a.prompt_throughput / 1000.0)
                    .total_cmp(&(b.running - b.prompt_throughput / 1000.0))
            });
        let step_ms = steady.map_or(20.0, |s| 1000.0 * s.running / s.gen_throughput);
        let seqs = steady.map_or(1.0, |s| s.running.max(1.0));
        let early: Vec<&MeasuredRequest> = self
            .requests
            .iter()
            .filter(|r| r.scheduled_ts - r.queued_ts < 0.01)
            .collect();
        let prefill = if early.len() >= 2 {
            let xs: Vec<f64> = early.iter().map(|r| r.input_toks as f64).collect();
            let ys: Vec<f64> = early
                .iter()
                .map(|r| (r.first_token_ts - r.scheduled_ts) * 1e3)
                .collect();
            let (mx, my) = (
                xs.iter().sum::<f64>() / xs.len() as f64,
                ys.iter().sum::<f64>() / ys.len() as f64,
            );
            let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
            let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
            if sxx > 0.0 {
                (sxy / sxx).max(1e-4)
            } else {
                0.05
            }
        } else {
            0.05
        };
        StepTime::Batched {
            overhead_ms: (step_ms * 0.5).max(0.01),
            prefill_ms_per_token: prefill,
            decode_ms_per_seq: (step_ms * 0.5 / seqs).max(1e-4),
            context_ms_per_ktoken: 0.01,
            experts: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: &str = r#"{"engine_kwargs": {"max_num_seqs": 8, "max_num_batched_tokens": 512}}"#;

    /// Two requests of 1,000 prompt tokens run through seconds 1 to 9; 100 output tokens
    /// each, generated from second 2 to 10.
    const REQUESTS: &str = "\
{\"input_toks\": 1000, \"output_toks\": 100, \"queued_ts\": 0.0, \"scheduled_ts\": 0.5, \"first_token_ts\": 2.0, \"last_token_ts\": 10.0}
{\"input_toks\": 1000, \"output_toks\": 100, \"queued_ts\": 0.0, \"scheduled_ts\": 0.5, \"first_token_ts\": 2.0, \"last_token_ts\": 10.0}
";

    #[test]
    fn missing_kv_capacity_is_estimated_from_usage_and_said_so() {
        // At second 1 the two hold 2,000 tokens and the cache is 25% full: 8,000 tokens,
        // 500 blocks of 16. (Percent in the file: 25 is read as 0.25.)
        let series =
            "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n1,0,0,2,0,25\n";
        let run = MeasuredRun::parse(REQUESTS, META, series).unwrap();
        let (blocks, block_size, how) = run.kv_capacity();
        assert_eq!((blocks, block_size), (500, 16));
        assert!(how.contains("estimated from the time series"), "{how}");
        // Never any usage: twice the most ever held (2 × (1,000 + 100) tokens, at the end).
        let series =
            "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n1,0,0,2,0,0\n";
        let run = MeasuredRun::parse(REQUESTS, META, series).unwrap();
        let (blocks, _, how) = run.kv_capacity();
        assert!((270..=276).contains(&blocks), "{blocks}");
        assert!(how.contains("never reports KV usage"), "{how}");
    }

    #[test]
    fn bad_files_are_named_with_line_and_field() {
        let series = "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n";
        let late = REQUESTS.replace("\"first_token_ts\": 2.0", "\"first_token_ts\": 20.0");
        let error = MeasuredRun::parse(&late, META, series)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("requests.jsonl:1: times must be"),
            "{error}"
        );
        let error = MeasuredRun::parse(REQUESTS, "{}", series)
            .unwrap_err()
            .to_string();
        assert!(error.contains("engine_kwargs.max_num_seqs"), "{error}");
        let bad = format!("{series}1,x,0,2,0,0\n");
        let error = MeasuredRun::parse(REQUESTS, META, &bad).unwrap_err();
        assert_eq!(
            (error.file, error.line),
            ("timeseries.csv", Some(2)),
            "{error}"
        );
        assert_eq!(
            error.to_string(),
            "timeseries.csv:2: field `prompt_throughput` is not a non-negative number"
        );
    }

    /// vLLM schedules ahead by default from 0.14; the run's own setting wins; a setting
    /// that is not a switch is refused by name.
    #[test]
    fn async_scheduling_is_read_from_the_engine_arguments_else_the_release() {
        let series =
            "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n1,0,0,2,0,25\n";
        let with = |meta: &str| MeasuredRun::parse(REQUESTS, meta, series);
        let args = r#""engine_kwargs": {"max_num_seqs": 8, "max_num_batched_tokens": 512"#;
        for (version, expected) in [
            ("0.13.0", Some(false)),
            ("0.14.0", Some(true)),
            ("0.19.0", Some(true)),
            ("0.14.1rc1", Some(true)),
            ("v0.8.5", Some(false)),
            ("1.0", Some(true)),
            ("main", None),
        ] {
            let meta = format!(r#"{{"vllm_version": "{version}", {args}}}}}"#);
            assert_eq!(with(&meta).unwrap().async_scheduling, expected, "{version}");
        }
        assert_eq!(with(META).unwrap().async_scheduling, None);
        let off = format!(r#"{{"vllm_version": "0.19.0", {args}, "async_scheduling": false}}}}"#);
        assert_eq!(with(&off).unwrap().async_scheduling, Some(false));
        let bad = format!(r#"{{{args}, "async_scheduling": "yes"}}}}"#);
        let error = with(&bad).unwrap_err().to_string();
        assert!(error.contains("engine_kwargs.async_scheduling"), "{error}");
    }
}

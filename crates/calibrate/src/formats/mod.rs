//! The measured-run files benchmark tools write, told apart by their first bytes and read
//! into requests: one reader per tool, each in its own module, and the checks they share.
//!
//! A reader's error names where it is: a 1-based line first when the format has lines
//! that matter (``3: field `ttft`: ...``), else the field's path in the document
//! (``field `benchmarks[0].requests.successful[2].prompt_tokens`: ...``).
//! [`located`] puts the file's name in front.

pub mod aiperf;
mod common;
pub mod decision_log;
pub mod distserve;
pub mod fmperf;
pub mod guidellm;
pub mod inference_perf;
pub mod lmbench;
pub mod lmbench_workload;
pub mod vllm_bench;

pub use common::Part;

/// A measured-run file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunFileFormat {
    /// DistServe's alignment runs (`vllm-N-RATE.exp`).
    Distserve,
    /// `vllm bench serve --save-result --save-detailed` JSON.
    VllmBench,
    /// AIPerf's per-request export (`profile_export.jsonl`).
    Aiperf,
    /// GuideLLM's report (`benchmarks.json`).
    Guidellm,
    /// inference-perf's per-request lifecycle metrics.
    InferencePerf,
    /// LMBench's multi-round QA summary CSV.
    Lmbench,
    /// fmperf's load-generator results (with its requests file: see [`parse_fmperf`]).
    Fmperf,
    /// `routerlab serve --decision-log`.
    DecisionLog,
}

impl RunFileFormat {
    /// Every format, in the order they are tried.
    pub const ALL: [RunFileFormat; 8] = [
        RunFileFormat::DecisionLog,
        RunFileFormat::Distserve,
        RunFileFormat::VllmBench,
        RunFileFormat::Aiperf,
        RunFileFormat::Guidellm,
        RunFileFormat::InferencePerf,
        RunFileFormat::Lmbench,
        RunFileFormat::Fmperf,
    ];

    /// What a file of this format looks like, for an error that found none.
    pub fn looks_like(self) -> &'static str {
        match self {
            RunFileFormat::Distserve => {
                "a DistServe run file (line 1 a list of dicts starting `[{'prompt_len':`)"
            }
            RunFileFormat::VllmBench => {
                "a `vllm bench serve --save-detailed` result (a JSON object with `input_lens` and `ttfts`)"
            }
            RunFileFormat::Aiperf => {
                "an AIPerf `profile_export.jsonl` (lines of objects with `metadata.request_start_ns`)"
            }
            RunFileFormat::Guidellm => {
                "a GuideLLM report (a JSON object whose `benchmarks` hold `requests.successful`)"
            }
            RunFileFormat::InferencePerf => {
                "inference-perf's `per_request_lifecycle_metrics.json` (a JSON list of objects with `start_time` and `info`)"
            }
            RunFileFormat::Lmbench => {
                "an LMBench multi-round QA summary CSV (columns `prompt_tokens`, `generation_tokens`, `ttft`, `generation_time`, `launch_time`)"
            }
            RunFileFormat::Fmperf => {
                "fmperf's results (a JSON object whose `results` hold records with `worker_idx` and `response_idx`)"
            }
            RunFileFormat::DecisionLog => {
                "a `routerlab serve --decision-log` file (lines starting `{\"log\":\"routerlab-decisions/1\"`)"
            }
        }
    }

    fn detects(self, text: &str) -> bool {
        match self {
            RunFileFormat::Distserve => distserve::detect(text),
            RunFileFormat::VllmBench => vllm_bench::detect(text),
            RunFileFormat::Aiperf => aiperf::detect(text),
            RunFileFormat::Guidellm => guidellm::detect(text),
            RunFileFormat::InferencePerf => inference_perf::detect(text),
            RunFileFormat::Lmbench => lmbench::detect(text),
            RunFileFormat::Fmperf => fmperf::detect(text),
            RunFileFormat::DecisionLog => decision_log::detect(text),
        }
    }
}

/// The format `text` is in, if it is one of [`RunFileFormat::ALL`].
pub fn detect(text: &str) -> Option<RunFileFormat> {
    RunFileFormat::ALL.into_iter().find(|f| f.detects(text))
}

/// The load points of `text`, read as `format`.
pub fn parse(format: RunFileFormat, text: &str) -> Result<Vec<Part>, String> {
    let one = |requests, failed: usize| {
        vec![Part {
            warm_up: Vec::new(),
            requests,
            left_out: (failed > 0).then(|| format!("{failed} failed requests left out")),
        }]
    };
    match format {
        RunFileFormat::Distserve => distserve::parse(text).map(|r| one(r, 0)),
        RunFileFormat::VllmBench => vllm_bench::parse(text).map(|(r, f)| one(r, f)),
        RunFileFormat::Aiperf => aiperf::parse(text).map(|p| vec![p]),
        RunFileFormat::Guidellm => guidellm::parse(text),
        RunFileFormat::InferencePerf => inference_perf::parse(text).map(|(r, f)| one(r, f)),
        RunFileFormat::Lmbench => lmbench::parse(text).map(|(r, f)| one(r, f)),
        RunFileFormat::DecisionLog => decision_log::parse(text).map(|(r, f)| one(r, f)),
        RunFileFormat::Fmperf => Err(
            "field `results`: fmperf's results do not record the prompts' lengths: read them with the requests file the run drew from".into(),
        ),
    }
}

/// The load points of fmperf's results `text`, the prompts' lengths from its requests file
/// `requests`. An error in the requests file is `Err(Err(..))`, one in the results
/// `Err(Ok(..))`, each for its own file's name.
pub fn parse_fmperf(text: &str, requests: &str) -> Result<Vec<Part>, Result<String, String>> {
    let prompts = fmperf::prompts(requests).map_err(Err)?;
    fmperf::parse(text, &prompts).map_err(Ok)
}

/// `error` of the file `name`: `name:3: ...` when it starts with a line, else `name: ...`.
pub fn located(name: &str, error: &str) -> String {
    if error.starts_with(|c: char| c.is_ascii_digit()) {
        format!("{name}:{error}")
    } else {
        format!("{name}: {error}")
    }
}

#[cfg(test)]
mod tests {
    use super::common::request;
    use super::*;

    #[test]
    fn a_located_error_joins_a_line_with_a_colon_and_a_field_with_a_space() {
        assert_eq!(
            located("a.csv", "3: field `x`: bad"),
            "a.csv:3: field `x`: bad"
        );
        assert_eq!(
            located("a.json", "field `x`: bad"),
            "a.json: field `x`: bad"
        );
    }

    #[test]
    fn a_request_in_the_wrong_order_is_refused_by_its_role() {
        assert_eq!(request(1, 1, 2.0, 1.0, 3.0).unwrap_err().0, "first");
        assert_eq!(request(1, 1, 1.0, 2.0, 1.5).unwrap_err().0, "last");
        assert_eq!(request(0, 1, 1.0, 2.0, 3.0).unwrap_err().0, "input");
        assert_eq!(request(1, 1, f64::NAN, 2.0, 3.0).unwrap_err().0, "start");
        assert_eq!(request(1, 1, 1.0, 2.0, 3.0).unwrap().first_token_ts, 2.0);
    }
}

//! Reading engines' Prometheus metrics: the few gauges routers decide on, under the names
//! vLLM (current and older) and SGLang export them.

/// What a scrape says about an engine.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Scraped {
    /// Requests running.
    pub running: u64,
    /// Requests waiting.
    pub waiting: u64,
    /// KV-cache usage, 0 to 1.
    pub kv_usage: f64,
}

/// Running requests: vLLM, then SGLang.
const RUNNING: &[&str] = &["vllm:num_requests_running", "sglang:num_running_reqs"];
/// Waiting requests.
const WAITING: &[&str] = &["vllm:num_requests_waiting", "sglang:num_queue_reqs"];
/// KV usage as a fraction: vLLM's current name, its older name, SGLang's.
const KV_USAGE: &[&str] = &[
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:token_usage",
];

/// Reads the gauges from Prometheus text. Series of one metric with several label sets
/// (several models on one server) add up; KV usage takes the largest. Unknown lines are
/// skipped; a metric that is absent reads 0.
pub fn parse(text: &str) -> Scraped {
    let mut scraped = Scraped::default();
    let mut seen_usage: Option<usize> = None;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series).trim();
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        if !value.is_finite() || value < 0.0 {
            continue;
        }
        if RUNNING.contains(&name) {
            scraped.running += value as u64;
        } else if WAITING.contains(&name) {
            scraped.waiting += value as u64;
        } else if let Some(rank) = KV_USAGE.iter().position(|n| *n == name) {
            // Prefer the current name when an engine exports two.
            match seen_usage {
                Some(best) if best < rank => {}
                Some(best) if best == rank => scraped.kv_usage = scraped.kv_usage.max(value),
                _ => scraped.kv_usage = value,
            }
            seen_usage = Some(seen_usage.map_or(rank, |best| best.min(rank)));
        }
    }
    scraped.kv_usage = scraped.kv_usage.min(1.0);
    scraped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vllm_and_sglang_names() {
        let vllm = "# HELP x\n# TYPE vllm:num_requests_running gauge\n\
            vllm:num_requests_running{model_name=\"a\"} 3\n\
            vllm:num_requests_waiting{model_name=\"a\"} 2.0\n\
            vllm:gpu_cache_usage_perc{model_name=\"a\"} 0.9\n\
            vllm:kv_cache_usage_perc{model_name=\"a\"} 0.25\n";
        assert_eq!(
            parse(vllm),
            Scraped {
                running: 3,
                waiting: 2,
                kv_usage: 0.25
            }
        );
        let sglang =
            "sglang:num_running_reqs{a=\"b\"} 7\nsglang:num_queue_reqs 1\nsglang:token_usage 0.5\n";
        assert_eq!(
            parse(sglang),
            Scraped {
                running: 7,
                waiting: 1,
                kv_usage: 0.5
            }
        );
        assert_eq!(
            parse("garbage\nvllm:num_requests_running NaN\n"),
            Scraped::default()
        );
    }
}

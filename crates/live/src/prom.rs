//! Reading engines' Prometheus metrics: the few gauges routers decide on, under the names
//! vLLM (current and older) and SGLang export them.

/// What a scrape says about an engine.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scraped {
    /// Requests running.
    pub running: u64,
    /// Requests waiting.
    pub waiting: u64,
    /// KV-cache usage, 0 to 1.
    pub kv_usage: f64,
    /// Its LoRA adapters, when it says (vLLM's `vllm:lora_requests_info`).
    pub lora: Option<LoraInfo>,
}

/// What vLLM's `vllm:lora_requests_info` says: a gauge whose labels carry the figures and
/// whose value is the time they were set. vLLM sets a new label set after every step and
/// never removes the old ones, so the series with the latest time is the one that holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoraInfo {
    /// `max_lora`: adapters the engine can hold at once (`--max-loras`).
    pub slots: u32,
    /// `running_lora_adapters`: the adapters of its running requests.
    pub running: Vec<String>,
    /// `waiting_lora_adapters`: the adapters of its waiting requests (an adapter with
    /// requests running too is in both).
    pub waiting: Vec<String>,
}

/// The metric vLLM reports its LoRA adapters in.
const LORA_INFO: &str = "vllm:lora_requests_info";

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
/// (several models on one server) add up, saturating rather than wrapping; KV usage takes
/// the largest. Lines that are not samples are skipped; a metric that is absent reads 0.
pub fn parse(text: &str) -> Scraped {
    let mut scraped = Scraped::default();
    let mut seen_usage: Option<usize> = None;
    let mut latest_lora = f64::NEG_INFINITY;
    for line in text.lines() {
        let Some(Sample {
            name,
            labels,
            value,
        }) = sample(line)
        else {
            continue;
        };
        if !value.is_finite() || value < 0.0 {
            continue;
        }
        if name == LORA_INFO {
            if value >= latest_lora
                && let Some(info) = lora_info(labels)
            {
                latest_lora = value;
                scraped.lora = Some(info);
            }
        } else if RUNNING.contains(&name) {
            // `as` saturates at u64::MAX; the sum saturates too.
            scraped.running = scraped.running.saturating_add(value as u64);
        } else if WAITING.contains(&name) {
            scraped.waiting = scraped.waiting.saturating_add(value as u64);
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

/// The figures of one `vllm:lora_requests_info` series from its labels (as
/// [`Sample::labels`] holds them); `None` when `max_lora` is missing or not a count.
fn lora_info(labels: &str) -> Option<LoraInfo> {
    let mut info = LoraInfo::default();
    let mut slots = None;
    let names = |value: String| -> Vec<String> {
        value
            .split(',')
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect()
    };
    walk_labels(labels, &mut |label, value| match label {
        "max_lora" => slots = unescape(value).parse::<u32>().ok(),
        "running_lora_adapters" => info.running = names(unescape(value)),
        "waiting_lora_adapters" => info.waiting = names(unescape(value)),
        _ => {}
    })?;
    info.slots = slots?;
    Some(info)
}

/// A label value as written (between its quotes) with its escapes undone.
fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// One sample line: the metric's name, its labels as written (from after the `{` through
/// the `}`; empty without) and its value (a timestamp read past).
#[derive(Debug, PartialEq)]
struct Sample<'a> {
    name: &'a str,
    labels: &'a str,
    value: f64,
}

/// Parses a line of the text exposition format (version 0.0.4):
/// `name[{label="value",...}] value [timestamp]`, with label values quoted and escaped
/// (`\\`, `\"`, `\n`), so a `}` or a space inside a label is not the end of it. Comments,
/// blank lines and anything malformed give `None`. The well-known crate for this
/// (`prometheus-parse`) matches names with `\w+`, which refuses the `:` that every vLLM
/// and SGLang metric name has; this follows the format's own grammar instead.
fn sample(line: &str) -> Option<Sample<'_>> {
    let line = line.trim_start();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let bytes = line.as_bytes();
    let name_end = bytes
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b':'))
        .unwrap_or(bytes.len());
    let name = &line[..name_end];
    if name.is_empty() || name.as_bytes()[0].is_ascii_digit() {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = "";
    if let Some(inside) = rest.strip_prefix('{') {
        rest = walk_labels(inside, &mut |_, _| {})?;
        labels = &inside[..inside.len() - rest.len()];
    }
    // Whitespace, the value, and optionally whitespace and an integer timestamp.
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let mut fields = rest.split_ascii_whitespace();
    let value = parse_value(fields.next()?)?;
    if let Some(timestamp) = fields.next() {
        timestamp.parse::<i64>().ok()?;
    }
    if fields.next().is_some() {
        return None;
    }
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// Reads a label set whose opening `{` has been read, showing `visit` each label and its
/// value as written (escapes kept); returns what follows the closing `}`, or `None` if it
/// never closes or is malformed.
fn walk_labels<'a>(mut text: &'a str, visit: &mut dyn FnMut(&'a str, &'a str)) -> Option<&'a str> {
    loop {
        text = text.trim_start();
        if let Some(rest) = text.strip_prefix('}') {
            return Some(rest);
        }
        let eq = text.find('=')?;
        let label = text[..eq].trim();
        if label.is_empty()
            || !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return None;
        }
        text = text[eq + 1..].trim_start().strip_prefix('"')?;
        // The quoted value: up to the first `"` not escaped by a backslash.
        let mut escaped = false;
        let close = text.char_indices().find_map(|(i, c)| match (escaped, c) {
            (true, _) => {
                escaped = false;
                None
            }
            (false, '\\') => {
                escaped = true;
                None
            }
            (false, '"') => Some(i),
            _ => None,
        })?;
        visit(label, &text[..close]);
        text = text[close + 1..].trim_start();
        if let Some(rest) = text.strip_prefix(',') {
            text = rest;
        } else if !text.starts_with('}') {
            return None;
        }
    }
}

/// A sample value: a float, or `+Inf`, `-Inf`, `NaN` as the format spells them.
fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => text.parse().ok(),
    }
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
                kv_usage: 0.25,
                lora: None
            }
        );
        let sglang =
            "sglang:num_running_reqs{a=\"b\"} 7\nsglang:num_queue_reqs 1\nsglang:token_usage 0.5\n";
        assert_eq!(
            parse(sglang),
            Scraped {
                running: 7,
                waiting: 1,
                kv_usage: 0.5,
                lora: None
            }
        );
        assert_eq!(
            parse("garbage\nvllm:num_requests_running NaN\n"),
            Scraped::default()
        );
    }

    #[test]
    fn a_timestamp_is_not_the_value() {
        let text = "vllm:num_requests_running{model_name=\"m\"} 3 1700000000000\n\
            vllm:num_requests_waiting 2 1700000000000\n\
            vllm:kv_cache_usage_perc{model_name=\"m\"} 0.5 -12\n";
        assert_eq!(
            parse(text),
            Scraped {
                running: 3,
                waiting: 2,
                kv_usage: 0.5,
                lora: None
            }
        );
    }

    #[test]
    fn label_values_may_hold_spaces_braces_and_quotes() {
        let text = "vllm:num_requests_running{model_name=\"a } b\",path=\"x\\\"y\\\\\",} 4\n";
        assert_eq!(parse(text).running, 4);
        // Unclosed labels, a missing value, trailing junk: not samples.
        let bad = "vllm:num_requests_running{model_name=\"a} 4\n\
            vllm:num_requests_running\n\
            vllm:num_requests_running 4 5 6\n\
            vllm:num_requests_running 4 notatime\n";
        assert_eq!(parse(bad), Scraped::default());
    }

    #[test]
    fn huge_values_saturate_instead_of_wrapping() {
        let text = "vllm:num_requests_running{m=\"a\"} 1e19\n\
            vllm:num_requests_running{m=\"b\"} 1e19\n\
            vllm:num_requests_waiting 1e300\n\
            vllm:kv_cache_usage_perc 7\n";
        let scraped = parse(text);
        assert_eq!(scraped.running, u64::MAX);
        assert_eq!(scraped.waiting, u64::MAX);
        assert_eq!(scraped.kv_usage, 1.0);
    }

    #[test]
    fn the_latest_lora_series_holds() {
        // As vLLM's `prometheus-client` writes it after two steps: the older label set
        // stays, with the older time.
        let text = "# HELP vllm:lora_requests_info Running stats on lora requests.\n\
            # TYPE vllm:lora_requests_info gauge\n\
            vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"sql,chat\",waiting_lora_adapters=\"\"} 1.7e9\n\
            vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"sql\",waiting_lora_adapters=\"chat,a\\\"b\"} 1.700000001e9\n\
            vllm:lora_requests_info{running_lora_adapters=\"x\"} 1.8e9\n";
        assert_eq!(
            parse(text).lora,
            Some(LoraInfo {
                slots: 2,
                running: vec!["sql".into()],
                waiting: vec!["chat".into(), "a\"b".into()],
            }),
            "the latest series with a `max_lora`"
        );
        assert_eq!(parse("vllm:num_requests_running 1\n").lora, None);
        let bad = "vllm:lora_requests_info{max_lora=\"-1\",running_lora_adapters=\"\"} 1\n";
        assert_eq!(parse(bad).lora, None, "a slot count is a count");
    }

    #[test]
    fn escapes_in_label_values_are_undone() {
        assert_eq!(unescape(r#"a\"b\\c\nd\"#), "a\"b\\c\nd\\");
    }
}

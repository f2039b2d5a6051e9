//! Reports side by side: which metrics a comparison shows, which way each is better, and
//! the table, CSV and sort built from them.
//!
//! It works on finished [`Report`]s only, never on a run, so a table from saved reports
//! (`compare --from`, a merged sweep) is the same table as one from fresh runs. A metric is
//! a dotted path into the report's schema (`timed.ttft.p99`), the same name everywhere: in
//! the table, in `--sort-by`, and as a CSV column.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Report;

/// Which way a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Larger is better (hit ratios, throughput).
    Higher,
    /// Smaller is better (latencies, imbalance, rejections).
    Lower,
}

/// One row of a comparison.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    /// Dotted path into the report (`timed.ttft.p99`).
    pub key: &'static str,
    /// What the table calls it, with its unit.
    pub label: &'static str,
    /// Which way is better.
    pub better: Better,
    /// A count that must be non-zero for the metric to mean anything (a share of
    /// follow-ups needs follow-ups); where it is zero the metric shows as absent.
    pub needs: Option<&'static str>,
}

const fn metric(key: &'static str, label: &'static str, better: Better) -> Metric {
    Metric {
        key,
        label,
        better,
        needs: None,
    }
}

impl Metric {
    /// This metric's value in a report tree, if it has a meaningful one.
    fn of(&self, report: &Value) -> Option<f64> {
        if let Some(count) = self.needs
            && value_at(report, count).is_none_or(|n| n == 0.0)
        {
            return None;
        }
        value_at(report, self.key)
    }
}

/// The rows, in table order. Timed rows appear only when some report is timed.
pub const METRICS: &[Metric] = &[
    metric("hit_ratio", "hit ratio", Better::Higher),
    metric(
        "quality.achieved_over_best",
        "achieved / best hit",
        Better::Higher,
    ),
    metric(
        "quality.kv_optimal_share",
        "kv-optimal share",
        Better::Higher,
    ),
    Metric {
        needs: Some("share_prefix.total"),
        ..metric(
            "quality.followup_precision",
            "follow-up precision",
            Better::Higher,
        )
    },
    metric(
        "nreq.max_over_mean",
        "busiest endpoint / mean",
        Better::Lower,
    ),
    metric("nreq.cv", "requests per endpoint, cv", Better::Lower),
    metric("cache_miss.mean", "cache miss mean", Better::Lower),
    metric("cache_miss.p99", "cache miss p99", Better::Lower),
    metric("rejected", "rejected", Better::Lower),
    metric("timed.ttft.mean", "TTFT mean (ms)", Better::Lower),
    metric("timed.ttft.p50", "TTFT p50 (ms)", Better::Lower),
    metric("timed.ttft.p90", "TTFT p90 (ms)", Better::Lower),
    metric("timed.ttft.p99", "TTFT p99 (ms)", Better::Lower),
    metric("timed.tpot.p50", "TPOT p50 (ms)", Better::Lower),
    metric("timed.e2e.p50", "e2e p50 (ms)", Better::Lower),
    metric("timed.e2e.p99", "e2e p99 (ms)", Better::Lower),
    metric("timed.queue.p99", "queue p99 (ms)", Better::Lower),
    metric("timed.makespan_s", "makespan (s)", Better::Lower),
    metric(
        "timed.throughput.output_tokens_per_s",
        "output tokens/s",
        Better::Higher,
    ),
    metric(
        "timed.running_spread.max_minus_min",
        "running spread, max-min",
        Better::Lower,
    ),
    metric(
        "timed.running_spread.cv",
        "running spread, cv",
        Better::Lower,
    ),
    // SLO attainment (present only when the replay was given targets).
    metric("timed.slo.attainment", "SLO attainment", Better::Higher),
    metric("timed.slo.ttft_met", "met the TTFT target", Better::Higher),
    metric("timed.slo.tpot_met", "met the TPOT target", Better::Higher),
    metric("timed.router_queued", "waited at the router", Better::Lower),
    // A scaled fleet (present only when a scaler sized it).
    metric("timed.scaling.gpu_hours", "GPU-hours", Better::Lower),
    metric(
        "timed.scaling.mean_endpoints",
        "endpoints held, mean",
        Better::Lower,
    ),
    metric(
        "timed.scaling.waited_for_capacity",
        "arrived while starting",
        Better::Lower,
    ),
    metric("timed.too_long", "too long for an engine", Better::Lower),
    // KV tiers (present only when an engine has a host or shared tier).
    metric(
        "timed.tiers.gpu_hit_ratio",
        "GPU-tier hit ratio",
        Better::Higher,
    ),
    metric(
        "timed.tiers.host_hit_ratio",
        "host-tier hit ratio",
        Better::Higher,
    ),
    metric(
        "timed.tiers.shared_hit_ratio",
        "shared-tier hit ratio",
        Better::Higher,
    ),
    metric("timed.tiers.load.p99", "tier load p99 (ms)", Better::Lower),
    // An agentic trace's plays and sessions (present only for such traces).
    metric(
        "timed.agentic.play_ms.mean",
        "play mean (ms)",
        Better::Lower,
    ),
    metric("timed.agentic.play_ms.p90", "play p90 (ms)", Better::Lower),
    metric(
        "timed.agentic.session_hit_ratio.mean",
        "session hit ratio, mean",
        Better::Higher,
    ),
    metric(
        "timed.agentic.on_cached_context_share",
        "turns on cached context",
        Better::Higher,
    ),
    // A disaggregated fleet's pools (present only in such reports).
    metric(
        "timed.pools.prefill.hit_ratio",
        "prefill pool hit ratio",
        Better::Higher,
    ),
    metric(
        "timed.pools.decode.hit_ratio",
        "decode pool hit ratio",
        Better::Higher,
    ),
    metric(
        "timed.pools.ttft_split.prefill_queue.mean",
        "TTFT: prefill queue mean (ms)",
        Better::Lower,
    ),
    metric(
        "timed.pools.ttft_split.prefill.mean",
        "TTFT: prefill mean (ms)",
        Better::Lower,
    ),
    metric(
        "timed.pools.ttft_split.transfer.mean",
        "TTFT: KV transfer mean (ms)",
        Better::Lower,
    ),
    metric(
        "timed.pools.transfer.p99",
        "KV transfer p99 (ms)",
        Better::Lower,
    ),
    metric(
        "timed.pools.ttft_split.decode.mean",
        "TTFT: decode's first step mean (ms)",
        Better::Lower,
    ),
];

/// A metric name that is not in the catalogue.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unknown metric `{key}`; the metrics are: {known}")]
pub struct UnknownMetric {
    /// The name asked for.
    pub key: String,
    /// Every name there is, comma-separated.
    pub known: String,
}

/// The metric named `key`, or an error listing the names there are.
pub fn find_metric(key: &str) -> Result<Metric, UnknownMetric> {
    METRICS
        .iter()
        .copied()
        .find(|m| m.key == key)
        .ok_or_else(|| {
            let names: Vec<&str> = METRICS.iter().map(|m| m.key).collect();
            UnknownMetric {
                key: key.to_owned(),
                known: names.join(", "),
            }
        })
}

/// One policy's report, under the name the comparison shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    /// The policy as the user wrote it (`lcp + num-requests {max_running: 32}`).
    pub label: String,
    /// Its whole report.
    pub report: Report,
}

/// Policies side by side: what `compare` prints as JSON or YAML, and reads back.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Comparison {
    /// In column order.
    pub policies: Vec<Entry>,
}

/// The value at a dotted path of a report, when it is a number.
fn value_at(report: &Value, key: &str) -> Option<f64> {
    let mut node = report;
    for part in key.split('.') {
        node = node.get(part)?;
    }
    node.as_f64()
}

impl Comparison {
    /// Each report as a JSON tree, in column order.
    fn trees(&self) -> Vec<Value> {
        self.policies
            .iter()
            .map(|e| serde_json::to_value(&e.report).expect("a report serialises"))
            .collect()
    }

    /// The rows this comparison has: every metric that some report carries.
    pub fn metrics(&self) -> Vec<Metric> {
        let trees = self.trees();
        METRICS
            .iter()
            .copied()
            .filter(|m| trees.iter().any(|t| m.of(t).is_some()))
            .collect()
    }

    /// Puts the best policy by `metric` first; ties and reports without it keep their order
    /// (those without it last).
    pub fn sort_by(&mut self, metric: Metric) {
        let mut keyed: Vec<(Option<f64>, Entry)> = self
            .trees()
            .iter()
            .map(|t| metric.of(t))
            .zip(std::mem::take(&mut self.policies))
            .collect();
        keyed.sort_by(|(a, _), (b, _)| match (a, b) {
            (Some(a), Some(b)) => match metric.better {
                Better::Higher => b.total_cmp(a),
                Better::Lower => a.total_cmp(b),
            },
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
        self.policies = keyed.into_iter().map(|(_, e)| e).collect();
    }

    /// The table for people: one column per policy, one row per metric, `*` after the best
    /// value of each row (every one of them on a tie; none when all are equal).
    ///
    /// A live run measured at the client (`drive`) is labelled `(measured)`; its latencies
    /// are wall-clock times through HTTP, so when simulated runs stand beside it the best
    /// of a latency row is sought among the simulated ones only.
    pub fn to_table(&self) -> String {
        let trees = self.trees();
        let metrics = self.metrics();
        let measured: Vec<bool> = self
            .policies
            .iter()
            .map(|e| e.report.measured.is_some())
            .collect();
        let mixed = measured.contains(&true) && measured.contains(&false);
        let simulated: Vec<bool> = measured.iter().map(|m| !m).collect();
        let mut cells: Vec<Vec<String>> = Vec::new();
        for metric in &metrics {
            let values: Vec<Option<f64>> = trees.iter().map(|t| metric.of(t)).collect();
            let row = if mixed && metric.key.starts_with("timed.") {
                marked_among(&values, metric.better, &simulated)
            } else {
                marked_cells(&values, metric.better)
            };
            cells.push(row);
        }
        let labels: Vec<String> = self
            .policies
            .iter()
            .zip(&measured)
            .map(|(e, m)| {
                if *m {
                    format!("{} (measured)", e.label)
                } else {
                    e.label.clone()
                }
            })
            .collect();
        let label_width = metrics.iter().map(|m| m.label.len()).max().unwrap_or(6);
        let widths: Vec<usize> = self
            .policies
            .iter()
            .enumerate()
            .map(|(col, _)| {
                cells
                    .iter()
                    .map(|row| row[col].len())
                    .chain([labels[col].len()])
                    .max()
                    .unwrap_or(1)
            })
            .collect();
        let mut out = String::new();
        let _ = write!(out, "{:<label_width$}", "metric");
        for (label, width) in labels.iter().zip(&widths) {
            let _ = write!(out, "  {label:>width$}");
        }
        out.push('\n');
        for (metric, row) in metrics.iter().zip(&cells) {
            let _ = write!(out, "{:<label_width$}", metric.label);
            for (cell, width) in row.iter().zip(&widths) {
                let _ = write!(out, "  {cell:>width$}");
            }
            out.push('\n');
        }
        out.push_str("* best in its row\n");
        if mixed {
            out.push_str(
                "(measured): a live run, latencies at the client through HTTP; the others are simulated, and latency rows star only those\n",
            );
        }
        out
    }

    /// The table for many runs (a sweep): one row per run, one column per headline metric
    /// (its dotted name), `*` after the best of each column.
    pub fn to_run_table(&self) -> String {
        let trees = self.trees();
        let metrics: Vec<Metric> = HEADLINE
            .iter()
            .map(|key| find_metric(key).expect("headline metrics are metrics"))
            .filter(|m| trees.iter().any(|t| m.of(t).is_some()))
            .collect();
        let mut columns: Vec<Vec<String>> = Vec::new();
        for metric in &metrics {
            let values: Vec<Option<f64>> = trees.iter().map(|t| metric.of(t)).collect();
            columns.push(marked_cells(&values, metric.better));
        }
        let label_width = self
            .policies
            .iter()
            .map(|e| e.label.len())
            .max()
            .unwrap_or(3)
            .max(3);
        let widths: Vec<usize> = metrics
            .iter()
            .zip(&columns)
            .map(|(m, cells)| {
                cells
                    .iter()
                    .map(String::len)
                    .chain([m.key.len()])
                    .max()
                    .unwrap_or(1)
            })
            .collect();
        let mut out = format!("{:<label_width$}", "run");
        for (m, width) in metrics.iter().zip(&widths) {
            let _ = write!(out, "  {:>width$}", m.key);
        }
        out.push('\n');
        for (row, entry) in self.policies.iter().enumerate() {
            let _ = write!(out, "{:<label_width$}", entry.label);
            for (cells, width) in columns.iter().zip(&widths) {
                let _ = write!(out, "  {:>width$}", cells[row]);
            }
            out.push('\n');
        }
        out.push_str("* best in its column\n");
        out
    }

    /// One CSV row per policy: `label`, then every number of its report as a column named
    /// by its dotted path (`timed.ttft.p99`, `nreq.counts.3`), the union over all reports
    /// in order of first appearance; empty where a report has no such number.
    pub fn to_csv(&self) -> String {
        let flat: Vec<Vec<(String, String)>> = self
            .trees()
            .iter()
            .map(|t| {
                let mut cells = Vec::new();
                flatten("", t, &mut cells);
                cells
            })
            .collect();
        let mut columns: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for cells in &flat {
            for (key, _) in cells {
                if seen.insert(key.clone()) {
                    columns.push(key.clone());
                }
            }
        }
        let mut out = String::from("label");
        for column in &columns {
            out.push(',');
            out.push_str(&csv_field(column));
        }
        out.push('\n');
        for (entry, cells) in self.policies.iter().zip(&flat) {
            let by_key: std::collections::HashMap<&str, &str> = cells
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            out.push_str(&csv_field(&entry.label));
            for column in &columns {
                out.push(',');
                out.push_str(&csv_field(by_key.get(column.as_str()).unwrap_or(&"")));
            }
            out.push('\n');
        }
        out
    }
}

/// The cells of one row (or column) of values: the same decimals for all, `*` after the
/// best (every one on a tie; none when all are equal), `-` where a report has no value.
fn marked_cells(values: &[Option<f64>], better: Better) -> Vec<String> {
    marked_among(values, better, &vec![true; values.len()])
}

/// [`marked_cells`], the best sought only among the columns `eligible` says.
fn marked_among(values: &[Option<f64>], better: Better, eligible: &[bool]) -> Vec<String> {
    let present = values
        .iter()
        .zip(eligible)
        .filter(|(_, e)| **e)
        .filter_map(|(v, _)| *v);
    let best = match better {
        Better::Higher => present.reduce(f64::max),
        Better::Lower => present.reduce(f64::min),
    };
    let all_equal = values
        .iter()
        .zip(eligible)
        .filter(|(_, e)| **e)
        .filter_map(|(v, _)| *v)
        .all(|v| Some(v) == best);
    let decimals = decimals_of(values.iter().flatten().copied());
    values
        .iter()
        .zip(eligible)
        .map(|(v, eligible)| match v {
            None => "-".to_owned(),
            Some(v) => {
                let mark = if *eligible && !all_equal && Some(*v) == best {
                    "*"
                } else {
                    " "
                };
                format!("{v:.decimals$}{mark}")
            }
        })
        .collect()
}

/// The columns of [`Comparison::to_run_table`], when the reports have them.
const HEADLINE: &[&str] = &[
    "hit_ratio",
    "quality.achieved_over_best",
    "nreq.max_over_mean",
    "timed.ttft.p50",
    "timed.ttft.p99",
    "timed.e2e.p99",
    "timed.makespan_s",
];

/// Decimals for one row, the same for every cell so they line up: none for counts, one
/// for values in the hundreds or more (milliseconds), four for ratios.
fn decimals_of(values: impl Iterator<Item = f64> + Clone) -> usize {
    if values.clone().all(|v| v.fract() == 0.0) {
        0
    } else if values.fold(0.0f64, |m, v| m.max(v.abs())) >= 100.0 {
        1
    } else {
        4
    }
}

/// Every scalar leaf of `node` as (dotted path, text).
fn flatten(prefix: &str, node: &Value, out: &mut Vec<(String, String)>) {
    let join = |key: &str| {
        if prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{prefix}.{key}")
        }
    };
    match node {
        Value::Object(map) => {
            for (key, value) in map {
                flatten(&join(key), value, out);
            }
        }
        Value::Array(items) => {
            for (i, value) in items.iter().enumerate() {
                flatten(&join(&i.to_string()), value, out);
            }
        }
        Value::Null => {}
        Value::Bool(b) => out.push((prefix.to_owned(), b.to_string())),
        Value::Number(n) => out.push((prefix.to_owned(), n.to_string())),
        Value::String(s) => out.push((prefix.to_owned(), s.clone())),
    }
}

/// A CSV field, quoted when it holds a comma, quote or line break (RFC 4180).
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{CacheMiss, LengthUnit, Nreq, Quality, SharePrefix};

    fn report(hit_ratio: f64, max_over_mean: f64) -> Report {
        Report {
            run: None,
            measured: None,
            requests: 10,
            endpoints: 2,
            rejected: 0,
            unit: LengthUnit::Tokens,
            nreq: Nreq {
                counts: vec![5, 5],
                max_over_mean,
                cv: 0.0,
            },
            cache_miss: CacheMiss {
                mean: 1.5,
                std: 0.0,
                p50: 1,
                p90: 2,
                p99: 2,
                max: 2,
            },
            hit_ratio,
            share_prefix: SharePrefix {
                total: 0,
                same_endpoint: 0,
            },
            constrained_decisions: 0,
            quality: Some(Quality::default()),
            replicas: None,
            timed: None,
        }
    }

    fn comparison() -> Comparison {
        Comparison {
            policies: vec![
                Entry {
                    label: "a".into(),
                    report: report(0.25, 1.5),
                },
                Entry {
                    label: "b, with a comma".into(),
                    report: report(0.5, 1.25),
                },
            ],
        }
    }

    #[test]
    fn the_best_value_of_each_row_is_marked_and_equal_rows_are_not() {
        let table = comparison().to_table();
        let row = |label: &str| {
            table
                .lines()
                .find(|l| l.starts_with(label))
                .unwrap()
                .to_owned()
        };
        assert!(row("hit ratio").ends_with("0.5000*"), "{table}");
        assert!(row("hit ratio").contains("0.2500 "), "{table}");
        assert!(row("busiest endpoint").ends_with("1.2500*"), "{table}");
        assert!(!row("rejected").contains('*'), "{table}");
        assert!(
            !table.contains("TTFT"),
            "no timed rows without timed reports"
        );
    }

    #[test]
    fn a_measured_run_is_labelled_and_not_starred_against_simulated_latencies() {
        let mut comparison = comparison();
        let mut live = comparison.policies[0].report.clone();
        live.measured = Some(crate::run::DrivenRun {
            tool_version: "0".into(),
            url: "http://127.0.0.1:1".into(),
            trace: crate::run::TraceRun {
                path: "t.jsonl".into(),
                format: "chat".into(),
                bytes: 1,
                content_hash: "0".into(),
                skipped: Default::default(),
            },
            arrivals: crate::run::ArrivalsRun::Closed { concurrency: 1 },
            endpoints: vec!["a:1".into()],
        });
        let timed = |ttft: f64| {
            let mut t = crate::stats::TimedTally::default();
            t.arrived(0);
            t.finished(crate::stats::Finished {
                arrival_ns: 0,
                scheduled_ns: None,
                first_token_ns: (ttft * 1e6) as u64,
                finish_ns: (ttft * 1e6) as u64 + 1,
                output_tokens: 1,
                prompt_tokens: 1,
                hit_tokens: 0,
            });
            Some(t.report())
        };
        live.timed = timed(1.0);
        for (entry, ttft) in comparison.policies.iter_mut().zip([5.0, 9.0]) {
            entry.report.timed = timed(ttft);
        }
        comparison.policies.push(Entry {
            label: "drive".into(),
            report: live,
        });
        let table = comparison.to_table();
        let header = table.lines().next().unwrap();
        assert!(header.ends_with("drive (measured)"), "{table}");
        let ttft = table
            .lines()
            .find(|l| l.starts_with("TTFT p50"))
            .unwrap_or_else(|| panic!("no TTFT row in\n{table}"));
        let cells: Vec<&str> = ttft.split_whitespace().collect();
        assert!(
            cells[cells.len() - 3].ends_with('*') && !cells[cells.len() - 1].ends_with('*'),
            "the best simulated TTFT is starred, the faster measured one is not: {ttft}"
        );
        assert!(table.contains("(measured): a live run"), "{table}");
    }

    #[test]
    fn sorting_puts_the_best_first_in_the_metrics_direction() {
        let mut c = comparison();
        c.sort_by(find_metric("nreq.max_over_mean").unwrap());
        assert_eq!(c.policies[0].label, "b, with a comma");
        c.sort_by(find_metric("cache_miss.mean").unwrap());
        assert_eq!(
            c.policies[0].label, "b, with a comma",
            "a tie keeps the order"
        );
        let err = find_metric("ttft").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown metric `ttft`; the metrics are: hit_ratio,")
        );
    }

    #[test]
    fn csv_has_one_row_per_policy_with_every_number_of_its_report() {
        let csv = comparison().to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        let header: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(header[0], "label");
        assert!(header.contains(&"nreq.counts.1"));
        assert!(header.contains(&"quality.kv_optimal_share"));
        let hit = header.iter().position(|h| *h == "hit_ratio").unwrap();
        assert!(lines[2].starts_with("\"b, with a comma\","));
        // The quoted label holds one comma, so its fields sit one further along.
        assert_eq!(lines[2].split(',').nth(hit + 1), Some("0.5"));
        assert_eq!(lines[1].split(',').nth(hit), Some("0.25"));
    }
}

//! `routerlab compare` through the real binary and the real plugins: its numbers are
//! `replay`'s, its table marks the best, it reads saved reports back, and its plots hold
//! every policy.

mod support;

use std::path::Path;

use support::{Replay, project_trace, routerlab, scratch_file, texts};

/// `routerlab compare` with these arguments; requires exit 0; returns stdout.
fn compare(args: &[&str]) -> String {
    let mut all = vec!["compare"];
    all.extend_from_slice(args);
    let output = routerlab(&all);
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
    stdout
}

/// `routerlab compare` that must fail with exit 2; returns stderr.
fn refused(args: &[&str]) -> String {
    let mut all = vec!["compare"];
    all.extend_from_slice(args);
    let output = routerlab(&all);
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stdout.is_empty(), "no table on failure: {stdout}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    stderr
}

fn conversation() -> String {
    project_trace("mooncake-conversation.jsonl")
        .to_string_lossy()
        .into_owned()
}

/// Each policy's report in a comparison is the report `replay` prints for it alone, number
/// for number and including its `run` block, in both modes and with two threads.
#[test]
fn every_policy_reports_exactly_what_replay_reports_alone() {
    let trace = conversation();
    for mode in [
        &["--timing", "off"][..],
        &["--timing", "trace", "--engine", "dynamo"],
    ] {
        let mut args = vec![
            "--trace",
            &trace,
            "--endpoints",
            "4",
            "--seed",
            "7",
            "--policy",
            "lcp",
            "--policy",
            "random",
            "--policy",
            "lcp + num-requests {max_running: 16}",
            "--jobs",
            "2",
            "--format",
            "json",
        ];
        args.extend_from_slice(mode);
        let comparison: serde_json::Value = serde_json::from_str(&compare(&args)).unwrap();
        let policies = comparison["policies"].as_array().unwrap();
        assert_eq!(policies.len(), 3);
        let alone = [
            Replay::new("lcp", Path::new(&trace)),
            Replay::new("random", Path::new(&trace)),
            Replay::new("lcp", Path::new(&trace)).args(&[
                "--detector",
                "num-requests",
                "--detector-config",
                "{max_running: 16}",
            ]),
        ];
        for (entry, replay) in policies.iter().zip(alone) {
            let mut flags = vec!["--endpoints", "4", "--seed", "7"];
            flags.extend_from_slice(mode);
            let report = replay.args(&flags).report();
            assert_eq!(entry["report"], report, "{}", entry["label"]);
        }
    }
}

#[test]
fn the_table_has_a_column_per_policy_and_marks_the_best_sorted_on_request() {
    let trace = conversation();
    let table = compare(&[
        "--trace",
        &trace,
        "--endpoints",
        "4",
        "--policy",
        "round-robin",
        "--policy",
        "lcp",
        "--sort-by",
        "nreq.max_over_mean",
    ]);
    let header = table.lines().next().unwrap();
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(columns, ["metric", "round-robin", "lcp"], "{table}");
    let busiest = table
        .lines()
        .find(|l| l.starts_with("busiest endpoint / mean"))
        .unwrap();
    let cells: Vec<&str> = busiest.split_whitespace().collect();
    assert!(cells[cells.len() - 2].ends_with('*'), "{table}");
    assert!(!cells[cells.len() - 1].ends_with('*'), "{table}");

    let sorted = compare(&[
        "--trace",
        &trace,
        "--endpoints",
        "4",
        "--policy",
        "round-robin",
        "--policy",
        "lcp",
        "--sort-by",
        "hit_ratio",
    ]);
    let columns: Vec<&str> = sorted.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(columns, ["metric", "lcp", "round-robin"], "{sorted}");
}

#[test]
fn saved_reports_give_the_same_table_and_csv_has_a_row_per_policy() {
    let trace = conversation();
    let run = |matcher: &str| {
        Replay::new(matcher, Path::new(&trace))
            .args(&["--endpoints", "4", "--format", "json"])
            .stdout()
    };
    let a = scratch_file("compare-lcp.json", &run("lcp"));
    let b = scratch_file("compare-random.json", &run("random"));
    let fresh = compare(&[
        "--trace",
        &trace,
        "--endpoints",
        "4",
        "--policy",
        "lcp",
        "--policy",
        "random",
    ]);
    let saved = compare(&["--from", &a.to_string_lossy(), &b.to_string_lossy()]);
    assert_eq!(fresh, saved);

    let csv = compare(&[
        "--from",
        &a.to_string_lossy(),
        &b.to_string_lossy(),
        "--format",
        "csv",
    ]);
    let rows = csv_records(&csv);
    assert_eq!(rows.len(), 3, "{csv}");
    assert_eq!(rows[0][0], "label");
    assert!(rows.iter().all(|r| r.len() == rows[0].len()), "{csv}");
    let column = |name: &str| rows[0].iter().position(|c| c == name).expect(name);
    assert_eq!(
        (rows[1][0].as_str(), rows[2][0].as_str()),
        ("lcp", "random")
    );
    assert_eq!(rows[1][column("run.matcher.config")], "seed: 0\n");
    let kv = column("quality.kv_optimal_share");
    assert_eq!(
        rows[1][kv], "1.0",
        "lcp always picks the longest cached prefix"
    );
}

/// RFC 4180 records: fields split on commas outside quotes, `""` an escaped quote.
fn csv_records(text: &str) -> Vec<Vec<String>> {
    let (mut rows, mut row, mut field) = (Vec::new(), Vec::new(), String::new());
    let (mut quoted, mut chars) = (false, text.chars().peekable());
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    rows
}

#[test]
fn bad_policies_and_settings_are_refused_before_anything_runs() {
    let trace = conversation();
    let err = refused(&["--trace", &trace, "--policy", "lcp", "--policy", "lcp + "]);
    assert!(
        err.contains("policy `lcp + `: expected a detector name after `+` at character 7"),
        "{err}"
    );
    let err = refused(&["--trace", &trace, "--policy", "lcp"]);
    assert!(err.contains("two or more policies (got 1)"), "{err}");
    let err = refused(&["--trace", &trace, "--policy", "lcp", "--policy", "lcp"]);
    assert!(err.contains("policy `lcp` is given twice"), "{err}");
    let err = refused(&[
        "--trace",
        &trace,
        "--policy",
        "lcp",
        "--policy",
        "no-such-matcher",
    ]);
    assert!(
        err.starts_with("error: policy `no-such-matcher`: "),
        "{err}"
    );
    let err = refused(&[
        "--trace",
        &trace,
        "--policy",
        "lcp",
        "--policy",
        "random",
        "--sort-by",
        "ttft",
    ]);
    assert!(err.contains("unknown metric `ttft`"), "{err}");
    // compare has no --matcher: its policies come from --policy (clap refuses the flag).
    let output = routerlab(&[
        "compare",
        "--trace",
        &trace,
        "--matcher",
        "lcp",
        "--policy",
        "random",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(texts(&output).1.contains("unexpected argument '--matcher'"));
    // An experiment file's own `matcher` (a replay's, or recommend's winner) is compared
    // first, beside each --policy; given again as a --policy it is a duplicate.
    let file = scratch_file("one-policy.yaml", b"matcher: lcp\n");
    let file = file.to_string_lossy();
    let own = ["--trace", &trace, "--config", &file, "--policy", "lcp"];
    let err = refused(&own);
    assert!(err.contains("policy `lcp` is given twice"), "{err}");
    let mut args = vec!["compare"];
    args.extend_from_slice(&own[..5]);
    args.push("random");
    let output = routerlab(&args);
    let (table, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    let head: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(head, ["metric", "lcp", "random"], "{table}");
    let config = scratch_file("config-only.yaml", b"matcher_config: {seed: 1}\n");
    let err = refused(&[
        "--trace",
        &trace,
        "--config",
        &config.to_string_lossy(),
        "--policy",
        "lcp",
        "--policy",
        "random",
    ]);
    assert!(err.contains("--matcher-config without a matcher"), "{err}");
}

/// With latency targets, each report judges its requests by them, and `compare` ranks the
/// policies by the share that met both; the targets are checked.
#[test]
fn slo_attainment_is_reported_and_compared() {
    let trace = project_trace("chat.jsonl").to_string_lossy().into_owned();
    let common = [
        "--trace",
        &trace,
        "--timing",
        "trace",
        "--rate",
        "40",
        "--endpoints",
        "4",
        "--slo-ttft-ms",
        "40",
        "--slo-tpot-ms",
        "10",
    ];
    let mut args = common.to_vec();
    args.extend([
        "--policy",
        "round-robin",
        "--policy",
        "lcp",
        "--format",
        "json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&compare(&args)).unwrap();
    let policies = json["policies"].as_array().unwrap();
    let slo = |i: usize| &policies[i]["report"]["timed"]["slo"];
    for i in 0..2 {
        let slo = slo(i);
        assert_eq!(slo["ttft_ms"], 40.0);
        assert_eq!(slo["tpot_ms"], 10.0);
        assert_eq!(slo["requests"], 2200);
        let (met, ttft, tpot) = (
            slo["met"].as_u64().unwrap(),
            slo["ttft_met"].as_u64().unwrap(),
            slo["tpot_met"].as_u64().unwrap(),
        );
        assert!(met <= ttft.min(tpot), "{slo}");
        let share = slo["attainment"].as_f64().unwrap();
        assert!((share - met as f64 / 2200.0).abs() < 1e-6, "{slo}");
    }
    // Spreading the load keeps the time per token low; lcp piles the chat on one engine.
    assert!(
        slo(0)["attainment"].as_f64().unwrap() > 0.9
            && slo(1)["attainment"].as_f64().unwrap() < 0.1,
        "{} / {}",
        slo(0),
        slo(1)
    );
    args.truncate(args.len() - 2);
    let table = compare(&args);
    let row = table
        .lines()
        .find(|l| l.starts_with("SLO attainment"))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert!(cells[cells.len() - 2].ends_with('*'), "{table}");
    // The human replay report says it in a line.
    let mut alone = vec!["replay", "--matcher", "round-robin"];
    alone.extend(common);
    let output = routerlab(&alone);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("SLO (TTFT <= 40 ms, TPOT <= 10 ms): ")
            && stdout.contains("of 2200 requests met it"),
        "{stdout}"
    );
    let mut bad = common[..common.len() - 2].to_vec();
    bad.push("--slo-tpot-ms=-1");
    bad.extend(["--policy", "round-robin", "--policy", "lcp"]);
    let err = refused(&bad);
    assert!(err.contains("--slo-tpot-ms must be from 0 to"), "{err}");
}

#[test]
fn an_experiment_file_lists_policies_in_both_forms() {
    let trace = conversation();
    let file = scratch_file(
        "compare-experiment.yaml",
        format!(
            "trace: {trace}\nendpoints: 4\npolicies:\n  - lcp\n  - 'lcp + num-requests {{max_running: 8}}'\n  - matcher: lcp\n    detector: num-requests\n    detector_config: {{max_running: 16}}\n    label: lcp, bounded\n"
        )
        .as_bytes(),
    );
    let table = compare(&["--config", &file.to_string_lossy()]);
    let header = table.lines().next().unwrap();
    assert!(
        header.ends_with("lcp  lcp + num-requests {max_running: 8}  lcp, bounded"),
        "{table}"
    );
}

/// Every SVG parses, and each policy's label and its colour appear in the ones that show
/// policies as series; a time-free comparison draws only the bars.
#[test]
fn plots_hold_a_series_per_policy() {
    let trace = conversation();
    let dir = std::env::temp_dir().join(format!("routerlab-plots-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let policies = ["round-robin", "lcp + num-requests {max_running: 16}"];
    compare(&[
        "--trace",
        &trace,
        "--endpoints",
        "4",
        "--timing",
        "trace",
        "--engine",
        "dynamo",
        "--policy",
        policies[0],
        "--policy",
        policies[1],
        "--plot",
        &dir.to_string_lossy(),
    ]);
    for file in [
        "ttft-cdf.svg",
        "running-per-endpoint.svg",
        "queue.svg",
        "hit-ratios.svg",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect(file);
        let svg = roxmltree::Document::parse(&text).expect(file);
        let texts: Vec<String> = svg
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").trim().to_owned())
            .collect();
        let painted: Vec<String> = svg
            .descendants()
            .flat_map(|n| [n.attribute("stroke"), n.attribute("fill")])
            .flatten()
            .map(str::to_ascii_uppercase)
            .collect();
        for (i, policy) in policies.iter().enumerate() {
            assert!(
                texts.iter().any(|t| t == policy),
                "{file}: no label `{policy}`"
            );
            let colour = routerlab_plot_colour(i);
            assert!(
                painted.iter().any(|p| p == &colour),
                "{file}: nothing drawn in {colour} for `{policy}`"
            );
        }
        let lines = svg
            .descendants()
            .filter(|n| n.has_tag_name("polyline"))
            .count();
        if file != "hit-ratios.svg" {
            assert!(lines >= policies.len(), "{file}: {lines} lines");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);

    let dir = std::env::temp_dir().join(format!("routerlab-plots-tf-{}", std::process::id()));
    let output = routerlab(&[
        "compare",
        "--trace",
        &trace,
        "--policy",
        "lcp",
        "--policy",
        "random",
        "--plot",
        &dir.to_string_lossy(),
    ]);
    assert!(output.status.success());
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["hit-ratios.svg"]);
    assert!(texts(&output).1.contains("only hit-ratios.svg is plotted"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The first two colours of the plot palette, as the SVG writes them.
fn routerlab_plot_colour(index: usize) -> String {
    ["#1F77B4", "#FF7F0E"][index].to_owned()
}

/// A policy named by the path of its library is the same plugin as by its name; and a
/// successful comparison with stderr not a terminal prints nothing there (no progress).
#[test]
fn a_library_path_is_a_policy_and_no_progress_reaches_a_pipe() {
    let trace = conversation();
    let library = std::path::Path::new(env!("CARGO_BIN_EXE_routerlab"))
        .parent()
        .unwrap()
        .join(format!(
            "{}routerlab_lcp{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ));
    let by_path = format!("{}#lcp", library.display());
    let output = routerlab(&[
        "compare", "--trace", &trace, "--policy", "lcp", "--policy", &by_path, "--format", "json",
    ]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stderr, "", "nothing but the result, and that on stdout");
    let comparison: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let policies = comparison["policies"].as_array().unwrap();
    assert_eq!(policies[1]["label"], by_path.as_str());
    let stats = |i: usize| {
        let mut report = policies[i]["report"].clone();
        report.as_object_mut().unwrap().remove("run");
        report
    };
    assert_eq!(stats(0), stats(1));
}

/// `replay --plot` draws the same four files for its one policy.
#[test]
fn replay_plots_its_one_policy() {
    let dir = std::env::temp_dir().join(format!("routerlab-replay-plot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let trace = conversation();
    Replay::new("round-robin", Path::new(&trace))
        .args(&[
            "--timing",
            "trace",
            "--endpoints",
            "2",
            "--plot",
            &dir.to_string_lossy(),
        ])
        .stdout();
    for file in [
        "ttft-cdf.svg",
        "running-per-endpoint.svg",
        "queue.svg",
        "hit-ratios.svg",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect(file);
        let svg = roxmltree::Document::parse(&text).expect(file);
        assert!(
            svg.descendants()
                .any(|n| n.has_tag_name("text") && n.text().map(str::trim) == Some("round-robin")),
            "{file}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The plots a user reads for hot spots: each policy's panel has its own scale (so `lcp`
/// sending a conversation to one endpoint does not flatten round robin's lines), count
/// axes label whole numbers, and the bar chart's axis stops at 1 with its legend under
/// the bars, not over them.
#[test]
fn panels_have_their_own_scale_and_the_legend_stays_off_the_bars() {
    let trace = conversation();
    let dir = std::env::temp_dir().join(format!("routerlab-scales-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    compare(&[
        "--trace",
        &trace,
        "--endpoints",
        "4",
        "--timing",
        "trace",
        "--policy",
        "lcp",
        "--policy",
        "round-robin",
        "--plot",
        &dir.to_string_lossy(),
    ]);
    // (x, y, text) of every text element.
    let texts = |file: &str| -> Vec<(f64, f64, String)> {
        let text = std::fs::read_to_string(dir.join(file)).expect(file);
        let svg = roxmltree::Document::parse(&text).expect(file);
        svg.descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| {
                let at = |a: &str| n.attribute(a).and_then(|v| v.parse().ok()).unwrap_or(0.0);
                (at("x"), at("y"), n.text().unwrap_or("").trim().to_owned())
            })
            .collect()
    };
    for file in ["running-per-endpoint.svg", "queue.svg"] {
        let labels = texts(file);
        // The y-axis labels sit left of each panel: the left column's near x = 40, the
        // right one's near x = 590 (the canvas is 1,100 wide).
        let axis_top = |lo: f64, hi: f64| {
            labels
                .iter()
                .filter(|(x, _, _)| (lo..hi).contains(x))
                .filter_map(|(_, _, t)| t.parse::<f64>().ok())
                .fold(0.0f64, f64::max)
        };
        let (lcp, round_robin) = (axis_top(0.0, 60.0), axis_top(550.0, 610.0));
        assert!(
            lcp > round_robin && round_robin >= 1.0,
            "{file}: lcp's axis reaches {lcp}, round robin's {round_robin}: {labels:?}"
        );
        for (_, _, t) in &labels {
            if let Ok(v) = t.parse::<f64>()
                && v <= 10.0
                && t.contains('.')
            {
                panic!("{file}: a count axis labelled `{t}`");
            }
        }
    }
    let bars = texts("hit-ratios.svg");
    let shares: Vec<f64> = bars.iter().filter_map(|(_, _, t)| t.parse().ok()).collect();
    assert!(
        shares.iter().all(|v| (0.0..=1.0).contains(v)) && shares.contains(&1.0),
        "{shares:?}"
    );
    let group = bars
        .iter()
        .find(|(_, _, t)| t == "hit ratio")
        .expect("group label");
    for policy in ["lcp", "round-robin"] {
        let entry = bars.iter().find(|(_, _, t)| t == policy).expect(policy);
        assert!(
            entry.1 > group.1,
            "{policy}'s legend entry is not under the bars"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

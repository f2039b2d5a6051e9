//! `routerlab recommend` through the binary: a search over fleet size and policy on a real
//! trace, the ranking it prints, and the winner it writes replayed on its own.

mod support;

use serde_json::Value;
use support::{project_trace, routerlab, scratch_file, texts};

/// A space of 64 points: 1 to 16 endpoints, four policies; 90% of requests under 60 ms TTFT.
fn space(name: &str) -> std::path::PathBuf {
    let text = format!(
        "trace: {}\ntiming: trace\nengine: {{preset: dynamo}}\nslo_ttft_ms: 60\n\
         search:\n  endpoints: {{int: [1, 16]}}\n  policy: {{choice: [round-robin, random, dynamo-kv, lcp]}}\n\
         objective: {{goal: least-cost, attainment: 0.9}}\n",
        project_trace("mooncake-sessions.jsonl").display()
    );
    scratch_file(name, text.as_bytes())
}

/// The table's rows: (cost, attainment, the candidate's name).
fn rows(table: &str) -> Vec<(f64, f64, String)> {
    table
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            let name = l.split("  ").last().unwrap().trim().to_owned();
            (cells[1].parse().unwrap(), cells[3].parse().unwrap(), name)
        })
        .collect()
}

#[test]
fn the_grid_winner_is_the_cheapest_fleet_meeting_the_slo_and_replays_alone_to_meet_it() {
    let file = space("grid.yaml");
    let winner = file.with_file_name("winner.yaml");
    let out = routerlab(&[
        "recommend",
        file.to_str().unwrap(),
        "--sampler",
        "grid",
        "--trials",
        "100",
        "--top",
        "64",
        "--winner",
        winner.to_str().unwrap(),
    ]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("64 candidates: 64 ranked on the whole trace"),
        "{stdout}"
    );
    let ranked = rows(&stdout);
    assert_eq!(ranked.len(), 64, "{stdout}");
    let (cost, attainment, name) = ranked[0].clone();
    assert!(attainment >= 0.9, "{stdout}");
    // Every cheaper fleet misses the SLO, and at the winner's cost none attains more.
    for (c, a, n) in &ranked[1..] {
        assert!(
            *c >= cost || *a < 0.9,
            "{n} is cheaper than {name} and meets the SLO"
        );
        assert!(*c != cost || *a <= attainment, "{n} beats {name}");
    }
    assert!(
        ranked.iter().any(|(c, a, _)| *c < cost && *a < 0.9),
        "the SLO binds: {stdout}"
    );

    // TPE finds that winner in half the grid's 64 replays, on every seed tried; drawing
    // uniformly, as many candidates find it less often.
    let found = |sampler: &str| {
        (0..4)
            .filter(|seed| {
                let out = routerlab(&[
                    "recommend",
                    file.to_str().unwrap(),
                    "--sampler",
                    sampler,
                    "--trials",
                    "32",
                    "--search-seed",
                    &seed.to_string(),
                ]);
                assert!(out.status.success(), "{}", texts(&out).1);
                rows(&texts(&out).0)[0].2 == name
            })
            .count()
    };
    let (tpe, random) = (found("tpe"), found("random"));
    assert_eq!(tpe, 4, "TPE found {name} on {tpe} of 4 seeds");
    assert!(random < tpe, "random found {name} on {random} of 4 seeds");

    // The winner file is an experiment file `replay` takes unchanged, and meets the SLO.
    let text = std::fs::read_to_string(&winner).unwrap();
    assert!(
        text.starts_with("# The winner of `routerlab recommend"),
        "{text}"
    );
    let replay = routerlab(&[
        "replay",
        "--config",
        winner.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let (json, stderr) = texts(&replay);
    assert!(replay.status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&json).unwrap();
    let alone = report["timed"]["slo"]["attainment"].as_f64().unwrap();
    assert!(
        (alone - attainment).abs() < 0.0005,
        "{alone} vs {attainment}"
    );
    assert_eq!(report["endpoints"].as_f64().unwrap(), cost);
    // `compare` takes it too: its policy first, beside another.
    let compared = routerlab(&[
        "compare",
        "--config",
        winner.to_str().unwrap(),
        "--policy",
        "random",
    ]);
    assert!(compared.status.success(), "{}", texts(&compared).1);
    let head = texts(&compared).0.lines().next().unwrap().to_owned();
    assert!(head.contains("random"), "{head}");
}

#[test]
fn a_seeded_search_prints_the_same_ranking_twice_and_halving_saves_replays() {
    let file = space("tpe.yaml");
    let run = |extra: &[&str]| {
        let mut args = vec!["recommend", file.to_str().unwrap(), "--trials", "27"];
        args.extend(extra);
        let out = routerlab(&args);
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "{stderr}");
        stdout
    };
    assert_eq!(
        run(&["--search-seed", "3"]),
        run(&["--search-seed", "3", "--jobs", "1"])
    );
    let halved = run(&["--sampler", "random", "--rungs", "3"]);
    // 27 on a ninth, 9 on a third, 3 on the whole trace: 39 replays, 9 whole-trace's worth.
    assert!(
        halved.contains("27 candidates: 3 ranked on the whole trace, 18 stopped on the first 11% of the trace, 6 stopped on the first 33% of the trace; 39 replays, 9.0 whole-trace equivalents"),
        "{halved}"
    );
}

#[test]
fn a_file_without_an_slo_or_with_a_bad_range_is_refused_by_name() {
    let bad = scratch_file(
        "bad.yaml",
        b"trace: x.jsonl\nsearch: {endpoints: {int: [4, 1]}}\npolicy: lcp\nobjective: {goal: least-cost, attainment: 0.9}\nslo_ttft_ms: 1\n",
    );
    let out = routerlab(&["recommend", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = texts(&out).1;
    assert!(
        stderr.contains("search `endpoints`: `int` takes [LO, HI], integers with LO <= HI"),
        "{stderr}"
    );
    let no_slo = scratch_file(
        "no-slo.yaml",
        b"trace: x.jsonl\nsearch: {endpoints: {int: [1, 4]}}\npolicy: lcp\nobjective: {goal: least-cost, attainment: 0.9}\n",
    );
    let out = routerlab(&["recommend", no_slo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        texts(&out)
            .1
            .contains("set `slo_ttft_ms` and/or `slo_tpot_ms`")
    );
}

#[test]
fn a_pareto_search_ranks_its_front_first_and_plots_it() {
    let text = format!(
        "trace: {}\ntiming: trace\nengine: {{preset: dynamo}}\n\
         search:\n  endpoints: {{int: [1, 8]}}\n  policy: {{choice: [round-robin, dynamo-kv]}}\n\
         objective: {{goal: pareto, against: ttft_p90_ms}}\n",
        project_trace("mooncake-sessions.jsonl").display()
    );
    let file = scratch_file("pareto.yaml", text.as_bytes());
    let plots = file.with_file_name("pareto-plots");
    let out = routerlab(&[
        "recommend",
        file.to_str().unwrap(),
        "--sampler",
        "grid",
        "--top",
        "16",
        "--plot",
        plots.to_str().unwrap(),
    ]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    // The rows on the front come first, and none of them is beaten on cost and TTFT p90.
    let body: Vec<&str> = stdout.lines().skip(1).take(16).collect();
    let on_front = body
        .iter()
        .take_while(|l| l.contains("best") || l.contains("on the front"))
        .count();
    assert!(on_front >= 2, "{stdout}");
    assert!(
        body[on_front..]
            .iter()
            .all(|l| l.contains("beaten on cost and the metric")),
        "{stdout}"
    );
    let cells = |l: &str| -> (f64, f64) {
        let c: Vec<&str> = l.split_whitespace().collect();
        (c[1].parse().unwrap(), c[6].parse().unwrap())
    };
    for a in &body[..on_front] {
        for b in &body {
            // The table rounds to the millisecond: better means by more than that.
            let ((ca, pa), (cb, pb)) = (cells(a), cells(b));
            assert!(!(cb <= ca && pb < pa - 1.0), "{b} beats {a}");
        }
    }
    let svg = std::fs::read_to_string(plots.join("front.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("TTFT p90 (ms)") && svg.contains("ranked first")
    );
}

#[test]
fn the_search_aisimulate_ran_has_the_winner_aisimulate_found() {
    // AISimulate 0.13.0.dev (Dynamo stack) ranked the KV router on 4 workers with overlap
    // credit 0.5 and prefill load scale 1.0 first, at 405 ms mean TTFT (BENCHMARKS.md).
    let file = support::workspace_root().join("examples/recommend-arxiv.yaml");
    let out = routerlab(&["recommend", file.to_str().unwrap(), "--sampler", "grid"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("10 candidates: 10 ranked on the whole trace"),
        "{stdout}"
    );
    let first = stdout.lines().nth(1).unwrap();
    assert!(
        first.ends_with(
            r#"best  dynamo-kv {"overlap_score_credit":0.5,"overlap_score_weight":1.0}, endpoints=4"#
        ),
        "{stdout}"
    );
    let mean: f64 = first.split_whitespace().nth(4).unwrap().parse().unwrap();
    assert!(
        (mean - 405.0).abs() / 405.0 < 0.05,
        "{mean} ms against AISimulate's 405"
    );
    // Each later row says how much higher its mean TTFT is.
    assert!(
        stdout.lines().nth(2).unwrap().contains("ms higher"),
        "{stdout}"
    );
}

#[test]
fn shards_merge_into_one_ranking_and_a_wrong_set_is_refused_by_name() {
    let file = space("shards.yaml");
    let f = file.to_str().unwrap();
    let shard = |i: usize, of: usize, extra: &[&str]| {
        let out = file.with_file_name(format!("shard-{i}-of-{of}.jsonl"));
        let part = format!("{i}/{of}");
        let mut args = vec!["recommend", f, "--trials", "12", "--partition", &part, "-o"];
        let path = out.to_str().unwrap().to_owned();
        args.push(&path);
        args.extend(extra);
        let ran = routerlab(&args);
        assert!(ran.status.success(), "{}", texts(&ran).1);
        path
    };
    let (a, b) = (shard(1, 2, &[]), shard(2, 2, &[]));
    let merge = |files: &[&str], extra: &[&str]| {
        let mut args = vec!["recommend", f, "--trials", "12"];
        args.extend(extra);
        args.push("--merge");
        args.extend(files);
        routerlab(&args)
    };
    let merged = merge(&[&a, &b], &[]);
    let (table, stderr) = texts(&merged);
    assert!(merged.status.success(), "{stderr}");
    assert!(table.contains("12 candidates:"), "{table}");
    // The same shards in the other order rank the same.
    assert_eq!(texts(&merge(&[&b, &a], &[])).0, table);
    for (files, extra, why) in [
        (vec![a.as_str()], vec![], "shards missing: 2 of 2"),
        (vec![a.as_str(), a.as_str()], vec![], "shard 1 is also"),
        (
            vec![a.as_str(), b.as_str()],
            vec!["--search-seed", "9"],
            "from another search",
        ),
    ] {
        let out = merge(&files, &extra);
        assert_eq!(out.status.code(), Some(2));
        let stderr = texts(&out).1;
        assert!(stderr.contains(why), "{why}: {stderr}");
    }
    let other = shard(1, 3, &[]);
    let out = merge(&[&other, &b], &[]);
    assert!(
        texts(&out).1.contains("other partitions"),
        "{}",
        texts(&out).1
    );
}

/// A fleet a scaler sizes costs the GPUs it held on average (its replay's
/// `timed.scaling.mean_endpoints`), not its ceiling, so it can win against a fixed fleet.
#[test]
fn a_scaled_candidate_costs_the_gpus_it_held_on_average() {
    let trace = project_trace("mooncake-sessions.jsonl");
    let text = format!(
        "trace: {}\ntiming: trace\nengine: {{preset: dynamo}}\nslo_ttft_ms: 60\npolicy: round-robin\n\
         search:\n  variant: {{choice: [{{endpoints: 4}}, {{endpoints: 1, scaler: hpa, max_gpus: 8, startup_s: 0, scaler_config: {{metric: inflight, target: 2}}}}]}}\n\
         objective: {{goal: lowest, metric: ttft_mean_ms}}\n",
        trace.display()
    );
    let file = scratch_file("scaled-variant.yaml", text.as_bytes());
    let out = routerlab(&["recommend", file.to_str().unwrap(), "--sampler", "grid"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let scaled = rows(&stdout)
        .into_iter()
        .find(|(_, _, name)| name.contains("scaler"))
        .unwrap_or_else(|| panic!("{stdout}"));
    let report = support::Replay::new("round-robin", &trace)
        .args(&[
            "--timing",
            "trace",
            "--engine",
            "dynamo",
            "--slo-ttft-ms",
            "60",
            "--endpoints",
            "1",
            "--scaler",
            "hpa",
            "--max-gpus",
            "8",
            "--scaler-config",
            "{metric: inflight, target: 2}",
        ])
        .report();
    let mean = report["timed"]["scaling"]["mean_endpoints"]
        .as_f64()
        .unwrap();
    assert!(mean > 1.0 && mean < 8.0, "{mean}");
    assert!(
        (scaled.0 - mean).abs() < 0.006,
        "{} against {mean}: {stdout}",
        scaled.0
    );
}

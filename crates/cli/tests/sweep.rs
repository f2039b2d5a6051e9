//! `routerlab sweep` and `merge` through the real binary: three shards run as separate
//! processes merge into exactly the whole sweep's table, CSV and plots, and a missing or
//! repeated shard is named.

mod support;

use std::path::{Path, PathBuf};

use support::{project_trace, routerlab, texts};

/// A scratch directory of its own for one test.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("routerlab-sweep-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A sweep file over the conversation trace: 2 policies x 2 endpoint counts, timed.
fn sweep_file(dir: &Path) -> PathBuf {
    let path = dir.join("sweep.yaml");
    let text = format!(
        "trace: {}\ntiming: trace\nengine: {{preset: dynamo}}\ngrid:\n  policy: [round-robin, 'lcp + num-requests {{max_running: 16}}']\n  endpoints: [2, 4]\n",
        project_trace("mooncake-conversation.jsonl").display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `routerlab ARGS` in `dir`, requires exit 0, returns stdout.
fn ok(dir: &Path, args: &[&str]) -> Vec<u8> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_routerlab"))
        .args(args)
        .current_dir(dir)
        .env_remove("ROUTERLAB_PLUGIN_PATH")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}: {}",
        texts(&output).1
    );
    output.stdout
}

#[test]
fn three_shards_merge_into_the_whole_sweep_byte_for_byte() {
    let dir = scratch_dir("shards");
    let sweep = sweep_file(&dir);
    let sweep = sweep.to_str().unwrap();
    let whole_table = ok(&dir, &["sweep", sweep, "--plot", "whole"]);
    let whole_csv = ok(&dir, &["sweep", sweep, "--format", "csv"]);
    for i in 1..=3 {
        let shard = format!("{i}/3");
        let out = format!("shard-{i}.jsonl");
        ok(
            &dir,
            &["sweep", sweep, "--partition", &shard, "--output", &out],
        );
    }
    let shards = ["shard-1.jsonl", "shard-2.jsonl", "shard-3.jsonl"];
    // Count dealing over 4 runs: 2, 1 and 1 lines.
    let lines: Vec<usize> = shards
        .iter()
        .map(|s| {
            std::fs::read_to_string(dir.join(s))
                .unwrap()
                .lines()
                .count()
        })
        .collect();
    assert_eq!(lines, [2, 1, 1]);

    let mut merge = vec!["merge"];
    merge.extend_from_slice(&shards);
    let merged_table = ok(&dir, &[&merge[..], &["--plot", "merged"]].concat());
    let merged_csv = ok(&dir, &[&merge[..], &["--format", "csv"]].concat());
    assert_eq!(
        String::from_utf8_lossy(&merged_table),
        String::from_utf8_lossy(&whole_table)
    );
    assert_eq!(merged_csv, whole_csv);
    let table = String::from_utf8(whole_table).unwrap();
    assert_eq!(table.lines().count(), 1 + 4 + 1, "{table}");
    assert!(table.contains("policy=round-robin, endpoints=4"), "{table}");
    for plot in [
        "ttft-cdf.svg",
        "running-per-endpoint.svg",
        "queue.svg",
        "hit-ratios.svg",
    ] {
        let whole = std::fs::read(dir.join("whole").join(plot)).unwrap();
        let merged = std::fs::read(dir.join("merged").join(plot)).unwrap();
        assert!(whole == merged, "{plot} differs");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_or_repeated_shard_is_named() {
    let dir = scratch_dir("missing");
    let sweep = sweep_file(&dir);
    let sweep = sweep.to_str().unwrap();
    for i in 1..=3 {
        let shard = format!("{i}/3");
        let out = format!("s{i}.jsonl");
        ok(&dir, &["sweep", sweep, "--partition", &shard, "-o", &out]);
    }
    let merge = |files: &[&str]| {
        let mut args = vec!["merge"];
        args.extend_from_slice(files);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_routerlab"))
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let (stdout, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stdout.is_empty());
        stderr
    };
    let err = merge(&["s1.jsonl", "s3.jsonl"]);
    assert!(
        err.contains("shard 2/3 missing: no file holds run 1 (of 4 runs)"),
        "{err}"
    );
    let err = merge(&["s1.jsonl", "s2.jsonl", "s3.jsonl", "s2.jsonl"]);
    assert!(
        err.contains("is in both s2.jsonl and s2.jsonl: shard 2/3 was given twice"),
        "{err}"
    );

    // An output that is the sweep file itself is refused, and the file survives.
    let before = std::fs::read(sweep).unwrap();
    let output = routerlab(&["sweep", sweep, "--partition", "1/3", "-o", sweep]);
    assert_eq!(output.status.code(), Some(2));
    assert!(texts(&output).1.contains("is the same file as the input"));
    assert_eq!(std::fs::read(sweep).unwrap(), before);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_field_of_a_shard_line_is_checked_before_it_is_used() {
    let dir = scratch_dir("tampered");
    let sweep = sweep_file(&dir);
    ok(
        &dir,
        &[
            "sweep",
            sweep.to_str().unwrap(),
            "--partition",
            "1/1",
            "-o",
            "all.jsonl",
        ],
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("all.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    // Each case edits the first line's `sweep` block and keeps the rest.
    let cases: [(&str, serde_json::Value, &str); 5] = [
        (
            "index",
            4.into(),
            "`sweep.index` 4 is outside the sweep's 4 runs",
        ),
        (
            "runs",
            1_000_000_000_000u64.into(),
            "`sweep.runs` 1000000000000 is not 1 to 100000",
        ),
        (
            "shard",
            "0/0".into(),
            "`sweep.shard` `0/0` is not I/N with 1 <= I <= N",
        ),
        ("shard", "3/2".into(), "`sweep.shard` `3/2` is not I/N"),
        (
            "shard",
            "2/2".into(),
            "run 0 is not dealt to shard 2/2 by count dealing",
        ),
    ];
    for (key, value, expected) in cases {
        let mut edited = lines.clone();
        edited[0]["sweep"][key] = value;
        let text: String = edited.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(dir.join("edited.jsonl"), text).unwrap();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_routerlab"))
            .args(["merge", "edited.jsonl"])
            .current_dir(&dir)
            .output()
            .unwrap();
        let (stdout, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{key}: {stderr}");
        assert!(stdout.is_empty(), "{key}");
        assert!(
            stderr.contains(&format!("edited.jsonl: line 1: {expected}")),
            "{key}: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

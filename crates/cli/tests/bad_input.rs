//! Every bad-input case gives one line naming file:line and the field, exit code 2, and no
//! report on stdout; `--skip-invalid` instead skips and counts by reason.

mod support;

use support::*;

/// Runs a replay of `contents` and returns (exit code, stderr), asserting nothing reached
/// stdout.
fn replay_fails(name: &str, contents: &[u8], extra: &[&str]) -> (i32, String, String) {
    let path = scratch_file(name, contents);
    let output = Replay::new("lcp", &path).args(extra).run();
    let (stdout, stderr) = texts(&output);
    assert!(
        stdout.is_empty(),
        "no partial report may be printed: {stdout}"
    );
    assert_eq!(stderr.lines().count(), 1, "one-line error: {stderr}");
    (
        output.status.code().unwrap_or(-1),
        stderr.trim_end().to_owned(),
        path.display().to_string(),
    )
}

const GOOD_CHAT: &str = r#"{"id": "a", "prompt": "hello there"}"#;
const GOOD_MOONCAKE: &str =
    r#"{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}"#;

#[test]
fn invalid_json() {
    let (code, err, file) = replay_fails(
        "invalid.jsonl",
        format!("{GOOD_CHAT}\n{{\"id\": 2, \"prompt\": \n").as_bytes(),
        &[],
    );
    assert_eq!(code, 2);
    assert!(
        err.starts_with(&format!("error: {file}:2: invalid JSON: ")),
        "{err}"
    );
}

/// A file in no format at all says so and lists the formats, instead of a JSON parser's
/// complaint about its first byte.
#[test]
fn a_file_in_no_format_lists_the_formats() {
    for (name, contents) in [
        ("prose.txt", &b"hello world\nsecond line\n"[..]),
        ("other.csv", &b"a,b\n1,2\n"[..]),
    ] {
        let (code, err, file) = replay_fails(name, contents, &[]);
        assert_eq!(code, 2);
        assert!(
            err.starts_with(&format!(
                "error: {file}:1: not a trace format routerlab reads"
            )) && err.contains("chat, mooncake and token-ids (JSON lines), agentic-mooncake (a header line, then JSON lines), weka (JSON sessions, or a directory of them), azure-csv and burstgpt")
                && err.contains("--trace-format"),
            "{err}"
        );
    }
}

/// A plugin name with a typo gets the nearest names on the search path.
#[test]
fn a_mistyped_plugin_name_gets_the_nearest_ones() {
    let trace = scratch_file("typo.jsonl", format!("{GOOD_CHAT}\n").as_bytes());
    for (typed, meant) in [
        ("lpc", "`lcp`"),
        ("simhsh", "`simhash`"),
        ("round-robbin", "`round-robin`"),
    ] {
        let output = Replay::new(typed, &trace).run();
        let (_, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("plugin `{typed}` not found (did you mean {meant}")),
            "{stderr}"
        );
    }
    let output = Replay::new("zzzzzzzz", &trace).run();
    assert!(
        !texts(&output).1.contains("did you mean"),
        "{}",
        texts(&output).1
    );
}

/// The experiment file's keys are listed whole after an unknown one.
#[test]
fn an_unknown_experiment_key_lists_every_key() {
    let trace = project_trace("chat.jsonl");
    let config = scratch_file(
        "unknown-key.yaml",
        format!("matcher: lcp\ntrace: {}\nbogus_key: 1\n", trace.display()).as_bytes(),
    );
    let output = routerlab(&["replay", "--config", config.to_str().unwrap()]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown field `bogus_key`")
            && stderr.contains("`policies`")
            && !stderr.contains("more characters"),
        "{stderr}"
    );
}

#[test]
fn missing_field() {
    let (code, err, file) = replay_fails(
        "missing.jsonl",
        b"{\"timestamp\": 0, \"hash_ids\": [1]}\n",
        &[],
    );
    assert_eq!(code, 2);
    assert_eq!(
        err,
        format!("error: {file}:1: field `input_length`: missing")
    );
    let (code, err, file) = replay_fails("missing-prompt.jsonl", b"{\"id\": 1}\n", &[]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        format!(
            "error: {file}:1: field `prompt`: missing: each line needs `prompt` (string) or `messages` (list)"
        )
    );
}

#[test]
fn mistyped_field() {
    let (code, err, file) = replay_fails(
        "mistyped.jsonl",
        format!("{GOOD_CHAT}\n{{\"prompt\": 42}}\n").as_bytes(),
        &[],
    );
    assert_eq!(code, 2);
    assert_eq!(
        err,
        format!("error: {file}:2: field `prompt`: expected a string, found a number 42")
    );
}

#[test]
fn negative_length() {
    let line = r#"{"timestamp": 0, "input_length": -5, "output_length": 5, "hash_ids": [1]}"#;
    let (code, err, file) = replay_fails(
        "negative.jsonl",
        format!("{GOOD_MOONCAKE}\n{line}\n").as_bytes(),
        &[],
    );
    assert_eq!(code, 2);
    assert_eq!(
        err,
        format!(
            "error: {file}:2: field `input_length`: expected a non-negative integer, found a number -5"
        )
    );
}

#[test]
fn hash_ids_shorter_than_input_length_needs() {
    let line = r#"{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2]}"#;
    let (code, err, file) = replay_fails(
        "short.jsonl",
        format!("{GOOD_MOONCAKE}\n\n{line}\n").as_bytes(),
        &[],
    );
    assert_eq!(code, 2);
    assert_eq!(
        err,
        format!(
            "error: {file}:3: field `hash_ids`: 2 ids, but input_length 1100 needs 3 blocks of 512 tokens \
             (is --trace-block-size right?)"
        )
    );
}

#[test]
fn unknown_parent() {
    let (code, err, file) = replay_fails(
        "parent.jsonl",
        format!("{GOOD_CHAT}\n{{\"id\": \"b\", \"prompt\": \"x\", \"parent\": \"zz\"}}\n")
            .as_bytes(),
        &[],
    );
    assert_eq!(code, 2);
    assert_eq!(
        err,
        format!("error: {file}:2: field `parent`: parent zz is not the id of an earlier request")
    );
}

#[test]
fn duplicate_id() {
    let (code, err, file) = replay_fails(
        "dup.jsonl",
        format!("{GOOD_CHAT}\n{GOOD_CHAT}\n").as_bytes(),
        &[],
    );
    assert_eq!(code, 2);
    assert_eq!(
        err,
        format!("error: {file}:2: field `id`: id a appears twice")
    );
}

#[test]
fn invalid_utf8() {
    let mut bytes = format!("{GOOD_CHAT}\n").into_bytes();
    bytes.extend_from_slice(b"{\"prompt\": \"caf\xe9\"}\n");
    let (code, err, file) = replay_fails("utf8.jsonl", &bytes, &[]);
    assert_eq!(code, 2);
    assert_eq!(err, format!("error: {file}:2: invalid UTF-8 at byte 15"));
}

#[test]
fn empty_file() {
    let (code, err, file) = replay_fails("empty.jsonl", b"", &[]);
    assert_eq!(code, 2);
    assert_eq!(err, format!("error: {file}: trace is empty: no requests"));
    let (code, err, _) = replay_fails("blank.jsonl", b"\n  \n", &[]);
    assert_eq!(code, 2);
    assert!(err.ends_with("trace is empty: no requests"), "{err}");
}

#[test]
fn skip_invalid_counts_by_reason_and_still_reports() {
    let contents = format!(
        "{GOOD_CHAT}\nnot json\n{{\"prompt\": 1}}\n{{\"id\": \"c\", \"prompt\": \"x\", \"parent\": \"nope\"}}\n{{\"id\": \"d\", \"prompt\": \"ok\", \"parent\": \"a\"}}\n"
    );
    let path = scratch_file("skip.jsonl", contents.as_bytes());
    let (report, stderr) = Replay::new("lcp", &path)
        .args(&["--skip-invalid", "--endpoints", "1"])
        .json();
    assert_eq!(
        stderr.trim_end(),
        format!(
            "warning: skipped 3 invalid line(s) of {}: 1 invalid JSON, 1 invalid field, 1 unknown parent",
            path.display()
        )
    );
    assert_eq!(report["requests"], 2);
    assert_eq!(report["run"]["trace"]["skipped"]["invalid JSON"], 1);
    assert_eq!(report["share_prefix"]["total"], 1);
    assert_eq!(report["share_prefix"]["same_endpoint"], 1);
}

#[test]
fn plugin_and_flag_errors_are_one_line_with_exit_2() {
    let chat = project_trace("chat.jsonl");
    let chat = chat.to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &["replay", "--matcher", "nope", "--trace", chat],
            "error: plugin `nope` not found; tried: ",
        ),
        (
            &[
                "replay",
                "--matcher",
                "lcp",
                "--matcher-config",
                "{seed: x}",
                "--trace",
                chat,
            ],
            "create: config rejected: config key `seed`: expected a non-negative integer, found string \"x\"",
        ),
        (
            &[
                "replay",
                "--matcher",
                "lcp",
                "--trace",
                "/nonexistent/trace.jsonl",
            ],
            "error: /nonexistent/trace.jsonl: cannot read trace: ",
        ),
        (
            &["replay", "--trace", chat],
            "error: no matcher: pass --matcher NAME",
        ),
        (
            &[
                "replay",
                "--matcher",
                "lcp",
                "--trace",
                chat,
                "--endpoints",
                "0",
            ],
            "error: --endpoints: expected 1 to 4096 endpoints, found 0",
        ),
    ];
    for (args, expected) in cases {
        let output = routerlab(args);
        let (stdout, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty());
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn experiment_file_errors_name_the_file_and_key() {
    let path = scratch_file("bad-experiment.yaml", b"matcher: lcp\nmatchr_config: {}\n");
    let output = routerlab(&["replay", "--config", path.to_str().unwrap()]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.starts_with(&format!(
            "error: {}: unknown field `matchr_config`",
            path.display()
        )),
        "{stderr}"
    );
}

#[test]
fn skipped_mooncake_lines_leave_parents_consistent() {
    // A duplicate chat_id is skipped; the next request's parent link must still resolve to
    // the right request (positions have no gap).
    let lines = [
        r#"{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1], "chat_id": 1, "parent_chat_id": -1}"#,
        r#"{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [2], "chat_id": 1, "parent_chat_id": -1}"#,
        r#"{"timestamp": 2, "input_length": 20, "output_length": 1, "hash_ids": [1, 3], "chat_id": 2, "parent_chat_id": 1}"#,
    ];
    let path = scratch_file("dup-chat.jsonl", (lines.join("\n") + "\n").as_bytes());
    let (report, stderr) = Replay::new("lcp", &path)
        .args(&["--skip-invalid", "--trace-block-size", "16"])
        .json();
    assert!(stderr.contains("1 duplicate id"), "{stderr}");
    assert_eq!(report["requests"], 2);
    assert_eq!(
        report["share_prefix"],
        serde_json::json!({"total": 1, "same_endpoint": 1})
    );
}

/// Lengths and times past a stated bound are refused by file, line and field before
/// anything is allocated or computed from them, with the number written short: a Weka
/// prompt of 2^63−1 tokens (it aborted on an allocation), a Weka time and agentic times of
/// 1e308 (named as "not an agentic_mooncake v2 request", or with 309 digits).
#[test]
fn lengths_and_times_past_their_bounds_are_named_with_the_bound() {
    let weka =
        std::fs::read_to_string(workspace_root().join("crates/cli/tests/fixtures/weka/a.json"))
            .unwrap();
    let huge_in = weka.replacen("\"in\": 2486", "\"in\": 9223372036854775807", 1);
    let (code, stderr, path) = replay_fails("weka-huge-in.json", huge_in.as_bytes(), &[]);
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        format!(
            "error: {path}:1: field `requests[0].in`: session `fast`: 9223372036854775807 tokens is more than the 16777216 a request may have"
        )
    );
    let far = weka.replacen("\"t\": 0.06", "\"t\": 1e308", 1);
    let (code, stderr, path) = replay_fails("weka-far.json", far.as_bytes(), &[]);
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        format!(
            "error: {path}:1: field `requests[1].t`: session `fast`: 1e308 s is past the simulator's range of 146 years (2^62 ns)"
        )
    );
    let agentic = std::fs::read_to_string(project_trace("agentic-plays.jsonl")).unwrap();
    let lines: Vec<&str> = agentic.lines().take(3).collect();
    let far = format!(
        "{}\n{}\n",
        lines[0],
        lines[1].replace("\"not_before_ms\":4296.483", "\"not_before_ms\":1e308")
    );
    let (code, stderr, _) = replay_fails("agentic-far.jsonl", far.as_bytes(), &[]);
    assert_eq!(code, 2);
    assert!(
        stderr.ends_with(":2: field `not_before_ms`: 1e308 ms is past the simulator's range of 146 years (2^62 ns)"),
        "{stderr}"
    );
    let negative = format!(
        "{}\n{}\n",
        lines[0],
        lines[1].replace("\"not_before_ms\":4296.483", "\"not_before_ms\":-1e300")
    );
    let (_, stderr, _) = replay_fails("agentic-negative.jsonl", negative.as_bytes(), &[]);
    assert!(
        stderr.ends_with("must be milliseconds ≥ 0, not -1e300"),
        "{stderr}"
    );
}

/// A benchmark file's token count of 2^63−1 (it aborted `validate` on an allocation) is
/// refused by file, line and field.
#[test]
fn a_measured_token_count_past_the_bound_is_refused() {
    let run = scratch_run("huge-toks", |requests| {
        requests.replacen(
            "\"input_toks\": 2358",
            "\"input_toks\": 9223372036854775807",
            1,
        )
    });
    let output = routerlab(&["validate", "--fit", &run.to_string_lossy()]);
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: {}/requests.jsonl:1: field `input_toks`: 9223372036854775807 tokens is more than the 16777216 a request may have",
            run.display()
        )
    );
    std::fs::remove_dir_all(&run).unwrap();
}

/// Three slips a new user makes, each answered in one line that says what to do: a key
/// one letter off (the nearest key, not the list of all), a policy's text with a config
/// left unquoted in YAML (it was a serde "untagged enum" message), and a directory given
/// as a trace (read as a Weka corpus, which it said nothing of).
#[test]
fn common_slips_are_answered_with_what_to_do() {
    let trace = project_trace("chat.jsonl");
    let typo = scratch_file(
        "slip-typo.yaml",
        format!(
            "matcher: lcp\ntrace: {}\nmatchr_config: {{}}\n",
            trace.display()
        )
        .as_bytes(),
    );
    let output = routerlab(&["replay", "--config", &typo.to_string_lossy()]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: {}: unknown field `matchr_config`; did you mean `matcher_config`?",
            typo.display()
        )
    );
    let unquoted = scratch_file(
        "slip-unquoted.yaml",
        format!(
            "trace: {}\npolicies:\n  - lcp + max-kv-cache {{threshold: 0.9}}\n",
            trace.display()
        )
        .as_bytes(),
    );
    let output = routerlab(&["compare", "--config", &unquoted.to_string_lossy()]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("a policy written as text with a `{config}` must be quoted"),
        "{stderr}"
    );
    let dir = trace.parent().unwrap().join("llmservingsim");
    let output = Replay::new("lcp", &dir).run();
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("a directory given as a trace is a Weka corpus"),
        "{stderr}"
    );
}

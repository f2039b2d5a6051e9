//! Nothing lost, nothing silently wrong: outputs never replace inputs, and quantities the
//! simulator cannot represent are refused instead of wrapping into a plausible report.

mod support;

use std::path::{Path, PathBuf};

use support::{Replay, crash_fixture, project_trace, routerlab, scratch_file, texts};

/// Asserts a run failed with exit 2, one line on stderr holding `needle`, nothing on stdout.
fn refused(output: &std::process::Output, needle: &str) {
    let (stdout, stderr) = texts(output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(needle), "{stderr}");
}

#[test]
fn an_output_that_is_an_input_is_refused_by_identity_and_the_input_survives() {
    let original = std::fs::read(project_trace("mooncake-small.jsonl")).unwrap();
    let trace = scratch_file("safety-trace.jsonl", &original);
    let link = trace.with_file_name("safety-link.jsonl");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&trace, &link).unwrap();
    for out in [&trace, &link] {
        let output = Replay::new("round-robin", &trace)
            .args(&[
                "--timing",
                "trace",
                "--requests-out",
                &out.to_string_lossy(),
            ])
            .run();
        refused(&output, "is the same file as the input");
        assert_eq!(
            std::fs::read(&trace).unwrap(),
            original,
            "the trace is untouched"
        );
    }
    // The experiment file is an input too.
    let config = scratch_file("safety-experiment.yaml", b"timing: trace\n");
    let output = Replay::new("round-robin", &trace)
        .args(&[
            "--config",
            &config.to_string_lossy(),
            "--requests-out",
            &config.to_string_lossy(),
        ])
        .run();
    refused(&output, "is the same file as the input");
    assert_eq!(std::fs::read(&config).unwrap(), b"timing: trace\n");
}

/// Every file a command reads is an input, whatever flag or key named it: a model config
/// given by `--model-config` or an experiment's `model_config` is never written over by
/// `replay --requests-out`, `snapshot` or `sweep -o`.
#[test]
fn a_model_config_is_an_input_to_every_command_that_writes() {
    let original = std::fs::read(project_trace("models/Llama-3.1-8B.json")).unwrap();
    let model = scratch_file("safety-model.json", &original);
    let model_arg = model.to_string_lossy().into_owned();
    let trace = project_trace("mooncake-small.jsonl");
    let trace_arg = trace.to_string_lossy().into_owned();
    let timed = ["--timing", "trace", "--model-config", model_arg.as_str()];
    let mut replay = timed.to_vec();
    replay.extend(["--requests-out", &model_arg]);
    refused(
        &Replay::new("round-robin", &trace).args(&replay).run(),
        "is the same file as the input",
    );
    let mut snapshot = vec![
        "snapshot",
        &model_arg,
        "--matcher",
        "round-robin",
        "--trace",
        &trace_arg,
    ];
    snapshot.extend(timed);
    refused(&routerlab(&snapshot), "is the same file as the input");
    let sweep = scratch_file(
        "safety-sweep.yaml",
        format!(
            "trace: {trace_arg}\ntiming: trace\nmodel_config: {model_arg}\ngrid:\n  policy: [round-robin]\n"
        )
        .as_bytes(),
    );
    refused(
        &routerlab(&[
            "sweep",
            &sweep.to_string_lossy(),
            "--partition",
            "1/1",
            "-o",
            &model_arg,
        ]),
        "is the same file as the input",
    );
    assert_eq!(
        std::fs::read(&model).unwrap(),
        original,
        "the model config is untouched"
    );
}

/// A measured run given as a directory makes every file in it an input: `validate
/// --engine-out` and `calibrate -o` refuse to write there, before any work, and the run's
/// files survive.
#[test]
fn no_output_is_written_inside_an_input_directory() {
    let source = project_trace("llmservingsim/RTXPRO6000-Llama-3.1-8B-vllm");
    let run = support::scratch_run("safety-run", str::to_owned);
    let run_arg = run.to_string_lossy().into_owned();
    for name in ["requests.jsonl", "timeseries.csv", "engine.yaml"] {
        let out = run.join(name).to_string_lossy().into_owned();
        refused(
            &routerlab(&["validate", "--fit", &run_arg, "--engine-out", &out]),
            "is inside the input directory",
        );
        refused(
            &routerlab(&["calibrate", &run_arg, "-o", &out]),
            "is inside the input directory",
        );
    }
    for name in ["meta.json", "requests.jsonl", "timeseries.csv"] {
        assert_eq!(
            std::fs::read(run.join(name)).unwrap(),
            std::fs::read(source.join(name)).unwrap(),
            "{name} is untouched"
        );
    }
    assert!(!run.join("engine.yaml").exists());
    std::fs::remove_dir_all(&run).unwrap();
}

#[test]
fn a_failed_run_leaves_an_existing_output_as_it_was() {
    let out = scratch_file("safety-out.jsonl", b"previous results\n");
    // The trace has no arrival times, so the timed replay fails after --requests-out was
    // opened: the old file must survive and no partial file may be left beside it.
    let output = Replay::new("round-robin", &project_trace("chat.jsonl"))
        .args(&[
            "--timing",
            "trace",
            "--requests-out",
            &out.to_string_lossy(),
        ])
        .run();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(std::fs::read(&out).unwrap(), b"previous results\n");
    let leftovers = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".partial")
        })
        .count();
    assert_eq!(leftovers, 0);
}

/// Quantities the clock cannot hold, and engine numbers that would make latencies 0,
/// negative or infinite, are refused by name instead of giving a plausible report.
#[test]
fn the_clock_and_the_engine_refuse_what_they_cannot_represent() {
    let small = project_trace("mooncake-small.jsonl");
    let timed = |extra: &[&str]| {
        let mut args = vec!["--timing", "trace"];
        args.extend_from_slice(extra);
        Replay::new("lcp", &small).args(&args).run()
    };
    refused(
        &timed(&["--speedup", "1e-300"]),
        "is beyond the simulator's range of 146 years",
    );
    refused(
        &timed(&["--rate", "1e-9"]),
        "is beyond the simulator's range of 146 years",
    );
    refused(
        &timed(&["--think-time-s", "1e12", "--respect-parents"]),
        "--think-time-s must be from 0 to",
    );
    refused(
        &timed(&["--metrics-interval-ms", "1e30"]),
        "--metrics-interval-ms must be from 0 to",
    );
    for (config, needle) in [
        (
            "{step_time: {model: linear, overhead_ms: .nan, prefill_ms_per_token: 0.1, decode_ms: 1}}",
            "`step_time.overhead_ms` must be a finite number, not NaN",
        ),
        (
            "{step_time: {model: linear, overhead_ms: -1, prefill_ms_per_token: 0.1, decode_ms: 1}}",
            "every step must take a positive time",
        ),
        (
            "{step_time: {model: linear, overhead_ms: 0, prefill_ms_per_token: 0.1, decode_ms: 0}}",
            "gives a decode step 0.000 ms at the least",
        ),
        (
            "{step_time: {model: polynomial, prefill: [1e300, 0, 0], decode: [0, 0, 1]}}",
            "more than an hour",
        ),
    ] {
        refused(&timed(&["--engine-config", config]), needle);
    }
    // The presets themselves (Dynamo's polynomial has a negative term) are valid.
    assert!(timed(&[]).status.success());

    for (name, line) in [
        (
            "mooncake",
            "{\"timestamp\": 2e16, \"input_length\": 10, \"hash_ids\": [2]}",
        ),
        ("chat", "{\"prompt\": \"hi\", \"arrival_s\": 1e300}"),
    ] {
        let trace = scratch_file(
            &format!("clock-{name}.jsonl"),
            format!("{line}\n").as_bytes(),
        );
        let output = Replay::new("lcp", &trace).run();
        refused(&output, "does not fit in 64-bit nanoseconds");
        assert!(texts(&output).1.contains(":1: field `"));
    }
    // Representable in the trace, beyond the clock: refused at its line.
    let far = scratch_file(
        "clock-far.jsonl",
        b"{\"timestamp\": 0, \"input_length\": 10, \"hash_ids\": [1]}\n{\"timestamp\": 5e12, \"input_length\": 10, \"hash_ids\": [2]}\n",
    );
    let output = Replay::new("lcp", &far).args(&["--timing", "trace"]).run();
    refused(&output, "line 2: arrival 5000000000000 ms is beyond");
}

/// Rough edges: a reader that stops early is not an error; a byte-order mark is not part
/// of the first line; contradictory flags are refused.
#[test]
fn a_closed_pipe_a_byte_order_mark_and_contradictory_flags() {
    use std::io::Read as _;
    for args in [&["plugins"][..], &["gen-trace", "--requests", "200000"]] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_routerlab"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 16];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // The pipe is closed now: the rest of the output has nowhere to go.
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }

    let plain = std::fs::read(project_trace("mooncake-small.jsonl")).unwrap();
    let with_bom = scratch_file("bom.jsonl", &[b"\xef\xbb\xbf".as_slice(), &plain].concat());
    let mut report = Replay::new("lcp", &with_bom).report();
    let mut expected = Replay::new("lcp", &project_trace("mooncake-small.jsonl")).report();
    for r in [&mut report, &mut expected] {
        r.as_object_mut().unwrap().remove("run");
    }
    assert_eq!(report, expected);

    let output = Replay::new("lcp", &project_trace("mooncake-small.jsonl"))
        .args(&[
            "--timing",
            "trace",
            "--fail-open",
            "--when-unavailable",
            "reject",
        ])
        .run();
    refused(
        &output,
        "--fail-open and --when-unavailable reject say different things",
    );
}

/// A latency nothing measured is reported as absent (`null`, "no samples"), not as 0 ms:
/// requests of one output token have no time per output token, and requests too long for
/// any engine never finish.
#[test]
fn an_empty_latency_distribution_is_absent_not_zero() {
    let one_token = scratch_file(
        "one-token.jsonl",
        b"{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [1]}\n\
          {\"timestamp\": 5, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [1]}\n",
    );
    let json = |output: &std::process::Output| -> serde_json::Value {
        let (stdout, stderr) = texts(output);
        assert!(output.status.success(), "{stderr}");
        serde_json::from_str(&stdout).expect("a JSON report")
    };
    let report = json(
        &Replay::new("lcp", &one_token)
            .args(&["--timing", "trace", "--format", "json"])
            .run(),
    );
    let timed = &report["timed"];
    assert!(timed["tpot"].is_null(), "{timed}");
    assert!(
        timed["ttft"]["p50"].as_f64().is_some_and(|ms| ms > 0.0),
        "{timed}"
    );
    let human = Replay::new("lcp", &one_token)
        .args(&["--timing", "trace"])
        .run();
    let (stdout, _) = texts(&human);
    let row = stdout
        .lines()
        .find(|l| l.starts_with("tpot"))
        .expect("a tpot row");
    assert!(row.contains("no samples"), "{stdout}");

    // 500 tokens are 32 engine blocks of 16, past an engine of 8 blocks: never finishes.
    let too_long = scratch_file(
        "too-long.jsonl",
        b"{\"timestamp\": 0, \"input_length\": 500, \"output_length\": 4, \"hash_ids\": [1]}\n",
    );
    let report = json(
        &Replay::new("lcp", &too_long)
            .args(&[
                "--timing",
                "trace",
                "--format",
                "json",
                "--engine-config",
                "{num_gpu_blocks: 8, engine_block_size: 16}",
            ])
            .run(),
    );
    let timed = &report["timed"];
    assert_eq!(timed["too_long"], 1, "{timed}");
    for latency in ["ttft", "tpot", "e2e", "queue"] {
        assert!(timed[latency].is_null(), "{latency}: {timed}");
    }
}

/// Every input the fuzz targets found a crash with (`tests/fixtures/fuzz/`, the file's
/// extension names its format) is now read to a clean end or a one-line error, strictly
/// and with `--skip-invalid`.
#[test]
fn inputs_the_fuzzers_crashed_on_are_read_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fuzz");
    let mut found = 0;
    for entry in std::fs::read_dir(&dir).expect("the fuzz fixtures") {
        let path = entry.expect("an entry").path();
        let format = match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => "azure-csv",
            Some("jsonl") => "mooncake",
            other => panic!("{}: no format for extension {other:?}", path.display()),
        };
        found += 1;
        for extra in [&[][..], &["--skip-invalid"][..]] {
            let output = Replay::new("lcp", &path)
                .args(&["--trace-format", format])
                .args(extra)
                .run();
            let (_, stderr) = texts(&output);
            assert!(!stderr.contains("panicked"), "{}: {stderr}", path.display());
            match output.status.code() {
                Some(0) => {}
                Some(2) => assert!(
                    stderr
                        .lines()
                        .any(|l| l.starts_with("error: ") && l.contains(&*path.to_string_lossy())),
                    "{}: {stderr}",
                    path.display()
                ),
                other => panic!("{}: exit {other:?}: {stderr}", path.display()),
            }
        }
    }
    assert!(found > 0, "no fixtures in {}", dir.display());
}

/// A C plugin that crashes the process: one line on stderr naming the plugin, the call and
/// the trace line, and the process still dies of the same signal (exit status 134/139).
#[test]
fn a_crashing_plugin_is_named_and_the_signal_kept() {
    use std::os::unix::process::ExitStatusExt as _;
    let library = crash_fixture("signals");
    let trace = project_trace("mooncake-small.jsonl");
    for (plugin, signal, name) in [("segv", 11, "SIGSEGV"), ("abort", 6, "SIGABRT")] {
        let spec = format!("{}#{plugin}", library.display());
        let output = Replay::new(&spec, &trace).run();
        let (stdout, stderr) = texts(&output);
        assert_eq!(output.status.signal(), Some(signal), "{plugin}: {stderr}");
        assert!(stdout.is_empty());
        assert!(
            stderr.contains(&format!(
                "routerlab: {name}"
            )) && stderr.contains(&format!(
                "in plugin `{plugin}` during `match`, routing the request on trace line 3: the plugin crashed the process"
            )),
            "{plugin}: {stderr}"
        );
    }
    let _ = std::fs::remove_file(&library);
}

/// A mapped trace that shrinks while it is read (another process truncating it; here the
/// `truncate` fixture plugin, on cue) faults on the next read: the report names the file,
/// and the process still dies of SIGBUS. The trace is a scratch copy, 40 times the small
/// trace: longer than the reader may run ahead of the first decision (a few batches of
/// 512), so reading goes on after the truncation whether or not it runs on a thread of its
/// own.
#[test]
fn a_trace_truncated_while_read_is_named() {
    use std::os::unix::process::ExitStatusExt as _;
    let library = crash_fixture("truncate");
    let original = std::fs::read(project_trace("mooncake-small.jsonl")).expect("trace");
    let trace = scratch_file("shrinks.jsonl", &original.repeat(40));
    let spec = format!("{}#truncate", library.display());
    let output = Replay::new(&spec, &trace)
        .args(&["--matcher-config", &format!("path: {}", trace.display())])
        .run();
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.signal(), Some(7), "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("routerlab: SIGBUS")
            && stderr.contains(&format!(
                "trace {} changed size while being read",
                trace.display()
            )),
        "{stderr}"
    );
    let _ = std::fs::remove_file(&library);
}

/// A key given twice is refused the same way in every JSON format, never silently the last.
#[test]
fn a_duplicated_key_is_refused_in_every_format() {
    for (name, line, field) in [
        (
            "dup-mooncake.jsonl",
            "{\"timestamp\": 0, \"input_length\": 10, \"input_length\": 600, \"hash_ids\": [1]}",
            "input_length",
        ),
        (
            "dup-chat.jsonl",
            "{\"id\": 1, \"prompt\": \"a\", \"prompt\": \"b\"}",
            "prompt",
        ),
        (
            "dup-tokens.jsonl",
            "{\"input_tok_ids\": [1, 2], \"input_tok_ids\": [3]}",
            "input_tok_ids",
        ),
    ] {
        let trace = scratch_file(name, format!("{line}\n").as_bytes());
        let output = Replay::new("lcp", &trace).run();
        refused(
            &output,
            &format!(":1: cannot read line: duplicate field `{field}`"),
        );
    }
}

/// Settings that would take a YAML parser minutes, or a message the size of a document,
/// are cut short.
#[test]
fn deep_yaml_fails_fast_and_messages_stay_short() {
    let deep = scratch_file(
        "deep.yaml",
        format!("matcher: {}\n", "[".repeat(100_000)).as_bytes(),
    );
    let output = Replay::new("lcp", &project_trace("chat.jsonl"))
        .args(&["--config", &deep.to_string_lossy()])
        .run();
    // This message comes from the check before parsing; the parser's own would be a type
    // error, after a minute.
    refused(
        &output,
        "deep.yaml: line 1: brackets nest more than 64 deep",
    );
    let long_key = scratch_file(
        "long-key.yaml",
        format!("{}: 1\n", "k".repeat(5000)).as_bytes(),
    );
    let output = Replay::new("lcp", &project_trace("chat.jsonl"))
        .args(&["--config", &long_key.to_string_lossy()])
        .run();
    let stderr = texts(&output).1;
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr.len() < 700, "{} characters", stderr.len());
    assert!(stderr.contains("long-key.yaml: "), "{stderr}");
    assert!(
        !stderr.contains(&"k".repeat(301)),
        "the key is not echoed whole: {stderr}"
    );
}

/// A trace from a pipe (`--trace -`) or a FIFO is streamed, not mistaken for an empty file,
/// and reports the same numbers and content hash as the same bytes in a file.
#[test]
fn a_trace_from_a_pipe_is_read_as_it_comes() {
    use std::io::Write as _;
    let file = project_trace("mooncake-small.jsonl");
    let bytes = std::fs::read(&file).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_routerlab"))
        .args([
            "replay",
            "--matcher",
            "lcp",
            "--trace",
            "-",
            "--format",
            "json",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", texts(&output).1);
    let piped: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let from_file = Replay::new("lcp", &file).report();
    assert_eq!(piped["run"]["trace"]["path"], "-");
    for key in ["bytes", "content_hash"] {
        assert_eq!(
            piped["run"]["trace"][key], from_file["run"]["trace"][key],
            "{key}"
        );
    }
    let strip = |mut r: serde_json::Value| {
        r.as_object_mut().unwrap().remove("run");
        r
    };
    assert_eq!(strip(piped), strip(from_file));
}

/// A plugin library built beside the test binaries.
fn built_library(name: &str) -> PathBuf {
    std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join(format!(
            "{}{name}{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ))
}

#[test]
fn an_output_that_is_a_symlink_writes_its_target_and_stays_a_link() {
    let trace = project_trace("mooncake-small.jsonl");
    let target = scratch_file("link-target.jsonl", b"old\n");
    let link = target.with_file_name("link-to-target.jsonl");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let output = Replay::new("round-robin", &trace)
        .args(&["--requests-out", &link.to_string_lossy()])
        .run();
    assert!(output.status.success(), "{}", texts(&output).1);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link must stay a link"
    );
    let written = std::fs::read_to_string(&target).unwrap();
    assert_eq!(written.lines().count(), 300, "the target holds the records");
    // A link to a name that does not exist yet creates that file.
    let dangling = target.with_file_name("dangling.jsonl");
    let new_target = target.with_file_name("created-through-link.jsonl");
    let _ = std::fs::remove_file(&dangling);
    let _ = std::fs::remove_file(&new_target);
    std::os::unix::fs::symlink(&new_target, &dangling).unwrap();
    let output = routerlab(&[
        "gen-trace",
        "--requests",
        "5",
        "-o",
        &dangling.to_string_lossy(),
    ]);
    assert!(output.status.success(), "{}", texts(&output).1);
    assert!(
        std::fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(&new_target)
            .unwrap()
            .lines()
            .count(),
        5
    );
}

#[test]
fn an_output_that_is_no_regular_file_is_streamed_to_never_renamed_over() {
    let trace = project_trace("mooncake-small.jsonl");
    // `-`, and a link to the process's own standard output (what /dev/stdout is; a
    // scratch link, so a regression could only ever replace the scratch file): the
    // records arrive on stdout, before the report, and the link stays a link.
    let own_stdout = scratch_file("stdout-link", b"");
    std::fs::remove_file(&own_stdout).unwrap();
    std::os::unix::fs::symlink("/proc/self/fd/1", &own_stdout).unwrap();
    for out in ["-", &own_stdout.to_string_lossy()] {
        let output = Replay::new("round-robin", &trace)
            .args(&["--requests-out", out, "--format", "json"])
            .run();
        let (stdout, stderr) = texts(&output);
        assert!(output.status.success(), "{out}: {stderr}");
        let records = stdout.lines().filter(|l| l.starts_with("{\"id\"")).count();
        assert_eq!(records, 300, "{out}");
    }
    assert!(
        std::fs::symlink_metadata(&own_stdout)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link to stdout is still a link"
    );
    assert!(!Path::new("-").exists(), "no file named `-` was written");
    // A FIFO: written through while a reader drains it, and still a FIFO afterwards.
    let fifo = scratch_file("records.fifo", b"");
    std::fs::remove_file(&fifo).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let output = Replay::new("round-robin", &trace)
        .args(&["--requests-out", &fifo.to_string_lossy()])
        .run();
    assert!(output.status.success(), "{}", texts(&output).1);
    assert_eq!(reader.join().unwrap().lines().count(), 300);
    use std::os::unix::fs::FileTypeExt as _;
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

#[test]
fn drive_refuses_to_write_its_records_over_the_trace() {
    let original = std::fs::read(project_trace("mooncake-small.jsonl")).unwrap();
    let trace = scratch_file("drive-input.jsonl", &original);
    // Nothing listens on the URL: the refusal must come before anything is sent.
    let output = routerlab(&[
        "drive",
        "--url",
        "http://127.0.0.1:9",
        "--trace",
        &trace.to_string_lossy(),
        "--concurrency",
        "1",
        "--requests-out",
        &trace.to_string_lossy(),
    ]);
    refused(&output, "is the same file as the input");
    assert_eq!(std::fs::read(&trace).unwrap(), original);
}

#[test]
fn a_plugin_library_loaded_by_path_is_an_input_too() {
    let original = std::fs::read(built_library("routerlab_round_robin")).unwrap();
    // A copy outside the search path, loaded by path.
    let library = scratch_file("librr_copy.so", &original);
    let spec = format!("{}#round-robin", library.display());
    let trace = project_trace("mooncake-small.jsonl");
    let output = Replay::new(&spec, &trace)
        .args(&["--requests-out", &library.to_string_lossy()])
        .run();
    refused(&output, "is the same file as the plugin library");
    assert_eq!(
        std::fs::read(&library).unwrap(),
        original,
        "the library is untouched"
    );
    let sweep = scratch_file(
        "lib-sweep.yaml",
        format!(
            "policy: '{spec}'\ntrace: {}\ngrid:\n  endpoints: [2, 3]\n",
            trace.display()
        )
        .as_bytes(),
    );
    let output = routerlab(&[
        "sweep",
        &sweep.to_string_lossy(),
        "--partition",
        "1/1",
        "--output",
        &library.to_string_lossy(),
    ]);
    refused(&output, "is the same file as the plugin library");
    assert_eq!(
        std::fs::read(&library).unwrap(),
        original,
        "the library is untouched"
    );
}

#[test]
fn an_endless_input_stops_at_the_line_cap() {
    // /dev/zero has no line end: read up to the cap (64 MiB), then a one-line error.
    let output = routerlab(&["inspect", "/dev/zero"]);
    refused(
        &output,
        "/dev/zero:1: the line is longer than 67108864 bytes",
    );
    let output = routerlab(&["inspect", "/dev/zero", "--max-line-bytes", "1000"]);
    refused(&output, "longer than 1000 bytes");
}

/// A plugin library cut short faults inside `dlopen`: the report names the library (no
/// trace is read at all), and the process still dies of the signal.
#[test]
fn a_truncated_plugin_library_is_named_when_it_faults() {
    let whole = std::fs::read(built_library("routerlab_lcp")).unwrap();
    let dir = scratch_file("truncated-lib-dir-marker", b"").with_file_name("truncated-lib");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let library = dir.join("librouterlab_cut.so");
    std::fs::write(&library, &whole[..20_000.min(whole.len() / 4)]).unwrap();
    let output = routerlab(&["plugins", "--path", &dir.to_string_lossy()]);
    let (_, stderr) = texts(&output);
    // A damaged library is bad input, exit 2 as the README says, not a death by SIGBUS.
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "while loading the plugin library {}",
            library.canonicalize().unwrap().display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("trace"), "no trace was read: {stderr}");
}

#[test]
fn a_plugin_call_that_never_returns_ends_the_run_naming_it() {
    let trace = project_trace("mooncake-small.jsonl");
    let spec = support::fixture_plugin("hang-on-match");
    let started = std::time::Instant::now();
    let output = Replay::new(&spec, &trace)
        .args(&["--plugin-timeout-ms", "300"])
        .run();
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty(), "no partial report: {stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(
            "plugin `hang-on-match` did not return from `match_update` within 300 ms, routing the request on trace line 1"
        ),
        "{stderr}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

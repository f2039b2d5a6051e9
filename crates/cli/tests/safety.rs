//! Nothing lost, nothing silently wrong: outputs never replace inputs, and quantities the
//! simulator cannot represent are refused instead of wrapping into a plausible report.

mod support;

use support::{Replay, project_trace, scratch_file, texts};

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

//! `routerlab snapshot`: written, checked unchanged, checked after a policy change (a
//! readable diff, exit 4, `.snap.new` beside it), accepted, checked again.

mod support;

use support::{project_trace, routerlab, scratch_file, texts};

#[test]
fn write_check_change_accept_check() {
    let snap = scratch_file("policy.snap", b"");
    std::fs::remove_file(&snap).unwrap();
    let pending = snap.with_extension("snap.new");
    let trace = project_trace("mooncake-small.jsonl");
    let run = |extra: &[&str]| {
        let mut args = vec!["snapshot", snap.to_str().unwrap()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--matcher", "lcp", "--trace", trace.to_str().unwrap()]);
        args.extend_from_slice(&["--timing", "trace"]);
        routerlab(&args)
    };

    let written = run(&[]);
    assert!(written.status.success(), "{}", texts(&written).1);
    let text = std::fs::read_to_string(&snap).unwrap();
    assert!(
        text.starts_with("---\nsource: routerlab snapshot\nexpression: "),
        "{text}"
    );
    assert!(text.contains("tool_version: '[version]'"), "{text}");
    assert!(
        !text.contains(&*trace.to_string_lossy()),
        "absolute path kept: {text}"
    );

    let same = run(&["--check"]);
    assert!(same.status.success(), "{}", texts(&same).1);
    assert!(!pending.exists());

    let changed = run(&["--check", "--matcher-config", "{seed: 5}"]);
    let (_, stderr) = texts(&changed);
    assert_eq!(changed.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("nreq.counts."), "{stderr}");
    assert!(
        stderr.contains(r#"run.matcher.config: "seed: 0\n" -> "seed: 5\n""#),
        "{stderr}"
    );
    assert!(pending.exists());
    let proposed = std::fs::read_to_string(&pending).unwrap();

    let accepted = routerlab(&["snapshot", snap.to_str().unwrap(), "--accept"]);
    assert!(accepted.status.success(), "{}", texts(&accepted).1);
    assert!(!pending.exists());
    assert_eq!(std::fs::read_to_string(&snap).unwrap(), proposed);

    let again = run(&["--check", "--matcher-config", "{seed: 5}"]);
    assert!(again.status.success(), "{}", texts(&again).1);
}

/// The same inputs spelled differently snapshot alike: the plugin by name or by its
/// library's path, the trace relative or absolute.
#[test]
fn a_snapshot_does_not_depend_on_how_its_inputs_are_spelled() {
    let snap = scratch_file("spelling.snap", b"");
    std::fs::remove_file(&snap).unwrap();
    let absolute = project_trace("mooncake-small.jsonl");
    let library = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(std::path::Path::parent)
        .unwrap()
        .join(format!(
            "{}routerlab_lcp{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ));
    let run = |matcher: &str, trace: &str, check: bool| {
        let mut args = vec!["snapshot", snap.to_str().unwrap()];
        if check {
            args.push("--check");
        }
        args.extend_from_slice(&["--matcher", matcher, "--trace", trace]);
        routerlab(&args)
    };
    let written = run("lcp", "../../traces/mooncake-small.jsonl", false);
    assert!(written.status.success(), "{}", texts(&written).1);
    let text = std::fs::read_to_string(&snap).unwrap();
    assert!(text.contains("path: mooncake-small.jsonl"), "{text}");
    for (matcher, trace) in [
        (
            library.to_string_lossy().into_owned(),
            absolute.to_string_lossy().into_owned(),
        ),
        (
            format!("{}#lcp", library.display()),
            "../../traces/mooncake-small.jsonl".to_owned(),
        ),
    ] {
        let checked = run(&matcher, &trace, true);
        assert!(
            checked.status.success(),
            "{matcher} {trace}: {}",
            texts(&checked).1
        );
    }
}

/// Rounding to the stated digits keeps a last-digit change out of the snapshot: the timed
/// figures are stored with `--digits` significant digits.
#[test]
fn timed_figures_are_stored_rounded() {
    let snap = scratch_file("rounded.snap", b"");
    let trace = project_trace("mooncake-small.jsonl");
    let output = routerlab(&[
        "snapshot",
        snap.to_str().unwrap(),
        "--digits",
        "2",
        "--matcher",
        "lcp",
        "--trace",
        trace.to_str().unwrap(),
        "--timing",
        "trace",
    ]);
    assert!(output.status.success(), "{}", texts(&output).1);
    let text = std::fs::read_to_string(&snap).unwrap();
    let body: serde_yaml::Value =
        serde_yaml::from_str(text.split("\n---\n").nth(1).unwrap()).unwrap();
    let p50 = body["timed"]["ttft"]["p50"].as_f64().unwrap();
    let digits = format!("{p50:e}");
    let mantissa = digits.split('e').next().unwrap().replace(['.', '-'], "");
    assert!(
        mantissa.len() <= 2,
        "{p50} has more than 2 significant digits"
    );
}

/// A comparison's runs snapshot together, each under its label; a change to one policy
/// names it in the diff.
#[test]
fn a_comparison_snapshots_every_policy() {
    let snap = scratch_file("comparison.snap", b"");
    let trace = project_trace("mooncake-small.jsonl");
    let run = |first: &str, check: bool| {
        let mut args = vec!["snapshot", snap.to_str().unwrap()];
        if check {
            args.push("--check");
        }
        args.extend_from_slice(&["--policy", first, "--policy", "round-robin"]);
        args.extend_from_slice(&["--trace", trace.to_str().unwrap(), "--endpoints", "4"]);
        routerlab(&args)
    };
    assert!(run("lcp", false).status.success());
    let text = std::fs::read_to_string(&snap).unwrap();
    let body: serde_yaml::Value =
        serde_yaml::from_str(text.split("\n---\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["policies"][0]["label"], "lcp");
    assert_eq!(body["policies"][1]["label"], "round-robin");
    assert!(run("lcp", true).status.success());
    let changed = run("lcp {seed: 1}", true);
    let (_, stderr) = texts(&changed);
    assert_eq!(changed.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("policies.0.report.nreq.counts."),
        "{stderr}"
    );
    assert!(!stderr.contains("policies.1.report"), "{stderr}");
}

#[test]
fn a_deeply_nested_stored_snapshot_is_refused_at_once() {
    let mut body = "---\nsource: routerlab snapshot\nexpression: \"x\"\n---\nrequests: ".to_owned();
    body.push_str(&"[".repeat(100_000));
    body.push_str(&"]".repeat(100_000));
    body.push('\n');
    let snap = scratch_file("deep.snap", body.as_bytes());
    let trace = project_trace("mooncake-small.jsonl");
    let output = routerlab(&[
        "snapshot",
        snap.to_str().unwrap(),
        "--check",
        "--matcher",
        "lcp",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("deep.snap: body: line 1: brackets nest more than 64 deep"),
        "{stderr}"
    );
}

/// A C author's path, from the guide alone: the example and the header copied into a
/// scratch directory outside the checkout, built with the C compiler, found through
/// `ROUTERLAB_PLUGIN_PATH`, snapshotted, checked, then changed and caught (exit 4).
#[test]
fn a_c_plugin_made_from_the_guide_snapshots_then_checks() {
    let dir = std::env::temp_dir().join(format!("routerlab-c-author-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("include")).unwrap();
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    let root = support::workspace_root();
    std::fs::copy(
        root.join("include/routerlab.h"),
        dir.join("include/routerlab.h"),
    )
    .unwrap();
    let source = std::fs::read_to_string(root.join("examples/c/least_running.c")).unwrap();
    let trace = project_trace("mooncake-small.jsonl");
    let build = |source: &str| {
        std::fs::write(dir.join("least_running.c"), source).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = std::process::Command::new(cc)
            .current_dir(&dir)
            .args([
                "-shared",
                "-fPIC",
                "-O2",
                "-I",
                "include",
                "least_running.c",
            ])
            .args(["-o", "lib/librouterlab_least_running.so"])
            .output()
            .expect("run the C compiler");
        assert!(built.status.success(), "{}", texts(&built).1);
    };
    let snapshot = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_routerlab"))
            .current_dir(&dir)
            .env("ROUTERLAB_PLUGIN_PATH", dir.join("lib"))
            .args([
                "snapshot",
                "least-running.snap",
                "--matcher",
                "least-running",
            ])
            .args(["--endpoints", "4", "--timing", "trace", "--trace"])
            .arg(&trace)
            .args(extra)
            .output()
            .expect("run routerlab")
    };

    build(&source);
    let stored = snapshot(&[]);
    assert!(stored.status.success(), "{}", texts(&stored).1);
    assert!(dir.join("least-running.snap").exists());
    let same = snapshot(&["--check"]);
    assert!(same.status.success(), "{}", texts(&same).1);

    // Ties now go to the last endpoint instead of the first.
    let tie_break = "if (best == NULL || e->running < best->running) best = e;";
    assert!(source.contains(tie_break), "the example changed");
    build(&source.replace(tie_break, &tie_break.replace(" < ", " <= ")));
    let changed = snapshot(&["--check"]);
    let (_, stderr) = texts(&changed);
    assert_eq!(changed.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("nreq.counts."), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

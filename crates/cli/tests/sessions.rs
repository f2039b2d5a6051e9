//! A session's explicit end (ABI 1.6 `ends_session`): a trace line's `session_end`, or
//! `serve`'s `x-session-end` header, lets `vr-sticky-least-loaded` forget the session once
//! its last request completes, as vllm-router's `/finish_session` does.

mod support;

use support::server::{ROUTERLAB, Server};
use support::{Replay, scratch_file, texts};

/// Sessions `a`, `b` and `c` open on three endpoints; `a`'s second request is its last
/// (when `ends`); then session `d` opens.
fn trace(name: &str, ends: bool) -> std::path::PathBuf {
    let end = if ends { r#", "session_end": true"# } else { "" };
    let text = format!(
        r#"{{"prompt": "alpha session opening words", "session": "a", "arrival_s": 0.0, "output_tokens": 2}}
{{"prompt": "bravo session opening words", "session": "b", "arrival_s": 0.0, "output_tokens": 2}}
{{"prompt": "charlie session opening words", "session": "c", "arrival_s": 0.0, "output_tokens": 2}}
{{"prompt": "alpha session opening words and its last turn", "session": "a", "arrival_s": 1.0, "output_tokens": 2{end}}}
{{"prompt": "delta session opening words", "session": "d", "arrival_s": 5.0, "output_tokens": 2}}
"#
    );
    scratch_file(name, text.as_bytes())
}

/// The endpoint of each request of a replay of `trace` (`timed` or time-free).
fn endpoints(trace: &std::path::Path, timed: bool) -> Vec<String> {
    let out = trace.with_extension("out.jsonl");
    let mut args = vec![
        "--endpoints",
        "3",
        "-q",
        "--requests-out",
        out.to_str().unwrap(),
    ];
    if timed {
        args.extend(["--timing", "trace"]);
    }
    Replay::new("vr-sticky-least-loaded", trace)
        .args(&args)
        .stdout();
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            let record: serde_json::Value = serde_json::from_str(l).unwrap();
            record["endpoint"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[test]
fn a_session_ended_by_its_last_request_frees_its_endpoint_for_the_next() {
    let ends = endpoints(&trace("sessions-end.jsonl", true), true);
    assert_eq!(ends[3], ends[0], "a's last request stays with a");
    assert_eq!(ends[4], ends[0], "d takes the endpoint a left: {ends:?}");
    let open = endpoints(&trace("sessions-open.jsonl", false), true);
    assert_ne!(open[4], open[0], "a still holds its endpoint: {open:?}");
    // The time-free replay has no completions: sessions end by their lifetime only.
    let timefree = endpoints(&trace("sessions-end-timefree.jsonl", true), false);
    assert_eq!(timefree, open, "time-free, as though the session went on");
}

#[test]
fn session_end_is_true_or_false() {
    let bad = scratch_file(
        "sessions-bad.jsonl",
        br#"{"prompt": "a", "session": "s", "session_end": "yes"}
"#,
    );
    let output = Replay::new("vr-sticky-least-loaded", &bad).run();
    assert_eq!(output.status.code(), Some(2));
    let stderr = texts(&output).1;
    assert!(
        stderr.contains("sessions-bad.jsonl:1: field `session_end`: expected true or false"),
        "{stderr}"
    );
}

#[test]
fn serve_ends_a_session_on_the_header_of_its_last_request() {
    let engines: Vec<Server> = (0..2)
        .map(|_| ROUTERLAB.start(&["engine", "--instant"]))
        .collect();
    let list: Vec<&str> = engines.iter().map(|e| e.addr.as_str()).collect();
    let router = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &list.join(","),
        "--matcher",
        "vr-sticky-least-loaded",
    ]);
    let send = |session: &str, end: Option<&str>| {
        use std::io::{Read as _, Write as _};
        let body = r#"{"prompt": "hello", "max_tokens": 2}"#;
        let end = end.map_or(String::new(), |v| format!("x-session-end: {v}\r\n"));
        let mut stream = std::net::TcpStream::connect(&router.addr).unwrap();
        write!(
            stream,
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-session-id: {session}\r\n{end}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    };
    let endpoint = |response: &str| {
        response
            .lines()
            .find_map(|l| l.strip_prefix("x-routerlab-endpoint: "))
            .unwrap_or_else(|| panic!("no endpoint in {response}"))
            .trim()
            .to_owned()
    };
    // Three sessions on two endpoints: one endpoint (`busy`) holds two of them.
    let opened: Vec<(&str, String)> = ["a", "b", "c"]
        .into_iter()
        .map(|s| (s, endpoint(&send(s, None))))
        .collect();
    let busy = &opened[2].1;
    let on_busy: Vec<&str> = (opened.iter())
        .filter(|(_, e)| e == busy)
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(on_busy.len(), 2, "{opened:?}");
    // Both end: their last requests stay, and their answers end before the next request.
    for session in on_busy {
        assert_eq!(&endpoint(&send(session, Some("true"))), busy);
    }
    // Had they not ended, `busy` would hold two sessions to the other's one.
    assert_eq!(
        &endpoint(&send("d", None)),
        busy,
        "a new session takes the endpoint they left"
    );
    let bad = send("e", Some("maybe"));
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    assert!(bad.contains("x-session-end: give true or false"), "{bad}");
}

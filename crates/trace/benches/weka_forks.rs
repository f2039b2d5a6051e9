//! Reading a Weka session whose requests all fork from one context (each prompt the shared
//! context plus a block of its own): every request starts a chain of its own, the case
//! that made reading it super-quadratic (2,500 requests 0.8 s, 10,000 31 s). Prints the
//! time to read (lower into the agentic graph and load) sessions of 2,500 to 20,000
//! requests, and each one's ratio to the half-size one (2 is linear, 4 quadratic): once
//! with each fork ending before the next begins (every fork a seam: one chain), once with
//! forks that run 5 s each (hundreds at a time: many streams, each request waiting on
//! many others, so the graph itself grows faster than the session).
//!
//! Run: `cargo bench -p routerlab-trace --bench weka_forks`.

#![allow(clippy::print_stdout)]

use std::time::Instant;

use routerlab_trace::{TraceOptions, TraceReader, Workload};

/// A session of `n` requests: the first the 40-block context, each later one the context
/// and one block of its own, 10 ms apart, each running `api_time` seconds.
fn session(n: usize, api_time: f64) -> String {
    let context: Vec<String> = (1..=40).map(|i| i.to_string()).collect();
    let mut requests = vec![format!(
        r#"{{"type": "s", "t": 0.0, "model": "m", "in": 2560, "out": 100, "hash_ids": [{}], "api_time": 0.05}}"#,
        context.join(", ")
    )];
    for i in 0..n - 1 {
        requests.push(format!(
            r#"{{"type": "s", "t": {}, "model": "m", "in": 2624, "out": 50, "hash_ids": [{}, {}], "api_time": {api_time}}}"#,
            0.1 + i as f64 * 0.01,
            context.join(", "),
            1000 + i
        ));
    }
    format!(
        r#"{{"id": "fork", "block_size": 64, "hash_id_scope": "local", "requests": [{}]}}"#,
        requests.join(", ")
    )
}

fn main() {
    let dir = std::env::temp_dir().join(format!("routerlab-weka-forks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    for (shape, api_time) in [("sequential", 0.005), ("concurrent", 5.0)] {
        println!("{shape} forks");
        let mut previous: Option<f64> = None;
        for n in [2_500, 5_000, 10_000, 20_000] {
            let path = dir.join(format!("fork{n}.json"));
            std::fs::write(&path, session(n, api_time)).expect("the session written");
            let started = Instant::now();
            let reader = TraceReader::open(&path, TraceOptions::default()).expect("a Weka trace");
            let workload = Workload::load(reader, &[]).expect("loaded");
            let seconds = started.elapsed().as_secs_f64();
            assert_eq!(workload.requests.len(), n);
            let ratio = previous.map_or(String::new(), |p| {
                format!("  ({:.1}x the half)", seconds / p)
            });
            println!("{n:>8} requests: {:>8.1} ms{ratio}", seconds * 1e3);
            previous = Some(seconds);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

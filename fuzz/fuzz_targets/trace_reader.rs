//! Any bytes, as a trace of any format (or detected): read to the end or to an error,
//! never a panic or a hang; loaded whole (an agentic trace's dependencies in order); and
//! the summary `inspect` makes of it, when it reads.
#![no_main]

use std::io::Write as _;

use libfuzzer_sys::fuzz_target;
use routerlab_trace::inspect::inspect;
use routerlab_trace::{TraceFormat, TraceOptions, TraceReader, TraceRequest, Workload};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let format = match selector % (TraceFormat::ALL.len() as u8 + 1) {
        0 => None,
        n => Some(TraceFormat::ALL[usize::from(n - 1)]),
    };
    let path = std::env::temp_dir().join(format!("routerlab-fuzz-trace-{}", std::process::id()));
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(body))
        .expect("scratch file");
    let options = |skip_invalid| TraceOptions {
        format,
        block_size: 1 + u32::from(selector >> 4),
        trace_block_size: 1 + u32::from(selector & 0x0f) * 64,
        skip_invalid,
        max_line_bytes: 1 << 20,
    };
    for skip in [false, true] {
        if let Ok(mut reader) = TraceReader::open(&path, options(skip)) {
            let mut request = TraceRequest::default();
            while let Ok(true) = reader.next_into(&mut request) {
                assert_eq!(request.blocks.len(), request.block_ids.len());
            }
        }
    }
    // A whole load: an agentic trace's graph is resolved and checked there.
    if let Ok(reader) = TraceReader::open(&path, options(false)) {
        if let Ok(workload) = Workload::load(reader, &[16]) {
            for (index, request) in workload.requests.iter().enumerate() {
                assert!(request.dependencies.iter().all(|d| d.on < index));
            }
        }
    }
    if let Ok(reader) = TraceReader::open(&path, options(true)) {
        if let Ok(summary) = inspect(reader) {
            assert!(summary.conversation_reuse_ceiling <= summary.reuse_ceiling);
            assert!((0.0..=1.0).contains(&summary.reuse_ceiling));
        }
    }
});

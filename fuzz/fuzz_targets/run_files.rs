//! Measured-run files as benchmark tools write them (DistServe, `vllm bench serve`, AIPerf,
//! GuideLLM, inference-perf, LMBench, fmperf), each read by every reader: errors are fine,
//! panics are not, and whatever is read holds completed requests in arrival order. fmperf's
//! results are read with the same bytes as their requests file, and with prompts of one
//! token for every case a `sample_idx` could draw.
#![no_main]

use libfuzzer_sys::fuzz_target;
use routerlab_calibrate::formats::{self, RunFileFormat};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = formats::detect(text);
    let fmperf = [
        formats::parse_fmperf(text, text).ok(),
        routerlab_calibrate::formats::fmperf::parse(text, &[1; 64]).ok(),
    ];
    let read = RunFileFormat::ALL
        .into_iter()
        .filter_map(|format| formats::parse(format, text).ok())
        .chain(fmperf.into_iter().flatten());
    for parts in read {
        for part in parts {
            assert!(!part.requests.is_empty());
            for pair in part.requests.windows(2) {
                assert!(pair[0].queued_ts <= pair[1].queued_ts);
            }
            for r in &part.requests {
                assert!(r.queued_ts <= r.first_token_ts && r.first_token_ts <= r.last_token_ts);
                assert!(r.input_toks > 0);
            }
        }
    }
});

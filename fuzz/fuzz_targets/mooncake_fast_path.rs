//! Differential: whenever the Mooncake fast path accepts a line, the serde path reads the
//! same values (the fast path may decline anything; then serde alone decides).
#![no_main]

use libfuzzer_sys::fuzz_target;
use routerlab_trace::format::mooncake::both_paths;

fuzz_target!(|data: &[u8]| {
    let (fast, slow) = both_paths(data);
    if let Some(fast) = fast {
        assert_eq!(
            Some(fast),
            slow,
            "the fast path and serde disagree on {data:?}"
        );
    }
});

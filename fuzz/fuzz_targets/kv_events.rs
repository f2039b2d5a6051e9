//! A KV-event batch as an engine's publisher sends it (MessagePack, vLLM's layout): the
//! bytes any process on the network may send `serve --kv-events`. Errors are fine; panics
//! are not.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = routerlab_live::kv_events::decode_batch(data);
});

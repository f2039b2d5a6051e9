//! The plugin host's channel: bytes from the other process, read as a call (what the host
//! reads) and as a reply (what `serve` reads). Errors are fine; panics, hangs and
//! allocations past a frame's limit are not. A frame that decodes writes back as one that
//! decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use routerlab_live::plugin_host::wire::{read_call, read_reply, write_call, write_reply};

fuzz_target!(|data: &[u8]| {
    let mut buf = Vec::new();
    if let Ok(call) = read_call(&mut &data[..], &mut buf) {
        let mut out = Vec::new();
        write_call(&mut out, &call).expect("a call writes");
        let again = read_call(&mut &out[..], &mut buf).expect("a written call reads");
        assert_eq!(call, again);
    }
    if let Ok(reply) = read_reply(&mut &data[..], &mut buf) {
        let mut out = Vec::new();
        write_reply(&mut out, &reply).expect("a reply writes");
        let _ = read_reply(&mut &out[..], &mut buf).expect("a written reply reads");
    }
});

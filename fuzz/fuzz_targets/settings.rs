//! Settings text: a plugin config (parsed strictly, the seed split off) and an experiment
//! file (parsed, then resolved into a run exactly as `replay` does). Errors are fine;
//! panics are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use routerlab_cli::opts::ReplayOpts;
use routerlab_core::PluginConfig;
use routerlab_core::config::split_seed;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = PluginConfig::parse(text) {
        let _ = config.finish();
    }
    let _ = split_seed(text);
    if let Ok(opts) = serde_yaml::from_str::<ReplayOpts>(text) {
        let with_plugin = ReplayOpts {
            matcher: Some("lcp".into()),
            trace: Some("t.jsonl".into()),
            ..opts
        };
        let _ = routerlab_cli::spec::resolve(with_plugin);
    }
});

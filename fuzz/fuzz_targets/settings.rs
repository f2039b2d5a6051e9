//! Settings text: a plugin config (parsed strictly, the seed split off) and an experiment
//! file (parsed, then resolved into a run exactly as `replay` does). Errors are fine;
//! panics are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
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
    if let Ok(layer) = routerlab_experiment::parse_mapping(text) {
        let with_plugin = routerlab_experiment::parse_mapping("{matcher: lcp, trace: t.jsonl}")
            .expect("a mapping");
        let layers = routerlab_experiment::Layers::new().over(layer).over(with_plugin);
        if let Ok(experiment) = layers.experiment() {
            let _ = routerlab_experiment::resolve(&experiment);
            let _ = experiment.serving();
        }
    }
});

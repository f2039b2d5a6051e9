//! `num-requests`: flag an endpoint unavailable when it runs too many requests, the
//! prototype's overload test.
//!
//! An endpoint is unavailable when its running requests are strictly greater than
//! `max_running`.
//!
//! Config keys: `max_running` (default 400, the prototype's threshold).

use routerlab_core::{Detector, Endpoints, PluginConfig};

/// The running-requests detector.
pub struct NumRequests {
    max_running: u64,
}

impl Detector for NumRequests {
    fn create(_name: &str, config: &str) -> Result<Self, String> {
        let mut config = PluginConfig::parse(config)?;
        let max_running = config.u64("max_running", 400)?;
        config.finish()?;
        Ok(NumRequests { max_running })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        for (flag, endpoint) in unavailable.iter_mut().zip(endpoints.iter()) {
            *flag = endpoint.running() > self.max_running;
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector NumRequests {
        name: "num-requests",
        description: "unavailable when running requests > max_running (default 400)",
    },
}

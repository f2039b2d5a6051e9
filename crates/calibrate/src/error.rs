//! What can go wrong between a measured run's path and a fit.

use routerlab_sim::SimError;
use routerlab_trace::TraceError;

/// Why a measured run could not be read, sized or replayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CalibrateError {
    /// A file, a value or a combination of settings is wrong; the message names it.
    #[error("{0}")]
    Input(String),
    /// The workload a run was fed could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The fleet that replays it could not be built.
    #[error(transparent)]
    Sim(#[from] SimError),
}

impl CalibrateError {
    pub(crate) fn input(message: impl Into<String>) -> CalibrateError {
        CalibrateError::Input(message.into())
    }
}

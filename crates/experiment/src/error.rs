//! What is wrong with a run's description.

/// Why a description does not make a run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExperimentError {
    /// A file, a key, a value or a combination of settings is wrong; the message names
    /// the file, and the key by its flag.
    #[error("{0}")]
    Invalid(String),
}

impl ExperimentError {
    pub(crate) fn invalid(message: impl Into<String>) -> ExperimentError {
        ExperimentError::Invalid(message.into())
    }
}

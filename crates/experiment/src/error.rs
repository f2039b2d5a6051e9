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

/// Collapses whitespace (serde's messages span lines) and cuts a quoted document short.
pub fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    // The keys serde lists after an unknown one are ours, not the input: all of them stay.
    let (head, keys) = match line.find(", expected one of ") {
        Some(at) => line.split_at(at),
        None => (line.as_str(), ""),
    };
    // A parser's message may quote the input; a message is not the place for a document.
    const MOST: usize = 300;
    match head.char_indices().nth(MOST) {
        Some((cut, _)) => format!(
            "{}… ({} more characters){keys}",
            &head[..cut],
            head[cut..].chars().count()
        ),
        None => line,
    }
}

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

/// serde's "unknown field `K`, expected one of `a`, `b`, ..." as "unknown field `K`; did
/// you mean `a`?" when one of the keys is near `K` (the list goes: it is long and the
/// nearest says more); `None` when there is none, or no such message.
fn with_suggestion(line: &str) -> Option<String> {
    const UNKNOWN: &str = "unknown field `";
    let at = line.find(UNKNOWN)?;
    let rest = &line[at + UNKNOWN.len()..];
    let unknown = &rest[..rest.find('`')?];
    let list_at = line.find(", expected one of ")?;
    let keys: Vec<&str> = line[list_at..].split('`').skip(1).step_by(2).collect();
    let (nearest, score) = keys
        .iter()
        .map(|k| (*k, strsim::jaro_winkler(unknown, k)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    if score < 0.85 {
        return None;
    }
    let tail = line[list_at..]
        .rfind('`')
        .map_or("", |end| &line[list_at + end + 1..]);
    Some(format!(
        "{}; did you mean `{nearest}`?{tail}",
        &line[..at + UNKNOWN.len() + unknown.len() + 1]
    ))
}

/// Collapses whitespace (serde's messages span lines) and cuts a quoted document short.
pub fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = with_suggestion(&line).unwrap_or(line);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_near_a_known_one_is_answered_with_it() {
        let serde = "unknown field `matchr_config`, expected one of `version`, `matcher`, `matcher_config`, `detector` at line 3 column 1";
        assert_eq!(
            one_line(serde),
            "unknown field `matchr_config`; did you mean `matcher_config`? at line 3 column 1"
        );
        let far = "unknown field `zzz`, expected one of `version`, `matcher`";
        assert_eq!(one_line(far), far, "nothing near: the list stays");
        assert_eq!(one_line("missing field `x`"), "missing field `x`");
    }
}

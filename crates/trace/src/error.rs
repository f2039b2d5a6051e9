//! What is wrong with a trace: the file, the line, the field, and a reason category that
//! `--skip-invalid` counts by. One line each, so a user can open the file at the spot.

use std::fmt;
use std::path::PathBuf;

/// Why a line is bad. The variant is the reason `--skip-invalid` counts by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Fault {
    /// Not valid UTF-8.
    InvalidUtf8,
    /// Not valid JSON, or not an object.
    InvalidJson,
    /// A required field is absent.
    MissingField,
    /// A field has the wrong type or an out-of-range value.
    InvalidField,
    /// `hash_ids` has fewer ids than `input_length` needs.
    HashIdsTooShort,
    /// `parent` names no earlier request.
    UnknownParent,
    /// The same id appears twice.
    DuplicateId,
}

impl Fault {
    /// The reason, as counted and printed.
    pub fn reason(&self) -> &'static str {
        match self {
            Fault::InvalidUtf8 => "invalid UTF-8",
            Fault::InvalidJson => "invalid JSON",
            Fault::MissingField => "missing field",
            Fault::InvalidField => "invalid field",
            Fault::HashIdsTooShort => "hash_ids too short",
            Fault::UnknownParent => "unknown parent",
            Fault::DuplicateId => "duplicate id",
        }
    }
}

/// A bad trace: file, line (1-based; 0 = the file as a whole), field and cause.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TraceError {
    /// The trace file.
    pub file: PathBuf,
    /// The line, 1-based; 0 for whole-file problems.
    pub line: usize,
    /// The field at fault, if one is.
    pub field: Option<String>,
    /// The reason category.
    pub fault: Fault,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        match &self.field {
            Some(field) => write!(f, ": field `{field}`: {}", self.message),
            None => write!(f, ": {}", self.message),
        }
    }
}

impl std::error::Error for TraceError {}

/// A number as a message shows it: plain when short, in scientific notation when
/// `Display` would write hundreds of digits.
pub(crate) fn short_number(v: f64) -> String {
    let plain = v.to_string();
    if plain.len() > 24 {
        format!("{v:e}")
    } else {
        plain
    }
}

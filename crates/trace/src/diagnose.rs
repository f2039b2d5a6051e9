//! The slow path's second look at a bad line: serde's message names a column, so the line
//! is parsed again as a generic JSON value only to say which field is wrong and why.

use std::path::Path;

use serde_json::Value;

use crate::error::{Fault, TraceError};
use crate::trace_format::TraceFormat;

/// What the fast path could not say: which field is wrong.
pub(crate) fn diagnose(
    path: &Path,
    line: usize,
    text: &str,
    format: TraceFormat,
    serde_error: &serde_json::Error,
) -> TraceError {
    let error = |field: Option<&str>, fault, message: String| TraceError {
        file: path.to_owned(),
        line,
        field: field.map(str::to_owned),
        fault,
        message,
    };
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(e) => return error(None, Fault::InvalidJson, format!("invalid JSON: {e}")),
    };
    let Value::Object(object) = value else {
        return error(
            None,
            Fault::InvalidJson,
            format!("expected a JSON object, found {}", kind(&value)),
        );
    };
    let checks: &[(&str, Check, bool)] = match format {
        TraceFormat::Chat => &[
            ("id", Check::Id, false),
            ("prompt", Check::Text, false),
            ("messages", Check::Messages, false),
            ("parent", Check::Id, false),
            ("session", Check::Id, false),
            ("arrival_s", Check::Number, false),
            ("output_tokens", Check::Count, false),
            ("adapter", Check::Text, false),
            ("session_end", Check::Bool, false),
        ],
        // CSV lines are checked by their own parser; agentic lines word their own errors.
        TraceFormat::AzureCsv
        | TraceFormat::BurstGpt
        | TraceFormat::AgenticMooncake
        | TraceFormat::Weka => &[],
        TraceFormat::TokenIds => &[
            ("arrival_time_ns", Check::Count, false),
            ("input_toks", Check::Count, false),
            ("output_toks", Check::Count, false),
            ("input_tok_ids", Check::TokenIds, true),
        ],
        TraceFormat::Mooncake => &[
            ("timestamp", Check::Number, false),
            ("input_length", Check::Count, true),
            ("output_length", Check::Count, false),
            ("hash_ids", Check::Ids, true),
            ("session_id", Check::Id, false),
            ("chat_id", Check::Int, false),
            ("parent_chat_id", Check::Int, false),
            ("adapter", Check::Text, false),
            ("session_end", Check::Bool, false),
        ],
    };
    for (field, check, required) in checks {
        match object.get(*field) {
            None | Some(Value::Null) if *required => {
                return error(Some(field), Fault::MissingField, "missing".into());
            }
            None | Some(Value::Null) => {}
            Some(value) => {
                if let Err(expected) = check.apply(value) {
                    return error(
                        Some(field),
                        Fault::InvalidField,
                        format!("expected {expected}, found {}", shown(value)),
                    );
                }
            }
        }
    }
    error(
        None,
        Fault::InvalidJson,
        format!("cannot read line: {serde_error}"),
    )
}

#[derive(Clone, Copy)]
pub(crate) enum Check {
    Id,
    Text,
    Messages,
    Number,
    Count,
    Int,
    Ids,
    TokenIds,
    Bool,
}

impl Check {
    pub(crate) fn apply(self, value: &Value) -> Result<(), &'static str> {
        let ok = match self {
            Check::Id => value.is_string() || value.is_i64(),
            Check::Text => value.is_string(),
            Check::Messages => value.as_array().is_some_and(|items| {
                items.iter().all(|m| {
                    m.get("role").is_some_and(Value::is_string)
                        && m.get("content").is_some_and(Value::is_string)
                })
            }),
            Check::Number => value.is_number(),
            Check::Count => value.is_u64(),
            Check::Int => value.is_i64(),
            Check::Ids => value
                .as_array()
                .is_some_and(|ids| ids.iter().all(Value::is_u64)),
            Check::TokenIds => value.as_array().is_some_and(|ids| {
                ids.iter()
                    .all(|id| id.as_u64().is_some_and(|n| n <= u64::from(u32::MAX)))
            }),
            Check::Bool => value.is_boolean(),
        };
        if ok {
            return Ok(());
        }
        Err(match self {
            Check::Id => "a string or an integer",
            Check::Text => "a string",
            Check::Messages => "a list of {role, content} string objects",
            Check::Number => "a number",
            Check::Count => "a non-negative integer",
            Check::Int => "an integer",
            Check::Ids => "a list of non-negative integers",
            Check::TokenIds => "a list of 32-bit token ids",
            Check::Bool => "true or false",
        })
    }
}

pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn shown(value: &Value) -> String {
    match value {
        Value::Number(_) | Value::Bool(_) => format!("{} {value}", kind(value)),
        Value::String(s) if s.len() <= 40 => format!("a string {s:?}"),
        _ => kind(value).to_owned(),
    }
}

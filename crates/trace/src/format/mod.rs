//! One module per trace format, each adding its line parser to the shared
//! `Linker` of the reader.

pub mod agentic;
pub mod chat;
pub(crate) mod csv;
pub mod mooncake;
pub(crate) mod token_ids;
pub(crate) mod weka;

pub use chat::{Message, flatten_messages};

use crate::source::{is_blank, trim_line};
use crate::trace_format::TraceFormat;

/// Why a trace whose first line is no format's is refused, and what the formats are.
pub(crate) const UNKNOWN_FORMAT: &str = "not a trace format routerlab reads: the first line \
is neither a JSON object nor a known CSV header; the formats are chat, mooncake and \
token-ids (JSON lines), agentic-mooncake (a header line, then JSON lines), weka (JSON \
sessions, or a directory of them), azure-csv and burstgpt (CSV with their headers), detected from that line or named with --trace-format";

/// Detects the format from the first non-blank line: the CSV headers of Azure and
/// BurstGPT, the agentic_mooncake header's schema, Mooncake lines with `hash_ids`, token-id
/// lines with `input_tok_ids`; anything else is chat.
pub(crate) fn detect_format(first: &[u8]) -> Option<TraceFormat> {
    if is_blank(first) {
        return None;
    }
    let has = |needle: &[u8]| first.windows(needle.len()).any(|w| w == needle);
    let header = trim_line(first);
    Some(
        if header.starts_with(crate::format::csv::AZURE_HEADER.as_bytes()) {
            TraceFormat::AzureCsv
        } else if header.starts_with(crate::format::csv::BURSTGPT_HEADER.as_bytes()) {
            TraceFormat::BurstGpt
        } else if has(b"\"schema\"") && has(b"dynamo.agentic_mooncake") {
            TraceFormat::AgenticMooncake
        } else if has(b"\"hash_ids\"") {
            TraceFormat::Mooncake
        } else if has(b"\"input_tok_ids\"") {
            TraceFormat::TokenIds
        } else {
            TraceFormat::Chat
        },
    )
}

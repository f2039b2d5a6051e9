//! The trace formats routerlab reads, by name.

use std::fmt;

/// Trace formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// routerlab's chat JSONL: prompts (or messages) with optional parents and sessions.
    Chat,
    /// Mooncake JSONL: lengths and prefix-block ids, no text.
    Mooncake,
    /// Token-id JSONL (llmservingsim): the prompt as token ids.
    #[serde(rename = "token-ids")]
    TokenIds,
    /// Azure's LLM inference trace CSV: arrival and lengths, no prefix information.
    #[serde(rename = "azure-csv")]
    AzureCsv,
    /// BurstGPT's CSV: arrival and lengths, no prefix information.
    #[serde(rename = "burstgpt")]
    BurstGpt,
    /// NVIDIA Dynamo's `agentic_mooncake` v2: a header, then requests with plays, sessions
    /// and dependencies (see [`crate::format::agentic`]).
    #[serde(rename = "agentic-mooncake")]
    AgenticMooncake,
    /// The Weka / AgentX Claude-Code corpus: JSON sessions with nested sub-agents, a file
    /// or a directory, lowered to an agentic graph as NVIDIA Dynamo 1.6.1 does (the
    /// README's "Agentic workloads").
    Weka,
}

impl TraceFormat {
    /// The unit of lengths and blocks in traces of this format.
    pub fn unit(self) -> routerlab_core::Unit {
        match self {
            TraceFormat::Chat => routerlab_core::Unit::Bytes,
            _ => routerlab_core::Unit::Tokens,
        }
    }

    /// Every format, in the order help texts list them.
    pub const ALL: [TraceFormat; 7] = [
        TraceFormat::Chat,
        TraceFormat::Mooncake,
        TraceFormat::TokenIds,
        TraceFormat::AzureCsv,
        TraceFormat::BurstGpt,
        TraceFormat::AgenticMooncake,
        TraceFormat::Weka,
    ];

    /// Whether requests carry plays and dependencies (an `agentic_mooncake` graph).
    pub fn is_agentic(self) -> bool {
        matches!(self, TraceFormat::AgenticMooncake | TraceFormat::Weka)
    }

    /// Whether requests of this format say which prefixes they share. Without that a replay
    /// is load-only: every chain is empty and every hit zero.
    pub fn has_prefixes(self) -> bool {
        !self.is_csv()
    }

    /// Whether the format is a CSV with a header line.
    pub(crate) fn is_csv(self) -> bool {
        matches!(self, TraceFormat::AzureCsv | TraceFormat::BurstGpt)
    }
}

impl std::str::FromStr for TraceFormat {
    type Err = String;
    fn from_str(name: &str) -> Result<TraceFormat, String> {
        TraceFormat::ALL
            .into_iter()
            .find(|f| f.to_string() == name)
            .ok_or_else(|| {
                format!(
                    "unknown trace format `{name}` (known: chat, mooncake, token-ids, azure-csv, burstgpt, agentic-mooncake, weka)"
                )
            })
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TraceFormat::Chat => "chat",
            TraceFormat::Mooncake => "mooncake",
            TraceFormat::TokenIds => "token-ids",
            TraceFormat::AzureCsv => "azure-csv",
            TraceFormat::BurstGpt => "burstgpt",
            TraceFormat::AgenticMooncake => "agentic-mooncake",
            TraceFormat::Weka => "weka",
        })
    }
}

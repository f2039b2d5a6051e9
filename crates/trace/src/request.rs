//! One request of a trace as the reader fills it, and the options a trace is read with:
//! the vocabulary every format's parser and every consumer of a trace shares (a leaf).

use crate::trace_format::TraceFormat;

/// The most tokens a request's prompt or output may have (16 Mi, far past any model's
/// context); checked before anything is allocated from a length.
pub const MAX_REQUEST_TOKENS: u64 = 1 << 24;

/// How to read a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceOptions {
    /// Forced format, or `None` to detect it from the first line.
    pub format: Option<TraceFormat>,
    /// Block size for text prompts, in bytes.
    pub block_size: u32,
    /// Tokens per Mooncake hash id.
    pub trace_block_size: u32,
    /// Skip bad lines (counting them) instead of failing.
    pub skip_invalid: bool,
    /// The longest line read, in bytes (line ending excluded); a longer one is an error
    /// naming it, so an endless line (a decompression bomb, `/dev/zero`) cannot take
    /// unbounded memory.
    pub max_line_bytes: usize,
}

/// Block size for text prompts by default, in bytes.
pub const DEFAULT_BLOCK_SIZE: u32 = 128;
/// Tokens per Mooncake hash id by default (Mooncake's own traces use 512).
pub const DEFAULT_TRACE_BLOCK_SIZE: u32 = 512;
/// The longest trace line read by default: 64 MiB (a prompt of some 16 M tokens).
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 << 20;

impl Default for TraceOptions {
    /// The format detected from the first line, 128-byte text blocks, 512-token Mooncake
    /// blocks, bad lines refused, lines up to 64 MiB.
    fn default() -> TraceOptions {
        TraceOptions {
            format: None,
            block_size: DEFAULT_BLOCK_SIZE,
            trace_block_size: DEFAULT_TRACE_BLOCK_SIZE,
            skip_invalid: false,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}

/// One request of a trace, in a buffer the reader refills.
#[derive(Debug, Default)]
pub struct TraceRequest {
    /// 1-based position among the requests read (skipped lines excluded); also the id
    /// plugins see.
    pub seq: u64,
    /// Line in the file.
    pub line: usize,
    /// Position (`seq`) of the request this one continues.
    pub parent_seq: Option<u64>,
    /// Session number (1-based, order of first appearance), 0 = none.
    pub session: u64,
    /// Prompt text (chat traces); empty for Mooncake.
    pub prompt: Vec<u8>,
    /// Prompt length in `unit`s.
    pub prompt_len: u64,
    /// Prefix-block hash chain.
    pub blocks: Vec<u64>,
    /// Dense ids of `blocks`, from the reader's [`routerlab_core::hash::BlockInterner`].
    pub block_ids: Vec<u32>,
    /// Arrival time in nanoseconds, if the trace has one (agentic: `not_before_ms`).
    pub arrival_ns: Option<u64>,
    /// Agentic traces: the request's id as written, its play (1-based, order of first
    /// appearance) and its dependencies; empty, 0 and none otherwise.
    pub request_id: String,
    /// See `request_id`.
    pub play: u64,
    /// See `request_id`.
    pub dependencies: Vec<crate::dependency::RawDependency>,
    /// Output tokens, if the trace says.
    pub output_tokens: Option<u64>,
    /// Prompt token ids (token-id traces only).
    pub token_ids: Vec<u32>,
    /// The LoRA adapter it names (1-based, see [`crate::TraceReader::adapters`]); 0 = none.
    pub adapter: u32,
    /// It is its session's last (`session_end`): the client ends the session after it.
    pub session_end: bool,
}

//! Reading traces, streamed from a memory map.
//!
//! The file is mapped, not read: lines are parsed one at a time into a reused
//! [`TraceRequest`], so memory holds one prompt at a time plus what parent links need (an
//! id → position map, only for traces that have ids). Every line is checked; a bad line is
//! an error naming `file:line` and the field, unless the caller asked to skip bad lines, in
//! which case they are counted by reason. Each format's line parser lives in
//! [`crate::format`]; the linking of ids, parents and sessions they share lives here.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use routerlab_core::Unit;
use routerlab_core::hash::BlockInterner;
use routerlab_host::mapped::MappedFile;

use crate::error::{Fault, TraceError};
use crate::ids::{IdKey, IdTable, MAX_REQUESTS};

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
}

impl TraceFormat {
    /// Every format, in the order help texts list them.
    pub const ALL: [TraceFormat; 3] = [
        TraceFormat::Chat,
        TraceFormat::Mooncake,
        TraceFormat::TokenIds,
    ];
}

impl std::str::FromStr for TraceFormat {
    type Err = String;
    fn from_str(name: &str) -> Result<TraceFormat, String> {
        TraceFormat::ALL
            .into_iter()
            .find(|f| f.to_string() == name)
            .ok_or_else(|| {
                format!("unknown trace format `{name}` (known: chat, mooncake, token-ids)")
            })
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TraceFormat::Chat => "chat",
            TraceFormat::Mooncake => "mooncake",
            TraceFormat::TokenIds => "token-ids",
        })
    }
}

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
    /// Dense ids of `blocks`, from the reader's [`BlockInterner`].
    pub block_ids: Vec<u32>,
    /// Arrival time in nanoseconds, if the trace has one.
    pub arrival_ns: Option<u64>,
    /// Output tokens, if the trace says.
    pub output_tokens: Option<u64>,
    /// Prompt token ids (token-id traces only).
    pub token_ids: Vec<u32>,
}

/// A streaming reader over a mapped trace file.
pub struct TraceReader {
    map: MappedFile,
    offset: usize,
    line: usize,
    linker: Linker,
    skipped: BTreeMap<&'static str, u64>,
    interner: BlockInterner,
}

/// Turns lines into requests and links them to their parents.
pub(crate) struct Linker {
    pub(crate) path: PathBuf,
    pub(crate) format: TraceFormat,
    pub(crate) options: TraceOptions,
    seq: u64,
    /// Chat ids, or Mooncake chat ids, to their `seq`.
    pub(crate) ids: IdTable<u64>,
    /// Session id to (session number, last `seq`).
    sessions: IdTable<(u64, u64)>,
}

impl TraceReader {
    /// Maps `path` and detects (or takes) its format. An empty file is an error.
    pub fn open(path: &Path, options: TraceOptions) -> Result<TraceReader, TraceError> {
        let whole = |message: String| TraceError {
            file: path.to_owned(),
            line: 0,
            field: None,
            fault: Fault::InvalidJson,
            message,
        };
        let map = MappedFile::open(path).map_err(|e| whole(format!("cannot read trace: {e}")))?;
        if map.is_empty() {
            return Err(whole("trace is empty: no requests".into()));
        }
        let format = match options.format {
            Some(format) => format,
            None => {
                detect_format(&map).ok_or_else(|| whole("trace is empty: no requests".into()))?
            }
        };
        Ok(TraceReader {
            map,
            offset: 0,
            line: 0,
            linker: Linker {
                path: path.to_owned(),
                format,
                options,
                seq: 0,
                ids: IdTable::default(),
                sessions: IdTable::default(),
            },
            skipped: BTreeMap::new(),
            interner: BlockInterner::default(),
        })
    }

    /// The trace's format.
    pub fn format(&self) -> TraceFormat {
        self.linker.format
    }

    /// The unit of lengths and blocks in this trace.
    pub fn unit(&self) -> Unit {
        match self.linker.format {
            TraceFormat::Chat => Unit::Bytes,
            TraceFormat::Mooncake | TraceFormat::TokenIds => Unit::Tokens,
        }
    }

    /// The block size of this trace's hash chains, in [`TraceReader::unit`]s.
    pub fn block_size(&self) -> u32 {
        match self.linker.format {
            TraceFormat::Chat => self.linker.options.block_size,
            TraceFormat::Mooncake | TraceFormat::TokenIds => self.linker.options.trace_block_size,
        }
    }

    /// Where the trace came from: path, format, size and a hash of its content (for the
    /// report's `run` block). Hashing reads the whole file once more.
    pub fn source(&self) -> crate::workload::TraceSource {
        crate::workload::TraceSource {
            path: self.linker.path.clone(),
            format: self.linker.format,
            bytes: self.map.len() as u64,
            content_hash: crate::workload::content_hash(&self.map),
        }
    }

    /// Bytes of the file.
    pub fn len_bytes(&self) -> usize {
        self.map.len()
    }

    /// Lines skipped so far, by reason.
    pub fn skipped(&self) -> &BTreeMap<&'static str, u64> {
        &self.skipped
    }

    /// Reads the next request into `out`. `Ok(false)` at the end of the trace.
    pub fn next_into(&mut self, out: &mut TraceRequest) -> Result<bool, TraceError> {
        loop {
            let Some((start, end)) = self.next_line() else {
                if self.linker.seq == 0 {
                    return Err(self.linker.error_at(
                        0,
                        None,
                        Fault::InvalidJson,
                        "trace has no valid requests".into(),
                    ));
                }
                return Ok(false);
            };
            let parsed = self
                .linker
                .parse_line(self.line, &self.map[start..end], out);
            match parsed {
                Ok(()) => {
                    if !self.interner.intern_all(&out.blocks, &mut out.block_ids) {
                        return Err(self.linker.error_at(
                            self.line,
                            None,
                            Fault::InvalidField,
                            "more distinct blocks than 32-bit block ids can name".into(),
                        ));
                    }
                    return Ok(true);
                }
                Err(err) if self.linker.options.skip_invalid => {
                    *self.skipped.entry(err.fault.reason()).or_insert(0) += 1;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// The next non-blank line, without its line ending.
    fn next_line(&mut self) -> Option<(usize, usize)> {
        while self.offset < self.map.len() {
            let rest = &self.map[self.offset..];
            let end = memchr_newline(rest).unwrap_or(rest.len());
            let start = self.offset;
            self.offset += end + 1;
            self.line += 1;
            let mut line = &self.map[start..start + end];
            if let [head @ .., b'\r'] = line {
                line = head;
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Some((start, start + line.len()));
        }
        None
    }
}

impl Linker {
    pub(crate) fn error_at(
        &self,
        line: usize,
        field: Option<&str>,
        fault: Fault,
        message: String,
    ) -> TraceError {
        TraceError {
            file: self.path.clone(),
            line,
            field: field.map(str::to_owned),
            fault,
            message,
        }
    }

    pub(crate) fn parse_line(
        &mut self,
        line_no: usize,
        bytes: &[u8],
        out: &mut TraceRequest,
    ) -> Result<(), TraceError> {
        match self.format {
            TraceFormat::Chat => {
                let text = self.utf8(line_no, bytes)?;
                self.parse_chat(line_no, text, out)
            }
            TraceFormat::Mooncake => self.parse_mooncake(line_no, bytes, out),
            TraceFormat::TokenIds => {
                let text = self.utf8(line_no, bytes)?;
                self.parse_token_ids(line_no, text, out)
            }
        }
    }

    pub(crate) fn utf8<'b>(&self, line_no: usize, bytes: &'b [u8]) -> Result<&'b str, TraceError> {
        std::str::from_utf8(bytes).map_err(|e| {
            self.error_at(
                line_no,
                None,
                Fault::InvalidUtf8,
                format!("invalid UTF-8 at byte {}", e.valid_up_to()),
            )
        })
    }

    pub(crate) fn take_seq(&mut self, line_no: usize) -> Result<u64, TraceError> {
        if self.seq >= MAX_REQUESTS {
            return Err(self.error_at(
                line_no,
                None,
                Fault::InvalidField,
                format!("a trace may hold at most {MAX_REQUESTS} requests"),
            ));
        }
        self.seq += 1;
        Ok(self.seq)
    }

    /// Numbers the session and, with no explicit parent, links to its previous request.
    pub(crate) fn session(
        &mut self,
        key: Option<IdKey<'_>>,
        seq: u64,
        parent_seq: &mut Option<u64>,
    ) -> u64 {
        let Some(key) = key else { return 0 };
        let entry = self
            .sessions
            .get_or_insert_with(key, |len| (len as u64 + 1, 0));
        if parent_seq.is_none() && entry.1 != 0 {
            *parent_seq = Some(entry.1);
        }
        entry.1 = seq;
        entry.0
    }
}

pub(crate) fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

/// Detects the format from the first non-blank line: Mooncake lines have `hash_ids`,
/// token-id lines `input_tok_ids`; anything else is chat.
pub(crate) fn detect_format(bytes: &[u8]) -> Option<TraceFormat> {
    let first = bytes
        .split(|b| *b == b'\n')
        .find(|line| !line.iter().all(u8::is_ascii_whitespace))?;
    let has = |needle: &[u8]| first.windows(needle.len()).any(|w| w == needle);
    Some(if has(b"\"hash_ids\"") {
        TraceFormat::Mooncake
    } else if has(b"\"input_tok_ids\"") {
        TraceFormat::TokenIds
    } else {
        TraceFormat::Chat
    })
}

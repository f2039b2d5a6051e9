//! Reading traces: chat JSONL and Mooncake JSONL, streamed from a memory map.
//!
//! The file is mapped, not read: lines are parsed one at a time into a reused
//! [`TraceRequest`], so memory holds one prompt at a time plus what parent links need (an
//! id → position map, only for traces that have ids). Every line is checked; a bad line is
//! an error naming `file:line` and the field, unless the caller asked to skip bad lines, in
//! which case they are counted by reason.
//!
//! Parsing has a fast path and a slow path. The fast path deserialises straight into typed,
//! borrowed structs. When that fails, the line is parsed again as a generic JSON value only
//! to find which field is wrong and say so; serde's own message names a column, not a field.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use routerlab_core::Unit;
use routerlab_core::hash::{BlockInterner, chain};
use routerlab_host::mapped::MappedFile;
use serde::Deserialize;
use serde_json::Value;

/// Trace formats.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// routerlab's chat JSONL: prompts (or messages) with optional parents and sessions.
    Chat,
    /// Mooncake JSONL: lengths and prefix-block ids, no text.
    Mooncake,
    /// Token-id JSONL (llmservingsim): the prompt as token ids.
    #[value(name = "token-ids")]
    #[serde(rename = "token-ids")]
    TokenIds,
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
#[derive(Debug, Clone)]
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

/// Why a line is bad. The variant is the reason `--skip-invalid` counts by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
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
struct Linker {
    path: PathBuf,
    format: TraceFormat,
    options: TraceOptions,
    seq: u64,
    /// Chat ids, or Mooncake chat ids, to their `seq`.
    ids: IdTable<u64>,
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
    fn error_at(
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

    fn parse_line(
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

    fn utf8<'b>(&self, line_no: usize, bytes: &'b [u8]) -> Result<&'b str, TraceError> {
        std::str::from_utf8(bytes).map_err(|e| {
            self.error_at(
                line_no,
                None,
                Fault::InvalidUtf8,
                format!("invalid UTF-8 at byte {}", e.valid_up_to()),
            )
        })
    }

    fn parse_chat(
        &mut self,
        line_no: usize,
        text: &str,
        out: &mut TraceRequest,
    ) -> Result<(), TraceError> {
        let parsed: ChatLine<'_> = serde_json::from_str(text)
            .map_err(|e| diagnose(&self.path, line_no, text, TraceFormat::Chat, &e))?;
        let id = match &parsed.id {
            Some(id) => id.key(),
            None => IdKey::Int(line_no as i64),
        };
        if self.ids.contains(id) {
            return Err(self.error_at(
                line_no,
                Some("id"),
                Fault::DuplicateId,
                format!("id {id} appears twice"),
            ));
        }
        let mut parent_seq = match &parsed.parent {
            Some(parent) => {
                let key = parent.key();
                Some(*self.ids.get(key).ok_or_else(|| {
                    self.error_at(
                        line_no,
                        Some("parent"),
                        Fault::UnknownParent,
                        format!("parent {key} is not the id of an earlier request"),
                    )
                })?)
            }
            None => None,
        };
        if let Some(arrival) = parsed.arrival_s {
            if !(arrival.is_finite() && arrival >= 0.0) {
                return Err(self.error_at(
                    line_no,
                    Some("arrival_s"),
                    Fault::InvalidField,
                    format!("expected non-negative seconds, found {arrival}"),
                ));
            }
        }
        out.prompt.clear();
        match (&parsed.prompt, &parsed.messages) {
            (Some(prompt), None) => out.prompt.extend_from_slice(prompt.as_bytes()),
            (None, Some(messages)) => flatten_messages(messages, &mut out.prompt),
            (Some(_), Some(_)) => {
                return Err(self.error_at(
                    line_no,
                    Some("messages"),
                    Fault::InvalidField,
                    "give either `prompt` or `messages`, not both".into(),
                ));
            }
            (None, None) => {
                return Err(self.error_at(
                    line_no,
                    Some("prompt"),
                    Fault::MissingField,
                    "missing: each line needs `prompt` (string) or `messages` (list)".into(),
                ));
            }
        }
        let seq = self.take_seq(line_no)?;
        self.ids.insert_new(id, seq);
        out.session = self.session(
            parsed.session.as_ref().map(IdValue::key),
            seq,
            &mut parent_seq,
        );
        out.seq = seq;
        out.line = line_no;
        out.parent_seq = parent_seq;
        out.prompt_len = out.prompt.len() as u64;
        out.arrival_ns = parsed.arrival_s.map(|s| (s * 1e9).round() as u64);
        out.output_tokens = parsed.output_tokens;
        hash_text_blocks(
            &out.prompt,
            self.options.block_size as usize,
            &mut out.blocks,
        );
        Ok(())
    }

    fn parse_mooncake(
        &mut self,
        line_no: usize,
        bytes: &[u8],
        out: &mut TraceRequest,
    ) -> Result<(), TraceError> {
        out.blocks.clear();
        // The fast path accepts only ASCII, so a line it takes needs no UTF-8 check.
        let fast = fast_mooncake(bytes, &mut out.blocks);
        let parsed: MooncakeLine<'_> = if let Some(line) = fast {
            line
        } else {
            out.blocks.clear();
            let text = self.utf8(line_no, bytes)?;
            let mut de = serde_json::Deserializer::from_str(text);
            let seed = MooncakeSeed {
                blocks: &mut out.blocks,
            };
            serde::de::DeserializeSeed::deserialize(seed, &mut de)
                .and_then(|v| de.end().map(|()| v))
                .map_err(|e| diagnose(&self.path, line_no, text, TraceFormat::Mooncake, &e))?
        };
        let block = u64::from(self.options.trace_block_size);
        let needed = parsed.input_length.div_ceil(block);
        if (out.blocks.len() as u64) < needed {
            return Err(self.error_at(
                line_no,
                Some("hash_ids"),
                Fault::HashIdsTooShort,
                format!(
                    "{} ids, but input_length {} needs {needed} blocks of {block} tokens \
                     (is --trace-block-size right?)",
                    out.blocks.len(),
                    parsed.input_length
                ),
            ));
        }
        out.blocks.truncate(needed as usize);
        if let Some(ts) = parsed.timestamp {
            if !(ts.is_finite() && ts >= 0.0) {
                return Err(self.error_at(
                    line_no,
                    Some("timestamp"),
                    Fault::InvalidField,
                    format!("expected non-negative milliseconds, found {ts}"),
                ));
            }
        }
        let mut parent_seq = None;
        if let Some(parent) = parsed.parent_chat_id.filter(|p| *p >= 0) {
            parent_seq = Some(*self.ids.get(IdKey::Int(parent)).ok_or_else(|| {
                self.error_at(
                    line_no,
                    Some("parent_chat_id"),
                    Fault::UnknownParent,
                    format!("parent_chat_id {parent} is not the chat_id of an earlier request"),
                )
            })?);
        }
        if let Some(chat) = parsed.chat_id {
            if self.ids.contains(IdKey::Int(chat)) {
                return Err(self.error_at(
                    line_no,
                    Some("chat_id"),
                    Fault::DuplicateId,
                    format!("chat_id {chat} appears twice"),
                ));
            }
        }
        // Every check is done: only now does the line become request `seq` (skipped lines
        // must leave no gap, since positions index per-request tables).
        let seq = self.take_seq(line_no)?;
        if let Some(chat) = parsed.chat_id {
            self.ids.insert_new(IdKey::Int(chat), seq);
        }
        out.session = self.session(
            parsed.session_id.as_ref().map(IdValue::key),
            seq,
            &mut parent_seq,
        );
        out.seq = seq;
        out.line = line_no;
        out.parent_seq = parent_seq;
        out.prompt.clear();
        out.prompt_len = parsed.input_length;
        out.arrival_ns = parsed.timestamp.map(|ms| (ms * 1e6).round() as u64);
        out.output_tokens = parsed.output_length;
        Ok(())
    }

    fn parse_token_ids(
        &mut self,
        line_no: usize,
        text: &str,
        out: &mut TraceRequest,
    ) -> Result<(), TraceError> {
        let parsed: TokenIdsLine = serde_json::from_str(text)
            .map_err(|e| diagnose(&self.path, line_no, text, TraceFormat::TokenIds, &e))?;
        let input = parsed.input_tok_ids.len() as u64;
        if parsed.input_toks.is_some_and(|n| n != input) {
            return Err(self.error_at(
                line_no,
                Some("input_toks"),
                Fault::InvalidField,
                format!(
                    "{} does not match the {input} ids of `input_tok_ids`",
                    parsed.input_toks.unwrap_or(0)
                ),
            ));
        }
        out.seq = self.take_seq(line_no)?;
        out.line = line_no;
        out.parent_seq = None;
        out.session = 0;
        out.prompt.clear();
        out.prompt_len = input;
        out.arrival_ns = parsed.arrival_time_ns;
        out.output_tokens = parsed.output_toks;
        out.blocks.clear();
        let mut previous = 0u64;
        for block in parsed
            .input_tok_ids
            .chunks(self.options.trace_block_size as usize)
        {
            let bytes: Vec<u8> = block.iter().flat_map(|id| id.to_le_bytes()).collect();
            previous = chain(previous, &bytes);
            out.blocks.push(previous);
        }
        out.token_ids = parsed.input_tok_ids;
        Ok(())
    }

    /// Makes the line the next request: the last check of a line, so a failed line leaves
    /// no gap. Capping requests below `u32::MAX` also caps the ids and sessions numbered in
    /// [`IdTable`]s, which never outnumber requests.
    fn take_seq(&mut self, line_no: usize) -> Result<u64, TraceError> {
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
    fn session(&mut self, key: Option<IdKey<'_>>, seq: u64, parent_seq: &mut Option<u64>) -> u64 {
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

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

/// Detects the format from the first non-blank line: Mooncake lines have `hash_ids`,
/// token-id lines `input_tok_ids`; anything else is chat.
fn detect_format(bytes: &[u8]) -> Option<TraceFormat> {
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

/// Cuts `prompt` into blocks of `block_size` bytes (the last may be partial) and writes the
/// chained hash of each: hash `i` covers bytes `0 .. (i + 1) * block_size`.
pub fn hash_text_blocks(prompt: &[u8], block_size: usize, out: &mut Vec<u64>) {
    out.clear();
    let mut previous = 0u64;
    for block in prompt.chunks(block_size.max(1)) {
        previous = chain(previous, block);
        out.push(previous);
    }
}

/// The documented flattening of `messages`: for each message, `<|ROLE|>\n` + content + `\n`.
pub fn flatten_messages(messages: &[Message<'_>], out: &mut Vec<u8>) {
    for message in messages {
        out.extend_from_slice(b"<|");
        out.extend_from_slice(message.role.as_bytes());
        out.extend_from_slice(b"|>\n");
        out.extend_from_slice(message.content.as_bytes());
        out.push(b'\n');
    }
}

/// An id as written: an integer or a string.
#[derive(Debug)]
enum IdValue<'a> {
    Int(i64),
    Text(Cow<'a, str>),
}

impl IdValue<'_> {
    /// The normalised key: `7` and `"7"` are one id.
    fn key(&self) -> IdKey<'_> {
        match self {
            IdValue::Int(n) => IdKey::Int(*n),
            IdValue::Text(text) => match text.parse::<i64>() {
                Ok(n) if n.to_string() == *text => IdKey::Int(n),
                _ => IdKey::Text(text),
            },
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for IdValue<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Visit<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = IdValue<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(IdValue::Int(n))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
                i64::try_from(n)
                    .map(IdValue::Int)
                    .map_err(|_| E::custom("integer id too large"))
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                s: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(IdValue::Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(IdValue::Text(Cow::Owned(s.to_owned())))
            }
        }
        de.deserialize_any(Visit(PhantomData))
    }
}

/// A normalised id.
#[derive(Debug, Clone, Copy)]
enum IdKey<'a> {
    Int(i64),
    Text(&'a str),
}

impl fmt::Display for IdKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdKey::Int(n) => write!(f, "{n}"),
            IdKey::Text(s) => f.write_str(s),
        }
    }
}

/// Requests a trace may hold, so that every id and session table can number its keys with
/// 32-bit ids.
const MAX_REQUESTS: u64 = u32::MAX as u64 - 1;

/// Values by normalised id: integers through a [`BlockInterner`] into a dense array (ids
/// in traces mostly count up, so recent ones sit together in memory; a hash map would put
/// every lookup of a large trace on a cache miss), other text in a string map.
struct IdTable<V> {
    ints: BlockInterner,
    values: Vec<V>,
    texts: HashMap<Box<str>, V>,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            ints: BlockInterner::default(),
            values: Vec::new(),
            texts: HashMap::new(),
        }
    }
}

impl<V> IdTable<V> {
    fn get(&self, key: IdKey<'_>) -> Option<&V> {
        match key {
            IdKey::Int(n) => self.ints.get(n as u64).map(|i| &self.values[i as usize]),
            IdKey::Text(s) => self.texts.get(s),
        }
    }

    fn contains(&self, key: IdKey<'_>) -> bool {
        self.get(key).is_some()
    }

    /// Inserts a key that is not in the table yet.
    fn insert_new(&mut self, key: IdKey<'_>, value: V) {
        self.get_or_insert_with(key, |_| value);
    }

    fn get_or_insert_with(&mut self, key: IdKey<'_>, make: impl FnOnce(usize) -> V) -> &mut V {
        let len = self.len();
        match key {
            IdKey::Int(n) => {
                let index = self.ints.intern(n as u64).expect(
                    "ids never outnumber requests, \
                     and `take_seq` keeps those below u32::MAX",
                ) as usize;
                if index == self.values.len() {
                    self.values.push(make(len));
                }
                &mut self.values[index]
            }
            IdKey::Text(s) => {
                if !self.texts.contains_key(s) {
                    self.texts.insert(s.into(), make(len));
                }
                self.texts.get_mut(s).expect("just inserted")
            }
        }
    }

    fn len(&self) -> usize {
        self.values.len() + self.texts.len()
    }
}

/// One OpenAI-style message.
#[derive(Debug, Deserialize)]
pub struct Message<'a> {
    /// `system`, `user`, `assistant`, ...
    #[serde(borrow)]
    pub role: Cow<'a, str>,
    /// The text.
    #[serde(borrow)]
    pub content: Cow<'a, str>,
}

#[derive(Debug, Deserialize)]
struct ChatLine<'a> {
    #[serde(borrow, default)]
    id: Option<IdValue<'a>>,
    #[serde(borrow, default)]
    prompt: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    messages: Option<Vec<Message<'a>>>,
    #[serde(borrow, default)]
    parent: Option<IdValue<'a>>,
    #[serde(borrow, default)]
    session: Option<IdValue<'a>>,
    #[serde(default)]
    arrival_s: Option<f64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

/// A token-id line (llmservingsim).
#[derive(Debug, Deserialize)]
struct TokenIdsLine {
    #[serde(default)]
    arrival_time_ns: Option<u64>,
    #[serde(default)]
    input_toks: Option<u64>,
    #[serde(default)]
    output_toks: Option<u64>,
    input_tok_ids: Vec<u32>,
}

/// The fast path for the common Mooncake line: an object of non-negative integer fields
/// (`timestamp`, `input_length`, `output_length`, `session_id`, `chat_id`), an integer
/// `parent_chat_id`, and `hash_ids`, with plain whitespace. Anything else (other keys,
/// floats, strings, escapes, malformed text) returns `None`, and the line goes through
/// serde, which also produces the error messages. Lines are the same either way; the
/// snapshots and bad-input tests hold both paths to that.
fn fast_mooncake<'a>(text: &[u8], blocks: &mut Vec<u64>) -> Option<MooncakeLine<'a>> {
    #[inline(always)]
    fn number(text: &[u8], at: &mut usize) -> Option<u64> {
        if let Some((value, len)) = short_number(text, *at) {
            *at += len;
            return Some(value);
        }
        let start = *at;
        let mut value: u64 = 0;
        while let Some(digit) = text.get(*at).filter(|b| b.is_ascii_digit()) {
            // Wrapping is cheaper than checking every digit; 19 digits cannot overflow, and
            // a 20-digit number is parsed again with checks below.
            value = value.wrapping_mul(10).wrapping_add(u64::from(digit - b'0'));
            *at += 1;
        }
        let digits = &text[start..*at];
        if digits.len() == 20 {
            value = digits.iter().try_fold(0u64, |value, digit| {
                value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
            })?;
        }
        // No digits, more than a u64 holds, or a leading zero before more digits: not ours.
        // (A fraction or exponent after the digits fails the caller's separator check.)
        let leading_zero = digits.len() > 1 && digits[0] == b'0';
        ((1..=20).contains(&digits.len()) && !leading_zero).then_some(value)
    }
    let mut at = 0;
    let skip_ws = |at: &mut usize| {
        while text.get(*at).is_some_and(|b| matches!(b, b' ' | b'\t')) {
            *at += 1;
        }
    };
    // After an element of a list (`close` = `]`) or object (`}`): `Some(true)` past a comma,
    // at the next element; `Some(false)` past `close`; `None` for anything else. The usual
    // `, ` before something `starts_next` accepts is one comparison; other spacing takes the
    // general rules.
    let separator = |at: &mut usize, close: u8, starts_next: fn(u8) -> bool| {
        if text.get(*at..*at + 2) == Some(b", ")
            && text.get(*at + 2).is_some_and(|b| starts_next(*b))
        {
            *at += 2;
            return Some(true);
        }
        skip_ws(at);
        match text.get(*at) {
            Some(b',') => {
                *at += 1;
                skip_ws(at);
                Some(true)
            }
            Some(b) if *b == close => {
                *at += 1;
                Some(false)
            }
            _ => None,
        }
    };
    /// The keys the fast path knows.
    enum Key {
        Timestamp,
        InputLength,
        OutputLength,
        HashIds,
        SessionId,
        ChatId,
        ParentChatId,
    }
    // The known keys differ in their first letter: compare against the one it names, with
    // fixed-size comparisons (a few loads, not a `memcmp`).
    fn is<const N: usize>(rest: &[u8], quoted: &[u8; N]) -> bool {
        rest.get(..N) == Some(quoted.as_slice())
    }
    let mut line = MooncakeLine::default();
    let (mut has_input, mut has_ids) = (false, false);
    skip_ws(&mut at);
    if text.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    skip_ws(&mut at);
    // Each turn starts at a key's opening quote. The usual `": "` after a key is one
    // comparison; other spacing takes the general rules.
    loop {
        if text.get(at) != Some(&b'"') {
            return None;
        }
        let rest = &text[at + 1..];
        let (key, len) = match rest.first() {
            Some(b't') if is(rest, b"timestamp\"") => (Key::Timestamp, 9),
            Some(b'i') if is(rest, b"input_length\"") => (Key::InputLength, 12),
            Some(b'o') if is(rest, b"output_length\"") => (Key::OutputLength, 13),
            Some(b'h') if is(rest, b"hash_ids\"") => (Key::HashIds, 8),
            Some(b's') if is(rest, b"session_id\"") => (Key::SessionId, 10),
            Some(b'c') if is(rest, b"chat_id\"") => (Key::ChatId, 7),
            Some(b'p') if is(rest, b"parent_chat_id\"") => (Key::ParentChatId, 14),
            _ => return None,
        };
        at += len + 2;
        if text.get(at..at + 2) == Some(b": ") {
            at += 2;
        } else {
            skip_ws(&mut at);
            if text.get(at) != Some(&b':') {
                return None;
            }
            at += 1;
        }
        skip_ws(&mut at);
        match key {
            Key::HashIds => {
                if text.get(at) != Some(&b'[') {
                    return None;
                }
                at += 1;
                skip_ws(&mut at);
                if text.get(at) == Some(&b']') {
                    at += 1;
                } else {
                    loop {
                        blocks.push(number(text, &mut at)?);
                        if !separator(&mut at, b']', |b| b.is_ascii_digit())? {
                            break;
                        }
                    }
                }
                has_ids = true;
            }
            Key::ParentChatId if text.get(at) == Some(&b'-') => {
                at += 1;
                let magnitude = i64::try_from(number(text, &mut at)?).ok()?;
                line.parent_chat_id = Some(-magnitude);
            }
            key => {
                let value = number(text, &mut at)?;
                let signed = || i64::try_from(value).ok();
                match key {
                    Key::Timestamp => line.timestamp = Some(value as f64),
                    Key::InputLength => {
                        line.input_length = value;
                        has_input = true;
                    }
                    Key::OutputLength => line.output_length = Some(value),
                    Key::SessionId => line.session_id = Some(IdValue::Int(signed()?)),
                    Key::ChatId => line.chat_id = Some(signed()?),
                    Key::ParentChatId => line.parent_chat_id = Some(signed()?),
                    Key::HashIds => return None,
                }
            }
        }
        if !separator(&mut at, b'}', |b| b == b'"')? {
            break;
        }
    }
    skip_ws(&mut at);
    (at == text.len() && has_input && has_ids).then_some(line)
}

/// The run of 1 to 7 digits at `text[at..]`, read eight bytes at a time: the digits are found
/// and combined with a few word-wide operations instead of a branch per digit, which is most
/// of the parsing time of a Mooncake line. `None` when there are not eight bytes left, or
/// the run is empty, longer, or has a leading zero: the caller's digit loop decides. What
/// follows the digits (a fraction, an exponent) is the caller's to reject.
#[inline(always)]
fn short_number(text: &[u8], at: usize) -> Option<(u64, usize)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let chunk: [u8; 8] = text.get(at..at + 8)?.try_into().ok()?;
    let word = u64::from_le_bytes(chunk);
    // Byte by byte: `word - '0'` has its top bit set below '0', `word + 0x46` above '9'.
    // Borrows and carries only travel up from the first non-digit, so bytes below it are
    // exact.
    let digits = word.wrapping_sub(0x30 * ONES);
    let non_digit = (word.wrapping_add(0x46 * ONES) | digits) & (0x80 * ONES);
    let len = (non_digit.trailing_zeros() / 8) as usize;
    if len == 0 || len == 8 || (len > 1 && chunk[0] == b'0') {
        return None;
    }
    // Move the digits to the top bytes (zeros above act as leading zeros), then combine
    // neighbours: pairs, then quads, then the whole word (first byte most significant).
    let mut value = digits << (8 * (8 - len));
    value = ((value & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(1 + (10 << 8))) >> 8;
    value = ((value & 0x00FF_00FF_00FF_00FF).wrapping_mul(1 + (100 << 16))) >> 16;
    value = ((value & 0x0000_FFFF_0000_FFFF).wrapping_mul(1 + (10_000 << 32))) >> 32;
    Some((value, len))
}

/// A Mooncake line; `hash_ids` go straight into the reused block buffer.
#[derive(Debug, Default)]
struct MooncakeLine<'a> {
    timestamp: Option<f64>,
    input_length: u64,
    output_length: Option<u64>,
    session_id: Option<IdValue<'a>>,
    chat_id: Option<i64>,
    parent_chat_id: Option<i64>,
}

struct MooncakeSeed<'b> {
    blocks: &'b mut Vec<u64>,
}

impl<'de> serde::de::DeserializeSeed<'de> for MooncakeSeed<'_> {
    type Value = MooncakeLine<'de>;
    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_map(self)
    }
}

struct HashIds<'b>(&'b mut Vec<u64>);

impl<'de> serde::de::DeserializeSeed<'de> for HashIds<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for HashIds<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of non-negative integers")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(id) = seq.next_element::<u64>()? {
            self.0.push(id);
        }
        Ok(())
    }
}

impl<'de> serde::de::Visitor<'de> for MooncakeSeed<'_> {
    type Value = MooncakeLine<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Mooncake request object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error;
        let mut line = MooncakeLine::default();
        let (mut has_input, mut has_ids) = (false, false);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "timestamp" => line.timestamp = map.next_value()?,
                "input_length" => {
                    line.input_length = map.next_value()?;
                    has_input = true;
                }
                "output_length" => line.output_length = map.next_value()?,
                "hash_ids" => {
                    map.next_value_seed(HashIds(self.blocks))?;
                    has_ids = true;
                }
                "session_id" => line.session_id = map.next_value()?,
                "chat_id" => line.chat_id = map.next_value()?,
                "parent_chat_id" => line.parent_chat_id = map.next_value()?,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        if !has_input {
            return Err(A::Error::missing_field("input_length"));
        }
        if !has_ids {
            return Err(A::Error::missing_field("hash_ids"));
        }
        Ok(line)
    }
}

/// What the fast path could not say: which field is wrong.
fn diagnose(
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
        ],
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
enum Check {
    Id,
    Text,
    Messages,
    Number,
    Count,
    Int,
    Ids,
    TokenIds,
}

impl Check {
    fn apply(self, value: &Value) -> Result<(), &'static str> {
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
        })
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn shown(value: &Value) -> String {
    match value {
        Value::Number(_) | Value::Bool(_) => format!("{} {value}", kind(value)),
        Value::String(s) if s.len() <= 40 => format!("a string {s:?}"),
        _ => kind(value).to_owned(),
    }
}

/// The unit of a request's lengths, by format (for readers of the report).
pub fn unit_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Bytes => "bytes",
        Unit::Tokens => "tokens",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serde path, for comparison.
    fn slow(text: &str, blocks: &mut Vec<u64>) -> Option<String> {
        let mut de = serde_json::Deserializer::from_str(text);
        let line =
            serde::de::DeserializeSeed::deserialize(MooncakeSeed { blocks }, &mut de).ok()?;
        de.end().ok()?;
        Some(format!("{line:?}"))
    }

    #[test]
    fn short_numbers_read_eight_bytes_at_a_time_or_decline() {
        let mut rng = routerlab_core::SeededRng::new(3);
        for _ in 0..20_000 {
            let digits = 1 + rng.below(7);
            let value = rng.below(10u64.pow(digits as u32));
            let end = [b",", b"]", b" ", b"}", b"x"][rng.below(5) as usize];
            let text = format!("{value}{}        ", std::str::from_utf8(end).unwrap());
            assert_eq!(
                short_number(text.as_bytes(), 0),
                Some((value, value.to_string().len())),
                "{text:?}"
            );
        }
        for declined in ["12345678,", "0123,    ", ",1,      ", "12,"] {
            assert_eq!(short_number(declined.as_bytes(), 0), None, "{declined:?}");
        }
        assert_eq!(short_number(b"[9999999]", 1), Some((9_999_999, 7)));
        assert_eq!(short_number(b"0,       ", 0), Some((0, 1)));
        assert_eq!(short_number(b"12.5,    ", 0), Some((12, 2)));
    }

    #[test]
    fn the_mooncake_fast_path_agrees_with_serde_or_declines() {
        let taken = [
            r#"{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3]}"#,
            r#"{"timestamp":27,"input_length":1,"output_length":0,"hash_ids":[]}"#,
            r#"  { "hash_ids" : [ 7 ] , "input_length" : 3 , "session_id" : 4 }  "#,
            r#"{"timestamp": 5, "input_length": 10, "hash_ids": [1], "chat_id": 3, "parent_chat_id": -1}"#,
            r#"{"input_length": 10, "hash_ids": [18446744073709551615], "parent_chat_id": 2}"#,
        ];
        for text in taken {
            let (mut fast_blocks, mut slow_blocks) = (Vec::new(), Vec::new());
            let fast = fast_mooncake(text.as_bytes(), &mut fast_blocks).map(|l| format!("{l:?}"));
            assert!(fast.is_some(), "fast path should take {text}");
            assert_eq!(fast, slow(text, &mut slow_blocks), "{text}");
            assert_eq!(fast_blocks, slow_blocks, "{text}");
        }
        let declined = [
            r#"{"timestamp": 1.5, "input_length": 1, "hash_ids": [1]}"#,
            r#"{"timestamp": 1, "input_length": -5, "hash_ids": [1]}"#,
            r#"{"input_length": 1, "hash_ids": [1], "extra": "x"}"#,
            r#"{"input_length": 1, "hash_ids": [01]}"#,
            r#"{"input_length": 1}"#,
            r#"{"input_length": 1, "hash_ids": [1]} trailing"#,
            r#"{"input_length": 1, "hash_ids": [1,]}"#,
            r#"{"session_id": "abc", "input_length": 1, "hash_ids": [1]}"#,
            r#"{"input_length": 1e3, "hash_ids": [1]}"#,
            r#"{"input_length": 1, "hash_ids": [1.5, 2, 3, 4, 5, 6]}"#,
            r#"{"input_length": 1, "hash_ids": [1, 2e3, 3, 4, 5, 6]}"#,
            r#"{"timestamp": 1.5e3, "input_length": 1, "hash_ids": [1]}"#,
            r#"{"input_length": 18446744073709551616, "hash_ids": [1]}"#,
            r#"{"input_length": 99999999999999999999, "hash_ids": [1]}"#,
            r#"{"input_length": 100000000000000000000, "hash_ids": [1]}"#,
            r#"[1, 2]"#,
            "",
        ];
        for text in declined {
            assert!(
                fast_mooncake(text.as_bytes(), &mut Vec::new()).is_none(),
                "fast path must decline {text}"
            );
        }
    }
}

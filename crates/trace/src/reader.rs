//! Reading traces, streamed from a memory map.
//!
//! The file is mapped, not read: lines are parsed one at a time into a reused
//! [`TraceRequest`], so memory holds one prompt at a time plus what parent links need (an
//! id → position map, only for traces that have ids). Every line is checked; a bad line is
//! an error naming `file:line` and the field, unless the caller asked to skip bad lines, in
//! which case they are counted by reason. Each format's line parser lives in
//! [`crate::format`]; the linking of ids, parents and sessions they share is
//! `crate::linker`'s, the request they fill, `crate::request`'s.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use routerlab_core::Unit;
use routerlab_core::hash::BlockInterner;
use routerlab_os::MappedFile;

use crate::error::{Fault, TraceError};
use crate::linker::Linker;
use crate::source::{
    Compression, Source, Tallied, Tally, UTF8_BOM, decompressing, too_long, trim_line,
};

pub use crate::request::{
    DEFAULT_BLOCK_SIZE, DEFAULT_MAX_LINE_BYTES, DEFAULT_TRACE_BLOCK_SIZE, TraceOptions,
    TraceRequest,
};
pub use crate::trace_format::TraceFormat;

/// A streaming reader over a trace file: mapped, or decompressed as it goes.
pub struct TraceReader {
    source: Source,
    line: usize,
    /// CSV formats: whether the header line has been read.
    header_done: bool,
    linker: Linker,
    skipped: BTreeMap<&'static str, u64>,
    interner: BlockInterner,
    /// Whether chains' blocks get dense ids (see [`TraceReader::chains_only`]).
    intern: bool,
}

impl TraceReader {
    /// Opens `path` and detects (or takes) its format: mapped, or decompressed as it is
    /// read when its first bytes say gzip or zstd. An empty file is an error.
    pub fn open(path: &Path, options: TraceOptions) -> Result<TraceReader, TraceError> {
        let whole = |message: String| TraceError {
            file: path.to_owned(),
            line: 0,
            field: None,
            fault: Fault::InvalidJson,
            message,
        };
        let stdin = path == Path::new("-");
        let regular = !stdin && std::fs::metadata(path).is_ok_and(|m| m.is_file());
        let weka = match options.format {
            Some(format) => format == TraceFormat::Weka,
            None => {
                std::fs::metadata(path).is_ok_and(|m| m.is_dir())
                    || (regular
                        && Self::head(path).is_some_and(|h| crate::format::weka::looks_like(&h)))
            }
        };
        if weka {
            return Self::open_weka(path, options);
        }
        let mut source = if regular {
            Self::file_source(path, &whole)?
        } else {
            // A pipe, a FIFO or stdin (`-`): read once, as it comes, hashed on the way.
            let raw: Box<dyn std::io::Read + Send> = if stdin {
                Box::new(std::io::stdin())
            } else {
                Box::new(
                    std::fs::File::open(path)
                        .map_err(|e| whole(format!("cannot read trace: {e}")))?,
                )
            };
            let tally = std::sync::Arc::new(std::sync::Mutex::new(Tally::default()));
            let mut input = std::io::BufReader::with_capacity(
                1 << 16,
                Tallied {
                    inner: raw,
                    tally: tally.clone(),
                },
            );
            let head = input
                .fill_buf()
                .map_err(|e| whole(format!("cannot read trace: {e}")))?
                .to_vec();
            if head.is_empty() {
                return Err(whole("trace is empty: no requests".into()));
            }
            Source::Stream {
                reader: decompressing(Compression::of(&head), input, &whole)?,
                buf: Vec::new(),
                pending: false,
                at_start: true,
                bytes: 0,
                tally: Some(tally),
            }
        };
        let format = match options.format {
            Some(format) => format,
            None => {
                let first = source
                    .first_content_line(options.max_line_bytes)
                    .map_err(|e| match too_long(&e) {
                        Some(long) => TraceError {
                            line: long.blank_before + 1,
                            ..whole(long.message(options.max_line_bytes))
                        },
                        None => whole(format!("cannot decompress: {e}")),
                    })?;
                let format = crate::format::detect_format(first)
                    .ok_or_else(|| whole("trace is empty: no requests".into()))?;
                if format == TraceFormat::Chat && !trim_line(first).starts_with(b"{") {
                    return Err(TraceError {
                        line: 1,
                        ..whole(crate::format::UNKNOWN_FORMAT.into())
                    });
                }
                format
            }
        };
        Ok(Self::over(path, source, format, options))
    }

    /// A reader of `source` (the trace at `path`, in `format`), at its start.
    fn over(
        path: &Path,
        source: Source,
        format: TraceFormat,
        options: TraceOptions,
    ) -> TraceReader {
        TraceReader {
            source,
            line: 0,
            header_done: false,
            linker: Linker::new(path.to_owned(), format, options),
            skipped: BTreeMap::new(),
            interner: BlockInterner::default(),
            intern: true,
        }
    }

    /// The first 64 KiB of a regular file, if it can be read.
    fn head(path: &Path) -> Option<Vec<u8>> {
        use std::io::Read;
        let mut head = Vec::new();
        std::fs::File::open(path)
            .ok()?
            .take(1 << 16)
            .read_to_end(&mut head)
            .ok()?;
        Some(head)
    }

    /// A Weka corpus: lowered whole to `agentic_mooncake` text, then read as that.
    fn open_weka(path: &Path, options: TraceOptions) -> Result<TraceReader, TraceError> {
        let mut tally = Tally::default();
        let text = crate::format::weka::lower_corpus(path, &mut |bytes| {
            tally.bytes += bytes.len() as u64;
            tally.hash.update(bytes);
        })?;
        Ok(Self::over_text(
            path,
            text,
            tally,
            TraceFormat::Weka,
            options,
        ))
    }

    /// A reader over `text`, a trace in `format` made in memory (a measured run's own
    /// workload, say); `path` names it in errors and in the report.
    pub fn in_memory(
        path: &Path,
        format: TraceFormat,
        text: Vec<u8>,
        options: TraceOptions,
    ) -> TraceReader {
        let mut tally = Tally::default();
        tally.hash.update(&text);
        tally.bytes = text.len() as u64;
        Self::over_text(path, text, tally, format, options)
    }

    /// A reader over `text` held in memory, `tally` what the report says of its source.
    fn over_text(
        path: &Path,
        text: Vec<u8>,
        tally: Tally,
        format: TraceFormat,
        options: TraceOptions,
    ) -> TraceReader {
        let source = Source::Stream {
            reader: Box::new(std::io::Cursor::new(text)),
            buf: Vec::new(),
            pending: false,
            at_start: true,
            bytes: tally.bytes,
            tally: Some(std::sync::Arc::new(std::sync::Mutex::new(tally))),
        };
        Self::over(path, source, format, options)
    }

    /// A regular file: mapped, or decompressed as it is read when its first bytes say so.
    fn file_source(
        path: &Path,
        whole: &impl Fn(String) -> TraceError,
    ) -> Result<Source, TraceError> {
        let map = MappedFile::open(path).map_err(|e| whole(format!("cannot read trace: {e}")))?;
        if map.is_empty() {
            return Err(whole("trace is empty: no requests".into()));
        }
        Ok(match Compression::of(&map) {
            // A UTF-8 byte-order mark (Windows editors write one) is not part of line 1.
            None => {
                let offset = if map.starts_with(UTF8_BOM) {
                    UTF8_BOM.len()
                } else {
                    0
                };
                Source::mapped(map, offset)
            }
            Some(kind) => {
                let bytes = map.len() as u64;
                drop(map);
                let file = std::fs::File::open(path)
                    .map_err(|e| whole(format!("cannot read trace: {e}")))?;
                let file = std::io::BufReader::with_capacity(1 << 16, file);
                Source::Stream {
                    reader: decompressing(Some(kind), file, whole)?,
                    buf: Vec::new(),
                    pending: false,
                    at_start: true,
                    bytes,
                    tally: None,
                }
            }
        })
    }

    /// The trace file, as given.
    pub fn source_path(&self) -> &Path {
        &self.linker.path
    }

    /// The trace's format.
    pub fn format(&self) -> TraceFormat {
        self.linker.format
    }

    /// The unit of lengths and blocks in this trace.
    pub fn unit(&self) -> Unit {
        self.linker.format.unit()
    }

    /// The block size of this trace's hash chains, in [`TraceReader::unit`]s.
    pub fn block_size(&self) -> u32 {
        match self.linker.format {
            TraceFormat::Chat => self.linker.options.block_size,
            _ => self.linker.options.trace_block_size,
        }
    }

    /// Where the trace came from: path, format, size and a hash of its content as stored
    /// (for the report's `run` block). A mapped file is hashed as it is read, so only what
    /// was not read yet is read for it; a compressed one that can be opened again is read
    /// once more.
    pub fn source(&self) -> crate::source::TraceSource {
        let content_hash = match &self.source {
            Source::Mapped { .. } => self.source.mapped_hash().unwrap_or_default(),
            Source::Stream { tally: Some(t), .. } => {
                let t = t.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                format!("{:016x}", t.hash.digest())
            }
            Source::Stream { tally: None, .. } => MappedFile::open(&self.linker.path)
                .map(|map| crate::source::content_hash(&map))
                .unwrap_or_default(),
        };
        crate::source::TraceSource {
            path: self.linker.path.clone(),
            format: self.linker.format,
            bytes: self.len_bytes() as u64,
            content_hash,
        }
    }

    /// Bytes of the file, as stored (compressed, for a compressed trace).
    pub fn len_bytes(&self) -> usize {
        match &self.source {
            Source::Mapped { map, .. } => map.len(),
            Source::Stream { tally: Some(t), .. } => {
                t.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .bytes as usize
            }
            Source::Stream { bytes, .. } => *bytes as usize,
        }
    }

    /// Lines skipped so far, by reason.
    pub fn skipped(&self) -> &BTreeMap<&'static str, u64> {
        &self.skipped
    }

    /// The adapters the requests read so far named.
    pub fn adapters(&self) -> &crate::adapters::Adapters {
        &self.linker.adapters
    }

    /// From now on, reads what gives each request its place and time (its line, arrival,
    /// ids, session, parent), not its blocks: `blocks` and `block_ids` stay empty, and a
    /// Mooncake line's `hash_ids` are passed over, so a fault there (too few ids, a bad
    /// one) is not seen. For a pass over a trace's times ahead of reading it whole. Lines
    /// skipped with `skip_invalid` are the same only in a full read: then this reads as
    /// before. Either way the file is not hashed on the way ([`TraceReader::source`]
    /// hashes it whole when asked).
    pub fn times_only(&mut self) {
        self.linker.times_only = !self.linker.options.skip_invalid;
        self.source.unhashed();
    }

    /// A mapped file is hashed (for [`TraceReader::source`]) by whoever has time for it,
    /// with the job this gives, not on the way by the thread that reads: for a reading
    /// thread that is the slower of two. What the job has not hashed when the hash is
    /// asked is hashed then. `None`, and nothing changes, for a compressed or piped trace,
    /// or once reading has hashed part of the file (its first 8 MiB).
    pub fn hash_elsewhere(&mut self) -> Option<crate::source::HashJob> {
        self.source.hash_elsewhere(&self.linker.path)
    }

    /// Reads each request's chain without giving its blocks dense ids (`block_ids` stays
    /// empty), and without hashing the file on the way: for a pass over the trace that
    /// needs the chains alone.
    pub fn chains_only(&mut self) {
        self.intern = false;
        self.source.unhashed();
    }

    /// Reads the next request into `out`. `Ok(false)` at the end of the trace.
    pub fn next_into(&mut self, out: &mut TraceRequest) -> Result<bool, TraceError> {
        loop {
            let cap = self.linker.options.max_line_bytes;
            let line = self.source.next_line(cap).map_err(|e| match too_long(&e) {
                Some(long) => self.linker.error_at(
                    self.line + long.blank_before + 1,
                    None,
                    Fault::InvalidJson,
                    long.message(cap),
                ),
                None => self.linker.error_at(
                    self.line + 1,
                    None,
                    Fault::InvalidJson,
                    format!("cannot decompress: {e}"),
                ),
            })?;
            let Some((numbered, bytes)) = line else {
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
            self.line += numbered;
            if !self.header_done && self.linker.format.is_agentic() {
                let text = self.linker.utf8(self.line, bytes)?;
                let block = self.linker.parse_agentic_header(self.line, text)?;
                self.linker.options.trace_block_size = block;
                self.header_done = true;
                continue;
            }
            if self.linker.format.is_csv() && !self.header_done {
                let text = self.linker.utf8(self.line, bytes)?;
                self.linker.check_csv_header(self.line, text)?;
                self.header_done = true;
                continue;
            }
            out.adapter = 0;
            out.session_end = false;
            let parsed = self.linker.parse_line(self.line, bytes, out);
            match parsed {
                Ok(()) if self.linker.times_only => {
                    out.blocks.clear();
                    out.block_ids.clear();
                    return Ok(true);
                }
                Ok(()) if !self.intern => {
                    out.block_ids.clear();
                    return Ok(true);
                }
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
}

//! Where a trace's bytes come from: the file mapped (read front to back, its pages let go
//! behind the reader and its content hashed on the way), or a decompressor reading it; and
//! the line splitting both share.

use std::io::BufRead;
use std::path::PathBuf;

use routerlab_os::MappedFile;

use crate::error::TraceError;
use crate::trace_format::TraceFormat;

/// Where a trace's bytes come from: the file mapped, or a decompressor reading it.
pub(crate) enum Source {
    Mapped {
        map: MappedFile,
        offset: usize,
        /// The file's bytes before this are let go from memory (hashed first, when `hash`
        /// is on the way).
        behind: usize,
        /// How the file's content hash is worked out.
        hash: MappedHash,
    },
    /// A gzip or zstd file, decompressed as it is read; one line at a time in `buf`.
    Stream {
        reader: Box<dyn BufRead + Send>,
        buf: Vec<u8>,
        /// `buf` holds a line read ahead (to detect the format) and not yet handed out.
        pending: bool,
        /// No line has been read yet (a byte-order mark may start the first).
        at_start: bool,
        /// Bytes of the file on disk.
        bytes: u64,
        /// For a pipe, FIFO or stdin, which cannot be read twice: the bytes read and
        /// their running hash, for the report's `run` block.
        tally: Option<std::sync::Arc<std::sync::Mutex<Tally>>>,
    },
}

/// How a mapped file's content hash (for the report) is worked out.
pub(crate) enum MappedHash {
    /// On the way, by the reader: the running hash of the bytes before `behind`.
    OnTheWay(Box<xxhash_rust::xxh3::Xxh3Default>),
    /// By whoever has time (see [`Source::hash_elsewhere`]).
    Elsewhere(HashJob),
    /// Only when asked, the file whole: for a pass whose reader is never asked for it
    /// (see [`Source::unhashed`]).
    WhenAsked,
}

/// Bytes read between two releases of a mapped file's pages.
const RELEASE_EVERY: usize = 8 << 20;

impl Source {
    /// A mapped file, read from `offset`.
    pub(crate) fn mapped(map: MappedFile, offset: usize) -> Source {
        Source::Mapped {
            map,
            offset,
            behind: 0,
            hash: MappedHash::OnTheWay(Box::default()),
        }
    }

    /// A mapped file that would be hashed on the way (by the thread that reads it) is
    /// hashed instead by whoever has time, with the job this gives (see [`HashJob`]);
    /// `None`, and nothing changes, for any other source or once part of the file was
    /// hashed on the way.
    pub(crate) fn hash_elsewhere(&mut self, path: &std::path::Path) -> Option<HashJob> {
        let Source::Mapped {
            map,
            behind: 0,
            hash: hash @ MappedHash::OnTheWay(_),
            ..
        } = self
        else {
            return None;
        };
        let job = HashJob::of(path, map.len());
        *hash = MappedHash::Elsewhere(job.clone());
        Some(job)
    }

    /// Not hashed on the way: for a pass over the trace beside the one that reports it
    /// (asked anyway, a mapped file is then hashed whole).
    pub(crate) fn unhashed(&mut self) {
        if let Source::Mapped { hash, .. } = self {
            *hash = MappedHash::WhenAsked;
        }
    }

    /// The xxh3-64 of a mapped file's bytes, as `content_hash` writes it:
    /// what was hashed on the way and then the rest, or the job's hash, or the file
    /// hashed whole (read again only where not read yet).
    pub(crate) fn mapped_hash(&self) -> Option<String> {
        let Source::Mapped {
            map, behind, hash, ..
        } = self
        else {
            return None;
        };
        let whole = || content_hash(&map[..]);
        Some(match hash {
            MappedHash::OnTheWay(hash) => {
                let mut hash = (**hash).clone();
                hash.update(&map[*behind..]);
                format!("{:016x}", hash.digest())
            }
            MappedHash::Elsewhere(job) => job.finish().unwrap_or_else(whole),
            MappedHash::WhenAsked => whole(),
        })
    }
}

/// The hashing of a mapped trace (its content hash, for the report), done by whoever has
/// time for it: a piece at a time with [`HashJob::step`], from a map of the file of its
/// own, while the reader reads. What is left is done when the reader is asked for the hash.
/// A replay's two threads take it on whenever one waits for the other.
#[derive(Clone)]
pub struct HashJob(std::sync::Arc<std::sync::Mutex<Hashing>>);

struct Hashing {
    /// The file's own map; `None` once hashed whole, or when it could not be mapped as the
    /// reader read it (then the reader hashes its own map).
    map: Option<MappedFile>,
    /// Bytes hashed so far.
    at: usize,
    hash: xxhash_rust::xxh3::Xxh3Default,
    /// The hash, as `content_hash` writes it, once done.
    done: Option<String>,
}

/// Bytes hashed in one [`HashJob::step`]: a few tens of microseconds.
const PIECE: usize = 256 << 10;

impl HashJob {
    /// The hashing of the file at `path`, which the reader mapped at `len` bytes: a file
    /// put in its place since, of another size, is not hashed for it.
    fn of(path: &std::path::Path, len: usize) -> HashJob {
        let map = MappedFile::open(path).ok().filter(|m| m.len() == len);
        HashJob(std::sync::Arc::new(std::sync::Mutex::new(Hashing {
            map,
            at: 0,
            hash: xxhash_rust::xxh3::Xxh3Default::new(),
            done: None,
        })))
    }

    fn hashing(&self) -> std::sync::MutexGuard<'_, Hashing> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hashes one more piece of the file; `false` when there was none left, or when
    /// another thread is hashing it now (then waiting is as good as hashing).
    pub fn step(&self) -> bool {
        match self.0.try_lock() {
            Ok(mut hashing) => hashing.step(),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner().step(),
            Err(std::sync::TryLockError::WouldBlock) => false,
        }
    }

    /// The hash, the rest hashed first; `None` when the file could not be mapped for it.
    fn finish(&self) -> Option<String> {
        let mut hashing = self.hashing();
        while hashing.step() {}
        hashing.done.clone()
    }
}

impl Hashing {
    fn step(&mut self) -> bool {
        let Some(map) = &mut self.map else {
            return false;
        };
        let end = map.len().min(self.at + PIECE);
        self.hash.update(&map[self.at..end]);
        self.at = end;
        if end == map.len() {
            self.done = Some(format!("{:016x}", self.hash.digest()));
            self.map = None;
        } else if end % RELEASE_EVERY == 0 {
            map.release_before(end);
        }
        true
    }
}

/// What has been read from a source that cannot be read again.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) bytes: u64,
    pub(crate) hash: xxhash_rust::xxh3::Xxh3Default,
}

/// A reader that counts and hashes what passes through it.
pub(crate) struct Tallied<R> {
    pub(crate) inner: R,
    pub(crate) tally: std::sync::Arc<std::sync::Mutex<Tally>>,
}

impl<R: std::io::Read> std::io::Read for Tallied<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut tally = self
            .tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tally.bytes += n as u64;
        tally.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// The UTF-8 byte-order mark.
pub(crate) const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// How a file is compressed, by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    Gzip,
    Zstd,
}

impl Compression {
    pub(crate) fn of(head: &[u8]) -> Option<Compression> {
        if head.starts_with(&[0x1f, 0x8b]) {
            Some(Compression::Gzip)
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Some(Compression::Zstd)
        } else {
            None
        }
    }
}

/// `input`, decompressed when `kind` says it is compressed.
pub(crate) fn decompressing(
    kind: Option<Compression>,
    input: impl BufRead + Send + 'static,
    whole: &impl Fn(String) -> TraceError,
) -> Result<Box<dyn BufRead + Send>, TraceError> {
    Ok(match kind {
        None => Box::new(input),
        Some(Compression::Gzip) => Box::new(std::io::BufReader::with_capacity(
            1 << 16,
            flate2::bufread::MultiGzDecoder::new(input),
        )),
        Some(Compression::Zstd) => Box::new(std::io::BufReader::with_capacity(
            1 << 16,
            crate::zstd::Frames::new(input)
                .map_err(|e| whole(format!("not a valid zstd file: {e}")))?,
        )),
    })
}

impl Source {
    /// The next non-blank line without its line ending, and how many lines (blank ones
    /// included) were consumed to reach it.
    pub(crate) fn next_line(&mut self, cap: usize) -> std::io::Result<Option<(usize, &[u8])>> {
        let mut consumed = 0;
        match self {
            Source::Mapped {
                map,
                offset,
                behind,
                hash,
            } => {
                // Every few MiB read: hash what was read and let its pages go.
                if *offset - *behind >= RELEASE_EVERY {
                    if let MappedHash::OnTheWay(hash) = hash {
                        hash.update(&map[*behind..*offset]);
                    }
                    *behind = *offset;
                    map.release_before(*behind);
                }
                while *offset < map.len() {
                    let rest = &map[*offset..];
                    let end = memchr_newline(rest).unwrap_or(rest.len());
                    if trim_line(&rest[..end]).len() > cap {
                        return Err(LineTooLong::error(consumed));
                    }
                    let start = *offset;
                    *offset += end + 1;
                    consumed += 1;
                    let line = trim_line(&map[start..start + end]);
                    if !is_blank(line) {
                        let len = line.len();
                        return Ok(Some((consumed, &map[start..start + len])));
                    }
                }
                // At the end, the rest is hashed here, on the thread that reads (often not
                // the one that asks for the hash).
                if let MappedHash::OnTheWay(hash) = hash
                    && *behind < map.len()
                {
                    hash.update(&map[*behind..]);
                    *behind = map.len();
                }
                Ok(None)
            }
            Source::Stream {
                reader,
                buf,
                pending,
                at_start,
                ..
            } => loop {
                if !std::mem::take(pending) {
                    buf.clear();
                    if read_line_capped(reader, buf, cap, consumed)? == 0 {
                        return Ok(None);
                    }
                    if std::mem::take(at_start) && buf.starts_with(UTF8_BOM) {
                        buf.drain(..UTF8_BOM.len());
                    }
                }
                consumed += 1;
                let len = trim_line(buf).len();
                if !is_blank(&buf[..len]) {
                    return Ok(Some((consumed, &buf[..len])));
                }
            },
        }
    }

    /// The first non-blank line, without consuming it (for format detection).
    pub(crate) fn first_content_line(&mut self, cap: usize) -> std::io::Result<&[u8]> {
        match self {
            Source::Mapped { map, offset, .. } => Ok(map[*offset..]
                .split(|b| *b == b'\n')
                .find(|line| !is_blank(line))
                .unwrap_or(&[])),
            Source::Stream {
                reader,
                buf,
                pending,
                at_start,
                ..
            } => {
                // Blank leading lines are read past here and not counted; they carry nothing.
                let mut blanks = 0;
                loop {
                    buf.clear();
                    if read_line_capped(reader, buf, cap, blanks)? == 0 {
                        return Ok(&[]);
                    }
                    blanks += 1;
                    if std::mem::take(at_start) && buf.starts_with(UTF8_BOM) {
                        buf.drain(..UTF8_BOM.len());
                    }
                    if !is_blank(buf) {
                        *pending = true;
                        return Ok(buf);
                    }
                }
            }
        }
    }
}

/// A line past the cap ([`TraceOptions::max_line_bytes`]), with the blank lines read past
/// before it in the same call (for its line number).
#[derive(Debug)]
pub(crate) struct LineTooLong {
    pub(crate) blank_before: usize,
}

impl LineTooLong {
    fn error(blank_before: usize) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            LineTooLong { blank_before },
        )
    }

    pub(crate) fn message(&self, cap: usize) -> String {
        format!("the line is longer than {cap} bytes (--max-line-bytes raises the cap)")
    }
}

impl std::fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a line longer than the cap")
    }
}

impl std::error::Error for LineTooLong {}

/// The [`LineTooLong`] inside `e`, if that is what it is.
pub(crate) fn too_long(e: &std::io::Error) -> Option<&LineTooLong> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<LineTooLong>())
}

/// `read_until(b'\n')` that stops with [`LineTooLong`] once the line (its ending aside)
/// passes `cap` bytes, holding at most `cap` plus one buffer's worth in `buf`.
pub(crate) fn read_line_capped(
    reader: &mut dyn BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
    blank_before: usize,
) -> std::io::Result<usize> {
    let start = buf.len();
    loop {
        let available = match reader.fill_buf() {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(buf.len() - start);
        }
        let (used, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        buf.extend_from_slice(&available[..used]);
        reader.consume(used);
        // `\r\n` is two bytes of ending, not content.
        if trim_line(&buf[start..]).len() > cap && (done || buf.len() - start > cap + 1) {
            return Err(LineTooLong::error(blank_before));
        }
        if done {
            return Ok(buf.len() - start);
        }
    }
}

/// A line without its `\n` or `\r\n`.
pub(crate) fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

pub(crate) fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

/// Where a trace came from, for the report's `run` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSource {
    /// The trace file as given.
    pub path: PathBuf,
    /// Its format.
    pub format: TraceFormat,
    /// Its size in bytes.
    pub bytes: u64,
    /// xxh3-64 of its bytes, hex: two reports of the same content agree on it.
    pub content_hash: String,
}

/// xxh3-64 of `bytes` as 16 hex digits: how a trace's content is named in reports.
pub(crate) fn content_hash(bytes: &[u8]) -> String {
    format!("{:016x}", routerlab_core::hash::hash64(bytes, 0))
}

#[cfg(test)]
mod tests {
    use crate::{TraceOptions, TraceReader, TraceRequest};

    #[test]
    fn a_mapped_trace_read_past_its_released_pages_hashes_as_a_whole() {
        // About 20 MiB: the pages behind the reader are let go twice on the way.
        let path =
            std::env::temp_dir().join(format!("routerlab-release-{}.jsonl", std::process::id()));
        let line = |i: usize| format!("{{\"prompt\": \"{i} {}\"}}\n", "x".repeat(1000));
        let text: String = (0..20_000).map(line).collect();
        std::fs::write(&path, &text).unwrap();
        let expected = format!("{:016x}", routerlab_core::hash::hash64(text.as_bytes(), 0));
        let mut reader = TraceReader::open(&path, TraceOptions::default()).unwrap();
        let mut request = TraceRequest::default();
        let mut seen = 0;
        while reader.next_into(&mut request).unwrap() {
            assert!(request.prompt.starts_with(format!("{seen} ").as_bytes()));
            seen += 1;
        }
        assert_eq!(seen, 20_000);
        assert_eq!(reader.source().content_hash, expected);
        // Hashed before the end too: what was not read yet is read for it.
        let mut early = TraceReader::open(&path, TraceOptions::default()).unwrap();
        for _ in 0..9_000 {
            assert!(early.next_into(&mut request).unwrap());
        }
        assert_eq!(early.source().content_hash, expected);
        assert!(
            early.next_into(&mut request).unwrap(),
            "reading goes on after the hash"
        );
        assert!(request.prompt.starts_with(b"9000 "));
        // A pass for the times alone does not hash on the way, and asked, hashes it whole.
        let mut times = TraceReader::open(&path, TraceOptions::default()).unwrap();
        times.times_only();
        while times.next_into(&mut request).unwrap() {}
        assert_eq!(times.source().content_hash, expected);
        // Hashed elsewhere, in part or not at all before the hash is asked: the same hash.
        for steps in [0, 3, usize::MAX] {
            let mut elsewhere = TraceReader::open(&path, TraceOptions::default()).unwrap();
            let job = elsewhere.hash_elsewhere().expect("a mapped file");
            let stepped = (0..steps).take_while(|_| job.step()).count();
            assert_eq!(stepped, steps.min(text.len().div_ceil(super::PIECE)));
            while elsewhere.next_into(&mut request).unwrap() {}
            assert_eq!(elsewhere.source().content_hash, expected);
            assert!(!job.step(), "nothing left");
        }
        // Once part of the file was hashed on the way, it stays so.
        let mut late = TraceReader::open(&path, TraceOptions::default()).unwrap();
        for _ in 0..9_000 {
            assert!(late.next_into(&mut request).unwrap());
        }
        assert!(late.hash_elsewhere().is_none());
        // A file put in its place before the job maps it (another size): the hash is still
        // of the file that was read.
        let mut moved = TraceReader::open(&path, TraceOptions::default()).unwrap();
        let other = path.with_extension("other");
        std::fs::write(&other, "{\"prompt\": \"other\"}\n").unwrap();
        std::fs::rename(&other, &path).unwrap();
        let job = moved.hash_elsewhere().expect("a mapped file");
        assert!(!job.step(), "nothing to hash");
        assert!(moved.next_into(&mut request).unwrap());
        assert!(request.prompt.starts_with(b"0 "));
        assert_eq!(moved.source().content_hash, expected);
        std::fs::remove_file(&path).unwrap();
    }
}
